#!/usr/bin/env bash
# scripts/gpu-check.sh: on a machine with an NVIDIA GPU, build with CUDA and run the checks
# that need a device, in one go (device time is scarce): the CUDA unit test (probe kernel
# against its CPU reference) and the whole test suite, with nvidia-smi's view first.
# Results go to $OUT when set (the device tool), else to build-gpu/.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
out=${OUT:-$PC_TOP/build-gpu}
mkdir -p "$out"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    pc_setup || echo "(set-up failed: building with what is installed)"
    pc_build build-gpu --with-cuda
    # the architectures in the fatbinary (configure --with-cuda-arch), where cuobjdump exists
    objdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
    [ -x "$objdump" ] && "$objdump" --list-elf --list-ptx "$PC_TOP/build-gpu/cuda/pc_probe.o"
    make -C "$PC_TOP/build-gpu" check TESTS=tests/unit/test_cuda
    cat "$PC_TOP/build-gpu/tests/unit/test_cuda.log"
    make -C "$PC_TOP/build-gpu" -j"$(nproc)" check
} 2>&1 | tee "$out/gpu-check.log"
