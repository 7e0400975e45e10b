#!/usr/bin/python3
"""check-layers.py: the include graph against the layers doc/design.md lists.

    scripts/lint/check-layers.py [SOURCE_DIR]

Reads the numbered list under "## Layers" in doc/design.md: item N names, in backquotes,
the folder of layer N (`src/runtime/`, `apps/`), its modules (`pc_comm`: the module whose
public header is include/pipecompress/pc_comm.h), and any file outside src/ that belongs
to it (`cuda/pc_probe.cu`). A file's layer is:
  - under src/: its folder's (src/LAYER/...), and a module the list names must sit in the
    folder of the layer that names it (the doc and the tree agree);
  - include/pipecompress/pc_X.h: the layer of the folder that holds src/*/pc_X.c, or, for
    a header-only module, the layer that names pc_X;
  - elsewhere (cuda/, apps/): the layer that names the file or a folder above it.
Then checks every file of src/, include/pipecompress/, cuda/ and apps/:
  - it is in exactly one layer (a new file or folder must be added to the list);
  - each of its #include "..." of a project file targets its own layer or a lower one;
  - no file reaches itself through includes (no include cycles);
  - none of them but cuda/'s tests PC_HAVE_CUDA: the CUDA boundary is cuda/ and, in a
    build without CUDA, src/gpu/cuda_none.c (Makefile.am picks it), so every host file
    compiles the same in both builds.
Prints one line per problem and exits 1 if there is any; 0 and a summary otherwise.
"""
import os
import re
import sys

top = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
EXEMPT = {"include/pipecompress/pipecompress.h"}  # the umbrella header includes every module

def read_layers():
    """{token: layer} for every folder (`src/x/`), module (`pc_x`) and file the list names."""
    text = open(os.path.join(top, "doc", "design.md")).read()
    m = re.search(r"^## Layers\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        sys.exit("check-layers: doc/design.md has no '## Layers' section")
    layers = {}  # token -> layer
    current = None
    for line in m.group(1).splitlines():
        item = re.match(r"^(\d+)\. ", line)
        if item:
            current = int(item.group(1))
        elif not line.startswith("   "):
            current = None  # the list has ended
        if current is None:
            continue
        for tok in re.findall(r"`([^`]+)`", line):
            if re.fullmatch(r"pc_[a-z0-9_]+|[\w./-]+\.(c|h|cu|cuh)|[\w./-]+/", tok):
                layers.setdefault(tok, current)
    return layers

def project_files():
    out = []
    for d in ("src", "include/pipecompress", "cuda", "apps"):
        for root, _, names in os.walk(os.path.join(top, d)):
            for n in names:
                if n.endswith((".c", ".h", ".cu", ".cuh")):
                    out.append(os.path.relpath(os.path.join(root, n), top))
    return sorted(out)

def layer_of(path, layers, files, problems):
    """The layer of path (see the module's comment), or None (reported) when it has none."""
    name = os.path.basename(path)
    stem = os.path.splitext(name)[0]
    if path.startswith("src/"):
        parts = path.split("/")
        lay = layers.get("src/%s/" % parts[1]) if len(parts) > 2 else None
        if lay is None:
            problems.append("%s: not in a folder of doc/design.md's '## Layers' list" % path)
        elif stem in layers and layers[stem] != lay:
            problems.append("%s: doc/design.md names %s in layer %d, its folder is layer %d"
                            % (path, stem, layers[stem], lay))
        return lay
    if path.startswith("include/pipecompress/"):
        home = [f for f in files if f.startswith("src/") and os.path.basename(f) == stem + ".c"]
        if home:
            return layer_of(home[0], layers, files, [])
        if stem in layers:
            return layers[stem]
    if path in layers:
        return layers[path]
    for tok, lay in layers.items():
        if tok.endswith("/") and path.startswith(tok):
            return lay
    problems.append("%s: in no layer of doc/design.md's '## Layers' list" % path)
    return None

def includes(path, files):
    """Project files that path includes (resolved as the compiler would)."""
    out = []
    for line in open(os.path.join(top, path), errors="replace"):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        inc = m.group(1)
        for cand in (os.path.normpath(os.path.join(os.path.dirname(path), inc)),
                     os.path.join("include", inc), os.path.join("src", inc), os.path.join("cuda", inc)):
            if cand in files:
                out.append(cand)
                break
    return out

def find_cycles(nodes, graph):
    """Each cycle of graph (node -> its successors) as "a -> b -> a", by a depth-first search
    with colours (check-calls.py uses it too)."""
    colour = {f: 0 for f in nodes}
    stack, found = [], []

    def visit(f):
        colour[f] = 1
        stack.append(f)
        for g in sorted(graph[f]):
            if colour[g] == 1:
                found.append(" -> ".join(stack[stack.index(g):] + [g]))
            elif colour[g] == 0:
                visit(g)
        stack.pop()
        colour[f] = 2

    for f in nodes:
        if colour[f] == 0:
            visit(f)
    return found


def main():
    layers = read_layers()
    files = project_files()
    fileset = set(files)
    problems = []
    graph = {f: includes(f, fileset) for f in files}
    lay = {}
    for f in files:
        if f in EXEMPT:
            continue
        lay[f] = layer_of(f, layers, files, problems)
    for f in files:
        if f in EXEMPT or lay.get(f) is None:
            continue
        for g in graph[f]:
            if g in EXEMPT:
                if not f.startswith("apps/"):
                    problems.append("%s includes the umbrella header %s" % (f, g))
                continue
            if lay.get(g) is not None and lay[g] > lay[f]:
                problems.append("%s (layer %d) includes %s (layer %d): upwards" % (f, lay[f], g, lay[g]))
    problems += ["include cycle: " + c for c in find_cycles(files, graph)]
    for f in files:
        if not f.startswith("cuda/") and "PC_HAVE_CUDA" in open(os.path.join(top, f), errors="replace").read():
            problems.append("%s: PC_HAVE_CUDA outside the CUDA boundary (cuda/; without CUDA "
                            "src/gpu/cuda_none.c answers for it)" % f)
    for p in problems:
        print("check-layers: " + p)
    if problems:
        return 1
    edges = sum(len(v) for v in graph.values())
    print("check-layers: %d files in %d layers, %d includes: all downwards or within a layer, no cycles"
          % (len(files), len(set(v for v in lay.values() if v)), edges))
    return 0

if __name__ == "__main__":
    sys.exit(main())
