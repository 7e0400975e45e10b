#!/usr/bin/env bash
# scripts/lint/check-pipes.sh [TOP]: no pipeline in the project's shell scripts (*.sh,
# *.sbatch under scripts/ and tests/, and .ci/run) hands its output to a reader that stops
# before the end: head, grep -q/-m/-l and their long forms (--quiet, --silent,
# --max-count, --files-with-matches). Every script here runs under `set -o pipefail`; a
# writer that writes after such a reader left dies of SIGPIPE and the pipeline's status is
# 141, so `set -e` ends the script or an `if` takes the other branch, depending on how much
# the writer had left and when the reader went: by chance, and more often as outputs grow.
# The full check once ended so after "all tests passed", in its list of the longest tests
# (sort | head). Write `sed -n 1,Np` (reads to the end) instead of head.
# For a test write `grep PATTERN >/dev/null`; for grep -m1, `grep PATTERN | sed -n 1p`.
# A reader of a file (grep -q PATTERN FILE) is not a pipeline and is fine. Comment lines
# are skipped; a line continued with a backslash or ending in a pipe is read with the lines
# it continues onto (reported at its first). Lists each offending line as FILE:LINE: TEXT
# and exits 1 if there is any; prints how many files it read otherwise. TOP: the source
# tree's top (default: this script's).
# Run by scripts/check.sh before the builds; tests/system/test_lint.sh plants one.
set -euo pipefail
case ${1:-} in
-h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
-*)
    echo "check-pipes: unknown flag '$1' (usage: scripts/lint/check-pipes.sh [TOP])" >&2
    exit 2
    ;;
esac
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -d "$top/scripts" ] || {
    echo "check-pipes: $top/scripts: no such folder (give the source tree's top)" >&2
    exit 1
}
# A pipe (not ||) followed by an early-stopping reader.
stop='(^|[^|])\|[[:space:]]*(head([[:space:]]|$)|grep([[:space:]]+[^|[:space:]]+)*[[:space:]]+(-[a-zA-Z]*[qml]|--(quiet|silent|max-count|files-with-matches)))'
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
    for d in "$top/scripts" "$top/tests"; do
        [ ! -d "$d" ] || find "$d" -type f \( -name '*.sh' -o -name '*.sbatch' \) -print0
    done
    [ -f "$top/.ci/run" ] && printf '%s\0' "$top/.ci/run"
)
# joined FILE: FILE's lines as LINE:TEXT, a line ending in a backslash or a pipe (not ||)
# joined with the ones it continues onto (numbered as its first).
joined() {
    awk '{ if (held == "") at = NR; held = held $0 }
         /\\$/ { sub(/\\$/, " ", held); next }
         /(^|[^|])\|[[:space:]]*$/ { held = held " "; next }
         { print at ":" held; held = "" }
         END { if (held != "") print at ":" held }' "$1"
}
bad=0
for f in "${files[@]}"; do
    while IFS= read -r hit; do
        echo "${f#"$top/"}:$hit"
        bad=$((bad + 1))
    done < <(joined "$f" | grep -E "^[0-9]+:.*$stop" | grep -vE '^[0-9]+:[[:space:]]*#' || true)
done
if [ "$bad" -gt 0 ]; then
    echo "check-pipes: $bad pipeline(s) end in a reader that stops early; under pipefail the writer may die of SIGPIPE (status 141): use sed -n 1,Np for head, grep PATTERN >/dev/null for a test, grep PATTERN | sed -n 1p for grep -m1" >&2
    exit 1
fi
echo "check-pipes: ${#files[@]} shell scripts, no pipeline into head or grep -q/-m/-l"
