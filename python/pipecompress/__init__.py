"""PipeCompress from PyTorch: train a torch model through the pipelined parameter server.

A training script under `mpirun -np N python3 train.py --servers 1 --compress topk:ratio=0.01`::

    import pipecompress as pc
    args, rest = parser.parse_known_args()   # the script's own flags; the rest are ours
    pc.init(rest)                            # MPI, the runtime's flags, the runtime
    if pc.is_server():
        sys.exit(pc.run_server())            # servers aggregate and step; that is all
    model = Net()
    pc.attach(model)                         # register, hook, start; worker 0's init wins
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        loss.backward()                      # gradients leave layer by layer
        pc.report(loss.item())
        if pc.iteration_end():               # no optimizer: the servers step
            break                            # stopped by SIGINT/SIGTERM on some worker
    sys.exit(pc.finish())

With the script's own torch optimizer (SGD, Adam or AdamW; its parameter groups and any
torch.optim.lr_scheduler), the loop keeps torch's shape::

    model = Net()
    pc.attach(model)
    opt = pc.DistributedOptimizer(torch.optim.AdamW(groups, lr=1e-3, weight_decay=0.05))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=iters)
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()                           # ends the iteration (its lrs left already)
        sched.step()
        if opt.should_stop:                  # or pc.stopped(): a signal on some worker
            break
    sys.exit(pc.finish())

The servers run that optimizer with each group's hyperparameters and the groups' lrs, sent
before each iteration's first gradient (step() refuses a change after); the runtime's --lr
and schedule are not used (doc/python.md, "Your optimizer"). opt.clip_grad_norm_(max_norm)
after backward clips there too: the servers take the averaged gradient's global 2-norm
across their shards, clip before they step, and the norm comes back (clip from the run's
first iteration on).
Any other torch optimizer steps on the workers:
pc.DistributedOptimizer(torch.optim.Adadelta(...), update="workers") on every worker (or
update=None after pc.init(rest, update="workers") on every rank; the servers only sum):
opt.step() waits for the averaged gradients in p.grad and runs its step on every worker
alike; opt.clip_grad_norm_(max_norm) clips them by their global norm before. A gradient
written after backward handed it over (torch.nn.utils.clip_grad_norm_ after backward)
raises at opt.step() / pc.iteration_end(): the runtime reads it from there.

What happens underneath (doc/python.md says it in full):
- parameters are registered zero-copy: the runtime reads gradients from, and writes
  updates into, the tensors' own memory (CPU, float32, contiguous; anything else is refused
  with a one-line error naming the parameter);
- each parameter's gradient accumulator gets a hook that hands the finished gradient to
  the compressor thread (pc_worker_grad_ready) during backward, and each module a forward
  pre-hook that waits for its own parameters' update (pc_worker_param_wait), so layer L's
  forward waits only for layer L;
- pc.iteration_end() hands over what received no gradient (unused parameters count as a
  zero gradient), waits for the gradient buffers' release, zeroes them for the next
  iteration, and tells whether the workers agreed to stop.

With --mode auto every rank, servers included, builds the model and calls
pc.probe(model, x, y) after pc.init: the probe profiles it and chooses the mode (and so
which ranks are servers); in any other mode pc.probe does nothing.

Every call comes from the thread that called pc.init (the runtime's backprop thread).
"""
from . import data  # noqa: F401  (the package's data helpers: pc.data)
from .errors import Error
from .probe import probe
from .session import (choosing, config, finish, init, is_server, is_worker, rank, run_server,
                      servers, set_blas_threads, size, stop_signal, workers)

__all__ = ["Error", "init", "is_server", "is_worker", "rank", "size", "workers", "servers",
           "config", "choosing", "probe", "run_server", "attach", "iteration", "iteration_end", "report",
           "synchronize", "lowrank_q", "metrics_note", "finish", "stop_signal", "set_blas_threads", "data",
           "DistributedOptimizer", "lr", "stopped"]

# hooks.py imports torch at its top, so it is imported at the first use of one of its names
# (pc.attach, ...), not here: `import pipecompress` works without torch (servers, pc.init,
# the installed package's check in tests/system/test_install.sh), as data.py and probe.py
# import torch in the functions that need it.
_HOOKS = ("attach", "iteration", "iteration_end", "lowrank_q", "metrics_note", "report",
          "synchronize")
_OPTIM = ("DistributedOptimizer", "lr", "stopped")  # optim.py, which imports torch too


def __getattr__(name):
    if name in _HOOKS or name in _OPTIM:
        from . import hooks, optim
        value = getattr(hooks if name in _HOOKS else optim, name)
        globals()[name] = value  # once: later lookups find it without this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOOKS) | set(_OPTIM))
