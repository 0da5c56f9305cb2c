"""A survey of bad inputs and faults against tandem's public entry points.

Each case feeds one bad input (or one fault: a stale checkpoint, a failed write, data in
other units) to a public function and classifies what happens:

  clear    — ValueError / TypeError / FileNotFoundError whose message names the argument
             or file that was wrong;
  handled  — a correct result (checked against a reference: e.g. the same answer as on the
             data in its original units, or a warning where the issue asks for one);
  cryptic  — any other exception, or an error message that does not say what was wrong;
  silent   — a result returned where an error was due, or a wrong result.

``python tests/fault_survey.py`` prints the counts and every non-clear/handled case;
tests/test_fault_survey.py requires zero cryptic and zero silent outcomes.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyro
import pyro.distributions as dist
import torch

# FloatingPointError: the driver's 'loss became nan/inf' error, which names the loss and the step
CLEAR_TYPES = (ValueError, TypeError, FileNotFoundError, FloatingPointError)


@dataclass
class Case:
    name: str
    run: Callable[[], object]
    names: tuple = ()  # words a clear error must contain (any of them)
    ok: Callable[[object], bool] | None = None  # None: an error is due


def classify(case: Case) -> tuple[str, str]:
    pyro.clear_param_store()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = case.run()
    except CLEAR_TYPES as err:
        msg = f"{type(err).__name__}: {err}"
        if case.names and any(n.lower() in str(err).lower() for n in case.names):
            return "clear", msg
        return "cryptic", msg
    except Exception as err:  # noqa: BLE001 - the survey classifies every failure
        return "cryptic", f"{type(err).__name__}: {err}"
    if case.ok is None:
        return "silent", f"returned {type(result).__name__} where an error naming {case.names} was due"
    try:
        good = case.ok((result, caught))
    except Exception as err:  # noqa: BLE001
        return "silent", f"result check raised {type(err).__name__}: {err}"
    return ("handled", "") if good else ("silent", "wrong result")


# ----------------------------------------------------------------------------- helpers
def _tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="tandem_survey_"))


def _normal_model(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def _normal_guide(y):
    m = pyro.param("m", torch.tensor(0.0))
    s = pyro.param("s", torch.tensor(1.0), constraint=dist.constraints.positive)
    pyro.sample("mu", dist.Normal(m, s))


def _fit(y, **kw):
    from tandem.inference import fit

    kw.setdefault("num_steps", 50)
    return fit(_normal_model, _normal_guide, y, progress=False, **kw)


def _checkpoint_other_data():
    path = _tmp() / "run.ckpt"
    _fit(torch.zeros(20), checkpoint=path, num_steps=30)
    return _fit(torch.full((20,), 5.0), checkpoint=path, num_steps=30)


def _checkpoint_other_lr():
    path = _tmp() / "run.ckpt"
    _fit(torch.zeros(20), checkpoint=path, num_steps=30)
    return _fit(torch.zeros(20), checkpoint=path, num_steps=60, optim=pyro.optim.Adam({"lr": 0.5}))


def _checkpoint_file(content: bytes):
    path = _tmp() / "run.ckpt"
    path.write_bytes(content)
    return _fit(torch.zeros(20), checkpoint=path)


def _lbfgs_mc():
    from tandem.inference import LBFGS

    return _fit(torch.zeros(20), optim=LBFGS(), num_steps=3)


def _converged_rerun():
    path = _tmp() / "run.ckpt"
    first = _fit(
        torch.zeros(20), checkpoint=path, num_steps=3000, tol=1e-3, window=20, optim=pyro.optim.Adam({"lr": 0.05})
    )
    again = _fit(
        torch.zeros(20), checkpoint=path, num_steps=3000, tol=1e-3, window=20, optim=pyro.optim.Adam({"lr": 0.05})
    )
    return first, again


def _results_nan():
    from tandem.inference import Results

    r = Results("survey", [0])
    r.add("m", "rmse", float("nan"))
    return json.loads(Path(r.write(_tmp())).read_text())  # bare NaN is not JSON (strict parse below)


def _results_write_fails_keeps_old():
    from tandem.inference import Results

    out = _tmp()
    Results("survey", [0]).write(out)
    before = (out / "survey.json").read_text()
    bad = Results("survey", [0], config={"x": object()})
    try:
        bad.write(out)
    except Exception:  # noqa: BLE001 - the write may fail; the old file must survive
        pass
    return before, (out / "survey.json").read_text()


def _posterior_predictive_discrete():
    from tandem.inference import posterior_predictive

    @pyro.infer.config_enumerate
    def model(y):
        p = pyro.param("p", torch.tensor(0.5), constraint=dist.constraints.unit_interval)
        with pyro.plate("data", y.shape[0]):
            z = pyro.sample("z", dist.Bernoulli(p))
            pyro.sample("y", dist.Normal(6.0 * z, 0.5), obs=y)

    def guide(y):
        pass

    y = torch.cat([torch.zeros(30), torch.full((30,), 6.0)])
    idata = posterior_predictive(model, guide, y, num_samples=50)
    post = getattr(idata, "posterior", None)
    if post is None or "z" not in post:
        return "left out"
    z = np.asarray(post["z"]).reshape(-1, 60)
    return float((z[:, 30:].mean() - z[:, :30].mean()))  # inferred labels separate the groups


def _metric(fn, *args):
    from tandem.inference import metrics

    return getattr(metrics, fn)(*args)


def _two_tasks(seed=0):
    rng = np.random.default_rng(seed)
    c = np.array([[0.0, 0], [6, 0], [0, 6]])
    return [
        np.vstack([c[i] + rng.normal(size=(15, 2)) for i in (0, 1)]),
        np.vstack([c[i] + rng.normal(size=(15, 2)) for i in (0, 2)]),
    ]


def _samtc(**kw):
    from tandem.inference.samtc.algorithm import samtc

    tasks = kw.pop("tasks", None) or _two_tasks()
    return samtc(tasks, [2, 2], **kw)


def _curve(n=40, seed=0):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    lat = np.c_[np.cos(t), np.sin(t), np.cos(2 * t)]
    return lat @ rng.normal(size=(3, 6)), lat @ rng.normal(size=(3, 5))


def _cp(X=None, Y=None, pairs=None, **kw):
    from tandem.inference.coupled_projections.solver import CoupledProjections

    X0, Y0 = _curve()
    X = X0 if X is None else X
    Y = Y0 if Y is None else Y
    pairs = np.c_[np.arange(0, 40, 4), np.arange(0, 40, 4)] if pairs is None else pairs
    return CoupledProjections(**{"d": 2, "k": 4, **kw}).fit(X, Y, pairs)


def _nan(A):
    A = np.array(A, dtype=float)
    A[1, 1] = np.nan
    return A


def _mat_file(kind):
    from scipy.io import savemat

    d = _tmp()
    (d / "coil20").mkdir()
    f = d / "coil20" / "COIL20_32x32.mat"
    if kind == "corrupt":
        f.write_bytes(b"this is not a MAT file" * 10)
    elif kind == "empty":
        f.write_bytes(b"")
    elif kind == "truncated":
        savemat(f, {"fea": np.zeros((1440, 1024)), "gnd": np.ones((1440, 1))})
        f.write_bytes(f.read_bytes()[:5000])
    elif kind == "wrong_vars":
        savemat(f, {"something": np.zeros((3, 3))})
    from tandem.inference.datasets.coil20 import load_coil20

    return load_coil20(d)


def _oil_nan():
    from tandem.inference.datasets.oil import OIL_FILES, load_oil

    src = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    d = _tmp()
    for rel in OIL_FILES:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        text = (src / rel).read_text()
        lines = text.splitlines()
        # replace the first numeric token of the last data line by NaN
        parts = lines[-1].split()
        parts[0] = "NaN"
        lines[-1] = " ".join(parts)
        (d / rel).write_text("\n".join(lines) + "\n")
    return load_oil(d)


# McGPDS: a small simulated two-view problem
def _mcgpds_views(scale=1.0, N=40):
    from tandem.models.mcgpds import simulate

    t = torch.linspace(0, 4, N, dtype=torch.float64)
    sim = simulate(t, torch.zeros(N, dtype=torch.long), [4, 3], Q=2, M=8, seed=0)
    return [scale * sim["y_0"], scale * sim["y_1"]], t


def _mcgpds_predict(scale):
    """The user path: the McGPDS object on data in other units, predictions mapped back."""
    from tandem.inference.mcgpds import McGPDS

    views, t = _mcgpds_views(scale)
    tr, te = slice(0, 30), slice(30, 40)
    m = McGPDS(Q=2, M=8, cycles=1, var_iters=10, model_iters=10, joint_iters=30)
    m.fit([v[tr] for v in views], t[tr])
    pred = m.predict(views[0][te], t[te])
    return torch.as_tensor(pred.mean) / scale, views[1][te] / scale


def _mcgpds_scale_case(scale):
    ref, truth = _mcgpds_predict(1.0)
    got, _ = _mcgpds_predict(scale)
    return ref, got, truth


def _mcgpds_data(**kw):
    from tandem.models.mcgpds import McGPDSData

    views, t = _mcgpds_views()
    args = {"views": views, "times": t, "seq_ids": torch.zeros(40, dtype=torch.long), "Q": 2, "M": 5}
    args.update(kw)
    return McGPDSData(**args)


def _mcgpds_fit(views=None, t=None, **cfgkw):
    from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds

    v0, t0 = _mcgpds_views()
    views = v0 if views is None else views
    t = t0 if t is None else t
    cfg = McGPDSConfig(**{"Q": 2, "M": 8, "cycles": 1, "var_iters": 5, "model_iters": 5, "joint_iters": 5, **cfgkw})
    return fit_mcgpds(views, t, config=cfg, progress=False)


def _mcgpds_checkpoint_q_mismatch():
    path = _tmp() / "mcgpds.ckpt"
    from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds

    views, t = _mcgpds_views()
    small = dict(M=8, cycles=1, var_iters=5, model_iters=5, joint_iters=5)
    fit_mcgpds(views, t, config=McGPDSConfig(Q=2, **small), progress=False, checkpoint=path)
    return fit_mcgpds(views, t, config=McGPDSConfig(Q=3, **small), progress=False, checkpoint=path)


# Twin GPs
def _twin(scale=1.0, n=60, **predict_kw):
    from tandem.inference.twin_gp.predictor import TwinGP
    from tandem.models.twin_gp import simulate

    d = simulate(1, seed=0)
    X, Y, Xt = d["X_train"][:n], d["Y_train"][:n], d["X_test"][:20]
    from tandem.inference.distances import median_distance

    tgp = TwinGP(scale * X, scale * Y, rho_x=median_distance(scale * X), rho_y=median_distance(scale * Y))
    return tgp.predict(scale * Xt, method="SMTGP", alpha=0.5, **predict_kw) / scale


def _twin_scale_ok(scale):
    def check(rc):
        got, _ = rc
        ref = _twin(1.0)
        return bool(torch.isfinite(got).all()) and float((got - ref).abs().max()) < 1e-3 * float(ref.abs().max())

    return check


def _twin_stale_cache():
    from tandem.inference.twin_gp.predictor import TwinGP
    from tandem.models.twin_gp import simulate, twin_gp_model

    d = simulate(1, seed=0)
    X, Y, Xt = d["X_train"], d["Y_train"], d["X_test"]
    tgp = TwinGP(X[:50], Y[:50], rho_x=1.0, rho_y=1.0)
    xt = Xt[:5].clone()
    y = torch.zeros(5, Y.shape[1], dtype=torch.float64)
    from pyro import poutine

    def loss():
        return float(poutine.trace(poutine.condition(twin_gp_model, {"y": y})).get_trace(tgp, xt).log_prob_sum())

    loss()
    xt.copy_(xt.flip(0))  # in place, same sum and sum of squares: the cache must notice
    changed = loss()
    fresh = float(poutine.trace(poutine.condition(twin_gp_model, {"y": y})).get_trace(tgp, xt.clone()).log_prob_sum())
    return changed, fresh


def build_cases() -> list[Case]:
    y20 = torch.zeros(20)
    C = []
    # driver
    C += [
        Case("fit: checkpoint written for other data", _checkpoint_other_data, ("checkpoint", "data", "differ")),
        Case(
            "fit: checkpoint with another learning rate", _checkpoint_other_lr, ("checkpoint", "optim", "lr", "differ")
        ),
        Case("fit: empty checkpoint file", lambda: _checkpoint_file(b""), ("run.ckpt",)),
        Case("fit: truncated checkpoint file", lambda: _checkpoint_file(b"PK\x03\x04trunc"), ("run.ckpt",)),
        Case("fit: foreign checkpoint file", lambda: _checkpoint_file(b'{"not": "a checkpoint"}'), ("run.ckpt",)),
        Case("fit: L-BFGS with a Monte Carlo ELBO", _lbfgs_mc, ("LBFGS", "L-BFGS", "Monte Carlo", "deterministic")),
        Case("fit: num_steps=-1", lambda: _fit(y20, num_steps=-1), ("num_steps",)),
        Case("fit: tol='x'", lambda: _fit(y20, tol="x"), ("tol",)),
        Case("fit: tol=nan", lambda: _fit(y20, tol=float("nan")), ("tol",)),
        Case("fit: window=nan", lambda: _fit(y20, window=float("nan")), ("window",)),
        Case("fit: window=0", lambda: _fit(y20, window=0), ("window",)),
        Case("fit: checkpoint_every=-1", lambda: _fit(y20, checkpoint_every=-1), ("checkpoint_every",)),
        Case(
            "fit: converged run rerun from its checkpoint returns at once",
            _converged_rerun,
            (),
            lambda rc: rc[0][1].num_steps == rc[0][0].num_steps and rc[0][1].converged,
        ),
        Case(
            "fit: loss callable returning NaN",
            lambda: _fit(y20, loss=lambda m, g, *a: torch.tensor(float("nan"), requires_grad=True)),
            ("loss", "finite", "nan"),
        ),
    ]
    # results / metrics / predictive
    C += [
        Case(
            "Results.write: NaN metric is valid JSON (null)",
            _results_nan,
            (),
            lambda rc: rc[0]["results"][0]["values"] == [None] or rc[0]["results"][0]["mean"] is None,
        ),
        Case(
            "Results.write: a failed write keeps the previous file",
            _results_write_fails_keeps_old,
            (),
            lambda rc: rc[0][0] == rc[0][1],
        ),
        Case("metrics.rmse([], [])", lambda: _metric("rmse", [], []), ("pred", "true", "empty")),
        Case(
            "metrics.rmse shape mismatch",
            lambda: _metric("rmse", np.zeros((3, 2)), np.zeros((4, 2))),
            ("pred", "true", "shape"),
        ),
        Case(
            "metrics.msll negative variance",
            lambda: _metric("msll", np.zeros((3, 2)), -np.ones((3, 2)), np.zeros((3, 2))),
            ("var",),
        ),
        Case("metrics.clustering_accuracy empty", lambda: _metric("clustering_accuracy", [], []), ("labels", "empty")),
        Case("metrics.nmi with NaN labels", lambda: _metric("nmi", [0, 1, np.nan], [0, 1, 1]), ("labels",)),
        Case(
            "posterior_predictive: enumerated site the guide does not cover",
            _posterior_predictive_discrete,
            (),
            lambda rc: (
                rc[0] == "left out"
                and any("z" in str(w.message) for w in rc[1])
                or (isinstance(rc[0], float) and rc[0] > 0.9)
            ),
        ),
    ]
    # SAMTC
    C += [
        Case("samtc: kmm_eps=-1", lambda: _samtc(kmm_eps=-1.0), ("kmm_eps",)),
        Case("samtc: js_tau=-1", lambda: _samtc(js_tau=-1.0), ("js_tau",)),
        Case("samtc: kmm_B=0", lambda: _samtc(kmm_B=0.0), ("kmm_B",)),
        Case(
            "samtc: init_labels out of range",
            lambda: _samtc(init_labels=[np.full(30, 7), np.zeros(30, int)]),
            ("init_labels",),
        ),
        Case("samtc: NaN in a task", lambda: _samtc(tasks=[_nan(_two_tasks()[0]), _two_tasks()[1]]), ("task",)),
        Case("samtc: empty task", lambda: _samtc(tasks=[np.zeros((0, 2)), _two_tasks()[1]]), ("task",)),
        Case("samtc: unknown variant", lambda: _samtc(variant="bogus"), ("variant",)),
        Case(
            "samtc: data ×1e6 gives the same clustering",
            lambda: (_samtc(), _samtc(tasks=[1e6 * t for t in _two_tasks()])),
            (),
            lambda rc: all(
                np.array_equal(a, b) or np.array_equal(a, 1 - b) for a, b in zip(rc[0][0].labels, rc[0][1].labels)
            ),
        ),
        Case(
            "samtc fit_model: lr=-0.05",
            lambda: __import__("tandem.inference.samtc.model_fit", fromlist=["fit_model"]).fit_model(
                [torch.as_tensor(t) for t in _two_tasks()], [2, 2], lr=-0.05, num_steps=5
            ),
            ("lr",),
        ),
        Case(
            "samtc fit_model: num_steps=-3",
            lambda: __import__("tandem.inference.samtc.model_fit", fromlist=["fit_model"]).fit_model(
                [torch.as_tensor(t) for t in _two_tasks()], [2, 2], num_steps=-3
            ),
            ("num_steps",),
        ),
    ]
    # coupled projections
    X0, Y0 = _curve()
    C += [
        Case("coupled projections: NaN in X", lambda: _cp(X=_nan(X0)), ("X",)),
        Case(
            "coupled projections: inf in Y",
            lambda: _cp(Y=np.where(np.arange(Y0.size).reshape(Y0.shape) == 3, np.inf, Y0)),
            ("Y",),
        ),
        Case("coupled projections: fewer pairs than d", lambda: _cp(pairs=np.array([[0, 0]])), ("pairs", "d")),
        Case(
            "coupled projections: pair index out of range",
            lambda: _cp(pairs=np.array([[0, 0], [99, 1], [2, 2]])),
            ("pairs",),
        ),
        Case("coupled projections: d=0", lambda: _cp(d=0), ("d",)),
        Case("coupled projections: k=0", lambda: _cp(k=0), ("k",)),
        Case(
            "coupled projections: X ×1e6 gives the same matching",
            lambda: (_cp(), _cp(X=1e6 * X0)),
            (),
            lambda rc: np.array_equal(
                *(
                    __import__("tandem.inference.coupled_projections.solver", fromlist=["x"]).nearest_partner(
                        c.embedding_x, c.embedding_y
                    )
                    for c in rc[0]
                )
            ),
        ),
    ]
    # loaders
    C += [
        Case(
            "load_coil20: missing folder",
            lambda: __import__("tandem.inference.datasets.coil20", fromlist=["x"]).load_coil20(_tmp()),
            ("COIL20_32x32.mat", "coil20"),
        ),
        Case("load_coil20: corrupt .mat", lambda: _mat_file("corrupt"), ("COIL20_32x32.mat",)),
        Case("load_coil20: empty .mat", lambda: _mat_file("empty"), ("COIL20_32x32.mat",)),
        Case("load_coil20: truncated .mat", lambda: _mat_file("truncated"), ("COIL20_32x32.mat",)),
        Case("load_coil20: .mat without fea/gnd", lambda: _mat_file("wrong_vars"), ("fea",)),
        Case("load_oil: NaN in the file", _oil_nan, ("oil", "NaN", "finite")),
    ]
    # McGPDS
    C += [
        Case(
            "McGPDSData: numpy views",
            lambda: _mcgpds_data(views=[v.numpy() for v in _mcgpds_views()[0]]),
            (),
            lambda rc: isinstance(rc[0].views[0], torch.Tensor) and rc[0].views[0].dtype == torch.float64,
        ),
        Case(
            "McGPDSData: rows differ between views",
            lambda: _mcgpds_data(views=[_mcgpds_views()[0][0], _mcgpds_views()[0][1][:30]]),
            ("rows", "views"),
        ),
        Case(
            "McGPDSData: no init (defaults)",
            lambda: __import__("tandem.models.mcgpds", fromlist=["x"]).hyperparams(_mcgpds_data()),
            (),
            lambda rc: isinstance(rc[0], dict),
        ),
        Case(
            "fit_mcgpds: a constant view",
            lambda: _mcgpds_fit(views=[torch.ones(40, 4, dtype=torch.float64), _mcgpds_views()[0][1]]),
            ("constant", "view"),
        ),
        Case(
            "fit_mcgpds: one frame",
            lambda: _mcgpds_fit(views=[v[:1] for v in _mcgpds_views()[0]], t=_mcgpds_views()[1][:1]),
            ("frame", "N", "rows"),
        ),
        Case("fit_mcgpds: eps_init=-1", lambda: _mcgpds_fit(eps_init=-1.0), ("eps",)),
        Case("fit_mcgpds: beta_init=-1", lambda: _mcgpds_fit(beta_init=-1.0), ("beta",)),
        Case(
            "fit_mcgpds: Q=3 asked with a Q=2 checkpoint", _mcgpds_checkpoint_q_mismatch, ("checkpoint", "Q", "differ")
        ),
        Case(
            "McGPDS: data ×1000 predicts as in the original units",
            lambda: _mcgpds_scale_case(1000.0),
            (),
            lambda rc: float((rc[0][0] - rc[0][1]).abs().max()) < 0.05 * float(rc[0][2].std()),
        ),
        Case(
            "McGPDS: data ×1e-3 predicts as in the original units",
            lambda: _mcgpds_scale_case(1e-3),
            (),
            lambda rc: float((rc[0][0] - rc[0][1]).abs().max()) < 0.05 * float(rc[0][2].std()),
        ),
    ]
    # twin GPs
    C += [
        Case("TwinGP: data ×1e-6", lambda: _twin(1e-6), (), _twin_scale_ok(1e-6)),
        Case("TwinGP: data ×255", lambda: _twin(255.0), (), _twin_scale_ok(255.0)),
        Case(
            "TwinGP: iteration cap reached is reported",
            lambda: _twin(1.0, max_iter=1),
            (),
            lambda rc: any("iteration" in str(w.message).lower() for w in rc[1]),
        ),
        Case("TwinGP: max_iter=-1", lambda: _twin(1.0, max_iter=-1), ("max_iter",)),
        Case(
            "TwinGP: empty test set",
            lambda: (
                __import__("tandem.inference.twin_gp.predictor", fromlist=["x"])
                .TwinGP(torch.randn(10, 2, dtype=torch.float64), torch.randn(10, 2, dtype=torch.float64), 1.0, 1.0)
                .predict(torch.zeros(0, 2, dtype=torch.float64))
            ),
            ("Xt", "test"),
        ),
        Case(
            "twin_gp_model: in-place change of Xt is noticed",
            _twin_stale_cache,
            (),
            lambda rc: abs(rc[0][0] - rc[0][1]) < 1e-9 * max(1.0, abs(rc[0][1])),
        ),
    ]
    C += contract_cases()
    return C


def _not_fitted(call):
    """A method called before fit: clear only if the error names the missing fit."""
    def run():
        try:
            return call()
        except AttributeError as err:   # an AttributeError on internals is the cryptic case
            if isinstance(err, ValueError):
                raise
            raise RuntimeError(f"AttributeError: {err}") from None
    return run


def _tiny_mcgpds(**kw):
    from tandem.inference.mcgpds import McGPDS
    return McGPDS(Q=2, M=4, cycles=1, var_iters=2, model_iters=2, joint_iters=2, **kw)


def _mcgpds_seq_fit(ids, times=None):
    r = np.random.default_rng(0)
    Y = [r.normal(size=(12, 3)), r.normal(size=(12, 2))]
    return _tiny_mcgpds().fit(Y, times=times, sequence_ids=ids)


def contract_cases() -> list:
    """Issue 18's classes: counts and seeds, config dataclasses, calls in the wrong order,
    sequence labels and frame order, weight matrices, callable losses, devices."""
    from tandem.inference.coupled_projections import CoupledProjections
    from tandem.inference.mcgpds import McGPDS
    from tandem.inference.mcgpds import stochastic as st
    from tandem.inference.samtc import SAMTC
    from tandem.inference.twin_gp import TwinGPRegressor
    C = []
    for kw in (dict(cycles=-2), dict(joint_iters=-1), dict(seed=0.7), dict(var_iters=2.5), dict(J=0),
               dict(tol=float("nan")), dict(mapping_kernel="rbf"), dict(unknown_option=1)):
        (name,) = kw
        C.append(Case(f"McGPDS({name}={kw[name]!r})", lambda kw=kw: McGPDS(**kw), (name,)))
    for kw in (dict(lr=-0.1), dict(lr_final=0), dict(lr=float("nan")), dict(batch=0), dict(num_steps=1.5),
               dict(window=-3)):
        (name,) = kw
        C.append(Case(f"StochasticConfig({name}={kw[name]!r})", lambda kw=kw: st.StochasticConfig(**kw), (name,)))
    for kw in (dict(k_src=-1), dict(seed=-1), dict(kmm_eps=1.5), dict(variant="x"), dict(bogus=2)):
        (name,) = kw
        C.append(Case(f"SAMTC({name}={kw[name]!r})", lambda kw=kw: SAMTC([2, 2], **kw), (name,)))
    for kw in (dict(t=float("nan")), dict(t=-float("inf")), dict(d=0), dict(k=2.5), dict(ridge=-1.0)):
        (name,) = kw
        C.append(Case(f"CoupledProjections({name}={kw[name]!r})", lambda kw=kw: CoupledProjections(**kw), (name,)))
    for kw in (dict(folds=1), dict(seed=0.5), dict(ensemble_se=float("inf")), dict(metric=3)):
        (name,) = kw
        C.append(Case(f"TwinGPRegressor({name}={kw[name]!r})", lambda kw=kw: TwinGPRegressor(**kw), (name,)))
    # calls in the wrong order
    sm = st.StochasticMcGPDS
    C += [
        Case("StochasticMcGPDS.elbo before fit", _not_fitted(lambda: sm().elbo()), ("fit",)),
        Case("StochasticMcGPDS.latents before fit", _not_fitted(lambda: sm().latents()), ("fit",)),
        Case("StochasticMcGPDS.to_fitted before fit", _not_fitted(lambda: sm().to_fitted()), ("fit",)),
        Case("CoupledProjections.transform_x before fit",
             _not_fitted(lambda: CoupledProjections().transform_x(np.zeros((2, 2)))), ("fit",)),
        Case("CoupledProjections.objective before fit", _not_fitted(lambda: CoupledProjections().objective()),
             ("fit",)),
        Case("McGPDS.predict before fit", _not_fitted(lambda: McGPDS().predict(np.zeros((2, 2)))), ("fit",)),
        Case("TwinGPRegressor.predict before fit", _not_fitted(lambda: TwinGPRegressor().predict(np.zeros((2, 2)))),
             ("fit",)),
    ]
    # sequence labels and frame order
    C += [
        Case("McGPDS: NaN sequence id", lambda: _mcgpds_seq_fit([0.0] * 6 + [float("nan")] * 6), ("sequence_ids",)),
        Case("McGPDS: string sequence ids fit", lambda: _mcgpds_seq_fit(["a"] * 6 + ["b"] * 6), (),
             lambda rc: rc[0].fitted_.data.blocks is not None),
        Case("McGPDS: fractional ids are two sequences", lambda: __import__(
            "tandem.inference.validation", fromlist=["x"]).sequence_labels([0.2] * 3 + [0.7] * 3, 6), (),
             lambda rc: rc[0].tolist() == [0, 0, 0, 1, 1, 1]),
        Case("McGPDS: frames in reversed time order", lambda: _mcgpds_seq_fit(None, np.arange(12.0)[::-1].copy()),
             ("time order",)),
    ]
    # weight matrices
    X = np.random.default_rng(0).normal(size=(10, 3))
    pairs = np.array([[0, 0], [3, 3], [7, 7]])
    neg = np.ones((10, 10)) - np.eye(10)
    neg[0, 1] = neg[1, 0] = -1.0
    asym = np.ones((10, 10)) - np.eye(10)
    asym[0, 1] = 3.0
    C += [
        Case("CoupledProjections: negative Sx weights", lambda: CoupledProjections(d=1).fit(X, X, pairs, Sx=neg),
             ("Sx",)),
        Case("CoupledProjections: non-symmetric Sx", lambda: CoupledProjections(d=1).fit(X, X, pairs, Sx=asym),
             ("Sx",)),
    ]
    # callable losses and devices
    C.append(Case("fit(loss=lambda *a: 1.0)", lambda: _fit(torch.zeros(3), loss=lambda *a: 1.0), ("loss",)))
    if not torch.cuda.is_available():
        C += [
            Case("TwinGPRegressor(device='cuda') without CUDA", lambda: TwinGPRegressor(device="cuda"), ("CUDA",)),
            Case("whiten(cp, device='cuda') without CUDA", lambda: __import__(
                "tandem.models.coupled_projections", fromlist=["x"]).whiten(
                CoupledProjections(d=1).fit(X, X, pairs), device="cuda"), ("CUDA",)),
        ]
    return C


def _reversed_times_cases() -> list:
    """Frames out of time order, at every entry point that takes times (all refuse)."""
    from tandem.inference.mcgpds import fit as mf
    from tandem.inference.mcgpds import stochastic as st
    from tandem.models.mcgpds import McGPDSData
    r = np.random.default_rng(0)
    Y = [r.normal(size=(12, 3)), r.normal(size=(12, 2))]
    rev = np.arange(12.0)[::-1].copy()
    cfg = mf.McGPDSConfig(Q=2, M=4, cycles=1, var_iters=2, model_iters=2, joint_iters=2)
    sm = st.StochasticMcGPDS(config=st.StochasticConfig(Q=2, M=4, window=6, batch=1, num_steps=2, local_iters=2))
    return [
        Case("McGPDSData: times reversed", lambda: McGPDSData(Y, rev, np.zeros(12, int), 2, 4, 1), ("time order",)),
        Case("fit_mcgpds: times reversed", lambda: mf.fit_mcgpds(Y, rev, config=cfg, progress=False),
             ("time order",)),
        Case("StochasticMcGPDS.prepare: times reversed", lambda: sm.prepare(Y, rev), ("time order",)),
        Case("McGPDS.predict: t_test reversed", lambda: _tiny_mcgpds().fit(Y).predict(Y[0][:4], rev[:4]),
             ("t_test",)),
        Case("predict_view: t_test reversed", lambda: mf.predict_view(
            mf.fit_mcgpds(Y, np.arange(12.0), config=cfg, progress=False), Y[0][:4], rev[:4]), ("t_test",)),
    ]


def input_contract_cases(names=None) -> list:
    """Issue 18's generic input sweep (``tests/input_sweep.py``): every array argument of every
    public method of the five estimators × every class of bad input (NaN, ±inf, rank, empty,
    zero-length axis, mismatched lengths, object/str/complex/bool, lists, sparse, float32/int,
    non-contiguous, requires_grad, meta tensors, 0-d; per kind time order, labels, indices,
    weights), plus frames out of time order at every entry point that takes times."""
    import input_sweep
    return input_sweep.sweep_cases(names) + _reversed_times_cases()


def file_loader_cases() -> list:
    """Every file loader × every broken file (``tests/file_faults.py``): missing, folder, empty,
    truncated, random bytes, text, code-running pickles (raw and torch zip), foreign zip and
    torch files, unreadable."""
    import file_faults
    return file_faults.cases()


def survey(cases=None) -> dict:
    cases = build_cases() if cases is None else cases
    out = {"clear": [], "handled": [], "cryptic": [], "silent": []}
    for c in cases:
        kind, msg = classify(c)
        out[kind].append((c.name, msg))
    return out


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    warnings.simplefilter("ignore")
    # python fault_survey.py [all|contract|inputs|files]
    sections = {"all": build_cases, "contract": contract_cases, "inputs": input_contract_cases,
                "files": file_loader_cases}
    res = survey(sections[sys.argv[1] if len(sys.argv) > 1 else "all"]())
    print("  ".join(f"{k}: {len(v)}" for k, v in res.items()), f"(of {sum(map(len, res.values()))})")
    for kind in ("cryptic", "silent"):
        for name, msg in res[kind]:
            print(f"[{kind}] {name}: {msg[:200]}")
    sys.exit(0)
