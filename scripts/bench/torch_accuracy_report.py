#!/usr/bin/python3
"""torch_accuracy_report.py: summarise the runs of scripts/bench/torch-accuracy.sh.

  torch_accuracy_report.py RUNS_DIR OUT_DIR [--speed SUMMARY.json]
  torch_accuracy_report.py --check-speed SUMMARY.json ARCH   (only the --speed checks)

RUNS_DIR holds SETTING.meta.json and SETTING.log per run. From each log: the iterations
per epoch (the example's start line), the test accuracy after every epoch ("epoch K: test
accuracy X%"), the final one (the "done:" line) and, for --mode auto, the choice. Writes
OUT_DIR/accuracy.txt (also printed: per setting the accuracy after each epoch, the final
one, and its difference to DDP fp32's in points) and OUT_DIR/accuracy.json. With --speed,
a scripts/bench/torch-ddp.sh summary.json of the same model: for each of its networks (2
workers) each setting's accuracy is put against the wall time it would take there, epoch
K at K x iterations per epoch x that setting's measured iteration (the accuracy does not
depend on the network: the runs are deterministic in their seed), as a table and as the
chart OUT_DIR/accuracy-time-NET.png (matplotlib); --mode auto's run only where the speed
run's auto chose the same (else a line says it is left out, and why). Exit status: 0; 1 when
a run failed or its log has no final accuracy; 2 with one line on bad input (a --speed
summary without a 2-worker network among them). OUT_DIR is made if missing;
each file is written whole or not at all.
"""
import json
import os
import re
import sys

import torch_runs  # beside this file

START = re.compile(r"^torch \S+ .*?(\d+) iterations per epoch, (\d+) in all", re.M)
EPOCH = re.compile(r"^epoch (\d+): test accuracy ([0-9.]+)%", re.M)
DONE = re.compile(r"^done: (\d+) iterations in ([0-9.]+) s.*final test accuracy ([0-9.]+)%",
                  re.M)
CHOSE = re.compile(r"^auto: chose (\S+): (.*?) \(these flags", re.M)
# ps-topk-mc: torch-accuracy.sh's name, until 2026-12-05, for ps-topk's flags spelt out
# (topk:ratio=0.01,momentum=0.9 --momentum 0); a committed ViT run still carries it.
ORDER = ["ddp", "ddp-fp16", "ddp-psgd2", "ddp-psgd4", "ps-none", "ps-topk", "ps-topk-mc",
         "ps-dgc", "ps-dgc-warm", "ps-psgd2", "ps-psgd4", "auto"]


PROG = "torch_accuracy_report.py"


def fail(msg):
    torch_runs.fail(PROG, msg)


def read_run(runs_dir, name):
    meta, text = torch_runs.read_meta_log(PROG, runs_dir, name)
    run = {"setting": meta["setting"], "label": meta["label"], "log": name + ".log",
           "command": meta["command"], "wall_s": meta["wall_s"], "failed": meta["failed"],
           "epochs": [float(m.group(2)) for m in EPOCH.finditer(text)], "final": None,
           "iters_per_epoch": None, "iters": None, "train_s": None}
    m = START.search(text)
    if m:
        run["iters_per_epoch"], run["iters"] = int(m.group(1)), int(m.group(2))
    m = DONE.search(text)
    if m:
        run["final"], run["train_s"] = float(m.group(3)), float(m.group(2))
    elif not run["failed"]:
        run["failed"] = "no final accuracy in its done: line"
    m = CHOSE.search(text)
    if m:
        run["auto_choice"], run["auto_flags"] = m.group(1), m.group(2)
    return meta, run


def timeline(runs, speed):
    """Per network of the speed summary (2 workers): ({setting: [(seconds, accuracy)]},
    [why a run with a measured speed is left out]). --mode auto's run takes the speed of
    the speed run's auto only where both chose the same: its choice depends on the link."""
    out, left_out = {}, {}
    for cell in speed.get("nets", []):
        if cell.get("workers", 2) != 2:
            continue
        iters = {s["setting"]: s.get("iter_s") for s in cell["settings"]}
        chose = {s["setting"]: s.get("auto_choice") for s in cell["settings"]}
        curves, skipped = {}, []
        for r in runs:
            it = iters.get(r["setting"])
            if not it or not r["iters_per_epoch"] or not r["epochs"]:
                continue
            if r.get("auto_choice") != chose.get(r["setting"]):
                there = chose.get(r["setting"])
                skipped.append("%s: left out (chose %s in this run, %s in the speed run)" % (
                    r["setting"], r.get("auto_choice"),
                    ", ".join(there) if isinstance(there, list) else there))
                continue
            curves[r["setting"]] = [(0.0, 10.0)] + [
                ((k + 1) * r["iters_per_epoch"] * it, a) for k, a in enumerate(r["epochs"])]
        if curves:
            out[cell["net"]] = curves
        if skipped:
            left_out[cell["net"]] = skipped
    return out, left_out


def chart(net, curves, labels, title, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    # From the first epoch's end: the start (10 %, chance) is in accuracy.json, but drawn it
    # squeezes the epochs' points, which differ by tenths, into the top of the chart.
    for setting, pts in curves.items():
        ax.plot([t / 60 for t, _ in pts[1:]], [a for _, a in pts[1:]], marker="o",
                label=labels[setting])
    ax.set_xlabel("wall time at %s, minutes (epochs x measured iteration)" % net)
    ax.set_ylabel("test accuracy, %")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    finally:
        plt.close(fig)
    return True


def load_speed(path, arch):
    """The torch-ddp.sh summary at path, checked: a model of arch and a network measured
    with 2 workers, as the accuracy runs are. Exits 2 with one line otherwise."""
    try:
        with open(path) as f:
            speed = json.load(f)
    except (OSError, ValueError) as e:
        fail("--speed %s: %s" % (path, e))
    if not isinstance(speed, dict) or not isinstance(speed.get("nets"), list):
        fail("--speed %s: not a torch-ddp.sh summary.json (no list of networks)" % path)
    if speed.get("arch") != arch:
        fail("--speed %s: its model is %s, the runs' %s" % (path, speed.get("arch"), arch))
    if not any(isinstance(c, dict) and c.get("workers", 2) == 2 for c in speed["nets"]):
        fail("--speed %s: no network measured with 2 workers, as the runs were" % path)
    return speed


def main():
    args = sys.argv[1:]
    if args in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if args[:1] == ["--check-speed"]:  # torch-accuracy.sh, before its first run
        if len(args) != 3:
            fail("usage: torch_accuracy_report.py --check-speed SUMMARY.json ARCH")
        load_speed(args[1], args[2])
        return 0
    speed_path = None
    if "--speed" in args:
        i = args.index("--speed")
        if i + 1 >= len(args):
            fail("--speed needs a file")
        speed_path = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        fail("usage: torch_accuracy_report.py RUNS_DIR OUT_DIR [--speed SUMMARY.json]")
    runs_dir, out_dir = args
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        fail("%s: %s" % (out_dir, e.strerror))
    try:
        names = [f[: -len(".meta.json")] for f in os.listdir(runs_dir) if f.endswith(".meta.json")]
    except OSError as e:
        fail("%s: %s" % (runs_dir, e.strerror))
    if not names:
        fail("%s: no runs (no *.meta.json)" % runs_dir)
    pairs = [read_run(runs_dir, n) for n in names]
    pairs.sort(key=lambda p: (ORDER.index(p[1]["setting"]) if p[1]["setting"] in ORDER
                              else len(ORDER), p[1]["setting"]))
    meta0 = pairs[0][0]
    seeds = sorted({m.get("seed", 1) for m, _ in pairs})  # runs before the seed was kept: 1
    if len(seeds) > 1:
        fail("%s: runs of seeds %s in one folder: one seed a folder (compare folders)" % (
            runs_dir, ", ".join(map(str, seeds))))
    runs = [r for _, r in pairs]
    ddp = next((r["final"] for r in runs if r["setting"] == "ddp"), None)
    epochs = max(len(r["epochs"]) for r in runs)
    subset = meta0.get("train_samples")
    head = ("torch %s, %d epoch(s)%s, 2 workers x batch 32, seed %d; test accuracy (%%) on the "
            "10 000 test images after each epoch; vs DDP: the final accuracy's difference to "
            "DDP fp32's, in points" % (meta0["arch"], meta0["epochs"],
                                      " of the first %d training samples" % subset if subset else "",
                                      seeds[0]))
    # The "what" column as wide as its longest label (26 at least).
    row = "%%-15s %%-%ds %%s %%7s %%8s %%8s  %%s" % max([26] + [len(r["label"]) for r in runs])
    lines = [head, "", row % (
        "setting", "what", " ".join("%7s" % ("ep %d" % (k + 1)) for k in range(epochs)),
        "final", "vs DDP", "train s", "notes")]
    failed = 0
    for r in runs:
        notes = []
        if r.get("auto_choice"):
            notes.append("chose " + r["auto_choice"])
        if r["failed"]:
            failed += 1
            notes.append("failed (%s)" % r["failed"])
        r["vs_ddp_points"] = (r["final"] - ddp) if r["final"] is not None and ddp is not None else None
        lines.append(row % (
            r["setting"], r["label"],
            " ".join("%7.2f" % a for a in r["epochs"]) + " " * (8 * (epochs - len(r["epochs"]))),
            "%.2f" % r["final"] if r["final"] is not None else "-",
            "%+.2f" % r["vs_ddp_points"] if r["vs_ddp_points"] is not None else "-",
            "%.0f" % r["train_s"] if r["train_s"] else "-", "; ".join(notes)))
    summary = {"arch": meta0["arch"], "epochs": meta0["epochs"], "train_samples": subset,
               "runs": runs, "speed": speed_path, "timelines": {}}
    if speed_path:
        speed = load_speed(speed_path, meta0["arch"])
        labels = {r["setting"]: r["label"] for r in runs}
        curves_by_net, left_out = timeline(runs, speed)
        for net, curves in curves_by_net.items():
            summary["timelines"][net] = {k: [list(p) for p in v] for k, v in curves.items()}
            lines += ["", "%s, 2 workers: minutes to each epoch's accuracy (epochs x the "
                      "iteration measured there, %s)" % (net, speed_path)]
            for setting, pts in curves.items():
                lines.append("%-15s %s" % (setting, "  ".join(
                    "%.1f min %.2f%%" % (t / 60, a) for t, a in pts[1:])))
            lines += left_out.get(net, [])
            if left_out.get(net):
                summary["timelines"][net]["left_out"] = left_out[net]
            png = os.path.join(out_dir, "accuracy-time-%s.png" % net)
            if chart(net, curves, labels, "%s on Fashion-MNIST, 2 workers, %s"
                     % (meta0["arch"], net), png):
                summary["timelines"][net]["chart"] = os.path.basename(png)
    torch_runs.write_report(PROG, out_dir, "accuracy", lines, summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
