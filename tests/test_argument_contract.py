"""Seeds, counts, devices and real-valued settings are checked by their one validator before use.

The contract, enforced over the source rather than case by case: in every function of the
package that takes a ``seed`` (and every public one that takes one of the iteration/sample
counts in :data:`COUNTS`, a ``device``, or a real-valued setting of :data:`REALS` annotated as a
real scalar), the first read of that argument is either

* a call to its kind's checker (seeds: ``check_seed``, ``set_seed``, ``seeded_generator``;
  counts: ``check_int_range``; devices: ``resolve_device``; reals: ``check_real_range``, or
  :data:`REAL_CHECKERS`, loops over it; all: the declared-constraint validators
  ``validate_params``/``check_param``, also when the value sits in the dict handed to them), or
* handing it on to another function of the package that takes that argument, or to the base
  class's ``__init__`` (which this same test holds to the contract), or
* storing it in an estimator's ``__init__`` (scikit-learn's convention: ``fit`` validates).

A ``None`` test (``if tol is not None: check_real_range(tol, ...)``) reads no value and is skipped.

Real-valued settings (:data:`REALS`, found by a survey of the float-annotated arguments of the
package's public functions): learning rates, tolerances, line-search constants, jitters and
thresholds; regularisers, weights and orders of objectives and divergences; scales, widths and
concentrations of models, kernels, guides and simulators; the data-preparation reals ``dt``,
``max_df`` and ``ratio``. Some names also denote arrays (:data:`ARRAY_TOO`: McGPDS's α_k, ε_k, λ,
β_k are tensors, or per-view "float or sequence" values in ``default_init``; ``kmm_objective``'s
``beta`` is a weight vector; ``B`` is a second point set in the distance helpers), so the rule is
the signature's: an argument is a setting where it is annotated ``float`` or ``float | None``.
So that the annotation cannot hide a setting, every other REALS name must carry it wherever a
public function takes it. Left out: ``t`` (a heat-kernel width that may be +inf, as
``CoupledProjections`` declares, which ``check_real_range`` refuses; elsewhere time stamps), names
too generic to mean a setting (``a``, ``b``, ``value``, ``step``, ``limit``, ``low``, ``high``,
``first_value``, ``max_value``, ``floor`` — the last an array or a scalar), resource budgets
(``*_mb``, ``seconds``), and McGPDS's starting values ``white_var``, ``bias_var``, ``w_scale``
(set by users through the fit configs, whose declared constraints check them).

Before: ``numpy.random.default_rng(seed)``, ``int(seed)`` and ``seed + r`` read seeds first in 14
functions (the data sets, ``median_distance``, ``kmeans``, the CV folds, ``fit_mcgpds``, the
fingerprints, the GPy baselines, two guides), so ``seed=None`` drew unseeded data, ``1.5`` was
truncated to 1 and ``2**40`` was accepted; ``spectral_embedding`` took a seed it never used.
Counts: ``num_samples=0`` divided by zero in the SAMTC model's cluster probabilities,
``max_points=1`` gave a NaN median distance, ``n_init=0`` crashed k-means with an
AttributeError, a negative ``max_iter`` ran no iteration silently. Reals: the lint found 36
first reads in 24 public functions that were not a checker (two, in the coupled-projections
``simulate``, were checks in a loop it cannot see, now direct calls), and three functions
(``objective_loops``, ``check_model_args``, ``FrameNormal``) took settings unannotated. Measured:
``rbf(rho=-1)`` gave ρ = 1's kernel and ``rho=nan`` a NaN kernel; ``whitening_constant`` and
``FrameNormal`` took σ = −1 as σ = 1, and ``FrameNormal`` read ``sigma="0.1"`` as 0.1;
``CoupledProjections.to_inference_data(lr=True)`` ran its Adam steps at lr 1 and ``lr=inf`` failed
inside the model with an unnamed "Expected parameter loc" error; ``minimize_batched`` with
``max_step`` NaN or −1 left every point unconverged at its start, and with ``c1`` NaN, −1 or inf
ran silently; ``alignment_omega(alpha_x=-1)`` built an indefinite Ω (least eigenvalue −0.025);
``select_alignment_knn(rho_y=nan)`` returned a "best" setting; ``TwinGP.value_and_grad_internal``
with β = 1 returned inf; ``initial_values(tau=nan)`` linked no slots (K = 1) and read
``link_threshold="0.1"`` as 0.1; ``seq_times(dt=nan)`` gave NaN time stamps and ``dt=-1``
decreasing ones; ``constant_columns(tol=nan)`` found no constant column, ``tol=inf`` all;
``tfidf`` kept no term for ``max_df`` NaN or −1 and all for inf; ``Blocks(ratio=nan)`` never
grouped; the McGPDS guide took ``inducing_scale`` True, ``"0.1"`` or inf, and the mean-field
guides inf. Runtime spot checks follow for some of each kind (the reals': 64 of their 70 cases
failed before).
"""
from __future__ import annotations

import ast
import functools
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
#: real-valued settings, read first by check_real_range — where the signature annotates the argument
#: as a real scalar (``float`` or ``float | None``; see :func:`_is_real_scalar`)
REALS = (
    # optimisers and solvers: learning rate, tolerances, line search, jitter, thresholds
    "lr", "tol", "gtol", "ftol", "c1", "max_step", "jitter", "growth", "support_tol", "link_threshold",
    # regularisers, weights and orders of objectives and divergences
    "lam", "lam_x", "lam_y", "ridge", "alpha", "alpha_x", "alpha_y", "beta", "gamma", "eps",
    "kmm_eps", "kmm_B", "B", "js_tau",
    # scales, widths and concentrations of models, kernels, guides and simulators
    "sigma", "tau", "widen", "noise", "noise_share", "rho", "rho_x", "rho_y", "prior_scale", "sigma_loc",
    "sigma_scale", "pi_conc", "rho_a", "rho_b", "init_scale", "inducing_scale", "scale_init", "separation",
    "near", "shift", "r_eff", "se", "ensemble_se",
    # data preparation: frame interval, document-frequency cut, block-grouping cost ratio
    "dt", "max_df", "ratio",
)
#: package validators of several named reals at once, each a loop over check_real_range
#: (:func:`test_the_real_checkers_call_check_real_range` holds them to that)
REAL_CHECKERS = {"check_hyperparameters"}
CHECKERS.update({name: {"check_real_range"} | REAL_CHECKERS | DECLARED for name in REALS})
#: names of REALS that also denote arrays or per-view values in the package, so only their
#: annotated-scalar uses are settings: McGPDS's model parameters α_k, ε_k, λ, β_k (tensors; in
#: ``default_init`` "float or sequence of float" initial values), the KMM weight vector ``beta`` of
#: ``kmm_objective``, the second point set ``B`` of the distance and solve helpers
ARRAY_TOO = {"alpha", "beta", "eps", "lam", "B"}
SKIP_DIRS = {"tests", "examples", "docs"}


def _sources():
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in SKIP_DIRS or rel.parts[0].startswith("."):
            continue
        yield rel, ast.parse(p.read_text())


def _takes(fn, arg: str) -> bool:
    return arg in [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]


def _is_real_scalar(fn, arg: str) -> bool:
    """Whether ``fn`` annotates ``arg`` as a real scalar: ``float``, ``float | None`` or
    ``Optional[float]``. The REALS names are settings only there: the same names annotated as
    tensors or arrays, or left unannotated as "float or sequence" values, are data or model
    parameters (see :data:`ARRAY_TOO`)."""
    a = next(a for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs if a.arg == arg)
    ann = ast.unparse(a.annotation).replace(" ", "") if a.annotation is not None else ""
    return ann in {"float", "float|None", "None|float", "Optional[float]"}


def _is_none_test(node, parent) -> bool:
    """``x is None`` / ``x is not None``: a test that reads no value of ``x``."""
    return (isinstance(parent, ast.Compare) and len(parent.ops) == 1
            and isinstance(parent.ops[0], (ast.Is, ast.IsNot))
            and any(isinstance(c, ast.Constant) and c.value is None for c in [parent.left, *parent.comparators])
            and node in [parent.left, *parent.comparators])


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
            if arg in REALS and not _is_real_scalar(fn, arg):
                continue      # the name is an array or a model parameter here, not a setting
            parents = {ch: node for node in ast.walk(fn) for ch in ast.iter_child_nodes(node)}
            # a None test (``if tol is not None: check_real_range(tol, ...)``) reads no value
            reads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == arg
                     and isinstance(n.ctx, ast.Load) and not _is_none_test(n, parents.get(n))]
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
    assert {"fit_model", "to_inference_data"} <= _takers("lr") and "cholesky_jitter" in _takers("jitter")


@pytest.mark.parametrize("arg", list(CHECKERS))
def test_every_seed_count_device_and_real_is_checked_before_it_is_used(arg):
    assert _violations(arg) == []


def test_a_real_setting_is_annotated_as_a_scalar_wherever_the_name_is_not_also_an_array():
    """The reals rule reads annotations; a setting name (other than :data:`ARRAY_TOO`'s) taken by a
    public function without a ``float`` annotation would escape it, so none may be."""
    loose = [f"{rel}:{fn.lineno} {fn.name}({arg})" for arg in sorted(set(REALS) - ARRAY_TOO)
             for rel, tree in TREES.items() for fn in ast.walk(tree)
             if isinstance(fn, ast.FunctionDef) and _takes(fn, arg) and not _is_real_scalar(fn, arg)
             and not (fn.name.startswith("_") and fn.name != "__init__")]
    assert loose == []


def test_the_real_checkers_call_check_real_range():
    defs = {fn.name: fn for t in TREES.values() for fn in ast.walk(t) if isinstance(fn, ast.FunctionDef)}
    for name in REAL_CHECKERS:
        calls = {_name(c) for c in ast.walk(defs[name]) if isinstance(c, ast.Call)}
        assert "check_real_range" in calls, name


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


@functools.lru_cache(maxsize=1)
def _fitted_coupled_projections():
    from tandem.inference.coupled_projections.solver import CoupledProjections
    r = np.random.default_rng(0)
    X = r.normal(size=(20, 3))
    Y = X @ r.normal(size=(3, 2)) + 0.1 * r.normal(size=(20, 2))
    return CoupledProjections(d=1, k=3).fit(X, Y, np.c_[np.arange(10), np.arange(10)])


def _real_calls():
    import torch

    from tandem.guides.mcgpds import Guide as McGPDSGuide
    from tandem.guides.mean_field import McGPDSMeanField
    from tandem.inference.coupled_projections.solver import alignment_omega, graph_laplacian, knn_heat_weights
    from tandem.inference.datasets.human_pose import constant_columns, seq_times
    from tandem.inference.datasets.text import tfidf
    from tandem.inference.samtc.model_fit import initial_values
    from tandem.inference.twin_gp.baselines import rbf
    from tandem.inference.twin_gp.optimizer import minimize_batched
    from tandem.inference.twin_gp.selection import select_alignment_knn
    from tandem.models.coupled_projections import whitening_constant
    from tandem.models.sequence_blocks import Blocks
    r = np.random.default_rng(0)
    Z = r.normal(size=(30, 2))
    T, Y = torch.as_tensor(Z), np.sin(Z[:, :1])
    quad = lambda y, idx: ((y ** 2).sum(1), 2 * y)  # noqa: E731
    y0 = torch.ones(2, 2, dtype=torch.float64)
    L = graph_laplacian(knn_heat_weights(Z, 3))
    pairs = np.c_[np.arange(5), np.arange(5)]
    tasks = [torch.as_tensor(np.r_[r.normal(0, .3, (10, 2)), r.normal(3, .3, (10, 2))]) for _ in range(2)]
    docs = ["apple banana cherry", "apple banana", "apple durian", "banana cherry"]
    mse = lambda p, t: float(((np.asarray(p) - np.asarray(t)) ** 2).mean())  # noqa: E731
    # (the argument's name, the call); before, each of these ran on some of the bad values
    # below (see the module docstring) or failed with an error that did not name the argument
    return {
        "to_inference_data": ("lr", lambda v: _fitted_coupled_projections().to_inference_data(
            num_samples=1, num_steps=1, lr=v)),
        "whitening_constant": ("sigma", lambda v: whitening_constant(10, 3, 1, v)),
        "alignment_omega": ("alpha_x", lambda v: alignment_omega(L, L, pairs, alpha_x=v)),
        "rbf": ("rho", lambda v: rbf(T, T, v)),
        "minimize_batched-c1": ("c1", lambda v: minimize_batched(quad, y0, c1=v)),
        "minimize_batched-max_step": ("max_step", lambda v: minimize_batched(quad, y0, max_step=v)),
        "select_alignment_knn": ("rho_y", lambda v: select_alignment_knn(Z, Y, [1.0], v, [3], mse)),
        "constant_columns": ("tol", lambda v: constant_columns(Z, tol=v)),
        "seq_times": ("dt", lambda v: seq_times([3, 5], dt=v)),
        "tfidf": ("max_df", lambda v: tfidf(docs, min_df=1, max_df=v)),
        "Blocks": ("ratio", lambda v: Blocks(torch.tensor([0, 0, 1, 1, 1]), ratio=v)),
        "initial_values": ("tau", lambda v: initial_values(tasks, [2, 2], tau=v)),
        "mcgpds.Guide": ("inducing_scale", lambda v: McGPDSGuide(inducing_scale=v)),
        "McGPDSMeanField": ("init_scale", lambda v: McGPDSMeanField(init_scale=v)),
    }


@pytest.mark.parametrize("name", list(_real_calls()))
@pytest.mark.parametrize("bad", [float("nan"), -1, float("inf"), True, "0.1"], ids=repr)
def test_spot_check_bad_real_settings_are_refused_by_name(name, bad):
    arg, call = _real_calls()[name]
    call(np.float64(0.5))                  # a numpy float is a real (0.5 is valid for each)
    with pytest.raises(ValueError, match=rf"^{arg}\b"):
        call(bad)
