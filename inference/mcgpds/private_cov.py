"""The private covariances of McGPDS's q(X): ``diag S`` and ``log|B_q|`` without cancellation.

``q(x_q^(k)) = N(μ, S)`` with ``S = (A⁻¹ + Λ)⁻¹`` per view k, latent dimension q and block of
frames (sequence or window); ``A = α² K_t + (1 − α)² ε I`` the private prior covariance and
``Λ = diag λ`` the variational precisions. With ``B = I + Λ^½ A Λ^½ = L_B L_Bᵀ`` (well
conditioned whatever A is), ``log|B|`` and ``diag S`` give the KL's private terms
(``tr B⁻¹ − n = −Σ λ_n S_nn``) and the variances the ψ-statistics need.
"""
from __future__ import annotations

import torch

from tandem.inference.numerics import cho_logdet, cholesky_jitter

__all__ = ["PRIVATE_VAR_SWITCH", "private_cov_terms", "private_var_diag"]


#: ``λ A`` above which :func:`private_var_diag` computes ``diag S`` from ``diag B⁻¹`` (the plain
#: subtraction's relative error, ≈ eps·(1 + λA), would exceed ≈ 1e-12)
PRIVATE_VAR_SWITCH = 1e4


def private_var_diag(A_diag: torch.Tensor, T: torch.Tensor, LB: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """``diag S`` of ``S = (A⁻¹ + Λ)⁻¹ = A − TᵀT`` without the cancellation of large λ.

    ``T = L_B⁻¹ Λ^½ A`` with ``B = I + Λ^½ A Λ^½ = L_B L_Bᵀ``. The subtraction
    ``S_nn = A_nn − ‖T_·n‖²`` loses everything once ``λ_n A_nn`` is large: ``S_nn ≈ 1/λ_n`` is
    then the difference of two O(A_nn) numbers, so it comes out as rounding noise of size
    ``eps·A_nn``, and the KL term ``Σ λ_n S_nn`` (``= N − tr B⁻¹``, at most N) can become
    ``λ_n · noise`` — astronomically large for ``λ ≫ 1/eps``, an "improvement" that an optimiser
    of the bound then follows (a 10⁵-frame stochastic fit reached λ ≈ e⁴⁰⁴ and a bound of 10¹⁶³).
    Since ``Λ^½ S Λ^½ = I − B⁻¹``, where ``λ_n A_nn >`` :data:`PRIVATE_VAR_SWITCH` this returns
    ``S_nn = (1 − (B⁻¹)_nn) / λ_n`` instead, with ``(B⁻¹)_nn = ‖(L_B⁻¹)_·n‖²``: B is Λ^½-scaled,
    so its Cholesky gives ``(B⁻¹)_nn`` to relative precision, ``1 − (B⁻¹)_nn`` is close to 1 (no
    cancellation), and ``λ_n S_nn`` is exact to rounding. Below the switch the subtraction's
    relative error is about ``eps (1 + λ_n A_nn)`` ≤ 1e-12. When no entry is above it only the
    subtraction runs (no extra triangular solve), so ordinary evaluations are unchanged bit for bit.

    Parameters
    ----------
    A_diag : torch.Tensor
        (…, n) diagonal of A, broadcast against ``lam``.
    T : torch.Tensor
        (…, n, n) ``L_B⁻¹ Λ^½ A``.
    LB : torch.Tensor
        (…, n, n) lower Cholesky factor of B.
    lam : torch.Tensor
        (…, n) the precisions λ ≥ 0.

    Returns
    -------
    torch.Tensor
        (…, n) ``diag S`` (≥ 0).
    """
    sdiag = A_diag - (T * T).sum(-2)
    big = lam * A_diag > PRIVATE_VAR_SWITCH
    if not bool(big.any()):
        return sdiag
    # only the matrices with an entry above the switch get the extra triangular solve (a few %
    # of a trained fit's (view, q, block) matrices; the others keep the subtraction)
    n = LB.shape[-1]
    shape = sdiag.shape
    big_f = big.expand(shape).reshape(-1, n)
    rows = big_f.any(-1).nonzero().squeeze(1)
    LB_r = LB.expand(*shape[:-1], n, n).reshape(-1, n, n)[rows]
    eye = torch.eye(n, dtype=LB.dtype, device=LB.device)
    U = torch.linalg.solve_triangular(LB_r, eye.expand_as(LB_r), upper=False)    # L_B⁻¹
    one_minus = 1.0 - (U * U).sum(-2)                                            # λ_n S_nn = 1 − (B⁻¹)_nn
    b_r = big_f[rows]
    lam_r = torch.where(b_r, lam.expand(shape).reshape(-1, n)[rows], torch.ones_like(one_minus))
    sd_f = sdiag.reshape(-1, n)
    sd_f = sd_f.index_put((rows,), torch.where(b_r, one_minus / lam_r, sd_f[rows]))
    return sd_f.reshape(shape).clamp_min(0.0)


class _PrivateCov(torch.autograd.Function):
    """``(log|I + Λ^½ A Λ^½|, diag S)`` with ``S = (A⁻¹ + Λ)⁻¹`` for a constant ``A``.

    A (V, nb, n, n), lam (V, Q, nb, n) -> (V, Q, nb), (V, Q, nb, n). Backward in closed form:
    ``∂ log|B| / ∂λ_i = S_ii`` and ``∂ S_jj / ∂λ_i = −S_ij²``, so
    ``∂L/∂λ = ḡ_ld · diag S − (S ∘ S) ḡ_diag`` — one batched product ``S = A − TᵀT`` instead of
    differentiating through the Cholesky and the triangular solve.
    """

    @staticmethod
    def forward(ctx, A, lam):
        n = A.shape[-1]
        sl = lam.sqrt()
        slA = sl[..., :, None] * A[:, None]
        B = torch.eye(n, dtype=A.dtype, device=A.device) + slA * sl[..., None, :]
        LB = cholesky_jitter(B, "B_q = I + Λ^½ A Λ^½", assume_symmetric=True)   # A checked when factorised
        T = torch.linalg.solve_triangular(LB, slA, upper=False)
        sdiag = private_var_diag(A.diagonal(dim1=-2, dim2=-1)[:, None], T, LB, lam)
        ctx.save_for_backward(A, T, sdiag)
        return cho_logdet(LB), sdiag

    @staticmethod
    def backward(ctx, g_ld, g_sd):
        A, T, sdiag = ctx.saved_tensors
        S = A[:, None] - T.mT @ T
        g_lam = g_ld[..., None] * sdiag - ((S * S) @ g_sd[..., None])[..., 0]
        return None, g_lam


class _PrivateCovInv(torch.autograd.Function):
    """``(log|A⁻¹ + Λ|, diag S)`` with ``S = (A⁻¹ + Λ)⁻¹`` for a constant, well-conditioned ``A``.

    Ainv (V, nb, n, n), lam (V, Q, nb, n) -> (V, Q, nb), (V, Q, nb, n). The same quantities
    as :class:`_PrivateCov` (``log|B_q| = log|A| + log|A⁻¹ + Λ|``) from one Cholesky and one
    ``cholesky_inverse`` (≈ n³ per matrix instead of ≈ 2.3 n³ for Cholesky + triangular solve
    with a full right-hand side + the backward's ``TᵀT``); the full ``S`` it keeps gives the
    backward ``∂L/∂λ = ḡ_ld · diag S − (S ∘ S) ḡ_diag`` directly.
    """

    @staticmethod
    def forward(ctx, Ainv, lam):
        n = Ainv.shape[-1]
        # A⁻¹ + Λ written once (no (…, n, n) diagonal matrix), and S written over L_P: two
        # (V, Q, nb, n, n) stacks per call instead of four (each a fresh, page-faulted allocation
        # at pose's sizes); the same bits as Ainv + diag_embed(λ) and a separate cholesky_inverse
        P = Ainv[:, None].expand(*lam.shape[:-1], n, n).clone()
        P.diagonal(dim1=-2, dim2=-1).add_(lam)
        LP = cholesky_jitter(P, "A⁻¹ + Λ", assume_symmetric=True)    # A⁻¹ from cholesky_inverse: exactly symmetric
        del P
        logdet = cho_logdet(LP)
        S = torch.cholesky_inverse(LP, out=LP)                       # LAPACK potri works in place
        sdiag = S.diagonal(dim1=-2, dim2=-1).clone()
        ctx.save_for_backward(S, sdiag)
        return logdet, sdiag

    @staticmethod
    def backward(ctx, g_ld, g_sd):
        S, sdiag = ctx.saved_tensors
        g_lam = g_ld[..., None] * sdiag - ((S * S) @ g_sd[..., None])[..., 0]
        return None, g_lam


def private_cov_terms(prior: dict, lam: torch.Tensor, sqrt_lam: torch.Tensor | None = None):
    """``(log|B_q|, diag S)`` of every (view, q, block) from the prior factors of the blocks.

    ``B_q = I + Λ^½ A Λ^½``, ``S = (A⁻¹ + Λ)⁻¹``. Three forms, by what ``prior`` (a
    :func:`tandem.inference.mcgpds.prior_factors.block_prior_factors` result) says about A:

    * A requires a gradient, or its conditioning was not decided (``Ainv_ok`` None): the Cholesky
      of ``B_q``, a triangular solve and :func:`private_var_diag`, differentiated by autograd;
    * A constant and well conditioned: ``log|A| + log|A⁻¹ + Λ|`` and ``cholesky_inverse`` with a
      closed-form backward (:class:`_PrivateCovInv`, ≈ 3× fewer flops);
    * A constant, ill-conditioned: the ``B_q`` form with a closed-form backward (:class:`_PrivateCov`).

    Parameters
    ----------
    prior : dict
        ``A`` (V, nb, n, n), ``Ainv``, ``logdetA`` (V, nb), ``Ainv_ok``. A is taken to be
        symmetric (:func:`~tandem.inference.mcgpds.prior_factors.block_prior_factors` checks it
        when it factorises A; ``Ainv`` comes from ``torch.cholesky_inverse``), so ``B_q`` and
        ``A⁻¹ + Λ`` are factorised without a second symmetry check.
    lam : torch.Tensor
        (V, Q, nb, n) precisions λ ≥ 0 (0 at padding).
    sqrt_lam : torch.Tensor, optional
        √λ for the autograd form, where the caller guards its derivative at λ = 0 (default
        ``lam.sqrt()``).

    Returns
    -------
    logdetB : torch.Tensor
        (V, Q, nb).
    sdiag : torch.Tensor
        (V, Q, nb, n).
    """
    A = prior["A"]
    if A.requires_grad or prior["Ainv_ok"] is None:
        sl = lam.sqrt() if sqrt_lam is None else sqrt_lam
        slA = sl[..., :, None] * A[:, None]                    # Λ^½ A   (V, Q, nb, n, n)
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        LB = cholesky_jitter(eye + slA * sl[..., None, :], "B_q = I + Λ^½ A Λ^½", assume_symmetric=True)
        T = torch.linalg.solve_triangular(LB, slA, upper=False)    # L_B⁻¹ Λ^½ A
        return cho_logdet(LB), private_var_diag(A.diagonal(dim1=-2, dim2=-1)[:, None], T, LB, lam)
    if prior["Ainv_ok"]:
        logdetP, sdiag = _PrivateCovInv.apply(prior["Ainv"], lam)
        return prior["logdetA"][:, None] + logdetP, sdiag
    return _PrivateCov.apply(A, lam)
