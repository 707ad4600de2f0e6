#!/usr/bin/env python3
"""layers_test.py - src/'s include graph points down (DESIGN.md, Modules and layers).

Reads the layer order from src/LAYERS (the one place it is written; the
root CMakeLists.txt reads the same file), maps every file under src/ to its
layer (a folder, or a file at src/'s root named on a line of its own) and
reads every `#include "..."` line. It fails, naming the file and line, on:
  - an include of a header of a higher layer;
  - a circle between layers in the include graph;
  - a file in a folder, or a file at the root, that src/LAYERS does not name;
  - an include of a header that is not under src/, or whose name is not
    unique there (headers are included by bare name);
  - a layer named twice in src/LAYERS.
Before checking src/ it checks a small made-up tree with a wrong-way include
and a circle, and fails unless both are caught, so the check cannot pass by
finding nothing.

Usage: layers_test.py [SOURCE_DIR]   (default: the repository this file is in)
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_layers(src):
    """Layer names from src/LAYERS, highest first."""
    path = os.path.join(src, "LAYERS")
    layers = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line in layers:
                raise SystemExit(f"{path}:{n}: layer '{line}' named twice")
            layers.append(line)
    return layers


def layer_of(rel, layers):
    """The layer of a path relative to src/, or None when LAYERS omits it."""
    parts = rel.split(os.sep)
    if len(parts) > 1:
        return parts[0] if parts[0] in layers else None
    stem = os.path.splitext(parts[0])[0]
    for name in (stem, stem[:-5] if stem.endswith("_impl") else stem):
        if name in layers:
            return name
    return None


def check(src):
    """Returns the list of problems found under src (empty when all holds)."""
    layers = read_layers(src)
    rank = {name: i for i, name in enumerate(reversed(layers))}  # base = 0
    problems = []
    files = {}   # path relative to src -> layer
    by_name = {}  # bare header name -> [relative paths]
    for root, _dirs, names in os.walk(src):
        for name in names:
            if not name.endswith((".c", ".h")):
                continue
            rel = os.path.relpath(os.path.join(root, name), src)
            layer = layer_of(rel, layers)
            if layer is None:
                problems.append(f"src/{rel}: in no layer of src/LAYERS")
                continue
            files[rel] = layer
            by_name.setdefault(name, []).append(rel)
    edges = {}  # (from layer, to layer) -> first "file:line" seen
    for rel, layer in sorted(files.items()):
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                hits = by_name.get(os.path.basename(inc), [])
                if len(hits) != 1:
                    what = "not found under src/" if not hits else "ambiguous: " + ", ".join(hits)
                    problems.append(f"src/{rel}:{n}: #include \"{inc}\": {what}")
                    continue
                to = files[hits[0]]
                if to == layer:
                    continue
                edges.setdefault((layer, to), f"src/{rel}:{n}")
                if rank[to] > rank[layer]:
                    problems.append(
                        f"src/{rel}:{n}: #include \"{inc}\" goes up from {layer}/ to {to}/"
                        f" (src/LAYERS: a layer includes only its own and lower layers)")
    # A circle between layers (each edge is also reported above if it goes
    # up; this names the whole circle).
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state = {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt]
                via = ", ".join(edges[(cyc[i], cyc[i + 1])] for i in range(len(cyc) - 1))
                problems.append("include circle between layers: " + " -> ".join(cyc) + f" ({via})")
            elif not state.get(nxt):
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if not state.get(node):
            visit(node, [])
    return problems


def self_test():
    """The check must catch a wrong-way include and a circle."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src")
        for sub in ("top", "low"):
            os.makedirs(os.path.join(src, sub))
        with open(os.path.join(src, "LAYERS"), "w") as f:
            f.write("# highest first\ntop\nroot\nlow\n")
        files = {
            "top/a.h": '#include "root.h"\n',
            "root.h": '#include "b.h"\n',
            "root.c": '#include "root.h"\n',
            "low/b.h": '#include "a.h"\n',  # up, two layers, and closes a circle
        }
        for rel, text in files.items():
            with open(os.path.join(src, rel), "w") as f:
                f.write(text)
        got = check(src)
        ups = [p for p in got if "goes up from low/ to top/" in p]
        circles = [p for p in got if p.startswith("include circle")]
        if not ups or not circles:
            print("layers_test self-test: the check missed a planted problem:", got)
            return 1
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here)
    if self_test():
        return 1
    problems = check(os.path.join(root, "src"))
    for p in problems:
        print(p)
    if problems:
        print(f"layers: {len(problems)} problem(s); the layer order is in src/LAYERS")
        return 1
    print("layers: every #include under src/ points down (src/LAYERS)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
