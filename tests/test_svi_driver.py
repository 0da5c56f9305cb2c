"""The shared SVI driver: closed-form recovery, early stop, checkpoint/resume, seeds, errors."""
import math
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.optim
import pytest
import torch
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO
from torch.distributions import constraints

from tandem.inference import LBFGS, fit

PRIOR_MU, PRIOR_SD, NOISE_SD = 0.0, 10.0, 1.0


def conjugate_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(PRIOR_MU, dtype=y.dtype), PRIOR_SD))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, NOISE_SD), obs=y)


def conjugate_guide(y):
    m = pyro.param("m", torch.tensor(0.0, dtype=y.dtype))
    s = pyro.param("s", torch.tensor(1.0, dtype=y.dtype), constraint=constraints.positive)
    pyro.sample("mu", dist.Normal(m, s))


def exact_posterior(y):
    prec = 1 / PRIOR_SD ** 2 + len(y) / NOISE_SD ** 2
    return (PRIOR_MU / PRIOR_SD ** 2 + y.sum().item() / NOISE_SD ** 2) / prec, prec ** -0.5


@pytest.fixture
def y():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(40, generator=g, dtype=torch.float64) * NOISE_SD + 2.5)


def test_recovers_conjugate_posterior_within_mc_error(y):
    mean, sd = exact_posterior(y)
    res = fit(conjugate_model, conjugate_guide, y, optim=pyro.optim.ClippedAdam({"lr": 0.05, "lrd": 0.999}),
              loss=TraceMeanField_ELBO(num_particles=4), num_steps=3000, seed=0, progress=False)
    m, s = res.params["m"].item(), res.params["s"].item()
    # Stochastic gradients leave Monte Carlo jitter of order lr·sd on the mean: 0.1 sd is ample
    assert abs(m - mean) < 0.1 * sd
    assert abs(s - sd) / sd < 0.1
    assert res.num_steps == 3000 and res.wall_time > 0 and len(res.losses) == 3000


def test_lbfgs_with_custom_deterministic_loss(y):
    """A custom loss callable (the analytic negative ELBO) with L-BFGS hits the exact optimum."""
    def neg_elbo(model, guide, y):
        m = pyro.param("m", torch.tensor(0.0, dtype=y.dtype))
        s = pyro.param("s", torch.tensor(1.0, dtype=y.dtype), constraint=constraints.positive)
        q = dist.Normal(m, s)
        ell = (-0.5 * math.log(2 * math.pi) - ((y - m) ** 2 + s ** 2) / 2).sum()
        kl = torch.distributions.kl_divergence(q, dist.Normal(torch.tensor(PRIOR_MU, dtype=y.dtype), PRIOR_SD))
        return -(ell - kl)
    mean, sd = exact_posterior(y)
    res = fit(conjugate_model, conjugate_guide, y, loss=neg_elbo, optim=LBFGS(), num_steps=5,
              progress=False)
    assert res.params["m"].item() == pytest.approx(mean, abs=1e-8)
    assert res.params["s"].item() == pytest.approx(sd, rel=1e-7)


def _neg_elbo(model, guide, y):
    m = pyro.param("m", torch.tensor(0.0, dtype=y.dtype))
    s = pyro.param("s", torch.tensor(1.0, dtype=y.dtype), constraint=constraints.positive)
    ell = (-0.5 * math.log(2 * math.pi) - ((y - m) ** 2 + s ** 2) / 2).sum()
    prior = dist.Normal(torch.tensor(PRIOR_MU, dtype=y.dtype), PRIOR_SD)
    kl = torch.distributions.kl_divergence(dist.Normal(m, s), prior)
    return -(ell - kl)


def test_lbfgs_recovers_from_a_collapsed_line_search(y, monkeypatch):
    """torch's strong-Wolfe search can raise IndexError on a one-point bracket: the driver undoes
    the step, resets the curvature history, warns, and still reaches the optimum; a second
    failure in a row is raised."""
    import torch.optim.lbfgs as tl
    real = tl._strong_wolfe
    calls = {"n": 0}

    def _strong_wolfe(*a, **kw):      # same name as torch's, so the driver recognises it
        calls["n"] += 1
        if calls["n"] == 2:
            raise IndexError("list index out of range")
        return real(*a, **kw)

    monkeypatch.setattr(tl, "_strong_wolfe", _strong_wolfe)
    mean, sd = exact_posterior(y)
    with pytest.warns(RuntimeWarning, match="line search failed"):
        res = fit(conjugate_model, conjugate_guide, y, loss=_neg_elbo, optim=LBFGS(max_iter=5), num_steps=8,
                  progress=False)
    assert res.params["m"].item() == pytest.approx(mean, abs=1e-8)
    assert np.isfinite(res.losses).all()

    def failing():
        def _strong_wolfe(*a, **kw):  # noqa: F811 — fails every time
            raise IndexError("list index out of range")
        return _strong_wolfe
    monkeypatch.setattr(tl, "_strong_wolfe", failing())
    with pytest.raises(RuntimeError, match="line search failed twice"), pytest.warns(RuntimeWarning):
        fit(conjugate_model, conjugate_guide, y, loss=_neg_elbo, optim=LBFGS(), num_steps=5, progress=False)


def test_lbfgs_with_pyro_elbo_on_delta_guide(y):
    """L-BFGS on Trace_ELBO's differentiable loss with a point-mass guide gives the MAP."""
    def map_guide(y):
        pyro.sample("mu", dist.Delta(pyro.param("mu_map", torch.tensor(0.0, dtype=y.dtype))))
    res = fit(conjugate_model, map_guide, y, loss=Trace_ELBO(), optim=LBFGS(), num_steps=3, progress=False)
    mean, _ = exact_posterior(y)  # Gaussian: MAP = posterior mean
    assert res.params["mu_map"].item() == pytest.approx(mean, abs=1e-8)


def test_early_stop_on_relative_change(y):
    res = fit(conjugate_model, conjugate_guide, y, loss=TraceMeanField_ELBO(), num_steps=5000,
              tol=1e-3, window=50, progress=False, optim=pyro.optim.Adam({"lr": 0.05}))
    assert res.converged and res.num_steps < 5000
    w = 50
    old, new = np.mean(res.losses[-2 * w:-w]), np.mean(res.losses[-w:])
    assert abs(new - old) <= 1e-3 * abs(old)


def test_same_seed_same_result_and_different_seed_differs(y):
    kw = dict(num_steps=50, progress=False, optim=pyro.optim.Adam({"lr": 0.05}))
    a = fit(conjugate_model, conjugate_guide, y, seed=3, **kw)
    b = fit(conjugate_model, conjugate_guide, y, seed=3, **kw)
    c = fit(conjugate_model, conjugate_guide, y, seed=4, **kw)
    np.testing.assert_array_equal(a.losses, b.losses)
    assert torch.equal(a.params["m"], b.params["m"])
    assert not np.array_equal(a.losses, c.losses)


@pytest.mark.parametrize("use_lbfgs", [False, True])
def test_interrupted_and_resumed_run_reproduces_uninterrupted(y, tmp_path, use_lbfgs):
    optim = (lambda: LBFGS(max_iter=3)) if use_lbfgs else (lambda: pyro.optim.Adam({"lr": 0.05}))
    loss = Trace_ELBO()
    guide = conjugate_guide
    if use_lbfgs:
        def guide(y):  # deterministic loss for L-BFGS: point mass
            pyro.sample("mu", dist.Delta(pyro.param("mu_map", torch.tensor(0.0, dtype=y.dtype))))
    n = 8 if use_lbfgs else 120
    full = fit(conjugate_model, guide, y, loss=loss, optim=optim(), num_steps=n, seed=7, progress=False)
    ckpt = tmp_path / "run.ckpt"
    part = fit(conjugate_model, guide, y, loss=loss, optim=optim(), num_steps=n // 2, seed=7,
               progress=False, checkpoint=ckpt, checkpoint_every=n // 4)
    assert ckpt.exists() and part.num_steps == n // 2
    pyro.clear_param_store()  # a fresh process would start with an empty store
    resumed = fit(conjugate_model, guide, y, loss=loss, optim=optim(), num_steps=n, seed=7,
                  progress=False, checkpoint=ckpt, checkpoint_every=n // 4)
    assert resumed.resumed_from == n // 2
    np.testing.assert_allclose(resumed.losses, full.losses, rtol=0, atol=1e-12)
    for k in full.params:
        torch.testing.assert_close(resumed.params[k], full.params[k], rtol=0, atol=1e-12)


def test_bad_arguments_raise_clear_errors(y):
    with pytest.raises(ValueError, match="num_steps"):
        fit(conjugate_model, conjugate_guide, y, num_steps=-1, progress=False)
    with pytest.raises(ValueError, match="optim"):
        fit(conjugate_model, conjugate_guide, y, optim=torch.optim.Adam, num_steps=1, progress=False)
    with pytest.raises(ValueError, match="tol"):
        fit(conjugate_model, conjugate_guide, y, tol=-1.0, num_steps=1, progress=False)


def test_diverging_loss_raises(y):
    def bad_loss(model, guide, y):
        return pyro.param("z", torch.tensor(1.0)) * float("nan")
    with pytest.raises(FloatingPointError, match="loss became nan"):
        fit(conjugate_model, conjugate_guide, y, loss=bad_loss, num_steps=3, progress=False)


def test_lbfgs_refuses_monte_carlo_losses(y):
    """L-BFGS needs a deterministic loss: a sampling guide, a model latent missing from the
    guide, a subsampling plate or a random loss callable are refused before the first step."""
    with pytest.raises(ValueError, match=r"guide site 'mu' samples from Normal.*Monte Carlo"):
        fit(conjugate_model, conjugate_guide, y, loss=Trace_ELBO(), optim=LBFGS(), num_steps=2, progress=False)

    def empty_guide(y):
        pass
    with pytest.raises(ValueError, match=r"model latent site 'mu' is not in the guide"):
        fit(conjugate_model, empty_guide, y, loss=Trace_ELBO(), optim=LBFGS(), num_steps=2, progress=False)

    def sub_model(y):
        mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 10.0))
        with pyro.plate("data", y.shape[0], subsample_size=10) as idx:
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y[idx])

    def delta_guide(y):
        pyro.sample("mu", dist.Delta(pyro.param("mu_map", torch.tensor(0.0, dtype=y.dtype))))
    with pytest.raises(ValueError, match=r"plate 'data' in the model subsamples 10 of 40"):
        fit(sub_model, delta_guide, y, loss=Trace_ELBO(), optim=LBFGS(), num_steps=2, progress=False)

    def noisy_loss(model, guide, y):
        return _neg_elbo(model, guide, y) + torch.randn(()) * 1e-3
    with pytest.raises(ValueError, match=r"loss callable returned .* random"):
        fit(conjugate_model, conjugate_guide, y, loss=noisy_loss, optim=LBFGS(), num_steps=2, progress=False)


def test_lbfgs_accepts_enumerated_discrete_sites():
    """TraceEnum_ELBO sums enumerated discrete sites exactly: with point-mass continuous sites the
    loss is deterministic, L-BFGS is accepted and finds the MAP of a two-component mixture's means."""
    from pyro.infer import TraceEnum_ELBO, config_enumerate
    g = torch.Generator().manual_seed(0)
    data = torch.cat([torch.randn(30, generator=g, dtype=torch.float64) - 3,
                      torch.randn(30, generator=g, dtype=torch.float64) + 3])

    @config_enumerate
    def mix(data):
        locs = pyro.sample("locs", dist.Normal(torch.zeros(2, dtype=data.dtype), 10.0).to_event(1))
        with pyro.plate("data", data.shape[0]):
            z = pyro.sample("z", dist.Categorical(torch.full((2,), 0.5, dtype=data.dtype)))
            pyro.sample("x", dist.Normal(locs[z], 1.0), obs=data)

    def mix_guide(data):
        pyro.sample("locs", dist.Delta(pyro.param("locs_map", torch.tensor([-1.0, 1.0], dtype=data.dtype)),
                                       event_dim=1))
    res = fit(mix, mix_guide, data, loss=TraceEnum_ELBO(max_plate_nesting=1), optim=LBFGS(), num_steps=10,
              progress=False)
    locs = res.params["locs_map"].sort().values
    # well-separated components: the MAP means are close to the two sample means
    assert abs(locs[0] - data[:30].mean()) < 0.05 and abs(locs[1] - data[30:].mean()) < 0.05


@pytest.mark.parametrize("kw, name", [
    (dict(window=0), "window"), (dict(min_steps=-1), "min_steps"), (dict(checkpoint_every=0), "checkpoint_every"),
    (dict(seed=-1), "seed"), (dict(num_steps=2.5), "num_steps"), (dict(num_steps=True), "num_steps"),
    (dict(tol=float("nan")), "tol")])
def test_bad_fit_options_name_the_argument(y, kw, name):
    with pytest.raises(ValueError, match=name):
        fit(conjugate_model, conjugate_guide, y, progress=False, **{"num_steps": 1, **kw})


@pytest.mark.parametrize("kw, name", [
    (dict(max_iter=-1), "max_iter"), (dict(max_iter=0), "max_iter"), (dict(history_size=0), "history_size"),
    (dict(lr=0.0), "lr"), (dict(line_search_fn="backtracking"), "line_search_fn"),
    (dict(tolerance_grad=-1.0), "tolerance_grad"), (dict(preconditioner=3), "preconditioner")])
def test_bad_lbfgs_settings_name_the_argument(kw, name):
    with pytest.raises(ValueError, match=f"LBFGS {name}"):
        LBFGS(**kw)


def test_nonfinite_loss_advice_fits_the_case(y):
    """At step 0 (initial parameters) and under L-BFGS's line search a smaller learning rate
    cannot help, and the message must not suggest it; after Adam steps it may."""
    def nan_at_start(model, guide, y):
        return pyro.param("z", torch.tensor(1.0, dtype=y.dtype)) * float("nan")
    with pytest.raises(FloatingPointError, match="initial parameters") as err:
        fit(conjugate_model, conjugate_guide, y, loss=nan_at_start, num_steps=3, progress=False)
    assert "learning rate play no part" in str(err.value)

    def blows_up(model, guide, y):
        z = pyro.param("z", torch.tensor(0.0, dtype=y.dtype))
        # finite for z < 1, -inf at 1, NaN beyond (log of a negative number); the minimum of
        # the finite part lies beyond, so any optimiser walks into the non-finite region
        return (z - 3.0) ** 2 + torch.log1p(-z)
    with pytest.raises(FloatingPointError) as err:
        fit(conjugate_model, conjugate_guide, y, loss=blows_up, optim=LBFGS(max_iter=1, line_search_fn=None),
            num_steps=20, progress=False)
    assert "line_search_fn='strong_wolfe'" in str(err.value)
    # strong-Wolfe: either the search ends at a non-finite point or its bracket collapses twice
    with pytest.raises((FloatingPointError, RuntimeError)) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fit(conjugate_model, conjugate_guide, y, loss=blows_up, optim=LBFGS(), num_steps=20, progress=False)
    assert "smaller learning rate does not help" in str(err.value)
    with pytest.raises(FloatingPointError) as err:
        fit(conjugate_model, conjugate_guide, y, loss=blows_up, optim=pyro.optim.SGD({"lr": 0.5}),
            num_steps=20, progress=False)
    assert "lower the learning rate" in str(err.value)
