#!/usr/bin/env python3
"""loss_compare.py: does a run's training loss fall as a reference run's does?

    loss_compare.py REFERENCE.jsonl RUN.jsonl [--window N] [--tolerance T]

Reads rank 0's worker lines of two pc-train --metrics files (same flags but the device,
say), takes each run's mean loss over its first and its last N iterations (default 20),
and passes when the run's loss fell (last < first / 2) and its last mean is within T
(default 0.1, plus 10 % of the reference's) of the reference's last mean: the GPU engine
rounds differently from the CPU engine (cuBLAS sums in another order), so the two runs
drift apart bit by bit, but training must go the same way. Prints one line; exit status
0 (pass), 1 (fail), 2 (bad input: a missing file, too few iterations)."""
import json
import sys


def losses(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("rank") == 0 and r.get("role") == "worker" and "loss" in r:
                    out.append((r["iteration"], r["loss"]))
    except (OSError, ValueError) as e:
        sys.exit("loss_compare.py: %s: %s" % (path, e))
    return [l for _, l in sorted(out)]


def main():
    args = sys.argv[1:]
    window, tol = 20, 0.1
    try:
        while len(args) > 2:
            if args[-2] == "--window":
                window = int(args[-1])
            elif args[-2] == "--tolerance":
                tol = float(args[-1])
            else:
                raise ValueError(args[-2])
            args = args[:-2]
    except ValueError as e:
        print("loss_compare.py: bad option %s" % e, file=sys.stderr)
        sys.exit(2)
    if len(args) != 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        sys.exit(2)
    ref, run = losses(args[0]), losses(args[1])
    for name, l in ((args[0], ref), (args[1], run)):
        if len(l) < 2 * window:
            print("loss_compare.py: %s: %d iterations, need %d" % (name, len(l), 2 * window),
                  file=sys.stderr)
            sys.exit(2)
    mean = lambda xs: sum(xs) / len(xs)
    r0, r1 = mean(ref[:window]), mean(ref[-window:])
    g0, g1 = mean(run[:window]), mean(run[-window:])
    ok = g1 < g0 / 2 and abs(g1 - r1) <= tol + 0.1 * r1
    print("loss %.4f -> %.4f (reference %.4f -> %.4f, tolerance %.3f): %s" %
          (g0, g1, r0, r1, tol + 0.1 * r1, "as on the reference" if ok else "DIFFERENT"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
