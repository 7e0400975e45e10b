#!/usr/bin/env python3
"""PyTorch training the engine's networks, timed as pc-bench engine times
PipeCompress's engine: the reference of scripts/gpu-check.sh's engine target (ours at least
0.8x PyTorch's samples/s on the cnn, same GPU, same batch).

The networks are src/engine/pc_model.c's, layer for layer: cnn = conv 5x5x32 (same padding), ReLU,
2x2 max-pool, conv 5x5x64, ReLU, pool, fc 1024, ReLU, dropout 0.5, fc 10; mlp =
784-256-128-10 with ReLU; wide = 784-4096-4096-4096-10 with ReLU; on 1x28x28 inputs, 10
classes, softmax cross-entropy (mean). Each iteration does what pc-bench engine
does, plus the optimiser's step: copy the batch from page-locked host memory
(non_blocking), forward in train mode, backward, then plain SGD (lr 0.01, no momentum;
--no-step leaves it out). --warmup untimed iterations first (3, as pc-bench), then --iters
timed ones between two torch.cuda.synchronize calls. float32 throughout: TF32 is turned off
for matmuls and cuDNN (PyTorch turns it on for cuDNN convolutions by default), as
PipeCompress's engine never uses it; --tf32 allows it.

Prints one JSON line with pc-bench engine's keys (benchmark, engine, device,
device_name, model, params, batch, iters, warmup, seconds, ms_per_iter, samples_per_s) and
torch's settings.

Usage: torch_engine.py [--model cnn] [--batch 64] [--iters 100] [--warmup 3]
                       [--device cuda|cpu] [--no-step] [--tf32] [--cudnn-benchmark]
Run with /usr/bin/python3 on the GPU machine (its PyTorch has CUDA).
Exit status: 0; 1 PyTorch missing or (--device cuda) no CUDA device for it; 2 bad flags."""
import argparse
import json
import sys
import time

THREADS_CPU = 1  # --device cpu: one core, as pc-bench model --device cpu


def positive(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1")
    return v


def build(nn, kind, classes=10):
    """The network of src/engine/pc_model.c for 1x28x28 inputs."""
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(1024, classes))
    widths = [784, 256, 128] if kind == "mlp" else [784, 4096, 4096, 4096]
    layers = [nn.Flatten()]
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], classes))
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["mlp", "cnn", "wide"], default="cnn")
    ap.add_argument("--batch", type=positive, default=64)
    ap.add_argument("--iters", type=positive, default=100)
    ap.add_argument("--warmup", type=positive, default=3)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--no-step", action="store_true", help="forward and backward only")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 (off by default)")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="let cuDNN time its algorithms first (off: PyTorch's default)")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch import nn
    except ImportError:
        print("torch_engine.py: PyTorch is not installed", file=sys.stderr)
        return 1
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_engine.py: torch sees no CUDA device", file=sys.stderr)
        return 1
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
        torch.backends.cudnn.benchmark = a.cudnn_benchmark
        dev = torch.device("cuda", 0)
        name = torch.cuda.get_device_name(dev)
        sync = torch.cuda.synchronize
    else:
        torch.set_num_threads(THREADS_CPU)
        dev = torch.device("cpu")
        name = "cpu"
        sync = lambda: None  # noqa: E731
    torch.manual_seed(1)
    model = build(nn, a.model).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # One fixed batch in page-locked memory (pixels in [0, 1], labels 0..9), copied each time.
    x_host = torch.rand(a.batch, 1, 28, 28)
    y_host = torch.randint(0, 10, (a.batch,))
    if cuda:
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()

    def step():
        x = x_host.to(dev, non_blocking=True)
        y = y_host.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if not a.no_step:
            opt.step()

    for _ in range(a.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        step()
    sync()
    seconds = time.perf_counter() - t0
    print(json.dumps({
        "benchmark": "model-throughput", "engine": "torch", "device": a.device,
        "device_name": name, "model": a.model,
        "params": sum(p.numel() for p in model.parameters()), "batch": a.batch,
        "iters": a.iters, "warmup": a.warmup, "seconds": round(seconds, 6),
        "ms_per_iter": round(seconds * 1e3 / a.iters, 4),
        "samples_per_s": round(a.iters * a.batch / seconds, 1),
        "torch": torch.__version__, "step": "none" if a.no_step else "sgd",
        "tf32": a.tf32, "cudnn_benchmark": a.cudnn_benchmark if cuda else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
