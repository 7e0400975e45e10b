#!/usr/bin/env bash
# The models users train, through the PyTorch binding and through DistributedDataParallel,
# briefly (batch 2-4, 2-3 iterations, synthetic data):
# - torchvision's resnet18, resnet50 and vgg16 and the example's vit, as
#   apps/examples/torch_train.py adapts them, through tests/python/torch_cases.py's arch
#   case with 2 workers and 1 server: every worker starts from worker 0's parameters and
#   buffers (each built its model from another seed and shifted its buffers), the loss is
#   finite, the workers' parameters are bitwise the same after every iteration and change
#   at every one, an evaluation forward before pc.synchronize() equals the one after it
#   (the binding's waits order it after the update: for vit, the fused encoder kernel of
#   eval mode, which calls no submodule), and no parameter is left to be waited for at the
#   model's start (nn.MultiheadAttention's out_proj is waited for in its own forward), and
#   the chunk plan groups small tensors (fewer chunks than tensors: the binding puts the
#   parameters and the gradients in one block each, as pc-train's slabs);
# - torch_train.py --arch NAME --data synthetic trains each through --backend ddp (2 ranks),
#   resnet18 and vit through --backend pipecompress (3 ranks) too, and prints the measured
#   parameter count;
# - --ddp-hook powersgd on resnet18, a model DDP would split into several buckets (the
#   gloo abort the script's one bucket avoids).
# Skipped when /usr/bin/python3 (or $PC_PYTHON) cannot import torch or torchvision.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
pc_need_torch torchvision
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
cases="$PC_SRCDIR/tests/python/torch_cases.py"
example="$PC_SRCDIR/apps/examples/torch_train.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# job NAME RANKS ARGS...: run under the launcher, output in $tmp/NAME.out; the job's status.
job() {
    local name=$1 np=$2
    shift 2
    "$run" -t 300 -np "$np" "$py" "$@" >"$tmp/$name.out" 2>&1
}

# The parameter counts torch_train.py's docstring and doc/python.md state.
declare -A params=([resnet18]=11172810 [resnet50]=23519690 [vgg16]=33637066 [vit]=542090)
declare -A batch=([resnet18]=4 [resnet50]=2 [vgg16]=2 [vit]=4)
for arch in resnet18 resnet50 vgg16 vit; do
    d="$tmp/arch-$arch"
    if PC_BATCH=${batch[$arch]} job "arch-$arch" 3 "$cases" "arch:$arch" "$d" --iters 3 \
        --compress topk:ratio=0.01 --log-level debug &&
        "$py" - "$d" "$tmp/arch-$arch.out" "$arch" >"$tmp/arch-$arch.check" 2>&1 <<'PY'; then
import math, re, sys
d, out, arch = sys.argv[1:]
init = [open(f"{d}/init-r{r}.txt").read().split() for r in (0, 1)]
rows = [[l.split() for l in open(f"{d}/hash-r{r}.txt") if l.strip()] for r in (0, 1)]
def need(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")
need(init[0] == init[1], "after attach both workers hold worker 0's parameters and buffers")
need(len(rows[0]) == 3 and len(rows[1]) == 3, "3 iterations on each worker")
need(all(math.isfinite(float(r[1])) for w in rows for r in w), "finite losses")
need([r[2] for r in rows[0]] == [r[2] for r in rows[1]],
     "the workers' parameters bitwise the same after every iteration")
digests = [init[0][0]] + [r[2] for r in rows[0]]
need(len(set(digests)) == len(digests), "the parameters changed at every iteration")
text = open(out).read()
need(f"{arch}: " in text and "waited for at the model's start: none" in text,
     "no parameter waited for at the model's start")
# The binding's parameters and gradients in one block each: the chunk plan groups small
# tensors (BatchNorm's, biases) with the one before, so the ResNets and the vit need fewer
# chunks than tensors (vgg16's few big tensors are cut into more).
plan = re.search(r"chunk plan \((\d+) chunks", text)
tensors = re.search(rf"{arch}: (\d+) parameter tensors", text)
need(plan and tensors, "the chunk plan and the tensor count in the output")
chunks, n = int(plan.group(1)), int(tensors.group(1))
need(arch == "vgg16" or chunks < n, f"fewer chunks than tensors ({chunks} for {n})")
print("losses " + " ".join(r[1] for r in rows[0]) + f"; {n} tensors in {chunks} chunks")
PY
        ok "binding, $arch (batch ${batch[$arch]}, 2 workers + 1 server, 3 iterations): worker 0's start, parameters bitwise equal on both workers after each iteration, evaluation before synchronize == after, nothing waited for at the model's start ($(cat "$tmp/arch-$arch.check"))"
    else
        bad "binding, $arch:"; tail -n 15 "$tmp/arch-$arch.out"; cat "$tmp/arch-$arch.check" 2>/dev/null
    fi
done

# example NAME RANKS ARCH ARGS...: torch_train.py trains 2 iterations of ARCH on synthetic
# data and says so, with the measured parameter count.
example() {
    local name=$1 np=$2 arch=$3 port=()
    shift 3
    [[ " $* " == *" --backend ddp "* ]] && port=(--ddp-port "$(pc_free_port)")
    if job "$name" "$np" "$example" --arch "$arch" --data synthetic --synthetic-samples 200 \
        --batch "${batch[$arch]}" --eval none --warmup 1 --quiet "$@" "${port[@]}" &&
        grep -qE "^torch $arch( \(DDP, gloo, hook [a-z0-9]+\))?: ${params[$arch]} parameters;" "$tmp/$name.out" &&
        grep -qE "^done: [0-9]+ iterations in [0-9.]+ s" "$tmp/$name.out"; then
        ok "torch_train.py --arch $arch $*: $(grep -m1 '^done:' "$tmp/$name.out")"
    else
        bad "torch_train.py --arch $arch $*:"; tail -n 15 "$tmp/$name.out"
    fi
}
# (The binding's path for resnet50 and vgg16 is the arch case's above: the same build().)
for arch in resnet18 vit; do
    example "ex-$arch" 3 "$arch" --iters 2
done
for arch in resnet18 resnet50 vgg16 vit; do
    example "ddp-$arch" 2 "$arch" --iters 2 --backend ddp
done
# PowerSGD after 2 plain iterations (its minimum), 3 compressed ones, on a model of 45 MB
# (DDP's default: a 1 MiB first bucket, then 25 MB ones).
example ddp-psgd-resnet18 2 resnet18 --iters 5 --backend ddp --ddp-hook powersgd \
    --powersgd-rank 2 --powersgd-start 2
pc_done
