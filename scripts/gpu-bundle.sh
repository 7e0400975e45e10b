#!/usr/bin/env bash
# scripts/gpu-bundle.sh: prepare, on this (Debian 12) machine, what scripts/gpu-check.sh needs
# on a GPU machine that reaches no package registry, in .gpu/ (git-ignored; carry it):
#   .gpu/debs/       the Debian packages of the libraries and headers PipeCompress builds
#                    against (Open MPI, hwloc, OpenBLAS, CMocka, zlib, jansson, pkgconf), downloaded
#                    with apt-get download; gpu-check.sh unpacks them with dpkg -x into a
#                    directory of its own (never into /)
#   .gpu/autotools/  configure and the other files autoreconf generates, for a machine
#                    without autotools
#   .gpu/MANIFEST    what is there, from which commit
#   scripts/gpu-bundle.sh              download and write .gpu/
#   scripts/gpu-bundle.sh --dest DIR   write DIR instead (tests)
#   scripts/gpu-bundle.sh --list       print the packages and files, change nothing
# .gpu/ is git-ignored: copy the tree to the GPU machine with it (rsync, tar); then run
# scripts/gpu-check.sh there.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# Headers, link-time .so links and the run-time libraries behind them; the C library,
# libstdc++, libgcc and zlib's run-time library are on any system with gcc.
PC_GPU_DEBS="libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc-dev libhwloc15 libudev1
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5 libquadmath0
  libcmocka-dev libcmocka0 zlib1g-dev libjansson-dev libjansson4 pkgconf pkgconf-bin libpkgconf3"
AUTOTOOLS_FILES="configure aclocal.m4 config.h.in Makefile.in build-aux m4"

dest="$PC_TOP/.gpu"
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    --list)
        echo "packages: $(echo $PC_GPU_DEBS)"
        echo "autotools: $AUTOTOOLS_FILES"
        exit 0
        ;;
    --dest)
        [ $# -ge 2 ] || pc_die "--dest needs a directory"
        dest=$2
        shift 2
        ;;
    *) pc_die "unknown argument '$1' (usage: gpu-bundle.sh [--list] [--dest DIR])" ;;
    esac
done
command -v apt-get >/dev/null 2>&1 || pc_die "needs apt-get (a Debian machine, like the GPU machine's packages)"
[ "$(dpkg --print-architecture)" = amd64 ] || pc_die "the GPU machine is x86-64: run this on an amd64 Debian"

mkdir -p "$(dirname "$dest")" || pc_die "cannot create $(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.gpu-new.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/debs" "$tmp/autotools"
chmod a+rx "$tmp" && chmod a+rwx "$tmp/debs" # apt-get download runs as _apt where it can
pc_say "apt-get download (into .gpu/debs)"
# shellcheck disable=SC2086
(cd "$tmp/debs" && apt-get download -q $PC_GPU_DEBS >/dev/null) \
    || pc_die "apt-get download failed (apt-get update first, or no network)"
if [ ! -x "$PC_TOP/configure" ] || [ "$PC_TOP/configure.ac" -nt "$PC_TOP/configure" ] ||
    [ "$PC_TOP/Makefile.am" -nt "$PC_TOP/Makefile.in" ]; then
    pc_say "autoreconf"
    (cd "$PC_TOP" && autoreconf -fi >/dev/null) || pc_die "autoreconf failed"
fi
for f in $AUTOTOOLS_FILES; do
    [ -e "$PC_TOP/$f" ] || pc_die "autoreconf left no $f"
    cp -a "$PC_TOP/$f" "$tmp/autotools/"
done
{
    echo "made by scripts/gpu-bundle.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) at commit $(git -C "$PC_TOP" rev-parse --short HEAD 2>/dev/null || echo '?')"
    (cd "$tmp/debs" && ls -1)
    echo "autotools: $AUTOTOOLS_FILES"
} >"$tmp/MANIFEST"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
chmod 755 "$dest" "$dest/debs"
pc_say "$(du -sh "$dest" | cut -f1) in $dest (carry it to the GPU machine beside scripts/gpu-check.sh)"
