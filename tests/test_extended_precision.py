"""inference/extended_precision.py: long-double Cholesky and least-squares residual against exact
rational arithmetic (the inputs are float64 numbers, so Fractions hold them exactly)."""
from fractions import Fraction

import numpy as np
import pytest

from tandem.inference import extended_precision as ep

pytestmark = pytest.mark.skipif(not ep.AVAILABLE, reason="long double is plain double on this platform")


def _exact_lstsq_residual(A, k):
    """min_u ‖A[:, :k] u − A[:, k:]‖²_F by exact normal equations in Fractions (Gauss–Jordan)."""
    X = [[Fraction(float(v)) for v in row[:k]] for row in A]
    Yc = [[Fraction(float(v)) for v in row[k:]] for row in A]
    G = [[sum(X[r][i] * X[r][j] for r in range(len(X))) for j in range(k)] for i in range(k)]
    B = [[sum(X[r][i] * Yc[r][j] for r in range(len(X))) for j in range(len(Yc[0]))] for i in range(k)]
    aug = [G[i] + B[i] for i in range(k)]
    for c in range(k):
        p = aug[c][c]
        aug[c] = [v / p for v in aug[c]]
        for r in range(k):
            if r != c and aug[r][c] != 0:
                f = aug[r][c]
                aug[r] = [a - f * b for a, b in zip(aug[r], aug[c])]
    U = [row[k:] for row in aug]
    total = Fraction(0)
    for r in range(len(X)):
        for j in range(len(Yc[0])):
            e = sum(X[r][i] * U[i][j] for i in range(k)) - Yc[r][j]
            total += e * e
    return total


def test_lstsq_residual_of_an_ill_conditioned_problem():
    # columns of a Vandermonde matrix on [0, 1] (k = 10, condition 4·10⁶) and a target within 1e-6 of
    # their span plus a second one: the residual is ≈ 1e-10 of ‖y‖², so float64 QR keeps only ≈ 6
    # digits of it (measured 1.7e-10 relative), long double ≈ 13 (2.0e-14)
    g = np.random.default_rng(0)
    m, k = 40, 10
    t = np.sort(g.uniform(0, 1, m))
    X = np.vander(t, k, increasing=True)
    A = np.column_stack([X, np.sin(3 * t) + 1e-6 * g.standard_normal(m), np.cos(2 * t)])
    A0 = A.copy()
    exact = _exact_lstsq_residual(A, k)
    got = ep.lstsq_residual(A, k)
    assert got.dtype == np.longdouble
    rel = abs(Fraction(*got.as_integer_ratio()) - exact) / exact
    assert rel <= 1e-12, float(rel)
    R = np.linalg.qr(A, mode="r")
    rel64 = abs(Fraction(float((R[k:, k:] ** 2).sum())) - exact) / exact
    assert rel64 > 1000 * rel, (float(rel64), float(rel))
    np.testing.assert_array_equal(A, A0)                          # the input is not modified


def test_lstsq_residual_with_a_zero_column_and_exact_fit():
    A = np.array([[0.0, 1.0, 2.0], [0.0, 2.0, 4.0], [0.0, 3.0, 6.0]])
    assert float(ep.lstsq_residual(A, 2)) == 0.0       # y = 2 x: exact fit, a zero first column skipped


def test_cholesky_matches_and_detects_indefinite():
    g = np.random.default_rng(1)
    B = g.standard_normal((6, 6))
    S = B @ B.T + 1e-3 * np.eye(6)
    L = ep.cholesky(S)
    assert L.dtype == np.longdouble and np.allclose(np.triu(L, 1), 0)
    Sx = S.astype(np.longdouble)
    assert float(np.abs(L @ L.T - Sx).max()) <= 1e3 * float(np.finfo(np.longdouble).eps) * float(np.abs(Sx).max())
    np.testing.assert_allclose(L.astype(float), np.linalg.cholesky(S), rtol=1e-10, atol=1e-12)
    assert ep.cholesky(np.diag([1.0, -1.0, 2.0])) is None
    assert ep.cholesky(np.zeros((2, 2))) is None
