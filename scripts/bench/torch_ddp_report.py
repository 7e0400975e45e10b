#!/usr/bin/python3
"""torch_ddp_report.py: summarise the runs of scripts/bench/torch-ddp.sh.

  torch_ddp_report.py RUNS_DIR OUT_DIR

RUNS_DIR holds NAME.meta.json (what the run was, its exit status) and NAME.log (its whole
output) per run. A run's rate is the samples per second of the example's last "done: N
iterations in T s (R samples/s after W warm-up iterations)" line (rank 0's count of every
worker's samples after the warm-up); its iteration is workers x batch / rate, with the
workers the run trained with (its start line: --mode auto's allreduce makes the server
rank a worker too; batch / rate for the one-process compute run). Per network, worker count and setting: the median
rate over the rounds (--repeat), its ratio to DDP's (fp32) median in the same cell, to
the best DDP variant's there (fp32, fp16, PowerSGD: the best peer), and its iteration's
ratio to the compute-only run's (the limit); --mode auto's choice from its log. A replayed
run's DDP settings (--arch replay:PATH) also log their best case, "replay: peer's CPU work
... best case T ms (R samples/s)", the hooks' CPU work that a GPU would do removed: the
best peer is then chosen, and compared with, at its best case (doc/replay.md). Writes
OUT_DIR/summary.txt (also printed) and OUT_DIR/summary.json (OUT_DIR made if missing, each
file whole or not at all). Exit status: 0; 1 when a run failed or gave no rate (reported as
such, the others summarised); 2 with one line on bad input.
"""
import os
import re
import statistics as st
import sys

import torch_runs  # beside this file

# The example's start line: how many workers the run trained with (--mode auto's allreduce
# makes the server rank a worker too).
START = re.compile(r"^torch \S+(?: \([^)]*\))?: \d+ parameters; (\d+) workers? x batch", re.M)
DONE = re.compile(r"^done: (\d+) iterations in ([0-9.]+) s \((\d+) samples/s after (\d+) "
                  r"warm-up iterations\)", re.M)
# A failed run's reason: the example's one-line error, the launcher's time limit, Python's.
WHY = re.compile(r"^(torch_train\.py: |pc-mpirun\.sh: |[A-Za-z.]*(Error|Exception): ).*", re.M)
NETS = {"shm": "Open MPI's shared memory; DDP's gloo over TCP on the loopback",
        "10gbit": "every rank over TCP on a loopback shaped to 10 Gbit/s (tbf, own namespace)",
        "1gbit": "every rank over TCP on a loopback shaped to 1 Gbit/s (tbf, own namespace)",
        "node-10gbit": "one rank per emulated node, each node's own link shaped to 10 Gbit/s",
        "node-1gbit": "one rank per emulated node, each node's own link shaped to 1 Gbit/s"}
CHOSE = re.compile(r"^auto: chose (\S+): ", re.M)
BEST = re.compile(r"^replay: peer's CPU work that a GPU would do: ([0-9.]+) ms per iteration "
                  r".*; best case [0-9.]+ ms \((\d+) samples/s\)$", re.M)


PROG = "torch_ddp_report.py"


def fail(msg):
    torch_runs.fail(PROG, msg)


def read_run(runs_dir, name):
    meta, text = torch_runs.read_meta_log(PROG, runs_dir, name)
    m = None
    for m in DONE.finditer(text):
        pass
    run = {"name": name, "log": name + ".log", "round": meta["repeat"],
           "wall_s": meta["wall_s"], "failed": meta["failed"], "samples_per_s": None,
           "train_s": None}
    why = WHY.search(text)
    if meta["failed"] and why:  # the first line that says why, for the table
        run["failed"] += ": " + why.group(0).strip()
    start = START.search(text)
    if start:
        run["workers"] = int(start.group(1))
    chose = CHOSE.search(text)
    if chose:
        run["auto_choice"] = chose.group(1)
    best = None
    for best in BEST.finditer(text):
        pass
    if best and not meta["failed"]:
        run["peer_cpu_ms"] = float(best.group(1))
        run["best_samples_per_s"] = float(best.group(2))
    if m and not meta["failed"]:
        run["samples_per_s"] = float(m.group(3))
        run["train_s"] = float(m.group(2))
    elif not meta["failed"]:
        run["failed"] = "no rate in its done: line"
    return meta, run


def fmt_rate(x):
    return "%.0f" % x if x is not None else "-"


def main():
    if len(sys.argv) != 3:
        fail("usage: torch_ddp_report.py RUNS_DIR OUT_DIR")
    runs_dir, out_dir = sys.argv[1], sys.argv[2]
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        fail("%s: %s" % (out_dir, e.strerror))
    try:
        names = sorted(f[: -len(".meta.json")] for f in os.listdir(runs_dir)
                       if f.endswith(".meta.json"))
    except OSError as e:
        fail("%s: %s" % (runs_dir, e.strerror))
    if not names:
        fail("%s: no runs (no *.meta.json)" % runs_dir)
    cells = {}  # (net index, net, workers) -> {(setting index, setting): {meta, runs}}
    first = None
    for n in names:
        meta, run = read_run(runs_dir, n)
        first = first or meta
        w = meta.get("workers", 2)
        cell = cells.setdefault((meta["net_index"], meta["net"], w), {}).setdefault(
            (meta["setting_index"], meta["setting"]), {"meta": meta, "runs": []})
        cell["runs"].append(run)

    failed_runs = 0
    summary = {k: first.get(k) for k in ("arch", "batch", "seed", "iters", "warmup", "threads",
                                         "limit_s", "nodes")}
    summary["workers"] = sorted({k[2] for k in cells})
    summary["rounds"] = max(r["round"] for c in cells.values() for s in c.values()
                            for r in s["runs"])
    summary["nets"] = []
    lines = ["torch %s, workers %s x batch %d, %d iterations (%d warm-up left out of the "
             "rate), %d torch thread(s) per rank, %d round(s) per network; samples/s: the "
             "median over the rounds; iter: workers x batch / rate; x DDP, x best peer: the "
             "rate's ratio to DDP fp32's and to the fastest DDP variant's in the same cell "
             "(the compute-only run, one process: their iteration's ratio to its own); "
             "x compute: the iteration's ratio to the compute-only run's"
             % (first["arch"], ",".join(map(str, summary["workers"])), first["batch"],
                first["iters"], first["warmup"], first["threads"], summary["rounds"])]

    # --compressors N|auto: the pool of the pipelined server settings and auto (the run's
    # meta.json "pool"; absent before the flag existed: 1).
    summary["compressors"] = str(first.get("pool", "1"))
    if summary["compressors"] != "1":
        lines[0] += ("; PipeCompress's pipelined server settings and auto with --compressors "
                     "%s (compressor threads per worker)" % summary["compressors"])

    if str(first["arch"]).startswith("replay:"):
        summary["dilate"] = first.get("dilate", 1)
        lines[0] += ("; GPU compute replayed from %s, dilation %g (network, compression and "
                     "servers real; rates per dilated second); x best: against the best peer "
                     "at its best case" % (first["arch"][len("replay:"):], summary["dilate"]))

    def median_rate(cell, key="samples_per_s"):
        ok = [r[key] for r in cell["runs"] if r.get(key) is not None]
        return st.median(ok) if ok else None

    def iteration(name, cell, rate, w):
        """(the workers that trained, the iteration in s or None): workers x batch / rate,
        one worker for the compute-only run."""
        ran = sorted({r["workers"] for r in cell["runs"] if r.get("workers")})
        par = 1 if name == "compute" else (ran[0] if len(ran) == 1 else w)
        return par, (par * cell["meta"]["batch"] / rate if rate else None)

    for (_, net, w), settings in sorted(cells.items()):
        rates = {name: median_rate(c) for (_, name), c in settings.items()}
        iters = {name: iteration(name, c, rates[name], w)[1] for (_, name), c in settings.items()}
        ddp_rate = rates.get("ddp")
        bests = {name: median_rate(c, "best_samples_per_s") for (_, name), c in settings.items()}
        # the peers at their best case where the run gave one (a replay), else as measured
        peers = {k: bests[k] or v for k, v in rates.items()
                 if k.startswith("ddp") and v is not None}
        best_peer = max(peers, key=peers.get) if peers else None
        # the best peer's iteration at its best case where it has one
        best_it = (iteration(best_peer, settings[next(k for k in settings if k[1] == best_peer)],
                             peers[best_peer], w)[1] if best_peer else None)
        compute_iter = (first["batch"] / rates["compute"]) if rates.get("compute") else None
        entry = {"net": net, "workers": w, "description": NETS.get(net, net),
                 "best_peer": best_peer, "compute_iter_s": compute_iter, "settings": []}
        lines += ["", "%s, %d workers: %s%s" % (
            net, w, NETS.get(net, net),
            "; best peer: %s" % best_peer if best_peer else ""),
            "%-15s %-24s %5s %10s %9s %7s %9s %9s  %s" % (
                "setting", "what", "ranks", "samples/s", "iter ms", "x DDP", "x best", "x comp",
                "notes")]
        for (_, setting), cell in sorted(settings.items()):
            meta, runs = cell["meta"], sorted(cell["runs"], key=lambda r: r["round"])
            ok = [r["samples_per_s"] for r in runs if r["samples_per_s"] is not None]
            bad = [r for r in runs if r["samples_per_s"] is None]
            failed_runs += len(bad)
            rate = rates[setting]
            par, it = iteration(setting, cell, rate, w)
            if setting == "compute":
                # by iteration: the compute-only run is one process, whose rate is one
                # worker's (against DDP's w workers' it read as a slowdown)
                ratio = iters.get("ddp") / it if it and iters.get("ddp") else None
                vs_best = best_it / it if it and best_it else None
            else:  # by rate: auto's allreduce trains with one worker more
                ratio = rate / ddp_rate if rate is not None and ddp_rate else None
                vs_best = rate / peers[best_peer] if rate is not None and best_peer else None
            vs_compute = it / compute_iter if it is not None and compute_iter else None
            choices = sorted({r["auto_choice"] for r in runs if r.get("auto_choice")})
            entry["settings"].append({
                "setting": setting, "label": meta["label"], "flags": meta["flags"],
                "np": meta["np"], "samples_per_s": rate, "iter_s": it, "ratio_to_ddp": ratio,
                "ratio_to_best_peer": vs_best, "iter_over_compute": vs_compute,
                "best_case_samples_per_s": bests[setting],
                "auto_choice": choices[0] if len(choices) == 1 else (choices or None),
                "failed": len(bad), "runs": runs})
            notes = ["chose " + "/".join(choices)] if choices else []
            if bests[setting] is not None:
                notes.append("best case %s samples/s (hook CPU work removed)"
                             % fmt_rate(bests[setting]))
            if setting != "compute" and par != w:
                notes.append("trained by %d workers" % par)
            if len(ok) > 1:
                notes.append("%s..%s" % (fmt_rate(min(ok)), fmt_rate(max(ok))))
            notes += ["round %d failed (%s)" % (r["round"], r["failed"]) if summary["rounds"] > 1
                      else "failed (%s)" % r["failed"] for r in bad]

            def x(v):
                return "%.2fx" % v if v is not None else "-"
            lines.append("%-15s %-24s %5d %10s %9s %7s %9s %9s  %s" % (
                setting, meta["label"], meta["np"], fmt_rate(rate),
                "%.1f" % (it * 1e3) if it else "-", x(ratio), x(vs_best), x(vs_compute),
                "; ".join(notes)))
        summary["nets"].append(entry)
    summary["failed_runs"] = failed_runs
    if failed_runs:
        lines += ["", "%d run(s) failed or gave no rate: their logs are in %s" % (failed_runs,
                                                                                  runs_dir)]
    torch_runs.write_report(PROG, out_dir, "summary", lines, summary)
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
