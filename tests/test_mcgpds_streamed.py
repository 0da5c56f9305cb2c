"""The streamed collapsed bound (inference/mcgpds/streamed.py, gp_kernels.psi_stream) equals the
old all-at-once bound, value and gradient, on toys and on the human-pose data."""
import math

import numpy as np
import pyro
import pytest
import torch
from test_mcgpds_bound import tiny_problem

from common import DATA_DIR
from tandem.guides.mcgpds import variational_params
from tandem.inference.mcgpds import streamed
from tandem.inference.mcgpds.bound import collapsed_bound, latent_terms
from tandem.models.gp_kernels import psi_stats, psi_stream
from tandem.models.mcgpds import McGPDSData, default_init, hyperparams

D64 = torch.float64
#: chunk settings that split every toy into several ψ and KL chunks
FORCED = dict(psi_chunk=5, kl_chunk_mb=1e-9, kl_unchunked_mb=0)


def _value_grad(data, ctx):
    """F and its gradient (one flat vector over the parameter store) under the chunking ``ctx``."""
    pyro.clear_param_store()
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    params = list(pyro.get_param_store().values())
    with ctx:
        F = collapsed_bound(data, hp, mus, lams)
        gs = torch.autograd.grad(F, params, allow_unused=True)
    flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, gs)])
    return F.detach(), flat


def _assert_equal(data, ctx_new, tol=1e-10):
    F0, g0 = _value_grad(data, streamed.unstreamed())
    F1, g1 = _value_grad(data, ctx_new)
    assert abs(float(F1 - F0)) <= tol * abs(float(F0))
    assert float((g1 - g0).norm()) <= tol * float(g0.norm())
    assert float(g0.norm()) > 0
    return F0, g0


@pytest.mark.parametrize("kind", ["rbfard", "linear"])
@pytest.mark.parametrize("prior", ["mcgpds", "gplvm"])
def test_streamed_bound_equals_unstreamed_on_toys_all_learned(kind, prior):
    # every group learned: the KL's autograd path (A requires a gradient) under checkpointing
    data, *_ = tiny_problem(kind=kind, sizes=(7, 5, 7, 6, 7, 3), private_prior=prior)
    _assert_equal(data, streamed.streaming(**FORCED))


@pytest.mark.parametrize("cache_mb", [math.inf, 0.0])
def test_streamed_bound_equals_unstreamed_with_fixed_prior(cache_mb):
    # α, ε, time kernels fixed: the cached-prior / closed-form-backward KL paths; with a zero
    # cache budget the prior factors are recomputed in every chunk (and in the backward)
    data, *_ = tiny_problem(sizes=(9, 8, 9, 4, 8))
    data.fixed = frozenset(("alpha", "eps", "time", "beta", "W"))
    _assert_equal(data, streamed.streaming(prior_cache_mb=cache_mb, **FORCED))
    data.blocks.__dict__.pop("_prior_cache", None)
    _assert_equal(data, streamed.streaming(prior_cache_mb=cache_mb, **FORCED))


def test_cached_mean_operator_equals_the_factor_path():
    # α, ε, time kernels fixed: cached factors carry G = L_s B'⁻¹ L_sᵀ (one product per block for
    # bᵀGb and μ_s = Gb, diag G = s_s); uncached ones use L_s and chol B'. Same KL, moments, gradient.
    data, *_ = tiny_problem(sizes=(9, 8, 9, 4, 8))
    data.fixed = frozenset(("alpha", "eps", "time", "beta", "W"))

    def terms(cache_mb):
        data.blocks.__dict__.pop("_prior_cache", None)
        data.blocks.__dict__.pop("_lt_memo", None)
        pyro.clear_param_store()
        hp = hyperparams(data)
        mus, lams = variational_params(data)
        with streamed.streaming(prior_cache_mb=cache_mb):
            lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams, need_shared_var=True)
            out = [lt["kl"], lt["mu_s"], lt["s_s"], *lt["s_diag"]]
            gen = torch.Generator().manual_seed(0)
            w = [torch.randn(x.shape, dtype=x.dtype, generator=gen) for x in out]
            grads = torch.autograd.grad(sum((x * wi).sum() for x, wi in zip(out, w)), mus + lams)
        cached = [c for c in data.blocks.__dict__.get("_prior_cache", {}).values() if "A" in c]
        return [x.detach() for x in out], grads, cached

    a, ga, cached = terms(math.inf)
    assert cached and all("G" in c and "Ls" not in c for c in cached)
    b, gb, cached = terms(0.0)
    assert not cached
    for x, y in zip(a + list(ga), b + list(gb)):
        torch.testing.assert_close(x, y, rtol=1e-11, atol=1e-13)


def test_kl_chunks_are_exact_and_memo_free():
    data, hp, mus, lams = tiny_problem(sizes=(6, 6, 6, 6, 5))
    with streamed.unstreamed():
        a = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams, need_shared_var=True)
    with streamed.streaming(kl_chunk_mb=1e-9, kl_unchunked_mb=0):
        b = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams, need_shared_var=True)
    torch.testing.assert_close(b["kl"], a["kl"], rtol=1e-14, atol=0)
    for k in range(2):
        torch.testing.assert_close(b["s_diag"][k], a["s_diag"][k], rtol=1e-14, atol=0)
    torch.testing.assert_close(b["mu_s"], a["mu_s"], rtol=1e-14, atol=1e-300)
    torch.testing.assert_close(b["s_s"], a["s_s"], rtol=1e-14, atol=0)


def test_psi_stream_sums_and_gradients():
    g = torch.Generator().manual_seed(3)
    N, Q, M, D = 23, 3, 6, 4
    mu = torch.randn(N, Q, dtype=D64, generator=g).requires_grad_()
    s = (0.1 + torch.rand(N, Q, dtype=D64, generator=g)).requires_grad_()
    Z = torch.randn(M, Q, dtype=D64, generator=g).requires_grad_()
    var = torch.tensor(1.3, dtype=D64, requires_grad=True)
    ard = torch.tensor([0.5, 1.0, 2.0], dtype=D64, requires_grad=True)
    Y = torch.randn(N, D, dtype=D64, generator=g)
    leaves = [mu, s, Z, var, ard]
    for kind in ("rbfard", "linear"):
        p0, P1, P2 = psi_stats(kind, mu, s, Z, var, ard)
        ref = (p0, P1.mT @ Y, P2)
        out = psi_stream(kind, mu, s, Z, var, ard, Y, chunk=4)
        w = [torch.randn(x.shape, dtype=D64, generator=g) for x in ref]
        gr = torch.autograd.grad(sum((a * b).sum() for a, b in zip(ref, w)), leaves, allow_unused=True)
        go = torch.autograd.grad(sum((a * b).sum() for a, b in zip(out, w)), leaves, allow_unused=True)
        for a, b in zip(out, ref):
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)
        for a, b in zip(go, gr):
            if b is not None:
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="chunk"):
        psi_stream("rbfard", mu, s, Z, var, ard, Y, chunk=-1)
    with pytest.raises(ValueError, match="Y"):
        psi_stream("rbfard", mu, s, Z, var, ard, Y[:-1])


def test_blocks_per_chunk_and_settings():
    with streamed.streaming(kl_chunk_mb=64):
        assert streamed.blocks_per_chunk(2, 2, 1000, 100) == 2          # 32 MB per block
        assert streamed.blocks_per_chunk(2, 2, 10_000, 3) == 1          # never below one block
        assert streamed.blocks_per_chunk(1, 1, 10, 7) == 7              # never above the group
    with streamed.unstreamed():
        assert streamed.blocks_per_chunk(2, 2, 1000, 100) == 100
    assert streamed.KL_CHUNK_MB == 64.0                                 # restored
    # all groups' stacks within KL_UNCHUNKED_MB: no chunking (10 blocks of 1000 frames: 320 MB)
    assert not streamed.kl_chunked(2, 2, [(10, 1000)])
    assert streamed.kl_chunked(2, 2, [(100, 1000)])
    with streamed.unstreamed():
        assert not streamed.kl_chunked(2, 2, [(100, 1000)])
    with pytest.raises(ValueError, match="kl_chunk_mb"):
        with streamed.streaming(kl_chunk_mb=-1):
            pass
    with pytest.raises(ValueError, match="KL_CHUNK_MB"):
        with streamed.streaming():
            streamed.KL_CHUNK_MB = float("nan")
            streamed.blocks_per_chunk(1, 1, 2, 2)


@pytest.mark.skipif(not (DATA_DIR / "human_pose").exists(), reason="human pose data not present")
@pytest.mark.parametrize("learned_prior", [False, True])
def test_streamed_bound_equals_unstreamed_on_pose(learned_prior):
    from tandem.inference.datasets.human_pose import load_human_pose
    d = load_human_pose(DATA_DIR)
    seq = np.repeat(np.arange(len(d.seq_ends)), np.diff([0, *d.seq_ends]))
    views = [torch.as_tensor((d.Y1 - d.bias1) / d.scale1), torch.as_tensor((d.Y2 - d.bias2) / d.scale2)]
    N, Q, M = views[0].shape[0], 9, 100
    t = torch.as_tensor(np.asarray(d.t, dtype=np.float64).reshape(-1))
    init = default_init(N, [v.shape[1] for v in views], Q, M, times=t, generator=torch.Generator().manual_seed(0),
                        X0=torch.linalg.svd(torch.cat(views, 1) - torch.cat(views, 1).mean(0),
                                            full_matrices=False)[0][:, :Q] * 3.0)
    fixed = ("beta", "W") if learned_prior else ("alpha", "eps", "beta", "time", "W")
    data = McGPDSData(views, t, torch.as_tensor(seq), Q, M, init=init, fixed=frozenset(fixed))
    _assert_equal(data, streamed.streaming(psi_chunk=100, kl_chunk_mb=0.5, kl_unchunked_mb=0))


@pytest.mark.parametrize("kind", ["rbfard", "linear"])
@pytest.mark.parametrize("h_chunk,pair_block", [(20_000, 2 ** 16), (3, 7)])
def test_stable_h_term_equals_the_normal_equation_form(kind, h_chunk, pair_block, monkeypatch):
    # the least-squares (QR) form of the h term, C = Ψ2 − Ψ1ᵀΨ1 summed with expm1; one chunk and
    # block, and several checkpointed 3-frame Ψ1/QR chunks with 1-frame pair blocks
    data, *_ = tiny_problem(kind=kind, sizes=(7, 5, 7, 6, 7))
    monkeypatch.setattr(streamed, "H_CHUNK_FRAMES", h_chunk)
    monkeypatch.setattr(streamed, "PAIR_BLOCK_ENTRIES", pair_block)
    monkeypatch.setattr(streamed, "PAIR_BLOCK_MIN_FRAMES", 1)
    F0, g0 = _value_grad(data, streamed.streaming())
    monkeypatch.setattr(streamed, "STABLE_H", True)
    F1, g1 = _value_grad(data, streamed.streaming())
    # the linear toy's K_ZZ (M = 4 > Q = 2) is rank deficient up to its jitter, and so is K + βΨ2 in
    # M − Q directions: both forms' log-determinants carry ≈ ε·cond there (measured 1.8e-11 relative)
    assert abs(float(F1 - F0)) <= (1e-11 if kind == "rbfard" else 1e-10) * abs(float(F0))
    assert float((g1 - g0).norm()) <= (1e-11 if kind == "rbfard" else 1e-8) * float(g0.norm())


def test_pair_cov_sum_compensated_remainder(monkeypatch):
    # c + lo is the exact sum of the blocks' float64 sums (Neumaier), here block sums of ±1e6 that
    # cancel to 3e4 beside ones of 0.03: a plain running sum is a few ulps off, c is correctly rounded
    from fractions import Fraction

    from tandem.models.gp_kernels import _pairs
    monkeypatch.setattr(streamed, "PAIR_BLOCK_ENTRIES", 3)
    monkeypatch.setattr(streamed, "PAIR_BLOCK_MIN_FRAMES", 1)
    M, Q, N = 2, 1, 6
    g = torch.Generator().manual_seed(2)
    big = torch.tensor([18.42, 1.0, 18.42, 1.0, 1.0, 1.0], dtype=D64)        # e^18.42 ≈ 1e8
    Fa = torch.stack([big, 0.01 * torch.randn(N, dtype=D64, generator=g)], 1)
    GaT = torch.tensor([[1.0, 1.0, 1.0], [0.3, -0.2, 0.5]], dtype=D64)
    sign = torch.tensor([1.0, 1.0, -1.0, 1.0, 1.0, 1.0], dtype=D64)          # frames 0 and 2 cancel
    Fd = torch.zeros(N, 3 * Q + 1, dtype=D64)
    Fd[:, -1] = 0.01 * sign + 1e-3 * torch.randn(N, dtype=D64, generator=g)
    Z = torch.randn(M, Q, dtype=D64, generator=g)
    centres = torch.zeros(N, Q, dtype=D64)
    c, lo = streamed._PairCovSum.apply(Fa, GaT, Fd, Z, centres)
    sums = [(E * X).sum(0).clone() for _, _, E, X in streamed._PairCovSum.blocks(Fa, GaT, Fd, Z, centres)]
    assert len(sums) == N and _pairs(M, Z.device)[0].numel() == 3
    for p in range(3):
        exact = sum(Fraction(float(b[p])) for b in sums)
        err = abs(Fraction(float(c[p])) + Fraction(float(lo[p])) - exact)
        assert err <= Fraction(1, 10 ** 20) * sum(abs(Fraction(float(b[p]))) for b in sums), float(err)
        assert float(c[p]) == float(exact)                                  # c: the sum correctly rounded
    running = sums[0].clone()
    for b in sums[1:]:
        running += b
    assert bool((running != c).any())                                        # what the remainder fixes


def test_cov_matrix_is_psi2_minus_psi1_outer():
    g = torch.Generator().manual_seed(5)
    N, Q, M = 9, 2, 5
    mu = torch.randn(N, Q, dtype=D64, generator=g)
    s = 0.2 + torch.rand(N, Q, dtype=D64, generator=g)
    Z = torch.randn(M, Q, dtype=D64, generator=g)
    var, ard = torch.tensor(1.4, dtype=D64), torch.tensor([0.7, 1.9], dtype=D64)
    for kind in ("rbfard", "linear"):
        _, P1, P2 = psi_stats(kind, mu, s, Z, var, ard)
        torch.testing.assert_close(streamed._psi1_part(kind, mu, s, Z, var, ard), P1, rtol=1e-13, atol=0)
        C = streamed._cov_matrix(kind, mu, s, Z, var, ard)
        torch.testing.assert_close(C, P2 - P1.mT @ P1, rtol=1e-10, atol=1e-12)
        assert bool((torch.linalg.eigvalsh(0.5 * (C + C.mT)) > -1e-12).all())      # a sum of covariances
    with pytest.raises(ValueError, match="kind"):
        streamed._cov_matrix("matern", mu, s, Z, var, ard)


@pytest.mark.parametrize("block", [1, 4, 64])
def test_pair_cov_sum_value_and_gradient(block, monkeypatch):
    # c_p = Σ_n exp(a_np) expm1(δ_np), δ_np = Fd_n · G(Z − c_b(n))_p, against the dense expression, and
    # its hand-written backward against finite differences, in one block and in several (the last
    # one partial), each block with its own centre
    from tandem.models.gp_kernels import _pairs
    M, Q, N = 3, 2, 10
    P = M * (M + 1) // 2
    monkeypatch.setattr(streamed, "PAIR_BLOCK_ENTRIES", block * P)
    monkeypatch.setattr(streamed, "PAIR_BLOCK_MIN_FRAMES", 1)
    assert streamed.pair_block_frames(P) == block
    g = torch.Generator().manual_seed(11)
    Fa = (0.3 * torch.randn(N, 3, dtype=D64, generator=g)).requires_grad_()
    GaT = (0.3 * torch.randn(3, P, dtype=D64, generator=g)).requires_grad_()
    Fd = (0.2 * torch.randn(N, 3 * Q + 1, dtype=D64, generator=g)).requires_grad_()
    Z = torch.randn(M, Q, dtype=D64, generator=g).requires_grad_()
    b = min(block, N)
    centres = torch.randn(-(-N // b), Q, dtype=D64, generator=g)
    im, ip, _ = _pairs(M, Z.device)

    def dense(Fa, GaT, Fd, Z):
        c = centres.repeat_interleave(b, 0)[:N]                     # (N, Q): each frame's centre
        Zc = Z[None] - c[:, None]                                   # (N, M, Q)
        zb = 0.5 * (Zc[:, im] + Zc[:, ip])                          # (N, P, Q)
        G = torch.cat([zb, Zc[:, im] * Zc[:, ip], zb * zb, torch.ones(N, P, 1, dtype=D64)], 2)
        delta = (G * Fd[:, None]).sum(-1)
        return ((Fa @ GaT).exp() * torch.expm1(delta)).sum(0)

    c, lo = streamed._PairCovSum.apply(Fa, GaT, Fd, Z, centres)
    torch.testing.assert_close(c, dense(Fa, GaT, Fd, Z), rtol=1e-14, atol=1e-15)
    assert not lo.requires_grad and bool(((c + lo) == c).all())        # lo: below half an ulp of c
    assert torch.autograd.gradcheck(lambda *x: streamed._PairCovSum.apply(*x, centres)[0], (Fa, GaT, Fd, Z))
    # inputs without a gradient: the others' gradients are unchanged
    w = torch.randn(P, dtype=D64, generator=g)
    ga = torch.autograd.grad((streamed._PairCovSum.apply(Fa, GaT.detach(), Fd, Z.detach(), centres)[0] * w).sum(),
                             [Fa, Fd])
    gd = torch.autograd.grad((dense(Fa, GaT, Fd, Z) * w).sum(), [Fa, Fd])
    for x, y in zip(ga, gd):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="centres"):
        streamed._PairCovSum.apply(Fa, GaT, Fd, Z, centres[:0])
