#!/usr/bin/env python3
"""One home per figure: a measured percentage or ratio is stated in one document only.

usage: check-figures.py [TOP]

A figure is a percentage or ratio with a decimal point ("92.39 %", "87.5%", "1.28x").
Whole numbers ("1 %", "2x") are settings as often as figures and are not checked.

Two rules (CONTRIBUTING.md; issue 44):
- README.md quotes no figure of doc/benchmarks.md or of a Markdown page under doc/results/:
  it links to the page instead.
- No figure appears in two hand-written documents: README.md, CONTRIBUTING.md, doc/*.md,
  doc/results/*.md and doc/results/*/README.md. Its home is doc/benchmarks.md for what the
  headline tables show, doc/scaling.md for the cost model's predictions, and otherwise the
  page of its run, doc/results/<run>/README.md; every other document links to the home.
  The raw outputs beside a run page (*.txt, *.json, logs) are data a page may quote from
  and are not documents here.
ALLOW below names the few figures that are settings, not measurements, with the reason.
scripts/lint/figures-coincident.txt lists the coincidences: two different measurements that
print the same digits ("FIGURE DOC DOC ... -- what each one measures" a line). Each needs
its reason after "--"; an entry fails once the documents that state the figure are no
longer exactly those it names.
Status 0: no figure repeated; 1: some; 2: TOP is not a PipeCompress tree.
"""
import glob
import os
import re
import sys

# A figure: digits, a decimal point, digits, then "%" (with or without a space) or "x"
# not followed by a letter or digit (so "0x1f" and "1.5xl" are not figures).
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)(?: ?%|x(?![\w]))")

# Figures that are settings, not measurements, and may appear in any document.
# Keep this short: each entry needs a reason.
ALLOW = {
    "0.1%": "DGC's ratio setting (dgc:ratio=0.001), named in prose wherever DGC is",
    "1.00x": "a baseline's ratio to itself: every table's reference row prints it",
}


def figures(text):
    """The figures of text, each as written (its number and its unit, spaces dropped)."""
    out = set()
    for m in FIGURE.finditer(text):
        out.add(m.group(0).replace(" ", ""))
    return out


def documents(top):
    """The hand-written documents of top, relative to it, in a stable order."""
    pats = ["README.md", "CONTRIBUTING.md", "doc/*.md", "doc/results/*.md",
            "doc/results/*/README.md"]
    out = []
    for p in pats:
        for f in sorted(glob.glob(os.path.join(top, p))):
            rel = os.path.relpath(f, top)
            if rel not in out:
                out.append(rel)
    return out


def occurrences(top, rel):
    """{figure: (line number, figure as written)} of the first occurrence in document rel,
    outside fenced code blocks: a block holds a program's output pasted as it came (a run's
    e2e.sh table, pc-model's predictions), raw data like the files beside a run page, where
    two different quantities may print the same digits."""
    out = {}
    fenced = False
    with open(os.path.join(top, rel), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced:
                continue
            for m in FIGURE.finditer(line):
                fig = m.group(0).replace(" ", "")
                out.setdefault(fig, (n, m.group(0)))
    return out


def coincident(top):
    """({figure: set of documents}, [problems]) of scripts/lint/figures-coincident.txt:
    lines "FIGURE DOC DOC ... -- reason"; a line without two documents or a reason is a
    problem (empty when the file is absent)."""
    out, problems = {}, []
    rel = os.path.join("scripts", "lint", "figures-coincident.txt")
    path = os.path.join(top, rel)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                head, sep, reason = line.partition(" -- ")
                words = head.split()
                if not sep or not reason.strip() or len(words) < 3:
                    problems.append("%s:%d: %s: a coincidence needs the figure, two or more "
                                    "documents, then \" -- \" and what each one measures"
                                    % (rel, n, line.strip()))
                    continue
                out[words[0]] = set(words[1:])
    return out, problems


def main(argv):
    top = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    readme = os.path.join(top, "README.md")
    if not os.path.isfile(readme) or not os.path.isdir(os.path.join(top, "doc")):
        print("check-figures: %s is not a PipeCompress tree (no README.md or doc/)" % top)
        return 2
    # Rule 1: README.md quotes no figure of doc/benchmarks.md or doc/results/.
    homes = {}  # figure -> the first page (relative to top) that states it
    pages = [os.path.join(top, "doc", "benchmarks.md")]
    for root, dirs, files in os.walk(os.path.join(top, "doc", "results")):
        dirs.sort()
        pages += [os.path.join(root, f) for f in sorted(files) if f.endswith(".md")]
    for page in pages:
        if not os.path.isfile(page):
            continue
        with open(page, encoding="utf-8") as f:
            for fig in figures(f.read()):
                homes.setdefault(fig, os.path.relpath(page, top))
    bad = 0
    quoted = set()  # figures README.md was already told about
    with open(readme, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            for m in FIGURE.finditer(line):
                fig = m.group(0).replace(" ", "")
                if fig in homes and fig not in ALLOW:
                    print("README.md:%d: %s is a figure of %s: link to it instead of quoting it"
                          % (n, m.group(0), homes[fig]))
                    quoted.add(fig)
                    bad += 1
    # Rule 2: no figure in two hand-written documents.
    docs = documents(top)
    where = {}  # figure -> [(document, line, as written)] in document order
    for rel in docs:
        for fig, (n, text) in occurrences(top, rel).items():
            if fig in ALLOW or (rel == "README.md" and fig in quoted):
                continue
            where.setdefault(fig, []).append((rel, n, text))
    coincidences, problems = coincident(top)
    for p in problems:
        print(p)
        bad += 1
    same = 0
    for fig in sorted(coincidences):
        now = set(rel for rel, n, text in where.get(fig, []))
        if now != coincidences[fig] and now <= coincidences[fig]:
            print("scripts/lint/figures-coincident.txt: %s is now stated in %s only: update "
                  "or remove its entry" % (fig, " ".join(sorted(now)) or "no document"))
            bad += 1
    for fig in sorted(where, key=lambda k: (where[k][0][0], where[k][0][1])):
        occ = where[fig]
        if len(occ) < 2:
            continue
        if set(rel for rel, n, text in occ) == coincidences.get(fig):
            same += 1
            continue
        first = occ[0]
        for rel, n, text in occ[1:]:
            print("%s:%d: %s is also stated in %s:%d: keep it in one document and link there"
                  % (rel, n, text, first[0], first[1]))
            bad += 1
    if bad:
        return 1
    print("check-figures: %d figures in %d documents, none in two but the %d coincidences "
          "of figures-coincident.txt; README.md quotes none of the %d figures of "
          "doc/benchmarks.md and doc/results/ (%d allowed settings)"
          % (len(where), len(docs), same, len(homes), len(ALLOW)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
