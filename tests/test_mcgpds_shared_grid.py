"""Sequences sampled on one time grid share their prior factors (prior_factors.same_blocks): the
factors are one block's, expanded without copies; products over them are one matrix product
(block_matmul, block_solve_triangular); the bound, its gradient and the moments equal those of
the per-block computation; the cache counts the shared memory once."""
import math

import pyro
import pytest
import torch
from test_mcgpds_bound import tiny_problem

from tandem.guides.mcgpds import variational_params
from tandem.inference.mcgpds import bound, prior_factors, streamed
from tandem.inference.mcgpds.bound import collapsed_bound, latent_terms
from tandem.inference.mcgpds.preconditioner import PriorPreconditioner
from tandem.inference.mcgpds.prior_factors import (
    block_matmul,
    block_prior_factors,
    block_solve_triangular,
    factor_bytes,
    same_blocks,
    shared_first,
)
from tandem.models.mcgpds import hyperparams

D64 = torch.float64


def test_block_products_of_an_expanded_matrix_equal_the_batched_ones():
    g = torch.Generator().manual_seed(0)
    L = torch.tril(torch.randn(2, 1, 6, 6, generator=g, dtype=D64)) + 3 * torch.eye(6, dtype=D64)
    Le = L.expand(2, 5, 6, 6)
    X = torch.randn(2, 5, 6, 3, generator=g, dtype=D64)
    assert shared_first(Le, -3) is not None and shared_first(Le.contiguous(), -3) is None
    torch.testing.assert_close(block_matmul(Le, X), Le.contiguous() @ X, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(block_matmul(Le.mT, X), Le.contiguous().mT @ X, rtol=1e-14, atol=1e-14)
    for upper, M in ((False, Le), (True, Le.mT)):
        torch.testing.assert_close(block_solve_triangular(M, X, upper),
                                   torch.linalg.solve_triangular(M.contiguous(), X, upper=upper),
                                   rtol=1e-12, atol=1e-12)


def test_same_blocks_compares_real_slots_only():
    t = torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]], dtype=D64)
    m = torch.ones(2, 3, dtype=torch.bool)
    assert same_blocks(t, m)
    assert not same_blocks(t + torch.tensor([[0.0], [1e-12]], dtype=D64), m)
    m2 = torch.tensor([[1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    t2 = t.clone()
    t2[1, 2] = 7.0                                   # a padding slot's value does not matter
    assert same_blocks(t2, m2)
    assert not same_blocks(t, torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool))


def test_shared_factors_are_one_block_expanded():
    data, *_ = tiny_problem(sizes=(6, 6, 6))
    hp = hyperparams(data)
    views = hp["views"]
    alpha = torch.stack([v["alpha"] for v in views]).detach()
    eps = torch.stack([v["eps"] for v in views]).detach()
    _, mask = data.blocks.groups[0]
    t = data.blocks.pack(data.times, 0)
    with torch.no_grad():
        shared = block_prior_factors(t, mask, hp["time_s"], [v["time"] for v in views], alpha, eps)
        one = block_prior_factors(t[:1], mask[:1], hp["time_s"], [v["time"] for v in views], alpha, eps)
    assert shared["A"].shape == (2, 3, 6, 6) and shared["A"].stride(1) == 0
    for k in ("Ls", "LBp"):
        assert shared[k].stride(0) == 0
        torch.testing.assert_close(shared[k], one[k].expand_as(shared[k]), rtol=0, atol=0)
    # memory: one block's, however many blocks share it
    assert factor_bytes(shared) == factor_bytes(one)


def _value_grad(data, need_shared_var=False):
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    params = dict(pyro.get_param_store().named_parameters())
    F = collapsed_bound(data, hp, mus, lams)
    grads = torch.autograd.grad(F, list(params.values()), allow_unused=True)
    with torch.no_grad():
        lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams, need_shared_var=True)
    return float(F), {n: g for n, g in zip(params, grads) if g is not None}, lt


@pytest.mark.parametrize("fixed", [True, False])
@pytest.mark.parametrize("settings", [dict(prior_cache_mb=math.inf, kl_unchunked_mb=math.inf),
                                      dict(prior_cache_mb=math.inf, kl_unchunked_mb=0.0, kl_chunk_mb=1e-9),
                                      dict(prior_cache_mb=0.0, kl_unchunked_mb=math.inf)])
def test_bound_gradient_and_moments_equal_the_per_block_computation(monkeypatch, fixed, settings):
    # three sequences on one grid, one on another: a shared group beside an unshared one
    data, *_ = tiny_problem(sizes=(6, 6, 6, 9))
    if fixed:           # the prior constant: cached factors, G, memoised private terms
        data.fixed = frozenset(("alpha", "eps", "time", "beta", "W"))
    with streamed.streaming(**settings):
        F_shared, g_shared, lt_shared = _value_grad(data)
        data.blocks.__dict__.pop("_prior_cache", None)
        data.blocks.__dict__.pop("_private_memo", None)
        data.blocks.__dict__.pop("_lt_memo", None)
        monkeypatch.setattr(prior_factors, "same_blocks", lambda t, m: False)
        F_plain, g_plain, lt_plain = _value_grad(data)
    assert F_shared == pytest.approx(F_plain, rel=1e-12)
    assert set(g_shared) == set(g_plain)
    for n in g_plain:
        torch.testing.assert_close(g_shared[n], g_plain[n], rtol=1e-9, atol=1e-10 * (1 + float(g_plain[n].abs().max())))
    for k in ("mu_s", "s_s", "kl"):
        torch.testing.assert_close(lt_shared[k], lt_plain[k], rtol=1e-10, atol=1e-12)


def test_preconditioner_on_a_shared_grid_is_one_factor():
    data, *_ = tiny_problem(sizes=(6, 6, 6))
    stacks = PriorPreconditioner(data)._factor_stacks()
    assert len(stacks) == 1 and stacks[0].stride(1) == 0
    f = PriorPreconditioner(data)(["mu_0"])["mu_0"]
    v = torch.randn(18, 2, dtype=D64, generator=torch.Generator().manual_seed(3))
    L = stacks[0][0, 0]
    expected = (L @ v.reshape(3, 6, 2)).reshape(18, 2)
    torch.testing.assert_close(f.apply(v), expected, rtol=1e-14, atol=1e-14)


def test_chunks_of_a_shared_group_are_views_of_one_cached_block():
    data, *_ = tiny_problem(sizes=(6, 6, 6, 6))
    data.fixed = frozenset(("alpha", "eps", "time", "beta", "W"))
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    with streamed.streaming(prior_cache_mb=math.inf, kl_unchunked_mb=0.0, kl_chunk_mb=1e-9), torch.no_grad():
        collapsed_bound(data, hp, mus, lams)
        assert bound._prior_cached(data.times, data.blocks, 0, hp["time_s"], hp["views"],
                                   torch.stack([v["alpha"] for v in hp["views"]]),
                                   torch.stack([v["eps"] for v in hp["views"]]), slice(1, 2))
    entries = [v for v in data.blocks.__dict__["_prior_cache"].values() if "A" in v]
    assert len(entries) == 1                                   # the group's, not one per chunk
    assert entries[0]["Ainv"].shape[1] == 4 and entries[0]["Ainv"].stride(1) == 0
    assert factor_bytes(*entries) < 2 * 8 * 6 * 6 * 4          # one block's matrices (A, A⁻¹, G), not four
