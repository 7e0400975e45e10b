#!/usr/bin/python3
"""Cases of the PyTorch binding (python/pipecompress), each run under mpirun by
tests/mpi/test_torch.sh, which checks what they print and write:

    torch_cases.py CASE OUTDIR [PipeCompress flags...]

sgd       1 worker: each iteration through PipeCompress (--compress none) equals
          torch.optim.SGD on the same batch (momentum, weight decay), within float
          tolerance: the parameters (relative to their largest, 1e-5) and the step each
          iteration takes (relative to torch's largest step, 1e-3; never zero); with
          backward_passes_per_step=2 when CASE is sgd2 (gradients of two half batches
          accumulated). sgd-none, sgd2-none: the same with model.zero_grad(set_to_none=True)
          before every iteration's backward (autograd then puts each gradient in a new
          p.grad, which the binding must copy into the registered buffer). With a schedule
          (--lr-schedule, --lr-warmup) the reference steps under torch's LambdaLR of
          doc/python.md's equivalent of the runtime's schedule (runtime_schedule), and
          pc.lr() must equal its rate at every iteration. Prints (pc.init's default
          verbose, progress_every=0) the flags received, the configuration and a progress
          line at every iteration, with the loss given to pc.report.
groups, groups-wrap, groups-skew
          2 workers, --compress none: pc.DistributedOptimizer(torch.optim.AdamW) with a decay
          and a no-decay group and warm-up + cosine (SequentialLR) is bitwise
          torch.optim.AdamW's on the averaged gradient after every iteration; groups-wrap
          gives the scheduler the wrapper (groups: the wrapped optimizer), first prints
          the refusals ("refused: LINE"; run with --update servers given, which
          update="workers" must not override) and calls the wrapped optimizer's zero_grad()
          between backward and step at iteration 1 (harmless there), then
          opt.clip_grad_norm_ (refused: clipping did not begin with the run); groups-skew steps
          worker 1's scheduler once more, which the servers refuse; groups-late sets group
          0's lr between backward and step() at iteration 2 (the rates left with the first
          gradient): refused.
shadow    the script's own argparse takes --lr (parse_known_args) and pc.init(rest,
          strict=True) must refuse, on every rank, in one line.
update, update-user
          2 workers, --compress none, --update workers (update) and with the user's step
          (update-user: pc_worker_set_user_step after attach, pc_worker_grad_wait on every
          parameter, then torch.optim.SGD or AdamW (foreach=False; the flags' --optimizer,
          --lr, --momentum, --weight-decay) steps on the mean gradient in p.grad): after every
          iteration every parameter on every worker is bitwise torch.optim's step on the mean
          of both workers' gradients, computed in-process (with 2 workers the mean is exact in
          any order); the runtime's own SGD within 1e-5 (torch fuses p - lr * m).
workers   2 workers, --compress none: pc.DistributedOptimizer(torch.optim.Adadelta,
          update="workers") (without --update given, the wrapper chooses the placement;
          with --update workers, update=None takes it), under a
          StepLR on the wrapper, opt.clip_grad_norm_ at every other iteration: after every
          iteration every parameter is bitwise torch.optim.Adadelta's (foreach=False) on the
          mean of both workers' gradients, computed in-process (clipped there with
          torch.nn.utils.clip_grad_norm_, the same total norm returned), pc.lr() the
          reference's; every worker appends "IT DIGEST" of its parameters to
          OUTDIR/hash-rRANK.txt (test_torch.sh compares the workers'). Prints the refusals
          tried on the way ("refused: LINE"): Adadelta with update="servers", the wrapped
          optimizer's zero_grad() between backward and step, a p.grad replaced after
          backward.
placement-skew
          worker 0 chooses update="workers", worker 1 update="servers": every rank must end
          at the start with one line.
clip-race 2 workers, update="servers" (SGD): torch.nn.utils.clip_grad_norm_ after backward
          at iteration 1 (a write into gradients the compressor may still read) must end
          every rank with one line at opt.step().
clip      2 workers, update="servers", AdamW with two groups: opt.clip_grad_norm_ on the
          servers (the global norm of the averaged gradient) against
          torch.nn.utils.clip_grad_norm_ + torch.optim.AdamW on the averaged gradient, to
          float tolerance, every iteration (one without clipping among them); its refusals.
adam-none, adamw-none
          1 worker, --compress none, --optimizer adam or adamw (the flags say which, with
          --betas, --eps, --amsgrad, --weight-decay): after every iteration every parameter
          is bitwise torch.optim.Adam's / AdamW's (foreach=False) on the same batch, and at
          the end every parameter has moved.
zoo       a model with every kind of parameter the binding defines a behaviour for: tied
          weights, an unused branch, a frozen parameter, BatchNorm buffers, a parameter read
          outside its own module, dropout. Every worker builds it from a different seed
          (worker 0's must win); after each iteration every worker writes the hash of its
          parameters to OUTDIR/hash-rRANK.txt; at the end OUTDIR/final-rRANK.pt holds the
          state and OUTDIR/init-rRANK.pt the state once the runtime started (pc.synchronize()
          right after attach). Data and dropout
          derive from (iteration, rank), so the run resumes exactly (--resume). Before
          pc.finish, pc.DistributedOptimizer(update="workers") must be refused (the runtime
          started with the step on the servers): "refused: LINE".
arch:NAME apps/examples/torch_train.py's model NAME (resnet18, resnet50, vgg16, vit, cnn,
          lstm) through the binding, batch $PC_BATCH (default 4) per worker. Every worker
          builds it from a different seed and shifts its float buffers by its rank (worker
          0's must win at attach). After each iteration the batch's loss must be finite, and
          an evaluation forward (model.eval(), no autograd: for vit, the fused encoder
          kernel, which calls no submodule) run before pc.synchronize() must equal the same
          forward after it, bitwise (the binding's waits alone order it after the update);
          then every worker appends "IT LOSS DIGEST" (the digest of its parameters) to
          OUTDIR/hash-rRANK.txt. OUTDIR/init-rRANK.txt: the digest of parameters, then of
          buffers, once the runtime started (pc.synchronize() right after attach). Prints
          the parameters waited for at the model's start (read outside their module's
          forward), "none" when none.
codec-default-servers, codec-default-workers, codec-default-adaptive
          the codec's default momentum correction is turned off by the wrapper: AdamW on
          the servers, SGD with momentum on the workers, or Adadelta there (the codec from
          the flags; AdamW and Adadelta also give a sparsifier its default warm-up), 3
          iterations; rank 0 prints "codec: SPEC" and "adam moments: M" (pc.config()'s
          after the wrapper); the parameters moved and are finite, and rank 0 prints
          "digest: SHA256" of them.
dtype     a float64 model: must fail at attach with one line naming the parameter.
strided   a non-contiguous parameter: must fail likewise.
twice     pc.init called twice: must fail with one line.
early, passes, note, mismatch, thread, initstr, views, rebind, lazyserver
          mistakes after (or at) pc.init: a worker leaving without pc.finish, two backward
          passes with backward_passes_per_step 1, metrics_note of no JSON, another model on
          worker 1, the forward on another thread, argv as one string, two parameters in
          one storage, a parameter given new memory after attach, a server that never
          serves. Each must end every rank with one line.
"""
import copy
import hashlib
import math
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..",
                                "python"))
import pipecompress as pc  # noqa: E402

torch.set_num_threads(1)
pc.set_blas_threads(1)


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _rel(a, b):
    """The largest difference of a from b, relative to b's largest magnitude."""
    return ((a - b).abs().max() / (b.abs().max() + 1e-30)).item()


def runtime_schedule(cfg):
    """The runtime's own schedule as a torch.optim.lr_scheduler.LambdaLR factor of the
    iteration t (doc/python.md, "The runtime's schedules and torch's"): a warm-up of N
    iterations ramps (t + 1) / N, then --lr-schedule step multiplies by gamma every S
    iterations counted from 0, cosine is 0.5 (1 + cos(pi t / T)) over the whole run
    (T = --iters, the warm-up included), 0 from T on."""
    sched, warm, T = cfg["lr-schedule"], int(cfg["lr-warmup"]), int(cfg["iters"])
    step, gamma = int(cfg["lr-step"]), float(cfg["lr-gamma"])

    def factor(t):
        if t < warm:
            return (t + 1) / warm
        if sched == "step" and step > 0:
            return gamma ** (t // step)
        if sched == "cosine":
            return 0.5 * (1 + math.cos(math.pi * t / T)) if t < T else 0.0
        return 1.0
    return factor


def case_sgd(out, flags, bpps, set_to_none):
    pc.init(flags, progress_every=0)
    if pc.is_server():
        return pc.run_server()
    cfg = pc.config()
    lr, mu, wd = float(cfg["lr"]), float(cfg["momentum"]), float(cfg["weight-decay"])
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=mu, weight_decay=wd)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, runtime_schedule(cfg))
    pc.attach(model, backward_passes_per_step=bpps)
    g = torch.Generator().manual_seed(5)
    worst = worst_step = 0.0
    for it in range(int(cfg["iters"])):
        x = torch.randn(8, 20, generator=g)
        y = torch.randint(0, 3, (8,), generator=g)
        before = [p.detach().clone() for p in model.parameters()]
        ref_before = [q.detach().clone() for q in ref.parameters()]
        opt.zero_grad(set_to_none=set_to_none)
        if set_to_none:
            model.zero_grad(set_to_none=True)  # p.grad dropped: the binding copies it back
        for part in range(bpps):
            xs, ys = x[part::bpps], y[part::bpps]
            # The runtime averages the workers' gradients; one worker: its own, summed over
            # the backward passes (as .grad accumulates for the reference).
            loss = F.cross_entropy(model(xs), ys)
            loss.backward()
            F.cross_entropy(ref(xs), ys).backward()
        pc.report(loss.item())
        want = opt.param_groups[0]["lr"]
        if not abs(pc.lr()[0] - want) <= 1e-12 * want:
            raise pc.Error(f"iteration {it}: pc.lr() {pc.lr()} is not the runtime schedule's "
                           f"torch equivalent's {want!r}")
        opt.step()
        sched.step()
        pc.iteration_end()
        pc.synchronize()
        for (name, p), q, p0, q0 in zip(model.named_parameters(), ref.parameters(), before,
                                        ref_before):
            d = _rel(p, q)
            worst = max(worst, d)
            if d > 1e-5:
                raise pc.Error(f"iteration {it}: {name} differs from torch.optim.SGD by {d:.3g} "
                               "(relative)")
            # The step itself, so that a lost gradient shows at once: weight decay and
            # momentum alone would still move the parameters.
            step, ref_step = p.detach() - p0, q.detach() - q0
            if not step.abs().max().item() > 0:
                raise pc.Error(f"iteration {it}: {name} did not move")
            d = _rel(step, ref_step)
            worst_step = max(worst_step, d)
            if d > 1e-3:
                raise pc.Error(f"iteration {it}: {name}'s step differs from torch.optim.SGD's "
                               f"by {d:.3g} (relative to its largest element)")
    status = pc.finish()
    print(f"sgd: {cfg['iters']} iterations, {bpps} backward passes each, p.grad "
          f"{'set to None' if set_to_none else 'kept'} before each, lr {lr} momentum {mu} "
          f"weight decay {wd} schedule {cfg['lr-schedule']} warm-up {cfg['lr-warmup']} "
          "(pc.lr() its LambdaLR's every iteration): largest relative difference from "
          f"torch.optim.SGD {worst:.3g}, of a step {worst_step:.3g}", flush=True)
    return status


def case_adam(out, flags):
    """1 worker: the servers' Adam/AdamW (--optimizer) against torch.optim's on the same
    gradients, every iteration: the parameters bitwise equal (pc_optim follows the float32
    operation order of torch 1.13's single-tensor loop; with one worker the mean gradient
    is the gradient itself)."""
    pc.init(flags)
    if pc.is_server():
        return pc.run_server()
    cfg = pc.config()
    kind = cfg["optimizer"]
    lr, wd, eps = float(cfg["lr"]), float(cfg["weight-decay"]), float(cfg["eps"])
    betas = tuple(float(b) for b in cfg["betas"].split(","))
    amsgrad = cfg["amsgrad"] == "yes"
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    Opt = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind]
    opt = Opt(ref.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd, amsgrad=amsgrad,
              foreach=False)
    pc.attach(model)
    init = [p.detach().clone() for p in model.parameters()]
    g = torch.Generator().manual_seed(5)
    for it in range(int(cfg["iters"])):
        x = torch.randn(8, 20, generator=g)
        y = torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        F.cross_entropy(ref(x), y).backward()
        opt.step()
        pc.iteration_end()
        pc.synchronize()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            if not torch.equal(p.detach(), q.detach()):
                d = (p.detach() - q.detach()).abs().max().item()
                n = int((p.detach() != q.detach()).sum().item())
                raise pc.Error(f"iteration {it}: {name} differs from torch.optim.{Opt.__name__} "
                               f"in {n} of {p.numel()} elements (largest difference {d:.3g})")
    for (name, p), p0 in zip(model.named_parameters(), init):
        if torch.equal(p.detach(), p0):  # equal to torch, yet not trained: a lost step
            raise pc.Error(f"{name} did not move in {cfg['iters']} iterations")
    status = pc.finish()
    print(f"{kind}: {cfg['iters']} iterations, lr {lr} betas {betas} eps {eps} weight decay "
          f"{wd} amsgrad {amsgrad}: every parameter bitwise equal to torch.optim."
          f"{Opt.__name__}'s (foreach=False) after every iteration", flush=True)
    return status


def _groups(model, wd):
    """timm's split: weights decay, biases (1-d) do not."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def _schedule(opt, iters):
    """Warm-up (LinearLR) then cosine (CosineAnnealingLR) through SequentialLR."""
    warm = 3
    return torch.optim.lr_scheduler.SequentialLR(
        opt, [torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=warm),
              torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=iters - warm)],
        milestones=[warm])


def _refusals(model, flags_wd):
    """pc.DistributedOptimizer's refusals that leave the session usable: each prints its
    one line as 'refused: LINE' (tests/mpi/test_torch.sh matches them)."""
    tries = [
        lambda: torch.optim.Adagrad(model.parameters(), lr=0.01),
        lambda: torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=flags_wd / 2),
        lambda: torch.optim.AdamW([model[0].weight, model[0].bias], lr=0.01,
                                  weight_decay=flags_wd),
        lambda: torch.optim.Adagrad(model.parameters(), lr=0.01),  # update="workers"
    ]
    for i, make in enumerate(tries):
        try:  # the last: update="workers", pc.init given --update servers explicitly
            pc.DistributedOptimizer(make(), update="workers" if i == 3 else None)
        except pc.Error as e:
            if pc.rank() == 0:
                print(f"refused: {e}", flush=True)
        else:
            raise pc.Error("a DistributedOptimizer that must be refused was made")


def case_groups(out, flags, on_wrapper, skew, late=False):
    """2 workers, --compress none: pc.DistributedOptimizer(AdamW with a decay and a
    no-decay group) under warm-up + cosine from torch.optim.lr_scheduler, against
    torch.optim.AdamW (foreach=False) with the same groups and scheduler, stepped on the
    workers' averaged gradient: every parameter bitwise equal after every iteration. (The
    mean of two gradients is exact to compare: the servers add 0.5 g0 then 0.5 g1, both
    products exact, as torch's (g0 * 0.5) + (g1 * 0.5), fused or not.) on_wrapper: the
    scheduler gets the wrapper (else the wrapped optimizer), and the refusals are tried
    first (_refusals) and after the start the wrapped optimizer's own step(). skew: worker
    1 steps its scheduler once more at iteration 2, which the servers must refuse. late:
    group 0's lr is halved between backward and step() at iteration 2, which step() must
    refuse (the rates left with the iteration's first gradient)."""
    # torch 1.13's SequentialLR passes an epoch to its first scheduler's step() itself and
    # warns about it: not ours to see.
    warnings.filterwarnings("ignore", message="The epoch parameter")
    pc.init(flags)
    if pc.is_server():
        return pc.run_server()
    cfg = pc.config()
    iters, W = int(cfg["iters"]), pc.workers()
    wd = float(cfg["weight-decay"]) if "--weight-decay" in flags else 0.05
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.AdamW(_groups(ref, wd), lr=0.01, foreach=False)
    ref_sched = _schedule(ref_opt, iters)
    pc.attach(model)
    if on_wrapper:
        _refusals(model, wd)
    torch_opt = torch.optim.AdamW(_groups(model, wd), lr=0.01, weight_decay=wd)
    opt = pc.DistributedOptimizer(torch_opt)
    sched = _schedule(opt if on_wrapper else torch_opt, iters)
    if on_wrapper:
        for call in (torch_opt.step, lambda: opt.clip_grad_norm_(1.0)):
            try:
                call()
            except pc.Error as e:
                if pc.rank() == 0:
                    print(f"refused: {e}", flush=True)
            else:
                raise pc.Error("the wrapped optimizer's own step() or clip_grad_norm_ ran")
    init = [p.detach().clone() for p in model.parameters()]
    lrs = []
    for it in range(iters):
        batches = []
        for r in range(W):
            g = torch.Generator().manual_seed(1000 * it + r)
            batches.append((torch.randn(8, 20, generator=g),
                            torch.randint(0, 3, (8,), generator=g)))
        x, y = batches[pc.rank()]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        if on_wrapper and it == 1:
            # update="servers": the wrapped optimizer's zero_grad between backward and step
            # does nothing (the gradients left; the runtime zeroes them), so the check below
            # stays bitwise (a real zeroing in place would be a write after the hand-off).
            torch_opt.zero_grad()
            try:  # clipping that did not begin with the run (its servers stepped already)
                opt.clip_grad_norm_(1.0)
            except pc.Error as e:
                if pc.rank() == 0:
                    print(f"refused: {e}", flush=True)
            else:
                raise pc.Error("clip_grad_norm_ first called at iteration 1 ran")
        grads = []
        for bx, by in batches:  # each worker's gradient on the reference
            ref_opt.zero_grad(set_to_none=True)
            F.cross_entropy(ref(bx), by).backward()
            grads.append([q.grad.clone() for q in ref.parameters()])
        for j, q in enumerate(ref.parameters()):
            q.grad = grads[0][j] * (1.0 / W)
            for w in range(1, W):
                q.grad = q.grad + grads[w][j] * (1.0 / W)
        lrs.append(pc.lr())
        if not skew and lrs[-1] != [g["lr"] for g in ref_opt.param_groups]:
            raise pc.Error(f"iteration {it}: pc.lr() {lrs[-1]} is not the reference's")
        if late and it == 2:
            torch_opt.param_groups[0]["lr"] *= 0.5  # too late: the rates are out
        opt.step()
        ref_opt.step()
        sched.step()
        ref_sched.step()
        if skew and it == 2 and pc.rank() == 1:
            sched.step()  # a scheduler stepped on one worker only
        if opt.should_stop or pc.stopped():
            raise pc.Error("stopped without a signal")
        pc.synchronize()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            if not torch.equal(p.detach(), q.detach()):
                d = (p.detach() - q.detach()).abs().max().item()
                n = int((p.detach() != q.detach()).sum().item())
                raise pc.Error(f"iteration {it}: {name} differs from torch.optim.AdamW in {n} "
                               f"of {p.numel()} elements (largest difference {d:.3g})")
    for (name, p), p0 in zip(model.named_parameters(), init):
        if torch.equal(p.detach(), p0):
            raise pc.Error(f"{name} did not move in {iters} iterations")
    status = pc.finish()
    if pc.rank() == 0:
        on = "wrapper" if on_wrapper else "wrapped optimizer"
        print(f"groups: {iters} iterations, {W} workers, AdamW decay {wd} / no-decay 0, "
              f"LinearLR then CosineAnnealingLR on the {on} "
              f"(lr {lrs[0][0]:.4g} .. {max(l[0] for l in lrs):.4g} .. {lrs[-1][0]:.4g}): every "
              "parameter bitwise equal to torch.optim.AdamW's on the averaged gradient after "
              "every iteration", flush=True)
    return status


class Zoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(12, 12)
        self.dec = nn.Linear(12, 12)
        self.dec.weight = self.enc.weight  # tied: one Parameter in two modules
        self.bn = nn.BatchNorm1d(12)
        self.unused = nn.Linear(4, 4)  # never called: no gradient, ever
        self.frozen = nn.Linear(12, 12)
        self.frozen.requires_grad_(False)
        self.side = nn.Linear(12, 6)  # its weight is read by the root's forward only
        self.head = nn.Linear(12, 3)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        h = F.relu(self.bn(self.enc(x)))
        h = self.drop(F.relu(self.dec(h)) + self.frozen(h))
        s = F.linear(h, self.side.weight)  # outside self.side's own forward
        return self.head(h) + s.sum(1, keepdim=True)


def case_update(out, flags, user):
    """--update workers: the runtime's step on the workers, or the user's torch optimizer on
    the mean gradient the runtime writes into p.grad, both against torch.optim in-process."""
    pc.init(flags)
    if pc.is_server():
        return pc.run_server()
    from pipecompress.session import _worker
    cfg = pc.config()
    kind, W = cfg["optimizer"], pc.workers()
    lr, wd = float(cfg["lr"]), float(cfg["weight-decay"])

    def make(params):
        if kind == "adamw":
            return torch.optim.AdamW(params, lr=lr, weight_decay=wd, foreach=False,
                                     betas=tuple(float(b) for b in cfg["betas"].split(",")),
                                     eps=float(cfg["eps"]))
        return torch.optim.SGD(params, lr=lr, momentum=float(cfg["momentum"]), weight_decay=wd,
                               foreach=False)
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    ropt = make(ref.parameters())
    pc.attach(model)
    s = _worker()
    params = list(model.parameters())
    if user:
        if s.lib.pc_worker_set_user_step(s.w, True) != 0:
            s.fail("pc_worker_set_user_step", -1)
        uopt = make(params)
    init = [p.detach().clone() for p in params]
    for it in range(int(cfg["iters"])):
        batches = []
        for k in range(W):  # every worker's batch, from (iteration, worker)
            g = torch.Generator().manual_seed(1000 * it + k)
            batches.append((torch.randn(8, 20, generator=g), torch.randint(0, 3, (8,), generator=g)))
        x, y = batches[pc.rank()]
        F.cross_entropy(model(x), y).backward()
        if user:
            for t in range(len(params)):
                rc = s.lib.pc_worker_grad_wait(s.w, t)
                if rc != 0:
                    s.fail(f"grad_wait({t})", rc)
            uopt.step()
        pc.iteration_end()
        pc.synchronize()
        grads = []
        for xk, yk in batches:
            ref.zero_grad(set_to_none=True)
            F.cross_entropy(ref(xk), yk).backward()
            grads.append([q.grad.clone() for q in ref.parameters()])
        for j, q in enumerate(ref.parameters()):
            q.grad = sum(((1.0 / W) * gk[j] for gk in grads), torch.zeros_like(q))
        ropt.step()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            # The runtime's SGD rounds p - lr * m twice, torch's fuses it (a multiply-add):
            # within float tolerance (as case_sgd). Everything else bitwise.
            if (not torch.equal(p.detach(), q.detach()) and
                    (user or kind == "adamw" or _rel(p.detach(), q.detach()) > 1e-5)):
                d = (p.detach() - q.detach()).abs().max().item()
                raise pc.Error(f"iteration {it}: worker {pc.rank()}: {name} differs from "
                               f"torch.optim's step on the mean gradient by up to {d:.3g}")
    for (name, p), p0 in zip(model.named_parameters(), init):
        if torch.equal(p.detach(), p0):
            raise pc.Error(f"{name} did not move in {cfg['iters']} iterations")
    rank = pc.rank()
    status = pc.finish()
    exact = "bitwise" if user or kind == "adamw" else "within 1e-5 (relative) of"
    if rank == 0:
        print(f"update: {cfg['iters']} iterations, {W} workers, --optimizer {kind}, the step "
              f"{'torch.optim' if user else 'the runtime'}'s on every worker: every parameter "
              f"{exact} torch.optim's on the mean gradient after every iteration", flush=True)
    return status


def case_workers(out, flags):
    """pc.DistributedOptimizer(torch.optim.Adadelta), update="workers" by default with
    --update workers: every iteration bitwise torch.optim.Adadelta's on the mean gradient,
    clipped at odd iterations by opt.clip_grad_norm_, against torch's clip_grad_norm_ on
    the reference; a StepLR on the wrapper; the guards tried on the way."""
    pc.init(flags)
    if pc.is_server():
        return pc.run_server()
    rank, W, iters = pc.rank(), pc.workers(), int(pc.config()["iters"])
    hp = dict(lr=0.5, rho=0.9, eps=1e-6, weight_decay=0.01, foreach=False)
    max_norm = 0.05
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    ropt = torch.optim.Adadelta(ref.parameters(), **hp)
    rsched = torch.optim.lr_scheduler.StepLR(ropt, step_size=2, gamma=0.5)
    pc.attach(model)

    def refused(call, what):
        try:
            call()
        except pc.Error as e:
            if rank == 0:
                print(f"refused: {e}", flush=True)
        else:
            raise pc.Error(f"{what} was not refused")
    refused(lambda: pc.DistributedOptimizer(torch.optim.Adadelta(model.parameters()),
                                            update="servers"), "Adadelta on the servers")
    torch_opt = torch.optim.Adadelta(model.parameters(), **hp)
    # Without --update the wrapper chooses the placement (every worker alike; worker 0
    # tells the servers at the start); with --update workers it is the default.
    flag = any(w == "--update" or w.startswith("--update=") for w in flags)
    opt = pc.DistributedOptimizer(torch_opt, update=None if flag else "workers")
    if repr(opt) != f"DistributedOptimizer({torch_opt!r}, update='workers')":
        raise pc.Error(f"the placement: {opt!r}")
    if pc.config()["update"] != "workers":
        raise pc.Error(f"pc.config()['update'] is {pc.config()['update']!r} after the wrapper")
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    hashes = open(os.path.join(out, f"hash-r{rank}.txt"), "w")
    init = [p.detach().clone() for p in model.parameters()]
    clipped = 0
    for it in range(iters):
        batches = []
        for k in range(W):  # every worker's batch, from (iteration, worker)
            g = torch.Generator().manual_seed(1000 * it + k)
            batches.append((torch.randn(8, 20, generator=g),
                            torch.randint(0, 3, (8,), generator=g)))
        x, y = batches[rank]
        if pc.lr() != [g["lr"] for g in ropt.param_groups]:
            raise pc.Error(f"iteration {it}: pc.lr() {pc.lr()} is not the reference's")
        opt.zero_grad()  # before backward: allowed (nothing to do)
        F.cross_entropy(model(x), y).backward()
        if it == 1:  # Horovod's guard: it would wipe the averaged gradients
            refused(torch_opt.zero_grad, "zero_grad between backward and step")
        if it == 2:  # p.grad replaced after the hand-off: the step would read the local one
            w = model[0].weight
            kept = w.grad
            w.grad = kept.clone()
            refused(opt.step, "a p.grad replaced after backward")
            w.grad = kept
        norm = opt.clip_grad_norm_(max_norm) if it % 2 else None
        opt.step()
        sched.step()
        grads = []
        for xk, yk in batches:
            ref.zero_grad(set_to_none=True)
            F.cross_entropy(ref(xk), yk).backward()
            grads.append([q.grad.clone() for q in ref.parameters()])
        for j, q in enumerate(ref.parameters()):
            q.grad = sum(((1.0 / W) * gk[j] for gk in grads), torch.zeros_like(q))
        if norm is not None:
            rnorm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
            if not torch.equal(norm, rnorm) or not rnorm.item() > max_norm:
                raise pc.Error(f"iteration {it}: clip_grad_norm_ returned {norm.item()!r}, "
                               f"torch's {rnorm.item()!r} (max_norm {max_norm}: must clip)")
            clipped += 1
        ropt.step()
        rsched.step()
        if opt.should_stop or pc.stopped():
            raise pc.Error("stopped without a signal")
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            if not torch.equal(p.detach(), q.detach()):
                d = (p.detach() - q.detach()).abs().max().item()
                raise pc.Error(f"iteration {it}: worker {rank}: {name} differs from "
                               f"torch.optim.Adadelta's step on the mean gradient by up to "
                               f"{d:.3g}")
        print(it, digest(model.parameters()), file=hashes, flush=True)
    for (name, p), p0 in zip(model.named_parameters(), init):
        if torch.equal(p.detach(), p0):
            raise pc.Error(f"{name} did not move in {iters} iterations")
    status = pc.finish()
    if rank == 0:
        how = "--update workers" if flag else "update='workers' chosen by the wrapper"
        print(f"workers: {iters} iterations, {W} workers, torch.optim.Adadelta on every worker "
              f"(StepLR, clipped to {max_norm} at {clipped} iterations; {how}): every "
              "parameter bitwise torch.optim's on the mean gradient after every iteration",
              flush=True)
    return status


def small_model(flags):
    """pc.init(flags), then on a worker the small MLP of the cases below (seed 3), attached;
    None on a server (the caller serves)."""
    pc.init(flags)
    if pc.is_server():
        return None
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 3))
    pc.attach(model)
    return model


def case_placement_skew(out, flags):
    """Worker 0 wraps Adadelta with update="workers" (pc.init got no --update: the wrapper
    chooses), worker 1 SGD with update="servers": the start must refuse on every worker,
    in one line, before anything reaches the servers."""
    model = small_model(flags)
    if model is None:
        return pc.run_server()
    if pc.rank() == 0:
        pc.DistributedOptimizer(torch.optim.Adadelta(model.parameters()), update="workers")
    else:
        pc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    raise pc.Error("the workers' different placements were not refused")


def case_codec_default(out, flags, update):
    """The codec's default momentum correction with a wrapped optimizer: AdamW on the
    servers (update "servers"), SGD with momentum 0.9 on the workers ("workers") or
    Adadelta there ("adaptive"), the codec as the flags give it; 3 iterations. Rank 0
    prints "codec: SPEC" and "adam moments: M" (pc.config()'s, after the wrapper), every
    worker checks that its parameters moved and stayed finite, and rank 0 prints "digest:
    SHA256" of its parameters."""
    model = small_model(flags)
    if model is None:
        return pc.run_server()
    if update == "servers":
        torch_opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    elif update == "workers":
        torch_opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        torch_opt, update = torch.optim.Adadelta(model.parameters(), lr=1.0), "workers"
    opt = pc.DistributedOptimizer(torch_opt, update=update)
    if pc.rank() == 0:
        print(f"codec: {pc.config()['compress']}", flush=True)
        print(f"adam moments: {pc.config()['adam-moments']}", flush=True)
    init = [p.detach().clone() for p in model.parameters()]
    for it in range(3):
        g = torch.Generator().manual_seed(1000 * it + pc.rank())
        x, y = torch.randn(8, 20, generator=g), torch.randint(0, 3, (8,), generator=g)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    status = pc.finish()
    if not all(torch.isfinite(p).all() for p in model.parameters()):
        raise pc.Error("a parameter is not finite")
    if all(torch.equal(p, q) for p, q in zip(model.parameters(), init)):
        raise pc.Error("no parameter moved")
    if pc.rank() == 0:
        print(f"digest: {digest(model.parameters())}", flush=True)
    return status


def case_clip_race(out, flags):
    """update="servers": torch.nn.utils.clip_grad_norm_ after backward at iteration 1, a
    write into gradients the compressor thread may still read: opt.step() must refuse."""
    model = small_model(flags)
    if model is None:
        return pc.run_server()
    opt = pc.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    for it in range(int(pc.config()["iters"])):
        g = torch.Generator().manual_seed(1000 * it + pc.rank())
        x, y = torch.randn(8, 20, generator=g), torch.randint(0, 3, (8,), generator=g)
        F.cross_entropy(model(x), y).backward()
        if it == 1:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)  # the race
        opt.step()
    return pc.finish()


def case_clip(out, flags):
    """2 workers (and the servers the flags give), --compress none:
    pc.DistributedOptimizer(AdamW with a decay and a no-decay group), opt.clip_grad_norm_
    after backward at every iteration but iteration 3 (whose step() then tells the servers
    "no clipping"), against torch.optim.AdamW (foreach=False) with
    torch.nn.utils.clip_grad_norm_ on the averaged gradient: the norm returned within 1e-5
    of torch's (relative), every parameter within 1e-5 of the reference's (relative to
    its largest) after every iteration, and the clipping bites (torch's norm above
    max_norm) wherever it clips. The servers take the norm in double, torch in float32:
    float tolerance, not bitwise. Every worker appends "IT DIGEST" to OUTDIR/hash-rRANK.txt.
    At iteration 0 it first tries the refusals (norm_type 1, error_if_nonfinite=True,
    max_norm 0), printed as "refused: LINE"."""
    pc.init(flags)
    if pc.is_server():
        return pc.run_server()
    iters, W, rank = int(pc.config()["iters"]), pc.workers(), pc.rank()
    max_norm, skip, S = 0.05, 3, pc.servers()
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.AdamW(_groups(ref, 0.05), lr=0.01, foreach=False)
    pc.attach(model)
    opt = pc.DistributedOptimizer(torch.optim.AdamW(_groups(model, 0.05), lr=0.01))
    hashes = open(os.path.join(out, f"hash-r{rank}.txt"), "w")
    worst = worst_norm = 0.0
    norms = []
    for it in range(iters):
        batches = []
        for k in range(W):
            g = torch.Generator().manual_seed(1000 * it + k)
            batches.append((torch.randn(8, 20, generator=g),
                            torch.randint(0, 3, (8,), generator=g)))
        x, y = batches[rank]
        F.cross_entropy(model(x), y).backward()
        if it == 0:
            for kw in (dict(norm_type=1.0), dict(error_if_nonfinite=True), dict(max_norm=0.0)):
                try:
                    opt.clip_grad_norm_(**{"max_norm": max_norm, **kw})
                except pc.Error as e:
                    if rank == 0:
                        print(f"refused: {e}", flush=True)
                else:
                    raise pc.Error(f"clip_grad_norm_({kw}) was not refused")
        norm = opt.clip_grad_norm_(max_norm) if it != skip else None
        opt.step()
        grads = []
        for bx, by in batches:  # each worker's gradient on the reference
            ref_opt.zero_grad(set_to_none=True)
            F.cross_entropy(ref(bx), by).backward()
            grads.append([q.grad.clone() for q in ref.parameters()])
        for j, q in enumerate(ref.parameters()):  # the servers' sum: 0.5 g0 + 0.5 g1
            q.grad = grads[0][j] * (1.0 / W)
            for w in range(1, W):
                q.grad = q.grad + grads[w][j] * (1.0 / W)
        if norm is not None:
            rnorm = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
            d = abs(norm.item() - rnorm.item()) / rnorm.item()
            if norm.dtype != torch.float32 or d > 1e-5 or not rnorm.item() > max_norm:
                raise pc.Error(f"iteration {it}: clip_grad_norm_ returned {norm!r}, torch's "
                               f"{rnorm.item()!r} (max_norm {max_norm}: must clip)")
            worst_norm = max(worst_norm, d)
            norms.append(rnorm.item())
        ref_opt.step()
        pc.synchronize()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            rel = _rel(p.detach(), q.detach())
            if rel > 1e-5:
                raise pc.Error(f"iteration {it}: {name} differs from torch.optim.AdamW after "
                               f"clip_grad_norm_ by {rel:.3g} (relative)")
            worst = max(worst, rel)
        print(it, digest(model.parameters()), file=hashes, flush=True)
    status = pc.finish()
    if rank == 0:
        print(f"clip: {iters} iterations, {W} workers, {S} servers, AdamW "
              f"clipped to {max_norm} on the servers at {len(norms)} iterations (torch's norm "
              f"{min(norms):.3g} .. {max(norms):.3g}): the norm within {worst_norm:.1e} of "
              f"torch's, every parameter within {worst:.1e} of torch.optim.AdamW after "
              "clip_grad_norm_ on the averaged gradient, every iteration", flush=True)
    return status


def case_zoo(out, flags):
    pc.init(flags)
    if pc.is_server():
        return pc.run_server()
    rank = pc.rank()
    cfg = pc.config()
    seed = int(cfg["seed"])
    torch.manual_seed(100 + rank)  # different on every worker: worker 0's must win
    model = Zoo()
    pc.attach(model)
    pc.synchronize()  # the runtime starts (pc.attach defers it): worker 0's state is everyone's
    torch.save(model.state_dict(), os.path.join(out, f"init-r{rank}.pt"))
    hashes = open(os.path.join(out, f"hash-r{rank}.txt"), "a")
    # PC_ZOO_SYNC=0: no pc.synchronize() between iterations (nor hashes), so that only the
    # binding's own waits (each module's, and the root's for side.weight) order the
    # forward passes after the updates.
    sync = os.environ.get("PC_ZOO_SYNC", "1") != "0"
    for it in range(pc.iteration(), int(cfg["iters"])):
        g = torch.Generator().manual_seed(seed * 100003 + it * 17 + rank)
        torch.manual_seed(seed * 7919 + it * 31 + rank)  # dropout
        x = torch.randn(16, 12, generator=g)
        y = torch.randint(0, 3, (16,), generator=g)
        if it % 2:
            model.zero_grad(set_to_none=True)  # p.grad dropped: the binding copies it back
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        pc.report(loss.item())
        pc.iteration_end()
        if sync:
            pc.synchronize()
            print(it, digest(model.parameters()), file=hashes, flush=True)
    try:  # the runtime started with the step on the servers: too late to move it
        pc.DistributedOptimizer(torch.optim.Adagrad(model.parameters()), update="workers")
    except pc.Error as e:
        if pc.rank() == 0:
            print(f"refused: {e}", flush=True)
    else:
        raise pc.Error("update='workers' after the runtime started was not refused")
    status = pc.finish()
    rank = pc.rank()  # the job's facts outlive pc.finish()
    torch.save(model.state_dict(), os.path.join(out, f"final-r{rank}.pt"))
    with open(os.path.join(out, f"final-r{rank}.bin"), "wb") as f:
        for name, t in model.state_dict().items():
            f.write(name.encode() + b"\0" + t.contiguous().numpy().tobytes())
    return status


def case_arch(out, flags, arch):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..",
                                    "apps", "examples"))
    import torch_train

    pc.init(flags)
    if pc.is_server():
        return pc.run_server()
    rank, cfg = pc.rank(), pc.config()
    seed, batch = int(cfg["seed"]), int(os.environ.get("PC_BATCH", "4"))
    model = torch_train.build(arch, 100 + rank, None)  # worker 0's must win
    with torch.no_grad():
        for b in model.buffers():
            if b.is_floating_point():
                b.add_(rank)
    pc.attach(model)
    pc.synchronize()  # the runtime starts (pc.attach defers it): worker 0's state is everyone's
    with open(os.path.join(out, f"init-r{rank}.txt"), "w") as f:
        print(digest(model.parameters()), digest(model.buffers()), file=f)
    hashes = open(os.path.join(out, f"hash-r{rank}.txt"), "w")
    for it in range(pc.iteration(), int(cfg["iters"])):
        g = torch.Generator().manual_seed(seed * 100003 + it * 17 + rank)
        torch.manual_seed(seed * 7919 + it * 31 + rank)  # dropout
        x = torch.randn(batch, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        lv = loss.item()
        if not math.isfinite(lv):
            raise pc.Error(f"{arch}: iteration {it}: the loss is {lv}")
        pc.report(lv)
        pc.iteration_end()
        model.eval()
        with torch.no_grad():
            early = model(x)  # no synchronize: only the binding's forward waits
            pc.synchronize()
            late = model(x)
        model.train()
        if not torch.equal(early, late):
            raise pc.Error(f"{arch}: iteration {it}: an evaluation before pc.synchronize() "
                           "read parameters before their update (differs from the one after "
                           f"by {(early - late).abs().max().item():.3g})")
        print(it, f"{lv:.6f}", digest(model.parameters()), file=hashes, flush=True)
    a = pc.session._S.model
    outside = [n for n, o in zip(a.names, a.outside) if o]
    print(f"{arch}: {len(a.names)} parameter tensors; waited for at the model's start: "
          f"{' '.join(outside) or 'none'}", flush=True)
    return pc.finish()


def case_bad_model(out, flags, kind):
    pc.init(flags)
    if pc.is_server():
        return pc.run_server()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    if kind == "dtype":
        model = model.double()
    else:
        w = model[2].weight
        w.data = torch.empty(4, 2).t()  # transposed: not contiguous
    pc.attach(model)
    return pc.finish()


def case_misuse(out, flags, kind):
    """Mistakes a script can make after attach; each must end the whole job in one line."""
    if kind == "initstr":
        pc.init(" ".join(flags))
    pc.init(flags)
    if pc.is_server():
        return 0 if kind == "lazyserver" else pc.run_server()
    if kind == "views":  # two parameters in one storage
        model = nn.Module()
        flat = torch.zeros(8)
        model.a, model.b = nn.Parameter(flat[:6]), nn.Parameter(flat[2:])  # overlapping
        pc.attach(model)
    rank = pc.rank()
    torch.manual_seed(1)
    if kind == "mismatch" and rank == 1:  # the same shapes, registered in another order
        model = nn.ModuleDict({"b": nn.Linear(4, 4), "a": nn.Linear(4, 4)})
    elif kind == "mismatch":
        model = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})
    else:
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    def forward(x):
        return model(x) if isinstance(model, nn.Sequential) else model["b"](model["a"](x))

    pc.attach(model)
    for it in range(int(pc.config()["iters"])):
        x = torch.randn(8, 4)
        if kind == "early" and rank == 1 and it == 2:
            sys.exit(0)  # leaves without pc.finish()
        if kind == "thread":
            import threading
            th = threading.Thread(target=lambda: forward(x).sum().backward())
            th.start()
            th.join()
        else:
            if kind == "rebind" and it == 1:
                model[0].weight.data = torch.zeros(4, 4)  # new memory after attach
            forward(x).sum().backward()
            if kind == "passes":
                forward(x).sum().backward()  # a second pass, backward_passes_per_step 1
        if kind == "note":
            pc.metrics_note("not json")
        pc.iteration_end()
    return pc.finish()


def main():
    case, out, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    if case in ("sgd", "sgd2", "sgd-none", "sgd2-none"):
        return case_sgd(out, flags, 2 if case.startswith("sgd2") else 1, case.endswith("-none"))
    if case in ("adam-none", "adamw-none"):
        return case_adam(out, flags)
    if case == "workers":
        return case_workers(out, flags)
    if case == "clip-race":
        return case_clip_race(out, flags)
    if case in ("codec-default-servers", "codec-default-workers", "codec-default-adaptive"):
        return case_codec_default(out, flags, case.rsplit("-", 1)[1])
    if case == "clip":
        return case_clip(out, flags)
    if case == "placement-skew":
        return case_placement_skew(out, flags)
    if case in ("update", "update-user"):
        return case_update(out, flags, case == "update-user")
    if case in ("groups", "groups-wrap", "groups-skew", "groups-late"):
        return case_groups(out, flags, case == "groups-wrap", case == "groups-skew",
                           case == "groups-late")
    if case == "shadow":
        import argparse
        ap = argparse.ArgumentParser()
        ap.add_argument("--lr", type=float, default=0.5)  # the script's own: shadows ours
        args, rest = ap.parse_known_args(flags)
        pc.init(rest, strict=True)
        raise pc.Error(f"pc.init(strict=True) let the script's --lr {args.lr} shadow ours")
    if case == "zoo":
        return case_zoo(out, flags)
    if case.startswith("arch:"):
        return case_arch(out, flags, case[len("arch:"):])
    if case in ("dtype", "strided"):
        return case_bad_model(out, flags, case)
    if case in ("early", "passes", "note", "mismatch", "thread", "initstr", "views", "rebind",
                "lazyserver"):
        return case_misuse(out, flags, case)
    if case == "twice":
        pc.init(flags)
        pc.init(flags)
    raise SystemExit(f"torch_cases.py: unknown case {case}")


if __name__ == "__main__":
    sys.exit(main())
