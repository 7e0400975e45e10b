#!/usr/bin/env python3
"""How far Adam moves a parameter whose gradient arrives every P iterations.

Error feedback holds an entry of a sparse codec back and sends it, every P iterations on
average (P ~ 1 / density for a typical entry), as the sum of the P gradients it held. This
models one such entry on the servers, with torch's Adam arithmetic in float64 (betas 0.9,
0.999, eps 1e-8, bias correction), under the servers' three ways of stepping it:

  dense   m and v move every iteration (zeros between arrivals): --adam-moments dense
  lazy    m, v and the parameter move only at an arrival, the step count every iteration
          (torch.optim.SparseAdam's state['step']): --adam-moments lazy
  frozen  every entry travels for the first F iterations (dense=F), then v and its bias
          correction stay as they were (--adam-freeze-after F): 1-bit Adam's recipe

and prints, for each P, the distance the parameter moves per iteration over the second
half of the run, as a multiple of the uncompressed run's (P = 1, where all three are
torch's Adam). The gradient is 1 + NOISE * N(0, 1) each iteration (seeded; --noise 0: a
constant gradient), so a multiple below 1 is an entry that moves less than it would
uncompressed. A model of the arithmetic, not a measurement of training: no other entry,
no loss, no learning-rate schedule.

  scripts/bench/adam_arrivals.py [--iters N] [--frozen-after F] [--noise X] [--seed S]
"""
import argparse
import math
import random
import sys

B1, B2, EPS = 0.9, 0.999, 1e-8


def distance(period, mode, iters, frozen_after, noise, seed):
    """Mean step per iteration over the second half of `iters` (lr = 1)."""
    rnd = random.Random(seed)
    m = v = held = moved = 0.0
    v_frozen = None
    for t in range(1, iters + 1):
        held += 1.0 + noise * rnd.gauss(0.0, 1.0)
        dense_phase = mode == "frozen" and t <= frozen_after
        arrived = dense_phase or t % period == 0
        g = held if arrived else 0.0
        if arrived:
            held = 0.0
        step = 0.0
        if mode == "lazy" and not arrived:
            pass
        elif mode == "frozen" and not dense_phase:
            m = B1 * m + (1 - B1) * g
            step = (m / (1 - B1 ** t)) / (v_frozen + EPS)
        else:
            m = B1 * m + (1 - B1) * g
            v = B2 * v + (1 - B2) * g * g
            step = (m / (1 - B1 ** t)) / (math.sqrt(v / (1 - B2 ** t)) + EPS)
        if mode == "frozen" and t == frozen_after:
            v_frozen = math.sqrt(v / (1 - B2 ** t))
        if t > iters // 2:
            moved += step
    return moved / (iters - iters // 2)


def main(argv):
    ap = argparse.ArgumentParser(prog="adam_arrivals.py", description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--frozen-after", type=int, default=1000)
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    bad = (f"--iters {a.iters}: must be at least 4" if a.iters < 4 else
           f"--frozen-after {a.frozen_after}: must be above 0 and below half of --iters "
           f"({a.iters})" if not 0 < a.frozen_after < a.iters // 2 else
           f"--noise {a.noise:g}: must be a finite number >= 0"
           if not (a.noise >= 0 and math.isfinite(a.noise)) else None)
    if bad:
        print(f"adam_arrivals.py: {bad}", file=sys.stderr)
        return 2
    modes = ("dense", "lazy", "frozen")
    ref = distance(1, "dense", a.iters, a.frozen_after, a.noise, a.seed)
    print(f"Adam's step per iteration with one arrival every P iterations, as a multiple of "
          f"the uncompressed run's ({a.iters} iterations, gradient 1 + {a.noise:g} N(0,1), "
          f"frozen: every entry for {a.frozen_after} then v fixed; a model, not training)")
    print("%8s %8s" % ("P", "density") + "".join("%9s" % m for m in modes))
    for p in (1, 10, 100, 1000):
        row = [distance(p, m, a.iters, a.frozen_after, a.noise, a.seed) / ref for m in modes]
        print("%8d %8g" % (p, 1.0 / p) + "".join("%9.3f" % x for x in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
