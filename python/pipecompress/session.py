"""pipecompress.session: this process's session and the job's facts.

pc.init starts MPI, parses the runtime's flags and creates the runtime (one session per
process: MPI is per process); rank, size, workers, servers, is_server, is_worker and
config tell the job's shape; run_server is a server rank's whole life; finish ends a
worker's; stop_signal and set_blas_threads work on any rank. The session ends the whole
job on an uncaught exception or on an exit without finish (the other ranks would wait).
Every call comes from the thread that called pc.init.
"""
import atexit
import ctypes
import os
import signal
import sys
import threading
import time

from . import _lib, console
from .errors import Error

_S = None  # the session of this process (one per process: MPI is per process)


class _Session:
    def __init__(self, lib, handle, prog):
        self.lib = lib
        self.e = handle
        self.prog = prog
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
        self.length_fn = None  # pc_embed_create's length callback: called again by choose
        self.auto_flags = None  # what --mode auto chose (pc.probe), as fixed flags
        self.words = []  # the flags pc.init was given (init sets them)
        self.reporter = None  # rank 0's configuration and progress lines (console.py)
        self.bind()

    def bind(self):
        """The runtime's handles and the job's facts, once the mode is fixed (at pc.init,
        or with --mode auto at pc.probe); kept for after pc.finish() / pc.run_server() (a
        script names its output files after them once the model is final)."""
        lib, handle = self.lib, self.e
        self.choosing = bool(lib.pc_embed_pending(handle))
        self.rt = lib.pc_embed_runtime(handle)
        self.w = lib.pc_embed_worker(handle)
        self.nworkers = 0 if self.choosing else lib.pc_runtime_workers(self.rt)
        self.nservers = 0 if self.choosing else lib.pc_runtime_servers(self.rt)
        n = lib.pc_embed_config_text(handle, None, 0)
        buf = ctypes.create_string_buffer(max(n, 0) + 1)
        lib.pc_embed_config_text(handle, buf, len(buf))
        self.config = {}
        for line in buf.value.decode().splitlines():
            k, eq, v = line.partition("=")
            if eq:
                self.config[k.strip()] = v.strip()
        if self.rt:
            lib.pc_runtime_set_stop_flag(self.rt, ctypes.byref(self.stop))

    def fail(self, what, rc=None):
        msg = self.lib.pc_worker_error(self.w).decode(errors="replace") if self.w else ""
        agreed = bool(self.w) and bool(self.lib.pc_worker_error_agreed(self.w))
        if not msg and rc is not None:
            msg = self.lib.pc_strerror(rc).decode()
        raise Error(f"{what}: {msg}" if msg else what, agreed=agreed)

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


CHOOSING = ("--mode auto has not chosen the mode yet: call pc.probe(model, inputs, "
            "targets) on every rank first (doc/python.md, \"--mode auto\")")


def _decided(s):
    if s.choosing:
        raise Error(CHOOSING)
    return s


def _worker():
    s = _decided(_session())
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
    if isinstance(value, Error) and value.agreed and s is not None and s.rank != 0:
        # Every worker has this same error: worker 0 says it and its abort ends this rank
        # too; wait for that (bounded) rather than race it with a second abort.
        sys.stdout.flush()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.1)
    elif isinstance(value, Error):
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
    if s.choosing:
        # The other ranks may be in pc.probe's collective measurement, waiting for this one.
        sys.stderr.write(f"{s.prog}: rank {s.rank} ended with --mode auto before pc.probe "
                         "chose the mode\n")
        sys.stderr.flush()
        s.lib.pc_embed_abort(1)
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


def init(argv=None, prog=None, run_length=None, strict=False, verbose=True, progress_every=5.0,
         **flags):
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
    runs).

    A runtime flag on the command line (sys.argv) that is not among argv's words was taken
    by the script's own parser (parse_known_args keeps the flags it defines: a script's
    --lr or --seed shadows ours): rank 0 prints a warning line naming it and the value the
    runtime runs with (for a flag a pc.DistributedOptimizer takes over, --lr, --lr-warmup,
    --update, ..., at the runtime's start and only if no wrapper was made); strict=True
    refuses it instead, at pc.init (one line, every rank ends). verbose
    (default True): rank 0 prints, each line starting "pipecompress: ", every runtime flag
    received (one line each), the effective configuration once the runtime starts (mode,
    workers and servers, codec, pipeline, compressors, the optimizer and its groups'
    hyperparameters) and a progress line at an iteration's end every progress_every
    seconds (0: every iteration): iteration, mean loss of pc.report since the last line,
    samples/s (the root module's first input's first dimension, times the workers) and
    the learning rate(s) of that iteration. Any other failure prints one line and ends
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
        if not isinstance(strict, bool) or not isinstance(verbose, bool):
            raise Error(f"pc.init: strict={strict!r}, verbose={verbose!r}: each is True or "
                        "False")
        if (isinstance(progress_every, bool) or not isinstance(progress_every, (int, float))
                or not 0 <= progress_every < float("inf")):
            raise Error(f"pc.init: progress_every={progress_every!r} is not a number of "
                        "seconds >= 0")
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
    _S.words = words[1:]  # the flags as given (pc.DistributedOptimizer: which were given)
    _S.length_fn = fn  # --mode auto: the library calls it again in pc.probe
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _on_signal)
    sys.excepthook = _excepthook
    atexit.register(_at_exit)
    if verbose and _S.rank == 0:
        _S.reporter = console.Reporter(float(progress_every))
    console.check_flags(_S, [str(a) for a in sys.argv[1:]], strict)


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
    return _decided(_job()).nworkers


def servers():
    """The job's servers: the last servers() ranks (0 with --mode allreduce)."""
    return _decided(_job()).nservers


def is_server():
    """Whether this rank is a server (with --mode auto: known after pc.probe)."""
    return not _decided(_job()).w


def is_worker():
    return bool(_decided(_job()).w)


def choosing():
    """Whether --mode auto still has to choose the mode: then every rank, servers to be
    included, calls pc.probe(model, inputs, targets) before anything else of the job."""
    return _job().choosing


def config():
    """The effective configuration: {flag name: value as pc-train prints it}. After
    pc.DistributedOptimizer its "compress", "update", "optimizer", "adam-moments" and
    "adam-freeze-after" are what runs; with a wrapper the learning rates, weight decay, momentum and betas are its
    param_groups' (rank 0's configuration lines print them), not these flags'."""
    return dict(_job().config)


def run_server():
    """Server ranks: aggregate the workers' gradients and step the optimizer until every
    worker has finished; then shut PipeCompress down on this rank. Returns the exit status
    for sys.exit: 0, or 128 + N when the workers stopped on signal N."""
    s = _decided(_session())
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


def _attached():
    s = _worker()
    if s.model is None:
        raise Error("call pc.attach(model) first")
    if s.finished:
        raise Error("pc.finish() already ran on this worker")
    return s.model


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
    if s.closed:
        return s.final_signal
    return s.lib.pc_runtime_stop_signal(s.rt) if s.rt else 0


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
