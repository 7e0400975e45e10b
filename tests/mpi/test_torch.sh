#!/usr/bin/env bash
# The PyTorch binding (python/pipecompress) under mpirun, with the build tree's library:
# - one worker, --compress none: every iteration equals torch.optim.SGD on the same batch
#   (momentum, weight decay; one and two backward passes per iteration; p.grad kept, or
#   set to None before each iteration so that the binding must copy the new p.grad into
#   its buffer): the parameters and each iteration's step (a lost gradient fails this);
#   and --optimizer adamw, adam (amsgrad): every iteration bitwise torch.optim.AdamW's,
#   Adam's; pc.DistributedOptimizer (2 workers: AdamW's two groups, warm-up + cosine from
#   torch.optim.lr_scheduler, the scheduler on either object) bitwise torch.optim.AdamW's
#   on the averaged gradient, and its refusals (another class, a disagreeing flag, a
#   parameter in no group, the wrapped step, a scheduler stepped on one worker only);
#   --update workers with the user's step (2 workers: pc_worker_set_user_step, then
#   pc_worker_grad_wait and torch.optim.SGD on p.grad): bitwise torch.optim.SGD's on the
#   mean gradient after every iteration; pc.DistributedOptimizer(update="workers") with
#   Adadelta, StepLR and opt.clip_grad_norm_ likewise (pc.init given no --update: the
#   wrapper chooses the placement), both workers alike, and its guards (zero_grad between
#   backward and step, a p.grad replaced after backward); the placement's refusals (given
#   --update servers, after the runtime started, workers that choose differently);
#   torch.nn.utils.clip_grad_norm_ after backward with update="servers": refused;
#   opt.clip_grad_norm_ with update="servers" (2 servers: the norm from their exchange)
#   against torch's clip_grad_norm_ and AdamW on the averaged gradient, to float tolerance;
# - 2 workers + 1 server, a model with tied weights, an unused branch, a frozen layer,
#   BatchNorm, a weight read outside its module, dropout (tests/python/check_zoo.py says
#   what must hold), with top-k and with --mode allreduce;
# - pipelined and inline give bitwise the same model; a run checkpointed and resumed gives
#   the same parameters after every iteration as one that was not; --metrics and
#   --timeline are written with the binding's loss and layer events;
# - apps/examples/torch_train.py trains the cnn and the lstm a few iterations, and its
#   loss falls; its cnn (with dropout) checkpointed and resumed gives the same loss at
#   every iteration as a run that was not; --optimizer adamw (--lr-warmup, the no-decay
#   group, --clip-grad-norm) through the servers and through the workers (--update
#   workers) gives DDP's losses, --optimizer adadelta --lr-schedule step through the
#   workers DDP's bitwise; a wrapped optimizer turns the codec's default momentum
#   correction off (AdamW on the servers, SGD with momentum on the workers), and top-k under
#   AdamW on the servers gets lazy moments unless given;
# - bad flags, --mode auto without pc.probe, --device cuda, float64 and non-contiguous parameters, pc.init twice, a server
#   that never serves, a worker leaving without pc.finish, an extra backward pass, a
#   metrics note of no JSON, another model on one worker, the forward on another thread,
#   argv as a string, update="workers" with powersgd: one line naming the problem, a
#   non-zero exit on every rank, no hang (each job under a time limit).
# Skipped when /usr/bin/python3 (or $PC_PYTHON) cannot import torch.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
pc_need_torch
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
cases="$PC_SRCDIR/tests/python/torch_cases.py"
tmp=$(mktemp -d)
job=
trap '[ -n "$job" ] && pc_kill_tree "$job"; rm -rf "$tmp"' EXIT
# SIGINT at its default for the launchers started in the background (test_stop.sh says why).
default_int=(env --default-signal=INT)

# job NAME RANKS ARGS...: run a case, output in $tmp/NAME.out; returns the job's status.
job() {
    local name=$1 np=$2
    shift 2
    "$run" -t 180 -np "$np" "$py" "$@" >"$tmp/$name.out" 2>&1
}

# sgd2 and sgd-none under the runtime's own schedules: the reference steps with torch's
# LambdaLR of their documented equivalent, and pc.lr() must give its rate every iteration.
for c in sgd sgd2 sgd-none sgd2-none; do
    sched=()
    [ "$c" = sgd2 ] && sched=(--lr-schedule step --lr-step 2 --lr-gamma 0.5)
    [ "$c" = sgd-none ] && sched=(--lr-schedule cosine --lr-warmup 2)
    if job "$c" 2 "$cases" "$c" "$tmp/$c" --compress none --iters 6 --lr 0.1 --momentum 0.9 \
        --weight-decay 0.001 "${sched[@]}" &&
        grep -qE '^sgd: 6 iterations, [12] backward passes each, p.grad (kept|set to None) before each, .*largest relative difference from torch.optim.SGD [0-9.e+-]+, of a step [0-9.e+-]+$' "$tmp/$c.out"; then
        ok "$c: every iteration equals torch.optim.SGD ($(grep -o 'difference.*' "$tmp/$c.out"))"
    else
        bad "$c:"; tail -n 20 "$tmp/$c.out"
    fi
done
# What rank 0 prints (pc.init's default verbose; the case asks for progress_every=0): the
# flags received, the configuration, a progress line at every iteration.
f="$tmp/sgd-none.out"
if grep -qx 'pipecompress: received --lr-schedule cosine' "$f" &&
    grep -qx 'pipecompress: received --lr 0.1' "$f" &&
    grep -qE '^pipecompress: mode ps, 1 worker, 1 server, codec none, pipeline on, compressors [0-9]+, update servers, seed [0-9]+; model: 4 parameter tensors, 387 parameters$' "$f" &&
    grep -qE '^pipecompress: optimizer sgd \(the servers step; the runtime.s flags\): lr 0.1, weight-decay 0.001, momentum 0.9, nesterov [a-z]+; schedule cosine \(over --iters 6\), warm-up 2 iterations$' "$f" &&
    [ "$(grep -cE '^pipecompress: iteration [1-6] \| loss [0-9.]+ \| [0-9]+ samples/s \| lr [0-9.e-]+$' "$f")" = 6 ] &&
    grep -qx 'pipecompress: iteration 1 | loss [0-9.]* | [0-9]* samples/s | lr 0.05' "$f"; then
    ok "rank 0 prints the flags received, the configuration and a progress line an iteration ($(grep -m1 '^pipecompress: iteration 6' "$f"))"
else
    bad "the binding's configuration and progress lines:"; grep '^pipecompress' "$f" | sed -n 1,12p
fi

# The servers' Adam and AdamW against torch.optim's, bitwise after every iteration.
adam_case() { # adam_case NAME FLAGS...
    local c=$1
    shift
    if job "$c" 2 "$cases" "${c%%+*}" "$tmp/$c" --compress none --iters 20 "$@" &&
        grep -qE '^adamw?: 20 iterations, .*: every parameter bitwise equal to torch.optim.Adam' \
            "$tmp/$c.out"; then
        ok "$c: every iteration bitwise equals torch.optim ($*)"
    else
        bad "$c:"; tail -n 20 "$tmp/$c.out"
    fi
}
adam_case adamw-none --optimizer adamw --weight-decay 0.01 --lr 0.01
adam_case adam-none+amsgrad --optimizer adam --weight-decay 0.01 --lr 0.01 --amsgrad \
    --betas 0.8,0.99 --eps 1e-6

# --update workers, 2 workers: the user's torch.optim.SGD on the mean gradient in p.grad
# (pc_worker_set_user_step, pc_worker_grad_wait), bitwise torch.optim's on the mean
# gradient every iteration. (The runtime's own step there is test_runtime.sh's, bitwise
# --update servers'; torch_cases.py update checks it from Python too, by hand: one launch
# of torch costs CI about 9 s.)
if job update-user 3 "$cases" update-user "$tmp/update-user" --compress none --iters 6 \
    --update workers --lr 0.1 --momentum 0.9 --weight-decay 0.001 &&
    grep -qE '^update: 6 iterations, 2 workers, .* every parameter bitwise torch.optim' "$tmp/update-user.out"; then
    ok "update-user: $(grep -o "the step.*worker" "$tmp/update-user.out"), bitwise torch.optim.SGD's"
else
    bad "update-user:"; tail -n 20 "$tmp/update-user.out"
fi

# pc.DistributedOptimizer(torch.optim.Adadelta, update="workers"), 2 workers, pc.init given
# no --update: the wrapper chooses the placement (pc_worker_set_update; worker 0 tells the
# server at the start); every iteration bitwise torch.optim.Adadelta's on the mean gradient,
# clipped at odd iterations by opt.clip_grad_norm_ (the same total norm as torch's), a
# StepLR on the wrapper; every worker's parameters alike after every iteration; and the
# guards tried on the way, each one line. (--update workers given to pc.init with the
# wrapper's default placement: the example's workers run below.)
if job workers 3 "$cases" workers "$tmp/workers" --compress none --iters 6 &&
    grep -qE '^workers: 6 iterations, 2 workers, torch.optim.Adadelta on every worker \(StepLR, clipped to 0.05 at 3 iterations; update=.workers. chosen by the wrapper\): every parameter bitwise' "$tmp/workers.out" &&
    grep -qE '^pipecompress: mode ps, 2 workers, 1 server, .* update workers, ' "$tmp/workers.out" &&
    [ "$(wc -l <"$tmp/workers/hash-r0.txt")" = 6 ] && cmp -s "$tmp/workers/hash-r0.txt" "$tmp/workers/hash-r1.txt"; then
    ok "update='workers' chosen by the wrapper: Adadelta, StepLR and clip_grad_norm_ bitwise torch.optim's on the mean gradient, both workers' parameters alike every iteration"
else
    bad "update='workers':"; tail -n 20 "$tmp/workers.out"
fi
while IFS= read -r want; do
    if grep -qxF "refused: $want" "$tmp/workers.out"; then
        ok "update='workers' refuses: '${want:0:90}...'"
    else
        bad "update='workers' did not refuse with: '$want'"
    fi
done <<'EOF2'
DistributedOptimizer: Adadelta cannot run on the servers (they run torch.optim.SGD, Adam and AdamW): use update='workers', which runs any torch optimizer on the workers
zero_grad() between backward() and step() of a pc.DistributedOptimizer(update='workers'): it would wipe the averaged gradients the runtime writes into p.grad (the workers would step on zeros); call it before backward(), or not at all (the runtime zeroes p.grad at each step)
the gradient of 0.weight was changed after backward handed it to the runtime (p.grad was replaced by another tensor): the runtime reads it from there (with the pipeline on maybe still now: a data race), so the change is lost or corrupts the run; clip with opt.clip_grad_norm_(max_norm) of a pc.DistributedOptimizer instead
EOF2

# pc.DistributedOptimizer (python/pipecompress/optim.py), 2 workers: AdamW with a decay and
# a no-decay group under LinearLR then CosineAnnealingLR, every iteration bitwise
# torch.optim.AdamW's on the averaged gradient, the scheduler given the wrapper; the case
# first tries the refusals below, each one line. (The scheduler given the wrapped optimizer:
# groups-skew below, bitwise for 3 iterations before its refusal; `groups` runs it whole.)
for c in groups-wrap; do
    if job "$c" 3 "$cases" "$c" "$tmp/$c" --compress none --iters 8 --weight-decay 0.05 \
        --update servers &&
        grep -qE '^groups: 8 iterations, 2 workers, .*: every parameter bitwise equal to torch.optim.AdamW.s on the averaged gradient after every iteration$' "$tmp/$c.out"; then
        ok "$c: the scheduler $(grep -o 'on the wrap[a-z ]*[a-z]' "$tmp/$c.out"), every iteration bitwise torch.optim.AdamW's"
    else
        bad "$c:"; tail -n 20 "$tmp/$c.out"
    fi
done
if grep -qx 'pipecompress: optimizer AdamW (pc.DistributedOptimizer; the servers step), 2 parameter groups; learning rates from param_groups at every iteration' "$tmp/groups-wrap.out" &&
    grep -qE '^pipecompress: group 0: 2 tensors, weight_decay 0.05, lr 0.01, betas 0.9,0.999, eps 1e-08, amsgrad no$' "$tmp/groups-wrap.out" &&
    grep -qE '^pipecompress: group 1: 2 tensors, .*weight_decay 0(,|$)' "$tmp/groups-wrap.out"; then
    ok "the configuration names the wrapped optimizer and each group's hyperparameters"
else
    bad "the wrapper's configuration lines:"; grep '^pipecompress' "$tmp/groups-wrap.out" | sed -n 1,10p
fi
while IFS= read -r want; do
    if grep -qxF "refused: $want" "$tmp/groups-wrap.out"; then
        ok "DistributedOptimizer refuses: '$want'"
    else
        bad "DistributedOptimizer did not refuse with: '$want'"
    fi
done <<'EOF2'
DistributedOptimizer: Adagrad cannot run on the servers (they run torch.optim.SGD, Adam and AdamW): use update='workers', which runs any torch optimizer on the workers
DistributedOptimizer: --weight-decay 0.05 given to pc.init disagrees with the AdamW's weight_decay 0.025: drop the flag (the optimizer's values are used) or make them equal
DistributedOptimizer: parameter 2.weight is attached but in no parameter group of the AdamW: add it to a group, or set requires_grad=False before pc.attach
DistributedOptimizer: update='workers', but pc.init was given --update servers (the servers step): drop the flag (the wrapper then chooses) or give --update workers
the wrapped optimizer's own step() was called: with pc.DistributedOptimizer the servers step the parameters, and a step here too would make the workers diverge; call step() on the DistributedOptimizer
DistributedOptimizer.clip_grad_norm_: call it after backward() (no gradient of this iteration yet) and before step()
DistributedOptimizer.clip_grad_norm_: worker r0: clipping at iteration 1, but not from the run's first (0): the servers step an iteration's chunks as they arrive unless clipping began with the run; clip from its first iteration on (max_norm inf where no clipping is wanted)
EOF2

# Clipping on the servers (issue 47 item 5): pc.DistributedOptimizer(AdamW, two groups) and
# opt.clip_grad_norm_(0.05) after backward, 2 workers and 2 servers (256-byte chunks: both
# own some, so the norm comes from their exchange), against torch.nn.utils.clip_grad_norm_
# then torch.optim.AdamW on the averaged gradient, to float tolerance after every iteration
# (one of them not clipped: its step() says so); both workers alike; the refusals.
if job clip 4 "$cases" clip "$tmp/clip" --compress none --iters 6 --servers 2 --chunk-bytes 256 &&
    grep -qE '^clip: 6 iterations, 2 workers, 2 servers, AdamW clipped to 0.05 on the servers at 5 iterations .*every iteration$' "$tmp/clip.out" &&
    [ "$(wc -l <"$tmp/clip/hash-r0.txt")" = 6 ] && cmp -s "$tmp/clip/hash-r0.txt" "$tmp/clip/hash-r1.txt"; then
    ok "clip on the servers: $(grep -o 'norm [0-9.e+-]* \.\. [0-9.e+-]*): the norm within [0-9.e+-]*.*parameter within [0-9.e+-]*' "$tmp/clip.out")"
else
    bad "clip on the servers:"; tail -n 20 "$tmp/clip.out"
fi
while IFS= read -r want; do
    grep -qxF "refused: $want" "$tmp/clip.out" && ok "clip_grad_norm_ refuses: '${want:0:90}...'" ||
        bad "clip_grad_norm_ did not refuse with: '$want'"
done <<'EOF2'
DistributedOptimizer.clip_grad_norm_: norm_type 1.0 with update='servers': the servers clip by the 2-norm only (norm_type=2.0)
DistributedOptimizer.clip_grad_norm_: error_if_nonfinite=True with update='servers': the servers step before the norm reaches the workers (a norm that is not finite comes back as inf or nan); leave it False
DistributedOptimizer.clip_grad_norm_: max_norm 0.0 is not a number above 0 (inf: the norm without clipping)
EOF2

zoo() { # zoo NAME RANKS FLAGS...: the zoo case, then its checks
    local name=$1 np=$2
    shift 2
    if job "$name" "$np" "$cases" zoo "$tmp/$name" --iters 10 "$@" &&
        "$py" "$PC_SRCDIR/tests/python/check_zoo.py" "$tmp/$name" >"$tmp/$name.check" 2>&1; then
        ok "zoo $*: $(grep -c '^ok:' "$tmp/$name.check") properties hold"
    else
        bad "zoo $*:"; tail -n 20 "$tmp/$name.out"; cat "$tmp/$name.check" 2>/dev/null
    fi
}
zoo topk 3 --compress topk:ratio=0.1 --metrics "$tmp/m.jsonl" --timeline "$tmp/t.json"
zoo inline 3 --compress topk:ratio=0.1 --pipeline off
zoo allreduce 2 --mode allreduce
# Without pc.synchronize() between iterations: only the binding's own waits order each
# forward after its parameters' update (side.weight's at the model's start, also after
# --resume); pipelined and inline, and a resumed run, must still agree bitwise.
export PC_ZOO_SYNC=0
if job nosync-pipe 3 "$cases" zoo "$tmp/nosync-pipe" --iters 10 --compress topk:ratio=0.1 &&
    job nosync-inline 3 "$cases" zoo "$tmp/nosync-inline" --iters 10 --compress topk:ratio=0.1 --pipeline off &&
    job nosync-ck1 3 "$cases" zoo "$tmp/nosync-res" --iters 5 --compress topk:ratio=0.1 --checkpoint-dir "$tmp/ck-nosync" &&
    job nosync-ck2 3 "$cases" zoo "$tmp/nosync-res" --iters 10 --compress topk:ratio=0.1 --checkpoint-dir "$tmp/ck-nosync" --resume &&
    cmp -s "$tmp/nosync-pipe/final-r0.bin" "$tmp/nosync-inline/final-r0.bin" &&
    "$py" - "$tmp" <<'PY'; then
import sys, torch
t = sys.argv[1]
a, b = torch.load(f"{t}/nosync-pipe/final-r0.pt"), torch.load(f"{t}/nosync-res/final-r0.pt")
sys.exit(0 if all(torch.equal(a[k], b[k]) for k in a if not k.startswith("bn.running") and "num_batches" not in k) else 1)
PY
    ok "no synchronize between iterations: pipelined == inline bitwise, and checkpoint at 5 + resume to 10 gives the same parameters"
else
    bad "no synchronize between iterations: runs differ"; tail -n 5 "$tmp"/nosync-*.out
fi
unset PC_ZOO_SYNC
if grep -qxF "refused: DistributedOptimizer: update='workers' after the runtime started with the step on the servers (at the first forward pass, pc.iteration(), ...): create it right after pc.attach(model)" "$tmp/topk.out"; then
    ok "update='workers' after the runtime started (the servers step): refused in one line"
else
    bad "update='workers' after the start:"; grep '^refused' "$tmp/topk.out"
fi
if cmp -s "$tmp/topk/final-r0.bin" "$tmp/inline/final-r0.bin" &&
    cmp -s "$tmp/topk/hash-r0.txt" "$tmp/inline/hash-r0.txt"; then
    ok "pipelined and inline: bitwise the same parameters after every iteration, same final state"
else
    bad "pipelined and inline differ"
fi
if grep -q '"role": "worker", "iteration": 9,.*"loss": [0-9]' "$tmp/m.jsonl.r0" 2>/dev/null ||
    grep -q '"role": "worker", "iteration": 9,.*"loss": [0-9]' "$tmp/m.jsonl" 2>/dev/null; then
    ok "--metrics: worker lines with the loss the script reported"
else
    bad "--metrics:"; ls "$tmp"; head -c 400 "$tmp"/m.jsonl* 2>/dev/null
fi
if grep -q '"forward enc"' "$tmp/t.json" && grep -q '"backward head.weight"' "$tmp/t.json"; then
    ok "--timeline: the binding's forward and backward events are in the trace"
else
    bad "--timeline: no forward/backward events"
fi

# Checkpoint at iteration 5 and resume to 10 against 10 straight (the constant schedule
# does not depend on --iters): the parameters agree bitwise after every iteration.
if job ck1 3 "$cases" zoo "$tmp/resumed" --iters 5 --compress topk:ratio=0.1 \
    --checkpoint-dir "$tmp/ck" &&
    job ck2 3 "$cases" zoo "$tmp/resumed" --iters 10 --compress topk:ratio=0.1 \
        --checkpoint-dir "$tmp/ck" --resume &&
    grep -q 'resuming from the checkpoint of iteration 5' "$tmp/ck2.out" &&
    [ "$(wc -l <"$tmp/resumed/hash-r0.txt")" = 10 ] &&
    cmp -s "$tmp/topk/hash-r0.txt" "$tmp/resumed/hash-r0.txt"; then
    ok "checkpoint at 5, resume to 10: the parameters of every iteration bitwise those of an uninterrupted run"
else
    bad "resume:"; tail -n 5 "$tmp/ck1.out" "$tmp/ck2.out"; diff "$tmp/topk/hash-r0.txt" "$tmp/resumed/hash-r0.txt" | sed -n 1,5p
fi

example="$PC_SRCDIR/apps/examples/torch_train.py"
for arch in cnn lstm; do
    if job "ex-$arch" 3 "$example" --arch "$arch" --iters 30 --eval end --warmup 5 &&
        "$py" - "$tmp/ex-$arch.out" <<'PY'; then
import re, sys
text = open(sys.argv[1]).read()
losses = [float(x) for x in re.findall(r"^iteration \d+/30: loss ([0-9.]+)", text, re.M)]
done = re.search(r"^done: 30 iterations in [0-9.]+ s \(\d+ samples/s after 5 warm-up iterations\); final test accuracy [0-9.]+%$", text, re.M)
first = re.search(r"^iteration 1/30: loss ([0-9.]+)", text, re.M)
sys.exit(0 if done and first and losses and losses[-1] < float(first.group(1)) else 1)
PY
        ok "torch_train.py --arch $arch: trains, the loss falls ($(grep -E '^(iteration 1/|iteration 30/)' "$tmp/ex-$arch.out" | grep -o 'loss [0-9.]*' | tr '\n' ' '))"
    else
        bad "torch_train.py --arch $arch:"; tail -n 15 "$tmp/ex-$arch.out"
    fi
done

# SIGTERM to the launcher (what a batch system sends): every rank stops at one iteration
# boundary with a final checkpoint, status 143; --resume continues from it.
set -m
"${default_int[@]}" "$run" -t 300 -np 3 "$py" "$example" --epochs 1000 --eval none \
    --checkpoint-dir "$tmp/ck-term" >"$tmp/term.out" 2>&1 &
job=$!
for _ in $(seq 1200); do grep -q '^iteration 1/' "$tmp/term.out" && break; sleep 0.1; done
sleep 1
kill -TERM "$job"
wait "$job"
st=$?
job=
at=$(sed -n 's/^stopped by signal 15 after \([0-9]*\) iterations; continue with --resume$/\1/p' "$tmp/term.out")
if [ "$st" = 143 ] && [ -n "$at" ] && [ -e "$tmp/ck-term/ckpt-$(printf %012d "$at")/MANIFEST" ]; then
    ok "SIGTERM to the launcher: status 143, stopped at iteration $at with a checkpoint"
    if job resume-term 3 "$example" --iters "$((at + 5))" --eval none --checkpoint-dir "$tmp/ck-term" --resume &&
        grep -q "resumed at $at" "$tmp/resume-term.out" && grep -q '^done: 5 iterations' "$tmp/resume-term.out"; then
        ok "--resume after the stop: 5 more iterations from $at"
    else
        bad "--resume after SIGTERM:"; tail -n 5 "$tmp/resume-term.out"
    fi
else
    bad "SIGTERM: status $st, stop line '$at'"; tail -n 8 "$tmp/term.out"
fi

# The example's cnn (dropout 0.5: torch's random numbers seeded by the iteration) resumes
# bitwise: 4 iterations checkpointed, resumed to 8, the same loss at every iteration as 8
# straight (--loss-log: the float exactly; the constant schedule, which does not depend on
# --iters).
exflags=(--arch cnn --data synthetic --synthetic-samples 256 --batch 8 --eval none
         --lr-schedule constant --compress topk:ratio=0.1)
if job ex-straight 3 "$example" "${exflags[@]}" --iters 8 --loss-log "$tmp/loss-straight.txt" &&
    job ex-ck 3 "$example" "${exflags[@]}" --iters 4 --checkpoint-dir "$tmp/ck-ex" \
        --loss-log "$tmp/loss-resumed.txt" &&
    job ex-res 3 "$example" "${exflags[@]}" --iters 8 --checkpoint-dir "$tmp/ck-ex" --resume \
        --loss-log "$tmp/loss-resumed.txt" &&
    grep -q 'resumed at 4' "$tmp/ex-res.out" && [ "$(wc -l <"$tmp/loss-straight.txt")" = 8 ] &&
    cmp -s "$tmp/loss-straight.txt" "$tmp/loss-resumed.txt"; then
    ok "torch_train.py --arch cnn (dropout): checkpoint at 4, resume to 8: the same 8 losses bitwise"
else
    bad "torch_train.py --arch cnn resume:"; tail -n 3 "$tmp/ex-res.out"
    diff "$tmp/loss-straight.txt" "$tmp/loss-resumed.txt" | sed -n 1,5p
fi

# The example's torch optimizer (issue 47): --optimizer adamw (timm's no-decay group,
# --lr-warmup 2 iterations of LinearLR, then CosineAnnealingLR), --compress none, 2
# workers: the batch losses of 5 iterations through the servers (update="servers") and
# through every worker (--update workers given to pc.init, the wrapper's default placement
# then) equal DDP's with torch.optim.AdamW to float tolerance (1e-5 relative), all three
# with --clip-grad-norm 0.5, which bites (the gradients' global norm is about 1 here: the
# servers clip by the norm they exchange, the workers with torch's clip_grad_norm_ on the
# averaged gradient, DDP with torch's after its backward).
adamw=(--arch lstm --data synthetic --synthetic-samples 256 --batch 8 --iters 5 --eval none
       --optimizer adamw --lr 0.002 --weight-decay 0.05 --lr-warmup 2 --clip-grad-norm 0.5)
if job ex-adamw-ddp 2 "$example" "${adamw[@]}" --backend ddp --ddp-port "$(pc_free_port)" \
        --loss-log "$tmp/loss-ddp.txt" &&
    job ex-adamw-servers 3 "$example" "${adamw[@]}" --compress none --loss-log "$tmp/loss-servers.txt" &&
    job ex-adamw-workers 3 "$example" "${adamw[@]}" --compress none --update workers \
        --loss-log "$tmp/loss-workers.txt" &&
    grep -qx 'optimizer adamw (torch.optim, every worker): lr 0.002, weight decay 0.05 (group 1, biases and norm weights: 0); warm-up 2 then cosine, clipped to 0.5' "$tmp/ex-adamw-ddp.out" &&
    grep -qx 'optimizer adamw (pc.DistributedOptimizer, update=servers): lr 0.002, weight decay 0.05 (group 1, biases and norm weights: 0); warm-up 2 then cosine, clipped to 0.5' "$tmp/ex-adamw-servers.out" &&
    grep -qx 'optimizer adamw (pc.DistributedOptimizer, update=workers): lr 0.002, weight decay 0.05 (group 1, biases and norm weights: 0); warm-up 2 then cosine, clipped to 0.5' "$tmp/ex-adamw-workers.out" &&
    "$py" - "$tmp" >"$tmp/adamw.cmp" 2>&1 <<'PY'; then
import sys
t = sys.argv[1]
losses = {n: [float(line.split()[1]) for line in open(f"{t}/loss-{n}.txt")]
          for n in ("ddp", "servers", "workers")}
if any(len(v) != 5 for v in losses.values()):
    sys.exit(f"not 5 losses each: {losses}")
if len(set(losses["ddp"])) < 5:
    sys.exit(f"the loss did not move: {losses['ddp']}")
worst = max(abs(a - b) / abs(b) for n in ("servers", "workers")
            for a, b in zip(losses[n], losses["ddp"]))
print(f"{worst:.3g}")
sys.exit(0 if worst <= 1e-5 else f"largest relative difference {worst:.3g}: {losses}")
PY
    ok "torch_train.py --optimizer adamw --clip-grad-norm 0.5: 5 losses through the servers and through the workers equal DDP + torch.optim.AdamW's (largest relative difference $(cat "$tmp/adamw.cmp"))"
else
    bad "torch_train.py --optimizer adamw against DDP:"; cat "$tmp/adamw.cmp" 2>/dev/null
    tail -n 5 "$tmp"/ex-adamw-*.out
fi

# --optimizer adadelta (pytorch/examples' MNIST recipe: lr 1, StepLR every epoch, here
# gamma 0.5 over 2 epochs of 4 iterations): through every worker (the example chooses
# update="workers": the servers cannot run Adadelta), --compress none, the 8 batch losses
# equal DDP's bitwise (the same float operations on the same averaged gradient).
adadelta=(--arch lstm --data synthetic --synthetic-samples 100 --batch 12 --epochs 2 --eval none
          --optimizer adadelta --lr 1 --lr-schedule step --lr-gamma 0.5)
if job ex-adadelta-ddp 2 "$example" "${adadelta[@]}" --backend ddp --ddp-port "$(pc_free_port)" \
        --loss-log "$tmp/loss-ad-ddp.txt" &&
    job ex-adadelta-workers 3 "$example" "${adadelta[@]}" --compress none \
        --loss-log "$tmp/loss-ad-workers.txt" &&
    grep -qx 'optimizer adadelta (torch.optim, every worker): lr 1, weight decay 0; x0.5 every epoch' "$tmp/ex-adadelta-ddp.out" &&
    grep -qx 'optimizer adadelta (pc.DistributedOptimizer, update=workers): lr 1, weight decay 0; x0.5 every epoch' "$tmp/ex-adadelta-workers.out" &&
    [ "$(wc -l <"$tmp/loss-ad-ddp.txt")" = 8 ] && [ "$(sort -u -k2 "$tmp/loss-ad-ddp.txt" | wc -l)" -gt 1 ] &&
    cmp -s "$tmp/loss-ad-ddp.txt" "$tmp/loss-ad-workers.txt"; then
    ok "torch_train.py --optimizer adadelta --lr-schedule step: 8 losses through the workers bitwise DDP's"
else
    bad "torch_train.py --optimizer adadelta against DDP:"
    paste "$tmp/loss-ad-ddp.txt" "$tmp/loss-ad-workers.txt" 2>/dev/null | sed -n 1,8p
    tail -n 5 "$tmp"/ex-adadelta-*.out
fi

# refuse NAME RANKS STATUS PATTERN ARGS...: the job exits STATUS (any non-zero for "x"),
# every rank ends within the limit, and the output has PATTERN as one line.
refuse() {
    local name=$1 np=$2 want=$3 pattern=$4 st
    shift 4
    job "$name" "$np" "$@"
    st=$?
    if { [ "$want" = x ] && [ "$st" != 0 ] && [ "$st" != 124 ]; } || [ "$st" = "$want" ]; then
        # mpirun forwards each rank's stdout and stderr on its own, so another rank's line
        # may lack its newline when ours arrives ("...received --iters 3torch_cases.py:
        # rank 2 ..."): our messages are cut onto lines of their own before matching.
        sed 's/\(.\)\(torch_cases\.py: \)/\1\n\2/g' "$tmp/$name.out" >"$tmp/$name.lines"
        if [ "$(grep -cE "$pattern" "$tmp/$name.lines")" -ge 1 ]; then
            ok "$name: exit $st, '$(grep -m1 -E "$pattern" "$tmp/$name.lines")'"
            return
        fi
    fi
    bad "$name: exit $st (wanted $want), output:"; head -n 20 "$tmp/$name.out"
}
refuse bad-flag 3 2 '^torch_cases.py: --servers: .x. is not an integer$' "$cases" zoo "$tmp/x" --servers x
refuse unknown-flag 3 2 '^torch_cases.py: .*--no-such-flag' "$cases" zoo "$tmp/x" --no-such-flag
# --mode auto is taken (tests/mpi/test_torch_auto.sh), but a script that skips pc.probe
# learns at its first question about the job's shape.
refuse auto-unprobed 3 x '^torch_cases.py: --mode auto has not chosen the mode yet: call pc.probe\(model, inputs, targets\) on every rank first' "$cases" zoo "$tmp/x" --mode auto
refuse device 3 2 '^torch_cases.py: --device cuda: the binding hands the runtime CPU tensors only' "$cases" zoo "$tmp/x" --device cuda
refuse float64 3 x '^torch_cases.py: attach: parameter 0.weight is float64: PipeCompress trains float32 parameters' "$cases" dtype "$tmp/x"
refuse strided 3 x '^torch_cases.py: attach: parameter 2.weight is not contiguous' "$cases" strided "$tmp/x"
refuse init-twice 3 x '^torch_cases.py: pipecompress: pc.init\(\) was already called in this process$' "$cases" twice "$tmp/x"
refuse lazy-worker 2 x '^torch_cases.py: (rank 1 is a server and never called pc.run_server\(\)|worker rank 0 ended without pc.attach\(model\))$' \
    -c 'import sys; sys.argv[0] = "torch_cases.py"; sys.path.insert(0, "'"$PC_SRCDIR"'/python"); import pipecompress as pc; pc.init([])'
refuse lazy-server 3 x '^torch_cases.py: rank 2 is a server and never called pc.run_server\(\)$' "$cases" lazyserver "$tmp/x" --iters 3
refuse views 3 x '^torch_cases.py: attach: parameters a and b share memory ' "$cases" views "$tmp/x" --iters 3
refuse rebind 3 x '^torch_cases.py: parameter 0.weight was given new memory after pc.attach ' "$cases" rebind "$tmp/x" --iters 3
refuse early-exit 3 x '^torch_cases.py: worker rank 1 ended after 2 iterations without pc.finish\(\): ending the job$' "$cases" early "$tmp/x" --iters 6
refuse extra-pass 3 x '^torch_cases.py: the gradient of 2.(weight|bias) came 2 times in one iteration, backward_passes_per_step is 1 ' "$cases" passes "$tmp/x" --iters 3
refuse bad-note 3 x '^torch_cases.py: metrics_note: not a JSON object: ' "$cases" note "$tmp/x" --iters 3
refuse other-model 3 x "^torch_cases.py: attach: worker 1's model differs from worker 0's " "$cases" mismatch "$tmp/x" --iters 3
refuse other-thread 3 x '^torch_cases.py: forward pass of the model on another thread than pc.init.s ' "$cases" thread "$tmp/x" --iters 3
refuse argv-string 3 2 "^torch_cases.py: pc.init: argv is a string; pass a list of words" "$cases" initstr "$tmp/x" --iters 3
# torch.nn.utils.clip_grad_norm_ after backward with update="servers" and the pipeline on:
# a write into gradients the compressor thread may still read (issue 47 item 2), refused at
# opt.step() naming the first parameter written.
refuse clip-race 3 x "^torch_cases.py: the gradient of 0.weight was changed after backward handed it to the runtime \(written in place: clip_grad_norm_, p.grad.mul_, zero_grad, ...\): .* clip with opt.clip_grad_norm_\(max_norm\) of a pc.DistributedOptimizer instead$" \
    "$cases" clip-race "$tmp/x" --compress none --iters 4
# The workers must agree on the placement the wrapper chooses: worker 0 update="workers",
# worker 1 update="servers" is refused at the start, on every rank, before the servers
# learn anything.
refuse placement-skew 3 x "^torch_cases.py: attach: start: worker r0: workers chose different placements of the step \(servers on some, workers on others: " \
    "$cases" placement-skew "$tmp/x" --compress none
# update="workers" with a codec given momentum correction: p.grad would carry momentum,
# not the averaged gradient (a new user's trial found it trained silently).
refuse workers-momentum 3 x "^torch_cases.py: DistributedOptimizer: worker r[01]: the step on the workers with your optimizer: --compress topk corrects momentum on the workers \(momentum=0\.9\), so p.grad would carry momentum, not the averaged gradient; give the codec momentum=0 " \
    "$cases" workers "$tmp/x" --compress topk:ratio=0.1,momentum=0.9 --iters 2
# The same with AdamW on the servers: refused whole, naming what it would feed (the line
# was once cut at 160 bytes).
refuse servers-momentum 3 x "^torch_cases.py: DistributedOptimizer: worker r[01]: parameter group 0: --compress topk corrects momentum on the workers \(momentum=0\.9\), which would feed momentum into Adam's moments; give the codec momentum=0 \(e\.g\. --compress topk:ratio=0\.01,momentum=0\)$" \
    "$cases" codec-default-servers "$tmp/x" --compress topk:ratio=0.01,momentum=0.9 --iters 3
# update="workers" with powersgd: its matrices' step is the workers' already (from P^ and
# Q, the servers' step replayed), so the wrapper's placement is refused, saying what works.
refuse workers-powersgd 3 x "^torch_cases.py: DistributedOptimizer\(update='workers'\): worker r[01]: the step on the workers with --compress powersgd:rank=1: .*; keep the step on the servers \(the binding's update='servers', which runs SGD, Adam and AdamW with their groups\) or take another codec$" \
    "$cases" workers "$tmp/x" --compress powersgd:rank=1 --iters 2
# Left at its default, the correction is turned off by the wrapper (the optimizer steps as
# written): AdamW on the servers with the default codec, SGD with momentum on the workers
# with dgc; each trains, and pc.config() says momentum=0. With Adam(W) on the servers a
# sparsifier left without a warm-up gets the default one (top-k and DGC dense=1000), and so
# does it with Adadelta on the workers ("adaptive"), not with SGD there; PowerSGD under
# AdamW gets its 1000 dense iterations ("servers-psgd"); top-k and DGC under AdamW on the
# servers ("servers", "servers-dgc") also a v frozen after those 1000 (the console's Adam
# line says so, with top-k's lazy moments and DGC's dense ones). Those compress their one
# chunk (--compress-min-bytes 0): the servers, whose flags have no warm-up, take it from
# worker 0 (TAG_WARMUP) or would refuse the warm-up's larger messages. SGD's chunk is under
# --compress-min-bytes: worker 0 warns that the codec compresses nothing.
for u in servers:topk:ratio=0.01,momentum=0,dense=1000 workers:dgc:ratio=0.1,momentum=0 \
    adaptive:dgc:ratio=0.1,momentum=0,dense=1000 servers-psgd:powersgd:rank=1,warmup=1000 \
    servers-dgc:dgc:ratio=0.1,momentum=0,dense=1000; do
    place=${u%%:*} want=${u#*:}
    codec=(--compress-min-bytes 0)
    [ "$place" = adaptive ] && codec+=(--compress dgc:ratio=0.1)
    [ "$place" = servers-psgd ] && codec+=(--compress powersgd:rank=1)
    [ "$place" = servers-dgc ] && codec+=(--compress dgc:ratio=0.1)
    [ "$place" = workers ] && codec=(--compress dgc:ratio=0.1)
    case=${place%-psgd}
    if job "default-$place" 3 "$cases" "codec-default-${case%-dgc}" "$tmp/x" "${codec[@]}" --iters 3 &&
        grep -qx "codec: $want" "$tmp/default-$place.out" &&
        { [ "$place" != servers-dgc ] ||
            grep -q "^pipecompress: adam moments dense, v frozen after 1000 steps" "$tmp/default-$place.out"; } &&
        { [ "$place" != servers ] ||
            grep -q "^pipecompress: adam moments lazy, v frozen after 1000 steps" "$tmp/default-$place.out"; } &&
        { [ "$place" != workers ] ||
            grep -q "warn: --compress $want compresses nothing here: every one of the 1 chunks is under --compress-min-bytes 65536 " "$tmp/default-$place.out"; }; then
        ok "the codec's default momentum correction off (and the warm-up but with SGD), $place: codec $want"
    else
        bad "codec-default-$place:"; tail -n 15 "$tmp/default-$place.out"
    fi
done
# digest_as A B C: job A's first digest line is there, is job B's, and is not job C's.
digest_as() {
    local d
    d=$(grep -m1 '^digest: ' "$tmp/$1.out") && [ -n "$d" ] &&
        [ "$d" = "$(grep -m1 '^digest: ' "$tmp/$2.out")" ] &&
        [ "$d" != "$(grep -m1 '^digest: ' "$tmp/$3.out")" ]
}
# The servers' Adam moments left to the codec: top-k's default is lazy (only the entries
# that arrived step), for the groups' AdamW as for pc.init's --optimizer adamw: the same
# parameters as --adam-moments lazy given, not those of dense. Without the warm-up (whose
# first iterations send nearly every entry, where lazy and dense agree) and over one
# compressed chunk. The servers apply the rule themselves; pc.config() says it.
mom=(codec-default-servers "$tmp/x" --compress "topk:ratio=0.05,warmup=0" --compress-min-bytes 0 --iters 3)
if job moments-default 3 "$cases" "${mom[@]}" &&
    job moments-lazy 3 "$cases" "${mom[@]}" --optimizer adamw --adam-moments lazy &&
    job moments-dense 3 "$cases" "${mom[@]}" --optimizer adamw --adam-moments dense &&
    grep -qx "adam moments: lazy" "$tmp/moments-default.out" &&
    grep -q "^pipecompress: adam moments lazy, " "$tmp/moments-default.out" &&
    digest_as moments-default moments-lazy moments-dense; then
    ok "AdamW on the servers with top-k: lazy moments by default (the parameters of --adam-moments lazy, not dense's)"
else
    bad "top-k's default Adam moments:"; tail -n 5 "$tmp"/moments-*.out
fi
# A dense warm-up's frozen v left to the codec: the servers apply the rule themselves for
# the groups' AdamW (pc.init without --optimizer), v frozen after dense=2's 2 steps: the
# parameters of --adam-freeze-after 2 given, not those of 0 (never).
frz=(codec-default-servers "$tmp/x" --compress "dgc:ratio=0.1,dense=2" --compress-min-bytes 0 --iters 5)
if job freeze-default 3 "$cases" "${frz[@]}" &&
    job freeze-given 3 "$cases" "${frz[@]}" --optimizer adamw --adam-freeze-after 2 &&
    job freeze-never 3 "$cases" "${frz[@]}" --optimizer adamw --adam-freeze-after 0 &&
    grep -q "^pipecompress: adam moments dense, v frozen after 2 steps" "$tmp/freeze-default.out" &&
    digest_as freeze-default freeze-given freeze-never; then
    ok "AdamW on the servers with dgc:dense=2: v frozen after 2 steps by default (the parameters of --adam-freeze-after 2, not 0's)"
else
    bad "a dense warm-up's default frozen v:"; tail -n 5 "$tmp"/freeze-*.out
fi
# A group's lr set between backward and step(): its rates went with the first gradient
# (the rates to 6 significant digits, not torch's 17).
refuse groups-late 3 x "^torch_cases.py: DistributedOptimizer: parameter group 0's lr changed from 0\.00[0-9]{1,6} to 0\.00[0-9]{1,6} during iteration 2, after its rates went to the servers with its first gradient \(they step it with 0\.00[0-9]{1,6}\): set the lr before the forward pass, or step a torch.optim.lr_scheduler after opt.step\(\)$" \
    "$cases" groups-late "$tmp/x" --compress none --iters 8
# The script's own parser took --lr: pc.init(strict=True) refuses on every rank; without
# strict rank 0 warns (console.py's check, run directly: no job needed).
refuse shadow 2 x "^torch_cases.py: pc.init\(strict=True\): --lr is on the command line but did not reach pc.init \(the script's own argument parser took it\): PipeCompress runs with --lr 0.05; pass it on \(pc.init\(rest, lr=args.lr\)\) or rename the script's flag$" \
    "$cases" shadow "$tmp/x" --lr 0.2 --iters 3
"$py" - "$PC_SRCDIR/python" >"$tmp/warn.out" 2>&1 <<'PY'
import sys, types
sys.path.insert(0, sys.argv[1])
from pipecompress import console as report
s = types.SimpleNamespace(config={"lr": "0.05", "seed": "1", "servers": "1", "update": "servers"}, rank=0,
                          reporter=report.Reporter(5), words=["--servers=1", "-c", "none"])
report.check_flags(s, ["--seed", "7", "--servers", "1", "--lr=0.2", "--update", "workers", "-v"],
                   strict=False)
print("-- started, with a pc.DistributedOptimizer", flush=True)
later = list(s.shadowed_later)
report.shadowed_at_start(s, types.SimpleNamespace(optimizer=object()))
print("-- started, without", flush=True)
s.shadowed_later = later
report.shadowed_at_start(s, types.SimpleNamespace(optimizer=None))
PY
if [ "$(grep -c 'pipecompress: warning: --seed is on the command line but did not reach pc.init .*runs with --seed 1; pass it on (pc.init(rest, seed=args.seed)) or rename the script.s flag (pc.init(strict=True) refuses this)$' "$tmp/warn.out")" = 1 ] &&
    [ "$(sed -n '/^-- started, without/,$p' "$tmp/warn.out" | grep -c '^pipecompress: warning: --\(lr\|update\) is on the command line')" = 2 ] &&
    [ "$(sed -n '1,/^-- started, without/p' "$tmp/warn.out" | grep -c '^pipecompress: warning: --\(lr\|update\) ')" = 0 ] &&
    ! grep -q 'warning: --servers' "$tmp/warn.out" &&
    grep -qx 'pipecompress: received --servers 1' "$tmp/warn.out"; then
    ok "a runtime flag the script's parser kept: rank 0 warns, one line each; --lr and --update (a wrapper's) only at the start and only without a wrapper ($(grep -c warning "$tmp/warn.out") lines)"
else
    bad "the shadowed flags' warning:"; cat "$tmp/warn.out"
fi
# A scheduler stepped on one worker only (pc.DistributedOptimizer): the servers refuse, at
# iteration 3, after 3 iterations each bitwise torch.optim.AdamW's (any difference would
# end the job before, with another line).
refuse groups-skew 3 x "^torch_cases.py: server r2: worker r1's learning rate of parameter group 0 at iteration 3 is 0\.0090450849718747[0-9]*, worker r0's 0\.01: every worker must step the same schedule \(a scheduler stepped on one worker only\?\)$" \
    "$cases" groups-skew "$tmp/x" --compress none --iters 8
# The example's data files: a missing training set (before MPI starts), a test set missing
# beside the training set (rank 0 reads it: after pc.init through the parameter server,
# before the rendezvous under DDP): one line each, no traceback.
mkdir -p "$tmp/trainonly" && cp /usr/share/datasets/fashion-mnist/train-* "$tmp/trainonly/" 2>/dev/null
refuse data-missing 3 1 '^torch_train.py: --data: /nonexistent: neither train-images-idx3-ubyte.gz nor train-images-idx3-ubyte: ' \
    "$example" --data /nonexistent --iters 2
if [ -s "$tmp/trainonly/train-labels-idx1-ubyte.gz" ]; then
    refuse test-missing 3 x "^torch_train.py: --data: $tmp/trainonly: neither t10k-images-idx3-ubyte.gz nor t10k-images-idx3-ubyte: " \
        "$example" --data "$tmp/trainonly" --iters 2
    refuse test-missing-ddp 2 1 "^torch_train.py: --data: $tmp/trainonly: neither t10k-images-idx3-ubyte.gz nor t10k-images-idx3-ubyte: " \
        "$example" --data "$tmp/trainonly" --iters 2 --backend ddp
else
    echo "note: no Fashion-MNIST here (dataset-fashion-mnist): the missing test set not tried"
fi
for name in data-missing test-missing test-missing-ddp; do
    [ ! -f "$tmp/$name.out" ] || ! grep -q '^Traceback' "$tmp/$name.out" || bad "$name: a traceback"
done
if job help 2 "$cases" zoo "$tmp/x" --help && grep -q '^usage: mpirun -np N python3 SCRIPT \[flags\]' "$tmp/help.out" &&
    grep -qE '^ +-c, --compress SPEC' "$tmp/help.out" && [ "$(grep -c '^usage:' "$tmp/help.out")" = 1 ]; then
    ok "--help: exit 0 on every rank, the runtime's flags printed once"
else
    bad "--help:"; head -n 5 "$tmp/help.out"
fi
# (other-thread's output also has the helper thread's own traceback: Python's threading
# prints it before the training thread fails in one line.)
if grep -l 'Traceback' "$tmp"/{bad-flag,unknown-flag,auto-unprobed,float64,strided,init-twice,lazy-worker,lazy-server,early-exit,extra-pass,bad-note,other-model,argv-string,views,rebind,groups-skew,groups-late,shadow,clip-race,placement-skew,workers-momentum,servers-momentum,workers-powersgd}.out; then
    bad "a refusal printed a traceback instead of one line"
else
    ok "refusals print one line, no traceback"
fi
pc_done
