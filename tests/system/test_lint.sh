#!/usr/bin/env bash
# The static checks scripts/check.sh runs before the builds, each against the tree as it
# is (it must pass) and against a copy with one fault planted (it must fail, naming it):
#   scripts/lint/check-layers.py     an upward include; a file outside the layer folders;
#                                    a module in a folder other than layers.txt's layer; an
#                                    #ifdef PC_HAVE_CUDA outside the CUDA boundary; an
#                                    include that resolves nowhere; a private *_impl.h
#                                    included from another folder; a malformed line of
#                                    layers.txt; a file layers.txt names that is not there
#   scripts/lint/check-calls.py      an upward call across layers; a call against the
#                                    worker's order; the same call after layers.txt's
#                                    worker order changes; a call cycle within a layer
#   scripts/lint/check-mpi-calls.sh  an MPI call without PC_MPI_CHECK; MPI in a file
#                                    layers.txt does not list; a listed file without MPI
#   scripts/lint/check-length.py     a function over the limit; the same with its "One
#                                    piece:" reason (then listed as an exception)
#   scripts/lint/check-figures.py    a figure of doc/results/ quoted in README.md; a
#                                    figure in two documents; a coincidence listed
#                                    without its reason; a stale coincidence
#   scripts/lint/check-pipes.sh      a pipe into head, into grep -q (a comment and a
#                                    reader of a file pass)
#   scripts/lint/check-commits.sh    (a warning, status 0) a subject over 72 characters;
#                                    no blank line after the subject; in a scratch repo
# Needs only python3 and perl; the copy holds src/, include/, cuda/, apps/, python/,
# doc/design.md and scripts/lint/.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
src=$PC_SRCDIR
py=/usr/bin/python3
[ -x "$py" ] || pc_skip "no /usr/bin/python3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fresh: a clean copy of what the checks read, in $tmp/t.
fresh() {
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t/doc" "$tmp/t/scripts"
    cp -r "$src/src" "$src/include" "$src/cuda" "$src/apps" "$src/python" "$tmp/t/"
    cp "$src/doc/design.md" "$tmp/t/doc/"
    cp -r "$src/scripts/lint" "$tmp/t/scripts/"
}

# check NAME: run the check NAME on the copy; its output in $tmp/out, its status returned.
check() {
    case $1 in
    layers) "$py" "$tmp/t/scripts/lint/check-layers.py" "$tmp/t" ;;
    calls) "$py" "$tmp/t/scripts/lint/check-calls.py" "$tmp/t" ;;
    mpi) bash "$tmp/t/scripts/lint/check-mpi-calls.sh" "$tmp/t" ;;
    length) "$py" "$tmp/t/scripts/lint/check-length.py" "$tmp/t" ;;
    esac >"$tmp/out" 2>&1
}

# The tree as it is passes every check.
fresh
for c in layers calls mpi length; do
    if check $c; then
        ok "$c: the tree passes: $(head -c 160 "$tmp/out")"
    else
        bad "$c: the tree fails"; cat "$tmp/out"
    fi
done

# planted NAME CHECK WANT: after the caller planted a fault in the copy, CHECK must fail
# (status 1) with a line matching WANT (grep -E).
planted() {
    check "$2"
    local rc=$?
    if [ $rc = 1 ] && grep -qE "$3" "$tmp/out"; then
        ok "$1: $2 fails: $(grep -E "$3" "$tmp/out" | sed -n 1p | cut -c1-200)"
    else
        bad "$1: $2 status $rc, no line matching '$3'"; cat "$tmp/out"
    fi
    fresh
}

# check-layers
echo '#include "pipecompress/pc_runtime.h"' >>"$tmp/t/src/base/pc_time.c"
planted "an upward include" layers 'src/base/pc_time.c \(layer 1\) includes include/pipecompress/pc_runtime.h \(layer 5\): upwards'
cp "$tmp/t/src/base/pc_time.c" "$tmp/t/src/pc_stray.c"
planted "a file at src/'s top" layers "src/pc_stray.c: not in a layer's folder of scripts/lint/layers.txt"
touch "$tmp/t/cuda/pc_stray.cu"
planted "a kernel file layers.txt does not place" layers "cuda/pc_stray.cu: in no layer of scripts/lint/layers.txt"
mv "$tmp/t/src/sync/pc_event.c" "$tmp/t/src/codec/pc_event.c"
planted "a module moved to another layer's folder" layers 'src/codec/pc_event.c: scripts/lint/layers.txt names pc_event in layer 2, its folder is layer 3'
echo '#include "runtime/no_such.h"' >>"$tmp/t/src/runtime/pc_plan.c"
planted "an include that resolves nowhere" layers 'src/runtime/pc_plan.c:[0-9]+: #include "runtime/no_such.h" resolves to no file of the tree'
echo '#include "codec/codec_impl.h"' >>"$tmp/t/src/runtime/pc_plan.c"
planted "a private header from another folder" layers 'src/runtime/pc_plan.c:[0-9]+: #include "codec/codec_impl.h": src/codec/codec_impl.h is private to src/codec/'
echo 'modul pc_stray' >>"$tmp/t/scripts/lint/layers.txt"
planted "a malformed line of layers.txt" layers '^scripts/lint/layers.txt:[0-9]+: unknown entry modul .*'"'modul pc_stray'"
sed -i 's|^module pc_gpu |module pc_gpu cuda/pc_gone.cu |' "$tmp/t/scripts/lint/layers.txt"
planted "a file layers.txt names that is not there" layers 'scripts/lint/layers.txt:[0-9]+: names cuda/pc_gone.cu, which is not in the tree'

printf '\n#ifdef PC_HAVE_CUDA\n#endif\n' >>"$tmp/t/src/gpu/pc_gpu.c"
planted "an #ifdef PC_HAVE_CUDA in a host file" layers 'src/gpu/pc_gpu.c: PC_HAVE_CUDA outside the CUDA boundary'

# check-calls
printf '\nvoid pc_log__mut(void);\nvoid pc_log__mut(void)\n{\n    (void)pc_runtime_role(NULL);\n}\n' >>"$tmp/t/src/base/pc_log.c"
planted "an upward call" calls 'src/base/pc_log.c \(layer 1\) calls src/runtime/pc_runtime.c \(layer 5\): upwards: pc_runtime_role'
printf '\nint pc_rt__w_mut(pc_worker_t *w);\nint pc_rt__w_mut(pc_worker_t *w)\n{\n    return pc_worker_param_wait(w, 0);\n}\n' >>"$tmp/t/src/runtime/worker_device.c"
planted "a call against the worker's order" calls "src/runtime/worker_device.c calls src/runtime/pc_worker.c, above it in the worker's order: pc_worker_param_wait"
sed -i 's|^worker src/runtime/worker_start.c src/runtime/pc_worker.c|worker src/runtime/worker_start.c|; s|^worker src/runtime/worker_metrics.c|worker src/runtime/pc_worker.c src/runtime/worker_metrics.c|' "$tmp/t/scripts/lint/layers.txt"
planted "pc_worker.c moved down layers.txt's worker order" calls "src/runtime/pc_worker.c calls src/runtime/worker_lowrank.c, above it in the worker's order"
printf '\nvoid pc_plan__mut(void);\nvoid pc_plan__mut(void)\n{\n    pc_timeline_destroy(NULL);\n}\n' >>"$tmp/t/src/runtime/pc_plan.c"
printf '\nvoid pc_timeline__mut(void);\nvoid pc_timeline__mut(void)\n{\n    pc_plan_destroy(NULL);\n}\n' >>"$tmp/t/src/runtime/pc_timeline.c"
planted "a call cycle" calls 'call cycle: src/runtime/pc_(plan|timeline).c -> src/runtime/pc_(timeline|plan).c -> '

# check-mpi-calls
printf '\nvoid pc_comm__mut(void);\nvoid pc_comm__mut(void)\n{\n    MPI_Barrier(MPI_COMM_WORLD);\n}\n' >>"$tmp/t/src/runtime/pc_comm.c"
planted "an unchecked MPI call" mpi 'src/runtime/pc_comm.c:[0-9]+: MPI_Barrier not checked'
printf '\n#include <mpi.h>\nvoid pc_plan__mut(void);\nvoid pc_plan__mut(void)\n{\n    PC_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), NULL, 0);\n}\n' >>"$tmp/t/src/runtime/pc_plan.c"
planted "MPI where layers.txt does not say" mpi 'src/runtime/pc_plan.c: calls MPI but scripts/lint/layers.txt does not list it'
echo 'mpi src/runtime/pc_plan.c' >>"$tmp/t/scripts/lint/layers.txt"
planted "a file on an mpi line without MPI" mpi 'src/runtime/pc_plan.c: listed on an mpi line of scripts/lint/layers.txt but calls no MPI'

# check-length: a 120-line function, then the same with its reason.
long_fn() {
    printf '\n%s\nint pc_plan__long(void)\n{\n    int x = 0;\n' "$1"
    for _ in $(seq 115); do printf '    x++;\n'; done
    printf '    return x;\n}\n'
}
long_fn "/* A long one. */" >>"$tmp/t/src/runtime/pc_plan.c"
planted "a 120-line function" length 'src/runtime/pc_plan.c:[0-9]+ pc_plan__long: 120 lines \(at most 100'
long_fn "/* One piece: a test of the exception. */" >>"$tmp/t/src/runtime/pc_plan.c"
if check length && grep -qE 'exceptions: .*src/runtime/pc_plan.c:[0-9]+ pc_plan__long \(120 lines\)' "$tmp/out"; then
    ok "a 120-line function with its 'One piece:' reason: passes, listed as an exception"
else
    bad "a documented exception"; cat "$tmp/out"
fi

# check-figures.py (one home per figure): the tree passes; a figure of a results page
# quoted in a copy's README.md fails, naming the figure and its page.
mkdir -p "$tmp/fig/doc/results/run" &&
    cp "$src/README.md" "$tmp/fig/" && cp "$src/doc/benchmarks.md" "$tmp/fig/doc/" &&
    printf '# run\n\n| x | 91.23 %% | 1.28x |\n' >"$tmp/fig/doc/results/run/README.md"
if out=$("$py" "$src/scripts/lint/check-figures.py" "$src" 2>&1); then
    ok "figures: the tree passes: $out"
else
    bad "figures: the tree fails"; echo "$out"
fi
echo 'ResNet-18 reached 91.23 % here.' >>"$tmp/fig/README.md"
out=$("$py" "$src/scripts/lint/check-figures.py" "$tmp/fig" 2>&1)
if [ $? = 1 ] && grep -q '^README.md:[0-9]*: 91.23 % is a figure of doc/results/run/README.md' <<<"$out"; then
    ok "figures: a quoted figure fails: $out"
else
    bad "figures: a quoted figure was not caught"; echo "$out"
fi
cp "$src/README.md" "$tmp/fig/" && echo 'The same run measured 91.23 % again.' >>"$tmp/fig/doc/benchmarks.md"
out=$("$py" "$src/scripts/lint/check-figures.py" "$tmp/fig" 2>&1)
if [ $? = 1 ] && grep -q '^doc/results/run/README.md:3: 91.23 % is also stated in doc/benchmarks.md:[0-9]*' <<<"$out" &&
    [ "$(wc -l <<<"$out")" = 1 ]; then
    ok "figures: a figure in two documents fails: $out"
else
    bad "figures: a figure in two documents was not caught"; echo "$out"
fi
# A coincidence (figures-coincident.txt) passes only with its reason after " -- ".
mkdir -p "$tmp/fig/scripts/lint" && c="$tmp/fig/scripts/lint/figures-coincident.txt"
echo '91.23% doc/benchmarks.md doc/results/run/README.md' >"$c"
out=$("$py" "$src/scripts/lint/check-figures.py" "$tmp/fig" 2>&1)
if [ $? = 1 ] && grep -q '^scripts/lint/figures-coincident.txt:1: .*needs the figure' <<<"$out"; then
    ok "figures: a coincidence without its reason fails: $out"
else
    bad "figures: a coincidence without its reason was not caught"; echo "$out"
fi
echo '91.23% doc/benchmarks.md doc/results/run/README.md -- two runs, same digits' >"$c"
out=$("$py" "$src/scripts/lint/check-figures.py" "$tmp/fig" 2>&1)
if [ $? = 0 ] && grep -q 'the 1 coincidences of figures-coincident.txt' <<<"$out"; then
    ok "figures: a coincidence with its reason passes: $out"
else
    bad "figures: a coincidence with its reason failed"; echo "$out"
fi
echo '1.28x doc/benchmarks.md doc/results/run/README.md -- no longer in two' >>"$c"
out=$("$py" "$src/scripts/lint/check-figures.py" "$tmp/fig" 2>&1)
if [ $? = 1 ] && grep -q '^scripts/lint/figures-coincident.txt: 1.28x is now stated in doc/results/run/README.md only' <<<"$out"; then
    ok "figures: a stale coincidence fails: $out"
else
    bad "figures: a stale entry of figures-coincident.txt was not caught"; echo "$out"
fi

# check-pipes.sh: the tree passes; a copy with `| head -n 3` planted in a test, a pipe
# continued onto `grep -m1` (after a backslash and after a trailing pipe) and `| grep -q`
# in .ci/run fails, naming the four lines; `|| grep -q PATTERN FILE` (continued too) and a
# comment pass; an unknown flag is refused (status 2).
mkdir -p "$tmp/p/.ci"
cp -r "$src/scripts" "$src/tests" "$tmp/p/"
printf '#!/usr/bin/env bash\nset -euo pipefail\nexec bash scripts/check.sh\n' >"$tmp/p/.ci/run"
if out=$(bash "$src/scripts/lint/check-pipes.sh" "$tmp/p" 2>&1) &&
    grep -q '^check-pipes: [0-9]* shell scripts, no pipeline' <<<"$out"; then
    ok "pipes: the tree passes: $out"
else
    bad "pipes: the tree fails"; echo "$out"
fi
# The planted lines are built from $h and $q so that this file does not hold them.
h=head q='grep -q'
{
    echo "# a comment: ls | $h -n 1"
    echo 'true || grep -q x /dev/null'
    echo "n=\$(ls | $h -n 3)"
    echo 'true ||'
    echo '    grep -q x /dev/null'
    printf 'ls | \\\n    grep -m1 x\n'
    printf 'ls |\n    grep -m1 y\n'
} >>"$tmp/p/tests/mpi/test_train.sh"
echo "ps -e | $q mpirun && echo running" >>"$tmp/p/.ci/run"
out=$(bash "$src/scripts/lint/check-pipes.sh" "$tmp/p" 2>&1)
rc=$?
if [ $rc = 1 ] && [ "$(grep -c '^tests/mpi/test_train.sh:\|^\.ci/run:' <<<"$out")" = 4 ] &&
    grep -qF ":n=\$(ls | $h -n 3)" <<<"$out" && grep -qE ':ls \| +grep -m1 x$' <<<"$out" &&
    grep -qE ':ls \| +grep -m1 y$' <<<"$out" &&
    grep -qF ".ci/run:4:ps -e | $q mpirun" <<<"$out" && grep -q 'SIGPIPE (status 141)' <<<"$out"; then
    ok "pipes: a pipe into head, grep -q and (continued) grep -m1 fail, the comment and the file readers pass"
else
    bad "pipes: planted pipelines: status $rc"; echo "$out"
fi
out=$(bash "$src/scripts/lint/check-pipes.sh" "$tmp/none" 2>&1)
rc=$?
if [ $rc = 1 ] && grep -q "no such folder" <<<"$out"; then
    ok "pipes: a wrong top refused: $out"
else
    bad "pipes: a wrong top: status $rc: $out"
fi
out=$(bash "$src/scripts/lint/check-pipes.sh" --top "$tmp/p" 2>&1)
rc=$?
if [ $rc = 2 ] && grep -q "unknown flag '--top'" <<<"$out"; then
    ok "pipes: an unknown flag refused: $out"
else
    bad "pipes: an unknown flag: status $rc: $out"
fi

# check-commits.sh, in a scratch repository: quiet on a good message; a warning (status 0)
# on a subject over 72 characters and on a subject run into its body; by default only
# @{upstream}..HEAD; outside a checkout it says so.
if command -v git >/dev/null 2>&1; then
    cc="$src/scripts/lint/check-commits.sh"
    export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.org GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.org
    commit() { printf '%b' "$2" >"$tmp/msg" && git -C "$1" commit -q --allow-empty --cleanup=verbatim -F "$tmp/msg"; }
    git init -q "$tmp/g" && commit "$tmp/g" 'lint: a good subject\n\nThe body, with the why.\n'
    base=$(git -C "$tmp/g" rev-parse HEAD)
    out=$(bash "$cc" "$tmp/g" 2>&1)
    if [ $? = 0 ] && ! grep -q '^warning:' <<<"$out" && grep -q '^check-commits: 1 commit(s)' <<<"$out"; then
        ok "check-commits: a good message, no warning: $out"
    else
        bad "check-commits on a good message"; echo "$out"
    fi
    commit "$tmp/g" "lint: $(printf 'x%.0s' $(seq 74))\n\nA subject of 80 characters.\n"
    commit "$tmp/g" 'lint: a subject run into its body\nthe body at once\n'
    out=$(PC_COMMIT_BASE=$base bash "$cc" "$tmp/g" 2>&1)
    if [ $? = 0 ] && grep -q '^warning: .*: subject of 80 characters (at most 72)' <<<"$out" &&
        grep -q '^warning: .*: no blank line after the subject' <<<"$out" &&
        [ "$(grep -c '^warning:' <<<"$out")" = 2 ]; then
        ok "check-commits: a long subject and a missing blank line warned, status 0"
    else
        bad "check-commits on a long subject and a missing blank line"; echo "$out"
    fi
    git clone -q "$tmp/g" "$tmp/c" && commit "$tmp/c" "lint: $(printf 'y%.0s' $(seq 70))\n\nbody\n"
    out=$(bash "$cc" "$tmp/c" 2>&1)
    if [ $? = 0 ] && grep -q '^check-commits: 1 commit(s) (@{upstream}..HEAD)' <<<"$out" &&
        grep -q '^warning: .*: subject of 76 characters' <<<"$out"; then
        ok "check-commits: only @{upstream}..HEAD by default"
    else
        bad "check-commits with an upstream"; echo "$out"
    fi
    mkdir "$tmp/plain"
    out=$(GIT_CEILING_DIRECTORIES=$tmp bash "$cc" "$tmp/plain" 2>&1)
    [ $? = 0 ] && grep -q 'not a git checkout' <<<"$out" && ok "check-commits outside a checkout: $out" ||
        { bad "check-commits outside a checkout"; echo "$out"; }
else
    echo "no git: check-commits.sh not tried"
fi

pc_done
