#!/usr/bin/env bash
# scripts/check.sh [--quick]: install what is missing, build, and run every test (what CI
# runs, .ci/run; about 45 minutes on 2 cores, CONTRIBUTING.md):
#  1. the normal build (its CUDA kernels, where nvcc is installed, for sm_75 and sm_90
#     only, the default list's ends): all unit tests and the MPI tests (make check);
#  2. a ThreadSanitizer build: the concurrency tests (make check-concurrency);
#  3. an AddressSanitizer + UBSan build: the unit tests and a worker destroyed while
#     running (make check-asan);
#     (2 and 3 build only the static library: their tests link it, like every program;
#     the shared library is checked in 1, by tests/system/test_install.sh);
#  4. the shipped Slurm batch scripts on a one-node Slurm cluster started on localhost
#     (tests/system/test_slurm.sh; needs root, skipped otherwise), and mpirun and Slurm across
#     emulated nodes (tests/system/test_cluster.sh, scripts/cluster/pc-cluster.sh; root);
#  5. the fuzz targets (libFuzzer, when clang is installed) for bounded runs, one per core:
#     the message parsers PC_FUZZ_RUNS executions (default 1500000) or PC_FUZZ_SECONDS
#     (default 300) each, the other three parsers 2/9 and 2/3 of those.
# Before the builds, the static checks: the include graph and the calls against
# doc/design.md's layers (scripts/lint/check-layers.py, scripts/lint/check-calls.py), every
# MPI call checked (scripts/lint/check-mpi-calls.sh), no function over 100 lines but the
# documented exceptions (scripts/lint/check-length.py), no pipeline into a reader that
# stops early (scripts/lint/check-pipes.sh) and the formatting
# (scripts/lint/format.sh --check); tests/system/test_lint.sh plants a fault for each.
# A test that cannot run here (no GPU, not root, no clang) counts as skipped, never as
# passed: the closing line is "check: N passed, N failed, N skipped", after the list of
# skipped tests with the reason each gave (its "skipped: REASON" line).
# The commit messages are checked too (scripts/lint/check-commits.sh): a warning, never
# a failure.
# --quick, the inner loop (under 5 minutes on 2 cores): the build packages only, the lints,
# the build in build/, the unit tests and a short MPI training test (make check-quick). A
# build/ not configured yet is configured --without-cuda --disable-shared (the kernels'
# nvcc compile alone takes longer than the whole tier; the shared library is for the
# Python tests); one configured already is reused as it is. The full check configures
# build/ again when --quick configured it (pc_build compares the flags).
# At the end: the wall time, each stage's, and the 8 longest tests (from each log's
# creation to its result; the tests of a suite run two at a time).
# Exit status is non-zero on any failure (2 for an unknown flag). Logs: build*/tests/*/*.log.
set -euo pipefail
QUICK=0
for arg in "$@"; do
    case $arg in
    --quick) QUICK=1 ;;
    -h | --help)
        cat <<'USAGE'
usage: scripts/check.sh [--quick]
  (no flag)  the full check, what CI runs (.ci/run): lints, build/, make check, the TSan and
             ASan builds, the Slurm and emulated-cluster tests (root), bounded fuzz runs;
             about 45 minutes on 2 cores
  --quick    the inner loop: lints, build/ (configured --without-cuda --disable-shared
             when new), the unit tests and a short MPI training test (make check-quick);
             under 5 minutes
  -h, --help this text
Ends with the wall time, the longest tests, the skipped ones and
"check: N passed, N failed, N skipped"; non-zero on any failure. See CONTRIBUTING.md.
USAGE
        exit 0
        ;;
    *)
        echo "check.sh: unknown flag '$arg' (usage: scripts/check.sh [--quick]; --help)" >&2
        exit 2
        ;;
    esac
done
. "$(dirname "$0")/lib.sh"
if [ "$QUICK" = 1 ]; then
    PC_PACKAGES=$PC_BUILD_PACKAGES
    pc_setup
elif [ "$(id -u)" = 0 ]; then
    pc_setup slurmctld slurmd slurm-client munge iproute2 nftables $PC_OPTIONAL_PACKAGES
else
    pc_setup
    if command -v dpkg-query >/dev/null 2>&1 && [ -n "$(pc_missing $PC_OPTIONAL_PACKAGES)" ]; then
        pc_say "not root and missing:$(pc_missing $PC_OPTIONAL_PACKAGES): the tests that need them are skipped"
    fi
fi
STAGES=("setup ${SECONDS}s") # "NAME SECONDS", one per stage

PASSED=0
FAILED=0
SKIPPED=0
SKIPS=() # "NAME: REASON", one per skipped test
TIMES=() # "SECONDS NAME", one per test

# stage NAME START: note that the stage NAME, begun at $SECONDS = START, has ended.
stage() { STAGES+=("$1 $((SECONDS - $2))s"); }
# suite_times DIR MARK: each test of DIR whose result (.trs) is newer than the file MARK,
# with its duration: from its log's creation (stat %W: test-driver opens it first) to its
# result's last write.
suite_times() {
    local trs log b e
    while IFS= read -r trs; do
        log=${trs%.trs}.log
        b=$(stat -c %W "$log" 2>/dev/null) || continue
        e=$(stat -c %Y "$trs")
        log=${log#"$PC_TOP/"}
        # 0: a file system that keeps no birth time; the test's time is unknown then.
        if [ "${b:-0}" -gt 0 ]; then TIMES+=("$((e - b)) ${log%.log}"); fi
    done < <(find "$1/tests" -name '*.trs' -newer "$2" 2>/dev/null)
    return 0
}
# report_times: the wall time, each stage's, and the 8 longest tests.
report_times() {
    printf '== wall time %dm%02ds; stages: %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$(
        IFS=,
        echo "${STAGES[*]}" | sed 's/,/, /g'
    )"
    [ "${#TIMES[@]}" = 0 ] && return 0
    echo "== the longest tests (seconds):"
    printf '%s\n' "${TIMES[@]}" | sort -rn | awk 'NR <= 8 { printf "%6d s  %s\n", $1, $2 }'
}

# skipped NAME REASON: count a test that did not run, and keep why.
skipped() {
    SKIPPED=$((SKIPPED + 1))
    SKIPS+=("$1: $2")
}
# skip_reason LOG: the "skipped: REASON" line a skipping test printed, else its last line.
skip_reason() {
    local r
    r=$(awk 'sub(/^skipped: /, "") { print; exit }' "$1" 2>/dev/null)
    [ -n "$r" ] || r=$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1)
    echo "${r:-no reason given}"
}
# summary: the times, the skipped tests with their reasons, then the closing line CI reads.
summary() {
    report_times
    [ "${#SKIPS[@]}" = 0 ] || printf 'SKIP: %s\n' "${SKIPS[@]}"
    echo "check: $PASSED passed, $FAILED failed, $SKIPPED skipped"
}

run_suite() { # DIR TARGET
    local dir="$PC_TOP/$1" target=$2 t0=$SECONDS
    pc_say "make $target (in $1)"
    touch "$dir/.pc-suite-start"
    if ! make -C "$dir" -j"$(nproc)" "$target" >"$dir/$target.out" 2>&1; then
        suite_times "$dir" "$dir/.pc-suite-start"
        grep -E '^(FAIL|ERROR|XPASS)' "$dir/$target.out" >&2 || true
        while IFS= read -r trs; do
            grep -qE ':test-result: (FAIL|ERROR)' "$trs" && { echo "--- ${trs%.trs}.log"; tail -n 40 "${trs%.trs}.log"; } >&2
        done < <(find "$dir/tests" -name '*.trs')
        tail -n 20 "$dir/$target.out" >&2
        local before=$FAILED
        count "$1" "$dir/$target.out"
        [ "$FAILED" = "$before" ] && FAILED=$((FAILED + 1)) # the suite broke before its summary
        summary
        pc_die "$target failed in $1; the stages after it did not run"
    fi
    grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)' "$dir/$target.out" || true
    count "$1" "$dir/$target.out"
    suite_times "$dir" "$dir/.pc-suite-start"
    stage "$1:$target" "$t0"
}
count() { # DIR OUT: add an automake test-suite summary to the totals; note each SKIP
    local p f e name
    p=$(sed -n 's/^# PASS: *//p' "$2" | tail -n 1)
    f=$(sed -n 's/^# FAIL: *//p' "$2" | tail -n 1)
    e=$(sed -n 's/^# ERROR: *//p' "$2" | tail -n 1)
    PASSED=$((PASSED + ${p:-0}))
    FAILED=$((FAILED + ${f:-0} + ${e:-0}))
    # automake prints "SKIP: tests/..." for each; the reason is in the test's .log.
    while IFS= read -r name; do
        skipped "$name ($1)" "$(skip_reason "$PC_TOP/$1/$name.log")"
    done < <(sed -n 's/^SKIP: //p' "$2")
}

# lint NAME COMMAND...: a static check, counted like a test; a failure stops here.
lint() {
    local name=$1
    shift
    pc_say "$name"
    if "$@"; then
        PASSED=$((PASSED + 1))
    else
        FAILED=$((FAILED + 1))
        summary
        pc_die "$name failed; the stages after it did not run"
    fi
}
t0=$SECONDS
lint "layers (scripts/lint/check-layers.py)" /usr/bin/python3 "$PC_TOP/scripts/lint/check-layers.py" "$PC_TOP"
lint "calls (scripts/lint/check-calls.py)" /usr/bin/python3 "$PC_TOP/scripts/lint/check-calls.py" "$PC_TOP"
lint "function length (scripts/lint/check-length.py)" /usr/bin/python3 "$PC_TOP/scripts/lint/check-length.py" "$PC_TOP"
lint "scripts/lint/check-mpi-calls.sh (every MPI call's return code checked)" "$PC_TOP/scripts/lint/check-mpi-calls.sh" "$PC_TOP"
lint "scripts/lint/check-pipes.sh (no pipe into head or grep -q under pipefail)" "$PC_TOP/scripts/lint/check-pipes.sh" "$PC_TOP"
lint "formatting (scripts/lint/format.sh --check)" "$PC_TOP/scripts/lint/format.sh" --check
lint "one home per figure (scripts/lint/check-figures.py)" /usr/bin/python3 "$PC_TOP/scripts/lint/check-figures.py" "$PC_TOP"
pc_say "commit messages (scripts/lint/check-commits.sh; a warning, never a failure)"
"$PC_TOP/scripts/lint/check-commits.sh" "$PC_TOP" || true
stage lints "$t0"

if [ "$QUICK" = 1 ]; then
    # A build/ configured already (by the full check, maybe with CUDA) is kept as it is.
    flags="--without-cuda --disable-shared"
    [ -f "$PC_TOP/build/Makefile" ] && [ -f "$PC_TOP/build/.pc-configure-flags" ] \
        && flags=$(cat "$PC_TOP/build/.pc-configure-flags")
    t0=$SECONDS
    # shellcheck disable=SC2086
    pc_build build $flags
    stage build "$t0"
    run_suite build check-quick
    pc_say "quick check passed (the full one: scripts/check.sh)"
    summary
    exit 0
fi

t0=$SECONDS
# The CUDA kernels (where nvcc is installed) for the default list's oldest and newest
# architectures only: the three between compile the same source, and each architecture
# is a whole nvcc pass (the whole build of a fresh clone, 2 quiet cores: 2m24s with the
# five, 1m39s with these two). No GPU runs them here.
pc_build build --with-cuda-arch=75,90
stage build "$t0"
# On a clean checkout (CI) that build was doc/building.md's by-hand build, step for step
# but for the architecture list (test_docs.sh's own copy builds with one): test_docs.sh
# need not build the tree a second time in a copy (about 4 of CI's minutes).
if [ "$PC_BUILD_AS_DOCUMENTED" = 1 ]; then
    export PC_DOCS_BUILT_BY_CHECK=1
fi
run_suite build check

t0=$SECONDS
pc_build build-tsan --enable-tsan --without-cuda --disable-shared
stage build-tsan "$t0"
run_suite build-tsan check-concurrency

t0=$SECONDS
pc_build build-asan --enable-asan --without-cuda --disable-shared
stage build-asan "$t0"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 run_suite build-asan check-asan

# run_root_test NAME WHAT: a tests/system script that needs root, counted like a suite.
run_root_test() {
    local name=$1 what=$2 rc t0=$SECONDS
    pc_say "tests/system/$name.sh ($what)"
    set +e
    "$PC_TOP/tests/system/$name.sh" "$PC_TOP/build" >"$PC_TOP/build/$name.log" 2>&1
    rc=$?
    set -e
    TIMES+=("$((SECONDS - t0)) tests/system/$name.sh")
    stage "$name" "$t0"
    cat "$PC_TOP/build/$name.log"
    case $rc in
    0) PASSED=$((PASSED + 1)) ;;
    77) skipped "tests/system/$name.sh" "$(skip_reason "$PC_TOP/build/$name.log")" ;;
    *) FAILED=$((FAILED + 1)); summary; pc_die "tests/system/$name.sh failed (log: build/$name.log)" ;;
    esac
}
run_root_test test_slurm "Slurm on localhost"
run_root_test test_cluster "emulated nodes: mpirun and Slurm across network namespaces"

# The libFuzzer targets: tests/fuzz/fuzz_*.c (make fuzz builds them into build/fuzz/).
FUZZ_TARGETS=$(cd "$PC_TOP/tests/fuzz" && ls fuzz_*.c | sed 's/\.c$//')
# fuzz_one TARGET RUNS SECS: a bounded libFuzzer run from build/fuzz (at most RUNS
# executions, SECS seconds), run in the background; its exit status goes to TARGET.rc and
# its seconds to TARGET.secs in build/fuzz.
fuzz_one() {
    local target=$1 n=$2 limit=$3 corpus="$PC_TOP/build/fuzz-corpus-$1" start rc=0
    start=$(date +%s)
    mkdir -p "$corpus"
    local seeds=()
    [ -d "$PC_TOP/tests/fuzz/seeds/$target" ] && seeds=("$PC_TOP/tests/fuzz/seeds/$target") # valid inputs to start from
    (cd "$PC_TOP/build/fuzz" && "./$target" -runs="$n" -max_total_time="$limit" \
        -print_final_stats=1 "$corpus" "${seeds[@]}" >"$target.log" 2>&1) || rc=$?
    echo "$(($(date +%s) - start))" >"$PC_TOP/build/fuzz/$target.secs"
    echo "$rc" >"$PC_TOP/build/fuzz/$target.rc"
}
# fuzz_result TARGET: count a finished fuzz_one like a suite; a crash stops here.
fuzz_result() {
    local target=$1 f="$PC_TOP/build/fuzz/$1" execs
    TIMES+=("$(cat "$f.secs" 2>/dev/null || echo 0) build/fuzz/$target")
    if [ "$(cat "$f.rc" 2>/dev/null)" != 0 ]; then
        grep -E 'ERROR|SUMMARY|Test unit written' "$f.log" >&2
        FAILED=$((FAILED + 1))
        summary
        pc_die "$target found a crash or failed (log: build/fuzz/$target.log; the input is saved in build/fuzz/)"
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$f.log")
    echo "$target: ${execs:-?} executions in $(cat "$f.secs") s, no crash"
    PASSED=$((PASSED + 1))
}

if command -v clang >/dev/null 2>&1; then
    runs=${PC_FUZZ_RUNS:-1500000}
    secs=${PC_FUZZ_SECONDS:-300}
    jobs=$(nproc)
    pc_say "make fuzz; bounded runs, $jobs at a time: fuzz_decode and fuzz_runtime $runs (at most $secs s each), the others $((runs * 2 / 9)) (at most $((secs * 2 / 3)) s each)"
    t0=$SECONDS
    make -C "$PC_TOP/build" fuzz >"$PC_TOP/build/fuzz.out" 2>&1 \
        || { tail -n 20 "$PC_TOP/build/fuzz.out" >&2; summary; pc_die "make fuzz failed"; }
    # Each target is single-threaded: running one per core halves the stage's wall time on
    # 2 cores without changing any target's bounds.
    running=0
    for target in $FUZZ_TARGETS; do
        rm -f "$PC_TOP/build/fuzz/$target.rc"
        # The message parsers get the most runs. The other three (IDX files, checkpoint
        # manifests, replay traces) share the budget two of them had before fuzz_trace
        # joined: 2 x 1/3 of the runs and 2 x the seconds, now 3 x 2/9 and 3 x 2/3, so the
        # stage's bound stays 2 x PC_FUZZ_SECONDS on 2 cores (at the defaults, at worst
        # 300 + 300 s of the message parsers beside 3 x 200 s of the others).
        case $target in
        fuzz_decode | fuzz_runtime) fuzz_one "$target" "$runs" "$secs" & ;;
        *) fuzz_one "$target" $((runs * 2 / 9)) $((secs * 2 / 3)) & ;;
        esac
        running=$((running + 1))
        if [ "$running" -ge "$jobs" ]; then
            wait -n || true
            running=$((running - 1))
        fi
    done
    wait || true
    for target in $FUZZ_TARGETS; do
        fuzz_result "$target"
    done
    stage fuzz "$t0"
else
    pc_say "clang not installed: fuzz targets skipped"
    for target in $FUZZ_TARGETS; do
        skipped "$target" "clang not installed (Debian package clang): libFuzzer target not built"
    done
fi

pc_say "all tests passed"
summary
