#!/usr/bin/python3
"""Train a PyTorch model on Fashion-MNIST through PipeCompress (or, for comparison, through
torch's DistributedDataParallel), data-parallel under mpirun:

    mpirun -np 3 python3 apps/examples/torch_train.py --epochs 3 --compress none
    mpirun -np 3 python3 apps/examples/torch_train.py --arch lstm --compress topk:ratio=0.01
    mpirun -np 3 python3 apps/examples/torch_train.py --arch resnet18 --compress dgc:ratio=0.001
    mpirun -np 3 python3 apps/examples/torch_train.py --arch vit --mode auto --servers 1
    mpirun -np 2 python3 apps/examples/torch_train.py --backend ddp --epochs 3
    mpirun -np 2 python3 apps/examples/torch_train.py --arch vgg16 --backend ddp \
        --ddp-hook powersgd --powersgd-rank 4

Its own flags are below (--help lists them, then PipeCompress's); every other flag is
PipeCompress's, as on pc-train's command line (--servers, --compress, --pipeline, --lr,
--momentum, --iters, --metrics, --checkpoint-dir, --resume, ...). The data, their order and
each worker's shard are pc-train's (pipecompress.data), and the default learning-rate
schedule is cosine over --epochs as in pc-train, so `--arch cnn` trains pc-train's cnn
(same layers, same initialisation scheme) on the same samples in the same order.

--mode auto: every rank builds the model and profiles it on one worker's batch (pc.probe),
which then chooses the mode as pc-train's --mode auto does.

--train-samples N trains on the training set's first N samples (shorter epochs for the
big models on a small machine; the whole test set is evaluated); --test-samples N
evaluates on the test set's first N samples only (a quicker accuracy, for trials: the
whole set, 10 000 images, costs more than a short run's training).

--arch (parameters counted by the script, which prints them at the start):
  cnn       pc-train's cnn (3,274,634 parameters)
  lstm      the image rows through a 2-layer LSTM, LayerNorm, a linear head (214,538)
  resnet18, resnet50, vgg16
            torchvision's (Debian's python3-torchvision 0.14), randomly initialised by
            torchvision's own scheme (weights=None: nothing is downloaded), adapted to
            Fashion-MNIST's 1x28x28 images and 10 classes the way CIFAR users adapt them:
            the input zero-padded to 32x32 (F.pad, 2 pixels each side); the ResNets' stem
            a 3x3 stride-1 convolution from 1 channel and no max-pool (the 32x32 map
            reaches layer4 at 4x4), fc to 10 classes, BatchNorm kept; VGG-16's first
            convolution from 1 channel and, since its 5 max-pools leave a 1x1 map at
            32x32, no adaptive average pool (torchvision's would copy the 1x1 map to 7x7)
            and the classifier Linear(512, 4096)-ReLU-Dropout-Linear(4096, 4096)-ReLU-
            Dropout-Linear(4096, 10). Parameters: resnet18 11,172,810, resnet50
            23,519,690, vgg16 33,637,066.
  vit       a small Vision Transformer from torch.nn.TransformerEncoder: the padded 32x32
            input cut into 4x4 patches (a 4x4 stride-4 convolution: 64 tokens of width
            128), a learned class token, a learned position embedding (65 positions), 4
            pre-LayerNorm encoder layers (4 heads, feed-forward 256, GELU, batch_first),
            a final LayerNorm and a linear head on the class token (542,090).
  replay:PATH
            a GPU's compute replayed from the trace at PATH (doc/replay.md): the trace's
            parameter shapes, each layer a sleep of its forward and backward times x
            --dilate K, gradients drawn from a heavy-tailed pool (torch_replay.py beside
            this file says how); no data are read, --iters sets the length (default 50).
            Through the binding the gradients' copy to the host is modelled (--pcie-gbps);
            through DDP the hooks' CPU work that a GPU would do is measured and the
            iteration also reported without it (the peer's best case); --backend local is
            the compute-only limit; --replay-times FILE writes every gradient's ready time.
--dropout applies where the model has dropout: cnn (before the last layer, default 0.5),
vgg16 (the classifier's two, 0.5), vit (the encoder's, 0.1); elsewhere it is refused.

--optimizer sgd|adamw|adadelta (default sgd), --lr-warmup N, --clip-grad-norm X and --update
servers|workers are spelt as the runtime's flags of the same meaning and read from them:
  sgd, without --clip-grad-norm or --update workers: the runtime's own SGD on the servers
            (--lr, --momentum, --weight-decay, --nesterov) under pc-train's schedule
            (--lr-warmup N ramps (t + 1) / N, then the cosine over the whole run), as
            before these flags existed; through DDP, torch.optim.SGD under the same rates.
  adamw     torch.optim.AdamW (the runtime's --lr, --weight-decay, --betas, --eps,
            --amsgrad) with timm's no-decay group (biases and one-dimensional parameters,
            the norm weights, at weight decay 0), --lr-warmup N iterations of
            torch.optim.lr_scheduler.LinearLR from 1 % of --lr, then CosineAnnealingLR over
            the iterations left (SequentialLR; --lr-schedule constant: no cosine), on every
            backend;
  adadelta  torch.optim.Adadelta (--lr, --weight-decay; torch's rho and eps), one group,
            stepped on every worker (--update workers; the servers cannot run it), as
            pytorch/examples' MNIST does with --lr 1 --lr-schedule step --lr-gamma 0.7;
  --lr-schedule step, on the torch path: the rate times --lr-gamma (default 0.1) at every
  epoch's end (torch.optim.lr_scheduler.StepLR, after any warm-up; --lr-step refused);
  with adamw, --update workers or --clip-grad-norm, the pipecompress backend steps that
  torch optimizer (sgd: torch.optim.SGD under pc-train's schedule, a LambdaLR) through
  pc.DistributedOptimizer, on the servers (--update servers, the default) or on every
  worker (--update workers); --clip-grad-norm X clips the averaged gradient by its global
  norm to X (opt.clip_grad_norm_; DDP and local: torch.nn.utils.clip_grad_norm_ after
  backward). --update is the pipecompress backend's alone; --resume is refused with
  --update workers (the torch optimizer's state is not saved).
--backend local trains the model in one process with torch.optim.SGD (or AdamW), no
communication (the benchmarks' compute-only limit); it reads the flags --backend ddp reads.
--backend ddp trains the same model on the same shards with torch.optim.SGD (or AdamW)
and DistributedDataParallel over gloo (every rank a worker, no server), for benchmarks; it
reads --lr, --momentum, --weight-decay, --seed, --iters, --lr-schedule
constant|cosine|step, --lr-step, --lr-gamma, --optimizer, --lr-warmup, --clip-grad-norm
(AdamW with torch's default betas and eps).
--ddp-hook compresses DDP's allreduce with one of torch's communication hooks
(torch.distributed.algorithms.ddp_comm_hooks): fp16 (default_hooks.fp16_compress_hook),
bf16 (bf16_compress_hook), powersgd (powerSGD_hook: rank --powersgd-rank, plain allreduce
for the first --powersgd-start iterations, error feedback and warm start on).
"""
import argparse
import gc
import json
import math
import os
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..",
                                "python"))
import pipecompress as pc  # noqa: E402
from torch_replay import PCIE_GBPS  # noqa: E402  (beside this file: --arch replay)

# torch 1.13's SequentialLR hands its first scheduler an epoch and warns about it, and a
# scheduler advanced for a resumed run warns that no step came before: neither is ours.
warnings.filterwarnings("ignore", message="The epoch parameter")
warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()`")


class Cnn(nn.Module):
    """pc-train's cnn: conv 5x5 32, pool, conv 5x5 64, pool, fc 1024, dropout, fc."""

    def __init__(self, classes=10, dropout=0.5):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 1024)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(1024, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


class Lstm(nn.Module):
    """A different architecture: the image's 28 rows as a sequence through a 2-layer LSTM,
    LayerNorm on the last state, a linear classifier."""

    def __init__(self, classes=10, hidden=128):
        super().__init__()
        self.lstm = nn.LSTM(28, hidden, num_layers=2, batch_first=True)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(x.flatten(1, 2).view(x.shape[0], 28, 28))
        return self.head(self.norm(out[:, -1]))


class Pad32(nn.Module):
    """Fashion-MNIST's 28x28 images zero-padded to the 32x32 that the CIFAR-style models
    are shaped for (2 pixels each side), then the model."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(F.pad(x, (2, 2, 2, 2)))


class Vit(nn.Module):
    """A small ViT on the padded 32x32 input: 4x4 patches (64 tokens), a class token, a
    learned position embedding, torch.nn.TransformerEncoder (pre-LayerNorm, GELU,
    batch_first), a final LayerNorm, a linear head on the class token."""

    def __init__(self, classes=10, dropout=0.1, width=128, heads=4, layers=4, ff=256,
                 patch=4, size=32):
        super().__init__()
        tokens = (size // patch) ** 2
        self.patch = nn.Conv2d(1, width, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.empty(1, tokens + 1, width))
        nn.init.trunc_normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(width, heads, ff, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        # enable_nested_tensor only matters for padded batches in eval; off, as pre-LN
        # layers cannot use it anyway.
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(width),
                                             enable_nested_tensor=False)
        # TransformerEncoder deep-copies one layer: every layer would start identical.
        for lay in self.encoder.layers:
            lay.self_attn._reset_parameters()
            lay.linear1.reset_parameters()
            lay.linear2.reset_parameters()
        self.head = nn.Linear(width, classes)

    def forward(self, x):  # x: (B, 1, 32, 32)
        t = self.patch(x).flatten(2).transpose(1, 2)  # (B, 64, width)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], 1) + self.pos
        return self.head(self.encoder(t)[:, 0])  # (B, classes)


class _Archs(list):
    """The --arch choices: the names, and any replay:PATH (argparse's "invalid choice"
    lists the names and replay:PATH)."""

    def __contains__(self, v):
        return list.__contains__(self, v) or (isinstance(v, str) and v.startswith("replay:"))


ARCHS = _Archs(["cnn", "lstm", "resnet18", "resnet50", "vgg16", "vit"])
ARCH_CHOICES = _Archs(ARCHS + ["replay:PATH"])
TORCHVISION = {"resnet18", "resnet50", "vgg16"}
DROPOUT = {"cnn": 0.5, "vgg16": 0.5, "vit": 0.1}  # the archs with dropout, their default


def torchvision_model(arch, classes=10):
    """torchvision's resnet18/resnet50/vgg16, random weights, adapted to 1x32x32 input (the
    module docstring says how). A replaced layer gets torchvision's initialisation for its
    kind: He-normal (fan_out) convolutions, N(0, 0.01) linear layers, zero biases."""
    import torchvision

    if arch.startswith("resnet"):
        net = getattr(torchvision.models, arch)(weights=None, num_classes=classes)
        net.conv1 = nn.Conv2d(1, 64, 3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
        net.maxpool = nn.Identity()
        return net
    net = torchvision.models.vgg16(weights=None, num_classes=classes)
    net.features[0] = nn.Conv2d(1, 64, 3, padding=1)
    nn.init.kaiming_normal_(net.features[0].weight, mode="fan_out", nonlinearity="relu")
    nn.init.zeros_(net.features[0].bias)
    net.avgpool = nn.Identity()  # (B, 512, 1, 1) after 5 pools; flattened to 512
    net.classifier[0] = nn.Linear(512, 4096)
    nn.init.normal_(net.classifier[0].weight, 0, 0.01)
    nn.init.zeros_(net.classifier[0].bias)
    return net


def build(arch, seed, dropout):
    """The model, seeded: every worker builds the same one (worker 0's is used in any case).
    The cnn takes pc-train's initialisation: He-uniform weights, Xavier-uniform for the
    last layer, zero biases; the LSTM and the ViT keep torch's own, the torchvision models
    torchvision's. dropout: None for the arch's default (DROPOUT)."""
    torch.manual_seed(seed)
    if dropout is None:
        dropout = DROPOUT.get(arch)
    if arch == "lstm":
        return Lstm()
    if arch in TORCHVISION:
        net = torchvision_model(arch)
        if arch == "vgg16":
            for m in net.classifier:
                if isinstance(m, nn.Dropout):
                    m.p = dropout
        return Pad32(net)
    if arch == "vit":
        return Pad32(Vit(dropout=dropout))
    model = Cnn(dropout=dropout)
    layers = [model.conv1, model.conv2, model.fc1, model.fc2]
    with torch.no_grad():
        for i, layer in enumerate(layers):
            fan_in, fan_out = layer.weight[0].numel(), layer.weight.shape[0]
            bound = (math.sqrt(6.0 / (fan_in + fan_out)) if i == len(layers) - 1
                     else math.sqrt(6.0 / fan_in))
            layer.weight.uniform_(-bound, bound)
            layer.bias.zero_()
    return model


def evaluate(model, images, labels, arch):
    # Batches of 1000 for the small models; 100 for the others (a resnet50 batch of 1000
    # at 32x32 holds gigabytes of activations).
    batch = 1000 if arch in ("cnn", "lstm") else 100
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(labels), batch):
            out = model(images[i:i + batch])
            loss += F.cross_entropy(out, labels[i:i + batch], reduction="sum").item()
            correct += (out.argmax(1) == labels[i:i + batch]).sum().item()
    model.train()
    return correct / len(labels), loss / len(labels)


def load(args, train, in_job=False):
    """The training set (its first --train-samples samples if given) or the test set (its
    first --test-samples). A
    file that cannot be read is said in one line: before pc.init by the first rank, every
    rank exiting 1 (as usage_error; DDP's rank 0 reading the test set likewise, mpirun
    then ends the others); in_job (rank 0 after pc.init) as pc.Error, whose hook says it
    and ends the job."""
    try:
        if args.data == "synthetic":
            n = args.synthetic_samples if train else max(100, args.synthetic_samples // 6)
            images, labels = pc.data.synthetic(n, args.data_seed, train=train)
        else:
            images, labels = pc.data.fashion_mnist(args.data, train=train)
    except pc.data.DataError as e:
        if in_job:
            raise pc.Error(f"--data: {e}") from None
        usage_error(f"--data: {e}", status=1)
    k, which = (args.train_samples, "training") if train else (args.test_samples, "test")
    if k is None:
        return images, labels
    if not 1 <= k <= len(labels):
        usage_error(f"--{which}-samples: {k} is not in 1..{len(labels)} (the {which} set's size)")
    return images[:k], labels[:k]


# usage_error's wait on the other ranks: long enough for the first rank, slowed by a loaded
# machine's torch import, to print the same error and end the job.
PEER_GRACE_S = 20


def usage_error(msg, status=2):
    """A bad flag (or data file) before MPI started: one line, status 2 (or status). The
    first rank prints it and exits at once. The others wait PEER_GRACE_S first: mpirun
    aborts the job at the first non-zero exit, and a rank that exited before the first
    printed would take its line with it (a CI run lost one so). A rank that outlives the
    wait met an error the first did not (a file missing on its node): it prints its own
    line, naming itself."""
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))
    if rank != "0":
        time.sleep(PEER_GRACE_S)
        msg = f"rank {rank}: {msg}"
    sys.stderr.write(f"torch_train.py: {msg}\n")
    sys.stderr.flush()
    sys.exit(status)


class Parser(argparse.ArgumentParser):
    """argparse with usage_error's one line for a bad flag (not the usage block per rank)."""

    def error(self, message):
        usage_error(message)


def check_arch_flags(args):
    """Flags that the chosen --arch and --backend would ignore are refused, not dropped;
    a torchvision model without torchvision is named with the package to install."""
    if args.test_samples is not None and args.test_samples < 1:
        usage_error(f"--test-samples: {args.test_samples} is not a positive integer")
    if args.dropout is not None:
        if args.arch not in DROPOUT:
            usage_error(f"--dropout: --arch {args.arch} has no dropout (cnn, vgg16 and vit do)")
        if not 0 <= args.dropout < 1:
            usage_error(f"--dropout: {args.dropout} is not in [0, 1)")
    if args.backend != "ddp" and args.ddp_hook is not None:
        usage_error("--ddp-hook: only with --backend ddp (PipeCompress compresses with "
                    "--compress)")
    if args.backend != "ddp" and args.ddp_port is not None:
        usage_error("--ddp-port: only with --backend ddp")
    if args.ddp_hook != "powersgd":
        for flag, v in (("--powersgd-rank", args.powersgd_rank),
                        ("--powersgd-start", args.powersgd_start)):
            if v is not None:
                usage_error(f"{flag}: only with --backend ddp --ddp-hook powersgd")
    if args.powersgd_q is not None:
        if args.backend == "local" or (args.backend == "ddp" and args.ddp_hook != "powersgd"):
            usage_error("--powersgd-q: only with --compress powersgd:... or --backend ddp "
                        "--ddp-hook powersgd")
        if args.backend == "ddp" and not os.path.isfile(args.powersgd_q):
            usage_error(f"--powersgd-q: no file {args.powersgd_q} (write it with a "
                        "--compress powersgd run of the same model first)")
    if args.powersgd_rank is not None and args.powersgd_rank < 1:
        usage_error(f"--powersgd-rank: {args.powersgd_rank} is not a positive integer")
    if args.powersgd_start is not None and args.powersgd_start < 2:
        usage_error(f"--powersgd-start: {args.powersgd_start} is below 2 (PowerSGD's error "
                    "feedback and warm start need two plain iterations first)")
    replay = args.arch.startswith("replay:")
    if not replay:
        for flag, v in (("--pcie-gbps", args.pcie_gbps), ("--replay-times", args.replay_times)):
            if v is not None:
                usage_error(f"{flag}: only with --arch replay:PATH")
        if args.dilate != 1:
            usage_error("--dilate: only with --arch replay:PATH")
    else:
        if not (math.isfinite(args.dilate) and 1 <= args.dilate <= 1000):
            usage_error(f"--dilate: {args.dilate:g} is not in 1..1000")
        if args.pcie_gbps is not None and args.backend != "pipecompress":
            usage_error("--pcie-gbps: only with --backend pipecompress (DDP's gradients stay "
                        "on the device)")
        if args.pcie_gbps is not None and not (math.isfinite(args.pcie_gbps) and
                                               args.pcie_gbps > 0):
            usage_error(f"--pcie-gbps: {args.pcie_gbps:g} is not a positive rate")
        if args.powersgd_q is not None:
            usage_error("--powersgd-q: not with --arch replay (no model's Qs to share)")
    if args.arch in TORCHVISION:
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            usage_error(f"--arch {args.arch} needs torchvision ({e}; Debian: apt-get install "
                        "python3-torchvision)")


def ddp_flags(rest, optimizer):
    """The PipeCompress flags the DDP baseline understands, with the runtime's defaults
    for --optimizer OPTIMIZER (torch_flags' --optimizer, --update, --lr-warmup and
    --clip-grad-norm are read apart): with adamw, as pc.init's check fills them in, --lr
    0.001 and --weight-decay 0.01 (torch.optim.AdamW's) where they were not given."""
    adamw = optimizer == "adamw"
    ap = Parser(prog="torch_train.py --backend ddp")
    ap.add_argument("--lr", type=float, default=0.001 if adamw else 0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.01 if adamw else 0.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--iters", type=int, default=0)
    ap.add_argument("--lr-schedule", choices=["constant", "cosine", "step"], default="cosine")
    ap.add_argument("--lr-step", type=int, default=1000)
    ap.add_argument("--lr-gamma", type=float, default=0.1)
    return ap.parse_args(strip_flags(rest, TORCH_FLAGS))


# The example's optimizer flags, spelt as PipeCompress's runtime flags of the same meaning
# (pc-train's --optimizer, --update, --lr-warmup; --clip-grad-norm), read from the runtime's
# words (torch_flags) rather than defined by parser(): they stay on the command line the
# runtime sees, and --optimizer and --update reach pc.init (the wrapper reads them back).
TORCH_FLAGS = ("optimizer", "update", "lr-warmup", "clip-grad-norm")


def strip_flags(words, names):
    """words without the flags of the given long names ("--name VALUE", "--name=VALUE")."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w.startswith("--") and w[2:].split("=", 1)[0] in names:
            skip = "=" not in w
            continue
        out.append(w)
    return out


def torch_flags(args, rest):
    """--optimizer sgd|adamw, --update servers|workers, --lr-warmup N, --clip-grad-norm X
    (and --lr-schedule, read here too) from the runtime's words, checked, each bad value
    refused in one line. .torch: whether the torch optimizer steps, through
    pc.DistributedOptimizer on the pipecompress backend (AdamW, the step on the workers, or
    clipping), rather than the runtime's own SGD and schedule (pc-train's)."""
    ap = Parser(prog="torch_train.py", add_help=False, allow_abbrev=False)
    ap.add_argument("--optimizer", choices=["sgd", "adamw", "adadelta"], default="sgd")
    ap.add_argument("--update", choices=["servers", "workers"])
    ap.add_argument("--lr-warmup", type=int, default=0)
    ap.add_argument("--lr-schedule", default="cosine")
    ap.add_argument("--lr-gamma", type=float)
    ap.add_argument("--lr-step", type=int)
    ap.add_argument("--clip-grad-norm", type=float)
    t, _ = ap.parse_known_args(rest)
    if t.optimizer == "adadelta":  # the servers run SGD, Adam and AdamW only
        if t.update == "servers":
            usage_error("--optimizer adadelta: the servers run sgd, adam and adamw; "
                        "adadelta steps on the workers (--update workers, its default)")
        if args.backend == "pipecompress":
            t.update = "workers"
    if t.lr_warmup < 0:
        usage_error(f"--lr-warmup: {t.lr_warmup} is negative")
    c = t.clip_grad_norm
    if c is not None and not (math.isfinite(c) and c > 0):
        usage_error(f"--clip-grad-norm: {c:g} is not a positive number")
    if args.backend != "pipecompress" and t.update is not None:
        usage_error("--update: only with --backend pipecompress (DDP's and local's workers "
                    "step themselves)")
    t.torch = t.optimizer != "sgd" or t.update == "workers" or c is not None
    if t.torch and t.lr_schedule not in ("constant", "cosine", "step"):
        usage_error(f"--lr-schedule {t.lr_schedule}: with --optimizer adamw or adadelta, "
                    "--update workers or --clip-grad-norm the example schedules through "
                    "torch: constant, cosine or step")
    if t.torch and t.lr_step is not None:
        usage_error("--lr-step: with --optimizer adamw or adadelta, --update workers or "
                    "--clip-grad-norm the example's --lr-schedule step steps every epoch")
    if t.torch and t.lr_gamma is not None and t.lr_schedule != "step":
        usage_error("--lr-gamma: only with --lr-schedule step")
    if t.lr_gamma is not None and not (math.isfinite(t.lr_gamma) and 0 < t.lr_gamma <= 1):
        usage_error(f"--lr-gamma: {t.lr_gamma:g} is not in (0, 1]")
    if t.lr_gamma is None:
        t.lr_gamma = 0.1  # the runtime's default
    if args.arch.startswith("replay:") and (t.optimizer != "sgd" or c is not None):
        usage_error("--optimizer adamw, --clip-grad-norm: not with --arch replay (the "
                    "replay holds the step's time, it runs no optimizer)")
    if t.torch and t.update == "workers" and ("--resume" in rest):
        usage_error("--resume with --update workers: the example does not save the torch "
                    "optimizer's state (the runtime's checkpoints hold the parameters)")
    return t


def make_optimizer(model, t, lr, momentum, nesterov, weight_decay, betas, eps, amsgrad):
    """The torch optimizer of --optimizer. adamw: torch.optim.AdamW with timm's split
    (param_groups_weight_decay): biases and every parameter of one dimension (norm
    weights) in a group of weight decay 0, the rest at weight_decay. sgd: torch.optim.SGD,
    one group. adadelta: torch.optim.Adadelta (its rho and eps), one group, as
    pytorch/examples' MNIST."""
    if t.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, nesterov=nesterov,
                               weight_decay=weight_decay)
    if t.optimizer == "adadelta":
        return torch.optim.Adadelta(model.parameters(), lr=lr, weight_decay=weight_decay)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.dim() <= 1 or name.endswith(".bias") else decay).append(p)
    groups = [g for g in ({"params": decay}, {"params": no_decay, "weight_decay": 0.0})
              if g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                             amsgrad=amsgrad)


def make_schedule(opt, t, total, ipe):
    """The scheduler of the torch optimizer opt (or its pc.DistributedOptimizer: made after
    the wrapper, on it), stepped every iteration; None for a constant rate. adamw and
    adadelta: --lr-warmup N iterations of LinearLR (from 1 % of the rate) then, with
    --lr-schedule cosine (the default), CosineAnnealingLR over the T - N iterations left,
    or with step, StepLR: the rate times --lr-gamma at every epoch's end (step_size ipe,
    pytorch/examples' MNIST's StepLR(step_size=1) stepped per epoch) (SequentialLR). sgd:
    pc-train's own schedule (the runtime's pc_optim_lr, as a LambdaLR: (t + 1) / N in the
    warm-up, then the cosine over the whole run), as --optimizer sgd has without a
    wrapper; step: --lr-gamma every epoch. total: the run's iterations T; ipe: an epoch's."""
    S = torch.optim.lr_scheduler
    warm, cosine, step = t.lr_warmup, t.lr_schedule == "cosine", t.lr_schedule == "step"
    if t.optimizer == "sgd":
        def factor(it):
            if it < warm:
                return (it + 1) / warm
            if cosine:
                return 0.5 * (1 + math.cos(math.pi * it / total)) if it < total else 0.0
            if step:
                return t.lr_gamma ** (it // ipe)
            return 1.0
        return S.LambdaLR(opt, factor) if warm or cosine or step else None
    main = (S.CosineAnnealingLR(opt, T_max=max(1, total - warm)) if cosine else
            S.StepLR(opt, step_size=ipe, gamma=t.lr_gamma) if step else None)
    if not warm:
        return main
    ramp = S.LinearLR(opt, start_factor=0.01, total_iters=warm)
    return ramp if main is None else S.SequentialLR(opt, [ramp, main], milestones=[warm])


def optimizer_line(t, opt, how, lr):
    """Rank 0's line naming the optimizer the torch path steps, its groups and schedule."""
    g = opt.param_groups
    hp = f"lr {lr:g}, weight decay {g[0]['weight_decay']:g}"
    if len(g) > 1:
        hp += f" (group 1, biases and norm weights: {g[1]['weight_decay']:g})"
    sched = {"cosine": "cosine", "step": f"x{t.lr_gamma:g} every epoch"}.get(t.lr_schedule,
                                                                          "constant")
    warm = f"warm-up {t.lr_warmup} then " if t.lr_warmup else ""
    clip = f", clipped to {t.clip_grad_norm:g}" if t.clip_grad_norm is not None else ""
    return f"optimizer {t.optimizer} ({how}): {hp}; {warm}{sched}{clip}"


def parser():
    """The script's own flags (PipeCompress's are the rest)."""
    ap = Parser(
        add_help=False,
        description="Train a torch model on Fashion-MNIST through PipeCompress "
        "(other flags: PipeCompress's, listed after these)")
    ap.add_argument("-h", "--help", action="store_true", help="these flags, then the runtime's")
    ap.add_argument("--arch", choices=ARCH_CHOICES, default="cnn",
                    help="the model (resnet18, resnet50, vgg16: torchvision's, adapted; "
                    "replay:PATH: a GPU's compute replayed from the trace at PATH)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="samples per worker per iteration")
    ap.add_argument("--dropout", type=float,
                    help="cnn (before the last layer) [0.5], vgg16 (the classifier's) [0.5], "
                    "vit (the encoder's) [0.1]")
    ap.add_argument("--data", default=pc.data.FASHION_MNIST, help="IDX directory or synthetic")
    ap.add_argument("--synthetic-samples", type=int, default=20000)
    ap.add_argument("--train-samples", type=int, metavar="N",
                    help="train on the training set's first N samples only (the whole "
                    "test set is still evaluated): shorter epochs for the big models")
    ap.add_argument("--test-samples", type=int, metavar="N",
                    help="evaluate on the test set's first N samples only (a quicker "
                    "accuracy for trials; default the whole set)")
    ap.add_argument("--data-seed", type=int, default=1, help="--data synthetic: its seed")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch's threads per rank, and OpenBLAS's (both backends)")
    ap.add_argument("--backend", choices=["pipecompress", "ddp", "local"], default="pipecompress",
                    help="local: one process, torch.optim.SGD, no communication (the "
                    "compute-only limit of the benchmarks)")
    ap.add_argument("--ddp-port", type=int,
                    help="DDP's rendezvous port [$MASTER_PORT, or 29511]")
    ap.add_argument("--ddp-hook", choices=["none", "fp16", "bf16", "powersgd"],
                    help="--backend ddp: torch's communication hook on the allreduce [none]")
    ap.add_argument("--powersgd-rank", type=int, metavar="R",
                    help="--ddp-hook powersgd: the matrix approximation rank [2]")
    ap.add_argument("--powersgd-start", type=int, metavar="N",
                    help="--ddp-hook powersgd: plain allreduce for the first N iterations, "
                    "at least 2 (error feedback and warm start need two) [10, as in "
                    "powerSGD_hook's documented example]")
    ap.add_argument("--powersgd-q", metavar="FILE",
                    help="with --compress powersgd: rank 0 writes every matrix's first Q "
                    "(pc.lowrank_q) to FILE after attach; with --ddp-hook powersgd: torch's "
                    "hook starts from the Qs in FILE instead of its own draw (both "
                    "implementations from one start)")
    ap.add_argument("--loss-log", metavar="FILE",
                    help="rank 0: each iteration's batch loss, a line 'ITERATION LOSS' "
                    "(exact decimal of the float), to compare runs")
    ap.add_argument("--save", metavar="FILE", help="rank 0: the trained state_dict")
    ap.add_argument("--eval", choices=["epoch", "end", "none"], default="epoch")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--warmup", type=int, default=10, metavar="N",
                    help="iterations left out of the reported rate (start-up, first touches) "
                         "[10; a run needs more iterations than that to report one]")
    ap.add_argument("--dilate", type=float, default=1.0, metavar="K",
                    help="--arch replay: every replayed time x K (time dilation); passed on "
                    "as the runtime's --dilate K, and the DDP hooks' CPU work is followed "
                    "by (K - 1) x its duration of sleep [1]")
    ap.add_argument("--pcie-gbps", type=float, metavar="GB/S",
                    help="--arch replay --backend pipecompress: the modelled device-to-host "
                    f"copy's rate [{PCIE_GBPS:g}: PCIe 4.0 x16 as pinned cudaMemcpy achieves it]")
    ap.add_argument("--replay-times", metavar="FILE",
                    help="--arch replay, rank 0: each iteration's time and every "
                    "gradient's ready time (seconds from the iteration's start) as JSON")
    return ap


def main():
    ap = parser()
    args, rest = ap.parse_known_args()
    if args.help:  # the script's flags, then the runtime's (pc.init prints them and exits)
        if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")) == "0":
            ap.print_help()  # once, as pc.init prints the runtime's on rank 0 only
            print()
        pc.init(["--help"])
    if args.epochs < 1 or args.batch < 1 or args.threads < 1 or args.warmup < 0:
        ap.error("--epochs, --batch and --threads must be positive, --warmup not negative")
    check_arch_flags(args)
    t = torch_flags(args, rest)
    torch.set_num_threads(args.threads)
    if args.arch.startswith("replay:"):
        pc.set_blas_threads(args.threads)
        return train_replay(args, rest)
    pc.set_blas_threads(args.threads)  # torch's matrix products (OpenBLAS on Debian) too
    images, labels = load(args, train=True)
    n, B = len(labels), args.batch

    def run_length(workers):
        return args.epochs * (n // (workers * B))

    if args.backend in ("ddp", "local"):
        return train_ddp(args, rest, images, labels, run_length, t)
    if t.torch:
        # The torch optimizer steps (pc.DistributedOptimizer below): its scheduler makes the
        # rates and it clips, so the runtime's schedule and clipping flags stay here (a
        # wrapper refuses them); --optimizer, --update, --lr, ... reach pc.init, and the
        # optimizer is built from the values pc.init parsed (pc.config()).
        pc.init(strip_flags(rest, ("lr-warmup", "lr-schedule", "lr-gamma", "clip-grad-norm")
                            + (("optimizer",) if t.optimizer == "adadelta" else ())),
                run_length=run_length)
    else:
        pc.init(["--lr-schedule", "cosine"] + rest, run_length=run_length)
    model = probe(args, images[:B], labels[:B])
    if pc.is_server():
        return pc.run_server()
    W, rank = pc.workers(), pc.rank()
    cfg = pc.config()
    seed, total = int(cfg["seed"]), int(cfg["iters"])
    ipe = n // (W * B)
    if ipe == 0:
        raise pc.Error("--batch: the training set is smaller than one iteration of all workers")
    model = model or build(args.arch, seed, args.dropout)
    pc.attach(model)
    opt, sched = wrapped_optimizer(model, t, cfg, total, ipe) if t.torch else (None, None)
    if args.powersgd_q:
        qs = pc.lowrank_q()
        if not qs:
            raise pc.Error("--powersgd-q: no matrix travels as powersgd factors in this run "
                           "(--compress powersgd:...)")
        if rank == 0:
            torch.save(qs, args.powersgd_q)
    test = load(args, train=False, in_job=True) if rank == 0 and args.eval != "none" else None
    first = pc.iteration()
    if rank == 0:
        print(f"torch {args.arch}: {sum(p.numel() for p in model.parameters())} parameters; "
              f"{W} workers x batch {B}, {ipe} iterations per epoch, {total} in all"
              + (f"; resumed at {first}" if first else ""), flush=True)
        if opt is not None:
            print(optimizer_line(t, opt, "pc.DistributedOptimizer, update="
                                 f"{pc.config()['update']}", float(cfg["lr"])), flush=True)
    for _ in range(first if sched is not None else 0):
        sched.step()  # resumed: the rates where the run left off (the servers' state is in)

    last = {}  # the latest epoch-end evaluation: iterations done then, its accuracy

    def on_epoch_end(epoch, it):
        if rank == 0 and test is not None and args.eval == "epoch":
            pc.synchronize()
            acc, tl = evaluate(model, *test, args.arch)
            last.update(done=it + 1, acc=acc)
            print(f"epoch {epoch + 1}: test accuracy {100 * acc:.2f}%, test loss {tl:.4f} "
                  f"({time.time() - t0:.1f} s)", flush=True)
            pc.metrics_note(f'{{"rank": 0, "role": "eval", "epoch": {epoch + 1}, '
                            f'"iteration": {it}, "test_accuracy": {acc:.5f}}}')

    t0 = time.time()
    stop, rate = run_loop(args, model, images, labels, seed, first, total, ipe, W, rank,
                          step=iteration_end(t, opt, sched),
                          report=loss_logger(args, rank, first, pc.report),
                          on_epoch_end=on_epoch_end, settle=pc.synchronize)
    it_done = pc.iteration()
    status = pc.finish()  # the model now holds the last update
    wall = time.time() - t0
    if rank == 0 and stop:
        print(f"stopped by signal {pc.stop_signal()} after {it_done} iterations"
              + ("; continue with --resume" if cfg["checkpoint-dir"] else ""), flush=True)
    elif rank == 0:
        report_done(args, model, test, total - first, wall, rate,
                    last.get("acc") if last.get("done") == it_done else None)
    return status


def wrapped_optimizer(model, t, cfg, total, ipe):
    """The torch path of the pipecompress backend (t.torch: --optimizer adamw, --update
    workers or --clip-grad-norm): the torch optimizer built from the values pc.init parsed
    (cfg: pc.config()), wrapped in pc.DistributedOptimizer right after pc.attach (the
    optimizer travels to the servers at the start; the placement is --update's), and its
    scheduler, made on the wrapper. Returns (wrapper, scheduler or None)."""
    yes = ("1", "true", "yes", "on")
    torch_opt = make_optimizer(
        model, t, float(cfg["lr"]), float(cfg["momentum"]), cfg["nesterov"] in yes,
        float(cfg["weight-decay"]), tuple(float(b) for b in cfg["betas"].split(",")),
        float(cfg["eps"]), cfg["amsgrad"] in yes)
    # adadelta: update="workers" (the wrapper chooses the placement: the servers cannot
    # run it); otherwise --update's, or the servers.
    opt = pc.DistributedOptimizer(torch_opt, update="workers" if t.optimizer == "adadelta"
                                  else None)
    return opt, make_schedule(opt, t, total, ipe)


def iteration_end(t, opt, sched):
    """The end of an iteration on the pipecompress backend, as a function of none that
    returns whether the workers agreed to stop: the runtime's own (opt None: its SGD on the
    servers), or the wrapper's: clip (--clip-grad-norm), step, then the scheduler."""
    def step():
        if opt is None:
            return pc.iteration_end()
        if t.clip_grad_norm is not None:
            opt.clip_grad_norm_(t.clip_grad_norm)
        opt.step()
        if sched is not None:
            sched.step()
        return opt.should_stop
    return step


def probe(args, x, y):
    """--mode auto: every rank (the servers to be too) builds the model and profiles it on
    one worker's batch (x, y); pc.probe then chooses the mode. Returns the model, left as
    built (the workers train it), or None in any other mode."""
    if not pc.choosing():
        return None
    model = build(args.arch, int(pc.config()["seed"]), args.dropout)
    pc.probe(model, x, y)
    return model


def report_done(args, model, test, iters, wall, rate, known=None):
    """Rank 0, after a run that finished (both backends): the "done:" line that
    scripts/bench/torch-ddp.sh reads, the final test accuracy, --save. known: the accuracy
    of an evaluation of this very model (the last epoch's, nothing trained since), reused
    rather than evaluated again (the test set on the CPU takes as long as many iterations)."""
    line = f"done: {iters} iterations in {wall:.1f} s"
    if rate is None:
        line += f" (too few iterations for a rate after --warmup {args.warmup})"
    else:
        line += f" ({rate:.0f} samples/s after {args.warmup} warm-up iterations)"
    if test is not None:
        acc = known if known is not None else evaluate(model, *test, args.arch)[0]
        line += f"; final test accuracy {100 * acc:.2f}%"
    print(line, flush=True)
    if args.save:
        torch.save(model.state_dict(), args.save)


def loss_logger(args, rank, first, report):
    """report, and on rank 0 with --loss-log each iteration's loss appended to the file as
    'ITERATION LOSS' (repr: the float exactly), iterations counted from first."""
    if not args.loss_log or rank != 0:
        return report
    f = open(args.loss_log, "a" if first else "w")
    state = {"it": first}

    def log(loss, acc):
        report(loss, acc)
        f.write(f"{state['it']} {loss!r}\n")
        f.flush()
        state["it"] += 1
    return log


def run_loop(args, model, images, labels, seed, first, total, ipe, W, rank, step, report,
             on_epoch_end, settle=lambda: None):
    """The training loop both backends share: pc-train's data order and shards, torch's
    random numbers (dropout) seeded by (seed, rank, iteration) at every iteration, so that a
    run resumed at any iteration draws what an uninterrupted one does; loss and accuracy of
    each batch reported. Returns (stopped by a signal, samples per second over the
    iterations after the first --warmup ones, or None when there were none)."""
    n, B = len(labels), args.batch
    model.train()
    perm, perm_epoch = None, -1
    t_print, loss_sum, ok_sum, seen = time.time(), 0.0, 0, 0
    t_warm, done = (time.time() if args.warmup == 0 else None), 0
    for it in range(first, total):
        epoch, i = divmod(it, ipe)
        if epoch != perm_epoch:
            perm, perm_epoch = pc.data.order(n, seed, epoch), epoch
        idx = pc.data.shard(perm, i, B, W, rank)
        x, y = images[idx], labels[idx]
        torch.manual_seed(((seed * 1000 + rank) * 1000003 + it) % (1 << 63))
        out = model(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        lv = loss.item()
        if not math.isfinite(lv):
            raise pc.Error("the loss is not finite: training diverged (lower --lr?)")
        ok = (out.argmax(1) == y).sum().item()
        report(lv, ok / B)
        stop = step()
        loss_sum, ok_sum, seen = loss_sum + lv, ok_sum + ok, seen + 1
        now = time.time()
        if rank == 0 and not args.quiet and (now - t_print > 5 or it + 1 == total or
                                             it == first):
            print(f"iteration {it + 1}/{total}: loss {loss_sum / seen:.4f}, train accuracy "
                  f"{100 * ok_sum / (seen * B):.2f}%", flush=True)
            t_print, loss_sum, ok_sum, seen = now, 0.0, 0, 0
        if t_warm is not None:
            done += 1
        elif it + 1 - first == args.warmup:
            t_warm = time.time()
        if stop:
            return True, None
        if i + 1 == ipe or it + 1 == total:
            t_eval = time.time()
            on_epoch_end(epoch, it)
            if t_warm is not None:
                t_warm += time.time() - t_eval  # evaluation is not training
    settle()  # the last update in: both backends' rates cover whole iterations
    rate = done * W * B / (time.time() - t_warm) if done else None
    return False, rate


def ddp_place(args):
    """(rank, world size, local) of a DDP or --backend local run, from mpirun's environment
    (or torchrun's); --backend local on more than one process is refused in one line."""
    env = os.environ
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("RANK", "0")))
    world = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("WORLD_SIZE", "1")))
    local = args.backend == "local"
    if local and world != 1:
        usage_error(f"--backend local: one process, not {world} (run it without mpirun, or "
                    "with -np 1)")
    return rank, world, local


def ddp_wrap(args, model, meter=None):
    """model in DistributedDataParallel (gloo, the default process group) with --ddp-hook's
    communication hook. Buffers: DDP's default, rank 0's broadcast before each forward.
    meter (--arch replay): a torch_replay.PeerMeter that times the hook's CPU work; the
    gradients are then views of DDP's buckets (gradient_as_bucket_view), as the replay
    writes them where a GPU's backward would, with no copy of this CPU's own."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    hook = args.ddp_hook or "none"
    kw = {}
    if hook == "powersgd":
        # One bucket. powerSGD_hook on gloo aborts within a few iterations when DDP has more
        # than one bucket (gloo::EnforceNotMet ... op.preamble.length <= op.nbytes: the
        # hook's chained allreduces of several buckets reach the ranks in different orders).
        # The cap above the model's size, and DDP's first bucket, which has a size of its
        # own (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB), raised as well.
        nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        cap = nbytes + (1 << 20)
        dist._DEFAULT_FIRST_BUCKET_BYTES = cap
        kw["bucket_cap_mb"] = cap / (1 << 20)
    if hook == "bf16":
        # Torch 1.13 on the CPU cannot: gloo's allreduce refuses bfloat16 ("Invalid scalar
        # type"), and DDP accepts bf16_compress_hook only with CUDA 11+ and NCCL 2.10+.
        # Asked of this torch, not assumed (collective: every rank gets the same answer).
        try:
            dist.all_reduce(torch.zeros(1, dtype=torch.bfloat16))
        except RuntimeError as e:
            usage_error(f"--ddp-hook bf16: this torch's gloo cannot allreduce bfloat16 ({e})")
    if meter is not None:
        kw["gradient_as_bucket_view"] = True
    ddp = DDP(model, **kw)

    def metered(module, fn):
        return fn if meter is None else meter.wrap_hook(module, fn)
    if hook == "fp16":
        ddp.register_comm_hook(None, metered(default_hooks, default_hooks.fp16_compress_hook))
    elif hook == "bf16":
        try:
            ddp.register_comm_hook(None, metered(default_hooks,
                                                 default_hooks.bf16_compress_hook))
        except TypeError as e:  # DDP's own refusal ("required CUDA 11+ and NCCL 2.10+")
            usage_error(f"--ddp-hook bf16: {e}")
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=args.powersgd_rank or 2,
            start_powerSGD_iter=args.powersgd_start or 10, use_error_feedback=True,
            warm_start=True)
        hook = metered(powerSGD_hook, powerSGD_hook.powerSGD_hook)
        if args.powersgd_q:
            hook = seeded_powersgd_hook(model, torch.load(args.powersgd_q), hook)
        ddp.register_comm_hook(state, hook)
    return ddp


def seeded_powersgd_hook(model, qs, hook):
    """powerSGD_hook, whose first compressed iteration starts from the given Qs ({parameter
    name: (cols, rank) tensor}, pc.lowrank_q's) instead of its own random draw: the hook
    then finds its Q memory allocated (its warm start) and only orthonormalises them. The
    memory is laid out as torch 1.13's hook lays it: the bucket's tensors that pass
    _should_compress, grouped by shape in first-seen order. A matrix the file lacks, or a
    Q of another shape, is refused in one line."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    names = {p: n for n, p in model.named_parameters()}

    def seeded(state, bucket):
        i = bucket.index()
        if state.iter >= state.start_powerSGD_iter and i not in state.p_memory_dict:
            groups, ps_size = {}, 0
            for p, g in zip(bucket.parameters(), bucket.gradients()):
                n, m = g.shape[0], g.numel() // g.shape[0]
                r = min(n, m, state.matrix_approximation_rank)
                if ps._should_compress(n, m, r, state.min_compression_rate)[0]:
                    groups.setdefault((n, m), []).append(names[p])
                    ps_size += n * r
            q_mem = []
            for (n, m), members in groups.items():
                for name in members:
                    q = qs.get(name)
                    r = min(n, m, state.matrix_approximation_rank)
                    if q is None or tuple(q.shape) != (m, r):
                        raise SystemExit(f"torch_train.py: --powersgd-q: no Q of shape ({m}, "
                                         f"{r}) for {name} in the file")
                    q_mem.append(q.reshape(-1))
            state.p_memory_dict[i] = torch.empty(ps_size)
            state.q_memory_dict[i] = torch.cat(q_mem) if q_mem else torch.empty(0)
        return hook(state, bucket)
    return seeded


def train_ddp(args, rest, images, labels, run_length, t):
    import torch.distributed as dist

    f = ddp_flags(rest, t.optimizer)
    env = os.environ
    rank, world, local = ddp_place(args)
    # The test set before the rendezvous: a file missing there ends rank 0 (one line) while
    # the others still wait in it, not halfway through a collective.
    test = load(args, train=False) if rank == 0 and args.eval != "none" else None
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    if args.ddp_port is not None or "MASTER_PORT" not in env:
        env["MASTER_PORT"] = str(args.ddp_port or 29511)
    if not local:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    n, B, W = len(labels), args.batch, world
    ipe = n // (W * B)
    if ipe == 0:
        raise SystemExit("torch_train.py: --batch: the training set is smaller than one "
                         "iteration of all workers")
    total = f.iters or run_length(W)
    model = build(args.arch, f.seed, args.dropout)
    ddp = model if local else ddp_wrap(args, model)
    sched = None
    if t.optimizer != "sgd":  # torch's defaults: the runtime's --betas, --eps
        opt = make_optimizer(model, t, f.lr, 0.0, False, f.weight_decay, (0.9, 0.999), 1e-8,
                             False)
        sched = make_schedule(opt, t, total, ipe)
    elif t.torch and t.lr_schedule == "step":  # every epoch, as the pipecompress backend's
        opt = torch.optim.SGD(model.parameters(), lr=f.lr, momentum=f.momentum,
                              weight_decay=f.weight_decay)
        sched = make_schedule(opt, t, total, ipe)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=f.lr, momentum=f.momentum,
                              weight_decay=f.weight_decay)

    def lr_at(t_):  # pc_optim_lr's schedules (--optimizer sgd)
        if t_ < t.lr_warmup:
            return f.lr * (t_ + 1) / t.lr_warmup
        if f.lr_schedule == "cosine" and total > 0:
            return 0.0 if t_ >= total else f.lr * 0.5 * (1 + math.cos(math.pi * t_ / total))
        if f.lr_schedule == "step":  # the runtime's: every --lr-step iterations
            return f.lr * f.lr_gamma ** (t_ // f.lr_step)
        return f.lr

    state = {"t": 0}

    def step():
        if sched is None:
            for group in opt.param_groups:
                group["lr"] = lr_at(state["t"])
        if t.clip_grad_norm is not None:  # the averaged gradient: DDP's backward made it
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_grad_norm)
        opt.step()
        if sched is not None:
            sched.step()
        opt.zero_grad(set_to_none=False)
        state["t"] += 1
        return False

    if rank == 0:
        what = "local, 1 process" if local else f"DDP, gloo, hook {args.ddp_hook or 'none'}"
        print(f"torch {args.arch} ({what}): "
              f"{sum(p.numel() for p in model.parameters())} parameters; {W} workers x "
              f"batch {B}, {ipe} iterations per epoch, {total} in all", flush=True)
        if t.torch:
            how = "torch.optim, 1 process" if local else "torch.optim, every worker"
            print(optimizer_line(t, opt, how, f.lr), flush=True)

    last = {}  # the latest epoch-end evaluation: iterations done then, its accuracy

    def on_epoch_end(epoch, it):
        if rank == 0 and test is not None and args.eval == "epoch":
            acc, tl = evaluate(model, *test, args.arch)
            last.update(done=it + 1, acc=acc)
            print(f"epoch {epoch + 1}: test accuracy {100 * acc:.2f}%, test loss {tl:.4f} "
                  f"({time.time() - t0:.1f} s)", flush=True)

    t0 = time.time()
    _, rate = run_loop(args, ddp, images, labels, f.seed, 0, total, ipe, W, rank, step,
                       report=loss_logger(args, rank, 0, lambda loss, acc: None),
                       on_epoch_end=on_epoch_end)
    wall = time.time() - t0
    if rank == 0:
        report_done(args, model, test, total, wall, rate,
                    last.get("acc") if last.get("done") == total else None)
    # Torn down here, in order: DDP (its reducer, the hook's state and futures) while the
    # process group lives, then the group. Left to the interpreter's exit, the group's last
    # reference can drop on one of gloo's own threads, whose destructor then joins itself
    # (abort: "Resource deadlock avoided"), or hang; seen with the hooks under load.
    if local:
        return 0
    dist.barrier()
    del ddp, step, opt
    gc.collect()
    dist.destroy_process_group()
    return 0


def meter_runtime(clock):
    """The runtime's blocking calls (param_wait, grad_ready, iteration_end), as the binding
    makes them, timed into the replay's clock: the host thread held there holds the
    replayed device's schedule too (torch_replay's docstring). Wraps the loaded library's
    functions (pipecompress._lib: the example reaches into the binding's private module,
    which it does nowhere else)."""
    from pipecompress import _lib

    lib = _lib.load()
    for name in ("pc_worker_param_wait", "pc_worker_grad_ready", "pc_worker_iteration_end"):
        fn = getattr(lib, name)

        def timed(*a, _fn=fn):
            t0 = time.perf_counter()
            try:
                return _fn(*a)
            finally:
                clock.block(time.perf_counter() - t0)
        setattr(lib, name, timed)


def replay_report(args, model, path, W, B, K, iters, peer, ready, stop, wall, total,
                  allreduce):
    """Rank 0's closing lines of a replay (train_replay): the rate, the iteration against
    the trace's sum and the holds' overshoot, DDP's best case, --replay-times."""
    # iteration i's time: from the end of iteration i - 1 to its own end (the first one,
    # which starts the schedule, is left out); the rate after --warmup of them
    timed = iters[max(0, args.warmup - 1):]
    if stop:
        print(f"stopped by signal {pc.stop_signal()} after {len(iters) + 1} iterations",
              flush=True)
        return
    line = f"done: {total} iterations in {wall:.1f} s"
    if not timed:
        print(line + f" (too few iterations for a rate after --warmup {args.warmup})",
              flush=True)
        return
    it_s = sum(timed) / len(timed)
    # through the binding with --mode ps nothing replays the step (the servers run it)
    sum_s = model.compute_seconds(optimizer=args.backend != "pipecompress" or allreduce)
    print(line + f" ({W * B / it_s:.0f} samples/s after {args.warmup} warm-up iterations)",
          flush=True)
    p50, p99 = model.clock.percentiles()
    what = "forward + backward" if args.backend == "pipecompress" and not allreduce else "trace sum"
    print(f"replay: iteration {it_s * 1e3:.2f} ms (mean of {len(timed)}), {what} x "
          f"{K:g}: {sum_s * 1e3:.2f} ms, ratio {it_s / sum_s:.4f}; hold overshoot p50 "
          f"{p50 * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us", flush=True)
    if args.backend == "ddp":
        work = peer[len(peer) - len(timed):]
        w_s = K * sum(work) / len(work)
        # Removing the work can overshoot where pieces ran at once on two threads: the
        # best case is never taken below the compute alone (the limit: the most generous)
        best = max(it_s - w_s, model.compute_seconds())
        print(f"replay: peer's CPU work that a GPU would do: {1e3 * w_s / K:.2f} ms per "
              f"iteration (x {K:g} with its dilation sleep: {w_s * 1e3:.2f} ms); best case "
              f"{best * 1e3:.2f} ms ({W * B / best:.0f} samples/s)", flush=True)
    if ready:
        out = {"trace": path, "backend": args.backend, "dilate": K,
               "names": [f"{lay.trace_name}.{j}" for lay in model.layers
                         for j in range(len(lay.plist))],
               "iterations": ready.rows}
        with open(args.replay_times, "w") as fh:
            json.dump(out, fh)


def replay_through_binding(args, rest, trace, K):
    """train_replay's start through the binding: pc.init with the runtime's flags (and
    --dilate K), then on a worker the replayed model attached, the runtime's blocking
    calls timed into its clock, --mode allreduce's step held as device time. Returns
    (model, rank, workers, iterations, what it models, allreduce), or (exit status,) on a
    server."""
    import torch_replay as tr

    flags = ["--lr-schedule", "cosine"] + rest + (["--dilate", f"{K:g}"] if K != 1 else [])
    pc.init(flags, run_length=lambda workers: 50)
    if pc.choosing():
        raise pc.Error("--mode auto: not with --arch replay (the probe would profile "
                       "sleeps); choose --mode ps or allreduce")
    if pc.is_server():
        return (pc.run_server(),)
    rank, W = pc.rank(), pc.workers()
    cfg = pc.config()
    seed, total = int(cfg["seed"]), int(cfg["iters"])
    gbps = args.pcie_gbps or tr.PCIE_GBPS
    model = tr.ReplayModel(trace, K, seed, rank, copy_gbps=gbps)
    meter_runtime(model.clock)
    allreduce = cfg.get("mode") == "allreduce"
    # --mode allreduce: the step is the GPU's work, held by the runtime as device time
    # (K x the trace's); --mode ps: the servers step, for real
    step_s, step_how = tr.optimizer_seconds(trace, model.nelem)
    pc.attach(model, device_step=step_s * K if allreduce else None)
    what = (f"{'network and the allreduce' if allreduce else 'network, compression and servers'}"
            f" real; gradients copied to the host at {gbps:g} GB/s (modelled)")
    if allreduce:
        what += "; --mode allreduce: the optimizer step held as device time, " + step_how
    return model, rank, W, total, what, allreduce


def train_replay(args, rest):
    """--arch replay:PATH on any backend: the trace's layers held as sleeps (torch_replay),
    trained through the binding, through DDP with its hooks, or alone (--backend local: the
    compute-only limit). No data are read; --iters sets the length (default 50)."""
    import torch_replay as tr

    path = args.arch[len("replay:"):]
    try:
        trace = tr.load_trace(path)
    except tr.TraceError as e:
        usage_error(f"--arch replay:{path}: {e}")
    K, B, env = args.dilate, trace["batch"], os.environ
    what = (f"replay: GPU compute replayed from {path} ({trace['model']}, {trace['device']}, "
            f"batch {B}, {trace['precision']}), dilation {K:g}; ")
    allreduce = False  # through the binding with --mode allreduce (the step held)
    if args.backend == "pipecompress":
        got = replay_through_binding(args, rest, trace, K)
        if len(got) == 1:  # a server: its exit status
            return got[0]
        model, rank, W, total, more, allreduce = got
        what += more
        meter = None
    else:
        import torch.distributed as dist

        f = ddp_flags(rest, "sgd")  # replay runs no optimizer (--optimizer adamw refused)
        rank, W, local = ddp_place(args)
        seed, total = f.seed, f.iters or 50
        model = tr.ReplayModel(trace, K, seed, rank)
        meter = None
        if not local:
            env.setdefault("MASTER_ADDR", "127.0.0.1")
            if args.ddp_port is not None or "MASTER_PORT" not in env:
                env["MASTER_PORT"] = str(args.ddp_port or 29511)
            dist.init_process_group("gloo", rank=rank, world_size=W)
            meter = tr.PeerMeter(K, model.clock)
            ddp = ddp_wrap(args, model, meter)
            what += (f"DDP over gloo real, hook {args.ddp_hook or 'none'} (its CPU work that "
                     "a GPU would do measured)")
        else:
            ddp = model
            what += "no communication (the compute-only limit)"
        if "optimizer_ms" not in trace or not local:
            what += "; optimizer step " + tr.optimizer_seconds(trace, model.nelem)[1]
    ready = tr.ReadyTimes(model.tensors, model.clock) if args.replay_times and rank == 0 else None
    if rank == 0:
        tag = ("" if args.backend == "pipecompress" else
               " (local, 1 process)" if args.backend == "local" else
               f" (DDP, gloo, hook {args.ddp_hook or 'none'})")
        print(f"torch replay:{trace['model']}{tag}: {model.nelem} parameters; {W} workers x "
              f"batch {B}, {total} iterations", flush=True)
        print(what, flush=True)
    x = torch.zeros(1, requires_grad=True)
    iters, peer = [], []  # each iteration's time; DDP's hook work per iteration
    t0, t_prev, stop = time.time(), None, False
    for it in range(total):
        model.iteration = it
        if ready:
            ready.start()
        if args.backend == "pipecompress":
            model(x).sum().backward()
            t_end, b_end = time.perf_counter(), model.clock.blocked
            stop = pc.iteration_end()
            # what pc.iteration_end did besides the runtime's call (zeroing the binding's
            # gradient buffers: device work on a GPU) is not charged to the schedule
            model.clock.credit_host(time.perf_counter() - t_end -
                                    (model.clock.blocked - b_end))
        else:
            ddp(x).sum().backward()
            if meter is not None:
                model.clock.sync()  # the step waits for DDP's allreduce
            model.optimizer_hold()
        x.grad = None
        if meter is not None:
            peer.append(meter.take())
        now = time.perf_counter()
        if ready:
            ready.end({"iteration": it, "iter_s": now - model.clock.iter_start, "end_s": now})
        if t_prev is not None:
            iters.append(now - t_prev)
        t_prev = now
        if stop:
            break
    wall = time.time() - t0
    status = pc.finish() if args.backend == "pipecompress" else 0
    if args.backend == "ddp":
        dist.barrier()
        del ddp
        gc.collect()
        dist.destroy_process_group()
    if rank != 0:
        return status
    replay_report(args, model, path, W, B, K, iters, peer, ready, stop, wall, total, allreduce)
    return status


if __name__ == "__main__":
    sys.exit(main())
