#!/usr/bin/env bash
# pc-bench model, briefly: with 2 ranks it measures the link and the rates and prints the
# tables; its output has every part, its predictions are positive and consistent (each
# speedup is the allreduce's time over the mode's, an iteration is at least its compute,
# the printed table is the JSON's, a faster link is never slower, --predict equals the
# table's entry); with one rank it takes --bandwidth and --latency; bad flags fail with
# status 2 and one line; pc-bench engine (and model --iters, its older spelling) prints the
# engine's throughput as one JSON line; --trace prints the compressor pool a traced model
# needs, predicted for N = 1..16 threads; --device
# cuda without a usable device fails with status 1 and one line. No timing is asserted: the
# machines are shared and noisy.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
bench="$PC_BUILDDIR/apps/pc-bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
modes="allreduce ps-none ps-topk-inline ps-topk-pipelined ps-dgc-pipelined ps-topk-servermom ps-powersgd-pipelined"

if "$run" -t 300 -np 2 "$bench" model --model mlp --reps 1 --max-workers 16 \
    --bandwidth 1gbit,10gbit --json "$tmp/m.json" >"$tmp/m.out" 2>&1; then
    ok "pc-bench model, 2 ranks: exit 0"
else
    bad "pc-bench model, 2 ranks: status $?"; tail -n 5 "$tmp/m.out"
fi
num='[0-9]+\.[0-9]+'
cell="$num \\(${num}x\\)"
row="^[0-9]+ +[0-9]+ +$num( +$cell){6}$"
missing=""
grep -qE "^link: ranks 0 and 1 of 2 \(.*, this host\), .*: latency $num us .* bandwidth 0->1 $num [GM]B/s .*, 1->0 $num [GM]B/s" "$tmp/m.out" || missing+=" link"
grep -qE "^model's link: $num [GM]B/s" "$tmp/m.out" || missing+=" model-link"
for l in fc1 fc2 fc3; do grep -qE "^$l +[0-9]+ +$num +$num$" "$tmp/m.out" || missing+=" layer-$l"; done
grep -qE "^total +235146 +$num +$num +compute $num ms$" "$tmp/m.out" || missing+=" total"
for c in none 'topk:ratio=0.01,momentum=0.9' 'topk:ratio=0.01,momentum=0' 'dgc:ratio=0.001,momentum=0.9'; do
    grep -qE "^$c +$num +$num +$num +$num$" "$tmp/m.out" || missing+=" codec-$c"
done
# powersgd's round 1 and, on mlp's two weight matrices above --compress-min-bytes (fc3's
# 1280 elements are under it), the rest of its work.
grep -qE "^powersgd:rank=2 +$num +$num +1\.00000 +$num$" "$tmp/m.out" || missing+=" codec-powersgd"
grep -qE "^powersgd's other work, ns/elem: round 2 $num, worker's step $num, server's rows and step $num; orthonormalisation $num ns per row x rank\^2; 2 matrices, each one chunk in its mode$" "$tmp/m.out" || missing+=" powersgd-rates"
grep -qE "^server and pull \([0-9]+-element chunks, passes over the model's 235146 elements\), ns: aggregate dense $num/elem/msg" "$tmp/m.out" || missing+=" server"
grep -qE "^W +S +$(sed 's/ / +/g' <<<"$modes")$" "$tmp/m.out" || missing+=" header"
[ "$(grep -cE "$row" "$tmp/m.out")" = 4 ] || missing+=" rows(W=2..16)"
for b in 1gbit 10gbit; do
    grep -qE "^$b +[0-9]+ +$num( +$cell){6}$" "$tmp/m.out" || missing+=" bandwidth-$b"
done
if [ -z "$missing" ]; then
    ok "pc-bench model: rates, layers, codecs, server, table W=2..16 and bandwidth table printed"
else
    bad "pc-bench model output lacks:$missing"; cat "$tmp/m.out"
fi

# The JSON: every prediction positive and consistent, the printed table the JSON's.
if python3 - "$tmp/m.json" "$tmp/m.out" <<'PY'
import json, math, re, sys
d = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read().splitlines()
modes = ["allreduce", "ps-none", "ps-topk-inline", "ps-topk-pipelined", "ps-dgc-pipelined",
         "ps-topk-servermom", "ps-powersgd-pipelined"]
assert d["powersgd"]["matrices"] == 2 and d["powersgd"]["round2_ns"] > 0, d["powersgd"]
compute = sum(l["fwd_ms"] + l["bwd_ms"] for l in d["layers"])
assert d["link"]["measured"] and d["link"]["bandwidth"] > 0 and d["link"]["latency"] >= 0
assert [p["workers"] for p in d["table"]] == [2, 4, 8, 16], d["table"]
def check(p):
    assert p["servers"] == max(1, round(p["workers"] * d["servers_ratio"])), p
    ar = p["modes"]["allreduce"]["iter_ms"]
    for m in modes:
        r = p["modes"][m]
        assert r["iter_ms"] > 0 and math.isfinite(r["iter_ms"]), (m, r)
        assert abs(r["compute_ms"] - compute) <= 1e-3 * compute, (m, r["compute_ms"], compute)
        assert r["iter_ms"] >= r["compute_ms"] * (1 - 1e-9), (m, r)
        assert abs(r["exposed_ms"] - (r["iter_ms"] - r["compute_ms"])) <= 1e-6 * r["iter_ms"]
        assert abs(r["speedup"] - ar / r["iter_ms"]) <= 1e-5 * r["speedup"], (m, r)
        assert r["bytes_up"] >= 0 and r["bytes_down"] >= 0
for p in d["table"] + d["bandwidth_table"]:
    check(p)
# The printed rows are the JSON's, to the printed precision.
rows = {int(l.split()[0]): l for l in out if re.match(r"^\d+ +\d+ +\d+\.\d+ ", l)}
for p in d["table"]:
    cells = [float(t) for t in rows[p["workers"]].split()[2:] if not t.startswith("(")]
    for m, v in zip(modes, cells):
        assert abs(v - p["modes"][m]["iter_ms"]) <= 0.006, (p["workers"], m, v)
# A faster link is never slower, for every W and mode.
by = {}
for p in d["bandwidth_table"]:
    by.setdefault(p["workers"], []).append(p)
assert sorted(by) == [2, 4, 8, 16]
for W, ps in by.items():
    ps.sort(key=lambda p: p["bandwidth"])
    assert len(ps) == 2 and ps[0]["bandwidth"] == 1.25e8 and ps[1]["bandwidth"] == 1.25e9
    for m in modes:
        assert ps[1]["modes"][m]["iter_ms"] <= ps[0]["modes"][m]["iter_ms"] * (1 + 1e-9), (W, m)
PY
then
    ok "pc-bench model --json: positive, speedups consistent, iteration >= compute, table as printed, 10gbit never slower than 1gbit"
else
    bad "pc-bench model --json: inconsistent (above)"
fi

# The charts, where Debian's matplotlib is installed (scripts/plot.py needs it).
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    if "$PC_SRCDIR/scripts/plot.py" model "$tmp/m.json" --out "$tmp/m" >"$tmp/plot.out" 2>&1 &&
        [ -s "$tmp/m-workers.png" ] && [ -s "$tmp/m-bandwidth.png" ]; then
        ok "scripts/plot.py model: m-workers.png and m-bandwidth.png"
    else
        bad "scripts/plot.py model"; cat "$tmp/plot.out"
    fi
else
    echo "note: python3-matplotlib missing: scripts/plot.py model not tried"
fi

# --predict: one machine-readable line, equal to the JSON table's entry of the same run.
if "$run" -t 300 -np 2 "$bench" model --reps 1 --max-workers 4 --predict 2,1,ps-topk-pipelined \
    --json "$tmp/p.json" >"$tmp/p.out" 2>&1 &&
    line=$(grep -E '^predict ' "$tmp/p.out") &&
    grep -qE '^predict mode=ps-topk-pipelined e2e=4 W=2 S=1 iter_ms=[0-9]+\.[0-9]+ compute_ms=' <<<"$line" &&
    ! grep -qE '^W +S ' "$tmp/p.out" &&
    python3 - "$tmp/p.json" "$line" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
assert d["predict"] == [sys.argv[2]]
v = float(re.search(r"iter_ms=([0-9.]+)", sys.argv[2]).group(1))
t = [p for p in d["table"] if p["workers"] == 2][0]
assert t["servers"] == 1 and v > 0
assert abs(t["modes"]["ps-topk-pipelined"]["iter_ms"] - v) <= 0.0006, (t, v)
PY
then
    ok "--predict 2,1,ps-topk-pipelined: $line"
else
    bad "--predict 2,1,ps-topk-pipelined"; tail -n 5 "$tmp/p.out"
fi

# MODE all: a line per mode, in e2e.sh's order, from the same measurements.
if "$run" -t 300 -np 2 "$bench" model --reps 1 --max-workers 2 --predict 2,1,all >"$tmp/a.out" 2>&1 &&
    [ "$(grep -cE '^predict mode=[a-z-]+ e2e=[1-68] W=2 S=[01] iter_ms=[0-9]+\.[0-9]+ ' "$tmp/a.out")" = 7 ] &&
    [ "$(grep -oE '^predict mode=[a-z-]+ e2e=[1-68]' "$tmp/a.out" | tr '\n' ' ')" = "predict mode=allreduce e2e=1 predict mode=ps-none e2e=2 predict mode=ps-topk-inline e2e=3 predict mode=ps-topk-pipelined e2e=4 predict mode=ps-dgc-pipelined e2e=5 predict mode=ps-topk-servermom e2e=6 predict mode=ps-powersgd-pipelined e2e=8 " ]; then
    ok "--predict 2,1,all: seven lines, modes 1..6 and 8"
else
    bad "--predict 2,1,all"; tail -n 8 "$tmp/a.out"
fi

# One rank: the link from the command line; e2e.sh's mode number works as a name.
if "$run" -t 300 -np 1 "$bench" model --reps 1 --bandwidth 10gbit --latency 20us --predict 4,1,1 \
    >"$tmp/o.out" 2>&1 &&
    grep -q '^link: not measured (one rank)' "$tmp/o.out" &&
    grep -qE "^model's link: 1.25 GB/s \(10.0 Gbit/s\), latency 20.00 us$" "$tmp/o.out" &&
    grep -qE '^predict mode=allreduce e2e=1 W=4 S=0 iter_ms=[0-9]+\.[0-9]+ .* bandwidth=1.25e\+09 latency=2e-05$' "$tmp/o.out"; then
    ok "one rank, --bandwidth 10gbit --latency 20us --predict 4,1,1: $(grep '^predict' "$tmp/o.out")"
else
    bad "one rank with --bandwidth and --latency"; tail -n 5 "$tmp/o.out"
fi

# Usage errors: status 2 and one line (one rank: no mpirun needed).
usage() { # EXPECTED-TEXT ARGS...: status 2, one line containing the text
    local want=$1 msg rc
    shift
    msg=$("$bench" model "$@" 2>&1)
    rc=$?
    if [ "$rc" = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -qF -- "$want" <<<"$msg"; then
        ok "model $*: status 2, $msg"
    else
        bad "model $*: status $rc (expected 2 and one line with '$want'), got: $msg"
    fi
}
usage "pc-bench: --bandwidth: '3furlongs' is not a list" --bandwidth 3furlongs --latency 1us
usage "pc-bench: --bandwidth: '10gbit,' is not a list" --bandwidth 10gbit, --latency 1us
usage "pc-bench: --latency: 'fast' is not a latency" --bandwidth 1gbit --latency fast
usage "pc-bench: --predict: '2,0,ps-none' is not W,S,MODE" --predict 2,0,ps-none
usage "pc-bench: --predict: '2,1,7' is not W,S,MODE" --predict 2,1,7
usage "pc-bench: --servers-ratio: 0 is out of range" --servers-ratio 0
usage "pc-bench: --model: " --model resnet
usage "one rank cannot measure the link: give --bandwidth and --latency" --bandwidth 1gbit
usage "pc-bench: --device: 'gpu' is not one of cpu|cuda" --device gpu --iters 1
usage "pc-bench: --compressors-max: 0 is out of range" --trace "$PC_SRCDIR/traces/resnet50-a100-amp.json" --compressors-max 0
usage "pc-bench: model: --trace: " --trace "$tmp/no-such-trace.json"
usage "pc-bench: model: --compress nonsense: " --trace "$PC_SRCDIR/traces/resnet50-a100-amp.json" --compress nonsense

# --trace: the pool a traced model needs, predicted for N = 1, 2, 4, 8, 16 (one rank, no
# link; about 1 s): every column of every row, the compression divided by each N (perfect
# division assumed and said), the backward the trace's, and the least N that fits.
if "$bench" model --trace "$PC_SRCDIR/traces/resnet50-a100-amp.json" --compress topk:ratio=0.01 \
    --reps 1 --compressors-max 16 >"$tmp/pool.out" 2>&1 && python3 - "$tmp/pool.out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
assert re.search(r"^pc-bench model --trace: resnet50 on .*: 25557032 parameters in \d+ chunks "
                 r".*backward ([0-9.]+) ms per iteration \(the trace's\)$", text, re.M), "head"
assert re.search(r"^codec topk:ratio=0.01: [0-9.]+ Melem/s on one core", text, re.M), "codec"
assert "dividing the work perfectly (assumed)" in text, "assumption"
assert re.search(r"^compressors +speed-up +compress ms +cpu ms +backward ms +fits +iter ms "
                 r"\(ideal\)$", text, re.M), "header"
rows = re.findall(r"^ +(\d+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +(yes|no) +([0-9.]+)$",
                  text, re.M)
assert [int(r[0]) for r in rows] == [1, 2, 4, 8, 16], rows
cpu = float(rows[0][3])
for n, sp, busy, c, bwd, fits, it in rows:
    n, sp, busy, c, bwd = int(n), float(sp), float(busy), float(c), float(bwd)
    assert sp == n and abs(c - cpu) <= 0.01 and abs(busy - c / n) <= 0.01, (n, busy, c)
    assert (fits == "yes") == (busy <= bwd + 0.005), (n, busy, bwd, fits)
first = next((int(r[0]) for r in rows if r[5] == "yes"), None)
m = re.search(r"^needs: (\d+) compressor threads? \(predicted", text, re.M)
if first is not None:
    # the least N that fits is at most the first power of two that does
    assert m and int(m.group(1)) <= first, (m and m.group(1), first)
else:
    assert re.search(r"^needs: more than 16 compressor threads \(predicted", text, re.M)
PY
then
    ok "model --trace resnet50: the pool table for N = 1..16 and the threads needed ($(grep '^needs:' "$tmp/pool.out"))"
else
    bad "model --trace resnet50: the pool table"; cat "$tmp/pool.out"
fi

# --iters: the engine's throughput alone, one JSON line (the CPU here; scripts/gpu-check.sh
# runs it with --device cuda beside scripts/bench/torch_engine.py).
json_line='^\{"benchmark": "model-throughput", "engine": "pipecompress", "device": "(cpu|cuda)", "device_name": "[^"]*", "model": "mlp", "params": 235146, "batch": 8, "iters": 2, "warmup": 3, "seconds": [0-9.]+, "ms_per_iter": [0-9.]+, "samples_per_s": [0-9.]+\}$'
# pc-bench engine is its home; pc-bench model --iters N its older spelling, kept.
for sub in engine model; do
    msg=$("$bench" $sub --model mlp --batch 8 --iters 2 --json "$tmp/t.json" 2>&1)
    rc=$?
    if [ "$rc" = 0 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -qE "$json_line" <<<"$msg" &&
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["samples_per_s"] > 0 and d["device"] == "cpu"' "$tmp/t.json"; then
        ok "$sub --iters 2 --batch 8: $msg"
    else
        bad "$sub --iters 2: status $rc: $msg"
    fi
    rm -f "$tmp/t.json"
done
# engine's flags: a bad one is a usage error (2) in one line; an unwritable --json fails
# (1) after the line and leaves no file.
msg=$("$bench" engine --iters 0 2>&1)
rc=$?
if [ "$rc" = 2 ] && grep -q "pc-bench: --iters: 0 is out of range" <<<"$msg"; then
    ok "engine --iters 0: usage error (2)"
else
    bad "engine --iters 0: status $rc: $msg"
fi
msg=$("$bench" engine --iters 1 --batch 2 --json /nonexistent-dir-pc/t.json 2>&1)
rc=$?
if [ "$rc" = 1 ] && grep -q "pc-bench: --json: cannot write '/nonexistent-dir-pc/t.json'" <<<"$msg"; then
    ok "engine --json into a missing directory: status 1, said"
else
    bad "engine --json /nonexistent-dir-pc/t.json: status $rc: $msg"
fi

# --device cuda: without a usable device (no GPU, too old a driver, a build without CUDA),
# one line with the CUDA runtime's reason and status 1, whatever else was asked; with one,
# the throughput line.
msg=$("$bench" model --device cuda --model mlp --batch 8 --iters 2 2>&1)
rc=$?
if [ "$rc" = 0 ]; then
    if [ "$(wc -l <<<"$msg")" = 1 ] && grep -qE "$json_line" <<<"$msg" && grep -q '"device": "cuda"' <<<"$msg"; then
        ok "model --device cuda --iters 2 (a GPU here): $msg"
    else
        bad "model --device cuda --iters 2: $msg"
    fi
else
    for args in "engine --iters 2" "model --iters 2" "model" "model --bandwidth 1gbit --latency 1us"; do
        sub=${args%% *} rest=${args#"$sub"}
        # shellcheck disable=SC2086 # the flags are words
        msg=$("$bench" $sub --device cuda $rest 2>&1)
        rc=$?
        if [ "$rc" = 1 ] && [ "$(wc -l <<<"$msg")" = 1 ] &&
            grep -qE "^pc-bench: $sub: --device cuda: no usable CUDA device: .+\$" <<<"$msg"; then
            ok "$args --device cuda without a usable device: status 1, $msg"
        else
            bad "$args --device cuda: status $rc (expected 1 and one line), got: $msg"
        fi
    done
fi
pc_done
