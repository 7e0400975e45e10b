#!/usr/bin/python3
"""replay_report.py: the tables and charts of scripts/bench/replay.sh.

  replay_report.py OUT_DIR

OUT_DIR holds cells.txt ("MODEL RATE_GBPS DILATION LINK" per line, as replay.sh ran them)
and one scripts/bench/torch-ddp.sh directory per line, OUT_DIR/MODEL-RATEg/runs/. Every
figure is the emulated machine's: measured under dilation K, divided by K. Per run:
  iter ms      rank 0's "replay: iteration T ms" line (the mean after the warm-up) / K;
  x limit      that over the compute-only replay's iteration in the same cell (1.00 = the
               network and compression cost nothing);
  x best peer  the best DDP variant's iteration (at its best case: the hooks' CPU work that
               a GPU would do removed) over this one's: above 1, this setting is faster;
  comp busy    PipeCompress: the compressor's busy time per iteration over the iteration,
               workers' mean from the metrics (above 1: compression alone is longer than
               the iteration): with a pool (--compressors N) the busiest thread's
               (t_compress_busy), the one the iteration waits for; inline, the backprop
               thread's (t_compress_inline); older metrics without t_compress_busy:
               t_compress;
  hidden       a pipelined setting: (its inline counterpart's iteration - its own) over its
               compression time per iteration: 1 = all hidden, 0 = none, below 0 = slower;
               above 1, pipelining hid more than the compression: inline, the backprop
               thread also waits for what the compressor thread overlaps (PowerSGD's
               round trip of P, the sends);
  MB out, in   bytes a worker sent and received per iteration (the metrics' bytes_sent and
               bytes_received; DDP: not counted);
  cores        the workers' compression work (real CPU seconds: every compressor thread's
               summed, t_compress (+ t_compress_inline), / K) over
               what the machine's cores give in a dilated iteration: the share of the
               shared cores that compression alone takes (servers, MPI and the kernel's
               networking come on top); near 1, the emulated nodes compete for cores that
               real nodes would each have.
Writes OUT_DIR/summary.txt (printed too), OUT_DIR/summary.json and OUT_DIR/MODEL.png (with
matplotlib): iteration against link rate per setting, the limit dashed, a panel per worker
count. Exit status 0; 1 when a run failed or gave no figure (reported, the rest
summarised); 2 with one line on bad input.
"""
import json
import os
import re
import statistics as st
import sys

ITER = re.compile(r"^replay: iteration ([0-9.]+) ms \(mean of (\d+)\)", re.M)
BEST = re.compile(r"^replay: peer's CPU work that a GPU would do: ([0-9.]+) ms per iteration "
                  r".*; best case ([0-9.]+) ms", re.M)
PEERS = ("ddp", "ddp-fp16", "ddp-psgd1", "ddp-psgd2", "ddp-psgd4")
NCORES = os.cpu_count() or 1  # the machine the runs shared (the report runs there too)


def fail(msg):
    print("replay_report.py: " + msg, file=sys.stderr)
    sys.exit(2)


def read_metrics(path, warmup):
    """Workers' mean per iteration after the warm-up: the busiest compressor thread's
    time (busy_s), every thread's summed (cpu_s), iteration, bytes."""
    busy, cpu, it, sent, recv = [], [], [], [], []
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("role") != "worker" or r.get("iteration", 0) < warmup:
                    continue
                inl = r.get("t_compress_inline", 0.0)
                summed = r.get("t_compress", 0.0)
                # inline, t_compress is t_compress_inline: count it once
                if r.get("compressors", 1) == 0 or r.get("pipeline") is False:
                    busy.append(inl)
                    cpu.append(inl)
                else:
                    busy.append(r.get("t_compress_busy", summed) + inl)
                    cpu.append(summed + inl)
                it.append(r.get("t_iteration", 0.0))
                sent.append(r.get("bytes_sent", 0))
                recv.append(r.get("bytes_received", 0))
    except OSError:
        return None
    if not it:
        return None
    return {"busy_s": st.mean(busy), "cpu_s": st.mean(cpu), "iter_s": st.mean(it),
            "bytes": st.mean(sent),
            "bytes_in": st.mean(recv)}


def read_cell(out, model, rate, k, link):
    runs = os.path.join(out, "%s-%sg" % (model, rate), "runs")
    if not os.path.isdir(runs):
        return None, ["%s at %s Gbit/s: no runs in %s" % (model, rate, runs)]
    res, problems = {}, []
    for f in sorted(os.listdir(runs)):
        if not f.endswith(".meta.json"):
            continue
        name = f[: -len(".meta.json")]
        with open(os.path.join(runs, f)) as fh:
            meta = json.load(fh)
        text = open(os.path.join(runs, name + ".log"), errors="replace").read()
        m = list(ITER.finditer(text))
        r = {"setting": meta["setting"], "label": meta["label"], "workers": meta["workers"],
             "log": os.path.relpath(os.path.join(runs, name + ".log"), out)}
        if meta.get("failed") or not m:
            r["failed"] = meta.get("failed") or "no replay: iteration line"
            problems.append("%s: %s" % (r["log"], r["failed"]))
        else:
            r["iter_ms"] = float(m[-1].group(1)) / k
            b = list(BEST.finditer(text))
            if b:
                r["peer_cpu_ms"] = float(b[-1].group(1))
                r["best_ms"] = float(b[-1].group(2)) / k
            met = read_metrics(os.path.join(runs, name + ".metrics.jsonl"), meta["warmup"])
            if met:
                r["busy"] = met["busy_s"] / met["iter_s"] if met["iter_s"] > 0 else None
                r["comp_ms"] = met["busy_s"] * 1e3 / k  # the busiest thread's
                r["comp_cpu_ms"] = met["cpu_s"] * 1e3 / k  # every thread's
                r["mb_per_worker"] = met["bytes"] / 1e6
                r["mb_in_per_worker"] = met["bytes_in"] / 1e6
        res[(meta["workers"], meta["setting"])] = r
    return res, problems


def main():
    if len(sys.argv) != 2:
        fail("usage: replay_report.py OUT_DIR")
    out = sys.argv[1]
    try:
        cells = [ln.split() for ln in open(os.path.join(out, "cells.txt")) if ln.strip()]
    except OSError as e:
        fail("%s: %s" % (os.path.join(out, "cells.txt"), e.strerror))
    if any(len(c) != 4 for c in cells):
        fail("%s: a line is not MODEL RATE DILATION LINK" % os.path.join(out, "cells.txt"))
    head = open(os.path.join(out, "replay.txt")).read().strip() if os.path.exists(
        os.path.join(out, "replay.txt")) else ""
    lines = ["GPU compute replayed from traces (published per-iteration figures split across "
             "layers: traces/README.md); network (emulated nodes, shaped veth links), "
             "compression, servers and DDP real, on one 2-core CPU machine. Times are the "
             "emulated ones: measured under dilation K, divided by K.", head]
    summary, problems, bad = {"cells": []}, [], 0
    for model, rate, k, link in cells:
        k = float(k)
        res, probs = read_cell(out, model, rate, k, link)
        problems += probs
        bad += len(probs)
        if res is None:
            continue
        for w in sorted({w for w, _ in res}):
            row = {s: r for (ww, s), r in res.items() if ww == w}
            limit = row.get("compute", {}).get("iter_ms")
            peers = {s: row[s].get("best_ms", row[s].get("iter_ms")) for s in PEERS
                     if s in row and row[s].get("iter_ms")}
            if limit:  # a best case is never below the limit (torch_train.py holds it there)
                peers = {s: max(v, limit) for s, v in peers.items()}
            best_peer = min(peers, key=peers.get) if peers else None
            lines += ["", "%s, %s Gbit/s per node, %d workers (dilation %g: links shaped to "
                      "%s); limit %s ms; best peer %s" % (
                          model, rate, w, k, link, "%.1f" % limit if limit else "-",
                          "%s %.1f ms" % (best_peer, peers[best_peer]) if best_peer else "-"),
                      "%-16s %9s %8s %10s %9s %7s %8s %8s %6s" % (
                          "setting", "iter ms", "x limit", "x best peer", "comp busy",
                          "hidden", "MB out", "MB in", "cores")]
            for s, r in row.items():
                it = r.get("iter_ms")
                if it and limit:
                    r["x_limit"] = it / limit
                if it and best_peer:
                    r["x_best_peer"] = peers[best_peer] / it
                if it and r.get("comp_cpu_ms") is not None:
                    # the workers' compression, CPU work in real seconds (every thread's),
                    # over what the machine's cores give in a dilated iteration (K x it)
                    r["cores"] = w * r["comp_cpu_ms"] / (k * it * NCORES)
                inl = row.get(s + "-inline", {}).get("iter_ms")
                if it and inl and r.get("comp_ms"):
                    r["hidden"] = (inl - it) / r["comp_ms"]

            def f(v, fmt):
                return fmt % v if v is not None else "-"
            for s, r in row.items():
                lines.append("%-16s %9s %8s %10s %9s %7s %8s %8s %6s%s" % (
                    s, f(r.get("iter_ms"), "%.1f"), f(r.get("x_limit"), "%.2fx"),
                    f(r.get("x_best_peer"), "%.2fx"), f(r.get("busy"), "%.2f"),
                    f(r.get("hidden"), "%.2f"), f(r.get("mb_per_worker"), "%.1f"),
                    f(r.get("mb_in_per_worker"), "%.1f"), f(r.get("cores"), "%.2f"),
                    "  best case %.1f ms" % r["best_ms"] if "best_ms" in r else
                    "  FAILED: " + r["failed"] if "failed" in r else ""))
            summary["cells"].append({"model": model, "rate_gbps": float(rate), "dilate": k,
                                     "link": link, "workers": w, "limit_ms": limit,
                                     "best_peer": best_peer, "settings": row})
    lines += targets(summary["cells"])
    if problems:
        lines += ["", "%d run(s) failed or gave no figure:" % bad] + problems
    text = "\n".join(lines) + "\n"
    for name, data in (("summary.txt", text), ("summary.json",
                                               json.dumps(summary, indent=1) + "\n")):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(out, name))
    sys.stdout.write(text)
    charts(out, summary["cells"])
    return 1 if bad else 0


OURS = ("allreduce", "ps-none", "ps-fp16", "ps-topk", "ps-dgc", "ps-psgd2", "ps-psgd4")


def targets(cells):
    """Issue 45's targets, cell by cell, as the runs measured them."""
    out = ["", "Targets (issue 45), per cell: model, Gbit/s per node, workers"]
    pipe, near, peer, hot = [], [], [], []
    for c in cells:
        where = "%s %g Gbit/s %dw" % (c["model"], c["rate_gbps"], c["workers"])
        st_ = c["settings"]
        lim = c["limit_ms"]
        for s, r in st_.items():
            inl = st_.get(s + "-inline", {}).get("iter_ms")
            if r.get("iter_ms") and inl and lim and r.get("comp_ms") is not None:
                if r["comp_ms"] >= lim / 3:
                    ratio = r["iter_ms"] / inl
                    pipe.append("  %s: %s compresses %.1f ms (>= a third of %.1f): pipelined "
                                "%.2fx inline %s" % (where, s, r["comp_ms"], lim, ratio,
                                                     "ok" if ratio <= 0.75 else "MISSED"))
            if r.get("busy") is not None and r["busy"] > 1:
                hot.append("  %s: %s's compressor busy %.2fx the iteration" % (where, s, r["busy"]))
        ours = {s: r["iter_ms"] for s, r in st_.items() if s in OURS and r.get("iter_ms")}
        if not ours or not lim:
            continue
        best = min(ours, key=ours.get)
        if c["rate_gbps"] >= 2.5 and c["model"].split("-")[0] in ("resnet50", "vgg16"):
            x = ours[best] / lim
            near.append("  %s: best ours %s %.2fx the limit %s" % (
                where, best, x, "ok" if x <= 1.10 else "MISSED"))
        bp = c.get("best_peer")
        if bp:
            pt = max(st_[bp].get("best_ms") or st_[bp]["iter_ms"], lim)
            want = 2.0 if c["rate_gbps"] <= 2.5 else 1.3 if c["rate_gbps"] <= 10 else None
            x = pt / ours[best]
            verdict = ("the peer is itself within 1.1x of the limit: no win to claim"
                       if pt <= 1.1 * lim else
                       "ok" if want and x >= want else "MISSED" if want else "no target")
            peer.append("  %s: best ours %s %.2fx faster than %s at its best case (target "
                        "%s): %s" % (where, best, x, bp, "%gx" % want if want else "-", verdict))
    out += ["Pipelined at most 0.75x inline where compression is at least a third of the "
            "compute:"] + (pipe or ["  (no such cell)"])
    out += ["Best PipeCompress setting within 1.10x of the limit, ResNet-50 and VGG-16, "
            "2.5 Gbit/s and above:"] + (near or ["  (no such cell)"])
    out += ["Against the best DDP variant at its best case (2x at 1 and 2.5 Gbit/s, 1.3x at "
            "10):"] + (peer or ["  (no such cell)"])
    out += ["Where the compressor is busier than the iteration:"] + (hot or ["  nowhere"])
    return out


def charts(out, cells):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401 (matplotlib.ticker below)
    except ImportError:
        print("replay_report.py: no matplotlib: no charts", file=sys.stderr)
        return
    for model in sorted({c["model"] for c in cells}):
        mc = [c for c in cells if c["model"] == model]
        ws = sorted({c["workers"] for c in mc})
        fig, axes = plt.subplots(1, len(ws), figsize=(6 * len(ws), 4.5), squeeze=False)
        for ax, w in zip(axes[0], ws):
            wc = sorted((c for c in mc if c["workers"] == w), key=lambda c: c["rate_gbps"])
            names = sorted({s for c in wc for s in c["settings"] if s != "compute"})
            for i, s in enumerate(names):
                pts = [(c["rate_gbps"], c["settings"][s].get("best_ms") or
                        c["settings"][s].get("iter_ms")) for c in wc if s in c["settings"]]
                pts = [p for p in pts if p[1]]
                if pts:
                    ax.plot(*zip(*pts), marker="o", lw=1, color=plt.cm.tab20(i % 20),
                            ls="--" if s.startswith("ddp") else "-",
                            label=s + (" (best case)" if s in PEERS and s != "ddp" else ""))
            lim = [(c["rate_gbps"], c["limit_ms"]) for c in wc if c["limit_ms"]]
            if lim:
                # one rate: a line of one point draws nothing, so mark it
                ax.plot(*zip(*lim), color="black", lw=2, ls=":", marker="_" if len(lim) == 1
                        else None, markersize=30, label="limit (compute only)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            # the measured rates as plain ticks (a log axis would write 3x10^0 between them)
            rates = sorted({c["rate_gbps"] for c in wc})
            ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(rates))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(["%g" % r for r in rates]))
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            # ms as plain numbers, at 1, 2 and 5 of each decade
            plain = matplotlib.ticker.FuncFormatter(
                lambda v, _: "%g" % v if ("%.0e" % v)[0] in "125" else "")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.set_xlabel("per-node link, Gbit/s")
            ax.set_ylabel("iteration, ms (emulated)")
            ax.set_title("%s, %d workers" % (model, w))
            ax.grid(True, which="both", alpha=0.3)
        axes[0][-1].legend(fontsize=6, loc="upper right")
        fig.suptitle("%s: GPU compute replayed; network, compression and servers real\n"
                     "(dilated, 2-core CPU machine)" % model, fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(out, model + ".png"), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
