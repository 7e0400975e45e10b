#!/usr/bin/env bash
# pc-train --model replay:PATH (doc/replay.md) on the CI trace tests/data/replay-tiny.json
# (5 layers, 284362 parameters, 7.7 ms), seconds in all:
#  - 2 workers and a server, pipelined and inline: the run completes, says what is replayed
#    and what is real, leaves the flags a replay ignores out of its configuration, sends
#    gradients, and reports the replayed iteration against the trace;
#  - the same seed ends with bitwise the same checkpoint pipelined and inline (the server's
#    parameters, the workers' codec state: the gradients are deterministic views, the same
#    seed, rank and iteration giving the same values);
#  - --mode allreduce on 2 workers (labelled "network and the allreduce real"): the
#    optimizer step held on the device, the trace's
#    optimizer_ms, or, without one, the documented rule;
#  - every malformed trace refused by pc-train with its one line and exit status 2, and the
#    flags that would do nothing with a replay (--epochs, --data, ...) likewise;
#  - validation (a): one worker, no communication, the replayed iteration against the
#    trace's sum and the holds' overshoot, printed (a figure, never a timed assertion).
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
train="$PC_BUILDDIR/apps/pc-train"
tiny="$PC_SRCDIR/tests/data/replay-tiny.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- 2 workers and a server, pipelined and inline ----
for pipe in on off; do
    "$run" -t 120 -np 3 "$train" --model "replay:$tiny" --iters 8 --pipeline "$pipe" \
        --checkpoint-dir "$tmp/ck-$pipe" >"$tmp/$pipe.log" 2>&1 ||
        { bad "--pipeline $pipe: the run failed"; tail -5 "$tmp/$pipe.log"; continue; }
    kb=$(grep '^replay iter 8/8' "$tmp/$pipe.log" | grep -o '[0-9.]* KB/iter sent' | awk '{print $1}')
    if grep -q "^replay: GPU compute replayed from $tiny (tiny-cnn, synthetic, batch 32, fp32); network, compression and servers real$" "$tmp/$pipe.log" &&
        grep -q '^replay: 5 layers, 8 tensors, 284362 parameters; compute 7.700 ms' "$tmp/$pipe.log" &&
        grep -q '^done: 8 iterations' "$tmp/$pipe.log" &&
        grep -q '^replay: iteration [0-9.]* ms (median of 7; .*ratio [0-9.]*$' "$tmp/$pipe.log" &&
        grep -q '^  (with a replay, --data, --epochs, --batch, .* do not apply' "$tmp/$pipe.log" &&
        ! grep -qE '^  (data|epochs|batch|dropout) +=' "$tmp/$pipe.log" &&
        awk -v k="$kb" 'BEGIN { exit !(k > 0) }'; then
        ok "--pipeline $pipe: 8 replayed iterations, $kb KB/iter sent; $(grep -o 'ratio [0-9.]*' "$tmp/$pipe.log")"
    else
        bad "--pipeline $pipe: the replay's lines are missing"; grep -v '^  ' "$tmp/$pipe.log" | tail -8
    fi
done
# The final checkpoints: the server's parameters and momentum, the workers' codec state.
sums() { (cd "$1" 2>/dev/null && find . -name 'rank-*.bin' -type f | sort | xargs -r md5sum); }
if [ -n "$(sums "$tmp/ck-on")" ] && [ "$(sums "$tmp/ck-on")" = "$(sums "$tmp/ck-off")" ]; then
    ok "same seed: pipelined and inline replays end with identical checkpoints ($(sums "$tmp/ck-on" | wc -l) files)"
else
    bad "the final checkpoints differ between --pipeline on and off (or none was written)"
    sums "$tmp/ck-on"; sums "$tmp/ck-off"
fi

# ---- --mode allreduce: the device step ----
grep -v optimizer_ms "$tiny" | sed 's/^  \],$/  ]/' >"$tmp/noopt.json"
for t in "$tiny:the trace's:0.500" "$tmp/noopt.json:the rule:0.004"; do
    IFS=: read -r f how ms <<<"$t"
    if "$run" -t 120 -np 2 "$train" --model "replay:$f" --mode allreduce --iters 6 \
        >"$tmp/ar.log" 2>&1 && grep -q '^done: 6 iterations' "$tmp/ar.log" &&
        grep -q "device step $ms ms per iteration ($how)" "$tmp/ar.log" &&
        grep -q '^replay: GPU compute replayed from .*; network and the allreduce real$' "$tmp/ar.log"; then
        ok "--mode allreduce: device step $ms ms ($how)"
    else
        bad "--mode allreduce with $f"; grep -v '^  ' "$tmp/ar.log" | tail -5
    fi
done

# ---- malformed traces and idle flags: one line, exit 2 ----
# refused NAME 'JSON' 'MESSAGE': pc-train with the trace NAME holding JSON must exit 2 with
# exactly "pc-train: --model: FILE: MESSAGE" on stderr.
head='"model": "m", "device": "d", "batch": 8, "precision": "fp32", "source": "s"'
fc='{"name": "fc", "params": [[4, 3], [4]], "forward_ms": 1, "backward_ms": 2}'
refused() {
    local f="$tmp/$1.json" out st
    printf '%s' "$2" >"$f"
    out=$("$train" --model "replay:$f" 2>&1 >/dev/null)
    st=$?
    if [ "$st" = 2 ] && [ "$out" = "pc-train: --model: $f: $3" ]; then
        ok "refused, status 2: $1: $3"
    else
        bad "$1: status $st, said '$out'; expected 2 and 'pc-train: --model: $f: $3'"
    fi
}
refused not-json '{"model": ' 'not valid JSON: line 1 column 10: unexpected token near end of file'
refused array '[]' 'the top level is an array, not an object (doc/replay.md)'
refused typo "{$head, \"layers\": [$fc], \"optimiser_ms\": 1}" \
    'optimiser_ms: unknown key (a trace has model, device, batch, precision, source, layers, optimizer_ms)'
refused no-model '{"device": "d"}' 'model: missing'
refused batch-0 '{"model": "m", "device": "d", "batch": 0}' 'batch: 0 is less than 1'
refused no-layers "{$head}" 'layers: missing'
refused empty-layers "{$head, \"layers\": []}" 'layers: empty (a trace has at least one layer)'
refused layer-key "{$head, \"layers\": [{\"name\": \"fc\", \"params\": [], \"forward_ms\": 1, \"backward_mss\": 2}]}" \
    'layers[0] (fc).backward_mss: unknown key (a layer has name, params, forward_ms, backward_ms)'
refused shape-0 "{$head, \"layers\": [{\"name\": \"fc\", \"params\": [[4, 0]], \"forward_ms\": 1, \"backward_ms\": 2}]}" \
    'layers[0] (fc).params[0][1]: 0 is less than 1'
refused shape-9d "{$head, \"layers\": [{\"name\": \"fc\", \"params\": [[1, 1, 1, 1, 1, 1, 1, 1, 1]], \"forward_ms\": 1, \"backward_ms\": 2}]}" \
    'layers[0] (fc).params[0]: 9 dimensions (a shape has 1 to 8)'
refused shape-big "{$head, \"layers\": [{\"name\": \"fc\", \"params\": [[65536, 32768]], \"forward_ms\": 1, \"backward_ms\": 2}]}" \
    "layers[0] (fc).params[0]: more than 2147483647 elements (a tensor's limit)"
refused negative "{$head, \"layers\": [$fc, {\"name\": \"conv1\", \"params\": [], \"forward_ms\": 1, \"backward_ms\": -1}]}" \
    'layers[1] (conv1).backward_ms: -1 is negative'
refused time-string "{$head, \"layers\": [{\"name\": \"fc\", \"params\": [[4]], \"forward_ms\": \"1\", \"backward_ms\": 2}]}" \
    'layers[0] (fc).forward_ms: a string, not a number of milliseconds'
refused inf "{$head, \"layers\": [{\"name\": \"fc\", \"params\": [[4]], \"forward_ms\": 1e400, \"backward_ms\": 2}]}" \
    "not valid JSON: line 1 column 140: real number overflow near '1e400'"
refused duplicate "{$head, \"layers\": [$fc, $fc]}" \
    'layers[1] (fc).name: repeats the name of layers[0] (layer names are unique)'
refused no-params "{$head, \"layers\": [{\"name\": \"pool\", \"params\": [], \"forward_ms\": 1, \"backward_ms\": 2}]}" \
    'layers: no layer has parameters (nothing to train or send)'

# usage ARGS... -- MESSAGE: pc-train ARGS exits 2 with "pc-train: MESSAGE".
usage() {
    local args=() out st
    while [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    out=$("$train" "${args[@]}" 2>&1 >/dev/null)
    st=$?
    if [ "$st" = 2 ] && [ "$out" = "pc-train: $1" ]; then
        ok "refused, status 2: ${args[*]}"
    else
        bad "${args[*]}: status $st, said '$out'; expected 2 and 'pc-train: $1'"
    fi
}
usage --model "replay:$tmp/none.json" -- "--model: $tmp/none.json: No such file or directory"
usage --model replay: -- "--model: 'replay:' names no trace file (replay:PATH, doc/replay.md)"
usage --model resnet -- "--model: 'resnet' is not one of mlp|cnn|wide|replay:PATH"
usage --model "replay:$tiny" --epochs 2 -- "--epochs has no effect with --model replay:PATH (the trace gives the layers and the batch, --iters the length); drop it"
usage --model "replay:$tiny" --data synthetic -- "--data has no effect with --model replay:PATH (the trace gives the layers and the batch, --iters the length); drop it"
usage --model "replay:$tiny" --device emulate -- "--device emulate: --model replay:PATH replays the GPU; its gradients reach the host by modelled copies: use --device cpu"
usage --model "replay:$tiny" --mode auto -- "--mode auto profiles one of the engine's models; with --model replay:PATH choose --mode ps or --mode allreduce"
usage --model mlp --pcie-gbps 12 -- "--pcie-gbps acts on --model replay:PATH only (the mlp model copies nothing)"

# ---- validation (a): one worker, no communication ----
# Without optimizer_ms: the rule's 0.004 ms step, so the iteration is the trace's sum.
if "$run" -t 120 -np 1 "$train" --model "replay:$tmp/noopt.json" --mode allreduce --iters 40 \
    >"$tmp/one.log" 2>&1 && grep -q '^replay: iteration' "$tmp/one.log"; then
    ok "one worker (validation (a), a figure, not asserted): $(grep '^replay: iteration' "$tmp/one.log" | sed 's/^replay: //')"
    ok "  $(grep '^replay: holds' "$tmp/one.log" | sed 's/^replay: //')"
else
    bad "one worker, --mode allreduce"; tail -5 "$tmp/one.log"
fi

# ---- scripts/bench/pool-replay.sh: a row per --compressors value, its bad flags ----
pool=$PC_SRCDIR/scripts/bench/pool-replay.sh
if PC_TRAIN=$train "$pool" --trace "$tiny" --compressors "1 2" --iters 8 --warmup 2 \
    --out "$tmp/pool" >"$tmp/pool.out" 2>&1 &&
    grep -q '^pool-replay: tiny-cnn on synthetic (REPLAYED: ' "$tmp/pool.out" &&
    [ "$(grep -cE '^ +[12] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x$' "$tmp/pool.out")" = 2 ] &&
    grep -qE '^ +1 .* 1\.00x$' "$tmp/pool.out" && [ -s "$tmp/pool/runs/2.jsonl" ]; then
    ok "pool-replay.sh: a row for 1 and 2 compressor threads, the busiest against the first"
else
    bad "pool-replay.sh on the tiny trace"; cat "$tmp/pool.out"
fi
for args in "--compressors 0|--compressors: '0' is not a count from 1 to 64" \
    "--iters 3 --warmup 5|--iters '3' must be an integer above --warmup '5'" \
    "--trace /nonexistent|--trace: no file /nonexistent" "--bogus|unknown flag '--bogus'"; do
    # shellcheck disable=SC2086
    msg=$(PC_TRAIN=$train "$pool" ${args%%|*} 2>&1)
    rc=$?
    if [ $rc = 2 ] && { [ "$msg" = "pool-replay.sh: ${args#*|}" ] ||
        [ "$msg" = "pool-replay.sh: ${args#*|} (see --help)" ]; }; then
        ok "pool-replay.sh ${args%%|*}: refused in one line (status 2)"
    else
        bad "pool-replay.sh ${args%%|*}: status $rc: $msg"
    fi
done

pc_done
