#!/usr/bin/env bash
# `pc-bench link` (apps/bench_link.c) on 2 ranks over shared memory for 1 second: the flow's
# line, the total and the JSON line are there and bytes moved; an odd rank count and bad
# flags are refused with exit 2 and one line. Its gloo twin, scripts/bench/link_gloo.py,
# the same way where /usr/bin/python3 imports torch. scripts/bench/links.sh's refusals, and
# as root one short run of it over emulated nodes (its cluster taken down). The rates
# themselves are not checked (a shared machine): links.sh measures them (doc/cluster.md).
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
run="$PC_SRCDIR/scripts/pc-mpirun.sh"
bench="$PC_BUILDDIR/apps/pc-bench"
gloo="$PC_SRCDIR/scripts/bench/link_gloo.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check_output TRANSPORT OUT: the report's lines and its JSON line (one flow, bytes moved).
check_output() {
    local tr=$1 out=$2 js
    js=$(grep '^{"benchmark": "link"' <<<"$out" | tail -n 1)
    if grep -qE "^link: 1 flow\(s\), $tr, 1048576-byte messages, 4 in flight, 1\.0 s$" <<<"$out" &&
        grep -qE '^flow 0: rank 0 \(.+\) -> rank 1 \(.+\): [0-9.]+ MB in [0-9.]+ s, [0-9.]+ Gbit/s$' <<<"$out" &&
        grep -qE '^total: [0-9.]+ Gbit/s over 1 flow\(s\) \([0-9.]+ MB in [0-9.]+ s\)$' <<<"$out" &&
        /usr/bin/python3 -c '
import json, sys
j = json.loads(sys.argv[1])
assert j["benchmark"] == "link" and j["transport"] == sys.argv[2], j
assert j["flows"] == 1 and j["bytes"] == 1048576 and j["depth"] == 4, j
assert len(j["flow_gbps"]) == 1 and j["flow_gbps"][0] > 0 and j["total_gbps"] > 0, j
assert j["bytes_moved"] > 0 and j["bytes_moved"] % 1048576 == 0, j
assert 0.5 < j["elapsed_s"] < 30, j
' "$js" "$tr"; then
        ok "$tr, 2 ranks, 1 s: $(grep '^total: ' <<<"$out")"
    else
        bad "$tr, 2 ranks, 1 s: output not as expected"; tail -n 8 <<<"$out"
    fi
}

out=$("$run" -t 60 -np 2 "$bench" link --seconds 1 --bytes 1M --json "$tmp/link.json" 2>&1)
rc=$?
echo "$out"
[ "$rc" = 0 ] || bad "pc-bench link, 2 ranks: status $rc"
check_output mpi "$out"
if [ -s "$tmp/link.json" ] && [ "$(cat "$tmp/link.json")" = "$(grep '^{"benchmark"' <<<"$out")" ]; then
    ok "--json FILE holds the printed JSON line"
else
    bad "--json FILE: missing or different from the printed line"
fi

# Two flows at once: two flow lines and a total.
out=$("$run" -t 60 -np 4 "$bench" link --seconds 0.5 --bytes 64K 2>&1)
rc=$?
if [ "$rc" = 0 ] && grep -q '^flow 1: rank 2 (.*) -> rank 3 ' <<<"$out" &&
    grep -q '^total: .* over 2 flow(s)' <<<"$out" && grep -q '"flows": 2,' <<<"$out"; then
    ok "4 ranks: 2 flows, 0 -> 1 and 2 -> 3"
else
    bad "4 ranks: status $rc"; tail -n 5 <<<"$out"
fi

# An odd rank count: refused by every rank, status 2, rank 0's one line.
out=$("$run" -t 60 -np 3 "$bench" link --seconds 0.5 2>&1)
rc=$?
if [ "$rc" = 2 ] && grep -qx 'pc-bench link: needs an even number of ranks, 2 or more (got 3): rank 2i streams to rank 2i+1' <<<"$out"; then
    ok "3 ranks: refused (status 2)"
else
    bad "3 ranks: status $rc (expected 2)"; tail -n 3 <<<"$out"
fi

# Bad flags: status 2, one line naming the flag.
expect_usage() { # expect_usage MESSAGE ARGS...
    local want=$1 msg rc
    shift
    msg=$("$@" 2>&1)
    rc=$?
    if [ "$rc" = 2 ] && [ "$msg" = "$want" ]; then
        ok "${*: -2}: status 2, $msg"
    else
        bad "${*: -2}: status $rc (expected 2), got: $msg (expected: $want)"
    fi
}
expect_usage "pc-bench: --seconds: 0 is out of range (0.25..3600)" \
    "$bench" link --seconds 0
expect_usage "pc-bench: --bytes: 'x' is not a size (bytes, or with K, M, G, T)" "$bench" link --bytes x
expect_usage "pc-bench: --depth: 65 is out of range (1..64)" "$bench" link --depth 65

# The gloo twin: the same output, the same refusals.
if ! /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
    ok "link_gloo.py: skipped (/usr/bin/python3 cannot import torch.distributed)"
else
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    out=$(MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=lo \
        "$run" -t 120 -np 2 /usr/bin/python3 "$gloo" --seconds 1 --bytes 1M 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" = 0 ] || bad "link_gloo.py, 2 ranks: status $rc"
    check_output gloo "$out"
    expect_usage "link_gloo.py: argument --seconds: 0 is out of range (0.25..3600)" \
        /usr/bin/python3 "$gloo" --seconds 0
    expect_usage "link_gloo.py: argument --bytes: 'x' is not a size like 4096, 64K or 4M" \
        /usr/bin/python3 "$gloo" --bytes x
    expect_usage "link_gloo.py: needs an even number of ranks, 2 or more (got 1): rank 2i streams to rank 2i+1" \
        /usr/bin/python3 "$gloo" --seconds 1
fi

# scripts/bench/links.sh: bad flags refused before anything is brought up; as root, one
# short run over emulated nodes: a summary row with figures, and its cluster taken down.
links="$PC_SRCDIR/scripts/bench/links.sh"
expect_usage "links.sh: --seconds: '0' is not a number of seconds from 0.25 to 3600 (see --help)" \
    "$links" --seconds 0
expect_usage "links.sh: --rates: '10gb' is not like 1gbit, 2500mbit or none (see --help)" \
    "$links" --rates 10gb
if [ "$(id -u)" != 0 ] || ! command -v tc >/dev/null; then
    ok "links.sh over emulated nodes: skipped (needs root and tc)"
else
    out=$(timeout 300 "$links" --out "$tmp/links" --seconds 1 --bytes 1M --rates 1gbit --flows 1 \
        --tools mpi --build "$PC_BUILDDIR" 2>&1)
    rc=$?
    row=$(grep -E '^1gbit +mpi +1 +[0-9.]+ +1 +[0-9.]+ ' "$tmp/links/summary.txt" 2>/dev/null)
    if [ "$rc" = 0 ] && [ -n "$row" ] && [ ! -e "$tmp/links/cluster/cluster" ] &&
        [ -s "$tmp/links/results.jsonl" ]; then
        ok "links.sh, 1gbit, mpi, 1 flow: $row"
    else
        bad "links.sh, 1gbit, mpi, 1 flow: status $rc, row '$row'"; tail -n 5 <<<"$out"
    fi
fi
pc_done
