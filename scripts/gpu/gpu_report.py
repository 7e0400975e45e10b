#!/usr/bin/env python3
"""The summary of scripts/gpu-check.sh: pc-bench compress --device cuda's JSON (and
torch_topk.py's, when PyTorch ran) side by side, with the targets of the GPU codecs:
  exact top-k (ef=off) at n = 1e8, 1 %: <= 3 x the one-read bound, >= 10 x faster than the
    CUB-sort top-k, faster than torch.topk;
  the EF fold, fp16, qsgd and terngrad: <= 1.5 x the time of the bytes they must move at
    the read kernel's bandwidth.
The codecs' times on the device are their compress times minus the copy of their message to
the host measured alone (copy_ms); torch.topk and the sort leave their results on the
device. Every ratio is computed from times measured in the same run.

Usage: gpu_report.py COMPRESS_JSON [TORCH_JSON] > summary.txt"""
import json
import sys


def verdict(ok):
    return "met" if ok else "NOT met"


def main(argv):
    if len(argv) not in (2, 3):
        print("usage: gpu_report.py COMPRESS_JSON [TORCH_JSON]", file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            c = json.load(f)
        t = None
        if len(argv) == 3:
            with open(argv[2]) as f:
                t = json.load(f)
    except (OSError, ValueError) as e:
        print(f"gpu_report.py: {e}", file=sys.stderr)
        return 1
    if c.get("device") != "cuda":
        print(f"gpu_report.py: {argv[1]} is not from pc-bench compress --device cuda",
              file=sys.stderr)
        return 1
    base = {b["n"]: b for b in c["baselines"]}
    torch_ms = {(r["n"], r["ratio"]): r["topk_ms"] for r in (t or {}).get("rows", [])}
    biggest = max(base)
    out = [f"GPU: {c.get('gpu', '?')}; medians of {c.get('reps')} repetitions"
           + (f"; torch {t.get('torch')}" if t else "; torch.topk not measured")]
    out.append("")
    out.append(f"{'baselines':<22} {'n':>10} {'read ms':>9} {'copy ms':>9} {'read GB/s':>10}")
    for n in sorted(base):
        b = base[n]
        out.append(f"{'':<22} {n:>10} {b['read_ms']:>9.3f} {b.get('copy_ms', float('nan')):>9.3f} "
                   f"{4.0 * n / b['read_ms'] * 1e-6:>10.0f}")
    out.append("")
    out.append(f"{'exact top-k (ef=off)':<22} {'n':>10} {'ratio':>6} {'dev ms':>9} {'read ms':>9} "
               f"{'x read':>7} {'sort ms':>9} {'sort/pc':>8} {'torch ms':>9} {'torch/pc':>8}")
    verdicts = []
    for r in c["codecs"]:
        if not (r["spec"].startswith("topk:") and "ef=off" in r["spec"]):
            continue
        n, ratio, ms = r["n"], r["ratio"], r["compress_ms"] - r.get("copy_ms", 0.0)
        b = base[n]
        sort_ms = b["sort_topk_ms"].get(f"{ratio:g}", 0.0)
        tms = torch_ms.get((n, ratio))
        x_read = ms / b["read_ms"]
        out.append(f"{'':<22} {n:>10} {ratio:>6g} {ms:>9.3f} {b['read_ms']:>9.3f} {x_read:>7.2f} "
                   f"{sort_ms:>9.3f} {sort_ms / ms if sort_ms else 0:>8.1f} "
                   f"{tms if tms is not None else float('nan'):>9.3f} "
                   f"{tms / ms if tms else float('nan'):>8.2f}")
        if n == 100000000 and ratio == 0.01:
            verdicts.append(f"top-k at 1e8, 1 %: {x_read:.2f} x the read bound (target <= 3: "
                            f"{verdict(x_read <= 3)})")
            if sort_ms:
                verdicts.append(f"top-k at 1e8, 1 %: {sort_ms / ms:.1f} x faster than the CUB-sort "
                                f"top-k (target >= 10: {verdict(sort_ms / ms >= 10)})")
            if tms:
                verdicts.append(f"top-k at 1e8, 1 %: {tms / ms:.2f} x torch.topk's speed (target "
                                f"> 1: {verdict(tms / ms > 1)})")
            else:
                verdicts.append("top-k at 1e8, 1 %: torch.topk not measured (no PyTorch with CUDA)")
    out.append("")
    out.append(f"{'bandwidth-bound':<34} {'n':>10} {'dev ms':>9} {'bound ms':>9} {'x bound':>8}")
    for r in c["codecs"]:
        if r.get("must_bytes", 0) <= 0:
            continue
        n = r["n"]
        bw = 4.0 * n / (base[n]["read_ms"] * 1e-3)
        bound_ms = r["must_bytes"] / bw * 1e3
        dev = r["compress_ms"] - r.get("copy_ms", 0.0)
        x = dev / bound_ms
        out.append(f"{r['spec']:<34.34} {n:>10} {dev:>9.3f} {bound_ms:>9.3f} {x:>8.2f}")
        if n == biggest:
            verdicts.append(f"{r['spec']} at n={n}: {x:.2f} x its bandwidth bound (target <= 1.5: "
                            f"{verdict(x <= 1.5)})")
    out.append("")
    out.append(f"{'every codec':<44} {'n':>10} {'comp ms':>9} {'copy ms':>9} {'dec ms':>9} "
               f"{'bytes':>12}")
    for r in c["codecs"]:
        out.append(f"{r['spec']:<44.44} {r['n']:>10} {r['compress_ms']:>9.3f} "
                   f"{r.get('copy_ms', 0.0):>9.3f} {r['decompress_ms']:>9.3f} {r['bytes']:>12}")
    out.append("")
    out.append("targets:")
    out.extend("  " + v for v in verdicts) if verdicts else out.append(
        "  none at these sizes (the targets are stated at n = 1e8)")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
