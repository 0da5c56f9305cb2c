"""SMTGP from the KLTGP prediction: how many BFGS iterations a better starting curvature saves.

Evidence for issue 21 item 7 (SMTGP ≤ 2.5× KLTGP through fewer evaluations). On USPS (the
benchmark's setting: ρ = 2 × / 0.5 × the median distances, λ = 10⁻², α = 0.1, β = 0.99,
``form="sm"``), SMTGP starts at KLTGP's prediction y₀ and :func:`minimize_batched` runs BFGS
from (a) its default start, the identity scaled after the first step, (b) the inverse of the
exact Hessian of the objective at y₀, and (c, d, e) inverses of cheap approximations of it. The
Hessian is indefinite at y₀, so each start uses |H| (eigenvalues by absolute value, floored at
10⁻³ of the largest). It prints iterations and batched calls per start, the approximations'
relative error and the largest distance between the minimisers reached.

The exact Hessian (internal units; K_i = exp(−‖y − Y_i‖²/2ρ²), d_i = y − Y_i,
J = ∂K/∂y (n × d_y) with rows −K_i d_iᵀ/ρ², w = ∂f/∂K, f = f(ℓ), ℓ = log η_xy − α log η_y)::

    H = Σ_i w_i K_i (d_i d_iᵀ/ρ⁴ − I/ρ²)                          (cheap: one (b, n) × (n, d²) product)
      + f''(Jᵀ∇ℓ)(Jᵀ∇ℓ)ᵀ + f'[ −(2α²/η_xy) JᵀM_α⁻¹J − (Jᵀ∇η_xy)(Jᵀ∇η_xy)ᵀ/η_xy²
                               + (2α/η_y) JᵀA_Y J + α (Jᵀ∇η_y)(Jᵀ∇η_y)ᵀ/η_y² ]

(with the λ floors' indicators). JᵀWJ for W ∈ {A_Y, M_α⁻¹} applies the (n, n) matrix to the
d_y columns of diag(K) D: d_y times the one (n, 2n) product of an evaluation, so the exact
Hessian costs about d_y = 16 evaluations per point. The approximations replace JᵀWJ by
(c) nothing, (d) diag(W), (e) the top-k training points by K_i (``--top-k``). The exact
Hessian is checked against central differences of the hand-written gradient.

Usage::

    OMP_NUM_THREADS=1 python docs/twin_gp_hessian_start.py --n-train 2000 --n-test 60
    OMP_NUM_THREADS=1 python docs/twin_gp_hessian_start.py --n-train 4649 --n-test 1000 --no-approx
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from tandem.inference.datasets.usps import load_usps_reconstruction
from tandem.inference.distances import median_distance
from tandem.inference.twin_gp.kernel_rows import _kvec
from tandem.inference.twin_gp.optimizer import minimize_batched
from tandem.inference.twin_gp.predictor import TwinGP, ridge_predict


def smtgp_hessian(m: TwinGP, ctx: dict, y: torch.Tensor, ref: torch.Tensor, alpha: float, beta: float,
                  approx: str = "exact", top_k: int = 256) -> torch.Tensor:
    """Hessian (b, d, d) of SMTGP's ``form="sm"`` objective at y (b, d) in internal units.

    ``approx``: "exact"; "drop" (JᵀWJ left out); "diag" (W → diag W); "top" (the ``top_k``
    training points with the largest K_i). Global model only.
    """
    a = alpha
    s = m.matrices(("AX", "AY", "Minv"), alpha=a)
    AY, Minv = s["AY"], s[("Minv", a)]
    Yt, rho = m._Y, m._ry
    b, d = y.shape
    K = _kvec(y, Yt, rho)
    AK, MK = K @ AY, K @ Minv
    vx, sx = ctx["vx"], ctx["sx"]
    eta_y = m.kyy - (K * AK).sum(1)
    gy = torch.where(eta_y <= m.lam_y, 0.0, -2.0).to(K.dtype)
    eta_y = eta_y.clamp_min(m.lam_y)
    Ka = (1 - a) * m.kxx + a * m.kyy
    exy = Ka - (1 - a) ** 2 * sx - 2 * a * (1 - a) * (vx * K).sum(1) - a * a * (K * MK).sum(1)
    floor = (1 - a) * m.lam_x + a * m.lam_y
    gxy = torch.where(exy <= floor, 0.0, 1.0).to(K.dtype)
    exy = exy.clamp_min(floor)
    ell = exy.log() - a * eta_y.log()
    cc = (1 - beta) / (2 * (1 - a))
    Lp = torch.exp(-cc * (ell - ref)) / (beta - 1)
    f1, f2 = -cc * Lp, cc * cc * Lp                                  # f'(ℓ), f''(ℓ)
    u_xy = gxy[:, None] * (-2 * a * (1 - a) * vx - 2 * a * a * MK)  # ∇η_xy
    u_y = gy[:, None] * AK                                           # ∇η_y
    grad_ell = u_xy / exy[:, None] - a * u_y / eta_y[:, None]

    def jt(v):                                                       # Jᵀv (b, d)
        u = v * K
        return -(u.sum(1, keepdim=True) * y - u @ Yt) / rho ** 2

    def weighted_outer(u):                                           # Σ_i u_i d_i d_iᵀ (b, d, d)
        su, sY = u.sum(1), u @ Yt
        YY = (u @ (Yt[:, :, None] * Yt[:, None, :]).reshape(Yt.shape[0], d * d)).reshape(b, d, d)
        return (su[:, None, None] * y[:, :, None] * y[:, None, :] - y[:, :, None] * sY[:, None, :]
                - sY[:, :, None] * y[:, None, :] + YY)

    def jwj(W):                                                      # JᵀWJ (b, d, d)
        if approx == "drop":
            return K.new_zeros(b, d, d)
        if approx == "diag":
            return weighted_outer(K * K * W.diagonal()) / rho ** 4
        G = K[:, :, None] * (y[:, None, :] - Yt[None])              # (b, n, d) rows K_i d_iᵀ
        if approx == "top":
            idx = K.topk(min(top_k, K.shape[1]), dim=1).indices
            G = G.gather(1, idx[:, :, None].expand(-1, -1, d))
            WG = W[idx[:, :, None], idx[:, None, :]] @ G
        else:
            WG = (W @ G.permute(1, 0, 2).reshape(W.shape[0], b * d)).reshape(-1, b, d).permute(1, 0, 2)
        return G.mT @ WG / rho ** 4

    def outer(v):
        return v[:, :, None] * v[:, None, :]

    w = f1[:, None] * grad_ell
    eye = torch.eye(d, dtype=y.dtype, device=y.device)
    H = weighted_outer(w * K) / rho ** 4 - ((w * K).sum(1) / rho ** 2)[:, None, None] * eye
    on_y = (gy != 0).to(K.dtype)  # (a bool times a Python float would be float32)
    inner = (-(2 * a * a * gxy / exy)[:, None, None] * jwj(Minv) - (gxy / exy ** 2)[:, None, None] * outer(jt(u_xy))
             + (2 * a * on_y / eta_y)[:, None, None] * jwj(AY) + (a / eta_y ** 2)[:, None, None] * outer(jt(u_y)))
    H = H + f2[:, None, None] * outer(jt(grad_ell)) + f1[:, None, None] * inner
    return 0.5 * (H + H.mT)


def abs_inverse(H: torch.Tensor, floor: float = 1e-3) -> torch.Tensor:
    """|H|⁻¹: eigenvalues by absolute value, floored at ``floor`` × the largest."""
    ev, V = torch.linalg.eigh(H)
    ev = ev.abs()
    ev = ev.clamp_min(floor * ev.amax(-1, keepdim=True))
    return V @ torch.diag_embed(1.0 / ev) @ V.mT


def _least_cpu_s(call, repeats: int = 3) -> float:
    """The least CPU time of ``repeats`` calls of ``call()``."""
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        call()
        times.append(time.process_time() - t0)
    return min(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--n-train", type=int, default=2000)
    p.add_argument("--n-test", type=int, default=60)
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--beta", type=float, default=0.99)
    p.add_argument("--top-k", type=int, default=256)
    p.add_argument("--anchor-every", type=int, default=20,
                   help="start (f): the exact Hessian of every k-th test point, shared by its nearest")
    p.add_argument("--no-approx", action="store_true",
                   help="skip the cheap approximations (c-e) and the finite-difference check")
    args = p.parse_args()
    data = load_usps_reconstruction(args.data_dir, seed=0)
    X, Y, Xt = (torch.as_tensor(data[k]) for k in ("X_train", "Y_train", "X_test"))
    perm = torch.as_tensor(np.random.default_rng(0).permutation(X.shape[0]))
    X, Y, Xt = X[perm[:args.n_train]], Y[perm[:args.n_train]], Xt[:args.n_test]
    m = TwinGP(X, Y, 2.0 * median_distance(X), 0.5 * median_distance(Y), 1e-2)
    a, beta = args.alpha, args.beta
    # KLTGP from ridge (the stage SMTGP's cost is compared with), its rows of objective calls counted
    vg, kl_rows = m.value_and_grad_internal, [0]

    def counted(y, c, **kw):
        kl_rows[0] += y.shape[0]
        return vg(y, c, **kw)
    m.value_and_grad_internal = counted
    y_kl = m.predict(Xt, "KLTGP", init=ridge_predict(m.X, m.Y, Xt))
    m.value_and_grad_internal = vg
    ctx = m.context(Xt, "SMTGP", a)
    y0 = m.to_internal_y(y_kl)
    stats: dict = {}
    m.value_and_grad_internal(y0, ctx, beta=beta, form="sm", stats=stats)
    ref = stats["ell"]                                             # the per-point scale predict uses

    rows = [0]

    def fg(y, idx):
        rows[0] += y.shape[0]
        return m.value_and_grad_internal(y, m._sub(ctx, idx), beta=beta, form="sm", ref=ref[idx])

    with torch.no_grad():
        B, d = y0.shape
        allidx = torch.arange(B)
        out = {"n_train": X.shape[0], "n_test": B, "d_y": d, "alpha": a, "beta": beta,
               "anchor_every": args.anchor_every}
        rel = lambda A, R: ((A - R).norm(dim=(1, 2)) / R.norm(dim=(1, 2))).max().item()  # noqa: E731
        ctx_kl, y_kl_i = m.context(Xt, "KLTGP"), m.to_internal_y(y_kl)
        # one value + gradient of all points, SMTGP and KLTGP (the least of three)
        out["evaluation_cpu_s"] = _least_cpu_s(lambda: fg(y0, allidx))
        out["kltgp_evaluation_cpu_s"] = _least_cpu_s(lambda: m.value_and_grad_internal(y_kl_i, ctx_kl))
        out["kltgp_point_evaluations_per_point"] = kl_rows[0] / B
        H = {}
        for approx in ("exact",) if args.no_approx else ("exact", "drop", "diag", "top"):
            t0 = time.process_time()
            H[approx] = smtgp_hessian(m, ctx, y0, ref, a, beta, approx, args.top_k)
            out[f"hessian_cpu_s_{approx}"] = time.process_time() - t0
        if not args.no_approx:
            h, H_fd = 1e-6, torch.empty(B, d, d, dtype=y0.dtype)
            for k in range(d):
                e = torch.zeros(d, dtype=y0.dtype)
                e[k] = h
                H_fd[:, :, k] = (fg(y0 + e, allidx)[1] - fg(y0 - e, allidx)[1]) / (2 * h)
            out["exact_vs_finite_differences"] = rel(H["exact"], 0.5 * (H_fd + H_fd.mT))
        out["indefinite_at_start"] = int((torch.linalg.eigvalsh(H["exact"])[:, 0] < 0).sum())
        # the Hessian's cost in evaluations of all points; a start that needs it at a share of
        # the points pays that share
        hess_evals = out["hessian_cpu_s_exact"] / out["evaluation_cpu_s"]
        rows[0] = 0
        y_base, info_base = minimize_batched(fg, y0, max_step=m._ry)
        # name -> (starting inverse Hessians, their cost in evaluations per point, the Hessian they
        # come from); the error column compares that Hessian with the exact one at y₀
        starts = {f"|H|^-1 {approx}": (abs_inverse(H[approx]), hess_evals if approx == "exact" else 0.0, H[approx])
                  for approx in H}
        anchors = torch.arange(0, B, args.anchor_every)
        nearest = anchors[torch.cdist(y0, y0[anchors]).argmin(1)]
        starts[f"|H|^-1 exact of the nearest of every {args.anchor_every}th"] = (
            starts["|H|^-1 exact"][0][nearest], hess_evals * anchors.numel() / B, H["exact"][nearest])
        H_min = smtgp_hessian(m, ctx, y_base, ref, a, beta)
        starts["|H|^-1 exact at the default's minimiser (oracle)"] = (abs_inverse(H_min), 0.0, H_min)
        runs = {"identity (default)": (y_base, info_base, rows[0], 0.0, None)}
        for name, (Hinv, cost, Hs) in starts.items():
            rows[0] = 0
            y, inf = minimize_batched(fg, y0, max_step=m._ry, inv_hessian=Hinv)
            runs[name] = (y, inf, rows[0], cost, rel(Hs, H["exact"]))
        for name, (y, inf, nrows, cost, err) in runs.items():
            other = (y - y_base).norm(dim=1) > 1e-2 * m._ry
            out[name] = {"mean_iterations": inf.n_iter.double().mean().item(), "batched_calls": inf.n_eval,
                         "point_evaluations_per_point": nrows / B,
                         "hessian_cost_in_evaluations_per_point": cost,
                         "converged": int(inf.converged.sum()),
                         "max_distance_to_default":
                             (m.from_internal_y(y) - m.from_internal_y(y_base)).abs().max().item(),
                         "other_minimum": int(other.sum()),
                         "higher_objective": int((inf.f > info_base.f + 1e-8 * info_base.f.abs()).sum()),
                         "hessian_rel_error": err,
                         # SMTGP's cost over KLTGP's implied by the counts and the per-evaluation costs
                         "implied_smtgp_over_kltgp": (nrows / B + cost) * out["evaluation_cpu_s"]
                         / (out["kltgp_point_evaluations_per_point"] * out["kltgp_evaluation_cpu_s"])}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
