#!/usr/bin/env bash
# scripts/demo.sh: install what is missing, build, and run PipeCompress's main job:
#   mpirun -np 3 pc-train
# 2 workers and 1 parameter server train the mlp on Fashion-MNIST for 3 epochs, with top-k
# 1% compression and error feedback pipelined on a pinned compressor thread, printing
# progress and the test accuracy after every epoch. Extra arguments go to pc-train, e.g.
#   scripts/demo.sh --model cnn --epochs 5
# Its metrics, timeline, charts and model go to results/ (PC_RESULTS=DIR: there instead).
# -h or --help: this text, then pc-train's flags when it is built; nothing installed or built.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
case ${1:-} in
-h|--help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    if [ -x "$PC_TOP/build/apps/pc-train" ]; then
        echo
        "$PC_TOP/build/apps/pc-train" --help
    else
        echo "(pc-train's flags: scripts/demo.sh builds it, then scripts/demo.sh --help lists them)"
    fi
    exit 0 ;;
esac
pc_setup
# A build/ configured already (by scripts/check.sh, say) is kept as it is. A fresh one builds
# the CUDA kernels only where a GPU is visible: nvcc takes minutes for kernels the demo, which
# trains on the CPU, never runs (scripts/check.sh and doc/building.md build them everywhere).
flags=""
nvidia-smi -L >/dev/null 2>&1 || flags="--without-cuda"
# shellcheck disable=SC2086
pc_build_kept build $flags
B="$PC_TOP/build"
R=${PC_RESULTS:-$PC_TOP/results}
mkdir -p "$R"
pc_say "mpirun -np 3 pc-train $*   (metrics and timeline in $R)"
"$PC_TOP/scripts/pc-mpirun.sh" -t 3600 -np 3 "$B/apps/pc-train" \
    --metrics "$R/demo-metrics.jsonl" --timeline "$R/demo-timeline.json" \
    --save-model "$R/demo-model.pcm" "$@"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    pc_say "charts"
    "$PC_TOP/scripts/plot.py" "$R/demo-metrics.jsonl" --out "$R/demo"
fi
pc_say "open $R/demo-timeline.json in https://ui.perfetto.dev to see the pipeline"
