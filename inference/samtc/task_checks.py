"""SAMTC input checks: the tasks, their cluster counts and true labels, and each task's own-task metric.

Re-exported by :mod:`tandem.inference.samtc.algorithm`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tandem.inference.validation import as_array, label_codes
from tandem.models.samtc import check_task_layout

__all__ = ["validate_tasks"]


def _unit_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    """A sparse (text) task with every non-zero row scaled to unit L2 norm (empty rows stay 0).

    SAMTC reads a sparse task in cosine geometry: the own-task graph uses cosine similarity,
    so a document's length carries no information there. The other steps (the LSA space of the
    density and KMM steps, the ranking of source rows) use the rows as vectors, so unnormalised
    rows made the result depend on document length (per-row rescaling by U(0.2, 5) took task
    accuracies 0.967/0.94/0.963 to 0.356/0.96/0.40). Normalising here puts every step in the
    cosine geometry; rows that are already unit-norm (the text loaders' tf-idf) are left
    exactly as they are.
    """
    X = X.copy()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    # rows already of unit norm (to 1e-12) are kept bit for bit: no round-off for tf-idf input
    scale[np.abs(norms - 1.0) <= 1e-12] = 1.0
    X.data *= np.repeat(scale, np.diff(X.indptr))
    return X


def _n_distinct_rows(X) -> int:
    """Number of distinct rows (points) of a dense array (exactly) or a CSR matrix of unit-norm
    rows (to 1e-12: two documents that differ only in length are one point up to round-off)."""
    if not sp.issparse(X):
        return int(np.unique(X, axis=0).shape[0]) if X.shape[0] else 0
    X = X.tocsr(copy=True)
    X.data = np.round(X.data, 12)
    X.eliminate_zeros()
    X.sum_duplicates()      # canonical: sorted column indices, no explicit zeros
    rows = {(X.indices[a:b].tobytes(), X.data[a:b].tobytes()) for a, b in zip(X.indptr[:-1], X.indptr[1:])}
    return len(rows)


def validate_tasks(tasks, n_clusters, labels=None):
    """Check the tasks and convert them to float64.

    The structure (task count, empty tasks, one feature space, integer h_t ≥ 2, n_t ≥ h_t) is
    checked by :func:`tandem.models.samtc.check_task_layout`, shared with the Pyro model; here
    also that every task is a 2-d numeric array (dense or scipy.sparse) of finite numbers with at
    least h_t distinct points (a constant task cannot be cut into h_t ≥ 2 clusters: its graph
    and its density steps see one point, and any labelling would be arbitrary), and that
    ``labels`` (if given) hold one label per point.

    Parameters
    ----------
    tasks : list of array_like or scipy.sparse matrices
        Task t's (n_t, d) data.
    n_clusters : list of int
        h_t per task.
    labels : list of array_like, optional
        Per-task true labels.

    Returns
    -------
    tasks : list
        float64 dense arrays, or CSR matrices with unit-norm rows (a sparse task is text, read
        in cosine geometry; see :func:`_unit_rows`).
    n_clusters : list of int
        h_t per task.

    Raises
    ------
    ValueError, TypeError
        Naming the task and what is wrong.
    """
    if tasks is None or len(tasks) == 0:
        raise ValueError("tasks: expected a non-empty list of (n_t, d) arrays")
    out = []
    for t, X in enumerate(tasks):
        # a sparse task stays sparse (text: cosine similarities), through the same checks
        out.append(as_array(X, f"tasks[{t}]", ndim=2, finite=False, sparse=True))
    hs = check_task_layout([X.shape for X in out], n_clusters, h_name="n_clusters")
    for t, X in enumerate(out):
        bad = int((~np.isfinite(X.data if sp.issparse(X) else X)).sum())
        if bad:
            raise ValueError(f"tasks[{t}]: contains {bad} NaN or inf entries; expected finite values")
    out = [_unit_rows(X) if sp.issparse(X) else X for X in out]
    for t, (X, h) in enumerate(zip(out, hs)):
        # after the row scaling: documents that differ only in length are one point in cosine geometry
        m = _n_distinct_rows(X)
        if m < h:
            what = "all its points are identical" if m == 1 else f"it has only {m} distinct points"
            raise ValueError(f"tasks[{t}]: {what}, fewer than its h_t = {h} clusters; expected at least "
                             f"{h} distinct points (rows)")
    validate_labels(labels, out)
    return out, hs


@dataclass(frozen=True)
class _ValidatedTasks:
    """Tasks already returned by :func:`validate_tasks`, with their h_t.

    :func:`~tandem.inference.samtc.algorithm.samtc` takes one in place of ``tasks`` and does not
    validate them again (conversion, finiteness and the distinct-row count are O(data)).
    :meth:`SAMTC.fit <tandem.inference.samtc.estimator.SAMTC.fit>` builds one from the float64
    copies it keeps; only :func:`validate_tasks`'s output belongs here.
    """
    tasks: tuple
    n_clusters: tuple


def validate_labels(labels, tasks) -> list | None:
    """Per-task class labels as int64 codes (:func:`tandem.inference.validation.label_codes`:
    any hashable labels, NaN/None refused, one per point of ``tasks[t]``); ``None`` stays ``None``."""
    if labels is None:
        return None
    if len(labels) != len(tasks):
        raise ValueError(f"labels: expected one array per task ({len(tasks)}), got {len(labels)}")
    return [label_codes(y, X.shape[0], f"labels[{t}]") for t, (y, X) in enumerate(zip(labels, tasks))]


def _metric_for(X):
    """Own-task similarity: cosine for sparse (text) data, Euclidean for dense data."""
    return "cosine" if sp.issparse(X) else "euclidean"
