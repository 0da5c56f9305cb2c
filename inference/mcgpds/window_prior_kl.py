"""The latent prior of a batch of windows (the stochastic McGPDS): its q(X)-independent factors
and the KL of the windows' q(X).

Each window is an independent block of the time kernels (:mod:`tandem.inference.mcgpds.windows`).
:func:`window_prior` gives a batch's prior factors
(:func:`~tandem.inference.mcgpds.prior_factors.block_prior_factors`), :func:`window_kl` the KL of
its shared and private latents with the collapsed bound's algebra
(:func:`~tandem.inference.mcgpds.private_cov.private_cov_terms` for the private covariances), and
:func:`prior_is_constant` says when the factors may be kept over several evaluations.
"""
from __future__ import annotations

import torch

from tandem.inference.mcgpds.prior_factors import _view_scalars, block_prior_factors, prior_leaves, well_conditioned
from tandem.inference.mcgpds.private_cov import private_cov_terms
from tandem.inference.numerics import NotPositiveDefiniteError, cho_logdet

__all__ = ["prior_is_constant", "window_kl", "window_prior"]


def window_prior(t: torch.Tensor, m: torch.Tensor, time_s, views: list, decide: bool = False) -> dict:
    """The q(X)-independent factors of a batch of windows
    (:func:`~tandem.inference.mcgpds.prior_factors.block_prior_factors`).

    Parameters
    ----------
    t, m : torch.Tensor
        (B, L) times and float mask, as for :func:`window_kl`.
    time_s, views
        As for :func:`window_kl`.
    decide : bool, default False
        Decide ``Ainv_ok`` (one eigenvalue decomposition per matrix) when A is constant (no
        hyperparameter it depends on requires a gradient): worth it when the factors serve many
        evaluations (an optimiser's over the same windows), since the well-conditioned form of the
        private covariances (one Cholesky and one ``cholesky_inverse``, closed-form backward) is
        then cheaper at every one of them.

    Returns
    -------
    dict
        The factors (``Ls``, ``A``, ``Ainv``, ``logdetA``, ``LBp``, ``Ainv_ok``).
    """
    alpha, eps = _view_scalars(views, "alpha", t), _view_scalars(views, "eps", t)
    views_time = [v["time"] for v in views]
    out = block_prior_factors(t, m, time_s, views_time, alpha, eps)
    if decide and prior_is_constant(time_s, views):
        out["Ainv_ok"] = well_conditioned(out["A"], out["Ainv"])
    return out


def prior_is_constant(time_s, views: list) -> bool:
    """Whether no hyperparameter of the latent prior (α, ε, the time kernels) requires a gradient.

    Parameters
    ----------
    time_s, views
        As for :func:`window_kl` (α and ε may be tensors or numbers).

    Returns
    -------
    bool
        True when the prior factors are constants (then they may be kept over evaluations).
    """
    ab = [v[n] for v in views for n in ("alpha", "eps") if isinstance(v[n], torch.Tensor)]
    return not any(x.requires_grad for x in prior_leaves(time_s, [v["time"] for v in views], *ab))


def window_kl(t: torch.Tensor, m: torch.Tensor, time_s: dict, views: list, mu: torch.Tensor,
              lam: torch.Tensor, prior: dict | None = None):
    """KL(q(X_s, X_1..V) ‖ p) of a batch of windows and the private variances.

    Same algebra as ``bound.latent_terms``:
    ``KL = ½ Σ_q [log|B'| + Σ_k (log|B_q^(k)| − Σ_n λ S_nn + μᵀA⁻¹μ) − bᵀ S^(s) b]``.

    Parameters
    ----------
    t : torch.Tensor
        (B, L) times.
    m : torch.Tensor
        (B, L) float mask (1 on real slots, 0 on padding).
    time_s : dict or None
        Hyperparameters of the shared time kernel (a :class:`~tandem.models.kernels.TimeParams`
        — any time kernel — or None for the identity).
    views : list of dict
        ``views[k]`` with ``alpha``, ``eps``, ``time`` (a
        :class:`~tandem.models.kernels.TimeParams` or None for the identity private prior).
    mu : torch.Tensor
        (V, B, L, Q) private means, zero at padding.
    lam : torch.Tensor
        (V, B, L, Q) variational precisions λ, zero at padding.
    prior : dict, optional
        :func:`window_prior` of these windows at these hyperparameters, when the caller keeps it
        over several evaluations (computed here otherwise).

    Returns
    -------
    kl : torch.Tensor
        (B,) the KL of each window.
    s_diag : torch.Tensor
        (V, B, L, Q) the private marginal variances.

    Raises
    ------
    NotPositiveDefiniteError
        A factorisation fails, or a window's KL comes out clearly negative (numerically broken).
    """
    Q = mu.shape[-1]
    pf = window_prior(t, m, time_s, views) if prior is None else prior
    Ls, Ainv, LBp = pf["Ls"], pf["Ainv"], pf["LBp"]
    alpha = _view_scalars(views, "alpha", t)
    Aimu = Ainv @ mu                                                           # A⁻¹ μ (V, B, L, Q)
    quad1 = (mu * Aimu).sum((0, 2, 3))                                         # (B,)
    b = ((1 - alpha)[:, None, None, None] * Aimu).sum(0)                       # (B, L, Q)
    w = torch.linalg.solve_triangular(LBp, Ls.mT @ b, upper=False)
    quad2 = (w * w).sum((1, 2))
    # padding entries: λ = 0 selected with where (not λ·0), so that neither a NaN there nor
    # the infinite derivative of √λ at 0 reaches the gradient of the real entries
    valid = (m > 0)[None, :, :, None].expand_as(lam)
    lam_p = torch.where(valid, lam, torch.zeros_like(lam)).permute(0, 3, 1, 2)   # (V, Q, B, L)
    sl = torch.where(valid, lam.clamp_min(1e-300).sqrt(), torch.zeros_like(lam)).permute(0, 3, 1, 2)
    logdetB, sdiag = private_cov_terms(pf, lam_p, sqrt_lam=sl)                 # (V, Q, B), (V, Q, B, L)
    kl = 0.5 * (Q * cho_logdet(LBp) + logdetB.sum((0, 1)) - (lam_p * sdiag).sum((0, 1, 3)) + quad1 - quad2)
    # a KL is ≥ 0 for every q: a clearly negative one is a numerically broken evaluation, which an
    # optimiser would follow (callers reject the point, as for a failed factorisation)
    if bool((kl < -1e-6 * (1.0 + m.sum(1) * len(views) * Q)).any()):
        raise NotPositiveDefiniteError(f"window KL: negative value {float(kl.min()):.6g} (numerically broken q(X): "
                                       f"largest λ {float(lam_p.max()):.3g}, largest |μ| {float(mu.abs().max()):.3g})")
    return kl, sdiag.permute(0, 2, 3, 1)
