"""The McGPDS estimators' fitted state and inputs: a failed (re-)fit or a ``prepare`` leaves a fitted
object whole, the views are checked by one validator, every setting and predict keyword is checked
against its declaration before any work, and the Pyro parameters stay the objects' own."""
import numpy as np
import pyro
import pytest
import torch

import tandem
from common import two_view_toy
from tandem import McGPDS, StochasticMcGPDS
from tandem.inference.mcgpds.stochastic import StochasticConfig, simulate_sequences

FAST = dict(Q=2, M=8, cycles=1, var_iters=5, model_iters=5, joint_iters=10)


def _toy(N=60, seed=1):
    return two_view_toy(N, seed)


@pytest.fixture(scope="module")
def toy():
    Y1, Y2, t = _toy()
    return dict(A=Y1[:40], B=Y2[:40], T=t[:40], X=Y1[40:], tt=t[:20])


@pytest.fixture(scope="module")
def fitted(toy):
    m = McGPDS(**FAST).fit([toy["A"], toy["B"]], times=toy["T"])
    return m, m.predict(toy["X"], toy["tt"], method="code")


@pytest.fixture(scope="module")
def sim():
    s = simulate_sequences(3, 20, [4, 3], Q=2, M=6, seed=0)
    return [v.numpy() for v in s["views"]], s["times"].numpy(), s["seq_ids"].numpy()


def _cfg(**kw):
    return StochasticConfig(**{**dict(Q=2, M=6, window=20, batch=2, num_steps=2, local_iters=2, hyper_iters=1), **kw})


# ------------------------------------------------------------------ McGPDS: failed re-fit, views
@pytest.mark.parametrize("bad", [dict(sequence_ids=np.r_[np.zeros(39), np.nan]), dict(reverse_times=True)])
def test_failed_refit_keeps_the_previous_fit(toy, fitted, bad):
    """A re-fit on data 1000× larger that fails its checks changes nothing: the same scalers, the
    same fitted model, bit-identical predictions (before, the new scalers were kept with the old fit)."""
    ref, p0 = fitted
    m = McGPDS(**FAST).fit([toy["A"], toy["B"]], times=toy["T"])
    fitted_before, scalers_before = m.fitted_, m.scalers_
    T = toy["T"][::-1] if bad.pop("reverse_times", False) else toy["T"]
    with pytest.raises(ValueError):
        m.fit([toy["A"] * 1000, toy["B"] * 1000], times=T, **bad)
    assert m.fitted_ is fitted_before and m.scalers_ is scalers_before
    p1 = m.predict(toy["X"], toy["tt"], method="code")
    np.testing.assert_array_equal(p1.mean, p0.mean)
    np.testing.assert_array_equal(p1.var, p0.var)


def test_all_nan_column_and_constant_view_refused_by_both_estimators(toy, sim):
    """One validator of the estimators' views: a column with every entry NaN (it would be predicted
    as exactly 0 with a confident variance) and a constant view are ValueErrors naming the view
    (and the column), for McGPDS and StochasticMcGPDS alike."""
    A, B, T = toy["A"], toy["B"], toy["T"]
    Bn = np.c_[B, np.full(40, np.nan)]
    with pytest.raises(ValueError, match=r"views\[1\]: column\(s\) \[3\] have every entry missing"):
        McGPDS(**FAST).fit([A, Bn], times=T)
    with pytest.raises(ValueError, match=r"views\[1\]: column\(s\) \[3\] have every entry missing"):
        McGPDS(scale="column", **FAST).fit([A, Bn], times=T)
    with pytest.raises(ValueError, match=r"views\[1\]: every entry is the same value"):
        McGPDS(**FAST).fit([A, np.full_like(B, 3.0)], times=T)
    V, TT, S = sim
    V1 = V[1].copy()
    V1[:, 0] = np.nan
    with pytest.raises(ValueError, match=r"views\[1\]: column\(s\) \[0\] have every entry missing"):
        StochasticMcGPDS(_cfg()).fit([V[0], V1], TT, S)
    with pytest.raises(ValueError, match=r"views\[1\]: every entry is the same value"):
        StochasticMcGPDS(_cfg()).fit([V[0], np.full_like(V[1], 3.0)], TT, S)
    # a column observed in one frame is still accepted
    V1[3, 0] = 0.5
    StochasticMcGPDS(_cfg(num_steps=0)).prepare([V[0], V1], TT, S)


# ------------------------------------------------------------------ McGPDS: declared settings
def test_declared_fixed_and_alpha_init_match_what_fit_accepts(toy):
    """Groups fit_mcgpds cannot hold fixed ("g", "variational", "model", as a tuple or a set) and
    α = 0 are refused at construction, naming the parameter; every declared group fits."""
    for fixed in [("g",), ("variational",), ("model",), {"g"}]:
        with pytest.raises(ValueError, match="fixed"):
            McGPDS(fixed=fixed)
    with pytest.raises(ValueError, match="alpha_init"):
        McGPDS(alpha_init=0.0)
    McGPDS(alpha_init=1.0)
    kw = dict(FAST, cycles=0, joint_iters=1)
    McGPDS(fixed=("alpha", "eps", "beta", "time", "W", "kernel", "inducing"), **kw).fit(
        [toy["A"], toy["B"]], times=toy["T"])
    McGPDS(fixed={"alpha", "W"}, **kw).fit([toy["A"], toy["B"]], times=toy["T"])


def test_beta_init_array_is_one_value_per_view_and_init_views_rows_checked(toy):
    """A numpy array beta_init is one value per view (the same fit as the list); a wrong length is a
    named error; init_views with the wrong number of rows is a named error, not an IndexError."""
    A, B, T = toy["A"], toy["B"], toy["T"]
    kw = dict(FAST, cycles=0, joint_iters=2)
    a = McGPDS(beta_init=np.array([50.0, 20.0]), **kw).fit([A, B], times=T)
    b = McGPDS(beta_init=[50.0, 20.0], **kw).fit([A, B], times=T)
    assert a.fitted_.bound == b.fitted_.bound
    with pytest.raises(ValueError, match="beta_init: expected 2 values"):
        McGPDS(beta_init=np.array([50.0]), **kw).fit([A, B], times=T)
    with pytest.raises(ValueError, match=r"init_views\[0\]: expected 40 rows"):
        McGPDS(init_views=[A[:10], B[:10]], **kw).fit([A, B], times=T)


# ------------------------------------------------------------------ McGPDS.predict keywords
@pytest.mark.parametrize("method", ["code", "generative"])
@pytest.mark.parametrize("kw,match", [
    (dict(extra_var=-1.0), "extra_var"), (dict(extra_var=np.ones(2)), "extra_var"),
    (dict(extra_var=np.full(3, np.nan)), "extra_var"),
    (dict(nn_index_y=-np.ones(20, int)), "nn_index_y"), (dict(nn_index_y=np.full(20, 0.9)), "nn_index_y"),
    (dict(nn_index_y=np.arange(20) + 100), "nn_index_y"),
    (dict(test_iters=-5), "test_iters"), (dict(test_iters=2.5), "test_iters"), (dict(test_iters=True), "test_iters"),
    (dict(k_neighbours=2.5), "k_neighbours"), (dict(beta_target_override=0.0), "beta_target_override"),
    (dict(beta_target_override=-1.0), "beta_target_override"),
    (dict(beta_target_override=float("nan")), "beta_target_override"),
    (dict(fixll="yes"), "fixll"), (dict(seed=0.5), "seed"), (dict(bogus=1), "bogus"),
])
def test_predict_keywords_checked_with_named_errors(toy, fitted, method, kw, match):
    m, _ = fitted
    with pytest.raises((ValueError, TypeError), match=match):
        m.predict(toy["X"], toy["tt"], method=method, **kw)


def test_predict_keywords_valid_values_and_seed(toy, fitted):
    """Valid keywords still work: a (D,) extra_var adds to the variance; ``seed`` is this
    prediction's (the estimator's by default: the same result)."""
    m, p0 = fitted
    ev = np.array([0.1, 0.2, 0.3])
    p = m.predict(toy["X"], toy["tt"], method="code", extra_var=ev)
    added = np.broadcast_to(ev * m.scalers_[1].scale.numpy() ** 2, p0.var.shape)
    np.testing.assert_allclose(p.var - p0.var, added, rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(p.mean, p0.mean)
    np.testing.assert_array_equal(m.predict(toy["X"], toy["tt"], method="code", seed=0).mean, p0.mean)
    assert m.predict(toy["X"], toy["tt"], method="code", seed=3).mean.shape == (20, 3)


@pytest.mark.parametrize("kw,match", [
    (dict(n_chunks=2.5), "n_chunks"), (dict(k_neighbours=2.5), "k_neighbours"),
    (dict(candidates={"a": {"k_neighbours": 2.7}}), "k_neighbours"),
    (dict(candidates={"a": {"bogus": 1}}), "bogus"),
    (dict(candidates={"a": {"beta_target_override": 0.0}}), "beta_target_override"),
])
def test_selected_predictor_keywords_share_the_declarations(toy, fitted, kw, match):
    """The keywords given to predict and the candidates' own keywords are checked against the same
    declarations (before, k_neighbours=2.5 was truncated while a candidate's 2.7 was refused)."""
    m, _ = fitted
    with pytest.raises((ValueError, TypeError), match=match):
        m.predict(toy["X"], toy["tt"], method="selected", **kw)


def test_features_pair_with_mismatched_columns(toy, fitted):
    m, _ = fitted
    with pytest.raises(ValueError, match="features: the train and test features must have the same columns"):
        m.predict(toy["X"], toy["tt"], method="selected", features=(toy["A"], toy["X"][:, :2]))


def test_save_to_a_folder_is_a_named_error(fitted, sim, tmp_path):
    m, _ = fitted
    with pytest.raises(ValueError, match="is a folder"):
        m.save(tmp_path)
    V, TT, S = sim
    s = StochasticMcGPDS(_cfg()).fit(V, TT, S)
    with pytest.raises(ValueError, match="is a folder"):
        s.save(tmp_path)


# ------------------------------------------------------------------ StochasticMcGPDS state
def test_prepare_does_not_change_a_fitted_object(sim):
    """prepare on a fitted object returns new data and changes nothing (before, it replaced the
    scalers but not the data: imputations 1000× off); assigning its data brings its scalers along."""
    V, TT, S = sim
    s = StochasticMcGPDS(_cfg()).fit(V, TT, S)
    i0, sc0 = s.impute(1), s.scalers_
    d = s.prepare([V[0] * 1000, V[1] * 1000], TT, S)
    assert s.scalers_ is sc0
    np.testing.assert_array_equal(s.impute(1).mean, i0.mean)
    s.data = d
    assert s.scalers_ is d.scalers and float(s.scalers_[1].scale.max()) > 100 * float(sc0[1].scale.max())


def test_failed_fit_keeps_the_previous_fit(sim, tmp_path):
    """A fit that fails — an unwritable checkpoint (checked before anything changes) or an error
    in the middle of training — leaves the fitted object as it was: data, parameters, ELBO."""
    V, TT, S = sim
    s = StochasticMcGPDS(_cfg()).fit(V, TT, S)
    data, store, e0 = s.data_, s.param_store_, s.elbo()
    with pytest.raises(ValueError, match="checkpoint"):
        s.fit([V[0] * 3, V[1]], TT, S, checkpoint="/proc/nope/x.ckpt")

    def boom(objective):
        def loss(*args, **kwargs):
            raise RuntimeError("boom")
        return loss

    with pytest.raises(RuntimeError, match="boom"):
        s.fit([V[0] * 3, V[1]], TT, S, loss_wrapper=boom)
    assert s.data_ is data and s.param_store_ is store
    assert s.elbo() == e0


@pytest.mark.parametrize("field,value", [("private_prior", "x"), ("alpha_init", 5.0), ("fixed", ("bogus",)),
                                         ("lr", -0.05), ("num_steps", 2.5)])
def test_config_fields_changed_after_construction_are_checked(sim, field, value):
    V, TT, S = sim
    cfg = _cfg()
    setattr(cfg, field, value)
    with pytest.raises(ValueError, match=field):
        StochasticMcGPDS(cfg).fit(V, TT, S)


@pytest.mark.parametrize("seed", [0.7, -3, True, "1"])
def test_seed_and_num_steps_checked_before_any_cast(sim, seed):
    V, TT, S = sim
    with pytest.raises(ValueError, match="seed"):
        StochasticMcGPDS(_cfg()).prepare(V, TT, S, seed=seed)
    s = StochasticMcGPDS(_cfg()).fit(V, TT, S)
    with pytest.raises(ValueError, match="seed"):
        s.train(1, seed=seed)
    result = s.result_
    for n in (2.5, True, -1):          # before: int(2.5) = 2 steps, True = 1 step
        with pytest.raises(ValueError, match="num_steps"):
            s.train(n)
    assert s.result_ is result


def test_save_before_fit_and_load_leave_the_global_store_alone(sim, tmp_path):
    """save before fit is a NotFittedError (before, the user's global Pyro store was written into the
    file); load puts the parameters into the object's own store, the global one is unchanged."""
    V, TT, S = sim
    pyro.clear_param_store()
    pyro.param("user_param", torch.tensor(1.23))
    with pytest.raises(tandem.NotFittedError):
        StochasticMcGPDS(_cfg()).save(tmp_path / "unfit.tnd")
    assert not (tmp_path / "unfit.tnd").exists()
    s = StochasticMcGPDS(_cfg()).fit(V, TT, S)
    s.save(tmp_path / "s.tnd")
    pyro.clear_param_store()
    pyro.param("user_param", torch.tensor(1.23))
    s2 = StochasticMcGPDS.load(tmp_path / "s.tnd")
    assert list(pyro.get_param_store().keys()) == ["user_param"]
    assert s2.elbo() == s.elbo()
    pyro.clear_param_store()
