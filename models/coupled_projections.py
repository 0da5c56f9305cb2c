"""Coupled linear projections as a generative model: the whitened GMRF story of the spec.

The paper (Jiang, Li, Yao & Liu, 2010) states its method as an optimisation problem,
min Tr(Pᵀ Z Ω Zᵀ P) s.t. Pᵀ Z Zᵀ P = I, solved exactly by
:class:`tandem.inference.coupled_projections.solver.CoupledProjections`. This module gives a
probabilistic model whose variational inference recovers it exactly:

* **Whitening.** B = Z Zᵀ (+ ridge) = Rᵀ R per view (R block upper-triangular);
  ẑ_n = R^{-T} z_n, where z_n ∈ R^D (D = p_x + p_y) is point n of either view embedded in
  its own block (zeros in the other view's block). Stacked as rows, ``zhat`` is
  (N × D) with N = N_x + N_y, and Ẑ Ẑᵀ = I (a ridge is represented exactly by D extra
  pseudo-points √r e_j with no graph edges, so the identity holds with a ridge too).
* **Prior (GMRF on the joint graph).** Each latent coordinate u_k ∈ R^N, k = 1..d,
  u_k ~ N(0, (βΩ + γI)^{-1}), with Ω the alignment matrix (neighbour edges and
  correspondence pairs). Site ``"U"``: shape (d, N), plate ``latent_dim`` (size d), event N.
* **Likelihood.** ẑ_n ~ N(Q u_n, σ² I_D), Q (D × d) with orthonormal columns; site
  ``"zhat"``: shape (N, D), plate ``point`` (size N), event D.
* **Q's parameterisation.** Pyro has no Stiefel-manifold constraint, so Q is the Q factor
  of the thin QR decomposition of an unconstrained ``pyro.param("Q_raw")`` (D × d), signs
  fixed so that diag(R) > 0 (:func:`orthonormal`): smooth, surjective onto orthonormal
  frames, and the same map ``torch.nn.utils.parametrizations.orthogonal`` uses with
  ``orthogonal_map="householder"`` (up to sign convention).

With the tied linear-encoder guide q(u_n) = N(Qᵀ ẑ_n, s² I) (guides/coupled_projections.py)
the expected reconstruction error is Tr((I − QQᵀ)ẐẐᵀ) + N d s² = D − d + N d s²,
independent of Q, and the prior term is −½β Tr(Qᵀ Ẑ Ω Ẑᵀ Q) + const, so the ELBO's
optimum over Q is the minor d-dimensional eigenspace of Â = R^{-T} Z Ω Zᵀ R^{-1}, and
P = R^{-1} Q is the paper's solution, for any β > 0, γ > 0, σ > 0. (β, γ, σ are fixed model
arguments, not learned: they change only the posterior spread, never the subspace.)

The model does not read the guide: any other guide (e.g. ``AutoNormal``) can be used.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyro
import pyro.distributions as dist
import scipy.linalg as sla
import torch

from tandem.inference.numerics import DTYPE, cholesky_jitter
from tandem.inference.validation import as_tensor, check_int_range, check_real_range

__all__ = ["model", "orthonormal", "q_raw_init", "WhitenedProblem", "whiten", "DIMS"]

#: dimension names of every site, for :func:`tandem.inference.posterior_predictive`.
DIMS = {"U": ["latent_dim", "point"], "zhat": ["point", "feature"]}


def orthonormal(A: torch.Tensor) -> torch.Tensor:
    """Q factor of the thin QR of A (D × d), columns signed so that diag(R) > 0: QᵀQ = I."""
    Q, R = torch.linalg.qr(A)
    s = torch.sign(torch.diagonal(R))
    s = torch.where(s == 0, torch.ones_like(s), s)
    return Q * s


def q_raw_init(D: int, d: int) -> torch.Tensor:
    """Random initial value of ``Q_raw`` (standard normal, drawn from torch's RNG, which
    the shared driver seeds)."""
    return torch.randn(D, d, dtype=DTYPE)


def model(zhat: torch.Tensor, omega: torch.Tensor, d: int, beta: float = 1.0,
          gamma: float = 1e-3, sigma: float = 0.01):
    """Whitened GMRF model of coupled projections.

    zhat : (N, D) whitened points (rows), Ẑ Ẑᵀ = I; omega : (N, N) PSD alignment matrix;
    d : latent dimension; beta, gamma : prior precision βΩ + γI; sigma : noise std.
    Sites: ``U`` (d, N) latent positions (u_n = U[:, n]); ``zhat`` (N, D) observed.
    """
    zhat, omega = check_model_args(zhat, omega, d, beta, gamma, sigma)
    N, D = zhat.shape
    Q = orthonormal(pyro.param("Q_raw", lambda: q_raw_init(D, d)))
    prec = beta * omega + gamma * torch.eye(N, dtype=zhat.dtype)
    L = cholesky_jitter(prec, "beta*Omega + gamma*I")  # clear error if not PD
    # torch turns a precision matrix into the covariance's Cholesky factor by triangular
    # solves (no explicit inverse); L Lᵀ is Λ (plus jitter, if any was needed)
    prior = dist.MultivariateNormal(torch.zeros(N, dtype=zhat.dtype), precision_matrix=L @ L.T)
    with pyro.plate("latent_dim", d):
        U = pyro.sample("U", prior)  # (d, N)
    with pyro.plate("point", N):
        pyro.sample("zhat", dist.Normal(U.T @ Q.T, sigma).to_event(1), obs=zhat)


@dataclass
class WhitenedProblem:
    """Inputs of :func:`model` built from a fitted solver, and the map back.

    ``zhat`` (N', D) and ``omega`` (N', N') torch float64 (N' = N_x + N_y, plus D
    pseudo-points when a ridge is used); ``R`` (D × D) numpy, B = Rᵀ R; ``n_points`` the
    number of real points (the first rows of ``zhat``); ``Q_eig`` (D × d) the exact
    minor eigenspace of Â (R P of the solver).
    """
    zhat: torch.Tensor
    omega: torch.Tensor
    R: np.ndarray
    n_points: int
    Q_eig: np.ndarray

    def projection(self, Q) -> np.ndarray:
        """P = R^{-1} Q (D × d), the projection in the solver's (PCA) coordinates."""
        Q = Q.detach().cpu().numpy() if hasattr(Q, "detach") else np.asarray(Q)
        return sla.solve_triangular(self.R, Q, lower=False)


def whiten(cp) -> WhitenedProblem:
    """Whitened data and GMRF matrix of a fitted :class:`CoupledProjections` ``cp``."""
    if not hasattr(cp, "P"):
        raise ValueError("whiten: expected a fitted CoupledProjections (call .fit first)")
    Z, Om, B = cp.Z, cp.Omega, cp.B
    D, N = Z.shape
    extra = B - Z @ Z.T  # ridge: diag(r_x I, r_y I), or 0
    r = np.diag(extra)
    if np.any(r > 0):
        Z = np.hstack([Z, np.diag(np.sqrt(np.maximum(r, 0.0)))[:, r > 0]])
        Om = sla.block_diag(Om, np.zeros((int((r > 0).sum()),) * 2))
    R = np.linalg.cholesky(B).T  # upper, B = Rᵀ R
    zhat = sla.solve_triangular(R, Z, trans="T", lower=False).T  # rows ẑ_nᵀ = (R^{-T} z_n)ᵀ
    Q_eig = R @ cp.P  # orthonormal because Pᵀ B P = I
    return WhitenedProblem(torch.as_tensor(zhat, dtype=DTYPE), torch.as_tensor(Om, dtype=DTYPE),
                           R, N, Q_eig)


def check_model_args(zhat, omega, d, beta, gamma, sigma):
    """Validate :func:`model`'s arguments (shapes, PSD size match, positivity)."""
    zhat = as_tensor(zhat, "zhat", ndim=2)
    N, D = zhat.shape
    omega = as_tensor(omega, "omega", shape=(N, N))
    check_int_range(d, "d (latent dimension)", 1, D)
    for v, nm in ((beta, "beta"), (gamma, "gamma"), (sigma, "sigma")):
        check_real_range(v, nm, 0.0, None, low_open=True)
    return zhat, omega
