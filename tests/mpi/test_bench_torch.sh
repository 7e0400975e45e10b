#!/usr/bin/env bash
# scripts/bench/torch-ddp.sh, briefly (a few iterations of the torch cnn on synthetic data):
# on shared memory, and as root on a loopback shaped to 1 Gbit/s, every setting (DDP and
# the five PipeCompress ones) ran, its log is kept, and the summary (text and JSON) gives
# each a rate and a ratio to DDP on the same network; the namespace it made is gone
# afterwards; runs past the time limit are reported failed with their status and the
# script exits 1 after the summary; bad flags give one line and status 2. No timing is
# asserted: the machines are shared and noisy.
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
settings="ddp allreduce ps-none ps-topk ps-topk-inline ps-dgc"

nets=shm
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns add "pcprobe$$" 2>/dev/null; then
    ip netns del "pcprobe$$"
    nets="shm 1gbit"
else
    echo "note: not root (or no network namespaces here): shared memory only"
fi

"$bench" --nets "$nets" --iters 6 --warmup 2 --data synthetic --timeout 300 --out "$tmp/b" \
    >"$tmp/b.out" 2>&1 &
pid=$!
wait "$pid"
rc=$?
if [ "$rc" = 0 ]; then
    ok "torch-ddp.sh --nets '$nets' --iters 6: exit 0"
else
    bad "torch-ddp.sh --nets '$nets' --iters 6: status $rc"; tail -n 20 "$tmp/b.out"
fi
if ip netns list 2>/dev/null | grep -q "^pc-torch-ddp-$pid\b"; then
    bad "its network namespace pc-torch-ddp-$pid is left behind"
    ip netns del "pc-torch-ddp-$pid"
else
    ok "no network namespace of its left behind"
fi

# The text summary: per network, every setting with a rate and a ratio (DDP's is 1.00x),
# printed as written; a log per run.
missing=""
for net in $nets; do
    grep -q "^$net: " "$tmp/b/summary.txt" || missing+=" $net-header"
    for s in $settings; do
        grep -qE "^$s +.* [23] +[0-9]+ +[0-9]+\.[0-9]{2}x$" "$tmp/b/summary.txt" || missing+=" $net-$s"
        [ -s "$tmp/b/runs/$net-$s.log" ] || missing+=" $net-$s.log"
    done
done
[ "$(grep -cE '^ddp +.* 1\.00x$' "$tmp/b/summary.txt")" = "$(wc -w <<<"$nets")" ] || missing+=" ddp-1.00x"
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
assert d["iters"] == 6 and d["warmup"] == 2 and d["workers"] == 2 and d["batch"] == 32, d
assert d["failed_runs"] == 0, d["failed_runs"]
assert [n["net"] for n in d["nets"]] == nets, d["nets"]
for n in d["nets"]:
    got = n["settings"]
    assert [s["setting"] for s in got] == settings, (n["net"], got)
    ddp = got[0]["samples_per_s"]
    for s in got:
        assert s["samples_per_s"] > 0 and s["failed"] == 0, s
        assert abs(s["ratio_to_ddp"] - s["samples_per_s"] / ddp) < 1e-9, s
        assert s["np"] == (2 if s["setting"] in ("ddp", "allreduce") else 3), s
        assert len(s["runs"]) == 1 and s["runs"][0]["failed"] is None, s
PY
then
    ok "summary.json: the settings in order, rates positive, each ratio its rate over DDP's"
else
    bad "summary.json (above)"
fi

# Runs past the time limit: each reported failed with its status, the script exits 1 after
# the summary (no run could finish 100000 iterations in 2 s).
"$bench" --nets shm --settings allreduce --iters 100000 --warmup 2 --data synthetic \
    --timeout 2 --out "$tmp/f" >"$tmp/f.out" 2>&1
rc=$?
if [ "$rc" = 1 ] && [ "$(grep -cE '^(ddp|allreduce) .* - +- +failed \(exit status 124' "$tmp/f/summary.txt")" = 2 ] &&
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["failed_runs"] == 2' "$tmp/f/summary.json"; then
    ok "--timeout 2: both runs reported failed (exit status 124), exit 1"
else
    bad "--timeout 2: status $rc"; cat "$tmp/f.out"
fi

# Usage: --help, and bad flags (one line, status 2, before anything runs).
if "$bench" --help | head -n 1 | grep -q '^# torch-ddp.sh: '; then
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
usage "torch-ddp.sh: --settings: unknown setting 'ps-fp16'" --settings "ps-none ps-fp16"
usage "torch-ddp.sh: --iters: 'many' is not a number" --iters many
usage "torch-ddp.sh: --iters (5) must exceed --warmup (20)" --iters 5
usage "torch-ddp.sh: --arch: 'resnet' is not cnn or lstm" --arch resnet
usage "torch-ddp.sh: --out needs a value" --out
pc_done
