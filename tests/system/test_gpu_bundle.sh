#!/usr/bin/env bash
# scripts/gpu-bundle.sh and lib.sh's pc_gpu_deps, the GPU machine's way to the libraries
# without a package registry: the bundle is downloaded (apt-get download: needs the
# package lists and the network; skipped, exit 77, without them), unpacked into a prefix
# of its own, and a program using Open MPI, hwloc, OpenBLAS, CMocka and zlib is compiled
# with the prefix's mpicc and pkg-config and runs with the prefix's libraries; the bundle
# holds configure and the other autotools outputs.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v apt-get >/dev/null 2>&1 || pc_skip "not a Debian machine (no apt-get)"
apt-cache show libopenmpi-dev >/dev/null 2>&1 || pc_skip "no package lists (apt-get update not run)"
if ! bash "$PC_SRCDIR/scripts/gpu-bundle.sh" --dest "$tmp/b" >"$tmp/bundle.out" 2>&1; then
    grep -q 'apt-get download failed' "$tmp/bundle.out" && pc_skip "apt-get download failed: no network?"
    bad "gpu-bundle.sh"; cat "$tmp/bundle.out"; pc_done
fi
n=$(ls "$tmp/b/debs" | wc -l)
if [ "$n" -ge 20 ] && [ -x "$tmp/b/autotools/configure" ] && [ -f "$tmp/b/autotools/Makefile.in" ] &&
    grep -q '^made by scripts/gpu-bundle.sh' "$tmp/b/MANIFEST"; then
    ok "gpu-bundle.sh: $n packages, configure, $(du -sh "$tmp/b" | cut -f1)"
else
    bad "gpu-bundle.sh: $n packages"; ls -R "$tmp/b" | sed -n 1,20p
fi
cat >"$tmp/t.c" <<'C'
#include <cblas.h>
#include <hwloc.h>
#include <mpi.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <zlib.h>
#include <cmocka.h>
int main(void)
{
    int v, sv;
    MPI_Get_version(&v, &sv);
    hwloc_topology_t t;
    hwloc_topology_init(&t);
    hwloc_topology_load(t);
    float a = 3, b = 2, c = 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1, &a, 1, &b, 1, 0, &c, 1);
    printf("mpi %d.%d cores %d sgemm %g zlib %s cmocka %p\n", v, sv,
           hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE), c, zlibVersion(), (void *)_fail);
    hwloc_topology_destroy(t);
    return 0;
}
C
if (
    . "$PC_SRCDIR/scripts/lib.sh"
    pc_gpu_deps "$tmp/b/debs" "$tmp/prefix" || exit 1
    case $(command -v mpicc) in "$tmp/prefix"/*) ;; *) echo "mpicc is $(command -v mpicc)"; exit 1 ;; esac
    grep -q -- "-I$tmp/prefix/usr/lib/x86_64-linux-gnu/openmpi/include" <<<"$(mpicc --showme)" || exit 1
    grep -q -- "-L$tmp/prefix/" <<<"$(pkg-config --cflags --libs hwloc openblas cmocka zlib)" || exit 1
    # shellcheck disable=SC2046
    mpicc -Wl,--no-as-needed "$tmp/t.c" $(pkg-config --cflags --libs hwloc openblas cmocka zlib) -o "$tmp/t" || exit 1
    "$tmp/t" >"$tmp/t.out" || exit 1
    ldd "$tmp/t" >"$tmp/ldd.out"
    for lib in libmpi.so.40 libhwloc.so.15 libopenblas.so.0 libcmocka.so.0; do
        grep -q "$lib => $tmp/prefix/" "$tmp/ldd.out" || { echo "$lib not from the bundle"; exit 1; }
    done
) >"$tmp/deps.out" 2>&1 && grep -q '^mpi 3\.1 cores [0-9]* sgemm 6 zlib ' "$tmp/t.out"; then
    ok "pc_gpu_deps: built and ran against the bundle: $(cat "$tmp/t.out")"
else
    bad "pc_gpu_deps"; cat "$tmp/deps.out" "$tmp/t.out" 2>/dev/null
fi
pc_done
