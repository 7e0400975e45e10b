#!/usr/bin/python3
"""The cost of pc.DistributedOptimizer against the runtime's own step, per iteration: the
example's cnn (apps/examples/torch_train.py) on synthetic batches, the servers stepping
SGD either way (the wrapper: torch.optim.SGD's hyperparameters and the rates it sends each
iteration; without: the runtime's --lr and --momentum, the same values).

    mpirun -np 3 python3 scripts/bench/torch_wrapper_cost.py wrap|nowrap|ab [runtime flags]

Rank 0 prints "MODE: median iteration X ms over N iterations (after W warm-up)", the
median of forward + backward + step (opt.step() or pc.iteration_end()). ab: the wrapper,
its learning rates sent before the first gradient (as the binding does) and, alternating
every 4 iterations in the same run, at opt.step() (as before: the servers can step
nothing before backward ends), each mode's median and their ratio: a comparison the
machine's load does not skew, both halves seeing it alike. PC_PKG: the
directory holding the pipecompress package to measure (default: this tree's python/), so
that two versions of the binding can be timed on one library. --iters sets the length
(default 40; the first 10 are left out).
"""
import os
import statistics
import sys
import time

here = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.environ.get("PC_PKG") or os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "apps", "examples"))

import inspect  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import pipecompress as pc  # noqa: E402
import torch_train  # noqa: E402

WARMUP = 10
BATCH = 32


def main():
    mode, flags = sys.argv[1], sys.argv[2:]
    if mode not in ("wrap", "nowrap", "ab"):
        sys.exit(f"torch_wrapper_cost.py: {mode!r} is not wrap, nowrap or ab")
    torch.set_num_threads(1)
    pc.set_blas_threads(1)
    quiet = {"verbose": False} if "verbose" in inspect.signature(pc.init).parameters else {}
    if "--iters" not in flags:
        flags = flags + ["--iters", "40"]
    pc.init(flags, **quiet)
    if pc.is_server():
        return pc.run_server()
    iters = int(pc.config()["iters"])
    model = torch_train.build("cnn", 1, None)
    pc.attach(model)
    opt = None
    if mode in ("wrap", "ab"):
        lr, mu = float(pc.config()["lr"]), float(pc.config()["momentum"])
        opt = pc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=mu))
    g = torch.Generator().manual_seed(pc.rank())
    xs = [torch.randn(BATCH, 1, 28, 28, generator=g) for _ in range(4)]
    ys = [torch.randint(0, 10, (BATCH,), generator=g) for _ in range(4)]
    a = pc.session._S.model  # ab: the attachment, whose lrs_sent the late half sets
    times, late = [], []
    for it in range(iters):
        at_step = mode == "ab" and (it // 4) % 2 == 1
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(xs[it % 4]), ys[it % 4])
        if at_step:
            a.lrs_sent = True  # the gradient hook sends nothing ...
        loss.backward()
        if at_step:
            a.lrs_sent = False  # ... and step() sends them, after backward
        if opt is not None:
            opt.step()
        else:
            pc.iteration_end()
        (late if at_step else times).append(time.perf_counter() - t0)
    rank = pc.rank()
    status = pc.finish()
    if rank == 0 and mode == "ab":
        early_ms = 1e3 * statistics.median(times[WARMUP // 2:])
        late_ms = 1e3 * statistics.median(late[WARMUP // 2:])
        print(f"ab: median iteration {early_ms:.2f} ms with the rates before the first "
              f"gradient, {late_ms:.2f} ms with them at opt.step() ({len(times) - WARMUP // 2} "
              f"and {len(late) - WARMUP // 2} iterations, alternating every 4); ratio "
              f"{early_ms / late_ms:.3f}", flush=True)
    elif rank == 0:
        timed = times[WARMUP:]
        print(f"{mode}: median iteration {1e3 * statistics.median(timed):.2f} ms over "
              f"{len(timed)} iterations (after {WARMUP} warm-up)", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
