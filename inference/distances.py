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

from tandem.inference.validation import check_int_range, check_seed

__all__ = ["sq_dists", "nan_sq_dists", "knn", "nearest", "median_distance", "standardize", "Standardizer",
           "constant_columns"]


def sq_dists(A, B=None):
    """Squared Euclidean distances between the rows of A and B.

    Parameters
    ----------
    A : numpy.ndarray or torch.Tensor
        (n, d), or batched (..., n, d) tensors.
    B : numpy.ndarray or torch.Tensor, optional
        (m, d) or (..., m, d); ``None`` means B = A, and then the diagonal is exactly 0.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        (n, m) (or (..., n, m)) distances ‖a_i − b_j‖², clipped at 0, of the input's type.
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
    """Squared distances between rows that may hold NaN (missing), over the jointly observed coordinates.

    F Σ_j o_aj o_bj (a_j − b_j)² / Σ_j o_aj o_bj, rescaled to F coordinates; ``inf`` where no
    coordinate is observed in both rows. Without NaN this is :func:`sq_dists`.

    Parameters
    ----------
    A : numpy.ndarray or torch.Tensor
        (n, F) rows.
    B : numpy.ndarray or torch.Tensor
        (m, F) rows.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        (n, m) distances, of A's type.
    """
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
    """Indices of the k nearest rows of B to each row of A, nearest first.

    Ties are broken by the lower index (stable sort), so results are deterministic. Rows with
    NaN (missing) entries are compared on their jointly observed coordinates
    (:func:`nan_sq_dists`).

    Parameters
    ----------
    A : numpy.ndarray or torch.Tensor
        (n, d) query rows.
    B : numpy.ndarray or torch.Tensor, optional
        (m, d) rows searched; ``None`` searches A itself.
    k : int, default 1
        Number of neighbours.
    exclude_self : bool, default False
        With ``B=None``: skip each point's own row.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        (n, k) indices into B (numpy int64 array or torch long tensor, as the input).
    """
    if (_has_nan(A) or _has_nan(B)) and np.ndim(A) == 2:
        D = nan_sq_dists(A, A if B is None else B)       # NaN = missing: jointly observed coordinates
    else:
        D = sq_dists(A, B)
    m = D.shape[-1] - (1 if exclude_self else 0)
    k = check_int_range(k, f"k (neighbours; {m} candidates)", 1, m)
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
    """Index of the nearest row of B to each row of A (see :func:`knn`).

    Parameters
    ----------
    A : numpy.ndarray or torch.Tensor
        (n, d) query rows.
    B : numpy.ndarray or torch.Tensor, optional
        (m, d) rows searched; ``None`` searches A itself.
    exclude_self : bool, default False
        With ``B=None``: skip each point's own row.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        (n,) indices into B.
    """
    return knn(A, B, 1, exclude_self)[..., 0]


def median_distance(Z, max_points: int = 2000, seed: int = 0) -> float:
    """Median Euclidean distance between distinct rows of Z (the usual kernel width).

    Parameters
    ----------
    Z : array_like
        (n, d) points.
    max_points : int, default 2000
        At most this many rows are used (a seeded subsample without replacement), so the cost is
        O(max_points²).
    seed : int, default 0
        Seed of the subsample.

    Returns
    -------
    float
        The median distance; 1.0 if every distance is 0 (all rows equal), so a kernel built
        from it stays well defined.
    """
    seed = check_seed(seed)
    max_points = check_int_range(max_points, "max_points", 2)   # the median needs a pair
    Z = np.asarray(Z.detach().cpu() if isinstance(Z, torch.Tensor) else Z, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] < 2:
        raise ValueError(f"Z: expected a 2-D array with at least 2 rows, got shape {Z.shape}")
    if Z.shape[0] > max_points:
        Z = Z[np.random.default_rng(seed).choice(Z.shape[0], max_points, replace=False)]
    iu = np.triu_indices(Z.shape[0], 1)
    med = float(np.sqrt(np.median(sq_dists(Z)[iu])))
    return med if med > 0 else 1.0


def constant_columns(X):
    """Mask of the columns of X that are constant up to rounding.

    A column is constant when its spread max − min is at most 16 ε · max|x| (ε the float64
    machine epsilon): its values then differ by a few units in the last place at most. Its
    computed standard deviation is rounding noise (e.g. 2.8e-17 for a column of 0.1s), which must
    not be divided by.

    Parameters
    ----------
    X : numpy.ndarray or torch.Tensor
        (n, d) data, n ≥ 1.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        (d,) bool mask, of the input's type.

    Raises
    ------
    ValueError
        If X is not 2-d with at least one row.
    """
    is_t = isinstance(X, torch.Tensor)
    Xa = X.detach() if is_t else np.asarray(X, dtype=np.float64)
    if Xa.ndim != 2 or Xa.shape[0] < 1:
        raise ValueError(f"X: expected a 2-D array with at least one row, got shape {tuple(Xa.shape)}")
    if is_t:
        hi, lo = Xa.amax(0), Xa.amin(0)
        return (hi - lo) <= 16 * torch.finfo(torch.float64).eps * torch.maximum(hi.abs(), lo.abs())
    hi, lo = Xa.max(0), Xa.min(0)
    return (hi - lo) <= 16 * np.finfo(np.float64).eps * np.maximum(np.abs(hi), np.abs(lo))


# standard deviations in [_SAFE_LO, _SAFE_HI] come from squares that neither overflow nor lose
# digits to underflow (subnormals start at 2.2e-308); outside it they are recomputed on rescaled data
_SAFE_LO, _SAFE_HI = 1e-140, 1e140


def _rescaled_std(dev, axis: int, is_t: bool):
    """Standard deviation along ``axis`` of the deviations ``dev`` (NaN = missing), computed on
    dev / max|dev| so that nothing is squared beyond float64's range (values beyond ≈1e±154)."""
    if is_t:
        m = dev.abs().nan_to_num(0.0).amax(axis, keepdim=True)
        m = torch.where(m > 0, m, torch.ones_like(m))
        q = dev / m
        return (q * q).nanmean(axis).nan_to_num(0.0).sqrt() * m.squeeze(axis)
    m = np.nanmax(np.abs(dev), axis=axis, keepdims=True) if dev.size else np.ones(1)
    m = np.where(np.isfinite(m) & (m > 0), m, 1.0)
    q = dev / m
    with warnings.catch_warnings():            # an all-missing column: "mean of empty slice"
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.sqrt(np.nan_to_num(np.nanmean(q * q, axis))) * np.squeeze(m, axis)


def _rescaled_mean(x, axis: int, is_t: bool):
    """Mean along ``axis`` (NaN = missing) computed on x / max|x|: the plain sum overflows for
    values near float64's maximum."""
    if is_t:
        m = x.abs().nan_to_num(0.0).amax(axis, keepdim=True)
        m = torch.where(m > 0, m, torch.ones_like(m))
        return (x / m).nanmean(axis).nan_to_num(0.0) * m.squeeze(axis)
    m = np.nanmax(np.abs(x), axis=axis, keepdims=True)
    m = np.where(np.isfinite(m) & (m > 0), m, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nan_to_num(np.nanmean(x / m, axis)) * np.squeeze(m, axis)


class Standardizer:
    """Column standardisation z = (x − mean) / scale and its inverse.

    Fitted models use it to be invariant to the data's units: fit on z, map predictions back
    with :meth:`inverse` and predictive variances with :meth:`inverse_var`.

    Parameters
    ----------
    X : array_like
        (n, d) data the map is fitted on.
    center : bool, default True
        Subtract the column means (otherwise mean = 0).
    per : {"column", "matrix"}, default "column"
        ``"column"``: ``scale`` is each column's standard deviation (ddof 0); a constant column
        (:func:`constant_columns`: constant up to rounding) gets scale 1 and is centred on its
        first value (so it maps to exact zeros), so the map is always invertible and never
        divides by a rounding-level std. ``"matrix"``: one scale for every column, the root
        mean of the column variances (keeps the columns' relative sizes; 1 if every column is
        constant).
    skip_constant : bool, default False
        With ``per="matrix"``, the mean runs over the non-constant columns only, so appending
        constant columns leaves the scale unchanged.

    Notes
    -----
    NaN entries (missing) are ignored: each column's mean and standard deviation are those of
    its observed entries (a column with none observed: mean 0, scale 1).

    Any finite magnitude works: a mean that overflows, or a standard deviation outside
    [1e-140, 1e140] (whose squares over- or underflow beyond ≈1e±154), is recomputed on the
    column divided by its largest magnitude, so data in units of 1e-200 or 1e160 standardise
    like data in units of 1 (ordinary data take the plain formulas, unchanged).
    """

    def __init__(self, X, center: bool = True, per: str = "column", skip_constant: bool = False):
        if per not in ("column", "matrix"):
            raise ValueError(f"per: expected 'column' or 'matrix', got {per!r}")
        is_t = isinstance(X, torch.Tensor)
        Xa = X.detach() if is_t else np.asarray(X, dtype=np.float64)
        if Xa.ndim != 2 or Xa.shape[0] < 1:
            raise ValueError(f"X: expected a 2-D array with at least one row, got shape {tuple(Xa.shape)}")
        has_nan = bool(torch.isnan(Xa).any()) if is_t else bool(np.isnan(Xa).any())
        if has_nan:
            # NaN = missing: statistics over each column's observed entries (an empty column: 0, 1)
            with warnings.catch_warnings():            # numpy: "mean of empty slice" for an empty column
                warnings.simplefilter("ignore", RuntimeWarning)
                cm = Xa.nanmean(0).nan_to_num(0.0) if is_t else np.nan_to_num(np.nanmean(Xa, 0))
                # (nan_to_num turned an overflowed sum's inf into float64's maximum)
                if bool((abs(cm) >= np.finfo(np.float64).max).any()):
                    cm = _rescaled_mean(Xa, 0, is_t)   # the sum overflowed (values near float64's maximum)
                dev = Xa - cm
                with np.errstate(over="ignore", under="ignore"):   # (out of range: recomputed in _safe)
                    std = ((dev * dev).nanmean(0).nan_to_num(0.0).sqrt() if is_t
                           else np.sqrt(np.nan_to_num(np.nanmean(dev * dev, 0))))
                    std = self._safe(std, dev, 0, is_t)
            mean = cm if center else cm * 0
            Xc = torch.where(torch.isnan(Xa), cm, Xa) if is_t else np.where(np.isnan(Xa), cm, Xa)
        else:
            # statistics row by row of the contiguous transpose: each column's sums then run in
            # the same order whatever the other columns are (a reduction over dim 0 of an
            # (n, d) array vectorises across columns, so its rounding depends on d)
            XT = Xa.T.contiguous() if is_t else np.ascontiguousarray(Xa.T)
            with np.errstate(over="ignore", under="ignore"):   # (out of range: recomputed below)
                cm = XT.mean(1)
                if not (bool(torch.isfinite(cm).all()) if is_t else bool(np.isfinite(cm).all())):
                    cm = _rescaled_mean(XT, 1, is_t)   # the sum overflowed (values near float64's maximum)
                dev = XT - cm[:, None]
                # (two-pass, by hand: torch's std kernel also changes its order with the row count)
                std = self._safe(((dev) ** 2).mean(1) ** 0.5, dev, 1, is_t)
            mean = cm if center else Xa[0] * 0
            Xc = Xa
        const = constant_columns(Xc)          # (missing entries filled with their column's mean)
        std = std * ~const if is_t else np.where(const, 0.0, std)
        if center:  # a constant column centres to exact zeros (its mean is off by rounding)
            mean = torch.where(const, Xc[0], mean) if is_t else np.where(const, Xc[0], mean)
        if per == "matrix":
            used = std[~const] if skip_constant else std
            top = float(used.max()) if used.shape[0] else 0.0
            # rescaled by the largest std where squaring it would over- or underflow
            ref = top if top > 0 and not _SAFE_LO <= top <= _SAFE_HI else 1.0
            var = (used / ref) ** 2
            rms = var.mean() ** 0.5 * ref if var.shape[0] else var.sum()
            std = std * 0 + rms
        scale = torch.where(std > 0, std, torch.ones_like(std)) if is_t else np.where(std > 0, std, 1.0)
        self.mean, self.scale = mean, scale

    @staticmethod
    def _safe(std, dev, axis: int, is_t: bool):
        """``std`` where it lies in [_SAFE_LO, _SAFE_HI] or is 0 with all deviations 0; elsewhere
        recomputed from the deviations ``dev`` rescaled (:func:`_rescaled_std`)."""
        if is_t:
            ok = (std >= _SAFE_LO) & (std <= _SAFE_HI)
            ok |= (dev.nan_to_num(0.0) == 0).all(axis)
            if bool(ok.all()):
                return std
            return torch.where(ok, std, _rescaled_std(dev, axis, is_t))
        ok = (std >= _SAFE_LO) & (std <= _SAFE_HI)
        ok |= (np.nan_to_num(dev) == 0).all(axis)
        if bool(ok.all()):
            return std
        return np.where(ok, std, _rescaled_std(dev, axis, is_t))

    def transform(self, X):
        """Map data to standardised units.

        Parameters
        ----------
        X : array_like
            (n, d) data in the fitted data's units.

        Returns
        -------
        array_like
            (X − mean) / scale.
        """
        return (X - self.mean) / self.scale

    def inverse(self, Z):
        """Map standardised values back to the data's units.

        Parameters
        ----------
        Z : array_like
            (n, d) standardised values.

        Returns
        -------
        array_like
            Z · scale + mean.
        """
        return Z * self.scale + self.mean

    def inverse_var(self, V):
        """Map variances of standardised values back to the data's units.

        Parameters
        ----------
        V : array_like
            (n, d) variances in standardised units.

        Returns
        -------
        array_like
            V · scale².
        """
        return V * self.scale ** 2


def standardize(X, center: bool = True, per: str = "column"):
    """Standardise the columns of X (see :class:`Standardizer`).

    Parameters
    ----------
    X : array_like
        (n, d) data.
    center : bool, default True
        Subtract the column means.
    per : {"column", "matrix"}, default "column"
        One scale per column, or one for the whole matrix.

    Returns
    -------
    Z : array_like
        The standardised data, of the input's type.
    standardizer : Standardizer
        The fitted map, with its inverse.
    """
    s = Standardizer(X, center, per)
    return s.transform(X), s
