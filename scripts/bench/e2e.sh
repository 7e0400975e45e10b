#!/usr/bin/env bash
# e2e.sh: end-to-end iteration time of pc-train, side by side in one run:
#   1 dense MPI_Allreduce (the Horovod-style baseline), 2 parameter servers without
#   compression, 3 top-k 1% inline, 4 top-k 1% pipelined (PipeCompress; both with the
#   defaults: momentum on the workers, plain SGD on O(nnz) entries on the servers, sparse
#   pulls), 5 DGC 0.1% pipelined (same defaults), 6 top-k 1% pipelined with the earlier
#   design: momentum on the servers, which touch and push back every parameter; 7 --mode
#   auto, on the ranks of modes 2-6 and 8 (it measures at start-up and picks one of 1, 2, 4, 5,
#   6, 8: the allreduce then on every rank; the report compares it by samples per second);
#   8 PowerSGD rank 2 pipelined (momentum on the servers, each weight matrix in two rounds);
# for the wide and cnn models, with 1 and 2 workers (+ 1 server for modes 2-8), under
# three networks: shared memory; TCP over a loopback shaped to 10 Gbit/s and to 1 Gbit/s
# inside a private network namespace (root only; every rank shares that one link).
# With --nodes N: on N emulated nodes instead (scripts/cluster/pc-cluster.sh, root), one
# rank per node (--map-by node: the workers on nodes 0..W-1, the server on node W), each
# node with its own link shaped to each rate of --link (default "1gbit 10gbit"; the
# networks are then named node-RATE); N must be at least the most workers + 1.
#
#   scripts/bench/e2e.sh [--quick] [--out DIR] [--models "wide cnn"] [--nets "shm 10g 1g"]
#                        [--workers "1 2"] [--iters N] [--warmup N] [--predict]
#                        [--nodes N [--link "RATE[,DELAY] ..."]] [--batch N] [--modes "1 3 4"]
#                        [--device cpu|cuda|emulate [--compress-on gpu|cpu]] [--build DIR]
#
# --device cuda trains on each worker's GPU (pc-train --device cuda, every mode; mode 7,
# whose cost model profiles on the CPU, is left out); --compress-on (default gpu) says
# where the workers compress, for every mode but 1, which compresses nothing; emulate: the
# same through the host emulation, for tests without a GPU. --batch: per worker
# (default 32). --modes: a subset of 1-8. --build DIR: the programs of an existing build
# (as scripts/gpu-check.sh makes), without installing packages or building.
#
# --predict: before each (model, network, workers) group, `pc-bench model --predict W,1,all`
# on the ranks and nodes of modes 2-8 (W + 1 ranks, the same network: every rank profiles
# the model at once, rank 0 measures the link to another node, the codecs and the server)
# predicts the seven modes (pc_cost, doc/scaling.md); the tables then show each prediction
# beside its measurement, and mode 7's own prediction of its choice.
# --quick: wide only, 6 iterations (2 of warm-up), shared memory with 1 and 2 workers and
# 1 Gbit/s with 2 workers (about 3 minutes here). Writes DIR/runs/* (metrics and logs of every run),
# DIR/e2e.json (scripts/bench/e2e_report.py) and DIR/*.png (scripts/plot.py e2e); prints
# the tables. Default DIR: results/e2e-DATE.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

quick=0
models="wide cnn"
nets="shm 10g 1g"
workers="1 2"
iters=""
warmup=3
out=""
nodes=""
links="1gbit 10gbit"
predict=0
batch=32
modes=""
device=cpu
compress_on=""
build=""
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --models) models=${2:?}; shift ;;
    --nets) nets=${2:?}; shift ;;
    --workers) workers=${2:?}; shift ;;
    --iters) iters=${2:?}; shift ;;
    --warmup) warmup=${2:?}; shift ;;
    --nodes) nodes=${2:?--nodes needs a count}; shift ;;
    --link) links=${2:?--link needs rates}; shift ;;
    --predict) predict=1 ;;
    --batch) batch=${2:?--batch needs a number}; shift ;;
    --modes) modes=${2:?--modes needs a list}; shift ;;
    --device) device=${2:?--device needs cpu or cuda}; shift ;;
    --compress-on) compress_on=${2:?--compress-on needs gpu or cpu}; shift ;;
    --build) build=${2:?--build needs a directory}; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "e2e.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
# Mode 7 (--mode auto) profiles on the CPU and refuses device tensors: not by default there.
[ -n "$modes" ] || { [ "$device" = cpu ] && modes="1 2 3 4 5 6 7 8" || modes="1 2 3 4 5 6"; }
case " $modes " in *" 7 "*) [ "$device" = cpu ] || { echo "e2e.sh: --modes: mode 7 (--mode auto) takes no --device $device" >&2; exit 2; } ;; esac
case $batch in '' | *[!0-9]* | 0) echo "e2e.sh: --batch: '$batch' is not a positive number" >&2; exit 2 ;; esac
for m in $modes; do case $m in [1-8]) ;; *) echo "e2e.sh: --modes: '$m' is not a mode 1..8" >&2; exit 2 ;; esac; done
# Mode 8 (powersgd) has no CUDA kernels (emulate runs the device codec's CPU path).
case " $modes " in *" 8 "*) [ "$device" != cuda ] || [ "$compress_on" = cpu ] || { echo "e2e.sh: --modes: mode 8 (powersgd) has no CUDA kernels: add --compress-on cpu" >&2; exit 2; } ;; esac
case $device in cpu | cuda | emulate) ;; *) echo "e2e.sh: --device: '$device' is not cpu, cuda or emulate" >&2; exit 2 ;; esac
case $compress_on in "" | gpu | cpu) ;; *) echo "e2e.sh: --compress-on: '$compress_on' is not gpu or cpu" >&2; exit 2 ;; esac
[ -n "$compress_on" ] && [ "$device" = cpu ] && { echo "e2e.sh: --compress-on needs --device cuda or emulate" >&2; exit 2; }
[ -z "$build" ] || [ -x "$build/apps/pc-train" ] || { echo "e2e.sh: --build: no $build/apps/pc-train" >&2; exit 2; }
for m in $models; do case $m in wide|cnn|mlp) ;; *) echo "e2e.sh: --models: unknown model '$m'" >&2; exit 2 ;; esac; done
if [ -n "$nodes" ]; then
    case $nodes in *[!0-9]*|"") echo "e2e.sh: --nodes: '$nodes' is not a number" >&2; exit 2 ;; esac
    for w in $workers; do
        [ "$nodes" -gt "$w" ] || { echo "e2e.sh: --nodes $nodes: $w workers and a server need $((w + 1)) nodes" >&2; exit 2; }
    done
    [ "$(id -u)" = 0 ] || { echo "e2e.sh: --nodes needs root (network namespaces)" >&2; exit 2; }
    nets=""
    for l in $links; do nets="$nets node-$l"; done
fi
for n in $nets; do case $n in shm|10g|1g|node-*) ;; *) echo "e2e.sh: --nets: unknown network '$n' (shm, 10g, 1g)" >&2; exit 2 ;; esac; done
for w in $workers; do case $w in 1|2|3|4) ;; *) echo "e2e.sh: --workers: '$w' is not 1..4" >&2; exit 2 ;; esac; done
if [ $quick = 1 ]; then
    models=wide
    nets="shm 1g"
    iters=${iters:-6}
    warmup=2
fi
iters=${iters:-15}
case $iters in *[!0-9]*|"") echo "e2e.sh: --iters: '$iters' is not a number" >&2; exit 2 ;; esac
[ "$iters" -gt "$warmup" ] || { echo "e2e.sh: --iters must exceed --warmup ($warmup)" >&2; exit 2; }
out=${out:-$PC_TOP/results/e2e-$(date +%Y-%m-%d)}

if [ -n "$build" ]; then
    build=$(cd "$build" && pwd)
else
    pc_setup iproute2
    pc_build build
    build=$PC_TOP/build
fi
train="$build/apps/pc-train"
# Where the workers' tensors live (and compress), for every mode but the allreduce, which
# has nothing to compress (--compress-on would be refused there).
dev_flags=(--device "$device")
[ -n "$compress_on" ] && comp_flags=(--compress-on "$compress_on") || comp_flags=()
runs="$out/runs"
mkdir -p "$runs"
rm -f "$runs"/*

if [ "$(id -u)" != 0 ]; then
    case " $nets " in *" 10g "*|*" 1g "*)
        pc_say "not root: network namespaces are unavailable; shaped networks skipped"
        nets=shm ;;
    esac
fi
ns=""
cluster=""
pcc="$PC_TOP/scripts/cluster/pc-cluster.sh"
cleanup() {
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
    [ -n "$cluster" ] && "$pcc" down "$cluster" >/dev/null 2>&1
    true
}
trap cleanup EXIT
if [ -n "$nodes" ]; then
    cluster="$out/cluster"
    "$pcc" down "$cluster" >/dev/null 2>&1 || true
    "$pcc" up "$cluster" --nodes "$nodes" --link "${links%% *}" | tee "$out/cluster.txt"
fi

# setup_net NET: a namespace with its loopback shaped (or none for shared memory); on
# emulated nodes, every node's link reshaped to the rate.
setup_net() {
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
    ns=""
    case $1 in
    node-*)
        local k
        for k in $(seq 0 $((nodes - 1))); do "$pcc" link "$cluster" "$k" shape "${1#node-}"; done
        return 0 ;;
    shm) return 0 ;;
    10g) rate=10gbit ;;
    1g) rate=1gbit ;;
    esac
    ns="pc-e2e-$$"
    pc_shaped_netns "$ns" "$rate"
}

label_of() {
    case $1 in
    1) echo "allreduce, dense" ;;
    2) echo "ps, none" ;;
    3) echo "ps, topk 1%, inline" ;;
    4) echo "ps, topk 1%, pipelined" ;;
    5) echo "ps, dgc 0.1%, pipelined" ;;
    6) echo "ps, topk 1%, pipelined, server mom" ;;
    7) echo "auto (--mode auto)" ;;
    8) echo "ps, powersgd rank 2, pipelined" ;;
    esac
}

flags_of() {
    case $1 in
    1) echo "--mode allreduce --compress none" ;;
    2) echo "--compress none" ;;
    3) echo "--compress topk:ratio=0.01 --pipeline off" ;;
    4) echo "--compress topk:ratio=0.01 --pipeline on" ;;
    5) echo "--compress dgc:ratio=0.001 --pipeline on" ;;
    6) echo "--compress topk:ratio=0.01,momentum=0 --momentum 0.9 --pipeline on" ;;
    7) echo "--mode auto" ;;
    8) echo "--compress powersgd:rank=2 --pipeline on" ;;
    esac
}

start=$(date +%s)
for model in $models; do
    for net in $nets; do
        setup_net "$net"
        for w in $workers; do
            [ $quick = 1 ] && [ "$w" = 1 ] && [ "$net" != shm ] && continue
            if [ $predict = 1 ]; then
                # The model's prediction of the seven modes below, from rates measured now.
                env=(OMPI_MCA_btl=self,vader)
                pre=()
                if [ -n "$ns" ]; then
                    env=(OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo)
                    pre=(ip netns exec "$ns")
                fi
                name="$model-$net-w$w"
                printf '== %-24s %-38s ' "$name" "pc-bench model --predict $w,1,all"
                probe=("$build/apps/pc-bench" model --model "$model" --batch 32 --reps 3
                       --predict "$w,1,all")
                if [ -n "$cluster" ]; then # one rank per node, as the runs: the per-node link
                    launch=(timeout 900 "$pcc" mpirun "$cluster" -np $((w + 1)) --map-by node)
                else
                    launch=("${pre[@]}" env "${env[@]}" "$PC_TOP/scripts/pc-mpirun.sh" -t 900 -np $((w + 1)))
                fi
                "${launch[@]}" "${probe[@]}" >"$runs/$name.predict" 2>&1 && echo ok ||
                    { echo "failed (the report goes without it)"; tail -n 3 "$runs/$name.predict" >&2; }
            fi
            for mode in $modes; do
                np=$((mode == 1 ? w : w + 1))
                name="$model-$net-w$w-m$mode"
                extra=("${dev_flags[@]}")
                [ "$mode" != 1 ] && extra+=("${comp_flags[@]}")
                # Enough samples for every iteration's batches (no epoch boundary inside).
                samples=$(( batch * w * (iters + 1) > 4000 ? batch * w * (iters + 1) : 4000 ))
                # shellcheck disable=SC2046
                cmd=("$train" --model "$model" --data synthetic --synthetic-samples "$samples"
                     --batch "$batch" --iters "$iters" --seed 42 --lr 0.01 --timeout 600
                     --log-level warn --metrics "$runs/$name.jsonl" $(flags_of $mode) "${extra[@]}")
                env=(OMPI_MCA_btl=self,vader)
                pre=()
                if [ -n "$ns" ]; then
                    env=(OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo)
                    pre=(ip netns exec "$ns")
                fi
                printf '== %-24s %-38s ' "$name" "$(label_of $mode)"
                t0=$(date +%s%N)
                failed=""
                if [ -n "$cluster" ]; then
                    timeout 900 "$pcc" mpirun "$cluster" -np "$np" --map-by node "${cmd[@]}" \
                        >"$runs/$name.log" 2>&1 || failed="exit status $?"
                else
                    "${pre[@]}" env "${env[@]}" "$PC_TOP/scripts/pc-mpirun.sh" -t 900 -np "$np" "${cmd[@]}" \
                        >"$runs/$name.log" 2>&1 || failed="exit status $?"
                fi
                t1=$(date +%s%N)
                printf '%6d s %s\n' $(( (t1 - t0) / 1000000000 )) "${failed:-ok}"
                # pc-train's own line says why (Open MPI's banner follows it).
                [ -n "$failed" ] && { grep -m 3 '^pc-train:' "$runs/$name.log" || tail -n 3 "$runs/$name.log"; } >&2
                python3 -c 'import json,sys; a=sys.argv; json.dump({"name": a[1], "model": a[2], "net": a[3], "workers": int(a[4]), "mode": int(a[5]), "label": a[6], "flags": a[7], "np": int(a[8]), "iters": int(a[9]), "warmup": int(a[10]), "failed": a[11] or None, "batch": int(a[13]), "device": a[14]}, open(a[12], "w"))' \
                    "$name" "$model" "$net" "$w" "$mode" "$(label_of $mode)" "$(flags_of $mode) ${extra[*]}" "$np" \
                    "$iters" "$warmup" "$failed" "$runs/$name.meta.json" "$batch" "$device${compress_on:+, compress on $compress_on}"
            done
        done
    done
done
cleanup
ns=""
cluster=""
pc_say "all runs in $(( $(date +%s) - start )) s"
python3 "$PC_TOP/scripts/bench/e2e_report.py" "$runs" "$out/e2e.json"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    "$PC_TOP/scripts/plot.py" e2e "$out/e2e.json" --out "$out/e2e"
else
    pc_say "python3-matplotlib missing: no charts"
fi
