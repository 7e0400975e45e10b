#!/usr/bin/env bash
# torch-ddp.sh: the same torch model (apps/examples/torch_train.py: pc-train's cnn, or its
# LSTM) trained on Fashion-MNIST by 2 workers, through PipeCompress and through torch's
# DistributedDataParallel over gloo, side by side in one run, on each network of --nets:
#   ddp             DDP, gloo (2 ranks; the baseline of every ratio, always run)
#   allreduce       PipeCompress --mode allreduce --compress none (2 ranks)
#   ps-none         PipeCompress --mode ps --compress none, pipelined (2 workers + 1 server)
#   ps-topk         --compress topk:ratio=0.01, pipelined (3 ranks)
#   ps-topk-inline  --compress topk:ratio=0.01 --pipeline off (3 ranks)
#   ps-dgc          --compress dgc:ratio=0.001, pipelined (3 ranks)
# Every run: --batch 32 --seed 1 --eval none, the same --iters, --warmup and --threads.
# Networks: shm (Open MPI's shared memory; gloo has none, so DDP goes over TCP on the
# loopback) and 10gbit, 1gbit: every rank, DDP's gloo (MASTER_ADDR 127.0.0.1) and MPI's
# TCP alike, inside a private network namespace whose loopback is shaped with tbf (root
# only: as another user the shaped networks are skipped, said so). On each network the
# settings run in the order above, one after the other (with --repeat R, R such rounds), so
# that every ratio compares runs made minutes apart on the same machine.
#
#   scripts/bench/torch-ddp.sh [--nets "shm 1gbit"] [--iters N] [--warmup N] [--threads N]
#                              [--arch cnn|lstm] [--settings "allreduce ps-none ..."]
#                              [--repeat R] [--data DIR|synthetic] [--timeout SECONDS]
#                              [--out DIR]
#
# --nets: any of shm, 10gbit, 1gbit (default "shm 1gbit"). --iters: iterations of every run
# (default 300); --warmup: those left out of its rate (default 20; passed to the example).
# --threads: torch's threads per rank (default 1). --settings: the PipeCompress settings
# to run (default all five; ddp always runs). --repeat: rounds per network (default 1;
# the summary takes each setting's median). --data: Fashion-MNIST's IDX directory (default
# /usr/share/datasets/fashion-mnist), or synthetic (the example's; for tests). --timeout:
# the limit of each run (scripts/pc-mpirun.sh -t; default 300 + 4 s per iteration): a run
# past it is reported failed, the others run.
# The library: $PIPECOMPRESS_LIB when set (nothing is built), else build/ (built here).
# Writes DIR/runs/NET-SETTING.log (each run's whole output; NET-SETTING-rK.log with
# --repeat) and .meta.json, DIR/summary.txt (printed: per network each setting's samples
# per second from the example's "done:" line and its ratio to DDP on that network) and
# DIR/summary.json (scripts/bench/torch_ddp_report.py). Default DIR:
# results/torch-ddp-DATE. Exit status: 0; 1 when a run failed (or gave no rate), after
# every run and the summary; 2 for a bad flag (one line).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

usage_error() {
    echo "torch-ddp.sh: $* (see --help)" >&2
    exit 2
}
# need FLAG VALUE: VALUE is there (a flag's argument).
need() { [ -n "${2:-}" ] || usage_error "$1 needs a value"; }
# count FLAG VALUE MIN: VALUE is a whole number >= MIN.
count() {
    case $2 in *[!0-9]*|"") usage_error "$1: '$2' is not a number" ;; esac
    [ "$2" -ge "$3" ] || usage_error "$1: $2 is below $3"
}

# The settings, one row each: NAME|RANKS|LABEL|the example's flags (DDP's port is added
# per run). setting_field NAME K: field K of NAME's row.
SETTINGS_TABLE="ddp|2|DDP, gloo|--backend ddp
allreduce|2|allreduce, none|--mode allreduce --compress none
ps-none|3|ps, none, pipelined|--mode ps --compress none --pipeline on
ps-topk|3|ps, topk 1%, pipelined|--mode ps --compress topk:ratio=0.01 --pipeline on
ps-topk-inline|3|ps, topk 1%, inline|--mode ps --compress topk:ratio=0.01 --pipeline off
ps-dgc|3|ps, dgc 0.1%, pipelined|--mode ps --compress dgc:ratio=0.001 --pipeline on"
setting_field() { awk -F'|' -v n="$1" -v k="$2" '$1 == n { print $k }' <<<"$SETTINGS_TABLE"; }
label_of() { setting_field "$1" 3; }
flags_of() { setting_field "$1" 4; }
np_of() { setting_field "$1" 2; }
# The PipeCompress settings (DDP always runs), in the table's order.
ALL_SETTINGS=$(awk -F'|' '$1 != "ddp" { printf "%s%s", sep, $1; sep = " " }' <<<"$SETTINGS_TABLE")
nets="shm 1gbit"
iters=300
warmup=20
threads=1
arch=cnn
settings=$ALL_SETTINGS
repeat=1
data=/usr/share/datasets/fashion-mnist
limit=""
out=""
while [ $# -gt 0 ]; do
    case $1 in
    --nets) need "$1" "${2:-}"; nets=$2; shift ;;
    --iters) need "$1" "${2:-}"; iters=$2; shift ;;
    --warmup) need "$1" "${2:-}"; warmup=$2; shift ;;
    --threads) need "$1" "${2:-}"; threads=$2; shift ;;
    --arch) need "$1" "${2:-}"; arch=$2; shift ;;
    --settings) need "$1" "${2:-}"; settings=$2; shift ;;
    --repeat) need "$1" "${2:-}"; repeat=$2; shift ;;
    --data) need "$1" "${2:-}"; data=$2; shift ;;
    --timeout) need "$1" "${2:-}"; limit=$2; shift ;;
    --out) need "$1" "${2:-}"; out=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
    esac
    shift
done
seen=" "
for n in $nets; do
    case $n in shm|10gbit|1gbit) ;; *) usage_error "--nets: unknown network '$n' (shm, 10gbit, 1gbit)" ;; esac
    case $seen in *" $n "*) usage_error "--nets: '$n' twice" ;; esac
    seen="$seen$n "
done
[ -n "${nets// /}" ] || usage_error "--nets: no network"
for s in $settings; do
    case " $ALL_SETTINGS ddp " in *" $s "*) ;; *) usage_error "--settings: unknown setting '$s' ($ALL_SETTINGS)" ;; esac
done
case $arch in cnn|lstm) ;; *) usage_error "--arch: '$arch' is not cnn or lstm" ;; esac
count --iters "$iters" 1
count --warmup "$warmup" 0
count --threads "$threads" 1
count --repeat "$repeat" 1
[ -z "$limit" ] || count --timeout "$limit" 1
[ "$iters" -gt "$warmup" ] || usage_error "--iters ($iters) must exceed --warmup ($warmup)"
limit=${limit:-$((300 + 4 * iters))}
out=${out:-$PC_TOP/results/torch-ddp-$(date +%Y-%m-%d)}
# The fixed order: DDP first, then the PipeCompress settings chosen, in ALL_SETTINGS' order.
order=ddp
for s in $ALL_SETTINGS; do
    case " $settings " in *" $s "*) order="$order $s" ;; esac
done

pc_setup iproute2
py=/usr/bin/python3 # Debian's, with Debian's torch (python3-torch)
"$py" -c 'import torch' 2>/dev/null || pc_die "$py cannot import torch (Debian package python3-torch)"
[ "$data" = synthetic ] || [ -d "$data" ] ||
    pc_die "--data: no directory $data (Debian package dataset-fashion-mnist)"
if [ -n "${PIPECOMPRESS_LIB:-}" ]; then
    [ -f "$PIPECOMPRESS_LIB" ] || pc_die "PIPECOMPRESS_LIB: no file $PIPECOMPRESS_LIB"
    pc_say "library: $PIPECOMPRESS_LIB (nothing built)"
else
    pc_build build
fi
example="$PC_TOP/apps/examples/torch_train.py"
runs="$out/runs"
mkdir -p "$runs"
rm -f "$runs"/*

if [ "$(id -u)" != 0 ]; then
    kept=""
    dropped=""
    for n in $nets; do
        if [ "$n" = shm ]; then kept="$kept $n"; else dropped="$dropped $n"; fi
    done
    [ -z "$dropped" ] || pc_say "not root: network namespaces are unavailable; skipped:$dropped"
    nets=${kept:-shm}
fi
ns=""
cleanup() {
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
    ns=""
    true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# setup_net NET: a namespace with its loopback shaped to NET's rate (none for shm); the
# previous one deleted. The same rates and bursts as scripts/bench/e2e.sh.
setup_net() {
    cleanup
    [ "$1" = shm ] && return 0
    ns="pc-torch-ddp-$$"
    pc_shaped_netns "$ns" "$1"
}


# next_ddp_port: sets port to a TCP port for gloo's rendezvous that nothing holds now (in
# the namespace of the run, ${pre[@]}), a new one for every DDP run: a socket the previous
# run left (TIME_WAIT) cannot collide with it. Ports from 29600 + a slot of this script's
# pid, so that two invocations at once start apart.
ddp_next=$((29600 + $$ % 4000 * 8))
next_ddp_port() {
    local p
    for p in $(seq "$ddp_next" $((ddp_next + 200))); do
        if "${pre[@]}" "$py" -c 'import socket,sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' \
            "$p" 2>/dev/null; then
            ddp_next=$((p + 1))
            port=$p
            return 0
        fi
    done
    pc_die "no free TCP port in $ddp_next..$((ddp_next + 200)) for DDP"
}

# errors LOG: the lines of a failed run's log that say why (the example's, the launcher's,
# Python's), else its last 3.
errors() {
    grep -m 3 -E '^(torch_train\.py: |pc-mpirun\.sh: |Traceback|[A-Za-z.]*(Error|Exception): )' "$1" ||
        tail -n 3 "$1"
}

failures=0
start=$(date +%s)
pc_say "$arch, 2 workers x batch 32, $iters iterations ($warmup warm-up), $threads torch thread(s) per rank, limit $limit s per run; runs in $runs"
netidx=0
for net in $nets; do
    setup_net "$net"
    # shellcheck disable=SC2054 # the commas are Open MPI's
    env=(OMPI_MCA_btl=self,vader GLOO_SOCKET_IFNAME=lo)
    pre=()
    if [ -n "$ns" ]; then
        # shellcheck disable=SC2054
        env=(OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
             GLOO_SOCKET_IFNAME=lo)
        pre=(ip netns exec "$ns")
    fi
    for r in $(seq "$repeat"); do
        setidx=0
        for s in $order; do
            name="$net-$s"
            [ "$repeat" -gt 1 ] && name="$name-r$r"
            np=$(np_of "$s")
            # shellcheck disable=SC2207 # flags_of's words
            cmd=("$py" "$example" --arch "$arch" --data "$data" --eval none --iters "$iters"
                 --warmup "$warmup" --threads "$threads" --batch 32 --seed 1 $(flags_of "$s"))
            if [ "$s" = ddp ]; then
                next_ddp_port
                cmd+=(--ddp-port "$port")
            fi
            line="${pre[*]:+${pre[*]} }env ${env[*]} scripts/pc-mpirun.sh -t $limit -np $np ${cmd[*]#"$PC_TOP"/}"
            printf '== %-28s %-26s ' "$name" "$(label_of "$s")"
            echo "\$ $line" >"$runs/$name.log" # what ran, from the source tree
            failed=""
            t0=$(date +%s%N)
            "${pre[@]}" env "${env[@]}" "$PC_TOP/scripts/pc-mpirun.sh" -t "$limit" -np "$np" "${cmd[@]}" \
                >>"$runs/$name.log" 2>&1 || failed="exit status $?"
            t1=$(date +%s%N)
            rate=$(sed -n 's/^done: .*(\([0-9][0-9]*\) samples\/s after .*/\1/p' "$runs/$name.log" | tail -n 1)
            [ -z "$failed" ] && [ -z "$rate" ] && failed="no rate in its done: line"
            if [ -n "$failed" ]; then
                failures=$((failures + 1))
                printf '%5d s failed (%s)\n' $(( (t1 - t0) / 1000000000 )) "$failed"
                errors "$runs/$name.log" >&2
            else
                printf '%5d s %s samples/s\n' $(( (t1 - t0) / 1000000000 )) "$rate"
            fi
            "$py" -c 'import json,sys; a=sys.argv; json.dump({"name": a[1], "net": a[2], "net_index": int(a[3]), "setting": a[4], "setting_index": int(a[5]), "repeat": int(a[6]), "label": a[7], "flags": a[8], "np": int(a[9]), "workers": 2, "batch": 32, "seed": 1, "arch": a[10], "iters": int(a[11]), "warmup": int(a[12]), "threads": int(a[13]), "limit_s": int(a[14]), "wall_s": int(a[15]) / 1e9, "failed": a[16] or None, "command": a[17]}, open(a[18], "w"), indent=1)' \
                "$name" "$net" "$netidx" "$s" "$setidx" "$r" "$(label_of "$s")" "$(flags_of "$s")" "$np" \
                "$arch" "$iters" "$warmup" "$threads" "$limit" $((t1 - t0)) "$failed" "$line" \
                "$runs/$name.meta.json"
            setidx=$((setidx + 1))
        done
    done
    netidx=$((netidx + 1))
done
cleanup
pc_say "all runs in $(( $(date +%s) - start )) s"
report=0
"$py" "$PC_TOP/scripts/bench/torch_ddp_report.py" "$runs" "$out" || report=$?
if [ "$failures" -gt 0 ] || [ "$report" != 0 ]; then
    pc_say "$failures run(s) failed (their logs: $runs)"
    exit 1
fi
