#!/usr/bin/env bash
# scripts/lint/format.sh: format the C, CUDA and header files with the checked-in .clang-format.
#   scripts/lint/format.sh           rewrite the files in place
#   scripts/lint/format.sh --check   change nothing; list the files that differ and exit 1
# The files are the tracked ones (git ls-files) under src/ include/ apps/ tests/ cuda/.
set -euo pipefail
cd "$(dirname "$0")/../.."
fmt=${CLANG_FORMAT:-clang-format}
command -v "$fmt" >/dev/null 2>&1 || { echo "format.sh: $fmt not found (Debian package clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files -- 'src/*.[ch]' 'include/*.h' 'apps/*.[ch]' 'tests/*.[ch]' 'cuda/*.cu' 'cuda/*.h' 'cuda/*.cuh')
[ "${#files[@]}" -gt 0 ] || { echo "format.sh: no files found (not a git checkout?)" >&2; exit 2; }
if [ "${1:-}" = "--check" ]; then
    bad=0
    for f in "${files[@]}"; do
        if ! "$fmt" --style=file "$f" | cmp -s - "$f"; then
            echo "not formatted: $f (run scripts/lint/format.sh)"
            bad=$((bad + 1))
        fi
    done
    [ $bad = 0 ] || { echo "format.sh: $bad of ${#files[@]} files differ from .clang-format" >&2; exit 1; }
    echo "format.sh: ${#files[@]} files formatted as .clang-format says"
else
    "$fmt" --style=file -i "${files[@]}"
fi
