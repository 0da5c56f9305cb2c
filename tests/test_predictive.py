"""posterior_predictive → ArviZ data (InferenceData on ArviZ 0.x, DataTree on 1.x): groups, dims,
shapes, values; enumerated and uncovered sites; az.summary/loo/plots/netCDF."""
import warnings

import arviz as az
import matplotlib
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import config_enumerate
from torch.distributions import constraints

from tandem.inference import posterior_predictive
from tandem.inference.predictive import ARVIZ_MAJOR, draw

matplotlib.use("Agg")

DIMS = {"y": ["time", "output"], "mu": ["output"]}


def model(y):
    T, D = y.shape
    with pyro.plate("output", D, dim=-1):
        mu = pyro.sample("mu", dist.Normal(torch.zeros(D, dtype=y.dtype), 10.0))
        with pyro.plate("time", T, dim=-2):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def guide(y):
    D = y.shape[1]
    loc = pyro.param("loc", torch.zeros(D, dtype=y.dtype))
    scale = pyro.param("scale", 0.5 * torch.ones(D, dtype=y.dtype), constraint=constraints.positive)
    with pyro.plate("output", D, dim=-1):
        pyro.sample("mu", dist.Normal(loc, scale))


@pytest.fixture
def y():
    g = torch.Generator().manual_seed(0)
    return torch.randn(12, 3, generator=g, dtype=torch.float64) + torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)


def test_groups_dims_and_shapes(y):
    pyro.param("loc", torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    idata = posterior_predictive(model, guide, y, num_samples=30, dims=DIMS,
                                 coords={"output": ["a", "b", "c"]})
    for g in ("posterior", "posterior_predictive", "observed_data", "log_likelihood"):
        assert hasattr(idata, g), g
    assert idata.posterior["mu"].dims == ("chain", "draw", "output")
    assert idata.posterior["mu"].shape == (1, 30, 3)
    assert idata.posterior_predictive["y"].dims == ("chain", "draw", "time", "output")
    assert idata.posterior_predictive["y"].shape == (1, 30, 12, 3)
    assert list(idata.posterior["output"].values) == ["a", "b", "c"]
    np.testing.assert_array_equal(idata.observed_data["y"].values, y.numpy())
    assert idata.log_likelihood["y"].shape == (1, 30, 12, 3)
    # plates are not latent variables
    assert set(idata.posterior.data_vars) == {"mu"}


def test_values_follow_the_guide_and_the_likelihood(y):
    loc = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    pyro.param("loc", loc.clone())
    pyro.param("scale", torch.full((3,), 0.2, dtype=torch.float64), constraint=constraints.positive)
    d = draw(model, guide, y, num_samples=2000, seed=1)
    mu = d["posterior"]["mu"]
    # guide draws: mean within 4 standard errors of loc, sd near 0.2
    assert np.all(np.abs(mu.mean(0) - loc.numpy()) < 4 * 0.2 / np.sqrt(2000))
    np.testing.assert_allclose(mu.std(0), 0.2, rtol=0.08)
    # predictive y = mu + N(0,1): variance 1 + 0.04
    np.testing.assert_allclose(d["posterior_predictive"]["y"].var(0).mean(), 1.04, rtol=0.05)
    # pointwise log-likelihood is the Normal log density at each draw's mu
    ll = d["log_likelihood"]["y"][5]
    ref = torch.distributions.Normal(torch.as_tensor(mu[5]), 1.0).log_prob(y).numpy()
    np.testing.assert_allclose(ll, ref, rtol=1e-12)


def test_seed_reproducible(y):
    a = draw(model, guide, y, num_samples=5, seed=3)
    b = draw(model, guide, y, num_samples=5, seed=3)
    np.testing.assert_array_equal(a["posterior"]["mu"], b["posterior"]["mu"])


def test_arviz_summary_plot_and_netcdf_work(y, tmp_path):
    """The object works with the installed ArviZ's own tools (0.x: InferenceData, plot_ppc;
    1.x: xarray.DataTree, plot_ppc_dist) and survives a netCDF round trip."""
    import matplotlib.pyplot as plt
    idata = posterior_predictive(model, guide, y, num_samples=20, dims=DIMS)
    summ = az.summary(idata, var_names=["mu"], kind="stats")
    assert [str(i) for i in summ.index] == ["mu[0]", "mu[1]", "mu[2]"]
    if ARVIZ_MAJOR >= 1:
        assert type(idata).__name__ == "DataTree"
        az.plot_ppc_dist(idata, var_names=["y"], num_samples=10)
    else:
        assert isinstance(idata, az.InferenceData)
        az.plot_ppc(idata, data_pairs={"y": "y"}, num_pp_samples=10)
    plt.savefig(tmp_path / "ppc.png")
    plt.close("all")
    assert (tmp_path / "ppc.png").stat().st_size > 0
    idata.to_netcdf(tmp_path / "x.nc")
    back = az.from_netcdf(tmp_path / "x.nc")
    np.testing.assert_array_equal(back.posterior["mu"].values, idata.posterior["mu"].values)


def test_loo_works_with_the_log_likelihood_group(y):
    # the guide at the exact posterior of mu (prior sd 10 is negligible against 12 observations)
    pyro.param("loc", y.mean(0))
    pyro.param("scale", torch.full((3,), 12 ** -0.5, dtype=torch.float64), constraint=constraints.positive)
    idata = posterior_predictive(model, guide, y, num_samples=200, dims=DIMS)
    res = az.loo(idata, var_name="y")
    elpd = float(res["elpd_loo"] if ARVIZ_MAJOR < 1 else res.elpd)
    # the pointwise log-likelihood of 36 N(mu, 1) observations: elpd is near -36·(½log2π + ½)
    assert -36 * 3 < elpd < -36 * 0.9


MIX_LOCS = (-2.0, 1.0)
MIX_W = (0.3, 0.7)


@config_enumerate
def mixture(x):
    locs = pyro.sample("locs", dist.Normal(torch.zeros(2, dtype=x.dtype), 10.0).to_event(1))
    w = torch.tensor(MIX_W, dtype=x.dtype)
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Categorical(w))
        pyro.deterministic("centre", locs[z])
        pyro.sample("x", dist.Normal(locs[z], 1.0), obs=x)


def mixture_guide(x):
    pyro.sample("locs", dist.Delta(torch.tensor(MIX_LOCS, dtype=x.dtype), event_dim=1))


def test_enumerated_sites_are_drawn_from_their_exact_posterior():
    """z is not in the guide but enumerated: its draws follow p(z | locs, x) exactly (closed
    form for a two-component mixture with the guide's point-mass locs), not the prior."""
    x = torch.tensor([-3.0, -2.0, -0.5, 0.0, 1.0, 2.5], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # nothing is left out: no warning
        d = draw(mixture, mixture_guide, x, num_samples=400, seed=0)
    z = d["posterior"]["z"]
    assert z.shape == (400, 6)
    lik = np.stack([w * np.exp(-0.5 * (x.numpy() - m) ** 2) for m, w in zip(MIX_LOCS, MIX_W)])
    p1 = lik[1] / lik.sum(0)
    se = np.sqrt(p1 * (1 - p1) / 400)
    assert np.all(np.abs(z.mean(0) - p1) < 4 * se + 1e-12)
    # the deterministic site follows the drawn label; it is a posterior quantity, not data
    np.testing.assert_array_equal(d["posterior"]["centre"], np.asarray(MIX_LOCS)[z])
    assert "centre" not in d["observed_data"] and set(d["observed_data"]) == {"x"}
    # the predictive of x given the drawn label: x_rep - centre ~ N(0, 1)
    r = d["posterior_predictive"]["x"] - d["posterior"]["centre"]
    # 4 standard errors of a variance from 2400 draws
    assert abs(r.mean()) < 4 / np.sqrt(r.size) and abs(r.var() - 1) < 0.12
    idata = posterior_predictive(mixture, mixture_guide, x, num_samples=10, dims={"z": ["obs"], "x": ["obs"]})
    assert idata.posterior["z"].dims == ("chain", "draw", "obs")


def test_uncovered_continuous_site_is_left_out_with_a_warning(y):
    def model2(y):
        mu = pyro.sample("mu", dist.Normal(torch.zeros(3, dtype=y.dtype), 10.0).to_event(1))
        tau = pyro.sample("tau", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
        with pyro.plate("time", y.shape[0]):
            pyro.sample("y", dist.Normal(mu + tau, 1.0).to_event(1), obs=y)

    def guide2(y):
        pyro.sample("mu", dist.Normal(torch.zeros(3, dtype=y.dtype), 0.1).to_event(1))
    with pytest.warns(UserWarning, match=r"\['tau'\].*left out of the posterior"):
        d = draw(model2, guide2, y, num_samples=200, seed=0)
    assert set(d["posterior"]) == {"mu"}
    # the predictive still integrates tau over its prior: var(y_rep) = 0.01 + 1 + 1
    np.testing.assert_allclose(d["posterior_predictive"]["y"].var(0).mean(), 2.01, rtol=0.15)


def test_bad_num_samples_and_seed(y):
    with pytest.raises(ValueError, match="num_samples"):
        draw(model, guide, y, num_samples=0)
    with pytest.raises(ValueError, match="seed"):
        draw(model, guide, y, num_samples=2, seed=-1)


def test_enumerated_site_that_a_guide_site_depends_on():
    """a (enumerated, not in the guide) sets the prior mean of m (in the guide): p(a | m) needs
    the log-density of m under each value of a — the case SAMTC's slot→atom links a_t / slot
    means mu_t are in. p(a=1 | m) = N(m | 2, 1) / (N(m | -1, 1) + N(m | 2, 1)) with equal priors."""
    locs = torch.tensor([-1.0, 2.0], dtype=torch.float64)

    def m_model(x):
        a = pyro.sample("a", dist.Bernoulli(torch.tensor(0.5, dtype=x.dtype)), infer={"enumerate": "parallel"})
        m = pyro.sample("m", dist.Normal(locs[a.long()], 1.0))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("x", dist.Normal(m.unsqueeze(-1), 1.0), obs=x)

    def m_guide(x):
        pyro.sample("m", dist.Delta(torch.tensor(1.0, dtype=x.dtype)))
    d = draw(m_model, m_guide, torch.zeros(4, dtype=torch.float64), num_samples=400, seed=0)
    p1 = np.exp(-0.5) / (np.exp(-2.0) + np.exp(-0.5))
    assert d["posterior"]["a"].shape == (400,)
    assert abs(d["posterior"]["a"].mean() - p1) < 4 * np.sqrt(p1 * (1 - p1) / 400)


def test_predictive_sample_stats_of_an_enumerated_model_sum_the_labels_out():
    """lp = log p(locs, x) with z summed out: Σ_n log Σ_k w_k N(x_n; locs_k, 1) + log N(locs; 0, 10²);
    log_q of the point-mass guide is 0."""
    x = torch.tensor([-3.0, -2.0, -0.5, 0.0, 1.0, 2.5], dtype=torch.float64)
    d = draw(mixture, mixture_guide, x, num_samples=3, seed=0)
    import scipy.stats as st
    locs = np.asarray(MIX_LOCS)
    want = np.log((np.asarray(MIX_W)[:, None] * st.norm.pdf(x.numpy()[None], locs[:, None], 1.0)).sum(0)).sum() \
        + st.norm.logpdf(locs, 0.0, 10.0).sum()
    np.testing.assert_allclose(d["sample_stats"]["lp"], want, rtol=1e-10)
    np.testing.assert_allclose(d["sample_stats"]["log_q"], 0.0, atol=1e-12)


def test_log_likelihood_of_an_enumerated_model_sums_the_labels_out():
    """Pointwise log p(x_n | locs) = log Σ_k w_k N(x_n; locs_k, 1) (not conditional on a drawn z), so
    the pointwise values sum to lp − log p(locs); the same for a label outside the plate
    (one global z): log Σ_k w_k N(x_n; locs_k, 1) per point."""
    import scipy.stats as st
    x = torch.tensor([-3.0, -2.0, -0.5, 0.0, 1.0, 2.5], dtype=torch.float64)
    locs, w = np.asarray(MIX_LOCS), np.asarray(MIX_W)
    want = np.log((w[:, None] * st.norm.pdf(x.numpy()[None], locs[:, None], 1.0)).sum(0))
    d = draw(mixture, mixture_guide, x, num_samples=3, seed=0)
    np.testing.assert_allclose(d["log_likelihood"]["x"], np.broadcast_to(want, (3, 6)), rtol=1e-12)
    np.testing.assert_allclose(d["log_likelihood"]["x"].sum(1),
                               d["sample_stats"]["lp"] - st.norm.logpdf(locs, 0.0, 10.0).sum(), rtol=1e-12)

    def global_label(x):
        lc = pyro.sample("locs", dist.Normal(torch.zeros(2, dtype=x.dtype), 10.0).to_event(1))
        z = pyro.sample("z", dist.Categorical(torch.tensor(MIX_W, dtype=x.dtype)), infer={"enumerate": "parallel"})
        with pyro.plate("data", x.shape[0]):
            pyro.sample("x", dist.Normal(lc[z], 1.0), obs=x)
    d = draw(global_label, mixture_guide, x, num_samples=2, seed=0)
    np.testing.assert_allclose(d["log_likelihood"]["x"], np.broadcast_to(want, (2, 6)), rtol=1e-12)


def test_log_likelihood_with_a_label_in_another_plate():
    """A label in a plate the observation is not in and does not depend on is left out:
    log p(x_n) = log N(x_n; 0, 1)."""
    import scipy.stats as st
    x = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)

    def unrelated(x):
        with pyro.plate("groups", 4, dim=-2):
            pyro.sample("g", dist.Bernoulli(torch.tensor(0.3, dtype=x.dtype)), infer={"enumerate": "parallel"})
        with pyro.plate("data", x.shape[0], dim=-1):
            pyro.sample("x", dist.Normal(torch.tensor(0.0, dtype=x.dtype), 1.0), obs=x)

    def no_latents(x):
        pass
    d = draw(unrelated, no_latents, x, num_samples=2, seed=0)
    np.testing.assert_allclose(d["log_likelihood"]["x"], np.broadcast_to(st.norm.logpdf(x.numpy()), (2, 3)),
                               rtol=1e-12)

