#!/usr/bin/env bash
# scripts/gpu-check.sh: on a machine with an NVIDIA GPU, in one go and at most 8 minutes
# (device time is scarce): build with CUDA for this GPU, run the CUDA tests (the probe
# kernel, cuRAND's device Philox against pc_philox, every codec's kernels against the CPU
# codecs byte for byte, the training engine's layers and models against the CPU engine)
# and the unit tests; train on the GPU (2 workers + 1 server on it, mlp, 300 iterations:
# the loss falls as on the CPU; --compress-on gpu pipelined and inline, and --compress-on
# cpu, save bitwise the same model); measure GPU training's targets (our cnn engine against
# PyTorch's on this GPU; e2e.sh's wide at batch 256 with --compress-on gpu and cpu); record
# replay traces of ResNet-50, VGG-16 and BERT-base with AMP (scripts/bench/make-trace.py
# record, CUDA events: the measured counterparts of traces/); validate the replay against
# a real GPU run (scripts/bench/replay-validate.py --interleave --device cuda, doc/replay.md's
# (c)); then the codecs' benchmark
# (pc-bench compress --device cuda, with torch.topk beside it where
# PyTorch sees the GPU) with what is left of the budget, and write into one folder ($OUT
# when set, as the device tool does; else build-gpu/out):
#   summary.txt         the verdicts, the training targets, the codec table and its targets
#   train.txt           the training checks;  train-targets.txt  GPU training's targets
#   train/, e2e-gpu/, e2e-cpu/   the training runs' metrics, models and logs
#   traces/             the recorded traces (resnet50-, vgg16-, bert-base-GPU-amp.json);
#                       traces.txt  one line per model: recorded (iteration time) or not
#   validate-c.txt, validate-c/   the replay's validation (c) on this GPU (ResNet-50)
#   compress-cuda.json  pc-bench's results (compress-cuda.txt its table);
#   torch-topk.json     torch.topk's
#   gpu-check.log       everything printed;  tests.log  the test programs' own logs
#   all.tar.gz          all of the above in one archive (the device tool returns 8 files)
# A machine that reaches no package registry gets Open MPI, hwloc, OpenBLAS, CMocka and
# pkgconf from .gpu/debs (scripts/gpu-bundle.sh, run beforehand on a Debian machine; carry
# .gpu), unpacked with dpkg -x into a directory of its own, never into /; configure comes
# from .gpu/autotools (or autoreconf where there is no bundle). .gpu/ is git-ignored: copy
# the tree with it (rsync, tar), a git clone leaves it behind.
# Needs on the GPU machine: the NVIDIA driver, a CUDA toolkit (nvcc, with CUB and cuRAND)
# the driver is new enough for, gcc, g++ and make; python3 for the summary; PyTorch with
# CUDA for the torch.topk column (optional).
# Environment: PC_GPU_ARCH=NN builds for that compute capability (default: the GPU's own,
# from nvidia-smi); PC_GPU_SIZES=N,N,... the benchmark's sizes (default 1e6,1e7,1e8);
# PC_GPU_BUDGET=S the whole run's seconds (default 480): each step's time limit is what is
# left, and summary.txt is rewritten after the tests and again after the benchmark, so a
# run stopped from outside still leaves one; PC_GPU_USE_BUNDLE=1 takes the libraries from
# .gpu/debs even where they are installed (to try the bundle on a machine that has them).
# Exit status: 0 when every test and training check passed (targets are reported, met or
# not), 1 otherwise (or when there is no GPU), 2 on a bad argument.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
case ${1:-} in
-h | --help)
    sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
"") ;;
*)
    echo "gpu-check.sh: unknown argument '$1' (it takes none; see --help)" >&2
    exit 2
    ;;
esac
out=${OUT:-$PC_TOP/build-gpu/out}
mkdir -p "$out"
log="$out/gpu-check.log"
: >"$log"
start=$(date +%s)
budget=${PC_GPU_BUDGET:-480}
case $budget in '' | *[!0-9]*) echo "gpu-check.sh: PC_GPU_BUDGET='$budget' is not a number of seconds" >&2; exit 2 ;; esac
say() { printf '== [%3ds] %s\n' "$(($(date +%s) - start))" "$*" | tee -a "$log"; }
# limit CAP: a step's time limit, CAP seconds at most and no more than the budget has left.
limit() {
    local left=$((budget - ($(date +%s) - start)))
    [ "$left" -lt 1 ] && left=1
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
fail() { say "FAILED: $*"; exit 1; }
run() { "$@" >>"$log" 2>&1; } # a step's output goes to the log only

command -v nvidia-smi >/dev/null 2>&1 || fail "no NVIDIA GPU here (no nvidia-smi): run this on the GPU machine"
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>>"$log" | sed -n 1p)
[ -n "$gpu" ] || fail "nvidia-smi lists no GPU"
say "GPU: $gpu"
arch=${PC_GPU_ARCH:-$(echo "$gpu" | awk -F', ' '{print $4}' | tr -d '.')}
case $arch in [1-9][0-9] | [1-9][0-9][0-9]) ;; *) fail "compute capability '$arch' not understood (set PC_GPU_ARCH=90)" ;; esac

# ---- the toolkit ----------------------------------------------------------------------
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || fail "no nvcc on PATH or in /usr/local/cuda/bin"
cuda_dir=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
say "CUDA toolkit: $cuda_dir ($("$nvcc" --version | tail -1))"
ls "$cuda_dir"/lib64/libcurand* "$cuda_dir"/lib/libcurand* >>"$log" 2>&1 ||
    say "note: no libcurand beside nvcc (configure will say what is missing)"

# ---- the libraries: installed, or from the bundle -------------------------------------
have_deps() {
    command -v mpicc >/dev/null 2>&1 && command -v pkg-config >/dev/null 2>&1 &&
        pkg-config --exists hwloc cmocka openblas zlib jansson 2>/dev/null
}
if have_deps && [ -z "${PC_GPU_USE_BUNDLE:-}" ]; then
    say "libraries: installed (mpicc, hwloc, cmocka, openblas, zlib, jansson)"
elif [ -d "$PC_TOP/.gpu/debs" ]; then
    deps=$(mktemp -d "${TMPDIR:-/tmp}/pc-gpu-deps.XXXXXX") || fail "mktemp"
    pc_gpu_deps "$PC_TOP/.gpu/debs" "$deps" >>"$log" 2>&1 || fail "unpacking .gpu/debs (see gpu-check.log)"
    have_deps || fail "the bundle in .gpu/debs lacks something: $(pkg-config --exists hwloc cmocka openblas zlib jansson 2>&1 | sed -n 1,3p)"
    say "libraries: from .gpu/debs, unpacked into $deps ($(ls "$PC_TOP"/.gpu/debs | wc -l) packages)"
else
    fail "mpicc, hwloc, cmocka, openblas, zlib or jansson missing and no .gpu/debs: run scripts/gpu-bundle.sh on a Debian machine and carry .gpu"
fi

# ---- configure and build ---------------------------------------------------------------
if [ ! -x "$PC_TOP/configure" ]; then
    if [ -d "$PC_TOP/.gpu/autotools" ]; then
        # The bundle's, made from this tree by gpu-bundle.sh (autoreconf may be missing
        # here, or its macro archive).
        made=$(sed -n 's/.* at commit \([0-9a-f?]*\)$/\1/p' "$PC_TOP/.gpu/MANIFEST" 2>/dev/null)
        here=$(git -C "$PC_TOP" rev-parse --short HEAD 2>/dev/null || echo '?')
        [ "$made" = "$here" ] || say "note: .gpu/autotools was made at commit ${made:-?}, this tree is at $here"
        cp -a "$PC_TOP"/.gpu/autotools/. "$PC_TOP"/ || fail "copy .gpu/autotools"
        # Newer than their sources, in dependency order, so make does not regenerate them.
        (cd "$PC_TOP" && touch m4/* aclocal.m4 && touch configure config.h.in && touch Makefile.in)
    elif command -v autoreconf >/dev/null 2>&1; then
        (cd "$PC_TOP" && run autoreconf -fi) || fail "autoreconf (or carry .gpu/autotools: scripts/gpu-bundle.sh)"
    else
        fail "no configure, no .gpu/autotools and no autoreconf: run scripts/gpu-bundle.sh on a Debian machine"
    fi
fi
b=$PC_TOP/build-gpu
mkdir -p "$b"
say "configure --with-cuda=$cuda_dir --with-cuda-arch=$arch"
(cd "$b" && run timeout "$(limit 180)" "$PC_TOP/configure" -q --with-cuda="$cuda_dir" --with-cuda-arch="$arch") ||
    { tail -n 20 "$b/config.log" >>"$log"; fail "configure (see gpu-check.log)"; }
say "make -j$(nproc)"
run timeout "$(limit 300)" make -C "$b" -j"$(nproc)" || fail "build (see gpu-check.log)"
run timeout "$(limit 300)" make -C "$b" -j"$(nproc)" check TESTS= || fail "building the tests"
if command -v cuobjdump >/dev/null 2>&1; then
    run cuobjdump --list-elf --list-ptx "$b/cuda/pc_codec.o"
fi

# ---- tests -------------------------------------------------------------------------------
cuda_tests="tests/unit/test_cuda tests/unit/test_curand tests/unit/test_devcodec_cuda tests/unit/test_gpu_cuda tests/unit/test_model_cuda"
say "CUDA tests: $cuda_tests"
run timeout "$(limit 300)" make -C "$b" check TESTS="$cuda_tests"
cuda_rc=$?
say "unit tests"
run timeout "$(limit 240)" make -C "$b" -j"$(nproc)" check-unit RECHECK_LOGS= # the CUDA tests' logs stand
unit_rc=$?
: >"$out/tests.log"
for t in $cuda_tests; do
    { echo "==== $t"; cat "$b/$t.log" 2>/dev/null; } >>"$out/tests.log"
done
verdicts=$(for f in "$b"/tests/unit/*.log; do
    [ -f "${f%.log}.trs" ] && printf '%s %s\n' "$(sed -n 's/^:test-result: //p' "${f%.log}.trs")" "$(basename "${f%.log}")"
done)
echo "$verdicts" >>"$log"
# A CUDA test that skipped on a GPU machine is a failure: the device was not used.
for t in $cuda_tests; do
    v=$(echo "$verdicts" | awk -v n="$(basename "$t")" '$2 == n {print $1}')
    [ "$v" = PASS ] || { cuda_rc=1; say "$(basename "$t"): ${v:-not run}"; }
done
say "CUDA tests: $([ $cuda_rc = 0 ] && echo passed || echo FAILED); unit tests: $([ $unit_rc = 0 ] && echo passed || echo FAILED)"

# summary.txt from what there is so far (written after the tests, again after the benchmark).
write_summary() {
    {
        echo "scripts/gpu-check.sh at $(git -C "$PC_TOP" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - start)) s"
        echo "GPU: $gpu; built for sm_$arch"
        echo "CUDA tests: $([ $cuda_rc = 0 ] && echo passed || echo FAILED); unit tests: $([ $unit_rc = 0 ] && echo passed || echo FAILED)"
        [ -s "$out/train.txt" ] && sed 's/^/training: /' "$out/train.txt"
        [ -s "$out/train-targets.txt" ] && { echo; echo "GPU training targets:"; cat "$out/train-targets.txt"; }
        [ -s "$out/traces.txt" ] && { echo; echo "Replay traces recorded:"; cat "$out/traces.txt"; }
        [ -s "$out/validate-c.txt" ] && { echo; echo "Replay validation (c), this GPU (ResNet-50):"
            grep -E '^(iteration|gradient ready|phases|target|replay-validate.py:)' "$out/validate-c.txt"; }
        echo "$verdicts" | grep -v '^PASS' | sed 's/^/  /'
        grep -h '^skipped:' "$out/tests.log" 2>/dev/null | sed 's/^/  /'
        echo
        cat "$out/summary.body" 2>/dev/null || echo "${1:-(no benchmark)}"
    } >"$out/summary.txt"
}
write_summary "(benchmark not run yet)"

# ---- training on the GPU ------------------------------------------------------------------
# 2 workers + 1 server on this one GPU, mlp for 300 iterations on synthetic data: the loss
# falls as on the CPU (scripts/bench/loss_compare.py); --compress-on gpu pipelined and
# inline save bitwise the same model; --compress-on cpu saves the same model as gpu (the
# device codecs write the CPU codecs' messages, so every update is the same).
tdir=$out/train
mkdir -p "$tdir"
tcommon=(--model mlp --data synthetic --synthetic-samples 40000 --batch 64 --iters 300 --seed 7
         --lr 0.002 --compress topk:ratio=0.01 --log-level warn) # lr: the loss still falling at the end (2.5 -> 0.3)
train_rc=0
: >"$out/train.txt"
verdict() { # verdict ok|FAILED TEXT
    [ "$1" = ok ] || train_rc=1
    say "training: $2${1:+ ($1)}"
    echo "$2: $1" >>"$out/train.txt"
}
train_run() { # train_run NAME FLAGS...: the run's metrics and model in $tdir
    local name=$1
    shift
    run timeout "$(limit 150)" "$PC_TOP/scripts/pc-mpirun.sh" -np 3 "$b/apps/pc-train" "${tcommon[@]}" \
        "$@" --metrics "$tdir/$name.jsonl" --save-model "$tdir/$name.pcm" ||
        verdict FAILED "pc-train $* (see gpu-check.log)"
}
say "training: mlp, 2 workers + 1 server, 300 iterations, on the CPU and on the GPU"
train_run cpu
train_run gpu --device cuda --compress-on gpu
train_run gpu-inline --device cuda --compress-on gpu --pipeline off
train_run gpu-cpucomp --device cuda --compress-on cpu
if [ -s "$tdir/gpu.jsonl" ] && [ -s "$tdir/cpu.jsonl" ]; then
    if line=$(python3 "$PC_TOP/scripts/bench/loss_compare.py" "$tdir/cpu.jsonl" "$tdir/gpu.jsonl" 2>&1); then
        verdict ok "GPU against CPU: $line"
    else
        verdict FAILED "GPU against CPU: $line"
    fi
fi
same_model() { # same_model A B TEXT
    if [ -s "$tdir/$1.pcm" ] && cmp -s "$tdir/$1.pcm" "$tdir/$2.pcm"; then verdict ok "$3"; else verdict FAILED "$3"; fi
}
same_model gpu gpu-inline "--compress-on gpu: pipelined and inline save bitwise the same model"
same_model gpu gpu-cpucomp "--compress-on cpu and gpu save bitwise the same model"
write_summary "(benchmark not run yet)"

# ---- the targets of GPU training -----------------------------------------------------------
# The engine alone: our cnn's forward and backward against PyTorch's on this GPU, same batch.
say "engine: pc-bench engine --device cuda against torch_engine.py (cnn, batch 64)"
: >"$out/train-targets.txt"
eng=(--model cnn --batch 64 --iters 30)
if timeout "$(limit 60)" "$b/apps/pc-bench" engine --device cuda "${eng[@]}" >"$tdir/engine.txt" 2>&1 &&
    grep '^{' "$tdir/engine.txt" | tail -n 1 >"$tdir/engine.json" &&
    env -u LD_LIBRARY_PATH timeout "$(limit 90)" python3 "$PC_TOP/scripts/bench/torch_engine.py" "${eng[@]}" \
        --no-step >"$tdir/torch-engine.json" 2>>"$log" &&
    env -u LD_LIBRARY_PATH timeout "$(limit 90)" python3 "$PC_TOP/scripts/bench/torch_engine.py" "${eng[@]}" \
        >"$tdir/torch-engine-step.json" 2>>"$log"; then
    python3 "$PC_TOP/scripts/gpu/gpu_train_report.py" --engine "$tdir/engine.json" \
        "$tdir/torch-engine.json" "$tdir/torch-engine-step.json" >>"$out/train-targets.txt" 2>>"$log"
else
    cat "$tdir/engine.txt" >>"$log"
    echo "engine: not measured (see gpu-check.log)" >>"$out/train-targets.txt"
fi
# The pipeline: wide, 2 workers + 1 server at batch 256 on this GPU, at 1 Gbit/s where a
# network namespace can be shaped here (root, ip, tc), else on shared memory (said so).
net=shm
[ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 && net=1g
for on in gpu cpu; do
    modes="1 3 4 5"
    [ $on = cpu ] && modes="3 4" # the allreduce compresses nothing: measured once, above
    say "e2e.sh: wide, 2 workers, batch 256, $net, --compress-on $on, modes $modes"
    run timeout "$(limit 150)" "$PC_TOP/scripts/bench/e2e.sh" --build "$b" --device cuda \
        --compress-on $on --models wide --nets $net --workers 2 --batch 256 --iters 10 --warmup 3 \
        --modes "$modes" --out "$out/e2e-$on" || say "e2e.sh --compress-on $on FAILED (see gpu-check.log)"
done
if [ -f "$out/e2e-gpu/e2e.json" ] && [ -f "$out/e2e-cpu/e2e.json" ]; then
    python3 "$PC_TOP/scripts/gpu/gpu_train_report.py" --e2e "$out/e2e-gpu/e2e.json" \
        "$out/e2e-cpu/e2e.json" >>"$out/train-targets.txt" 2>>"$log"
else
    echo "pipeline: not measured (see gpu-check.log)" >>"$out/train-targets.txt"
fi
[ $net = shm ] && echo "(no shaped network here: shared memory instead of 1 Gbit/s)" >>"$out/train-targets.txt"
cat "$out/train-targets.txt" >>"$log"
write_summary "(benchmark not run yet)"

# ---- replay traces ---------------------------------------------------------------------------
# The measured counterparts of the published traces in traces/ (traces/README.md): per-module
# forward and backward times with CUDA events, AMP, 5 warm-up and 20 timed iterations.
# ResNet-50 and VGG-16 at the shipped traces' batch (256); BERT-base at batch 32, sequence
# 384 (the shipped trace's 320 does not fit an 80 GB GPU with this script's unfused
# attention; make-trace.py published --batch 32 gives the published trace at 32). A model
# that fails is reported, not a failure of the check: these are measurements.
gpu_tag=$(echo "$gpu" | awk -F', ' '{print tolower($1)}' | grep -o -E 'a100|h100|h200|l40s|a10g?|v100|t4' | sed -n 1p)
mkdir -p "$out/traces"
: >"$out/traces.txt"
for spec in resnet50:256:224 vgg16:256:224 bert-base:32:384; do
    IFS=: read -r model batch size <<<"$spec"
    file=$out/traces/$model-${gpu_tag:-gpu}-amp.json
    say "trace: make-trace.py record --model $model --batch $batch --device cuda"
    if line=$(env -u LD_LIBRARY_PATH timeout "$(limit 90)" python3 "$PC_TOP/scripts/bench/make-trace.py" record \
        --model "$model" --batch "$batch" --image-size "$size" --seq "$size" --device cuda --precision amp \
        --iters 20 --warmup 5 --out "$file" 2>&1); then
        echo "$line" >>"$log"
        line=$(echo "$line" | tail -n 1)
        echo "$model: ${line#make-trace.py: }" >>"$out/traces.txt"
    else
        echo "$line" >>"$log"
        echo "$model: not recorded: $(echo "$line" | tail -n 1)" >>"$out/traces.txt"
        rm -f "$file"
    fi
done
write_summary "(benchmark not run yet)"

# ---- validation (c) of the replay ------------------------------------------------------------
# doc/replay.md, "Validation": ResNet-50 (fp32, batch 64) on this GPU, recorded and real
# iterations interleaved in one process (CUDA events), the trace replayed (sleeps, on the
# CPU), against the real GPU iterations: target 5 %. A measurement: reported, never a
# failure of the check.
say "validation (c): replay-validate.py --interleave --device cuda --model resnet50 --batch 64"
env -u LD_LIBRARY_PATH timeout "$(limit 90)" python3 "$PC_TOP/scripts/bench/replay-validate.py" --interleave \
    --device cuda --model resnet50 --batch 64 --image-size 224 --iters 40 --warmup 5 \
    --out "$out/validate-c" >"$out/validate-c.txt" 2>&1 ||
    echo "replay-validate.py: failed or stopped (status $?; gpu-check.log has its output)" >>"$out/validate-c.txt"
cat "$out/validate-c.txt" >>"$log"
write_summary "(benchmark not run yet)"

# ---- benchmark ---------------------------------------------------------------------------
sizes=${PC_GPU_SIZES:-1000000,10000000,100000000}
ratios=0.001,0.01
left=$((budget - ($(date +%s) - start)))
if [ "$left" -lt 60 ]; then
    say "pc-bench compress --device cuda: skipped, ${left} s of the budget left (PC_GPU_BUDGET)"
    echo "(the codec benchmark was skipped: the budget was spent)" >"$out/summary.body"
elif say "pc-bench compress --device cuda --sizes $sizes --ratios $ratios" && timeout "$(limit 240)" "$b/apps/pc-bench" compress --device cuda --sizes "$sizes" --ratios "$ratios" \
    --reps 5 --json "$out/compress-cuda.json" >"$out/compress-cuda.txt" 2>&1; then
    cat "$out/compress-cuda.txt" >>"$log"
else
    cat "$out/compress-cuda.txt" >>"$log"
    say "pc-bench compress --device cuda FAILED: $(tail -n 1 "$out/compress-cuda.txt")"
    rm -f "$out/compress-cuda.json" # a table cut short is no result
fi
torch_json=
if [ -f "$out/compress-cuda.json" ]; then
    # torch runs with the system's libraries, not the bundle's.
    if env -u LD_LIBRARY_PATH timeout "$(limit 120)" python3 "$PC_TOP/scripts/bench/torch_topk.py" --sizes "$sizes" \
        --ratios "$ratios" --reps 5 --json "$out/torch-topk.json" >>"$log" 2>&1; then
        torch_json=$out/torch-topk.json
    else
        say "torch.topk not measured (see gpu-check.log)"
    fi
    python3 "$PC_TOP/scripts/gpu/gpu_report.py" "$out/compress-cuda.json" $torch_json >"$out/summary.body" 2>>"$log" ||
        say "gpu_report.py FAILED"
fi
write_summary
rm -f "$out/summary.body"
cat "$out/summary.txt"
# The device tool brings back at most 8 files from $OUT, 2 folders deep: everything is in
# one archive too (all.tar.gz), so that the traces and the runs' logs come back with it.
all=$(mktemp)
tar -czf "$all" -C "$out" . 2>>"$log" && mv "$all" "$out/all.tar.gz" ||
    { rm -f "$all"; say "all.tar.gz not written (see gpu-check.log)"; }
say "done"
[ $cuda_rc = 0 ] && [ $unit_rc = 0 ] && [ $train_rc = 0 ]
