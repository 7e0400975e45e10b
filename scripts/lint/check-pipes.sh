#!/usr/bin/env bash
# scripts/lint/check-pipes.sh [TOP]: no pipeline in the project's shell scripts (*.sh,
# *.sbatch under scripts/ and tests/, and .ci/run) hands its output to a reader that stops
# before the end: head, grep -q/-m/-l and their long forms (--quiet, --silent,
# --max-count, --files-with-matches). Every script here runs under `set -o pipefail`; a
# writer that writes after such a reader left dies of SIGPIPE and the pipeline's status is
# 141, so `set -e` ends the script or an `if` takes the other branch, depending on how much
# the writer had left and when the reader went: by chance, and more often as outputs grow.
# The full check once ended so after "all tests passed", in its list of the longest tests
# (sort | head). Write `sed -n 1,Np` (reads to the end) or `grep PATTERN >/dev/null`.
# A reader of a file (grep -q PATTERN FILE) is not a pipeline and is fine. Comment lines
# are skipped. Lists each offending line as FILE:LINE: TEXT and exits 1 if there is any;
# prints how many files it read otherwise.
# Run by scripts/check.sh before the builds; tests/system/test_lint.sh plants one.
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -d "$top/scripts" ] || {
    echo "check-pipes: $top/scripts: no such folder (give the source tree's top)" >&2
    exit 1
}
# A pipe (not ||) followed by an early-stopping reader.
stop='(^|[^|])\|[[:space:]]*(head([[:space:]]|$)|grep([[:space:]]+[^|[:space:]]+)*[[:space:]]+(-[a-zA-Z]*[qml]|--(quiet|silent|max-count|files-with-matches)))'
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
    find "$top/scripts" "$top/tests" -type f \( -name '*.sh' -o -name '*.sbatch' \) -print0
    [ -f "$top/.ci/run" ] && printf '%s\0' "$top/.ci/run"
)
bad=0
for f in "${files[@]}"; do
    while IFS= read -r hit; do
        echo "${f#"$top/"}:$hit"
        bad=$((bad + 1))
    done < <(grep -nE "$stop" "$f" | grep -vE '^[0-9]+:[[:space:]]*#' || true)
done
if [ "$bad" -gt 0 ]; then
    echo "check-pipes: $bad pipeline(s) end in a reader that stops early; under pipefail the writer may die of SIGPIPE (status 141): use sed -n 1,Np or grep PATTERN >/dev/null" >&2
    exit 1
fi
echo "check-pipes: ${#files[@]} shell scripts, no pipeline into head or grep -q/-m/-l"
