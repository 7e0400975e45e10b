#!/usr/bin/python3
"""plot.py: PNG charts from PipeCompress --metrics files (JSON lines) and benchmark results.

  scripts/plot.py e2e RESULTS.json [--out PREFIX]
      PREFIX-MODEL-wN.png  per model and worker count, one panel per network: each mode's
                        iteration split into the breakdown's parts (medians of each):
                        compute, wait release, back-pressure, wait compress, wait network,
                        wait server, inline compression, stacked (scripts/bench/e2e.sh)

  scripts/plot.py model RESULTS.json [--out PREFIX]
      PREFIX-workers.png    predicted speedup of each parameter-server mode over the dense
                            allreduce against the number of workers (log2), and the
                            predicted iteration times beside it (pc-bench model --json)
      PREFIX-bandwidth.png  the speedup against the link's bandwidth (log), at the
                            run's --at-workers, when it was given --bandwidth

  scripts/plot.py metrics.jsonl [--out PREFIX]
      PREFIX-loss.png   training loss and accuracy of worker 0 per iteration, test accuracy
                        per epoch (pc-train)
      PREFIX-time.png   the breakdown of worker 0 per iteration, stacked: compute, wait
                        release, back-pressure, wait compress, wait network, wait server,
                        inline compression (doc/api.md, Metrics, defines them); total and
                        exposed compression as lines

Uses Debian's python3-matplotlib (hence /usr/bin/python3). Exits 2 with one line on bad
input: a missing or unreadable file, a line that is not JSON, no worker rows, a results
file of another benchmark.
"""
import argparse
import json
import sys


def fail(msg):
    print("plot.py: " + msg, file=sys.stderr)
    sys.exit(2)


def pyplot():
    """matplotlib.pyplot drawing to files (Agg), or a one-line error when it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is missing: install the Debian package python3-matplotlib")
    return plt


def load(path):
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    fail("%s:%d: not JSON (%s)" % (path, n, e.msg))
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    return rows


def smooth(values, window):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def e2e(argv):
    ap = argparse.ArgumentParser(prog="plot.py e2e", description="charts from e2e.sh results")
    ap.add_argument("results")
    ap.add_argument("--out", default=None, help="output prefix (default: the input's name)")
    args = ap.parse_args(argv)
    try:
        data = json.load(open(args.results))
        runs = [r for r in data["runs"] if not r.get("failed")]
    except OSError as e:
        fail("%s: %s" % (args.results, e.strerror))
    except (ValueError, KeyError, TypeError) as e:
        fail("%s: not e2e.sh results (%s)" % (args.results, e))
    if not runs:
        fail("%s: no successful runs" % args.results)
    prefix = args.out or args.results.rsplit(".", 1)[0]
    plt = pyplot()
    parts = [("compute", "compute"), ("wait_release", "wait release"),
             ("wait_backpressure", "back-pressure"), ("wait_compress", "wait compress"),
             ("wait_network", "wait network"), ("wait_server", "wait server"),
             ("compress_inline", "compression inline")]
    order = ["shm", "10g", "1g"]
    for model in sorted({r["model"] for r in runs}):
        for w in sorted({r["workers"] for r in runs if r["model"] == model}):
            sel = [r for r in runs if r["model"] == model and r["workers"] == w]
            # Known networks in their order, then the others (node-RATE) as they sort.
            seen = {r["net"] for r in sel}
            nets = [n for n in order if n in seen] + sorted(seen - set(order))
            fig, axes = plt.subplots(1, len(nets), figsize=(5 * len(nets), 4.5), squeeze=False)
            for ax, net in zip(axes[0], nets):
                rs = sorted((r for r in sel if r["net"] == net), key=lambda r: r["mode"])
                x = list(range(len(rs)))
                bottom = [0.0] * len(rs)
                for key, label in parts:
                    vals = [1e3 * r[key] for r in rs]
                    ax.bar(x, vals, bottom=bottom, label=label, alpha=0.8)
                    bottom = [b + v for b, v in zip(bottom, vals)]
                ax.scatter(x, [1e3 * r["t_iteration_median"] for r in rs], color="black",
                           marker="_", s=300, label="median iteration", zorder=3)
                pred = [(i, 1e3 * r["predicted"]["iter"]) for i, r in enumerate(rs)
                        if r.get("predicted")]
                if pred:
                    ax.scatter([p[0] for p in pred], [p[1] for p in pred], color="red",
                               marker="x", s=60, label="predicted (pc_cost)", zorder=4)
                ax.set_xticks(x)
                ax.set_xticklabels([str(r["mode"]) for r in rs])
                ax.set_xlabel("mode")
                ax.set_ylabel("ms per iteration")
                ax.set_title("%s, %s, %d worker%s" % (model, net, w, "s" if w > 1 else ""))
            axes[0][0].legend(loc="upper left", fontsize="x-small")
            fig.tight_layout()
            path = "%s-%s-w%d.png" % (prefix, model, w)
            fig.savefig(path, dpi=100)
            plt.close(fig)
            print(path)


MODES = ["allreduce", "ps-none", "ps-topk-inline", "ps-topk-pipelined", "ps-dgc-pipelined",
         "ps-topk-servermom", "ps-powersgd-pipelined"]


def model(argv):
    ap = argparse.ArgumentParser(prog="plot.py model",
                                 description="charts from pc-bench model --json results")
    ap.add_argument("results")
    ap.add_argument("--out", default=None, help="output prefix (default: the input's name)")
    args = ap.parse_args(argv)
    try:
        data = json.load(open(args.results))
        if data.get("benchmark") != "model":
            raise ValueError("benchmark is %r" % data.get("benchmark"))
        table = sorted(data["table"], key=lambda p: p["workers"])
        sweep = data["bandwidth_table"]
        for p in table + sweep:
            for m in MODES:
                p["modes"][m]["speedup"], p["modes"][m]["iter_ms"]
    except OSError as e:
        fail("%s: %s" % (args.results, e.strerror))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        fail("%s: not pc-bench model results (%s)" % (args.results, e))
    if not table:
        fail("%s: no predictions" % args.results)
    prefix = args.out or args.results.rsplit(".", 1)[0]
    plt = pyplot()
    link = data["link"]
    where = "%s, batch %d; link %.3g Gbit/s, %.3g us%s" % (
        data["model"], data["batch"], link["bandwidth"] * 8e-9, link["latency"] * 1e6,
        " (measured)" if link.get("measured") else " (given)")
    written = []

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    ws = [p["workers"] for p in table]
    for m in MODES:
        color = "C%d" % MODES.index(m)  # one colour per mode in every chart
        ax2.plot(ws, [p["modes"][m]["iter_ms"] for p in table], "o-", label=m, color=color)
        if m != "allreduce":
            ax.plot(ws, [p["modes"][m]["speedup"] for p in table], "o-", label=m, color=color)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_xlabel("workers W (servers S = max(1, round(W x %g)))" % data["servers_ratio"])
    ax.set_yscale("log")
    ax.set_ylabel("predicted speedup over the allreduce")
    ax.set_title("speedup against workers")
    ax2.set_yscale("log")
    ax2.set_ylabel("predicted ms per iteration")
    ax2.set_title("iteration time against workers")
    ax.legend(loc="best", fontsize="small")
    ax2.legend(loc="best", fontsize="small")
    fig.suptitle("pc-bench model (a prediction): " + where, fontsize="medium")
    fig.tight_layout()
    fig.savefig(prefix + "-workers.png", dpi=100)
    written.append(prefix + "-workers.png")
    plt.close(fig)

    at = [p for p in sweep if p["workers"] == data["at_workers"]]
    if not at and sweep:  # --at-workers is not a power of two: the W closest to it
        w = min({p["workers"] for p in sweep}, key=lambda w: abs(w - data["at_workers"]))
        at = [p for p in sweep if p["workers"] == w]
    if at:
        at.sort(key=lambda p: p["bandwidth"])
        fig, ax = plt.subplots(figsize=(7, 4.5))
        gbit = [p["bandwidth"] * 8e-9 for p in at]
        for m in MODES[1:]:
            ax.plot(gbit, [p["modes"][m]["speedup"] for p in at], "o-", label=m,
                    color="C%d" % MODES.index(m))
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("link bandwidth (Gbit/s), latency %.3g us" % (at[0]["latency"] * 1e6))
        ax.set_ylabel("predicted speedup over the allreduce")
        ax.set_title("%d workers, %d servers: speedup against bandwidth"
                     % (at[0]["workers"], at[0]["servers"]))
        ax.legend(loc="best", fontsize="small")
        fig.suptitle("pc-bench model (a prediction): " + where, fontsize="medium")
        fig.tight_layout()
        fig.savefig(prefix + "-bandwidth.png", dpi=100)
        written.append(prefix + "-bandwidth.png")
        plt.close(fig)
    for p in written:
        print(p)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "e2e":
        e2e(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "model":
        model(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description="charts from --metrics files")
    ap.add_argument("metrics")
    ap.add_argument("--out", default=None, help="output prefix (default: the input's name)")
    args = ap.parse_args()
    rows = load(args.metrics)
    prefix = args.out or args.metrics.rsplit(".", 1)[0]
    w0 = sorted((r for r in rows if r.get("role") == "worker" and r.get("rank") == 0),
                key=lambda r: r["iteration"])
    if not w0:
        fail("%s: no rows of worker rank 0" % args.metrics)
    evals = [r for r in rows if r.get("role") == "eval"]
    plt = pyplot()

    it = [r["iteration"] for r in w0]
    window = max(1, len(it) // 50)
    written = []
    if any("loss" in r for r in w0):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        loss = [r.get("loss", float("nan")) for r in w0]
        ax.plot(it, smooth(loss, window), color="tab:blue", label="training loss (worker 0)")
        ax.set_xlabel("iteration")
        ax.set_ylabel("loss")
        ax2 = ax.twinx()
        acc = [100 * r.get("accuracy", float("nan")) for r in w0]
        ax2.plot(it, smooth(acc, window), color="tab:orange", alpha=0.6, label="batch accuracy")
        if evals:
            ax2.plot([e["iteration"] for e in evals], [100 * e["test_accuracy"] for e in evals],
                     "o-", color="tab:red", label="test accuracy")
        ax2.set_ylabel("accuracy (%)")
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="center right")
        ax.set_title("training progress")
        fig.tight_layout()
        fig.savefig(prefix + "-loss.png", dpi=110)
        written.append(prefix + "-loss.png")
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ms = lambda key: smooth([1e3 * r[key] for r in w0], window)
    for r in w0:
        if "t_wait_release" not in r:
            fail("worker rows without the breakdown (t_wait_release ...): metrics of an "
                 "older build")
    waits = ("t_param_wait", "t_wait_release", "t_wait_backpressure", "t_compress_inline")
    compute = smooth([1e3 * max(0.0, r["t_iteration"] - sum(r[k] for k in waits))
                      for r in w0], window)
    parts = [("compute", compute), ("wait release", ms("t_wait_release")),
             ("back-pressure", ms("t_wait_backpressure")),
             ("wait compress", ms("t_wait_compress")),
             ("wait network", ms("t_wait_network")), ("wait server", ms("t_wait_server")),
             ("compression inline", ms("t_compress_inline"))]
    bottom = [0.0] * len(it)
    for label, vals in parts:
        ax.fill_between(it, bottom, [b + v for b, v in zip(bottom, vals)], label=label, alpha=0.7)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.plot(it, ms("t_compress"), color="black", linestyle="--",
            label="total compression (any thread)")
    ax.plot(it, ms("t_exposed"), color="black", linestyle=":",
            label="exposed compression (<= total)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("milliseconds per iteration")
    mode = "pipelined" if w0[0].get("pipeline") else "inline"
    ax.set_title("worker 0 time per iteration (%s, %s)" % (w0[0].get("mode", "?"), mode))
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(prefix + "-time.png", dpi=110)
    written.append(prefix + "-time.png")
    plt.close(fig)
    for p in written:
        print(p)


if __name__ == "__main__":
    main()
