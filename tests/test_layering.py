"""The package's import layering, checked on the source (AST) so it cannot silently rot.

Layers, bottom to top:
  leaf      tandem.inference.{numerics, validation, distances} and tandem.plots (matplotlib
            helpers) — import no other tandem module except each other;
  models    tandem.models.*  — import only models and the leaf modules;
  guides    tandem.guides.*  — import models and the leaf modules (never inference);
  inference everything else under tandem.inference — may import any layer.
Any import of tandem modules (module level or inside a function) counts for the upward
check; module-level imports form the graph that must have no cycle.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from common import ROOT

PACKAGES = {"models": "tandem.models", "guides": "tandem.guides", "inference": "tandem.inference"}
LEAVES = {"tandem.inference.numerics", "tandem.inference.validation", "tandem.inference.distances", "tandem.plots"}


def _module_files() -> dict[str, Path]:
    mods = {"tandem": ROOT / "__init__.py", "tandem.plots": ROOT / "plots.py"}
    for folder, pkg in PACKAGES.items():
        for f in (ROOT / folder).rglob("*.py"):
            rel = f.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = f
    return mods


MODULES = _module_files()


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(mod: str) -> tuple[set[str], set[str]]:
    """(all tandem modules imported anywhere, those imported at module level)."""
    path = MODULES[mod]
    tree = ast.parse(path.read_text(), str(path))
    top_nodes = set(map(id, tree.body))
    every, top = set(), set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(mod, path.name == "__init__.py", node)
            for a in node.names:
                sub = f"{base}.{a.name}"
                targets.append(sub if sub in MODULES else base)
        for t in targets:
            if t.startswith("tandem") and t in MODULES and t != mod:
                every.add(t)
                if id(node) in top_nodes:
                    top.add(t)
    return every, top


def _layer(mod: str) -> str:
    if mod in LEAVES:
        return "leaf"
    if mod == "tandem":
        return "root"
    return mod.split(".")[1]        # models / guides / inference


ALLOWED = {"leaf": {"leaf"}, "models": {"leaf", "models"}, "guides": {"leaf", "models", "guides"},
           "inference": {"leaf", "models", "guides", "inference"}, "root": {"root"}}


def test_every_package_folder_is_found():
    assert {"tandem.models.mcgpds", "tandem.guides.mcgpds", "tandem.inference.svi",
            "tandem.inference.mcgpds.bound"} <= set(MODULES)


def test_no_upward_imports():
    bad = []
    for mod in MODULES:
        every, _ = _imports(mod)
        for t in sorted(every):
            if _layer(t) not in ALLOWED[_layer(mod)]:
                bad.append(f"{mod} ({_layer(mod)}) imports {t} ({_layer(t)})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = {m: _imports(m)[1] for m in MODULES}
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in graph[m]:
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_models_and_driver_namespace_do_not_load_arviz():
    """Importing a model, or the tandem.inference namespace, leaves ArviZ unloaded (it is
    imported on first use of posterior_predictive)."""
    code = ("import sys, tandem.models.mcgpds, tandem.models.samtc, tandem.guides.mcgpds, "
            "tandem.inference; print('arviz' in sys.modules, 'tandem.inference.svi' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT.parent).stdout.split()
    assert out == ["False", "False"], out
