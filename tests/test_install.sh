#!/usr/bin/env bash
# The installed library as a user builds against it (doc/api.md): `make install` into a
# staging directory, then the API example compiled with nothing but
#   mpicc apps/examples/pc_example.c $(pkg-config --cflags --libs pipecompress)
# (pkg-config pointed at the staging prefix), and run under mpirun. It once failed on a
# config.h that only the build tree has. The installed pc-train runs too, and so do
# doc/api.md's build-and-run lines as written.
set -uo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
run="$PC_SRCDIR/scripts/pc-mpirun.sh"

if ! make -C "$PC_BUILDDIR" install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1; then
    bad "make install"; tail -5 "$tmp/install.log"; exit 1
fi
prefix=$(sed -n 's/^prefix=//p' "$PC_BUILDDIR/pipecompress.pc")
pcdir=$(dirname "$(find "$tmp/root" -name pipecompress.pc | head -1)")
pc() { PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$tmp/root$prefix" "$@" pipecompress; }
flags=$(pc --cflags --libs) || { bad "pkg-config does not know the installed pipecompress.pc"; exit 1; }
# shellcheck disable=SC2086
if mpicc -std=c11 -Wall -Wextra -Werror "$PC_SRCDIR/apps/examples/pc_example.c" $flags -o "$tmp/pc_example" \
        >"$tmp/cc.log" 2>&1; then
    ok "pc_example.c builds against the installed headers and library: mpicc ... \$(pkg-config --cflags --libs pipecompress)"
else
    bad "pc_example.c does not build against the installed library"; head -5 "$tmp/cc.log"
fi
if [ -x "$tmp/pc_example" ] && "$run" -t 60 -np 3 "$tmp/pc_example" --iters 20 >"$tmp/ex.log" 2>&1; then
    ok "the installed-library build of pc_example runs: $(tail -n 1 "$tmp/ex.log")"
else
    bad "pc_example built against the installed library did not run"; tail -3 "$tmp/ex.log"
fi
installed="$tmp/root$prefix/bin/pc-train"
if "$run" -t 60 -np 3 "$installed" --data synthetic --synthetic-samples 600 --iters 5 >"$tmp/t.log" 2>&1 &&
    grep -q '^done: 5 iterations' "$tmp/t.log"; then
    ok "the installed pc-train runs"
else
    bad "installed pc-train"; tail -3 "$tmp/t.log"
fi
# doc/api.md's build-and-run lines, as written there, in a scratch directory laid out like
# the source tree; pkg-config finds the staged install (a shim adds the staging prefix,
# which a real install at the configured prefix would not need).
work="$tmp/api"
mkdir -p "$work/bin"
ln -s "$PC_SRCDIR/apps" "$work/apps"
ln -s "$PC_SRCDIR/scripts" "$work/scripts"
printf '#!/bin/sh\nexec %s --define-variable=prefix=%s "$@"\n' "$(command -v pkg-config)" "$tmp/root$prefix" \
    >"$work/bin/pkg-config"
chmod +x "$work/bin/pkg-config"
n=0
while IFS= read -r line; do
    n=$((n + 1))
    if (cd "$work" && PATH="$work/bin:$PATH" PKG_CONFIG_PATH="$pcdir" timeout 300 bash -c "$line") \
            </dev/null >"$tmp/api-$n.log" 2>&1; then
        ok "doc/api.md: $line"
    else
        bad "doc/api.md: $line"; tail -3 "$tmp/api-$n.log"
    fi
done < <(awk '/^```/{f = !f && $0 == "```sh"; next} f && NF' "$PC_SRCDIR/doc/api.md")
[ "$n" -ge 2 ] || bad "doc/api.md: expected its build-and-run commands, found $n lines"

echo "test_install.sh: $fails failure(s)"
[ "$fails" = 0 ]
