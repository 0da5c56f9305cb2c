"""Missing entries in McGPDS views: the masked collapsed bound, posterior and checks.

A view ``Y`` (N, D) may hold NaN entries: whole frames missing from one view, or some
columns missing in some frames. The likelihood is masked — a missing entry is simply not
scored — so with ``O_d ⊆ {1..N}`` the frames where column d is observed, the paper's
collapsed bound of one view becomes a sum over columns of the single-column bound with its
own ψ-statistics

    ψ0_d = Σ_{n∈O_d} ψ0_n,   Ψ1_d = Ψ1[O_d] (|O_d|, M),   Ψ2_d = Σ_{n∈O_d} Ψ2_n (M, M),

    L̂_d = −½|O_d| log 2π + ½|O_d| log β − ½β Σ_{n∈O_d} y_nd² − ½ log|I + β Ã_d|
          + ½β² r_dᵀ (I + β Ã_d)⁻¹ r_d + ½β (tr Ã_d − ψ0_d)  + (the g_j terms likewise),

``Ã_d = L⁻¹ Ψ2_d L⁻ᵀ``, ``r_d = L⁻¹ Ψ1_dᵀ y_d[O_d]``, ``K_ZZ = L Lᵀ``. Columns with the same
observation pattern ``O_d`` share ψ-statistics and one Cholesky of ``I + β Ã``, so the
columns are grouped by pattern (:func:`column_patterns`) and each group is vectorised as in
:func:`tandem.inference.mcgpds.bound.view_bound` — with whole frames missing there is one
group (cost of the full bound on the observed frames). A fully observed view gives
``view_bound`` exactly (a pattern observed in at least
:data:`tandem.inference.mcgpds.streamed.STABLE_H_MIN_FRAMES` frames takes the same least-squares
h term, :func:`tandem.inference.mcgpds.streamed.h_term_stable`, as a full view of that length);
a column never observed contributes nothing (so the bound equals the
bound of the view with that column removed); a frame missing from one view still carries its
latents through the KL and the other views. The latent terms (KL, q(X)) are unchanged.

The optimal q(v_d) and q(u_dj) of a column use the same per-pattern statistics
(:func:`masked_view_posterior`): ``q(v_d) ∝ N(β (H + β Ψ2_d)⁻¹ Ψ1_dᵀ y_d, …)``, so the
predictive covariance term ``C_h`` is per column, (D, M, M).
"""
from __future__ import annotations

import math

import torch

from tandem.inference.distances import nan_sq_dists  # noqa: F401  (re-exported: the NaN-aware NN distance)
from tandem.inference.numerics import cho_logdet, cholesky_jitter
from tandem.models.kernels import mapping_kernel_kind
from tandem.models.mcgpds import view_bases
from tandem.models.missing import (  # noqa: F401  (re-exported)
    check_missing_views,
    fill_missing,
    has_missing,
    mean_fill,
    nan_var,
    observed_mask,
)

__all__ = ["has_missing", "observed_mask", "column_patterns", "masked_view_bound", "masked_view_posterior",
           "impute_view", "check_missing_views", "nan_sq_dists", "fill_missing", "nan_var", "mean_fill",
           "standardize_views"]


def standardize_views(views: list, per: str = "matrix"):
    """The one check and standardisation of the estimators' views (McGPDS, StochasticMcGPDS).

    On top of :func:`check_missing_views` (which the caller runs first), each view must have an
    observed entry in every column and must not be constant: the standardisation of a column with
    no observed entry would be made up (mean 0, scale 1: its predictions and imputations exactly 0
    with a confident variance), and a constant view carries no information to fit.

    Parameters
    ----------
    views : list of torch.Tensor
        V time-aligned views (N, D_k), NaN where missing.
    per : {"matrix", "column"}, default "matrix"
        The :class:`~tandem.inference.distances.Standardizer`'s ``per``.

    Returns
    -------
    scalers : list of tandem.inference.distances.Standardizer
        One per view.
    scaled : list of torch.Tensor
        The standardised views (NaN where missing).

    Raises
    ------
    ValueError
        Naming the view (and the columns): a column with every entry missing (NaN), a constant view.
    """
    from tandem.inference.distances import Standardizer
    for k, Y in enumerate(views):
        obs = observed_mask(Y)
        empty = torch.nonzero(~obs.any(0)).reshape(-1).tolist()
        if empty:
            raise ValueError(f"views[{k}]: column(s) {empty} have every entry missing (NaN); a column never "
                             "observed cannot be standardised or predicted (drop it)")
        y = Y[obs]
        if not bool((y != y[:1]).any()):
            raise ValueError(f"views[{k}]: every entry is the same value ({float(y[0]):g}); a constant view "
                             "carries no information to fit (drop it)")
    scalers = [Standardizer(Y, per=per) for Y in views]
    return scalers, [sc.transform(Y) for sc, Y in zip(scalers, views)]


def column_patterns(mask: torch.Tensor):
    """Group the columns of an observation mask (N, D) by their pattern of observed frames.

    Columns never observed belong to no group.

    Parameters
    ----------
    mask : torch.Tensor
        (N, D) boolean, True where observed (:func:`observed_mask`).

    Returns
    -------
    patterns : list of torch.Tensor
        (N,) boolean tensors: the distinct columns of ``mask`` that have at least one observed frame.
    cols : list of torch.Tensor
        The matching (D_p,) long tensors of column indices.
    """
    uniq, inv = torch.unique(mask.T.to(torch.int8), dim=0, return_inverse=True)
    patterns, cols = [], []
    for p in range(uniq.shape[0]):
        pat = uniq[p].bool()
        if not bool(pat.any()):
            continue
        patterns.append(pat)
        cols.append(torch.nonzero(inv == p).reshape(-1))
    return patterns, cols


def masked_view_bound(Y: torch.Tensor, mu: torch.Tensor, s: torch.Tensor, hp: dict, kind) -> torch.Tensor:
    """The collapsed bound ``Σ_d L̂_d`` of one view with NaN entries not scored (module docstring).

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) view, NaN where missing.
    mu, s : torch.Tensor
        (N, Q) means and variances of q(X^(k)).
    hp : dict
        The view's hyperparameters (as for :func:`tandem.inference.mcgpds.bound.view_bound`).
    kind : str or MappingKernel
        The mapping kernel.

    Returns
    -------
    torch.Tensor
        The scalar bound; equals ``view_bound(Y, mu, s, hp, kind)`` when nothing is missing.
    """
    from tandem.inference.mcgpds import streamed
    from tandem.inference.mcgpds.bound import eig_logdet_quad  # (bound imports this module lazily)
    mask = observed_mask(Y)
    Y0 = fill_missing(Y)
    beta, W = hp["beta"], hp["W"]
    n_obs = int(mask.sum())
    F = -0.5 * n_obs * math.log(2 * math.pi) + 0.5 * n_obs * beta.log()
    bh, bgs = view_bases(hp, kind)
    g_off = not W.requires_grad and float((beta.detach() * W * W).max()) < 1e-8   # as in view_bound
    patterns, cols = column_patterns(mask)
    eye = None
    for pat, cp in zip(patterns, cols):
        rows = torch.nonzero(pat).reshape(-1)
        mu_p, s_p, Y_p = mu[rows], s[rows], Y0[rows][:, cp]
        Dp = int(cp.numel())
        if streamed.use_stable_h(kind, rows.numel()):
            # a pattern observed in enough frames: the least-squares form, as view_bound (its h part
            # includes −β/2 ‖Y_p‖²); fixed by the mask, so one objective for the whole fit
            F = F + streamed.h_term_stable(mapping_kernel_kind(kind), mu_p, s_p, bh.Z, bh.variance, bh.ard,
                                           Y_p, beta, bh.kzz(), bh.chol())
        else:
            psi0, At, R = bh.whitened(mu_p, s_p, Y_p)
            if eye is None:
                eye = torch.eye(At.shape[0], dtype=Y.dtype, device=Y.device)
            LP = cholesky_jitter(eye + beta * At, "I + β L⁻¹ψ4L⁻ᵀ (masked)")
            RP = torch.linalg.solve_triangular(LP, R, upper=False)
            F = F - 0.5 * beta * (Y_p * Y_p).sum() - 0.5 * Dp * cho_logdet(LP) \
                + 0.5 * beta * beta * (RP * RP).sum() + 0.5 * Dp * beta * (At.diagonal().sum() - psi0)
        if g_off:
            continue
        for j, bg in enumerate(bgs):
            psi0g, Ag, Rg = bg.whitened(mu_p, s_p, Y_p)
            w2 = W[cp, j] * W[cp, j]
            ld, qd = eig_logdet_quad(Ag, Rg, beta * w2)
            F = F - 0.5 * ld + 0.5 * beta * qd + 0.5 * beta * w2.sum() * (Ag.diagonal().sum() - psi0g)
    return F


def masked_view_posterior(Y, mu, s, hp, kind, beta=None):
    """Optimal q(V), q(U) of a view with NaN entries (per-pattern statistics).

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) training view, NaN where missing.
    mu, s : torch.Tensor
        (N, Q) moments of q(X^(k)).
    hp : dict
        The view's hyperparameters.
    kind : str or MappingKernel
        The mapping kernel.
    beta : float, optional
        Overrides β (as in :func:`tandem.inference.mcgpds.bound.view_posterior`).

    Returns
    -------
    tandem.inference.mcgpds.bound.ViewPosterior
        With ``bh`` (M, D), ``Ch`` (D, M, M) per column
        (``H⁻¹ − (H + β Ψ2_d)⁻¹``), ``bg`` (J, M, D), ``Cg`` (J, D, M, M); a column never
        observed gets its prior (``b = 0``, ``C = 0``).
    """
    from tandem.inference.mcgpds.bound import ViewPosterior
    beta = hp["beta"] if beta is None else torch.as_tensor(beta, dtype=Y.dtype, device=Y.device)
    W = hp["W"]
    mask = observed_mask(Y)
    Y0 = fill_missing(Y)
    N, D = Y.shape
    fh, fgs = view_bases(hp, kind)
    H = fh.kzz()
    M = H.shape[0]
    LH = cholesky_jitter(H, "K_ZZ of h")
    Hinv = torch.cholesky_inverse(LH)
    J = len(fgs)
    bh = Y.new_zeros(M, D)
    Ch = Y.new_zeros(D, M, M)
    bg = Y.new_zeros(J, M, D)
    Cg = Y.new_zeros(J, D, M, M)
    Gs = [fg.kzz() for fg in fgs]
    Ginv = [torch.cholesky_inverse(cholesky_jitter(G, f"K_ZZ of {fg.name}")) for G, fg in zip(Gs, fgs)]
    for pat, cp in zip(*column_patterns(mask)):
        rows = torch.nonzero(pat).reshape(-1)
        mu_p, s_p, Y_p = mu[rows], s[rows], Y0[rows][:, cp]
        _, Psi1, Psi2 = fh.psi(mu_p, s_p)
        LHP = cholesky_jitter(H + beta * Psi2, "K_ZZ + β ψ4 (masked)")
        bh[:, cp] = beta * torch.cholesky_solve(Psi1.mT @ Y_p, LHP)
        Ch[cp] = (Hinv - torch.cholesky_inverse(LHP))[None]
        for j, fg in enumerate(fgs):
            _, Psi1g, Psi2g = fg.psi(mu_p, s_p)
            w = W[cp, j]
            Gd = Gs[j][None] + (beta * w * w)[:, None, None] * Psi2g[None]
            LGd = cholesky_jitter(Gd, "K_ZZ + β w² ψ5 (masked)")
            rhs = (Psi1g.mT @ Y_p).mT[:, :, None]
            bg[j][:, cp] = ((beta * w)[:, None] * torch.cholesky_solve(rhs, LGd)[..., 0]).mT
            Cg[j, cp] = Ginv[j][None] - torch.cholesky_inverse(LGd)
    return ViewPosterior(kind, hp, beta, bh, bg, Ch, Cg)


@torch.no_grad()
def impute_view(Y: torch.Tensor, mu: torch.Tensor, s: torch.Tensor, hp: dict, kind, scaler):
    """Predictive moments of a training view at every frame's own latent, and its imputed values.

    For every training frame n the view's fitted predictive at ``q(x_n^(k)) = N(μ_n, diag s_n)``
    is ``E[y_nd] = ψ1(x_n) b_d`` and ``Var[y_nd] = ψ0 − tr(C_d ψ2) + b_dᵀ ψ2 b_d − E[y_nd]² + β⁻¹``
    (:func:`tandem.inference.mcgpds.bound.predict_moments`, h-only output layer), with the optimal
    q(V) of :func:`tandem.inference.mcgpds.bound.view_posterior` (:func:`masked_view_posterior`
    when ``Y`` has NaN entries: column d's q(v_d) uses only the frames where it is observed), mapped
    to the data's units by ``scaler``. Used by ``McGPDS.impute`` and ``StochasticMcGPDS.impute``.

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) training view in the fit's (standardised) units, NaN where missing.
    mu, s : torch.Tensor
        (N, Q) means and variances of q(X^(k)) of the training frames.
    hp : dict
        The view's hyperparameters (constants).
    kind : str or MappingKernel
        The mapping kernel.
    scaler : tandem.inference.distances.Standardizer
        Maps the fit's units back to the data's (``inverse``, ``inverse_var``).

    Returns
    -------
    values, mean, var : torch.Tensor
        (N, D) in the data's units: the view with its missing entries replaced by the predictive
        mean; the predictive mean and variance (noise included) at every entry.
    missing : torch.Tensor
        (N, D) boolean, True where ``Y`` is NaN.
    """
    from tandem.inference.mcgpds.bound import predict_moments, view_posterior
    post = view_posterior(Y, mu, s, hp, kind)
    mean, var = predict_moments(post, mu, s, components="h")
    mean, var = scaler.inverse(mean), scaler.inverse_var(var)
    miss = torch.isnan(Y)
    values = torch.where(miss, mean, scaler.inverse(fill_missing(Y)))
    return values, mean, var, miss
