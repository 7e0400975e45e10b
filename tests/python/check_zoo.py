#!/usr/bin/python3
"""check_zoo.py OUTDIR: what torch_cases.py zoo left, as the binding defines it
(doc/python.md): every worker starts from worker 0's parameters, buffers and frozen
parameters; parameters stay identical on every worker after every iteration; tied
parameters stay one; an unused parameter and a frozen one are never changed; a parameter
read outside its own module trains; BatchNorm's statistics are kept local (they differ
after training on different shards). Prints one line per property; exit 1 on the first
that fails."""
import sys

import torch

out = sys.argv[1]
init = [torch.load(f"{out}/init-r{r}.pt") for r in (0, 1)]
final = [torch.load(f"{out}/final-r{r}.pt") for r in (0, 1)]
hashes = [open(f"{out}/hash-r{r}.txt").read().split("\n") for r in (0, 1)]


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        sys.exit(1)


check(all(torch.equal(init[0][k], init[1][k]) for k in init[0]),
      "after attach every worker holds worker 0's parameters, buffers and frozen parameters")
check(hashes[0] == hashes[1] and len(hashes[0]) > 2,
      f"parameters identical on both workers after each of {len(hashes[0]) - 1} iterations")
digests = [line.split()[1] for line in hashes[0] if line.strip()]
check(len(set(digests)) == len(digests), "and they changed at every iteration")
f0 = final[0]
check(torch.equal(f0["enc.weight"], f0["dec.weight"]), "tied weights are still one")
check(not torch.equal(f0["enc.weight"], init[0]["enc.weight"]), "tied weights trained")
check(torch.equal(f0["unused.weight"], init[0]["unused.weight"]) and
      torch.equal(f0["unused.bias"], init[0]["unused.bias"]), "the unused branch is unchanged")
check(torch.equal(f0["frozen.weight"], init[0]["frozen.weight"]), "the frozen layer is unchanged")
check(not torch.equal(f0["side.weight"], init[0]["side.weight"]),
      "a weight read outside its own module trained")
check(all(torch.equal(final[0][k], final[1][k]) for k in f0 if "bn.running" not in k
          and "num_batches" not in k), "final parameters identical on both workers")
check(not torch.equal(final[0]["bn.running_mean"], final[1]["bn.running_mean"]),
      "BatchNorm running statistics are each worker's own (kept local)")
