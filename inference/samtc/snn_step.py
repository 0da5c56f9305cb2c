"""SAMTC step 3: relatedness-weighted shared-nearest-neighbour (SNN) similarity, and the paper's k grid.

Formulas rebuilt from the paper's prose (see ``docs/specs/samtc.md`` and the notation of
:mod:`tandem.inference.samtc.steps`, which re-exports every name of this module).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

__all__ = ["neighbour_indicator", "snn_graph", "weighted_snn", "k_grid"]


def neighbour_indicator(order, k: int, n_cols: int, rows=None, n_rows=None, col_index=None,
                        include_self: bool = False, self_cols=None):
    """Sparse 0/1 matrix A with A[i, j] = 1 iff j ∈ N(i).

    Parameters
    ----------
    order : array_like of int
        (len(rows), ≥ k) neighbour lists: indices into ``col_index`` if given, else columns.
    k : int
        Neighbours kept per row.
    n_cols : int
        Number of columns of A.
    rows : array_like of int, optional
        Which rows of A the lists fill (default all).
    n_rows : int, optional
        Number of rows of A (default len(order)).
    col_index : array_like of int, optional
        Maps list entries to columns.
    include_self : bool, default False
        Also set A[i, i] = 1 (own-task lists, so that N_t(x) = {x} ∪ kNN(x)), or
        A[rows[i], self_cols[i]] = 1 when given.
    self_cols : array_like of int, optional
        Each row's own column when it is not its row number (a source instance's own column in
        its source block).

    Returns
    -------
    scipy.sparse.csr_matrix
        (n_rows, n_cols) indicator; duplicates count once.
    """
    order = np.asarray(order)[:, :k]
    m = order.shape[0]
    rows = np.arange(m) if rows is None else np.asarray(rows)
    n_rows = m if n_rows is None else n_rows
    cols = order if col_index is None else np.asarray(col_index)[order]
    r = np.repeat(rows, order.shape[1])
    c = cols.ravel()
    if include_self:
        r = np.concatenate([r, rows])
        c = np.concatenate([c, rows if self_cols is None else np.asarray(self_cols)])
    A = sp.csr_matrix((np.ones(r.size), (r, c)), shape=(n_rows, n_cols))
    A.data[:] = 1.0  # duplicates (self already in the list) count once
    return A


def snn_graph(knn, blocks, weights, node_weights=None, edges: str = "mutual"):
    """Block-weighted shared-nearest-neighbour graph over N nodes.

    For every edge (u, v), mutual k-NN (knn[u, v] = knn[v, u] = 1) or one-sided,

        W(u, v) = ω_u ω_v · Σ_b w_b |N_b(u) ∩ N_b(v)| / Σ_b w_b |N_b(u) ∪ N_b(v)|,

    with |A ∪ B| = |A| + |B| − |A ∩ B|; W = 0 for other pairs and on the diagonal.

    Parameters
    ----------
    knn : scipy.sparse matrix
        (N, N) 0/1 k-NN relation, knn[u, v] = 1 iff v is in u's list (the diagonal is ignored).
    blocks : list of scipy.sparse matrices
        (N, m_b) indicators of the neighbourhoods N_b(u) inside block b (a task, or a source
        subtask).
    weights : list of float
        w_b ≥ 0 per block.
    node_weights : array_like, optional
        ω_u ≥ 0 per node (default 1).
    edges : {"mutual", "symmetric"}, default "mutual"
        Mutual or one-sided k-NN edges.

    Returns
    -------
    scipy.sparse.csr_matrix
        (N, N) symmetric weights in [0, max ω²].

    Raises
    ------
    ValueError
        For an unknown ``edges``.
    """
    knn = sp.csr_matrix(knn, dtype=np.float64)
    n = knn.shape[0]
    knn = knn - sp.diags(knn.diagonal())
    knn.eliminate_zeros()
    if edges == "mutual":
        E = knn.multiply(knn.T).tocoo()
    elif edges == "symmetric":
        E = ((knn + knn.T) > 0).astype(np.float64).tocoo()
    else:
        raise ValueError(f"edges: expected 'mutual' or 'symmetric', got {edges!r}")
    i, j = E.row, E.col
    num = np.zeros(i.size)
    den = np.zeros(i.size)
    for A, w in zip(blocks, weights):
        if w == 0:
            continue
        # |N_b(u) ∩ N_b(v)| for all pairs: a dense 0/1 product (BLAS, float32 is exact
        # for counts < 2^24) is far faster than the sparse one when k is a sizeable
        # fraction of n, as in the paper's grid
        Ad = A.toarray().astype(np.float32) if sp.issparse(A) else np.asarray(A, dtype=np.float32)
        size = Ad.sum(1, dtype=np.float64)
        P = Ad @ Ad.T
        inter = P[i, j].astype(np.float64)
        num += w * inter
        den += w * (size[i] + size[j] - inter)
    vals = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    if node_weights is not None:
        om = np.asarray(node_weights, dtype=np.float64)
        vals = vals * om[i] * om[j]
    W = sp.csr_matrix((vals, (i, j)), shape=(n, n))
    W.eliminate_zeros()
    return 0.5 * (W + W.T)


def weighted_snn(own, sources=(), R=(), edges: str = "mutual"):
    """Relatedness-weighted shared-nearest-neighbour similarity of one target task.

    For x_i, x_j mutual kNN in their own task

        W(x_i, x_j) = Σ_s R_s |N_s(x_i) ∩ N_s(x_j)| / Σ_s R_s |N_s(x_i) ∪ N_s(x_j)|,

    W = 0 for other pairs and on the diagonal. This is :func:`snn_graph` on the target's own nodes
    only (the spec's step 3 read literally: transfer re-weights the target's own mutual-kNN
    edges; SAMTC's default graph adds source nodes, see
    :func:`tandem.inference.samtc.algorithm.transfer_graph`).

    Parameters
    ----------
    own : scipy.sparse matrix
        (n_t, n_t) indicator of N_t(x) = {x} ∪ kNN_t(x) (own task, R_t = 1).
    sources : sequence of scipy.sparse matrices, default ()
        (n_t, n_s) indicators of N_s(x), the k_s nearest points of Z^s (empty rows for x ∉ Z^t).
    R : sequence of float, default ()
        Their relatedness weights.
    edges : {"mutual", "symmetric"}, default "mutual"
        Mutual (the spec) or one-sided k-NN edges.

    Returns
    -------
    scipy.sparse.csr_matrix
        (n_t, n_t) symmetric weights in [0, 1].
    """
    own = sp.csr_matrix(own)
    return snn_graph(own, [own, *sources], [1.0, *R], edges=edges)


def k_grid(n: int, h: int, own: bool):
    """The paper's neighbourhood-size grid {⌈n/(2h)⌉, ⌈n/h⌉, min(⌈2n/h⌉, cap)}.

    Parameters
    ----------
    n : int
        Number of points.
    h : int
        Number of clusters.
    own : bool
        Own task (cap = n − 1: a point is not its own neighbour) or source subtask (cap = n).

    Returns
    -------
    list of int
        The three values, clipped to [1, cap].
    """
    cap = n - 1 if own else n
    cap = max(cap, 1)
    vals = [math.ceil(n / (2 * h)), math.ceil(n / h), min(math.ceil(2 * n / h), cap)]
    return [int(min(max(v, 1), cap)) for v in vals]
