"""SAMTC's representations of the tasks: a common reduced space, similarities and neighbour orders.

See the notation of :mod:`tandem.inference.samtc.steps`, which re-exports every name of this module.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from tandem.inference.distances import sq_dists
from tandem.inference.validation import check_seed

__all__ = ["reduce_dimension", "similarity", "neighbour_order"]


def reduce_dimension(tasks, dim: int | None, seed: int = 0):
    """Project all tasks into one common r-dimensional space for the density steps.

    Rebuilt: the paper estimates product KDEs in the raw feature space, which underflows and is
    meaningless for thousands of tf-idf terms (spec pitfall). We stack the tasks and take a
    truncated SVD: LSA (no centring, keeps sparsity) for sparse input, PCA (centred) for dense
    input.

    Parameters
    ----------
    tasks : list of array_like or scipy.sparse matrices
        Task t's (n_t, d) data, one common feature space.
    dim : int or None
        r; ``None`` → min(d, 10); ``dim ≥ d`` (dense input) → the raw features.
    seed : int, default 0
        Seed of the sparse SVD's start vector.

    Returns
    -------
    list of numpy.ndarray
        Dense (n_t, r) representations, one per task.

    Raises
    ------
    ValueError
        If ``dim`` < 1.
    """
    d = tasks[0].shape[1]
    sparse = any(sp.issparse(X) for X in tasks)
    r = min(d, 10) if dim is None else int(dim)
    if r < 1:
        raise ValueError(f"reduce_dim: expected a positive number of dimensions, got {dim}")
    sizes = [X.shape[0] for X in tasks]
    if not sparse and r >= d:
        return [np.asarray(X, dtype=np.float64) for X in tasks]
    r = min(r, d - 1, sum(sizes) - 1) if sparse else min(r, d)
    if sparse:
        S = sp.vstack([sp.csr_matrix(X, dtype=np.float64) for X in tasks]).tocsr()
        v0 = np.random.default_rng(check_seed(seed)).standard_normal(min(S.shape))
        U, s, Vt = spla.svds(S, k=r, v0=v0, tol=1e-10)
        order = np.argsort(s)[::-1]
        Y = np.asarray(S @ Vt[order].T)
    else:
        S = np.vstack([np.asarray(X, dtype=np.float64) for X in tasks])
        S = S - S.mean(0)
        U, s, Vt = np.linalg.svd(S, full_matrices=False)
        Y = S @ Vt[:r].T
    out, i = [], 0
    for n in sizes:
        out.append(Y[i:i + n])
        i += n
    return out


def similarity(X, Y=None, metric: str = "euclidean"):
    """Dense similarity matrix between the rows of X and Y.

    ``cosine``: x·y / (‖x‖‖y‖) (zero rows → 0); ``euclidean``: −‖x − y‖², so that larger is
    more similar (its ranking equals the ranking by a Gaussian kernel of any width).

    Parameters
    ----------
    X : array_like or scipy.sparse matrix
        (n, d).
    Y : array_like or scipy.sparse matrix, optional
        (m, d); ``None`` → X.
    metric : {"euclidean", "cosine"}, default "euclidean"
        The similarity.

    Returns
    -------
    numpy.ndarray
        (n, m) similarities.

    Raises
    ------
    ValueError
        For an unknown ``metric``.
    """
    Y = X if Y is None else Y
    if metric == "cosine":
        def nrm(A):
            a = np.sqrt(np.asarray(A.multiply(A).sum(1)).ravel()) if sp.issparse(A) else np.linalg.norm(A, axis=1)
            return np.where(a > 0, a, 1.0)
        G = X @ Y.T
        G = G.toarray() if sp.issparse(G) else np.asarray(G)
        return G / nrm(X)[:, None] / nrm(Y)[None, :]
    if metric == "euclidean":
        if not sp.issparse(X) and not sp.issparse(Y):
            return -sq_dists(np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64))
        G = X @ Y.T
        G = G.toarray() if sp.issparse(G) else np.asarray(G)
        xx = np.asarray(X.multiply(X).sum(1)).ravel() if sp.issparse(X) else np.einsum("ij,ij->i", X, X)
        yy = np.asarray(Y.multiply(Y).sum(1)).ravel() if sp.issparse(Y) else np.einsum("ij,ij->i", Y, Y)
        return -np.maximum(xx[:, None] - 2 * G + yy[None, :], 0.0)
    raise ValueError(f"metric: expected 'cosine' or 'euclidean', got {metric!r}")


def neighbour_order(S, exclude_self: bool = False, max_k: int | None = None):
    """Column indices of S sorted by decreasing similarity, per row.

    Ties are broken by column index (stable sort), so the result is deterministic.

    Parameters
    ----------
    S : array_like
        (n, m) similarities.
    exclude_self : bool, default False
        (Square S) remove each point from its own list.
    max_k : int, optional
        Keep at most this many neighbours.

    Returns
    -------
    numpy.ndarray
        (n, m′) int indices, m′ = min(max_k, available).
    """
    S = np.array(S, dtype=np.float64, copy=True)
    n, m = S.shape
    if exclude_self:
        np.fill_diagonal(S, -np.inf)
    order = np.argsort(-S, axis=1, kind="stable")
    if exclude_self:
        order = order[:, :m - 1]
    if max_k is not None:
        order = order[:, :max_k]
    return order
