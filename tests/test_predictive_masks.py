"""Masked (missing) observations in posterior_predictive exports and PSIS-LOO: the pointwise
log-likelihood leaves masked points out (NaN) and follows lp's scale; loo / az.loo on a masked
model equal the model on the scored points only (and the closed-form Normal–Normal LOO);
rescale_sites on to_event sites; psis on constant ratios and its r_eff contract; McGPDS exports
of views with NaN entries."""
import warnings

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import scipy.stats as st
import torch
import xarray as xr
from pyro import poutine

from tandem.inference import compare, loo, posterior_predictive
from tandem.inference.predictive import ARVIZ_MAJOR, _set_group, rescale_sites, scored_log_likelihood
from tandem.inference.psis import psis

TAU, SIG = 2.0, 1.0
Y5 = torch.tensor([0.3, -1.2, 2.0, 0.7, 100.0], dtype=torch.float64)   # 100: placeholder of a missing value
MASK = torch.tensor([True, True, True, True, False])
D64 = torch.float64


def posterior_of(y):
    """Exact posterior N(m, v) of mu given y under mu ~ N(0, TAU²), y_i ~ N(mu, SIG²)."""
    prec = 1 / TAU ** 2 + len(y) / SIG ** 2
    return float(np.sum(y) / SIG ** 2 / prec), 1 / prec


def exact_loo(y):
    out = []
    for i in range(len(y)):
        m, v = posterior_of(np.delete(y, i))
        out.append(st.norm.logpdf(y[i], m, np.sqrt(v + SIG ** 2)))
    return np.array(out)


M4, V4 = posterior_of(Y5[:4].numpy())


def exact_guide(*args):
    pyro.sample("mu", dist.Normal(torch.tensor(M4, dtype=D64), V4 ** 0.5))


def model_dist_mask(y, mask):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=D64), TAU))
    with pyro.plate("n", len(y)):
        pyro.sample("y", dist.Normal(mu, SIG).mask(mask), obs=y)


def model_poutine_mask(y, mask):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=D64), TAU))
    with pyro.plate("n", len(y)), poutine.mask(mask=mask):
        pyro.sample("y", dist.Normal(mu, SIG), obs=y)


def only_observed(idata, keep):
    """The same draws with the log-likelihood of the scored points only (the 4-point model)."""
    ref = idata.copy()
    ll = idata.log_likelihood["y"]
    _set_group(ref, "log_likelihood", xr.Dataset({"y": ll.isel({ll.dims[2]: keep})}))
    return ref


@pytest.mark.parametrize("model", [model_dist_mask, model_poutine_mask])
def test_masked_points_are_nan_in_log_likelihood_and_observed_data(model):
    idata = posterior_predictive(model, exact_guide, Y5, MASK, num_samples=50, seed=0)
    mu = idata.posterior["mu"].values[0]
    ll = idata.log_likelihood["y"].values[0]
    assert np.all(np.isnan(ll[:, 4]))
    np.testing.assert_allclose(ll[:, :4], st.norm.logpdf(Y5.numpy()[None, :4], mu[:, None], SIG), rtol=1e-12)
    obs = idata.observed_data["y"].values
    assert np.isnan(obs[4]) and np.array_equal(obs[:4], Y5.numpy()[:4])
    # Σ over the scored points is the observation part of lp
    lp = idata.sample_stats["lp"].values[0]
    np.testing.assert_allclose(np.nansum(ll, axis=1), lp - st.norm.logpdf(mu, 0, TAU), rtol=1e-12)
    # the masked point still gets a posterior predictive draw (an imputation)
    assert np.all(np.isfinite(idata.posterior_predictive["y"].values))


@pytest.mark.parametrize("model", [model_dist_mask, model_poutine_mask])
def test_loo_of_a_masked_model_is_the_loo_of_the_observed_points(model):
    idata = posterior_predictive(model, exact_guide, Y5, MASK, num_samples=2000, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # an exact guide: no Pareto-k̂ warning either
        r = loo(idata)
        ref = loo(only_observed(idata, [0, 1, 2, 3]))
    assert r.n_points == ref.n_points == 4
    for f in ("elpd", "se", "mcse", "p_loo", "k_hat_q"):
        assert getattr(r, f) == pytest.approx(getattr(ref, f), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(r.pointwise[:4], ref.pointwise, rtol=1e-12)
    assert np.isnan(r.pointwise[4]) and np.isnan(r.k_hat[4])
    want = exact_loo(Y5.numpy()[:4])
    assert abs(r.elpd - want.sum()) < 4 * r.mcse + 0.01
    assert r.se == pytest.approx(np.sqrt(4 * np.var(want)), rel=0.05)
    # az.loo on the export with the masked points dropped equals az.loo of the observed points
    a = az.loo(scored_log_likelihood(idata))
    b = az.loo(only_observed(idata, [0, 1, 2, 3]))
    assert a.n_data_points == 4
    for f in (("elpd_loo", "elpd"), ("se", "se"), ("p_loo", "p")):     # ArviZ 0.x / 1.x names
        name = f[0] if hasattr(a, f[0]) else f[1]
        assert float(getattr(a, name)) == pytest.approx(float(getattr(b, name)), rel=1e-12)
    assert np.isnan(idata.log_likelihood["y"].values[0, :, 4]).all()      # the export itself is untouched


@pytest.mark.filterwarnings("ignore:loo. Pareto")
def test_compare_of_fits_with_the_same_mask_has_a_paired_se():
    fits = {"a": posterior_predictive(model_dist_mask, exact_guide, Y5, MASK, num_samples=200, seed=0),
            "b": posterior_predictive(model_poutine_mask, exact_guide, Y5, MASK, num_samples=200, seed=3)}
    df = compare(fits)
    assert np.all(np.isfinite(df["d_se"])) and np.all(np.isfinite(df["max_k_hat"]))


def test_scored_log_likelihood_refuses_an_export_without_the_group_and_partial_nan():
    idata = posterior_predictive(model_dist_mask, exact_guide, Y5, MASK, num_samples=10, seed=0)
    with pytest.raises(ValueError, match="log_likelihood"):
        scored_log_likelihood(az.from_dict(posterior={"m": np.zeros((1, 3))}) if ARVIZ_MAJOR == 0
                              else az.from_dict({"posterior": {"m": np.zeros((1, 3))}}))
    bad = idata.copy()
    ll = bad.log_likelihood["y"].values.copy()
    ll[0, 0, 1] = np.nan                             # NaN in one draw only: not a mask
    bad.log_likelihood["y"].values[:] = ll
    with pytest.raises(ValueError, match="some draws only"):
        scored_log_likelihood(bad)
    with pytest.raises(ValueError, match="some draws only"):
        loo(bad)


def test_scaled_site_log_likelihood_is_the_term_lp_holds():
    def model(y):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=D64), TAU))
        with pyro.plate("n", len(y)), poutine.scale(scale=2.5):
            pyro.sample("y", dist.Normal(mu, SIG), obs=y)

    y = Y5[:4]
    idata = posterior_predictive(model, exact_guide, y, num_samples=20, seed=0)
    mu = idata.posterior["mu"].values[0]
    ll = idata.log_likelihood["y"].values[0]
    np.testing.assert_allclose(ll, 2.5 * st.norm.logpdf(y.numpy()[None], mu[:, None], SIG), rtol=1e-12)
    np.testing.assert_allclose(ll.sum(1), idata.sample_stats["lp"].values[0] - st.norm.logpdf(mu, 0, TAU),
                               rtol=1e-12)


def test_to_event_site_masks_whole_points_and_partial_events():
    rows = torch.tensor([[0.3, 1.0], [-1.2, 0.5], [2.0, -0.4], [0.7, 0.1], [9.0, 9.0]], dtype=D64)
    entry = torch.tensor([[True, False], [True, True], [True, True], [True, True], [False, False]])

    def model(y):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=D64), TAU))
        with pyro.plate("n", 5):
            pyro.sample("y", dist.Normal(mu, SIG).expand([5, 2]).mask(entry).to_event(1), obs=y)

    idata = posterior_predictive(model, exact_guide, rows, num_samples=20, seed=0)
    mu = idata.posterior["mu"].values[0]
    ll = idata.log_likelihood["y"].values[0]                            # (S, 5): one point per row
    dens = st.norm.logpdf(rows.numpy()[None], mu[:, None, None], SIG) * entry.numpy()[None]
    np.testing.assert_allclose(ll[:, :4], dens.sum(2)[:, :4], rtol=1e-12)
    assert np.all(np.isnan(ll[:, 4]))
    obs = idata.observed_data["y"].values
    np.testing.assert_array_equal(np.isnan(obs), ~entry.numpy())


def test_enumerated_model_with_a_mask_leaves_the_masked_point_out():
    y = torch.tensor([-2.1, -1.7, 0.2, 2.3, 50.0], dtype=D64)

    def model(y):
        locs = pyro.sample("locs", dist.Normal(torch.zeros(2, dtype=D64), 3.0).to_event(1))
        with pyro.plate("n", len(y)):
            z = pyro.sample("z", dist.Categorical(torch.tensor([0.3, 0.7], dtype=D64)),
                            infer={"enumerate": "parallel"})
            with poutine.mask(mask=MASK):
                pyro.sample("y", dist.Normal(locs[z], 0.8), obs=y)

    def guide(y):
        pyro.sample("locs", dist.Normal(torch.tensor([-2.0, 2.0], dtype=D64), 0.3).to_event(1))

    idata = posterior_predictive(model, guide, y, num_samples=20, seed=0)
    L = idata.posterior["locs"].values[0]
    ll = idata.log_likelihood["y"].values[0]
    ref = np.logaddexp(np.log(0.3) + st.norm.logpdf(y.numpy()[None, :4], L[:, :1], 0.8),
                       np.log(0.7) + st.norm.logpdf(y.numpy()[None, :4], L[:, 1:], 0.8))
    np.testing.assert_allclose(ll[:, :4], ref, rtol=1e-10)
    assert np.all(np.isnan(ll[:, 4]))
    lp = idata.sample_stats["lp"].values[0]
    np.testing.assert_allclose(lp, st.norm.logpdf(L, 0, 3).sum(1) + ref.sum(1), rtol=1e-10)


# ------------------------------------------------------------------ rescale_sites
def event_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=D64), TAU))
    with pyro.plate("n", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, SIG).expand([y.shape[0], 2]).to_event(1), obs=y)


def test_rescale_sites_of_a_to_event_site_subtracts_the_row_jacobian():
    y = torch.tensor([[0.3, 1.0], [-1.2, 0.5], [2.0, -0.4], [0.7, 0.1]], dtype=D64)
    sc, m = np.array([2.0, 0.5]), np.array([10.0, -3.0])
    idata = posterior_predictive(event_model, exact_guide, y, num_samples=30, seed=0,
                                 dims={"y": ["row", "col"]})
    lp0 = idata.sample_stats["lp"].values.copy()
    rescale_sites(idata, {"y": ("col", sc, m)})
    mu = idata.posterior["mu"].values[0]
    ll = idata.log_likelihood["y"].values[0]
    assert ll.shape == (30, 4)
    # closed form: the density of y_data = y·sc + m, entry d ~ N(mu·sc_d + m_d, (SIG·sc_d)²)
    y_data = y.numpy() * sc + m
    want = st.norm.logpdf(y_data[None], mu[:, None, None] * sc + m, SIG * sc).sum(2)
    np.testing.assert_allclose(ll, want, rtol=1e-12)
    np.testing.assert_allclose(idata.observed_data["y"].values, y_data, rtol=1e-15)
    np.testing.assert_allclose(idata.sample_stats["lp"].values, lp0 - 4 * np.log(sc).sum(), rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert loo(idata).n_points == 4


def test_rescale_sites_masked_entries_carry_no_jacobian_and_per_entry_sites_are_unchanged():
    sc, m = np.array([2.0, 0.5, 4.0]), np.zeros(3)
    y = torch.tensor([[0.3, 1.0, 0.2], [-1.2, 0.5, 0.0]], dtype=D64)
    keep = torch.tensor([[True, False, True], [True, True, True]])

    def model(y):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=D64), TAU))
        with pyro.plate("c", 3, dim=-1), pyro.plate("r", 2, dim=-2), poutine.mask(mask=keep):
            pyro.sample("y", dist.Normal(mu, SIG), obs=y)

    idata = posterior_predictive(model, exact_guide, y, num_samples=10, seed=0, dims={"y": ["row", "col"]})
    ll0, lp0 = idata.log_likelihood["y"].values.copy(), idata.sample_stats["lp"].values.copy()
    rescale_sites(idata, {"y": ("col", sc, m)})
    np.testing.assert_array_equal(idata.log_likelihood["y"].values, ll0 - np.log(sc))     # NaN stays NaN
    jac = (np.log(sc)[None] * keep.numpy()).sum()
    np.testing.assert_allclose(idata.sample_stats["lp"].values, lp0 - jac, rtol=1e-12)
    with pytest.raises(ValueError, match="dim 'row' is not the last dimension"):
        rescale_sites(idata, {"y": ("row", sc[:2], m[:2])})


# ------------------------------------------------------------------ psis
@pytest.mark.parametrize("r_eff", [0, -1.0, float("nan"), float("inf"), "1"])
def test_psis_r_eff_must_be_a_finite_positive_number(r_eff):
    with pytest.raises(ValueError, match="r_eff"):
        psis(np.random.default_rng(0).normal(size=100), r_eff=r_eff)


def test_psis_constant_ratios_are_exact_equal_weights_and_other_columns_still_match_arviz():
    rng = np.random.default_rng(0)
    for lr in (np.full(1000, -7.3), -7.3 + 1e-14 * rng.normal(size=1000), 1e4 + 1e-12 * rng.normal(size=1000)):
        lw, k = psis(lr)
        assert k == -np.inf
        np.testing.assert_allclose(np.exp(lw), 1e-3, rtol=1e-9)
    lr = rng.standard_t(3, size=(1000, 3))
    lr[:, 1] = 4.0
    lw, k = psis(lr)
    assert k[1] == -np.inf
    if hasattr(az, "psislw"):                          # ArviZ 0.x (1.x moved PSIS to arviz_stats)
        lw_az, k_az = az.psislw(lr.T.copy(), reff=1.0)
        assert np.isinf(k_az[1])                       # ArviZ's convention there: inf (documented difference)
        np.testing.assert_allclose(k[[0, 2]], k_az[[0, 2]], rtol=1e-12)
        np.testing.assert_allclose(lw[:, [0, 2]], lw_az.T[:, [0, 2]], atol=1e-12)


def test_loo_with_the_exact_posterior_as_guide_raises_no_alarm():
    y = Y5[:4]
    idata = posterior_predictive(model_poutine_mask, exact_guide, y, torch.ones(4, dtype=torch.bool),
                                 num_samples=2000, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = loo(idata)
    assert r.k_hat_q == -np.inf and not r.warning
    assert abs(r.elpd - exact_loo(y.numpy()).sum()) < 4 * r.mcse + 0.01
    assert "k_hat_q=-inf" in repr(r)


# ------------------------------------------------------------------ McGPDS with NaN entries
def test_mcgpds_export_of_views_with_nan_leaves_the_missing_entries_out():
    from tandem.inference.mcgpds import McGPDS
    rng = np.random.default_rng(0)
    t = np.arange(24) * 0.1
    views = [np.c_[np.sin(t), np.cos(t), np.sin(2 * t)] + 0.05 * rng.normal(size=(24, 3)),
             np.c_[np.cos(t), np.sin(3 * t)] + 0.05 * rng.normal(size=(24, 2))]
    views[0][5, 1] = views[0][10, 0] = np.nan
    views[1][3] = np.nan                                            # a whole frame missing from view 1
    m = McGPDS(Q=2, M=6, cycles=1, var_iters=5, model_iters=5, joint_iters=10).fit(views, times=t)
    idata = m.to_inference_data(num_samples=5, seed=0)
    for k, Y in enumerate(views):
        ll = idata.log_likelihood[f"y_{k}"].values[0]
        miss = np.isnan(Y)
        assert np.all(np.isnan(ll[:, miss])) and np.all(np.isfinite(ll[:, ~miss]))
        obs = idata.observed_data[f"y_{k}"].values
        np.testing.assert_array_equal(np.isnan(obs), miss)
        np.testing.assert_allclose(obs[~miss], Y[~miss], rtol=1e-10, atol=1e-12)
    assert np.all(np.isfinite(idata.sample_stats["lp"].values))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = loo(idata)
    assert r.n_points == sum(int(np.sum(~np.isnan(Y))) for Y in views) and np.isfinite(r.elpd)


@pytest.mark.filterwarnings("ignore:McGPDS. learning")
def test_mcgpds_optimal_inducing_of_a_masked_view_matches_the_masked_posterior():
    from tandem.guides.mcgpds import variational_params
    from tandem.inference.mcgpds.bound import _mapping, latent_terms
    from tandem.inference.mcgpds.missing import masked_view_posterior
    from tandem.inference.mcgpds.uncollapsed import optimal_q_inducing
    from tandem.models.mcgpds import McGPDSData, default_init, hyperparams, view_bases

    g = torch.Generator().manual_seed(0)
    N, Q, M, J = 10, 2, 4, 2
    t = torch.linspace(0, 1, N, dtype=D64)
    Y = torch.randn(N, 4, dtype=D64, generator=g)
    Y[2, 0] = Y[5, 0] = Y[7, 2] = float("nan")
    Y[:, 3] = float("nan")                                          # a column never observed
    views = [torch.randn(N, 2, dtype=D64, generator=g), Y]
    init = default_init(N, [2, 4], Q, M, J, "rbfard", times=t, generator=g)
    data = McGPDSData(views, t, torch.zeros(N, dtype=torch.long), Q, M, J, "rbfard", init=init,
                      fixed=frozenset())
    pyro.clear_param_store()
    with torch.no_grad():
        hp = hyperparams(data)
        mus, lams = variational_params(data)
        q_v, q_u = optimal_q_inducing(data, hp, mus, lams)
        s = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)["s_diag"][1]
        v = hp["views"][1]
        post = masked_view_posterior(Y, mus[1], s, v, _mapping(data))
        bh, bgs = view_bases(v, _mapping(data))
    H = bh.kzz()
    (mv, Lv), (mu_u, Lu) = q_v[1], q_u[1]
    assert torch.isfinite(mv).all() and torch.isfinite(mu_u).all()
    torch.testing.assert_close(mv, (H @ post.bh).mT, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(Lv @ Lv.mT, H - H @ post.Ch @ H, rtol=1e-6, atol=1e-8)
    for j, bg in enumerate(bgs):
        G = bg.kzz()
        torch.testing.assert_close(mu_u[j], (G @ post.bg[j]).mT, rtol=1e-7, atol=1e-9)
        torch.testing.assert_close(Lu[j] @ Lu[j].mT, G - G @ post.Cg[j] @ G, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(mv[3], torch.zeros(M, dtype=D64))               # never observed: the prior
    torch.testing.assert_close(Lv[3] @ Lv[3].mT, H, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------ Pyro's obs_mask= imputation sites
_Y = torch.tensor([0.5, 1.0, -0.3, 2.0, 0.1], dtype=torch.float64)
_OBS = torch.tensor([True, True, False, True, True])


def _imputing_model(y=None, mask=None):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 5.0))
    with pyro.plate("n", 5):
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y, obs_mask=mask)


def _exact_guide_sampling_every_entry(y=None, mask=None):
    """The exact posterior of (mu, the missing y) — but, like AutoNormal, it also draws the entries
    of y_unobserved where y is observed (the model masks those: they are in no density)."""
    yo = y[mask]
    prec = 1 / 25 + yo.numel()
    mu = pyro.sample("mu", dist.Normal(yo.sum() / prec, prec ** -0.5))
    with pyro.plate("n", 5):
        pyro.sample("y_unobserved", dist.Normal(mu.expand(5), 1.0))


def test_obs_mask_entries_the_model_does_not_score_are_left_out_of_log_q():
    """With the exact posterior as guide, log p(θ, y) − log q(θ) is the constant log p(y_obs) on every
    draw (closed form: y_obs ~ N(0, 25·11ᵀ + I)); q-densities of the masked entries of y_unobserved
    would make it vary (the importance ratio of an exact guide would look wrong)."""
    d = posterior_predictive(_imputing_model, _exact_guide_sampling_every_entry, y=_Y, mask=_OBS, num_samples=50)
    ratio = d.sample_stats["lp"].values - d.sample_stats["log_q"].values
    yo = _Y[_OBS].numpy()
    want = st.multivariate_normal(np.zeros(4), 25 * np.ones((4, 4)) + np.eye(4)).logpdf(yo)
    np.testing.assert_allclose(ratio, want, rtol=0, atol=1e-10)
    # the missing entry is NaN where it is data, the observed ones are scored
    ll = d.log_likelihood["y_observed"].values
    assert np.isnan(ll[..., 2]).all() and np.isfinite(np.delete(ll, 2, axis=-1)).all()


def test_obs_mask_with_an_autoguide_exports_and_scores_the_observed_points():
    from pyro.infer.autoguide import AutoNormal

    from tandem.inference import fit
    pyro.clear_param_store()
    guide = AutoNormal(_imputing_model)
    fit(_imputing_model, guide, y=_Y, mask=_OBS, num_steps=300, progress=False)
    d = posterior_predictive(_imputing_model, guide, y=_Y, mask=_OBS, num_samples=40)
    assert {"mu", "y_unobserved"} <= set(d.posterior.data_vars)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert loo(d).n_points == 4
