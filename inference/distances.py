"""Pairwise distances, nearest neighbours, kernel widths and column scaling — one of each.

Every paper needs squared Euclidean distances between rows (k-NN baselines, heat-kernel
graphs, nearest-neighbour predictors, kernel widths). They are computed here once, for
numpy arrays and torch tensors alike (the result has the input's type), as
``‖a‖² + ‖b‖² − 2 aᵀb`` from one matrix product, clamped at 0 against rounding.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

__all__ = ["sq_dists", "nan_sq_dists", "knn", "nearest", "median_distance", "standardize", "Standardizer"]


def sq_dists(A, B=None):
    """Squared Euclidean distances between the rows of A (n, d) and B (m, d) → (n, m).

    Works batched on torch tensors (..., n, d) × (..., m, d). ``B=None`` means B = A, and
    then the diagonal is exactly 0.
    """
    same = B is None
    if isinstance(A, torch.Tensor):
        B = A if same else torch.as_tensor(B, dtype=A.dtype, device=A.device)
        nA, nB = (A * A).sum(-1).unsqueeze(-1), (B * B).sum(-1).unsqueeze(-2)
        D = (nA + nB - 2.0 * A @ B.transpose(-1, -2)).clamp_min(0.0)
        if same:
            D = D - torch.diag_embed(D.diagonal(dim1=-2, dim2=-1))
        return D
    A = np.asarray(A, dtype=np.float64)
    B = A if same else np.asarray(B, dtype=np.float64)
    D = (A * A).sum(-1)[..., :, None] + (B * B).sum(-1)[..., None, :] - 2.0 * A @ np.swapaxes(B, -1, -2)
    np.maximum(D, 0.0, out=D)
    if same:
        idx = np.arange(D.shape[-1])
        D[..., idx, idx] = 0.0
    return D


def nan_sq_dists(A, B):
    """Squared distances between rows of A (n, F) and B (m, F) that may hold NaN (missing):
    over the jointly observed coordinates, rescaled to F coordinates,
    ``F Σ_j o_aj o_bj (a_j − b_j)² / Σ_j o_aj o_bj`` (``inf`` where no coordinate is observed in
    both); without NaN this is :func:`sq_dists`. numpy or torch (n, m)."""
    if isinstance(A, torch.Tensor):
        B = torch.as_tensor(B, dtype=A.dtype, device=A.device)
        oa, ob = (~torch.isnan(A)).to(A.dtype), (~torch.isnan(B)).to(A.dtype)
        a0, b0 = torch.nan_to_num(A), torch.nan_to_num(B)
        num = (a0 * a0) @ ob.mT + oa @ (b0 * b0).mT - 2 * a0 @ b0.mT
        cnt = oa @ ob.mT
        return torch.where(cnt > 0, A.shape[-1] * num.clamp_min(0) / cnt.clamp_min(1), torch.full_like(num, np.inf))
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    oa, ob = (~np.isnan(A)).astype(np.float64), (~np.isnan(B)).astype(np.float64)
    a0, b0 = np.nan_to_num(A), np.nan_to_num(B)
    num = (a0 * a0) @ ob.T + oa @ (b0 * b0).T - 2 * a0 @ b0.T
    cnt = oa @ ob.T
    return np.where(cnt > 0, A.shape[-1] * np.maximum(num, 0) / np.maximum(cnt, 1), np.inf)


def _has_nan(X) -> bool:
    if X is None:
        return False
    return bool(torch.isnan(X).any()) if isinstance(X, torch.Tensor) else bool(np.isnan(np.asarray(X, float)).any())


def knn(A, B=None, k: int = 1, exclude_self: bool = False):
    """(n, k) indices into B of the k nearest rows of B to each row of A, nearest first.

    Rows with NaN (missing) entries are compared on their jointly observed coordinates
    (:func:`nan_sq_dists`). ``B=None`` searches A itself; ``exclude_self`` (only with B=None) skips each point's
    own row. Ties are broken by the lower index (stable sort), so results are
    deterministic. Returns the input's type (numpy int64 array or torch long tensor).
    """
    if (_has_nan(A) or _has_nan(B)) and np.ndim(A) == 2:
        D = nan_sq_dists(A, A if B is None else B)       # NaN = missing: jointly observed coordinates
    else:
        D = sq_dists(A, B)
    m = D.shape[-1] - (1 if exclude_self else 0)
    if not 1 <= k <= m:
        raise ValueError(f"k: expected 1 <= k <= {m} (the number of candidate neighbours), got {k}")
    if exclude_self:
        if B is not None:
            raise ValueError("exclude_self: only meaningful when B is None (searching A itself)")
        inf = float("inf")
        if isinstance(D, torch.Tensor):
            D = D.clone()
            D.diagonal(dim1=-2, dim2=-1).fill_(inf)
        else:
            np.fill_diagonal(D, inf)
    if isinstance(D, torch.Tensor):
        return torch.sort(D, dim=-1, stable=True).indices[..., :k]
    return np.argsort(D, axis=-1, kind="stable")[..., :k]


def nearest(A, B=None, exclude_self: bool = False):
    """(n,) index into B of the nearest row of B to each row of A (see :func:`knn`)."""
    return knn(A, B, 1, exclude_self)[..., 0]


def median_distance(Z, max_points: int = 2000, seed: int = 0) -> float:
    """Median Euclidean distance between distinct rows of Z (the usual kernel width).

    At most ``max_points`` rows are used (a seeded subsample without replacement), so the
    cost is O(max_points²). If every distance is 0 (all rows equal) the width is 1.0, so a
    kernel built from it stays well defined.
    """
    Z = np.asarray(Z.detach().cpu() if isinstance(Z, torch.Tensor) else Z, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] < 2:
        raise ValueError(f"Z: expected a 2-D array with at least 2 rows, got shape {Z.shape}")
    if Z.shape[0] > max_points:
        Z = Z[np.random.default_rng(seed).choice(Z.shape[0], max_points, replace=False)]
    iu = np.triu_indices(Z.shape[0], 1)
    med = float(np.sqrt(np.median(sq_dists(Z)[iu])))
    return med if med > 0 else 1.0


class Standardizer:
    """Column standardisation ``z = (x − mean) / scale`` and its inverse.

    ``per="column"``: ``scale`` is each column's standard deviation (ddof 0); a constant
    column gets scale 1 (it is only centred), so the map is always invertible.
    ``per="matrix"``: one scale for every column, the root mean of the column variances
    (keeps the columns' relative sizes; 1 if every column is constant). Fitted models use it to be
    invariant to the data's units: fit on z, map predictions back with :meth:`inverse`
    and predictive variances with :meth:`inverse_var`. NaN entries (missing) are ignored:
    each column's mean and standard deviation are those of its observed entries.
    """

    def __init__(self, X, center: bool = True, per: str = "column"):
        if per not in ("column", "matrix"):
            raise ValueError(f"per: expected 'column' or 'matrix', got {per!r}")
        is_t = isinstance(X, torch.Tensor)
        Xa = X.detach() if is_t else np.asarray(X, dtype=np.float64)
        if Xa.ndim != 2 or Xa.shape[0] < 1:
            raise ValueError(f"X: expected a 2-D array with at least one row, got shape {tuple(Xa.shape)}")
        if (torch.isnan(Xa).any() if is_t else np.isnan(Xa).any()):
            # NaN = missing: statistics over each column's observed entries (an empty column: 0, 1)
            with warnings.catch_warnings():            # numpy: "mean of empty slice" for an empty column
                warnings.simplefilter("ignore", RuntimeWarning)
                cm = Xa.nanmean(0).nan_to_num(0.0) if is_t else np.nan_to_num(np.nanmean(Xa, 0))
                dev = Xa - cm
                std = ((dev * dev).nanmean(0).nan_to_num(0.0).sqrt() if is_t
                       else np.sqrt(np.nan_to_num(np.nanmean(dev * dev, 0))))
            mean = cm if center else cm * 0
        else:
            mean = Xa.mean(0) if center else Xa[0] * 0
            std = Xa.std(0, unbiased=False) if is_t else Xa.std(0)
        if per == "matrix":
            rms = (std ** 2).mean() ** 0.5
            std = std * 0 + rms
        scale = torch.where(std > 0, std, torch.ones_like(std)) if is_t else np.where(std > 0, std, 1.0)
        self.mean, self.scale = mean, scale

    def transform(self, X):
        return (X - self.mean) / self.scale

    def inverse(self, Z):
        return Z * self.scale + self.mean

    def inverse_var(self, V):
        return V * self.scale ** 2


def standardize(X, center: bool = True, per: str = "column"):
    """``(Z, standardizer)``: X with zero-mean, unit-variance columns (see :class:`Standardizer`)."""
    s = Standardizer(X, center, per)
    return s.transform(X), s
