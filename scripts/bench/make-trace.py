#!/usr/bin/env python3
"""make-trace.py: write a replay trace (doc/replay.md's JSON format) of a model's per-layer
GPU compute: from a published per-iteration figure split across the real model's layers
(`published`), or measured for real with hooks (`record`).

  make-trace.py published --model resnet50|vgg16|bert-base --gpu a100|h100
                          [--batch B] [--out FILE]
  make-trace.py published --all DIR      (every shipped trace, as traces/ holds them)
  make-trace.py record --model NAME --batch B --out FILE [--device cpu|cuda]
                       [--iters N] [--warmup W] [--precision fp32|amp]
                       [--image-size S] [--seq S] [--threads T] [--seed S]

published: the parameter shapes come from the real model (torchvision builds ResNet-50 and
VGG-16 on the CPU; BERT-base is built here from its published configuration: vocabulary
30522, hidden 768, 12 layers of 12 heads, intermediate 3072, 512 positions, 2 token types,
pooler, and the SQuAD question-answering head of the benchmark it is timed by). The
iteration time is a published figure (FIGURES below: the URL and the table's row are in the
trace's "source"); where no figure exists for a (model, GPU) it is derived from one that
does by the rule stated there. The split across layers is RULE below, computed from the
real shapes at the source's batch; --batch B scales the iteration time by B / that batch
(throughput assumed constant in the batch: said so in "source"). Deterministic: the same
command writes the same bytes (tests/python/test_make_trace.sh regenerates traces/).

record: runs NAME (a torchvision classification model, "bert-base" or "tiny") for
--warmup + --iters training iterations (synthetic data, SGD with momentum) and times every
leaf module with hooks: time.perf_counter on the CPU, CUDA events on a GPU. The layers are
the leaf modules in the order of their first forward call, parameter-free ones kept
(params: []); a module called several times gets the sum of its calls. Each phase is cut
at the hooks' events, so the layers' times add up to the measured forward and backward:
a module's forward runs from the previous leaf's forward end to its own (the operations
between modules, such as a residual add, go to the module they precede); its backward from
the previous gradient event to its own (its parameters' gradients ready, or for a
parameter-free module its input's gradient ready, or for an in-place activation its
autograd node's backward done). The model runs as it is (in-place activations stay in
place). optimizer_ms is the measured step.

Exit status: 0; 1 when torch (or torchvision for a torchvision model, or CUDA for
--device cuda) is missing or the run fails; 2 on a bad argument. Errors are one line."""
import argparse
import contextlib
import json
import math
import os
import platform
import sys
import time

PROG = "make-trace.py"

# The GPUs of the published traces: dense FP16 tensor-core peak and HBM bandwidth from
# NVIDIA's data sheets (A100 80GB SXM: 312 TFLOP/s, 2039 GB/s; H100 SXM5 80GB: 989.4
# TFLOP/s without sparsity, 3.35 TB/s). Only their ratio shapes the split (which layers
# are bandwidth-bound); the bandwidth also prices optimizer_ms.
GPUS = {
    "a100": {"device": "NVIDIA A100 80GB SXM4", "flops": 312e12, "bw": 2.039e12},
    "h100": {"device": "NVIDIA H100 80GB SXM5", "flops": 989.4e12, "bw": 3.35e12},
}

# The sources, kept to about a kilobyte (the loader takes strings up to PC_TRACE_MAX_STRING,
# 16 KiB; pc-train prints the source in its configuration); traces/README.md cites in full.
DLE_RN50 = ("ResNet-50 A100 2470 img/s, batch 256: https://github.com/NVIDIA/DeepLearningExamples/blob/729963d/"
            "PyTorch/Classification/ConvNets/resnet50v1.5/README.md table DGX A100 (8x A100 80GB), 1 GPU, "
            "mixed precision")
LAMBDA_URL = "https://github.com/lambdal/deeplearning-benchmark/blob/aa5addb/pytorch/pytorch-train-throughput-fp16.csv"
LAMBDA_RATIO = (f"H100/A100 resnet50 2616/1582 img/s: {LAMBDA_URL} rows H100 80GB SXM5, A100 80GB SXM4")
TIMM_RATIO = ("vgg16/resnet50 546.06/1218.01 img/s: https://github.com/huggingface/pytorch-image-models/blob/"
              "c865028/results/benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv")
BERT_CSV = (f"{LAMBDA_URL} column bert_base_squad (SQuAD v1.1 fine-tuning, fp16, batch 320 per GPU: "
            "pytorch/scripts/config_v1/config_pytorch_80GB.sh)")

# (model, gpu) -> batch, samples/s, how the figure was found. A derived figure says so.
RN50_H100 = 2470 * 2616 / 1582
VGG_A100 = 2470 * 546.06 / 1218.01
NO_VGG = "derived, none published for VGG-16: "
FIGURES = {
    ("resnet50", "a100"): (256, 2470.0, f"published: {DLE_RN50}"),
    ("resnet50", "h100"): (256, RN50_H100, f"derived, no H100 row in that README: {DLE_RN50} x {LAMBDA_RATIO}"),
    ("vgg16", "a100"): (256, VGG_A100, f"{NO_VGG}{DLE_RN50} x {TIMM_RATIO}; batch 256 at timm's throughput"),
    ("vgg16", "h100"): (256, VGG_A100 * 2616 / 1582,
                        f"{NO_VGG}{DLE_RN50} x {TIMM_RATIO} x {LAMBDA_RATIO}; batch 256 at timm's throughput"),
    ("bert-base", "a100"): (320, 443.0, f"published: 443 sequences/s, row 'A100 80GB SXM4' of {BERT_CSV}"),
    ("bert-base", "h100"): (320, 812.0, f"published: 812 sequences/s, row 'H100 80GB SXM5' of {BERT_CSV}"),
}
BERT_SEQ = 384  # SQuAD v1.1's max_seq_length in the benchmark that times BERT-base
IMAGE = 224
FLOOR_MS = 0.005  # each layer's forward floor: a few kernel launches at least
OPT_BYTES = 16  # optimizer bytes per element: fp32 parameter, gradient, momentum read, 2 written
RULE = ("split: layer = module with parameters + the parameter-free ones after it; "
        "forward cost max(FLOPs/P, bytes/B) at fp16, P, B = the GPU's FP16 tensor peak, HBM bandwidth; "
        "optimizer_ms = parameters x 16 B / B; forward total (iteration - optimizer_ms)/3: "
        f"{FLOOR_MS} ms per layer + its cost share; backward = 2 x forward")
MAX_STRING = 16384  # the loader's longest string: PC_TRACE_MAX_STRING (include/pipecompress/pc_trace.h)


class TraceError(Exception):
    """A one-line error for the user (exit status in .status)."""

    def __init__(self, msg, status=1):
        super().__init__(msg)
        self.status = status


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line: 'make-trace.py: PROBLEM', exit 2."""

    def error(self, message):
        print(f"{PROG}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def whole(least):
    """An argparse type: a whole number of at least LEAST (1: positive, 0: not negative)."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number")
        if v < least:
            raise argparse.ArgumentTypeError(f"'{text}' must be at least 1" if least == 1
                                             else f"'{text}' must not be negative")
        return v
    return parse


positive, nonneg = whole(1), whole(0)


def import_torch():
    try:
        import torch
    except ImportError:
        raise TraceError("PyTorch is not installed for this python (the shapes come from torch models)")
    return torch


# ---- the models -------------------------------------------------------------------------

def bert_modules(torch):
    """BERT-base (bert-base-uncased's configuration) with the SQuAD head, named as Hugging Face
    names its modules; the attention's products and softmax are one parameter-free leaf
    (AttentionCore) so that hooks see them."""
    nn = torch.nn
    H, HEADS, FF, LAYERS, VOCAB, POS, TYPES, P = 768, 12, 3072, 12, 30522, 512, 2, 0.1

    class AttentionCore(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = HEADS
            self.dropout = P

        def forward(self, q, k, v):  # (B, S, H) each
            b, s, h = q.shape
            d = h // self.heads
            q, k, v = (t.view(b, s, self.heads, d).transpose(1, 2) for t in (q, k, v))
            probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
            probs = nn.functional.dropout(probs, self.dropout, self.training)
            return (probs @ v).transpose(1, 2).reshape(b, s, h)

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
            self.core = AttentionCore()

        def forward(self, x):
            return self.core(self.query(x), self.key(x), self.value(x))

    class Output(nn.Module):  # dense, dropout, residual add, LayerNorm
        def __init__(self, n_in):
            super().__init__()
            self.dense, self.dropout = nn.Linear(n_in, H), nn.Dropout(P)
            self.LayerNorm = nn.LayerNorm(H, eps=1e-12)

        def forward(self, x, residual):
            return self.LayerNorm(self.dropout(self.dense(x)) + residual)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            setattr(self, "self", SelfAttention())
            self.output = Output(H)

        def forward(self, x):
            return self.output(getattr(self, "self")(x), x)

    class Intermediate(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense, self.act = nn.Linear(H, FF), nn.GELU()

        def forward(self, x):
            return self.act(self.dense(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention, self.intermediate, self.output = Attention(), Intermediate(), Output(FF)

        def forward(self, x):
            a = self.attention(x)
            return self.output(self.intermediate(a), a)

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(VOCAB, H)
            self.position_embeddings = nn.Embedding(POS, H)
            self.token_type_embeddings = nn.Embedding(TYPES, H)
            self.LayerNorm, self.dropout = nn.LayerNorm(H, eps=1e-12), nn.Dropout(P)

        def forward(self, ids, types):
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            e = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(types)
            return self.dropout(self.LayerNorm(e))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.ModuleList(Layer() for _ in range(LAYERS))

        def forward(self, x):
            for layer in self.layer:
                x = layer(x)
            return x

    class Pooler(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense, self.activation = nn.Linear(H, H), nn.Tanh()

        def forward(self, x):
            return self.activation(self.dense(x[:, 0]))

    class BertQA(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings, self.encoder, self.pooler = Embeddings(), Encoder(), Pooler()
            self.qa_outputs = nn.Linear(H, 2)

        def forward(self, ids, types):
            x = self.encoder(self.embeddings(ids, types))
            return self.qa_outputs(x), self.pooler(x)

    return BertQA()


def tiny_model(torch):
    """A small CNN for tests: conv 3->8 3x3, ReLU, 2x2 max-pool, linear to 10 (32x32 input)."""
    nn = torch.nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.relu, self.pool = nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)
            self.fc = nn.Linear(8 * 16 * 16, 10)

        def forward(self, x):
            return self.fc(self.pool(self.relu(self.conv1(x))).flatten(1))

    return Tiny()


def build(torch, name):
    """(model, kind) for NAME: kind 'image' (input N x 3 x S x S, 1000 or 10 classes) or 'bert'."""
    if name == "bert-base":
        return bert_modules(torch), "bert"
    if name == "tiny":
        return tiny_model(torch), "image"
    try:
        import torchvision
    except ImportError:
        raise TraceError(f"--model {name} needs torchvision (apt install python3-torchvision, "
                         "or pip install torchvision)")
    fn = getattr(torchvision.models, name, None)
    if fn is None or not callable(fn) or name.startswith("_") or name[0].isupper():
        raise TraceError(f"--model {name}: not a torchvision model, 'bert-base' or 'tiny'", 2)
    torch.manual_seed(0)
    try:
        return fn(), "image"
    except TypeError as e:
        raise TraceError(f"--model {name}: torchvision could not build it ({e})", 2)


def leaves(model):
    """(name, module) of every module without children, in registration order."""
    out = []
    for name, m in model.named_modules():
        if next(m.children(), None) is None:
            out.append((name or "model", m))
    return out


def own_params(m):
    return [p for p in m.parameters(recurse=False) if p.requires_grad]


# ---- published: the cost model ------------------------------------------------------------

def call_cost(torch, m, inputs, output):
    """(FLOPs, activation bytes) of one forward call of leaf M at batch 1, from its shapes."""
    nn = torch.nn
    ins = [t for t in inputs if torch.is_tensor(t)]
    outs = output if isinstance(output, (tuple, list)) else (output,)
    n_in = sum(t.numel() for t in ins if t.is_floating_point())
    n_out = sum(t.numel() for t in outs if torch.is_tensor(t))
    act = 2 * (n_in + n_out)
    if isinstance(m, nn.Conv2d):
        kh, kw = m.kernel_size
        return 2 * n_out * (m.in_channels // m.groups) * kh * kw, act
    if isinstance(m, nn.Linear):
        return 2 * (n_out // m.out_features) * m.in_features * m.out_features, act
    if isinstance(m, nn.Embedding):
        return 0, 2 * 2 * n_out  # rows gathered and written
    if type(m).__name__ == "AttentionCore":
        b, s, h = ins[0].shape
        # QK^T and probs @ V; six passes over the (heads, S, S) scores: written, softmax read
        # and written, dropout read and written, read by the second product.
        return 4 * b * s * s * h, act + 2 * 6 * b * m.heads * s * s
    if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
        return 8 * n_out, act
    return n_out, act


def layer_costs(torch, name):
    """[(layer name, [param shapes], FLOPs per sample, activation bytes per sample, weight
    bytes)] of model NAME, parameter-free leaves folded into the layer with parameters that
    precedes them (or, before any, the one that follows)."""
    model, kind = build(torch, name)
    model.eval()
    calls = []
    hooks = []
    for lname, m in leaves(model):
        def hook(mod, inputs, output, lname=lname):
            calls.append((lname, mod) + call_cost(torch, mod, inputs, output))
        hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        if kind == "bert":
            ids = torch.zeros(1, BERT_SEQ, dtype=torch.long)
            model(ids, torch.zeros_like(ids))
        else:
            model(torch.zeros(1, 3, IMAGE, IMAGE))
    for h in hooks:
        h.remove()
    layers = []
    pending = [0, 0]  # parameter-free cost seen before the first layer with parameters
    seen = set()
    for lname, mod, flops, act in calls:
        params = own_params(mod)
        if params and lname not in seen:
            seen.add(lname)
            w = 0 if isinstance(mod, torch.nn.Embedding) else 2 * sum(p.numel() for p in params)
            layers.append([lname, [list(p.shape) for p in params], flops + pending[0], act + pending[1], w])
            pending = [0, 0]
        elif layers:
            layers[-1][2] += flops
            layers[-1][3] += act
        else:
            pending[0] += flops
            pending[1] += act
    missing = sum(p.numel() for p in model.parameters()) - sum(math.prod(s) for l in layers for s in l[1])
    if missing:
        raise TraceError(f"--model {name}: {missing} parameters belong to modules the forward never called")
    return layers


def fmt_ms(x):
    return f"{x:.4f}"


def published(torch, a, layers=None):
    """The trace of (a.model, a.gpu) at a.batch (None: the source's); LAYERS: layer_costs of
    the model when already computed."""
    batch0, rate, how = FIGURES[(a.model, a.gpu)]
    gpu = GPUS[a.gpu]
    batch = a.batch or batch0
    iteration = batch0 / rate * 1e3 * batch / batch0
    layers = layers or layer_costs(torch, a.model)
    nparams = sum(math.prod(s) for l in layers for s in l[1])
    opt = nparams * OPT_BYTES / gpu["bw"] * 1e3
    cost = [max(batch * l[2] / gpu["flops"], (batch * l[3] + l[4]) / gpu["bw"]) for l in layers]
    fwd_total = (iteration - opt) / 3
    spare = fwd_total - FLOOR_MS * len(layers)
    if spare <= 0:
        raise TraceError(f"--batch {batch}: the iteration ({iteration:.3f} ms) is too short for "
                         f"{len(layers)} layers of at least {FLOOR_MS} ms forward")
    total_cost = sum(cost)
    fwd = [FLOOR_MS + spare * c / total_cost for c in cost]
    scaled = "" if batch == batch0 else f", scaled to batch {batch} (same throughput)"
    seq = f", sequence length {BERT_SEQ}" if a.model == "bert-base" else ""
    source = f"iteration {iteration:.3f} ms = batch {batch0} / {rate:.1f} samples/s{seq}{scaled}; {how}; {RULE}"
    return {"model": a.model, "device": gpu["device"], "batch": batch, "precision": "amp", "source": source,
            "optimizer_ms": opt, "layers": [(l[0], l[1], f, 2 * f) for l, f in zip(layers, fwd)]}


# ---- record: hooks and timers ---------------------------------------------------------------

class Clock:
    """Time stamps: perf_counter on the CPU; CUDA events (in stream order) on a GPU."""

    def __init__(self, torch, cuda):
        self.torch, self.cuda = torch, cuda

    def stamp(self):
        if not self.cuda:
            return time.perf_counter()
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def ms(self, t0, t1):
        return t0.elapsed_time(t1) if self.cuda else (t1 - t0) * 1e3


class Recorder:
    """Hooks on every leaf module. While a phase is open, each hook appends (module name,
    stamp): a forward hook when the module's forward ends; a parameter's gradient hook when
    that gradient is ready; for a parameter-free module, a hook on each input that needs a
    gradient, when that input's gradient is ready (the end of the module's backward), or,
    for one that works in place (an activation with inplace=True: its input is its output,
    so a hook on it would fire at the start of its backward), a hook on its output's
    autograd node, which fires when that node's backward has run. The model is left as it
    is: making the activations out of place cost ResNet-18's backward 3 to 7 % on this CPU
    (doc/replay.md, validation (b))."""

    def __init__(self, model, clock):
        self.clock = clock
        self.marks = None  # the open phase's [(name or None, stamp)], or None
        self.order = []
        for name, m in leaves(model):
            m.register_forward_hook(self._forward(name, not own_params(m),
                                                  bool(getattr(m, "inplace", False))))
            for p in own_params(m):
                p.register_hook(self._grad(name))

    def _mark(self, name):
        if self.marks is not None:
            self.marks.append((name, self.clock.stamp()))

    def _forward(self, name, paramless, inplace):
        def hook(mod, inputs, output):
            if name not in self.order:
                self.order.append(name)
            self._mark(name)
            if not paramless or self.marks is None:
                return
            node = getattr(output, "grad_fn", None)
            if inplace and node is not None:
                node.register_hook(self._node(name))
                return
            for t in inputs:
                if hasattr(t, "requires_grad") and t.requires_grad:
                    t.register_hook(self._grad(name))
        return hook

    def _node(self, name):
        def hook(_grad_inputs, _grad_outputs):
            self._mark(name)
        return hook

    def _grad(self, name):
        def hook(_grad):
            self._mark(name)
        return hook

    def open(self):
        self.marks = [(None, self.clock.stamp())]

    def close(self):
        """Ends the phase: [(name, stamp)], the first entry the phase's start and the last
        (name None) its end."""
        self.marks.append((None, self.clock.stamp()))
        marks, self.marks = self.marks, None
        return marks


def split(clock, marks, into):
    """Adds each interval between consecutive stamps of MARKS to the module whose event ends
    it (the closing interval to the last module seen)."""
    last = None
    for (_, t0), (name, t1) in zip(marks, marks[1:]):
        who = name if name is not None else last
        if who is not None:
            into[who] = into.get(who, 0.0) + clock.ms(t0, t1)
            last = who


def device_name(torch, cuda):
    if cuda:
        return torch.cuda.get_device_name(0)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"CPU {model} ({torch.get_num_threads()} threads)"


def make_inputs(torch, kind, model, a, dev):
    g = torch.Generator().manual_seed(a.seed)
    if kind == "bert":
        ids = torch.randint(0, 30522, (a.batch, a.seq), generator=g)
        types = torch.zeros_like(ids)
        pos = torch.randint(0, a.seq, (2, a.batch), generator=g)
        return (ids.to(dev), types.to(dev)), pos.to(dev)
    size = a.image_size or (32 if a.model == "tiny" else IMAGE)
    x = torch.randn(a.batch, 3, size, size, generator=g)
    classes = 10 if a.model == "tiny" else 1000
    return (x.to(dev),), torch.randint(0, classes, (a.batch,), generator=g).to(dev)


def loss_of(torch, kind, out, target):
    f = torch.nn.functional
    if kind == "bert":
        logits, pooled = out
        start, end = logits.float().unbind(-1)
        # SQuAD's loss; the pooler is unused there, kept in the graph (times 0) so that
        # every parameter of the trace gets its gradient event.
        return (f.cross_entropy(start, target[0]) + f.cross_entropy(end, target[1])) / 2 + 0.0 * pooled.float().sum()
    return f.cross_entropy(out.float(), target)


def record(torch, a):
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise TraceError("--device cuda: torch sees no CUDA device")
    precision = a.precision or ("amp" if cuda else "fp32")
    if precision == "amp" and not cuda:
        raise TraceError("--precision amp needs --device cuda (autocast to fp16 on the GPU)", 2)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, kind = build(torch, a.model)
    if kind == "bert" and a.seq > 512:
        raise TraceError(f"--seq {a.seq}: BERT-base has 512 positions", 2)
    dev = torch.device("cuda" if cuda else "cpu")
    model.to(dev).train()
    clock = Clock(torch, cuda)
    rec = Recorder(model, clock)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9)
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):  # torch >= 2.3; torch.cuda.amp's is deprecated there
        scaler = amp.GradScaler("cuda", enabled=precision == "amp")
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=precision == "amp")
    inputs, target = make_inputs(torch, kind, model, a, dev)
    fwd, bwd, step, total = {}, {}, [], []
    for it in range(a.warmup + a.iters):
        timed = it >= a.warmup
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if timed:
            rec.open()
        with torch.autocast("cuda", dtype=torch.float16) if precision == "amp" else contextlib.nullcontext():
            loss = loss_of(torch, kind, model(*inputs), target)
        fmarks = rec.close() if timed else None
        if timed:
            rec.open()
        scaler.scale(loss).backward()
        bmarks = rec.close() if timed else None
        s0 = clock.stamp()
        scaler.step(opt)
        scaler.update()
        s1 = clock.stamp()
        if cuda:
            torch.cuda.synchronize()
        if timed:
            split(clock, fmarks, fwd)
            split(clock, bmarks, bwd)
            step.append(clock.ms(s0, s1))
            total.append(clock.ms(fmarks[0][1], s1))
    if not math.isfinite(loss.item()):
        raise TraceError(f"--model {a.model}: the loss is not finite ({loss.item()})")
    mods = dict(leaves(model))
    n = a.iters
    layers = [(name, [list(p.shape) for p in own_params(mods[name])], fwd.get(name, 0.0) / n,
               bwd.get(name, 0.0) / n) for name in rec.order]
    covered = {id(p) for name in rec.order for p in own_params(mods[name])}
    unused = [p for p in model.parameters() if p.requires_grad and id(p) not in covered]
    if unused:
        raise TraceError(f"--model {a.model}: {len(unused)} parameter tensors belong to modules the forward never called")
    it_ms = sum(total) / n
    size = f", sequence length {a.seq}" if kind == "bert" else f", image {inputs[0].shape[-1]}x{inputs[0].shape[-1]}"
    source = (f"recorded by scripts/bench/make-trace.py record --model {a.model} --batch {a.batch} --device "
              f"{a.device} --iters {a.iters} --warmup {a.warmup} on {device_name(torch, cuda)}, torch "
              f"{torch.__version__}, {precision}{size}, {time.strftime('%Y-%m-%d', time.gmtime())}: mean of {n} "
              f"iterations ({it_ms:.3f} ms each with the step); per-module times from hooks "
              f"({'CUDA events' if cuda else 'time.perf_counter'}), each phase cut at the hooks' events (forward: "
              "the previous leaf's end to its own; backward: the previous gradient event to its own, its "
              "parameters' gradients or, parameter-free, its input's, or for an in-place activation its "
              "node's backward done); optimizer_ms: the SGD momentum step")
    print(f"{PROG}: {a.model} batch {a.batch} on {a.device}: iteration {it_ms:.3f} ms (forward "
          f"{sum(fwd.values()) / n:.3f}, backward {sum(bwd.values()) / n:.3f}, optimizer {sum(step) / n:.3f}); "
          f"{len(layers)} layers", file=sys.stderr)
    return {"model": a.model, "device": device_name(torch, cuda), "batch": a.batch, "precision": precision,
            "source": source, "optimizer_ms": sum(step) / n, "layers": layers}


# ---- output --------------------------------------------------------------------------------

def render(t):
    """The trace as JSON text: the header, then one layer a line (deterministic)."""
    for k in ("model", "device", "precision", "source"):
        if len(t[k].encode()) > MAX_STRING:
            raise TraceError(f"{k} is {len(t[k].encode())} bytes, more than the loader's {MAX_STRING}")
    head = ", ".join(f"{json.dumps(k)}: {json.dumps(t[k])}" for k in ("model", "device", "batch", "precision"))
    lines = ["{" + head + ",", f" \"source\": {json.dumps(t['source'])},",
             f" \"optimizer_ms\": {fmt_ms(t['optimizer_ms'])},", " \"layers\": ["]
    rows = []
    for name, params, f, b in t["layers"]:
        rows.append(f"  {{\"name\": {json.dumps(name)}, \"params\": {json.dumps(params)}, "
                    f"\"forward_ms\": {fmt_ms(f)}, \"backward_ms\": {fmt_ms(b)}}}")
    return "\n".join(lines) + "\n" + ",\n".join(rows) + "\n ]}\n"


def write(text, path):
    if path in (None, "-"):
        sys.stdout.write(text)
        return
    d = os.path.dirname(path) or "."
    if not os.path.isdir(d):
        raise TraceError(f"--out {path}: folder '{d}' does not exist", 2)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        raise TraceError(f"--out {path}: {e.strerror}")


def publish_all(torch, folder):
    """Every (model, GPU) of FIGURES at the source's batch into FOLDER/MODEL-GPU-amp.json
    (traces/ as shipped), one cost pass per model."""
    if not os.path.isdir(folder):
        raise TraceError(f"--all {folder}: no such folder", 2)
    costs = {}
    for model, gpu in sorted(FIGURES):
        if model not in costs:
            costs[model] = layer_costs(torch, model)
        a = argparse.Namespace(model=model, gpu=gpu, batch=None)
        text = render(published(torch, a, costs[model]))
        json.loads(text)
        write(text, os.path.join(folder, f"{model}-{gpu}-amp.json"))


def parse(argv):
    ap = Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", parser_class=Parser)
    p = sub.add_parser("published", help="a trace from a published figure split across the real model's layers")
    p.add_argument("--model", choices=sorted({m for m, _ in FIGURES}))
    p.add_argument("--gpu", choices=sorted(GPUS))
    p.add_argument("--batch", type=positive, help="the trace's batch (default: the source's)")
    p.add_argument("--out", help="the trace file (default: standard output)")
    p.add_argument("--all", metavar="DIR", help="write every model on every GPU into DIR as traces/ holds them")
    r = sub.add_parser("record", help="a trace measured with hooks on this machine")
    r.add_argument("--model", required=True, help="a torchvision model, bert-base or tiny")
    r.add_argument("--batch", type=positive, required=True)
    r.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    r.add_argument("--iters", type=positive, default=10)
    r.add_argument("--warmup", type=nonneg, default=3)
    r.add_argument("--precision", choices=["fp32", "amp"], help="default: amp on cuda, fp32 on cpu")
    r.add_argument("--image-size", type=positive, help="image side (default 224; tiny: 32)")
    r.add_argument("--seq", type=positive, default=128, help="bert-base's sequence length")
    r.add_argument("--threads", type=positive, help="torch's CPU threads")
    r.add_argument("--seed", type=nonneg, default=1)
    r.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd is None:
        ap.error("say 'published' or 'record'")
    if a.cmd == "published":
        if a.all and (a.model or a.gpu or a.batch or a.out):
            ap.error("--all DIR takes no --model, --gpu, --batch or --out")
        if not a.all and not (a.model and a.gpu):
            ap.error("published needs --model and --gpu (or --all DIR)")
    return a


def main(argv):
    a = parse(argv)
    try:
        if a.out not in (None, "-") and not os.path.isdir(os.path.dirname(a.out) or "."):
            raise TraceError(f"--out {a.out}: folder '{os.path.dirname(a.out)}' does not exist", 2)
        torch = import_torch()
        if a.cmd == "published" and a.all:
            publish_all(torch, a.all)
            return 0
        trace = published(torch, a) if a.cmd == "published" else record(torch, a)
        text = render(trace)
        json.loads(text)  # what we write is JSON
        write(text, a.out)
    except TraceError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return e.status
    except RuntimeError as e:  # torch's own (out of memory, shapes)
        print(f"{PROG}: torch: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
