#!/usr/bin/env bash
# scripts/check.sh: install what is missing, build, and run every test:
#  1. the normal build: all unit tests and the MPI tests (make check);
#  2. a ThreadSanitizer build: the concurrency tests (make check-concurrency);
#  3. an AddressSanitizer + UBSan build: the unit tests (make check-unit);
#  4. the shipped Slurm batch scripts on a one-node Slurm cluster started on localhost
#     (tests/test_slurm.sh; needs root, skipped with a message otherwise);
#  5. the fuzz targets (libFuzzer, when clang is installed) for bounded runs:
#     PC_FUZZ_RUNS executions (default 1500000) or PC_FUZZ_SECONDS (default 300).
# Exit status is non-zero on any failure. Logs: build*/tests/*.log.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" = 0 ]; then
    pc_setup slurmctld slurmd slurm-client munge
else
    pc_setup
fi

PASSED=0
FAILED=0
run_suite() { # DIR TARGET
    local dir="$PC_TOP/$1" target=$2
    pc_say "make $target (in $1)"
    if ! make -C "$dir" -j"$(nproc)" "$target" >"$dir/$target.out" 2>&1; then
        grep -E '^(FAIL|ERROR|XPASS)' "$dir/$target.out" >&2 || true
        for log in "$dir"/tests/*.log; do
            grep -qE ':test-result: (FAIL|ERROR)' "${log%.log}.trs" 2>/dev/null && { echo "--- $log"; tail -n 40 "$log"; } >&2
        done
        tail -n 20 "$dir/$target.out" >&2
        local before=$FAILED
        count "$dir/$target.out"
        [ "$FAILED" = "$before" ] && FAILED=$((FAILED + 1)) # the suite broke before its summary
        echo "check: $PASSED passed, $FAILED failed"
        pc_die "$target failed in $1"
    fi
    grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)' "$dir/$target.out" || true
    count "$dir/$target.out"
}
count() { # add an automake test-suite summary to the totals
    local p f e
    p=$(sed -n 's/^# PASS: *//p' "$1" | tail -n 1)
    f=$(sed -n 's/^# FAIL: *//p' "$1" | tail -n 1)
    e=$(sed -n 's/^# ERROR: *//p' "$1" | tail -n 1)
    PASSED=$((PASSED + ${p:-0}))
    FAILED=$((FAILED + ${f:-0} + ${e:-0}))
}

pc_build build
run_suite build check

pc_build build-tsan --enable-tsan --without-cuda
run_suite build-tsan check-concurrency

pc_build build-asan --enable-asan --without-cuda
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 run_suite build-asan check-unit

pc_say "tests/test_slurm.sh (Slurm on localhost)"
set +e
"$PC_TOP/tests/test_slurm.sh" "$PC_TOP/build" >"$PC_TOP/build/test_slurm.log" 2>&1
rc=$?
set -e
cat "$PC_TOP/build/test_slurm.log"
case $rc in
0) PASSED=$((PASSED + 1)) ;;
77) ;;
*) FAILED=$((FAILED + 1)); echo "check: $PASSED passed, $FAILED failed"; pc_die "the Slurm test failed" ;;
esac

# run_fuzz TARGET RUNS: a bounded libFuzzer run from build/fuzz, counted like a suite.
run_fuzz() {
    local target=$1 n=$2 corpus="$PC_TOP/build/fuzz-corpus-$1"
    mkdir -p "$corpus"
    local seeds=()
    [ -d "$PC_TOP/tests/seeds/$target" ] && seeds=("$PC_TOP/tests/seeds/$target") # valid inputs to start from
    if ! (cd "$PC_TOP/build/fuzz" && "./$target" -runs="$n" -max_total_time="$secs" \
            -print_final_stats=1 "$corpus" "${seeds[@]}" >"$target.log" 2>&1); then
        grep -E 'ERROR|SUMMARY|Test unit written' "$PC_TOP/build/fuzz/$target.log" >&2
        FAILED=$((FAILED + 1))
        echo "check: $PASSED passed, $FAILED failed"
        pc_die "$target found a crash (the input is saved in build/fuzz/)"
    fi
    local execs
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$PC_TOP/build/fuzz/$target.log")
    echo "$target: ${execs:-?} executions, no crash"
    PASSED=$((PASSED + 1))
}

if command -v clang >/dev/null 2>&1; then
    runs=${PC_FUZZ_RUNS:-1500000}
    secs=${PC_FUZZ_SECONDS:-300}
    pc_say "make fuzz; bounded runs: fuzz_decode and fuzz_runtime $runs, fuzz_idx and fuzz_manifest $((runs / 3)) (at most $secs s each)"
    make -C "$PC_TOP/build" fuzz >"$PC_TOP/build/fuzz.out" 2>&1 \
        || { tail -n 20 "$PC_TOP/build/fuzz.out" >&2; pc_die "make fuzz failed"; }
    run_fuzz fuzz_decode "$runs"
    run_fuzz fuzz_idx $((runs / 3))
    run_fuzz fuzz_manifest $((runs / 3))
    run_fuzz fuzz_runtime "$runs"
else
    pc_say "clang not installed: fuzz targets skipped"
fi

pc_say "all tests passed"
echo "check: $PASSED passed, $FAILED failed"
