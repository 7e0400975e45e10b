"""pipecompress.optim: the script's own torch optimizer, stepped by the servers
(pc.DistributedOptimizer).

The wrapper reads the optimizer's class (SGD, Adam, AdamW) and its param_groups once,
before the runtime starts, and gives them to the runtime (pc_worker_set_optimizer): worker
0 sends the table to the servers with the chunk plan, each tensor steps with its group's
rule (weight decay 0 on a no-decay group), and the plan never puts two groups' tensors in
one chunk. Every step() sends the groups' current learning rates (pc_worker_set_lrs) and
ends the iteration, so any torch.optim.lr_scheduler, which writes param_groups[i]["lr"],
drives the servers unchanged; the runtime's own schedule is not used. The servers use
worker 0's rates and end the run when another worker's differ.

torch is imported here; the package imports this module at the first use of
DistributedOptimizer, lr or stopped (pipecompress/__init__.py). Every call comes from the
thread that called pc.init.
"""
import ctypes
import math
import types

import torch

from .errors import Error
from .session import _attached

# pc_optim_kind_t of each class the servers run (include/pipecompress/pc_optim.h), exactly
# these classes: a subclass may change step() in ways the servers would not follow.
_KINDS = {torch.optim.SGD: 0, torch.optim.Adam: 1, torch.optim.AdamW: 2}
_KIND_NAMES = ("sgd", "adam", "adamw")
_GROUP_FIELDS = 8  # PC_GROUP_FIELDS (pc_runtime.h): lr, weight decay, momentum, nesterov,
# beta1, beta2, eps, amsgrad
# The runtime's schedule flags: with the wrapper the rates come from param_groups.
_SCHEDULE_FLAGS = ("lr-schedule", "lr-step", "lr-gamma", "lr-warmup")
WORKERS = "update='workers' (issue 47 item 4, not built yet)"


def _given(words):
    """The long flag names among pc.init's words (--lr 0.1, --lr=0.1)."""
    return {w[2:].split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2}


def _same(a, b):
    return float(a) == float(b)


def _check_flags(s, opt, kind):
    """A hyperparameter flag given to pc.init must agree with the optimizer object's
    default (what torch uses for a group that does not set it): neither may silently
    shadow the other. Without the flag the object's value is used."""
    cfg, given, d = s.config, _given(s.words), opt.defaults
    cls = type(opt).__name__
    for f in _SCHEDULE_FLAGS:
        if f in given:
            raise Error(f"DistributedOptimizer: --{f} given to pc.init: with a "
                        "DistributedOptimizer the learning rates are param_groups' at every "
                        "step() (use a torch.optim.lr_scheduler); drop the flag")

    def disagree(flag, mine, theirs, field):
        raise Error(f"DistributedOptimizer: --{flag} {mine} given to pc.init disagrees with "
                    f"the {cls}'s {field} {theirs}: drop the flag (the optimizer's values are "
                    "used) or make them equal")

    if "optimizer" in given and cfg.get("optimizer") != _KIND_NAMES[kind]:
        disagree("optimizer", cfg.get("optimizer"), _KIND_NAMES[kind], "class")
    pairs = [("lr", "lr"), ("weight-decay", "weight_decay")]
    if kind == 0:
        pairs += [("momentum", "momentum")]
    else:
        pairs += [("eps", "eps")]
    for flag, field in pairs:
        if flag in given and not _same(cfg[flag], d[field]):
            disagree(flag, cfg[flag], d[field], field)
    if kind == 0 and "nesterov" in given and bool(d["nesterov"]) != (cfg["nesterov"] in
                                                                     ("1", "true", "yes", "on")):
        disagree("nesterov", cfg["nesterov"], d["nesterov"], "nesterov")
    if kind != 0:
        if "betas" in given:
            b = [float(x) for x in cfg["betas"].split(",")]
            if b != [float(x) for x in d["betas"]]:
                disagree("betas", cfg["betas"], tuple(d["betas"]), "betas")
        if "amsgrad" in given and (cfg["amsgrad"] in ("1", "true", "yes", "on")) != \
                bool(d["amsgrad"]):
            disagree("amsgrad", cfg["amsgrad"], d["amsgrad"], "amsgrad")


def _group_values(cls, kind, i, g):
    """Group i's PC_GROUP_FIELDS numbers, or a one-line Error for what the servers cannot
    do. foreach, fused, capturable and differentiable choose torch's implementation, not
    the arithmetic: ignored."""
    if g.get("maximize", False):
        raise Error(f"DistributedOptimizer: {cls} parameter group {i} has maximize=True: the "
                    "servers descend only (negate the loss instead)")
    lr, wd = g["lr"], g["weight_decay"]
    if kind == 0:
        if g.get("dampening", 0) != 0:
            raise Error(f"DistributedOptimizer: SGD parameter group {i} has dampening "
                        f"{g['dampening']}: the servers' SGD has none (dampening 0)")
        return [lr, wd, g["momentum"], float(bool(g["nesterov"])), 0.0, 0.0, 0.0, 0.0]
    b1, b2 = g["betas"]
    return [lr, wd, 0.0, 0.0, b1, b2, g["eps"], float(bool(g["amsgrad"]))]


def _guarded_step(self, *args, **kwargs):
    raise Error("the wrapped optimizer's own step() was called: with pc.DistributedOptimizer "
                "the servers step the parameters, and a step here too would make the workers "
                "diverge; call step() on the DistributedOptimizer")


class DistributedOptimizer(torch.optim.Optimizer):
    """opt = pc.DistributedOptimizer(torch_optimizer, update="servers"), on every worker
    right after pc.attach(model) and before the first forward pass: the servers run
    torch_optimizer's update (torch.optim.SGD, Adam or AdamW, torch 1.13's arithmetic) with
    each parameter group's lr, weight_decay, momentum and nesterov (SGD), betas, eps and
    amsgrad (Adam, AdamW). The loop stays torch's:

        loss.backward(); opt.step(); scheduler.step()

    step() sends the groups' current learning rates (whatever a torch.optim.lr_scheduler
    or the script wrote into param_groups) and ends the iteration (pc.iteration_end()); it
    returns None as torch's does: a stop agreed by the workers (SIGINT or SIGTERM on some
    worker) shows as opt.should_stop, or pc.stopped(), True from that step on: then call
    pc.finish(). zero_grad() does nothing (the runtime zeroes the gradient buffers at every
    iteration's end; set_to_none is harmless too). param_groups is the wrapped optimizer's
    own list, so a scheduler may be given either object. The wrapped optimizer's own step()
    raises from now on (a second update on the workers would make them diverge).

    Refused, each with a one-line pipecompress.Error: another class (the servers run
    these three; update='workers', issue 47 item 4, not built yet, will run any), a
    parameter in a group that pc.attach did not register, an attached parameter in no
    group, dampening != 0, maximize=True, a hyperparameter flag given to pc.init that
    disagrees with the object's default (--optimizer, --lr, --weight-decay, --momentum,
    --nesterov, --betas, --eps, --amsgrad: the object's values are used when the flag is
    absent), the runtime's schedule flags (--lr-schedule, --lr-step, --lr-gamma,
    --lr-warmup), --mode other than ps, --update workers, --compress powersgd, a codec with
    momentum correction with momentum or Adam, and creation after the runtime started (the
    first forward pass, pc.iteration(), ...).
    foreach, fused, capturable and differentiable are ignored (they choose torch's kernel,
    not the arithmetic). The optimizer's state (momentum, m, v) lives on the servers:
    checkpoints are --checkpoint-dir's, and state_dict() is refused."""

    def __init__(self, optimizer, update="servers"):  # noqa: D107 (no super().__init__:
        # the wrapped optimizer's param_groups, defaults and state are shared, not copied)
        a = _attached()
        s = a.s
        if update == "workers":
            raise Error(f"DistributedOptimizer: {WORKERS}; update='servers' is the one "
                        "placement")
        if update != "servers":
            raise Error(f"DistributedOptimizer: update={update!r} is not 'servers'")
        if isinstance(optimizer, DistributedOptimizer):
            raise Error("DistributedOptimizer: the optimizer is already a DistributedOptimizer")
        cls = type(optimizer).__name__
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise Error(f"DistributedOptimizer: {cls} is not a torch.optim.Optimizer")
        kind = _KINDS.get(type(optimizer))
        if kind is None:
            raise Error(f"DistributedOptimizer: {cls} cannot run on the servers (they run "
                        f"torch.optim.SGD, Adam and AdamW); {WORKERS} will run any torch "
                        "optimizer")
        if a.optimizer is not None:
            raise Error("DistributedOptimizer: the attached model has one already")
        if a.started:
            raise Error("DistributedOptimizer: create it right after pc.attach(model), before "
                        "the first forward pass or pc.iteration(): the servers learn the "
                        "optimizer when the runtime starts")
        if s.config.get("mode") != "ps":
            raise Error(f"DistributedOptimizer: --mode {s.config.get('mode')}: the servers "
                        "step only with --mode ps")
        if s.config.get("update", "servers") != "servers":
            raise Error(f"DistributedOptimizer: --update {s.config.get('update')}: "
                        "update='servers' needs --update servers (the servers step); "
                        f"{WORKERS}")
        group_of = [None] * len(a.params)
        for i, g in enumerate(optimizer.param_groups):
            for p in g["params"]:
                t = a.ids.get(id(p))
                if t is None:
                    name = next((n for n, q in a.model.named_parameters() if q is p), None)
                    what = (f"parameter {name} (not registered: it does not require a "
                            "gradient)" if name else
                            f"a parameter of shape {tuple(p.shape)} that is not in the "
                            "attached model")
                    raise Error(f"DistributedOptimizer: {cls} parameter group {i} holds "
                                f"{what}: every parameter it steps must be one pc.attach "
                                "registered")
                if group_of[t] is not None:
                    raise Error(f"DistributedOptimizer: parameter {a.names[t]} is in groups "
                                f"{group_of[t]} and {i}")
                group_of[t] = i
        for t, g in enumerate(group_of):
            if g is None:
                raise Error(f"DistributedOptimizer: parameter {a.names[t]} is attached but in "
                            f"no parameter group of the {cls}: add it to a group, or set "
                            "requires_grad=False before pc.attach")
        values = []
        for i, g in enumerate(optimizer.param_groups):
            values += _group_values(cls, kind, i, g)
        _check_flags(s, optimizer, kind)
        hp = (ctypes.c_double * len(values))(*[float(v) for v in values])
        tg = (ctypes.c_int * len(group_of))(*group_of)
        ngroups = len(optimizer.param_groups)
        if s.lib.pc_worker_set_optimizer(s.w, kind, hp, ngroups, tg) != 0:
            s.fail("DistributedOptimizer")
        self._opt = optimizer
        self._a = a
        self.param_groups = optimizer.param_groups  # the same list: schedulers see one
        self.defaults = optimizer.defaults
        self.state = optimizer.state
        self.should_stop = False
        self._step_count = 0
        self._lrs = (ctypes.c_double * ngroups)()
        optimizer.step = types.MethodType(_guarded_step, optimizer)
        a.optimizer = self
        a.start()

    def __repr__(self):
        return f"DistributedOptimizer({self._opt!r}, update='servers')"

    def _send_lrs(self):
        """This iteration's learning rates to the servers (pc_worker_set_lrs)."""
        s = self._a.s
        if len(self.param_groups) != len(self._lrs):
            raise Error("DistributedOptimizer: param_groups changed after the start (the "
                        "servers step the groups they were given)")
        for i, g in enumerate(self.param_groups):
            lr = g["lr"]
            if isinstance(lr, torch.Tensor):
                lr = lr.item()
            if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
                raise Error(f"DistributedOptimizer: parameter group {i}'s lr {lr!r} is not a "
                            "finite number >= 0")
            self._lrs[i] = float(lr)
        if s.lib.pc_worker_set_lrs(s.w, self._lrs, len(self._lrs)) != 0:
            s.fail("DistributedOptimizer.step")

    def step(self, closure=None):
        """Send the groups' current learning rates and end the iteration (the servers
        step). Returns None; opt.should_stop says whether the workers agreed to stop."""
        if closure is not None:
            raise Error("DistributedOptimizer.step: a closure is not supported (the servers "
                        "step once per iteration, after backward)")
        a = _attached()
        if a is not self._a:
            raise Error("DistributedOptimizer.step: not the attached model's optimizer")
        # The wrapped optimizer counts steps too: a scheduler built on it checks the count.
        self._opt._step_count = getattr(self._opt, "_step_count", 0) + 1
        self.should_stop = a.end()
        return None

    def zero_grad(self, set_to_none=False):
        """Nothing to do: the runtime zeroes the gradient buffers at each iteration's end
        (and a p.grad set to None is handled at the next backward)."""
        return None

    def add_param_group(self, param_group):
        raise Error("DistributedOptimizer: add_param_group after the start: the servers "
                    "step the groups they were given at the start")

    def state_dict(self):
        raise Error("DistributedOptimizer: the optimizer's state lives on the servers; save "
                    "and resume with --checkpoint-dir and --resume")

    def load_state_dict(self, state_dict):
        raise Error("DistributedOptimizer: the optimizer's state lives on the servers; save "
                    "and resume with --checkpoint-dir and --resume")


def lr():
    """The current learning rate of each parameter group of the pc.DistributedOptimizer,
    a list (what the next step() sends)."""
    a = _attached()
    if a.optimizer is None:
        raise Error("pc.lr(): no pc.DistributedOptimizer: the rate is the runtime's own "
                    "schedule (--lr, --lr-schedule; doc/python.md)")
    return [float(g["lr"]) for g in a.optimizer.param_groups]


def stopped():
    """Whether the workers agreed to stop at the last iteration's end (opt.step() or
    pc.iteration_end()): then call pc.finish()."""
    return _attached().stopped
