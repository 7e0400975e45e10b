"""torch_replay: the replay of a GPU's compute in torch, for apps/examples/torch_train.py's
--arch replay:PATH (doc/replay.md, "Through torch and DDP").

A trace (the JSON of doc/replay.md: per layer its parameter shapes and its forward and
backward milliseconds on some GPU) becomes a torch module with the trace's real parameter
shapes whose forward and backward do no arithmetic: each layer is one custom
autograd.Function that sleeps the layer's time, multiplied by the dilation K, and whose
backward hands its parameters' gradients over in reverse layer order, as a GPU trainer's
would. Everything else runs for real: the binding's hooks and runtime (pc.attach), or
DistributedDataParallel with its communication hooks.

Holding. Every hold sleeps to a deadline (time.sleep releases the GIL; a GPU computing
leaves the host's cores free), deadline = start + ms x K, where start is the previous
deadline plus the time the host thread was itself held since (the runtime's blocking calls
through the binding: param_wait, grad_ready (inline compression, backpressure),
iteration_end; the peer's hook work on the backprop thread; DDP's wait for its allreduce at
the end of backward), and never earlier than 2 ms (HOST_LAG_S) before now, less the host
work this CPU does only because it emulates (below) and less the lateness inherited from
the previous hold's wake-up (a late wake-up is the scheduler's, not the device's: the holds
after it absorb it, as in the C driver): the host's own Python overhead
between two holds (autograd, the hooks' bookkeeping, tens of microseconds a layer) is what
a GPU trainer hides by running ahead of the device, so it is not charged to the replayed
compute unless the host falls more than 2 ms behind the schedule (layers shorter than the
host's overhead). The sleep's
overshoot (wake minus deadline) is recorded.

Gradients. One pool per process filled once at start-up: Laplace(0, 1) (heavy-tailed, as
real gradients are), from a torch.Generator seeded by (seed, rank), as long as the largest
tensor plus a quarter (tensors' views may overlap); tensor t's gradient at
iteration i is the pool's slice at an offset hashed from (seed, rank, i, t) (changes every
iteration, differs per worker, deterministic), scaled by 0.01 / sqrt(fan-in), written into
p.grad inside the layer's backward (the artefact of this CPU: on a GPU the backward kernels
write it; its time is not charged to the schedule) and handed on as None, so that autograd's
accumulator adds nothing; the accumulator's hooks (the binding's grad_ready, DDP's reducer)
still run, in reverse layer order.

The host copy (--backend pipecompress only). A GPU trainer that compresses on the CPU first
copies each gradient to the host on a copy engine, beside the compute: one engine, FIFO,
each tensor from max(the layer's deadline, the engine's previous end) for bytes / rate x K
(--pcie-gbps, default 24 GB/s: PCIe 4.0 x16 as pinned cudaMemcpy achieves it). The layer's
gradients are handed over when the last of them has arrived (the backprop thread sleeps to
that time; that sleep is not charged to the schedule either: the next layer's compute runs
beside the copy). DDP and the compute-only run keep their gradients on the device: no copy.

The peer's own work (--backend ddp). What DDP's hooks compute on the CPU here but on the GPU
in a real run (fp16_compress_hook's cast and decompression, powerSGD_hook's products,
orthogonalisation, error feedback and unpacking) is measured: torch's hook is called with
its module's `dist` replaced by a meter that times each synchronous part and each
callback of the future chain, less the time it waits on communication. With dilation K each
such piece is followed by a sleep of (K - 1) x its duration, as PipeCompress's own CPU work
is (--dilate). The run reports the iteration as measured and with that work removed (the
peer's best case: every measured piece counted as on the critical path, which can only
favour the peer).
"""
import hashlib
import json
import math
import os
import threading
import time

import torch
import torch.nn as nn

MAX_TRACE_BYTES = 64 << 20  # doc/replay.md's limit on a trace file
MAX_DIMS = 8
MAX_NUMEL = (1 << 31) - 1  # per tensor: below 2^31 elements
TOP_KEYS = ("model", "device", "batch", "precision", "source", "layers", "optimizer_ms")
LAYER_KEYS = ("name", "params", "forward_ms", "backward_ms")
HOST_LAG_S = 2e-3  # how far the host may fall behind the schedule before a hold slips
PCIE_GBPS = 24.0  # GB/s: PCIe 4.0 x16 as pinned cudaMemcpy achieves it (of 32 GB/s raw)
HBM_BYTES_PER_S = 1.5e12  # A100 40 GB's HBM2 (1555 GB/s): the optimizer rule below
OPT_BYTES_PER_ELEM = 20  # SGD with momentum, fp32: parameter and momentum read and written,
# the gradient read (pc_replay's rule too, doc/replay.md)


class TraceError(Exception):
    """A trace refused: the message is one line naming the field (and the layer)."""


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ms(where, v):
    if not _num(v):
        raise TraceError(f"{where}: {json.dumps(v)[:40]} is not a number")
    if not math.isfinite(v):
        raise TraceError(f"{where}: {v} is not finite")
    if v < 0:
        raise TraceError(f"{where}: {v} is negative")
    return float(v)


def _pairs(pairs):
    keys = [k for k, _ in pairs]
    for i, k in enumerate(keys):
        if k in keys[:i]:
            raise TraceError(f"key '{k}' twice in one object")
    return dict(pairs)


def _constant(name):
    raise TraceError(f"{name} is not JSON (times must be finite numbers)")


def load_trace(path):
    """The trace at path, validated as doc/replay.md's format says: a dict with the top
    level's keys and "layers" a list of {"name", "params": [[dims]], "forward_ms",
    "backward_ms"}. Raises TraceError (one line) for anything malformed."""
    try:
        size = os.path.getsize(path)
        if size > MAX_TRACE_BYTES:
            raise TraceError(f"{size} bytes, over the {MAX_TRACE_BYTES >> 20} MiB limit")
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        raise TraceError(e.strerror or str(e)) from None
    except UnicodeDecodeError as e:
        raise TraceError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise TraceError(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise TraceError("not JSON: nested too deeply") from None
    return check_trace(doc)


def check_trace(doc):
    if not isinstance(doc, dict):
        raise TraceError("the top level is not an object")
    for k in doc:
        if k not in TOP_KEYS:
            raise TraceError(f"unknown key '{k}' at the top level (known: "
                             f"{', '.join(TOP_KEYS)})")
    for k in TOP_KEYS[:-1]:
        if k not in doc:
            raise TraceError(f"'{k}' is missing")
    for k in ("model", "device", "precision", "source"):
        if not isinstance(doc[k], str):
            raise TraceError(f"{k}: not a string")
    b = doc["batch"]
    if not isinstance(b, int) or isinstance(b, bool) or b < 1:
        raise TraceError(f"batch: {json.dumps(b)[:40]} is not an integer >= 1")
    if "optimizer_ms" in doc:
        _ms("optimizer_ms", doc["optimizer_ms"])
    layers = doc["layers"]
    if not isinstance(layers, list) or not layers:
        raise TraceError("layers: not a non-empty list")
    seen, nparams = {}, 0
    for i, lay in enumerate(layers):
        at = f"layers[{i}]"
        if not isinstance(lay, dict):
            raise TraceError(f"{at}: not an object")
        name = lay.get("name")
        if not isinstance(name, str) or not name:
            raise TraceError(f"{at}.name: " + ("missing" if "name" not in lay
                                                else "not a non-empty string"))
        at = f"{at} ({name})"
        if name in seen:
            raise TraceError(f"{at}.name: the name of layers[{seen[name]}] too (names are "
                             "unique)")
        seen[name] = i
        for k in lay:
            if k not in LAYER_KEYS:
                raise TraceError(f"{at}: unknown key '{k}' (known: {', '.join(LAYER_KEYS)})")
        for k in LAYER_KEYS[1:]:
            if k not in lay:
                raise TraceError(f"{at}.{k}: missing")
        _ms(f"{at}.forward_ms", lay["forward_ms"])
        _ms(f"{at}.backward_ms", lay["backward_ms"])
        ps = lay["params"]
        if not isinstance(ps, list):
            raise TraceError(f"{at}.params: not a list of shapes")
        for j, shape in enumerate(ps):
            w = f"{at}.params[{j}]"
            if not isinstance(shape, list) or not 1 <= len(shape) <= MAX_DIMS:
                raise TraceError(f"{w}: not a shape (a list of 1..{MAX_DIMS} dimensions)")
            n = 1
            for d, v in enumerate(shape):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise TraceError(f"{w}[{d}]: {json.dumps(v)[:40]} is not an integer >= 1")
                n *= v
            if n > MAX_NUMEL:
                raise TraceError(f"{w}: {n} elements, not below 2^31")
            nparams += 1
    if nparams == 0:
        raise TraceError("layers: no layer has parameters")
    return doc


def optimizer_seconds(trace, nelem):
    """The optimizer step's device time (undilated): the trace's optimizer_ms, or when it
    is absent the rule of doc/replay.md (pc_replay's): every element's 20 bytes of traffic
    (SGD with momentum reads and writes the parameter and the momentum and reads the
    gradient) at an A100's 1.5 TB/s of HBM, as a memory-bound kernel runs. Returns
    (seconds, where it came from)."""
    if "optimizer_ms" in trace:
        return trace["optimizer_ms"] / 1e3, "the trace's optimizer_ms"
    return (nelem * OPT_BYTES_PER_ELEM / HBM_BYTES_PER_S,
            "no optimizer_ms: elements x 20 bytes at 1.5 TB/s (A100 HBM)")


def _mix(*words):
    """A 64-bit hash of integers (BLAKE2b): the pool's seeds and offsets."""
    h = hashlib.blake2b(digest_size=8)
    for w in words:
        h.update(int(w).to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest(), "little")


class Clock:
    """The replayed device's schedule on the thread that trains (module docstring)."""

    def __init__(self, dilate):
        self.k = dilate
        self.deadline = None
        self.blocked = 0.0  # seconds the host thread was held since the last hold
        self.credit = 0.0  # seconds of host work since then that a GPU trainer would not do
        self.overshoot = []  # seconds past each deadline at wake-up
        self.late = 0.0  # the last hold's overshoot: inherited by the next hold, not charged
        self.iter_start = None  # where the schedule stood when this iteration's began
        self.marking = False
        self.lock = threading.Lock()

    def block(self, seconds):
        """The host thread was held for seconds (a blocking call): the schedule slips."""
        with self.lock:
            self.blocked += seconds

    def mark_iteration(self):
        """An iteration begins: its first hold's start becomes iter_start."""
        self.marking = True

    def credit_host(self, seconds):
        """The host thread spent seconds on this CPU's artefacts (writing the gradients,
        waiting for the modelled copy, zeroing the binding's buffers): not charged."""
        with self.lock:
            self.credit += seconds

    def sync(self):
        """The device waits for the host here (the host waited for a collective): the
        schedule continues from now at the earliest."""
        now = time.perf_counter()
        with self.lock:
            base = now if self.deadline is None else self.deadline + self.blocked
            self.deadline = max(base, now)
            self.blocked = self.credit = 0.0

    def hold(self, seconds):
        """Compute for seconds (already dilated): sleep to the next deadline."""
        now = time.perf_counter()
        with self.lock:
            if self.deadline is None:
                self.deadline = now
            start = max(self.deadline + self.blocked,
                        now - HOST_LAG_S - self.credit - self.late)
            self.blocked = self.credit = 0.0
            self.deadline = d = start + seconds
            if self.marking:
                self.iter_start, self.marking = start, False
        left = d - time.perf_counter()
        if left > 0:
            time.sleep(left)
            self.late = max(0.0, time.perf_counter() - d)
            if seconds > 0:
                self.overshoot.append(self.late)
        else:
            # no sleep: the host is behind the schedule. What is left of an earlier
            # wake-up's lateness carries on; the host's own lag does not (a device cannot
            # start a layer before the host has launched it).
            with self.lock:
                self.late = max(0.0, self.late - seconds)
        return d

    def percentiles(self):
        o = sorted(self.overshoot)
        if not o:
            return 0.0, 0.0
        return o[len(o) // 2], o[min(len(o) - 1, int(0.99 * len(o)))]


class _LayerFn(torch.autograd.Function):
    """One replayed layer: forward holds its forward time, backward its backward time and
    then hands over its parameters' gradients (ReplayModel.deliver)."""

    @staticmethod
    def forward(ctx, x, layer, *params):
        ctx.layer = layer
        layer.owner.clock.hold(layer.fwd_s)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        layer = ctx.layer
        d = layer.owner.clock.hold(layer.bwd_s)
        layer.owner.deliver(layer, d)
        return (g, None) + (None,) * len(layer.plist)


class ReplayLayer(nn.Module):
    def __init__(self, owner, index, spec, k):
        super().__init__()
        self.index = index
        self.trace_name = spec["name"]
        self.fwd_s = spec["forward_ms"] * k / 1e3
        self.bwd_s = spec["backward_ms"] * k / 1e3
        # The layer's own parameters (p0, p1, ...: the binding's forward pre-hook on this
        # module waits for exactly these), and the same as a list.
        self.plist = []
        for j, shape in enumerate(spec["params"]):
            p = nn.Parameter(torch.zeros(*shape))
            self.register_parameter(f"p{j}", p)
            self.plist.append(p)
        object.__setattr__(self, "owner", owner)  # not a submodule: a back reference

    def forward(self, x):
        return _LayerFn.apply(x, self, *self.plist)


class ReplayModel(nn.Module):
    """The trace as a torch module: layers[i] holds layer i's parameters (zeros: their
    values are never used), in the trace's order. Its input is a 1-element tensor that
    requires a gradient (so that every layer, with parameters or not, is in the backward
    graph); its output, summed, is the "loss"."""

    def __init__(self, trace, dilate, seed, rank, copy_gbps=None):
        super().__init__()
        self.trace = trace
        self.k = dilate
        self.clock = Clock(dilate)
        self.layers = nn.ModuleList(ReplayLayer(self, i, s, dilate)
                                    for i, s in enumerate(trace["layers"]))
        self.tensors = [p for lay in self.layers for p in lay.plist]
        self.nelem = sum(p.numel() for p in self.tensors)
        self.seed, self.rank = seed, rank
        self.iteration = 0
        self.copy_rate = copy_gbps * 1e9 / dilate if copy_gbps else None  # bytes/s, dilated
        self.engine_free = 0.0
        self.copy_wait = 0.0  # seconds the host slept for copies, this run
        first = 0
        for lay in self.layers:
            lay.first = first  # index of its first tensor in self.tensors
            first += len(lay.plist)
        self.pool = self._fill_pool()
        self.scale = [0.01 / math.sqrt(max(1, p.numel() // p.shape[0])) if p.dim() > 1
                      else 0.01 for p in self.tensors]

    def _fill_pool(self):
        """Laplace(0, 1) samples: an exponential's magnitude, its sign from the sample's
        lowest mantissa bit (two passes over memory, where the inverse CDF took six). As
        long as the largest tensor plus a quarter (offsets to slide over), not the
        parameters' count: every tensor's view fits, and an embedding-heavy model's pool
        is a fraction of its parameters. The sign pass runs in pieces (no temporary of
        the pool's size)."""
        big = max((p.numel() for p in self.tensors), default=1)
        n = big + max(big // 4, 1 << 16)
        pool = torch.empty(n)
        g = torch.Generator().manual_seed(_mix(self.seed, self.rank, 45) & ((1 << 63) - 1))
        step = 1 << 22
        with torch.no_grad():
            pool.exponential_(generator=g)
            for a in range(0, n, step):
                b = pool[a:a + step].view(torch.int32)
                b.bitwise_xor_(b.bitwise_and(1).mul_(-(1 << 31)))  # bit 0 to the sign bit
        return pool

    def grad_view(self, t):
        p = self.tensors[t]
        n = p.numel()
        off = _mix(self.seed, self.rank, self.iteration, t) % (len(self.pool) - n + 1)
        return self.pool[off:off + n].view_as(p)

    def deliver(self, layer, deadline):
        """Layer's gradients into p.grad (the pool's views, scaled), then with the host copy
        modelled, a sleep to the arrival of the layer's last tensor. None of it is charged
        to the schedule (module docstring)."""
        t0 = time.perf_counter()
        with torch.no_grad():
            for j, p in enumerate(layer.plist):
                t = layer.first + j
                if p.grad is None:
                    p.grad = torch.empty_like(p)
                torch.mul(self.grad_view(t), self.scale[t], out=p.grad)
        if self.copy_rate and len(layer.plist):
            end = max(deadline, self.engine_free)
            for p in layer.plist:
                end += p.numel() * 4 / self.copy_rate
            self.engine_free = end
            left = end - time.perf_counter()
            if left > 0:
                time.sleep(left)
                self.copy_wait += left
        self.clock.credit_host(time.perf_counter() - t0)

    def forward(self, x):
        for lay in self.layers:
            x = lay(x)
        return x

    def optimizer_hold(self):
        s, _ = optimizer_seconds(self.trace, self.nelem)
        self.clock.hold(s * self.k)

    def compute_seconds(self, optimizer=True):
        """The trace's sum (forward + backward, + optimizer unless told not: through the
        binding nothing holds the step, which the servers or the runtime run), dilated."""
        s = sum(l["forward_ms"] + l["backward_ms"] for l in self.trace["layers"]) / 1e3
        if optimizer:
            s += optimizer_seconds(self.trace, self.nelem)[0]
        return s * self.k


class ReadyTimes:
    """Each tensor's gradient-ready time relative to the iteration's start (the
    accumulator's post-hook, the hook the binding and DDP use), for validation. The start:
    where the replayed schedule began the iteration (its first hold's start), which the
    host reaches a little later (its wake-up from the previous hold, the loop)."""

    def __init__(self, params, clock):
        self.clock = clock
        self.accs, self.handles = [], []
        self.now = [None] * len(params)
        self.rows = []
        for t, p in enumerate(params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self.accs.append(acc)  # cached weakly by p: kept alive here
            self.handles.append(acc.register_hook(self._hook(t)))

    def _hook(self, t):
        def hook(*_):
            self.now[t] = time.perf_counter()
        return hook

    def start(self):
        self.clock.mark_iteration()
        self.now = [None] * len(self.now)

    def end(self, extra):
        t0 = self.clock.iter_start
        self.rows.append(dict(extra, ready_s=[None if v is None else v - t0
                                              for v in self.now]))


class PeerMeter:
    """Times the CPU work of a DDP communication hook that a GPU would do (module
    docstring): torch's hook module sees `dist` through this meter, whose all_reduce hands
    back futures whose callbacks are timed (less their own waits on communication). With
    dilation K each timed piece is followed by (K - 1) x its duration of sleep. total: the
    seconds measured (undilated) since the last take()."""

    def __init__(self, dilate, clock):
        self.k = dilate
        self.clock = clock
        self.lock = threading.Lock()
        self.total = 0.0
        self.pieces = 0
        self.local = threading.local()
        self.thread = threading.get_ident()

    def _account(self, seconds):
        with self.lock:
            self.total += seconds
            self.pieces += 1
        if self.k > 1 and seconds > 0:
            time.sleep((self.k - 1) * seconds)
        if threading.get_ident() == self.thread:
            self.clock.block(self.k * seconds)  # on the backprop thread: it held it

    def take(self):
        with self.lock:
            t, self.total, self.pieces = self.total, 0.0, 0
        return t

    def timed(self, fn):
        """fn, its run timed by the CPU time of the thread that runs it: neither its waits
        on communication nor the time the 2 shared cores leave it waiting for a core count
        (wall time did, and made PowerSGD's work on ResNet-50 longer than its iteration).
        A piece nested in another (a callback run inline by then()) counts once: in the
        outermost."""
        def run(*a, **kw):
            loc = self.local
            if getattr(loc, "inside", False):
                return fn(*a, **kw)
            loc.inside = True
            c0 = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                loc.inside = False
                self._account(max(0.0, time.thread_time() - c0))
        return run

    def wrap_hook(self, module, hook):
        """hook (a function of module, e.g. default_hooks.fp16_compress_hook) with its
        module's dist seen through the meter; the returned hook returns torch's future."""
        meter = self
        real_dist = module.dist

        class _Fut:
            def __init__(self, fut):
                self.fut = fut

            def then(self, fn):
                return _Fut(self.fut.then(meter.timed(fn)))

            def wait(self):
                return self.fut.wait()

            def value(self):
                return self.fut.value()

        class _Work:
            def __init__(self, work):
                self.work = work

            def get_future(self):
                return _Fut(self.work.get_future())

            def wait(self):
                return self.work.wait()

        class _Dist:
            def __getattr__(self, name):
                return getattr(real_dist, name)

            def all_reduce(self, *a, **kw):
                w = real_dist.all_reduce(*a, **kw)
                return _Work(w) if kw.get("async_op") else w

        module.dist = _Dist()
        timed = self.timed(hook)

        def metered(state, bucket):
            out = timed(state, bucket)
            return out.fut if isinstance(out, _Fut) else out
        return metered
