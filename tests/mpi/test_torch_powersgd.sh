#!/usr/bin/env bash
# --compress powersgd through the binding against torch's own powerSGD_hook (DDP, gloo):
# the same model (apps/examples/torch_train.py's cnn), data, order, batch, optimizer, rank
# 2, two plain iterations first, error feedback and warm start, on 2 workers:
#  - started from the same Q (the binding's first draw, pc.lowrank_q, which torch's hook
#    is given through --powersgd-q), worker 0's batch loss agrees with DDP's at every one
#    of 12 iterations within float tolerance (relative 1e-5; measured 1.3e-7): the same
#    algorithm;
#  - torch's hook from its own random Q departs from it once compression starts (more
#    than 1e-3 at some iteration after the plain ones): the comparison can tell;
#  - pc.lowrank_q names the cnn's four weights with Q of shape (cols, 2);
#  - the same with the example's --optimizer adamw (torch.optim.AdamW through
#    pc.DistributedOptimizer on the servers: two parameter groups, the biases' without
#    decay, a LinearLR warm-up) and --clip-grad-norm 0.05, which bites: the servers take the
#    global norm of the mean gradient with P^ Q^T for each matrix and the workers step their
#    matrices' copies at the group's rate with the clipping coefficient; against DDP +
#    powerSGD_hook + AdamW + torch.nn.utils.clip_grad_norm_, within 1e-5 at all 12;
#  - --powersgd-q without a powersgd run, or naming no file for DDP, is refused in one line.
# Skipped when /usr/bin/python3 (or $PC_PYTHON) cannot import torch.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
pc_need_torch
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
example="$PC_SRCDIR/apps/examples/torch_train.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--arch cnn --data synthetic --synthetic-samples 2000 --batch 8 --iters 12 --eval none
        --quiet --lr 0.01 --lr-schedule constant --warmup 1)
ddp=(--backend ddp --ddp-hook powersgd --powersgd-rank 2 --powersgd-start 2)

"$run" -t 300 -np 3 "$py" "$example" "${common[@]}" --compress powersgd:rank=2,warmup=2 \
    --compress-min-bytes 0 --powersgd-q "$tmp/q.pt" --loss-log "$tmp/pc.txt" >"$tmp/pc.out" 2>&1 \
    || { bad "the binding with --compress powersgd"; tail -n 10 "$tmp/pc.out"; }
"$run" -t 300 -np 2 "$py" "$example" "${common[@]}" "${ddp[@]}" --powersgd-q "$tmp/q.pt" \
    --loss-log "$tmp/ddp-q.txt" --ddp-port "$(pc_free_port)" >"$tmp/ddp-q.out" 2>&1 \
    || { bad "DDP + powerSGD_hook from the binding's Q"; tail -n 10 "$tmp/ddp-q.out"; }
"$run" -t 300 -np 2 "$py" "$example" "${common[@]}" "${ddp[@]}" \
    --loss-log "$tmp/ddp.txt" --ddp-port "$(pc_free_port)" >"$tmp/ddp.out" 2>&1 \
    || { bad "DDP + powerSGD_hook"; tail -n 10 "$tmp/ddp.out"; }

# AdamW with its groups, a torch scheduler and clipping (issue 47), from the same Q.
adamw=(--optimizer adamw --lr 0.001 --weight-decay 0.05 --lr-warmup 2 --clip-grad-norm 0.05)
"$run" -t 300 -np 3 "$py" "$example" "${common[@]}" "${adamw[@]}" \
    --compress powersgd:rank=2,warmup=2 --compress-min-bytes 0 --powersgd-q "$tmp/qa.pt" \
    --loss-log "$tmp/pc-adamw.txt" >"$tmp/pc-adamw.out" 2>&1 \
    || { bad "the binding with --compress powersgd --optimizer adamw"; tail -n 10 "$tmp/pc-adamw.out"; }
"$run" -t 300 -np 2 "$py" "$example" "${common[@]}" "${adamw[@]}" "${ddp[@]}" \
    --powersgd-q "$tmp/qa.pt" --loss-log "$tmp/ddp-adamw.txt" --ddp-port "$(pc_free_port)" \
    >"$tmp/ddp-adamw.out" 2>&1 \
    || { bad "DDP + powerSGD_hook + AdamW from the binding's Q"; tail -n 10 "$tmp/ddp-adamw.out"; }

if out=$("$py" - "$tmp/q.pt" <<'PY'
import sys, torch
q = torch.load(sys.argv[1])
want = {"conv1.weight": (25, 2), "conv2.weight": (800, 2), "fc1.weight": (3136, 2),
        "fc2.weight": (1024, 2)}
got = {k: tuple(v.shape) for k, v in q.items()}
print(got)
sys.exit(0 if got == want else 1)
PY
); then
    ok "pc.lowrank_q: $out"
else
    bad "pc.lowrank_q: $out"
fi

# worst ITER-FROM FILE-A FILE-B: the largest relative difference of the losses from
# iteration ITER-FROM on, and where.
worst() {
    "$py" - "$@" <<'PY'
import sys
first, a, b = int(sys.argv[1]), sys.argv[2], sys.argv[3]
la = dict(l.split() for l in open(a))
lb = dict(l.split() for l in open(b))
if sorted(la) != sorted(lb) or len(la) != 12:
    sys.exit(f"iterations differ: {len(la)} and {len(lb)}")
d = [(abs(float(la[k]) - float(lb[k])) / abs(float(lb[k])), int(k)) for k in la if int(k) >= first]
print("%.3g at iteration %d" % max(d))
PY
}
if same=$(worst 0 "$tmp/pc.txt" "$tmp/ddp-q.txt") &&
    awk -v d="${same%% *}" 'BEGIN { exit !(d < 1e-5) }'; then
    ok "from the same Q, the binding's powersgd and DDP + powerSGD_hook: losses within $same"
else
    bad "from the same Q, the losses of the binding's powersgd and DDP + powerSGD_hook differ: $same"
    paste "$tmp/pc.txt" "$tmp/ddp-q.txt"
fi
if same=$(worst 0 "$tmp/pc-adamw.txt" "$tmp/ddp-adamw.txt") &&
    awk -v d="${same%% *}" 'BEGIN { exit !(d < 1e-5) }' &&
    grep -q "clipped to 0.05" "$tmp/pc-adamw.out"; then
    ok "AdamW (two groups, LinearLR, clipped to 0.05) with powersgd on the servers and DDP + powerSGD_hook + AdamW + clip_grad_norm_, from the same Q: losses within $same"
else
    bad "AdamW + clipping with powersgd against DDP + powerSGD_hook: losses differ: $same"
    paste "$tmp/pc-adamw.txt" "$tmp/ddp-adamw.txt"; tail -n 5 "$tmp/pc-adamw.out"
fi
if apart=$(worst 2 "$tmp/pc.txt" "$tmp/ddp.txt") &&
    awk -v d="${apart%% *}" 'BEGIN { exit !(d > 1e-3) }'; then
    ok "from torch's own random Q the losses depart once compression starts: $apart"
else
    bad "from torch's own Q the losses stay within $apart: the comparison would not tell"
fi

# Refusals, one line, status 2.
refuse() { # WANT ARGS...
    local want=$1 out rc; shift
    out=$("$run" -t 120 -np 2 "$py" "$example" "${common[@]}" "$@" 2>&1)
    rc=$?
    if [ $rc = 2 ] && grep -qF -- "$want" <<<"$out"; then
        ok "refused (2): $want"
    else
        bad "not refused as '$want' (rc $rc)"; echo "$out" | tail -n 3
    fi
}
refuse "--powersgd-q: only with --compress powersgd:... or --backend ddp --ddp-hook powersgd" \
    --backend ddp --powersgd-q "$tmp/q.pt" --ddp-port "$(pc_free_port)"
refuse "--powersgd-q: no file $tmp/none.pt" "${ddp[@]}" --powersgd-q "$tmp/none.pt" \
    --ddp-port "$(pc_free_port)"
pc_done
