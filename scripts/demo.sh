#!/usr/bin/env bash
# scripts/demo.sh: install what is missing, build, and run PipeCompress's main job.
# Until the training program (pc-train) lands, the main job is what the project has end to
# end: the worker/server split and verified thread placement under mpirun (pc-bench topo),
# then the SPSC hand-off queue against its baselines (pc-bench spsc, a short run), then the
# compressors against the memory bound (pc-bench compress --quick).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
pc_setup
pc_build build
B="$PC_TOP/build"
pc_say "mpirun -np 3 pc-bench topo --servers 1   (2 workers + 1 server, threads pinned)"
"$PC_TOP/scripts/pc-mpirun.sh" -t 120 -np 3 "$B/apps/pc-bench" topo --servers 1
pc_say "pc-bench spsc (short run; the full benchmark: build/apps/pc-bench spsc)"
"$B/apps/pc-bench" spsc --messages 5000000 --rounds 50000 --reps 3
pc_say "pc-bench compress --quick (every codec at 10^6 and 10^7 floats vs a memory-read bound)"
"$B/apps/pc-bench" compress --quick --no-sort
