#!/usr/bin/python3
"""torch_ddp_report.py: summarise the runs of scripts/bench/torch-ddp.sh.

  torch_ddp_report.py RUNS_DIR OUT_DIR

RUNS_DIR holds NAME.meta.json (what the run was, its exit status) and NAME.log (its whole
output) per run. A run's rate is the samples per second of the example's last "done: N
iterations in T s (R samples/s after W warm-up iterations)" line (rank 0's count of every
worker's samples after the warm-up). Per network and setting: the median rate over the
rounds (--repeat) and its ratio to DDP's median on the same network. Writes
OUT_DIR/summary.txt (also printed) and OUT_DIR/summary.json. Exit status: 0; 1 when a run
failed or gave no rate (reported as such, the others summarised); 2 with one line on bad
input.
"""
import json
import os
import re
import statistics as st
import sys

DONE = re.compile(r"^done: (\d+) iterations in ([0-9.]+) s \((\d+) samples/s after (\d+) "
                  r"warm-up iterations\)", re.M)
# A failed run's reason: the example's one-line error, the launcher's time limit, Python's.
WHY = re.compile(r"^(torch_train\.py: |pc-mpirun\.sh: |[A-Za-z.]*(Error|Exception): ).*", re.M)
NETS = {"shm": "Open MPI's shared memory; DDP's gloo over TCP on the loopback",
        "10gbit": "every rank over TCP on a loopback shaped to 10 Gbit/s (tbf, own namespace)",
        "1gbit": "every rank over TCP on a loopback shaped to 1 Gbit/s (tbf, own namespace)"}


def fail(msg):
    print("torch_ddp_report.py: " + msg, file=sys.stderr)
    sys.exit(2)


def read_run(runs_dir, name):
    try:
        meta = json.load(open(os.path.join(runs_dir, name + ".meta.json")))
    except (OSError, ValueError) as e:
        fail("%s.meta.json: %s" % (name, e))
    try:
        text = open(os.path.join(runs_dir, name + ".log"), errors="replace").read()
    except OSError:
        text = ""
    m = None
    for m in DONE.finditer(text):
        pass
    run = {"name": name, "log": name + ".log", "round": meta["repeat"],
           "wall_s": meta["wall_s"], "failed": meta["failed"], "samples_per_s": None,
           "train_s": None}
    why = WHY.search(text)
    if meta["failed"] and why:  # the first line that says why, for the table
        run["failed"] += ": " + why.group(0).strip()
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
        names = sorted(f[: -len(".meta.json")] for f in os.listdir(runs_dir)
                       if f.endswith(".meta.json"))
    except OSError as e:
        fail("%s: %s" % (runs_dir, e.strerror))
    if not names:
        fail("%s: no runs (no *.meta.json)" % runs_dir)
    nets = {}  # (net index, net) -> {(setting index, setting): {meta, runs}}
    first = None
    for n in names:
        meta, run = read_run(runs_dir, n)
        first = first or meta
        cell = nets.setdefault((meta["net_index"], meta["net"]), {}).setdefault(
            (meta["setting_index"], meta["setting"]), {"meta": meta, "runs": []})
        cell["runs"].append(run)

    failed_runs = 0
    summary = {k: first[k] for k in ("arch", "workers", "batch", "seed", "iters", "warmup",
                                     "threads", "limit_s")}
    summary["rounds"] = max(r["round"] for c in nets.values() for s in c.values()
                            for r in s["runs"])
    summary["nets"] = []
    lines = ["torch %s, %d workers x batch %d, %d iterations (%d warm-up left out of the "
             "rate), %d torch thread(s) per rank, %d round(s) per network; samples/s: "
             "the median over the rounds, x DDP: its ratio to DDP's on the same network"
             % (first["arch"], first["workers"], first["batch"], first["iters"],
                first["warmup"], first["threads"], summary["rounds"])]
    for (_, net), cells in sorted(nets.items()):
        ddp = cells.get((0, "ddp"))
        ddp_rate = None
        if ddp:
            ok = [r["samples_per_s"] for r in ddp["runs"] if r["samples_per_s"] is not None]
            ddp_rate = st.median(ok) if ok else None
        entry = {"net": net, "description": NETS.get(net, net), "settings": []}
        lines += ["", "%s: %s" % (net, NETS.get(net, net)),
                  "%-15s %-24s %5s %10s %8s  %s" % ("setting", "what", "ranks", "samples/s",
                                                    "x DDP", "notes")]
        for (_, setting), cell in sorted(cells.items()):
            meta, runs = cell["meta"], sorted(cell["runs"], key=lambda r: r["round"])
            ok = [r["samples_per_s"] for r in runs if r["samples_per_s"] is not None]
            bad = [r for r in runs if r["samples_per_s"] is None]
            failed_runs += len(bad)
            rate = st.median(ok) if ok else None
            ratio = rate / ddp_rate if rate is not None and ddp_rate else None
            entry["settings"].append({
                "setting": setting, "label": meta["label"], "flags": meta["flags"],
                "np": meta["np"], "samples_per_s": rate, "ratio_to_ddp": ratio,
                "failed": len(bad), "runs": runs})
            notes = []
            if len(ok) > 1:
                notes.append("%s..%s" % (fmt_rate(min(ok)), fmt_rate(max(ok))))
            notes += ["round %d failed (%s)" % (r["round"], r["failed"]) if summary["rounds"] > 1
                      else "failed (%s)" % r["failed"] for r in bad]
            lines.append("%-15s %-24s %5d %10s %8s  %s" % (
                setting, meta["label"], meta["np"], fmt_rate(rate),
                "%.2fx" % ratio if ratio is not None else "-", "; ".join(notes)))
        summary["nets"].append(entry)
    summary["failed_runs"] = failed_runs
    if failed_runs:
        lines += ["", "%d run(s) failed or gave no rate: their logs are in %s" % (failed_runs,
                                                                                  runs_dir)]
    text = "".join(l.rstrip() + "\n" for l in lines)
    try:
        with open(os.path.join(out_dir, "summary.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(out_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    except OSError as e:
        fail("%s: %s" % (out_dir, e.strerror))
    sys.stdout.write(text)
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
