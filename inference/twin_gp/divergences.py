"""Divergences between multivariate Gaussians, in log space (float64, Cholesky only).

Everything is built on the log Chernoff α-coefficient

    log c_α(p, q) = log ∫ p^α q^{1−α}
                  = ½ [(1−α) log|Σ_p| + α log|Σ_q| − log|(1−α)Σ_p + αΣ_q|]
                    − ½ α(1−α) Δμᵀ((1−α)Σ_p + αΣ_q)⁻¹ Δμ,        Δμ = μ_p − μ_q,

(one Cholesky factor of (1−α)Σ_p + αΣ_q; ``|Σ_α|`` of Nielsen & Nock is
|Σ_p||Σ_q| / |(1−α)Σ_p + αΣ_q|), from which

* Sharma–Mittal  D_{α,β}(p:q) = (c_α^{(1−β)/(1−α)} − 1)/(β − 1)   (α ∈ (0,1), β ≠ 1),
  computed as ``expm1(((1−β)/(1−α)) log c_α)/(β−1)`` so that tiny divergences keep their
  digits and large N neither over- nor underflows before the final ``expm1``;
* Rényi          D_α = log c_α / (α − 1)                      (β → 1);
* Tsallis        T_α = (c_α − 1)/(α − 1)                     (β → α);
* Kullback–Leibler KL(p‖q) = ½[tr(Σ_q⁻¹Σ_p) + Δμᵀ Σ_q⁻¹ Δμ − n + log|Σ_q| − log|Σ_p|]
  (α, β → 1);
* Bhattacharyya  D_B = −log c_{1/2} = ½ D_{½,1}.

Shapes: ``mu_*`` (..., n), ``Sigma_*`` (..., n, n); results (...,). The twin-GP
module uses :func:`log_chernoff_coefficient` for its O(N³) determinant form.
"""
from __future__ import annotations

import torch

from tandem.inference.numerics import cho_logdet, cholesky_jitter, tri_solve
from tandem.inference.validation import as_tensor, check_real_range

__all__ = ["log_chernoff_coefficient", "sharma_mittal", "renyi", "tsallis", "kl_divergence",
           "bhattacharyya"]


def _check(mu_p, S_p, mu_q, S_q):
    mu_p = as_tensor(mu_p, "mu_p")
    mu_q = as_tensor(mu_q, "mu_q")
    S_p = as_tensor(S_p, "Sigma_p")
    S_q = as_tensor(S_q, "Sigma_q")
    if mu_p.dim() < 1 or S_p.dim() < 2:
        raise ValueError(f"mu_p must be (..., n) and Sigma_p (..., n, n); got {tuple(mu_p.shape)}, "
                         f"{tuple(S_p.shape)}")
    n = mu_p.shape[-1]
    for name, m in (("mu_q", mu_q),):
        if m.shape[-1] != n:
            raise ValueError(f"{name} has dimension {m.shape[-1]} but mu_p has {n}")
    for name, S in (("Sigma_p", S_p), ("Sigma_q", S_q)):
        if S.dim() < 2 or S.shape[-1] != n or S.shape[-2] != n:
            raise ValueError(f"{name}: expected shape (..., {n}, {n}), got {tuple(S.shape)}")
    return mu_p, S_p, mu_q, S_q


def log_chernoff_coefficient(mu_p, Sigma_p, mu_q, Sigma_q, alpha: float) -> torch.Tensor:
    """log ∫ p^α q^{1−α} for two Gaussians (always ≤ 0).

    Parameters
    ----------
    mu_p, Sigma_p : torch.Tensor
        Mean (..., n) and covariance (..., n, n) of p = N(μ_p, Σ_p).
    mu_q, Sigma_q : torch.Tensor
        Mean and covariance of q = N(μ_q, Σ_q), broadcastable with p's.
    alpha : float
        α ∈ [0, 1].

    Returns
    -------
    torch.Tensor
        (...,) the value per batch entry.
    """
    mu_p, S_p, mu_q, S_q = _check(mu_p, Sigma_p, mu_q, Sigma_q)
    a = check_real_range(alpha, "alpha", 0.0, 1.0)
    Lp = cholesky_jitter(S_p, "Sigma_p")
    Lq = cholesky_jitter(S_q, "Sigma_q")
    Lm = cholesky_jitter((1 - a) * S_p + a * S_q, "(1-alpha) Sigma_p + alpha Sigma_q")
    d = (mu_p - mu_q).unsqueeze(-1)
    w = tri_solve(Lm, d)
    maha = (w * w).sum((-2, -1))
    return 0.5 * ((1 - a) * cho_logdet(Lp) + a * cho_logdet(Lq) - cho_logdet(Lm)) - 0.5 * a * (1 - a) * maha


def sharma_mittal(mu_p, Sigma_p, mu_q, Sigma_q, alpha: float, beta: float) -> torch.Tensor:
    """Sharma–Mittal divergence D_{α,β}(p : q) between Gaussians (Nielsen & Nock 2012 closed form).

    The limits are taken exactly: β = 1 gives Rényi, α = 1 (with β = 1) Kullback–Leibler;
    α = 1 with β ≠ 1 is the (KL-based) limit D_{1,β} = (exp((β−1) KL) − 1)/(β − 1)
    (c_α^{1/(1−α)} → exp(−KL) as α → 1, so c_α^{(1−β)/(1−α)} → exp((β−1) KL)).

    Parameters
    ----------
    mu_p, Sigma_p : torch.Tensor
        Mean (..., n) and covariance (..., n, n) of p = N(μ_p, Σ_p).
    mu_q, Sigma_q : torch.Tensor
        Mean and covariance of q = N(μ_q, Σ_q), broadcastable with p's.
    alpha : float
        α ∈ (0, 1].
    beta : float
        Any real β.

    Returns
    -------
    torch.Tensor
        (...,) the value per batch entry.

    Raises
    ------
    ValueError
        For α outside (0, 1].
    """
    a = check_real_range(alpha, "alpha", 0.0, 1.0, low_open=True)
    b = check_real_range(beta, "beta")
    if a == 1.0:
        kl = kl_divergence(mu_p, Sigma_p, mu_q, Sigma_q)
        return kl if b == 1.0 else torch.expm1((b - 1) * kl) / (b - 1)
    logc = log_chernoff_coefficient(mu_p, Sigma_p, mu_q, Sigma_q, a)
    if b == 1.0:
        return logc / (a - 1)
    return torch.expm1((1 - b) / (1 - a) * logc) / (b - 1)


def renyi(mu_p, Sigma_p, mu_q, Sigma_q, alpha: float) -> torch.Tensor:
    """Rényi divergence D_α(p‖q) = log ∫p^α q^{1−α} / (α − 1) between Gaussians.

    Parameters
    ----------
    mu_p, Sigma_p : torch.Tensor
        Mean (..., n) and covariance (..., n, n) of p = N(μ_p, Σ_p).
    mu_q, Sigma_q : torch.Tensor
        Mean and covariance of q = N(μ_q, Σ_q), broadcastable with p's.
    alpha : float
        α ∈ (0, 1).

    Returns
    -------
    torch.Tensor
        (...,) the value per batch entry.
    """
    a = check_real_range(alpha, "alpha", 0.0, 1.0, low_open=True, high_open=True)
    return log_chernoff_coefficient(mu_p, Sigma_p, mu_q, Sigma_q, a) / (a - 1)


def tsallis(mu_p, Sigma_p, mu_q, Sigma_q, alpha: float) -> torch.Tensor:
    """Tsallis divergence (∫p^α q^{1−α} − 1)/(α − 1) between Gaussians.

    Parameters
    ----------
    mu_p, Sigma_p : torch.Tensor
        Mean (..., n) and covariance (..., n, n) of p = N(μ_p, Σ_p).
    mu_q, Sigma_q : torch.Tensor
        Mean and covariance of q = N(μ_q, Σ_q), broadcastable with p's.
    alpha : float
        α ∈ (0, 1).

    Returns
    -------
    torch.Tensor
        (...,) the value per batch entry.
    """
    a = check_real_range(alpha, "alpha", 0.0, 1.0, low_open=True, high_open=True)
    return torch.expm1(log_chernoff_coefficient(mu_p, Sigma_p, mu_q, Sigma_q, a)) / (a - 1)


def bhattacharyya(mu_p, Sigma_p, mu_q, Sigma_q) -> torch.Tensor:
    """Bhattacharyya distance −log ∫√(pq) = ½ D_{½,1} between Gaussians.

    Parameters
    ----------
    mu_p, Sigma_p : torch.Tensor
        Mean (..., n) and covariance (..., n, n) of p = N(μ_p, Σ_p).
    mu_q, Sigma_q : torch.Tensor
        Mean and covariance of q = N(μ_q, Σ_q), broadcastable with p's.

    Returns
    -------
    torch.Tensor
        (...,) the value per batch entry.
    """
    return -log_chernoff_coefficient(mu_p, Sigma_p, mu_q, Sigma_q, 0.5)


def kl_divergence(mu_p, Sigma_p, mu_q, Sigma_q) -> torch.Tensor:
    """KL(p‖q) = ½[tr(Σ_q⁻¹Σ_p) + Δμᵀ Σ_q⁻¹ Δμ − n + log|Σ_q| − log|Σ_p|] between Gaussians.

    Parameters
    ----------
    mu_p, Sigma_p : torch.Tensor
        Mean (..., n) and covariance (..., n, n) of p = N(μ_p, Σ_p).
    mu_q, Sigma_q : torch.Tensor
        Mean and covariance of q = N(μ_q, Σ_q), broadcastable with p's.

    Returns
    -------
    torch.Tensor
        (...,) the value per batch entry.
    """
    mu_p, S_p, mu_q, S_q = _check(mu_p, Sigma_p, mu_q, Sigma_q)
    Lp = cholesky_jitter(S_p, "Sigma_p")
    Lq = cholesky_jitter(S_q, "Sigma_q")
    n = S_p.shape[-1]
    A = tri_solve(Lq, Lp)  # Lq⁻¹ Lp: tr(Σ_q⁻¹Σ_p) = ‖Lq⁻¹Lp‖_F²
    w = tri_solve(Lq, (mu_p - mu_q).unsqueeze(-1))
    return 0.5 * ((A * A).sum((-2, -1)) + (w * w).sum((-2, -1)) - n + cho_logdet(Lq) - cho_logdet(Lp))
