#!/usr/bin/python3
"""e2e_report.py: summarise the runs of scripts/bench/e2e.sh.

  e2e_report.py RUNS_DIR RESULTS_JSON

RUNS_DIR holds one NAME.jsonl (pc-train --metrics), NAME.meta.json (what the run was)
and NAME.log (its output: mode 7's choice and predictions) per run, and with e2e.sh --predict one MODEL-NET-wW.predict per group (pc-bench model's
"predict mode=... e2e=M ... iter_ms=X compute_ms=Y exposed_ms=Z" lines). Writes
RESULTS_JSON (every run's medians, spreads, breakdown and bytes, its prediction when
there is one, and the derived speedups and hidden fractions) and prints the tables.
Iterations before `warmup` (in the meta file) are left out. Exits 2 with one line on bad
input.
"""
import json
import os
import re
import statistics as st
import sys


def fail(msg):
    print("e2e_report.py: " + msg, file=sys.stderr)
    sys.exit(2)


def quantile(xs, q):
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarise(meta, rows):
    warm = meta["warmup"]
    workers = [r for r in rows if r.get("role") == "worker" and r["iteration"] >= warm]
    if not workers:
        fail("%s: no worker iterations after the warm-up" % meta["name"])
    # The iteration time of the job: the slowest worker's, per iteration.
    by_it = {}
    for r in workers:
        by_it.setdefault(r["iteration"], []).append(r)
    t_iter = [max(x["t_iteration"] for x in rs) for rs in by_it.values()]
    w0 = [r for r in workers if r["rank"] == 0]

    def med(key):
        return st.median(r[key] for r in w0)

    # The breakdown (doc/api.md, Metrics): compute is what the waits and the inline
    # compression leave of each iteration.
    for r in w0:
        r["t_compute"] = max(0.0, r["t_iteration"] - r["t_param_wait"] - r["t_wait_release"]
                             - r["t_wait_backpressure"] - r["t_compress_inline"])
    nworkers = len({r["rank"] for r in workers})
    return {
        **meta,
        # Workers that ran (mode 7 may have chosen the allreduce on every rank) and the
        # job's throughput: the measure that compares layouts with different workers.
        "workers_run": nworkers,
        "samples_per_s": nworkers * meta.get("batch", 32) / st.median(t_iter),
        "iterations_measured": len(t_iter),
        "t_iteration_median": st.median(t_iter),
        "t_iteration_q1": quantile(t_iter, 0.25),
        "t_iteration_q3": quantile(t_iter, 0.75),
        "t_iteration_min": min(t_iter),
        "t_iteration_max": max(t_iter),
        # Breakdown of worker 0's iteration (medians of each part): compute, the waits by
        # cause, the inline compression; and the compression, and how much was exposed.
        "compute": med("t_compute"),
        "wait_release": med("t_wait_release"),
        "wait_backpressure": med("t_wait_backpressure"),
        "wait_compress": med("t_wait_compress"),
        "wait_network": med("t_wait_network"),
        "wait_server": med("t_wait_server"),
        "compress_inline": med("t_compress_inline"),
        "t_exposed": med("t_exposed"),
        "t_compress": med("t_compress"),
        "bytes_sent": st.median(r["bytes_sent"] for r in w0),
        "bytes_received": st.median(r["bytes_received"] for r in w0),
        "dense_bytes": w0[0]["dense_bytes"],
    }


def predictions(runs_dir, meta):
    """The model's prediction for this run (seconds), from its group's .predict file."""
    path = os.path.join(runs_dir, "%s-%s-w%d.predict" % (meta["model"], meta["net"],
                                                         meta["workers"]))
    try:
        text = open(path).read()
    except OSError:
        return None
    m = re.search(r"^predict mode=\S+ e2e=%d .*iter_ms=([0-9.]+) compute_ms=([0-9.]+) "
                  r"exposed_ms=([0-9.]+)" % meta["mode"], text, re.M)
    if not m:
        return None
    return {"iter": 1e-3 * float(m.group(1)), "compute": 1e-3 * float(m.group(2)),
            "exposed": 1e-3 * float(m.group(3))}


def auto_choice(runs_dir, meta):
    """Mode 7's choice and its own prediction of it, from the run's log ("auto: predict
    MODE W=N iter X ms ..." and "auto: chose MODE: FLAGS")."""
    try:
        text = open(os.path.join(runs_dir, meta["name"] + ".log")).read()
    except OSError:
        return None
    m = re.search(r"^auto: chose (\S+): (.*?) \(these flags", text, re.M)
    if not m:
        return None
    preds = {p.group(1): {"workers": int(p.group(2)), "iter": 1e-3 * float(p.group(3))}
             for p in re.finditer(r"^auto: predict (\S+)\s+W=(\d+)\s+iter\s+([0-9.]+) ms", text,
                                  re.M)}
    return {"choice": m.group(1), "flags": m.group(2), "predictions": preds}


def main():
    if len(sys.argv) != 3:
        fail("usage: e2e_report.py RUNS_DIR RESULTS_JSON")
    runs_dir, out = sys.argv[1], sys.argv[2]
    try:
        names = sorted(f[: -len(".meta.json")] for f in os.listdir(runs_dir) if f.endswith(".meta.json"))
    except OSError as e:
        fail("%s: %s" % (runs_dir, e.strerror))
    runs = []
    for n in names:
        try:
            meta = json.load(open(os.path.join(runs_dir, n + ".meta.json")))
            if meta.get("failed"):
                runs.append(meta)
                continue
            rows = [json.loads(l) for l in open(os.path.join(runs_dir, n + ".jsonl")) if l.strip()]
        except (OSError, ValueError) as e:
            fail("%s: %s" % (n, e))
        r = summarise(meta, rows)
        p = predictions(runs_dir, meta)
        if meta["mode"] == 7:
            a = auto_choice(runs_dir, meta)
            if a:
                r["auto"] = a
                p = a["predictions"].get(a["choice"])
                p = {"iter": p["iter"], "compute": None, "exposed": None} if p else None
        if p:
            r["predicted"] = p
        runs.append(r)
    if not runs:
        fail("%s: no runs" % runs_dir)

    # Derived figures per (model, network, workers), from runs of the same invocation.
    groups = {}
    for r in runs:
        groups.setdefault((r["model"], r["net"], r["workers"]), {})[r["mode"]] = r
    derived = []
    for (model, net, w), modes in sorted(groups.items()):
        def t(m):
            r = modes.get(m)
            return r["t_iteration_median"] if r and not r.get("failed") else None
        d = {"model": model, "net": net, "workers": w}
        t1, t3, t4, t6 = t(1), t(3), t(4), t(6)
        if t3 and t4:
            d["speedup_4_over_3"] = t3 / t4
            c3 = modes[3]["t_compress"]
            # Compression time per iteration as the inline run measures it: there it is
            # exactly what the backprop thread spends compressing.
            d["t_compress_inline"] = c3
            d["hidden_fraction"] = (t3 - t4) / c3 if c3 > 0 else None
        if t1 and t4:
            d["speedup_4_over_1"] = t1 / t4
        if t1 and t(5):
            d["speedup_5_over_1"] = t1 / t(5)
        # The best PipeCompress setting (modes 3-6, 8) against the dense allreduce.
        best = min((m for m in (3, 4, 5, 6, 8) if t(m)), key=t, default=None)
        if t1 and best:
            d["best_mode"] = best
            d["speedup_best_over_1"] = t1 / t(best)
        # --mode auto against the fastest fixed mode, by samples per second (its choice
        # of the allreduce runs on one rank more than mode 1).
        fixed = [modes[m] for m in (1, 2, 3, 4, 5, 6, 8) if t(m)]
        if t(7) and fixed:
            fastest = max(fixed, key=lambda r: r["samples_per_s"])
            d["auto_choice"] = modes[7].get("auto", {}).get("choice")
            d["fastest_fixed_mode"] = fastest["mode"]
            d["auto_over_fastest"] = modes[7]["samples_per_s"] / fastest["samples_per_s"]
            if t1:
                d["auto_over_1"] = modes[7]["samples_per_s"] / modes[1]["samples_per_s"]
        derived.append(d)
    with open(out + ".tmp", "w") as f:
        json.dump({"runs": runs, "derived": derived}, f, indent=1)
    os.replace(out + ".tmp", out)

    ms = lambda x: "%.1f" % (1e3 * x)
    mb = lambda x: "%.2f" % (x / 1e6)
    for (model, net, w), modes in sorted(groups.items()):
        print("\n%s, %s, %d worker%s + %s" % (model, net, w, "s" if w > 1 else "",
                                              "1 server (modes 2-8)"))
        pred = [m for m in sorted(modes) if modes[m].get("predicted")]
        print("%-4s %-34s %9s %15s %7s %7s %7s %7s %7s %7s %7s %8s %7s %9s %9s" % (
            "mode", "setting", "iter ms", "q1..q3 ms", "compute", "w-rel", "w-bp", "w-comp",
            "w-net", "w-srv", "inl-cmp", "compress", "exposed", "MB sent", "MB recv"))
        for m in sorted(modes):
            r = modes[m]
            if r.get("failed"):
                print("%-4d %-34s FAILED (%s)" % (m, r["label"], r["failed"]))
                continue
            print("%-4d %-34s %9s %15s %7s %7s %7s %7s %7s %7s %7s %8s %7s %9s %9s" % (
                m, r["label"], ms(r["t_iteration_median"]),
                ms(r["t_iteration_q1"]) + ".." + ms(r["t_iteration_q3"]),
                ms(r["compute"]), ms(r["wait_release"]), ms(r["wait_backpressure"]),
                ms(r["wait_compress"]), ms(r["wait_network"]), ms(r["wait_server"]),
                ms(r["compress_inline"]), ms(r["t_compress"]), ms(r["t_exposed"]),
                mb(r["bytes_sent"]), mb(r["bytes_received"])))
        if pred:
            # pc-bench model's prediction beside the measurement (doc/scaling.md says what
            # the model assumes: a core per thread, a link per rank).
            print("  predicted (pc-bench model): " + "; ".join(
                "%d %s ms (%s%s)" % (
                    m, ms(modes[m]["predicted"]["iter"]),
                    "compute %s, exposed %s; " % (ms(modes[m]["predicted"]["compute"]),
                                                  ms(modes[m]["predicted"]["exposed"]))
                    if modes[m]["predicted"].get("compute") is not None else "auto's own; ",
                    "measured %s, %+.0f %%" % (ms(modes[m]["t_iteration_median"]),
                                               100 * (modes[m]["predicted"]["iter"]
                                                      / modes[m]["t_iteration_median"] - 1)))
                for m in pred))
        d = next(x for x in derived if (x["model"], x["net"], x["workers"]) == (model, net, w))
        parts = []
        for k, label in (("speedup_4_over_3", "4 over 3"), ("speedup_4_over_1", "4 over 1"),
                         ("speedup_5_over_1", "5 over 1")):
            if k in d:
                parts.append("%s %.2fx" % (label, d[k]))
        if "best_mode" in d:
            parts.append("best (%d) over 1 %.2fx" % (d["best_mode"], d["speedup_best_over_1"]))
        if "auto_over_fastest" in d:
            parts.append("auto chose %s: %.0f samples/s, %.2fx the fastest fixed mode (%d, %.0f)" % (
                d["auto_choice"], modes[7]["samples_per_s"], d["auto_over_fastest"],
                d["fastest_fixed_mode"], modes[d["fastest_fixed_mode"]]["samples_per_s"]))
        if d.get("hidden_fraction") is not None:
            parts.append("hidden fraction (T3 - T4) / C3 = %.2f (C3 %s ms)" % (
                d["hidden_fraction"], ms(d["t_compress_inline"])))
        if parts:  # none when the modes compared were not run
            print("  " + "; ".join(parts))
    print("\nresults: %s" % out)


if __name__ == "__main__":
    main()
