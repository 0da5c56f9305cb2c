"""A generic input-contract sweep (issue 18): every array argument of every public method of
every estimator, fed every class of bad or unusual value.

Each *target* is one call (an estimator's ``fit`` or a method of a fitted estimator) whose
array arguments are given as a flat dict ``{"views[0]": ..., "times": ...}`` of clean values
plus a ``run(flat) -> output`` that makes the call and returns something comparable (a
prediction, an ELBO, labels). Each argument has a *kind* (``data``, ``times``, ``seqids``,
``classes``, ``pairs``, ``weights``); :func:`variants` turns a clean value of that kind into
the classes of input below, each with what is required of it:

* ``error`` — a ``ValueError``/``TypeError`` whose message names the argument;
* ``equal`` — a result equal to the clean result (lists and arrays, tensors, non-contiguous
  arrays, float32 and int inputs compared with the clean call on the same values in float64);
* ``either`` — one of the two (a wrong rank that could be read unambiguously, a sparse
  matrix that could be densified): never a different result, never another exception.

Classes: NaN, ±inf, wrong rank (one more, one fewer), 0-d scalar, empty, zero-length axis,
one row short (mismatched lengths between arguments), object / str / complex / bool dtype,
python lists and tuples, pandas DataFrame (when pandas is installed), scipy.sparse,
float32 / int arrays and tensors, float64 tensors, non-contiguous arrays and tensors,
Fortran order, ``requires_grad`` tensors, tensors on the meta device; per kind also e.g.
shuffled or reversed times, string / fractional / NaN sequence labels, fractional or out of
range index pairs, negative or asymmetric weights.

:func:`sweep_cases` returns them as :class:`fault_survey.Case` objects, so
``fault_survey.survey(input_sweep.sweep_cases())`` classifies them and
``tests/test_input_contract.py`` requires every one to be clear or handled.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from fault_survey import Case

try:  # optional
    import pandas as pd
except ImportError:  # pragma: no cover - pandas is not a dependency
    pd = None


def to_numpy(x) -> np.ndarray:
    """Any output (tensor, array, list of arrays, float) as one flat float64 numpy array."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy().ravel()
    if isinstance(x, (list, tuple)):
        return np.concatenate([to_numpy(v) for v in x]) if x else np.zeros(0)
    return np.asarray(x, dtype=np.float64).ravel()


def _f32(a):
    return np.asarray(a, dtype=np.float64).astype(np.float32).astype(np.float64)


@dataclass
class Variant:
    label: str
    value: object
    expect: str                     # "error", "equal", "either"
    ref: object = None              # the clean value to compare with (None: the clean input itself)


def _float_variants(a: np.ndarray, kind: str):
    """Variants shared by every real-valued kind (``a`` is the clean float64 array)."""
    V = Variant
    nan, pinf, ninf = (a.copy() for _ in range(3))
    nan.flat[-1], pinf.flat[-1], ninf.flat[-1] = np.nan, np.inf, -np.inf
    out = [V("NaN", nan, "error"), V("+inf", pinf, "error"), V("-inf", ninf, "error"),
           V("one more axis", a[..., None], "either"), V("leading axis", a[None], "either"),
           V("0-d scalar", np.asarray(a.flat[0]), "error"), V("python scalar", float(a.flat[0]), "error"),
           V("empty", np.zeros((0,) + a.shape[1:]), "error"), V("one row short", a[:-1].copy(), "error"),
           V("object dtype", a.astype(object), "either"), V("str dtype", a.astype(str), "error"),
           V("complex dtype", a.astype(np.complex128), "either"),
           V("bool dtype", a > np.median(a), "error"),
           V("python list", a.tolist(), "equal"),
           V("tuple", tuple(tuple(r) for r in a) if a.ndim == 2 else tuple(a.tolist()), "equal"),
           V("float64 tensor", torch.as_tensor(a.copy()), "equal"),
           V("float32 array", a.astype(np.float32), "equal", _f32(a)),
           V("float32 tensor", torch.as_tensor(a.astype(np.float32)), "equal", _f32(a)),
           V("non-contiguous array", np.repeat(a, 2, axis=0)[::2], "equal"),
           V("non-contiguous tensor", torch.as_tensor(np.repeat(a, 2, axis=0))[::2], "equal"),
           V("requires_grad tensor", torch.tensor(a, requires_grad=True), "equal"),
           V("meta tensor", torch.empty(a.shape, dtype=torch.float64, device="meta"), "error"),
           V("None entries", np.where(np.arange(a.size).reshape(a.shape) == 0, None, a.astype(object)), "error")]
    masked = np.ma.masked_array(a.copy(), mask=np.zeros(a.shape, bool))
    masked.mask.flat[-1] = True
    out += [V("masked array (an entry masked)", masked, "error"),
            V("masked array (nothing masked)", np.ma.masked_array(a.copy()), "equal")]
    if a.ndim == 2:
        sparse = __import__("scipy.sparse", fromlist=["x"])
        out += [V("zero-length axis", np.zeros((a.shape[0], 0)), "error"),
                V("one dimension fewer", a[0].copy(), "either"),
                V("Fortran order", np.asfortranarray(a), "equal"),
                V("scipy.sparse matrix", sparse.csr_matrix(a), "either"),
                V("scipy.sparse csc matrix", sparse.csc_matrix(a), "either"),
                V("scipy.sparse coo array", sparse.coo_array(a), "either"),
                V("numpy.matrix", np.asmatrix(a), "either")]
        if pd is not None:
            out.append(V("pandas DataFrame", pd.DataFrame(a), "either"))
    else:
        out += [V("one dimension fewer", np.asarray(a[0]), "error")]
        if pd is not None:
            out.append(V("pandas Series", pd.Series(a), "either"))
    scale = 100.0 if kind != "pairs" else 1.0
    ints = np.round(a * scale)
    out += [V("int array", ints.astype(np.int64), "equal", ints),
            V("int tensor", torch.as_tensor(ints.astype(np.int64)), "equal", ints)]
    return out


def variants(kind: str, a) -> list:
    """Every class of bad or unusual input for a clean value ``a`` of ``kind``."""
    V = Variant
    a = np.asarray(a)
    if kind == "seqids":                       # per-frame sequence labels, any hashable (NaN refused)
        lab = np.asarray(a, dtype=np.int64)
        frac = np.where(lab == lab[0], 0.25, 0.75)
        nan = lab.astype(float)
        nan[-1] = np.nan
        return [V("NaN label", nan, "error"), V("string labels", np.array([f"s{v}" for v in lab]), "equal"),
                V("fractional labels", frac, "equal"), V("float labels", lab.astype(float), "equal"),
                V("python list", lab.tolist(), "equal"), V("int tensor", torch.as_tensor(lab), "equal"),
                V("float tensor", torch.as_tensor(lab.astype(float)), "equal"),
                V("None label", np.array([None] + lab.tolist()[1:], dtype=object), "error"),
                V("one row short", lab[:-1], "error"), V("empty", lab[:0], "error"),
                V("2-d labels", lab[:, None], "either"), V("0-d scalar", np.asarray(lab[0]), "error"),
                V("meta tensor", torch.empty(lab.shape, device="meta"), "error")]
    if kind == "classes":                      # per-point class labels (integers)
        lab = np.asarray(a, dtype=np.int64)
        nan = lab.astype(float)
        nan[0] = np.nan
        frac = lab.astype(float)
        frac[0] += 0.5
        return [V("NaN label", nan, "error"), V("fractional label", frac, "either"),
                V("float labels", lab.astype(float), "equal"), V("python list", lab.tolist(), "equal"),
                V("int tensor", torch.as_tensor(lab), "equal"), V("one row short", lab[:-1], "error"),
                V("empty", lab[:0], "error"), V("2-d labels", lab[:, None], "either"),
                V("0-d scalar", np.asarray(lab[0]), "error"), V("str dtype", lab.astype(str), "either"),
                V("meta tensor", torch.empty(lab.shape, device="meta"), "error")]
    if kind == "pairs":                        # (n, 2) integer index pairs
        p = np.asarray(a, dtype=np.int64)
        frac, neg, big = p.astype(float), p.copy(), p.copy()
        frac[1, 0] += 0.5
        neg[1, 0] = -1
        big[1, 1] = 10 ** 6
        nan = p.astype(float)
        nan[1, 0] = np.nan
        return [V("NaN index", nan, "error"), V("fractional index", frac, "error"), V("negative index", neg, "error"),
                V("index out of range", big, "error"), V("float indices", p.astype(float), "equal"),
                V("python list", p.tolist(), "equal"), V("int tensor", torch.as_tensor(p), "equal"),
                V("int32 array", p.astype(np.int32), "equal"), V("non-contiguous array", np.repeat(p, 2, axis=0)[::2],
                                                                   "equal"),
                V("empty", p[:0], "error"), V("1-d", p[:, 0].copy(), "error"), V("three columns", np.c_[p, p[:, 0]],
                                                                                  "error"),
                V("0-d scalar", np.asarray(p[0, 0]), "error"), V("bool dtype", p > 2, "error"),
                V("str dtype", p.astype(str), "error"), V("complex dtype", p.astype(complex), "either"),
                V("meta tensor", torch.empty(p.shape, dtype=torch.int64, device="meta"), "error")]
    a = np.asarray(a, dtype=np.float64)
    out = _float_variants(a, kind)
    if kind == "times":
        rev = a[::-1].copy()
        perm = np.random.default_rng(0).permutation(a.shape[0])
        out += [V("reversed order", rev, "error"), V("shuffled order", a[perm], "error")]
    if kind == "weights":
        neg, asym = a.copy(), a.copy()
        i, j = np.argwhere(a > 0)[0]
        neg[i, j] = neg[j, i] = -1.0
        asym[i, j] += 0.5
        out += [V("negative weight", neg, "error"), V("asymmetric", asym, "error"),
                V("not square", a[:, :-1].copy(), "error")]
        out = [v for v in out if v.label not in ("int array", "int tensor")]   # weights are not integers
        ints = np.round(a * 100)
        out += [V("int array", ints.astype(np.int64), "equal", ints)]
    return out


@dataclass
class Target:
    """One call with array arguments: ``clean()`` -> flat dict of clean values (each kept
    float32-exact, so a float32 input holds the same numbers), ``kinds`` name -> kind,
    ``run(flat)`` -> comparable output."""
    name: str
    clean: Callable[[], dict]
    kinds: dict
    run: Callable[[dict], object]
    alone: tuple = ()               # arguments whose row count is free (no "one row short" case)
    follows: tuple = ()             # arguments whose container type the output follows (tensor in -> tensor out)


def output_type_problem(out, tensor: bool | None) -> str | None:
    """What is wrong with the container types of an output, or None. Every array in ``out``
    (recursively through lists and tuples) must be a plain ``numpy.ndarray`` (no subclass:
    ``numpy.matrix`` broadcasts ``a[:, 0] - b[:, 0]`` to a square, a masked array carries a
    mask) or a ``torch.Tensor``; ``tensor`` True/False requires tensors / numpy arrays
    (the contract: numpy in -> numpy out, a tensor in -> a tensor out), None allows either."""
    if isinstance(out, (list, tuple)):
        return next((p for p in (output_type_problem(o, tensor) for o in out) if p), None)
    if isinstance(out, torch.Tensor):
        return "a tensor where a numpy array was due (numpy in -> numpy out)" if tensor is False else None
    if isinstance(out, np.ndarray):
        if type(out) is not np.ndarray:
            return f"a {type(out).__module__}.{type(out).__name__} where a plain numpy.ndarray was due"
        return "a numpy array where a tensor was due (a tensor in -> a tensor out)" if tensor else None
    return None


def _close(a, b, rtol=1e-6, atol=1e-8) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=False))


#: variants that are not a contract question, with the reason (target, argument prefix, label)
NOT_APPLICABLE = {
    # (a label prefix: "scipy.sparse" stands for every sparse format)
    ("SAMTC.fit", "tasks", "scipy.sparse"):
        "documented: a scipy.sparse task is text (cosine similarities, LSA), a dense one Euclidean (PCA)",
    # NaN entries of McGPDS views are missing data (masked likelihood, McGPDS.impute): a valid
    # input with its own semantics, checked against closed forms in tests/test_mcgpds_missing.py
    ("McGPDS.fit", "views", "NaN"): "NaN = a missing entry (tests/test_mcgpds_missing.py)",
    ("McGPDS.predict", "source_view_test", "NaN"): "NaN = a missing entry (tests/test_mcgpds_missing.py)",
    ("StochasticMcGPDS.fit", "views", "NaN"): "NaN = a missing entry (masked window statistics; "
                                             "tests/test_mcgpds_missing.py, the stochastic section)",
}


class _SameError:
    """The variant raised exactly the error that the clean call on the same values raises."""


def target_cases(t: Target, rtol: float = 1e-6, atol: float = 1e-8) -> list:
    """The sweep of one target as survey cases (see the module docstring)."""
    clean = t.clean()
    refs, cache = {}, {}

    def reference(key=None):
        """Output of the clean call (``key`` None) or of the call on ``refs[key]``; an
        exception is returned, not raised (the variant must then raise the same)."""
        if key not in cache:
            flat = dict(clean) if key is None else {**clean, key[0]: refs[key]}
            try:
                cache[key] = to_numpy(t.run(flat))
            except Exception as e:  # noqa: BLE001 - compared with the variant's error below
                cache[key] = e
        return cache[key]

    cases = []
    for arg, kind in t.kinds.items():
        for k, v in enumerate(variants(kind, clean[arg])):
            if v.label == "one row short" and (arg in t.alone or len(t.kinds) == 1):
                continue
            if any(v.label.startswith(lab) for (n, a, lab) in NOT_APPLICABLE
                   if (n, a) == (t.name, arg.split("[")[0])):
                continue
            key = None if v.ref is None else (arg, k)
            if key is not None:
                refs[key] = v.ref

            def run(arg=arg, v=v, key=key):
                ref = reference(key) if key is not None else None
                try:
                    return t.run({**clean, arg: v.value})
                except Exception as e:
                    if isinstance(ref, Exception) and type(e) is type(ref) and str(e) == str(ref):
                        return _SameError()
                    raise

            want_tensor = isinstance(v.value, torch.Tensor) if arg in t.follows else None

            def ok(rc, key=key, want_tensor=want_tensor):
                ref = reference(key)
                if isinstance(rc[0], _SameError):
                    return True
                if output_type_problem(rc[0], want_tensor):
                    return False
                return not isinstance(ref, Exception) and _close(rc[0], ref, rtol, atol)

            # a length mismatch between arguments may be reported under either argument
            names = ((*t.kinds, *(a.split("[")[0] for a in t.kinds)) if v.label == "one row short"
                     else (arg, arg.split("[")[0]))
            cases.append(Case(f"{t.name}: {arg} = {v.label}", run, names, None if v.expect == "error" else ok))
    return cases


# ----------------------------------------------------------------------------- targets
def _r(seed):
    return np.random.default_rng(seed)


def _mcgpds_views(seed=0, N=16):
    r = _r(seed)
    t = np.linspace(0, 1, N)
    X = np.c_[np.sin(6 * t), np.cos(4 * t)]
    return [_f32(X @ r.normal(size=(2, 3)) + 0.05 * r.normal(size=(N, 3))),
            _f32(X @ r.normal(size=(2, 2)) + 0.05 * r.normal(size=(N, 2)))]


def _tiny_mcgpds():
    from tandem.inference.mcgpds import McGPDS
    return McGPDS(Q=2, M=4, cycles=1, var_iters=2, model_iters=2, joint_iters=2)


@functools.lru_cache(maxsize=None)
def _fitted(name: str):
    """One fitted object per estimator, for the method targets."""
    from tandem.inference.coupled_projections import CoupledProjections
    from tandem.inference.twin_gp import TwinGPRegressor
    if name == "McGPDS":
        return _tiny_mcgpds().fit(_mcgpds_views(0))
    if name == "StochasticMcGPDS":
        return _stochastic().fit(*_stoch_data(0))
    if name == "TwinGPRegressor":
        return TwinGPRegressor("KLTGP", rho_x=1.0, rho_y=1.0, lam=1e-3).fit(*_tgp_data(0))
    if name == "CoupledProjections":
        X, Y, pairs = _cp_data(0)
        return CoupledProjections(d=1, k=3).fit(X, Y, pairs)
    raise KeyError(name)


def _stochastic():
    from tandem.inference.mcgpds import stochastic as st
    return st.StochasticMcGPDS(config=st.StochasticConfig(Q=2, M=4, window=8, batch=1, num_steps=2, local_iters=2))


def _stoch_data(seed):
    from tandem.inference.mcgpds import stochastic as st
    sim = st.simulate_sequences(2, 8, [3, 2], Q=2, M=4, seed=seed, chunk_frames=16)
    return [_f32(v.numpy()) for v in sim["views"]], sim["times"].numpy(), sim["seq_ids"].numpy()


def _tgp_data(seed, n=20):
    r = _r(seed)
    X = _f32(r.uniform(-1, 1, size=(n, 2)))
    return X, _f32(np.c_[np.sin(2 * X[:, 0]), X[:, 1] ** 2] + 0.01 * r.normal(size=(n, 2)))


def _samtc_data(seed):
    r = _r(seed)
    tasks = [_f32(np.r_[r.normal(0, 0.3, (12, 2)), r.normal(3, 0.3, (12, 2))]) for _ in range(2)]
    return tasks, [np.r_[np.zeros(12, int), np.ones(12, int)] for _ in range(2)]


def _cp_data(seed):
    r = _r(seed)
    t = np.linspace(0, 3, 14)
    X = _f32(np.c_[t, np.sin(t), 0.1 * r.normal(size=14)])
    Y = _f32(np.c_[np.cos(t), t, 0.1 * r.normal(size=14)] @ r.normal(size=(3, 3)))
    return X, Y, np.array([[0, 0], [4, 4], [9, 9], [13, 13]])


def targets() -> list:
    """Every public call with array arguments of the five estimators."""
    from tandem.inference.coupled_projections import CoupledProjections
    from tandem.inference.coupled_projections.solver import knn_heat_weights
    from tandem.inference.samtc import SAMTC
    from tandem.inference.twin_gp import TwinGPRegressor

    T = []
    # McGPDS
    Yt = _mcgpds_views(9)[0][:4]
    t2 = _f32(np.r_[np.linspace(0, 1, 8), np.linspace(0, 1, 8)])

    def mc_fit(f):
        m = _tiny_mcgpds().fit([f["views[0]"], f["views[1]"]], times=f["times"], sequence_ids=f["sequence_ids"])
        return m.predict(Yt, np.arange(4.0) / 8, method="paper").mean

    T.append(Target("McGPDS.fit", lambda: {"views[0]": _mcgpds_views(0)[0], "views[1]": _mcgpds_views(0)[1],
                                           "times": t2, "sequence_ids": np.r_[np.zeros(8, int), np.ones(8, int)]},
                    {"views[0]": "data", "views[1]": "data", "times": "times", "sequence_ids": "seqids"}, mc_fit))
    T.append(Target("McGPDS.predict", lambda: {"source_view_test": Yt, "t_test": np.arange(4.0)},
                    {"source_view_test": "data", "t_test": "times"},
                    lambda f: _fitted("McGPDS").predict(f["source_view_test"], f["t_test"], method="paper").mean,
                    follows=("source_view_test",)))
    # StochasticMcGPDS
    V, tt, S = _stoch_data(0)

    def st_fit(f):
        return _stochastic().fit([f["views[0]"], f["views[1]"]], f["times"], f["seq_ids"]).elbo()

    T.append(Target("StochasticMcGPDS.fit", lambda: {"views[0]": V[0], "views[1]": V[1], "times": tt, "seq_ids": S},
                    {"views[0]": "data", "views[1]": "data", "times": "times", "seq_ids": "seqids"}, st_fit))
    T.append(Target("StochasticMcGPDS.to_model_units", lambda: {"Y": V[0][:5]}, {"Y": "data"},
                    lambda f: _fitted("StochasticMcGPDS").to_model_units(f["Y"], 0), follows=("Y",)))
    # (mean and var each follow their own input's type, so no single argument decides the pair's)
    T.append(Target("StochasticMcGPDS.to_data_units", lambda: {"mean": V[1][:5], "var": np.abs(V[1][:5]) + 0.1},
                    {"mean": "data", "var": "data"},
                    lambda f: _fitted("StochasticMcGPDS").to_data_units(f["mean"], f["var"], 1)))
    # TwinGPRegressor
    Xte = _tgp_data(9)[0][:5]

    def tg_fit(f):
        return TwinGPRegressor("KLTGP", rho_x=1.0, rho_y=1.0, lam=1e-3).fit(f["X"], f["Y"]).predict(Xte)

    T.append(Target("TwinGPRegressor.fit", lambda: dict(zip("XY", _tgp_data(0))), {"X": "data", "Y": "data"}, tg_fit))
    T.append(Target("TwinGPRegressor.predict", lambda: {"Xt": Xte}, {"Xt": "data"},
                    lambda f: _fitted("TwinGPRegressor").predict(f["Xt"]), follows=("Xt",)))

    def tg_idata(f):
        d = _fitted("TwinGPRegressor").to_inference_data(f["Xt"], f["Y_true"], num_samples=3)
        return [d.posterior["y"].values, d.posterior_predictive["y"].values, d.log_likelihood["y"].values]

    T.append(Target("TwinGPRegressor.to_inference_data", lambda: {"Xt": Xte[:3], "Y_true": _tgp_data(9)[1][:3]},
                    {"Xt": "data", "Y_true": "data"}, tg_idata))
    # SAMTC
    tasks, labels = _samtc_data(0)

    def sa_fit(f):
        est = SAMTC(n_clusters=[2, 2], k_self=4, k_src=4, select="labels")
        return est.fit([f["tasks[0]"], f["tasks[1]"]], [f["labels[0]"], f["labels[1]"]]).labels_

    T.append(Target("SAMTC.fit", lambda: {"tasks[0]": tasks[0], "tasks[1]": tasks[1], "labels[0]": labels[0],
                                          "labels[1]": labels[1]},
                    {"tasks[0]": "data", "tasks[1]": "data", "labels[0]": "classes", "labels[1]": "classes"}, sa_fit))
    # CoupledProjections
    X, Y, pairs = _cp_data(0)
    Xn, Yn = _cp_data(9)[:2]

    def cp_fit(f):
        m = CoupledProjections(d=1, k=3).fit(f["X"], f["Y"], f["pairs"], Sx=f["Sx"], Sy=f["Sy"])
        return [m.transform_x(Xn), m.transform_y(Yn), m.embedding_x_, m.embedding_y_]

    T.append(Target("CoupledProjections.fit", lambda: {"X": X, "Y": Y, "pairs": pairs,
                                                       "Sx": _f32(knn_heat_weights(X, 3)),
                                                       "Sy": _f32(knn_heat_weights(Y, 3))},
                    {"X": "data", "Y": "data", "pairs": "pairs", "Sx": "weights", "Sy": "weights"}, cp_fit))
    T.append(Target("CoupledProjections.transform_x", lambda: {"X": Xn}, {"X": "data"},
                    lambda f: _fitted("CoupledProjections").transform_x(f["X"]), follows=("X",)))
    T.append(Target("CoupledProjections.transform_y", lambda: {"Y": Yn}, {"Y": "data"},
                    lambda f: _fitted("CoupledProjections").transform_y(f["Y"]), follows=("Y",)))
    return T


def sweep_cases(names=None) -> list:
    """All sweep cases (of the targets named in ``names``; all by default)."""
    out = []
    for t in targets():
        if names is None or t.name in names:
            out += target_cases(t)
    return out
