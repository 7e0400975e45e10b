#!/usr/bin/env bash
# pc-bench compress, spsc and handoff, in a tiny form: each prints its table and its ratios with the
# target and whether it was met (a figure without its verdict once left the reader to
# guess), and writes JSON that parses. No timing is asserted: the machines are shared.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
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

if "$bench" compress --sizes 100000 --ratios 0.5,0.01 --reps 1 --matrices none --json "$tmp/c.json" >"$tmp/c.out" 2>&1 &&
    grep -qE 'faster than sort \(target >= 10: (met|NOT met)\)' "$tmp/c.out" &&
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/c.json"; then
    ok "pc-bench compress: $(grep -m1 -o 'n=100000 .*' "$tmp/c.out")"
else
    bad "pc-bench compress"; tail -5 "$tmp/c.out"
fi
# Each codec's least memory traffic and its times over it: four positive columns after
# "x less" in the table (fp16 with error feedback among the rows), and in the JSON.
if grep -qE '^codec .* x less +B/elem +x bound +dec B/e +dec x bd +index$' "$tmp/c.out" &&
    [ "$(grep -cE '^(none|fp16|fp16:ef=on|topk:ratio=0.01,ef=off) .*( +[0-9]+\.[0-9]+){4} +[-a-z0-9]+$' "$tmp/c.out")" = 4 ] &&
    ! grep -E '^[a-z].*100000 ' "$tmp/c.out" | awk '{for (i = NF - 4; i < NF; i++) if (!($i > 0)) bad = 1} END {exit !bad}' &&
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
keys = ("bytes_per_elem", "vs_bound", "decompress_bytes_per_elem", "decompress_vs_bound")
assert len(d["codecs"]) == 18 and all(r[k] > 0 for r in d["codecs"] for k in keys), d["codecs"]
assert any(r["spec"] == "fp16:ef=on" and r["bytes_per_elem"] > 14 for r in d["codecs"])' "$tmp/c.json"; then
    ok "pc-bench compress: memory bounds: $(grep -m1 '^fp16:ef=on ' "$tmp/c.out" | tr -s ' ')"
else
    bad "pc-bench compress: the memory-bound columns"; grep -E '^(codec|fp16)' "$tmp/c.out"
fi
# How each message carried its indices (the last column, and "index" in the JSON): half of
# 100000 entries as a bitmap (12.5 KB against 200 KB as a list), 1 % as a u32 list or delta
# varints, "-" for codecs that send none (randomk's receiver regenerates them).
forms=$(awk '$1 ~ /^(topk:ratio=0.5,ef=off|topk:ratio=0.01,ef=off|topk:ratio=0.01,index=delta,values=fp16|threshold:tau=.*|randomk:ratio=0.5|qsgd:levels=16)$/ {print $1, $NF}' "$tmp/c.out" | sed 's/tau=[0-9.e-]*/tau/' | tr '\n' ' ')
want="qsgd:levels=16 - topk:ratio=0.5,ef=off bitmap topk:ratio=0.01,ef=off u32 topk:ratio=0.01,index=delta,values=fp16 delta randomk:ratio=0.5 - threshold:tau bitmap threshold:tau u32 "
if [ "$forms" = "$want" ] &&
    python3 -c 'import json,sys
d = {(r["spec"], r["n"]): r for r in json.load(open(sys.argv[1]))["codecs"]}
assert d[("topk:ratio=0.5,ef=off", 100000)]["index"] == "bitmap", d
assert d[("topk:ratio=0.01", 100000)]["index"] == "u32", d
assert d[("none", 100000)]["index"] == "-", d' "$tmp/c.json"; then
    ok "pc-bench compress: index forms: $forms"
else
    bad "pc-bench compress: index forms '$forms', want '$want'"
fi

# The compressor pool (--threads N): ResNet-50's chunks dealt to 2 threads beside 1, a row
# per codec with its speed-up column (positive); the figure itself is the quiet machine's
# to judge. About a second.
if "$bench" compress --threads 2 --reps 1 >"$tmp/pool.out" 2>&1 &&
    grep -q '^codec .*speed-up$' "$tmp/pool.out" &&
    [ "$(grep -cE '^(topk:ratio=0.01|fp16) +2 +[0-9.]+ +[0-9.]+ +[0-9.]+x$' "$tmp/pool.out")" = 2 ] &&
    grep -q "ResNet-50's 161 tensors (25557032 elements)" "$tmp/pool.out"; then
    ok "pc-bench compress --threads 2: $(grep -m1 '^topk' "$tmp/pool.out" | tr -s ' ')"
else
    bad "pc-bench compress --threads 2"; tail -5 "$tmp/pool.out"
fi
"$bench" compress --threads 0 >"$tmp/pool0.out" 2>&1
[ $? = 2 ] && grep -q '^pc-bench: --threads' "$tmp/pool0.out" && ok "pc-bench compress --threads 0: refused (2)" ||
    { bad "pc-bench compress --threads 0 was not refused"; cat "$tmp/pool0.out"; }

# powersgd's section: a row per matrix and rank (1, 2, 4) with its step over its GEMMs and
# bytes; after the table the 4096x4096 target line, only for that matrix; bad lists refused (2).
if "$bench" compress --powersgd-only --matrices 64x48,4096x4096 --reps 1 >"$tmp/lr.out" 2>&1 &&
    [ "$(grep -cE '^(64x48|4096x4096) +[124] ' "$tmp/lr.out")" = 6 ] &&
    grep -qE '^target: rank 2 on 4096x4096 within 1.5 x the two GEMMs: [0-9.]+ x, (met|NOT met)$' "$tmp/lr.out" &&
    ! grep -q 'target' <(grep -v 4096 "$tmp/lr.out"); then
    ok "pc-bench compress --powersgd-only: $(grep -m1 '^64x48 *2 ' "$tmp/lr.out" | tr -s ' ')"
else
    bad "pc-bench compress --powersgd-only"; tail -8 "$tmp/lr.out"
fi
for args in "--matrices 64x" "--matrices 64x48,1x9" "--powersgd-only --matrices none" \
            "--powersgd-only --device cuda" "--powersgd-only --matrices 3x3" \
            "--powersgd-only --matrices 100000x100000"; do
    # shellcheck disable=SC2086
    "$bench" compress --powersgd-only $args --reps 1 >"$tmp/lrbad.out" 2>&1
    rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <"$tmp/lrbad.out")" -le 2 ] && grep -q '^pc-bench: ' "$tmp/lrbad.out"; then
        ok "pc-bench compress $args: refused (2): $(grep '^pc-bench: ' "$tmp/lrbad.out")"
    else
        bad "pc-bench compress $args: rc $rc"; cat "$tmp/lrbad.out"
    fi
done

# A bad list is refused before the element-wise codecs are measured: no table at all.
"$bench" compress --matrices 64x --sizes 100000 --ratios 0.01 --reps 1 >"$tmp/lrfirst.out" 2>/dev/null
rc=$?
if [ $rc = 2 ] && [ ! -s "$tmp/lrfirst.out" ]; then
    ok "pc-bench compress --matrices 64x: refused before any measurement"
else
    bad "pc-bench compress --matrices 64x: rc $rc"; head -3 "$tmp/lrfirst.out"
fi

# --device cuda: on a device, the table with both baselines and the verdicts; without one,
# one line naming the problem and exit status 1; a device that is not cpu or cuda: usage, 2.
"$bench" compress --device gpu >"$tmp/d.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "^pc-bench: --device: 'gpu' is not cpu or cuda$" "$tmp/d.out"; then
    ok "pc-bench compress --device gpu: refused (2)"
else
    bad "pc-bench compress --device gpu: rc $rc"; cat "$tmp/d.out"
fi
"$bench" compress --ratios 0.01,0 >"$tmp/r0.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "^pc-bench: --ratios: '0.01,0' is not a list of fractions in (0, 1\]$" "$tmp/r0.out"; then
    ok "pc-bench compress --ratios 0.01,0: refused (2)"
else
    bad "pc-bench compress --ratios 0.01,0: rc $rc"; cat "$tmp/r0.out"
fi
"$bench" compress --device cuda --sizes 100003 --ratios 0.01 --reps 1 --json "$tmp/g.json" >"$tmp/g.out" 2>&1
rc=$?
if [ "$("$PC_BUILDDIR/tests/unit/test_cuda" >/dev/null 2>&1; echo $?)" = 77 ]; then
    if [ $rc = 1 ] && [ "$(wc -l <"$tmp/g.out")" = 1 ] &&
        grep -q '^pc-bench: --device cuda: no CUDA device: ' "$tmp/g.out"; then
        ok "pc-bench compress --device cuda without a device: $(cat "$tmp/g.out")"
    else
        bad "pc-bench compress --device cuda without a device: rc $rc"; cat "$tmp/g.out"
    fi
elif [ $rc = 0 ] && grep -qE '^\[baseline\] top-k by CUB sort +100003 ' "$tmp/g.out" &&
    grep -qE 'faster than the CUB-sort top-k \(target >= 10\)' "$tmp/g.out" &&
    grep -qE '^  ef fold \(v \+= g\) +n=100003 +[0-9.]+ x the bound \(target <= 1.5: (met|NOT met)\)' "$tmp/g.out" &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["codecs"]) == 12 and d["baselines"][0]["read_ms"] > 0' "$tmp/g.json"; then
    ok "pc-bench compress --device cuda: $(grep -m1 -o 'n=100003 .*read bound.*' "$tmp/g.out")"
else
    bad "pc-bench compress --device cuda: rc $rc"; tail -20 "$tmp/g.out"
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

# pc-bench server on the tiny replay trace (well under a second): a row per codec and W
# with positive times, the sparse path taken for top-k's chunks and never for qsgd; bad
# lists, specs and paths refused (2) in one line, before anything is printed.
trace="$PC_SRCDIR/tests/data/replay-tiny.json"
if "$bench" server --trace "$trace" --reps 1 --workers 2,4 \
    --codecs 'topk:ratio=0.01;qsgd:levels=16' --compress-min-bytes 64 >"$tmp/srv.out" 2>&1 &&
    grep -qE '^codec +W +sparse +msgs .* total ms +us/msg +of iter +S 1x$' "$tmp/srv.out" &&
    [ "$(grep -cE '^(topk:ratio=0.01|qsgd:levels=16) +[24] +[0-9]+/[0-9]+ +[0-9]+( +[0-9.]+){7} +[0-9.]+% +[0-9]+$' "$tmp/srv.out")" = 4 ] &&
    grep -E '^topk:ratio=0.01 ' "$tmp/srv.out" | awk '{split($3, s, "/"); if (!(s[1] > 0)) bad = 1} END {exit bad}' &&
    grep -E '^qsgd:levels=16 ' "$tmp/srv.out" | awk '{split($3, s, "/"); if (s[1] != 0 || !($10 > 0)) bad = 1} END {exit bad}'; then
    ok "pc-bench server: $(grep -m1 '^qsgd' "$tmp/srv.out" | tr -s ' ')"
else
    bad "pc-bench server"; cat "$tmp/srv.out"
fi
# AdamW on top-k: dense moments step every chunk densely, --adam-moments lazy takes the
# sparse path for all of them (the server's choice, pc_optim_lazy).
for m in dense lazy; do
    "$bench" server --trace "$trace" --reps 1 --workers 2 --codecs 'topk:ratio=0.01,momentum=0' \
        --compress-min-bytes 64 --optimizer adamw --adam-moments "$m" >"$tmp/srv-$m.out" 2>&1
done
if grep -q "optimizer adamw, dense moments; " "$tmp/srv-dense.out" &&
    grep -q "optimizer adamw, lazy moments; " "$tmp/srv-lazy.out" &&
    grep -qE '^topk:ratio=0.01,momentum=0 +2 +0/[1-9][0-9]* ' "$tmp/srv-dense.out" &&
    grep -E '^topk:ratio=0.01,momentum=0 +2 ' "$tmp/srv-lazy.out" | awk '{split($3, s, "/"); if (!(s[1] == s[2] && s[1] > 0)) bad = 1} END {exit bad}'; then
    ok "pc-bench server --optimizer adamw: top-k dense $(grep -m1 '^topk' "$tmp/srv-dense.out" | awk '{print $3}'), --adam-moments lazy $(grep -m1 '^topk' "$tmp/srv-lazy.out" | awk '{print $3}') chunks on the sparse path"
else
    bad "pc-bench server --optimizer adamw --adam-moments"; cat "$tmp/srv-dense.out" "$tmp/srv-lazy.out"
fi
# auto (not given): each codec's default (top-k's lazy: every chunk sparse), and a steady state's
# messages, not those of Adam's default warm-up (its first iteration nearly dense): fewer
# megabytes than with the warm-up given in the spec.
"$bench" server --trace "$trace" --reps 1 --workers 2 --compress-min-bytes 64 --optimizer adamw \
    --codecs 'topk:ratio=0.01,momentum=0;topk:ratio=0.01,momentum=0,warmup=1000' >"$tmp/srv-def.out" 2>&1
mb() { grep -E "^$1 +2 " "$tmp/srv-def.out" | awk '{print $5}'; }
steady=$(mb 'topk:ratio=0.01,momentum=0') warm=$(mb 'topk:ratio=0.01,momentum=0,w') # the column keeps 28 characters
if grep -q "optimizer adamw, each codec's default moments (lazy for topk, else dense); " "$tmp/srv-def.out" &&
    [ "$(grep -m1 -E '^topk:ratio=0.01,momentum=0 +2 ' "$tmp/srv-def.out" | awk '{print $3}')" = \
        "$(grep -m1 '^topk' "$tmp/srv-lazy.out" | awk '{print $3}')" ] &&
    [ "$steady" = "$(grep -m1 '^topk' "$tmp/srv-lazy.out" | awk '{print $5}')" ] &&
    awk -v s="$steady" -v w="$warm" 'BEGIN { exit !(s > 0 && w > 10 * s) }'; then
    ok "pc-bench server --optimizer adamw, no --adam-moments: top-k lazy, steady-state messages ($steady MB in; $warm MB with warmup=1000 given)"
else
    bad "pc-bench server --optimizer adamw without --adam-moments:"; cat "$tmp/srv-def.out"
fi
for args in "--workers 0" "--workers 4,x" "--codecs ;" "--codecs bogus" "--codecs powersgd" \
            "--trace $tmp/none.json" "--adam-moments lazy"; do
    # shellcheck disable=SC2086
    "$bench" server --trace "$trace" --reps 1 $args >"$tmp/srvbad.out" 2>&1
    rc=$?
    if [ $rc = 2 ] && [ "$(wc -l <"$tmp/srvbad.out")" = 1 ] && grep -q '^pc-bench: ' "$tmp/srvbad.out"; then
        ok "pc-bench server $args: refused (2): $(cat "$tmp/srvbad.out")"
    else
        bad "pc-bench server $args: rc $rc"; cat "$tmp/srvbad.out"
    fi
done

# scripts/bench/adam_arrivals.py, the model of Adam's step on an entry that arrives every P
# iterations (doc/tuning.md): uncompressed (P = 1) is 1 in every mode; dense and lazy moments
# move a 0.1 % entry far less, a v frozen after a dense warm-up as far (a constant gradient).
arr="$PC_SRCDIR/scripts/bench/adam_arrivals.py"
if out=$(python3 "$arr" --iters 4000 --frozen-after 500 2>&1) &&
    awk '$1 == 1 {one = ($3 == "1.000" && $4 == "1.000" && $5 == "1.000")}
         $1 == 1000 {far = ($3 < 0.1 && $4 < $3 && $5 > 0.99 && $5 < 1.01)}
         END {exit !(one && far)}' <<<"$out"; then
    ok "adam_arrivals.py: P = 1000: $(awk '$1 == 1000' <<<"$out" | tr -s ' ')"
else
    bad "adam_arrivals.py"; echo "$out"
fi
out=$(python3 "$arr" --frozen-after 0 2>&1)
rc=$?
if [ $rc = 2 ] && [ "$out" = "adam_arrivals.py: --frozen-after 0: must be above 0 and below half of --iters (20000)" ]; then
    ok "adam_arrivals.py --frozen-after 0: refused (2): $out"
else
    bad "adam_arrivals.py --frozen-after 0: status $rc"; echo "$out" | tail -2
fi

out=$("$bench" spsc --reps 0 2>&1)
rc=$?
[ $rc = 2 ] && grep -q -- '--reps' <<<"$out" && ok "pc-bench spsc --reps 0: usage error naming the flag" \
    || { bad "pc-bench spsc --reps 0: status $rc"; echo "$out" | tail -2; }

pc_done
