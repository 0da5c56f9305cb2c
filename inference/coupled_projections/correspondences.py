"""Known pairs of coupled linear projections and the objective they enter: ``Ω`` and ``J = Tr(Pᵀ Z Ω Zᵀ P)``.

``Ω = (1/K) L_C + blockdiag(2α_x/N_x² · L^x, 2α_y/N_y² · L^y)`` with the correspondence
Laplacian ``L_C`` of the K pairs (see :mod:`tandem.inference.coupled_projections.solver`,
which re-exports every name of this module).
"""
from __future__ import annotations

import numpy as np

from tandem.inference.validation import (
    as_index_array,
    check_real_range,
)

__all__ = ["check_pairs", "correspondence_matrix", "correspondence_laplacian", "alignment_omega",
           "objective_loops", "objective_trace"]


def check_pairs(pairs, nx: int, ny: int, d: int | None = None) -> np.ndarray:
    """Validate the known pairs: an integer array (K, 2) of (i, j) with 0 ≤ i < N_x, 0 ≤ j < N_y.

    Parameters
    ----------
    pairs : array_like
        (K, 2) index pairs (i, j), x_i ↔ y_j.
    nx : int
        N_x, the number of x points.
    ny : int
        N_y, the number of y points.
    d : int, optional
        The latent dimension: at least ``d`` pairs are required.

    Returns
    -------
    numpy.ndarray
        (K, 2) int64 pairs.

    Raises
    ------
    ValueError
        For a wrong shape, non-integer entries, an index out of range, duplicated pairs, no
        pair, or fewer than ``d`` pairs (the latent dimension).
    """
    a = as_index_array(pairs, "pairs")
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"pairs: expected an integer array of shape (K, 2) of (i, j) index pairs, "
                         f"got shape {a.shape}")
    K = a.shape[0]
    if K == 0:
        raise ValueError("pairs: expected at least one known correspondence, got none")
    for col, n, nm in ((0, nx, "x (N_x)"), (1, ny, "y (N_y)")):
        bad = (a[:, col] < 0) | (a[:, col] >= n)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise ValueError(f"pairs: correspondence index out of range at row {r}: {tuple(a[r])}; "
                             f"column {col} indexes {nm} and must lie in [0, {n - 1}]")
    if len({(int(i), int(j)) for i, j in a}) != K:
        raise ValueError("pairs: contains duplicated (i, j) pairs")
    if d is not None and K < d:
        raise ValueError(f"pairs: {K} known correspondences are fewer than the latent dimension "
                         f"d = {d}; the alignment is under-determined (need K ≥ d)")
    return a


def correspondence_matrix(pairs: np.ndarray, nx: int, ny: int) -> np.ndarray:
    """W_C (N_x × N_y) with W_C[i, j] = 1 for every known pair (i, j).

    Parameters
    ----------
    pairs : numpy.ndarray
        (K, 2) validated integer pairs (:func:`check_pairs`).
    nx : int
        N_x.
    ny : int
        N_y.

    Returns
    -------
    numpy.ndarray
        (N_x, N_y) W_C.
    """
    W = np.zeros((nx, ny))
    W[pairs[:, 0], pairs[:, 1]] = 1.0
    return W


def correspondence_laplacian(pairs: np.ndarray, nx: int, ny: int) -> np.ndarray:
    """L_C = [[diag(W_C 1), −W_C], [−W_Cᵀ, diag(W_Cᵀ 1)]], shape (N_x+N_y, N_x+N_y).

    vᵀ L_C v = Σ_{(i,j)∈C} (v_x[i] − v_y[j])² for v = [v_x; v_y] (the Laplacian of the
    bipartite graph of known pairs).

    Parameters
    ----------
    pairs : numpy.ndarray
        (K, 2) validated integer pairs (:func:`check_pairs`).
    nx : int
        N_x.
    ny : int
        N_y.

    Returns
    -------
    numpy.ndarray
        (N_x + N_y, N_x + N_y) L_C.
    """
    W = correspondence_matrix(pairs, nx, ny)
    return np.block([[np.diag(W.sum(1)), -W], [-W.T, np.diag(W.sum(0))]])


def alignment_omega(Lx: np.ndarray, Ly: np.ndarray, pairs: np.ndarray, alpha_x: float = 1.0,
                    alpha_y: float = 1.0) -> np.ndarray:
    """Ω = (1/K) L_C + blockdiag(2α_x/N_x² · L^x, 2α_y/N_y² · L^y) (spec, matrix form).

    Parameters
    ----------
    Lx : numpy.ndarray
        (N_x, N_x) graph Laplacian of view x.
    Ly : numpy.ndarray
        (N_y, N_y) graph Laplacian of view y.
    pairs : numpy.ndarray
        (K, 2) validated integer pairs.
    alpha_x : float, default 1.0
        α_x ≥ 0, weight of view x's neighbourhood term.
    alpha_y : float, default 1.0
        α_y ≥ 0, weight of view y's neighbourhood term.

    Returns
    -------
    numpy.ndarray
        (N_x + N_y, N_x + N_y) Ω.

    Raises
    ------
    ValueError
        Naming ``alpha_x`` or ``alpha_y`` when it is not a finite real ≥ 0 (a negative weight
        makes Ω indefinite, so the eigenproblem's minimum is no longer the objective's).
    """
    check_real_range(alpha_x, "alpha_x", 0.0)
    check_real_range(alpha_y, "alpha_y", 0.0)
    nx, ny = Lx.shape[0], Ly.shape[0]
    K = pairs.shape[0]
    Om = correspondence_laplacian(pairs, nx, ny) / K
    Om[:nx, :nx] += 2.0 * alpha_x / nx ** 2 * Lx
    Om[nx:, nx:] += 2.0 * alpha_y / ny ** 2 * Ly
    return Om


def objective_loops(Px, Py, X, Y, pairs, Sx, Sy, alpha_x: float = 1.0, alpha_y: float = 1.0) -> float:
    """The paper's objective J written as explicit loops over pairs and graph edges.

    Slow reference used by the tests (O(N²) Python-level sums).

    Parameters
    ----------
    Px : numpy.ndarray
        (D_x, d) map of view x.
    Py : numpy.ndarray
        (D_y, d) map of view y.
    X : numpy.ndarray
        (N_x, D_x) points (rows).
    Y : numpy.ndarray
        (N_y, D_y) points (rows).
    pairs : array_like
        (K, 2) known pairs (i, j).
    Sx : numpy.ndarray
        (N_x, N_x) neighbourhood weights of view x.
    Sy : numpy.ndarray
        (N_y, N_y) neighbourhood weights of view y.
    alpha_x : float, default 1.0
        α_x ≥ 0.
    alpha_y : float, default 1.0
        α_y ≥ 0.

    Returns
    -------
    float
        J.

    Raises
    ------
    ValueError
        Naming ``alpha_x`` or ``alpha_y`` when it is not a finite real ≥ 0 (as :func:`alignment_omega`).
    """
    check_real_range(alpha_x, "alpha_x", 0.0)
    check_real_range(alpha_y, "alpha_y", 0.0)
    Ux, Uy = X @ Px, Y @ Py
    K = len(pairs)
    J = sum(float(np.sum((Ux[i] - Uy[j]) ** 2)) for i, j in pairs) / K
    for U, S, a in ((Ux, Sx, alpha_x), (Uy, Sy, alpha_y)):
        n = U.shape[0]
        s = 0.0
        for i in range(n):
            for i2 in range(n):
                if S[i, i2] != 0.0:
                    s += float(np.sum((U[i] - U[i2]) ** 2)) * S[i, i2]
        J += a / n ** 2 * s
    return J


def objective_trace(P: np.ndarray, Z: np.ndarray, Omega: np.ndarray) -> float:
    """Tr(Pᵀ Z Ω Zᵀ P) with Z = blockdiag(Xᵀ, Yᵀ) (D × N, columns are points).

    Parameters
    ----------
    P : numpy.ndarray
        (D, d) stacked maps [P_x; P_y].
    Z : numpy.ndarray
        (D, N) block-diagonal data, columns are points.
    Omega : numpy.ndarray
        (N, N) alignment matrix Ω.

    Returns
    -------
    float
        The objective J.
    """
    ZP = Z.T @ P
    return float(np.trace(ZP.T @ Omega @ ZP))
