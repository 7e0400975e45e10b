#!/usr/bin/env bash
# pc-bench compress, spsc and handoff, in a tiny form: each prints its table and its ratios with the
# target and whether it was met (a figure without its verdict once left the reader to
# guess), and writes JSON that parses. No timing is asserted: the machines are shared.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
bench="$PC_BUILDDIR/apps/pc-bench"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if "$bench" spsc --messages 200000 --rounds 2000 --reps 1 --json "$tmp/spsc.json" >"$tmp/spsc.out" 2>&1 &&
    grep -qE 'pc_spsc/ck_ring throughput [0-9.]+ \(target >= 0.8: (met|NOT met)\)' "$tmp/spsc.out" &&
    grep -qE 'pc_spsc/mutex_cv [0-9.]+ \(target >= 10: (met|NOT met)\)' "$tmp/spsc.out" &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ratios"]["spsc_vs_ck_ring"] > 0' "$tmp/spsc.json"; then
    ok "pc-bench spsc: $(grep -o 'pc_spsc/ck_ring.*' "$tmp/spsc.out")"
else
    bad "pc-bench spsc"; tail -5 "$tmp/spsc.out"
fi

if "$bench" compress --sizes 100000 --ratios 0.01 --reps 1 --json "$tmp/c.json" >"$tmp/c.out" 2>&1 &&
    grep -qE 'faster than sort \(target >= 10: (met|NOT met)\)' "$tmp/c.out" &&
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/c.json"; then
    ok "pc-bench compress: $(grep -m1 -o 'n=100000 .*' "$tmp/c.out")"
else
    bad "pc-bench compress"; tail -5 "$tmp/c.out"
fi

if "$bench" handoff --items 40 --min-us 50 --max-us 150 --idle-ms 50 --reps 1 --json "$tmp/h.json" >"$tmp/h.out" 2>&1 &&
    grep -qE '^backoff-50us +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$tmp/h.out" &&
    grep -qE '^backoff-1ms +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$tmp/h.out" &&
    grep -qE '^event +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$tmp/h.out" &&
    grep -qE '^event\+window +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$tmp/h.out" &&
    grep -qE 'ratios \(against event\+window\): p50 backoff-1ms [0-9.]+' "$tmp/h.out" &&
    grep -qE 'event\+window \(two threads on cores of their own\): p50 [0-9.]+ us \(target <= 10: (met|NOT met)\), p99 [0-9.]+ us \(target <= 100: (met|NOT met)\), idle [0-9.]+ % of a core \(target < 1: (met|NOT met)\)' "$tmp/h.out" &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); p=d["policies"]; assert all(p[k]["p50_us"] > 0 for k in ("backoff-50us","backoff-1ms","event","event+window"))' "$tmp/h.json"; then
    ok "pc-bench handoff: $(grep -o '^event+window (.*' "$tmp/h.out")"
else
    bad "pc-bench handoff"; tail -8 "$tmp/h.out"
fi

out=$("$bench" spsc --reps 0 2>&1)
rc=$?
[ $rc = 2 ] && grep -q -- '--reps' <<<"$out" && ok "pc-bench spsc --reps 0: usage error naming the flag" \
    || { bad "pc-bench spsc --reps 0: status $rc"; echo "$out" | tail -2; }

pc_done
