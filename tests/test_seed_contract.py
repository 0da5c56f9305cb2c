"""Every ``seed`` argument in the package is checked by the one seed validator before it is used.

The contract, enforced over the source rather than case by case: in every function of the
package that takes a ``seed``, the first read of ``seed`` is either

* a call to a checker (``check_seed``, ``set_seed``, ``seeded_generator``, or the declared-
  constraint validators ``validate_params``/``check_param``, also when ``seed`` sits in the
  dict handed to them), or
* handing it on to another function of the package that takes a ``seed``, or to the base
  class's ``__init__`` (which this same test holds to the contract), or
* storing it in an estimator's ``__init__`` (scikit-learn's convention: ``fit`` validates).

Before: ``numpy.random.default_rng(seed)``, ``int(seed)`` and ``seed + r`` read seeds first in 14
functions (the data sets, ``median_distance``, ``kmeans``, the CV folds, ``fit_mcgpds``, the
fingerprints, the GPy baselines, two guides), so ``seed=None`` drew unseeded data, ``1.5`` was
truncated to 1 and ``2**40`` was accepted; ``spectral_embedding`` took a seed it never used.
A runtime spot check follows for some of them.
"""
from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKERS = {"check_seed", "set_seed", "seeded_generator", "validate_params", "check_param"}
SKIP_DIRS = {"tests", "examples", "docs"}


def _sources():
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in SKIP_DIRS or rel.parts[0].startswith("."):
            continue
        yield rel, ast.parse(p.read_text())


def _takes_seed(fn) -> bool:
    return "seed" in [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]


def _name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


TREES = dict(_sources())
#: functions of the package that take a seed (handing a seed to one of them is allowed)
SEEDED = {fn.name for t in TREES.values() for fn in ast.walk(t)
          if isinstance(fn, ast.FunctionDef) and _takes_seed(fn) and fn.name != "__init__"}
#: local aliases of the checkers (``from ... import set_seed as _set_seed``)
ALIASES = {a.asname for t in TREES.values() for n in ast.walk(t) if isinstance(n, ast.ImportFrom)
           for a in n.names if a.asname and a.name in CHECKERS | SEEDED}


def _violations():
    out = []
    for rel, tree in TREES.items():
        classes_with_fit = {c.name: any(isinstance(b, ast.FunctionDef) and b.name == "fit" for b in c.body)
                            for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
        owner = {fn: c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for fn in c.body}
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef) or not _takes_seed(fn) or fn.name == "check_seed":
                continue
            parents = {ch: node for node in ast.walk(fn) for ch in ast.iter_child_nodes(node)}
            reads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == "seed"
                     and isinstance(n.ctx, ast.Load)]
            where = f"{rel}:{fn.lineno} {fn.name}"
            if not reads:
                out.append(f"{where}: takes a seed it never uses")
                continue
            first = min(reads, key=lambda n: (n.lineno, n.col_offset))
            node = parents[first]
            if isinstance(node, ast.keyword):
                node = parents[node]
            if isinstance(node, ast.Dict) or (isinstance(node, ast.Call) and _name(node) == "dict"):
                outer = parents.get(node)          # dict(seed=seed, ...) handed to a validator
                outer = parents.get(outer) if isinstance(outer, ast.keyword) else outer
                node = outer if isinstance(outer, ast.Call) else node
            if isinstance(node, ast.Call) and _name(node) in CHECKERS | SEEDED | ALIASES | {"__init__"}:
                continue                          # checked here, or handed on (super().__init__ included)
            if (fn.name == "__init__" and classes_with_fit.get(owner.get(fn), False)
                    and isinstance(parents[first], (ast.Tuple, ast.Assign))):
                continue                          # an estimator stores it; fit validates
            out.append(f"{where}: seed is first read at line {first.lineno} "
                       f"by {_name(node) + '()' if isinstance(node, ast.Call) else type(node).__name__}")
    return out


def test_the_lint_sees_the_package():
    assert len(SEEDED) > 30 and "simulate_tasks" in SEEDED and "kfold_indices" in SEEDED


def test_every_seed_is_checked_before_it_is_used():
    assert _violations() == []


BAD_SEEDS = [None, True, 1.5, -1, 2 ** 40, "0"]


def _spot_calls():
    from tandem.inference.datasets.manifolds import linear_views_of_curve, paired_scurve_swissroll
    from tandem.inference.distances import median_distance
    from tandem.inference.samtc.spectral import kmeans
    from tandem.inference.twin_gp.selection import kfold_indices
    Z = np.random.default_rng(0).normal(size=(30, 2))
    return {
        "paired_scurve_swissroll": lambda s: paired_scurve_swissroll(n=20, seed=s),
        "linear_views_of_curve": lambda s: linear_views_of_curve(n=20, seed=s),
        "median_distance": lambda s: median_distance(Z, max_points=10, seed=s),
        "kmeans": lambda s: kmeans(Z, 2, seed=s),
        "kfold_indices": lambda s: kfold_indices(20, 4, seed=s),
    }


@pytest.mark.parametrize("name", list(_spot_calls()))
@pytest.mark.parametrize("bad", BAD_SEEDS, ids=repr)
def test_spot_check_bad_seeds_are_refused_by_name(name, bad):
    call = _spot_calls()[name]
    call(np.int64(3))                      # a numpy integer is a seed
    with pytest.raises(ValueError, match="seed"):
        call(bad)
