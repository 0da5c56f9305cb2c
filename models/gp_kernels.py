"""Shared GP kernels and their ψ-statistics (float64, vectorised).

Kernels
-------
* ARD RBF  ``κ(x, x') = σ² exp(−½ Σ_q a_q (x_q − x'_q)²)``   (``a`` = inverse squared lengthscales)
* ARD linear ``κ(x, x') = Σ_q a_q x_q x'_q``
* RBF time kernel with optional white and bias terms
  ``k(t, t') = σ_t² exp(−½ γ (t − t')²) + σ_w² δ(t, t') + σ_b²`` — the authors' code uses
  ``rbf + white + bias`` for every temporal kernel.

ψ-statistics (Titsias & Lawrence 2010) of a kernel κ under ``q(x_n) = N(μ_n, diag s_n)``,
inducing inputs ``Z`` (M, Q):

* ``psi0 = Σ_n ⟨κ(x_n, x_n)⟩``                     (scalar)
* ``Psi1[n, m] = ⟨κ(x_n, z_m)⟩``                    (N, M)
* ``Psi2 = Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩``               (M, M)  (or per point: (N, M, M))

For the RBF ψ2 the (N, M, M) tensor is formed through the expansion
``(μ − z̄)² = μ² − μ(z + z') + (z + z')²/4`` so that the only (N, M, M) work is one batched
product ``Σ_q c_nq z_mq z_m'q`` and one ``exp`` (no (N, M, M, Q) tensor).
"""
from __future__ import annotations

import torch

__all__ = ["rbf_ard", "linear_ard", "time_kernel", "psi_rbf", "psi_linear", "kernel_matrix",
           "psi_stats"]


def rbf_ard(X1: torch.Tensor, X2: torch.Tensor, variance: torch.Tensor, ard: torch.Tensor) -> torch.Tensor:
    """ARD RBF kernel matrix (N1, N2); ``ard`` (Q,) are inverse squared lengthscales."""
    s = ard.sqrt()
    A, B = X1 * s, X2 * s
    d2 = (A * A).sum(-1)[:, None] + (B * B).sum(-1)[None, :] - 2.0 * A @ B.T
    return variance * torch.exp(-0.5 * d2.clamp_min(0.0))


def linear_ard(X1: torch.Tensor, X2: torch.Tensor, ard: torch.Tensor) -> torch.Tensor:
    """ARD linear kernel ``X1 diag(a) X2ᵀ`` (N1, N2)."""
    return (X1 * ard) @ X2.T


def kernel_matrix(kind: str, X1, X2, variance, ard):
    """Dispatch on ``kind`` in {"rbfard", "linear"} (``variance`` unused for linear)."""
    if kind == "rbfard":
        return rbf_ard(X1, X2, variance, ard)
    if kind == "linear":
        return linear_ard(X1, X2, ard)
    raise ValueError(f"mapping kernel: expected 'rbfard' or 'linear', got {kind!r}")


def time_kernel(t1: torch.Tensor, t2: torch.Tensor, variance, invwidth, white=None, bias=None,
                same: bool = True) -> torch.Tensor:
    """RBF time kernel over batched time vectors.

    ``t1`` (..., n1), ``t2`` (..., n2) -> (..., n1, n2). ``white`` adds ``σ_w² I`` (only when
    ``same``, i.e. ``t1 is t2`` describes the same points), ``bias`` adds a constant.
    """
    d = t1[..., :, None] - t2[..., None, :]
    K = variance * torch.exp(-0.5 * invwidth * d * d)
    if bias is not None:
        K = K + bias
    if white is not None and same:
        K = K + white * torch.eye(t1.shape[-1], dtype=K.dtype, device=K.device)
    return K


def psi_rbf(mu: torch.Tensor, s: torch.Tensor, Z: torch.Tensor, variance: torch.Tensor,
            ard: torch.Tensor, per_point: bool = False):
    """ψ-statistics of the ARD RBF kernel.

    mu, s : (N, Q) means and variances of q(x_n);  Z : (M, Q).
    Returns ``(psi0, Psi1, Psi2)``: scalar, (N, M) and (M, M) — or (N, M, M) when
    ``per_point`` (then ``psi0`` is (N,)).

    ``Psi1[n,m] = σ² Π_q (1 + a_q s_nq)^{-½} exp(−½ a_q (μ_nq − z_mq)² / (1 + a_q s_nq))``
    ``Psi2[m,m'] = σ⁴ Σ_n Π_q (1 + 2a_q s_nq)^{-½}
                   exp(−a_q (z_mq − z_m'q)²/4 − a_q (μ_nq − z̄_q)² / (1 + 2 a_q s_nq))``,
    ``z̄ = (z_m + z_m')/2``.
    """
    N = mu.shape[0]
    # Psi1: (N, M, Q) is small (N·M·Q)
    d1 = 1.0 + ard * s                                              # (N, Q)
    diff = mu[:, None, :] - Z[None, :, :]                            # (N, M, Q)
    log1 = -0.5 * (ard * diff * diff / d1[:, None, :]).sum(-1) - 0.5 * d1.log().sum(-1, keepdim=True)
    Psi1 = variance * torch.exp(log1)
    # Psi2 through the expansion described in the module docstring
    d2 = 1.0 + 2.0 * ard * s                                         # (N, Q)
    c = ard / d2                                                     # (N, Q)
    g = -(c * mu * mu).sum(-1) - 0.5 * d2.log().sum(-1)              # (N,)
    e = (c * mu) @ Z.T - 0.25 * (c @ (Z * Z).T)                      # (N, M)
    zs = Z * ard.sqrt()
    dz2 = ((zs * zs).sum(-1)[:, None] + (zs * zs).sum(-1)[None, :] - 2.0 * zs @ zs.T).clamp_min(0.0)
    pref = (variance * variance) * torch.exp(-0.25 * dz2)            # (M, M)
    if per_point:
        cross = torch.einsum("nq,mq,pq->nmp", c, Z, Z)               # (N, M, M)
        expo = g[:, None, None] + e[:, :, None] + e[:, None, :] - 0.5 * cross
        return variance.expand(N), Psi1, pref * torch.exp(expo)
    return N * variance, Psi1, pref * _Psi2Sum.apply(g, e, c, Z)


class _Psi2Sum(torch.autograd.Function):
    """``S[m,p] = Σ_n exp(g_n + e_nm + e_np − ½ Σ_q c_nq z_mq z_pq)`` (M, M), in chunks of n.

    Hand-written backward (with ``H = sym(∂L/∂S)``, ``R_nmp = H_mp E_nmp``,
    ``T_nmq = Σ_p R_nmp z_pq``): ``∂g_n = Σ_mp R_nmp``, ``∂e_nm = 2 Σ_p R_nmp``,
    ``∂c_nq = −½ Σ_m z_mq T_nmq``, ``∂z_mq = −Σ_n c_nq T_nmq`` — two batched products and one
    ``exp`` per chunk instead of autograd's dozen (N, M, M) temporaries.
    """
    CHUNK = 48

    @staticmethod
    def _E(g, e, c, Z):
        cross = (c[:, None, :] * Z[None]) @ Z.T                      # (n, M, M)
        return torch.exp(g[:, None, None] + e[:, :, None] + e[:, None, :] - 0.5 * cross)

    @staticmethod
    def forward(ctx, g, e, c, Z):
        ctx.save_for_backward(g, e, c, Z)
        S = Z.new_zeros(Z.shape[0], Z.shape[0])
        for i in range(0, g.shape[0], _Psi2Sum.CHUNK):
            sl = slice(i, i + _Psi2Sum.CHUNK)
            S += _Psi2Sum._E(g[sl], e[sl], c[sl], Z).sum(0)
        return S

    @staticmethod
    def backward(ctx, G):
        g, e, c, Z = ctx.saved_tensors
        H = 0.5 * (G + G.mT)
        dg, de, dc = torch.empty_like(g), torch.empty_like(e), torch.empty_like(c)
        dZ = torch.zeros_like(Z)
        for i in range(0, g.shape[0], _Psi2Sum.CHUNK):
            sl = slice(i, i + _Psi2Sum.CHUNK)
            R = _Psi2Sum._E(g[sl], e[sl], c[sl], Z) * H
            rs = R.sum(-1)                                            # (n, M)
            dg[sl] = rs.sum(-1)
            de[sl] = 2.0 * rs
            T = R @ Z                                                 # (n, M, Q)
            dc[sl] = -0.5 * (T * Z).sum(1)
            dZ -= (c[sl][:, None, :] * T).sum(0)
        return dg, de, dc, dZ


def psi_linear(mu: torch.Tensor, s: torch.Tensor, Z: torch.Tensor, ard: torch.Tensor,
               per_point: bool = False):
    """ψ-statistics of the ARD linear kernel ``κ(x,x') = Σ_q a_q x_q x'_q``.

    ``psi0 = Σ_nq a_q (μ_nq² + s_nq)``, ``Psi1 = μ diag(a) Zᵀ``,
    ``Psi2 = Σ_n (Z a)(μ_n μ_nᵀ + diag s_n)(Z a)ᵀ``.
    """
    Za = Z * ard                                                     # (M, Q)
    Psi1 = mu @ Za.T
    if per_point:
        psi0 = ((mu * mu + s) * ard).sum(-1)
        Psi2 = Psi1[:, :, None] * Psi1[:, None, :] + torch.einsum("mq,nq,pq->nmp", Za, s, Za)
        return psi0, Psi1, Psi2
    psi0 = ((mu * mu + s) * ard).sum()
    Psi2 = Psi1.T @ Psi1 + (Za * s.sum(0)) @ Za.T
    return psi0, Psi1, Psi2


def psi_stats(kind: str, mu, s, Z, variance, ard, per_point: bool = False):
    """Dispatch on ``kind`` in {"rbfard", "linear"}."""
    if kind == "rbfard":
        return psi_rbf(mu, s, Z, variance, ard, per_point)
    if kind == "linear":
        return psi_linear(mu, s, Z, ard, per_point)
    raise ValueError(f"mapping kernel: expected 'rbfard' or 'linear', got {kind!r}")
