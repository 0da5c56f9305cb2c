"""Ham et al. (2005) and Wang & Mahadevan (2008) alignment baselines."""
import numpy as np
import pytest
import scipy.linalg as sla

from tandem.inference.coupled_projections.baselines import (
    HamAlignment,
    ProcrustesAlignment,
    laplacian_eigenmaps,
    nystrom_extend,
)
from tandem.inference.coupled_projections.solver import knn_heat_weights, nearest_partner
from tandem.inference.datasets.manifolds import linear_views_of_curve, paired_scurve_swissroll


def _rotated_copy(n=150, seed=0):
    """Y is an exact rigid rotation (plus scaling) of X: both views have the same graph."""
    X, _, lat = paired_scurve_swissroll(n=n, seed=seed)
    Rot, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((3, 3)))
    return X, 2.5 * X @ Rot, lat


def test_laplacian_eigenmaps_solve_the_generalised_problem():
    X, _, _ = paired_scurve_swissroll(n=100, seed=1)
    S = knn_heat_weights(X, 6)
    F, lam = laplacian_eigenmaps(S, 2)
    Dg = np.diag(S.sum(1))
    L = Dg - S
    assert np.allclose(L @ F, Dg @ F * lam, atol=1e-10)
    assert np.allclose(F.T @ Dg @ F, np.eye(2), atol=1e-10)
    assert np.allclose(F.T @ Dg @ np.ones(100), 0.0, atol=1e-10)  # orthogonal to the constant
    assert lam[0] > 1e-8


def test_laplacian_eigenmaps_rejects_disconnected_graph():
    S = sla.block_diag(np.ones((3, 3)) - np.eye(3), np.ones((3, 3)) - np.eye(3))
    with pytest.raises(ValueError, match="connected components"):
        laplacian_eigenmaps(S, 1)


def test_ham_tied_pairs_coincide_and_soft_coupling_converges_to_tied():
    X, Y, _ = paired_scurve_swissroll(n=120, noise=0.01, seed=2)
    known = np.random.default_rng(2).choice(120, 15, replace=False)
    pairs = np.c_[known, known]
    tied = HamAlignment(d=2, k=6).fit(X, Y, pairs)
    assert np.allclose(tied.embedding_x[known], tied.embedding_y[known])
    F_tied = np.vstack([tied.embedding_x, tied.embedding_y])
    angles = []
    for mu in (1e-1, 1e6):
        soft = HamAlignment(d=2, k=6, mu=mu).fit(X, Y, pairs)
        gap = np.abs(soft.embedding_x[known] - soft.embedding_y[known]).max()
        angles.append(sla.subspace_angles(np.vstack([soft.embedding_x, soft.embedding_y]), F_tied).max())
        if mu == 1e6:
            assert gap < 1e-3
    assert angles[0] > 0.05 and angles[1] < 1e-3, angles  # μ → ∞ is the tied limit


def test_procrustes_aligns_identical_geometry_exactly():
    """When Y is a scaled rotation of X (the same graph: the heat-kernel width scales with
    the data), the per-view eigenmaps agree up to signs and Procrustes superimposes them."""
    X, Y, _ = _rotated_copy()
    known = np.random.default_rng(3).choice(150, 12, replace=False)
    m = ProcrustesAlignment(d=2, k=6).fit(X, Y, np.c_[known, known])
    held = np.setdiff1d(np.arange(150), known)
    assert np.mean(nearest_partner(m.embedding_x[held], m.embedding_y) == held) > 0.97
    assert np.allclose(m.embedding_x, m.embedding_y, atol=1e-8)
    assert np.isclose(abs(np.linalg.det(m.Q)), 1.0) and np.allclose(m.Q @ m.Q.T, np.eye(2))


def test_ham_on_identical_geometry_gives_symmetric_or_antisymmetric_modes():
    """With the same graph in both views and tied pairs, the joint graph is symmetric under
    swapping the views, so each eigenvector has f_x = f_y (aligned) or f_x = −f_y (zero on
    the tied pairs). With few pairs an antisymmetric mode can be among the lowest — the
    known weakness of the method this reproduces — but the symmetric ones match exactly."""
    X, Y, _ = _rotated_copy()
    known = np.random.default_rng(3).choice(150, 12, replace=False)
    m = HamAlignment(d=4, k=6).fit(X, Y, np.c_[known, known])
    fx, fy = m.embedding_x, m.embedding_y
    sym = np.abs(fx - fy).max(0) < 1e-10
    anti = np.abs(fx + fy).max(0) < 1e-10
    assert np.all(sym ^ anti) and sym.sum() >= 2
    assert np.allclose(fx[known][:, anti], 0.0, atol=1e-10)
    held = np.setdiff1d(np.arange(150), known)
    pred = nearest_partner(fx[held][:, sym], fy[:, sym])
    assert np.mean(pred == held) > 0.97


def test_procrustes_recovers_a_known_similarity_transform():
    """Feeding the same eigenmap through a known rotation+scale: Procrustes undoes it."""
    X, _, _ = paired_scurve_swissroll(n=100, seed=4)
    p = ProcrustesAlignment(d=2, k=6).fit(X, X, np.c_[np.arange(10), np.arange(10)])
    assert np.isclose(p.scale, 1.0) and np.allclose(p.Q, np.eye(2), atol=1e-8)


def test_nystrom_extension_is_a_normalised_kernel_average():
    rng = np.random.default_rng(5)
    Xtr = rng.standard_normal((50, 3))
    F = rng.standard_normal((50, 2))
    Xnew = rng.standard_normal((7, 3))
    const = nystrom_extend(Xtr, np.ones((50, 2)) * 3.0, Xnew, k=5, t=1.0)
    assert np.allclose(const, 3.0)
    # a new point at a training point with a tiny width returns that point's embedding
    out = nystrom_extend(Xtr, F, Xtr[[4, 9]] + 1e-9, k=5, t=1e-6)
    assert np.allclose(out, F[[4, 9]])
    # equals the explicit formula
    d2 = ((Xnew[:, None] - Xtr[None]) ** 2).sum(-1)
    idx = np.argsort(d2, 1)[:, :5]
    w = np.exp(-np.take_along_axis(d2, idx, 1) / 0.7)
    want = np.einsum("nk,nkd->nd", w / w.sum(1, keepdims=True), F[idx])
    assert np.allclose(nystrom_extend(Xtr, F, Xnew, k=5, t=0.7), want)


@pytest.mark.parametrize("Method", [HamAlignment, ProcrustesAlignment])
def test_out_of_sample_points_land_between_their_neighbours(Method):
    X, Y, tau = linear_views_of_curve(n=240, noise=0.0, seed=6)
    train = np.arange(0, 240, 2)  # every new point lies halfway between two training points
    test = np.arange(1, 240, 2)
    known = np.arange(0, 120, 6)
    m = Method(d=2, k=4).fit(X[train], Y[train], np.c_[known, known])
    for F, new in ((m.embedding_x, m.transform_x(X[test])), (m.embedding_y, m.transform_y(Y[test]))):
        mid = 0.5 * (F + np.roll(F, -1, axis=0))
        step = np.linalg.norm(F - np.roll(F, -1, axis=0), axis=1)
        assert np.median(np.linalg.norm(new - mid, axis=1) / step) < 0.25
    if Method is HamAlignment:  # one joint embedding: new points also find their partners
        pred = nearest_partner(m.transform_x(X[test]), m.transform_y(Y[test]))
        circ = np.minimum(np.abs(pred - np.arange(120)), 120 - np.abs(pred - np.arange(120)))
        assert np.mean(circ <= 2) > 0.8


@pytest.mark.parametrize("Method", [HamAlignment, ProcrustesAlignment])
def test_baselines_bad_input(Method):
    X, Y, _ = paired_scurve_swissroll(n=40, seed=7)
    with pytest.raises(ValueError, match="fewer than the latent dimension"):
        Method(d=3).fit(X, Y, np.c_[[0, 1], [0, 1]])
    with pytest.raises(ValueError, match="out of range"):
        Method(d=2).fit(X, Y, np.c_[[0, 1, 2], [0, 1, 40]])
    Xn = X.copy()
    Xn[0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        Method(d=2).fit(Xn, Y, np.c_[[0, 1, 2], [0, 1, 2]])
