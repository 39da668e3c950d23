#!/usr/bin/env python3
"""Fails when a source file or a function of the workspace grows past its room.

- A file: at most 600 lines of code outside its tests (blank lines and comment lines, doc
  comments included, are not counted: they are the file's documentation, which a long
  trait such as `Module` needs; a `#[cfg(test)] mod tests { .. }` block at the end, and
  the `tests.rs`/`*_tests.rs` files such a block includes, are tests).
- A function: at most 150 lines from its signature to its closing brace, comments
  included (a function's length is what a reader scrolls through).

Generated code is exempt: nn-onnx's protobuf bindings (`onnx_pb.rs`). Test targets
(`tests/`, `benches/benches/`, examples' `tests/`) are not checked.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = ["nn-core", "nn-derive", "nn-layers", "nn-data", "nn-models", "nn-onnx", "nn", "nn-distributed", "examples", "benches"]
GENERATED = {"onnx_pb.rs"}
MAX_FILE = 600
MAX_FN = 150
FN = re.compile(r"^(\s*)(pub(\([a-z]+\))? )?(const )?(unsafe )?(async )?(extern \"C\" )?fn (\w+)")


def sources():
    for crate in CRATES:
        for root, dirs, names in os.walk(os.path.join(ROOT, crate)):
            rel = os.path.relpath(root, ROOT)
            parts = rel.split(os.sep)
            if "target" in parts or "tests" in parts or rel.startswith(os.path.join("benches", "benches")):
                dirs[:] = []
                continue
            for f in sorted(names):
                if f.endswith(".rs") and f not in GENERATED and f != "tests.rs" and not f.endswith("_tests.rs"):
                    yield os.path.join(root, f)


def without_tests(lines):
    """The lines before a trailing `#[cfg(test)] mod tests {` block."""
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]") and i + 1 < len(lines) and re.match(r"^(pub(\(crate\))? )?mod tests\b", lines[i + 1]):
            if lines[i + 1].rstrip().endswith("{"):
                return lines[:i]
    return lines


def code_lines(lines):
    return sum(1 for l in lines if l.strip() and not l.strip().startswith("//"))


def long_functions(lines):
    out = []
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m or line.rstrip().endswith(";"):
            continue
        indent = m.group(1)
        j = i + 1
        while j < len(lines) and not re.match(re.escape(indent) + r"\}\s*$", lines[j]):
            if re.match(re.escape(indent) + r"\S", lines[j]) and not lines[j].startswith(indent + "}") and j > i + 1:
                # A one-line body or a signature continued: stop at the next item at this depth.
                if FN.match(lines[j]) or lines[j].strip().startswith(("#[", "///", "impl", "pub ", "struct", "enum")):
                    break
            j += 1
        if j - i + 1 > MAX_FN:
            out.append((m.group(8), j - i + 1, i + 1))
    return out


def main():
    problems = []
    for path in sources():
        lines = without_tests(open(path, encoding="utf-8").read().split("\n"))
        rel = os.path.relpath(path, ROOT)
        n = code_lines(lines)
        if n > MAX_FILE:
            problems.append(f"{rel}: {n} lines of code outside its tests (at most {MAX_FILE}; split it by concern)")
        for name, length, at in long_functions(lines):
            problems.append(f"{rel}:{at}: fn {name} is {length} lines (at most {MAX_FN}; split it into named steps)")
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"workspace: no source file over {MAX_FILE} lines of code, no function over {MAX_FN} lines")


main()
