#!/usr/bin/env bash
# pc-train end to end under mpirun, on synthetic data (fast, no download):
#  - a tiny mlp training: the loss decreases and the test accuracy beats chance;
#  - the same seed saves bitwise the same model with --pipeline on and off (2 and 4 workers);
#  - --eval-model reads the saved model back and reports the same accuracy;
#  - a short cnn run completes; bad flags and files fail with one clear line;
#  - start-up refusals under mpirun (missing data, an unwritable --save-model, --metrics,
#    --timeline or --checkpoint-dir, a batch larger than the data, flags that would do
#    nothing) are said once, before any training, with nothing written;
#  - IDX files gzipped or not, each on its own; the run's real length in the progress line.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
train="$PC_BUILDDIR/apps/pc-train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--data synthetic --synthetic-samples 3000 --batch 16 --epochs 2 --lr 0.01)

"$run" -t 180 -np 3 "$train" "${common[@]}" --model mlp --save-model "$tmp/on.pcm" >"$tmp/on.log" 2>&1 \
    || { bad "mlp run failed"; tail -5 "$tmp/on.log"; }
first=$(grep -m1 -o 'loss [0-9.]*' "$tmp/on.log" | awk '{print $2}')
last=$(grep 'iter ' "$tmp/on.log" | tail -n 1 | grep -o 'loss [0-9.]*' | awk '{print $2}')
acc=$(grep -o 'final test accuracy [0-9.]*' "$tmp/on.log" | awk '{print $4}')
if awk -v a="$first" -v b="$last" -v c="$acc" 'BEGIN { exit !(b < a && c > 30) }'; then
    ok "mlp on synthetic data: loss $first -> $last, test accuracy $acc%"
else
    bad "mlp did not learn (loss $first -> $last, accuracy $acc)"; tail -5 "$tmp/on.log"
fi

"$run" -t 180 -np 3 "$train" "${common[@]}" --model mlp --pipeline off --save-model "$tmp/off.pcm" \
    >"$tmp/off.log" 2>&1 || bad "mlp --pipeline off failed"
cmp -s "$tmp/on.pcm" "$tmp/off.pcm" && ok "same seed: --pipeline on and off save identical models" \
    || bad "--pipeline on and off saved different models"

# The same with 4 workers (short runs): more workers, more orders in which gradients arrive.
for pipe in on off; do
    "$run" -t 120 -np 5 "$train" --data synthetic --synthetic-samples 600 --batch 16 --iters 10 \
        --lr 0.01 --model mlp --pipeline "$pipe" --save-model "$tmp/w4-$pipe.pcm" >"$tmp/w4-$pipe.log" 2>&1 \
        || { bad "mlp with 4 workers, --pipeline $pipe, failed"; tail -3 "$tmp/w4-$pipe.log"; }
done
cmp -s "$tmp/w4-on.pcm" "$tmp/w4-off.pcm" \
    && ok "same seed, 4 workers: --pipeline on and off save identical models" \
    || bad "4 workers: --pipeline on and off saved different models"

ev=$("$train" --data synthetic --eval-model "$tmp/on.pcm" 2>&1)
evacc=$(grep -o 'test accuracy [0-9.]*' <<<"$ev" | awk '{print $3}')
[ -n "$evacc" ] && [ "$evacc" = "$acc" ] && ok "--eval-model: $evacc%" \
    || bad "--eval-model gave '$evacc', training reported '$acc'"

if "$run" -t 180 -np 3 "$train" --data synthetic --synthetic-samples 600 --model cnn --batch 8 \
       --iters 12 --compress dgc:ratio=0.01 >"$tmp/cnn.log" 2>&1 && grep -q '^done: 12 iterations' "$tmp/cnn.log" &&
       grep -q '^  dropout  *= 0.5$' "$tmp/cnn.log"; then
    ok "cnn with dgc: 12 iterations, dropout 0.5 printed"
else
    bad "cnn run"; tail -5 "$tmp/cnn.log"
fi

# Flags that contradict each other: one line, status 2, on a run that never starts.
expect_usage() { # EXPECTED-TEXT FLAGS...
    local want=$1 out rc
    shift
    out=$("$run" -t 60 -np 3 "$train" --data synthetic "$@" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$out"; then
        ok "$* -> status 2: $(grep -F -- "$want" <<<"$out" | sed -n 1p)"
    else
        bad "$*: status $rc, wanted 2 and '$want'"; tail -3 <<<"$out"
    fi
}
expect_usage "--compress dgc:ratio=0.01 has no effect with --mode allreduce" --mode allreduce --compress dgc:ratio=0.01
expect_usage "--momentum 0.9 with --compress dgc applies momentum twice" --compress dgc --momentum 0.9
expect_usage "topk: ratio=0 is out of range (0, 1]" --compress topk:ratio=0

# DGC's momentum correction with the servers' default momentum: the servers use plain SGD
# (printed), and training does not diverge. DGC warm-up, whose first densities select
# every element, runs (it once sent a count of n without indices). Fashion-MNIST where
# installed: its ReLU layers give the zero gradients that made the sample threshold 0.
fm=/usr/share/datasets/fashion-mnist
data=(--data synthetic --synthetic-samples 3000)
[ -d "$fm" ] && data=(--data "$fm")
if "$run" -t 180 -np 4 "$train" "${data[@]}" --servers 2 --compress dgc:ratio=0.001 --iters 300 \
        >"$tmp/dgc.log" 2>&1 && grep -q '^  momentum  *= 0$' "$tmp/dgc.log" && grep -q '^done: 300 iterations' "$tmp/dgc.log"; then
    ok "dgc with default flags: server momentum 0, $(grep -o 'final test accuracy [0-9.]*%' "$tmp/dgc.log")"
else
    bad "dgc with default flags"; tail -3 "$tmp/dgc.log"
fi
for warm in 5 20 200; do
    if "$run" -t 180 -np 3 "$train" "${data[@]}" --compress "dgc:ratio=0.01,warmup=$warm" --iters 30 \
            >"$tmp/warm.log" 2>&1 && grep -q '^done: 30 iterations' "$tmp/warm.log"; then
        ok "dgc warm-up $warm: 30 iterations"
    else
        bad "dgc warm-up $warm"; tail -3 "$tmp/warm.log"
    fi
done

# A cosine schedule takes the run's length from --epochs (it once demanded --iters).
if "$run" -t 120 -np 3 "$train" "${common[@]}" --lr-schedule cosine >"$tmp/cos.log" 2>&1 &&
    grep -q '^  iters  *= 186$' "$tmp/cos.log" && grep -q '^done: 186 iterations' "$tmp/cos.log" &&
    grep -q '^  dropout  *= 0$' "$tmp/cos.log"; then
    ok "--lr-schedule cosine with --epochs 2: 186 iterations (the mlp's dropout printed as 0)"
else
    bad "--lr-schedule cosine with --epochs"; grep -E 'iters|done|pc-train' "$tmp/cos.log" | sed -n 1,3p
fi

# --mode allreduce on one rank sends nothing, and says so.
if "$run" -t 60 -np 1 "$train" --data synthetic --synthetic-samples 600 --mode allreduce --iters 5 \
        >"$tmp/ar1.log" 2>&1 && grep -q '| 0.0 KB/iter sent' "$tmp/ar1.log" && grep -q '^  compress  *= none$' "$tmp/ar1.log"; then
    ok "--mode allreduce, one rank: 0 KB sent, compress none"
else
    bad "allreduce on one rank"; grep -E 'KB/iter|compress  ' "$tmp/ar1.log" | tail -2
fi

# --timeline and --metrics: a Chrome trace with a track per thread of every rank.
"$run" -t 120 -np 3 "$train" --data synthetic --synthetic-samples 600 --batch 16 --iters 10 \
    --timeline "$tmp/tl.json" --metrics "$tmp/m.jsonl" >"$tmp/tl.log" 2>&1 || bad "timeline run"
if python3 - "$tmp/tl.json" "$tmp/m.jsonl" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
threads = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M"}
want = {(0, "backprop"), (0, "compressor"), (1, "backprop"), (1, "compressor"), (2, "server")}
assert want <= threads, threads
names = {e["name"].split(" chunk")[0] for e in ev if e["ph"] == "X"}
assert {"forward fc1", "backward fc3", "fold", "compress+send", "aggregate", "update", "push"} <= names, names
assert all(e["dur"] >= 0 for e in ev if e["ph"] == "X")
rows = [json.loads(l) for l in open(sys.argv[2])]
assert sum(r["role"] == "worker" for r in rows) == 20 and sum(r["role"] == "server" for r in rows) == 10
# Every wait of the backprop thread is an event named by its cause, and the update waits
# the metrics count are on the timeline (which also has finish's, after the last line).
import re
tid = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and "tid" in e}
waitre = re.compile(r"wait (release|back-pressure|update chunk \d+: (compress|network|server))$")
for e in ev:
    if e["ph"] == "X" and e["name"].startswith("wait"):
        assert waitre.match(e["name"]), e["name"]
        assert tid.get((e["pid"], e["tid"]), "backprop") == "backprop", e
for rank in (0, 1):
    upd = sum(e["dur"] for e in ev if e["ph"] == "X" and e["pid"] == rank
              and e["name"].startswith("wait update")) * 1e-6
    rel = sum(e["dur"] for e in ev if e["ph"] == "X" and e["pid"] == rank
              and e["name"] == "wait release") * 1e-6
    m = [r for r in rows if r["role"] == "worker" and r["rank"] == rank]
    assert upd >= sum(r["t_param_wait"] for r in m) - 1e-4, (rank, upd)
    assert rel >= sum(r["t_wait_release"] for r in m) - 1e-4, (rank, rel)
PY
then ok "--timeline: tracks for every thread of every rank, waits named by cause; --metrics: every rank"; else bad "timeline or metrics content"; fi
# The progress line: taken at the same iterations on every worker (the first and the
# last of 10; the epoch is longer), medians over both workers; the first has no complete
# iteration yet (a short line), the last covers iterations 0..8 (metrics complete one
# iteration late).
num='[0-9]+\.[0-9]{2}'
if [ "$(grep -c 'median of' "$tmp/tl.log")" = 1 ] \
    && grep -Eq '^epoch 1/[0-9]+ iter 1/10 loss [0-9.]+ acc [0-9.]+% \| ETA ' "$tmp/tl.log" \
    && grep -Eq "iter 10/10 .*\| median of 9 iters x 2 workers: iter $num ms, compute $num, wait release $num, back-pressure $num, compress $num, network $num, server $num, inline compress $num \| compress $num ms \(busiest thread $num\) exposed $num ms \| slowest r[01] compute $num ms \| [0-9.]+ KB/iter sent \| ETA" "$tmp/tl.log"; then
    ok "pc-train progress line: medians of the last iterations over all workers, the slowest named"
else bad "pc-train progress line"; grep 'iter ' "$tmp/tl.log" | tail -3; fi
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    if "$PC_SRCDIR/scripts/plot.py" "$tmp/m.jsonl" --out "$tmp/p" >/dev/null && [ -s "$tmp/p-loss.png" ] \
        && [ -s "$tmp/p-time.png" ] && [ "$(head -c 4 "$tmp/p-time.png" | od -An -c | tr -d ' ')" = "211PNG" ]; then
        ok "plot.py: loss and time charts"
    else bad "plot.py"; fi
    printf '{"role": "worker"\n' >"$tmp/badm.jsonl"
    out=$("$PC_SRCDIR/scripts/plot.py" "$tmp/badm.jsonl" 2>&1); rc=$?
    [ "$rc" = 2 ] && grep -q "badm.jsonl:1: not JSON" <<<"$out" && ok "plot.py rejects a bad line" || bad "plot.py bad input: $out"
else
    bad "python3-matplotlib missing (scripts/setup installs it)"
fi

expect() { # STATUS NEEDLE ARGS...: pc-train exits STATUS with a message containing NEEDLE
    local want=$1 needle=$2; shift 2
    local out rc
    out=$("$train" "$@" 2>&1); rc=$?
    if [ "$rc" = "$want" ] && grep -q -- "$needle" <<<"$out"; then ok "rejects $*: $(head -n1 <<<"$out")"
    else bad "pc-train $* gave rc $rc: $out"; fi
}
expect 2 "pc-train: --model: 'resnet' is not one of mlp|cnn|wide" --model resnet
expect 2 "pc-train: --batch: 0 is out of range" --batch 0
expect 2 "--mode ps needs at least 2 ranks" --data synthetic
expect 1 "cannot open" --eval-model "$tmp/none.pcm" --data synthetic
printf 'not a model' >"$tmp/junk.pcm"
expect 1 "shorter than a model header" --eval-model "$tmp/junk.pcm" --data synthetic
# Start-up refusals under mpirun: status 1 or 2, the reason printed once (not once per
# worker), before anything trains (no progress line) and with nothing written.
once() { # STATUS NEEDLE ARGS...: a 4-rank job (3 workers) of pc-train ARGS
    local want=$1 needle=$2 out rc n
    shift 2
    out=$("$run" -t 120 -np 4 "$train" --iters 5 --lr-schedule constant "$@" 2>&1); rc=$?
    n=$(grep -c '^pc-train: ' <<<"$out")
    if [ "$rc" = "$want" ] && [ "$n" = 1 ] && grep -q -- "$needle" <<<"$out" && ! grep -q '^epoch ' <<<"$out"; then
        ok "mpirun -np 4 pc-train $*: status $rc, said once: $(grep '^pc-train: ' <<<"$out")"
    else
        bad "mpirun -np 4 pc-train $*: status $rc (want $want), $n 'pc-train:' lines (want 1), needle '$needle'"
        grep -v '^  ' <<<"$out" | tail -8
    fi
}
once 1 "pc-train: --data: /nonexistent-dir: neither train-images-idx3-ubyte.gz nor train-images-idx3-ubyte" \
    --data /nonexistent-dir
once 1 "pc-train: --save-model: cannot write '$tmp/no-dir/m.pcm': its directory '$tmp/no-dir': No such file" \
    --data synthetic --save-model "$tmp/no-dir/m.pcm"
once 1 "pc-train: --metrics: cannot write '$tmp/no-dir/m.jsonl'" --data synthetic --metrics "$tmp/no-dir/m.jsonl"
once 1 "pc-train: --timeline: cannot create files beside '/proc/pc-tl.json'" --data synthetic --timeline /proc/pc-tl.json
once 1 "pc-train: --checkpoint-dir: '/proc/pc-ck': cannot create" --data synthetic --checkpoint-dir /proc/pc-ck
once 1 "pc-train: --batch 2000: the training set (3000 samples) is smaller than one iteration of all 3 workers" \
    --data synthetic --synthetic-samples 3000 --batch 2000
[ ! -e "$tmp/no-dir" ] && [ ! -e /proc/pc-ck ] && ok "the refused runs created nothing" || bad "a refused run left files"
if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null && runuser -u nobody -- test -x "$train"; then
    # A directory the user cannot write (root writes anywhere): refused at start-up too.
    mkdir -p "$tmp/ro" && chmod 755 "$tmp/ro" && chmod 755 "$tmp"
    out=$(runuser -u nobody -- "$train" --mode allreduce --data synthetic --iters 5 --save-model "$tmp/ro/m.pcm" 2>&1); rc=$?
    [ "$rc" = 1 ] && grep -q "pc-train: --save-model: cannot create files beside '$tmp/ro/m.pcm': Permission denied" <<<"$out" &&
        ! grep -q '^epoch ' <<<"$out" && ok "as user nobody, an unwritable --save-model directory: refused at start-up" ||
        { bad "as nobody, unwritable --save-model: rc $rc"; tail -3 <<<"$out"; }
fi
# Flags that would do nothing in the resolved configuration: usage errors, said once.
once 2 "--nesterov has no effect with --compress topk:ratio=0.01" --data synthetic --nesterov
once 2 "--nesterov needs momentum" --data synthetic --compress none --momentum 0 --nesterov
once 2 "--dropout acts on the cnn only (the mlp model has no dropout layer)" --data synthetic --dropout 0.2
once 2 "--synthetic-samples needs --data synthetic" --synthetic-samples 500
once 2 "--lr-step acts on --lr-schedule step only" --data synthetic --lr-step 50
once 2 "--pull has no effect with --mode allreduce" --data synthetic --mode allreduce --pull dense
once 2 "--checkpoint-keep needs --checkpoint-dir DIR" --data synthetic --checkpoint-keep 4
expect 2 "pc-train: --batch has no effect with --eval-model" --eval-model "$tmp/on.pcm" --batch 8
expect 2 "pc-train: --compress has no effect with --eval-model" --eval-model "$tmp/on.pcm" --compress none

# Each IDX file gzipped or not on its own: gzipped images beside unpacked labels load.
fm=/usr/share/datasets/fashion-mnist
if [ -r "$fm/train-labels-idx1-ubyte.gz" ]; then
    mkdir -p "$tmp/mixed"
    cp "$fm/train-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" "$tmp/mixed/"
    gunzip -c "$fm/train-labels-idx1-ubyte.gz" >"$tmp/mixed/train-labels-idx1-ubyte"
    gunzip -c "$fm/t10k-images-idx3-ubyte.gz" >"$tmp/mixed/t10k-images-idx3-ubyte"
    "$run" -t 120 -np 3 "$train" --data "$tmp/mixed" --iters 3 --log-level warn >"$tmp/mixed.log" 2>&1 &&
        grep -q '^done: 3 iterations' "$tmp/mixed.log" && ok "--data with gzipped and unpacked IDX files side by side" ||
        { bad "--data with mixed .gz and plain files"; tail -3 "$tmp/mixed.log"; }
fi

# The run's real length: --iters inside the first epoch says so, and the progress line
# counts epochs to the one the run ends in.
"$run" -t 120 -np 3 "$train" --data synthetic --synthetic-samples 3000 --batch 16 --iters 10 \
    --log-level warn >"$tmp/len.log" 2>&1
if grep -q '93 iterations per epoch, 10 in all (--iters 10 ends the run inside epoch 1, not after --epochs 3)' "$tmp/len.log" &&
    grep -Eq '^epoch 1/1 iter 10/10 ' "$tmp/len.log" && ! grep -q '^epoch 1/3' "$tmp/len.log"; then
    ok "--iters 10 of 93 per epoch: 'epoch 1/1', and the header says the run ends inside epoch 1"
else
    bad "the run's length"; grep -E 'in all|^epoch' "$tmp/len.log" | sed -n 1,4p
fi
# An --iters beyond the run only shortens nothing: said in the header.
"$run" -t 120 -np 3 "$train" --data synthetic --synthetic-samples 640 --batch 32 --epochs 1 --iters 45 \
    --log-level warn >"$tmp/long.log" 2>&1
grep -q '10 iterations per epoch, 10 in all (--iters 45 is more: the run ends after --epochs 1)' "$tmp/long.log" &&
    grep -q '^done: 10 iterations' "$tmp/long.log" && ok "--iters 45 beyond a 10-iteration run: said in the header" ||
    { bad "--iters beyond the run"; grep -E 'in all|^done' "$tmp/long.log"; }

pc_done
