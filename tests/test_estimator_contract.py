"""One contract, every estimator (issue 18): scikit-learn conventions, declared parameter
constraints, NotFittedError, own Pyro parameters, early device errors.

Each estimator is run through the same checks with tiny fits (seconds): clone, get/set
params, the not-fitted error of every method that needs a fit, pickling before and after
fit and every method, repr, unknown keyword, refit on other data equals a fresh fit, two
fitted objects side by side with the user's own parameter store untouched. A property
test walks every declared parameter of every entry point with values outside its
constraint and requires an error naming the parameter; a public parameter without a
declaration fails it.
"""
from __future__ import annotations

import inspect
import math
import pickle
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pyro
import pytest
import torch
from sklearn.base import clone

import tandem
from tandem.inference import fit, minimize, posterior_predictive
from tandem.inference.coupled_projections import CoupledProjections
from tandem.inference.mcgpds import McGPDS, stochastic_config
from tandem.inference.mcgpds import stochastic as st
from tandem.inference.params import check_param
from tandem.inference.predictive import PREDICTIVE_CONSTRAINTS
from tandem.inference.samtc import SAMTC
from tandem.inference.samtc.algorithm import SAMTC_CONSTRAINTS, samtc
from tandem.inference.samtc.baselines import BASELINE_CONSTRAINTS, kmeans_baseline, ncut_snn, pooled_baseline
from tandem.inference.svi import FIT_CONSTRAINTS, MINIMIZE_CONSTRAINTS
from tandem.inference.twin_gp import TwinGPRegressor
from tandem.inference.validation import check_time_order, check_weights, sequence_labels

NotFittedError = tandem.NotFittedError


def _rng(seed):
    return np.random.default_rng(seed)


def _mcgpds_data(seed):
    r = _rng(seed)
    t = np.linspace(0, 1, 16)
    X = np.c_[np.sin(6 * t), np.cos(4 * t)]
    return [X @ r.normal(size=(2, 3)) + 0.05 * r.normal(size=(16, 3)),
            X @ r.normal(size=(2, 2)) + 0.05 * r.normal(size=(16, 2))]


def _stoch_data(seed):
    sim = st.simulate_sequences(2, 8, [3, 2], Q=2, M=4, seed=seed, chunk_frames=16)
    return sim["views"], sim["times"], sim["seq_ids"]


def _tgp_data(seed):
    r = _rng(seed)
    X = r.uniform(-1, 1, size=(20, 2))
    return X, np.c_[np.sin(2 * X[:, 0]), X[:, 1] ** 2] + 0.01 * r.normal(size=(20, 2))


def _samtc_data(seed):
    r = _rng(seed)
    task = lambda: np.r_[r.normal(0, 0.3, (12, 2)), r.normal(3, 0.3, (12, 2))]  # noqa: E731
    return [task(), task()]


def _cp_data(seed):
    r = _rng(seed)
    t = np.linspace(0, 3, 14)
    X = np.c_[t, np.sin(t), 0.1 * r.normal(size=14)]
    Y = np.c_[np.cos(t), t, 0.1 * r.normal(size=14)] @ r.normal(size=(3, 3))
    return X, Y, np.array([[0, 0], [4, 4], [9, 9], [13, 13]])


@dataclass
class Case:
    name: str
    make: callable            # **overrides -> estimator
    data: callable            # seed -> fit args (tuple)
    out: callable             # fitted estimator -> comparable numpy output
    methods: dict             # name -> callable(est), every method that needs a fit
    base: dict                # required constructor arguments


CASES = [
    Case("McGPDS", lambda **kw: McGPDS(**{**dict(Q=2, M=4, cycles=1, var_iters=2, model_iters=2, joint_iters=2), **kw}),
         lambda s: (_mcgpds_data(s),), lambda m: m.predict(_mcgpds_data(9)[0][:4], method="paper").mean,
         {"predict": lambda m: m.predict(_mcgpds_data(9)[0][:4], method="paper"),
          "to_inference_data": lambda m: m.to_inference_data(num_samples=2)}, {}),
    Case("StochasticMcGPDS",
         lambda **kw: st.StochasticMcGPDS(**{"config": st.StochasticConfig(Q=2, M=4, window=8, batch=1, num_steps=2,
                                                                             local_iters=2), **kw}),
         _stoch_data, lambda m: np.array([m.elbo()]),
         {"elbo": lambda m: m.elbo(), "latents": lambda m: m.latents(), "to_fitted": lambda m: m.to_fitted(),
          "train": lambda m: m.train(1), "to_inference_data": lambda m: m.to_inference_data(num_samples=2),
          "to_data_units": lambda m: m.to_data_units(torch.zeros(2, 2)),
          "to_model_units": lambda m: m.to_model_units(np.zeros((2, 3)), 0)}, {}),
    Case("TwinGPRegressor", lambda **kw: TwinGPRegressor(**{**dict(method="KLTGP", rho_x=1.0, rho_y=1.0, lam=1e-3),
                                                             **kw}),
         _tgp_data, lambda m: m.predict(_tgp_data(9)[0][:5]),
         {"predict": lambda m: m.predict(_tgp_data(9)[0][:5]),
          "to_inference_data": lambda m: m.to_inference_data(_tgp_data(9)[0][:3])}, {}),
    Case("SAMTC", lambda **kw: SAMTC(**{**dict(n_clusters=[2, 2], k_self=4, k_src=4), **kw}),
         lambda s: (_samtc_data(s),), lambda m: np.concatenate(m.labels_),
         {"fit_model": lambda m: m.fit_model(num_steps=5),
          "to_inference_data": lambda m: m.to_inference_data(num_samples=2, num_steps=5)}, {"n_clusters": [2, 2]}),
    Case("CoupledProjections", lambda **kw: CoupledProjections(**{**dict(d=1, k=3), **kw}), _cp_data,
         lambda m: m.transform_x(_cp_data(9)[0]),
         {"transform_x": lambda m: m.transform_x(_cp_data(9)[0]),
          "transform_y": lambda m: m.transform_y(_cp_data(9)[1]),
          "objective": lambda m: m.objective(),
          "to_inference_data": lambda m: m.to_inference_data(num_samples=2, num_steps=5)}, {}),
]
IDS = [c.name for c in CASES]


@pytest.fixture(scope="module")
def fitted():
    """One fitted object per estimator (data seed 0), shared by the read-only checks."""
    pyro.clear_param_store()
    return {c.name: c.make().fit(*c.data(0)) for c in CASES}


# ------------------------------------------------------------------ scikit-learn conventions
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_clone_get_set_params_and_repr(case, fitted):
    est = case.make()
    params = est.get_params()
    assert set(params) == set(type(est)._get_param_names())
    c = clone(fitted[case.name])                     # a clone is unfitted, with equal parameters
    assert c.get_params().keys() == params.keys()
    for k, v in c.get_params().items():
        assert repr(v) == repr(fitted[case.name].get_params()[k]), k
    with pytest.raises(NotFittedError):
        next(iter(case.methods.values()))(c)
    seed_name = "seed" if "seed" in params else next(iter(params))
    if seed_name == "seed":
        assert est.set_params(seed=3) is est and est.get_params()["seed"] == 3
        est.set_params(seed=-1)                     # set_params stores; fit checks
        with pytest.raises(ValueError, match="seed"):
            est.fit(*case.data(0))
    r = repr(fitted[case.name])
    assert r.startswith(case.name + "(")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_unknown_keyword_is_a_type_error(case):
    with pytest.raises(TypeError):
        case.make(no_such_option=1)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_method_that_needs_a_fit_raises_not_fitted(case):
    est = case.make()
    for name, call in case.methods.items():
        with pytest.raises(NotFittedError) as e:
            call(est)
        assert isinstance(e.value, ValueError) and isinstance(e.value, AttributeError), name


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_pickling_before_and_after_fit_and_every_method(case):
    est = case.make()
    pickle.loads(pickle.dumps(est))
    est.fit(*case.data(0))
    ref = np.asarray(case.out(est))
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_allclose(np.asarray(case.out(again)), ref, rtol=1e-8, atol=1e-10)
    for name, call in case.methods.items():
        if name == "train":
            continue
        call(est)
        pickle.loads(pickle.dumps(est))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_refit_on_other_data_equals_a_fresh_fit(case):
    a = case.make().fit(*case.data(0))
    a.fit(*case.data(1))
    b = case.make().fit(*case.data(1))
    np.testing.assert_allclose(np.asarray(case.out(a)), np.asarray(case.out(b)), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_two_fitted_objects_coexist_and_the_user_store_is_untouched(case):
    pyro.clear_param_store()
    user = pyro.param("user_param", torch.tensor([1.5, -2.0]))
    a = case.make().fit(*case.data(0))
    ref = np.asarray(case.out(a))
    b = case.make().fit(*case.data(1))
    for name, call in case.methods.items():      # every method on the other object
        if name != "train":
            call(b)
    np.testing.assert_allclose(np.asarray(case.out(a)), ref, rtol=1e-9, atol=1e-12)
    store = pyro.get_param_store()
    assert list(store.keys()) == ["user_param"]
    torch.testing.assert_close(pyro.param("user_param").detach(), user.detach())


def test_numpy_in_numpy_out_tensor_in_tensor_out(fitted):
    Xt = _tgp_data(9)[0][:4]
    tg = fitted["TwinGPRegressor"]
    assert isinstance(tg.predict(Xt), np.ndarray)
    out = tg.predict(torch.as_tensor(Xt))
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), tg.predict(Xt), rtol=1e-12)
    m = fitted["McGPDS"]
    Y = _mcgpds_data(9)[0][:4]
    assert isinstance(m.predict(Y, method="paper").mean, np.ndarray)
    assert isinstance(m.predict(torch.as_tensor(Y), method="paper").mean, torch.Tensor)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_without_cuda_is_the_early_value_error(fitted):
    for make in (lambda: McGPDS(device="cuda"), lambda: st.StochasticMcGPDS(device="cuda"),
                 lambda: TwinGPRegressor(device="cuda")):
        with pytest.raises(ValueError, match="CUDA"):
            make()
    from tandem.models.coupled_projections import whiten
    with pytest.raises(ValueError, match="CUDA"):
        whiten(fitted["CoupledProjections"], device="cuda")


def test_tensor_inputs_with_requires_grad_are_read_as_data(fitted):
    X, Y = (torch.as_tensor(a).requires_grad_() for a in _tgp_data(0))
    m = TwinGPRegressor("KLTGP", rho_x=1.0, rho_y=1.0, lam=1e-3).fit(X, Y)
    np.testing.assert_allclose(m.predict(_tgp_data(9)[0][:5]), fitted["TwinGPRegressor"].predict(_tgp_data(9)[0][:5]),
                               rtol=1e-10)
    views = [torch.as_tensor(v).requires_grad_() for v in _mcgpds_data(0)]
    got = CASES[0].make().fit(views)
    np.testing.assert_allclose(CASES[0].out(got), CASES[0].out(fitted["McGPDS"]), rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------------ one validator per input kind
def test_sequence_labels_any_hashable_nan_refused_no_truncation():
    t = np.arange(6.0)
    assert sequence_labels(["a", "a", "b", "b", "a", "c"], 6).tolist() == [0, 0, 1, 1, 0, 2]
    # 0.2 and 0.7 are two sequences (a .long() would merge them into 0)
    assert sequence_labels([0.2, 0.2, 0.7, 0.7, 1.0, 1.0], 6, t).tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="NaN"):
        sequence_labels([0, 0, np.nan, 1, 1, 1], 6)
    with pytest.raises(ValueError, match="expected 6"):
        sequence_labels([0, 1], 6)
    with pytest.raises(ValueError, match="increasing time order"):
        sequence_labels([0, 0, 0, 1, 1, 1], 6, np.array([0, 2, 1, 0, 1, 2.0]))
    check_time_order(np.array([0, 1, 2, 0, 1, 2.0]), [0, 0, 0, 1, 1, 1])   # restarts per sequence: fine


def test_shuffled_frames_are_refused_by_the_estimators():
    views = _mcgpds_data(0)
    perm = _rng(0).permutation(16)
    t = np.linspace(0, 1, 16)
    with pytest.raises(ValueError, match="time order"):
        CASES[0].make().fit([v[perm] for v in views], times=t[perm])
    V, T, S = _stoch_data(0)
    with pytest.raises(ValueError, match="time order"):
        CASES[1].make().fit(V, T.flip(0), S)


def test_weight_matrices_dense_or_sparse_non_negative_symmetric():
    import scipy.sparse as sp
    X, Y, pairs = _cp_data(0)
    from tandem.inference.coupled_projections.solver import knn_heat_weights
    Sx = knn_heat_weights(X, 3)
    dense = CoupledProjections(d=1, k=3).fit(X, Y, pairs, Sx=Sx)
    sparse = CoupledProjections(d=1, k=3).fit(X, Y, pairs, Sx=sp.csr_matrix(Sx))
    np.testing.assert_allclose(sparse.transform_x(X), dense.transform_x(X), rtol=1e-10, atol=1e-12)
    bad = Sx.copy()
    bad[0, 1] = -1.0
    bad[1, 0] = -1.0
    with pytest.raises(ValueError, match="Sx: .*non-negative"):
        CoupledProjections(d=1, k=3).fit(X, Y, pairs, Sx=bad)
    asym = Sx.copy()
    asym[0, 5] += 0.3
    with pytest.raises(ValueError, match="Sx: .*symmetric"):
        check_weights(asym, "Sx", 14)


def test_a_loss_that_is_not_a_tensor_is_refused():
    def model():
        pyro.param("a", torch.zeros(()))
    with pytest.raises(TypeError, match="loss: .*scalar torch.Tensor"):
        fit(model, model, loss=lambda *a: 1.0, num_steps=2, progress=False)


# ------------------------------------------------------------------ declared constraints
def _noop(*a, **k):
    return None


#: (entry point, declaration, public parameter names, apply(**bad) that must raise)
ENTRY_POINTS = [
    *[(c.name, type(c.make())._parameter_constraints, set(type(c.make())._get_param_names()),
       (lambda c: lambda **kw: c.make(**kw))(c)) for c in CASES],
    ("StochasticConfig", stochastic_config._STOCHASTIC_CONSTRAINTS, {f.name for f in fields(st.StochasticConfig)},
     lambda **kw: st.StochasticConfig(**kw)),
    ("fit", FIT_CONSTRAINTS, {p.name for p in inspect.signature(fit).parameters.values()
                              if p.kind is p.KEYWORD_ONLY},
     lambda **kw: fit(_noop, _noop, **{"progress": False, **kw})),
    ("minimize", MINIMIZE_CONSTRAINTS, {"loss_fn", "desc"},
     lambda **kw: minimize(**{"loss_fn": _noop, **kw})),
    ("samtc", SAMTC_CONSTRAINTS, {p for p in inspect.signature(samtc).parameters} - {"tasks", "labels"},
     lambda **kw: samtc(**{"tasks": _samtc_data(0), "n_clusters": [2, 2], **kw})),
    *[(f.__name__, {p: BASELINE_CONSTRAINTS[p] for p in ps}, set(ps),
       (lambda f, data: lambda **kw: f(**data, **kw))(f, data))
      for f, ps, data in ((ncut_snn, ("k", "seed", "metric"), {"X": _samtc_data(0)[0], "h": 2}),
                          (kmeans_baseline, ("seed", "n_init"), {"tasks": _samtc_data(0), "n_clusters": [2, 2]}),
                          (pooled_baseline, ("method", "seed", "k"), {"tasks": _samtc_data(0), "n_clusters": [2, 2]}))],
    ("posterior_predictive", PREDICTIVE_CONSTRAINTS, {p.name for p in inspect.signature(posterior_predictive)
                                                      .parameters.values() if p.kind is p.KEYWORD_ONLY},
     lambda **kw: posterior_predictive(_noop, _noop, **kw)),
]

BAD_VALUES = [-1, 0, 0.5, -0.5, 2.5, math.nan, math.inf, -math.inf, "bad", object(), True, [], None, 10 ** 12]


def _valid(constraints, name, v) -> bool:
    try:
        check_param(constraints, name, v)
        return True
    except (ValueError, TypeError):
        return False


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
def test_every_public_parameter_is_declared(entry):
    name, decl, public, _ = entry
    assert public == set(decl), f"{name}: undeclared {sorted(public - set(decl))}, stale {sorted(set(decl) - public)}"


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
def test_values_outside_the_declared_constraint_raise_a_named_error(entry):
    name, decl, _, apply = entry
    tested = 0
    for param, constraints in decl.items():
        for v in BAD_VALUES:
            if _valid(constraints, param, v):
                continue
            with pytest.raises((ValueError, TypeError)) as e:
                apply(**{param: v})
            assert param in str(e.value), (name, param, v, str(e.value))
            tested += 1
    assert tested >= len(decl)


# ------------------------------------------------------------------ sequences: every declared form
#: a valid sequence value for every parameter declared with a SequenceOf, per estimator
#: (a new sequence parameter without an entry fails the guard below)
SEQUENCE_VALUES = {
    "McGPDS": {"init_dims": (1, 1), "beta_init": (50.0, 20.0), "time_kernel": None, "fixed": ("alpha",)},
    "StochasticMcGPDS": {},
    "TwinGPRegressor": {"rho_mult_x": (0.5, 1.0), "rho_mult_y": (1.0,), "lam_grid": (1e-3, 1e-2),
                        "alphas": (0.0, 0.5), "betas": (0.99,)},
    "SAMTC": {"n_clusters": (2, 2), "k_self": (4, 5), "k_src": (4, 3)},
    "CoupledProjections": {"pca": (2, None)},
}
#: extra constructor arguments that make a sequence parameter matter (it is read only then)
SEQUENCE_CONTEXT = {("McGPDS", "init_dims"): {"init": "separately"},
                    ("TwinGPRegressor", "rho_mult_x"): {"rho_x": None, "rho_y": None, "lam": None, "folds": 2},
                    ("TwinGPRegressor", "rho_mult_y"): {"rho_x": None, "rho_y": None, "lam": None, "folds": 2},
                    ("TwinGPRegressor", "lam_grid"): {"rho_x": None, "rho_y": None, "lam": None, "folds": 2},
                    ("TwinGPRegressor", "alphas"): {"method": "SMTGP", "folds": 2},
                    ("TwinGPRegressor", "betas"): {"method": "SMTGP", "folds": 2}}


def _sequence_params(case):
    from tandem.inference.params import SequenceOf
    decl = type(case.make())._parameter_constraints
    return sorted(p for p, cs in decl.items() if any(isinstance(c, SequenceOf) for c in cs))


def test_every_sequence_parameter_has_a_value_to_check():
    for c in CASES:
        assert set(_sequence_params(c)) == set(SEQUENCE_VALUES[c.name]), c.name


@pytest.mark.parametrize("case, param", [(c, p) for c in CASES for p in _sequence_params(c)
                                         if SEQUENCE_VALUES[c.name][p] is not None],
                         ids=[f"{c.name}.{p}" for c in CASES for p in _sequence_params(c)
                              if SEQUENCE_VALUES[c.name][p] is not None])
def test_a_declared_sequence_is_read_the_same_as_tuple_list_or_array(case, param):
    """What the constraint accepts (a tuple, a list, a numpy array) fit accepts, with one result."""
    value = SEQUENCE_VALUES[case.name][param]
    ctx = SEQUENCE_CONTEXT.get((case.name, param), {})
    outs = []
    for form in (tuple(value), list(value), np.asarray(value) if None not in value else np.asarray(value, object)):
        pyro.clear_param_store()
        est = case.make(**{**ctx, param: form})
        outs.append(np.asarray(case.out(est.fit(*case.data(0))), dtype=float))
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=1e-10, atol=1e-12)


def _arrays(obj):
    """Every numpy array and tensor inside ``obj`` (lists/tuples walked)."""
    if isinstance(obj, (list, tuple)):
        return [a for o in obj for a in _arrays(o)]
    return [obj] if isinstance(obj, (np.ndarray, torch.Tensor)) else []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_fit_does_not_alias_the_callers_arrays(case):
    """Changing the caller's arrays in place after fit leaves the fitted object's answers as they were."""
    pyro.clear_param_store()
    data = case.data(0)
    est = case.make().fit(*data)
    before = np.asarray(case.out(est), dtype=float)
    for a in _arrays(data):
        floating = a.is_floating_point() if isinstance(a, torch.Tensor) else a.dtype.kind == "f"
        if floating:                     # data arrays (index arrays such as pairs stay: they are ids)
            a[...] = 1e3
    np.testing.assert_array_equal(np.asarray(case.out(est), dtype=float), before)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_save_to_a_folder_or_a_non_path_is_a_clear_error(case, fitted, tmp_path):
    """One check of the target for every estimator's save (persistence.check_save_path), before work."""
    est = fitted[case.name]
    for bad, word in ((tmp_path, "folder"), (3, "file path")):
        with pytest.raises(ValueError, match=f"{type(est).__name__}.save: path: .*{word}"):
            est.save(bad)
    assert list(tmp_path.iterdir()) == []          # nothing written


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_save_into_a_missing_or_unwritable_folder_is_a_clear_error_before_work(case, fitted, tmp_path, monkeypatch):
    """A missing folder (was created), a file in the folder's place, a folder the OS refuses a file
    in (was an OSError from mkstemp after the whole object was serialised): one ValueError naming
    ``path``, raised before the object's state is read."""
    est = fitted[case.name]
    name = type(est).__name__
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir()
    real_mkstemp = tempfile.mkstemp

    def refusing_mkstemp(*a, dir=None, **kw):      # the OS's answer in a folder without write permission
        if dir is not None and Path(dir) == locked:
            raise PermissionError(13, "Permission denied")
        return real_mkstemp(*a, dir=dir, **kw)
    monkeypatch.setattr(tempfile, "mkstemp", refusing_mkstemp)
    monkeypatch.setattr(type(est), "__getstate__", lambda self: pytest.fail("the state was read"), raising=False)
    for bad, word in ((tmp_path / "no_such" / "m.tnd", "does not exist"), (blocker / "m.tnd", "is a file"),
                      (locked / "m.tnd", "cannot write in the folder .*Permission denied")):
        with pytest.raises(ValueError, match=f"{name}.save: path: .*{word}"):
            est.save(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "locked"] and not any(locked.iterdir())
