#!/usr/bin/env python3
"""gpu_train_report.py: the targets of GPU training, from scripts/gpu-check.sh's results.

    gpu_train_report.py [--engine OURS.json TORCH.json TORCH_STEP.json]
                        [--e2e GPU_E2E.json CPU_E2E.json]

--engine: pc-bench engine --device cuda (our engine's forward and backward), and
torch_engine.py's lines for the same cnn and batch without (--no-step) and with the SGD
step. The target, ours at least 0.8x PyTorch, is taken against forward and backward alone
(the same work; the step is the servers' in PipeCompress); the step's figure is shown too.
--e2e: scripts/bench/e2e.sh's e2e.json of the wide model with --compress-on gpu (modes 1,
3, 4, 5) and with --compress-on cpu (modes 3, 4; its best is set against the dense
allreduce of the gpu run: mode 1 compresses nothing). Targets: the best PipeCompress mode
at least 5x the dense allreduce, and a hidden fraction (T3 - T4) / C3 of at least 0.9.
Prints one line per target ("met" or "MISSED", or why it could not be judged); exit 0
(figures printed, met or not), 2 on unreadable input."""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("gpu_train_report.py: %s: %s" % (path, e))


def verdict(ok):
    return "met" if ok else "MISSED"


def engine(ours, torch, step):
    o, t, s = load(ours), load(torch), load(step)
    r = o["samples_per_s"] / t["samples_per_s"]
    print("engine, %s, batch %d on %s: ours %.0f samples/s, PyTorch %.0f forward and backward "
          "(%.0f with its SGD step): %.2fx (target >= 0.8x): %s" %
          (o["model"], o["batch"], o.get("device_name", "?"), o["samples_per_s"],
           t["samples_per_s"], s["samples_per_s"], r, verdict(r >= 0.8)))


def e2e(gpu_path, cpu_path):
    gpu, cpu = load(gpu_path), load(cpu_path)

    def times(d):
        out = {}
        for r in d["runs"]:
            if not r.get("failed") and r.get("t_iteration_median"):
                out[r["mode"]] = r
        return out

    g, c = times(gpu), times(cpu)
    t1 = g.get(1)
    for name, runs in (("gpu", g), ("cpu", c)):
        r0 = next(iter(runs.values()), {})
        head = "%s, %s, %s workers, batch %s, --compress-on %s:" % (
            r0.get("model", "?"), r0.get("net", "?"), r0.get("workers", "?"), r0.get("batch", "?"),
            name)
        best = min((m for m in (3, 4, 5, 6) if m in runs),
                   key=lambda m: runs[m]["t_iteration_median"], default=None)
        if t1 and best:
            s = t1["t_iteration_median"] / runs[best]["t_iteration_median"]
            print("%s best PipeCompress (mode %d, %.0f ms) over the dense allreduce (%.0f ms): "
                  "%.2fx (target >= 5x): %s" %
                  (head, best, 1e3 * runs[best]["t_iteration_median"],
                   1e3 * t1["t_iteration_median"], s, verdict(s >= 5)))
        else:
            print("%s best over the allreduce: not judged (runs missing or failed)" % head)
        if 3 in runs and 4 in runs and runs[3]["t_compress"] > 0:
            t3, t4, c3 = (runs[3]["t_iteration_median"], runs[4]["t_iteration_median"],
                          runs[3]["t_compress"])
            h = (t3 - t4) / c3
            print("%s hidden fraction (T3 - T4) / C3 = (%.1f - %.1f) / %.1f ms = %.2f "
                  "(target >= 0.9): %s" % (head, 1e3 * t3, 1e3 * t4, 1e3 * c3, h,
                                           verdict(h >= 0.9)))
        else:
            print("%s hidden fraction: not judged (runs missing or failed)" % head)


def main():
    a = sys.argv[1:]
    if not a or a[0] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if a else 2)
    while a:
        if a[0] == "--engine" and len(a) >= 4:
            engine(*a[1:4])
            a = a[4:]
        elif a[0] == "--e2e" and len(a) >= 3:
            e2e(*a[1:3])
            a = a[3:]
        else:
            sys.exit("gpu_train_report.py: bad arguments at '%s' (see --help)" % a[0])


if __name__ == "__main__":
    main()
