#!/usr/bin/env python3
"""Fails when nn-core's top-level modules import each other in a circle.

Each file's `crate::...`/`super::...` paths (outside comments, test modules and the
`*_tests.rs` files test modules include by `#[path]`) are
resolved to the file that defines them and folded to nn-core's top-level modules
(`backend`, `dtype`, `ops`, `tensor`, ...). The one circle allowed is tensor <-> autograd:
a tensor holds its graph node, and the graph is made of tensors.

It then checks the same graph file by file: no circle among nn-core's files, except inside
tensor/ + autograd/ (folded into one node, the allowed circle above). A `mod.rs` (or
`lib.rs`) naming its own submodules (`mod x;`, `x::f`, `self::x`, re-exports) is not an
edge: a module and its children are one room with doors, and a child reaching its parent
(`super::T`) is the edge that counts. So a circle here is always between siblings or
cousins, such as two files of `backend/gpu/` that each import the other.
The scan reads paths, not method calls: an inherent method defined in another file (the
`impl Ctx` blocks of `backend/gpu/`) is invisible to it, so such methods live in the file
layered above the ones they call (see `backend/gpu/mod.rs`'s layering).

It also fails when the GPU backend (`backend/gpu/`) reaches into the CPU backend other than
through `backend/host.rs` (any `cpu::` path, or `cpu` named in a `use`, outside comments), or
when one of its files (Rust or WGSL) is longer than 600 lines.
"""
import os
import re
import sys

ALLOWED = [{"autograd", "tensor"}]
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nn-core", "src")
GPU = os.path.join(SRC, "backend", "gpu")
MAX_LINES = 600


def gpu_rules():
    """Problems with the GPU backend's files: imports from `cpu`, files over MAX_LINES."""
    problems = []
    for root, _, names in os.walk(GPU):
        for f in sorted(names):
            path = os.path.join(root, f)
            rel = os.path.relpath(path, os.path.join(SRC, "..", ".."))
            text = open(path).read()
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            if lines > MAX_LINES:
                problems.append(f"{rel}: {lines} lines (at most {MAX_LINES} in the GPU backend; split it)")
            if not f.endswith(".rs"):
                continue
            code = re.sub(r"//.*", "", text)
            uses = [m.group(0) for m in re.finditer(r"\buse\s[^;]*;", code)]
            if re.search(r"\bcpu\s*::", code) or any(re.search(r"\bcpu\b", u) for u in uses):
                problems.append(f"{rel}: uses the CPU backend directly (go through backend/host.rs)")
    return problems


def modpath(p):
    parts = p[:-3].split("/")
    return parts[:-1] if parts[-1] in ("mod", "lib") else parts


def source_files():
    """nn-core's files outside tests: path relative to src -> code without comments."""
    files = {}
    for root, _, names in os.walk(SRC):
        for f in names:
            if f.endswith(".rs") and f != "tests.rs" and not f.endswith("_tests.rs"):
                p = os.path.relpath(os.path.join(root, f), SRC)
                text = open(os.path.join(root, f)).read().split("#[cfg(test)]\nmod tests")[0]
                files[p] = re.sub(r"//.*", "", text)
    return files


def resolver(files):
    """A function from a module path (`["backend", "gpu", "Ctx"]`) to the file of its
    longest prefix that is a module, or None."""
    mods = {tuple(modpath(p)): p for p in files}

    def resolve(parts):
        for n in range(len(parts), 0, -1):
            if tuple(parts[:n]) in mods:
                return mods[tuple(parts[:n])]
        return None

    return resolve


def file_edges(files):
    """File -> files it imports (tensor/ and autograd/ folded into one node)."""
    resolve = resolver(files)

    def node(p):
        return "tensor+autograd" if p.split("/")[0].removesuffix(".rs") in ("tensor", "autograd") else p

    edges = {}
    for p, s in files.items():
        me = modpath(p)
        children = set(re.findall(r"\bmod\s+(\w+)\s*;", s))
        paths = []
        for m in re.finditer(r"(?<![\w:])(crate|super|self|\w+)((?:::\w+)+)", s):
            if m.group(1) in ("crate", "super", "self") or m.group(1) in children:
                paths.append((m.group(1), m.group(2).split("::")[1:]))
        for m in re.finditer(r"use (crate|super|self)::\{([^}]*)\}", s):
            paths += [(m.group(1), i.strip().split(" ")[0].split("::")) for i in m.group(2).split(",") if i.strip()]
        parent = p.endswith(("mod.rs", "lib.rs"))
        here = os.path.dirname(p)
        deps = set()
        for root, rest in paths:
            parts = {"crate": [], "super": me[:-1], "self": me}.get(root, me + [root]) + rest
            while "super" in parts:
                i = parts.index("super")
                parts = parts[: i - 1] + parts[i + 1 :]
            r = resolve(parts)
            own = parent and (here == "" or r is not None and r.startswith(here + "/"))
            if r and node(r) != node(p) and not own:
                deps.add(node(r))
        edges.setdefault(node(p), set()).update(deps)
    return edges


def circles(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in list(edges):
        if v not in index:
            visit(v)
    return comps


def main():
    files = source_files()
    resolve = resolver(files)

    edges = {}
    for p, s in files.items():
        me = modpath(p)
        here = me if p.endswith("mod.rs") else me[:-1]
        deps = set()
        paths = [(m.group(1), m.group(2).split("::")[1:]) for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", s)]
        for m in re.finditer(r"use (crate|super)::\{([^}]*)\}", s):
            paths += [(m.group(1), item.strip().split(" ")[0].split("::")) for item in m.group(2).split(",") if item.strip()]
        for root, rest in paths:
            parts = ([] if root == "crate" else (here[:-1] if p.endswith("mod.rs") else here)) + rest
            while "super" in parts:
                i = parts.index("super")
                parts = parts[: i - 1] + parts[i + 1 :]
            r = resolve(parts)
            if r and r != p:
                deps.add(r)
        top = p.split("/")[0].removesuffix(".rs")
        for d in deps:
            other = d.split("/")[0].removesuffix(".rs")
            if other != top:
                edges.setdefault(top, set()).add(other)

    comps = circles(edges)
    bad = [c for c in comps if c not in ALLOWED]
    for c in bad:
        print("import circle among nn-core modules:", " <-> ".join(sorted(c)))
        for a in sorted(c):
            print(f"  {a} imports {sorted(edges[a] & c)}")
    fedges = file_edges(files)
    fbad = circles(fedges)
    for c in fbad:
        print("import circle among nn-core files:", " <-> ".join(sorted(c)))
        for a in sorted(c):
            print(f"  {a} imports {sorted(fedges[a] & c)}")
    gpu = gpu_rules()
    for p in gpu:
        print(p)
    if bad or fbad or gpu:
        sys.exit(1)
    print(f"nn-core: no import circle among {len(set(edges) | {d for ds in edges.values() for d in ds})} modules (tensor <-> autograd allowed)")
    print(f"nn-core: no import circle among {len(fedges)} files (tensor/ and autograd/ folded into one)")
    print(f"nn-core: the GPU backend reaches the CPU backend only through backend/host.rs; no file over {MAX_LINES} lines")


main()
