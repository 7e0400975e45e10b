#!/usr/bin/env bash
# The installed library as a user builds against it (doc/api.md): `make install` into a
# staging directory, then
#  - the shared library exports only the public API: every symbol `nm -D --defined-only`
#    lists starts with pc_ and is declared in an installed header (the library-private
#    rt_*, pull_encode, ... once were exported);
#  - the API example compiled with nothing but (it calls BLAS and libm itself)
#      mpicc apps/examples/pc_example.c $(pkg-config --cflags --libs pipecompress openblas) -lm
#    (pkg-config pointed at the staging prefix) links libpipecompress.so and runs under
#    mpirun with LD_LIBRARY_PATH at the staged lib directory; it once failed on a
#    config.h that only the build tree has;
#  - the same example linked with libpipecompress.a and pkg-config --static's private
#    libraries runs without the shared library;
#  - the installed pc-train runs;
#  - README.md's C program (its ```c block) builds the same way and runs on 3 ranks;
#  - doc/api.md's build-and-run lines run as written there.
set -uo pipefail
. "$(dirname "$0")/../harness.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run="$PC_SRCDIR/scripts/pc-mpirun.sh"

if ! make -C "$PC_BUILDDIR" install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1; then
    bad "make install"; tail -5 "$tmp/install.log"; exit 1
fi
prefix=$(sed -n 's/^prefix=//p' "$PC_BUILDDIR/pipecompress.pc")
pcdir=$(dirname "$(find "$tmp/root" -name pipecompress.pc | sed -n 1p)")
pc() { PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$tmp/root$prefix" "$@"; }
libdir=$(pc --variable=libdir pipecompress)
incdir=$(pc --variable=includedir pipecompress)

# The exported symbols: only the public API.
so="$libdir/libpipecompress.so"
if [ ! -e "$so" ] || [ ! -e "$libdir/libpipecompress.a" ]; then
    bad "make install did not install libpipecompress.so and libpipecompress.a: $(ls "$libdir" 2>&1)"
else
    nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//' | sort -u >"$tmp/exported"
    grep -ohE '\bpc_[A-Za-z0-9_]+\b' "$incdir"/pipecompress/*.h | sort -u >"$tmp/declared"
    unprefixed=$(grep -v '^pc_' "$tmp/exported")
    undeclared=$(grep '^pc_' "$tmp/exported" | comm -23 - "$tmp/declared")
    if [ -z "$unprefixed" ] && [ -z "$undeclared" ] && grep -qx pc_strerror "$tmp/exported"; then
        ok "nm -D --defined-only libpipecompress.so: $(wc -l <"$tmp/exported") symbols, all pc_* and declared in the installed headers"
    else
        bad "libpipecompress.so exports symbols outside the public API:" $unprefixed \
            ${undeclared:+"(pc_ but in no installed header:" $undeclared")"}
    fi
fi

flags=$(pc --cflags --libs pipecompress openblas) || { bad "pkg-config does not know the installed pipecompress.pc"; exit 1; }
# shellcheck disable=SC2086
if mpicc -std=c11 -Wall -Wextra -Werror "$PC_SRCDIR/apps/examples/pc_example.c" $flags -lm -o "$tmp/pc_example" \
        >"$tmp/cc.log" 2>&1; then
    ok "pc_example.c builds against the installed headers and library: mpicc ... \$(pkg-config --cflags --libs pipecompress openblas) -lm"
else
    bad "pc_example.c does not build against the installed library"; head -5 "$tmp/cc.log"
fi
# README.md's C program (its one ```c block), built the same way: it must compile warning-free
# against the installed headers and train to the end on 2 workers and a server, each worker's
# mean parameter within 0.01 of the optimum, 1.
awk '/^```/{f = !f && $0 == "```c"; next} f' "$PC_SRCDIR/README.md" >"$tmp/minimal.c"
# shellcheck disable=SC2086
if [ -s "$tmp/minimal.c" ] &&
    mpicc -std=c11 -Wall -Wextra -Werror "$tmp/minimal.c" $flags -lm -o "$tmp/minimal" >"$tmp/cc-min.log" 2>&1 &&
    LD_LIBRARY_PATH="$libdir" "$run" -t 60 -np 3 "$tmp/minimal" >"$tmp/min.log" 2>&1 &&
    [ "$(awk '/^worker: mean parameter/ && $4 > 0.99 && $4 < 1.01 {n++} END {print n + 0}' "$tmp/min.log")" = 2 ]; then
    ok "README.md's C program ($(wc -l <"$tmp/minimal.c") lines) builds against the installed library, runs on 3 ranks, both workers near the optimum"
else
    bad "README.md's C program does not build or run"; tail -n 5 "$tmp/cc-min.log" "$tmp/min.log" 2>&1
fi
if [ -x "$tmp/pc_example" ] && grep -q 'NEEDED.*libpipecompress\.so' <<<"$(readelf -d "$tmp/pc_example")" &&
    LD_LIBRARY_PATH="$libdir" "$run" -t 60 -np 3 "$tmp/pc_example" --iters 20 >"$tmp/ex.log" 2>&1; then
    ok "the example linked with the installed libpipecompress.so runs: $(tail -n 1 "$tmp/ex.log")"
else
    bad "pc_example built against the installed shared library did not run"; tail -n 3 "$tmp/ex.log" 2>&1
fi

# Static: libpipecompress.a named in place of -lpipecompress (which would take the .so),
# with the private dependencies that pkg-config --static adds.
sflags=$(pc --cflags --static --libs pipecompress openblas)
# shellcheck disable=SC2086
if mpicc -std=c11 -Wall -Wextra -Werror "$PC_SRCDIR/apps/examples/pc_example.c" \
        ${sflags/-lpipecompress/-l:libpipecompress.a} -o "$tmp/pc_example_static" >"$tmp/cc-static.log" 2>&1 &&
    ! grep -q 'NEEDED.*libpipecompress' <<<"$(readelf -d "$tmp/pc_example_static")" &&
    "$run" -t 60 -np 3 "$tmp/pc_example_static" --iters 20 >"$tmp/ex-static.log" 2>&1; then
    ok "the example linked with the installed libpipecompress.a (pkg-config --static) runs"
else
    bad "pc_example against the installed static library"; tail -n 3 "$tmp/cc-static.log" "$tmp/ex-static.log" 2>&1
fi
installed="$tmp/root$prefix/bin/pc-train"
if "$run" -t 60 -np 3 "$installed" --data synthetic --synthetic-samples 600 --iters 5 >"$tmp/t.log" 2>&1 &&
    grep -q '^done: 5 iterations' "$tmp/t.log"; then
    ok "the installed pc-train runs"
else
    bad "installed pc-train"; tail -3 "$tmp/t.log"
fi

# The Python package: installed where the configured interpreter imports from under the
# prefix, with _installed.py naming the installed library; importable from the staging
# directory, and it loads the staged library (PIPECOMPRESS_LIB stands in for the prefix).
pydir=$(find "$tmp/root" -path '*/pipecompress/_installed.py' -printf '%h\n' | sed -n 1p)
py=$(sed -n 's/^PC_PYTHON = //p' "$PC_BUILDDIR/Makefile")
if [ -n "$pydir" ] && grep -qx "LIBRARY = \"$prefix/lib/libpipecompress.so.0\"" "$pydir/_installed.py" &&
    [ -e "$pydir/__init__.py" ] && [ -e "$pydir/_lib.py" ] && [ -e "$pydir/data.py" ] &&
    out=$(cd "$tmp" && PYTHONPATH="$(dirname "$pydir")" PIPECOMPRESS_LIB="$libdir/libpipecompress.so.0" \
        "$py" -c 'import pipecompress._lib as l, pipecompress._installed as i; print(l.load().pc_strerror(0).decode(), i.LIBRARY)' 2>&1) &&
    [ "$out" = "success $prefix/lib/libpipecompress.so.0" ]; then
    ok "the Python package installed in ${pydir#"$tmp/root"}, naming $prefix/lib/libpipecompress.so.0, loads the library"
else
    bad "Python package: ${pydir:-not installed} ${out:-}"
fi
# Every module of the source package is installed (a new module left out of Makefile.am's
# list breaks `import pipecompress` only after make install), and the whole package imports.
missing="" out="not tried"
for f in "$PC_SRCDIR"/python/pipecompress/*.py; do
    [ -n "$pydir" ] && [ -e "$pydir/$(basename "$f")" ] || missing="$missing $(basename "$f")"
done
if [ -z "$missing" ] && out=$(cd "$tmp" && PYTHONPATH="$(dirname "$pydir")" \
        PIPECOMPRESS_LIB="$libdir/libpipecompress.so.0" "$py" -c 'import pipecompress' 2>&1); then
    ok "every module of python/pipecompress is installed, and import pipecompress works"
else
    bad "Python package: not installed:${missing:- none}; import pipecompress: $(tail -n 1 <<<"${out:-}")"
fi

# doc/api.md's build-and-run lines, as written there, in a scratch directory laid out like
# the source tree. pkg-config finds the staged install through a copy of its .pc naming the
# staging prefix (a real install at the configured prefix needs nothing of the kind), and
# the loader finds the staged libpipecompress.so through LD_LIBRARY_PATH.
work="$tmp/api"
mkdir -p "$work/pkgconfig"
ln -s "$PC_SRCDIR/apps" "$work/apps"
ln -s "$PC_SRCDIR/scripts" "$work/scripts"
sed "s|^prefix=.*|prefix=$tmp/root$prefix|" "$pcdir/pipecompress.pc" >"$work/pkgconfig/pipecompress.pc"
n=0
while IFS= read -r line; do
    n=$((n + 1))
    if (cd "$work" && PKG_CONFIG_PATH="$work/pkgconfig" LD_LIBRARY_PATH="$libdir" timeout 300 bash -c "$line") \
            </dev/null >"$tmp/api-$n.log" 2>&1; then
        ok "doc/api.md: $line"
    else
        bad "doc/api.md: $line"; tail -n 3 "$tmp/api-$n.log"
    fi
done < <(awk '/^```/{f = !f && $0 == "```sh"; next} f && NF' "$PC_SRCDIR/doc/api.md")
[ "$n" -ge 2 ] || bad "doc/api.md: expected its build-and-run commands, found $n lines"
pc_done
