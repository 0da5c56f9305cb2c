"""posterior_predictive → ArviZ InferenceData: groups, dims, shapes, values; az.summary/plot_ppc."""
import arviz as az
import matplotlib
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from torch.distributions import constraints

from tandem.inference import posterior_predictive
from tandem.inference.predictive import draw

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


def test_arviz_summary_and_plot_ppc_work(y, tmp_path):
    idata = posterior_predictive(model, guide, y, num_samples=20, dims=DIMS)
    summ = az.summary(idata, var_names=["mu"], kind="stats")
    assert list(summ.index) == ["mu[0]", "mu[1]", "mu[2]"]
    axes = az.plot_ppc(idata, data_pairs={"y": "y"}, num_pp_samples=10)
    assert axes is not None
    import matplotlib.pyplot as plt
    plt.savefig(tmp_path / "ppc.png")
    plt.close("all")
    assert (tmp_path / "ppc.png").stat().st_size > 0
    idata.to_netcdf(tmp_path / "x.nc")
    assert az.from_netcdf(tmp_path / "x.nc").posterior["mu"].shape == (1, 20, 3)


def test_bad_num_samples(y):
    with pytest.raises(ValueError, match="num_samples"):
        draw(model, guide, y, num_samples=0)
