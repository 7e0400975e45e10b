#!/usr/bin/env bash
# scripts/lint/check-commits.sh [DIR]: warn about the commit messages of the checkout DIR
# (default: the current folder) that break CONTRIBUTING.md's rule: a subject of at most 72
# characters, then a blank line before the body. It looks at the commits being submitted:
# those since $PC_COMMIT_BASE when set, else those in @{upstream}..HEAD when the branch
# has an upstream, else the last 20. One "warning:" line per fault, then one summary line.
# A warning, not a failure: it exits 0 whatever it finds, and when DIR is no git checkout
# (a release tarball) it says so and exits 0. Only a PC_COMMIT_BASE that names no commit
# is an error (one line, status 2). Run by scripts/check.sh among the lints; it never
# fails the check.
set -uo pipefail
dir=${1:-.}
max=72
# Characters, not bytes: a subject may hold "·" or "é".
export LC_ALL=C.UTF-8

if ! command -v git >/dev/null 2>&1 || ! git -C "$dir" rev-parse --git-dir >/dev/null 2>&1; then
    echo "check-commits: $dir is not a git checkout: no commits to check"
    exit 0
fi
if ! git -C "$dir" rev-parse -q --verify HEAD >/dev/null; then
    echo "check-commits: no commits yet"
    exit 0
fi
if [ -n "${PC_COMMIT_BASE:-}" ]; then
    git -C "$dir" rev-parse -q --verify "$PC_COMMIT_BASE^{commit}" >/dev/null || {
        echo "check-commits: PC_COMMIT_BASE=$PC_COMMIT_BASE names no commit" >&2
        exit 2
    }
    range=("$PC_COMMIT_BASE..HEAD")
    what="since PC_COMMIT_BASE=$PC_COMMIT_BASE"
elif git -C "$dir" rev-parse -q --verify '@{upstream}' >/dev/null 2>&1; then
    range=('@{upstream}..HEAD')
    what="@{upstream}..HEAD"
else
    range=(-n 20 HEAD)
    what="the last 20, no upstream"
fi

n=0 long=0 joined=0
while IFS= read -r h; do
    n=$((n + 1))
    msg=$(git -C "$dir" log -1 --format=%B "$h")
    subject=$(head -n 1 <<<"$msg")
    second=$(sed -n 2p <<<"$msg")
    short=$(git -C "$dir" rev-parse --short "$h")
    if [ "${#subject}" -gt "$max" ]; then
        long=$((long + 1))
        echo "warning: $short: subject of ${#subject} characters (at most $max): ${subject:0:60}..."
    fi
    if [ -n "$second" ]; then
        joined=$((joined + 1))
        echo "warning: $short: no blank line after the subject"
    fi
done < <(git -C "$dir" rev-list "${range[@]}")

if [ $((long + joined)) = 0 ]; then
    echo "check-commits: $n commit(s) ($what): every subject at most $max characters, then a blank line"
else
    echo "check-commits: $n commit(s) ($what): $long subject(s) over $max characters, $joined without a blank line after the subject (CONTRIBUTING.md; a warning, not a failure)"
fi
exit 0
