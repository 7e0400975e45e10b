#!/usr/bin/env python3
"""torch.topk on the GPU, timed as pc-bench compress --device cuda times its codecs (host
clock, each call waited for with torch.cuda.synchronize, median of --reps): the third
top-k baseline of scripts/gpu-check.sh. The data has the distribution of pc-bench's
(sign * 1e-3 * u^-1.2, u uniform in (0, 1]) from torch's own generator; top-k of the
magnitudes, k = ceil(ratio * n), sorted=False (torch's fastest form).

Usage: torch_topk.py --sizes N,N,... --ratios R,R,... [--reps R] --json FILE
Exit status: 0, 1 (no CUDA device for torch, or torch missing), 2 (bad flags)."""
import argparse
import json
import math
import statistics
import sys
import time


def number_list(text, kind):
    try:
        values = [kind(float(v)) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of numbers")
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}': every value must be positive")
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=lambda t: number_list(t, int), required=True)
    ap.add_argument("--ratios", type=lambda t: number_list(t, float), required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    try:
        import torch
    except ImportError:
        print("torch_topk.py: PyTorch is not installed", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("torch_topk.py: torch sees no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda", 0)
    gen = torch.Generator(device=dev)
    gen.manual_seed(2022)
    rows = []
    for n in a.sizes:
        u = torch.rand(n, device=dev, generator=gen).clamp_min(2.0 ** -32)
        sign = torch.where(torch.rand(n, device=dev, generator=gen) < 0.5, -1.0, 1.0)
        x = sign * 1e-3 * u.pow(-1.2)
        mag = x.abs()
        for r in a.ratios:
            k = min(n, math.ceil(r * n))
            torch.topk(mag, k, sorted=False)  # warm-up (kernel selection, allocator)
            torch.cuda.synchronize()
            times = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                torch.topk(x.abs(), k, sorted=False)  # |x| included, as the codecs read x
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e3)
            rows.append({"n": n, "ratio": r, "k": k, "topk_ms": statistics.median(times)})
            print(f"torch.topk n={n} ratio={r:g}: {rows[-1]['topk_ms']:.3f} ms", flush=True)
    with open(a.json, "w") as f:
        json.dump({"benchmark": "torch.topk", "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(dev), "reps": a.reps, "rows": rows}, f,
                  indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
