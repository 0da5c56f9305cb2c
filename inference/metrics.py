"""The papers' own evaluation metrics, in one place.

Every function takes numpy arrays or torch tensors and returns a Python ``float``
(or, where noted, a per-item array). Inputs are read by the shared validators of
:mod:`tandem.inference.validation` first — values by :func:`~tandem.inference.validation.as_tensor`
(real numbers only: bool, complex, string, object, datetime and masked-array inputs are refused),
labels by :func:`~tandem.inference.validation.label_codes`, indices by
:func:`~tandem.inference.validation.as_index_array` — and empty inputs, mismatched shapes and
NaN/inf entries raise ``ValueError`` naming the argument (a metric of nothing is not NaN, it is a
caller's bug).
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from tandem.inference.validation import as_index_array, as_tensor, label_codes

__all__ = ["mean_joint_error", "rmse", "msll", "mean_abs_error", "mean_norm_error",
           "clustering_accuracy", "nmi", "match_accuracy", "circular_pose_error_deg"]


def _np(x, name):
    """``x`` as a finite float64 numpy array, read by the shared :func:`as_tensor`."""
    return as_tensor(x, name, detach=True).cpu().numpy()


def _same_shape(a, b, na, nb):
    if a.shape != b.shape:
        raise ValueError(f"{na} has shape {a.shape} but {nb} has shape {b.shape}; expected equal shapes")
    if a.size == 0:
        raise ValueError(f"{na} and {nb} are empty (shape {a.shape}); expected at least one entry to score")


def _pair(pred, true, np_="pred", nt="true"):
    """Both arrays as float64, same shape, non-empty, finite."""
    p, t = _np(pred, np_), _np(true, nt)
    _same_shape(p, t, np_, nt)
    return p, t


def mean_joint_error(pred, true, dims_per_joint: int = 3) -> float:
    """Mean per-joint position error (McGPDS protocol §1.9; what the paper calls "RMSE").

    (1/(N J)) Σ_n Σ_j ‖p̂_nj − p_nj‖₂ in the data's units.

    Parameters
    ----------
    pred, true : array_like
        (N, J·dims_per_joint) positions with the joints interleaved x1 y1 z1 x2 ….
    dims_per_joint : int, default 3
        Coordinates per joint.

    Returns
    -------
    float
        The mean per-joint Euclidean error.
    """
    if isinstance(dims_per_joint, bool) or not isinstance(dims_per_joint, (int, np.integer)) or dims_per_joint < 1:
        raise ValueError(f"dims_per_joint: expected a positive integer, got {dims_per_joint!r}")
    p, t = _pair(pred, true)
    if p.ndim != 2 or p.shape[1] % dims_per_joint:
        raise ValueError(f"pred: expected shape (N, J*{dims_per_joint}), got {p.shape}")
    d = (p - t).reshape(p.shape[0], -1, dims_per_joint)
    return float(np.linalg.norm(d, axis=-1).mean())


def rmse(pred, true) -> float:
    """Root mean squared error over all entries, sqrt(mean((ŷ − y)²)).

    Parameters
    ----------
    pred, true : array_like
        Predictions and targets of the same shape (numpy arrays or tensors).

    Returns
    -------
    float
        The RMSE in the data's units.
    """
    p, t = _pair(pred, true)
    return float(np.sqrt(np.mean((p - t) ** 2)))


def msll(mean, var, true, mask=None) -> float:
    """Mean negative log predictive density of independent Gaussians (McGPDS protocol §1.10).

    MSLL = (1/|E|) Σ_{(n,d)∈E} [½ log(2π σ²_nd) + (y_nd − μ_nd)² / (2 σ²_nd)]. Lower is better.

    Parameters
    ----------
    mean, var : array_like
        (N, D) predictive means μ and variances σ²; ``var`` strictly positive on E.
    true : array_like
        (N, D) targets y.
    mask : array_like of bool, optional
        (N, D) or (D,) entries E to score (default: all); how callers exclude coordinates that
        are constant in the data, whose predictive variance may be exactly 0. A bool array, or
        numeric 0/1 flags (integer or float, 1 = score); any other value (an index list?) is refused.

    Returns
    -------
    float
        The mean negative log density over E.
    """
    m, t = _pair(mean, true, "mean", "true")
    v = _broadcast(_np(var, "var"), m.shape, "var")
    if mask is None:
        sel = np.ones(m.shape, bool)
    else:
        sel = _broadcast(_mask(mask), m.shape, "mask")
    if not sel.any():
        raise ValueError("msll: the mask selects no entries")
    if (v[sel] <= 0).any():
        raise ValueError("msll: predictive variances must be > 0 on every scored entry "
                         "(mask out constant coordinates instead)")
    r = (t - m)[sel]
    vv = v[sel]
    return float(np.mean(0.5 * np.log(2 * np.pi * vv) + 0.5 * r * r / vv))


def _mask(mask) -> np.ndarray:
    """A bool mask read from bools or numeric 0/1 flags (the numbers through the shared reader)."""
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        return mask.detach().cpu().numpy()
    if isinstance(mask, (np.ndarray, list, tuple)) and not isinstance(mask, np.ma.MaskedArray):
        mk = np.asarray(mask)
        if mk.dtype == bool:
            return mk
    f = _np(mask, "mask")
    other = ~np.isin(f, (0.0, 1.0))
    if other.any():
        raise ValueError(f"mask: expected a boolean array or 0/1 flags (True or 1 = score the entry), got the value "
                         f"{f[other][0]:g} (are these indices? Build a boolean mask from them first)")
    return f == 1.0


def mean_abs_error(pred, true) -> float:
    """Mean absolute error over all entries, mean(|ŷ − y|) (twin-GP toy experiments).

    Parameters
    ----------
    pred, true : array_like
        Predictions and targets of the same shape (numpy arrays or tensors).

    Returns
    -------
    float
        The mean absolute error.
    """
    p, t = _pair(pred, true)
    return float(np.mean(np.abs(p - t)))


def mean_norm_error(pred, true) -> float:
    """Per-row Euclidean error averaged over rows, (1/N) Σ_n ‖ŷ_n − y_n‖₂ (USPS reconstruction).

    Parameters
    ----------
    pred, true : array_like
        (N, D) predictions and targets.

    Returns
    -------
    float
        The mean row error.
    """
    p, t = _pair(pred, true)
    if p.ndim == 0:
        raise ValueError("pred: expected rows (N, ...), got a scalar")
    p2 = p.reshape(p.shape[0], -1)
    return float(np.linalg.norm(p2 - t.reshape(t.shape[0], -1), axis=1).mean())


def _labels(x, name):
    """Label codes 0..L−1 of a label vector (n,) or an (n, 1) column, read by the shared
    :func:`label_codes` (labels keep their identity; missing-value labels refused)."""
    codes = label_codes(x, None, name, column=True)
    if codes.size == 0:
        raise ValueError(f"{name}: empty label vector")
    return codes


def _contingency(true, pred):
    t, p = _labels(true, "labels_true"), _labels(pred, "labels_pred")
    if t.shape != p.shape:
        raise ValueError(f"labels_true has {t.size} entries but labels_pred has {p.size}")
    C = np.zeros((t.max() + 1, p.max() + 1))
    np.add.at(C, (t, p), 1)
    return C


def clustering_accuracy(labels_true, labels_pred) -> float:
    """Clustering accuracy under the best one-to-one matching of clusters to classes.

    ACC = max_π (1/n) Σ_i 1[y_i = π(c_i)], π found by the Hungarian algorithm
    (``scipy.optimize.linear_sum_assignment``) on the contingency table. Label values are
    arbitrary; cluster and class counts may differ (unmatched clusters count wrong).

    Parameters
    ----------
    labels_true, labels_pred : array_like
        (n,) class labels and cluster labels (any hashable values).

    Returns
    -------
    float
        ACC in [0, 1].
    """
    C = _contingency(labels_true, labels_pred)
    r, c = linear_sum_assignment(-C)
    return float(C[r, c].sum() / C.sum())


def nmi(labels_true, labels_pred) -> float:
    """Normalised mutual information, NMI = I(C; C′) / max(H(C), H(C′)) (natural logs).

    Parameters
    ----------
    labels_true, labels_pred : array_like
        (n,) two labelings of the same points.

    Returns
    -------
    float
        NMI in [0, 1]: 1.0 when both labelings are one identical cluster, 0.0 when one side is
        constant and the other is not.
    """
    C = _contingency(labels_true, labels_pred)
    n = C.sum()
    P = C / n
    pt, pp = P.sum(1), P.sum(0)
    nz = P > 0
    mi = float((P[nz] * np.log(P[nz] / np.outer(pt, pp)[nz])).sum())
    ht = float(-(pt[pt > 0] * np.log(pt[pt > 0])).sum())
    hp = float(-(pp[pp > 0] * np.log(pp[pp > 0])).sum())
    denom = max(ht, hp)
    if denom == 0.0:
        return 1.0
    return min(1.0, max(0.0, mi / denom))  # clip float round-off outside [0, 1]


def match_accuracy(pred_partner, true_partner, tolerance: int = 0, period: int | None = None) -> float:
    """Fraction of items whose predicted partner index equals the true one (within ±tolerance).

    Parameters
    ----------
    pred_partner, true_partner : array_like of int
        (n,) predicted and true partner indices.
    tolerance : int, default 0
        Largest index distance still counted as a match.
    period : int, optional
        Circular indices (poses on a circle of ``period`` steps): |i − j| is replaced by
        min(|i − j|, period − |i − j|).

    Returns
    -------
    float
        The fraction matched, in [0, 1].
    """
    p, t = _indices(pred_partner, "pred_partner"), _indices(true_partner, "true_partner")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, np.integer)) or tolerance < 0:
        raise ValueError(f"tolerance: expected a non-negative integer, got {tolerance!r}")
    if period is not None and (isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1):
        raise ValueError(f"period: expected a positive integer or None, got {period!r}")
    if p.shape != t.shape:
        raise ValueError(f"pred_partner has {p.size} entries but true_partner has {t.size}")
    if p.size == 0:
        raise ValueError("match_accuracy: no items to score")
    d = np.abs(p - t)
    if period is not None:
        d = np.minimum(d % period, period - d % period)
    return float(np.mean(d <= tolerance))


def _indices(x, name) -> np.ndarray:
    """A 1-d int64 index vector from the shared :func:`as_index_array` (whole numbers in the int64 range:
    no silent truncation or wrap-round)."""
    return as_index_array(x, name).ravel()


def _broadcast(a: np.ndarray, shape, name: str) -> np.ndarray:
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        raise ValueError(f"{name}: shape {a.shape} does not broadcast to the data's shape {shape}") from None


def circular_pose_error_deg(pred_pose_deg, true_pose_deg) -> float:
    """Mean absolute angular difference on the circle, in degrees.

    Parameters
    ----------
    pred_pose_deg, true_pose_deg : array_like
        Angles in degrees, of the same shape (no broadcasting: a (n,) against an (n, 1) would
        silently score n² pairs).

    Returns
    -------
    float
        The mean over entries of the smaller angle between a and b, in [0, 180].
    """
    p, t = _pair(pred_pose_deg, true_pose_deg, "pred_pose_deg", "true_pose_deg")
    d = np.abs(p - t) % 360.0
    return float(np.mean(np.minimum(d, 360.0 - d)))
