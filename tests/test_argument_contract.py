"""Seeds, counts and devices are checked by their one validator before they are used.

The contract, enforced over the source rather than case by case: in every function of the
package that takes a ``seed`` (and every public one that takes one of the iteration/sample
counts in :data:`COUNTS` or a ``device``), the first read of that argument is either

* a call to its kind's checker (seeds: ``check_seed``, ``set_seed``, ``seeded_generator``;
  counts: ``check_int_range``; devices: ``resolve_device``; all: the declared-constraint
  validators ``validate_params``/``check_param``, also when the value sits in the dict handed
  to them), or
* handing it on to another function of the package that takes a ``seed``, or to the base
  class's ``__init__`` (which this same test holds to the contract), or
* storing it in an estimator's ``__init__`` (scikit-learn's convention: ``fit`` validates).

Before: ``numpy.random.default_rng(seed)``, ``int(seed)`` and ``seed + r`` read seeds first in 14
functions (the data sets, ``median_distance``, ``kmeans``, the CV folds, ``fit_mcgpds``, the
fingerprints, the GPy baselines, two guides), so ``seed=None`` drew unseeded data, ``1.5`` was
truncated to 1 and ``2**40`` was accepted; ``spectral_embedding`` took a seed it never used.
Counts: ``num_samples=0`` divided by zero in the SAMTC model's cluster probabilities,
``max_points=1`` gave a NaN median distance, ``n_init=0`` crashed k-means with an
AttributeError, a negative ``max_iter`` ran no iteration silently. A runtime spot check follows
for some of them.
"""
from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DECLARED = {"validate_params", "check_param"}
#: argument name -> the checkers that may read it first
CHECKERS = {"seed": {"check_seed", "set_seed", "seeded_generator"} | DECLARED}
#: iteration and sample counts: integers with a lower bound, read first by check_int_range
COUNTS = ("num_steps", "num_samples", "num_particles", "max_iter", "n_init", "restarts", "repeats",
          "max_points")
CHECKERS.update({name: {"check_int_range"} | DECLARED for name in COUNTS})
#: devices: read first by resolve_device (a device type torch knows but tandem cannot run on,
#: "meta" or "xpu", a CUDA device that is absent: refused by name before any work)
CHECKERS["device"] = {"resolve_device"} | DECLARED
SKIP_DIRS = {"tests", "examples", "docs"}


def _sources():
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in SKIP_DIRS or rel.parts[0].startswith("."):
            continue
        yield rel, ast.parse(p.read_text())


def _takes(fn, arg: str) -> bool:
    return arg in [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]


def _name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


TREES = dict(_sources())


def _takers(arg: str) -> set:
    """Functions of the package that take ``arg`` (handing the value to one of them is allowed)."""
    return {fn.name for t in TREES.values() for fn in ast.walk(t)
            if isinstance(fn, ast.FunctionDef) and _takes(fn, arg) and fn.name != "__init__"}


def _aliases(names: set) -> set:
    """Local aliases of ``names`` (``from ... import set_seed as _set_seed``)."""
    return {a.asname for t in TREES.values() for n in ast.walk(t) if isinstance(n, ast.ImportFrom)
            for a in n.names if a.asname and a.name in names}


def _violations(arg: str):
    takers = _takers(arg)
    allowed = CHECKERS[arg] | takers | _aliases(CHECKERS[arg] | takers) | {"__init__"}
    out = []
    for rel, tree in TREES.items():
        classes_with_fit = {c.name: any(isinstance(b, ast.FunctionDef) and b.name == "fit" for b in c.body)
                            for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
        owner = {fn: c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for fn in c.body}
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef) or not _takes(fn, arg) or fn.name in CHECKERS[arg]:
                continue
            if arg != "seed" and fn.name.startswith("_") and fn.name != "__init__":
                continue      # counts: the public entry points (private helpers get checked values)
            parents = {ch: node for node in ast.walk(fn) for ch in ast.iter_child_nodes(node)}
            reads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == arg
                     and isinstance(n.ctx, ast.Load)]
            where = f"{rel}:{fn.lineno} {fn.name}"
            if not reads:
                out.append(f"{where}: takes {arg} and never uses it")
                continue
            first = min(reads, key=lambda n: (n.lineno, n.col_offset))
            node = parents[first]
            if isinstance(node, ast.keyword):
                node = parents[node]
            if isinstance(node, ast.Dict) or (isinstance(node, ast.Call) and _name(node) == "dict"):
                outer = parents.get(node)          # dict(seed=seed, ...) handed to a validator
                outer = parents.get(outer) if isinstance(outer, ast.keyword) else outer
                node = outer if isinstance(outer, ast.Call) else node
            if isinstance(node, ast.Call) and _name(node) in allowed:
                continue                          # checked here, or handed on (super().__init__ included)
            if (fn.name == "__init__" and classes_with_fit.get(owner.get(fn), False)
                    and isinstance(parents[first], (ast.Tuple, ast.Assign))):
                continue                          # an estimator stores it; fit validates
            out.append(f"{where}: {arg} is first read at line {first.lineno} "
                       f"by {_name(node) + '()' if isinstance(node, ast.Call) else type(node).__name__}")
    return out


def test_the_lint_sees_the_package():
    assert {"default_init", "whiten", "q_raw_init", "fit_mcgpds", "lbfgs_sharded"} <= _takers("device")
    seeded = _takers("seed")
    assert len(seeded) > 30 and "simulate_tasks" in seeded and "kfold_indices" in seeded
    assert {"minimize_batched", "kmeans", "kmm_frank_wolfe"} <= _takers("max_iter")


@pytest.mark.parametrize("arg", list(CHECKERS))
def test_every_seed_and_count_is_checked_before_it_is_used(arg):
    assert _violations(arg) == []


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


def _count_calls():
    import torch

    from tandem.inference.distances import median_distance
    from tandem.inference.samtc.kmm_step import kmm_frank_wolfe
    from tandem.inference.samtc.spectral import kmeans
    from tandem.inference.twin_gp.optimizer import minimize_batched
    Z = np.random.default_rng(0).normal(size=(30, 2))
    quad = lambda y, idx: ((y ** 2).sum(1), 2 * y)  # noqa: E731
    return {
        "max_points": lambda v: median_distance(Z, max_points=v),
        "n_init": lambda v: kmeans(Z, 2, n_init=v),
        "max_iter": lambda v: kmeans(Z, 2, max_iter=v),
        "max_iter ": lambda v: kmm_frank_wolfe(np.eye(3), np.ones(3), max_iter=v),
        "max_iter  ": lambda v: minimize_batched(quad, torch.ones(2, 2, dtype=torch.float64), max_iter=v),
    }


@pytest.mark.parametrize("name", list(_count_calls()))
@pytest.mark.parametrize("bad", [-1, 1.5, True, None, "3"], ids=repr)
def test_spot_check_bad_counts_are_refused_by_name(name, bad):
    call = _count_calls()[name]
    call(np.int64(3))                      # a numpy integer is a count
    with pytest.raises(ValueError, match=name.strip()):
        call(bad)


def test_a_median_distance_needs_two_points_and_kmeans_one_restart():
    from tandem.inference.distances import median_distance
    from tandem.inference.samtc.spectral import kmeans
    Z = np.random.default_rng(0).normal(size=(30, 2))
    with pytest.raises(ValueError, match="max_points"):
        median_distance(Z, max_points=1)   # was a NaN width
    with pytest.raises(ValueError, match="n_init"):
        kmeans(Z, 2, n_init=0)             # was an AttributeError


def _scalar_calls():
    import torch

    from tandem.inference.distances import knn
    from tandem.inference.samtc.spectral import kmeans
    from tandem.inference.twin_gp.baselines import gpr_predict, ridge_predict
    Z = np.random.default_rng(0).normal(size=(30, 2))
    T, Y = torch.as_tensor(Z), torch.as_tensor(Z[:, :1] ** 2)
    # (call, its argument's name, bad values): integers with a range, positive or non-negative reals
    return {
        "knn-k": (lambda v: knn(Z, k=v), "k", [0, 31, 1.5, True, None, "2"]),
        "kmeans-k": (lambda v: kmeans(Z, v), "k", [0, 31, 1.5, True, None, float("nan")]),
        "kmeans-tol": (lambda v: kmeans(Z, 2, tol=v), "tol", [-1, float("nan"), True, None]),
        "ridge-lam": (lambda v: ridge_predict(T, Y, T, lam=v), "lam", [-1, float("nan"), True, None, "2"]),
        "gpr-rho": (lambda v: gpr_predict(T, Y, T, v, 0.1), "rho", [0, -1, float("inf"), True, None]),
        "gpr-noise": (lambda v: gpr_predict(T, Y, T, 1.0, v), "noise", [0, -1, float("nan"), True, None]),
    }


@pytest.mark.parametrize("case", list(_scalar_calls()))
def test_spot_check_scalar_settings_of_the_baselines_are_refused_by_name(case):
    call, arg, bads = _scalar_calls()[case]
    for bad in bads:     # before: silent (k=True, tol=-1) or an opaque TypeError or Cholesky error
        with pytest.raises(ValueError, match=arg):
            call(bad)
