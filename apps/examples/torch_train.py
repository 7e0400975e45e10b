#!/usr/bin/python3
"""Train a PyTorch model on Fashion-MNIST through PipeCompress (or, for comparison, through
torch's DistributedDataParallel), data-parallel under mpirun:

    mpirun -np 3 python3 apps/examples/torch_train.py --epochs 3 --compress none
    mpirun -np 3 python3 apps/examples/torch_train.py --arch lstm --compress topk:ratio=0.01
    mpirun -np 2 python3 apps/examples/torch_train.py --backend ddp --epochs 3

Its own flags are below (--help lists them, then PipeCompress's); every other flag is
PipeCompress's, as on pc-train's command line (--servers, --compress, --pipeline, --lr,
--momentum, --iters, --metrics, --checkpoint-dir, --resume, ...). The data, their order and
each worker's shard are pc-train's (pipecompress.data), and the default learning-rate
schedule is cosine over --epochs as in pc-train, so `--arch cnn` trains pc-train's cnn
(same layers, same initialisation scheme) on the same samples in the same order.

--backend ddp trains the same model on the same shards with torch.optim.SGD and
DistributedDataParallel over gloo (every rank a worker, no server), for benchmarks; it
reads --lr, --momentum, --weight-decay, --seed, --iters, --lr-schedule constant|cosine.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..",
                                "python"))
import pipecompress as pc  # noqa: E402


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


def build(arch, seed, dropout):
    """The model, seeded: every worker builds the same one (worker 0's is used in any case).
    The cnn takes pc-train's initialisation: He-uniform weights, Xavier-uniform for the
    last layer, zero biases; the LSTM keeps torch's own."""
    torch.manual_seed(seed)
    if arch == "lstm":
        return Lstm()
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


def evaluate(model, images, labels, batch=1000):
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(labels), batch):
            out = model(images[i:i + batch])
            loss += F.cross_entropy(out, labels[i:i + batch], reduction="sum").item()
            correct += (out.argmax(1) == labels[i:i + batch]).sum().item()
    model.train()
    return correct / len(labels), loss / len(labels)


def load(args, train):
    if args.data == "synthetic":
        n = args.synthetic_samples if train else max(100, args.synthetic_samples // 6)
        return pc.data.synthetic(n, args.data_seed, train=train)
    return pc.data.fashion_mnist(args.data, train=train)


def ddp_flags(rest):
    """The PipeCompress flags the DDP baseline understands, with the runtime's defaults."""
    ap = argparse.ArgumentParser(prog="torch_train.py --backend ddp")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--iters", type=int, default=0)
    ap.add_argument("--lr-schedule", choices=["constant", "cosine"], default="cosine")
    return ap.parse_args(rest)


def main():
    ap = argparse.ArgumentParser(
        add_help=False,
        description="Train a torch model on Fashion-MNIST through PipeCompress "
        "(other flags: PipeCompress's, listed after these)")
    ap.add_argument("-h", "--help", action="store_true", help="these flags, then the runtime's")
    ap.add_argument("--arch", choices=["cnn", "lstm"], default="cnn")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="samples per worker per iteration")
    ap.add_argument("--dropout", type=float, default=0.5, help="cnn: before the last layer")
    ap.add_argument("--data", default=pc.data.FASHION_MNIST, help="IDX directory or synthetic")
    ap.add_argument("--synthetic-samples", type=int, default=20000)
    ap.add_argument("--data-seed", type=int, default=1, help="--data synthetic: its seed")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch's threads per rank, and OpenBLAS's (both backends)")
    ap.add_argument("--backend", choices=["pipecompress", "ddp"], default="pipecompress")
    ap.add_argument("--ddp-port", type=int,
                    help="DDP's rendezvous port [$MASTER_PORT, or 29511]")
    ap.add_argument("--save", metavar="FILE", help="rank 0: the trained state_dict")
    ap.add_argument("--eval", choices=["epoch", "end", "none"], default="epoch")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--warmup", type=int, default=10, metavar="N",
                    help="iterations left out of the reported rate (start-up, first touches)")
    args, rest = ap.parse_known_args()
    if args.help:  # the script's flags, then the runtime's (pc.init prints them and exits)
        if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")) == "0":
            ap.print_help()  # once, as pc.init prints the runtime's on rank 0 only
            print()
        pc.init(["--help"])
    if args.epochs < 1 or args.batch < 1 or args.threads < 1 or args.warmup < 0:
        ap.error("--epochs, --batch and --threads must be positive, --warmup not negative")
    torch.set_num_threads(args.threads)
    pc.set_blas_threads(args.threads)  # torch's matrix products (OpenBLAS on Debian) too
    images, labels = load(args, train=True)
    n, B = len(labels), args.batch

    def run_length(workers):
        return args.epochs * (n // (workers * B))

    if args.backend == "ddp":
        return train_ddp(args, rest, images, labels, run_length)
    pc.init(["--lr-schedule", "cosine"] + rest, run_length=run_length)
    if pc.is_server():
        return pc.run_server()
    W, rank = pc.workers(), pc.rank()
    cfg = pc.config()
    seed, total = int(cfg["seed"]), int(cfg["iters"])
    ipe = n // (W * B)
    if ipe == 0:
        raise pc.Error("--batch: the training set is smaller than one iteration of all workers")
    model = build(args.arch, seed, args.dropout)
    pc.attach(model)
    test = load(args, train=False) if rank == 0 and args.eval != "none" else None
    first = pc.iteration()
    if rank == 0:
        print(f"torch {args.arch}: {sum(p.numel() for p in model.parameters())} parameters; "
              f"{W} workers x batch {B}, {ipe} iterations per epoch, {total} in all"
              + (f"; resumed at {first}" if first else ""), flush=True)

    def on_epoch_end(epoch, it):
        if rank == 0 and test is not None and args.eval == "epoch":
            pc.synchronize()
            acc, tl = evaluate(model, *test)
            print(f"epoch {epoch + 1}: test accuracy {100 * acc:.2f}%, test loss {tl:.4f} "
                  f"({time.time() - t0:.1f} s)", flush=True)
            pc.metrics_note(f'{{"rank": 0, "role": "eval", "epoch": {epoch + 1}, '
                            f'"iteration": {it}, "test_accuracy": {acc:.5f}}}')

    t0 = time.time()
    stop, rate = run_loop(args, model, images, labels, seed, first, total, ipe, W, rank,
                          step=lambda: pc.iteration_end(), report=pc.report,
                          on_epoch_end=on_epoch_end, settle=pc.synchronize)
    it_done = pc.iteration()
    status = pc.finish()  # the model now holds the last update
    wall = time.time() - t0
    if rank == 0 and stop:
        print(f"stopped by signal {pc.stop_signal()} after {it_done} iterations"
              + ("; continue with --resume" if cfg["checkpoint-dir"] else ""), flush=True)
    elif rank == 0:
        report_done(args, model, test, total - first, wall, rate)
    return status


def report_done(args, model, test, iters, wall, rate):
    """Rank 0, after a run that finished (both backends): the "done:" line that
    scripts/bench/torch-ddp.sh reads, the final test accuracy, --save."""
    line = f"done: {iters} iterations in {wall:.1f} s"
    if rate is None:
        line += f" (too few iterations for a rate after --warmup {args.warmup})"
    else:
        line += f" ({rate:.0f} samples/s after {args.warmup} warm-up iterations)"
    if test is not None:
        acc, _ = evaluate(model, *test)
        line += f"; final test accuracy {100 * acc:.2f}%"
    print(line, flush=True)
    if args.save:
        torch.save(model.state_dict(), args.save)


def run_loop(args, model, images, labels, seed, first, total, ipe, W, rank, step, report,
             on_epoch_end, settle=lambda: None):
    """The training loop both backends share: pc-train's data order and shards, dropout
    seeded by (seed, rank), loss and accuracy of each batch reported. Returns (stopped by a
    signal, samples per second over the iterations after the first --warmup ones, or None
    when there were none)."""
    n, B = len(labels), args.batch
    torch.manual_seed(seed * 1000 + rank)
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


def train_ddp(args, rest, images, labels, run_length):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    f = ddp_flags(rest)
    env = os.environ
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("RANK", "0")))
    world = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("WORLD_SIZE", "1")))
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    if args.ddp_port is not None or "MASTER_PORT" not in env:
        env["MASTER_PORT"] = str(args.ddp_port or 29511)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    n, B, W = len(labels), args.batch, world
    ipe = n // (W * B)
    if ipe == 0:
        raise SystemExit("torch_train.py: --batch: the training set is smaller than one "
                         "iteration of all workers")
    total = f.iters or run_length(W)
    model = build(args.arch, f.seed, args.dropout)
    ddp = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=f.lr, momentum=f.momentum,
                          weight_decay=f.weight_decay)

    def lr_at(t):  # pc_optim_lr's schedules
        if f.lr_schedule == "cosine" and total > 0:
            return 0.0 if t >= total else f.lr * 0.5 * (1 + math.cos(math.pi * t / total))
        return f.lr

    state = {"t": 0}

    def step():
        for group in opt.param_groups:
            group["lr"] = lr_at(state["t"])
        opt.step()
        opt.zero_grad(set_to_none=False)
        state["t"] += 1
        return False

    test = load(args, train=False) if rank == 0 and args.eval != "none" else None
    if rank == 0:
        print(f"torch {args.arch} (DDP, gloo): {W} workers x batch {B}, {ipe} iterations "
              f"per epoch, {total} in all", flush=True)

    def on_epoch_end(epoch, it):
        if rank == 0 and test is not None and args.eval == "epoch":
            acc, tl = evaluate(model, *test)
            print(f"epoch {epoch + 1}: test accuracy {100 * acc:.2f}%, test loss {tl:.4f} "
                  f"({time.time() - t0:.1f} s)", flush=True)

    t0 = time.time()
    _, rate = run_loop(args, ddp, images, labels, f.seed, 0, total, ipe, W, rank, step,
                       report=lambda loss, acc: None, on_epoch_end=on_epoch_end)
    wall = time.time() - t0
    if rank == 0:
        report_done(args, model, test, total, wall, rate)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
