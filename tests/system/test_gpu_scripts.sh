#!/usr/bin/env bash
# The GPU machine's scripts where there is no GPU: scripts/gpu-check.sh ends in one line
# naming the problem (exit 1) and writes only its log; scripts/gpu-bundle.sh --list names
# the packages and refuses unknown arguments; scripts/gpu/gpu_report.py turns
# pc-bench compress --device cuda's JSON (and torch_topk.py's) into the summary with the
# targets' verdicts, computed from the figures given, and refuses bad input in one line;
# scripts/bench/torch_topk.py refuses bad flags (2) and a torch without a GPU (1).
# On a GPU machine gpu-check.sh itself is the test (it runs the CUDA tests).
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3

if command -v nvidia-smi >/dev/null 2>&1; then
    ok "gpu-check.sh without a GPU: not checked (this machine has nvidia-smi)"
else
    OUT=$tmp/out bash "$PC_SRCDIR/scripts/gpu-check.sh" >"$tmp/gc.out" 2>&1
    rc=$?
    if [ $rc = 1 ] && [ "$(wc -l <"$tmp/gc.out")" = 1 ] &&
        grep -q 'FAILED: no NVIDIA GPU here (no nvidia-smi): run this on the GPU machine$' "$tmp/gc.out" &&
        [ "$(ls "$tmp/out")" = gpu-check.log ]; then
        ok "gpu-check.sh without a GPU: $(cat "$tmp/gc.out")"
    else
        bad "gpu-check.sh without a GPU: rc $rc, files: $(ls "$tmp/out" | tr '\n' ' ')"; cat "$tmp/gc.out"
    fi
fi

# --help: the scripts' own description, exit 0; a stray argument: usage, 2 (gpu-check.sh
# used to start a whole run on --help).
if bash "$PC_SRCDIR/scripts/gpu-check.sh" --help >"$tmp/h.out" 2>&1 && grep -q '^PC_GPU_BUDGET=S' "$tmp/h.out" &&
    bash "$PC_SRCDIR/scripts/gpu-bundle.sh" --help >"$tmp/h2.out" 2>&1 && grep -q 'git-ignored' "$tmp/h2.out"; then
    ok "gpu-check.sh and gpu-bundle.sh --help"
else
    bad "--help"; cat "$tmp/h.out" "$tmp/h2.out"
fi
bash "$PC_SRCDIR/scripts/gpu-check.sh" extra >"$tmp/x.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "unknown argument 'extra'" "$tmp/x.out"; then
    ok "gpu-check.sh extra: refused (2)"
else
    bad "gpu-check.sh extra: rc $rc"; cat "$tmp/x.out"
fi

if bash "$PC_SRCDIR/scripts/gpu-bundle.sh" --list >"$tmp/l.out" 2>&1 &&
    grep -q '^packages: .*libopenmpi-dev .*libhwloc-dev .*libopenblas-dev .*libcmocka-dev .*pkgconf' "$tmp/l.out" &&
    ! bash "$PC_SRCDIR/scripts/gpu-bundle.sh" --nonsense >"$tmp/l2.out" 2>&1 &&
    grep -q "unknown argument '--nonsense'" "$tmp/l2.out"; then
    ok "gpu-bundle.sh --list: $(head -c 80 "$tmp/l.out")..."
else
    bad "gpu-bundle.sh --list"; cat "$tmp/l.out" "$tmp/l2.out"
fi

# A benchmark's JSON as pc-bench writes it (two sizes, one ratio), and torch's.
cat >"$tmp/c.json" <<'JSON'
{"benchmark": "compress", "device": "cuda", "gpu": "TEST GPU", "reps": 5,
 "baselines": [{"n": 1000000, "read_ms": 0.0100, "sort_topk_ms": {"0.01": 0.5000}},
               {"n": 100000000, "read_ms": 0.1000, "sort_topk_ms": {"0.01": 4.0000}}],
 "codecs": [
  {"spec": "topk:ratio=0.01,ef=off", "n": 1000000, "ratio": 0.01, "compress_ms": 0.0500, "decompress_ms": 0.01, "bytes": 80040, "must_bytes": 0},
  {"spec": "topk:ratio=0.01,ef=off", "n": 100000000, "ratio": 0.01, "compress_ms": 0.4000, "copy_ms": 0.1500, "decompress_ms": 0.1, "bytes": 8000040, "must_bytes": 0},
  {"spec": "fp16", "n": 100000000, "ratio": -1, "compress_ms": 4.2000, "copy_ms": 4.0000, "decompress_ms": 0.1, "bytes": 200000040, "must_bytes": 600000040},
  {"spec": "ef fold (v += g)", "n": 100000000, "ratio": -1, "compress_ms": 0.3200, "decompress_ms": 0, "bytes": 0, "must_bytes": 1200000000}
 ]}
JSON
cat >"$tmp/t.json" <<'JSON'
{"benchmark": "torch.topk", "torch": "9.9", "gpu": "TEST GPU", "reps": 5,
 "rows": [{"n": 100000000, "ratio": 0.01, "k": 1000000, "topk_ms": 0.2000}]}
JSON
# On the device (compress minus the message's copy): top-k at 1e8, 1 % 0.25 ms: 2.5 x the
# read bound (met), 16 x faster than sorting (met), torch 0.8 x (NOT met); fp16 0.2 ms
# against 600 MB at 4 GB/ms = 0.15 ms: 1.33 (met); the fold 0.32 ms against 0.3 ms: 1.07.
if $py "$PC_SRCDIR/scripts/gpu/gpu_report.py" "$tmp/c.json" "$tmp/t.json" >"$tmp/r.out" 2>&1 &&
    grep -q '^GPU: TEST GPU; medians of 5 repetitions; torch 9.9$' "$tmp/r.out" &&
    grep -q 'top-k at 1e8, 1 %: 2.50 x the read bound (target <= 3: met)' "$tmp/r.out" &&
    grep -q 'top-k at 1e8, 1 %: 16.0 x faster than the CUB-sort top-k (target >= 10: met)' "$tmp/r.out" &&
    grep -q "top-k at 1e8, 1 %: 0.80 x torch.topk's speed (target > 1: NOT met)" "$tmp/r.out" &&
    grep -q 'fp16 at n=100000000: 1.33 x its bandwidth bound (target <= 1.5: met)' "$tmp/r.out" &&
    grep -q 'ef fold (v += g) at n=100000000: 1.07 x its bandwidth bound (target <= 1.5: met)' "$tmp/r.out"; then
    ok "gpu_report.py: the verdicts follow from the figures"
else
    bad "gpu_report.py"; cat "$tmp/r.out"
fi
if $py "$PC_SRCDIR/scripts/gpu/gpu_report.py" "$tmp/c.json" >"$tmp/r2.out" 2>&1 &&
    grep -q 'torch.topk not measured' "$tmp/r2.out"; then
    ok "gpu_report.py without torch's figures: says so"
else
    bad "gpu_report.py without torch"; cat "$tmp/r2.out"
fi
echo '{"benchmark": "compress", "baselines": []}' >"$tmp/cpu.json"
for args in "$tmp/missing.json" "$tmp/cpu.json"; do
    $py "$PC_SRCDIR/scripts/gpu/gpu_report.py" $args >"$tmp/e.out" 2>&1
    rc=$?
    if [ $rc = 1 ] && [ "$(wc -l <"$tmp/e.out")" = 1 ]; then
        ok "gpu_report.py refuses $(basename $args): $(cat "$tmp/e.out")"
    else
        bad "gpu_report.py $(basename $args): rc $rc"; cat "$tmp/e.out"
    fi
done

$py "$PC_SRCDIR/scripts/bench/torch_topk.py" --sizes 10,x --ratios 0.1 --json "$tmp/x.json" >"$tmp/tt.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "'10,x' is not a comma-separated list of numbers" "$tmp/tt.out"; then
    ok "torch_topk.py refuses a bad --sizes (2)"
else
    bad "torch_topk.py --sizes 10,x: rc $rc"; cat "$tmp/tt.out"
fi
if $py -c 'import torch, sys; sys.exit(0 if not torch.cuda.is_available() else 1)' 2>/dev/null; then
    $py "$PC_SRCDIR/scripts/bench/torch_topk.py" --sizes 1000 --ratios 0.1 --json "$tmp/x.json" >"$tmp/tt.out" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q '^torch_topk.py: torch sees no CUDA device$' "$tmp/tt.out" && [ ! -e "$tmp/x.json" ]; then
        ok "torch_topk.py without a GPU: $(cat "$tmp/tt.out")"
    else
        bad "torch_topk.py without a GPU: rc $rc"; cat "$tmp/tt.out"
    fi
fi
pc_done
