#!/usr/bin/python3
"""replay-validate.py: validation (b) of the replay (doc/replay.md, "Validation"): a trace
recorded on this CPU for a torchvision model, replayed through apps/examples/
torch_train.py --arch replay:PATH --backend local, against the real run of the same
model: the iteration time and every gradient's ready time (from the iteration's start)
compared, target within 5 % (dPRO's bar).

  scripts/bench/replay-validate.py [--model resnet18] [--batch 4] [--iters 8] [--warmup 3]
                                   [--image-size 224] [--threads 1] [--real-runs 3]
                                   [--recorder auto|make-trace|builtin] [--interleave]
                                   [--out DIR]

1. The trace: `scripts/bench/make-trace.py record --model M --batch B --device cpu --iters N
   --warmup W --out DIR/trace.json` (--recorder make-trace; auto: when that script exists),
   or this script's own recorder (builtin): per leaf module in forward order its forward
   time from the previous leaf's end to its own (the glue between modules, the residual
   adds, the loss after the last one, counted with the module that follows it), its
   backward time from the previous gradient's arrival to its own last gradient's (param-less
   modules: 0, their time in the next module with parameters), the medians over N
   iterations after W; the optimizer's step (torch.optim.SGD, momentum 0.9) as optimizer_ms.
   A trace without optimizer_ms gets the real run's measured step (said so): the replay's
   rule for a missing one is an A100's, not this CPU's.
2. The real run: the model (torchvision's, weights=None, its default classes) on a batch of
   random 3xSxS images (S: --image-size, default 224) and labels, cross-entropy, backward,
   SGD step, --iters iterations after --warmup, timed from one iteration's end to the
   next's; every parameter's gradient-ready time from the accumulator's hook (what the
   binding and DDP hook), relative to the iteration's start. Run --real-runs times
   (default 3, at least 2): once before the recording, the rest after the replay. Each
   run's iteration is printed; the real figures are the median over the runs (of each
   run's median), and their spread, (slowest - fastest) / median, is this machine's noise,
   printed beside the errors (two runs of the same program here have differed by 27 %:
   one outlier moves a mean of two, not a median of three).
3. The replay: torch_train.py --arch replay:DIR/trace.json --backend local --iters
   N+W --warmup W --replay-times DIR/replay-times.json (the same hooks).
4. The errors: the iteration's median |replay - real| / real (real: the runs' median),
   and per gradient (matched by module name and index, else by order) the same on its
   median ready time: median, max, and the worst gradient named; and the replay against
   the trace's own schedule (every tensor due after the forward sum and the backward of
   its layer and those after it): the emulator's error alone, apart from how the load
   moved the recording and the real runs. Written to DIR/validate.json and printed.
   Exit status: 0 (the figures are a measurement: the 5 % target is printed as met
   or not, never turned into a failure); 1 when a step failed; 2 for a bad flag.
--interleave: instead of separate runs, one process alternates a recorded iteration (make-
   trace.py's recorder, its hooks' phases open) with a real one (the same model, the
   recorder's hooks idle), --iters of each after --warmup of
   each, the recorded one first in every other round; the trace is written from the
   recorded ones (make-trace.py's means), and the replay is compared with the real ones
   (their means, the same statistic; --real-runs does not apply). Where the machine's speed moves between runs more than the target
   (doc/replay.md), this is the comparison it does not enter: the trace and the real run
   it is checked against are measured at the same moments. What it leaves out: the
   recorder's cost as a separate process (the real iterations carry its idle hooks, a
   Python call per module that returns).
torch's threads: --threads (default 1) for the recording, the real runs and the replay
(and OMP_NUM_THREADS, OPENBLAS_NUM_THREADS set to it for all three).
"""
import argparse
import json
import os
import statistics as st
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
PY = sys.executable  # the recorder and the replay run under the interpreter that runs this
TARGET = 0.05


def fail(msg, status=1):
    print(f"replay-validate.py: {msg}", file=sys.stderr)
    sys.exit(status)


def build(name):
    import torchvision

    try:
        ctor = getattr(torchvision.models, name)
    except AttributeError:
        fail(f"--model: torchvision {torchvision.__version__} has no model '{name}'", 2)
    return ctor(weights=None)


def leaf_modules(model):
    return [(n, m) for n, m in model.named_modules() if not list(m.children())]


class Instrument:
    """Forward hooks on every leaf module (its end time per call) and the gradient
    accumulators' hooks (each parameter's ready time), for one model."""

    def __init__(self, model, stamp=time.perf_counter, calls=True):
        """STAMP: the clock (make-trace.py's Clock.stamp on a GPU: CUDA events); CALLS:
        False leaves the forward hooks out (only the ready times are kept)."""
        self.t = stamp
        self.params = []  # (name "module.j", parameter, module name)
        self.calls = []  # this iteration's (module name, end time) in call order
        self.ready = {}
        self.accs = []
        for mname, m in leaf_modules(model):
            if calls:
                m.register_forward_hook(self._fwd(mname))
            for j, p in enumerate(m.parameters(recurse=False)):
                if p.requires_grad:
                    self.params.append((f"{mname}.{j}", p, mname))
        for name, p, _ in self.params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self.accs.append(acc)
            acc.register_hook(self._grad(name))

    def _fwd(self, mname):
        def hook(*_):
            self.calls.append((mname, self.t()))
        return hook

    def _grad(self, name):
        def hook(*_):
            self.ready[name] = self.t()
        return hook

    def start(self):
        self.calls, self.ready = [], {}


def real_run(model_name, batch, iters, warmup, size, seed=1):
    """The real iterations: returns (per-iteration dicts of fwd/bwd/step marks, instrument,
    model)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    model = build(model_name).train()
    classes = 1000  # torchvision's default num_classes
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, classes, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ins = Instrument(model)
    rows = []
    t_prev = None
    for it in range(warmup + iters):
        ins.start()
        t0 = time.perf_counter()
        out = model(x)
        loss = F.cross_entropy(out, y)
        t_fwd = time.perf_counter()
        loss.backward()
        t_bwd = time.perf_counter()
        opt.step()
        # as make-trace.py's loop: the next backward's gradients then become .grad as they
        # are (no zeroing, no accumulating add)
        opt.zero_grad(set_to_none=True)
        t_end = time.perf_counter()
        if it >= warmup:
            rows.append({"t0": t0, "t_fwd": t_fwd, "t_bwd": t_bwd, "t_end": t_end,
                         "period": t_end - t_prev, "calls": list(ins.calls),
                         "ready": {k: v - t0 for k, v in ins.ready.items()}})
        t_prev = t_end
    return rows, ins


def load_maker():
    """make-trace.py as a module (its name has a dash): its Recorder, split and render."""
    import importlib.util

    path = os.path.join(HERE, "make-trace.py")
    if not os.path.exists(path):
        fail(f"--interleave: no {path} (its recorder is the one interleaved)", 2)
    spec = importlib.util.spec_from_file_location("make_trace", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def interleaved(model_name, batch, iters, warmup, size, trace_path, device="cpu", seed=1):
    """--interleave: recorded and real iterations alternating in one process, on one model
    (recorded first in even rounds, real first in odd ones), so that both see the machine
    at the same speed. A recorded iteration is make-trace.py record's (its Recorder's
    phases open, its split of the phases); a real one runs as real_run's, the ready times
    from the gradient accumulators' hooks (the recorder's hooks present but idle: a call
    each that returns). DEVICE cuda: the model on the GPU, every time a CUDA event (in
    stream order; make-trace.py's Clock), the device synchronised between iterations.
    Writes the trace (make-trace.py's means and format) to TRACE_PATH; returns (the real
    iterations' rows, times relative to the forward's start, instrument, trace)."""
    import torch
    import torch.nn.functional as F

    mt = load_maker()
    cuda = device == "cuda"  # main() refused it where torch sees no GPU
    dev = torch.device(device)
    torch.manual_seed(seed)
    model = build(model_name).train().to(dev)
    x = torch.randn(batch, 3, size, size).to(dev)
    y = torch.randint(0, 1000, (batch,)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    clock = mt.Clock(torch, cuda)
    rec = mt.Recorder(model, clock)
    ins = Instrument(model, clock.stamp, calls=False)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def s(t0, t1):  # seconds between two stamps (synchronised: events complete)
        return clock.ms(t0, t1) / 1e3

    fwd, bwd, step, rows, recorded = {}, {}, [], [], []
    for it in range(warmup + iters):
        timed = it >= warmup
        for kind in (("rec", "real") if it % 2 == 0 else ("real", "rec")):
            sync()
            t_a = clock.stamp()
            opt.zero_grad(set_to_none=True)
            if kind == "rec":
                if timed:
                    rec.open()
                loss = F.cross_entropy(model(x), y)
                fmarks = rec.close() if timed else None
                if timed:
                    rec.open()
                loss.backward()
                bmarks = rec.close() if timed else None
                s0 = clock.stamp()
                opt.step()
                s1 = clock.stamp()
                sync()
                if timed:
                    mt.split(clock, fmarks, fwd)
                    mt.split(clock, bmarks, bwd)
                    step.append(clock.ms(s0, s1))
                    recorded.append(s(t_a, s1))
                continue
            ins.start()
            t0 = clock.stamp()
            loss = F.cross_entropy(model(x), y)
            t_fwd = clock.stamp()
            loss.backward()
            t_bwd = clock.stamp()
            opt.step()
            t_end = clock.stamp()
            sync()
            if timed:
                rows.append({"t0": 0.0, "t_fwd": s(t0, t_fwd), "t_bwd": s(t0, t_bwd),
                             "t_end": s(t0, t_end), "period": s(t_a, t_end), "calls": [],
                             "ready": {k: s(t0, v) for k, v in ins.ready.items()}})
    mods = dict(mt.leaves(model))
    layers = [(name, [list(p.shape) for p in mt.own_params(mods[name])],
               fwd.get(name, 0.0) / iters, bwd.get(name, 0.0) / iters) for name in rec.order]
    trace = {"model": model_name, "device": mt.device_name(torch, cuda), "batch": batch,
             "precision": "fp32",
             "source": f"recorded by scripts/bench/replay-validate.py --interleave with "
                       f"make-trace.py's recorder, {iters} recorded iterations after {warmup} "
                       f"alternating with as many real ones in one process"
                       f"{' (CUDA events)' if cuda else ''}; means",
             "optimizer_ms": sum(step) / iters, "layers": layers}
    mt.write(mt.render(trace), trace_path)
    for r, t in zip(rows, recorded):
        r["recorded"] = t  # the recorded iteration of the same round, whole
    with open(trace_path) as f:
        return rows, ins, json.load(f)


def builtin_trace(model_name, batch, rows, ins):
    """The builtin recorder's trace from the real run's marks (module docstring)."""
    layers, order, fwd = [], [], {}
    for r in rows:
        prev = r["t0"]
        seen = set()
        for mname, t in r["calls"]:
            if mname not in seen:  # a module called twice (ResNet's ReLU): both calls
                fwd.setdefault(mname, []).append(0.0)
                seen.add(mname)
            fwd[mname][-1] += t - prev
            prev = t
            if mname not in order:
                order.append(mname)
        fwd[order[-1]][-1] += r["t_fwd"] - prev  # the loss
    by_module = {}
    for name, p, mname in ins.params:
        by_module.setdefault(mname, []).append((name, p))
    bwd = {m: [] for m in order}
    for r in rows:
        prev = r["t_fwd"] - r["t0"]
        done = set()
        for m in reversed(order):
            names = [n for n, _ in by_module.get(m, [])]
            if not names:
                continue
            last = max(r["ready"][n] for n in names)
            bwd[m].append(max(0.0, last - prev))
            prev = last
            done.add(m)
        for m in order:
            if m not in done:
                bwd[m].append(0.0)
    for m in order:
        layers.append({"name": m,
                       "params": [list(p.shape) for _, p in by_module.get(m, [])],
                       "forward_ms": round(1e3 * st.median(fwd[m]), 4),
                       "backward_ms": round(1e3 * st.median(bwd[m]), 4)})
    step = st.median(r["t_end"] - r["t_bwd"] for r in rows)
    return {"model": model_name, "device": "cpu", "batch": batch, "precision": "fp32",
            "source": "recorded on this CPU by scripts/bench/replay-validate.py's builtin "
                      "recorder (leaf modules' forward hooks, gradient accumulators' hooks; "
                      "medians)",
            "layers": layers, "optimizer_ms": round(1e3 * step, 4)}


def summary(rows, stat=st.median):
    """(the iteration, {tensor: its ready time}) over ROWS by STAT."""
    periods = [r["period"] for r in rows]
    ready = {}
    for r in rows:
        for k, v in r["ready"].items():
            ready.setdefault(k, []).append(v)
    return stat(periods), {k: stat(v) for k, v in ready.items()}


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="The whole method, the output and the exit status: this script's docstring "
               "and doc/replay.md, \"Validation\".")
    ap.add_argument("--model", default="resnet18",
                    help="a torchvision model (default %(default)s)")
    ap.add_argument("--batch", type=int, default=4, help="batch (default %(default)s)")
    ap.add_argument("--iters", type=int, default=8,
                    help="timed iterations of each run, or with --interleave of each kind "
                         "(default %(default)s)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="iterations left out before them (default %(default)s)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch's threads, and OMP/OpenBLAS's (default %(default)s)")
    ap.add_argument("--image-size", type=int, default=224,
                    help="random SxS images (default %(default)s)")
    ap.add_argument("--recorder", choices=["auto", "make-trace", "builtin"], default="auto",
                    help="separate runs: make-trace.py record, this script's own, or the "
                         "former where it exists (default %(default)s)")
    ap.add_argument("--real-runs", type=int, default=None,
                    help="separate runs: real runs compared with, their median (default 3)")
    ap.add_argument("--interleave", action="store_true",
                    help="recorded and real iterations alternating in one process, compared "
                         "with the real ones' means (what this machine's drift between runs "
                         "leaves measurable)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="with --interleave: where the model runs (cuda: validation (c), "
                         "times by CUDA events; default %(default)s)")
    ap.add_argument("--out", default=None,
                    help="the folder for trace.json, replay-times.json and validate.json "
                         "(default results/replay-validate-DATE)")
    a = ap.parse_args()
    for flag, v, least in (("--batch", a.batch, 1), ("--iters", a.iters, 2),
                           ("--warmup", a.warmup, 1), ("--threads", a.threads, 1),
                           ("--image-size", a.image_size, 32),
                           ("--real-runs", 2 if a.real_runs is None else a.real_runs, 2)):
        if v < least:
            fail(f"{flag}: {v} is below {least}", 2)
    # OpenBLAS (Debian's torch multiplies with it) reads its thread count when it loads:
    # set before torch is imported, as for make-trace.py and the replay (below), or the
    # real runs would use every core where the recording used --threads
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    try:
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        fail(f"needs torch and torchvision ({e}; Debian: python3-torch, "
             "python3-torchvision)", 2)
    torch.set_num_threads(a.threads)
    out = a.out or os.path.join(TOP, "results", "replay-validate-" + time.strftime("%Y-%m-%d"))
    maker = os.path.join(HERE, "make-trace.py")
    recorder = a.recorder
    real_runs = 3 if a.real_runs is None else a.real_runs
    if a.interleave:
        if recorder == "builtin":
            fail("--interleave records with make-trace.py's recorder: not with --recorder "
                 "builtin", 2)
        if a.real_runs is not None:
            fail("--interleave compares with the real iterations between the recorded ones: "
                 "not with --real-runs", 2)
        recorder, real_runs = "interleaved", 1
    elif a.device != "cpu":
        fail(f"--device {a.device}: only with --interleave (the separate runs are this "
             "CPU's)", 2)
    elif recorder == "auto":
        recorder = "make-trace" if os.path.exists(maker) else "builtin"
    if a.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no CUDA device", 2)
    if recorder == "make-trace" and not os.path.exists(maker):
        fail(f"--recorder make-trace: no {maker}", 2)
    os.makedirs(out, exist_ok=True)  # after every refusal: a refused run leaves nothing
    trace_path = os.path.join(out, "trace.json")
    env = dict(os.environ)
    print(f"replay-validate: {a.model}, batch {a.batch}, image {a.image_size}, {a.iters} "
          f"iterations after "
          f"{a.warmup}, {a.threads} torch thread(s); recorder: {recorder}", flush=True)
    if recorder == "interleaved":
        rows1, ins, trace = interleaved(a.model, a.batch, a.iters, a.warmup, a.image_size,
                                        trace_path, a.device)
    else:
        rows1, ins = real_run(a.model, a.batch, a.iters, a.warmup, a.image_size)
    if recorder == "make-trace":
        cmd = [PY, maker, "record", "--model", a.model, "--batch", str(a.batch), "--device",
               "cpu", "--iters", str(a.iters), "--warmup", str(a.warmup), "--image-size",
               str(a.image_size), "--threads", str(a.threads), "--out", trace_path]
        print("$ " + " ".join(cmd), flush=True)
        if subprocess.call(cmd, env=env) != 0:
            fail("make-trace.py record failed")
        with open(trace_path) as f:
            trace = json.load(f)
    elif recorder == "builtin":
        trace = builtin_trace(a.model, a.batch, rows1, ins)
    step_note = None
    if "optimizer_ms" not in trace:
        step = st.median(r["t_end"] - r["t_bwd"] for r in rows1)
        trace["optimizer_ms"] = round(1e3 * step, 4)
        step_note = f"the trace had no optimizer_ms: the real run's step, {1e3 * step:.2f} ms"
        print("replay-validate: " + step_note, flush=True)
    with open(trace_path, "w") as f:
        json.dump(trace, f, indent=1)
    times = os.path.join(out, "replay-times.json")
    cmd = [PY, os.path.join(TOP, "apps", "examples", "torch_train.py"),
           f"--arch=replay:{trace_path}", "--backend", "local", "--iters",
           str(a.iters + a.warmup), "--warmup", str(a.warmup), "--threads", str(a.threads),
           "--replay-times", times, "--quiet"]
    print("$ " + " ".join(cmd), flush=True)
    if subprocess.call(cmd, env=env) != 0:
        fail("the replay failed")
    # interleaved: the real iterations' means, as the trace's times are the recorded ones'
    runs = [summary(rows1, st.mean if recorder == "interleaved" else st.median)]
    for _ in range(real_runs - 1):
        rows, _ = real_run(a.model, a.batch, a.iters, a.warmup, a.image_size)
        runs.append(summary(rows))
    with open(times) as f:
        rep = json.load(f)
    r_rows = rep["iterations"][a.warmup:]
    ends = [r["end_s"] for r in rep["iterations"]]
    rep_iter = st.median(e1 - e0 for e0, e1 in zip(ends[a.warmup - 1:], ends[a.warmup:]))
    names = rep["names"]
    rep_ready = {n: st.median(r["ready_s"][i] for r in r_rows) for i, n in enumerate(names)}
    its = [it for it, _ in runs]
    real_iter = st.median(its)
    keys = runs[0][1]
    real_ready = {k: st.median(r[k] for _, r in runs) for k in keys}
    real_names = [n for n, _, _ in ins.params]
    if set(real_names) != set(names):
        if len(real_names) != len(names):
            fail(f"the trace has {len(names)} parameter tensors, the model {len(real_names)}")
        match = dict(zip(names, real_names))  # by order: the recorder named them otherwise
        how = "by order (the trace's layer names are not the model's module names)"
    else:
        match = {n: n for n in names}
        how = "by module name and index"
    errs = sorted((abs(rep_ready[n] - real_ready[match[n]]) / real_ready[match[n]], n)
                  for n in names)
    noise = sorted((max(r[k] for _, r in runs) - min(r[k] for _, r in runs)) / real_ready[k]
                   for k in keys)
    it_err = abs(rep_iter - real_iter) / real_iter
    # the replay against the trace's own schedule (the emulator alone, whatever the load
    # did to the recording and the real runs): a tensor of layer i is due after every
    # forward and the backward of layers i..last
    fwd_sum = sum(l["forward_ms"] for l in trace["layers"]) / 1e3
    due, after = {}, 0.0
    for lay in reversed(trace["layers"]):
        after += lay["backward_ms"] / 1e3
        for j in range(len(lay["params"])):
            due[f"{lay['name']}.{j}"] = fwd_sum + after
    sched = sorted(abs(rep_ready[n] - due[n]) / due[n] for n in names)
    trace_sum = fwd_sum + after + trace["optimizer_ms"] / 1e3
    sched_it = abs(rep_iter - trace_sum) / trace_sum
    worst, wname = errs[-1]
    med = errs[len(errs) // 2][0]
    res = {"model": a.model, "batch": a.batch, "image_size": a.image_size, "iters": a.iters,
           "warmup": a.warmup,
           "threads": a.threads, "recorder": recorder, "step_note": step_note,
           "matched": how, "real_iter_ms": [1e3 * it for it in its],
           "replay_iter_ms": 1e3 * rep_iter, "iter_error": it_err,
           "ready_error_median": med, "ready_error_max": worst, "ready_error_worst": wname,
           "real_runs_ready_spread_max": noise[-1],
           "real_runs_iter_spread": (max(its) - min(its)) / real_iter,
           "real_iters_ms": [1e3 * r["period"] for r in rows1],
           "recorded_iters_ms": [1e3 * r["recorded"] for r in rows1 if "recorded" in r],
           "phases_ms": {"real": [1e3 * st.mean(r[b] - r[a] for r in rows1) for a, b in
                                  (("t0", "t_fwd"), ("t_fwd", "t_bwd"), ("t_bwd", "t_end"))],
                         "trace": [1e3 * fwd_sum, 1e3 * after, trace["optimizer_ms"]]},
           "ready_errors": {n: e for e, n in errs}, "target": TARGET,
           "ready_ms": {n: [1e3 * rep_ready[n], 1e3 * real_ready[match[n]]] for n in names},
           "trace_sum_ms": 1e3 * trace_sum, "replay_vs_trace_iter_error": sched_it,
           "replay_vs_trace_ready_error_median": sched[len(sched) // 2],
           "replay_vs_trace_ready_error_max": sched[-1]}
    with open(os.path.join(out, "validate.json"), "w") as f:
        json.dump(res, f, indent=1)

    def verdict(e):
        return "within" if e <= TARGET else "OVER"
    inter = recorder == "interleaved"
    if inter:
        print(f"iteration: real {1e3 * real_iter:.1f} ms (the mean of the real iterations), "
              f"replay {1e3 * rep_iter:.1f} ms: error {100 * it_err:.2f} % ({verdict(it_err)} "
              f"{100 * TARGET:.0f} %)")
    else:
        print(f"iteration: real {', '.join(f'{1e3 * it:.1f}' for it in its)} ms (median "
              f"{1e3 * real_iter:.1f}, spread {100 * res['real_runs_iter_spread']:.1f} %), "
              f"replay {1e3 * rep_iter:.1f} ms: error {100 * it_err:.2f} % ({verdict(it_err)} "
              f"{100 * TARGET:.0f} %; against each run "
              f"{', '.join(f'{100 * (rep_iter - it) / it:+.2f} %' for it in its)})")
    per = sorted(r["period"] for r in rows1)
    print(f"{'the real iterations' if inter else 'the first real run'} ({len(per)}"
          f"{', each beside a recorded one' if inter else ''}): {1e3 * per[0]:.1f} to "
          f"{1e3 * per[-1]:.1f} ms, median {1e3 * st.median(per):.1f}, mean "
          f"{1e3 * st.mean(per):.1f}")
    print(f"gradient ready times ({len(errs)} tensors, matched {how}): error median "
          f"{100 * med:.2f} %, max {100 * worst:.2f} % ({wname}; {verdict(worst)} "
          f"{100 * TARGET:.0f} %)"
          + ("" if inter else f"; the {len(runs)} real runs differ by up to {100 * noise[-1]:.2f} %"))
    print(f"the replay against the trace's own schedule (the emulator alone): iteration "
          f"{1e3 * rep_iter:.1f} ms against {1e3 * trace_sum:.1f} ms, error "
          f"{100 * sched_it:.2f} %; ready times error median "
          f"{100 * sched[len(sched) // 2]:.2f} %, max {100 * sched[-1]:.2f} %")
    ph = res["phases_ms"]
    print("phases, the trace's against the real iterations': " + "; ".join(
        f"{k} {t:.1f} against {r:.1f} ms ({100 * (t - r) / r:+.1f} %)"
        for k, r, t in zip(("forward", "backward", "step"), ph["real"], ph["trace"])))
    met = it_err <= TARGET and worst <= TARGET
    print(f"target ({100 * TARGET:.0f} %, the iteration and every gradient's ready time): "
          + ("met" if met else "not met ("
             + ", ".join(x for x, e in (("the iteration", it_err), ("the ready times", worst))
                         if e > TARGET) + ")"))
    print(f"written: {out}/validate.json, {trace_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
