"""pipecompress.optim: the script's own torch optimizer (pc.DistributedOptimizer), stepped
by the servers (update="servers") or by every worker on the averaged gradient
(update="workers").

update="servers": the wrapper reads the optimizer's class (SGD, Adam, AdamW) and its
param_groups once, before the runtime starts, and gives them to the runtime
(pc_worker_set_optimizer): worker 0 sends the table to the servers with the chunk plan,
each tensor steps with its group's rule (weight decay 0 on a no-decay group), and the plan
never puts two groups' tensors in one chunk. Each iteration sends the groups' current
learning rates (pc_worker_set_lrs) before its first gradient leaves (hooks.py; step()
checks they did not change since) and step() ends it, so any torch.optim.lr_scheduler,
which writes param_groups[i]["lr"], drives the servers
unchanged; the runtime's own schedule is not used. The servers use worker 0's rates and
end the run when another worker's differ.

update="workers" (--update workers given to pc.init, or without --update the wrapper's
choice: pc_worker_set_update before the start, which every worker must make alike and
worker 0 tells the servers): the servers only sum; the
runtime writes each tensor's averaged gradient into p.grad (pc_worker_set_user_step) and
step() waits for all of them (pc_worker_grad_wait), then runs the wrapped optimizer's own
step() on every worker: the same inputs everywhere, so every worker's parameters stay
bitwise equal. Any torch optimizer, its groups and schedulers are then torch's business.

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
# The servers' Adam variants for a compressed aggregate (--adam-moments, --adam-freeze-after:
# pc.init's flags on every rank, with --optimizer adam or adamw): the servers' step only.
_ADAM_VARIANT_FLAGS = ("adam-moments", "adam-freeze-after")
# The runtime's hyperparameter flags and the torch optimizers' defaults of the same meaning:
# with update="workers" a given one must say what the object does (_check_flags_workers).
_FIELDS = (("lr", "lr"), ("momentum", "momentum"), ("nesterov", "nesterov"),
           ("weight-decay", "weight_decay"), ("betas", "betas"), ("eps", "eps"),
           ("amsgrad", "amsgrad"))
# pc_config_update_t (include/pipecompress/pc_config.h): pc_worker_set_update's argument.
_PLACEMENT = {"servers": 0, "workers": 1}
WORKERS = "use update='workers', which runs any torch optimizer on the workers"


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


def _check_flags_workers(s, opt, cls):
    """update="workers": the torch optimizer steps with its own values. A runtime optimizer
    flag given to pc.init is accepted only when it says what the object does (--optimizer
    its class, a hyperparameter the default of that name), so that handing a script's own
    flag on (pc.init(rest, lr=args.lr)) works in both placements; a flag the optimizer has
    no value for, or another value, would be silently unused: refused in one line, as are
    the runtime's schedule flags (the script's torch scheduler sets the rates)."""
    cfg, given, d = s.config, _given(s.words), opt.defaults
    for f in _SCHEDULE_FLAGS:
        if f in given:
            raise Error(f"DistributedOptimizer: --{f} given to pc.init: with update='workers' "
                        f"the {cls} steps with the rates in its param_groups (use a "
                        "torch.optim.lr_scheduler); drop the flag")
    for f in _ADAM_VARIANT_FLAGS:
        if f in given:
            raise Error(f"DistributedOptimizer: --{f} given to pc.init: it chooses the servers' "
                        f"Adam step, and with update='workers' the {cls} steps on the workers "
                        "(the flag would be silently unused); drop it")
    kind = _KINDS.get(type(opt))
    if "optimizer" in given and (kind is None or cfg.get("optimizer") != _KIND_NAMES[kind]):
        raise Error(f"DistributedOptimizer: --optimizer {cfg.get('optimizer')} given to pc.init, "
                    f"but update='workers' steps the {cls}: drop the flag or make them agree")
    for flag, field in _FIELDS:
        if flag not in given:
            continue
        mine = cfg.get(flag)
        if field not in d:
            raise Error(f"DistributedOptimizer: --{flag} {mine} given to pc.init: the {cls} has "
                        f"no {field} (with update='workers' it steps with its own "
                        "hyperparameters: the flag would be silently unused); drop it")
        theirs = d[field]
        if flag == "betas":
            same = [float(x) for x in mine.split(",")] == [float(x) for x in theirs]
        elif flag in ("nesterov", "amsgrad"):
            same = (mine in ("1", "true", "yes", "on")) == bool(theirs)
        else:
            same = _same(mine, theirs)
        if not same:
            shown = ",".join(str(x) for x in theirs) if flag == "betas" else theirs
            raise Error(f"DistributedOptimizer: --{flag} {mine} given to pc.init disagrees with "
                        f"the {cls}'s {field} {shown}: drop the flag (the optimizer's values "
                        "step) or make them equal")


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
    if self._pc_update == "servers":
        raise Error("the wrapped optimizer's own step() was called: with "
                    "pc.DistributedOptimizer the servers step the parameters, and a step here "
                    "too would make the workers diverge; call step() on the "
                    "DistributedOptimizer")
    raise Error("the wrapped optimizer's own step() was called: with pc.DistributedOptimizer"
                "(update='workers') p.grad holds the averaged gradient only once its step() "
                "waited for it (a step before would make the workers diverge); call step() on "
                "the DistributedOptimizer")


def _guarded_zero_grad(self, set_to_none=False):
    return self._pc_wrapper.zero_grad(set_to_none)


def _check_registered(a, optimizer, cls, need_all):
    """The parameter groups' tensors as registered indices: every parameter a group holds
    must be one pc.attach registered (its gradient is the averaged one), in one group only;
    need_all: every registered one must be in a group (the servers step each tensor with its
    group's rule). Returns each registered tensor's group (None: in none). Raises Error."""
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
        if need_all and g is None:
            raise Error(f"DistributedOptimizer: parameter {a.names[t]} is attached but in "
                        f"no parameter group of the {cls}: add it to a group, or set "
                        "requires_grad=False before pc.attach")
    return group_of


class DistributedOptimizer(torch.optim.Optimizer):
    """opt = pc.DistributedOptimizer(torch_optimizer, update=None), on every worker right
    after pc.attach(model) and before the first forward pass. The loop stays torch's:

        loss.backward(); opt.step(); scheduler.step()

    Two placements of the step (update=None: "workers" when pc.init got --update workers,
    else "servers"):

    update="servers": the servers run torch_optimizer's update (torch.optim.SGD, Adam or
    AdamW, torch 1.13's arithmetic) with each parameter group's lr, weight_decay, momentum
    and nesterov (SGD), betas, eps and amsgrad (Adam, AdamW); what Adam does with a
    compressed aggregate is pc.init's flags on every rank, with optimizer="adam" or
    "adamw" given there too: adam_moments="lazy" (only the entries that arrived step, as
    torch.optim.SparseAdam), "dense" or "auto" (the default: lazy for top-k, else dense;
    pc.config()["adam-moments"] says which) and adam_freeze_after=N (v frozen after N steps, 1-bit
    Adam's; not given: after a dense warm-up, top-k's and DGC's default dense=1000, else never;
    pc.config()["adam-freeze-after"] says which), for every group (refused with update="workers"). The groups' current
    learning rates (whatever a torch.optim.lr_scheduler or the script wrote into
    param_groups) go to the servers before the iteration's first gradient leaves, and
    step() refuses a change since; step() ends the iteration (pc.iteration_end()). The
    optimizer's state
    (momentum, m, v) lives on the servers: checkpoints are --checkpoint-dir's, and
    state_dict() is refused. clip_grad_norm_(max_norm) after backward clips on the servers:
    the global 2-norm of the averaged gradient, whose shards the servers hold, taken there
    (they exchange their shards' sums of squares), the norm returned as torch does; clip
    from the run's first iteration on (its docstring says why).

    update="workers" (pc.init got --update workers; or it got no --update and the wrapper
    chooses the placement before the runtime starts, on every worker alike: the start
    compares the workers' choices and worker 0 tells the servers that they only sum): any
    torch optimizer. step() waits until p.grad holds the
    averaged gradient of every parameter (the runtime writes it there), runs the wrapped
    optimizer's own step() on every worker (the same inputs everywhere: every worker's
    parameters stay bitwise equal), then ends the iteration. Groups, schedulers and the
    optimizer's state (state_dict(), load_state_dict(), add_param_group()) are the torch
    optimizer's own. clip_grad_norm_(max_norm, norm_type=2.0) after backward waits for the
    averaged gradients and clips them with torch.nn.utils.clip_grad_norm_ (the norm is the
    global norm of the averaged gradient of every attached parameter), returning the total
    norm as torch does; step() then steps on the clipped gradients.

    Both: the optimizer steps as written, so a sparsifier's momentum correction (dgc,
    topk, randomk: momentum=0.9 by default, for the runtime's own SGD) is off unless
    pc.init's --compress gives momentum= (the configuration line and pc.config() then say
    momentum=0; one given above 0 is refused where it would feed a momentum buffer's sum
    to the optimizer: Adam, SGD's momentum, the workers' step). step() returns None as torch's does; a stop agreed by the workers (SIGINT or
    SIGTERM on some worker) shows as opt.should_stop, or pc.stopped(), True from that step
    on: then call pc.finish(). zero_grad() (the wrapper's or the wrapped optimizer's) does
    nothing (the runtime zeroes p.grad at every iteration's end), except that with
    update="workers" between backward() and step() it raises (it would wipe the averaged
    gradients: Horovod's guard). param_groups is the wrapped optimizer's own list, so a
    scheduler may be given either object. The wrapped optimizer's own step() raises from
    now on (a step the wrapper does not order would make the workers diverge). A gradient
    changed after backward handed it over (torch.nn.utils.clip_grad_norm_ after backward:
    a data race with the compressor) raises at step() (pc.iteration_end() too).

    Refused, each with a one-line pipecompress.Error: update="servers" with another class
    than those three (pointing at update="workers"), a placement other than the one
    --update gave pc.init explicitly, a parameter in a group that pc.attach did not
    register; with
    update="servers", an attached parameter in no group, dampening != 0, maximize=True, a
    hyperparameter flag given to pc.init that disagrees with the object's default
    (--optimizer, --lr, --weight-decay, --momentum, --nesterov, --betas, --eps, --amsgrad:
    the object's values are used when the flag is absent), the runtime's schedule flags
    (--lr-schedule, --lr-step, --lr-gamma, --lr-warmup), --mode other than ps, a codec
    given momentum correction (momentum= above 0 in the spec) with momentum or Adam; with
    update="workers", the schedule flags and an optimizer flag given to pc.init that the
    torch optimizer has no value for or another one (--optimizer naming another class,
    --lr 0.1 with lr=0.01: the torch optimizer's own values step; one that agrees is
    accepted), and where pc.init got no --update, --mode allreduce, --compress powersgd
    and --pull (as --update workers refuses them); creation after the runtime started (the
    first forward pass, pc.iteration(), ...; update="workers" with --update workers given:
    after the first gradient).
    foreach, fused, capturable and differentiable are ignored by the servers (they choose
    torch's kernel, not the arithmetic)."""

    def __init__(self, optimizer, update=None):  # noqa: D107 (no super().__init__:
        # the wrapped optimizer's param_groups, defaults and state are shared, not copied)
        a = _attached()
        s = a.s
        runtime = s.config.get("update", "servers")
        if update is None:
            update = "workers" if runtime == "workers" else "servers"
        if update not in ("servers", "workers"):
            raise Error(f"DistributedOptimizer: update={update!r} is not 'servers' or "
                        "'workers'")
        if isinstance(optimizer, DistributedOptimizer):
            raise Error("DistributedOptimizer: the optimizer is already a DistributedOptimizer")
        cls = type(optimizer).__name__
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise Error(f"DistributedOptimizer: {cls} is not a torch.optim.Optimizer")
        kind = _KINDS.get(type(optimizer))
        if update == "servers" and kind is None:
            raise Error(f"DistributedOptimizer: {cls} cannot run on the servers (they run "
                        f"torch.optim.SGD, Adam and AdamW): {WORKERS}")
        if a.optimizer is not None:
            raise Error("DistributedOptimizer: the attached model has one already")
        if update == "workers":
            self._init_workers(a, s, optimizer, cls, runtime)
        else:
            self._init_servers(a, s, optimizer, cls, kind, runtime)
        self._opt = optimizer
        self._a = a
        self._update = update
        self.param_groups = optimizer.param_groups  # the same list: schedulers see one
        self.defaults = optimizer.defaults
        self.state = optimizer.state
        self.should_stop = False
        self._step_count = 0
        self._lrs = (ctypes.c_double * len(optimizer.param_groups))()
        # The wrapped step, as it is now (a scheduler made before may have wrapped it to
        # count steps); from now on the attribute raises (_guarded_step).
        self._inner_step = optimizer.step
        optimizer._pc_update = update
        optimizer._pc_wrapper = self
        optimizer.step = types.MethodType(_guarded_step, optimizer)
        optimizer.zero_grad = types.MethodType(_guarded_zero_grad, optimizer)
        a.optimizer = self
        a.start()

    def _init_servers(self, a, s, optimizer, cls, kind, runtime):
        """update="servers": check, then give the runtime the class and the groups."""
        if a.started:
            raise Error("DistributedOptimizer: create it right after pc.attach(model), before "
                        "the first forward pass or pc.iteration(): the servers learn the "
                        "optimizer when the runtime starts")
        if s.config.get("mode") != "ps":
            raise Error(f"DistributedOptimizer: --mode {s.config.get('mode')}: the servers "
                        "step only with --mode ps")
        if runtime != "servers":
            raise Error(f"DistributedOptimizer: --update {runtime}: update='servers' needs "
                        "--update servers (the servers step); use update='workers' (the "
                        "default with --update workers)")
        group_of = _check_registered(a, optimizer, cls, need_all=True)
        values = []
        for i, g in enumerate(optimizer.param_groups):
            values += _group_values(cls, kind, i, g)
        _check_flags(s, optimizer, kind)
        hp = (ctypes.c_double * len(values))(*[float(v) for v in values])
        tg = (ctypes.c_int * len(group_of))(*group_of)
        ngroups = len(optimizer.param_groups)
        if s.lib.pc_worker_set_optimizer(s.w, kind, hp, ngroups, tg) != 0:
            s.fail("DistributedOptimizer")
        s.config["compress"] = s.lib.pc_worker_compress(s.w).decode()  # maybe momentum=0
        # pc.config() says what the servers run: the wrapped class's kind (its groups hold
        # the hyperparameters) and, for Adam(W), the moments (auto: the codec's choice).
        s.config["optimizer"] = _KIND_NAMES[kind]
        if kind != 0:
            s.config["adam-moments"] = s.lib.pc_worker_adam_moments(s.w).decode()
            s.config["adam-freeze-after"] = str(s.lib.pc_worker_adam_freeze_after(s.w))

    def _init_workers(self, a, s, optimizer, cls, runtime):
        """update="workers": check, choose the placement when pc.init got no --update
        (pc_worker_set_update, before the start: every worker chooses it, the start compares
        the choices and worker 0 tells the servers), then switch the runtime to the user's
        step. A refusal changes nothing."""
        if runtime != "workers":
            if "update" in _given(s.words):
                raise Error("DistributedOptimizer: update='workers', but pc.init was given "
                            "--update servers (the servers step): drop the flag (the wrapper "
                            "then chooses) or give --update workers")
            if a.started:
                raise Error("DistributedOptimizer: update='workers' after the runtime started "
                            "with the step on the servers (at the first forward pass, "
                            "pc.iteration(), ...): create it right after pc.attach(model)")
        _check_flags_workers(s, optimizer, cls)
        if a.started and (any(a.ready) or s.lib.pc_worker_iteration(s.w) > 0):
            raise Error("DistributedOptimizer: create it before the first backward pass: "
                        "the runtime steps the gradients it was handed before")
        _check_registered(a, optimizer, cls, need_all=False)
        if runtime != "workers":
            if s.lib.pc_worker_set_update(s.w, _PLACEMENT["workers"]) != 0:
                s.fail("DistributedOptimizer(update='workers')")
            s.config["update"] = "workers"  # pc.config() and the configuration line say so
        if s.lib.pc_worker_set_user_step(s.w, True) != 0:
            s.fail("DistributedOptimizer")
        # Every optimizer but SGD normalises or scales each entry by its own history, which
        # error feedback's late sums mislead: a sparsifier's default dense warm-up (before
        # the start only: after it the codec keeps what it started with).
        if not a.started and not isinstance(optimizer, torch.optim.SGD):
            if s.lib.pc_worker_warm_codec(s.w) != 0:
                s.fail("DistributedOptimizer")
        s.config["compress"] = s.lib.pc_worker_compress(s.w).decode()  # maybe momentum=0

    def __repr__(self):
        return f"DistributedOptimizer({self._opt!r}, update={self._update!r})"

    def _send_lrs(self):
        """This iteration's learning rates to the servers (pc_worker_set_lrs); nothing with
        update="workers" (the wrapped optimizer reads its own)."""
        if self._update == "workers":
            return
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
        self._sent = list(self._lrs)  # _check_lrs, and the progress line's rates

    def _check_lrs(self):
        """At the iteration's end: the rates sent before its first gradient left
        (_send_lrs, from the gradient hook) must still be param_groups'. A rate set between
        backward and step() would reach the servers one iteration late: one-line Error."""
        sent = getattr(self, "_sent", None)
        if sent is None:
            return
        for i, g in enumerate(self.param_groups):
            lr = g["lr"]
            lr = float(lr.item() if isinstance(lr, torch.Tensor) else lr)
            if i < len(sent) and lr != sent[i]:
                it = self._a.s.lib.pc_worker_iteration(self._a.s.w)
                # 6 significant digits, or every digit where those would look equal
                a, b = f"{sent[i]:.6g}", f"{lr:.6g}"
                if a == b:
                    a, b = repr(sent[i]), repr(lr)
                raise Error(f"DistributedOptimizer: parameter group {i}'s lr changed from "
                            f"{a} to {b} during iteration {it}, after its rates went to the "
                            f"servers with its first gradient (they step it with {a}): set "
                            "the lr before the forward pass, or step a "
                            "torch.optim.lr_scheduler after opt.step()")

    def _receive(self):
        """update="workers": wait until p.grad holds every parameter's averaged gradient of
        this iteration (once per iteration). Checks first that no gradient was changed
        since it was handed over (a.check_grads), and hands over those that did not come
        (a.hand_rest: the runtime waits for every tensor's)."""
        a = self._a
        if a.synced:
            return
        a.check_grads()
        a.hand_rest()
        s = a.s
        for t in range(len(a.params)):
            rc = s.lib.pc_worker_grad_wait(s.w, t)
            if rc != 0:
                s.fail(f"waiting for the averaged gradient of {a.names[t]}", rc)
        a.synced = True

    def _check_call(self, what):
        a = _attached()
        if a is not self._a:
            raise Error(f"DistributedOptimizer.{what}: not the attached model's optimizer")
        if a.s.pending is not None:
            raise a.s.pending
        return a

    def step(self, closure=None):
        """End the iteration. update="servers": send the groups' current learning rates
        (the servers step). update="workers": wait for every averaged gradient in p.grad,
        then run the wrapped optimizer's step() (on every worker alike). Returns None;
        opt.should_stop says whether the workers agreed to stop."""
        if closure is not None:
            raise Error("DistributedOptimizer.step: a closure is not supported (the gradients "
                        "are averaged once per iteration, after backward)")
        a = self._check_call("step")
        inner = None
        if self._update == "workers":
            a.start()
            self._receive()
            self._inner_step()
            inner = self._inner_step
        else:
            a.check_grads()  # before anything changes: a caught Error leaves the iteration
        # The wrapped optimizer counts steps too: a scheduler built on it checks the count
        # (a scheduler made before the wrapper counted them in the wrapped step itself).
        if not getattr(inner, "_with_counter", False):
            self._opt._step_count = getattr(self._opt, "_step_count", 0) + 1
        self.should_stop = a.end()
        return None

    def clip_grad_norm_(self, max_norm, norm_type=2.0, error_if_nonfinite=False):
        """After backward(), before step(), on every worker alike: clip the averaged
        gradient by the global norm of every attached parameter's averaged gradient, as
        torch.nn.utils.clip_grad_norm_ after DDP's backward, and return that norm (before
        clipping) as torch does.

        update="workers": wait for the averaged gradients in p.grad (as step() would) and
        clip them there with torch.nn.utils.clip_grad_norm_ (any norm_type); step() then
        steps on them.

        update="servers": the averaged gradient exists only on the servers, in shards: each
        server sums the squares of its shard (in double), the servers exchange the sums,
        and each multiplies its shard by torch's coefficient max_norm / (norm + 1e-6), at
        most 1, before its step. The norm comes back to every worker: returned as a float32
        tensor on the parameters' device; the call blocks until every worker's backward
        pass reached the servers. p.grad keeps this worker's own gradient, unclipped. Clip
        from the run's first iteration on (also after --resume): the servers hold the
        chunks of the first iteration, and of every one after an iteration that clipped,
        until every worker said whether it clips (step() says no when this was not called),
        so a run that never clips keeps its overlap and a first call later is refused
        (clip with max_norm=float('inf') where you want the norm only). norm_type 2 only;
        error_if_nonfinite=True is refused (the servers step before the norm reaches the
        workers; a norm that is not finite comes back as inf or nan)."""
        a = self._check_call("clip_grad_norm_")
        if not any(a.ready):
            raise Error("DistributedOptimizer.clip_grad_norm_: call it after backward() (no "
                        "gradient of this iteration yet) and before step()")
        if self._update == "servers":
            return self._clip_on_servers(a, max_norm, norm_type, error_if_nonfinite)
        self._receive()
        return torch.nn.utils.clip_grad_norm_(a.params, max_norm, norm_type=norm_type,
                                              error_if_nonfinite=error_if_nonfinite)

    def _clip_on_servers(self, a, max_norm, norm_type, error_if_nonfinite):
        """clip_grad_norm_ with update="servers": hand over what backward left (the
        servers need every gradient for the norm), send max_norm, wait for the norm
        (pc_worker_clip_grad_norm)."""
        what = "DistributedOptimizer.clip_grad_norm_"
        if float(norm_type) != 2.0:
            raise Error(f"{what}: norm_type {norm_type} with update='servers': the servers clip "
                        "by the 2-norm only (norm_type=2.0)")
        if error_if_nonfinite:
            raise Error(f"{what}: error_if_nonfinite=True with update='servers': the servers "
                        "step before the norm reaches the workers (a norm that is not finite "
                        "comes back as inf or nan); leave it False")
        m = max_norm.item() if isinstance(max_norm, torch.Tensor) else max_norm
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0:
            raise Error(f"{what}: max_norm {max_norm!r} is not a number above 0 (inf: the "
                        "norm without clipping)")
        a.check_grads()
        a.hand_rest()  # the rates first, if no gradient took them yet
        s = a.s
        norm = ctypes.c_double()
        rc = s.lib.pc_worker_clip_grad_norm(s.w, float(m), ctypes.byref(norm))
        if rc != 0:
            s.fail(what, rc)
        return torch.tensor(norm.value, dtype=torch.float32, device=a.params[0].device)

    def zero_grad(self, set_to_none=False):
        """Nothing to do: the runtime zeroes the gradient buffers at each iteration's end
        (and a p.grad set to None is handled at the next backward). The wrapped optimizer's
        zero_grad() comes here too. With update="workers", between backward() and step()
        it raises: it would wipe the averaged gradients the runtime writes into p.grad."""
        a = self._a
        if self._update == "workers" and any(a.ready) and not a.s.finished:
            raise Error("zero_grad() between backward() and step() of a pc.DistributedOptimizer"
                        "(update='workers'): it would wipe the averaged gradients the runtime "
                        "writes into p.grad (the workers would step on zeros); call it before "
                        "backward(), or not at all (the runtime zeroes p.grad at each step)")
        return None

    def add_param_group(self, param_group):
        if self._update == "workers":
            raise Error("DistributedOptimizer: add_param_group after the start: add the group "
                        "to the torch optimizer before wrapping it")
        raise Error("DistributedOptimizer: add_param_group after the start: the servers "
                    "step the groups they were given at the start")

    def state_dict(self):
        """update="workers": the wrapped optimizer's (its state lives here)."""
        if self._update == "workers":
            return self._opt.state_dict()
        raise Error("DistributedOptimizer: the optimizer's state lives on the servers; save "
                    "and resume with --checkpoint-dir and --resume")

    def load_state_dict(self, state_dict):
        """update="workers": into the wrapped optimizer (the same on every worker)."""
        if self._update == "workers":
            return self._opt.load_state_dict(state_dict)
        raise Error("DistributedOptimizer: the optimizer's state lives on the servers; save "
                    "and resume with --checkpoint-dir and --resume")


def lr():
    """The current learning rate, a list: with a pc.DistributedOptimizer each parameter
    group's (param_groups' now: what this iteration's first gradient sends); without one,
    [the runtime's own schedule's rate of the current iteration] (--lr, --lr-schedule,
    --lr-warmup, ...: pc_runtime_lr at pc.iteration(), the iterations completed)."""
    a = _attached()
    if a.optimizer is None:
        a.start()
        s = a.s
        return [s.lib.pc_runtime_lr(s.rt, s.lib.pc_worker_iteration(s.w))]
    return [float(g["lr"]) for g in a.optimizer.param_groups]


def stopped():
    """Whether the workers agreed to stop at the last iteration's end (opt.step() or
    pc.iteration_end()): then call pc.finish()."""
    return _attached().stopped
