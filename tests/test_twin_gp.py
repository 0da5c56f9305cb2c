"""Twin GPs: hand gradients, limits in α, β-independence, Lemma 4.1/4.2, O(N²) vs O(N³),
batched vs per-point, SVI vs the deterministic reference, local model, bad input."""
import math
import subprocess
import sys

import numpy as np
import pyro
import pytest
import torch
from pyro.infer import Trace_ELBO

from common import DATA_DIR, ROOT, load_script, read_results, smooth_multi_output_problem
from tandem.guides.twin_gp import TwinGPDeltaGuide, TwinGPNormalGuide
from tandem.inference import LBFGS, fit
from tandem.inference.predictive import posterior_predictive
from tandem.inference.twin_gp.optimizer import minimize_batched
from tandem.inference.twin_gp.predictor import (
    TwinGP,
    _kvec,
    certainty,
    gpr_predict,
    hsic,
    kernel_alignment,
    kernel_knn_predict,
    lemma41_log_bound,
    rbf,
    smtgp_det_objective,
    wknn_predict,
)
from tandem.inference.twin_gp.selection import kfold_indices, select_alignment_knn, select_alpha_beta
from tandem.models.twin_gp import DIMS, simulate, twin_gp_model

D = torch.float64


def _toy(which, seed):
    d = simulate(which, seed=seed)
    return d["X_train"], d["Y_train"], d["X_test"], d["Y_test"]


@pytest.fixture(scope="module")
def toy():
    X, Y, Xt, Yt = _toy(1, seed=0)
    return X[::3].contiguous(), Y[::3].contiguous(), Xt[::12].contiguous(), Yt[::12].contiguous()


@pytest.fixture(scope="module")
def multi():
    return smooth_multi_output_problem()


@pytest.mark.parametrize("method,alpha", [("KLTGP", 0.5), ("IKLTGP", 0.5), ("SMTGP", 0.3), ("SMTGP", 0.9)])
@pytest.mark.parametrize("neighbors", [None, 25])
def test_hand_gradient_matches_autograd(multi, method, alpha, neighbors):
    X, Y, Xt, _ = multi
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    ctx = m.context(Xt, method, alpha, neighbors=neighbors)
    y = (m.predict(Xt, "KLTGP", neighbors=neighbors) + 0.05).requires_grad_(True)
    for form, beta in (("log", None), ("sm", 0.5), ("sm", 1.5)):
        if form == "sm" and method != "SMTGP":
            continue
        f, g = m.value_and_grad(y, ctx, beta=beta, form=form, ref=torch.zeros(Xt.shape[0], dtype=D))
        (auto,) = torch.autograd.grad(f.sum(), y)
        torch.testing.assert_close(g, auto, rtol=1e-8, atol=1e-10)


def test_alpha_limits_give_kltgp_and_ikltgp(toy):
    # the expansion η_xy(α) = η_x + α g(y) + O(α²) holds for α ≪ η_x ≥ λ, so the limits are
    # approached once α (or 1 − α) is well below λ; the distance shrinks like α/λ. Towards
    # α → 1 rounding takes over below 1 − α ≈ 1e-5: M_α = (1−α)K_X + αK_Y carries K_X at
    # relative size 1 − α, so at 1 − α = 1e-7 the predictions move by ~1e-4–1e-3 with the
    # BLAS summation order (thread count); the test asks for the best distance of the sweep
    X, Y, Xt, _ = toy
    m = TwinGP(X, Y, 0.15, 0.15, 1e-3)
    kl = m.predict(Xt, "KLTGP", gtol=1e-10, max_iter=300)
    ikl = m.predict(Xt, "IKLTGP", init=kl, gtol=1e-10, max_iter=300)
    d0, d1 = [], []
    for eps in (1e-3, 1e-5, 1e-6, 1e-7):
        d0.append((m.predict(Xt, "SMTGP", alpha=eps, init=kl, gtol=1e-10, max_iter=300) - kl).abs().max().item())
        d1.append((m.predict(Xt, "SMTGP", alpha=1 - eps, init=ikl, gtol=1e-10, max_iter=300) - ikl).abs().max().item())
    # towards α → 0 the distance falls like α/λ; towards α → 1 it falls from ~λ·(1 − α)/λ at
    # 1 − α = 1e-3 until rounding (which depends on the BLAS path) holds it at ~1e-4, so the
    # α → 1 side asks only that the limit is approached before rounding takes over
    assert d0[-1] < 1e-3 and d1[0] < 2e-3, (d0, d1)
    assert d0[0] > d0[1] > d0[-1] and d1[0] > 3 * min(d1)
    mid = m.predict(Xt, "SMTGP", alpha=0.5, init=kl, gtol=1e-10, max_iter=300)
    assert (mid - kl).abs().max() > 1e-2 and (mid - ikl).abs().max() > 1e-2  # not trivially equal


def test_minimiser_does_not_depend_on_beta(multi):
    X, Y, Xt, _ = multi
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    init = m.predict(Xt, "KLTGP")
    ref = m.predict(Xt, "SMTGP", alpha=0.4, init=init, form="log", gtol=1e-11, max_iter=500)
    for beta in (0.99, 0.5, 1.5, 3.0):
        y = m.predict(Xt, "SMTGP", alpha=0.4, beta=beta, init=init, form="sm", gtol=1e-12, max_iter=500)
        assert (y - ref).abs().max() < 1e-5, beta


def test_lemma_4_1_and_4_2(multi):
    X, Y, Xt, _ = multi
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    for a in (0.2, 0.5, 0.8):
        bound = lemma41_log_bound(m, a).item()
        pred = m.predict(Xt, "SMTGP", alpha=a, gtol=1e-10, max_iter=300)
        logphi = certainty(m, Xt, pred, a)
        assert (logphi <= bound + 1e-9).all()
        g = torch.Generator().manual_seed(0)
        for _ in range(5):  # Lemma 4.2: the prediction maximises φ_α (locally)
            other = pred + 0.05 * torch.randn(pred.shape, generator=g, dtype=D)
            assert (certainty(m, Xt, other, a) <= logphi + 1e-10).all()
            far = torch.randn(pred.shape, generator=g, dtype=D) * 3
            assert (certainty(m, Xt, far, a) <= bound + 1e-9).all()


def test_det_form_same_objective_and_minimiser(multi):
    X, Y, Xt, _ = multi
    X, Y, Xt = X[:25], Y[:25], Xt[:3]
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    a = 0.35
    ctx = m.context(Xt, "SMTGP", a)
    y1 = m.predict(Xt, "KLTGP")
    y2 = y1 + 0.1
    ell = lambda y: m.objective(y, ctx) * a * (1 - a)  # noqa: E731
    det = lambda y: smtgp_det_objective(m, Xt, y, a)  # noqa: E731
    # −log c_α = ½ ℓ_α + const(x): differences agree exactly
    torch.testing.assert_close(det(y1) - det(y2), 0.5 * (ell(y1) - ell(y2)), rtol=1e-7, atol=1e-10)
    fast = m.predict(Xt, "SMTGP", alpha=a, init=y1, gtol=1e-11, max_iter=500)
    y = y1.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([y], max_iter=300, tolerance_grad=1e-12, tolerance_change=1e-15,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        v = smtgp_det_objective(m, Xt, y, a, beta=0.5).sum()
        v.backward()
        return v
    opt.step(closure)
    assert (y.detach() - fast).abs().max() < 1e-4


@pytest.mark.parametrize("optimizer", ["bfgs", "gd"])
def test_batched_equals_per_point_loop(multi, optimizer):
    X, Y, Xt, _ = multi
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    init = m.predict(Xt, "KLTGP")
    batched = m.predict(Xt, "SMTGP", alpha=0.5, beta=1.5, form="sm", init=init, optimizer=optimizer)
    loop = torch.cat([m.predict(Xt[i:i + 1], "SMTGP", alpha=0.5, beta=1.5, form="sm", init=init[i:i + 1],
                                optimizer=optimizer) for i in range(Xt.shape[0])])
    # equal up to rounding: a single-row product and a batched GEMM round differently
    torch.testing.assert_close(batched, loop, rtol=0, atol=1e-5)


def test_optimizer_handles_quadratics_exactly():
    # B independent quadratics with different curvatures: each point converges on its own
    A = torch.tensor([1.0, 10.0, 100.0], dtype=D).view(3, 1)
    c = torch.tensor([[1.0, -2.0], [0.5, 0.5], [-1.0, 3.0]], dtype=D)

    def fg(y, idx):
        return 0.5 * (A[idx] * (y - c[idx]) ** 2).sum(1), A[idx] * (y - c[idx])
    y, info = minimize_batched(fg, torch.zeros(3, 2, dtype=D), gtol=1e-10)
    torch.testing.assert_close(y, c, atol=1e-8, rtol=0)
    assert info.converged.all()


def test_optimizer_takes_a_given_inverse_hessian():
    # correlated quadratics f = ½ (y − c)ᵀ H (y − c): from the exact inverse Hessian the first
    # step lands on the minimiser (one iteration), from the identity BFGS needs more
    g = torch.Generator().manual_seed(0)
    R = torch.randn(4, 3, 3, generator=g, dtype=D)
    Hs = R @ R.mT + 0.1 * torch.eye(3, dtype=D)
    c = torch.randn(4, 3, generator=g, dtype=D)

    def fg(y, idx):
        r = y - c[idx]
        Hr = (Hs[idx] @ r.unsqueeze(-1)).squeeze(-1)
        return 0.5 * (r * Hr).sum(1), Hr
    y0 = torch.zeros(4, 3, dtype=D)
    y, info = minimize_batched(fg, y0, gtol=1e-10, inv_hessian=torch.linalg.inv(Hs))
    torch.testing.assert_close(y, c, atol=1e-10, rtol=0)
    assert (info.n_iter == 1).all() and info.converged.all()
    _, plain = minimize_batched(fg, y0, gtol=1e-10)
    assert (plain.n_iter > 1).all()
    with pytest.raises(ValueError, match="inv_hessian"):
        minimize_batched(fg, y0, inv_hessian=torch.eye(2, dtype=D).expand(4, 2, 2))
    with pytest.raises(ValueError, match="inv_hessian"):
        minimize_batched(fg, y0, optimizer="gd", inv_hessian=torch.linalg.inv(Hs))


def test_svi_delta_guide_agrees_with_reference(toy):
    X, Y, Xt, _ = toy
    m = TwinGP(X, Y, 0.15, 0.15, 1e-3)
    ref = m.reference_predict(Xt, "SMTGP", alpha=0.6)
    res = fit(twin_gp_model, TwinGPDeltaGuide(), m, Xt, "SMTGP", 0.6, loss=Trace_ELBO().differentiable_loss,
              optim=LBFGS(max_iter=200), num_steps=10, tol=1e-14, progress=False)
    assert (res.params["twin_gp_y_loc"] - ref).abs().max() < 1e-4
    batched = m.predict(Xt, "SMTGP", alpha=0.6, gtol=1e-10, max_iter=300)
    assert (batched - ref).abs().max() < 1e-4
    # the ELBO loss at the optimum is Σ L(y) (flat prior, point mass)
    ctx = m.context(Xt, "SMTGP", 0.6)
    assert res.final_loss == pytest.approx(m.objective(ref, ctx).sum().item(), rel=1e-8)


def test_normal_guide_and_predictive(toy):
    X, Y, Xt, _ = toy
    m = TwinGP(X, Y, 0.15, 0.15, 1e-3)
    pyro.clear_param_store()
    guide = TwinGPNormalGuide()
    res = fit(twin_gp_model, guide, m, Xt, "KLTGP", 0.5, optim=pyro.optim.Adam({"lr": 0.01}),
              num_steps=300, progress=False)
    scale = res.params["twin_gp_y_scale"]
    assert torch.isfinite(scale).all() and (scale > 0).all() and (scale < 1).all()
    idata = posterior_predictive(twin_gp_model, guide, m, Xt, "KLTGP", 0.5, num_samples=5, dims=DIMS,
                                 log_likelihood=False)
    assert idata.posterior["y"].shape == (1, 5, Xt.shape[0], 1)


def test_local_model_with_all_neighbours_equals_global(multi):
    X, Y, Xt, _ = multi
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    for method in ("KLTGP", "IKLTGP", "SMTGP"):
        # same problem, training points in another order (rounding differs): converge tightly
        kw = dict(alpha=0.3, gtol=1e-10, max_iter=300)
        init = m.predict(Xt, "KLTGP", gtol=1e-10, max_iter=300)
        glob = m.predict(Xt, method, init=init, **kw)
        loc = m.predict(Xt, method, init=init, neighbors=X.shape[0], batch_size=4, **kw)
        torch.testing.assert_close(glob, loc, atol=2e-5, rtol=0)  # IKLTGP: rounding ~1e-7 in f
    loc = m.predict(Xt, "SMTGP", neighbors=20)
    assert loc.shape == (Xt.shape[0], 3) and torch.isfinite(loc).all()


def test_twin_gp_recovers_smooth_map(multi):
    X, Y, Xt, Yt = multi
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    base = (Yt - Y.mean(0)).norm(dim=1).mean()
    for method in ("KLTGP", "SMTGP"):
        err = (m.predict(Xt, method) - Yt).norm(dim=1).mean()
        assert err < 0.3 * base, method
    assert (gpr_predict(X, Y, Xt, 0.7, 1e-3) - Yt).norm(dim=1).mean() < 0.3 * base
    assert wknn_predict(X, Y, Xt, 3).shape == Yt.shape


def test_toy_data_construction():
    X, Y, Xt, Yt = _toy(1, 0)
    assert X.shape == (250, 1) and Xt.shape == (250, 1)
    torch.testing.assert_close(Xt, Yt + 0.3 * torch.sin(2 * math.pi * Yt))
    X2, Y2, Xt2, Yt2 = _toy(2, 0)
    assert X2.shape == (250, 1) and Xt2.shape == (500, 1)
    assert Y2.min() < -0.9 and Y2.max() > 0.9 and Yt2.min() > -1 and Yt2.max() < 1
    assert (X2 - (Y2 + 0.3 * torch.sin(2 * math.pi * Y2))).abs().max() < 0.05


def test_selection_helpers(toy):
    folds = kfold_indices(23, 5, 0)
    assert sorted(np.concatenate(folds).tolist()) == list(range(23))
    X, Y, _, _ = toy
    sel = select_alpha_beta(X, Y, 0.15, 0.15, 1e-3, lambda p, t: float((p - t).abs().mean()),
                            alphas=(0.0, 0.5, 1.0), betas=(0.99, 1.5), k=2)
    assert set(sel["scores"]) == {(0.0, None), (0.5, 0.99), (0.5, 1.5), (1.0, None)}
    assert sel["best"] in sel["scores"]


def test_alignment_knn_baselines(multi):
    # hand values on 2 points: K = [[1, a], [a, 1]] → HKH = (1 − a)/2 [[1, −1], [−1, 1]]
    a, b = 0.3, 0.8
    KA = torch.tensor([[1, a], [a, 1]], dtype=D)
    KB = torch.tensor([[1, b], [b, 1]], dtype=D)
    assert hsic(KA, KB) == pytest.approx((1 - a) * (1 - b), rel=1e-12)
    assert kernel_alignment(KA, KB) == pytest.approx(1.0, rel=1e-12)  # both ∝ the same centred matrix
    X, Y, Xt, Yt = multi
    K = rbf(X, X, 0.5)
    assert kernel_alignment(K, 3.0 * K) == pytest.approx(1.0, rel=1e-12)
    assert -1.0 <= kernel_alignment(K, rbf(Y, Y, 0.5)) <= 1.0
    # k = 1 is nearest neighbour; a huge width with k = N is the training mean; a tiny width
    # is (finite) nearest neighbour again, not 0/0
    nn = Y[torch.cdist(Xt, X).argmin(1)]
    assert torch.allclose(kernel_knn_predict(X, Y, Xt, 1, 0.3), nn)
    assert torch.allclose(kernel_knn_predict(X, Y, Xt, len(X), 1e6), Y.mean(0).expand_as(Yt), atol=1e-9)
    assert torch.allclose(kernel_knn_predict(X, Y, Xt, 5, 1e-4), nn)
    err = lambda p, t: float((p - t).norm(dim=1).mean())  # noqa: E731
    for crit in ("kta", "hsic"):
        sel = select_alignment_knn(X, Y, [0.05, 0.5, 5.0], 0.5, (1, 3, 5), err, criterion=crit, k=3)
        rho, kk = sel["best"]
        assert rho == max(sel["alignment"], key=sel["alignment"].get) and kk in (1, 3, 5)
        # the smooth map: a moderate width aligns better than a degenerate one (K ≈ I or K ≈ 11ᵀ)
        assert sel["alignment"][0.5] > max(sel["alignment"][0.05], sel["alignment"][5.0])
        assert err(kernel_knn_predict(X, Y, Xt, kk, rho), Yt) < err(Y.mean(0).expand_as(Yt), Yt)
    with pytest.raises(ValueError, match="criterion"):
        select_alignment_knn(X, Y, [0.5], 0.5, (1,), err, criterion="nope")


def test_bad_input(multi):
    X, Y, Xt, _ = multi
    with pytest.raises(ValueError, match="same number"):
        TwinGP(X, Y[:-1], 1.0, 1.0)
    Xn = X.clone()
    Xn[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        TwinGP(Xn, Y, 1.0, 1.0)
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    with pytest.raises(ValueError, match="dimension"):
        m.predict(torch.zeros(4, 3, dtype=D))
    with pytest.raises(ValueError, match="alpha"):
        m.predict(Xt, "SMTGP", alpha=1.2)
    with pytest.raises(ValueError, match="beta"):
        m.predict(Xt, "SMTGP", alpha=0.5, beta=1.0)
    with pytest.raises(ValueError, match="method"):
        m.predict(Xt, "TGP")
    with pytest.raises(ValueError, match="rho_x"):
        TwinGP(X, Y, -1.0, 1.0)
    Xtn = Xt.clone()
    Xtn[0, 0] = float("inf")
    with pytest.raises(ValueError, match="NaN or inf"):
        m.predict(Xtn)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(multi):
    X, Y, Xt, _ = multi
    cpu = TwinGP(X, Y, 0.7, 0.8, 1e-3).predict(Xt, "SMTGP")
    gpu = TwinGP(X, Y, 0.7, 0.8, 1e-3, device="cuda").predict(Xt, "SMTGP")
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-6, rtol=0)


def _unfused_value_and_grad(tgp, y, ctx, beta=None, form="log", ref=None):
    """The straightforward (pre-fusion) formulas of TwinGP.value_and_grad: per-term (b, n)
    arrays, torch.where on the λ floors, explicit w·K_y for the gradient. K_y is the same
    tensor (A_Y amplifies its rounding by cond(K_Y) ~ 1/λ; _kvec vs rbf is tested apart).
    ``y`` in data units; the formulas run in the model's internal units (outputs centred
    and divided by y_scale, ρ_y likewise), the gradient is mapped back."""
    method, a, rho = ctx["method"], ctx["alpha"], tgp.rho_y / tgp.y_scale
    y = tgp.to_internal_y(y)
    Yt, W = ctx["Yt"], ctx["W"]
    Ky = _kvec(y, Yt, rho)
    n = Ky.shape[1]
    Wa = W[..., :n]  # A_Y (IKLTGP's W is [A_Y | K_X], SMTGP's [A_Y | M_α⁻¹])
    # (IKLTGP's fused code multiplies by the A_Y half alone: the same product here, since a
    # GEMM of another shape rounds differently and η_y near its floor λ amplifies that by 1/λ)
    Wz = Wa if method == "IKLTGP" else W
    Z = Ky @ Wz if Yt.dim() == 2 else torch.bmm(Ky.unsqueeze(1), Wz).squeeze(1)
    AKy = Z[:, :n]
    eta_y = tgp.kyy - (Ky * AKy).sum(1)
    floor_y = eta_y <= tgp.lam_y
    eta_y = eta_y.clamp_min(tgp.lam_y)
    deta_y = torch.where(floor_y.unsqueeze(1), torch.zeros_like(AKy), -2.0 * AKy)
    if method == "KLTGP":
        ex = ctx["eta_x"]
        f = tgp.kyy - 2.0 * (ctx["ux"] * Ky).sum(1) - ex * eta_y.log()
        w = -2.0 * ctx["ux"] - (ex / eta_y).unsqueeze(1) * deta_y
    elif method == "IKLTGP":
        # num = η_x + eᵀK_X e, e = A_Y K_y − u_x (the expanded K_x(x,x) − 2K_xᵀA_Y K_y +
        # K_yᵀA_Y K_X A_Y K_y is compared against exact arithmetic in its own test)
        KXm = W[..., n:]
        mv = (lambda V, A: V @ A) if Wa.dim() == 2 else (lambda V, A: torch.bmm(V.unsqueeze(1), A).squeeze(1))
        e = AKy - ctx["ux"]
        KXe = mv(e, KXm)
        num = ctx["eta_x"] + (e * KXe).sum(1)
        f = num / eta_y + eta_y.log()
        w = 2.0 * mv(KXe, Wa) / eta_y.unsqueeze(1) + ((1.0 - num / eta_y) / eta_y).unsqueeze(1) * deta_y
    else:
        MKy = Z[:, n:]
        Ka = (1 - a) * tgp.kxx + a * tgp.kyy
        eta_xy = Ka - (1 - a) ** 2 * ctx["sx"] - 2 * a * (1 - a) * (ctx["vx"] * Ky).sum(1) - a * a * (Ky * MKy).sum(1)
        floor_xy = (1 - a) * tgp.lam_x + a * tgp.lam_y
        clamped = eta_xy <= floor_xy
        eta_xy = eta_xy.clamp_min(floor_xy)
        deta_xy = -2 * a * (1 - a) * ctx["vx"] - 2 * a * a * MKy
        deta_xy = torch.where(clamped.unsqueeze(1), torch.zeros_like(deta_xy), deta_xy)
        ell = eta_xy.log() - a * eta_y.log()
        dell = deta_xy / eta_xy.unsqueeze(1) - (a / eta_y).unsqueeze(1) * deta_y
        if form == "log":
            c = 1.0 / (a * (1 - a))
            f, w = c * (ell - (1 - a) * ctx["eta_x"].log()), c * dell
        else:
            cc = (1 - beta) / (2 * (1 - a))
            Lp = torch.exp(-cc * (ell - (ell.detach() if ref is None else ref))) / (beta - 1)
            f, w = Lp, (-cc * Lp).unsqueeze(1) * dell
    wk = w * Ky
    s = wk @ Yt if Yt.dim() == 2 else torch.bmm(wk.unsqueeze(1), Yt).squeeze(1)
    return f, -(wk.sum(1, keepdim=True) * y - s) / (rho * rho) / tgp.y_scale


@pytest.mark.parametrize("method,alpha,form", [("KLTGP", 0.5, "log"), ("IKLTGP", 0.5, "log"),
                                               ("SMTGP", 0.3, "log"), ("SMTGP", 0.3, "sm")])
@pytest.mark.parametrize("neighbors", [None, 25])
def test_fused_objective_equals_unfused_formulas(multi, method, alpha, form, neighbors):
    # the fused evaluation (row dots, per-row coefficients, Σ w_i K_i from the value's dots)
    # must be the same function as the term-by-term formulas, including at the λ floors
    X, Y, Xt, _ = multi
    m = TwinGP(X, Y, 0.6, 0.4, 1e-3)
    ctx = m.context(Xt, method, alpha, neighbors=neighbors)
    g = torch.Generator().manual_seed(5)
    y = torch.cat([Y[:4] + 0.05 * torch.randn(4, 3, generator=g, dtype=D),  # near training outputs
                   Y[10:11], 0.3 * torch.randn(3, 3, generator=g, dtype=D), 10.0 + Y[:1]])  # on a Y_i, far
    ref = torch.linspace(-1.0, 1.0, len(y), dtype=D) if form == "sm" else None
    f1, g1 = m.value_and_grad(y, ctx, beta=0.5, form=form, ref=ref)
    f0, g0 = _unfused_value_and_grad(m, y, ctx, beta=0.5, form=form, ref=ref)
    assert torch.allclose(f1, f0, rtol=1e-12, atol=1e-12)
    assert torch.allclose(g1, g0, rtol=1e-10, atol=1e-10)
    # the fused kernel vector is rbf() up to rounding
    assert torch.allclose(_kvec(y, Y, 0.4), rbf(y, Y, 0.4), rtol=0, atol=1e-14)


def _tiny_experiment(multi, res, checkpoint, cv_subset=40):
    from tandem.inference.metrics import mean_norm_error
    from tandem.inference.twin_gp.selection import run_real_experiment
    X, Y, Xt, Yt = multi
    data = {"X_train": X, "Y_train": Y, "X_test": Xt, "Y_test": Yt}
    return run_real_experiment(data, mean_norm_error, "mean_norm_error", res, cv_subset=cv_subset, folds=2,
                               rho_mult=(1.0,), lam_grid=(1e-2,), alphas=(0.0, 0.5, 1.0), betas=(0.99,),
                               wknn_ks=(1, 3), max_iter=10, test_folds=2, log=lambda *a: None,
                               checkpoint=checkpoint)


def test_real_experiment_resumes_from_checkpoint(multi, tmp_path, monkeypatch):
    from tandem.inference import Results
    first = _tiny_experiment(multi, Results("t", [0], {}), tmp_path)
    assert (tmp_path / "state.pt").exists()
    # a second start must take every twin-GP stage from the checkpoint: predicting fails
    monkeypatch.setattr(TwinGP, "predict", lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed")))
    res = Results("t", [0], {})
    again = _tiny_experiment(multi, res, tmp_path)
    for name, p in first["preds"].items():
        assert torch.equal(again["preds"][name], p), name
    assert set(res.config["resumed_from_checkpoint"]) >= {"KLTGP", "IKLTGP"}
    # a folder written by a different run is refused, naming what differs
    with pytest.raises(ValueError, match="cv_subset"):
        _tiny_experiment(multi, Results("t", [0], {}), tmp_path, cv_subset=30)


def test_progress_bar_does_not_change_predictions(multi):
    X, Y, Xt, _ = multi
    m = TwinGP(X, Y, 1.0, 1.0, 1e-3)
    quiet = m.predict(Xt, "SMTGP", alpha=0.3)
    shown = m.predict(Xt, "SMTGP", alpha=0.3, progress=True)
    assert torch.equal(quiet, shown)


def test_paired_differences_hand_values():
    from tandem.inference.metrics import mean_norm_error
    from tandem.inference.twin_gp.selection import paired_differences
    Y = torch.zeros(4, 2, dtype=D)
    a = torch.tensor([[1.0, 0], [0, 1], [0, 0], [3, 4]], dtype=D)   # errors 1, 1, 0, 5
    b = torch.tensor([[2.0, 0], [0, 0], [0, 0], [0, 6]], dtype=D)   # errors 2, 0, 0, 6
    out = paired_differences({"A": a, "B": b}, Y, mean_norm_error, ("A",), ("B", "missing"))
    d = np.array([-1.0, 1.0, 0.0, -1.0])
    assert set(out) == {"A - B"}
    assert out["A - B"]["mean"] == pytest.approx(d.mean())
    assert out["A - B"]["se"] == pytest.approx(d.std(ddof=1) / 2)
    assert (out["A - B"]["wins"], out["A - B"]["losses"]) == (2, 1)


def test_sm_form_takes_its_reference_from_the_first_evaluation():
    # form="sm" rescales each point by its ℓ_α(y0); that used to cost one extra objective
    # evaluation of every point before the optimiser's own first call at the same y0. Now
    # the first call records it: the same iterates (to rounding), one batched call fewer.
    X, Y, Xt, _ = smooth_multi_output_problem()
    m = TwinGP(X, Y, 0.5, 0.6, 1e-3)
    init = m.predict(Xt, "KLTGP")
    calls = []
    vg = m.value_and_grad_internal

    def counted(y, ctx, **kw):
        calls.append(y.shape[0])
        return vg(y, ctx, **kw)
    m.value_and_grad_internal = counted
    for a, b in ((0.3, 0.99), (0.7, 1.5)):
        calls.clear()
        y, info = m.predict(Xt, "SMTGP", alpha=a, beta=b, init=init, form="sm", return_info=True)
        assert len(calls) == info.n_eval and calls[0] == Xt.shape[0]
        # the former path: ℓ_α(y0) from a separate log-form evaluation, then the optimiser
        ctx = m.context(Xt, "SMTGP", a)
        y0 = m.to_internal_y(init)
        fl, _ = vg(y0, ctx, form="log")
        ref = fl * a * (1 - a) + (1 - a) * ctx["eta_x"].log()
        y_old, info_old = minimize_batched(
            lambda yy, idx: vg(yy, m._sub(ctx, idx), beta=b, form="sm", ref=ref[idx]), y0, max_step=m._ry)
        torch.testing.assert_close(y, m.from_internal_y(y_old), rtol=0, atol=1e-8)
        assert info.n_eval == info_old.n_eval and info.converged.all()


def _hessian_script():
    """docs/twin_gp_hessian_start.py (the exact SMTGP Hessian behind the docs' iteration counts)."""
    return load_script("docs/twin_gp_hessian_start.py")


@pytest.mark.parametrize("alpha,beta", [(0.1, 0.99), (0.6, 1.5)])
def test_smtgp_hessian_of_the_docs_diagnostic_matches_autograd(multi, alpha, beta):
    # the analytic Hessian the docs' iteration counts rest on equals the Jacobian of the
    # hand-written gradient (autograd), point by point; "top" with every training point is "exact"
    X, Y, Xt, _ = multi
    script = _hessian_script()
    m = TwinGP(X, Y, 0.7, 0.8, 1e-3)
    y0 = m.to_internal_y(m.predict(Xt, "KLTGP"))
    ctx = m.context(Xt, "SMTGP", alpha)
    stats = {}
    m.value_and_grad_internal(y0, ctx, beta=beta, form="sm", stats=stats)
    ref = stats["ell"]
    jac = torch.autograd.functional.jacobian(
        lambda y: m.value_and_grad_internal(y, ctx, beta=beta, form="sm", ref=ref)[1].sum(0), y0)
    auto = torch.stack([jac[:, b, :] for b in range(y0.shape[0])])
    H = script.smtgp_hessian(m, ctx, y0, ref, alpha, beta)
    torch.testing.assert_close(H, 0.5 * (auto + auto.mT), rtol=1e-8, atol=1e-10 * auto.abs().max().item())
    top = script.smtgp_hessian(m, ctx, y0, ref, alpha, beta, approx="top", top_k=X.shape[0])
    torch.testing.assert_close(top, H, rtol=1e-10, atol=1e-12 * H.abs().max().item())


@pytest.mark.skipif(not (DATA_DIR / "usps" / "usps_9298.mat").exists(), reason="USPS data not present")
def test_hessian_start_script_runs_and_its_oracle_and_anchored_starts_are_what_they_say(tmp_path):
    # the docs' table of starting curvatures comes from this script's --out JSON: every start is
    # there with every measure, the default start is the reference (no other minimum, nothing paid),
    # the oracle is free, and the anchored start pays for anchors_every-th points only
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "twin_gp_hessian_start.py"), "--n-train", "200",
                           "--n-test", "12", "--anchor-every", "4", "--no-approx", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = read_results(tmp_path, "twin_gp_hessian_start")
    script = _hessian_script()
    got = {(r["method"], r["metric"]): r["mean"] for r in res["results"]}
    starts = ["identity (default)", script.LABELS["exact"], "exact Hessian of the nearest of every 4th y₀",
              "exact Hessian at the default's minimiser (oracle)"]
    assert set(got) == {(s, m) for s in starts for m in script.RECORDED}
    assert got[("identity (default)", "other_minimum")] == 0
    assert got[("identity (default)", "hessian_cost_in_evaluations_per_point")] == 0
    assert got[(starts[3], "hessian_cost_in_evaluations_per_point")] == 0
    # 3 anchors of 12 points: a quarter of the cost of a Hessian at every point
    assert got[(starts[2], "hessian_cost_in_evaluations_per_point")] == pytest.approx(
        got[(starts[1], "hessian_cost_in_evaluations_per_point")] / 4)
    for s in starts:
        assert 0 < got[(s, "converged")] <= 12 and got[(s, "mean_iterations")] > 0
        assert got[(s, "point_evaluations_per_point")] >= got[(s, "mean_iterations")]
