"""The objective of the stochastic McGPDS fit: window terms, running statistics, the local
L-BFGS step and the minibatch ELBO (:class:`StochasticELBO`).

**Objective** (per step, minibatch ``I`` of ``B`` out of ``S`` windows):

``ELBO ≈ (S/B) Σ_{i∈I} [E_q log p(Y_i | X_i, U, V) − KL_i(q(X) ‖ p(X))] − Σ_k KL(q(V_k, U_k) ‖ p)``

* ``KL_i``: the spec's KL of the shared + private latents of window i (the well-conditioned
  form of :mod:`tandem.inference.mcgpds.bound`; ``q(x_q^(k)) = N(μ, (A_k⁻¹ + Λ)⁻¹)``,
  ``q(X^(s))`` in closed form).
* Expected log-likelihood with the paper's surrogate (h and every w_j g_j fit y
  separately, as in the collapsed bound), in whitened inducing coordinates
  ``v_d = L_H ṽ_d`` (``H = L_H L_Hᵀ``), ``q(ṽ_d) = N(m_d, S)``:
  ``−β/2 [yᵀy − 2 r_dᵀ m_d + m_dᵀ Ã m_d + tr(Ã S) + ψ0 − tr Ã]`` with
  ``Ã = L_H⁻¹ Ψ2 L_H⁻ᵀ``, ``r_d = L_H⁻¹ Ψ1ᵀ y_d``, plus ``½ n D log(β/2π)``; the same for
  u_dj with weight w_dj, and ``KL(q(ṽ_d) ‖ N(0, I)) = ½ [tr S + mᵀm − M − log|S|]``.
* The windows are drawn with ``pyro.plate("windows", S, subsample_size=B)`` from the
  seeded RNG and the window terms are scaled by ``S/B`` (unbiased).
* **Missing (NaN) entries** are not scored (a masked likelihood, as in
  :mod:`tandem.inference.mcgpds.missing`). The columns of a view with NaN entries are grouped by
  their pattern of observed frames (:class:`~tandem.inference.mcgpds.windows.ViewMask`; groups
  p = 1..P, D_p columns, observed frames O_p; columns never observed form one group whose
  statistics are zero). A window's statistics are then per group:
  ``ψ0_p = Σ_{n∈O_p} ψ0_n``, ``Ã_p = L_H⁻¹ (Σ_{n∈O_p} Ψ2_n) L_H⁻ᵀ`` (P, M, M), and
  ``r_d = L_H⁻¹ Ψ1[O_p]ᵀ y_d[O_p]`` (d in group p), ``yᵀy`` over the observed entries and the count
  ``n_obs`` of observed entries in place of ``n D``; column d's q(ṽ_d) has the precision
  ``P_p = I + β Ã_p`` of its group (``qvP_k`` is (P, M, M)) and q(ũ_dj) uses ``Ã_jp``. Every
  formula above holds with these per-group sums, so the running statistics, the local step, the
  refresh, the sharding and the hyperparameter step need no other change; a fully observed view
  keeps the unmasked code (P = 1 is the same algebra).

Updates (incremental, Neal & Hinton 1998; the SVI of Hoffman et al. 2013 with the local
step solved). The ELBO depends on the windows' q(X) only through the window terms and
the summed statistics ``T = Σ_i s_i``, ``s_i = (Ã_i, R_i, Ã_ij, R_ij …)``; given T the
optimal q(V), q(U) is ``P = I + β Ã``, ``θ = β R`` (h; ``P_d = I + β w_d² Ã_j``,
``θ_d = β w_d r_jd`` for g_j) — the natural-gradient step of length 1 — and the ELBO at
it is the collapsed bound, ``Σ_i terms_i + Σ ½ θᵀP⁻¹θ − ½ log|P|``. The running T (in the
parameter store, ``qstat_k``) holds every window's statistics from its last visit. A step

1. draws B windows I and removes their old statistics from T (``T_o = T − s_I``);
2. **local step**: ``local_iters`` L-BFGS iterations on the q(X) parameters of I, maximising
   the collapsed bound as a function of them with the other windows' statistics fixed,
   ``Σ_{i∈I} terms_i + collapsed(T_o + s_I)`` — q(V), q(U) follow q(X_I) inside the step,
   which is what makes it converge: plain alternation (q(X) given q(U), then q(U) given
   q(X)) is slow on this model, the two being strongly coupled at high β;
3. puts the new statistics back (``T = T_o + s_I``) and sets q(V), q(U) to their optimum;
4. returns −ELBO of the minibatch at that q(V), q(U) (window terms scaled by S/B; the
   window parameters enter it detached): its gradient is an unbiased estimate of the
   collapsed bound's gradient in the hyperparameters (envelope theorem), which take an
   Adam step through :func:`tandem.inference.fit` with the learning rate decaying
   geometrically to ``lr_final`` × ``lr`` (Robbins–Monro).

With the hyperparameters fixed this is block-coordinate ascent on the collapsed bound
(every step increases it) and T stays exact; with them learned each Adam step changes
every window's statistics, so T is recomputed over all windows once per epoch (one pass
without gradients; also at the first step, which sets q(V), q(U) from the initial q(X)).

The default (``hyper_iters`` > 0, :func:`~tandem.inference.mcgpds.hyper_step.hyper_step`) moves the
hyperparameters only at the start of an epoch instead: ``hyper_iters`` L-BFGS iterations with Armijo
backtracking on the full-data collapsed bound at the windows' current q(X), its value and gradient
streamed over chunks of windows
(:func:`~tandem.inference.mcgpds.hyper_step.collapsed_value_and_grad`: memory O(chunk), one pass for
the value and one for the gradient), then T is recomputed. Between two such steps the
hyperparameters are fixed, so the whole fit is block-coordinate ascent on the full-data bound: it
never decreases. (The Adam path learns from a T summed partly at older hyperparameters and a q(V),
q(U) optimal for that stale T; on 10⁴ frames with the kernels and inducing inputs learned it
diverged.)
Each window's μ, log λ (all views) are one ``pyro.param`` (``sq_i``), so a step touches
only the B windows it drew: its cost does not grow with N. Within a step the hyperparameters are
constants, so the drawn windows' prior factors (:func:`batch_prior`: the Choleskys of the time
kernels, of A_k and of B', and A_k⁻¹) are computed once and serve every evaluation of the local
step, whose private covariances then use the closed-form backwards of
:func:`~tandem.inference.mcgpds.private_cov.private_cov_terms`.
"""
from __future__ import annotations

import math

import pyro
import pyro.optim
import torch

from tandem.inference.distributed import all_reduce_sum, rank_world
from tandem.inference.mcgpds.streamed import blocks_per_chunk
from tandem.inference.mcgpds.window_prior_kl import prior_is_constant, window_kl, window_prior
from tandem.inference.mcgpds.windows import StochasticData, guide_params, model_params
from tandem.inference.numerics import DTYPE, NotPositiveDefiniteError, cho_logdet, cholesky_jitter
from tandem.inference.validation import (
    check_int_range,
)
from tandem.models.kernels import TimeParams
from tandem.models.mcgpds import mapping_object

# hyper_step, collapsed_value_and_grad and lbfgs_sharded live in hyper_step.py (re-exported below)
__all__ = ["StochasticELBO", "batch_prior", "prior_is_constant", "refresh_statistics", "window_kl", "window_prior",
           "windows_per_chunk"]


def _natural_params(k: int) -> dict:
    """The current (detached) natural parameters of view k's q(ṽ), q(ũ) from the store."""
    return {n: pyro.param(f"q{n}_{k}").detach() for n in ("vP", "vT", "uP", "uT")}


# --------------------------------------------------------------------------- pieces
def _whitened_stats(kind, mu, s, Y, Z, variance, ard):
    """``(LK, psi0, Ã = L⁻¹Ψ2L⁻ᵀ, R = L⁻¹Ψ1ᵀY)`` of one function's inducing set over rows (n, ·);
    ``kind`` the mapping kernel (object or alias name; its ``psi`` / ``kzz`` methods are used)."""
    kern = mapping_object(kind)
    params = {n: {"variance": variance, "ard": ard}[n] for n in kern.param_names}
    psi0, P1, P2 = kern.psi(mu, s, Z, params)
    LK = cholesky_jitter(kern.kzz(Z, params), "K_ZZ")
    tmp = torch.linalg.solve_triangular(LK, P2, upper=False)
    At = torch.linalg.solve_triangular(LK, tmp.mT, upper=False)
    R = torch.linalg.solve_triangular(LK, P1.mT @ Y, upper=False)
    return LK, psi0, At, R


def _q_moments(P: torch.Tensor, T: torch.Tensor):
    """Mean (…, M, D) and Cholesky of the precision from natural parameters P (…, M, M), T."""
    LP = cholesky_jitter(0.5 * (P + P.mT), "precision of q(U)")
    return torch.cholesky_solve(T, LP), LP


def _kl_white(m, LP):
    """Σ_d KL(N(m_d, P⁻¹) ‖ N(0, I)); m (M, D), LP (M, M) shared or (D, M, M)."""
    M, D = m.shape
    eye = torch.eye(M, dtype=m.dtype, device=m.device)
    Linv = torch.linalg.solve_triangular(LP, eye.expand(LP.shape), upper=False)   # L_P⁻¹
    trS = (Linv * Linv).sum((-1, -2))
    logdetS = -cho_logdet(LP)
    if LP.dim() == 2:
        trS, logdetS = D * trS, D * logdetS
    else:
        trS, logdetS = trS.sum(), logdetS.sum()
    return 0.5 * (trS + (m * m).sum() - M * D - logdetS)


def _g_on(sdata, v) -> bool:
    """Whether the w_j g_j functions are in the model: not when W is fixed with β w² < 1e-8
    (the authors' 1e-6·U(0,1) init; the collapsed bound switches g off the same way)."""
    return "W" not in sdata.fixed or float((v["beta"].detach() * v["W"] * v["W"]).max()) >= 1e-8


def _detached(obj):
    """A copy of a nested dict/list/tuple of tensors with every tensor detached."""
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, TimeParams):
        return obj.copy_with({k: _detached(v) for k, v in obj.items()})
    if isinstance(obj, dict):
        return {k: _detached(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_detached(v) for v in obj)
    return obj


def _learns_hyperparams(hp) -> bool:
    """True when any hyperparameter tensor in the nested ``hp`` requires a gradient."""
    if isinstance(hp, torch.Tensor):
        return hp.requires_grad
    if isinstance(hp, dict):
        return any(_learns_hyperparams(v) for v in hp.values())
    if isinstance(hp, (list, tuple)):
        return any(_learns_hyperparams(v) for v in hp)
    return False


# --------------------------------------------------------------------------- window terms
def _stat_size(M: int, D: int, J: int, vm=None) -> int:
    """Length of one view's flat statistics ``[Ã_h, R_h, Ã_g1, R_g1, …]`` (M², M·D per function;
    P·M² for the Ã of a view with missing entries, one per group of columns, ``vm`` its
    :class:`~tandem.inference.mcgpds.windows.ViewMask`)."""
    P = 1 if vm is None else vm.P
    return (1 + J) * (P * M * M + M * D)


def _unflatten(flat: torch.Tensor, M: int, D: int, J: int, vm=None) -> list:
    """``[(Ã_h, R_h), (Ã_g1, R_g1), …]`` from a view's flat statistics; Ã is (M, M), or (P, M, M)
    per group of columns for a view with missing entries (``vm``)."""
    out, off = [], 0
    shape, P = ((M, M), 1) if vm is None else ((vm.P, M, M), vm.P)
    for _ in range(1 + J):
        A = flat[off:off + P * M * M].reshape(shape)
        R = flat[off + P * M * M:off + P * M * M + M * D].reshape(M, D)
        out.append((A, R))
        off += P * M * M + M * D
    return out


def _masked_view_terms(kind, v: dict, vm, frames: torch.Tensor, mk: torch.Tensor, sk: torch.Tensor,
                       Yb: torch.Tensor, M: int, J: int, g_on: bool):
    """The q(U)-free terms and flat statistics of one view with missing entries over rows ``frames``.

    With ``O_p`` the frames observed by the columns of group p (``vm``, a
    :class:`~tandem.inference.mcgpds.windows.ViewMask`), D_p their number, and the missing
    entries of ``Yb`` set to 0 (so ``Ψ1ᵀ y_d`` sums over the observed frames of column d only):
    ``terms = ½ n_obs log(β/2π) − β/2 [Σ_obs y² + Σ_p D_p (ψ0_p − tr Ã_p)]
    − β/2 Σ_j Σ_p (Σ_{d∈p} w_dj²)(ψ0_jp − tr Ã_jp)`` with ``ψ0_p = Σ_{n∈O_p} ψ0_n``,
    ``Ã_p = L⁻¹ (Σ_{n∈O_p} Ψ2_n) L⁻ᵀ`` and ``R[:, d] = L⁻¹ Ψ1[O_p]ᵀ y_d[O_p]`` (d ∈ p), over the
    rows of this batch; the statistics are ``[Ã_h (P, M, M), R_h (M, D), Ã_g1, R_g1, …]`` flat
    (zeros for a switched-off g). A fully observed view is the case P = 1 of this.
    """
    beta = v["beta"]
    D = int(Yb.shape[1])
    Y0 = torch.nan_to_num(Yb, nan=0.0)                       # missing entries: not scored
    pat = vm.patterns[:, frames]                             # (P, n) observed rows of each group
    n_obs = vm.obs[frames].sum()
    terms = 0.5 * n_obs * (beta.log() - math.log(2 * math.pi)) - 0.5 * beta * (Y0 * Y0).sum()
    kern = mapping_object(kind)
    funcs = [(v["Zh"], v.get("kh_var"), v["kh_ard"], None)]
    if g_on:
        funcs += [(v["Zg"][j], v["kg_var"][j] if v.get("kg_var") is not None else None, v["kg_ard"][j],
                   v["W"][:, j] ** 2) for j in range(J)]
    parts = []
    for Z, variance, ard, w2 in funcs:
        params = {n: {"variance": variance, "ard": ard}[n] for n in kern.param_names}
        LK = cholesky_jitter(kern.kzz(Z, params), "K_ZZ")
        As, Rs = [], []
        for p, cp in enumerate(vm.cols):
            sel = pat[p]
            if not bool(sel.any()):          # no row of this batch observed by the group
                As.append(torch.zeros(M, M, dtype=DTYPE, device=Y0.device))
                Rs.append(torch.zeros(M, cp.numel(), dtype=DTYPE, device=Y0.device))
                continue
            psi0, P1, P2 = kern.psi(mk[sel], sk[sel], Z, params)
            tmp = torch.linalg.solve_triangular(LK, P2, upper=False)
            At = torch.linalg.solve_triangular(LK, tmp.mT, upper=False)
            Rs.append(torch.linalg.solve_triangular(LK, P1.mT @ Y0[sel][:, cp], upper=False))
            As.append(At)
            weight = vm.counts[p] if w2 is None else w2[cp].sum()
            terms = terms - 0.5 * beta * weight * (psi0 - At.diagonal().sum())
        parts += [torch.stack(As).reshape(-1), torch.cat(Rs, 1)[:, vm.unperm].reshape(-1)]
    if not g_on:
        parts.append(torch.zeros(J * (vm.P * M * M + M * D), dtype=DTYPE, device=Y0.device))
    return terms, torch.cat(parts)


def _batch_layout(sdata: StochasticData, local: torch.Tensor):
    """``(rows, valid, m, Lb)`` of the windows ``local`` (CPU indices, not empty): padding sits at
    the end of a window, so the slots that are padding in every window of the batch are dropped
    (windows of uneven length cost O(L³) at the batch's longest, not at L); ``rows`` (b, Lb) frame
    indices, ``valid`` (b, Lb) bool and ``m`` its float copy."""
    li = local.to(sdata.device)
    Lb = int(sdata.mask[li].sum(1).max())
    valid = sdata.mask[li][:, :Lb]
    return sdata.rows[li][:, :Lb], valid, valid.to(DTYPE), Lb


def batch_prior(sdata: StochasticData, hp: dict, local: torch.Tensor) -> dict | None:
    """:func:`window_prior` of a batch of windows, with ``Ainv_ok`` decided, for callers that
    evaluate :func:`_window_terms` of the same windows many times (its ``prior``).

    Parameters
    ----------
    sdata : StochasticData
        The data.
    hp : dict
        The hyperparameters (:func:`model_params`).
    local : torch.Tensor
        CPU indices of the windows.

    Returns
    -------
    dict or None
        The factors, trimmed to the batch's longest window as :func:`_window_terms` does; ``None``
        for an empty batch.
    """
    if not local.numel():
        return None
    rows, _, m, _ = _batch_layout(sdata, local)
    return window_prior(sdata.times[rows] * m, m, hp["time_s"], hp["views"], decide=True)


def _window_terms(sdata: StochasticData, hp: dict, q: dict, local: torch.Tensor, prior: dict | None = None):
    """The q(U)-free part of the windows ``local`` (CPU indices) and their statistics.

    ``q``: ``mu``, ``lam`` V × (b, L, Q) of these windows; ``prior``: their :func:`batch_prior` at
    ``hp`` when the caller keeps it (A constant). Returns ``(terms, flats)``:
    ``terms`` = Σ_i [½ n_i D log(β/2π) − β/2 (y_iᵀy_i + D(ψ0_i − tr Ã_i))
    − β/2 Σ_j ‖w_j‖² (ψ0_ij − tr Ã_ij) − KL_i] summed over views, and ``flats[k]`` the
    flat statistics ``[Σ_i Ã_i, Σ_i R_i, …]`` of view k (zeros for a switched-off g).
    The rest of the ELBO is linear in the statistics (:func:`_expected_fit` below).
    """
    dev, M, J = sdata.device, sdata.M, sdata.J
    kind = getattr(sdata, "mapping_kernel_obj", sdata.mapping_kernel)
    terms = torch.zeros((), dtype=DTYPE, device=dev)
    flats = []
    if not local.numel():
        return terms, [torch.zeros(_stat_size(M, D, J, vm), dtype=DTYPE, device=dev)
                       for D, vm in zip(sdata.out_dims, sdata.view_masks)]
    rows, valid, m, Lb = _batch_layout(sdata, local)
    mu = torch.stack(q["mu"])[:, :, :Lb] * m[None, :, :, None]
    lam = torch.stack(q["lam"])[:, :, :Lb]
    kl, sdiag = window_kl(sdata.times[rows] * m, m, hp["time_s"], hp["views"], mu, lam, prior)
    terms = terms - kl.sum()
    for k, Y in enumerate(sdata.views):
        v = hp["views"][k]
        beta = v["beta"]
        Yb, mk, sk = Y[rows[valid]], mu[k][valid], sdiag[k][valid]
        vm = sdata.view_masks[k]
        if vm is not None:               # missing entries: statistics per group of columns
            t_k, f_k = _masked_view_terms(kind, v, vm, rows[valid], mk, sk, Yb, M, J, _g_on(sdata, v))
            terms = terms + t_k
            flats.append(f_k)
            continue
        n, D = Yb.shape
        _, psi0, At, R = _whitened_stats(kind, mk, sk, Yb, v["Zh"], v.get("kh_var"), v["kh_ard"])
        terms = terms + 0.5 * n * D * (beta.log() - math.log(2 * math.pi)) \
            - 0.5 * beta * ((Yb * Yb).sum() + D * (psi0 - At.diagonal().sum()))
        parts = [At.reshape(-1), R.reshape(-1)]
        g_on = _g_on(sdata, v)
        for j in range(J):
            if g_on:
                kgv = v["kg_var"][j] if v.get("kg_var") is not None else None
                _, psi0g, Ag, Rg = _whitened_stats(kind, mk, sk, Yb, v["Zg"][j], kgv, v["kg_ard"][j])
                terms = terms - 0.5 * beta * (v["W"][:, j] ** 2).sum() * (psi0g - Ag.diagonal().sum())
                parts += [Ag.reshape(-1), Rg.reshape(-1)]
            else:
                parts += [torch.zeros(M * M + M * D, dtype=DTYPE, device=dev)]
        flats.append(torch.cat(parts))
    return terms, flats


def _psd_part(flat: torch.Tensor, M: int, D: int, J: int, vm=None) -> torch.Tensor:
    """The flat statistics with every Ã replaced by its nearest PSD matrix (negative
    eigenvalues set to 0; R unchanged); ``vm``: the view's missing entries (Ã per group)."""
    out = flat.clone()
    off = 0
    shape, P = ((M, M), 1) if vm is None else ((vm.P, M, M), vm.P)
    for _ in range(1 + J):
        A = out[off:off + P * M * M].reshape(shape)
        w, U = torch.linalg.eigh(0.5 * (A + A.mT))
        if float(w.min()) < 0:
            out[off:off + P * M * M] = ((U * w.clamp_min(0).unsqueeze(-2)) @ U.mT).reshape(-1)
        off += P * M * M + M * D
    return out


def _group_moments(P: torch.Tensor, T: torch.Tensor, vm):
    """Means (M, D) and precision Choleskys (P, M, M) of the per-group q(ṽ_d) of a view with missing
    entries: ``m_d = P_p⁻¹ θ_d`` for the columns d of group p (``vm``)."""
    LP = cholesky_jitter(0.5 * (P + P.mT), "precision of q(U)")
    blocks = [torch.cholesky_solve(T[:, cp], LP[p]) for p, cp in enumerate(vm.cols)]
    return torch.cat(blocks, 1)[:, vm.unperm], LP


def _expected_fit(v: dict, stats: list, nat: dict, g_on: bool, vm=None) -> torch.Tensor:
    """The q(U)-dependent part of view k's expected log-likelihood given its statistics.

    ``β Σ_d r_dᵀ m_d − β/2 Σ_d [m_dᵀ Ã m_d + tr(Ã S)]`` for h and the same with weights
    w_dj (and per-output S_dj) for every w_j g_j; q(ṽ), q(ũ) from the natural parameters ``nat``.
    With missing entries (``vm``) column d uses its group's Ã_p and S_p = P_p⁻¹.
    """
    beta = v["beta"]
    (At, R), gstats = stats[0], stats[1:]
    D = R.shape[1]
    if vm is None:
        mv, LPv = _q_moments(nat["vP"], nat["vT"])
        trAS = torch.cholesky_solve(At, LPv).diagonal().sum()
        out = beta * (R * mv).sum() - 0.5 * beta * ((mv * (At @ mv)).sum() + D * trAS)
    else:
        mv, LPv = _group_moments(nat["vP"], nat["vT"], vm)
        trAS = (vm.counts * torch.cholesky_solve(At, LPv).diagonal(dim1=-2, dim2=-1).sum(-1)).sum()
        quad = sum((mv[:, cp] * (At[p] @ mv[:, cp])).sum() for p, cp in enumerate(vm.cols))
        out = beta * (R * mv).sum() - 0.5 * beta * (quad + trAS)
    if g_on:
        for j, (Ag, Rg) in enumerate(gstats):
            w = v["W"][:, j]
            mu_, LPu = _q_moments(nat["uP"][j], nat["uT"][j].mT[..., None])
            mu_ = mu_[..., 0].mT                                                # (M, D)
            if vm is None:
                trASg = torch.cholesky_solve(Ag.expand(LPu.shape), LPu).diagonal(dim1=-2, dim2=-1).sum(-1)   # (D,)
                Amu = Ag @ mu_
            else:                                                               # Ã of each column's group
                Agd = Ag[vm.group]                                              # (D, M, M)
                trASg = torch.cholesky_solve(Agd, LPu).diagonal(dim1=-2, dim2=-1).sum(-1)
                Amu = torch.einsum("dij,jd->id", Agd, mu_)
            out = out + beta * (w * (Rg * mu_).sum(0)).sum() \
                - 0.5 * beta * (w * w * ((mu_ * Amu).sum(0) + trASg)).sum()
    return out


def _optimal_natural(v: dict, stats: list, g_on: bool, vm=None) -> dict:
    """Natural parameters of the optimal q(ṽ), q(ũ) given view k's total statistics:
    ``P = I + β Ã``, ``θ = β R`` (h); ``P_d = I + β w_d² Ã_j``, ``θ_d = β w_d r_jd`` (g_j).
    With missing entries (``vm``) Ã is per group of columns: ``P_p = I + β Ã_p`` (P, M, M) for h,
    and ``P_d`` uses the Ã_jp of column d's group."""
    beta = v["beta"]
    (At, R), gstats = stats[0], stats[1:]
    M, D = R.shape
    eye = torch.eye(M, dtype=At.dtype, device=At.device)
    nat = {"vP": eye + beta * At, "vT": beta * R}
    if g_on:
        uP, uT = [], []
        for j, (Ag, Rg) in enumerate(gstats):
            w = v["W"][:, j]
            uP.append(eye + (beta * w * w)[:, None, None] * (Ag if vm is None else Ag[vm.group]))
            uT.append(beta * w * Rg)
        nat["uP"], nat["uT"] = torch.stack(uP), torch.stack(uT)
    return nat


def _collapsed_value(nat: dict, g_on: bool, vm=None) -> torch.Tensor:
    """``max_q [E_q fit − KL(q ‖ p)]`` of the q(U)-dependent part: ``½ θᵀP⁻¹θ − ½ log|P|``
    summed over the outputs (h: one P shared by the D outputs, or by the D_p columns of each group
    of a view with missing entries, ``vm``; g_j: one P_d per output)."""
    LP = cholesky_jitter(0.5 * (nat["vP"] + nat["vP"].mT), "precision of q(V)")
    T = nat["vT"]
    if vm is None:
        out = 0.5 * (T * torch.cholesky_solve(T, LP)).sum() - 0.5 * T.shape[1] * cho_logdet(LP)
    else:
        out = sum(0.5 * (T[:, cp] * torch.cholesky_solve(T[:, cp], LP[p])).sum() for p, cp in enumerate(vm.cols)) \
            - 0.5 * (vm.counts * cho_logdet(LP)).sum()
    if g_on:
        LPu = cholesky_jitter(0.5 * (nat["uP"] + nat["uP"].mT), "precision of q(U)")      # (J, D, M, M)
        Tu = nat["uT"].mT[..., None]                                                       # (J, D, M, 1)
        out = out + 0.5 * (Tu * torch.cholesky_solve(Tu, LPu)).sum() - 0.5 * cho_logdet(LPu).sum()
    return out


def _store_natural(store, k: int, nat: dict, g_on: bool) -> None:
    with torch.no_grad():
        for n in ("vP", "vT") + (("uP", "uT") if g_on else ()):
            store[f"q{n}_{k}"].unconstrained().copy_(nat[n])


# --------------------------------------------------------------------------- the objective
class StochasticELBO:
    """Negative minibatch ELBO for :func:`tandem.inference.fit` (a custom loss callable).

    ``loss(model, guide, sdata, update=True)``: ``model``/``guide`` are :func:`model_params` /
    :func:`guide_params` (or compatible registrations).

    Parameters
    ----------
    batch : int or None, default None
        Windows per step (``None`` or ≥ S: all windows, deterministic).
    local_iters : int, default 20
        L-BFGS iterations on the drawn windows' q(X) per step (see the module docstring).
    windows : array_like, optional
        Fix the windows of every step (evaluation, tests) instead of drawing them.
    hyper_iters : int, default 0
        L-BFGS iterations per epoch on the hyperparameters (0: the driver's Adam step on the
        minibatch gradient every step); see below.

    Raises
    ------
    ValueError
        If ``local_iters`` < 1 or ``hyper_iters`` < 0.

    Notes
    -----
    With ``update=True`` (a training step) a call first updates the drawn windows' q(X)
    and the running statistics, sets q(V), q(U) to their optimum given the statistics, and
    then returns −ELBO of the minibatch whose gradient (hyperparameters only; the window
    parameters enter it detached) the driver's optimiser applies. ``update=False``
    evaluates −ELBO at the current parameters and changes nothing.

    ``hyper_iters`` > 0: the hyperparameters are instead updated once per epoch, at the epoch's
    first step, by ``hyper_iters`` L-BFGS iterations on the full-data collapsed bound at the
    windows' current q(X) (:func:`~tandem.inference.mcgpds.hyper_step.hyper_step`, streamed over the
    windows), after which the statistics are recomputed; the returned loss then carries no hyperparameter gradient (the
    driver's optimiser moves nothing). Every epoch is then ascent on the full-data bound: the local
    steps are block-coordinate ascent with the statistics exact, the hyperparameter step an
    Armijo line search on the exact bound. ``hyper_iters = 0``: an Adam step of the driver on the
    minibatch gradient at every step (statistics refreshed once per epoch).
    """

    def __init__(self, batch: int | None = None, local_iters: int = 20, windows=None, hyper_iters: int = 0):
        self.batch = batch
        self.local_iters = check_int_range(local_iters, "local_iters", low=1)
        self.hyper_iters = check_int_range(hyper_iters, "hyper_iters", low=0)
        self.windows = windows

    def _draw(self, S: int) -> tuple[torch.Tensor, float]:
        if self.windows is not None:
            idx = torch.as_tensor(self.windows, device="cpu").long().reshape(-1)
            return idx, S / idx.numel()
        B = S if self.batch is None else min(int(self.batch), S)
        with pyro.plate("windows", S, subsample_size=B) as idx:
            pass
        return idx.cpu(), S / B

    def __call__(self, model, guide, sdata: StochasticData, update: bool = True) -> torch.Tensor:
        """−ELBO of the drawn windows (window terms scaled by S/B) minus the global KL.

        Parameters
        ----------
        model : callable
            :func:`model_params` (registers the hyperparameters).
        guide : callable
            :func:`guide_params` (registers the windows' q(X) and q(V), q(U)).
        sdata : StochasticData
            The data.
        update : bool, default True
            A training step (local step, statistics, q(V), q(U)); ``False``: evaluate only.

        Returns
        -------
        torch.Tensor
            Scalar −ELBO of the minibatch (this rank's share); its gradient reaches the
            hyperparameters only.
        """
        S = sdata.windows.S
        idx, scale = self._draw(S)
        rank, world = rank_world()
        local = idx[rank::world]
        hp = model(sdata, idx)
        if update:
            self._update(sdata, hp, idx, local, _learns_hyperparams(hp))
            if self.hyper_iters:     # the hyperparameters moved in _update (per epoch), not by the driver
                hp = _detached(model(sdata, idx))
        q = guide(sdata, idx)
        mine = torch.arange(idx.numel(), device="cpu")[rank::world].to(sdata.device)
        ql = {n: [x[mine] for x in q[n]] for n in ("mu", "lam")}
        if update:   # the window parameters were just optimised; only the hyperparameters take the gradient
            ql = _detached(ql)
        terms, flats = _window_terms(sdata, hp, ql, local)
        elbo = scale * terms
        for k, D in enumerate(sdata.out_dims):
            v = hp["views"][k]
            g_on = _g_on(sdata, v)
            nat = _natural_params(k)
            vm = sdata.view_masks[k]
            if local.numel():
                elbo = elbo + scale * _expected_fit(v, _unflatten(flats[k], sdata.M, D, sdata.J, vm), nat, g_on, vm)
            if rank == 0:
                elbo = elbo - _q_kl(nat, g_on, sdata.J, vm)
        return -elbo

    # ------------------------------------------------------------------ training step
    @torch.no_grad()
    def _update(self, sdata, hp, idx, local, learned: bool):
        """Local step, running statistics and q(V), q(U) (see the module docstring)."""
        store = pyro.get_param_store()
        hp = _detached(hp)
        world = rank_world()[1]
        # the step counter lives in the parameter store, so a checkpoint resumes it
        store.setdefault("stoch_steps", torch.zeros((), dtype=DTYPE, device=sdata.device))
        n = int(store["stoch_steps"].item())
        per_epoch = math.ceil(sdata.windows.S / idx.numel())
        # once at the start; once per epoch when hyperparameters are learned (their steps
        # change every window's statistics, and the incremental sum would drift)
        if n and n % per_epoch == 0 and learned and self.hyper_iters:
            from tandem.inference.mcgpds.hyper_step import hyper_step  # (hyper_step imports this module)
            hyper_step(sdata, self.hyper_iters)       # ends with refresh_statistics
            hp = _detached(model_params(sdata))
        elif n == 0 or (n % per_epoch == 0 and learned):
            refresh_statistics(sdata)
        stats = [store[f"qstat_{k}"].detach().clone() for k in range(sdata.V)]
        # the hyperparameters are constants in this step: the windows' prior factors serve every
        # evaluation of the local optimiser (and the statistics before and after it)
        prior = batch_prior(sdata, hp, local)
        q_old = guide_params(sdata, local) if local.numel() else {}
        _, old = _window_terms(sdata, hp, q_old, local, prior)
        # the other windows' statistics; their Ã are sums of PSD matrices, but when the
        # hyperparameters moved since T was summed the difference can lose that (and with it
        # P = I + β Ã its definiteness): clamp negative eigenvalues (T is recomputed each epoch)
        vms = sdata.view_masks
        others = [_psd_part(s - all_reduce_sum(o.clone()), sdata.M, D, sdata.J, vm)
                  for s, o, D, vm in zip(stats, old, sdata.out_dims, vms)]
        params = [store[f"sq_{i}"].unconstrained() for i in local.tolist()]
        g_on = [_g_on(sdata, v) for v in hp["views"]]
        M, J = sdata.M, sdata.J

        def fun():
            with torch.enable_grad():
                try:
                    q = guide_params(sdata, local) if local.numel() else {}
                    terms, flats = _window_terms(sdata, hp, q, local, prior)
                    failed = 0.0
                except NotPositiveDefiniteError:      # a trial point of the line search: reject it
                    terms, flats, failed = None, None, 1.0
                # one collective first, so every rank takes the same branch (a rank that
                # failed must not skip collectives the others make)
                head = torch.tensor([0.0 if terms is None else float(terms.detach()), failed], dtype=DTYPE,
                                    device=sdata.device)
                head = all_reduce_sum(head)
                if float(head[1]) > 0:
                    return math.inf, None
                value = float(head[0])
                sur = terms
                for k, D in enumerate(sdata.out_dims):
                    tot = (others[k] + all_reduce_sum(flats[k].detach().clone())).requires_grad_()
                    c = _collapsed_value(_optimal_natural(hp["views"][k], _unflatten(tot, M, D, J, vms[k]), g_on[k],
                                                          vms[k]), g_on[k], vms[k])
                    (G,) = torch.autograd.grad(c, tot)
                    value += float(c.detach())
                    sur = sur + (G * flats[k]).sum()      # chain rule through the summed statistics
                grads = torch.autograd.grad(sur, params) if params else []
            return -value, [-g for g in grads]

        from tandem.inference.mcgpds.hyper_step import lbfgs_sharded
        lbfgs_sharded(fun, params, self.local_iters, device=sdata.device)
        if world > 1:   # every rank keeps every window's q(X): share the windows this rank optimised
            rank = rank_world()[0]
            packed = torch.stack([store[f"sq_{i}"].unconstrained().detach() for i in idx.tolist()])
            mask = torch.zeros(idx.numel(), dtype=DTYPE, device=sdata.device)
            mask[rank::world] = 1.0
            packed = all_reduce_sum(packed * mask[:, None, None, None])
            for i, x in zip(idx.tolist(), packed):
                store[f"sq_{i}"].unconstrained().copy_(x)
        q_new = guide_params(sdata, local) if local.numel() else {}
        _, new = _window_terms(sdata, hp, q_new, local, prior)
        for k, D in enumerate(sdata.out_dims):
            tot = others[k] + all_reduce_sum(new[k].clone())
            store[f"qstat_{k}"].unconstrained().copy_(tot)
            _store_natural(store, k, _optimal_natural(hp["views"][k], _unflatten(tot, M, D, J, vms[k]), g_on[k],
                                                      vms[k]), g_on[k])
        store["stoch_steps"].unconstrained().add_(1)


def _q_kl(nat: dict, g_on: bool, J: int, vm=None) -> torch.Tensor:
    """KL(q(ṽ), q(ũ) ‖ N(0, I)) of one view from its natural parameters (``vm``: its missing
    entries; column d of group p has covariance P_p⁻¹)."""
    if vm is None:
        mv, LPv = _q_moments(nat["vP"], nat["vT"])
        out = _kl_white(mv, LPv)
    else:
        mv, LPv = _group_moments(nat["vP"], nat["vT"], vm)
        M = LPv.shape[-1]
        eye = torch.eye(M, dtype=mv.dtype, device=mv.device)
        Linv = torch.linalg.solve_triangular(LPv, eye.expand(LPv.shape), upper=False)
        trS, logdetS = (Linv * Linv).sum((-1, -2)), -cho_logdet(LPv)           # (P,) each
        out = 0.5 * ((vm.counts * (trS - logdetS)).sum() + (mv * mv).sum() - M * mv.shape[1])
    if g_on:
        for j in range(J):
            mu_, LPu = _q_moments(nat["uP"][j], nat["uT"][j].mT[..., None])
            out = out + _kl_white(mu_[..., 0].mT, LPu)
    return out


def windows_per_chunk(sdata: StochasticData, chunk: int) -> int:
    """Windows per chunk of a pass over all windows: ``chunk``, or fewer for long windows.

    A chunk of b windows of length L holds (V, Q, b, L, L) private-covariance stacks; b is capped
    so that one such stack stays within :data:`tandem.inference.mcgpds.streamed.KL_CHUNK_MB`
    (:func:`~tandem.inference.mcgpds.streamed.blocks_per_chunk`, the collapsed bound's rule), so
    the passes' memory does not grow with L² × ``chunk`` (256 windows of 1000 frames would be
    ≈ 8 GB per stack at V = Q = 2).

    Parameters
    ----------
    sdata : StochasticData
        The data (its views, Q, window length L and number of windows S).
    chunk : int
        The requested windows per chunk (≥ 1).

    Returns
    -------
    int
        ``min(chunk, blocks_per_chunk(V, Q, L, S))`` (both at least 1).

    Raises
    ------
    ValueError
        ``chunk`` < 1 or not an integer.
    """
    chunk = check_int_range(chunk, "chunk", low=1)
    return min(chunk, blocks_per_chunk(sdata.V, sdata.Q, sdata.windows.window, sdata.windows.S))


@torch.no_grad()
def refresh_statistics(sdata: StochasticData, chunk: int = 256) -> None:
    """Recompute every view's running statistics over all windows and set q(V), q(U) to their optimum.

    Sharded over the ranks. Setting q(V), q(U) is the full-data natural-gradient step of length 1:
    the uncollapsed ELBO then equals the collapsed bound. The statistics go to ``qstat_k`` in the
    parameter store.

    Parameters
    ----------
    sdata : StochasticData
        The data.
    chunk : int, default 256
        Windows per chunk (fewer for long windows: :func:`windows_per_chunk`).
    """
    chunk = windows_per_chunk(sdata, chunk)
    store = pyro.get_param_store()
    hp = _detached(model_params(sdata))
    rank, world = rank_world()
    S = sdata.windows.S
    mine = torch.arange(S, device="cpu")[rank::world]
    tot = [torch.zeros(_stat_size(sdata.M, D, sdata.J, vm), dtype=DTYPE, device=sdata.device)
           for D, vm in zip(sdata.out_dims, sdata.view_masks)]
    for lo in range(0, max(mine.numel(), 1), chunk):
        part = mine[lo:lo + chunk]
        q = guide_params(sdata, part) if part.numel() else {}
        _, flats = _window_terms(sdata, hp, q, part)
        tot = [a + b for a, b in zip(tot, flats)]
    if mine.numel() < S:                   # windows of other ranks: register their parameters here too
        guide_params(sdata, torch.arange(S, device="cpu"))
    for k, D in enumerate(sdata.out_dims):
        t = all_reduce_sum(tot[k])
        v = hp["views"][k]
        g_on = _g_on(sdata, v)
        store.setdefault(f"qstat_{k}", torch.zeros_like(t))
        store[f"qstat_{k}"].unconstrained().copy_(t)
        vm = sdata.view_masks[k]
        _store_natural(store, k, _optimal_natural(v, _unflatten(t, sdata.M, D, sdata.J, vm), g_on, vm), g_on)


def _window_moments(d: StochasticData, hp: dict, idx: torch.Tensor):
    """q(X) moments of the windows ``idx`` (CPU indices): ``(mu, s, rows, valid)`` with
    ``mu``, ``s`` (V, n_windows, window length, Q) private means/variances (zero on padding),
    ``rows`` the frame index of each slot and ``valid`` the mask of real (unpadded) slots."""
    q = guide_params(d, idx)
    li = idx.to(d.device)
    m = d.mask[li].to(DTYPE)
    rows = d.rows[li]
    mu = torch.stack(q["mu"]) * m[None, :, :, None]
    _, sdiag = window_kl(d.times[rows] * m, m, hp["time_s"], hp["views"], mu, torch.stack(q["lam"]))
    return mu, sdiag, rows, d.mask[li]


def _global_kl(d: StochasticData) -> torch.Tensor:
    """Σ_k KL(q(ṽ_k), q(ũ_k) ‖ p) at the stored natural parameters."""
    hp = model_params(d)
    return sum((_q_kl(_natural_params(k), _g_on(d, v), d.J, d.view_masks[k]) for k, v in enumerate(hp["views"])),
               torch.zeros((), dtype=DTYPE, device=d.device))


def _partition_term(obj: StochasticELBO, d: StochasticData, idx: torch.Tensor, S: int) -> float:
    """Σ over windows ``idx`` of [E log lik − KL_i] (weight 1), without the global KL."""
    # the objective returns −(c Σ_i terms_i − KL_global) with c = S/|idx|
    c = S / idx.numel()
    val = obj(model_params, guide_params, d, update=False)
    return float((-val + _global_kl(d)) / c)


# --------------------------------------------------------------------------- moved
#: names that moved to :mod:`tandem.inference.mcgpds.hyper_step` (the per-epoch hyperparameter
#: step imports this module, so they are re-exported lazily: either module may be imported first)
_MOVED = ("collapsed_value_and_grad", "hyper_step", "lbfgs_sharded", "_LazyGrads", "_collapsed_grads",
          "_learned_params", "_dot")


def __getattr__(name):
    if name in _MOVED:
        from tandem.inference.mcgpds import hyper_step as _hs
        return getattr(_hs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
