#!/usr/bin/python3
"""check-calls.py: the calls between the library's files against its layers.

    scripts/lint/check-calls.py [SOURCE_DIR]

The include graph (check-layers.py) cannot see calls: two .c files of one layer may call
each other through the prototypes of a shared private header. This reads every .c file
under src/, finds the functions and data each defines with external linkage, and the
identifiers each uses that another file defines, and fails on
  - a call (or a reference: an ops table, a variable) from a file into a layer above its
    own (the layers are check-layers.py's, read from scripts/lint/layers.txt);
  - a call between the worker's files against their order: layers.txt's `worker` lines
    list them, top to bottom, and a file may call only those after it;
  - a cycle: files that reach themselves through calls, anywhere in src/.
Comments and string literals are ignored; static functions are local to their file and
inline functions of a header belong to the header (check-layers.py holds its includes).
Prints one line per problem and exits 1 if there is any; 0 and a summary otherwise.
"""
import importlib.util
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("check_layers", os.path.join(here, "check-layers.py"))
layers_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layers_mod)
top = layers_mod.top

# A definition with external linkage at column 0: a function (its parameter list, then its
# body) or an initialised object. Our style (clang-format) keeps both at column 0 and every
# statement indented.
FUNC = re.compile(r"^(?!static\b|typedef\b|extern\b|struct\b|enum\b|union\b)"
                  r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(([^;{}]*?)\)\s*\{", re.M | re.S)
DATA = re.compile(r"^(?!static\b|typedef\b|extern\b)(?:const\s+)?[A-Za-z_]\w*[\s\*]+"
                  r"(?:const\s+)?([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*=", re.M)


def strip(src):
    """src with comments, string and character literals blanked (newlines kept)."""
    pat = r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'"
    return re.sub(pat, lambda m: re.sub(r"[^\n]", " ", m.group(0)), src, flags=re.S)


def main():
    cfg = layers_mod.read_config()
    layers = cfg.layers
    files = layers_mod.project_files()
    problems = []
    csrc = [f for f in files if f.startswith("src/") and f.endswith(".c")]
    text = {f: strip(open(os.path.join(top, f), errors="replace").read()) for f in csrc}
    lay = {f: layers_mod.layer_of(f, layers, files, problems) for f in csrc}
    defs = {}
    for f in csrc:
        for rx in (FUNC, DATA):
            for m in rx.finditer(text[f]):
                name = m.group(1)
                if name in ("if", "for", "while", "switch", "return", "sizeof"):
                    continue
                if name in defs and defs[name] != f:
                    problems.append("%s and %s both define %s" % (defs[name], f, name))
                defs.setdefault(name, f)
    calls = {f: {} for f in csrc}  # f -> {g: [names]}
    for f in csrc:
        for m in re.finditer(r"\b[A-Za-z_]\w*\b", text[f]):
            g = defs.get(m.group(0))
            if g and g != f and m.group(0) not in calls[f].setdefault(g, []):
                calls[f][g].append(m.group(0))
        calls[f] = {g: v for g, v in calls[f].items() if v}
    order = cfg.worker
    rank = {}
    for i, name in enumerate(order):
        if name not in text:
            problems.append("%s's worker order names %s: no such .c file in src/" % (layers_mod.LAYERS_TXT, name))
        elif name in rank:
            problems.append("%s's worker order names %s twice" % (layers_mod.LAYERS_TXT, name))
        else:
            rank[name] = i
    for f in csrc:
        for g, names in sorted(calls[f].items()):
            what = ", ".join(sorted(names))
            if lay.get(f) is not None and lay.get(g) is not None and lay[g] > lay[f]:
                problems.append("%s (layer %d) calls %s (layer %d): upwards: %s" % (f, lay[f], g, lay[g], what))
            if f in rank and g in rank and rank[g] < rank[f]:
                problems.append("%s calls %s, above it in the worker's order: %s" % (f, g, what))
    problems += ["call cycle: " + c for c in layers_mod.find_cycles(csrc, calls)]
    for p in problems:
        print("check-calls: " + p)
    if problems:
        return 1
    edges = sum(len(v) for v in calls.values())
    print("check-calls: %d files, %d file-to-file call edges: all downwards or within a layer, "
          "the worker's %d files in order, no cycles" % (len(csrc), edges, len(order)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
