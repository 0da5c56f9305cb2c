"""Manifold alignment by coupled linear projections (Jiang, Li, Yao & Liu, 2010) — exact solver.

Two data sets ``X`` (N_x × D_x, rows are points) and ``Y`` (N_y × D_y) and a set C of K
known pairs ``(i, j)`` (x_i ↔ y_j). The method learns linear maps ``u = P_xᵀ x`` and
``u = P_yᵀ y`` into one space R^d minimising (paper §2, general-C form of the spec)

    J = (1/K) Σ_{(i,j)∈C} ‖P_xᵀx_i − P_yᵀy_j‖²
        + α_x/N_x² Σ_{i,i'} ‖P_xᵀx_i − P_xᵀx_i'‖² S^x_{ii'} + α_y/N_y² Σ_{j,j'} (likewise)
      = Tr(Pᵀ Z Ω Zᵀ P),
    Ω = (1/K) L_C + blockdiag(2α_x/N_x² · L^x, 2α_y/N_y² · L^y),
    L_C = [[diag(W_C 1), −W_C], [−W_Cᵀ, diag(W_Cᵀ 1)]],   L = D − S (graph Laplacian),

with Z = blockdiag(Xᵀ, Yᵀ) (columns are points) and P = [P_x; P_y], subject to
Pᵀ Z Zᵀ P = I and Pᵀ Z e = 0. The minimiser is given by the d smallest eigenpairs of the
generalised symmetric eigenproblem ``Z Ω Zᵀ p = λ Z Zᵀ p`` (``scipy.linalg.eigh(A, B)``).

Choices the paper leaves open (documented here, tested in tests/test_coupled_projections.py):

* **Centring.** Each view is centred on its own mean. Then Z e_x = Z e_y = 0, so
  Pᵀ Z e = 0 holds for every P and the constant ("trivial") solution of the unconstrained
  Laplacian problem cannot occur: the d smallest eigenpairs are all non-trivial.
* **Per-view PCA.** Each centred view is projected on its leading principal directions
  (``pca=None`` keeps every direction of non-zero variance, i.e. the rank, which makes
  Z Zᵀ non-singular without changing the problem; an integer keeps that many, which also
  regularises image data, where D ≫ N and an unreduced problem fits the known pairs
  exactly). The linear maps are returned both in the reduced coordinates (``Px``, ``Py``)
  and in input space (``Mx = V_x P_x``, ``My = V_y P_y``).
* **Ridge.** ``B = Z Zᵀ + blockdiag(r_x I, r_y I)`` with ``r_v = ridge · tr(Z_v Z_vᵀ)/p_v``
  (relative to the mean per-direction variance). ``ridge = 0`` is the paper's constraint.
* **Graph.** Symmetrised k-nearest-neighbour graph (i ~ i' when either is among the other's
  k nearest neighbours; joined by minimum-spanning-tree edges if it is disconnected),
  heat-kernel weights S = exp(−‖x_i − x_i'‖² / t) on the edges; the
  default width t is the mean squared edge length of the k-NN graph; ``t=np.inf`` gives 0/1
  weights. The graph is built on the centred input data (before PCA).
* **Signs.** Each eigenvector is signed so that its largest-magnitude entry is positive
  (deterministic output); near-degenerate eigenvectors are only defined up to rotation,
  so solutions should be compared by principal angles (``scipy.linalg.subspace_angles``).

With α = 0 and full 1:1 pairing the problem is CCA: the canonical correlations are
ρ_k = 1 − N λ_k (a test checks this against an SVD of the whitened cross-covariance).
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import pyro.optim
import scipy.linalg as sla

from tandem.guides.coupled_projections import Guide

# the graphs, the pairs and Ω, and the PCA helpers live in their own modules; the
# "noqa: F401" imports keep their names importable from here
from tandem.inference.coupled_projections.correspondences import (  # noqa: F401
    alignment_omega,
    check_pairs,
    correspondence_laplacian,
    correspondence_matrix,
    objective_loops,
    objective_trace,
)
from tandem.inference.coupled_projections.graphs import (  # noqa: F401
    _connect,
    _knn_mask,
    graph_laplacian,
    heat_width,
    knn_heat_weights,
)
from tandem.inference.coupled_projections.pca import PCA, nearest_partner, sign_fix  # noqa: F401
from tandem.inference.params import Interval, OneOf, SequenceOf, TandemEstimator, own_params
from tandem.inference.predictive import posterior_predictive, to_arviz
from tandem.inference.svi import fit
from tandem.inference.validation import (
    NotFittedError,
    as_array,
    check_real_range,
    check_weights,
    like_input,
)
from tandem.models import coupled_projections as cp_model

__all__ = ["knn_heat_weights", "graph_laplacian", "check_pairs",
           "correspondence_matrix", "correspondence_laplacian", "alignment_omega",
           "objective_loops", "objective_trace", "PCA", "CoupledProjections", "nearest_partner",
           "heat_width", "sign_fix"]


# ---------------------------------------------------------------------------- solver

_POS_INT = Interval(Integral, 1)
#: the learned state of :class:`CoupledProjections` (stored as ``name_``; ``name`` is an alias)
_LEARNED = ("pairs", "pca_x", "pca_y", "tx", "ty", "Sx", "Sy", "Omega", "Z", "A", "B", "eigenvalues", "P",
            "Px", "Py", "Mx", "My", "embedding_x", "embedding_y", "dims")


class CoupledProjections(TandemEstimator):
    r"""The paper's coupled linear projections (exact generalised-eigenproblem solver).

    Follows the estimator contract (:mod:`tandem.inference.params`): declared constraints
    (checked at construction and in :meth:`fit`), ``get_params``/``set_params``/``clone``,
    :class:`tandem.NotFittedError` from every method that needs a fit.

    Parameters
    ----------
    d : int, default 2
        Latent dimension.
    k : int, default 5
        Number of nearest neighbours of the neighbourhood graphs.
    t : float or None, default None
        Heat-kernel width (> 0, ``np.inf`` for 0/1 weights); None: the mean squared edge
        length of each graph.
    alpha_x : float, default 1.0
        Weight of view x's neighbourhood-preservation term (paper: 1).
    alpha_y : float, default 1.0
        Weight of view y's neighbourhood-preservation term (paper: 1).
    pca : int, sequence of two or None, default None
        Per-view PCA components (int) or None (keep the rank). One entry per view may be given
        as a pair ``(p_x, p_y)`` (a tuple or list; an entry may be None).
    ridge : float, default 0.0
        Relative ridge added to Z Zᵀ (0 = the paper's exact constraint).

    Attributes
    ----------
    Px\_ : numpy.ndarray
        (p_x, d) the map of view x in PCA coordinates.
    Py\_ : numpy.ndarray
        (p_y, d) the map of view y in PCA coordinates.
    Mx\_ : numpy.ndarray
        (D_x, d) the map of view x in input space.
    My\_ : numpy.ndarray
        (D_y, d) the map of view y in input space.
    P\_ : numpy.ndarray
        (p_x + p_y, d) the stacked maps [P_x; P_y].
    eigenvalues\_ : numpy.ndarray
        (d,) the objective value of each direction.
    embedding_x\_ : numpy.ndarray
        (N_x, d) the embedded training points of view x.
    embedding_y\_ : numpy.ndarray
        (N_y, d) the embedded training points of view y.
    Omega\_ : numpy.ndarray
        (N_x + N_y, N_x + N_y) alignment matrix Ω.
    pairs\_ : numpy.ndarray
        (K, 2) the validated known pairs.
    Sx\_ : numpy.ndarray
        (N_x, N_x) neighbourhood weights of view x.
    Sy\_ : numpy.ndarray
        (N_y, N_y) neighbourhood weights of view y.
    tx\_ : float or None
        Heat-kernel width of view x's graph (None when ``Sx`` was given).
    ty\_ : float or None
        Heat-kernel width of view y's graph (likewise).
    Z\_ : numpy.ndarray
        (p_x + p_y, N_x + N_y) block-diagonal reduced data, columns are points.
    A\_ : numpy.ndarray
        (p_x + p_y, p_x + p_y) A = Z Ω Zᵀ, the eigenproblem's left matrix.
    B\_ : numpy.ndarray
        (p_x + p_y, p_x + p_y) B = Z Zᵀ (+ ridge), its right matrix.
    pca_x\_ : PCA
        View x's PCA.
    pca_y\_ : PCA
        View y's PCA.
    dims\_ : tuple of int
        (p_x, p_y), the reduced view dimensions.
    svi_result\_ : FitResult
        Set by :meth:`to_inference_data`: the SVI result.
    whitened\_ : WhitenedProblem
        Set by :meth:`to_inference_data`: the whitened problem
        (:class:`~tandem.models.coupled_projections.WhitenedProblem`).

    Notes
    -----
    Each learned attribute is also readable without the trailing underscore (``Px`` is
    ``Px_``).
    """

    _parameter_constraints = {
        "d": [_POS_INT], "k": [_POS_INT],
        "t": [None, Interval(Real, 0, closed="neither", inf_ok=True)],
        "alpha_x": [Interval(Real, 0)], "alpha_y": [Interval(Real, 0)],
        "pca": [None, _POS_INT, SequenceOf(OneOf(None, _POS_INT), length=2)],
        "ridge": [Interval(Real, 0)],
    }

    def __init__(self, d: int = 2, k: int = 5, t: float | None = None, alpha_x: float = 1.0, alpha_y: float = 1.0,
                 pca: int | tuple | None = None, ridge: float = 0.0):
        self.d, self.k, self.t, self.alpha_x, self.alpha_y, self.pca, self.ridge = d, k, t, alpha_x, alpha_y, pca, ridge
        self._validate_params()

    def _check(self):
        self._validate_params()

    def fit(self, X, Y, pairs, Sx: np.ndarray | None = None, Sy: np.ndarray | None = None
            ) -> "CoupledProjections":
        """Fit the maps by the generalised eigenproblem Z Ω Zᵀ p = λ B p.

        Parameters
        ----------
        X : array_like, torch.Tensor or scipy.sparse matrix
            (N_x, D_x) points of view x (rows), N_x ≥ 2 (a sparse matrix is densified).
        Y : array_like, torch.Tensor or scipy.sparse matrix
            (N_y, D_y) points of view y (rows), N_y ≥ 2 (likewise).
        pairs : array_like
            (K, 2) known pairs (i, j), x_i ↔ y_j, K ≥ d.
        Sx : numpy.ndarray or scipy.sparse matrix, optional
            (N_x, N_x) neighbourhood weights of view x (else the k-NN heat-kernel graph of the
            centred inputs).
        Sy : numpy.ndarray or scipy.sparse matrix, optional
            (N_y, N_y) neighbourhood weights of view y (likewise).

        Returns
        -------
        CoupledProjections
            ``self``, fitted.

        Raises
        ------
        ValueError
            If an input is malformed, ``d`` exceeds a reduced view dimension, or Z Zᵀ is
            singular (reduce with ``pca`` or add a ``ridge``).
        """
        self._check()
        X = as_array(X, "X", ndim=2, min_rows=2)
        Y = as_array(Y, "Y", ndim=2, min_rows=2)
        nx, ny = X.shape[0], Y.shape[0]
        self.pairs = check_pairs(pairs, nx, ny, self.d)
        # pca: None, an int, or one entry per view (any sequence of two: the declared constraint)
        px, py = (self.pca, self.pca) if self.pca is None or isinstance(self.pca, Integral) else self.pca
        self.pca_x = PCA(None if px is None else int(px)).fit(X, "X")
        self.pca_y = PCA(None if py is None else int(py)).fit(Y, "Y")
        Xr, Yr = self.pca_x.transform(X), self.pca_y.transform(Y)
        rx, ry = Xr.shape[1], Yr.shape[1]
        if self.d > min(rx, ry):
            raise ValueError(f"d = {self.d} is larger than a reduced view dimension (p_x = {rx}, "
                             f"p_y = {ry}, after centring/PCA); choose d ≤ {min(rx, ry)}")
        # user weights: one validator (dense or scipy.sparse, non-negative, symmetric)
        Sx = None if Sx is None else check_weights(Sx, "Sx", nx)
        Sy = None if Sy is None else check_weights(Sy, "Sy", ny)
        # the widths describe graphs built here; None for user weights (never a previous fit's)
        self.tx = self.ty = None
        if Sx is None:
            Sx, self.tx = knn_heat_weights(X - self.pca_x.mean, self.k, self.t, return_width=True, name="X")
        if Sy is None:
            Sy, self.ty = knn_heat_weights(Y - self.pca_y.mean, self.k, self.t, return_width=True, name="Y")
        self.Sx, self.Sy = Sx, Sy
        self.Omega = alignment_omega(graph_laplacian(Sx), graph_laplacian(Sy), self.pairs,
                                     self.alpha_x, self.alpha_y)
        # Z = blockdiag(Xrᵀ, Yrᵀ): (p_x+p_y) × (N_x+N_y), columns are points
        Z = sla.block_diag(Xr.T, Yr.T)
        self.Z = Z
        A = Z @ self.Omega @ Z.T
        Bx, By = Xr.T @ Xr, Yr.T @ Yr
        if self.ridge > 0:
            Bx = Bx + self.ridge * np.trace(Bx) / rx * np.eye(rx)
            By = By + self.ridge * np.trace(By) / ry * np.eye(ry)
        B = sla.block_diag(Bx, By)
        self.A, self.B = 0.5 * (A + A.T), B
        try:
            lam, V = sla.eigh(self.A, self.B, subset_by_index=[0, self.d - 1])
        except np.linalg.LinAlgError as e:  # B not positive definite
            raise ValueError("Z Zᵀ is singular or ill-conditioned: reduce each view with `pca` "
                             f"or add a `ridge` ({e})") from None
        V = sign_fix(V)
        self.eigenvalues = lam
        self.P = V
        self.Px, self.Py = V[:rx], V[rx:]
        self.Mx = self.pca_x.components @ self.Px
        self.My = self.pca_y.components @ self.Py
        self.embedding_x = Xr @ self.Px
        self.embedding_y = Yr @ self.Py
        self.dims = (rx, ry)
        return self

    def _check_fitted(self):
        super()._check_fitted("P_", "fit(X, Y, pairs)")

    def transform_x(self, X) -> np.ndarray:
        """Map new x points into the latent space: (x − mean_x) M_x.

        Parameters
        ----------
        X : array_like, torch.Tensor or scipy.sparse matrix
            (M, D_x) new points (rows).

        Returns
        -------
        numpy.ndarray or torch.Tensor
            (M, d) latent positions; numpy in → numpy out, a tensor in → a tensor on its device.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        ValueError
            If X does not have D_x columns.
        """
        self._check_fitted()
        A = as_array(X, "X (new points)", ndim=2, min_rows=1)
        if A.shape[1] != self.Mx.shape[0]:
            raise ValueError(f"X: expected {self.Mx.shape[0]} columns, got {A.shape[1]}")
        return like_input((A - self.pca_x.mean) @ self.Mx, X)

    def transform_y(self, Y) -> np.ndarray:
        """Map new y points into the latent space: (y − mean_y) M_y.

        Parameters
        ----------
        Y : array_like, torch.Tensor or scipy.sparse matrix
            (M, D_y) new points (rows).

        Returns
        -------
        numpy.ndarray or torch.Tensor
            (M, d) latent positions; numpy in → numpy out, a tensor in → a tensor on its device.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        ValueError
            If Y does not have D_y columns.
        """
        self._check_fitted()
        A = as_array(Y, "Y (new points)", ndim=2, min_rows=1)
        if A.shape[1] != self.My.shape[0]:
            raise ValueError(f"Y: expected {self.My.shape[0]} columns, got {A.shape[1]}")
        return like_input((A - self.pca_y.mean) @ self.My, Y)

    def objective(self) -> float:
        """J at the solution: Tr(Pᵀ Z Ω Zᵀ P) = Σ eigenvalues.

        Returns
        -------
        float
            J.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        """
        self._check_fitted()
        return objective_trace(self.P, self.Z, self.Omega)

    @own_params
    def to_inference_data(self, num_samples: int = 100, num_steps: int = 800, beta: float = 1.0,
                          gamma: float = 1e-3, sigma: float = 1e-5, lr: float = 0.03, seed: int = 0):
        """Posterior of the latent positions under the Pyro model, as ``arviz.InferenceData``.

        Whitens this fit (:func:`tandem.models.coupled_projections.whiten`), fits the
        whitened GMRF model with the tied guide by SVI (``num_steps`` Adam steps at ``lr``;
        the defaults reach this solver's subspace to < 1e-3 rad) and draws
        ``num_samples`` posterior samples: ``posterior["U"]`` (latent_dim, point) — points
        are the N_x rows of X, then the N_y rows of Y (then ridge pseudo-points, if any) —
        ``observed_data``/``posterior_predictive`` of ``zhat`` (point, feature), the whitened
        points ẑ_n, and of ``X`` (x_point, x_feature), ``Y`` (y_point, y_feature) in the user's
        units: z_n = Rᵀ ẑ_n (the point's PCA coordinates in its view's block, B = RᵀR), mapped
        as x = mean_x + components_x · z_n^x (so ``observed_data["X"]`` is X itself when the
        PCA keeps every direction, else its projection on the kept ones).
        ``log_likelihood["zhat"]`` is the density of z_n, log N(ẑ_n; Q u_n, σ² I_D) − log det R
        (the whitening's Jacobian), i.e. log N(z_n; RᵀQ u_n, σ² B); ``sample_stats`` ``lp``
        (log p(U, ẑ), carrying the same Jacobian for every row, and the model's
        ``whitening_constant`` factor) and ``log_q`` serve :func:`tandem.inference.loo`.
        The posterior spread is ≈ σ (``sigma``): raise it to see the uncertainty; it never
        changes the subspace. The density of the data is the model's at that σ: at the
        default σ = 1e-5 the residual of every point off the d-dimensional frame costs
        ≈ −‖residual‖²/(2σ²), so elpd is of order −(D − d)/(2σ²) (≈ −10¹⁰): that is the model
        at that σ, not a missing constant. The SVI result is kept as ``svi_result_`` and the
        whitened problem as ``whitened_``.

        Parameters
        ----------
        num_samples : int, default 100
            Number of posterior draws.
        num_steps : int, default 800
            Number of Adam steps of the SVI fit.
        beta : float, default 1.0
            β > 0 of the model's prior precision βΩ + γI.
        gamma : float, default 1e-3
            γ > 0 of the prior precision.
        sigma : float, default 1e-5
            Noise standard deviation σ > 0 (the posterior spread).
        lr : float, default 0.03
            Adam learning rate, > 0.
        seed : int, default 0
            Seed of the SVI fit and of the draws.

        Returns
        -------
        arviz.InferenceData
            Groups ``posterior``, ``posterior_predictive``, ``observed_data``,
            ``log_likelihood`` and ``sample_stats`` as described above.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        ValueError
            Naming ``beta``, ``gamma``, ``sigma`` or ``lr`` when it is not a finite real > 0, before
            the whitening and the SVI fit.
        """
        self._check_fitted()
        check_real_range(beta, "beta", 0.0, low_open=True)
        check_real_range(gamma, "gamma", 0.0, low_open=True)
        check_real_range(sigma, "sigma", 0.0, low_open=True)
        check_real_range(lr, "lr (learning rate)", 0.0, low_open=True)
        w = cp_model.whiten(self)
        args = (w.zhat, w.omega, self.d, beta, gamma, sigma)
        guide = Guide()
        self.svi_result_ = fit(cp_model.model, guide, *args, num_steps=num_steps, seed=seed, progress=False,
                               optim=pyro.optim.Adam({"lr": lr}))
        self.whitened_ = w
        idata = posterior_predictive(cp_model.model, guide, *args, num_samples=num_samples, seed=seed,
                                     dims=cp_model.dims())
        return self._data_units(idata)

    def _data_units(self, idata):
        """Add the whitening Jacobian to the densities and X/Y in the user's units (see
        :meth:`to_inference_data`); rebuilt with ``to_arviz`` so both ArviZ APIs work."""
        R = self.whitened_.R
        logdet = float(np.log(np.abs(np.diag(R))).sum())
        rx, nx, ny = self.dims[0], self.embedding_x.shape[0], self.embedding_y.shape[0]

        def g(name, var):
            return np.asarray(idata[name][var].values)

        def to_views(zh):                                   # (..., N', D) whitened rows → X, Y
            z = zh @ R                                      # rows z_nᵀ = ẑ_nᵀ R
            X = z[..., :nx, :rx] @ self.pca_x.components.T + self.pca_x.mean
            Y = z[..., nx:nx + ny, rx:] @ self.pca_y.components.T + self.pca_y.mean
            return X, Y

        ppc_zhat, obs_zhat = g("posterior_predictive", "zhat"), g("observed_data", "zhat")
        Xp, Yp = to_views(ppc_zhat)
        Xo, Yo = to_views(obs_zhat)
        stats = {k: g("sample_stats", k) for k in ("lp", "log_q")}
        stats["lp"] = stats["lp"] - obs_zhat.shape[0] * logdet
        dims = dict(cp_model.dims(), X=["x_point", "x_feature"], Y=["y_point", "y_feature"])
        return to_arviz({"posterior": {"U": g("posterior", "U")},
                         "posterior_predictive": {"zhat": ppc_zhat, "X": Xp, "Y": Yp},
                         "observed_data": {"zhat": obs_zhat, "X": Xo, "Y": Yo},
                         "log_likelihood": {"zhat": g("log_likelihood", "zhat") - logdet},
                         "sample_stats": stats}, dims=dims)


def _learned_alias(name: str) -> property:
    def get(self):
        try:
            return self.__dict__[name + "_"]
        except KeyError:
            raise NotFittedError(f"This CoupledProjections instance has no {name!r} yet: call fit(X, Y, pairs) "
                                 "before using this method") from None

    def set_(self, value):
        self.__dict__[name + "_"] = value

    return property(get, set_, doc=f"Alias of ``{name}_`` (the learned state).")


for _name in _LEARNED:
    setattr(CoupledProjections, _name, _learned_alias(_name))
