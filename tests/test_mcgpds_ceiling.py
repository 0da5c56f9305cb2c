"""The likelihood ceiling of McGPDS bounds and its use by the stochastic fit's hyperparameter step."""
import math

import pyro
import pytest
import torch

from tandem.inference.mcgpds import hyper_step as hs
from tandem.inference.mcgpds import stochastic as st
from tandem.inference.mcgpds.bound import likelihood_ceiling


def test_ceiling_closed_form_with_and_without_g_terms():
    b0, b1 = torch.tensor(2.0, dtype=torch.float64), torch.tensor([1.0, 3.0], dtype=torch.float64)
    c = likelihood_ceiling([b0, b1], [(10, 3), torch.tensor([10.0, 4.0])])
    ref = 5 * 3 * math.log(2 / (2 * math.pi)) + 5 * math.log(1 / (2 * math.pi)) + 2 * math.log(3 / (2 * math.pi))
    assert c == pytest.approx(ref, rel=1e-14)
    # the surrogate's g terms: + ½ Σ_d β_d (J Σ_n y_nd²)
    c2 = likelihood_ceiling([b0, b1], [(10, 3), torch.tensor([10.0, 4.0])], [None, torch.tensor([5.0, 7.0])])
    assert c2 - c == pytest.approx(0.5 * (1.0 * 5.0 + 3.0 * 7.0), rel=1e-14)


@pytest.fixture()
def model():
    sim = st.simulate_sequences(4, 24, [4, 3], Q=2, M=5, seed=1, chunk_frames=48)
    cfg = st.StochasticConfig(Q=2, M=5, window=24, batch=2, num_steps=0, fixed=("alpha", "eps", "beta", "time"))
    m = st.StochasticMcGPDS(cfg)
    m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=0)
    pyro.clear_param_store()
    m.param_store_ = pyro.get_param_store()
    m.train(4, seed=0, progress=False)
    return m


def test_full_data_bound_stays_below_the_ceiling(model):
    F = model.elbo(optimal_inducing=True)
    assert math.isfinite(F) and F <= hs.bound_ceiling(model.data)


def test_hyper_step_rejects_trial_points_above_the_ceiling(model, monkeypatch):
    """Every trial point reports an impossible bound: no step is taken, the parameters stay."""
    orig = hs.collapsed_value_and_grad
    calls = []

    def broken_after_first(sdata, params, chunk=64, lazy=False, priors=None):
        F, g = orig(sdata, params, chunk, lazy, priors)
        calls.append(F)
        return (F if len(calls) == 1 else 1e300), g

    monkeypatch.setattr(hs, "collapsed_value_and_grad", broken_after_first)
    _, params = hs._learned_params(model.data)
    before = [p.detach().clone() for p in params]
    out = hs.hyper_step(model.data, iters=3)
    assert len(calls) > 2                       # the line search tried points and rejected them
    assert out == pytest.approx(calls[0], rel=1e-12)
    for p, q in zip(params, before):
        assert torch.equal(p.detach(), q)


def test_hyper_step_raises_when_the_start_is_already_broken(model, monkeypatch):
    monkeypatch.setattr(hs, "collapsed_value_and_grad",
                        lambda sdata, params, chunk=64, lazy=False, priors=None: (1e300, [0.0]))
    with pytest.raises(FloatingPointError, match="ceiling"):
        hs.hyper_step(model.data, iters=2)


def test_kept_prior_factors_give_the_same_bound_and_gradient(model):
    """The hyperparameter step keeps the chunks' prior factors over its evaluations (α, ε, time
    kernels fixed): the bound and its gradient equal those computed afresh, with both the first
    evaluation (which fills the store) and a later one (which reads it) at chunks of 2 windows."""
    _, params = hs._learned_params(model.data)
    F0, g0 = hs.collapsed_value_and_grad(model.data, params, chunk=2)
    store = {}
    for _ in range(2):
        F, g = hs.collapsed_value_and_grad(model.data, params, chunk=2, priors=store)
        assert F == pytest.approx(F0, rel=1e-12)
        for a, b in zip(g, g0):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert set(store) == {0, 1}
