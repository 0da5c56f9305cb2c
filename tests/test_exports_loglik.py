"""Pointwise log-likelihoods of the estimators' ArviZ exports, in the data's units: summed, they
equal the model's log density of the observed data computed independently (closed forms with
scipy) at the exported latent draws; only model latents in ``posterior``; named dims."""
import numpy as np
import pyro
import pytest
import scipy.stats as st
from scipy.special import logsumexp

from tandem.inference import loo
from tandem.inference.samtc.model_fit import fit_model
from tandem.inference.samtc.simulate import simulate_tasks


def _dims_named(ds):
    for name, var in ds.data_vars.items():
        for dim in var.dims:
            assert "_dim_" not in dim, (name, var.dims)


@pytest.fixture(scope="module")
def samtc_export():
    sim = simulate_tasks(n_tasks=2, n_shared=2, n_private=(1, 1), n_points=(60, 50), d=2, min_per_class=5,
                         separation=6.0, near=3.0, seed=4)
    pyro.clear_param_store()
    mf = fit_model([5.0 * X + 2.0 for X in sim.tasks], sim.h, num_steps=40, seed=0)
    return sim, mf, mf.to_inference_data(num_samples=4, seed=0)


def test_exports_samtc_log_likelihood_sums_labels_out_in_data_units(samtc_export):
    sim, mf, idata = samtc_export
    post, ll, obs = idata.posterior, idata.log_likelihood, idata.observed_data
    widen = mf.model_kwargs.get("widen", 3.0)
    for t in range(2):
        x = obs[f"x_{t}"].values                                            # data units
        assert ll[f"x_{t}"].dims == ("chain", "draw", f"instance_{t}")
        for s in range(4):
            w, rho = post[f"w_{t}"].values[0, s], float(post[f"rho_{t}"].values[0, s])
            mu, sig = post[f"mu_{t}"].values[0, s], float(post[f"sigma_{t}"].values[0, s])   # data units
            comp = []
            for c in range(len(w)):
                for u, sd, pu in ((1, sig, rho), (0, widen * sig, 1 - rho)):
                    comp.append(np.log(w[c] * pu) + st.norm.logpdf(x, mu[c], sd).sum(1))
            want = logsumexp(np.stack(comp), axis=0)
            np.testing.assert_allclose(ll[f"x_{t}"].values[0, s], want, rtol=1e-8)


def test_exports_samtc_posterior_holds_only_model_latents_with_named_dims(samtc_export):
    _, _, idata = samtc_export
    names = set(idata.posterior.data_vars)
    assert not names & {"atoms", "slots_0", "slots_1", "inst_0", "inst_1"}
    assert {"pi", "theta", "a_0", "y_1", "u_0", "mu_1", "w_0", "rho_1", "sigma_0"} <= names
    for g in ("posterior", "posterior_predictive", "observed_data", "log_likelihood"):
        _dims_named(idata[g])


def test_exports_samtc_sample_stats_give_a_finite_variational_loo(samtc_export):
    _, _, idata = samtc_export
    lp, lq = idata.sample_stats["lp"].values, idata.sample_stats["log_q"].values
    assert lp.shape == lq.shape == (1, 4) and np.all(np.isfinite(lp)) and np.all(np.isfinite(lq))
    r = loo(idata, warn=False)
    assert r.n_points == 110 and np.isfinite(r.elpd)


def test_exports_coupled_projections_log_likelihood_is_the_density_of_the_pca_coordinates():
    """Σ_n log_lik = Σ_n log N(z_n; RᵀQ u_n, σ² B) with z_n the raw (PCA) coordinates of point n
    in its view's block, at the exported U draws and the fitted frame Q (scipy, no whitening)."""
    from tandem.inference.coupled_projections.solver import CoupledProjections
    from tandem.models.coupled_projections import orthonormal, simulate
    sim = simulate(n=30, d=2, dx=4, dy=3, seed=2)
    known = np.arange(0, 30, 3)
    cp = CoupledProjections(d=2, k=4).fit(sim["X"], sim["Y"], np.c_[known, known])
    sigma = 0.05
    idata = cp.to_inference_data(num_samples=3, num_steps=30, sigma=sigma)
    Q = orthonormal(cp.svi_result_.params["Q_raw"]).detach().numpy()
    R = cp.whitened_.R
    ll = idata.log_likelihood["zhat"]
    assert ll.dims == ("chain", "draw", "point")
    for s in range(3):
        U = idata.posterior["U"].values[0, s]                                # (d, N)
        want = [st.multivariate_normal.logpdf(cp.Z[:, n], R.T @ Q @ U[:, n], sigma ** 2 * cp.B)
                for n in range(cp.Z.shape[1])]
        np.testing.assert_allclose(ll.values[0, s], want, rtol=1e-8)
    # X/Y in the user's units: the PCA keeps every direction here, so observed X, Y are the data
    np.testing.assert_allclose(idata.observed_data["X"].values, sim["X"], atol=1e-9)
    np.testing.assert_allclose(idata.observed_data["Y"].values, sim["Y"], atol=1e-9)
    assert idata.posterior_predictive["X"].dims == ("chain", "draw", "x_point", "x_feature")
    assert idata.posterior_predictive["Y"].shape == (1, 3, 30, 3)
    # predictive X given U: mean_x + components_x (RᵀQ u_n)^x plus noise of covariance σ² B_x
    rx = cp.dims[0]
    for s in range(3):
        U = idata.posterior["U"].values[0, s]
        loc = (R.T @ Q @ U)[:rx, :30].T @ cp.pca_x.components.T + cp.pca_x.mean
        resid = idata.posterior_predictive["X"].values[0, s] - loc
        assert np.abs(resid).max() < 6 * sigma * np.sqrt(np.abs(cp.B).max())
    for g in ("posterior", "posterior_predictive", "observed_data", "log_likelihood", "sample_stats"):
        _dims_named(idata[g])
    assert np.all(np.isfinite(idata.sample_stats["lp"].values))


def test_exports_mcgpds_named_dims_and_lp_in_data_units():
    """McGPDS export: named dims in every group (sample_stats too); lp = log p(θ, y) carries the
    data-unit Jacobian −N·D·log c of a view scaled by c, as log_likelihood does per entry."""
    import math

    from tandem.inference.mcgpds import McGPDS
    rng = np.random.default_rng(0)
    t = np.arange(30) * 0.1
    s = np.sin(2 * np.pi * t / 3.0)
    views = [np.tanh(np.c_[np.cos(t), s] @ rng.normal(size=(2, D))) + 0.05 * rng.standard_normal((30, D))
             for D in (3, 2)]
    short = dict(cycles=1, var_iters=10, model_iters=10, joint_iters=30)
    c = 1e3
    exports = [McGPDS(Q=2, M=8, **short).fit(v, t).to_inference_data(num_samples=5, seed=1)
               for v in ([c * views[0], views[1]], views)]
    for g in ("posterior", "posterior_predictive", "observed_data", "log_likelihood", "sample_stats"):
        _dims_named(exports[0][g])
    lp_c, lp_1 = exports[0].sample_stats["lp"].values, exports[1].sample_stats["lp"].values
    np.testing.assert_allclose(lp_c, lp_1 - 30 * 3 * math.log(c), rtol=1e-6)
    np.testing.assert_allclose(exports[0].sample_stats["log_q"].values, exports[1].sample_stats["log_q"].values,
                               rtol=1e-6)


def test_exports_twin_gp_held_out_density_is_the_laplace_quasi_posterior():
    """log_likelihood["y"] = log N(y_true_b; ŷ_b, S H_b⁻¹ S) in data units, H_b the Hessian of the
    objective at the prediction by central finite differences (independent of autograd), S the
    output scales; the posterior predictive draws have that covariance."""
    import torch

    from tandem.inference.twin_gp.regressor import TwinGPRegressor
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(60, 2))
    Y = np.c_[np.sin(2 * X[:, 0]), X[:, 0] * X[:, 1]] * np.array([3.0, 0.5]) + 2.0
    Y = Y + 0.05 * rng.standard_normal(Y.shape)
    Xt = rng.uniform(-0.8, 0.8, size=(4, 2))
    Yt = np.c_[np.sin(2 * Xt[:, 0]), Xt[:, 0] * Xt[:, 1]] * np.array([3.0, 0.5]) + 2.0
    reg = TwinGPRegressor("KLTGP", rho_x=0.5, rho_y=0.5, lam=1e-3).fit(X, Y)
    idata = reg.to_inference_data(Xt, Yt, num_samples=4000, seed=0)
    Zt = reg.sx_.transform(reg._check_test(Xt))
    pred = reg._predict_std(Zt).detach()
    method, a, _ = reg._effective()
    ctx = reg.model_.context(Zt, method, a)
    h = 1e-4

    def f(y):
        return reg.model_.objective(y, ctx).detach().numpy()

    sc = np.asarray(reg.sy_.scale, dtype=float).reshape(-1)
    mu = np.asarray(reg.sy_.mean, dtype=float).reshape(-1)
    ll = idata.log_likelihood["y"].values[0, 0]
    assert ll.shape == (4,) and idata.log_likelihood["y"].dims == ("chain", "draw", "test")
    for b in range(4):
        H = np.zeros((2, 2))
        for i in range(2):
            for j in range(2):
                def at(di, dj):
                    y = pred.clone()
                    y[b, i] += di
                    y[b, j] += dj
                    return f(y)[b]
                H[i, j] = (at(h, h) - at(h, -h) - at(-h, h) + at(-h, -h)) / (4 * h * h)
        cov = np.diag(sc) @ np.linalg.inv(H) @ np.diag(sc)
        want = st.multivariate_normal.logpdf(Yt[b], pred[b].numpy() * sc + mu, cov)
        np.testing.assert_allclose(ll[b], want, rtol=1e-4, atol=1e-4)
        draws = idata.posterior_predictive["y"].values[0, :, b]
        np.testing.assert_allclose(np.cov(draws.T), cov, rtol=0.15, atol=0.05 * np.abs(cov).max())
    np.testing.assert_allclose(idata.observed_data["y"].values, Yt)
    torch.testing.assert_close(torch.as_tensor(idata.posterior["y"].values[0, 0]), torch.as_tensor(reg.predict(Xt)),
                               rtol=0, atol=1e-10)
