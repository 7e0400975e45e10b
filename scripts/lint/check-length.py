#!/usr/bin/python3
"""check-length.py: no function longer than a screen and a half.

    scripts/lint/check-length.py [SOURCE_DIR]

Measures every function of src/, apps/ and cuda/ (C and CUDA: from the first line of its
signature to its closing brace; our style puts a function's braces alone at column 0)
and of python/ and apps/ (Python: def to its last line). A function over LIMIT lines
fails unless the comment just above it says why it must be one piece, in a sentence that
begins "One piece:"; those are the documented exceptions, listed in the summary.
Prints one line per problem and exits 1 if there is any; 0 and a summary otherwise.
"""
import ast
import os
import re
import sys

LIMIT = 100
MARK = "One piece:"
top = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))


def c_functions(path):
    """(name, first line, length, comment above) of each function of a C or CUDA file."""
    lines = open(path, errors="replace").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i] != "{":
            i += 1
            continue
        # The signature: back to the first line of it (a line at column 0 after a blank
        # line, a comment's end or a preprocessor line).
        j = i - 1
        while j > 0 and lines[j - 1].strip() and not lines[j - 1].rstrip().endswith(("*/", ";")) \
                and not lines[j - 1].startswith("#") and not lines[j - 1].startswith("}"):
            j -= 1
        m = re.search(r"\b([A-Za-z_]\w*)\s*\(", " ".join(lines[j:i]))
        k = i + 1
        while k < len(lines) and lines[k] != "}":
            k += 1
        # The comment just above the signature.
        c = j - 1
        comment = []
        if c >= 0 and lines[c].rstrip().endswith("*/"):
            while c >= 0:
                comment.insert(0, lines[c])
                if lines[c].lstrip().startswith("/*"):
                    break
                c -= 1
        if m:
            out.append((m.group(1), j + 1, k - j + 1, "\n".join(comment)))
        i = k + 1
    return out


def py_functions(path):
    src = open(path).read()
    out = []
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((n.name, n.lineno, n.end_lineno - n.lineno + 1, ast.get_docstring(n) or ""))
    return out


def main():
    problems, exceptions, count, longest = [], [], 0, (0, "")
    for d in ("src", "apps", "cuda", "python"):
        for root, _, names in os.walk(os.path.join(top, d)):
            for n in sorted(names):
                path = os.path.join(root, n)
                rel = os.path.relpath(path, top)
                if n.endswith((".c", ".cu")):
                    fns = c_functions(path)
                elif n.endswith(".py"):
                    fns = py_functions(path)
                else:
                    continue
                for name, line, length, comment in fns:
                    count += 1
                    where = "%s:%d %s" % (rel, line, name)
                    if length > LIMIT and MARK in " ".join(comment.split()):
                        exceptions.append("%s (%d lines)" % (where, length))
                    elif length > LIMIT:
                        problems.append("%s: %d lines (at most %d, or a comment above it saying "
                                        "'%s' why)" % (where, length, LIMIT, MARK))
                    elif length > longest[0]:
                        longest = (length, where)
    for p in problems:
        print("check-length: " + p)
    if problems:
        return 1
    print("check-length: %d functions, none over %d lines but the documented exceptions "
          "(the longest other: %s, %d lines); exceptions: %s"
          % (count, LIMIT, longest[1], longest[0], "; ".join(exceptions) if exceptions else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
