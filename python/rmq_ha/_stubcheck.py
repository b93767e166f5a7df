"""Checks `_native.pyi` against the built `rmq_ha._native`: every public name and method in
one must exist in the other. Run by `make lint`; exits non-zero on any difference."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import rmq_ha._native as native

IGNORED = {"__buffer__", "__init__", "__doc__"}


def stub_names() -> dict[str, set[str]]:
    tree = ast.parse((Path(__file__).parent / "_native.pyi").read_text())
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} - IGNORED
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = set()
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = set()
    return out


def module_names() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name in dir(native):
        if name.startswith("_"):
            continue
        obj = getattr(native, name)
        if isinstance(obj, type):
            out[name] = {
                m for m in vars(obj) if not m.startswith("_") or m in {"__len__", "__getitem__"}
            } - IGNORED
        else:
            out[name] = set()
    return out


def main() -> int:
    stub, mod = stub_names(), module_names()
    problems = []
    for name in sorted(set(stub) | set(mod)):
        if name not in mod:
            problems.append(f"{name}: in the stub, not in the module")
        elif name not in stub:
            problems.append(f"{name}: in the module, not in the stub")
        else:
            for m in sorted(stub[name] - mod[name]):
                problems.append(f"{name}.{m}: in the stub, not in the module")
            for m in sorted(mod[name] - stub[name]):
                problems.append(f"{name}.{m}: in the module, not in the stub")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"stubcheck: {len(stub)} names compared, {len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
