"""Array kernels of one batched twin-GP evaluation: the (b, n) rows every objective call builds and multiplies.

The batched predictor (:class:`~tandem.inference.twin_gp.predictor.TwinGP`) evaluates all active
test points at once; each call forms K_y (b, n) for the current outputs, multiplies rows by a
shared (n, m) matrix or by per-point (b, n, m) matrices of the local model, and takes row-wise
dot products. Every objective evaluation spends its time here, so each helper keeps the step
to one batched BLAS call where it can (K_y against shared outputs is one ``addmm`` finished in
place; row-wise dots are one ``bmm``) and says where it pays for a copy instead.
"""
from __future__ import annotations

import torch


def _mv(V: torch.Tensor, A: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Rows of V (b, n) times a symmetric A: shared (n, m) → V A; per point (b, n, m) → bmm.

    ``rows`` (b,): row r of V belongs to matrix A[rows[r]] of a larger stack (B', n, m);
    the product then runs over the whole stack with zero rows elsewhere (the row cache of
    :meth:`~tandem.inference.twin_gp.predictor.TwinGP.predict` keeps B' ≤ 2b), which is
    cheaper than gathering A[rows]: a copy of a per-point matrix costs several times the
    matrix-vector product it feeds."""
    if A.dim() == 2:
        return V @ A
    if rows is None:
        return torch.bmm(V.unsqueeze(1), A).squeeze(1)
    full = V.new_zeros(A.shape[0], V.shape[1])
    full[rows] = V
    return torch.bmm(full.unsqueeze(1), A).squeeze(1)[rows]


class _RowCache:
    """The local model's per-point matrices W (B, n, m) for a shrinking set of active test
    points: re-gathered (one copy of the surviving rows) only when the active set has fallen
    to half of the rows held, so all the copying of a run is at most B rows in all."""

    def __init__(self, W: torch.Tensor):
        self.W = W
        self.idx = torch.arange(W.shape[0], device=W.device)

    def shrink_to(self, active: torch.Tensor) -> None:
        if 2 * active.numel() <= self.idx.numel():
            self.W = self.W[self.positions(active)]
            self.idx = active

    def positions(self, idx: torch.Tensor) -> torch.Tensor:
        """Where the (sorted) points ``idx`` sit among the rows held."""
        return torch.searchsorted(self.idx, idx)


def _kvec(y: torch.Tensor, Yt: torch.Tensor, rho: float) -> torch.Tensor:
    """K_y (b, n): shared training outputs Yt (n, d) or per-point neighbours (b, n, d).

    Shared case fused into one ``addmm`` and in-place passes (this runs once per objective
    evaluation on a (b, n) array): ‖y‖² + ‖Y_i‖² − 2 yᵀY_i, clamped at 0, → exp(−·/(2ρ²))."""
    if Yt.dim() == 2:
        sq = torch.addmm((y * y).sum(1, keepdim=True), y, Yt.T, alpha=-2.0)
        sq.add_((Yt * Yt).sum(1)).clamp_min_(0.0)
        return sq.mul_(-1.0 / (2.0 * rho * rho)).exp_()
    sq = ((y.unsqueeze(1) - Yt) ** 2).sum(-1)
    return torch.exp(-sq / (2.0 * rho * rho))


def _rowdot(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Row-wise dot products Σ_n A[b, n] B[b, n] → (b,), as one batched product (no (b, n)
    temporary)."""
    return torch.bmm(A.unsqueeze(1), B.unsqueeze(2)).view(-1)
