#!/usr/bin/env bash
# Every command the documentation shows, run in a short form, read from the docs
# themselves so that a doc cannot drift from the code:
#   README.md, doc/building.md, doc/operations.md, doc/api.md, doc/python.md: every line of
#   every ```sh block;
#   doc/*.1: every line of the .nf block under .SH EXAMPLES.
# The short form of a command (and nothing else is changed):
#   - a trailing "# comment" and a leading "cd /path/to/pipecompress && " are dropped (the
#     commands run from the source tree, through a scratch directory that links build/, traces/,
#     scripts/, apps/ and doc/ to the tree's, with a results/ of its own);
#   - a training run (pc-train, pc_example, the demo, a batch script) gets "--iters 20"
#     unless it names --iters or --eval-model; the PyTorch example also gets
#     "--test-samples 1000" unless it names it (the whole test set's evaluation cost more
#     than the 20 iterations: 31 of a 40-second run of the cnn, loaded machine);
#   - mpirun runs as a user of these docs would have it set up: installed programs (the
#     build tree's apps/ on PATH) and, on this small machine, Open MPI's variables for
#     root and oversubscription (doc/operations.md says to set them);
#   - sbatch (--sbatch, called by tests/system/test_slurm.sh with its one-node Slurm running):
#     with --wait and --overcommit, the job's nodes folded onto the one node
#     (--nodes=N --ntasks-per-node=K becomes --nodes=1 --ntasks-per-node=N*K, one CPU each);
#   - "scripts/check.sh" is the run that calls this test: not run again;
#   - building by hand (doc/building.md's autoreconf line) is deferred when scripts/check.sh
#     says (PC_DOCS_BUILT_BY_CHECK=1) that its own build stage just did exactly that on a
#     clean checkout (CI's case); otherwise it runs in a copy of the tree, without
#     its final "make check" (the suite this test belongs to), configured
#     --with-cuda-arch=90 (where nvcc is installed: the same kernels for one architecture,
#     one nvcc pass where the default list takes five; build/ compiles the whole list);
#   - doc/api.md's build against the installed library (mpicc ... -o pc_example, then
#     ./pc_example): tests/system/test_install.sh runs those lines as written, on a staged install;
#   - a demo run writes its results to a scratch directory (PC_RESULTS), not results/.
# Deferred commands are listed as such, and counted.
# A documented command that none of these rules knows fails the test: add a rule.
#   tests/system/test_docs.sh            every command but sbatch's
#   tests/system/test_docs.sh --sbatch   only sbatch's (needs SLURM_CONF of a running cluster)
# Needs the build in $PC_SRCDIR/build (the docs' paths): scripts/check.sh's layout.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
src=${PC_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${PC_BUILDDIR:-$src/build}
only_sbatch=0
[ "${1:-}" = "--sbatch" ] && only_sbatch=1
if [ "$(cd "$build" && pwd -P)" != "$(cd "$src" 2>/dev/null && pwd -P)/build" ]; then
    pc_skip "the documented commands use build/; run from scripts/check.sh (build in $src/build)"
fi
tmp=$(mktemp -d)
trap '[ -n "${PC_KEEP_DOCS:-}" ] && echo "kept $tmp" || rm -rf "$tmp"' EXIT
ran=0

# The documented commands, one per line: FILE:LINE<TAB>COMMAND.
python3 - "$src" >"$tmp/commands" <<'PY'
import re, sys, os
src = sys.argv[1]
for name in ("README.md", "doc/building.md", "doc/operations.md", "doc/api.md", "doc/python.md"):
    inside = False
    for n, line in enumerate(open(os.path.join(src, name)), 1):
        if line.startswith("```"):
            inside = not inside and line.strip() == "```sh"
            continue
        if inside and line.strip():
            print("%s:%d\t%s" % (name, n, line.rstrip("\n")))
for name in sorted(os.listdir(os.path.join(src, "doc"))):
    if not name.endswith(".1"):
        continue
    section, nf = None, False
    for n, line in enumerate(open(os.path.join(src, "doc", name)), 1):
        if line.startswith(".SH "):
            section = line[4:].strip()
        elif line.startswith(".nf"):
            nf = section == "EXAMPLES"
        elif line.startswith(".fi"):
            nf = False
        elif nf and line.strip():
            print("doc/%s:%d\t%s" % (name, n, line.rstrip("\n").replace("\\-", "-")))
PY
[ -s "$tmp/commands" ] || { bad "no documented commands found"; exit 1; }

# The scratch directory the commands run in; results/ is its own (the user's stays).
work="$tmp/work"
mkdir -p "$work" "$tmp/results"
for d in build scripts apps doc traces; do ln -s "$src/$d" "$work/$d"; done
ln -s "$tmp/results" "$work/results"
export PC_RESULTS="$tmp/results"
[ "$build" != "$src/build" ] && ln -sfn "$build" "$work/build"
export PATH="$build/apps:$build/apps/examples:$PATH"
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo

short_iters() { # a training command line, with --iters 20 unless it has --iters/--eval-model
    case " $1 " in *" --iters "*|*" --eval-model "*) echo "$1" ;; *) echo "$1 --iters 20" ;; esac
}

n=0
deferred=0
while IFS=$'\t' read -r where cmd; do
    n=$((n + 1))
    cmd=${cmd%%  #*}
    cmd=${cmd%% # *}
    cmd=$(sed -E 's/[[:space:]]+$//; s|^cd /path/to/pipecompress && ||' <<<"$cmd")
    is_sbatch=0
    [[ $cmd == sbatch* ]] && is_sbatch=1
    if [ $is_sbatch = 1 ] && [ $only_sbatch = 0 ]; then
        echo "deferred: $where: $cmd (tests/system/test_slurm.sh runs it on its Slurm cluster)"
        deferred=$((deferred + 1))
        continue
    fi
    [ $is_sbatch = $only_sbatch ] || continue
    log="$tmp/cmd-$n.log"
    run=""
    case $cmd in
    "scripts/check.sh")
        echo "skip: $where: $cmd (this is the run that executes this test)"; continue ;;
    "autoreconf -fi && mkdir -p build && cd build && ../configure && make && make check")
        if [ "${PC_DOCS_BUILT_BY_CHECK:-}" = 1 ]; then
            echo "deferred: $where: $cmd (scripts/check.sh built build/ this way from a clean tree: autoreconf -fi, ../configure (CUDA for fewer architectures), make)"
            deferred=$((deferred + 1))
            continue
        fi
        # Building by hand, in a copy of the tree (configure must not touch the real one).
        mkdir -p "$tmp/copy"
        (cd "$src" && git ls-files -z 2>/dev/null | xargs -0 cp --parents -t "$tmp/copy" 2>/dev/null) \
            || cp -r "$src/." "$tmp/copy"
        rm -rf "$tmp/copy/build" "$tmp/copy/results"
        run="cd '$tmp/copy' && autoreconf -fi && mkdir -p build && cd build && ../configure --with-cuda-arch=90 && make -j\$(nproc)" ;;
    mpicc*pkg-config*pipecompress*|*" ./pc_example "*)
        if [[ $where == doc/api.md:* ]] && grep -q 'doc/api.md' "$src/tests/system/test_install.sh"; then
            echo "deferred: $where: $cmd (tests/system/test_install.sh runs it on a staged install)"
            deferred=$((deferred + 1))
            continue
        fi
        bad "$where: no rule for '$cmd'"; continue ;;
    scripts/demo.sh*)
        run="$src/$(short_iters "$cmd")" ;;
    sbatch*)
        [ -n "${SLURM_CONF:-}" ] || { bad "$where: sbatch without a cluster (SLURM_CONF)"; continue; }
        c=$(short_iters "$cmd")
        nodes=$(grep -oE -- '--nodes=[0-9]+' <<<"$c" | sed -n 1p | cut -d= -f2)
        per=$(grep -oE -- '--ntasks-per-node=[0-9]+' <<<"$c" | sed -n 1p | cut -d= -f2)
        c=$(sed -E 's/ --nodes=[0-9]+//; s/ --ntasks-per-node=[0-9]+//' <<<"$c")
        fold=""
        if [[ $c == *multinode* ]]; then # the script's own default: 2 nodes x 2 tasks x 2 CPUs
            fold="--nodes=1 --ntasks-per-node=$(( ${nodes:-2} * ${per:-2} )) --cpus-per-task=1"
        elif [ -n "$nodes$per" ]; then
            fold="--nodes=1 --ntasks-per-node=$(( ${nodes:-1} * ${per:-3} )) --cpus-per-task=1"
        fi
        run="PC_CHECKPOINT_DIR='$tmp/ck-$n' sbatch --wait --overcommit --time=10 --output='$log.job' $fold ${c#sbatch }"
        ;;
    *torch_train.py*)
        # The PyTorch example needs Debian's python3-torch (an optional package).
        if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
            echo "skip: $where: $cmd (/usr/bin/python3 cannot import torch)"; continue
        fi
        run=$(short_iters "$cmd")
        [[ " $run " == *" --test-samples "* ]] || run="$run --test-samples 1000" ;;
    *pc-train*|*pc_example*|*pc-mpirun.sh*)
        run=$(short_iters "$cmd") ;;
    scripts/plot.py*)
        run="$cmd" ;;
    pc-bench\ handoff*|pc-bench\ spsc*|pc-bench\ compress*|pc-bench\ model*|pc-bench\ engine*|pc-bench\ server*) # benchmarks run as written (model: one rank, the link given)
        run="$cmd" ;;
    *)
        bad "$where: no rule for the documented command '$cmd'"; continue ;;
    esac
    ran=$((ran + 1))
    t0=$SECONDS # each command's seconds are printed: this test is CI's longest
    if (cd "$work" && timeout 900 bash -c "$run") </dev/null >"$log" 2>&1; then
        if [ $is_sbatch = 1 ] && ! grep -q '^done: ' "$log.job"; then
            bad "$where: $cmd (the job did not finish training)"; tail -n 5 "$log.job"
        else
            ok "$where ($((SECONDS - t0)) s): $cmd"
        fi
    else
        bad "$where: $cmd  (ran as: $run)"; tail -n 5 "$log"; [ -f "$log.job" ] && tail -n 5 "$log.job"
    fi
done <"$tmp/commands"

# The README's DGC command (with --momentum left to its default) trains: a stricter check
# than "it ran", since its failure was a silent divergence.
if [ $only_sbatch = 0 ]; then
    dgc=$(grep -n -- '--compress dgc:ratio=0.001' "$tmp/commands" | sed -n 1p | cut -f2)
    dgc=${dgc%%  #*}
    t0=$SECONDS
    if [ -n "$dgc" ] && (cd "$work" && timeout 600 bash -c "$dgc") </dev/null >"$tmp/dgc.log" 2>&1 &&
        acc=$(grep -o 'final test accuracy [0-9.]*' "$tmp/dgc.log" | awk '{print $4}') &&
        awk -v a="$acc" 'BEGIN { exit !(a >= 80) }'; then
        ok "README's DGC command, in full ($((SECONDS - t0)) s): final test accuracy $acc%"
    else
        bad "README's DGC command did not train: '$dgc'"; tail -n 5 "$tmp/dgc.log"
    fi
fi

# README's first command, asked for help: its own text and pc-train's flags, with nothing
# installed, built or run (a --help that built the tree and trained surprised a new user).
if [ $only_sbatch = 0 ]; then
    before=$(stat -c %Y "$build/apps/pc-train" 2>/dev/null)
    if timeout 30 "$src/scripts/demo.sh" --help >"$tmp/demo-help" 2>&1 &&
        grep -q '^scripts/demo.sh: install what is missing, build' "$tmp/demo-help" &&
        grep -q '^usage: mpirun -np N pc-train' "$tmp/demo-help" &&
        ! grep -q '^== ' "$tmp/demo-help" && [ "$(stat -c %Y "$build/apps/pc-train" 2>/dev/null)" = "$before" ]; then
        ok "scripts/demo.sh --help: its text and pc-train's flags, nothing built or run"
    else
        bad "scripts/demo.sh --help:"; head -n 5 "$tmp/demo-help"
    fi
fi

echo "test_docs.sh: $ran documented commands run, $deferred deferred to other tests"
pc_done
