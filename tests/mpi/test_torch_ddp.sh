#!/usr/bin/env bash
# DistributedDataParallel in apps/examples/torch_train.py, the binding's peer in the same
# harness (same model, data order, batch, optimizer), with each of torch's communication
# hooks, briefly (the example's vit, which needs only torch; synthetic data, batch 4):
# - --ddp-hook none, fp16 and powersgd (rank 2, 2 plain iterations then 3 compressed) train
#   and say so; bf16 trains where this torch can, and is otherwise refused in one line with
#   torch's reason (torch 1.13 on the CPU: gloo's allreduce refuses bfloat16);
# - flags the chosen backend or arch would ignore, and bad values, are refused in one line
#   with status 2: --ddp-hook and --ddp-port with --backend pipecompress, --powersgd-rank
#   and --powersgd-start without --ddp-hook powersgd, --powersgd-rank 0,
#   --powersgd-start 1, --dropout on an arch without dropout, --dropout 1, --optimizer
#   adadelta with --update servers, --lr-step on the torch path, --lr-gamma 1.5;
# - a rank other than the first waits PEER_GRACE_S before it prints such an error, naming
#   itself (else its exit could abort the job before the first rank printed).
# Skipped when /usr/bin/python3 (or $PC_PYTHON) cannot import torch.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
pc_need_torch
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
example="$PC_SRCDIR/apps/examples/torch_train.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ddp NAME ARGS...: the vit through DDP on 2 ranks, output in $tmp/NAME.out; its status.
ddp() {
    local name=$1
    shift
    "$run" -t 300 -np 2 "$py" "$example" --arch vit --backend ddp --data synthetic \
        --synthetic-samples 200 --batch 4 --eval none --warmup 1 --ddp-port "$(pc_free_port)" \
        "$@" >"$tmp/$name.out" 2>&1
}
done_re='^done: 5 iterations in [0-9.]+ s'
for hook in none fp16 powersgd; do
    extra=()
    [ "$hook" = powersgd ] && extra=(--powersgd-rank 2 --powersgd-start 2)
    if ddp "$hook" --iters 5 --ddp-hook "$hook" "${extra[@]}" &&
        grep -q "^torch vit (DDP, gloo, hook $hook): 542090 parameters;" "$tmp/$hook.out" &&
        grep -qE "$done_re" "$tmp/$hook.out"; then
        ok "--ddp-hook $hook${extra[*]:+ ${extra[*]}}: $(grep -m1 '^done:' "$tmp/$hook.out")"
    else
        bad "--ddp-hook $hook:"; tail -n 15 "$tmp/$hook.out"
    fi
done
ddp bf16 --iters 5 --ddp-hook bf16
st=$?
if [ "$st" = 0 ] && grep -qE "$done_re" "$tmp/bf16.out"; then
    ok "--ddp-hook bf16: this torch can: $(grep -m1 '^done:' "$tmp/bf16.out")"
elif [ "$st" = 2 ] && [ "$(grep -cE '^torch_train.py: --ddp-hook bf16: ' "$tmp/bf16.out")" = 1 ] &&
    ! grep -q Traceback "$tmp/bf16.out"; then
    ok "--ddp-hook bf16: refused in one line, status 2: '$(grep -m1 '^torch_train.py: ' "$tmp/bf16.out")'"
else
    bad "--ddp-hook bf16: status $st"; tail -n 15 "$tmp/bf16.out"
fi

# refuse NAME PATTERN ARGS...: the example exits 2, with PATTERN as its one line of output
# on stderr (printed once, not once per rank) and no traceback.
refuse() {
    local name=$1 pattern=$2 st
    shift 2
    "$run" -t 120 -np 2 "$py" "$example" --data synthetic --synthetic-samples 200 --iters 1 \
        --eval none "$@" >"$tmp/$name.out" 2>&1
    st=$?
    if [ "$st" = 2 ] && [ "$(grep -cE "$pattern" "$tmp/$name.out")" = 1 ] &&
        ! grep -q Traceback "$tmp/$name.out"; then
        ok "$name: status 2, '$(grep -m1 -E "$pattern" "$tmp/$name.out")'"
    else
        bad "$name: status $st, output:"; head -n 15 "$tmp/$name.out"
    fi
}
# A rank other than the first waits before it prints and exits (else, under mpirun, its
# exit could abort the job before the first rank printed the error): rank 1 alone, in the
# background while the cases below run, takes the wait and names itself.
(
    start=$(date +%s)
    OMPI_COMM_WORLD_RANK=1 "$py" "$example" --data synthetic --arch vit --dropout 1 \
        >"$tmp/peer.out" 2>&1
    echo "$? $(($(date +%s) - start))" >"$tmp/peer.st"
) &
peer=$!
refuse hook-without-ddp '^torch_train.py: --ddp-hook: only with --backend ddp ' --ddp-hook fp16
refuse port-without-ddp '^torch_train.py: --ddp-port: only with --backend ddp$' --ddp-port 29999
refuse rank-without-powersgd '^torch_train.py: --powersgd-rank: only with --backend ddp --ddp-hook powersgd$' \
    --backend ddp --ddp-hook fp16 --powersgd-rank 2
refuse start-without-powersgd '^torch_train.py: --powersgd-start: only with --backend ddp --ddp-hook powersgd$' \
    --backend ddp --powersgd-start 5
refuse rank-zero '^torch_train.py: --powersgd-rank: 0 is not a positive integer$' \
    --backend ddp --ddp-hook powersgd --powersgd-rank 0
refuse start-one '^torch_train.py: --powersgd-start: 1 is below 2 ' \
    --backend ddp --ddp-hook powersgd --powersgd-start 1
refuse dropout-lstm '^torch_train.py: --dropout: --arch lstm has no dropout \(cnn, vgg16 and vit do\)$' \
    --arch lstm --dropout 0.2
refuse dropout-range '^torch_train.py: --dropout: 1.0 is not in \[0, 1\)$' --arch vit --dropout 1
refuse test-samples-zero '^torch_train.py: --test-samples: 0 is not a positive integer$' --test-samples 0
refuse adadelta-servers '^torch_train.py: --optimizer adadelta: the servers run sgd, adam and adamw; adadelta steps on the workers \(--update workers, its default\)$' \
    --optimizer adadelta --update servers
refuse lr-step-torch '^torch_train.py: --lr-step: with --optimizer adamw or adadelta, --update workers or --clip-grad-norm the example.s --lr-schedule step steps every epoch$' \
    --optimizer adamw --lr-schedule step --lr-step 5
refuse lr-gamma-range '^torch_train.py: --lr-gamma: 1.5 is not in \(0, 1\]$' \
    --optimizer adadelta --lr-schedule step --lr-gamma 1.5
refuse bad-arch "^torch_train.py: argument --arch: invalid choice: 'resnet34' \(choose from " --arch resnet34
refuse bad-schedule "^torch_train.py: argument --lr-schedule: invalid choice: 'linear' " --backend ddp --lr-schedule linear
wait "$peer"
read -r st secs <"$tmp/peer.st"
grace=$(sed -n 's/^PEER_GRACE_S = \([0-9]*\)$/\1/p' "$example")
if [ "$st" = 2 ] && [ "$secs" -ge "${grace:-1}" ] &&
    [ "$(cat "$tmp/peer.out")" = 'torch_train.py: rank 1: --dropout: 1.0 is not in [0, 1)' ]; then
    ok "rank 1 alone: status 2 after ${secs} s (the wait is $grace s), '$(cat "$tmp/peer.out")'"
else
    bad "rank 1 alone: status $st after ${secs} s (the wait is ${grace:-unknown} s), output:"
    head -n 5 "$tmp/peer.out"
fi
pc_done
