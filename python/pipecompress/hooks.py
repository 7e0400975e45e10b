"""pipecompress.hooks: a torch model attached to the runtime (pc.attach) and the
per-iteration calls on it.

attach registers the model's parameters zero-copy and hooks it: each parameter's gradient
accumulator hands its gradient to the compressor thread during backward, each module's
forward pre-hook waits for its own parameters' update; iteration_end, iteration, report,
metrics_note and synchronize act on the attached model. Every call comes from the thread
that called pc.init.

torch is imported here, once: the package imports this module at the first use of one of
its names (pipecompress/__init__.py), so that `import pipecompress` works without torch.
"""
import ctypes
import hashlib
import json
import math
import threading

import torch

from . import console
from .errors import Error
from .session import _attached, _worker


class _Attached:
    """One model's registration and hooks on a worker (pc.attach). __init__ runs the steps
    below in order, as Horovod's DistributedOptimizer splits its __init__ from
    _register_hooks: check (nothing collective yet), register, hook. start() runs once,
    later: at pc.DistributedOptimizer (which gives the runtime the optimizer's parameter
    groups first: they travel with the chunk plan), or at the first forward pass or call
    that needs the runtime running; it starts the runtime (collective), compares with
    worker 0's model and takes its shared tensors (collective)."""

    def __init__(self, s, model, backward_passes_per_step, device_step=None):
        self.s = s
        self.model = model
        self.bpps = backward_passes_per_step
        self.device_step = device_step
        self.handles = []
        self.accs = []  # the gradient accumulators hooked (kept alive: see attach)
        self.params, self.names, self.grads = [], [], []
        self.ids = {}  # id(parameter) -> its index in self.params
        shared = self._check_params()
        n = len(self.params)
        self.ready = [0] * n  # gradient accumulations seen this iteration
        self.waited = [False] * n  # param_wait done this iteration
        self.outside = [False] * n  # read outside its own module's forward (first iteration)
        # Each gradient's version counter when it was handed over this iteration
        # (check_grads); synced: update='workers' waited for the averaged gradients in
        # p.grad this iteration (DistributedOptimizer.receive), which are the script's then.
        self.versions = [0] * n
        self.synced = False
        self.first = True  # the first iteration since attach (0, or --resume's)
        self._register_tensors()
        self.shared = shared
        self.started = False
        self.optimizer = None  # the pc.DistributedOptimizer, once made
        self.stopped = False  # what the last end() returned (pc.stopped())
        self.lrs_sent = False  # this iteration's learning rates are out (send_lrs)
        self.timeline = bool(s.config.get("timeline"))
        self.t_mark = 0
        self._install_hooks()

    def _check_params(self):
        """Collect the parameters that require a gradient (named_parameters order, tied
        ones once) into self.params, self.names and self.ids, and check them: CPU, dense,
        float32, contiguous, disjoint. Everything the servers do not train comes from
        worker 0 too (after the start, _broadcast_shared): buffers (BatchNorm's statistics:
        kept local afterwards) and frozen parameters; they are checked here as well, before
        the collective start. Returns them as [(kind, name, tensor)]. Raises Error."""
        frozen = []
        for name, p in self.model.named_parameters():  # tied parameters come once
            if not p.requires_grad:
                frozen.append((name, p))
                continue
            _check_tensor("parameter", name, p, need_float=True)
            self.ids[id(p)] = len(self.params)
            self.params.append(p)
            self.names.append(name)
        if not self.params:
            raise Error("attach: the model has no parameter that requires a gradient")
        _check_disjoint([(n, p) for n, p in zip(self.names, self.params)] + frozen)
        shared = ([("buffer", nm, b) for nm, b in self.model.named_buffers()] +
                  [("frozen parameter", nm, p) for nm, p in frozen])
        for kind, name, b in shared:
            _check_tensor(kind, name, b, need_float=False)
        return shared

    def _register_tensors(self):
        """Register the parameters with the runtime, zero-copy (start() starts it); fails
        the job (s.fail) on an error.

        The parameters move into one block, in registration order (values kept), and the
        gradient buffers are pieces of one more: the runtime's chunk plan groups a small
        tensor with the one before it only when both buffers continue that one's
        (pc_plan.h), as pc-train's slabs do. torch allocates each tensor on its own, so
        without this every small tensor (a BatchNorm's weight and bias: 106 of ResNet-50's
        161) is a message of its own, both ways, every iteration. Each p.grad becomes its
        piece of the gradient block (self.grads)."""
        s = self.s
        self.slab = _gather(self.params)
        gslab = torch.zeros(sum(p.numel() for p in self.params))
        self.pptr = [p.data_ptr() for p in self.params]
        # The registered memory stays alive as long as the attachment, whatever the script
        # does to the parameters (p.data = ...): the runtime writes updates into it.
        self.keep = [p.detach() for p in self.params]
        lib, w = s.lib, s.w
        off = 0
        with torch.no_grad():
            for name, p in zip(self.names, self.params):
                # A tensor of its own on the block's memory (set_, not a view: views share
                # one version counter with their base, and check_grads reads each
                # gradient's own to see a write after its hand-off).
                g = torch.empty(0).set_(gslab.storage(), off, p.shape, p.stride())
                off += p.numel()
                p.grad = g
                self.grads.append(g)
                t = lib.pc_worker_register(w, name.encode(), p.data_ptr(), g.data_ptr(),
                                           p.numel())
                if t < 0:
                    s.fail(f"attach: registering {name}", t)
                # A weight is a matrix of its first dimension's rows (torch's powerSGD_hook
                # views it so too); only --compress powersgd reads it.
                if p.dim() >= 2:
                    rc = lib.pc_worker_set_rows(w, t, p.shape[0])
                    if rc != 0:
                        s.fail(f"attach: {name}'s rows", rc)
        self.gptr = [g.data_ptr() for g in self.grads]
        if self.device_step is not None:
            rc = lib.pc_worker_set_device_step(w, round(self.device_step * 1e9))
            if rc != 0:
                s.fail("attach: device_step", rc)

    def start(self):
        """Start the runtime (collective with the servers and the other workers), compare
        the model with worker 0's and take its shared tensors; once, at the first forward
        pass or call that needs it (pc.DistributedOptimizer configures the optimizer
        before). Fails the job (s.fail) on an error."""
        if self.started:
            return
        self.started = True
        s = self.s
        rc = s.lib.pc_worker_start(s.w)
        if rc != 0:
            s.fail("attach: start", rc)
        self._check_same_model(self.shared)
        self._broadcast_shared(self.shared)
        if s.reporter is not None:
            s.reporter.configuration(s, self)
        console.shadowed_at_start(s, self)

    def _check_same_model(self, shared):
        """Compare this worker's model with worker 0's (collective): the runtime compares
        sizes only, but names, shapes, dtypes and the shared tensors must agree too (a
        swapped pair of equal shapes would train mixed up; a buffer of another size would
        break _broadcast_shared). Raises Error when they differ."""
        s = self.s
        plan = ";".join(f"{kind} {name} {tuple(t.shape)} {t.dtype}" for kind, name, t in
                        [("p", n, p) for n, p in zip(self.names, self.params)] + shared)
        mine = hashlib.sha256(plan.encode()).digest()
        theirs = ctypes.create_string_buffer(mine, len(mine))
        if s.lib.pc_worker_broadcast(s.w, theirs, len(mine)) != 0:
            s.fail("attach: comparing the model with worker 0's")
        if theirs.raw != mine:
            raise Error(f"attach: worker {s.rank}'s model differs from worker 0's (parameter "
                        "or buffer names, shapes, dtypes or order): every worker attaches "
                        "the same architecture")

    def _broadcast_shared(self, shared):
        """Worker 0's buffers and frozen parameters become every worker's (collective)."""
        s = self.s
        for kind, name, b in shared:
            nbytes = b.numel() * b.element_size()
            if nbytes and s.lib.pc_worker_broadcast(s.w, b.data_ptr(), nbytes) != 0:
                s.fail(f"attach: broadcasting {kind} {name}")

    def _install_hooks(self):
        """Each module's forward pre-hook (the root's too) and each parameter's gradient
        accumulator hook; with --timeline, each module's forward hook. Handles in
        self.handles (remove_hooks)."""
        model = self.model
        self.handles.append(model.register_forward_pre_hook(self._root_pre))
        for mname, m in model.named_modules():
            # A module's forward waits for its own parameters; a fused one's (below) for
            # every parameter under it, which its forward reads without calling the
            # submodules that hold them.
            mine = m.parameters(recurse=isinstance(m, _FUSED_TYPES))
            own = sorted({self.ids[id(p)] for p in mine if id(p) in self.ids})
            if not own:
                continue
            self.handles.append(m.register_forward_pre_hook(self._pre(own, mname)))
            if self.timeline:
                self.handles.append(m.register_forward_hook(self._post(mname)))
        for t, p in enumerate(self.params):
            # The gradient accumulator of a leaf (the node that adds into p.grad): its
            # post-hook runs once per backward pass, after p.grad holds the gradient. The
            # node is cached weakly by p: holding it keeps the hook for later graphs.
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self.handles.append(acc.register_hook(self._on_grad(t)))
            self.accs.append(acc)

    def remove_hooks(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.accs = []

    def fail_later(self, err):
        """Raise err here, and again at pc.iteration_end() on the training thread: autograd
        and threads may swallow an exception raised in a hook."""
        if self.s.pending is None:
            self.s.pending = err
        raise err

    def wait(self, t):
        self.start()  # a module called without the root's forward (a ModuleDict's parts)
        s = self.s
        rc = s.lib.pc_worker_param_wait(s.w, t)
        if rc != 0:
            s.fail(f"waiting for {self.names[t]}", rc)
        self.waited[t] = True

    def _root_pre(self, module, inputs):
        if threading.get_ident() != self.s.thread:
            self.fail_later(Error("forward pass of the model on another thread than "
                                  "pc.init's (every call and the training loop run on that "
                                  "thread)"))
        self.start()
        for t, out in enumerate(self.outside):
            if out and not self.waited[t]:
                self.wait(t)
        rep = self.s.reporter
        if rep is not None and module.training and torch.is_grad_enabled() and inputs:
            x = inputs[0]  # a training pass: its samples count in the progress line's rate
            if isinstance(x, torch.Tensor) and x.dim() > 0:
                rep.forward(x.shape[0])
        if self.timeline:
            self.t_mark = self.s.lib.pc_time_ns()

    def send_lrs(self):
        """This iteration's learning rates to the servers (pc.DistributedOptimizer's
        param_groups), once, before its first gradient leaves: a server steps a chunk only
        once every worker's rates of the iteration are in, so rates sent at opt.step()
        would hold every update back until backward ended (no overlap of the servers' step
        with backward). The rates of iteration t are known at its start: a scheduler steps
        after opt.step() of t - 1. end() checks that they did not change since."""
        self.lrs_sent = True
        if self.optimizer is not None:
            self.optimizer._send_lrs()

    def _pre(self, own, mname):
        def pre(module, inputs):
            if threading.get_ident() != self.s.thread:
                self.fail_later(Error(f"forward pass of {mname or 'the model'} on another "
                                      "thread than pc.init's (every call and the training "
                                      "loop run on that thread)"))
            for t in own:
                if not self.waited[t]:
                    self.wait(t)
            if self.timeline:
                self.t_mark = self.s.lib.pc_time_ns()
        return pre

    def _post(self, mname):
        name = f"forward {mname or 'model'}".encode()

        def post(module, inputs, output):
            now = self.s.lib.pc_time_ns()
            self.s.lib.pc_worker_trace(self.s.w, name, self.t_mark, now)
            self.t_mark = now
        return post

    def _on_grad(self, t):
        p, g = self.params[t], self.grads[t]
        tname = f"backward {self.names[t]}".encode()

        def hook(*_):
            self.ready[t] += 1
            if self.ready[t] != self.bpps:
                if self.ready[t] > self.bpps:
                    self.fail_later(Error(
                        f"the gradient of {self.names[t]} came {self.ready[t]} times in one "
                        f"iteration, backward_passes_per_step is {self.bpps} (its gradient "
                        "was handed over already; pc.attach(model, "
                        "backward_passes_per_step=N) for N passes per iteration)"))
                return
            s = self.s
            if threading.get_ident() != s.thread:
                self.fail_later(Error(f"the gradient of {self.names[t]} arrived on another "
                                      "thread than pc.init's (backward must run on the "
                                      "training thread)"))
            if not self.waited[t]:
                # Read without its module's forward (a parameter used by another module):
                # from now on waited for before the model's forward, all at once.
                if self.first:
                    self.outside[t] = True
                self.wait(t)
            if p.data_ptr() != self.pptr[t]:
                raise Error(f"parameter {self.names[t]} was given new memory after "
                            "pc.attach (p.data = ...): the runtime writes to the old one")
            if p.grad is None or p.grad.data_ptr() != self.gptr[t]:
                # Someone replaced p.grad (zero_grad(set_to_none=True), create_graph=True):
                # the runtime reads the registered buffer.
                with torch.no_grad():
                    if p.grad is None:
                        g.zero_()
                    else:
                        g.copy_(p.grad)
                p.grad = g
            self.versions[t] = g._version  # check_grads: no write from here on
            if not self.lrs_sent:  # the iteration's first gradient to leave
                try:
                    self.send_lrs()
                except Error as e:
                    self.fail_later(e)
            rc = s.lib.pc_worker_grad_ready(s.w, t)
            if rc != 0:
                s.fail(f"handing over the gradient of {self.names[t]}", rc)
            if self.timeline:
                now = s.lib.pc_time_ns()
                s.lib.pc_worker_trace(s.w, tname, self.t_mark, now)
                self.t_mark = now
        return hook

    def check_grads(self):
        """Raise a one-line Error when a gradient handed over this iteration was written
        since (in place: its version counter moved; torch.nn.utils.clip_grad_norm_ after
        backward, p.grad.mul_, a zero_grad) or p.grad was replaced or set to None: the
        runtime reads the registered buffer after the hand-off (the compressor thread,
        maybe still now with the pipeline on: a data race that breaks determinism; or it
        was sent already and the write is lost), and with update='workers' writes the
        averaged gradient into it. Not after the averaged gradients were received
        (self.synced): they are the script's then."""
        if self.synced:
            return
        for t, (p, g) in enumerate(zip(self.params, self.grads)):
            if self.ready[t] < self.bpps:
                continue  # not handed over yet (hand_rest reads p.grad as it is)
            if p.grad is None:
                how = "p.grad was set to None"
            elif p.grad.data_ptr() != self.gptr[t]:
                how = "p.grad was replaced by another tensor"
            elif g._version != self.versions[t]:
                how = "written in place: clip_grad_norm_, p.grad.mul_, zero_grad, ..."
            else:
                continue
            raise Error(f"the gradient of {self.names[t]} was changed after backward handed "
                        f"it to the runtime ({how}): the runtime reads it from there (with "
                        "the pipeline on maybe still now: a data race), so the change is lost "
                        "or corrupts the run; clip with opt.clip_grad_norm_(max_norm) of a "
                        "pc.DistributedOptimizer instead")

    def hand_rest(self):
        """Hand over every gradient that did not come this iteration (an unused parameter,
        fewer backward passes): the buffer holds what was accumulated, zeros if nothing."""
        s = self.s
        if not self.lrs_sent and min(self.ready) < self.bpps:  # rates before gradients
            self.send_lrs()
        for t in range(len(self.params)):
            if self.ready[t] < self.bpps:
                if not self.waited[t]:
                    self.wait(t)
                p, g = self.params[t], self.grads[t]
                if p.grad is not None and p.grad.data_ptr() != self.gptr[t]:
                    with torch.no_grad():
                        g.copy_(p.grad)
                self.ready[t] = self.bpps  # handed over: once (hand_rest may run twice)
                self.versions[t] = g._version
                rc = s.lib.pc_worker_grad_ready(s.w, t)
                if rc != 0:
                    s.fail(f"handing over the gradient of {self.names[t]}", rc)

    def end(self):
        s = self.s
        if s.pending is not None:
            raise s.pending
        self.start()
        self.check_grads()
        if not self.lrs_sent:  # no gradient left yet: the rates go before the first
            self.send_lrs()
        elif self.optimizer is not None:  # sent at the first gradient: still the same?
            self.optimizer._check_lrs()
        self.hand_rest()
        stop = ctypes.c_bool(False)
        rc = s.lib.pc_worker_iteration_end(s.w, ctypes.byref(stop))
        if rc != 0:
            s.fail("iteration_end", rc)
        with torch.no_grad():
            for p, g in zip(self.params, self.grads):
                g.zero_()
                if p.grad is None or p.grad.data_ptr() != g.data_ptr():
                    p.grad = g
        n = len(self.params)
        self.ready = [0] * n
        self.waited = [False] * n
        self.synced = False
        self.first = False
        self.lrs_sent = False
        self.stopped = bool(stop.value)
        if s.reporter is not None:
            it = s.lib.pc_worker_iteration(s.w)  # iterations completed
            opt = self.optimizer  # the rates the iteration used
            lrs = ([s.lib.pc_runtime_lr(s.rt, it - 1)] if opt is None else
                   getattr(opt, "_sent", None) or [float(g["lr"]) for g in opt.param_groups])
            s.reporter.iteration_done(s, it, lrs)
        return self.stopped

    def sync(self):
        self.start()
        for t in range(len(self.params)):
            if not self.waited[t]:
                self.wait(t)


def _gather(params):
    """Move the parameters into one float32 block, in the order given, values kept: p.data
    becomes a view of the block, so each Parameter, and every module holding it, stays the
    same object. Returns the block. Runs before registration: the runtime sees only the
    new memory."""
    slab = torch.empty(sum(p.numel() for p in params))
    off = 0
    with torch.no_grad():
        for p in params:
            v = slab[off:off + p.numel()].view_as(p)
            v.copy_(p)
            p.data = v
            off += p.numel()
    return slab


# torch's modules whose forward reads their submodules' parameters itself, never
# calling those submodules: nn.MultiheadAttention hands out_proj's weight and bias to
# F.multi_head_attention_forward (and to its eval fast path); nn.TransformerEncoderLayer,
# in eval without autograd, hands every parameter of the layer to one fused kernel
# (torch._transformer_encoder_layer_fwd). Their submodules' forward pre-hooks never run
# there: without this, out_proj would be waited for only at the model's start (every
# layer's, before layer 0), and an evaluation between iterations would read the layer's
# parameters before their update. (nn.TransformerDecoderLayer calls its submodules.)
_FUSED_TYPES = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer)


def _check_tensor(kind, name, t, need_float):
    if t.device.type != "cpu":
        raise Error(f"attach: {kind} {name} is on {t.device}: the binding trains CPU tensors "
                    "(move the model with model.cpu())")
    if t.is_sparse or t.layout != torch.strided:
        raise Error(f"attach: {kind} {name} is not a dense (strided) tensor")
    if need_float and t.dtype != torch.float32:
        raise Error(f"attach: {kind} {name} is {str(t.dtype).replace('torch.', '')}: "
                    "PipeCompress trains float32 parameters (convert the model with "
                    "model.float())")
    if not t.is_contiguous():
        raise Error(f"attach: {kind} {name} is not contiguous (the runtime reads and writes "
                    f"it in place; make it so before pc.attach: p.data = p.data.contiguous())")


def _check_disjoint(named):
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), n)
                   for n, t in named if t.numel() > 0)
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise Error(f"attach: parameters {an} and {bn} share memory (views of one "
                        "tensor); tie them as one Parameter or give each its own storage")


def attach(model, backward_passes_per_step=1, device_step=None):
    """Workers: register model's parameters with the runtime. The runtime starts (collective
    with the servers and the other workers, which must attach the same architecture) right
    after, at the first forward pass or call that needs it (pc.iteration(), ...), or at
    pc.DistributedOptimizer, which gives it the optimizer's parameter groups first and so
    must come before those.

    Every parameter that requires a gradient is registered in model.named_parameters()
    order (tied parameters once), zero-copy: CPU, float32, contiguous, disjoint, or a
    one-line pipecompress.Error naming it. First they are moved into one block of memory
    (values kept, p.data a view of it; the Parameter objects stay), so that the chunk plan
    can group the small ones as pc-train's slabs. Worker 0's parameters, buffers and frozen
    parameters become every worker's. From then on the gradient buffers are the runtime's
    (pc.iteration_end() zeroes them) and the step is the servers' (their --optimizer, --lr,
    schedule), unless the script wraps its own torch optimizer in pc.DistributedOptimizer
    (update="servers": the servers run its class and groups; update="workers": it steps
    on every worker). backward_passes_per_step: backward passes accumulated per iteration (a
    gradient is handed over after that many). device_step (--mode allreduce only): the
    optimizer step runs on a device that the caller models, such as a replayed GPU
    (doc/replay.md): the runtime holds this many seconds an iteration instead of stepping
    on the CPU, and the parameters stay as they are (pc_worker_set_device_step). Returns
    model."""
    s = _worker()
    if not isinstance(model, torch.nn.Module):
        raise Error(f"attach: {type(model).__name__} is not a torch.nn.Module")
    if s.model is not None:
        raise Error("attach: a model is already attached on this worker")
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise Error(f"attach: backward_passes_per_step: {backward_passes_per_step!r} is not "
                    "a positive integer")
    if device_step is not None:
        if (isinstance(device_step, bool) or not isinstance(device_step, (int, float)) or
                not math.isfinite(device_step) or not 0 <= device_step <= 3600):
            raise Error(f"attach: device_step: {device_step!r} is not a number of seconds "
                        "in 0..3600")
        if s.config.get("mode") != "allreduce":
            raise Error("attach: device_step: only with --mode allreduce (with --mode ps the "
                        "servers step)")
    s.model = _Attached(s, model, backward_passes_per_step, device_step)
    return model


def iteration_end():
    """End this iteration (after backward): hand over the gradients that did not arrive,
    wait for the gradient buffers' release, zero them, agree with the other workers whether
    to stop. Returns True when the job is to stop (a SIGINT or SIGTERM on some worker):
    every worker gets True at the same iteration; call pc.finish() then."""
    return _attached().end()


def iteration():
    """Iterations completed (after pc.attach with --resume: where the checkpoint left off,
    so the script can continue its data order from there)."""
    a = _attached()
    a.start()
    return a.s.lib.pc_worker_iteration(a.s.w)


def report(loss, accuracy=None):
    """This iteration's training loss (and batch accuracy, 0..1) for --metrics."""
    a = _attached()
    a.start()
    acc = math.nan if accuracy is None else float(accuracy)
    a.s.lib.pc_worker_report(a.s.w, float(loss), acc)
    if a.s.reporter is not None:
        a.s.reporter.loss(float(loss))


def metrics_note(obj):
    """Append an object (a dict, or a string holding a JSON object; an evaluation, say) to
    this rank's --metrics lines. Anything else is refused: the file stays JSON lines."""
    a = _attached()
    try:  # through the parser and back: strict JSON (no NaN), one line
        parsed = obj if isinstance(obj, dict) else json.loads(str(obj))
        if not isinstance(parsed, dict):
            raise ValueError("not an object")
        text = json.dumps(parsed, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise Error(f"metrics_note: not a JSON object: {e}") from None
    a.start()
    a.s.lib.pc_worker_metrics_note(a.s.w, text.encode())


def synchronize():
    """Wait until every parameter holds the latest update (before evaluating or saving)."""
    _attached().sync()


def lowrank_q():
    """--compress powersgd: {parameter name: Q} for every weight that travels as factors,
    Q a (cols, rank) float32 tensor (cols: the weight's elements / its first dimension): the
    warm start its next round multiplies by, right after pc.attach the draw every worker
    makes alike. Waits for every update first (pc.synchronize). To start another
    implementation from the same Q (torch's powerSGD_hook, in the comparison of
    tests/mpi/test_torch_powersgd.sh). Other parameters are left out; {} in other modes."""
    a = _attached()
    a.sync()
    s, out = a.s, {}
    for t, (name, p) in enumerate(zip(a.names, a.params)):
        qn = s.lib.pc_worker_lowrank_q_len(s.w, t)
        if qn == 0:
            continue
        cols = p.numel() // p.shape[0]
        q = torch.empty(cols, qn // cols, dtype=torch.float32)
        rc = s.lib.pc_worker_lowrank_q(s.w, t, q.data_ptr(), qn)
        if rc != 0:
            s.fail(f"lowrank_q: {name}", rc)
        out[name] = q
    return out
