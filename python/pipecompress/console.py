"""pipecompress.console: what the binding tells the user, on rank 0 only.

pc.init(verbose=True), the default, prints one line for each runtime flag pc.init received
(so that a flag the script's own parser kept is seen missing), the effective configuration
once the runtime starts (mode, workers and servers, codec, pipeline, compressors, the
optimizer and each parameter group's hyperparameters) and a progress line every
progress_every seconds (iteration, loss if pc.report was called, samples/s, the learning
rate), as pc-train prints its own. Every line starts with "pipecompress: ", so that a
script's own lines stay apart. Whatever pc.init's verbose, a runtime flag on the command
line that did not reach pc.init is reported (and refused with pc.init(strict=True)).

No torch here: pc.init runs without it. Every call comes from the thread that called
pc.init.
"""
import sys
import time

from .errors import Error

PREFIX = "pipecompress: "

# pc_config.c's one-letter spellings of runtime flags. Only pc.init's own words are read
# with them: on the script's command line a "-v" is as likely the script's --verbose.
_SHORT = {"-s": "servers", "-c": "compress", "-v": "log-level"}

# A parameter group's keys that choose torch's implementation, not the arithmetic.
_IMPL_KEYS = ("params", "foreach", "fused", "capturable", "differentiable")


def _say(line):
    print(PREFIX + line, flush=True)


def given(words, names):
    """The runtime flags among words (what pc.init received), as long names in the order
    first given: "--lr 0.1", "--lr=0.1", "-c topk", "-ctopk". names: the runtime's flag
    names (the configuration's keys)."""
    out = []
    for w in words:
        if w.startswith("--") and len(w) > 2:
            name = w[2:].split("=", 1)[0]
        elif w[:2] in _SHORT and w[1:2] != "-":
            name = _SHORT[w[:2]]
        else:
            continue
        if name in names and name not in out:
            out.append(name)
    return out


def shadowed(argv, words, names):
    """The runtime flags (long names) on the command line argv that are not among pc.init's
    words: the script's own parser took them (argparse's parse_known_args hands on only
    what it does not know), and the runtime runs with its default instead."""
    mine = set(given(words, names))
    seen = [w[2:].split("=", 1)[0] for w in argv if w.startswith("--") and len(w) > 2]
    out = []
    for name in seen:
        if name in names and name not in mine and name not in out:
            out.append(name)
    return out


def shadow_message(name, config):
    kw = name.replace("-", "_")
    return (f"--{name} is on the command line but did not reach pc.init (the script's own "
            f"argument parser took it): PipeCompress runs with --{name} "
            f"{config.get(name, '?')}; pass it on (pc.init(rest, {kw}=args.{kw})) or rename "
            "the script's flag")


# The runtime flags a pc.DistributedOptimizer takes over: the torch optimizer's
# hyperparameters, its scheduler's rates, its placement of the step and its clipping. A
# script's own flag of one of these names (its --lr, --lr-warmup, --update, ...) is the
# script's business once it wraps its optimizer: the runtime's value is not used then.
_WRAPPER_FLAGS = ("optimizer", "lr", "momentum", "nesterov", "weight-decay", "betas", "eps",
                  "amsgrad", "lr-schedule", "lr-step", "lr-gamma", "lr-warmup", "update",
                  "clip-grad-norm")


def check_flags(s, argv, strict):
    """At pc.init, once the runtime's flags are known: the flags received, one line each,
    when s.reporter is set (rank 0, verbose), and each runtime flag the script's parser
    kept, on rank 0 (a warning), or as an Error on every rank with strict (the same on
    every rank: the job's command line is everyone's). The warning for a flag a wrapper
    takes over (_WRAPPER_FLAGS) waits for the runtime's start (shadowed_at_start): only
    without a pc.DistributedOptimizer does the runtime run with its own value."""
    names = set(s.config)
    s.shadowed_later = []
    for name in shadowed(argv, s.words, names):
        if strict:
            raise Error("pc.init(strict=True): " + shadow_message(name, s.config),
                        agreed=True)
        if name in _WRAPPER_FLAGS:
            s.shadowed_later.append(name)
        elif s.rank == 0:
            _say("warning: " + shadow_message(name, s.config) + " (pc.init(strict=True) "
                 "refuses this)")
    if s.reporter is not None:
        for name in given(s.words, names):
            _say(f"received --{name} {s.config[name]}")


def shadowed_at_start(s, a):
    """When the runtime starts (a: the attachment): check_flags' warnings held back for the
    flags a wrapper takes over, on rank 0, when there is no pc.DistributedOptimizer (with
    one, its torch optimizer's values, scheduler, placement and clipping are used)."""
    later, s.shadowed_later = getattr(s, "shadowed_later", []), []
    if a.optimizer is not None or s.rank != 0:
        return
    for name in later:
        _say("warning: " + shadow_message(name, s.config) + " (pc.init(strict=True) refuses "
             "this)")


def _num(v):
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (tuple, list)):
        return ",".join(_num(x) for x in v)
    return str(v)


def _lrs_text(lrs):
    return ",".join(f"{x:.6g}" for x in lrs)


class Reporter:
    """Rank 0's configuration and progress lines (pc.init(verbose=True)). progress_every:
    seconds between progress lines (0: every iteration)."""

    def __init__(self, progress_every):
        self.every = progress_every
        self.t_last = None  # the last progress line's time (the first: the start)
        self.samples = 0  # this worker's samples since then (the root's forward passes)
        self.loss_sum = 0.0
        self.loss_n = 0

    def configuration(self, s, a):
        """The effective configuration, once, when the runtime has started: a the
        attachment (hooks._Attached), its optimizer wrapper if any."""
        self.t_last = time.monotonic()  # the first progress line counts from the start
        c = s.config
        mode = c.get("mode", "?")
        servers = f", {s.nservers} server{'s' if s.nservers != 1 else ''}" if s.nservers else ""
        _say(f"mode {mode}, {s.nworkers} worker{'s' if s.nworkers != 1 else ''}{servers}, "
             f"codec {c.get('compress', '?')}, pipeline {c.get('pipeline', '?')}, "
             f"compressors {c.get('compressors', '?')}, update {c.get('update', 'servers')}, "
             f"seed {c.get('seed', '?')}; model: {len(a.params)} parameter tensors, "
             f"{sum(p.numel() for p in a.params)} parameters")
        who = "the servers step" if (mode == "ps" and c.get("update", "servers") ==
                                     "servers") else "every worker steps"
        opt = a.optimizer
        if opt is None:
            kind = c.get("optimizer", "sgd")
            hp = [f"lr {c.get('lr')}", f"weight-decay {c.get('weight-decay')}"]
            if kind == "sgd":
                hp += [f"momentum {c.get('momentum')}", f"nesterov {c.get('nesterov')}"]
            else:
                hp += [f"betas {c.get('betas')}", f"eps {c.get('eps')}",
                       f"amsgrad {c.get('amsgrad')}",
                       f"adam-moments {c.get('adam-moments')}",
                       f"adam-freeze-after {c.get('adam-freeze-after')}"]
            sched = c.get("lr-schedule", "constant")
            if sched == "step":
                sched += f" (every {c.get('lr-step')} iterations x {c.get('lr-gamma')})"
            elif sched == "cosine":
                sched += f" (over --iters {c.get('iters')})"
            warm = c.get("lr-warmup", "0")
            if warm not in ("0", ""):
                sched += f", warm-up {warm} iterations"
            _say(f"optimizer {kind} ({who}; the runtime's flags): {', '.join(hp)}; "
                 f"schedule {sched}")
            return
        inner = getattr(opt, "_opt", opt)
        groups = opt.param_groups
        _say(f"optimizer {type(inner).__name__} (pc.DistributedOptimizer; {who}), "
             f"{len(groups)} parameter group{'s' if len(groups) != 1 else ''}; learning "
             "rates from param_groups at every iteration")
        for i, g in enumerate(groups):
            hp = ", ".join(f"{k} {_num(v)}" for k, v in g.items()
                           if k not in _IMPL_KEYS and not (k == "maximize" and not v) and
                           isinstance(v, (bool, int, float, tuple, list)))
            _say(f"group {i}: {len(g['params'])} tensors, {hp}")
        if c.get("optimizer", "sgd") != "sgd" and who == "the servers step":
            # the servers' Adam variant: the optimizer and moments DistributedOptimizer wrote
            # into the configuration (auto: the codec's choice), --adam-freeze-after
            _say(f"adam moments {c.get('adam-moments')}, v frozen after "
                 f"{c.get('adam-freeze-after')} steps (0: never), every group")

    def forward(self, n):
        """A training forward pass of the root module over n samples."""
        self.samples += n

    def loss(self, v):
        self.loss_sum += v
        self.loss_n += 1

    def iteration_done(self, s, it, lrs):
        """After iteration it - 1 ended (it completed): a progress line when progress_every
        seconds passed since the last one. lrs: the rates that iteration used."""
        now = time.monotonic()
        if self.t_last is None:  # not started through configuration(): count from here
            self.t_last = now
            return
        if now - self.t_last < self.every:
            return
        parts = [f"iteration {it}"]
        if self.loss_n:
            parts.append(f"loss {self.loss_sum / self.loss_n:.4f}")
        if self.samples:
            rate = self.samples * max(s.nworkers, 1) / (now - self.t_last)
            parts.append(f"{rate:.0f} samples/s")
        parts.append(f"lr {_lrs_text(lrs)}")
        _say(" | ".join(parts))
        sys.stdout.flush()
        self.t_last = now
        self.samples = 0
        self.loss_sum, self.loss_n = 0.0, 0
