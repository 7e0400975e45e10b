# tests/harness.sh: helpers the shell tests share (sourced by every tests/mpi/*.sh and tests/system/*.sh).
# shellcheck shell=bash

# Results: each check prints one line, ok TEXT ("ok: TEXT") or bad TEXT ("FAIL: TEXT",
# counted in fails); pc_done ends the test with the count, exiting 0 when nothing failed
# and 1 otherwise. pc_skip (below) ends a test that cannot run here.
fails=0
# Open MPI's session directories: a folder per test (named after it, reused by its next
# run, open to every user as /tmp is), so that the jobs of two tests run side by side never
# share /tmp/ompi.HOST.UID, which one job's end can remove while another creates its own
# in it ("orte_session_dir failed", open-mpi/ompi#8510). pc-mpirun.sh makes each job's own
# folder inside it.
if [ -z "${OMPI_MCA_orte_tmpdir_base:-}" ]; then
    OMPI_MCA_orte_tmpdir_base="${TMPDIR:-/tmp}/pc-test-ompi.$(basename "$0" .sh)"
    { [ -d "$OMPI_MCA_orte_tmpdir_base" ] || mkdir -m 1777 "$OMPI_MCA_orte_tmpdir_base"; } &&
        export OMPI_MCA_orte_tmpdir_base
fi
ok() { echo "ok: $*"; }
bad() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
pc_done() {
    echo "${0##*/}: $fails failure(s)"
    [ "$fails" = 0 ] && exit 0
    exit 1
}

# Processes are found from the pid of what the test itself started, never by name or
# command line: other jobs on a shared machine may run the same programs.

# pc_descendants PID: the pids below PID (children, their children, ...), one a line.
pc_descendants() {
    local c
    for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$c"
        pc_descendants "$c"
    done
}

# pc_ranks LAUNCHER_PID PROGRAM [N]: the ranks of a job started in the background with
# scripts/pc-mpirun.sh (LAUNCHER_PID is its $!: the script, whose child is timeout, then
# mpirun, whose children are the ranks), in increasing pid order: the processes below LAUNCHER_PID whose
# argv[0] is PROGRAM. With N, waits up to 10 s until N of them are there. Fails when none
# (or fewer than N) are found.
pc_ranks() {
    local launcher=$1 prog=$2 want=${3:-1} p a0 found=() _
    for _ in $(seq 100); do
        found=()
        for p in $(pc_descendants "$launcher"); do
            a0=""
            IFS= read -r -d '' a0 2>/dev/null <"/proc/$p/cmdline"
            [ "$a0" = "$prog" ] && found+=("$p")
        done
        [ "${#found[@]}" -ge "$want" ] && break
        sleep 0.1
    done
    [ "${#found[@]}" -gt 0 ] && printf '%s\n' "${found[@]}" | sort -n
    [ "${#found[@]}" -ge "$want" ]
}

# pc_kill_tree PID: SIGKILL PID and every process below it. The tree is listed before
# anything is killed, so processes orphaned by the kills are not missed.
pc_kill_tree() {
    local below
    below=$(pc_descendants "$1")
    # shellcheck disable=SC2086
    kill -KILL "$1" $below 2>/dev/null
}

# pc_skip REASON: the test cannot run here. Prints one line "skipped: REASON" (what
# scripts/check.sh lists) and exits 77, which automake counts as SKIP, not PASS.
pc_skip() {
    echo "skipped: $*"
    exit 77
}

# pc_need_torch [MODULE...]: the Python tests' start. Sets py (/usr/bin/python3, or
# $PC_PYTHON) and exports PIPECOMPRESS_LIB (the build's shared library); skips the test
# (77) when py cannot import torch or one of MODULE, or there is no shared library.
pc_need_torch() {
    py=${PC_PYTHON:-/usr/bin/python3}
    local m
    for m in torch "$@"; do
        "$py" -c "import $m" 2>/dev/null ||
            pc_skip "$py cannot import $m (Debian: apt-get install python3-$m)"
    done
    export PIPECOMPRESS_LIB="$PC_BUILDDIR/src/.libs/libpipecompress.so.0"
    [ -e "$PIPECOMPRESS_LIB" ] ||
        pc_skip "no shared library at $PIPECOMPRESS_LIB (configured with --disable-shared?)"
}

# pc_job_state JOBID: a Slurm job's JobState and Restarts ("JobState=COMPLETED Restarts=1 ").
pc_job_state() { scontrol show job "$1" 2>/dev/null | grep -o -E 'JobState=[A-Z_]+|Restarts=[0-9]+' | tr '\n' ' '; }

# pc_await_job JOBID TRIES: until the job has ended (completed, failed, cancelled, timed
# out), polling every 0.5 s at most TRIES times.
pc_await_job() {
    local _
    for _ in $(seq "$2"); do
        case $(pc_job_state "$1") in *COMPLETED*|*FAILED*|*CANCELLED*|*TIMEOUT*) return 0 ;; esac
        sleep 0.5
    done
    return 1
}

# pc_await_manifest DIR SECONDS: until DIR holds a complete checkpoint (a MANIFEST); fails
# after SECONDS.
pc_await_manifest() {
    local _
    for _ in $(seq $(($2 * 20))); do
        compgen -G "$1/ckpt-*/MANIFEST" >/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# pc_free_port: a TCP port on 127.0.0.1 that nothing holds now, for a rendezvous such as
# DDP's: tests run in parallel (make -j check), so no fixed port. Drawn at random below
# the kernel's ephemeral range (32768 and up on Linux), where outgoing connections (MPI's,
# gloo's own) would take it between this check and the bind.
pc_free_port() {
    ${PC_PYTHON:-/usr/bin/python3} -c '
import random, socket, sys
for p in random.sample(range(20000, 32000), 200):
    try:
        socket.socket().bind(("127.0.0.1", p))
    except OSError:
        continue
    print(p)
    sys.exit(0)
sys.exit("pc_free_port: no free port in 200 tries")'
}
