"""Holding the variational precisions λ (bound._private_terms, McGPDSConfig.held_cycles): the
reused private-covariance terms give the bound and the gradient of the unheld computation, are
recomputed whenever λ or the prior changes, and the λ-held schedule raises the bound."""
import math

import numpy as np
import pyro
import pytest
import torch
from test_mcgpds_bound import tiny_problem

from tandem.guides.mcgpds import variational_params
from tandem.inference.mcgpds import bound, streamed
from tandem.inference.mcgpds.bound import collapsed_bound
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds
from tandem.models.mcgpds import hyperparams

FIXED_PRIOR = frozenset(("alpha", "eps", "time", "beta", "W"))


def _problem(sizes=(9, 8, 9, 4, 8)):
    data, *_ = tiny_problem(sizes=sizes)
    data.fixed = FIXED_PRIOR
    return data


def _value_grad(data, frozen, ctx=None):
    """−F under ``frozen`` and its gradient over every registered parameter (zeros where none)."""
    with ctx or streamed.streaming():
        hp = hyperparams(data, frozen=frozen)
        mus, lams = variational_params(data, frozen=frozen)
        params = dict(pyro.get_param_store().named_parameters())     # unconstrained leaves
        F = collapsed_bound(data, hp, mus, lams)
        gs = torch.autograd.grad(F, list(params.values()), allow_unused=True)
    return float(F.detach()), {n: (torch.zeros_like(p) if g is None else g) for (n, p), g in zip(params.items(), gs)}


def _count_calls(monkeypatch, name):
    """Count the calls of ``bound.<name>`` (still calling it); returns the list that grows per call."""
    calls = []
    real = getattr(bound, name)

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(bound, name, counted)
    return calls


def _count_private(monkeypatch):
    return _count_calls(monkeypatch, "private_cov_terms")


@pytest.mark.parametrize("chunks", [False, True])
def test_held_lambda_gives_the_unheld_bound_and_gradient(monkeypatch, chunks):
    data = _problem()
    pyro.clear_param_store()
    ctx = (lambda: streamed.streaming(psi_chunk=5, kl_chunk_mb=1e-9, kl_unchunked_mb=0)) if chunks \
        else streamed.streaming
    F0, g0 = _value_grad(data, (), ctx())
    calls = _count_private(monkeypatch)
    F1, g1 = _value_grad(data, ("lam",), ctx())
    n_first = len(calls)
    F2, g2 = _value_grad(data, ("lam",), ctx())
    assert n_first > 0 and len(calls) == n_first          # the second evaluation reuses every block's terms
    assert F1 == F2 and abs(F1 - F0) <= 1e-13 * abs(F0)
    for name in g0:
        if name.startswith("lam_"):
            assert float(g1[name].abs().max()) == 0.0
        else:
            torch.testing.assert_close(g1[name], g0[name], rtol=1e-11, atol=1e-12 * float(g0[name].abs().max()))
            assert torch.equal(g1[name], g2[name])
    assert float(g0["mu_0"].abs().max()) > 0 and float(g0["lam_0"].abs().max()) > 0


def test_held_terms_follow_lambda_and_the_prior(monkeypatch):
    data = _problem()
    pyro.clear_param_store()
    _value_grad(data, ("lam",))
    calls = _count_private(monkeypatch)
    # λ changed (in place, as an optimiser does): recomputed, equal to a fresh evaluation
    with torch.no_grad():
        pyro.param("lam_0").unconstrained().add_(0.1)
    F1, _ = _value_grad(data, ("lam",))
    assert len(calls) > 0
    data.blocks.__dict__.pop("_private_memo")
    F_fresh, _ = _value_grad(data, ())
    assert abs(F1 - F_fresh) <= 1e-13 * abs(F_fresh)
    # the prior changed (α is fixed, so its initial value is what the bound reads)
    n = len(calls)
    data.init["alpha_0"] = data.init["alpha_0"] * 0.9
    F2, _ = _value_grad(data, ("lam",))
    assert len(calls) > n and F2 != F1
    data.blocks.__dict__.pop("_private_memo")
    data.blocks.__dict__.pop("_prior_cache", None)
    F2_fresh, _ = _value_grad(data, ())
    assert abs(F2 - F2_fresh) <= 1e-13 * abs(F2_fresh)


def test_learned_prior_is_never_reused(monkeypatch):
    # α learned: A carries a gradient, so the λ-held evaluation recomputes and differentiates it
    data = _problem()
    data.fixed = FIXED_PRIOR - {"alpha"}
    pyro.clear_param_store()
    calls = _count_private(monkeypatch)
    _, g1 = _value_grad(data, ("lam",))
    n = len(calls)
    _, g2 = _value_grad(data, ("lam",))
    assert len(calls) == 2 * n, (n, len(calls))
    assert float(g1["alpha_0"].abs()) > 0
    assert "_private_memo" not in data.blocks.__dict__


def test_held_schedule_raises_the_bound_and_runs_its_phases():
    g = np.random.default_rng(0)
    t = np.concatenate([np.linspace(0, 1, 30)] * 3)
    seq = np.repeat(np.arange(3), 30)
    z = np.stack([np.sin(2 * np.pi * t), np.cos(2 * np.pi * t)], 1)
    Y1 = z @ g.normal(size=(2, 5)) + 0.1 * g.normal(size=(90, 5))
    Y2 = z @ g.normal(size=(2, 4)) + 0.1 * g.normal(size=(90, 4))
    base = dict(Q=2, M=8, cycles=0, joint_iters=0, fixed=("alpha", "eps", "beta", "time", "W"))
    start = fit_mcgpds([Y1, Y2], t, sequence_ids=seq, config=McGPDSConfig(**base)).bound
    held = fit_mcgpds([Y1, Y2], t, sequence_ids=seq,
                      config=McGPDSConfig(**base, held_cycles=2, held_iters=10, held_joint_iters=3))
    assert math.isfinite(held.bound) and held.bound > start + 0.1 * abs(start)
    # four phases (λ held, λ learned, twice), one L-BFGS step each: one loss (at the step's start)
    # per step, and every step ends no lower than it started
    assert len(held.losses) == 4
    assert np.all(np.diff(-held.losses) > 0) and held.bound > -held.losses[-1]


@pytest.mark.parametrize("cache_mb", [math.inf, 0.0])
def test_held_chunks_skip_the_checkpoint_only_when_the_prior_is_cached(monkeypatch, cache_mb):
    # chunked KL, λ held: with the chunk's prior factors cached nothing large is kept for the
    # backward, so no chunk is checkpointed (no recomputation); with them rebuilt per chunk the
    # checkpoints stay (the factors would otherwise be kept for the backward); same gradient
    data = _problem()
    pyro.clear_param_store()
    forced = dict(psi_chunk=5, kl_chunk_mb=1e-9, kl_unchunked_mb=0, prior_cache_mb=cache_mb)
    F0, g0 = _value_grad(data, (), streamed.streaming(**forced))
    used = _count_calls(monkeypatch, "checkpoint")
    F1, g1 = _value_grad(data, ("lam",), streamed.streaming(**forced))
    assert (len(used) == 0) == math.isinf(cache_mb)
    assert abs(F1 - F0) <= 1e-13 * abs(F0)
    for name in g0:
        if not name.startswith("lam_"):
            torch.testing.assert_close(g1[name], g0[name], rtol=1e-11, atol=1e-12 * float(g0[name].abs().max()))
