"""Neighbourhood graphs of one view for coupled linear projections: k-NN heat-kernel weights and Laplacians.

Symmetrised k-nearest-neighbour graph (joined by minimum-spanning-tree edges if it is
disconnected), heat-kernel weights ``S = exp(−‖x_i − x_i'‖² / t)`` on its edges, ``L = D − S``.
Re-exported by :mod:`tandem.inference.coupled_projections.solver`.
"""
from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree

from tandem.inference.distances import knn, sq_dists
from tandem.inference.validation import (
    as_array,
    check_int_range,
    check_real_range,
)

__all__ = ["knn_heat_weights", "graph_laplacian", "heat_width"]


def _knn_mask(X: np.ndarray, k: int) -> np.ndarray:
    """Boolean symmetrised k-NN adjacency of the rows of X (no self-loops; ties → lower index)."""
    n = X.shape[0]
    idx = knn(X, k=k, exclude_self=True)
    M = np.zeros((n, n), bool)
    M[np.repeat(np.arange(n), k), idx.ravel()] = True
    return M | M.T


def heat_width(d2: np.ndarray, mask: np.ndarray) -> float:
    """Default heat-kernel width: mean squared length of the graph's edges (> 0).

    Parameters
    ----------
    d2 : numpy.ndarray
        (N, N) squared distances.
    mask : numpy.ndarray
        (N, N) boolean adjacency (the graph's edges).

    Returns
    -------
    float
        t > 0 (1.0 for a graph without edges or with only zero-length edges).
    """
    t = float(d2[mask].mean()) if mask.any() else 1.0
    return t if t > 0 else 1.0


def _connect(d2: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Add the edges of a Euclidean minimum spanning tree to the adjacency ``M`` when it
    has several connected components (so every point is reachable; unchanged otherwise)."""
    if connected_components(csr_matrix(M), directed=False)[0] == 1:
        return M
    # tiny offset keeps zero distances (duplicate points) as edges of the sparse MST
    T = minimum_spanning_tree(csr_matrix(np.sqrt(d2) + 1e-300 * (1 - np.eye(len(d2))))).toarray() > 0
    return M | T | T.T


def knn_heat_weights(X, k: int = 5, t: float | None = None, return_width: bool = False,
                     connect: bool = True, name: str = "X"):
    """Symmetrised k-NN graph with heat-kernel weights.

    S_ii' = exp(−‖x_i − x_i'‖² / t) when i' is among the k nearest neighbours of i or
    vice versa, else 0; S_ii = 0. ``t=None``: mean squared edge length; ``t=np.inf``:
    0/1 weights. With ``connect`` (default), a graph that falls into several components is
    joined by the edges of the Euclidean minimum spanning tree (a k-NN graph of a closed
    pose circle can break where consecutive images differ most).

    Parameters
    ----------
    X : array_like
        (N, D) points (rows), N ≥ 2.
    k : int, default 5
        Number of neighbours, 1 ≤ k ≤ N − 1.
    t : float or None, default None
        Heat-kernel width (> 0, ``np.inf`` for 0/1 weights); None: mean squared edge length.
    return_width : bool, default False
        Also return the width t used.
    connect : bool, default True
        Join a disconnected graph by minimum-spanning-tree edges.
    name : str, default "X"
        The data's name (the view, e.g. "Y"), used in every message.

    Returns
    -------
    numpy.ndarray or tuple
        S (N, N), or ``(S, t)`` with ``return_width``.

    Raises
    ------
    ValueError
        If X has fewer than 2 rows, ``k`` is out of range or ``t`` is not positive.
    """
    X = as_array(X, name, ndim=2)
    n = X.shape[0]
    if n < 2:
        raise ValueError(f"{name}: a neighbourhood graph needs at least 2 points, got {n}")
    # the range depends on the view's size: say which view it is, so a k that fits X but not Y is clear
    k = check_int_range(k, f"k (number of neighbours in the graph of {name}, which has {n} points)", 1, n - 1)
    d2 = sq_dists(X)
    M = _knn_mask(X, k)
    if connect:
        M = _connect(d2, M)
    if t is None:
        t = heat_width(d2, M)
    else:
        t = check_real_range(t, "t (heat-kernel width)", 0.0, None, low_open=True) if np.isfinite(t) else np.inf
    S = np.where(M, np.exp(-d2 / t) if np.isfinite(t) else 1.0, 0.0)
    return (S, t) if return_width else S


def graph_laplacian(S: np.ndarray) -> np.ndarray:
    """Unnormalised graph Laplacian L = D − S, D = diag(S 1).

    Parameters
    ----------
    S : numpy.ndarray
        (N, N) symmetric non-negative weights.

    Returns
    -------
    numpy.ndarray
        (N, N) L.
    """
    return np.diag(S.sum(1)) - S
