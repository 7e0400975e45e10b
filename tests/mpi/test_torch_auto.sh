#!/usr/bin/env bash
# --mode auto from PyTorch (pc.probe, python/pipecompress/probe.py), briefly (synthetic data,
# a few iterations):
# - torch_train.py --mode auto --servers 1 on 3 ranks, for the cnn and the vit: the probe
#   profiles the torch model (every rank), prints pc-train's lines (the compute and the
#   link measured, the six candidates' predictions, the choice and its fixed flags), the
#   job trains with the mode chosen; the printed flags in place of --mode auto --servers 1
#   give bitwise the same trained model (the probe leaves the model as it was built);
# - on one rank the probe can only choose the allreduce;
# - a script of its own: before pc.probe the job's shape is refused in one line (its
#   roles are not known yet), pc.choosing() says so; pc.probe puts back what its passes
#   changed (BatchNorm's statistics, the gradients, eval mode, torch's random state) and
#   leaves the parameters; afterwards the ranks train; in --mode ps pc.probe does nothing
#   and returns None;
# - refusals in one line with a failing status: inputs that are not a tensor (the job
#   ends), what --mode auto cannot take (--compress: status 2).
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
pc_need_torch
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
example="$PC_SRCDIR/apps/examples/torch_train.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# same A B: two state_dicts saved by torch_train.py --save, bitwise equal.
same() {
    "$py" - "$1" "$2" <<'PY'
import sys, torch
a, b = (torch.load(f) for f in sys.argv[1:])
sys.exit(0 if a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a) else 1)
PY
}

common=(--data synthetic --synthetic-samples 400 --eval none --quiet --seed 3 --warmup 1)
for arch in cnn vit; do
    b=8
    if "$run" -t 300 -np 3 "$py" "$example" --arch "$arch" --batch "$b" --iters 4 "${common[@]}" \
        --mode auto --servers 1 --save "$tmp/auto-$arch.pt" >"$tmp/auto-$arch.out" 2>&1 &&
        grep -qE "^auto: probe [0-9.]+ s: compute [0-9.]+ ms .*; with only the parameter servers' 2 workers computing [0-9.]+ ms; link r0 - r1 \(\S+, this host\): [0-9.]+ MB/s" "$tmp/auto-$arch.out" &&
        [ "$(grep -c '^auto: predict ' "$tmp/auto-$arch.out")" = 6 ] &&
        [ "$(grep -c '^auto: predict .*  <- chosen' "$tmp/auto-$arch.out")" = 1 ] &&
        grep -q '^auto: chose ' "$tmp/auto-$arch.out" &&
        grep -qE '^done: 4 iterations' "$tmp/auto-$arch.out"; then
        ok "$arch, 3 ranks: --mode auto profiles the torch model (for each layout), predicts six modes, chooses and trains ($(grep '^auto: chose' "$tmp/auto-$arch.out" | cut -d: -f2))"
    else
        bad "$arch, 3 ranks: --mode auto:"; tail -n 20 "$tmp/auto-$arch.out"
        continue
    fi
    # shellcheck disable=SC2207 # the printed flags' words
    flags=($(sed -n 's/^auto: chose [^:]*: \(.*\) (these flags.*/\1/p' "$tmp/auto-$arch.out"))
    if "$run" -t 300 -np 3 "$py" "$example" --arch "$arch" --batch "$b" --iters 4 "${common[@]}" \
        "${flags[@]}" --save "$tmp/fixed-$arch.pt" >"$tmp/fixed-$arch.out" 2>&1 &&
        same "$tmp/auto-$arch.pt" "$tmp/fixed-$arch.pt"; then
        ok "$arch: the chosen flags (${flags[*]}) give bitwise the same model without the probe"
    else
        bad "$arch: the chosen flags (${flags[*]}) do not reproduce the auto run"; tail -n 10 "$tmp/fixed-$arch.out"
    fi
done

if "$run" -t 300 -np 1 "$py" "$example" --batch 8 --iters 2 "${common[@]}" --mode auto \
    >"$tmp/one.out" 2>&1 &&
    grep -qE '^auto: probe .*; one rank: no link$' "$tmp/one.out" &&
    [ "$(grep -c '^auto: predict ' "$tmp/one.out")" = 1 ] &&
    grep -qE '^auto: chose allreduce: --mode allreduce ' "$tmp/one.out"; then
    ok "one rank: the probe can only choose the allreduce, and trains with it"
else
    bad "one rank, --mode auto:"; tail -n 10 "$tmp/one.out"
fi

# count PATTERN FILE: PATTERN's occurrences (the ranks' lines may share one: one pipe).
count() { grep -o -- "$1" "$2" | wc -l; }

# A script of its own: the refusals before the probe, what the probe restores, training
# after it; MODE_ARGS tell the mode.
cat >"$tmp/probe.py" <<'PY'
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import pipecompress as pc

pc.init(sys.argv[2:])
rank = pc.rank()
def say(msg):
    print(f"r{rank}: {msg}", flush=True)
torch.manual_seed(5)
model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.3),
                      nn.Flatten(), nn.Linear(4 * 26 * 26, 10))
x, y = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))
if pc.config()["mode"] == "auto":
    assert pc.choosing()
    try:
        pc.is_server()
        say("FAILED: is_server() answered before the probe")
    except pc.Error as e:
        assert "pc.probe" in str(e) and "\n" not in str(e), e
        say("refused before the probe: " + str(e))
    model.eval()
    model[1].running_mean.add_(0.25)  # statistics of its own, to be kept
    params = [p.detach().clone() for p in model.parameters()]
    buffers = [b.detach().clone() for b in model.buffers()]
    model[5].weight.grad = torch.full_like(model[5].weight, 7.0)
    rng = torch.get_rng_state()
    flags = pc.probe(model, x, y)
    assert isinstance(flags, str) and flags.startswith("--mode "), flags
    assert not pc.choosing()
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters())), "parameters"
    assert all(torch.equal(a, b) for a, b in zip(buffers, model.buffers())), "buffers"
    assert torch.equal(model[5].weight.grad, torch.full_like(model[5].weight, 7.0)), "grad"
    assert model[0].weight.grad is None, "a gradient left by the probe"
    assert not model.training, "eval mode"
    assert torch.equal(rng, torch.get_rng_state()), "random state"
    say(f"probe restored the model; chose: {flags}")
    model[5].weight.grad = None
    model.train()
else:
    assert not pc.choosing() and pc.probe(model, x, y) is None
    say("probe: nothing to do")
if pc.is_server():
    sys.exit(pc.run_server())
pc.attach(model)
for _ in range(2):
    F.cross_entropy(model(x), y).backward()
    pc.iteration_end()
say(f"trained as a worker of {pc.workers()}")
sys.exit(pc.finish())
PY
if "$run" -t 300 -np 3 "$py" "$tmp/probe.py" "$PC_SRCDIR/python" --mode auto --servers 1 \
    --iters 2 >"$tmp/probe.out" 2>&1 &&
    [ "$(count 'r[0-9]: refused before the probe: --mode auto has not chosen the mode yet: call pc.probe' "$tmp/probe.out")" = 3 ] &&
    [ "$(count 'r[0-9]: probe restored the model; chose: --mode ' "$tmp/probe.out")" = 3 ] &&
    [ "$(count 'r[0-9]: trained as a worker of ' "$tmp/probe.out")" -ge 2 ] &&
    ! grep -q FAILED "$tmp/probe.out"; then
    ok "pc.probe: the job's shape refused before it; afterwards BatchNorm's statistics, the gradients, eval mode and the random state as they were, the parameters untouched; the ranks then train"
else
    bad "pc.probe on a script of its own:"; tail -n 20 "$tmp/probe.out"
fi
if "$run" -t 300 -np 3 "$py" "$tmp/probe.py" "$PC_SRCDIR/python" --mode ps --servers 1 \
    --iters 2 >"$tmp/probe-ps.out" 2>&1 &&
    [ "$(count 'r[0-9]: probe: nothing to do' "$tmp/probe-ps.out")" = 3 ] &&
    [ "$(count 'r[0-9]: trained as a worker of 2' "$tmp/probe-ps.out")" = 2 ]; then
    ok "--mode ps: pc.probe does nothing and returns None; the job trains"
else
    bad "pc.probe in --mode ps:"; tail -n 20 "$tmp/probe-ps.out"
fi

# Refusals.
sed 's/flags = pc.probe(model, x, y)/flags = pc.probe(model, "x", y)/' "$tmp/probe.py" >"$tmp/bad.py"
"$run" -t 120 -np 2 "$py" "$tmp/bad.py" "$PC_SRCDIR/python" --mode auto --iters 2 \
    >"$tmp/bad.out" 2>&1
rc=$?
if [ "$rc" != 0 ] && grep -q 'probe: inputs is not a tensor (or a tuple of tensors)$' "$tmp/bad.out" &&
    ! grep -q Traceback "$tmp/bad.out"; then
    ok "pc.probe(model, 'x', y): one line naming the inputs, the job ends with status $rc"
else
    bad "pc.probe with a bad input: status $rc:"; tail -n 10 "$tmp/bad.out"
fi
"$run" -t 120 -np 3 "$py" "$example" --iters 2 "${common[@]}" --mode auto --compress topk \
    >"$tmp/usage.out" 2>"$tmp/usage.err"
rc=$?
msg=$(grep -v '^--\|^$\|mpirun\|Exit code\|Process name\|Primary job\|non-zero\|aborted\|terminated\|^ ' "$tmp/usage.err" | sed -n 1,3p)
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -q -- '--compress' <<<"$msg"; then
    ok "--mode auto --compress topk through the binding: status 2, $msg"
else
    bad "--mode auto --compress topk: status $rc (expected 2 and one line), got: $msg"
fi
pc_done
