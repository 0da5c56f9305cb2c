"""Small dense algebra in extended precision (numpy ``longdouble``).

For values whose float64 rounding is amplified by an ill-conditioned system, where the system
is small (M × M) but its inputs come from a large float64 computation: the inputs are rounded
once to float64 (or carried as a float64 pair ``hi + lo``), and only the small, sensitive step
runs here. The callers use the result as the *value* of a quantity whose *gradient* still comes
from the float64 autograd graph (the gradient's rounding enters a first-order change only).

``longdouble`` is the 80-bit x87 format (64-bit mantissa, ε ≈ 1.1e-19) on x86 and IEEE quad
(ε ≈ 1.9e-34, in software) on Linux aarch64; on platforms where it is plain double (Windows,
macOS on Apple silicon) :data:`AVAILABLE` is False and the callers keep their float64 value.
numpy's ``linalg`` has no ``longdouble`` routines, hence the two hand-written factorisations
below (``matmul`` and the reductions do run in ``longdouble``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["AVAILABLE", "LD", "cholesky", "eliminate", "lstsq_residual"]

#: the extended type
LD = np.longdouble
#: whether ``longdouble`` is wider than float64 here (its ε below 1e-18)
AVAILABLE = bool(np.finfo(np.longdouble).eps < 1e-18)


def cholesky(A: np.ndarray) -> np.ndarray | None:
    """Lower Cholesky factor of a symmetric positive definite matrix, column by column.

    Parameters
    ----------
    A : numpy.ndarray
        (n, n) symmetric matrix (converted to ``longdouble``; only its lower triangle is read).

    Returns
    -------
    numpy.ndarray or None
        (n, n) ``longdouble`` L with L Lᵀ = A, or None when a pivot is not positive (A not
        positive definite at this precision).
    """
    A = np.asarray(A, dtype=LD)
    n = A.shape[0]
    L = np.zeros_like(A)
    for j in range(n):
        d = A[j, j] - L[j, :j] @ L[j, :j]
        if not d > 0:
            return None
        L[j, j] = np.sqrt(d)
        L[j + 1:, j] = (A[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
    return L


def eliminate(A: np.ndarray, k: int) -> np.ndarray:
    """A's first k columns eliminated by Householder reflections: ``Hₖ ⋯ H₁ A``.

    Parameters
    ----------
    A : numpy.ndarray
        (m, n) matrix with m ≥ k (converted to ``longdouble``; not modified).
    k : int
        Columns to eliminate.

    Returns
    -------
    numpy.ndarray
        (m, n) ``longdouble``: its top k rows are ``[R₁₁, R₁₂]`` of ``A = Q R`` (R₁₁ upper
        triangular, diagonal of either sign), and rows k.. of its last n − k columns hold what
        remains of them (orthogonal to A's first k columns), whose squared norm is the
        least-squares residual.
    """
    A = np.array(A, dtype=LD)
    for j in range(k):
        x = A[j:, j]
        nx = np.sqrt(x @ x)
        if nx == 0:
            continue
        v = x.copy()
        v[0] += nx if x[0] >= 0 else -nx             # v = x + sign(x₀)‖x‖e₁: no cancellation
        A[j:, j:] -= np.outer(v, (v @ A[j:, j:]) * (2 / (v @ v)))
    return A


def lstsq_residual(A: np.ndarray, k: int) -> np.longdouble:
    """``‖R₂₂‖²`` of the QR factorisation ``A = Q [[R₁₁, R₁₂], [0, R₂₂]]`` with R₁₁ (k, k).

    For ``A = [X, Y]`` with X (m, k) this is ``min_U ‖X U − Y‖²_F``, computed by :func:`eliminate`
    without forming the normal equations.

    Parameters
    ----------
    A : numpy.ndarray
        (m, n) matrix with m ≥ k, n > k (converted to ``longdouble``; not modified).
    k : int
        Columns to eliminate.

    Returns
    -------
    numpy.longdouble
        The residual sum of squares.
    """
    rest = eliminate(A, k)[k:, k:]
    return (rest * rest).sum()
