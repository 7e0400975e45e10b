"""pipecompress.probe: --mode auto from PyTorch (pc.probe).

pc-train's probe profiles its built-in models (pc_model_profile); a torch model is profiled
here, through hooks, the way the binding will run it: a "layer" of the cost model is a
module whose forward pre-hook is the first to wait for some parameters (pc.attach's hooks:
a module waits for its own parameters, a fused module for all of its), with the modules
that run after it up to the next such one; its forward time runs from its pre-hook to the
next layer's, its backward time from the previous gradient handed over (or the start of
backward) to the last of its own. Every rank profiles at once (the cores' sharing counts;
the allreduce's layout), then the library has the parameter-server layout's workers profile
again through a callback while its servers wait (that layout's sharing), takes the slowest
rank per layer, measures the link, the codecs (on rank 0's
gradients, packed as pc.attach packs them) and the server, and chooses as pc-train does
(pc_embed_choose, include/pipecompress/pc_embed.h).
"""
import ctypes
import statistics
import time

from . import _lib
from .errors import Error
from .session import _session


def _params(model, torch):
    """The parameters pc.attach registers, in its order (named_parameters, tied ones once,
    those that require a gradient), checked as attach checks them."""
    from .hooks import _check_tensor

    seen, out = set(), []
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        _check_tensor("parameter", name, p, need_float=True)
        seen.add(id(p))
        out.append(p)
    if not out:
        raise Error("probe: the model has no parameter that requires a gradient")
    return out


class _Profile:
    """One model's hooks for the probe and the events of one forward and backward."""

    def __init__(self, model, params, torch):
        from .hooks import _FUSED_TYPES as fused

        self.ids = {id(p): t for t, p in enumerate(params)}
        self.events = []  # ("f", module index, t) and ("b", tensor index, t)
        self.handles, self.accs, self.claims = [], [], []
        for m in model.modules():
            own = sorted({self.ids[id(p)] for p in m.parameters(recurse=isinstance(m, fused))
                          if id(p) in self.ids})
            if own:
                k = len(self.claims)
                self.claims.append(own)
                self.handles.append(m.register_forward_pre_hook(self._pre(k)))
        for t, p in enumerate(params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self.handles.append(acc.register_hook(self._grad(t)))
            self.accs.append(acc)

    def _pre(self, k):
        def pre(module, inputs):
            self.events.append(("f", k, time.perf_counter()))
        return pre

    def _grad(self, t):
        def hook(*_):
            self.events.append(("b", t, time.perf_counter()))
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles, self.accs = [], []


def _layers(claims, ntensors):
    """From the warm-up pass's modules' claims, in the order their pre-hooks ran: each
    tensor's layer (the first module to claim it
    opens a layer; modules that claim nothing new belong to the layer before them; tensors
    never claimed, to layer 0, as pc.attach waits for them before the model's forward) and
    the number of layers."""
    layer_of = [None] * ntensors
    nl = 0
    for own in claims:
        new = [t for t in own if layer_of[t] is None]
        if new:
            for t in new:
                layer_of[t] = nl
            nl += 1
    nl = max(nl, 1)
    return [0 if l is None else l for l in layer_of], nl


def _times(events, claims, layer_of, nl, t0, t1, t2):
    """One pass's forward and backward seconds per layer (the module docstring's rule)."""
    fwd, bwd = [0.0] * nl, [0.0] * nl
    cur, start = 0, t0
    seen = set()
    for kind, k, t in events:
        if kind != "f":
            continue
        new = [x for x in claims[k] if x not in seen]
        if new:  # opens its layer: the time so far is the current one's
            seen.update(new)
            fwd[cur] += t - start
            cur, start = layer_of[new[0]], t
    fwd[cur] += t1 - start
    last, start = None, t1
    for kind, k, t in events:
        if kind != "b":
            continue
        last = layer_of[k]
        bwd[last] += t - start
        start = t
    bwd[last if last is not None else 0] += t2 - start
    return fwd, bwd


def _measure(model, params, args, targets, loss_fn, reps, torch, slabs=True):
    """One warm-up and reps timed passes of model(*args) and loss_fn's backward, in train
    mode, with what they change put back afterwards (buffers, gradients, mode, random
    state). Returns per layer the median forward and backward seconds (neighbours merged
    past the probe's most layers), each tensor's layer, and, with slabs, the parameters
    and gradients packed in one block each, in registration order (pc.attach's layout;
    else None, None)."""
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    grads = [p.grad for p in params]
    training = model.training
    rng = torch.get_rng_state()
    prof = _Profile(model, params, torch)
    try:
        model.train()
        passes = []
        for _ in range(reps + 1):
            for p in params:
                p.grad = None
            prof.events = []
            t0 = time.perf_counter()
            try:
                loss = loss_fn(model(*args), targets)
            except Exception as e:
                raise Error(f"probe: the model's forward (or loss_fn) failed: "
                            f"{type(e).__name__}: {e}") from None
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise Error("probe: loss_fn(model(inputs), targets) is not a scalar tensor")
            t1 = time.perf_counter()
            loss.backward()
            passes.append((prof.events, t0, t1, time.perf_counter()))
        claims = [prof.claims[k] for kind, k, _ in passes[0][0] if kind == "f"]
        layer_of, nl = _layers(claims, len(params))
        per = [_times(ev, prof.claims, layer_of, nl, t0, t1, t2)
               for ev, t0, t1, t2 in passes[1:]]
        fwd = [statistics.median(f[l] for f, _ in per) for l in range(nl)]
        bwd = [statistics.median(b[l] for _, b in per) for l in range(nl)]
        group = -(-nl // _lib.AUTO_MAX_LAYERS)
        if group > 1:
            m = -(-nl // group)
            fwd = [sum(fwd[i * group:(i + 1) * group]) for i in range(m)]
            bwd = [sum(bwd[i * group:(i + 1) * group]) for i in range(m)]
            layer_of = [l // group for l in layer_of]
        # The chunk plan groups small tensors by adjacency, and rank 0's gradients are
        # timed: both as pc.attach lays them out.
        pslab = gslab = None
        if slabs:
            pslab = torch.cat([p.detach().reshape(-1) for p in params])
            gslab = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                               .detach().reshape(-1) for p in params])
    finally:
        prof.remove()
        with torch.no_grad():
            for b, v in buffers:
                b.copy_(v)
        for p, g in zip(params, grads):
            p.grad = g
        model.train(training)
        torch.set_rng_state(rng)
    return fwd, bwd, layer_of, pslab, gslab


def probe(model, inputs, targets, loss_fn=None, reps=3):
    """--mode auto, collective over every rank (servers to be included), after pc.init and
    before anything else of the job: profile model on one batch (inputs, a tensor or a tuple
    of tensors, the shape of one worker's batch in training; targets as loss_fn takes them;
    loss_fn(model(inputs), targets) a scalar, F.cross_entropy by default): one warm-up and
    `reps` timed forward and backward passes per rank, at once. The library then measures
    the link, the codecs and the server, predicts every mode, chooses the fastest and starts
    the runtime with it; rank 0 prints the figures and the choice as pc-train does. The
    model is left as it was: parameters, buffers (BatchNorm's statistics), gradients,
    train/eval mode and torch's random state are restored. Returns the choice as fixed
    flags (running with them in place of --mode auto gives the same run without the probe).
    In any other mode it does nothing and returns None, so a script can always call it."""
    import torch
    import torch.nn.functional as F

    s = _session()
    if not s.choosing:
        return None
    if not isinstance(model, torch.nn.Module):
        raise Error(f"probe: {type(model).__name__} is not a torch.nn.Module")
    if not isinstance(reps, int) or reps < 1:
        raise Error(f"probe: reps: {reps!r} is not a positive integer")
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        raise Error("probe: inputs is not a tensor (or a tuple of tensors)")
    batch = args[0].shape[0] if args[0].dim() > 0 else 0
    if batch < 1:
        raise Error("probe: inputs has no batch dimension (one worker's batch, as in training)")
    loss_fn = loss_fn or F.cross_entropy
    params = _params(model, torch)
    n = len(params)
    fwd, bwd, layer_of, pslab, gslab = _measure(model, params, args, targets, loss_fn, reps,
                                                torch)
    nl = len(fwd)
    layers = (_lib.CostLayer * nl)(*[_lib.CostLayer(f, b) for f, b in zip(fwd, bwd)])
    tensors = (_lib.PlanTensor * n)()
    off = 0
    for t, p in enumerate(params):
        k = p.numel()
        # whole_rows: a weight's rows, as attach gives them to the runtime (powersgd's
        # matrices in the cost model)
        rows = p.shape[0] if p.dim() >= 2 else 0
        tensors[t] = _lib.PlanTensor(k, pslab.data_ptr() + 4 * off, gslab.data_ptr() + 4 * off,
                                     rows)
        off += k
    tl = (ctypes.c_int * n)(*layer_of)

    failed = []

    def again(_ctx, out, count):
        # The parameter-server layout's workers profile again, the library's servers idle
        # (pc_auto_profile_fn): the same passes, without the slabs.
        try:
            f2, b2, _, _, _ = _measure(model, params, args, targets, loss_fn, reps, torch,
                                       slabs=False)
            if len(f2) != count:
                failed.append(f"the second profile found {len(f2)} layers, not {count}")
                return _lib.EINVAL
            for l in range(count):
                out[l] = _lib.CostLayer(f2[l], b2[l])
            return 0
        except Exception as e:  # noqa: BLE001 - a C callback cannot raise: said below
            failed.append(str(e))
            return _lib.EINVAL

    cb = _lib.PROFILE_FN(again)
    pr = _lib.AutoProbe(layers, nl, tensors, tl, n, cb, None)
    err = ctypes.create_string_buffer(1024)
    rc = s.lib.pc_embed_choose(s.e, ctypes.byref(pr), int(batch), err, len(err))
    del pslab, gslab, cb
    if rc != 0:
        msg = err.value.decode(errors="replace") or s.lib.pc_strerror(rc).decode()
        if failed:
            msg = f"{msg} ({failed[0]})"
        raise Error(msg if msg.startswith("--mode auto") else f"--mode auto: {msg}",
                    agreed=True)
    s.bind()
    s.auto_flags = s.lib.pc_embed_auto_flags(s.e).decode()
    return s.auto_flags
