#!/usr/bin/env bash
# pc-train's short end-to-end check, the MPI test of scripts/check.sh --quick (make
# check-quick; the full check runs it too): 2 workers and a server under mpirun, an mlp on
# synthetic data for 40 iterations with top-k compression, seconds in all:
#  - the run completes, its loss falls and the test accuracy beats chance (10 classes);
#  - the same seed saves bitwise the same model with --pipeline on and off;
#  - --eval-model reads the saved model back and reports the accuracy training printed;
#  - --optimizer adamw on the servers (top-k without momentum correction: its default lazy
#    moments, the O(nnz) step):
#    the loss falls, and --pipeline on and off save bitwise the same model;
#  - a pool of compressor threads (--compressors 4, small chunks so that tensors span
#    threads, every chunk top-k) saves bitwise the model of --pipeline off, and so does a
#    run resumed with --compressors 2 from its checkpoint of iteration 20 (about 9 s); its
#    metrics' busiest thread's compression lies between the pool's sum / 4 and the sum.
#  - --clip-grad-norm: 0, -1, nan and junk refused in one line; clipped on 2 servers with
#    top-k (the norm in every server line of the metrics, the same on both, above MAX at
#    half the iterations at least), bitwise the same model with the step on the workers
#    inline, and resumed from its checkpoint of iteration 10.
# tests/mpi/test_train.sh checks the same and much more on longer runs.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
train="$PC_BUILDDIR/apps/pc-train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--data synthetic --synthetic-samples 1200 --batch 16 --iters 40 --lr 0.05 --model mlp
    --compress topk:ratio=0.1)

for pipe in on off; do
    "$run" -t 120 -np 3 "$train" "${common[@]}" --pipeline "$pipe" --save-model "$tmp/$pipe.pcm" \
        >"$tmp/$pipe.log" 2>&1 || { bad "--pipeline $pipe: the run failed"; tail -5 "$tmp/$pipe.log"; }
done
first=$(grep -m1 -o 'loss [0-9.]*' "$tmp/on.log" | awk '{print $2}')
last=$(grep 'iter ' "$tmp/on.log" | tail -n 1 | grep -o 'loss [0-9.]*' | awk '{print $2}')
acc=$(grep -o 'final test accuracy [0-9.]*' "$tmp/on.log" | awk '{print $4}')
if grep -q '^done: 40 iterations' "$tmp/on.log" &&
    awk -v a="$first" -v b="$last" -v c="$acc" 'BEGIN { exit !(b < a && c > 20) }'; then
    ok "40 iterations with top-k: loss $first -> $last, test accuracy $acc%"
else
    bad "the mlp did not learn (loss '$first' -> '$last', accuracy '$acc')"; tail -5 "$tmp/on.log"
fi
cmp -s "$tmp/on.pcm" "$tmp/off.pcm" && ok "same seed: --pipeline on and off save identical models" ||
    bad "--pipeline on and off saved different models"

ev=$("$train" --data synthetic --eval-model "$tmp/on.pcm" 2>&1)
evacc=$(grep -o 'test accuracy [0-9.]*' <<<"$ev" | awk '{print $3}')
[ -n "$evacc" ] && [ "$evacc" = "$acc" ] && ok "--eval-model: $evacc%" ||
    bad "--eval-model gave '$evacc', training reported '$acc'"

# shellcheck disable=SC2054 # the commas are the codec spec's
adamw=(--data synthetic --synthetic-samples 1200 --batch 16 --iters 40 --lr 0.003 --model mlp
    --compress topk:ratio=0.1,momentum=0 --optimizer adamw --weight-decay 0.01)
for pipe in on off; do
    "$run" -t 120 -np 3 "$train" "${adamw[@]}" --pipeline "$pipe" --save-model "$tmp/adamw-$pipe.pcm" \
        >"$tmp/adamw-$pipe.log" 2>&1 || { bad "adamw --pipeline $pipe: the run failed"; tail -5 "$tmp/adamw-$pipe.log"; }
done
first=$(grep -m1 -o 'loss [0-9.]*' "$tmp/adamw-on.log" | awk '{print $2}')
last=$(grep 'iter ' "$tmp/adamw-on.log" | tail -n 1 | grep -o 'loss [0-9.]*' | awk '{print $2}')
if grep -q '^done: 40 iterations' "$tmp/adamw-on.log" && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'; then
    ok "40 iterations with --optimizer adamw: loss $first -> $last"
else
    bad "adamw: the mlp did not learn (loss '$first' -> '$last')"; tail -5 "$tmp/adamw-on.log"
fi
cmp -s "$tmp/adamw-on.pcm" "$tmp/adamw-off.pcm" && ok "adamw: --pipeline on and off save identical models" ||
    bad "adamw: --pipeline on and off saved different models"

# The compressor pool: 16 KiB chunks, all compressed (the mlp's tensors are split over the
# threads); --pipeline off is the reference, one thread inline.
pool=("${common[@]}" --chunk-bytes 16K --compress-min-bytes 0)
"$run" -t 120 -np 3 "$train" "${pool[@]}" --pipeline off --save-model "$tmp/pool-off.pcm" \
    >"$tmp/pool-off.log" 2>&1 || { bad "pool reference (--pipeline off): the run failed"; tail -5 "$tmp/pool-off.log"; }
"$run" -t 120 -np 3 "$train" "${pool[@]}" --compressors 4 --checkpoint-dir "$tmp/pool-ck" \
    --checkpoint-every 20 --save-model "$tmp/pool-4.pcm" --metrics "$tmp/pool-4.jsonl" \
    >"$tmp/pool-4.log" 2>&1 ||
    { bad "--compressors 4: the run failed"; tail -5 "$tmp/pool-4.log"; }
grep -q 'worker r0: 4 compressor threads on cores' "$tmp/pool-4.log" &&
    cmp -s "$tmp/pool-4.pcm" "$tmp/pool-off.pcm" &&
    ok "--compressors 4 saves the model of --pipeline off, and says where its threads went" ||
    { bad "--compressors 4: another model, or no placement line"; grep 'compressor threads' "$tmp/pool-4.log"; }
# Its metrics: the busiest thread's compression (t_compress_busy) and the pool's sum
# (t_compress), max <= sum <= N max (printed with 6 decimals: within their rounding), and
# the pool really shared the work (max < sum somewhere).
if python3 - "$tmp/pool-4.jsonl" <<'PY'
import sys, json
rows = [json.loads(l) for l in open(sys.argv[1])]
w = [r for r in rows if r.get("role") == "worker" and "t_compress" in r]
assert len(w) == 2 * 40, len(w)
for r in w:
    assert r["compressors"] == 4, r
    assert r["t_compress_busy"] <= r["t_compress"] + 1e-6, r
    assert r["t_compress_busy"] >= r["t_compress"] / 4 - 1e-6, r
    assert r["t_exposed"] <= r["t_compress_busy"], r  # exposed wall time: at most the busiest's
assert any(r["t_compress_busy"] < r["t_compress"] for r in w), "no iteration shared"
PY
then ok "--compressors 4: metrics' exposed <= busiest thread <= the pool's sum <= 4 x busiest"
else bad "--compressors 4: t_compress_busy against t_compress"; fi
# Chunks bigger than a thread's share: fc1.weight (200704 elements of 235146) in two chunks
# of 100352 dealt to threads 0 and 2 of 4; thread 1, between them, owns nothing, gets no
# descriptor and releases nothing (3 iterations; a hang here times out after 5 s).
"$run" -t 60 -np 3 "$train" "${common[@]}" --iters 3 --chunk-bytes 401408 --compressors 4 \
    --timeout 5 >"$tmp/pool-gap.log" 2>&1 && grep -q '^done: 3 iterations' "$tmp/pool-gap.log" &&
    ok "--compressors 4 with an empty thread between two of a tensor's: 3 iterations" ||
    { bad "--compressors 4, an empty thread inside a tensor's range"; grep -m2 'timed out' "$tmp/pool-gap.log"; }
# --compressors auto says what it chose and from what, one line per worker (2 here).
"$run" -t 60 -np 3 "$train" "${common[@]}" --iters 2 --compressors auto >"$tmp/pool-auto.log" 2>&1 &&
    [ "$(grep -cE 'worker r[0-9]+: --compressors auto: [0-9]+ \([0-9]+ cores (near its GPU|of its cpuset), less [0-9]+ server and [0-9]+ backprop threads, over [0-9]+ workers; at least 1, at most [0-9]+\)$' "$tmp/pool-auto.log")" = 2 ] &&
    ok "--compressors auto: $(grep -m1 -o 'r[0-9]*: --compressors auto: .*' "$tmp/pool-auto.log")" ||
    { bad "--compressors auto: no line per worker saying what it chose"; grep -m3 -i 'auto\|error' "$tmp/pool-auto.log"; }
# Resume from iteration 20 with another pool size (the final checkpoint removed).
rm -rf "$tmp/pool-ck/ckpt-000000000040"
"$run" -t 120 -np 3 "$train" "${pool[@]}" --compressors 2 --checkpoint-dir "$tmp/pool-ck" --resume \
    --save-model "$tmp/pool-2r.pcm" >"$tmp/pool-2r.log" 2>&1 ||
    { bad "--compressors 2 --resume: the run failed"; tail -5 "$tmp/pool-2r.log"; }
grep -q 'resuming from the checkpoint of iteration 20' "$tmp/pool-2r.log" &&
    cmp -s "$tmp/pool-2r.pcm" "$tmp/pool-off.pcm" &&
    ok "--compressors 2 resumed from --compressors 4's checkpoint: the model of --pipeline off" ||
    { bad "--compressors 2 --resume: another model, or not resumed"; tail -3 "$tmp/pool-2r.log"; }

# --clip-grad-norm: bad values refused in one line before anything runs; 2 workers and 2
# servers (their exchange of the norm), top-k (the servers' sparse path), clipped at every
# iteration: the metrics' norms show the clipping bites; the run with the step on the
# workers and --pipeline off saves bitwise the same model (the servers' sums and the
# exchange are deterministic); and so does a run resumed from its checkpoint of iteration 10.
for v in 0 -1 nan x; do # one process (MPI singleton): refused before any peer is needed
    out=$("$train" --data synthetic --clip-grad-norm "$v" 2>&1)
    st=$?
    line=$(grep '^pc-train: ' <<<"$out")
    if [ $st = 2 ] && [ "$(grep -c . <<<"$line")" = 1 ] && grep -q -- "--clip-grad-norm: " <<<"$line"; then
        ok "--clip-grad-norm $v: status 2, '$line'"
    else
        bad "--clip-grad-norm $v: status $st:"; head -3 <<<"$out"
    fi
done
clip=("${common[@]}" --iters 20 --servers 2 --chunk-bytes 64K --clip-grad-norm 0.5)
"$run" -t 120 -np 4 "$train" "${clip[@]}" --checkpoint-dir "$tmp/clip-ck" --checkpoint-every 10 \
    --metrics "$tmp/clip.jsonl" --save-model "$tmp/clip.pcm" >"$tmp/clip.log" 2>&1 ||
    { bad "--clip-grad-norm: the run failed"; tail -5 "$tmp/clip.log"; }
"$run" -t 120 -np 4 "$train" "${clip[@]}" --update workers --pipeline off \
    --save-model "$tmp/clip-w.pcm" >"$tmp/clip-w.log" 2>&1 ||
    { bad "--clip-grad-norm --update workers: the run failed"; tail -5 "$tmp/clip-w.log"; }
rm -rf "$tmp/clip-ck/ckpt-000000000020"
"$run" -t 120 -np 4 "$train" "${clip[@]}" --checkpoint-dir "$tmp/clip-ck" --resume \
    --save-model "$tmp/clip-r.pcm" >"$tmp/clip-r.log" 2>&1 ||
    { bad "--clip-grad-norm --resume: the run failed"; tail -5 "$tmp/clip-r.log"; }
if norms=$(python3 - "$tmp/clip.jsonl" <<'PY'
import sys, json
rows = [json.loads(l) for l in open(sys.argv[1])]
s = [r for r in rows if r.get("role") == "server"]
assert len(s) == 2 * 20 and all("grad_norm" in r for r in s), len(s)
for it in range(20):  # both servers found the same norm
    assert len({r["grad_norm"] for r in s if r["iteration"] == it}) == 1, it
n = [r["grad_norm"] for r in s]
assert sum(x > 0.5 for x in n) >= 10, n
print(f"{min(n):.3g} .. {max(n):.3g}")
PY
); then
    ok "--clip-grad-norm 0.5, 2 servers: every server line has the norm, the same on both ($norms)"
else
    bad "--clip-grad-norm: the metrics' norms"; echo "$norms"
fi
cmp -s "$tmp/clip.pcm" "$tmp/clip-w.pcm" &&
    ok "--clip-grad-norm: --update workers --pipeline off saves the model of servers, pipelined" ||
    bad "--clip-grad-norm: --update workers --pipeline off saved another model"
grep -q 'resuming from the checkpoint of iteration 10' "$tmp/clip-r.log" &&
    cmp -s "$tmp/clip-r.pcm" "$tmp/clip.pcm" &&
    ok "--clip-grad-norm: resumed from iteration 10, the model of the unbroken run" ||
    { bad "--clip-grad-norm --resume: another model, or not resumed"; tail -3 "$tmp/clip-r.log"; }

pc_done
