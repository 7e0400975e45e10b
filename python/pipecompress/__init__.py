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

Every call comes from the thread that called pc.init (the runtime's backprop thread).
"""
import atexit
import ctypes
import math
import os
import signal
import sys
import threading

from . import _lib

__all__ = ["Error", "init", "is_server", "is_worker", "rank", "size", "workers", "servers",
           "config", "run_server", "attach", "iteration", "iteration_end", "report",
           "synchronize", "metrics_note", "finish", "stop_signal", "set_blas_threads", "data"]


class Error(RuntimeError):
    """A PipeCompress call failed; str(e) is the library's one-line message."""


_S = None  # the session of this process (one per process: MPI is per process)


class _Session:
    def __init__(self, lib, handle, prog):
        self.lib = lib
        self.e = handle
        self.prog = prog
        self.rt = lib.pc_embed_runtime(handle)
        self.w = lib.pc_embed_worker(handle)
        self.rank = lib.pc_embed_rank(handle)
        self.size = lib.pc_embed_size(handle)
        self.thread = threading.get_ident()
        self.stop = ctypes.c_int(0)
        self.closed = False
        self.served = False
        self.model = None  # the attachment (_Attached) once pc.attach ran
        self.finished = False
        self.final_signal = 0
        self.pending = None  # an Error raised on another thread, re-raised on this one
        # The job's facts, kept for after pc.finish() / pc.run_server() (a script names
        # its output files after them once the model is final).
        self.nworkers = lib.pc_runtime_workers(self.rt)
        self.nservers = lib.pc_runtime_servers(self.rt)
        n = lib.pc_embed_config_text(handle, None, 0)
        buf = ctypes.create_string_buffer(max(n, 0) + 1)
        lib.pc_embed_config_text(handle, buf, len(buf))
        self.config = {}
        for line in buf.value.decode().splitlines():
            k, eq, v = line.partition("=")
            if eq:
                self.config[k.strip()] = v.strip()

    def fail(self, what, rc=None):
        msg = self.lib.pc_worker_error(self.w).decode(errors="replace") if self.w else ""
        if not msg and rc is not None:
            msg = self.lib.pc_strerror(rc).decode()
        raise Error(f"{what}: {msg}" if msg else what)

    def close(self):
        if not self.closed:
            self.closed = True
            if self.model is not None:
                self.model.remove_hooks()
            self.lib.pc_embed_destroy(self.e)


def _session():
    if _S is None or _S.closed:
        raise Error("pipecompress: call pc.init() first (or it was already finished)")
    if threading.get_ident() != _S.thread:
        raise Error("pipecompress: called from another thread than pc.init's: every call "
                    "comes from one thread (the backprop thread)")
    return _S


def _worker():
    s = _session()
    if not s.w:
        raise Error(f"rank {s.rank} is a server: it calls pc.run_server(), nothing else")
    return s


def _flag_words(argv, flags):
    if isinstance(argv, (str, bytes)):
        raise Error("pc.init: argv is a string; pass a list of words (['--servers', '1']) "
                    "or keywords (servers=1)")
    words = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
        elif value is False or value is None:
            continue
        else:
            words.append(f"{flag}={value}")
    return words


def _excepthook(kind, value, tb):
    """An exception nobody caught, after pc.init: print it (one line for ours), then end
    every rank of the job: the others would wait for this one until --timeout."""
    s = _S
    if isinstance(value, Error):
        prog = s.prog if s else "pipecompress"
        sys.stderr.write(f"{prog}: {value}\n")  # one write: ranks share the pipe
    else:
        sys.__excepthook__(kind, value, tb)
    sys.stderr.flush()
    sys.stdout.flush()
    if s is not None and not s.closed and kind is not SystemExit:
        s.lib.pc_embed_abort(1)


def _at_exit():
    s = _S
    if s is None or s.closed:
        return
    if s.w and s.model is not None and not s.finished:
        # Ended without pc.finish(): the other workers cannot know whether this one left
        # early (they would wait for it until --timeout), so the job ends here.
        sys.stderr.write(f"{s.prog}: worker rank {s.rank} ended after "
                         f"{s.lib.pc_worker_iteration(s.w)} iterations without pc.finish(): "
                         "ending the job\n")
        sys.stderr.flush()
        s.lib.pc_embed_abort(1)
    if not s.w and not s.served:
        sys.stderr.write(f"{s.prog}: rank {s.rank} is a server and never called "
                         "pc.run_server()\n")
        sys.stderr.flush()
        s.lib.pc_embed_abort(1)
    if s.w and s.model is None:
        sys.stderr.write(f"{s.prog}: worker rank {s.rank} ended without pc.attach(model)\n")
        sys.stderr.flush()
        s.lib.pc_embed_abort(1)
    s.close()


def init(argv=None, prog=None, run_length=None, **flags):
    """Start PipeCompress on this rank (collective over every rank of the mpirun job).

    argv: the runtime's flags as on pc-train's command line (a list of strings, e.g. what
    argparse's parse_known_args left over; None: sys.argv[1:]); keyword arguments come
    after them (servers=1, compress="topk:ratio=0.01", pipeline="on", resume=True: a name's
    underscores become dashes, True gives a flag without value; as on a command line, the
    last of a flag given twice wins). Parsed by the library's own parser: a bad flag prints
    pc-train's one-line message on rank 0 and raises SystemExit(2) on every rank; --help
    prints the flags and raises SystemExit(0). run_length: a function of the number of
    workers giving the run's length in iterations, used for --iters when the flags do not
    give it (a cosine schedule needs the length; the job's split is known only once MPI
    runs). Any other failure prints one line and ends
    the job (MPI_Abort). Called on the main thread, it installs handlers for SIGINT and
    SIGTERM (the workers then agree to stop at the next iteration boundary; a second signal
    acts as without them: doc/python.md says when); always a
    sys.excepthook that ends the whole job on an uncaught exception.
    """
    global _S
    if _S is not None and not _S.closed:
        raise Error("pipecompress: pc.init() was already called in this process")
    if _S is not None:
        raise Error("pipecompress: finished in this process; MPI cannot start again")
    prog = prog or os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python3")
    try:
        words = [prog] + _flag_words(argv, flags)
    except Error as e:  # a usage error, before MPI: as a bad flag
        sys.stderr.write(f"{prog}: {e}\n")
        raise SystemExit(2)
    try:
        lib = _lib.load()
    except OSError as e:
        sys.stderr.write(f"{prog}: {e}\n")
        raise SystemExit(1)
    arr = (ctypes.c_char_p * (len(words) + 1))(*[w.encode() for w in words], None)
    handle = ctypes.c_void_p()
    status = ctypes.c_int(1)
    err = ctypes.create_string_buffer(1024)
    failed = []

    def length(ud, workers):
        try:
            return int(run_length(workers))
        except Exception as e:  # raised through C: kept, reported below
            failed.append(e)
            return -1

    fn = _lib.LENGTH_FN(length) if run_length is not None else _lib.LENGTH_FN()
    rc = lib.pc_embed_create(len(words), arr, fn, None, ctypes.byref(handle),
                             ctypes.byref(status), err, len(err))
    if failed:  # C printed that the length failed; here is why, and the exit of a bad flag
        sys.stderr.write(f"{prog}: run_length({type(failed[0]).__name__}): {failed[0]}\n")
        raise SystemExit(2)
    if not handle.value:
        sys.stdout.flush()
        if status.value >= 0 and (rc == 0 or status.value == 2):
            raise SystemExit(status.value)  # --help, --version, or a bad flag (printed)
        print(f"{prog}: {err.value.decode(errors='replace')}", file=sys.stderr)
        sys.stderr.flush()
        lib.pc_embed_abort(1)
        raise SystemExit(1)
    _S = _Session(lib, handle.value, prog)
    lib.pc_runtime_set_stop_flag(_S.rt, ctypes.byref(_S.stop))
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _on_signal)
    sys.excepthook = _excepthook
    atexit.register(_at_exit)


def _on_signal(sig, frame):
    s = _S
    if s is None or s.closed or s.stop.value:
        # A second signal (or none to stop): act as if we had not been there.
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
        if sig == signal.SIGINT:
            raise KeyboardInterrupt
        os.kill(os.getpid(), sig)
        return
    s.stop.value = sig  # read by the runtime at the next iteration boundary


def _job():
    """The session for the job's facts: also after pc.finish() and pc.run_server()."""
    if _S is None:
        raise Error("pipecompress: call pc.init() first")
    return _S


def rank():
    """This process's rank in the mpirun job (also after pc.finish)."""
    return _job().rank


def size():
    """Ranks in the job (workers + servers)."""
    return _job().size


def workers():
    """The job's workers: ranks 0 .. workers()-1."""
    return _job().nworkers


def servers():
    """The job's servers: the last servers() ranks (0 with --mode allreduce)."""
    return _job().nservers


def is_server():
    return not _job().w


def is_worker():
    return bool(_job().w)


def config():
    """The effective configuration: {flag name: value as pc-train prints it}."""
    return dict(_job().config)


def run_server():
    """Server ranks: aggregate the workers' gradients and step the optimizer until every
    worker has finished; then shut PipeCompress down on this rank. Returns the exit status
    for sys.exit: 0, or 128 + N when the workers stopped on signal N."""
    s = _session()
    if s.w:
        raise Error(f"run_server: rank {s.rank} is a worker (servers are the last --servers "
                    "ranks)")
    err = ctypes.create_string_buffer(1024)
    rc = s.lib.pc_embed_run_server(s.e, err, len(err))
    s.served = True
    if rc != 0:
        raise Error(err.value.decode(errors="replace") or s.lib.pc_strerror(rc).decode())
    sig = s.final_signal = s.lib.pc_runtime_stop_signal(s.rt)
    s.close()
    return 128 + sig if sig else 0


class _Attached:
    """One model's registration and hooks on a worker (pc.attach)."""

    def __init__(self, s, model, backward_passes_per_step):
        import torch

        self.s = s
        self.model = model
        self.bpps = backward_passes_per_step
        self.handles = []
        self.accs = []  # the gradient accumulators hooked (kept alive: see attach)
        self.params, self.names, self.grads = [], [], []
        ids = {}
        frozen = []
        for name, p in model.named_parameters():  # tied parameters come once
            if not p.requires_grad:
                frozen.append((name, p))
                continue
            _check_tensor("parameter", name, p, torch, need_float=True)
            ids[id(p)] = len(self.params)
            self.params.append(p)
            self.names.append(name)
        if not self.params:
            raise Error("attach: the model has no parameter that requires a gradient")
        _check_disjoint([(n, p) for n, p in zip(self.names, self.params)] + frozen)
        # Everything the servers do not train comes from worker 0 too (after the start
        # below): buffers (BatchNorm's statistics: kept local afterwards) and frozen
        # parameters. Checked now, before the collective start.
        shared = ([("buffer", nm, b) for nm, b in model.named_buffers()] +
                  [("frozen parameter", nm, p) for nm, p in frozen])
        for kind, name, b in shared:
            _check_tensor(kind, name, b, torch, need_float=False)
        self.ids = ids
        n = len(self.params)
        self.ready = [0] * n  # gradient accumulations seen this iteration
        self.waited = [False] * n  # param_wait done this iteration
        self.outside = [False] * n  # read outside its own module's forward (first iteration)
        self.first = True  # the first iteration since attach (0, or --resume's)
        self.pptr = [p.data_ptr() for p in self.params]
        # The registered memory stays alive as long as the attachment, whatever the script
        # does to the parameters (p.data = ...): the runtime writes updates into it.
        self.keep = [p.detach() for p in self.params]
        lib, w = s.lib, s.w
        with torch.no_grad():
            for name, p in zip(self.names, self.params):
                g = torch.zeros_like(p, memory_format=torch.contiguous_format)
                p.grad = g
                self.grads.append(g)
                t = lib.pc_worker_register(w, name.encode(), p.data_ptr(), g.data_ptr(),
                                           p.numel())
                if t < 0:
                    s.fail(f"attach: registering {name}", t)
        self.gptr = [g.data_ptr() for g in self.grads]
        rc = lib.pc_worker_start(w)
        if rc != 0:
            s.fail("attach: start", rc)
        # The runtime compares sizes only: names, shapes, dtypes and the buffers must agree
        # too (a swapped pair of equal shapes would train mixed up; a buffer of another size
        # would break the broadcast below).
        import hashlib

        plan = ";".join(f"{kind} {name} {tuple(t.shape)} {t.dtype}" for kind, name, t in
                        [("p", n, p) for n, p in zip(self.names, self.params)] + shared)
        mine = hashlib.sha256(plan.encode()).digest()
        theirs = ctypes.create_string_buffer(mine, len(mine))
        if lib.pc_worker_broadcast(w, theirs, len(mine)) != 0:
            s.fail("attach: comparing the model with worker 0's")
        if theirs.raw != mine:
            raise Error(f"attach: worker {s.rank}'s model differs from worker 0's (parameter "
                        "or buffer names, shapes, dtypes or order): every worker attaches "
                        "the same architecture")
        for kind, name, b in shared:
            nbytes = b.numel() * b.element_size()
            if nbytes and lib.pc_worker_broadcast(w, b.data_ptr(), nbytes) != 0:
                s.fail(f"attach: broadcasting {kind} {name}")
        self.timeline = bool(s.config.get("timeline"))
        self.t_mark = 0
        self._hook(torch)

    def _hook(self, torch):
        model = self.model
        self.handles.append(model.register_forward_pre_hook(self._root_pre))
        for mname, m in model.named_modules():
            own = sorted({self.ids[id(p)] for p in m.parameters(recurse=False)
                          if id(p) in self.ids})
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
        for t, out in enumerate(self.outside):
            if out and not self.waited[t]:
                self.wait(t)
        if self.timeline:
            self.t_mark = self.s.lib.pc_time_ns()

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
                with _no_grad():
                    if p.grad is None:
                        g.zero_()
                    else:
                        g.copy_(p.grad)
                p.grad = g
            rc = s.lib.pc_worker_grad_ready(s.w, t)
            if rc != 0:
                s.fail(f"handing over the gradient of {self.names[t]}", rc)
            if self.timeline:
                now = s.lib.pc_time_ns()
                s.lib.pc_worker_trace(s.w, tname, self.t_mark, now)
                self.t_mark = now
        return hook

    def end(self):
        s = self.s
        import torch

        if s.pending is not None:
            raise s.pending
        for t in range(len(self.params)):
            if self.ready[t] < self.bpps:
                # No gradient this iteration (an unused parameter) or fewer backward passes:
                # the buffer holds what was accumulated, zeros if nothing.
                if not self.waited[t]:
                    self.wait(t)
                p, g = self.params[t], self.grads[t]
                if p.grad is not None and p.grad.data_ptr() != self.gptr[t]:
                    with torch.no_grad():
                        g.copy_(p.grad)
                rc = s.lib.pc_worker_grad_ready(s.w, t)
                if rc != 0:
                    s.fail(f"handing over the gradient of {self.names[t]}", rc)
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
        self.first = False
        return bool(stop.value)

    def sync(self):
        for t in range(len(self.params)):
            if not self.waited[t]:
                self.wait(t)


def _no_grad():
    import torch
    return torch.no_grad()


def _check_tensor(kind, name, t, torch, need_float):
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


def attach(model, backward_passes_per_step=1):
    """Workers: register model's parameters with the runtime and start it (collective with
    the servers and the other workers, which must attach the same architecture).

    Every parameter that requires a gradient is registered in model.named_parameters()
    order (tied parameters once), zero-copy: CPU, float32, contiguous, disjoint, or a
    one-line pipecompress.Error naming it. Worker 0's parameters, buffers and frozen
    parameters become every worker's. From then on the servers own the optimizer step (their
    --lr, --momentum, schedule): the script creates no optimizer and never zeroes
    gradients. backward_passes_per_step: backward passes accumulated per iteration (a
    gradient is handed over after that many). Returns model."""
    import torch

    s = _worker()
    if not isinstance(model, torch.nn.Module):
        raise Error(f"attach: {type(model).__name__} is not a torch.nn.Module")
    if s.model is not None:
        raise Error("attach: a model is already attached on this worker")
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise Error(f"attach: backward_passes_per_step: {backward_passes_per_step!r} is not "
                    "a positive integer")
    s.model = _Attached(s, model, backward_passes_per_step)
    return model


def _attached():
    s = _worker()
    if s.model is None:
        raise Error("call pc.attach(model) first")
    if s.finished:
        raise Error("pc.finish() already ran on this worker")
    return s.model


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
    return a.s.lib.pc_worker_iteration(a.s.w)


def report(loss, accuracy=None):
    """This iteration's training loss (and batch accuracy, 0..1) for --metrics."""
    a = _attached()
    acc = math.nan if accuracy is None else float(accuracy)
    a.s.lib.pc_worker_report(a.s.w, float(loss), acc)


def metrics_note(obj):
    """Append an object (a dict, or a string holding a JSON object; an evaluation, say) to
    this rank's --metrics lines. Anything else is refused: the file stays JSON lines."""
    import json

    a = _attached()
    try:  # through the parser and back: strict JSON (no NaN), one line
        parsed = obj if isinstance(obj, dict) else json.loads(str(obj))
        if not isinstance(parsed, dict):
            raise ValueError("not an object")
        text = json.dumps(parsed, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise Error(f"metrics_note: not a JSON object: {e}") from None
    a.s.lib.pc_worker_metrics_note(a.s.w, text.encode())


def synchronize():
    """Wait until every parameter holds the latest update (before evaluating or saving)."""
    _attached().sync()


def finish():
    """Workers, after the last iteration (collective with the servers): wait for the last
    updates (the model then holds the trained parameters), stop the runtime and MPI on this
    rank. Returns the exit status for sys.exit: 0, or 128 + N after a stop on signal N."""
    s = _worker()
    a = _attached()
    a.sync()
    rc = s.lib.pc_worker_finish(s.w)
    s.finished = True
    if rc != 0:
        s.fail("finish", rc)
    sig = s.final_signal = s.lib.pc_runtime_stop_signal(s.rt)
    s.close()
    return 128 + sig if sig else 0


def stop_signal():
    """The signal the workers agreed to stop on, 0 if none (also after pc.finish)."""
    s = _S
    if s is None:
        return 0
    return s.final_signal if s.closed else s.lib.pc_runtime_stop_signal(s.rt)


def set_blas_threads(n):
    """Set OpenBLAS's threads (any rank, any time). Debian's torch does its matrix
    products in OpenBLAS, whose thread pool torch.set_num_threads does not govern: it starts
    one busy-waiting thread per core, which competes with the runtime's pinned threads and
    other ranks (doc/python.md, "Threads and placement", has the measurement). Returns False
    when the process has no OpenBLAS."""
    if not isinstance(n, int) or n < 1:
        raise Error(f"set_blas_threads: {n!r} is not a positive integer")
    try:  # only an OpenBLAS already in the process (RTLD_NOLOAD: never load one)
        fn = ctypes.CDLL("libopenblas.so.0", mode=os.RTLD_NOLOAD).openblas_set_num_threads
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int]
    fn.restype = None
    fn(n)
    return True


from . import data  # noqa: E402  (the package's data helpers: pc.data)
