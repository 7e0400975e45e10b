#!/usr/bin/env python3
"""One home per figure: a measured percentage or ratio lives on its run's page.

usage: check-figures.py [TOP]

Collects every percentage or ratio with a decimal point ("92.39 %", "87.5%", "1.28x") from
doc/benchmarks.md and the Markdown pages under doc/results/, and fails (status 1) when one
of them appears verbatim in README.md, one line per figure naming the page it belongs to.
README.md links to those pages instead of quoting them (CONTRIBUTING.md; issue 44).
Whole numbers ("1 %", "2x") are settings as often as figures and are not checked.
Status 0: no figure repeated; 1: some; 2: TOP is not a PipeCompress tree.
"""
import os
import re
import sys

# A figure: digits, a decimal point, digits, then "%" (with or without a space) or "x"
# not followed by a letter or digit (so "0x1f" and "1.5xl" are not figures).
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)(?: ?%|x(?![\w]))")


def figures(text):
    """The figures of text, each as written (its number and its unit, spaces dropped)."""
    out = set()
    for m in FIGURE.finditer(text):
        out.add(m.group(0).replace(" ", ""))
    return out


def main(argv):
    top = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    readme = os.path.join(top, "README.md")
    if not os.path.isfile(readme) or not os.path.isdir(os.path.join(top, "doc")):
        print("check-figures: %s is not a PipeCompress tree (no README.md or doc/)" % top)
        return 2
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
    with open(readme, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            for m in FIGURE.finditer(line):
                fig = m.group(0).replace(" ", "")
                if fig in homes:
                    print("README.md:%d: %s is a figure of %s: link to it instead of quoting it"
                          % (n, m.group(0), homes[fig]))
                    bad += 1
    if bad:
        return 1
    print("check-figures: README.md quotes none of the %d figures of doc/benchmarks.md and "
          "doc/results/" % len(homes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
