"""Baselines for manifold alignment with a few known correspondences (same inputs as
:class:`tandem.inference.coupled_projections.solver.CoupledProjections`: ``X``, ``Y``, ``pairs``).

* :class:`HamAlignment` — Ham, Lee & Saul, *Semisupervised alignment of manifolds*
  (AISTATS 2005), the variant "without pre-specified coordinates": one graph-Laplacian
  embedding of the joint graph of both data sets in which the known pairs are coupled.
  Ham et al. minimise ``μ Σ_{(i,j)∈C} ‖f_i − g_j‖² + fᵀL^x f + gᵀL^y g`` under a degree
  normalisation; ``mu=np.inf`` (the default) is their limit of *tied* pairs, implemented
  exactly by contracting each connected group of paired points into one graph node (its
  edges summed). The embedding is the generalised eigenproblem ``L f = λ D f`` of the joint
  graph (Laplacian eigenmaps), keeping eigenvectors 2..d+1 (the first is the constant).
  A finite ``mu`` solves ``(blockdiag(L^x, L^y) + μ L_C) f = λ blockdiag(D^x, D^y) f``
  instead, whose μ → ∞ limit is the tied (contracted) problem.
  It is a nonlinear (non-parametric) embedding; new points are mapped by the Nyström-style
  kernel-regression extension f(x) = Σ_i w_i f_i / Σ_i w_i over the k nearest training
  points with the same heat-kernel weights w_i = exp(−‖x − x_i‖²/t) as the graph
  (the Laplacian-eigenmaps Nyström formula of Bengio et al., 2004, up to the 1/(1−λ)
  factor, which is ≈ 1 for the small eigenvalues kept).
* :class:`ProcrustesAlignment` — Wang & Mahadevan, *Manifold alignment using Procrustes
  analysis* (ICML 2008): Laplacian eigenmaps of each view separately (d dims), then the
  scaled orthogonal Procrustes map that best superimposes the known pairs' embeddings:
  with the paired rows of both embeddings centred (E_x^C, E_y^C),
  ``E_y^Cᵀ E_x^C = U Σ Vᵀ``, Q = U Vᵀ, k = tr Σ / tr(E_y^Cᵀ E_y^C); every x is mapped to
  ``e_x − m_x`` and every y to ``k (e_y − m_y) Q`` (m the mean of the paired rows). New points: Nyström extension
  in each view, then the same Procrustes map.

Both use the same neighbourhood graph as the coupled projections (symmetrised k-NN,
heat-kernel weights, width t = mean squared edge length by default), built on the centred
inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from tandem.inference.coupled_projections.solver import (
    check_pairs,
    correspondence_laplacian,
    knn_heat_weights,
    sign_fix,
)
from tandem.inference.distances import knn, sq_dists
from tandem.inference.validation import as_array, check_int_range, check_real_range, like_input

__all__ = ["laplacian_eigenmaps", "nystrom_extend", "HamAlignment", "ProcrustesAlignment"]


def laplacian_eigenmaps(S: np.ndarray, d: int, extra: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Laplacian eigenmaps of weights S: eigenvectors 2..d+1 of L f = λ D f.

    Parameters
    ----------
    S : numpy.ndarray
        (N, N) symmetric non-negative weights.
    d : int
        Embedding dimension.
    extra : numpy.ndarray, optional
        (N, N) Laplacian added to L but not to D (Ham et al.'s pair coupling μ L_C: the degree
        normalisation stays that of the neighbourhood graphs).

    Returns
    -------
    embedding : numpy.ndarray
        (N, d).
    eigenvalues : numpy.ndarray
        (d,).

    Raises
    ------
    ValueError
        When the graph has isolated nodes or more than one connected component (the embedding
        would then be the component indicators, not the manifold).
    """
    n = S.shape[0]
    if d + 1 > n:
        raise ValueError(f"d = {d}: Laplacian eigenmaps of {n} points give at most {n - 1} dimensions")
    deg = S.sum(1)
    if (deg <= 0).any():
        raise ValueError("graph has isolated points (zero degree); increase k")
    ncomp, _ = connected_components(csr_matrix((S > 0) | (extra is not None and extra != 0)),
                                    directed=False)
    if ncomp > 1:
        raise ValueError(f"the neighbourhood graph has {ncomp} connected components; increase k "
                         "(or, for the joint graph, add known pairs linking the components)")
    L = np.diag(deg) - S + (0.0 if extra is None else extra)
    lam, V = sla.eigh(L, np.diag(deg), subset_by_index=[1, d])
    return sign_fix(V), lam


def nystrom_extend(Xtrain: np.ndarray, F: np.ndarray, Xnew: np.ndarray, k: int, t: float) -> np.ndarray:
    """Kernel-regression (Nyström-style) extension of an embedding to new points.

    f(x) = Σ_{i ∈ kNN(x)} w_i F_i / Σ w_i, w_i = exp(−‖x − x_i‖² / t) (w_i = 1 for t = ∞).

    Parameters
    ----------
    Xtrain : numpy.ndarray
        (N, p) training points.
    F : numpy.ndarray
        (N, d) their embedding.
    Xnew : numpy.ndarray
        (n, p) new points.
    k : int
        Neighbours used.
    t : float
        Heat-kernel width (``inf``: uniform weights).

    Returns
    -------
    numpy.ndarray
        (n, d) the extended embedding.
    """
    d2 = sq_dists(Xnew, Xtrain)
    k = min(k, Xtrain.shape[0])
    idx = knn(Xnew, Xtrain, k=k)
    dk = np.take_along_axis(d2, idx, 1)
    # subtract the nearest distance before exponentiating: same weights, no underflow
    w = np.exp(-(dk - dk[:, :1]) / t) if np.isfinite(t) else np.ones_like(dk)
    w /= w.sum(1, keepdims=True)
    return np.einsum("nk,nkd->nd", w, F[idx])


def _check_xy(X, Y, pairs, d, k):
    check_int_range(d, "d (latent dimension)", 1)
    X = as_array(X, "X", ndim=2, min_rows=2)
    Y = as_array(Y, "Y", ndim=2, min_rows=2)
    pairs = check_pairs(pairs, X.shape[0], Y.shape[0], d)
    check_int_range(k, "k (number of neighbours)", 1)
    return X, Y, pairs


def _new_points(A, name: str, mean: np.ndarray) -> np.ndarray:
    """New points of one view, centred on the training mean: (n, D) checked against fit's D columns
    (a wrong width would otherwise fail as an opaque broadcast error)."""
    A = as_array(A, f"{name} (new points)", ndim=2, min_rows=1)
    if A.shape[1] != mean.shape[0]:
        raise ValueError(f"{name} (new points): expected {mean.shape[0]} columns (as in fit), got {A.shape[1]}")
    return A - mean


@dataclass
class HamAlignment:
    """Ham, Lee & Saul (2005) semi-supervised alignment (joint Laplacian embedding).

    After :meth:`fit`: ``embedding_x`` (N_x, d), ``embedding_y`` (N_y, d), ``eigenvalues``.

    Parameters
    ----------
    d : int, default 2
        Embedding dimension.
    k : int, default 5
        Neighbours of the kNN graphs.
    t : float, optional
        Heat-kernel width (default from the data, as the solver's).
    mu : float, default inf
        ``inf``: tied pairs (graph contraction); finite: pair edges of weight μ.
    """
    d: int = 2
    k: int = 5
    t: float | None = None
    mu: float = np.inf

    def fit(self, X, Y, pairs) -> "HamAlignment":
        """Embed both views jointly with the known pairs coupled.

        Parameters
        ----------
        X : array_like
            (N_x, p) points of view x.
        Y : array_like
            (N_y, q) points of view y.
        pairs : array_like of int
            (P, 2) known correspondences (row of X, row of Y).

        Returns
        -------
        HamAlignment
            ``self``, fitted.
        """
        X, Y, pairs = _check_xy(X, Y, pairs, self.d, self.k)
        if not np.isinf(self.mu):
            check_real_range(self.mu, "mu (pair-coupling weight)", 0.0, None, low_open=True)
        nx, ny = X.shape[0], Y.shape[0]
        self.mean_x, self.mean_y = X.mean(0), Y.mean(0)
        self.X, self.Y = X - self.mean_x, Y - self.mean_y
        Sx, self.tx = knn_heat_weights(self.X, self.k, self.t, return_width=True, name="X")
        Sy, self.ty = knn_heat_weights(self.Y, self.k, self.t, return_width=True, name="Y")
        n = nx + ny
        if np.isinf(self.mu):
            # contract every connected group of tied points into one node
            Wc = np.zeros((n, n), bool)
            Wc[pairs[:, 0], nx + pairs[:, 1]] = True
            _, node = connected_components(csr_matrix(Wc), directed=False)
            M = np.zeros((n, node.max() + 1))
            M[np.arange(n), node] = 1.0
            S = M.T @ sla.block_diag(Sx, Sy) @ M
            np.fill_diagonal(S, 0.0)
            F, self.eigenvalues = laplacian_eigenmaps(S, self.d)
        else:
            # H = blockdiag(L^x, L^y) + μ L_C, normalised by blockdiag(D^x, D^y)
            S = sla.block_diag(Sx, Sy)
            M = np.eye(n)
            F, self.eigenvalues = laplacian_eigenmaps(
                S, self.d, extra=self.mu * correspondence_laplacian(pairs, nx, ny))
        F = M @ F
        self.embedding_x, self.embedding_y = F[:nx], F[nx:]
        return self

    def transform_x(self, X) -> np.ndarray:
        """Out-of-sample x points via the kernel-regression (Nyström) extension.

        Parameters
        ----------
        X : array_like, torch.Tensor or scipy.sparse matrix
            (n, p) new points of view x.

        Returns
        -------
        numpy.ndarray or torch.Tensor
            (n, d) their embedding; numpy in → numpy out, a tensor in → a tensor on its device.
        """
        A = _new_points(X, "X", self.mean_x)
        return like_input(nystrom_extend(self.X, self.embedding_x, A, self.k, self.tx), X)

    def transform_y(self, Y) -> np.ndarray:
        """Out-of-sample y points via the kernel-regression (Nyström) extension.

        Parameters
        ----------
        Y : array_like, torch.Tensor or scipy.sparse matrix
            (n, q) new points of view y.

        Returns
        -------
        numpy.ndarray or torch.Tensor
            (n, d) their embedding; numpy in → numpy out, a tensor in → a tensor on its device.
        """
        A = _new_points(Y, "Y", self.mean_y)
        return like_input(nystrom_extend(self.Y, self.embedding_y, A, self.k, self.ty), Y)


@dataclass
class ProcrustesAlignment:
    """Wang & Mahadevan (2008): per-view Laplacian eigenmaps + scaled Procrustes on the pairs.

    After :meth:`fit`: ``embedding_x`` (N_x, d) (view x's eigenmap, translated) and
    ``embedding_y`` (N_y, d) (view y's eigenmap mapped by the Procrustes transform); ``raw_x``,
    ``raw_y`` the per-view eigenmaps; ``Q`` (d, d), ``scale``.

    Parameters
    ----------
    d : int, default 2
        Embedding dimension.
    k : int, default 5
        Neighbours of the kNN graphs.
    t : float, optional
        Heat-kernel width (default from the data).
    """
    d: int = 2
    k: int = 5
    t: float | None = None

    def fit(self, X, Y, pairs) -> "ProcrustesAlignment":
        """Embed each view, then superimpose the pairs by a scaled orthogonal map.

        Parameters
        ----------
        X : array_like
            (N_x, p) points of view x.
        Y : array_like
            (N_y, q) points of view y.
        pairs : array_like of int
            (P, 2) known correspondences (row of X, row of Y).

        Returns
        -------
        ProcrustesAlignment
            ``self``, fitted.
        """
        X, Y, pairs = _check_xy(X, Y, pairs, self.d, self.k)
        self.mean_x, self.mean_y = X.mean(0), Y.mean(0)
        self.X, self.Y = X - self.mean_x, Y - self.mean_y
        Sx, self.tx = knn_heat_weights(self.X, self.k, self.t, return_width=True, name="X")
        Sy, self.ty = knn_heat_weights(self.Y, self.k, self.t, return_width=True, name="Y")
        self.raw_x, _ = laplacian_eigenmaps(Sx, self.d)
        self.raw_y, _ = laplacian_eigenmaps(Sy, self.d)
        A, B = self.raw_x[pairs[:, 0]], self.raw_y[pairs[:, 1]]
        self.mx, self.my = A.mean(0), B.mean(0)
        A, B = A - self.mx, B - self.my
        U, s, Vt = np.linalg.svd(B.T @ A)
        self.Q = U @ Vt
        self.scale = float(s.sum() / max(np.sum(B * B), 1e-300))
        self.embedding_x = self._map_x(self.raw_x)
        self.embedding_y = self._map_y(self.raw_y)
        return self

    def _map_x(self, E):
        return E - self.mx

    def _map_y(self, E):
        return self.scale * (E - self.my) @ self.Q

    def transform_x(self, X) -> np.ndarray:
        """Out-of-sample x points: Nyström extension, then the x translation.

        Parameters
        ----------
        X : array_like, torch.Tensor or scipy.sparse matrix
            (n, p) new points of view x.

        Returns
        -------
        numpy.ndarray or torch.Tensor
            (n, d) their embedding; numpy in → numpy out, a tensor in → a tensor on its device.
        """
        A = _new_points(X, "X", self.mean_x)
        return like_input(self._map_x(nystrom_extend(self.X, self.raw_x, A, self.k, self.tx)), X)

    def transform_y(self, Y) -> np.ndarray:
        """Out-of-sample y points: Nyström extension, then the Procrustes map.

        Parameters
        ----------
        Y : array_like, torch.Tensor or scipy.sparse matrix
            (n, q) new points of view y.

        Returns
        -------
        numpy.ndarray or torch.Tensor
            (n, d) their embedding; numpy in → numpy out, a tensor in → a tensor on its device.
        """
        A = _new_points(Y, "Y", self.mean_y)
        return like_input(self._map_y(nystrom_extend(self.Y, self.raw_y, A, self.k, self.ty)), Y)
