#!/usr/bin/env bash
# torch-ddp.sh: one torch model of apps/examples/torch_train.py (pc-train's cnn, an LSTM,
# torchvision's ResNet-18/50 and VGG-16, a ViT) trained on Fashion-MNIST by W workers,
# through PipeCompress and through torch's DistributedDataParallel over gloo with torch's
# own communication hooks, side by side in one run, on each network of --nets:
#   compute         the model alone: 1 process, torch.optim.SGD, no communication (the
#                   limit: its iteration is what a free network would give one worker)
#   ddp             DDP, fp32 allreduce (W ranks; always run: every ratio's first base)
#   ddp-fp16        DDP + fp16_compress_hook
#   ddp-psgd1/2/4   DDP + powerSGD_hook, rank 1, 2 or 4 (error feedback and warm start on;
#                   one bucket; plain allreduce for the first max(2, --warmup) iterations,
#                   so the timed ones are all compressed)
#   allreduce       PipeCompress --mode allreduce --compress none (W ranks)
#   ps-none         PipeCompress --mode ps --compress none, pipelined (W workers + 1 server)
#   ps-topk         --compress topk:ratio=0.01, pipelined (W + 1 ranks; the codec's default
#                   momentum: the workers' correction, plain SGD on the servers)
#   ps-topk-inline  --compress topk:ratio=0.01 --pipeline off (W + 1 ranks)
#   ps-dgc          --compress dgc:ratio=0.001, pipelined (W + 1 ranks)
#   ps-psgd1/2/4    --compress powersgd:rank=1, 2 or 4, pipelined (W + 1 ranks; dense for
#                   the first max(2, --warmup) - 1 iterations: one fewer than DDP's PowerSGD,
#                   since the update of our last dense iteration crosses the link during
#                   the next one, which is then the first timed one no longer (DDP's
#                   allreduce ends inside its own iteration); the runtime's default
#                   --compress-min-bytes: matrices under 64 KiB dense)
#   auto            --mode auto --servers 1: the probe profiles the torch model and chooses
#                   (W + 1 ranks; the choice is in the log and the summary)
#   ps-none-inline, ps-fp16, ps-fp16-inline, ps-dgc-inline, ps-psgd2-inline, ps-psgd4-inline
#                   the counterparts that scripts/bench/replay.sh runs: fp16, and the
#                   settings above with --pipeline off; only when named in --settings
#   ddp-adamw, adamw-srv, adamw-srv-clip, adamw-wrk, adamw-wrk-clip
#                   where the user's optimizer steps (issue 47): DDP + torch.optim.AdamW,
#                   and top-k 1 % with AdamW through pc.DistributedOptimizer on the servers
#                   or on every worker (--update workers), each with and without clipping
#                   to a global norm of 1; only when named in --settings
# Every run: --batch 32 --seed 1 --eval none, the same --iters, --warmup and --threads.
# Networks: shm (Open MPI's shared memory; gloo has none, so DDP goes over TCP on the
# loopback) and 10gbit, 1gbit: every rank, DDP's gloo (MASTER_ADDR 127.0.0.1) and MPI's
# TCP alike, inside a private network namespace whose loopback is shaped with tbf (root
# only: as another user the shaped networks are skipped, said so). With --nodes N: on N
# emulated nodes instead (scripts/cluster/pc-cluster.sh, root), one rank per node
# (--map-by node: the workers on nodes 0..W-1, the server on node W, DDP's rank 0 and
# its rendezvous on node 0), every node's own veth link shaped to each rate of the
# networks node-1gbit, node-10gbit (default both); MPI's TCP and DDP's gloo over the same
# links (on nodes that share the machine's cores PipeCompress runs with --bind none: each
# node would pin its threads on the cores the others pin on). On each network and worker
# count the settings run in the order above, one after the other (with --repeat R, R such
# rounds), so that every ratio compares runs made minutes apart on the same machine.
#
#   scripts/bench/torch-ddp.sh [--nets "shm 1gbit"] [--nodes N] [--workers "2 4"]
#                              [--iters N] [--warmup N] [--threads N]
#                              [--arch cnn|lstm|resnet18|resnet50|vgg16|vit|replay:PATH]
#                              [--dilate K]
#                              [--settings "allreduce ps-none ..."] [--repeat R]
#                              [--compressors N|auto]
#                              [--data DIR|synthetic] [--timeout SECONDS] [--out DIR]
#
# --nets: any of shm, 10gbit, 1gbit (default "shm 1gbit"); with --nodes, node-1gbit and
# node-10gbit (default both), or node-RATE for any tc rate (node-2500mbit). --nodes: at
# least the most workers + 1. --workers: the worker
# counts (default 2). --iters: iterations of every run (default 300); --warmup: those left
# out of its rate (default 20; passed to the example). --threads: torch's threads per rank
# (default 1). --settings: the settings to run besides ddp (default all but the six
# counterparts; --list-settings prints every name, one a line). --repeat: rounds
# per network (default 1; the summary takes each setting's median). --arch replay:PATH: a
# GPU's compute replayed from the trace at PATH (doc/replay.md, "Through torch and DDP"):
# no data are read, the batch is the trace's, every setting but auto runs (the compute-only
# run is the replay's limit); the DDP settings' logs and the summary also give the peer's
# best case, its hooks' CPU work that a GPU would do removed. --dilate K (replay only,
# default 1): every replayed time x K, passed to every run (the runtime's --dilate K; the
# DDP hooks' CPU work followed by (K - 1) x its duration of sleep); rates are then per
# dilated second, and links should be shaped to rate / K (say so beside the figures).
# --compressors N|auto: compressor threads per worker (the runtime's --compressors, default
# 1), passed to every PipeCompress setting that can take a pool: the pipelined server
# settings and auto (the allreduce and the inline settings have one thread, and the
# runtime refuses a pool there); in the summary's header and JSON, and each run's
# meta.json ("compressors": what that run got). --data: Fashion-MNIST's
# IDX directory (default /usr/share/datasets/fashion-mnist), or synthetic (the example's;
# for tests). --timeout: the limit of each run (default 300 + 4 s per iteration): a run
# past it is reported failed, the others run.
# The library: $PIPECOMPRESS_LIB when set (nothing is built), else build/ (built here).
# Writes DIR/runs/NET-wW-SETTING.log (each run's whole output, its command on the first
# line; NET-wW-SETTING-rK.log with --repeat) and .meta.json, DIR/summary.txt (printed: per
# network and worker count each setting's samples per second from the example's "done:"
# line, its iteration, and its ratios to DDP, to the best of the DDP variants run and to
# the compute-only iteration) and DIR/summary.json (scripts/bench/torch_ddp_report.py).
# Default DIR: results/torch-ddp-DATE. Exit status: 0; 1 when a run failed (or gave no
# rate), after every run and the summary; 2 for a bad flag (one line).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

usage_error() {
    echo "torch-ddp.sh: $* (see --help)" >&2
    exit 2
}
# count FLAG VALUE MIN: VALUE is a whole number >= MIN.
count() {
    case $2 in *[!0-9]*|"") usage_error "$1: '$2' is not a number" ;; esac
    [ "$2" -ge "$3" ] || usage_error "$1: $2 is below $3"
}

# The placements' settings (issue 47: where the user's optimizer steps, and what it costs):
# torch.optim.AdamW through pc.DistributedOptimizer (the example's --optimizer adamw: the
# no-decay group, a warm-up then the cosine) on the servers or on every worker, with and
# without clipping to a global norm (on the servers: the norm they exchange; on the
# workers: torch's clip_grad_norm_ on the averaged gradient), top-k 1 % (its momentum
# correction off, as the wrapper makes it), beside DDP + the same AdamW.
ADAMW="--optimizer adamw --lr 0.001 --weight-decay 0.05 --lr-warmup 10"
# The settings, one row each: NAME|RANKS (1, w: the workers, w+1: and a server)|LABEL|the
# example's flags (DDP's port, and PowerSGD's start, are added per run; @PSSTART@ is that
# start less one: see ps-psgd above). setting_field NAME K: field K of NAME's row.
SETTINGS_TABLE="compute|1|compute only, 1 process|--backend local
ddp|w|DDP fp32|--backend ddp
ddp-fp16|w|DDP + fp16 hook|--backend ddp --ddp-hook fp16
ddp-psgd1|w|DDP + PowerSGD rank 1|--backend ddp --ddp-hook powersgd --powersgd-rank 1
ddp-psgd2|w|DDP + PowerSGD rank 2|--backend ddp --ddp-hook powersgd --powersgd-rank 2
ddp-psgd4|w|DDP + PowerSGD rank 4|--backend ddp --ddp-hook powersgd --powersgd-rank 4
allreduce|w|allreduce, none|--mode allreduce --compress none
ps-none|w+1|ps, none, pipelined|--mode ps --compress none --pipeline on
ps-topk|w+1|ps, topk 1%, pipelined|--mode ps --compress topk:ratio=0.01 --pipeline on
ps-topk-inline|w+1|ps, topk 1%, inline|--mode ps --compress topk:ratio=0.01 --pipeline off
ps-dgc|w+1|ps, dgc 0.1%, pipelined|--mode ps --compress dgc:ratio=0.001 --pipeline on
ps-psgd1|w+1|ps, PowerSGD rank 1|--mode ps --compress powersgd:rank=1,warmup=@PSSTART@ --pipeline on
ps-psgd2|w+1|ps, PowerSGD rank 2|--mode ps --compress powersgd:rank=2,warmup=@PSSTART@ --pipeline on
ps-psgd4|w+1|ps, PowerSGD rank 4|--mode ps --compress powersgd:rank=4,warmup=@PSSTART@ --pipeline on
auto|w+1|--mode auto|--mode auto --servers 1
ps-none-inline|w+1|ps, none, inline|--mode ps --compress none --pipeline off
ps-fp16|w+1|ps, fp16, pipelined|--mode ps --compress fp16 --pipeline on
ps-fp16-inline|w+1|ps, fp16, inline|--mode ps --compress fp16 --pipeline off
ps-dgc-inline|w+1|ps, dgc 0.1%, inline|--mode ps --compress dgc:ratio=0.001 --pipeline off
ps-psgd2-inline|w+1|ps, PowerSGD rank 2, inline|--mode ps --compress powersgd:rank=2,warmup=@PSSTART@ --pipeline off
ps-psgd4-inline|w+1|ps, PowerSGD rank 4, inline|--mode ps --compress powersgd:rank=4,warmup=@PSSTART@ --pipeline off
ddp-adamw|w|DDP + AdamW|--backend ddp $ADAMW
adamw-srv|w+1|topk, AdamW on servers|--mode ps --compress topk:ratio=0.01 --pipeline on $ADAMW
adamw-srv-clip|w+1|topk, AdamW+clip servers|--mode ps --compress topk:ratio=0.01 --pipeline on $ADAMW --clip-grad-norm 1
adamw-wrk|w+1|topk, AdamW on workers|--mode ps --compress topk:ratio=0.01 --pipeline on $ADAMW --update workers
adamw-wrk-clip|w+1|topk, AdamW+clip workers|--mode ps --compress topk:ratio=0.01 --pipeline on $ADAMW --update workers --clip-grad-norm 1"
setting_field() { awk -F'|' -v n="$1" -v k="$2" '$1 == n { print $k }' <<<"$SETTINGS_TABLE"; }
label_of() { setting_field "$1" 3; }
flags_of() { setting_field "$1" 4 | sed "s/@PSSTART@/$((psgd_start - 1))/g"; }
# np_of SETTING W: the ranks of SETTING with W workers.
np_of() {
    case $(setting_field "$1" 2) in 1) echo 1 ;; w) echo "$2" ;; w+1) echo $(($2 + 1)) ;; esac
}
# pool_of SETTING: the --compressors SETTING runs with: --compressors' value where it can
# take a pool (--mode ps --pipeline on, or --mode auto), else 1.
pool_of() {
    case $(flags_of "$1") in
    "--mode ps "*"--pipeline on"* | "--mode auto"*) echo "$compressors" ;;
    *) echo 1 ;;
    esac
}
# The settings run by default besides ddp (which always runs), in the table's order: all
# but the table's last eleven (EXTRA_SETTINGS: the inline and fp16 counterparts that
# scripts/bench/replay.sh asks for by name, and the placements' AdamW settings).
EXTRA_SETTINGS="ps-none-inline ps-fp16 ps-fp16-inline ps-dgc-inline ps-psgd2-inline ps-psgd4-inline"
EXTRA_SETTINGS+=" ddp-adamw adamw-srv adamw-srv-clip adamw-wrk adamw-wrk-clip"
ALL_SETTINGS=$(awk -F'|' -v x=" $EXTRA_SETTINGS " '$1 != "ddp" && index(x, " " $1 " ") == 0 { printf "%s%s", sep, $1; sep = " " }' <<<"$SETTINGS_TABLE")
ARCHS="cnn lstm resnet18 resnet50 vgg16 vit"
dilate=1
nets=""
nodes=""
workers=2
iters=300
warmup=20
threads=1
arch=cnn
settings=$ALL_SETTINGS
repeat=1
data=/usr/share/datasets/fashion-mnist
limit=""
out=""
compressors=1
while [ $# -gt 0 ]; do
    case $1 in
    --nets) pc_need "$1" "${2:-}"; nets=$2; shift ;;
    --nodes) pc_need "$1" "${2:-}"; nodes=$2; shift ;;
    --workers) pc_need "$1" "${2:-}"; workers=$2; shift ;;
    --iters) pc_need "$1" "${2:-}"; iters=$2; shift ;;
    --warmup) pc_need "$1" "${2:-}"; warmup=$2; shift ;;
    --threads) pc_need "$1" "${2:-}"; threads=$2; shift ;;
    --arch) pc_need "$1" "${2:-}"; arch=$2; shift ;;
    --dilate) pc_need "$1" "${2:-}"; dilate=$2; shift ;;
    --settings) pc_need "$1" "${2:-}"; settings=$2; shift ;;
    --repeat) pc_need "$1" "${2:-}"; repeat=$2; shift ;;
    --data) pc_need "$1" "${2:-}"; data=$2; shift ;;
    --timeout) pc_need "$1" "${2:-}"; limit=$2; shift ;;
    --out) pc_need "$1" "${2:-}"; out=$2; shift ;;
    --compressors) pc_need "$1" "${2:-}"; compressors=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    --list-settings) printf '%s\n' ddp $ALL_SETTINGS $EXTRA_SETTINGS; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
    esac
    shift
done
if [ -n "$nodes" ]; then
    count --nodes "$nodes" 2
    known="node-1gbit node-10gbit"
    nets=${nets:-$known}
    # Any rate tc writes (node-2500mbit, node-400mbit: scripts/bench/replay.sh's dilated
    # links) is a network of the emulated nodes too.
    for n in $nets; do
        [[ $n =~ ^node-[0-9]+(k|m|g)bit$ ]] && case " $known " in *" $n "*) ;; *) known="$known $n" ;; esac
    done
else
    known="shm 10gbit 1gbit"
    nets=${nets:-shm 1gbit}
fi
seen=" "
for n in $nets; do
    case " $known " in *" $n "*) ;;
        *) usage_error "--nets: unknown network '$n' (${known// /, }${nodes:+ with --nodes})" ;; esac
    case $seen in *" $n "*) usage_error "--nets: '$n' twice" ;; esac
    seen="$seen$n "
done
[ -n "${nets// /}" ] || usage_error "--nets: no network"
most=0
for w in $workers; do
    count --workers "$w" 1
    [ "$w" -gt "$most" ] && most=$w
done
[ "$most" -gt 0 ] || usage_error "--workers: no count"
[ -z "$nodes" ] || [ "$nodes" -gt "$most" ] ||
    usage_error "--nodes $nodes: $most workers and a server need $((most + 1)) nodes"
for s in $settings; do
    case " $ALL_SETTINGS $EXTRA_SETTINGS ddp " in *" $s "*) ;; *) usage_error "--settings: unknown setting '$s' ($ALL_SETTINGS $EXTRA_SETTINGS)" ;; esac
done
batch=32
case $arch in
replay:*)
    [ -f "${arch#replay:}" ] || usage_error "--arch $arch: no file ${arch#replay:}"
    case " $settings " in *" auto "*)
        [ "$settings" = "$ALL_SETTINGS" ] || usage_error "--settings: auto cannot replay (its probe would profile sleeps)"
        settings=${settings/ auto/} ;;
    esac
    batch=$(/usr/bin/python3 -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["batch"]))' "${arch#replay:}" 2>/dev/null) ||
        usage_error "--arch $arch: no batch in it (run apps/examples/torch_train.py --arch $arch --backend local for the trace's error)"
    ;;
*)
    case " $ARCHS " in *" $arch "*) ;; *) usage_error "--arch: '$arch' is not one of ${ARCHS// /, }, replay:PATH" ;; esac
    [ "$dilate" = 1 ] || usage_error "--dilate: only with --arch replay:PATH"
    ;;
esac
case $dilate in ''|*[!0-9.]*|*.*.*|.*|*.) usage_error "--dilate: '$dilate' is not a number" ;; esac
awk -v k="$dilate" 'BEGIN { exit !(k >= 1 && k <= 1000) }' || usage_error "--dilate: $dilate is not in 1..1000"
case $compressors in
auto) ;;
*[!0-9]*|""|0*) usage_error "--compressors: '$compressors' is not a number of threads (1 to 64) or auto" ;;
*) [ "$compressors" -le 64 ] || usage_error "--compressors: $compressors is above 64" ;;
esac
count --iters "$iters" 1
count --warmup "$warmup" 0
count --threads "$threads" 1
count --repeat "$repeat" 1
[ -z "$limit" ] || count --timeout "$limit" 1
[ "$iters" -gt "$warmup" ] || usage_error "--iters ($iters) must exceed --warmup ($warmup)"
[ -z "$nodes" ] || [ "$(id -u)" = 0 ] || usage_error "--nodes needs root (network namespaces)"
[ "$data" = synthetic ] || [ -d "$data" ] || [[ $arch == replay:* ]] ||
    usage_error "--data: no directory $data (Debian package dataset-fashion-mnist)"
limit=${limit:-$((300 + 4 * iters))}
psgd_start=$((warmup > 2 ? warmup : 2))
out=${out:-$PC_TOP/results/torch-ddp-$(date +%Y-%m-%d)}
# The fixed order: the table's, ddp always in it.
order=""
for s in $(awk -F'|' '{ print $1 }' <<<"$SETTINGS_TABLE"); do
    case " $settings ddp " in *" $s "*) order="$order $s" ;; esac
done

pc_setup iproute2
py=/usr/bin/python3 # Debian's, with Debian's torch (python3-torch)
pc_torch_prereqs "$py"
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
cluster=""
pcc="$PC_TOP/scripts/cluster/pc-cluster.sh"
cleanup() {
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
    ns=""
    [ -n "$cluster" ] && "$pcc" down "$cluster" >/dev/null 2>&1
    cluster=""
    true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
master=127.0.0.1 # DDP's rendezvous: node 0's address on emulated nodes
bind=()           # PipeCompress's thread placement flag, where it must not pin
if [ -n "$nodes" ]; then
    cluster="$out/cluster"
    "$pcc" down "$cluster" >/dev/null 2>&1 || true
    rm -rf "$cluster"
    first=${nets%% *}
    "$pcc" up "$cluster" --nodes "$nodes" --link "${first#node-}" >"$out/cluster.txt"
    cat "$out/cluster.txt"
    master=$(awk 'NR == 1 { print $2 }' "$cluster/nodes")
    # Nodes that share the machine's cores (fewer cores than nodes: pc-cluster.sh's "all")
    # would each plan "their" cores with hwloc and pin their threads on the same ones
    # (measured: every worker's backprop thread on core 0, the ViT's iteration doubled),
    # while DDP's threads float: PipeCompress runs unbound there, as DDP does.
    if [ "$(awk 'NR == 1 { print $6 }' "$cluster/nodes")" = all ]; then
        bind=(--bind none)
        pc_say "the emulated nodes share the machine's cores: PipeCompress runs with --bind none"
    fi
fi

# setup_net NET: a namespace with its loopback shaped to NET's rate (none for shm), the
# previous one deleted; on emulated nodes every node's link reshaped. The same rates and
# bursts as scripts/bench/e2e.sh.
setup_net() {
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
    ns=""
    case $1 in
    shm) return 0 ;;
    node-*)
        local k
        for k in $(seq 0 $((nodes - 1))); do "$pcc" link "$cluster" "$k" shape "${1#node-}"; done
        return 0 ;;
    esac
    ns="pc-torch-ddp-$$"
    pc_shaped_netns "$ns" "$1"
}

# in_rank0 CMD...: CMD where rank 0 runs (its namespace or node).
in_rank0() {
    if [ -n "$cluster" ]; then
        "$pcc" exec "$cluster" 0 "$@"
    else
        "${pre[@]}" "$@"
    fi
}

# next_ddp_port: sets port to a TCP port for gloo's rendezvous that nothing holds now
# where rank 0 runs, a new one for every DDP run: a socket the previous run left
# (TIME_WAIT) cannot collide with it. Ports from 29600 + a slot of this script's pid, so
# that two invocations at once start apart.
ddp_next=$((29600 + $$ % 4000 * 8))
next_ddp_port() {
    local p
    for p in $(seq "$ddp_next" $((ddp_next + 200))); do
        if in_rank0 "$py" -c 'import socket,sys; socket.socket().bind((sys.argv[2], int(sys.argv[1])))' \
            "$p" "$master" 2>/dev/null; then
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

# run_one NET W SETTING NAME NETIDX SETIDX ROUND: one run, its log and meta.json.
run_one() {
    local net=$1 w=$2 s=$3 name=$4 np cmd line failed t0 t1 rate launch
    np=$(np_of "$s" "$w")
    # shellcheck disable=SC2207 # flags_of's words
    cmd=("$py" "$example" --arch "$arch" --data "$data" --eval none --iters "$iters"
         --warmup "$warmup" --threads "$threads" --batch 32 --seed 1 $(flags_of "$s"))
    [ "$dilate" = 1 ] || cmd+=(--dilate "$dilate")
    [ "$(pool_of "$s")" = 1 ] || cmd+=(--compressors "$(pool_of "$s")")
    # A replay's PipeCompress runs keep the runtime's metrics (compression time, bytes) for
    # scripts/bench/replay_report.py.
    case $arch,$(flags_of "$s") in replay:*,--mode*) cmd+=(--metrics "$runs/$name.metrics.jsonl") ;; esac
    case $s in ddp-psgd*) cmd+=(--powersgd-start "$psgd_start") ;; esac
    case $(flags_of "$s") in --backend*) ;; *) cmd+=("${bind[@]}") ;; esac
    if [[ $(flags_of "$s") == "--backend ddp"* ]]; then
        next_ddp_port
        cmd+=(--ddp-port "$port")
    fi
    if [ -n "$cluster" ]; then
        launch=(timeout "$limit" "$pcc" mpirun "$cluster" -np "$np" --map-by node
                -x MASTER_ADDR="$master" -x GLOO_SOCKET_IFNAME=eth0)
        line="scripts/cluster/pc-cluster.sh mpirun CLUSTER -np $np --map-by node -x MASTER_ADDR=$master -x GLOO_SOCKET_IFNAME=eth0 ${cmd[*]#"$PC_TOP"/}"
    else
        launch=("${pre[@]}" env "${env[@]}" "$PC_TOP/scripts/pc-mpirun.sh" -t "$limit" -np "$np")
        line="${pre[*]:+${pre[*]} }env ${env[*]} scripts/pc-mpirun.sh -t $limit -np $np ${cmd[*]#"$PC_TOP"/}"
    fi
    printf '== %-30s %-24s ' "$name" "$(label_of "$s")"
    echo "\$ $line" >"$runs/$name.log" # what ran, from the source tree
    failed=""
    t0=$(date +%s%N)
    "${launch[@]}" "${cmd[@]}" >>"$runs/$name.log" 2>&1 || failed="exit status $?"
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
    "$py" -c 'import json,sys; a=sys.argv; json.dump({"name": a[1], "net": a[2], "net_index": int(a[3]), "setting": a[4], "setting_index": int(a[5]), "repeat": int(a[6]), "label": a[7], "flags": a[8], "np": int(a[9]), "workers": int(a[10]), "batch": int(a[21]), "dilate": float(a[22]), "seed": 1, "arch": a[11], "iters": int(a[12]), "warmup": int(a[13]), "threads": int(a[14]), "limit_s": int(a[15]), "wall_s": int(a[16]) / 1e9, "failed": a[17] or None, "command": a[18], "nodes": int(a[19]) if a[19] else None, "compressors": a[23], "pool": a[24]}, open(a[20], "w"), indent=1)' \
        "$name" "$net" "$5" "$s" "$6" "$7" "$(label_of "$s")" "$(flags_of "$s")" "$np" "$w" \
        "$arch" "$iters" "$warmup" "$threads" "$limit" $((t1 - t0)) "$failed" "$line" \
        "$nodes" "$runs/$name.meta.json" "$batch" "$dilate" "$(pool_of "$s")" "$compressors"
}

failures=0
start=$(date +%s)
dil=""
[ "$dilate" = 1 ] || dil=", dilation $dilate"
[ "$compressors" = 1 ] || dil="$dil, --compressors $compressors (the pipelined server settings and auto)"
pc_say "$arch, workers: $workers, batch $batch$dil, $iters iterations ($warmup warm-up), $threads torch thread(s) per rank, limit $limit s per run${nodes:+, one rank per emulated node ($nodes nodes)}; runs in $runs"
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
    for w in $workers; do
        for r in $(seq "$repeat"); do
            setidx=0
            for s in $order; do
                name="$net-w$w-$s"
                [ "$repeat" -gt 1 ] && name="$name-r$r"
                run_one "$net" "$w" "$s" "$name" "$netidx" "$setidx" "$r"
                setidx=$((setidx + 1))
            done
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
