#!/usr/bin/env bash
# apps/examples/torch_train.py --arch replay:PATH (doc/replay.md, "Through torch and DDP"):
# the tiny CI trace (tests/data/replay-tiny.json) replayed
# - through the binding, 3 ranks (2 workers + a server, top-k 1 %, pipelined), dilated
#   (--dilate 2, passed on to the runtime), with its start line, the replay's configuration
#   line and the replayed iteration against the trace's dilated forward + backward (the
#   servers step for real; a printout: the ratio is not asserted on, the machine is shared);
# - through DDP, 2 ranks, with fp16_compress_hook and powerSGD_hook (rank 2): the peer's
#   CPU work that a GPU would do is measured (more than 0 ms) and the best case reported;
# - alone (--backend local) with --replay-times: every tensor's gradient arrives once per
#   iteration, in reverse layer order, no earlier than the layers' backward times allow;
# - malformed traces refused in one line naming the field and the layer, status 2, no
#   traceback (through the example's flag for three, through its loader for every case);
# - scripts/bench/replay.sh's bad flags refused in one line; as root, replay.sh run twice
#   into one folder, which accumulates.
# Skipped (77) when /usr/bin/python3 (or $PC_PYTHON) cannot import torch.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
pc_need_torch
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
example="$PC_SRCDIR/apps/examples/torch_train.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trace="$PC_SRCDIR/tests/data/replay-tiny.json"
[ -f "$trace" ] || pc_skip "no $trace"

# The binding: 2 workers and a server.
if "$run" -t 120 -np 3 "$py" "$example" --arch "replay:$trace" --servers 1 \
    --compress topk:ratio=0.01 --iters 8 --warmup 2 --dilate 2 >"$tmp/pc.out" 2>&1 &&
    grep -q '^torch replay:tiny-cnn: 284362 parameters; 2 workers x batch 32, 8 iterations$' "$tmp/pc.out" &&
    grep -q '^replay: GPU compute replayed from .* (tiny-cnn, synthetic, batch 32, fp32), dilation 2; network, compression and servers real; gradients copied to the host at 24 GB/s (modelled)$' "$tmp/pc.out" &&
    grep -qE '^done: 8 iterations in [0-9.]+ s \([0-9]+ samples/s after 2 warm-up iterations\)$' "$tmp/pc.out" &&
    grep -qE '^replay: iteration [0-9.]+ ms \(mean of 6\), forward \+ backward x 2: 15.40 ms, ratio [0-9.]+; hold overshoot p50 [0-9]+ us, p99 [0-9]+ us$' "$tmp/pc.out"; then
    ok "binding, 3 ranks: $(grep '^replay: iteration' "$tmp/pc.out")"
else
    bad "binding, 3 ranks:"; tail -n 20 "$tmp/pc.out"
fi

# The binding's allreduce, 2 ranks: the optimizer step is held as the GPU's device time
# (pc.attach(device_step=...)), not run on this CPU.
if "$run" -t 120 -np 2 "$py" "$example" --arch "replay:$trace" --mode allreduce \
    --iters 6 --warmup 2 >"$tmp/ar.out" 2>&1 &&
    grep -q '; network and the allreduce real; .*; --mode allreduce: the optimizer step held as device time, ' "$tmp/ar.out" &&
    grep -qE '^replay: iteration [0-9.]+ ms \(mean of 4\), trace sum x 1: [0-9.]+ ms, ratio [0-9.]+; ' "$tmp/ar.out"; then
    ok "binding, allreduce, 2 ranks, the step held: $(grep '^replay: iteration' "$tmp/ar.out")"
else
    bad "binding, allreduce, 2 ranks:"; tail -n 20 "$tmp/ar.out"
fi
# device_step is refused where the servers step, and when it is not a number of seconds.
cat >"$tmp/ds.py" <<'EOF'
import sys, torch, pipecompress as pc
v = float(sys.argv[1])
pc.init(sys.argv[2:])
if pc.is_server():
    sys.exit(pc.run_server())
try:
    pc.attach(torch.nn.Linear(4, 4), device_step=v)
except pc.Error as e:
    print("refused:", e)
    sys.exit(3)
EOF
for arg in "1.0|--mode ps --servers 1|only with --mode allreduce" "-1|--mode allreduce|not a number of seconds"; do
    IFS='|' read -r v flags want <<<"$arg"
    # shellcheck disable=SC2086 # the flags' words
    if PYTHONPATH="$PC_SRCDIR/python" "$run" -t 60 -np 3 "$py" "$tmp/ds.py" "$v" $flags >"$tmp/ds.out" 2>&1; then
        bad "attach(device_step=$v) with $flags was taken"
    elif grep -q "refused: attach: device_step: .*$want" "$tmp/ds.out"; then
        ok "attach(device_step=$v) with $flags: $(grep -m1 refused: "$tmp/ds.out")"
    else
        bad "attach(device_step=$v) with $flags:"; tail -n 5 "$tmp/ds.out"
    fi
done

# DDP, 2 ranks, each hook: the peer's CPU work measured and removed.
for hook in fp16 powersgd; do
    extra=()
    [ "$hook" = powersgd ] && extra=(--powersgd-rank 2 --powersgd-start 2)
    if "$run" -t 120 -np 2 "$py" "$example" --arch "replay:$trace" --backend ddp \
        --ddp-hook "$hook" "${extra[@]}" --iters 8 --warmup 3 --ddp-port "$(pc_free_port)" \
        >"$tmp/$hook.out" 2>&1 &&
        grep -q "^torch replay:tiny-cnn (DDP, gloo, hook $hook): 284362 parameters; 2 workers x batch 32, 8 iterations$" "$tmp/$hook.out" &&
        grep -qE '^done: 8 iterations in [0-9.]+ s \([0-9]+ samples/s after 3 warm-up iterations\)$' "$tmp/$hook.out" &&
        grep -qE '^replay: peer.s CPU work that a GPU would do: ([0-9]*[1-9][0-9]*\.[0-9]+|0\.[0-9]*[1-9][0-9]*) ms per iteration .*; best case [0-9.]+ ms \([0-9]+ samples/s\)$' "$tmp/$hook.out"; then
        ok "DDP $hook, 2 ranks: $(grep '^replay: peer' "$tmp/$hook.out")"
    else
        bad "DDP $hook, 2 ranks:"; tail -n 20 "$tmp/$hook.out"
    fi
done

# Alone, with every gradient's ready time: once per iteration, reverse layer order, no
# earlier than the forward sum plus the backward times of the layers after it.
if "$py" "$example" --arch "replay:$trace" --backend local --iters 5 --warmup 1 \
    --replay-times "$tmp/times.json" --quiet >"$tmp/local.out" 2>&1 &&
    "$py" - "$trace" "$tmp/times.json" >"$tmp/check.out" 2>&1 <<'EOF'
import json, sys
tr, times = (json.load(open(p)) for p in sys.argv[1:3])
names = [f"{l['name']}.{j}" for l in tr["layers"] for j in range(len(l["params"]))]
assert times["names"] == names, times["names"]
fwd = sum(l["forward_ms"] for l in tr["layers"]) / 1e3
for row in times["iterations"]:
    r = row["ready_s"]
    assert all(v is not None for v in r), row
    after = 0.0
    for i in reversed(range(len(tr["layers"]))):
        lay = tr["layers"][i]
        after += lay["backward_ms"] / 1e3
        first = sum(len(l["params"]) for l in tr["layers"][:i])
        for j in range(len(lay["params"])):
            # each gradient after its layer's backward (less 0.5 ms of timer slack)
            assert r[first + j] >= fwd + after - 5e-4, (lay["name"], r[first + j], fwd + after)
    order = [max(r[sum(len(l["params"]) for l in tr["layers"][:i]) + j]
                 for j in range(len(tr["layers"][i]["params"])))
             for i in range(len(tr["layers"])) if tr["layers"][i]["params"]]
    assert order == sorted(order, reverse=True), order
print(f"{len(times['iterations'])} iterations, {len(names)} tensors each, in reverse layer order")
EOF
then
    ok "local, ready times: $(cat "$tmp/check.out")"
else
    bad "local, ready times:"; cat "$tmp/local.out" "$tmp/check.out"
fi

# Malformed traces: through the example's flag (one line, status 2, no traceback) ...
printf '{"model": "m", "device": "d", "batch": 1, "precision": "fp32", "source": "s", "layers": [{"name": "a", "params": [[4]], "forward_ms": 1, "backward_ms": -1}]}' >"$tmp/neg.json"
printf '{"model": "m", "device": "d", "batch": 1, "precision": "fp32", "source": "s", "layers": [], "modle": 1}' >"$tmp/key.json"
refuse() {
    local name=$1 pattern=$2 st
    shift 2
    "$py" "$example" --backend local "$@" >"$tmp/$name.out" 2>&1
    st=$?
    if [ "$st" = 2 ] && [ "$(wc -l <"$tmp/$name.out")" = 1 ] &&
        grep -qE "$pattern" "$tmp/$name.out"; then
        ok "$name: status 2, '$(cat "$tmp/$name.out")'"
    else
        bad "$name: status $st, output:"; head -n 15 "$tmp/$name.out"
    fi
}
refuse negative "^torch_train.py: --arch replay:$tmp/neg.json: layers\[0\] \(a\)\.backward_ms: -1 is negative$" \
    --arch "replay:$tmp/neg.json"
refuse unknown-key "^torch_train.py: --arch replay:$tmp/key.json: unknown key 'modle' at the top level " \
    --arch "replay:$tmp/key.json"
refuse missing "^torch_train.py: --arch replay:$tmp/none.json: No such file or directory$" \
    --arch "replay:$tmp/none.json"
refuse dilate "^torch_train.py: --dilate: 0.5 is not in 1..1000$" --arch "replay:$trace" --dilate 0.5

# ... and every case through the loader the flag uses.
if PYTHONPATH="$PC_SRCDIR/apps/examples" "$py" - "$tmp" >"$tmp/cases.out" 2>&1 <<'EOF'
import json, os, sys
import torch_replay as tr
tmp = sys.argv[1]
L = lambda **kw: dict({"name": "a", "params": [[4, 2]], "forward_ms": 1, "backward_ms": 2}, **kw)
T = lambda **kw: dict({"model": "m", "device": "d", "batch": 1, "precision": "fp32",
                       "source": "s", "layers": [L()]}, **kw)
cases = [
    ("not JSON", "{", "not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ("NaN", '{"a": NaN}', "NaN is not JSON (times must be finite numbers)"),
    ("1e400", json.dumps(T()).replace('"forward_ms": 1', '"forward_ms": 1e400'),
     "layers[0] (a).forward_ms: inf is not finite"),
    ("duplicate key", '{"model": "m", "model": "n"}', "key 'model' twice in one object"),
    ("top level", "[]", "the top level is not an object"),
    ("missing", json.dumps({k: v for k, v in T().items() if k != "source"}),
     "'source' is missing"),
    ("model type", json.dumps(T(model=3)), "model: not a string"),
    ("batch", json.dumps(T(batch=0)), "batch: 0 is not an integer >= 1"),
    ("batch bool", json.dumps(T(batch=True)), "batch: true is not an integer >= 1"),
    ("optimizer", json.dumps(T(optimizer_ms=-2)), "optimizer_ms: -2 is negative"),
    ("layers empty", json.dumps(T(layers=[])), "layers: not a non-empty list"),
    ("layer type", json.dumps(T(layers=[3])), "layers[0]: not an object"),
    ("no name", json.dumps(T(layers=[{"params": []}])), "layers[0].name: missing"),
    ("empty name", json.dumps(T(layers=[L(name="")])), "layers[0].name: not a non-empty string"),
    ("same name", json.dumps(T(layers=[L(), L()])),
     "layers[1] (a).name: the name of layers[0] too (names are unique)"),
    ("layer key", json.dumps(T(layers=[L(fwd_ms=1)])),
     "layers[0] (a): unknown key 'fwd_ms' (known: name, params, forward_ms, backward_ms)"),
    ("layer missing", json.dumps(T(layers=[{"name": "a", "params": [], "forward_ms": 1}])),
     "layers[0] (a).backward_ms: missing"),
    ("time type", json.dumps(T(layers=[L(forward_ms="1")])), 'layers[0] (a).forward_ms: "1" is not a number'),
    ("params type", json.dumps(T(layers=[L(params={})])), "layers[0] (a).params: not a list of shapes"),
    ("no dims", json.dumps(T(layers=[L(params=[[]])])),
     "layers[0] (a).params[0]: not a shape (a list of 1..8 dimensions)"),
    ("9 dims", json.dumps(T(layers=[L(params=[[1] * 9])])),
     "layers[0] (a).params[0]: not a shape (a list of 1..8 dimensions)"),
    ("zero dim", json.dumps(T(layers=[L(params=[[4, 0]])])),
     "layers[0] (a).params[0][1]: 0 is not an integer >= 1"),
    ("float dim", json.dumps(T(layers=[L(params=[[4, 2.5]])])),
     "layers[0] (a).params[0][1]: 2.5 is not an integer >= 1"),
    ("2^31", json.dumps(T(layers=[L(params=[[65536, 32768]])])),
     "layers[0] (a).params[0]: 2147483648 elements, not below 2^31"),
    ("no params", json.dumps(T(layers=[L(params=[])])), "layers: no layer has parameters"),
]
bad = 0
for name, text, want in cases:
    path = os.path.join(tmp, "case.json")
    with open(path, "w") as f:
        f.write(text)
    try:
        tr.load_trace(path)
        got = "accepted"
    except tr.TraceError as e:
        got = str(e)
    if got != want or "\n" in got:
        print(f"{name}: got {got!r}, want {want!r}")
        bad += 1
big = os.path.join(tmp, "big.json")
with open(big, "w") as f:
    f.truncate((64 << 20) + 1)
try:
    tr.load_trace(big)
    print("64 MiB + 1: accepted"); bad += 1
except tr.TraceError as e:
    if str(e) != f"{(64 << 20) + 1} bytes, over the 64 MiB limit":
        print(f"64 MiB + 1: {e}"); bad += 1
print(f"{len(cases) + 1} malformed traces, {bad} not refused as expected")
sys.exit(1 if bad else 0)
EOF
then
    ok "loader: $(tail -n 1 "$tmp/cases.out")"
else
    bad "loader:"; cat "$tmp/cases.out"
fi

# replay.sh's bad flags: one line, status 2, before any run (no root needed).
for args in "--settings bogus|--settings: unknown setting 'bogus' (one of: ddp compute " \
    "--rates 0|--rates: 0 is not positive" "--bogus|unknown argument '--bogus'"; do
    # shellcheck disable=SC2086
    msg=$("$PC_SRCDIR/scripts/bench/replay.sh" ${args%%|*} 2>&1)
    rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && [[ $msg == "replay.sh: ${args#*|}"* ]]; then
        ok "replay.sh ${args%%|*}: refused in one line (status 2)"
    else
        bad "replay.sh ${args%%|*}: status $rc: $msg"
    fi
done

# scripts/bench/replay.sh (root: emulated nodes), twice into one --out: the tiny trace at 1
# and 2.5 Gbit/s per node, then at 1 Gbit/s again. The folder accumulates: replay.txt holds
# both runs' blocks, cells.txt one line a cell (the rerun replaces its own), and the
# summary covers both cells.
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
    rs="$PC_SRCDIR/scripts/bench/replay.sh"
    export PIPECOMPRESS_LIB="$PC_BUILDDIR/src/.libs/libpipecompress.so.0"
    flags=(--traces "$trace" --workers 1 --iters 3 --warmup 1 --settings compute --out "$tmp/rs")
    if "$rs" "${flags[@]}" --rates "1 2.5" >"$tmp/rs.out" 2>&1 &&
        "$rs" "${flags[@]}" --rates 1 >>"$tmp/rs.out" 2>&1; then
        cells=$(awk '{ print $1 "@" $2 }' "$tmp/rs/cells.txt" | sort | tr '\n' ' ')
        blocks=$(grep -c '^replay.sh: ' "$tmp/rs/replay.txt")
        summ=$(grep -c '^replay-tiny, \(1\|2\.5\) Gbit/s per node, 1 workers' "$tmp/rs/summary.txt")
        if [ "$cells" = "replay-tiny@1 replay-tiny@2.5 " ] && [ "$blocks" = 2 ] && [ "$summ" = 2 ]; then
            ok "replay.sh: two runs into one folder, 2 cells, 2 blocks, both in the summary"
        else
            bad "replay.sh: cells '$cells', $blocks blocks, $summ cells in the summary"
        fi
    else
        bad "replay.sh on the tiny trace failed"; tail -n 15 "$tmp/rs.out"
    fi
else
    echo "note: not root (or no ip): replay.sh not tried"
fi
pc_done
