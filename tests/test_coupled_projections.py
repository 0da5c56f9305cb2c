"""Exact coupled-projections solver (inference/coupled_projections.py): the objective's
two forms, the CCA limit, the constraints, optimality, out-of-sample maps, bad input."""
import numpy as np
import pytest
import scipy.linalg as sla

from tandem.inference.coupled_projections.solver import (
    CoupledProjections,
    alignment_omega,
    correspondence_laplacian,
    graph_laplacian,
    knn_heat_weights,
    nearest_partner,
    objective_loops,
    objective_trace,
)
from tandem.inference.datasets.manifolds import linear_views_of_curve, paired_scurve_swissroll


def _two_views(n=40, dx=5, dy=4, seed=0):
    rng = np.random.default_rng(seed)
    lat = rng.standard_normal((n, 2))
    X = lat @ rng.standard_normal((2, dx)) + 0.3 * rng.standard_normal((n, dx))
    Y = lat @ rng.standard_normal((2, dy)) + 0.3 * rng.standard_normal((n, dy))
    return X, Y


def test_heat_kernel_graph_is_symmetric_knn():
    X, _ = _two_views(30)
    S, t = knn_heat_weights(X, k=3, return_width=True)
    assert np.allclose(S, S.T) and np.all(np.diag(S) == 0)
    # every point keeps at least its k nearest neighbours, with heat-kernel weights
    d2 = ((X[:, None] - X[None]) ** 2).sum(-1)
    for i in range(30):
        nn = np.argsort(d2[i])[1:4]
        assert np.allclose(S[i, nn], np.exp(-d2[i, nn] / t))
    assert np.isclose(t, d2[S > 0].mean())
    L = graph_laplacian(S)
    assert np.allclose(L.sum(1), 0)


def test_correspondence_laplacian_quadratic_form_general_pairs():
    rng = np.random.default_rng(1)
    pairs = np.array([[0, 1], [0, 2], [3, 0], [4, 4]])  # many-to-one allowed
    LC = correspondence_laplacian(pairs, 5, 6)
    v = rng.standard_normal(11)
    want = sum((v[i] - v[5 + j]) ** 2 for i, j in pairs)
    assert np.isclose(v @ LC @ v, want)


@pytest.mark.parametrize("general", [False, True])
def test_loop_sum_objective_equals_trace_form(general):
    X, Y = _two_views(n=25)
    Y = Y[:20]  # unequal sizes
    rng = np.random.default_rng(2)
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    Sx, Sy = knn_heat_weights(Xc, 4), knn_heat_weights(Yc, 3)
    pairs = np.array([[0, 0], [3, 5], [7, 2], [10, 19]] + ([[3, 6], [11, 5]] if general else []))
    Px, Py = rng.standard_normal((5, 2)), rng.standard_normal((4, 2))
    ax, ay = 0.7, 1.9
    Om = alignment_omega(graph_laplacian(Sx), graph_laplacian(Sy), pairs, ax, ay)
    Z = sla.block_diag(Xc.T, Yc.T)
    J_trace = objective_trace(np.vstack([Px, Py]), Z, Om)
    J_loop = objective_loops(Px, Py, Xc, Yc, pairs, Sx, Sy, ax, ay)
    assert np.isclose(J_trace, J_loop, rtol=1e-12)


def _cca_independent(X, Y):
    """Canonical correlations and x-directions by SVD of the whitened cross-covariance."""
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    def inv_sqrt(C):
        w, V = np.linalg.eigh(C)
        return V @ np.diag(w ** -0.5) @ V.T
    Wx, Wy = inv_sqrt(Xc.T @ Xc), inv_sqrt(Yc.T @ Yc)
    U, rho, Vt = np.linalg.svd(Wx @ (Xc.T @ Yc) @ Wy)
    return rho, Wx @ U, Wy @ Vt.T


def test_alpha_zero_full_pairing_is_cca():
    n = 200
    X, Y = _two_views(n=n, dx=5, dy=3, seed=3)
    rho, Ax, Ay = _cca_independent(X, Y)
    pairs = np.c_[np.arange(n), np.arange(n)]
    cp = CoupledProjections(d=3, alpha_x=0.0, alpha_y=0.0, k=5).fit(X, Y, pairs)
    rho_cp = 1.0 - n * cp.eigenvalues
    assert np.max(np.abs(rho_cp - rho[:3])) < 1e-8
    assert rho[0] > 0.5 and rho[2] < rho[0] - 0.1  # a non-trivial test problem
    # same canonical directions (each eigenvector's x- and y-parts, up to scale and sign)
    Mx, My = cp.Mx, cp.My
    for k in range(3):
        assert sla.subspace_angles(Mx[:, [k]], Ax[:, [k]]).max() < 1e-6
        assert sla.subspace_angles(My[:, [k]], Ay[:, [k]]).max() < 1e-6
    # with the ±ρ pairing, the largest eigenvalues are 1 + ρ
    lam_all = sla.eigh(cp.A, cp.B, eigvals_only=True)
    assert np.allclose(np.sort(n * lam_all - 1.0)[-3:], np.sort(rho)[-3:], atol=1e-8)


def test_constraints_hold_and_solution_is_optimal():
    X, Y, _ = paired_scurve_swissroll(n=120, noise=0.02, seed=4)
    rng = np.random.default_rng(4)
    known = rng.choice(120, 20, replace=False)
    cp = CoupledProjections(d=2, k=6).fit(X, Y, np.c_[known, known])
    P, Z = cp.P, cp.Z
    assert np.allclose(P.T @ Z @ Z.T @ P, np.eye(2), atol=1e-10)  # Pᵀ Z Zᵀ P = I
    e = np.ones(Z.shape[1])
    assert np.allclose(P.T @ Z @ e, 0.0, atol=1e-10)  # Pᵀ Z e = 0
    # the objective equals the sum of the kept eigenvalues and beats random feasible P
    J = cp.objective()
    assert np.isclose(J, cp.eigenvalues.sum(), rtol=1e-9)
    L = np.linalg.cholesky(cp.B)
    for _ in range(50):
        Q, _ = np.linalg.qr(rng.standard_normal((P.shape[0], 2)))
        Pr = sla.solve_triangular(L.T, Q, lower=False)  # Prᵀ B Pr = I
        assert objective_trace(Pr, Z, cp.Omega) >= J - 1e-12
    # the eigenvectors solve the generalised eigenproblem
    assert np.allclose(cp.A @ P, cp.B @ P * cp.eigenvalues, atol=1e-10)


def test_out_of_sample_maps_and_linear_views_alignment():
    X, Y, tau = linear_views_of_curve(n=200, dx=10, dy=8, noise=0.01, seed=5)
    rng = np.random.default_rng(5)
    train = np.sort(rng.choice(200, 150, replace=False))
    test = np.setdiff1d(np.arange(200), train)
    known = rng.choice(150, 20, replace=False)
    cp = CoupledProjections(d=3, k=6).fit(X[train], Y[train], np.c_[known, known])
    # transform reproduces the in-sample embedding
    assert np.allclose(cp.transform_x(X[train]), cp.embedding_x)
    assert np.allclose(cp.transform_y(Y[train]), cp.embedding_y)
    # new points of a shared linear curve are matched to their true partners
    pred = nearest_partner(cp.transform_x(X[test]), cp.transform_y(Y[test]))
    assert np.mean(pred == np.arange(len(test))) > 0.9


def test_ridge_and_pca_handle_singular_image_like_data():
    rng = np.random.default_rng(6)
    lat = rng.standard_normal((30, 2))
    X = lat @ rng.standard_normal((2, 100)) + 0.1 * rng.standard_normal((30, 100))  # D ≫ N
    Y = lat @ rng.standard_normal((2, 80)) + 0.1 * rng.standard_normal((30, 80))
    pairs = np.c_[np.arange(8), np.arange(8)]
    for kw in ({}, {"pca": 10}, {"pca": 10, "ridge": 1e-3}):
        cp = CoupledProjections(d=2, k=4, **kw).fit(X, Y, pairs)
        assert np.all(np.isfinite(cp.P))
        assert np.allclose(cp.P.T @ cp.B @ cp.P, np.eye(2), atol=1e-8)
    assert cp.dims == (10, 10) and cp.Mx.shape == (100, 2)


def test_bad_input_raises_clear_errors():
    X, Y = _two_views(n=20, dx=5, dy=4)
    ok = np.c_[np.arange(5), np.arange(5)]
    with pytest.raises(ValueError, match="fewer than the latent dimension"):
        CoupledProjections(d=3).fit(X, Y, ok[:2])
    with pytest.raises(ValueError, match="out of range"):
        CoupledProjections(d=2).fit(X, Y, np.array([[0, 0], [1, 20], [2, 2]]))
    with pytest.raises(ValueError, match="out of range"):
        CoupledProjections(d=2).fit(X, Y, np.array([[-1, 0], [1, 1]]))
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        CoupledProjections(d=2).fit(Xn, Y, ok)
    with pytest.raises(ValueError, match="larger than a reduced view dimension"):
        CoupledProjections(d=5).fit(X, Y, ok)
    with pytest.raises(ValueError, match="larger than a reduced view dimension"):
        CoupledProjections(d=3, pca=2).fit(X, Y, ok)
    with pytest.raises(ValueError, match=r"shape \(K, 2\)"):
        CoupledProjections(d=2).fit(X, Y, np.arange(5))
    with pytest.raises(ValueError, match="columns"):
        CoupledProjections(d=2).fit(X, Y, ok).transform_x(Y)
    with pytest.raises(ValueError, match="duplicated"):
        CoupledProjections(d=2).fit(X, Y, np.r_[ok, ok[:1]])
    with pytest.raises(ValueError, match="integer"):
        CoupledProjections(d=2).fit(X, Y, ok + 0.5)


def test_disconnected_knn_graph_is_joined_by_spanning_tree_edges():
    from scipy.sparse.csgraph import connected_components
    rng = np.random.default_rng(8)
    X = np.r_[rng.standard_normal((10, 2)), rng.standard_normal((10, 2)) + 6.0]
    S0 = knn_heat_weights(X, 3, connect=False)
    S1 = knn_heat_weights(X, 3)
    assert connected_components(S0 > 0)[0] == 2 and connected_components(S1 > 0)[0] == 1
    added = (S1 > 0) & ~(S0 > 0)
    assert added.sum() == 2  # exactly one bridging edge (both directions): the shortest one
    i, j = np.argwhere(added)[0]
    d = np.linalg.norm(X[:10, None] - X[None, 10:], axis=-1)
    assert np.isclose(np.linalg.norm(X[i] - X[j]), d.min())


def test_refit_with_user_weights_leaves_no_width_of_the_previous_graph():
    """tx_/ty_ describe graphs built by this fit; a refit on user weights must not keep the old ones."""
    from tandem.inference.coupled_projections import CoupledProjections
    from tandem.inference.coupled_projections.solver import knn_heat_weights
    r = np.random.default_rng(0)
    X, Y = r.normal(size=(20, 3)), r.normal(size=(20, 3))
    pairs = np.c_[np.arange(6), np.arange(6)]
    m = CoupledProjections(d=1, k=3).fit(X, Y, pairs)
    assert m.tx_ > 0 and m.ty_ > 0
    m.fit(X, Y, pairs, Sx=knn_heat_weights(X, 3))
    assert m.tx_ is None and m.ty_ > 0
    fresh = CoupledProjections(d=1, k=3).fit(X, Y, pairs, Sx=knn_heat_weights(X, 3))
    assert {k: type(v) for k, v in vars(m).items()} == {k: type(v) for k, v in vars(fresh).items()}
