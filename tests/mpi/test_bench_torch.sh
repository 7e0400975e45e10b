#!/usr/bin/env bash
# scripts/bench/torch-ddp.sh, briefly (a few iterations of the torch cnn on synthetic data):
# on shared memory every setting (compute only, DDP fp32, fp16 and PowerSGD rank 2, every
# PipeCompress one and --mode auto), and as root on a loopback shaped to 1 Gbit/s the six
# whose transport differs there (compute, DDP, a hook, the allreduce, top-k, auto) ran,
# its log is kept, and the summary (text and JSON) gives each a rate, an iteration and its
# ratios to DDP, to the best DDP variant and to the compute-only iteration in the same
# cell, and auto's choice; the namespace it made is gone afterwards; as root, --nodes 3
# (one rank per emulated node, each node's link shaped) with 2 workers, the cluster gone
# afterwards; runs past the time limit are reported failed with their status and the
# script exits 1 after the summary; bad flags give one line and status 2.
# scripts/bench/torch-accuracy.sh, briefly (1 epoch of 256 synthetic samples, DDP and
# top-k): the per-epoch accuracies, the table and the JSON, the chart against a speed
# summary; its bad flags. No timing is asserted: the machines are shared and noisy.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
bench="$PC_SRCDIR/scripts/bench/torch-ddp.sh"
lib="$PC_BUILDDIR/src/.libs/libpipecompress.so.0"
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
    pc_skip "/usr/bin/python3 cannot import torch (Debian package python3-torch)"
[ -f "$lib" ] || pc_skip "no shared library at $lib (the Python binding loads it)"
export PIPECOMPRESS_LIB=$lib # the build under test; the script builds nothing then
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# lib.sh's pc_build_kept, the torch benchmarks' build: a build/ configured with other flags
# (demo.sh's --without-cuda) is made again as it is, not configured anew; an unconfigured
# one is configured (no flags). On a stand-in tree whose configure and make leave marks.
top=$tmp/top
mkdir -p "$top/build"
touch "$top/configure.ac" "$top/Makefile.am"
printf '#!/bin/sh\nprintf "all:\\n\\t@touch %s/made\\n" > Makefile\ntouch %s/configured\n' "$tmp" "$tmp" >"$top/configure"
chmod +x "$top/configure"
sleep 1
touch "$top/configure"
printf 'all:\n\t@touch %s/made\n' "$tmp" >"$top/build/Makefile"
printf '%s' --without-cuda >"$top/build/.pc-configure-flags"
kept=$( (. "$PC_SRCDIR/scripts/lib.sh"; PC_TOP=$top; pc_build_kept build) 2>&1)
if [ -f "$tmp/made" ] && [ ! -f "$tmp/configured" ] &&
    [ "$kept" = "$(printf "== build/ configured with '--without-cuda': kept\n== make (in build)")" ]; then
    ok "pc_build_kept: a build configured --without-cuda made as it is"
else
    bad "pc_build_kept on a configured build: '$kept'; made: $(ls "$tmp/made" 2>&1), configured: $(ls "$tmp/configured" 2>&1)"
fi
# configured by hand (no flags recorded): made, not configured
rm -f "$tmp/made" "$top/build/.pc-configure-flags"
kept=$( (. "$PC_SRCDIR/scripts/lib.sh"; PC_TOP=$top; pc_build_kept build) 2>&1)
if [ -f "$tmp/made" ] && [ ! -f "$tmp/configured" ] &&
    [ "$kept" = "== make (in build, configured by hand: kept)" ]; then
    ok "pc_build_kept: a build configured by hand made as it is"
else
    bad "pc_build_kept on a build configured by hand: '$kept'"
fi
rm -f "$tmp/made" "$top/build/Makefile"
(. "$PC_SRCDIR/scripts/lib.sh"; PC_TOP=$top; pc_build_kept build) >"$tmp/kept.out" 2>&1
if [ -f "$tmp/configured" ] && [ -f "$tmp/made" ] && [ -f "$top/build/.pc-configure-flags" ] &&
    [ ! -s "$top/build/.pc-configure-flags" ]; then
    ok "pc_build_kept: an unconfigured build configured with no flags, then made"
else
    bad "pc_build_kept on an unconfigured build:"; cat "$tmp/kept.out"
fi
# Every kind of setting once: PowerSGD at rank 2 stands for ranks 1 and 4 (the same code
# with another number; four more torch launches cost about 80 s of CI's 45 minutes).
settings="compute ddp ddp-fp16 ddp-psgd2 allreduce ps-none ps-topk ps-topk-inline ps-dgc ps-psgd2 auto"
root=0

# Every setting on shared memory; as root, the loopback shaped to 1 Gbit/s again below with
# the settings whose transport differs there (a second run of all 11 would cost about 3 minutes).
nets=shm
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns add "pcprobe$$" 2>/dev/null; then
    ip netns del "pcprobe$$"
    root=1
else
    echo "note: not root (or no network namespaces here): shared memory only"
fi

"$bench" --nets "$nets" --settings "$settings" --iters 6 --warmup 2 --data synthetic --timeout 300 --out "$tmp/b" \
    >"$tmp/b.out" 2>&1 &
pid=$!
wait "$pid"
rc=$?
if [ "$rc" = 0 ]; then
    ok "torch-ddp.sh --nets '$nets' --iters 6: exit 0"
else
    bad "torch-ddp.sh --nets '$nets' --iters 6: status $rc"; tail -n 20 "$tmp/b.out"
fi
if grep -q "^pc-torch-ddp-$pid\b" <<<"$(ip netns list 2>/dev/null)"; then
    bad "its network namespace pc-torch-ddp-$pid is left behind"
    ip netns del "pc-torch-ddp-$pid"
else
    ok "no network namespace of its left behind"
fi

# The text summary: per network, every setting with a rate and a ratio (DDP's is 1.00x),
# printed as written; a log per run.
missing=""
for net in $nets; do
    grep -q "^$net, 2 workers: .*; best peer: ddp" "$tmp/b/summary.txt" || missing+=" $net-header"
    for s in $settings; do
        grep -qE "^$s +.* [123] +[0-9]+ +[0-9.]+ +[0-9]+\.[0-9]{2}x +[0-9]+\.[0-9]{2}x +[0-9]+\.[0-9]{2}x( |$)" "$tmp/b/summary.txt" || missing+=" $net-$s"
        [ -s "$tmp/b/runs/$net-w2-$s.log" ] || missing+=" $net-w2-$s.log"
    done
done
[ "$(grep -cE '^ddp +DDP fp32 +2 .* 1\.00x +[0-9.]+x +[0-9.]+x$' "$tmp/b/summary.txt")" = "$(wc -w <<<"$nets")" ] || missing+=" ddp-1.00x"
[ "$(grep -cE '^compute +.* 1 .* 1\.00x$' "$tmp/b/summary.txt")" = "$(wc -w <<<"$nets")" ] || missing+=" compute-1.00x"
[ "$(grep -cE '^auto +.*  chose (allreduce; trained by 3 workers|ps-[a-z-]+)$' "$tmp/b/summary.txt")" = "$(wc -w <<<"$nets")" ] || missing+=" auto-choice"
tail -n "$(wc -l <"$tmp/b/summary.txt")" "$tmp/b.out" | cmp -s - "$tmp/b/summary.txt" || missing+=" printed"
if [ -z "$missing" ]; then
    ok "summary.txt: every setting of every network with samples/s and x DDP, a log per run"
else
    bad "summary.txt lacks:$missing"; cat "$tmp/b/summary.txt" "$tmp/b.out"
fi

# The JSON: the same settings in the same order, rates positive, ratios consistent.
if /usr/bin/python3 - "$tmp/b/summary.json" "$nets" "$settings" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
nets, settings = sys.argv[2].split(), sys.argv[3].split()
assert d["iters"] == 6 and d["warmup"] == 2 and d["workers"] == [2] and d["batch"] == 32, d
assert d["failed_runs"] == 0, d["failed_runs"]
assert [n["net"] for n in d["nets"]] == nets, d["nets"]
for n in d["nets"]:
    got = n["settings"]
    assert [s["setting"] for s in got] == settings, (n["net"], got)
    rate = {s["setting"]: s["samples_per_s"] for s in got}
    peers = [k for k in rate if k.startswith("ddp")]
    best = max(peers, key=rate.get)
    assert n["best_peer"] == best and n["workers"] == 2, n
    assert abs(n["compute_iter_s"] - 32 / rate["compute"]) < 1e-9, n
    for s in got:
        assert s["samples_per_s"] > 0 and s["failed"] == 0, s
        if s["setting"] == "compute":  # one process: by iteration (2 workers' for DDP)
            assert abs(s["ratio_to_ddp"] - 2 * 32 / rate["ddp"] / s["iter_s"]) < 1e-9, s
            assert abs(s["ratio_to_best_peer"] - 2 * 32 / rate[best] / s["iter_s"]) < 1e-9, s
        else:
            assert abs(s["ratio_to_ddp"] - s["samples_per_s"] / rate["ddp"]) < 1e-9, s
            assert abs(s["ratio_to_best_peer"] - s["samples_per_s"] / rate[best]) < 1e-9, s
        # the workers it trained with: auto's allreduce makes the server rank a worker too
        w = 1 if s["setting"] == "compute" else 3 if s["auto_choice"] == "allreduce" else 2
        assert s["setting"] == "compute" or s["runs"][0]["workers"] == w, s
        assert abs(s["iter_s"] - w * 32 / s["samples_per_s"]) < 1e-9, s
        assert abs(s["iter_over_compute"] - s["iter_s"] / n["compute_iter_s"]) < 1e-9, s
        ranks = {"compute": 1, "allreduce": 2, "auto": 3}.get(s["setting"], 2 if s["setting"].startswith("ddp") else 3)
        assert s["np"] == ranks, s
        assert (s["auto_choice"] is not None) == (s["setting"] == "auto"), s
        assert len(s["runs"]) == 1 and s["runs"][0]["failed"] is None, s
PY
then
    ok "summary.json: the settings in order, rates positive, each ratio its rate over DDP's"
else
    bad "summary.json (above)"
fi

# As root, the loopback shaped to 1 Gbit/s: the settings whose transport differs there from
# shared memory (gloo over TCP for DDP and a hook, MPI's TCP transport for the allreduce, the
# servers and auto's probe), against the compute-only iteration. Each setting's own flags
# and its summary line were checked on shared memory above.
if [ "$root" = 1 ]; then
    sub="compute ddp ddp-psgd2 allreduce ps-topk auto"
    "$bench" --nets 1gbit --settings "$sub" --iters 6 --warmup 2 --data synthetic --timeout 300 \
        --out "$tmp/g" >"$tmp/g.out" 2>&1 &
    pid=$!
    wait "$pid"
    rc=$?
    missing=""
    grep -q "^1gbit, 2 workers: .*; best peer: ddp" "$tmp/g/summary.txt" 2>/dev/null || missing+=" header"
    for s in $sub; do
        grep -qE "^$s +.* [123] +[0-9]+ +[0-9.]+ +[0-9]+\.[0-9]{2}x +[0-9]+\.[0-9]{2}x +[0-9]+\.[0-9]{2}x( |$)" "$tmp/g/summary.txt" 2>/dev/null || missing+=" $s"
        [ -s "$tmp/g/runs/1gbit-w2-$s.log" ] || missing+=" 1gbit-w2-$s.log"
    done
    grep -qE '^auto +.*  chose (allreduce; trained by 3 workers|ps-[a-z-]+)$' "$tmp/g/summary.txt" 2>/dev/null || missing+=" auto-choice"
    /usr/bin/python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["failed_runs"] == 0 and [n["net"] for n in d["nets"]] == ["1gbit"]
assert [s["setting"] for s in d["nets"][0]["settings"]] == sys.argv[2].split()' "$tmp/g/summary.json" "$sub" 2>/dev/null || missing+=" json"
    if [ "$rc" = 0 ] && [ -z "$missing" ]; then
        ok "torch-ddp.sh --nets 1gbit --settings '$sub': exit 0, each with a rate and a log"
    else
        bad "torch-ddp.sh --nets 1gbit: status $rc, lacks:$missing"; tail -n 20 "$tmp/g.out"
    fi
    if grep -q "^pc-torch-ddp-$pid\b" <<<"$(ip netns list 2>/dev/null)"; then
        bad "its network namespace pc-torch-ddp-$pid is left behind"
        ip netns del "pc-torch-ddp-$pid"
    else
        ok "1gbit: no network namespace of its left behind"
    fi
fi

# Runs past the time limit: each reported failed with its status, the script exits 1 after
# the summary (no run could finish 100000 iterations in 2 s).
"$bench" --nets shm --settings allreduce --iters 100000 --warmup 2 --data synthetic \
    --timeout 2 --out "$tmp/f" >"$tmp/f.out" 2>&1
rc=$?
if [ "$rc" = 1 ] && [ "$(grep -cE '^(ddp|allreduce) .* - +- +- +- +- +failed \(exit status 124' "$tmp/f/summary.txt")" = 2 ] &&
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["failed_runs"] == 2' "$tmp/f/summary.json"; then
    ok "--timeout 2: both runs reported failed (exit status 124), exit 1"
else
    bad "--timeout 2: status $rc"; cat "$tmp/f.out"
fi

# Usage: --help, and bad flags (one line, status 2, before anything runs).
# The output is captured first: a reader that stops early (head, grep -q) would end the
# writer by SIGPIPE, which pipefail reports as a failure.
help_text=$("$bench" --help)
if [[ $help_text == "# torch-ddp.sh: "*$'\n'"#"* ]]; then
    ok "--help: the usage block"
else
    bad "--help"
fi
usage() { # EXPECTED-TEXT ARGS...: status 2, one line containing the text
    local want=$1 msg rc
    shift
    msg=$("$bench" "$@" 2>&1)
    rc=$?
    if [ "$rc" = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -qF -- "$want" <<<"$msg"; then
        ok "$*: status 2, $msg"
    else
        bad "$*: status $rc (expected 2 and one line with '$want'), got: $msg"
    fi
}
usage "torch-ddp.sh: unknown argument '--bogus'" --bogus
usage "torch-ddp.sh: --nets: unknown network 'wan'" --nets "shm wan"
usage "torch-ddp.sh: --settings: unknown setting 'ps-int8'" --settings "ps-none ps-int8"
names=$("$bench" --list-settings | tr '\n' ' ')
if [[ " $names" == " ddp compute "*" ps-dgc "*" adamw-wrk-clip " ]]; then
    ok "--list-settings: $(wc -w <<<"$names") names, ddp first"
else
    bad "--list-settings: '$names'"
fi
usage "torch-ddp.sh: --iters: 'many' is not a number" --iters many
usage "torch-ddp.sh: --iters (5) must exceed --warmup (20)" --iters 5
usage "torch-ddp.sh: --arch: 'resnet' is not one of cnn, lstm, resnet18, resnet50, vgg16, vit" --arch resnet
usage "torch-ddp.sh: --nets: unknown network '1gbit' (node-1gbit, node-10gbit with --nodes)" --nodes 3 --nets 1gbit
usage "torch-ddp.sh: --nodes 3: 4 workers and a server need 5 nodes" --nodes 3 --workers "2 4"
usage "torch-ddp.sh: --workers: 'two' is not a number" --workers two
# replay.sh's networks (any node-RATE) and the counterparts named in --settings pass the
# checks (refused further on, for the iterations)
usage "torch-ddp.sh: --iters (5) must exceed --warmup (20)" --nodes 3 --nets node-2500mbit --settings "ps-fp16 ps-topk-inline ps-psgd4-inline" --iters 5
usage "torch-ddp.sh: --out needs a value" --out
usage "torch-ddp.sh: --compressors: 'many' is not a number of threads (1 to 64) or auto" --compressors many
usage "torch-ddp.sh: --compressors: 65 is above 64" --compressors 65
# (a pool that passes: refused further on, for the iterations)
usage "torch-ddp.sh: --iters (5) must exceed --warmup (20)" --compressors auto --iters 5
# Per-node links (root): one rank per emulated node, DDP's gloo and MPI over the nodes'
# shaped links; the cluster is taken down afterwards.
if [ "$root" = 1 ]; then
    before=$(ip netns list | sort)
    "$bench" --nodes 3 --nets node-1gbit --settings "ddp-psgd2 ps-topk" --iters 5 --warmup 2 \
        --data synthetic --timeout 300 --out "$tmp/n" >"$tmp/n.out" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && grep -q '^node-1gbit, 2 workers: one rank per emulated node' "$tmp/n/summary.txt" &&
        [ "$(grep -cE '^(ddp|ddp-psgd2|ps-topk) +.* [23] +[0-9]+ ' "$tmp/n/summary.txt")" = 3 ] &&
        grep -q 'pc-cluster.sh mpirun CLUSTER -np 3 --map-by node' "$tmp/n/runs/node-1gbit-w2-ps-topk.log" &&
        grep -q 'GLOO_SOCKET_IFNAME=eth0' "$tmp/n/runs/node-1gbit-w2-ddp.log"; then
        ok "--nodes 3 --nets node-1gbit: DDP, PowerSGD and top-k across emulated nodes, each with a rate"
    else
        bad "--nodes 3: status $rc"; tail -n 20 "$tmp/n.out"
    fi
    # Nodes sharing the machine's cores: PipeCompress unbound, as DDP is; otherwise pinned.
    shared=$(awk 'NR == 3 { print $4 }' "$tmp/n/cluster.txt")
    if [ "$shared" = all ]; then want='placement: 2 threads unbound (--bind none)'; else want='placement: '; fi
    if grep -q -- "$want" "$tmp/n/runs/node-1gbit-w2-ps-topk.log" &&
        { [ "$shared" != all ] || grep -q -- '--bind none' "$tmp/n/runs/node-1gbit-w2-ps-topk.log"; } &&
        ! grep -q -- '--bind' "$tmp/n/runs/node-1gbit-w2-ddp-psgd2.log"; then
        ok "--nodes: cores ${shared:-?} per node: PipeCompress's placement '$want', DDP's untouched"
    else
        bad "--nodes: placement with cores '$shared'"; grep -i placement "$tmp/n/runs/node-1gbit-w2-ps-topk.log"
    fi
    if [ "$(ip netns list | sort)" = "$before" ]; then
        ok "--nodes: the emulated nodes are gone afterwards"
    else
        bad "--nodes left namespaces behind: $(ip netns list | tr '\n' ' ')"
    fi
else
    echo "note: not root: --nodes not tried"
fi

# torch-accuracy.sh: 1 epoch of 256 samples, DDP, top-k, DGC warmed up over that epoch
# (256 / 64 = 4 iterations) and PowerSGD rank 4 both ways (the flags reach the example;
# the codec and the hook are tested elsewhere); the chart against the speed summary above
# (its networks, 2 workers).
acc="$PC_SRCDIR/scripts/bench/torch-accuracy.sh"
"$acc" --arch cnn --epochs 1 --train-samples 256 --data synthetic --settings "ddp ps-topk ps-dgc-warm ddp-psgd4 ps-psgd4" \
    --speed "$tmp/b/summary.json" --timeout 300 --seed 3 --out "$tmp/a" >"$tmp/a.out" 2>&1
rc=$?
if [ "$rc" = 0 ] &&
    grep -qE '^ddp +DDP fp32 +[0-9.]+ +[0-9.]+ +\+0\.00 ' "$tmp/a/accuracy.txt" &&
    grep -qE '^ps-topk +ps, topk 1%, pipelined +[0-9.]+ +[0-9.]+ +[+-][0-9.]+ ' "$tmp/a/accuracy.txt" &&
    grep -q '^shm, 2 workers: minutes to each epoch' "$tmp/a/accuracy.txt" &&
    grep -q '^torch cnn, 1 epoch(s) of the first 256 training samples, 2 workers x batch 32, seed 3;' "$tmp/a/accuracy.txt" &&
    grep -q -- ' --seed 3 ' <<<"$(head -n 1 "$tmp/a/runs/ps-topk.log")" &&
    grep -q -- '--compress dgc:ratio=0.001,warmup=4 ' <<<"$(head -n 1 "$tmp/a/runs/ps-dgc-warm.log")" &&
    grep -q -- '--ddp-hook powersgd --powersgd-rank 4' <<<"$(head -n 1 "$tmp/a/runs/ddp-psgd4.log")" &&
    grep -q -- '--compress powersgd:rank=4,warmup=10 ' <<<"$(head -n 1 "$tmp/a/runs/ps-psgd4.log")" &&
    /usr/bin/python3 - "$tmp/a/accuracy.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["arch"] == "cnn" and d["epochs"] == 1 and d["train_samples"] == 256, d
runs = {r["setting"]: r for r in d["runs"]}
assert set(runs) == {"ddp", "ps-topk", "ps-dgc-warm", "ddp-psgd4", "ps-psgd4"}, runs
for r in runs.values():
    assert r["iters_per_epoch"] == 4 and len(r["epochs"]) == 1 and r["failed"] is None, r
    assert r["final"] == r["epochs"][-1], r
assert abs(runs["ps-topk"]["vs_ddp_points"] - (runs["ps-topk"]["final"] - runs["ddp"]["final"])) < 1e-9
curve = d["timelines"]["shm"]["ps-topk"]
assert curve[0] == [0.0, 10.0] and curve[1][1] == runs["ps-topk"]["epochs"][0], curve
PY
then
    ok "torch-accuracy.sh: per-epoch and final accuracies, the difference to DDP, the wall-clock timeline from the speed summary"
else
    bad "torch-accuracy.sh: status $rc"; tail -n 20 "$tmp/a.out"
fi
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    [ -s "$tmp/a/accuracy-time-shm.png" ] && ok "torch-accuracy.sh: the chart accuracy-time-shm.png" ||
        bad "torch-accuracy.sh: no chart"
fi
# The report alone: into a folder not yet made (made, every file whole, nothing left
# half-written beside; without --speed its accuracy.txt is the table alone, the first
# run's first lines), and into one that cannot be made (one line, status 2).
report="$PC_SRCDIR/scripts/bench/torch_accuracy_report.py"
if [ -d "$tmp/a/runs" ] && /usr/bin/python3 "$report" "$tmp/a/runs" "$tmp/r/new" >/dev/null &&
    [ -s "$tmp/r/new/accuracy.txt" ] &&
    cmp -s <(head -n "$(wc -l <"$tmp/r/new/accuracy.txt")" "$tmp/a/accuracy.txt") "$tmp/r/new/accuracy.txt" &&
    [ -z "$(find "$tmp/r/new" -name '*.tmp*')" ]; then
    ok "torch_accuracy_report.py: a new output folder is made, the table the same"
else
    bad "torch_accuracy_report.py into a new folder"; ls -R "$tmp/r" 2>&1 | sed -n 1,10p
fi
# --mode auto's accuracy run on the chart only where the speed run's auto chose the same:
# a copy of top-k's run named auto, once with the speed run's shm choice and once with
# another; the other is left out, said in one line.
shm_choice=$(/usr/bin/python3 -c 'import json, sys
c = [c for c in json.load(open(sys.argv[1]))["nets"] if c["net"] == "shm" and c["workers"] == 2][0]
print([s for s in c["settings"] if s["setting"] == "auto"][0]["auto_choice"])' "$tmp/b/summary.json" 2>/dev/null)
for choice in "$shm_choice" other-choice; do
    d=$tmp/r/auto-$choice
    mkdir -p "$d/runs" && cp "$tmp/a/runs/ddp.log" "$tmp/a/runs/ddp.meta.json" "$d/runs/" &&
        sed 's/"setting": "ps-topk"/"setting": "auto"/' "$tmp/a/runs/ps-topk.meta.json" >"$d/runs/auto.meta.json" &&
        { cat "$tmp/a/runs/ps-topk.log"; echo "auto: chose $choice: --mode ps (these flags, made by the probe)"; } >"$d/runs/auto.log"
done
if [ -n "$shm_choice" ] &&
    /usr/bin/python3 "$report" "$tmp/r/auto-$shm_choice/runs" "$tmp/r/auto-$shm_choice" --speed "$tmp/b/summary.json" >/dev/null &&
    /usr/bin/python3 "$report" "$tmp/r/auto-other-choice/runs" "$tmp/r/auto-other-choice" --speed "$tmp/b/summary.json" >/dev/null &&
    grep -q '^auto  *[0-9.]* min ' <<<"$(sed -n '/^shm, 2 workers/,/^$/p' "$tmp/r/auto-$shm_choice/accuracy.txt")" &&
    ! grep -q '^auto  *[0-9.]* min ' "$tmp/r/auto-other-choice/accuracy.txt" &&
    grep -qx "auto: left out (chose other-choice in this run, $shm_choice in the speed run)" "$tmp/r/auto-other-choice/accuracy.txt"; then
    ok "torch_accuracy_report.py: auto on the chart with the speed run's choice ($shm_choice), left out with another"
else
    bad "torch_accuracy_report.py: auto against the speed run's choice '$shm_choice'"; tail -n 8 "$tmp/r/auto-other-choice/accuracy.txt" 2>&1
fi
ddp_report="$PC_SRCDIR/scripts/bench/torch_ddp_report.py"
if /usr/bin/python3 "$ddp_report" "$tmp/b/runs" "$tmp/r/ddp" >/dev/null &&
    cmp -s "$tmp/b/summary.txt" "$tmp/r/ddp/summary.txt" && [ -z "$(find "$tmp/r/ddp" -name '*.tmp')" ]; then
    ok "torch_ddp_report.py: a new output folder is made, the summary the same"
else
    bad "torch_ddp_report.py into a new folder"; ls -R "$tmp/r" 2>&1 | sed -n 1,10p
fi
# Runs of two seeds in one folder: refused, one line (a table would mix them).
cp -r "$tmp/a/runs" "$tmp/mix"
sed -i 's/"seed": 3/"seed": 4/' "$tmp/mix/ddp.meta.json"
msg=$(/usr/bin/python3 "$report" "$tmp/mix" "$tmp/mixout" 2>&1)
rc=$?
if [ "$rc" != 0 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -q 'runs of seeds 3, 4 in one folder' <<<"$msg"; then
    ok "torch_accuracy_report.py: two seeds in one folder refused: $msg"
else
    bad "torch_accuracy_report.py on two seeds: status $rc, got: $msg"
fi
msg=$(/usr/bin/python3 "$report" "$tmp/a/runs" /proc/no-such/dir 2>&1)
rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -q '^torch_accuracy_report.py: /proc/no-such/dir: ' <<<"$msg"; then
    ok "torch_accuracy_report.py: an output folder that cannot be made: status 2, $msg"
else
    bad "torch_accuracy_report.py /proc/no-such/dir: status $rc, got: $msg"
fi
# A --speed summary the report could not use is refused before any run: one without a
# 2-worker network, one of another model, a file that is no summary.
echo '{"arch": "cnn", "nets": [{"net": "shm", "workers": 4, "settings": []}]}' >"$tmp/w4.json"
for args in "--arch resnet|--arch: 'resnet' is not one of" "--settings ddp-bogus|--settings: unknown setting 'ddp-bogus'" \
    "--epochs 0|--epochs: 0 is below 1" "--speed /nonexistent|--speed: no file /nonexistent" \
    "--seed x|--seed: 'x' is not a number" \
    "--data /nonexistent|--data: no directory /nonexistent" \
    "--study sgd|--study: 'sgd' is not adam or adadelta" \
    "--study adadelta --settings topk-lazy|--settings: unknown setting 'topk-lazy' (ddp ps-topk ps-none ps-topk-warm)" \
    "--freeze-after 5|--freeze-after needs --study adam or adadelta" \
    "--out --epochs 1|--out needs a value, not the flag '--epochs'" \
    "--arch cnn --speed $tmp/w4.json|--speed $tmp/w4.json: no network measured with 2 workers" \
    "--arch vit --speed $tmp/b/summary.json|--speed $tmp/b/summary.json: its model is cnn, the runs' vit" \
    "--arch cnn --speed $tmp/a/accuracy.json|--speed $tmp/a/accuracy.json: not a torch-ddp.sh summary.json"; do
    msg=$("$acc" ${args%%|*} 2>&1)
    rc=$?
    if [ "$rc" = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -qF -- "${args#*|}" <<<"$msg"; then
        ok "torch-accuracy.sh ${args%%|*}: status 2, $msg"
    else
        bad "torch-accuracy.sh ${args%%|*}: status $rc, got: $msg"
    fi
done
# The text captured whole: grep -q closing the pipe at its first match made the script's
# later prints fail with a broken pipe (status 1 under pipefail) when grep won the race.
if help_text=$(/usr/bin/python3 "$report" --help) &&
    grep -q '^  torch_accuracy_report.py RUNS_DIR OUT_DIR' <<<"$help_text"; then
    ok "torch_accuracy_report.py --help: the usage, status 0"
else
    bad "torch_accuracy_report.py --help"
fi
msg=$("$bench" --data /nonexistent 2>&1)
rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -qF -- "--data: no directory /nonexistent" <<<"$msg"; then
    ok "torch-ddp.sh --data /nonexistent: status 2, $msg"
else
    bad "torch-ddp.sh --data /nonexistent: status $rc, got: $msg"
fi
pc_done
