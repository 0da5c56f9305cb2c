"""The twin GPs' certainty φ_α and the determinant forms behind it (Lemma 4.1's bound, SMTGP's O(N³) objective).

For a fitted :class:`~tandem.inference.twin_gp.predictor.TwinGP` with training kernels K_X, K_Y
(ridge λ included) and a test pair (x, y): η_x = k_X(x,x) − K_xᵀK_X⁻¹K_x,
η_y = k_Y(y,y) − K_yᵀK_Y⁻¹K_y and, for α ∈ (0, 1), η_xy(α) = K_α − K_XYᵀ M_α⁻¹ K_XY with
M_α = (1−α)K_X + αK_Y. The log certainty log φ_α = (1−α) log η_x + α log η_y − log η_xy(α)
(:func:`certainty`, from the predictor's O(N²) objective) is maximised by the SMTGP prediction
(Lemma 4.2) and bounded by Lemma 4.1's log|M_α| − (1−α) log|K_X| − α log|K_Y|
(:func:`lemma41_log_bound`, from the cached Cholesky factors). :func:`smtgp_det_objective`
evaluates SMTGP's objective through the determinants of the augmented kernels K_{X∪x}, K_{Y∪y}:
the O(N³)-per-point reference the predictor's O(N²) forms are tested against.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tandem.inference.numerics import DTYPE, cho_logdet
from tandem.inference.twin_gp.baselines import rbf
from tandem.models.twin_gp import validate_alpha_beta

if TYPE_CHECKING:
    from tandem.inference.twin_gp.predictor import TwinGP

__all__ = ["certainty", "lemma41_log_bound", "smtgp_det_objective"]


def certainty(tgp: TwinGP, Xt, y, alpha: float) -> torch.Tensor:
    """The log certainty log φ_α(x, y) = (1−α) log η_x + α log η_y − log η_xy(α).

    Lemma 4.2: maximised by the SMTGP prediction; Lemma 4.1: bounded by :func:`lemma41_log_bound`).

    Parameters
    ----------
    tgp : TwinGP
        The twin GP.
    Xt : array_like
        (B, d_x) test inputs.
    y : array_like
        (B, d_y) outputs.
    alpha : float
        α in (0, 1).

    Returns
    -------
    torch.Tensor
        (B,) log φ_α.

    Raises
    ------
    ValueError
        When α is not in (0, 1).
    """
    a, _ = validate_alpha_beta(alpha)
    if not 0 < a < 1:
        raise ValueError("certainty: alpha must lie in (0, 1)")
    ctx = tgp.context(Xt, "SMTGP", a)
    y = tgp._check_y(y, ctx["B"])
    f, _ = tgp.value_and_grad(y, ctx, form="log")
    return -f * a * (1 - a)


def lemma41_log_bound(tgp: TwinGP, alpha: float) -> torch.Tensor:
    """log of Lemma 4.1's bound |αK_Y + (1−α)K_X| / (|K_X|^{1−α} |K_Y|^α).

    Parameters
    ----------
    tgp : TwinGP
        The twin GP.
    alpha : float
        α in [0, 1].

    Returns
    -------
    torch.Tensor
        Scalar log bound.
    """
    a, _ = validate_alpha_beta(alpha)
    s = tgp.matrices(("AY", "Minv"), alpha=a)
    return s[("logdetM", a)] - (1 - a) * cho_logdet(s["LX"]) - a * cho_logdet(s["LY"])


def smtgp_det_objective(tgp: TwinGP, Xt, y, alpha: float, beta: float | None = None) -> torch.Tensor:
    """The O(N³)-per-step form of SMTGP's objective, per test point.

    The Sharma–Mittal divergence D_{α,β}(N(0,K_{X∪x}) : N(0,K_{Y∪y})) from full (N+1)×(N+1)
    determinants (via :mod:`tandem.inference.twin_gp.divergences`), per test point.

    With ``beta=None`` returns −log c_α (the log-space objective, = ½ ℓ_α + const),
    otherwise the divergence itself (the same minimiser for every β ≠ 1). Autograd only.

    Parameters
    ----------
    tgp : TwinGP
        The twin GP.
    Xt : array_like
        (B, d_x) test inputs.
    y : torch.Tensor
        (B, d_y) outputs in data units.
    alpha : float
        SMTGP's α.
    beta : float, optional
        SMTGP's β (None: the log-space objective).

    Returns
    -------
    torch.Tensor
        (B,) objective values.
    """
    from tandem.inference.twin_gp.divergences import log_chernoff_coefficient, sharma_mittal
    a, b = validate_alpha_beta(alpha, beta)
    Xt = tgp.to_internal_x(tgp._check_test(Xt))
    y = tgp.to_internal_y(y)
    out = []
    zeros = torch.zeros(tgp.N + 1, dtype=DTYPE, device=tgp.device)
    for i in range(Xt.shape[0]):
        Xa = torch.cat([tgp._X, Xt[i:i + 1]])
        Ya = torch.cat([tgp._Y, y[i:i + 1]])
        KXa = rbf(Xa, Xa, tgp._rx) + tgp.lam_x * tgp._eye(tgp.N + 1)
        KYa = rbf(Ya, Ya, tgp._ry) + tgp.lam_y * tgp._eye(tgp.N + 1)
        if b is None:
            out.append(-log_chernoff_coefficient(zeros, KXa, zeros, KYa, a))
        else:
            out.append(sharma_mittal(zeros, KXa, zeros, KYa, a, b))
    return torch.stack(out)
