"""torch_runs.py: what torch_ddp_report.py and torch_accuracy_report.py share: the one-line
failure and the reading of one run of scripts/bench/torch-ddp.sh or torch-accuracy.sh
(RUNS_DIR/NAME.meta.json, what the run was, and RUNS_DIR/NAME.log, its whole output)."""
import json
import os
import sys


def fail(prog, msg):
    """One line on standard error, exit status 2: the reports' answer to bad input."""
    print("%s: %s" % (prog, msg), file=sys.stderr)
    sys.exit(2)


def read_meta_log(prog, runs_dir, name):
    """(meta, log text) of run NAME; a missing or malformed meta.json fails (prog's name in
    the line), a missing log reads as empty (the run's meta says whether it failed)."""
    try:
        with open(os.path.join(runs_dir, name + ".meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        fail(prog, "%s.meta.json: %s" % (name, e))
    try:
        with open(os.path.join(runs_dir, name + ".log"), errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    return meta, text


def write_report(prog, out_dir, stem, lines, summary):
    """OUT_DIR/STEM.txt (the lines, also printed) and OUT_DIR/STEM.json (the summary), each
    whole or not at all: written beside, then renamed. A write that fails fails (prog's
    name in the line)."""
    text = "".join(l.rstrip() + "\n" for l in lines)
    try:
        for name, body in ((stem + ".txt", text),
                           (stem + ".json", json.dumps(summary, indent=1) + "\n")):
            path = os.path.join(out_dir, name)
            with open(path + ".tmp", "w") as f:
                f.write(body)
            os.replace(path + ".tmp", path)
    except OSError as e:
        fail(prog, "%s: %s" % (out_dir, e.strerror))
    sys.stdout.write(text)
