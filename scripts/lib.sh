# scripts/lib.sh: shared set-up for scripts/demo.sh and scripts/check.sh (sourced).
# pc_setup installs what is missing; pc_build DIR [configure flags] builds out of tree.

PC_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian packages PipeCompress needs to build, test and run. Keep in step with doc/building.md.
# PC_BUILD_PACKAGES: what the build, the lints, the unit tests and the MPI tests on
# synthetic data need (scripts/check.sh --quick installs these alone).
PC_BUILD_PACKAGES="gcc make autoconf automake autoconf-archive libtool pkg-config
  libopenmpi-dev openmpi-bin libhwloc-dev hwloc libcmocka-dev libopenblas-dev zlib1g-dev
  libjansson-dev libck-dev clang-format"
PC_PACKAGES="$PC_BUILD_PACKAGES dataset-fashion-mnist python3-matplotlib"
# Packages only some tests need: check.sh installs them as root; without them (and not
# root) those tests are reported as skipped. clang: the libFuzzer targets; python3-torch
# (Debian's PyTorch 1.13, CPU): the Python binding's tests (tests/mpi/test_torch*.sh);
# python3-torchvision (0.14, for that torch): the models of tests/mpi/test_torch_models.sh.
PC_OPTIONAL_PACKAGES="clang python3-torch python3-torchvision"

# pc_stop_pid FILE: stop the daemon whose pid FILE holds (TERM, then KILL after 5 s), then
# remove FILE. Nothing happens without FILE or when the process has already gone.
pc_stop_pid() {
    local f=$1 pid _
    [ -s "$f" ] || return 0
    pid=$(cat "$f")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

# pc_shaped_netns NAME RATE: a network namespace NAME whose loopback is up and shaped to
# RATE (10gbit or 1gbit) with tc's tbf (bursts of 2 MB and 128 KB, latency 50 ms): the
# benchmarks' emulated link on one machine (scripts/bench/e2e.sh, torch-ddp.sh). Root
# only; the caller deletes it (ip netns del NAME).
pc_shaped_netns() {
    local burst
    case $2 in
    10gbit) burst=2mb ;;
    1gbit) burst=128kb ;;
    *) pc_die "pc_shaped_netns: no burst known for the rate '$2'" ;;
    esac
    ip netns add "$1" && ip netns exec "$1" ip link set lo up &&
        ip netns exec "$1" tc qdisc add dev lo root tbf rate "$2" burst "$burst" latency 50ms
}

# pc_gpu_deps DEBS_DIR PREFIX: unpack the .deb files of DEBS_DIR (scripts/gpu-bundle.sh)
# into PREFIX (emptied first; dpkg -x, or ar and tar where dpkg is missing) and export what
# builds against them: PATH (mpicc, mpirun, pkgconf), OPAL_PREFIX (Open MPI's wrappers
# relocated), LD_LIBRARY_PATH, PKG_CONFIG* (the .pc files, their paths under PREFIX). A
# run-time library the system already has is removed from PREFIX (an older copy would
# shadow it for every program started afterwards); absolute links in the packages are
# pointed into PREFIX or at the system's copy. Returns non-zero on a failure.
pc_gpu_deps() {
    local debs=$1 deps=$2 f member lib l t L
    rm -rf "$deps" && mkdir -p "$deps" || return 1
    for f in "$debs"/*.deb; do
        if command -v dpkg >/dev/null 2>&1; then
            dpkg -x "$f" "$deps" || return 1
        else
            member=$(ar t "$f" | grep '^data\.tar') || return 1
            ar p "$f" "$member" | tar -x -a -f - -C "$deps" || return 1
        fi
    done
    L=$deps/usr/lib/x86_64-linux-gnu
    # The cache is read once into a variable: a reader that stops at the first match
    # (grep -q, awk's exit) would end ldconfig by SIGPIPE, a failure under pipefail.
    local cache
    cache=$(ldconfig -p 2>/dev/null) || cache=
    for lib in libz.so.1 libudev.so.1 libgfortran.so.5 libquadmath.so.0; do
        if grep -q "^[[:space:]]*$lib " <<<"$cache"; then
            rm -f "$L/$lib"* "$deps/lib/x86_64-linux-gnu/$lib"*
        fi
    done
    find "$deps" -type l | while read -r l; do
        t=$(readlink "$l")
        case $t in
        /*)
            if [ -e "$deps$t" ]; then
                ln -sfn "$deps$t" "$l"
            else # the system's copy of the same library (libz.so -> libz.so.1)
                t=$(awk -v b="$(basename "${t%%.so*}").so." 'index($1, b) == 1 {print $NF; exit}' <<<"$cache")
                [ -n "$t" ] && ln -sfn "$t" "$l"
            fi
            ;;
        esac
    done
    # The names Debian's update-alternatives would make (postinst scripts do not run).
    ln -sfn mpicc.openmpi "$deps/usr/bin/mpicc"
    ln -sfn mpirun.openmpi "$deps/usr/bin/mpirun"
    export PATH="$deps/usr/bin:$PATH"
    export OPAL_PREFIX="$deps/usr"
    export LD_LIBRARY_PATH="$L:$L/openblas-pthread:$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PKG_CONFIG="$deps/usr/bin/pkgconf"
    export PKG_CONFIG_LIBDIR="$L/pkgconfig:$L/openblas-pthread/pkgconfig:$deps/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$deps"
}

pc_say() { printf '== %s\n' "$*"; }
# pc_need FLAG VALUE: for the bench scripts' option parsers: VALUE is there and is not the
# next flag (--out --iters 5 would otherwise make a folder named --iters); else the
# calling script's usage_error (each defines its own, status 2).
pc_need() {
    [ -n "${2:-}" ] || usage_error "$1 needs a value"
    case $2 in --*) usage_error "$1 needs a value, not the flag '$2'" ;; esac
}
pc_die() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# pc_missing PACKAGES...: the ones not installed (Debian), space-separated.
pc_missing() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || printf ' %s' "$p"
    done
}

# pc_setup [EXTRA PACKAGES...]: install what is missing of PC_PACKAGES and the extras
# (a caller may set PC_PACKAGES to PC_BUILD_PACKAGES first, as check.sh --quick does).
pc_setup() {
    if ! command -v dpkg-query >/dev/null 2>&1; then
        pc_say "not a Debian system: make sure the equivalents of these are installed: $PC_PACKAGES"
        return 0
    fi
    local missing="" p
    for p in $PC_PACKAGES "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null \
            || missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" != 0 ]; then
        pc_die "missing packages; install them with: sudo apt-get install -y --no-install-recommends$missing"
    fi
    pc_say "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    # Another apt-get or dpkg (unattended upgrades at boot) may hold the package lock: wait
    # for it up to 10 minutes rather than fail at once.
    local lock=(-o DPkg::Lock::Timeout=600)
    apt-get "${lock[@]}" update -qq || pc_die "apt-get update failed"
    # shellcheck disable=SC2086
    apt-get "${lock[@]}" install -y -qq --no-install-recommends $missing >/dev/null \
        || pc_die "apt-get install failed for:$missing"
}

# pc_build DIR [configure flags...]: (re)configure when needed and build in $PC_TOP/DIR.
# Sets PC_BUILD_AS_DOCUMENTED to 1 when this call did what doc/building.md's by-hand build
# does (autoreconf -fi, a new DIR, ../configure with no flags or only --with-cuda-arch=,
# make), else to 0.
pc_build() {
    local dir="$PC_TOP/$1" reconf=0 fresh=0
    PC_BUILD_AS_DOCUMENTED=0
    shift
    if [ -f "$PC_TOP/config.status" ]; then
        pc_die "the source tree is configured in place; run 'make distclean' there first (these scripts build out of tree)"
    fi
    if [ ! -x "$PC_TOP/configure" ] || [ "$PC_TOP/configure.ac" -nt "$PC_TOP/configure" ] \
        || [ "$PC_TOP/Makefile.am" -nt "$PC_TOP/configure" ]; then
        pc_say "autoreconf"
        reconf=1
        (cd "$PC_TOP" && autoreconf -fi >/dev/null 2>&1) || (cd "$PC_TOP" && autoreconf -fi) \
            || pc_die "autoreconf failed"
    fi
    [ -f "$dir/Makefile" ] || fresh=1
    mkdir -p "$dir"
    local want="$*"
    # A tree configured by hand (no flags file) is configured again: its flags are unknown.
    if [ ! -f "$dir/Makefile" ] || [ ! -f "$dir/.pc-configure-flags" ] \
        || [ "$(cat "$dir/.pc-configure-flags")" != "$want" ] \
        || [ "$PC_TOP/configure" -nt "$dir/Makefile" ]; then
        pc_say "configure $want (in ${dir#"$PC_TOP"/})"
        (cd "$dir" && "$PC_TOP/configure" -q "$@" >configure.out 2>&1) \
            || { tail -n 5 "$dir/configure.out" >&2; pc_die "configure failed (see ${dir#"$PC_TOP"/}/config.log)"; }
        printf '%s' "$want" >"$dir/.pc-configure-flags"
    fi
    pc_say "make (in ${dir#"$PC_TOP"/})"
    make -C "$dir" -j"$(nproc)" >"$dir/make.out" 2>&1 \
        || { tail -n 30 "$dir/make.out" >&2; pc_die "build failed in ${dir#"$PC_TOP"/}"; }
    # The documented build: configure with no flags, or only a shorter CUDA architecture
    # list (the same code, fewer nvcc passes).
    if [ $reconf = 1 ] && [ $fresh = 1 ] && { [ -z "$want" ] || [[ $want == --with-cuda-arch=* && $want != *" "* ]]; }; then
        PC_BUILD_AS_DOCUMENTED=1
    fi
}

# pc_build_kept DIR [FLAGS...]: DIR as it is already configured (by scripts/demo.sh, by
# scripts/check.sh, by hand: any flags) brought up to date, since what runs on this CPU is
# the same code whatever the flags: pc_build with the flags it recorded, or make alone for
# a tree configured by hand; pc_build DIR FLAGS where DIR is not configured yet.
pc_build_kept() {
    local dir="$PC_TOP/$1" name=$1
    shift
    if [ -f "$dir/Makefile" ] && [ -f "$dir/.pc-configure-flags" ]; then
        local kept
        kept=$(cat "$dir/.pc-configure-flags")
        pc_say "$name/ configured with $([ -n "$kept" ] && echo "'$kept'" || echo "no flags"): kept"
        # shellcheck disable=SC2086
        pc_build "$name" $kept
    elif [ -f "$dir/Makefile" ]; then
        pc_say "make (in $name, configured by hand: kept)"
        make -C "$dir" -j"$(nproc)" >"$dir/make.out" 2>&1 \
            || { tail -n 30 "$dir/make.out" >&2; pc_die "build failed in $name"; }
    else
        pc_build "$name" "$@"
    fi
}

# pc_torch_prereqs PY: what the torch benchmarks need before their first run: PY imports
# torch, and the library the binding loads: $PIPECOMPRESS_LIB when set (it must exist;
# nothing is built), else build/ (pc_build_kept). Dies with one line naming what is
# missing. (Their --data is a flag, checked with the other flags: status 2.)
pc_torch_prereqs() {
    local py=$1
    "$py" -c 'import torch' 2>/dev/null || pc_die "$py cannot import torch (Debian package python3-torch)"
    if [ -n "${PIPECOMPRESS_LIB:-}" ]; then
        [ -f "$PIPECOMPRESS_LIB" ] || pc_die "PIPECOMPRESS_LIB: no file $PIPECOMPRESS_LIB"
        pc_say "library: $PIPECOMPRESS_LIB (nothing built)"
    else
        pc_build_kept build
    fi
}
