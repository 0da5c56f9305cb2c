"""McGPDS on the user's path: the McGPDS object (units, defaults, predictor, ArviZ), the
model/guide contract, input validation, the automatic optimal q(U), q(V) after a collapsed
fit, and the content-keyed fit cache / checkpoints (issues 11 and 12)."""
import math
import warnings

import numpy as np
import pyro
import pyro.optim
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoNormal

from tandem.guides.mcgpds import Guide, mcgpds_guide, variational_params
from tandem.inference import LBFGS, fit, posterior_predictive
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds.bound import collapsed_loss
from tandem.inference.mcgpds.fit import (
    McGPDSConfig,
    cached_fit,
    calibrated_extra_var,
    fit_fingerprint,
    fit_mcgpds,
    holdout_predictions,
    predict_view,
)
from tandem.inference.mcgpds.predictor import calibrated_prediction
from tandem.inference.mcgpds.uncollapsed import optimal_q_inducing
from tandem.models.mcgpds import SAFE_FIXED, McGPDSData, dims, hyperparams, model, simulate

D64 = torch.float64
SHORT = dict(cycles=1, var_iters=10, model_iters=10, joint_iters=30)


def two_views(seed=0, N=60, Nt=20, noise=0.05):
    """Two views of one process (shared sine + a private signal each), train and test stretch."""
    rng = np.random.default_rng(seed)
    t = np.arange(N + Nt) * 0.1
    s = np.sin(2 * np.pi * t / 3.0)
    priv = [np.cos(2 * np.pi * t / 2.1), np.sin(2 * np.pi * t / 1.3)]
    views = []
    for k, D in enumerate((5, 4)):
        A = rng.normal(size=(2, D))
        views.append(np.tanh(np.c_[0.3 * priv[k], s] @ A) + noise * rng.standard_normal((N + Nt, D)))
    return [Y[:N] for Y in views], [Y[N:] for Y in views], t[:N], t[N:] - t[N]


# ------------------------------------------------------------------ units (issue 12)

def test_mcgpds_predictions_do_not_depend_on_the_data_units():
    """Both views ×1e-3, ×1, ×1e3: the predictions in user units are c × those at c = 1."""
    train, test, t, tt = two_views()
    out = {}
    for c in (1e-3, 1.0, 1e3):
        m = McGPDS(Q=2, M=15, **SHORT).fit([c * Y for Y in train], t)
        p = m.predict(c * test[0], tt)                                   # tandem predictor
        g = m.predict(c * test[0], tt, method="generative", test_iters=20)
        out[c] = (p.mean / c, p.var / c ** 2, g.mean / c, g.var / c ** 2)
    for c in (1e-3, 1e3):
        for a, b in zip(out[c], out[1.0]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * np.abs(b).max())
    # and the generative prediction is informative: better than the training mean of view 2
    # (view 2's private signal is not predictable from view 1; NN in view-1 space is worse
    # than the mean here)
    err = np.sqrt(((out[1.0][2] - test[1]) ** 2).mean())
    base = np.sqrt(((train[1].mean(0) - test[1]) ** 2).mean())
    assert err < base


def test_raw_fit_depends_on_units_so_the_object_standardises():
    """The low-level fit on the raw data is not unit-invariant (what the object fixes)."""
    train, test, t, tt = two_views()
    cfg = McGPDSConfig(Q=2, M=15, fixed=("alpha", "eps", "beta", "time", "W"), **SHORT)
    preds = []
    for c in (1.0, 1e3):
        if c == 1.0:
            f = fit_mcgpds([c * train[0], train[1]], t, config=cfg, progress=False)
        else:
            with pytest.warns(RuntimeWarning, match=r"views\[0\] has standard deviation"):
                f = fit_mcgpds([c * train[0], train[1]], t, config=cfg, progress=False)
        preds.append(predict_view(f, c * test[0], tt, method="generative", test_iters=20).mean.numpy())
    assert np.abs(preds[0] - preds[1]).max() > 1e-3


# ------------------------------------------------------------------ safe defaults (issue 12)

def _sim_data(**kw):
    t = torch.linspace(0, 2, 30, dtype=D64)
    seq = torch.zeros(30)
    sim = simulate(t, seq, [4, 3], Q=2, M=8, seed=3)
    return McGPDSData([sim["y_0"].numpy(), sim["y_1"].numpy()], t.numpy(), seq.numpy(), Q=2, M=8, **kw)


def test_default_fixed_groups_are_the_safe_ones_and_learning_beta_with_w_warns():
    d = _sim_data()
    assert d.fixed == SAFE_FIXED
    assert simulate(torch.linspace(0, 1, 5, dtype=D64), torch.zeros(5), [2], M=3)["data"].fixed == SAFE_FIXED
    with pytest.warns(RuntimeWarning, match="unbounded|without limit"):
        _sim_data(fixed=())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _sim_data(fixed=("beta",))       # β fixed: no warning


def test_default_objectives_stay_finite_and_below_the_noise_ceiling():
    """AutoNormal + Trace_ELBO and the collapsed loss on the default McGPDSData (missing init →
    defaults): every loss finite, α, β unchanged, and the collapsed bound at most its ceiling
    Σ_k N D_k / 2 · log(β_k / 2π) (the Gaussian density at zero residual; KL ≥ 0)."""
    d = _sim_data()
    ra = fit(model, AutoNormal(model), d, optim=pyro.optim.Adam({"lr": 0.02}), num_steps=60, seed=0,
             progress=False)
    assert np.isfinite(ra.losses).all()
    r = fit(model, mcgpds_guide, d, loss=collapsed_loss, optim=LBFGS(max_iter=20), num_steps=3, seed=0,
            progress=False)
    assert np.isfinite(r.losses).all() and r.losses[-1] < r.losses[0]
    hp = hyperparams(d)
    for k in range(2):
        assert float(hp["views"][k]["alpha"]) == 0.5
        assert float(hp["views"][k]["beta"]) == pytest.approx(100.0 / float(d.views[k].var()))
    ceiling = sum(0.5 * d.N * D * math.log(float(hp["views"][k]["beta"]) / (2 * math.pi))
                  for k, D in enumerate(d.out_dims))
    assert -r.losses[-1] <= ceiling
    # the AutoNormal ELBO estimates too (single-sample, so up to Monte Carlo noise; with β
    # learned this objective ran off to −3·10⁶)
    assert -np.mean(ra.losses[-10:]) <= ceiling + 0.05 * abs(ceiling)


# ------------------------------------------------------------------ validation (issue 12)

def test_mcgpds_data_validates_its_inputs():
    t = np.linspace(0, 1, 10)
    Y = np.random.default_rng(0).normal(size=(10, 3))
    d = McGPDSData([Y, Y[:, :2]], t, np.zeros(10), Q=2, M=4)        # numpy in, no init
    assert d.views[0].dtype == D64 and "t_var_s" in d.init and d.out_dims == [3, 2]
    with pytest.raises(ValueError, match=r"views\[1\].*10 rows"):
        McGPDSData([Y, Y[:8]], t, np.zeros(10), Q=2, M=4)
    with pytest.raises(ValueError, match=r"views\[1\].*same value"):
        McGPDSData([Y, np.ones((10, 2))], t, np.zeros(10), Q=2, M=4)
    with pytest.raises(ValueError, match="at least 2"):
        McGPDSData([Y[:1]], t[:1], np.zeros(1), Q=1, M=1)
    with pytest.raises(ValueError, match="seq_ids"):
        McGPDSData([Y], t, np.zeros(9), Q=2, M=4)
    with pytest.raises(ValueError, match="Q"):
        McGPDSData([Y], t, np.zeros(10), Q=0, M=4)
    for name, what in (("eps", "ε"), ("beta", "β"), ("t_white", "variance")):
        with pytest.raises(ValueError, match=rf"{name}_\w+.*{what}.*positive"):
            init = {f"{name}_0" if name != "t_white" else "t_white_s": torch.tensor(-1.0, dtype=D64)}
            McGPDSData([Y], t, np.zeros(10), Q=2, M=4, init=init)
    with pytest.raises(ValueError, match="eps_0"):
        simulate(torch.linspace(0, 1, 5, dtype=D64), torch.zeros(5), [2], M=3, eps=-0.1)
    with pytest.raises(ValueError, match="fixed"):
        McGPDSData([Y], t, np.zeros(10), Q=2, M=4, fixed=("alhpa",))


def test_fit_and_predict_validate_their_inputs():
    train, test, t, tt = two_views(N=20, Nt=5)
    with pytest.raises(ValueError, match=r"views\[0\].*same value"):
        fit_mcgpds([np.zeros((20, 3)), train[1]], t, progress=False)
    with pytest.raises(ValueError, match="at least 2"):
        fit_mcgpds([train[0][:1], train[1][:1]], t[:1], progress=False)
    with pytest.raises(ValueError, match="eps_init"):
        fit_mcgpds(train, t, config=McGPDSConfig(Q=2, M=5, eps_init=-1e-3), progress=False)
    with pytest.raises(ValueError, match="beta_init"):
        fit_mcgpds(train, t, config=McGPDSConfig(Q=2, M=5, beta_init=-2.0), progress=False)
    with pytest.raises(ValueError, match="time_white_var"):
        fit_mcgpds(train, t, config=McGPDSConfig(Q=2, M=5, time_white_var=-0.1), progress=False)
    f = fit_mcgpds(train, t, config=McGPDSConfig(Q=2, M=5, fixed=("alpha", "eps", "beta", "time", "W"),
                                                 cycles=0, joint_iters=2), progress=False)
    with pytest.raises(ValueError, match="at least one test frame"):
        predict_view(f, np.zeros((0, 5)), np.zeros(0))
    m = McGPDS(Q=2, M=5, cycles=0, joint_iters=2).fit(train)
    with pytest.raises(ValueError, match="at least one test frame"):
        m.predict(np.zeros((0, 5)))
    with pytest.raises(ValueError, match="columns"):
        m.predict(test[1])
    with pytest.raises(TypeError, match="unknown option"):
        McGPDS(Qq=3)


# ------------------------------------------------------------------ q(U), q(V) after a collapsed fit

def test_collapsed_fit_stores_optimal_inducing_posteriors_for_the_guide():
    train, _, t, _ = two_views(N=40)
    cfg = McGPDSConfig(Q=2, M=12, fixed=("alpha", "eps", "beta", "time", "W"), **SHORT)
    f = fit_mcgpds(train, t, config=cfg, progress=False)
    store = pyro.get_param_store()
    hp = hyperparams(f.data)
    mus, lams = variational_params(f.data)
    q_v, _ = optimal_q_inducing(f.data, hp, mus, lams)
    for k in range(2):
        torch.testing.assert_close(store[f"qv_m_{k}"].detach(), q_v[k][0])
    idata = posterior_predictive(model, Guide(), f.data, num_samples=30, seed=0, dims=dims(2))
    ppc = idata.posterior_predictive["y_1"].values[0]                  # (S, N, D)
    Y = train[1] - train[1].mean(0)          # the fit's views are as given: compare centred errors
    err = np.sqrt(((ppc.mean(0) - train[1]) ** 2).mean())
    assert err < 0.3 * np.sqrt((Y ** 2).mean())                          # far better than the mean
    # the guide's initial q(V) (mean 0) instead: no better than predicting zero — what the
    # automatic step prevents
    for k in range(2):
        del store[f"qv_m_{k}"]
        pyro.param(f"qv_m_{k}", torch.zeros_like(q_v[k][0]))
    bad = posterior_predictive(model, Guide(), f.data, num_samples=30, seed=0).posterior_predictive["y_1"]
    err0 = np.sqrt(((bad.values[0].mean(0) - train[1]) ** 2).mean())
    assert err0 > 0.8 * np.sqrt((train[1] ** 2).mean())


def test_save_and_load_give_the_same_predictions(tmp_path):
    train, test, t, tt = two_views(N=30, Nt=8)
    m = McGPDS(Q=2, M=10, scale="column", **SHORT).fit([5.0 * train[0], train[1]], t)
    m.save(tmp_path / "m.pt")
    m2 = McGPDS.load(tmp_path / "m.pt")
    for method in ("tandem", "generative"):
        a, b = m.predict(5.0 * test[0], tt, method=method), m2.predict(5.0 * test[0], tt, method=method)
        np.testing.assert_array_equal(a.mean, b.mean)
        np.testing.assert_array_equal(a.var, b.var)
    with pytest.raises(ValueError, match="McGPDS.save"):
        torch.save({"x": 1}, tmp_path / "other.pt")
        McGPDS.load(tmp_path / "other.pt")


def test_to_inference_data_is_in_the_users_units():
    train, _, t, _ = two_views(N=30)
    c = 1e3
    m = McGPDS(Q=2, M=10, **SHORT).fit([c * train[0], train[1]], t)
    idata = m.to_inference_data(num_samples=20, seed=1)
    np.testing.assert_allclose(idata.observed_data["y_0"].values, c * train[0], rtol=1e-12)
    ppc = idata.posterior_predictive["y_0"].values[0]
    assert np.abs(ppc.mean(0) - c * train[0]).mean() < 0.2 * np.abs(c * train[0] - c * train[0].mean(0)).mean()
    # log density in user units = model-unit density − log(scale): compare with a ×1 fit
    m1 = McGPDS(Q=2, M=10, **SHORT).fit(train, t)
    ll1 = m1.to_inference_data(num_samples=20, seed=1).log_likelihood["y_0"].values
    np.testing.assert_allclose(idata.log_likelihood["y_0"].values, ll1 - math.log(c), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ model / guide contract

def test_guide_class_follows_the_contract():
    d = _sim_data()
    g = Guide(inducing_scale=0.2)
    with pytest.raises(TypeError):
        Guide(0.2)                                   # keyword-only options
    gtr = poutine.trace(g).get_trace(d)
    mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(d)
    def latent(tr):   # sampled, unobserved sites (plates appear in traces as subsample sites)
        return {n for n in tr.stochastic_nodes if type(tr.nodes[n]["fn"]).__name__ != "_Subsample"}
    assert latent(mtr) == latent(gtr) == {"X_s", "X_0", "X_1", "v_0", "v_1", "u_0", "u_1"}
    assert float(pyro.param("qv_L_0")[0, 0, 0]) == pytest.approx(0.2)
    assert np.isfinite(Trace_ELBO().loss(model, g, d))
    assert set(dims(3)) >= {"X_s", "X_2", "y_2", "u_2", "v_2"}


# ------------------------------------------------------------------ calibrated predictor

def test_calibrated_extra_variance_matches_heldout_squared_error():
    """δ_d makes the mean held-out predictive variance equal the mean held-out squared error
    wherever the model's own variance was too small (and never lowers a variance)."""
    train, test, t, tt = two_views(N=50)
    cfg = McGPDSConfig(Q=2, M=12, fixed=("alpha", "eps", "beta", "time", "W"), **SHORT)
    f = fit_mcgpds(train, t, config=cfg, progress=False)
    cp = calibrated_prediction(f, test[0], tt, test_iters=4)
    hm, hv = holdout_predictions(f, nn_features=cp_features(f), test_iters=4, method="code", fixll=True,
                                 output_components="h", k_neighbours=1)
    torch.testing.assert_close(cp.holdout_mean, hm)
    Y = torch.as_tensor(train[1])
    mse, mv = ((Y - hm) ** 2).mean(0), hv.mean(0)
    delta = calibrated_extra_var(hm, hv, Y)
    assert (delta >= 0).all()
    raised = delta > 0
    torch.testing.assert_close((mv + delta)[raised], mse[raised])
    assert (mv[~raised] >= mse[~raised] - 1e-12).all()
    torch.testing.assert_close(cp.delta, delta)
    assert (cp.prediction.var >= delta - 1e-12).all()


def cp_features(f):
    """The default "std" features of calibrated_prediction on the training source view."""
    X = f.views[0]
    return (X - X.mean(0)) / X.std(0, unbiased=False)


# ------------------------------------------------------------------ cache and checkpoints

def test_fit_cache_keys_on_content_and_checkpoints_refuse_other_problems(tmp_path):
    train, _, t, _ = two_views(N=20)
    cfg = McGPDSConfig(Q=2, M=5, fixed=("alpha", "eps", "beta", "time", "W"), cycles=0, joint_iters=3)
    other = [train[0][::-1].copy(), train[1]]                          # same shapes, other data
    assert fit_fingerprint(train, t, None, None, cfg, 0) != fit_fingerprint(other, t, None, None, cfg, 0)
    cfg3 = McGPDSConfig(**{**cfg.__dict__, "Q": 3})
    assert fit_fingerprint(train, t, None, None, cfg, 0) != fit_fingerprint(train, t, None, None, cfg3, 0)
    f1, _, loaded = cached_fit(train, t, config=cfg, cache_dir=tmp_path, progress=False)
    assert not loaded
    f2, _, loaded = cached_fit(train, t, config=cfg, cache_dir=tmp_path, progress=False)
    assert loaded and torch.equal(f2.mu_s, f1.mu_s)
    f3, _, loaded = cached_fit(other, t, config=cfg, cache_dir=tmp_path, progress=False)
    assert not loaded
    ck = tmp_path / "ck" / "run"
    fit_mcgpds(train, t, config=cfg, checkpoint=ck, progress=False)
    fit_mcgpds(train, t, config=cfg, checkpoint=ck, progress=False)    # same problem: resumes
    with pytest.raises(ValueError, match="different problem"):
        fit_mcgpds(train, t, config=cfg3, checkpoint=ck, progress=False)
