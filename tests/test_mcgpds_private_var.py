"""diag S of the private q(X) and the KL for large variational precisions λ.

S = (A⁻¹ + Λ)⁻¹. Computed as ``diag A − ‖L_B⁻¹ Λ^½ A‖²`` it cancels once λ A ≫ 1, and a floor
on the result made the KL term Σ λ S (which lies in [0, N]) as large as λ · floor: a 10⁵-frame
stochastic fit's local step followed that to λ ≈ e⁴⁰⁴ and a "bound" of 10¹⁶³.
"""
import math

import pytest
import torch

from tandem.inference.mcgpds import stochastic as st
from tandem.inference.mcgpds.bound import latent_terms
from tandem.inference.mcgpds.private_cov import _PrivateCov, private_var_diag
from tandem.models.mcgpds import hyperparams

D64 = torch.float64


def _A(n: int, seed: int) -> torch.Tensor:
    """A well-conditioned SPD A (RBF Gram + 0.3 I), so that (A⁻¹ + Λ)⁻¹ is an accurate reference."""
    t = torch.linspace(0, 1, n, dtype=D64)
    return torch.exp(-0.5 * (t[:, None] - t[None, :]) ** 2 / 0.2 ** 2) + 0.3 * torch.eye(n, dtype=D64)


def _reference_diag(A: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    # (A⁻¹ + Λ)⁻¹ through its own Cholesky: diagonal-dominant for large λ, accurate to rounding
    Ainv = torch.cholesky_inverse(torch.linalg.cholesky(A))
    P = Ainv + torch.diag_embed(lam)
    return torch.cholesky_inverse(torch.linalg.cholesky(P)).diagonal(dim1=-2, dim2=-1)


def _b_form(A, lam):
    sl = lam.sqrt()
    slA = sl[..., :, None] * A
    LB = torch.linalg.cholesky(torch.eye(A.shape[-1], dtype=D64) + slA * sl[..., None, :])
    T = torch.linalg.solve_triangular(LB, slA, upper=False)
    return T, LB


@pytest.mark.parametrize("log10_lam_max", [0, 6, 12, 20, 60, 150])
def test_private_var_diag_matches_the_inverse_form_for_every_scale_of_lambda(log10_lam_max):
    n = 8
    A = _A(n, 0)
    g = torch.Generator().manual_seed(log10_lam_max)
    lam = 10.0 ** (torch.rand(n, dtype=D64, generator=g) * (log10_lam_max + 4) - 4)   # 1e-4 .. 1e{max}
    T, LB = _b_form(A, lam)
    sd = private_var_diag(A.diagonal(), T, LB, lam)
    ref = _reference_diag(A, lam)
    torch.testing.assert_close(sd, ref, rtol=1e-10, atol=0.0)
    # the KL's trace term λ S_nn = 1 − (B⁻¹)_nn lies in [0, 1]
    assert bool(((lam * sd) >= 0).all()) and bool(((lam * sd) <= 1 + 1e-12).all())


def test_the_subtraction_alone_is_wrong_for_large_lambda():
    """The check above can fail: the plain subtraction is off by orders of magnitude at λ = 1e20."""
    n = 8
    A = _A(n, 0)
    lam = torch.full((n,), 1e20, dtype=D64)
    T, LB = _b_form(A, lam)
    plain = A.diagonal() - (T * T).sum(-2)
    ref = _reference_diag(A, lam)
    assert float(((plain - ref).abs() / ref).max()) > 1.0
    sd = private_var_diag(A.diagonal(), T, LB, lam)
    torch.testing.assert_close(sd, ref, rtol=1e-10, atol=0.0)


def test_small_lambda_is_the_old_subtraction_bit_for_bit():
    n = 6
    A = _A(n, 1)
    lam = torch.full((n,), 0.5, dtype=D64)           # λ A_nn ≤ 1 everywhere
    T, LB = _b_form(A, lam)
    assert torch.equal(private_var_diag(A.diagonal(), T, LB, lam), A.diagonal() - (T * T).sum(-2))


def test_private_cov_gradcheck_with_large_lambda():
    g = torch.Generator().manual_seed(3)
    n = 5
    X = torch.randn(2, 1, n, n, dtype=D64, generator=g)
    A = X @ X.mT / n + 0.5 * torch.eye(n, dtype=D64)
    lam = (10.0 ** (3 * torch.rand(2, 3, 1, n, dtype=D64, generator=g))).requires_grad_()   # 1 .. 1e3
    assert torch.autograd.gradcheck(lambda l: torch.cat([o.flatten() for o in _PrivateCov.apply(A, l)]), (lam,))


@pytest.fixture(scope="module")
def sim():
    return st.simulate_sequences(2, 12, [3, 2], Q=2, M=4, seed=0)


@pytest.mark.parametrize("log_lam", [5.0, 40.0, 400.0])
def test_window_kl_and_latent_terms_stay_nonnegative_for_huge_lambda(sim, log_lam):
    """KL(q ‖ p) ≥ 0 for every q: with λ = e^{log_lam} on some frames both KL codes stay finite,
    non-negative, equal to each other, and their private variances are ≈ 1/λ there."""
    cfg = st.StochasticConfig(Q=2, M=4, window=12, batch=2, num_steps=0)
    m = st.StochasticMcGPDS(cfg)
    m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=0)
    d = m.data
    import pyro
    pyro.clear_param_store()
    idx = torch.arange(d.windows.S)
    q = st.guide_params(d, idx)
    with torch.no_grad():
        hp = hyperparams(d)
        mask = d.mask.to(D64)
        mu = torch.stack(q["mu"]) * mask[None, :, :, None]
        lam = torch.stack(q["lam"]).clone()
        lam[:, :, ::3, :] = math.exp(log_lam)          # every third frame, both views, both dims
        kl, sd = st.window_kl(d.times[d.rows] * mask, mask, hp["time_s"], hp["views"], mu, lam)
        assert bool(torch.isfinite(kl).all()) and bool((kl >= 0).all()), kl
        big = sd[:, :, ::3, :][mask[:, ::3].bool().expand(2, -1, -1)]
        assert float((big * math.exp(log_lam)).max()) <= 1.0 + 1e-9
        assert float((big * math.exp(log_lam)).min()) >= 0.5
        # the collapsed code, windows as sequences: the same KL
        cd = m.collapsed_data()
        mus = [torch.cat([mu[k][i][mask[i].bool()] for i in range(d.windows.S)]) for k in range(2)]
        lams = [torch.cat([lam[k][i][mask[i].bool()] for i in range(d.windows.S)]) for k in range(2)]
        hpc = hyperparams(cd)
        lt = latent_terms(cd.times, cd.blocks, hpc["time_s"], hpc["views"], mus, lams)
    assert float(lt["kl"]) >= 0
    assert math.isclose(float(lt["kl"]), float(kl.sum()), rel_tol=1e-9)


def test_window_kl_refuses_a_negative_kl(sim, monkeypatch):
    """With the old cancelling variances (floor 1e-12) the KL at λ = e⁴⁰ comes out hugely negative:
    window_kl raises instead of returning it (the local step then rejects the point)."""
    import pyro

    from tandem.inference.mcgpds import private_cov
    from tandem.inference.numerics import NotPositiveDefiniteError
    monkeypatch.setattr(private_cov, "private_var_diag", lambda Ad, T, LB, lam: (Ad - (T * T).sum(-2)).clamp_min(1e-12))
    cfg = st.StochasticConfig(Q=2, M=4, window=12, batch=2, num_steps=0)
    m = st.StochasticMcGPDS(cfg)
    m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=0)
    d = m.data
    pyro.clear_param_store()
    q = st.guide_params(d, torch.arange(d.windows.S))
    with torch.no_grad():
        hp = hyperparams(d)
        mask = d.mask.to(D64)
        lam = torch.stack(q["lam"]).clone()
        lam[:, :, ::3, :] = math.exp(40.0)
        with pytest.raises(NotPositiveDefiniteError, match="negative"):
            st.window_kl(d.times[d.rows] * mask, mask, hp["time_s"], hp["views"],
                         torch.stack(q["mu"]) * mask[None, :, :, None], lam)


def test_private_var_diag_gradient_through_both_forms():
    """Autograd through the subtraction and the (B⁻¹)-diagonal form (one matrix of the batch above
    the switch, two below) equals the gradient of the inverse form (A well conditioned), in log λ."""
    n = 5
    A = _A(n, 2)
    g = torch.Generator().manual_seed(5)
    loglam = (torch.rand(3, n, dtype=D64, generator=g) * 4 - 2)
    loglam[1, 2] = math.log(1e6)                      # matrix 1 crosses the switch, 0 and 2 do not
    w = torch.randn(3, n, dtype=D64, generator=g)

    def grad(fn):
        ll = loglam.clone().requires_grad_()
        return torch.autograd.grad((w * fn(ll.exp())).sum(), ll)[0]

    def ours(lam):
        T, LB = _b_form(A, lam)
        return private_var_diag(A.diagonal(), T, LB, lam)

    torch.testing.assert_close(grad(ours), grad(lambda lam: _reference_diag(A, lam)), rtol=1e-8, atol=1e-14)


@pytest.mark.parametrize("log_lam", [0.0, 12.0])
def test_window_kl_forms_of_a_kept_prior_agree(log_lam):
    """The local step keeps the windows' prior factors (A constant) and uses the closed-form
    backwards: the well-conditioned (A⁻¹ + Λ)⁻¹ form, the B_q form with a closed-form backward and
    the autograd form give the same KL, variances and gradients in (μ, log λ), padding included."""
    import pyro

    from tandem.inference.mcgpds.window_prior_kl import window_prior
    sim = st.simulate_sequences(3, 17, [3, 2], Q=2, M=4, seed=1)      # 17 = 12 + 5: padded windows
    cfg = st.StochasticConfig(Q=2, M=4, window=12, batch=2, num_steps=0)
    m = st.StochasticMcGPDS(cfg)
    m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=0)
    d = m.data
    assert bool((d.mask.sum(1) < d.mask.shape[1]).any())
    pyro.clear_param_store()
    q = st.guide_params(d, torch.arange(d.windows.S))
    with torch.no_grad():
        hp = hyperparams(d)
        mask = d.mask.to(D64)
        t = d.times[d.rows] * mask
        mu0 = torch.stack(q["mu"]) * mask[None, :, :, None]
        loglam0 = torch.stack(q["lam"]).log()
        loglam0[:, :, ::4, :] = log_lam
    kept = window_prior(t, mask, hp["time_s"], hp["views"], decide=True)
    assert kept["Ainv_ok"] is True
    ill = dict(kept, Ainv_ok=False)
    w = torch.randn(mu0.shape, dtype=D64, generator=torch.Generator().manual_seed(0))

    def run(prior):
        mu, ll = mu0.clone().requires_grad_(), loglam0.clone().requires_grad_()
        kl, sd = st.window_kl(t, mask, hp["time_s"], hp["views"], mu, ll.exp(), prior)
        out = kl.sum() + (w * sd * mask[None, :, :, None]).sum()
        return (kl.detach(), sd.detach() * mask[None, :, :, None], *torch.autograd.grad(out, (mu, ll)))

    ref = run(None)
    assert all(bool(torch.isfinite(x).all()) for x in ref)
    for prior in (kept, ill):
        for a, b in zip(run(prior), ref):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * float(b.abs().max()))
