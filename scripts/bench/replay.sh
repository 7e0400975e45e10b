#!/usr/bin/env bash
# replay.sh: the GPU regime on this CPU machine (issue 45). Each trace's per-layer GPU
# compute is replayed (doc/replay.md: sleeps of the trace's times, no model computed);
# the network (emulated nodes with shaped veth links), compression, the servers and DDP
# are real. For every trace, per-node link rate and worker count, scripts/bench/torch-ddp.sh
# runs DDP (fp32, + fp16 hook, + PowerSGD hook), PipeCompress's settings and the
# compute-only replay (the limit) side by side on the same emulated nodes, and
# scripts/bench/replay_report.py turns the runs into tables and charts.
#
# Time dilation: these veth links carry about --carry Gbit/s at most (doc/cluster.md,
# "What the links carry"). A rate R above it runs with dilation K = R / carry: links
# shaped to R / K, every replayed time x K, the runtime's CPU work (compression, the
# servers' steps) and the DDP hooks' CPU work followed by (K - 1) x their duration of
# sleep; the figures are divided by K again. K is printed beside every figure.
#
#   scripts/bench/replay.sh [--traces "traces/resnet50-a100-amp.json ..."]
#                           [--rates "1 2.5 10 25"] [--carry GBPS] [--min-dilate K]
#                           [--workers "2 4"] [--iters N] [--warmup N]
#                           [--settings "ps-topk ps-topk-inline ..."] [--out DIR]
#                           [--compressors N|auto]
#
# --traces: trace files (default: ResNet-50, VGG-16 and BERT-base on an A100 with AMP,
# from traces/). --rates: per-node link rates in Gbit/s (default "1 2.5 10 25").
# --carry: the fastest rate the links carry here, Gbit/s (default 2.5: links.sh on a quiet
# machine, doc/cluster.md). --min-dilate: the least K (default 2: the 2 cores are then
# busy at most half the time with the runtime's and the hooks' CPU work). --workers: worker counts (default
# "2 4"; the emulated nodes are the most workers + 1). --iters, --warmup: per run
# (default 6 and 2). --settings: torch-ddp.sh's settings besides ddp (default "compute
# ddp-psgd4 ps-topk ps-topk-inline ps-dgc": compute only, DDP + PowerSGD hook rank 4, and
# PipeCompress's top-k 1 % pipelined and inline and DGC 0.1 % pipelined; every name:
# scripts/bench/torch-ddp.sh --list-settings; an unknown one is refused before any run).
# The rest of the issue's grid is pruned where ResNet-50's full grid
# (doc/results/replay-2026-12-06, every setting at every rate) showed it dominated in
# every cell: DDP + fp16 hook (ddp-fp16; even at its best case never the fastest peer),
# PipeCompress's allreduce (allreduce; slower than DDP fp32 but at 25 Gbit/s, 2 workers,
# where it is within 2 %), servers without compression and with fp16 (ps-none, ps-fp16;
# slower than the allreduce everywhere: the server's link carries every worker's dense
# push and pull), our PowerSGD rank 4 (ps-psgd4; slower than our DGC everywhere), and the
# inline counterparts but top-k's (ps-dgc-inline, ps-psgd4-inline, ...; top-k's pair
# answers the pipelining question). PowerSGD rank 2, either side (ddp-psgd2, ps-psgd2),
# was never run: rank 4 stands for it. Any of them by name in --settings.
# DDP fp32 always runs (every ratio's base). --compressors N|auto: compressor threads per
# worker of PipeCompress's pipelined settings (torch-ddp.sh's flag, default 1; in
# replay.txt and so in the summary's head). The library: $PIPECOMPRESS_LIB when set,
# else build/ (built first, as torch-ddp.sh does). --out: the results
# (default results/replay-DATE): one torch-ddp.sh directory per trace and rate
# (MODEL-RATEg/), then DIR/summary.txt, DIR/summary.json and DIR/MODEL.png; an existing
# DIR accumulates (a cell run again replaces its own; the summary covers every cell).
# Needs root (emulated nodes). Exit status: 0; 1 when a run failed (after every run and
# the report); 2 for a bad flag (one line).
set -euo pipefail
. "$(dirname "$0")/../lib.sh"

usage_error() {
    echo "replay.sh: $* (see --help)" >&2
    exit 2
}
# positive FLAG VALUE: VALUE is a positive decimal number.
positive() {
    case $2 in ''|*[!0-9.]*|*.*.*|.*|*.) usage_error "$1: '$2' is not a number" ;; esac
    awk -v v="$2" 'BEGIN { exit !(v > 0) }' || usage_error "$1: $2 is not positive"
}

traces="$PC_TOP/traces/resnet50-a100-amp.json $PC_TOP/traces/vgg16-a100-amp.json $PC_TOP/traces/bert-base-a100-amp.json"
rates="1 2.5 10 25"
carry=2.5
min_dilate=2
workers="2 4"
iters=6
warmup=2
settings="compute ddp-psgd4 ps-topk ps-topk-inline ps-dgc"
out=""
compressors=1
while [ $# -gt 0 ]; do
    case $1 in
    --traces) pc_need "$1" "${2:-}"; traces=$2; shift ;;
    --rates) pc_need "$1" "${2:-}"; rates=$2; shift ;;
    --carry) pc_need "$1" "${2:-}"; carry=$2; shift ;;
    --min-dilate) pc_need "$1" "${2:-}"; min_dilate=$2; shift ;;
    --workers) pc_need "$1" "${2:-}"; workers=$2; shift ;;
    --iters) pc_need "$1" "${2:-}"; iters=$2; shift ;;
    --warmup) pc_need "$1" "${2:-}"; warmup=$2; shift ;;
    --settings) pc_need "$1" "${2:-}"; settings=$2; shift ;;
    --out) pc_need "$1" "${2:-}"; out=$2; shift ;;
    --compressors) pc_need "$1" "${2:-}"; compressors=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
    esac
    shift
done
for t in $traces; do [ -f "$t" ] || usage_error "--traces: no file $t"; done
[ -n "${traces// /}" ] || usage_error "--traces: no trace"
[ -n "${rates// /}" ] || usage_error "--rates: no rate"
for r in $rates; do positive --rates "$r"; done
positive --carry "$carry"
positive --min-dilate "$min_dilate"
awk -v k="$min_dilate" 'BEGIN { exit !(k >= 1) }' || usage_error "--min-dilate: $min_dilate is below 1"
[ -n "${settings// /}" ] || usage_error "--settings: no setting"
known=$("$PC_TOP/scripts/bench/torch-ddp.sh" --list-settings | tr '\n' ' ')
known=${known% }
for s in $settings; do
    case " $known " in *" $s "*) ;; *) usage_error "--settings: unknown setting '$s' (one of: $known)" ;; esac
done
most=0
for w in $workers; do
    case $w in ''|*[!0-9]*) usage_error "--workers: '$w' is not a number" ;; esac
    [ "$w" -ge 1 ] || usage_error "--workers: $w is below 1"
    [ "$w" -gt "$most" ] && most=$w
done
[ "$most" -gt 0 ] || usage_error "--workers: no count"
case $compressors in
auto) ;;
*[!0-9]*|""|0*) usage_error "--compressors: '$compressors' is not a number of threads (1 to 64) or auto" ;;
*) [ "$compressors" -le 64 ] || usage_error "--compressors: $compressors is above 64" ;;
esac
[ "$(id -u)" = 0 ] || usage_error "needs root (the emulated nodes are network namespaces)"
out=${out:-$PC_TOP/results/replay-$(date +%Y-%m-%d)}
mkdir -p "$out"
# --out accumulates: each run appends its block to replay.txt, and each cell it runs
# replaces that cell's line in cells.txt (the cell's folder is rewritten by torch-ddp.sh),
# so the summary covers every cell the folder holds, however many runs made them.
touch "$out/cells.txt" "$out/replay.txt"

# dilation R: K = max(min-dilate, R / carry), 2 decimals; shaped R: the link's tc rate,
# R / K in whole Mbit/s.
dilation() { awk -v r="$1" -v c="$carry" -v m="$min_dilate" 'BEGIN { k = r / c; if (k < m) k = m; printf "%.2f", k }'; }
shaped() { awk -v r="$1" -v k="$2" 'BEGIN { printf "%dmbit", r * 1000 / k + 0.5 }'; }

failed=0
start=$(date +%s)
sep=""
[ -s "$out/replay.txt" ] && sep=1 # a blank line between this run's block and the last's
{
    [ -z "$sep" ] || echo
    echo "replay.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$PC_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "traces: $traces"
    echo "rates (Gbit/s): $rates; carry $carry; min dilation $min_dilate; workers $workers; iters $iters (warm-up $warmup)"
    echo "settings: ddp $settings; --compressors $compressors (the pipelined server settings)"
    echo "machine: $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >>"$out/replay.txt"
for t in $traces; do
    model=$(basename "$t" .json)
    for r in $rates; do
        k=$(dilation "$r")
        link=$(shaped "$r" "$k")
        dir="$out/$model-${r}g"
        pc_say "$model at $r Gbit/s per node: dilation $k, links shaped to $link"
        awk -v m="$model" -v r="$r" '!($1 == m && $2 == r)' "$out/cells.txt" >"$out/cells.txt.tmp" &&
            echo "$model $r $k $link" >>"$out/cells.txt.tmp" &&
            mv "$out/cells.txt.tmp" "$out/cells.txt"
        "$PC_TOP/scripts/bench/torch-ddp.sh" --arch "replay:$t" --dilate "$k" \
            --nodes $((most + 1)) --nets "node-$link" --workers "$workers" \
            --iters "$iters" --warmup "$warmup" --settings "$settings" \
            --compressors "$compressors" --out "$dir" ||
            failed=1
    done
done
echo "all runs in $(( $(date +%s) - start )) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/replay.txt"
report=0
/usr/bin/python3 "$PC_TOP/scripts/bench/replay_report.py" "$out" || report=$?
[ "$failed" = 0 ] && [ "$report" = 0 ] || exit 1
