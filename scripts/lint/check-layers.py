#!/usr/bin/python3
"""check-layers.py: the include graph against the layers of scripts/lint/layers.txt.

    scripts/lint/check-layers.py [SOURCE_DIR]

Reads scripts/lint/layers.txt (its comment gives the format): the folder of each layer in
order, the modules of each (`module pc_comm`: the module whose public header is
include/pipecompress/pc_comm.h) and their files outside src/ (cuda/pc_probe.cu). A
malformed line there is one error naming it. A file's layer is:
  - under src/: its folder's (src/LAYER/...), and a module layers.txt names must sit in the
    folder of its layer (the data and the tree agree);
  - include/pipecompress/pc_X.h: the layer of the folder that holds src/*/pc_X.c, or, for
    a header-only module, the layer that names pc_X;
  - elsewhere (cuda/, apps/): the layer that names the file or a folder above it.
Then checks every file of src/, include/pipecompress/, cuda/ and apps/:
  - it is in exactly one layer (a new file or folder must be added to layers.txt), and
    every file layers.txt names exists;
  - each of its #include "..." resolves to a file of the tree (as the compiler's -I list
    does: the including file's folder, include/, src/, cuda/) or is a header the build
    generates (layers.txt's `generated`): quoted includes are the project's, system ones
    are <...>, so one that resolves nowhere is a typo or a stale path;
  - each targets its own layer or a lower one, and only programs include the umbrella
    header;
  - a private header (NAME_impl.h, NAME_impl.cuh) is included from its own folder only:
    what other folders need goes in a public header or a documented internal one;
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
LAYERS_TXT = "scripts/lint/layers.txt"
PRIVATE = re.compile(r"\w+_impl\.(h|cuh)$")


class Config:
    """What layers.txt says: layers {token: layer} for every folder (`src/x/`), module
    (`pc_x`) and file it names; umbrella and generated (sets); worker and mpi (lists of
    paths, in order); named {path: line} of every path it names, for the existence check."""

    def __init__(self):
        self.layers, self.umbrella, self.generated = {}, set(), set()
        self.worker, self.mpi, self.named = [], [], {}


def config_error(lineno, why, line):
    sys.exit("%s:%d: %s: '%s'" % (LAYERS_TXT, lineno, why, line.strip()))


def parse_line(cfg, state, lineno, line):
    """Add one entry of layers.txt to cfg; state holds the current layer. Exits with one
    line naming the entry when it is malformed."""
    words = line.split()
    key, args = words[0], words[1:]
    path_ok = re.compile(r"[\w.-]+(/[\w.-]+)*/?")
    if key == "layer":
        if len(args) != 2 or not re.fullmatch(r"[1-9][0-9]*", args[0]) or not args[1].endswith("/"):
            config_error(lineno, "expected 'layer N FOLDER/'", line)
        if int(args[0]) != state["layer"] + 1:
            config_error(lineno, "layer %s after layer %d (layers are numbered 1, 2, ... in order)"
                         % (args[0], state["layer"]), line)
        if args[1] in cfg.layers:
            config_error(lineno, "folder %s is in two layers" % args[1], line)
        state["layer"] = int(args[0])
        cfg.layers[args[1]] = state["layer"]
        cfg.named[args[1]] = lineno
        return
    if key == "module":
        if not state["layer"]:
            config_error(lineno, "a module before the first layer", line)
        if not args or not re.fullmatch(r"pc_[a-z0-9_]+", args[0]):
            config_error(lineno, "expected 'module pc_NAME [FILE...]'", line)
    elif key not in ("umbrella", "generated", "worker", "mpi"):
        config_error(lineno, "unknown entry %s (layer, module, umbrella, generated, worker, mpi)"
                     % key, line)
    elif not args:
        config_error(lineno, "%s names nothing" % key, line)
    for a in args[1:] if key == "module" else args:
        if not path_ok.fullmatch(a) or a.startswith("/") or ".." in a.split("/"):
            config_error(lineno, "%s is not a path inside the tree" % a, line)
    if key == "module":
        for tok in args:
            if cfg.layers.get(tok, state["layer"]) != state["layer"]:
                config_error(lineno, "%s is in layers %d and %d" % (tok, cfg.layers[tok], state["layer"]), line)
            cfg.layers[tok] = state["layer"]
        for a in args[1:]:
            cfg.named[a] = lineno
        return
    if key == "generated":
        cfg.generated.update(args)
        return
    for a in args:
        cfg.named[a] = lineno
    if key == "umbrella":
        cfg.umbrella.update(args)
    else:
        (cfg.worker if key == "worker" else cfg.mpi).extend(args)


def read_config():
    """layers.txt as a Config; exits with one line on a malformed entry."""
    path = os.path.join(top, LAYERS_TXT)
    try:
        text = open(path).read()
    except OSError as e:
        sys.exit("%s: cannot read: %s" % (LAYERS_TXT, e.strerror))
    cfg, state = Config(), {"layer": 0}
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            parse_line(cfg, state, lineno, line)
    if not state["layer"]:
        sys.exit("%s: no layer" % LAYERS_TXT)
    return cfg


def read_layers():
    """{token: layer} for every folder, module and file layers.txt names."""
    return read_config().layers


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
            problems.append("%s: not in a layer's folder of %s" % (path, LAYERS_TXT))
        elif stem in layers and layers[stem] != lay:
            problems.append("%s: %s names %s in layer %d, its folder is layer %d"
                            % (path, LAYERS_TXT, stem, layers[stem], lay))
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
    problems.append("%s: in no layer of %s" % (path, LAYERS_TXT))
    return None

def includes(path, files, generated=()):
    """(line, text, target) for each #include "text" of path: target is the project file it
    resolves to as the compiler would, None for a generated header (generated), "" when it
    resolves nowhere."""
    out = []
    for lineno, line in enumerate(open(os.path.join(top, path), errors="replace"), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        inc, target = m.group(1), ""
        for cand in (os.path.normpath(os.path.join(os.path.dirname(path), inc)),
                     os.path.join("include", inc), os.path.join("src", inc), os.path.join("cuda", inc)):
            if cand in files:
                target = cand
                break
        if not target and inc in generated:
            target = None
        out.append((lineno, inc, target))
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


def check_includes(f, incs, lay, umbrella, problems):
    """The rules on f's includes (incs: includes()'s) that need no graph: each resolves, goes
    downwards or within its layer, reaches the umbrella header only from a program, and a
    private header only from its own folder."""
    for line, inc, g in incs:
        if g == "":
            problems.append('%s:%d: #include "%s" resolves to no file of the tree (looked in '
                            "its folder, include/, src/, cuda/; a header the build writes is "
                            "%s's generated)" % (f, line, inc, LAYERS_TXT))
        elif g is None:
            pass
        elif g in umbrella:
            if not f.startswith("apps/"):
                problems.append("%s includes the umbrella header %s" % (f, g))
        elif PRIVATE.search(os.path.basename(g)) and os.path.dirname(g) != os.path.dirname(f):
            problems.append('%s:%d: #include "%s": %s is private to %s/ (a *_impl.h header); '
                            "what other folders need belongs in a public or a documented "
                            "internal header" % (f, line, inc, g, os.path.dirname(g)))
        elif lay.get(f) is not None and lay.get(g) is not None and lay[g] > lay[f]:
            problems.append("%s (layer %d) includes %s (layer %d): upwards" % (f, lay[f], g, lay[g]))


def main():
    cfg = read_config()
    layers = cfg.layers
    files = project_files()
    fileset = set(files)
    problems = ["%s:%d: names %s, which is not in the tree" % (LAYERS_TXT, line, p)
                for p, line in sorted(cfg.named.items(), key=lambda kv: kv[1])
                if not os.path.exists(os.path.join(top, p))]
    incs = {f: includes(f, fileset, cfg.generated) for f in files}
    graph = {f: [g for _, _, g in incs[f] if g] for f in files}
    lay = {f: layer_of(f, layers, files, problems) for f in files if f not in cfg.umbrella}
    for f in files:
        if f not in cfg.umbrella and lay.get(f) is not None:
            check_includes(f, incs[f], lay, cfg.umbrella, problems)
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
    print("check-layers: %d files in %d layers, %d includes: all resolved, downwards or within a "
          "layer, no private header from another folder, no cycles"
          % (len(files), len(set(v for v in lay.values() if v)), edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
