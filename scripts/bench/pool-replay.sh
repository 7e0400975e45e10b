#!/usr/bin/env bash
# scripts/bench/pool-replay.sh: the compressor pool in the GPU regime, replayed (issue 46).
# One worker and one server (pc-train --model replay:TRACE: the trace's per-layer GPU times
# held as sleeps, everything else real: the fold, the codec, the sends, the server) run once
# per --compressors value, side by side in one invocation; from each run's metrics the
# medians after --warmup of the iteration, of the busiest compressor thread's time
# (t_compress_busy: what bounds the pipeline) and of the pool's summed CPU time
# (t_compress), and the busiest thread's time over the first value's.
#   scripts/bench/pool-replay.sh [--trace FILE] [--compress SPEC] [--compressors "1 2"]
#                                [--iters N] [--warmup N] [--dilate K] [--out DIR]
# Defaults: traces/resnet50-a100-amp.json, topk:ratio=0.01, "1 2", 40 iterations, 10 of
# them warm-up, dilation 1, results/pool-replay-DATE. The program: $PC_TRAIN, else
# build/apps/pc-train. Writes DIR/summary.txt (printed too), DIR/runs/N.log and N.jsonl.
# Exit status: 0; 1 when a run failed; 2 for a bad flag (one line).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
usage_error() { echo "pool-replay.sh: $*" >&2; exit 2; }
. "$(dirname "$0")/../lib.sh"
trace=$top/traces/resnet50-a100-amp.json
compress=topk:ratio=0.01
pools="1 2"
iters=40
warmup=10
dilate=1
out=$top/results/pool-replay-$(date +%Y-%m-%d)
while [ $# -gt 0 ]; do
    case $1 in
    --trace) pc_need "$1" "${2:-}"; trace=$2; shift ;;
    --compress) pc_need "$1" "${2:-}"; compress=$2; shift ;;
    --compressors) pc_need "$1" "${2:-}"; pools=$2; shift ;;
    --iters) pc_need "$1" "${2:-}"; iters=$2; shift ;;
    --warmup) pc_need "$1" "${2:-}"; warmup=$2; shift ;;
    --dilate) pc_need "$1" "${2:-}"; dilate=$2; shift ;;
    --out) pc_need "$1" "${2:-}"; out=$2; shift ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown flag '$1' (see --help)" ;;
    esac
    shift
done
[ -f "$trace" ] || usage_error "--trace: no file $trace"
for n in $pools; do
    [[ $n =~ ^[1-9][0-9]?$ ]] || usage_error "--compressors: '$n' is not a count from 1 to 64"
    [ "$n" -le 64 ] || usage_error "--compressors: '$n' is not a count from 1 to 64"
done
[ -n "${pools// /}" ] || usage_error "--compressors: no count given"
[[ $iters =~ ^[0-9]+$ ]] && [[ $warmup =~ ^[0-9]+$ ]] && [ "$iters" -gt "$warmup" ] ||
    usage_error "--iters '$iters' must be an integer above --warmup '$warmup'"
[[ $dilate =~ ^[0-9]+([.][0-9]+)?$ ]] || usage_error "--dilate: '$dilate' is not a number"
train=${PC_TRAIN:-$top/build/apps/pc-train}
[ -x "$train" ] || usage_error "no pc-train at $train (build first, or set PC_TRAIN)"
mkdir -p "$out/runs" || usage_error "--out: cannot create $out"
failed=0
for n in $pools; do
    if ! "$top/scripts/pc-mpirun.sh" -t 600 -np 2 "$train" --model "replay:$trace" \
        --iters "$iters" --compress "$compress" --compressors "$n" --dilate "$dilate" \
        --metrics "$out/runs/$n.jsonl" >"$out/runs/$n.log" 2>&1; then
        echo "pool-replay.sh: --compressors $n failed (log: $out/runs/$n.log)" >&2
        failed=1
    fi
done
/usr/bin/python3 - "$out" "$trace" "$compress" "$warmup" "$dilate" "$pools" >"$out/summary.txt" <<'PY' || failed=1
import json, os, statistics, sys
out, trace, compress, warmup, dilate, pools = sys.argv[1:]
warmup, dilate = int(warmup), float(dilate)
t = json.load(open(trace))
print(f"pool-replay: {t['model']} on {t['device']} (REPLAYED: the trace's per-layer GPU times "
      f"held as sleeps; the fold, codec, sends and server real, on this CPU), 1 worker + 1 "
      f"server, --compress {compress}, dilation {dilate:g}; medians over the iterations after "
      f"{warmup}, in ms divided by the dilation")
print(f"{'compressors':>11} {'iter ms':>9} {'busiest ms':>10} {'pool cpu ms':>11} {'busiest x first':>15}")
first = None
for n in pools.split():
    path = os.path.join(out, "runs", f"{n}.jsonl")
    rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    rows = [r for r in rows if r.get("role") == "worker" and r.get("iteration", -1) >= warmup]
    if not rows:
        print(f"{n:>11} (no metrics: the run failed)")
        continue
    med = lambda k: 1e3 * statistics.median(r[k] for r in rows) / dilate
    busy = med("t_compress_busy")
    first = busy if first is None else first
    print(f"{n:>11} {med('t_iteration'):9.2f} {busy:10.2f} {med('t_compress'):11.2f} "
          f"{busy / first:14.2f}x")
PY
cat "$out/summary.txt"
exit $failed
