#!/usr/bin/env bash
# pc-mpirun.sh: start an MPI job the way PipeCompress tests, scripts and demos need it.
#   scripts/pc-mpirun.sh [-t SECONDS] -np N PROGRAM [ARGS...]
# - always under `timeout` (-t SECONDS, default 3600; tests pass their own): a hung job
#   fails instead of hanging CI, and says so when the limit ends it;
# - as root, the two Open MPI variables that allow it;
# - oversubscription allowed, and Open MPI told to yield when idle (more ranks than cores
#   would otherwise busy-poll);
# - --bind-to none: PipeCompress binds its own threads (pc_topo);
# - single node: shared memory between ranks, control channel on loopback;
# - Open MPI's session directory in a folder of this job's own (removed at the end), inside
#   OMPI_MCA_orte_tmpdir_base where that is set, else $TMPDIR or /tmp: jobs started at once
#   on one machine otherwise share /tmp/ompi.HOST.UID, which one job's end removes while
#   another creates its own in it, and the other fails to start with "orte_session_dir
#   failed" (open-mpi/ompi#8510; the full check hit it running two test suites side by side);
# - a stop (SIGINT from Ctrl-C, SIGTERM, SIGHUP) goes to the ranks themselves, not to
#   mpirun: they stop together at an iteration boundary (pc-train writes its final
#   checkpoint) and exit 128 + N, and so does this script. Signalled directly, mpirun
#   would abort the job and exit 1 (and print Open MPI's "Epoll MOD" warnings).
# - when the job ends early because a rank died or failed, one line of its own names the
#   rank, its host and how it ended (a signal such as SIGKILL from the OOM killer or kill -9,
#   or a non-zero exit status), from mpirun's report on stderr (copied through as it comes);
#   the time limit is said only when it is what ended the job.
# Exit status: the job's (mpirun's); 124 when the time limit ended it. A status of 137
# (128 + SIGKILL) is mpirun's for a rank killed by SIGKILL, or timeout's when the ranks did
# not stop within 10 s of the limit: the elapsed time tells the two apart.
# MPIRUN (the configure-detected mpirun) and PC_MPIRUN_ARGS (extra mpirun flags) are honoured.
set -euo pipefail
limit=3600
if [ "${1:-}" = "-t" ]; then
    limit=$2
    shift 2
fi
if [ "${1:-}" != "-np" ] || [ -z "${2:-}" ] || [ -z "${3:-}" ]; then
    echo "usage: $0 [-t SECONDS] -np N PROGRAM [ARGS...]" >&2
    exit 2
fi
np=$2
shift 2
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-lo}

# mpirun's stderr (its own reports and the ranks' stderr) goes through tee, to ours and
# to a file read once the job has ended. tee ignores the stop signals: the ranks' last
# lines must still get through after a Ctrl-C (a dead reader would break mpirun's pipe).
errlog=$(mktemp "${TMPDIR:-/tmp}/pc-mpirun.XXXXXX") || exit 1
trap 'rm -f "$errlog"' EXIT
session=$(mktemp -d "${OMPI_MCA_orte_tmpdir_base:-${TMPDIR:-/tmp}}/pc-mpirun-session.XXXXXX") || exit 1
trap 'rm -f "$errlog"; rm -rf "$session"' EXIT
export OMPI_MCA_orte_tmpdir_base=$session
exec 3> >(trap '' INT TERM HUP; exec tee -a "$errlog" >&2)
tee_pid=$!
start=$SECONDS

# timeout puts itself and mpirun in a process group of their own, so a Ctrl-C at the
# terminal reaches this script only; the trap hands it on to the ranks.
# shellcheck disable=SC2086
timeout --kill-after=10 "$limit" "${MPIRUN:-mpirun}" --oversubscribe --bind-to none \
    ${PC_MPIRUN_ARGS:-} -np "$np" "$@" 2>&3 &
job=$!
exec 3>&-

# forward SIG: send SIG to the ranks, found as the children of the mpirun that timeout
# started (by pid: nothing else on the machine is touched). Before mpirun has started
# them there is nothing to stop but mpirun itself.
forwarded=
forward() {
    local sig=$1 m ranks=""
    forwarded=$sig
    for m in $(ps -o pid= --ppid "$job" 2>/dev/null); do
        ranks="$ranks $(ps -o pid= --ppid "$m" 2>/dev/null | tr '\n' ' ')"
    done
    # shellcheck disable=SC2086
    if [ -n "${ranks// /}" ]; then
        kill "-$sig" $ranks 2>/dev/null || true
    else
        kill "-$sig" "$job" 2>/dev/null || true
    fi
}
trap 'forward INT' INT
trap 'forward TERM' TERM
trap 'forward TERM' HUP # a hang-up stops cleanly too (pc-train handles INT and TERM)

# wait returns early (status > 128) when a trapped signal arrives: wait again until the
# job itself has ended.
set +e
while :; do
    wait "$job"
    rc=$?
    kill -0 "$job" 2>/dev/null || break
done
# Every writer of the pipe has ended with the job: tee sees the end and exits (bounded,
# should a rank's orphaned child still hold it).
for _ in $(seq 50); do kill -0 "$tee_pid" 2>/dev/null || break; sleep 0.1; done

# why: the cause of an early end that no rank reported itself, from mpirun's report (Open
# MPI 4: "mpirun noticed that process rank N with PID P on node H exited on signal S
# (Name)."; "MPI_ABORT was invoked on rank N ... with errorcode C"). Empty for anything
# else: a rank that exits non-zero by itself (pc-train's refusals) has said why.
why() {
    local line r h s n c
    line=$(grep -m 1 -E 'mpirun noticed that process rank [0-9]+ .* on node .* exited on signal [0-9]+' "$errlog" || true)
    if [ -n "$line" ]; then
        r=$(sed -E 's/.*process rank ([0-9]+) .*/\1/' <<<"$line")
        h=$(sed -E 's/.* on node (.*) exited on signal.*/\1/' <<<"$line")
        s=$(sed -E 's/.*exited on signal ([0-9]+).*/\1/' <<<"$line")
        n=$(kill -l "$s" 2>/dev/null || echo "$s")
        case $s in
        9) c=" (the OOM killer, or kill -9)" ;;
        15) c=" (kill, or a batch system's stop)" ;;
        6 | 7 | 8 | 11) c=" (a crash)" ;;
        *) c="" ;;
        esac
        echo "rank $r on $h was killed by signal $s, SIG$n$c; mpirun then stopped the other ranks"
        return
    fi
    # Open MPI 4 breaks this report after the communicator: "... in communicator
    # MPI_COMM_WORLD" / "with errorcode 1."
    line=$(grep -m 1 -A 1 -E 'MPI_ABORT was invoked on rank [0-9]+ ' "$errlog" | tr '\n' ' ' || true)
    if [ -n "$line" ]; then
        r=$(sed -E 's/.*invoked on rank ([0-9]+) .*/\1/' <<<"$line")
        c=$(sed -n -E 's/.*with errorcode ([0-9-]+).*/\1/p' <<<"$line")
        echo "rank $r ended the job with MPI_Abort (error code ${c:-?}; its message is above)"
        return
    fi
}
if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ $((SECONDS - start)) -ge "$limit" ]; then
    echo "pc-mpirun.sh: the time limit of $limit s ended the job (-t SECONDS raises it)" >&2
elif [ "$rc" != 0 ] && [ -z "$forwarded" ]; then # a stop we handed on ends as asked
    cause=$(why)
    [ -z "$cause" ] || echo "pc-mpirun.sh: $cause (exit status $rc)" >&2
fi
exit "$rc"
