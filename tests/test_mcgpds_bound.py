"""McGPDS objectives: ψ-statistics, KL, collapsed vs uncollapsed bound, gradients."""

import pyro
import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from tandem.guides.mcgpds import q_latent_dense, variational_params
from tandem.inference.mcgpds.bound import (
    Blocks,
    collapsed_bound,
    eig_logdet_quad,
    latent_terms,
)
from tandem.inference.mcgpds.uncollapsed import optimal_q_inducing, uncollapsed_elbo_analytic
from tandem.models.gp_kernels import psi_linear, psi_rbf, rbf_ard
from tandem.models.mcgpds import McGPDSData, default_init, dense_A, dense_time_K, hyperparams

D64 = torch.float64


def _detached(d: dict) -> dict:
    return {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def tiny_problem(seed=0, kind="rbfard", J=1, sizes=(7, 5), private_prior="mcgpds", M=4, Q=2):
    g = torch.Generator().manual_seed(seed)
    N = sum(sizes)
    t = torch.cat([torch.linspace(0, 1, n, dtype=D64) for n in sizes])
    seq = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    views = [torch.randn(N, 3, dtype=D64, generator=g), torch.randn(N, 4, dtype=D64, generator=g)]
    init = default_init(N, [3, 4], Q, M, J, kind, times=t, generator=g, private_prior=private_prior)
    for k in range(2):
        init[f"alpha_{k}"] = torch.tensor(0.3 + 0.3 * k, dtype=D64)
        init[f"eps_{k}"] = torch.tensor(0.05, dtype=D64)
        init[f"lam_{k}"] = torch.rand(N, Q, dtype=D64, generator=g) + 0.1
        init[f"mu_{k}"] = torch.randn(N, Q, dtype=D64, generator=g)
        init[f"W_{k}"] = torch.randn(views[k].shape[1], J, dtype=D64, generator=g)
        init[f"beta_{k}"] = torch.tensor(4.0 + k, dtype=D64)
    # every group learned (explicitly: the default fixes the unsafe ones), so every gradient is checked
    data = McGPDSData(views, t, seq, Q, M, J, kind, private_prior=private_prior, init=init, fixed=frozenset())
    pyro.clear_param_store()
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    return data, hp, mus, lams


def test_psi_rbf_matches_monte_carlo():
    g = torch.Generator().manual_seed(1)
    N, M, Q = 3, 4, 2
    mu = torch.randn(N, Q, dtype=D64, generator=g)
    s = 0.3 * torch.rand(N, Q, dtype=D64, generator=g) + 0.05
    Z = torch.randn(M, Q, dtype=D64, generator=g)
    var, ard = torch.tensor(1.7, dtype=D64), torch.tensor([0.8, 2.0], dtype=D64)
    psi0, P1, P2 = psi_rbf(mu, s, Z, var, ard)
    S = 200_000
    X = mu[None] + s.sqrt()[None] * torch.randn(S, N, Q, dtype=D64, generator=g)
    K = torch.stack([rbf_ard(X[:, n], Z, var, ard) for n in range(N)], 1)     # (S, N, M)
    P1_mc = K.mean(0)
    P2_mc = torch.einsum("snm,snp->mp", K, K) / S
    assert torch.allclose(P1, P1_mc, atol=4e-3)
    assert torch.allclose(P2, P2_mc, atol=1.5e-2)
    assert psi0.item() == pytest.approx(N * 1.7)
    # per-point ψ2 sums to the total
    assert torch.allclose(psi_rbf(mu, s, Z, var, ard, per_point=True)[2].sum(0), P2, atol=1e-12)


def test_psi_linear_matches_monte_carlo():
    g = torch.Generator().manual_seed(2)
    N, M, Q = 3, 2, 2
    mu = torch.randn(N, Q, dtype=D64, generator=g)
    s = 0.5 * torch.rand(N, Q, dtype=D64, generator=g)
    Z = torch.randn(M, Q, dtype=D64, generator=g)
    ard = torch.tensor([0.5, 1.5], dtype=D64)
    psi0, P1, P2 = psi_linear(mu, s, Z, ard)
    S = 200_000
    X = mu[None] + s.sqrt()[None] * torch.randn(S, N, Q, dtype=D64, generator=g)
    K = (X * ard) @ Z.T
    assert torch.allclose(P1, K.mean(0), atol=1e-2)
    assert torch.allclose(P2, torch.einsum("snm,snp->mp", K, K) / S, atol=5e-2)
    assert psi0.item() == pytest.approx(((X * X * ard).sum(-1).sum(-1)).mean().item(), rel=1e-2)


def test_psi2_custom_backward_gradcheck():
    g = torch.Generator().manual_seed(3)
    N, M, Q = 6, 3, 2
    args = (torch.randn(N, Q, dtype=D64, generator=g), torch.rand(N, Q, dtype=D64, generator=g) + 0.1,
            torch.randn(M, Q, dtype=D64, generator=g), torch.tensor(1.2, dtype=D64),
            torch.rand(Q, dtype=D64, generator=g) + 0.3)
    args = tuple(a.requires_grad_() for a in args)
    assert torch.autograd.gradcheck(lambda *a: psi_rbf(*a)[2], args)


def test_eig_logdet_quad_values_and_gradcheck():
    g = torch.Generator().manual_seed(4)
    M, D = 4, 5
    B = torch.randn(M, M, dtype=D64, generator=g)
    At = B @ B.T + 0.1 * torch.eye(M, dtype=D64)
    R = torch.randn(M, D, dtype=D64, generator=g)
    t = torch.rand(D, dtype=D64, generator=g) + 0.2
    ld, qd = eig_logdet_quad(At, R, t)
    ld_ref = sum(torch.logdet(torch.eye(M, dtype=D64) + t[d] * At) for d in range(D))
    qd_ref = sum(t[d] * R[:, d] @ torch.linalg.solve(torch.eye(M, dtype=D64) + t[d] * At, R[:, d])
                 for d in range(D))
    assert ld.item() == pytest.approx(ld_ref.item(), rel=1e-10)
    assert qd.item() == pytest.approx(qd_ref.item(), rel=1e-10)
    args = (At.clone().requires_grad_(), R.requires_grad_(), t.requires_grad_())
    assert torch.autograd.gradcheck(lambda a, r, tt: torch.stack(eig_logdet_quad(a, r, tt)), args)
    # degenerate spectrum (repeated eigenvalues) keeps finite gradients
    A0 = torch.zeros(M, M, dtype=D64, requires_grad=True)
    sum(eig_logdet_quad(A0, R.detach(), t.detach())).backward()
    assert torch.isfinite(A0.grad).all()


def test_blocks_pack_unpack_roundtrip_and_grouping():
    seq = torch.tensor([0] * 3 + [1] * 10 + [2] * 9 + [3] * 2)
    b = Blocks(seq)
    X = torch.randn(24, 3, dtype=D64)
    parts = [b.pack(X, g) for g in range(len(b.groups))]
    assert torch.equal(b.unpack(parts), X)
    assert sum(int(m.sum()) for _, m in b.groups) == 24
    sizes = sorted(int(m.shape[1]) for _, m in b.groups)
    assert sizes[-1] == 10          # 9 and 10 share a padded group
    with pytest.raises(Exception):
        b.unpack(parts[:-1])


@pytest.mark.parametrize("private_prior", ["mcgpds", "gplvm"])
def test_kl_matches_direct_gaussian_kl(private_prior):
    data, hp, mus, lams = tiny_problem(private_prior=private_prior)
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams, need_shared_var=True)
    mu_s, Ls, Lp = q_latent_dense(data, hp, mus, lams)
    N, Q = data.N, data.Q
    Ks = dense_time_K(data, hp["time_s"])
    A = [dense_A(data, v) for v in hp["views"]]
    al = [v["alpha"] for v in hp["views"]]
    kl = 0.0
    for q in range(Q):
        P = torch.zeros(3 * N, 3 * N, dtype=D64)
        P[:N, :N] = Ks
        for k in range(2):
            sl = slice((k + 1) * N, (k + 2) * N)
            P[sl, :N] = (1 - al[k]) * Ks
            P[:N, sl] = (1 - al[k]) * Ks
            P[sl, sl] = (1 - al[k]) ** 2 * Ks + A[k]
        P[N:2 * N, 2 * N:] = (1 - al[0]) * (1 - al[1]) * Ks
        P[2 * N:, N:2 * N] = P[N:2 * N, 2 * N:].T
        Sq = torch.zeros(3 * N, 3 * N, dtype=D64)
        Sq[:N, :N] = Ls @ Ls.T
        for k in range(2):
            sl = slice((k + 1) * N, (k + 2) * N)
            Sq[sl, sl] = Lp[k][q] @ Lp[k][q].T
        m = torch.cat([mu_s[:, q], mus[0][:, q], mus[1][:, q]])
        kl = kl + kl_divergence(MultivariateNormal(m, Sq), MultivariateNormal(torch.zeros(3 * N, dtype=D64), P))
    assert lt["kl"].item() == pytest.approx(kl.item(), rel=1e-9)
    # closed-form q(X^(s)) and diag S^(k) agree with the dense guide
    assert torch.allclose(lt["mu_s"], mu_s, atol=1e-10)
    assert torch.allclose(lt["s_s"], (Ls @ Ls.T).diagonal(), atol=1e-10)
    for k in range(2):
        assert torch.allclose(lt["s_diag"][k], (Lp[k] @ Lp[k].mT).diagonal(dim1=-2, dim2=-1).T, atol=1e-10)


def test_kl_is_zero_at_prior_single_view_limit():
    """α = 1 and λ → 0 : q(X^(k)) = prior, q(X^(s)) = prior, KL → 0."""
    data, hp, mus, lams = tiny_problem()
    for v in hp["views"]:
        v["alpha"] = torch.tensor(1.0, dtype=D64)
    zeros = [torch.zeros_like(m) for m in mus]
    tiny = [torch.full_like(m, 1e-12) for m in lams]
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], zeros, tiny)
    assert abs(lt["kl"].item()) < 1e-8


@pytest.mark.parametrize("kind,J", [("rbfard", 1), ("rbfard", 2), ("linear", 1)])
def test_uncollapsed_at_optimum_equals_collapsed_and_is_below_elsewhere(kind, J):
    data, hp, mus, lams = tiny_problem(kind=kind, J=J, M=2 if kind == "linear" else 4)
    F = collapsed_bound(data, hp, mus, lams)
    q_v, q_u = optimal_q_inducing(data, hp, mus, lams)
    E = uncollapsed_elbo_analytic(data, hp, mus, lams, q_v, q_u)
    assert E.item() == pytest.approx(F.item(), rel=1e-8, abs=1e-7)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        pv = [(m + 0.2 * torch.randn(m.shape, dtype=D64, generator=g), L * 1.1) for m, L in q_v]
        pu = [(m + 0.2 * torch.randn(m.shape, dtype=D64, generator=g), L * 0.9) for m, L in q_u]
        assert uncollapsed_elbo_analytic(data, hp, mus, lams, pv, pu).item() < F.item()


def test_collapsed_bound_gradcheck():
    data, hp0, mus0, lams0 = tiny_problem(sizes=(4, 3), M=3)
    names = ["mu_0", "lam_1", "W_0", "Zh_1", "Zg_0", "kh_ard_0", "alpha_1", "t_invw_s", "beta_0"]
    base = {n: data.init[n].clone() for n in names}

    def f(*vals):
        d = data
        d.init = dict(data.init)
        for n, v in zip(names, vals):
            d.init[n] = v
        d.fixed = frozenset(["alpha", "eps", "beta", "time", "kernel", "inducing", "W", "variational"])
        hp = hyperparams(d)
        mus, lams = variational_params(d)
        return collapsed_bound(d, hp, mus, lams)

    args = tuple(v.clone().requires_grad_() for v in base.values())
    assert torch.autograd.gradcheck(f, args, atol=1e-5, rtol=1e-4)


def test_bound_invariant_to_block_grouping():
    data, hp, mus, lams = tiny_problem(sizes=(6, 5, 2))
    F1 = collapsed_bound(data, hp, mus, lams)
    data.blocks = Blocks(data.seq_ids, ratio=100.0)    # pad everything into one group
    F2 = collapsed_bound(data, hp, mus, lams)
    data.blocks = Blocks(data.seq_ids, ratio=1.0)      # no padding at all
    F3 = collapsed_bound(data, hp, mus, lams)
    assert F1.item() == pytest.approx(F2.item(), rel=1e-11)
    assert F1.item() == pytest.approx(F3.item(), rel=1e-11)


def test_collapsed_bound_exact_gp_limit():
    """One view, α=1, M=N inducing at the latent means, s→0, J=1 with w=0: the h part is
    the exact GP marginal likelihood of each output (inducing points = inputs)."""
    g = torch.Generator().manual_seed(7)
    N, Q = 6, 1
    t = torch.linspace(0, 1, N, dtype=D64)
    X = torch.randn(N, Q, dtype=D64, generator=g)
    Y = torch.randn(N, 2, dtype=D64, generator=g)
    init = default_init(N, [2], Q, N, 1, "rbfard", X0=X, times=t, generator=g)
    init["Zh_0"] = X.clone()
    init["W_0"] = torch.zeros(2, 1, dtype=D64)
    init["alpha_0"] = torch.tensor(1.0, dtype=D64)
    init["lam_0"] = torch.full((N, Q), 1e10, dtype=D64)  # S → 0
    init["beta_0"] = torch.tensor(3.0, dtype=D64)
    data = McGPDSData([Y], t, torch.zeros(N), Q, N, 1, "rbfard", fixed=frozenset(["alpha"]), init=init)
    pyro.clear_param_store()
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    F, parts = collapsed_bound(data, hp, mus, lams, return_parts=True)
    v = hp["views"][0]
    K = rbf_ard(X, X, v["kh_var"], v["kh_ard"]) + 1e-6 * v["kh_var"] * torch.eye(N, dtype=D64)
    C = K + torch.eye(N, dtype=D64) / 3.0
    exact = sum(MultivariateNormal(torch.zeros(N, dtype=D64), C).log_prob(Y[:, d]) for d in range(2))
    # the w=0 g-part adds nothing; trace term ≈ 0 when Z = X (up to the fixed jitter)
    assert parts["lik"][0].item() == pytest.approx(exact.item(), abs=1e-3)


def test_private_cov_closed_form_backward_matches_autograd_path():
    """Constant A (protocol: α, ε, time kernels fixed) uses _PrivateCov; same KL and gradients."""
    from tandem.inference.mcgpds.private_cov import _PrivateCov
    g = torch.Generator().manual_seed(9)
    n = 5
    X = torch.randn(2, 1, n, n, dtype=D64, generator=g)
    A = X @ X.mT / n + 0.5 * torch.eye(n, dtype=D64)
    lam = (torch.rand(2, 3, 1, n, dtype=D64, generator=g) + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(lambda l: torch.cat([o.flatten() for o in _PrivateCov.apply(A, l)]), (lam,))
    data, hp, mus, lams = tiny_problem()
    lams = [l.detach().clone().requires_grad_() for l in lams]
    # constant hyperparameters -> closed-form path
    hp_c = {"time_s": {k: (v.detach() if v is not None else None) for k, v in hp["time_s"].items()},
            "views": [{k: (v.detach() if isinstance(v, torch.Tensor) else
                           ({kk: (vv.detach() if vv is not None else None) for kk, vv in v.items()}
                            if isinstance(v, dict) else v)) for k, v in vw.items()} for vw in hp["views"]]}
    kl_c = latent_terms(data.times, data.blocks, hp_c["time_s"], hp_c["views"], mus, lams)["kl"]
    gc = torch.autograd.grad(kl_c, lams)
    kl_a = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)["kl"]
    ga = torch.autograd.grad(kl_a, lams)
    assert kl_c.item() == pytest.approx(kl_a.item(), rel=1e-12)
    for a, b in zip(gc, ga):
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-10)


def test_private_cov_inverse_form_matches_b_form_and_gradcheck():
    """Well-conditioned constant A: (A⁻¹ + Λ)⁻¹ form = the B_q form (values and gradients)."""
    from tandem.inference.mcgpds.private_cov import _PrivateCov, _PrivateCovInv
    g = torch.Generator().manual_seed(11)
    n = 6
    X = torch.randn(2, 2, n, n, dtype=D64, generator=g)
    A = X @ X.mT / n + 0.3 * torch.eye(n, dtype=D64)
    Ainv = torch.cholesky_inverse(torch.linalg.cholesky(A))
    lam = (torch.rand(2, 3, 2, n, dtype=D64, generator=g) + 0.05).requires_grad_()
    ldB, sdB = _PrivateCov.apply(A, lam)
    ldP, sdP = _PrivateCovInv.apply(Ainv, lam)
    ldA = torch.logdet(A)
    assert torch.allclose(ldB, ldA[:, None] + ldP, rtol=1e-12, atol=1e-12)
    assert torch.allclose(sdB, sdP, rtol=1e-11, atol=1e-13)
    w1, w2 = torch.randn(ldB.shape, dtype=D64, generator=g), torch.randn(sdB.shape, dtype=D64, generator=g)
    gB = torch.autograd.grad((ldB * w1).sum() + (sdB * w2).sum(), lam)[0]
    gP = torch.autograd.grad((ldP * w1).sum() + (sdP * w2).sum(), lam)[0]
    assert torch.allclose(gB, gP, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda l: torch.cat([o.flatten() for o in _PrivateCovInv.apply(Ainv, l)]),
                                    (lam,))


def test_cached_prior_factors_follow_hyperparameter_values():
    """The constant-prior cache on Blocks must not return factors of other α / time values."""
    data, hp, mus, lams = tiny_problem()
    views = [dict(_detached(v), time=_detached(v["time"])) for v in hp["views"]]
    ts = _detached(hp["time_s"])
    kl1 = latent_terms(data.times, data.blocks, ts, views, mus, lams)["kl"].item()
    assert latent_terms(data.times, data.blocks, ts, views, mus, lams)["kl"].item() == kl1   # cached
    views2 = [dict(v, alpha=v["alpha"] * 0.5) for v in views]
    kl2 = latent_terms(data.times, data.blocks, ts, views2, mus, lams)["kl"].item()
    fresh = Blocks(data.seq_ids)
    assert kl2 == pytest.approx(latent_terms(data.times, fresh, ts, views2, mus, lams)["kl"].item(), rel=1e-12)
    assert kl2 != pytest.approx(kl1, rel=1e-6)


def test_psi2_pair_sum_gradcheck_with_constant_inputs():
    """ψ2 over pairs m ≤ m': gradients when only some inputs require grad (Z fixed / μ, s fixed)."""
    g = torch.Generator().manual_seed(12)
    N, M, Q = 5, 4, 3
    mu, s = torch.randn(N, Q, dtype=D64, generator=g), torch.rand(N, Q, dtype=D64, generator=g) + 0.1
    Z, var, ard = torch.randn(M, Q, dtype=D64, generator=g), torch.tensor(0.9, dtype=D64), \
        torch.rand(Q, dtype=D64, generator=g) + 0.2
    P2 = psi_rbf(mu, s, Z, var, ard)[2]
    assert torch.allclose(P2, P2.mT, atol=0)                                       # exactly symmetric
    assert torch.allclose(P2, psi_rbf(mu, s, Z, var, ard, per_point=True)[2].sum(0), rtol=1e-12, atol=1e-14)
    assert torch.autograd.gradcheck(lambda m_, s_: psi_rbf(m_, s_, Z, var, ard)[2],
                                    (mu.clone().requires_grad_(), s.clone().requires_grad_()))
    assert torch.autograd.gradcheck(lambda z: psi_rbf(mu, s, z, var, ard)[2], (Z.clone().requires_grad_(),))


def test_latent_terms_memo_only_reuses_identical_constant_inputs():
    """Model-only phases reuse the constant KL; any change of μ or λ recomputes it."""
    data, hp, mus, lams = tiny_problem()
    views = [dict(_detached(v), time=_detached(v["time"])) for v in hp["views"]]
    ts = _detached(hp["time_s"])
    mus = [m.detach().clone() for m in mus]
    lams = [l.detach().clone() for l in lams]
    a = latent_terms(data.times, data.blocks, ts, views, mus, lams)
    b = latent_terms(data.times, data.blocks, ts, views, mus, lams)
    assert b["kl"].item() == a["kl"].item()
    mus2 = [m.clone() for m in mus]
    mus2[0][0, 0] += 1e-3
    c = latent_terms(data.times, data.blocks, ts, views, mus2, lams)
    fresh = latent_terms(data.times, Blocks(data.seq_ids), ts, views, mus2, lams)
    assert c["kl"].item() == pytest.approx(fresh["kl"].item(), rel=1e-13)
    assert c["kl"].item() != a["kl"].item()
    # with gradients required nothing is reused
    lg = [l.clone().requires_grad_() for l in lams]
    d = latent_terms(data.times, data.blocks, ts, views, mus, lg)
    assert d["kl"].requires_grad and d["kl"].item() == pytest.approx(a["kl"].item(), rel=1e-13)


@pytest.mark.parametrize("block", [1, 2, 3, 32])
def test_blocked_psi2_pair_sum_equals_unblocked_and_gradcheck(monkeypatch, block):
    """The cache-blocked ψ2 (frames in blocks, recomputed in the backward) equals the unblocked
    pair table to 1e-12 in value and gradient (N not a multiple of the block), and passes gradcheck."""
    import tandem.models.gp_kernels as gk
    g = torch.Generator().manual_seed(21)
    N, M, Q = 75, 6, 3
    args = (torch.randn(N, Q, dtype=D64, generator=g), torch.rand(N, Q, dtype=D64, generator=g) + 0.1,
            torch.randn(M, Q, dtype=D64, generator=g), torch.tensor(1.3, dtype=D64),
            torch.rand(Q, dtype=D64, generator=g) + 0.2)
    args = tuple(a.requires_grad_() for a in args)
    W = torch.randn(M, M, dtype=D64, generator=g)
    out = {}
    for b in (0, block):
        monkeypatch.setattr(gk, "PSI2_BLOCK", b)
        v = (gk.psi_rbf(*args)[2] * W).sum()
        out[b] = (v.detach(), torch.autograd.grad(v, args))
    (v0, g0), (v1, g1) = out[0], out[block]
    assert abs(float(v1 - v0)) <= 1e-12 * abs(float(v0))
    for a, b_ in zip(g0, g1):
        assert torch.allclose(a, b_, rtol=1e-12, atol=1e-12 * float(a.abs().max()))
    monkeypatch.setattr(gk, "PSI2_BLOCK", block)
    small = tuple(a.detach()[:7].clone().requires_grad_() if a.dim() and a.shape[0] == N else a for a in args)
    assert torch.autograd.gradcheck(lambda *a: gk.psi_rbf(*a)[2], small)


def test_well_conditioned_shortcut_agrees_with_the_eigenvalues(monkeypatch):
    # cond₂ ≤ ‖A‖_∞‖A⁻¹‖_∞ settles well-conditioned stacks without eigenvalues; near or past the
    # limit the eigenvalues decide, so the answer is the exact one either way
    from tandem.inference.mcgpds import prior_factors as pf
    g = torch.Generator().manual_seed(4)
    n = 30
    Qm = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=g))[0]
    calls = []
    eigvalsh = torch.linalg.eigvalsh
    monkeypatch.setattr(pf.torch.linalg, "eigvalsh", lambda A: calls.append(1) or eigvalsh(A))
    for cond in (1e1, 1e4, 0.5e8, 2e8, 1e11):
        ev = torch.logspace(0, torch.log10(torch.tensor(cond)).item(), n, dtype=torch.float64)
        A = (Qm * ev) @ Qm.T
        A = 0.5 * (A + A.T)
        Ainv = torch.cholesky_inverse(torch.linalg.cholesky(A))
        calls.clear()
        exact = pf.well_conditioned(A)
        assert exact == (cond < pf.AINV_COND_MAX) and calls
        calls.clear()
        assert pf.well_conditioned(A, Ainv) == exact
        if cond <= 1e4:                      # ‖·‖_∞ bound ≤ n·cond: far from the limit, no eigenvalues
            assert not calls
