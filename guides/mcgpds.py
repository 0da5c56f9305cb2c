"""Hand-written variational family of McGPDS (spec "Inference").

* ``q(x_q^(k)) = N(μ_q^(k), S_q^(k))``, ``S_q^(k) = (A_k⁻¹ + diag λ_q^(k))⁻¹`` — the
  Opper–Archambeau parameterisation (λ > 0), with ``A_k`` the model's private prior
  covariance. The guide therefore reads the model's hyperparameters (α_k, ε_k, time
  kernels) through the same ``pyro.param`` names — the paper forces this coupling.
* ``q(x_q^(s))`` in closed form: ``S^(s) = [Σ_k (1−α_k)² A_k⁻¹ + K_s⁻¹]⁻¹``,
  ``μ_q^(s) = S^(s) Σ_k (1−α_k) A_k⁻¹ μ_q^(k)``, computed in the stable form
  ``S^(s) = L_s B'⁻¹ L_sᵀ`` (see :mod:`tandem.inference.mcgpds.bound`).
* ``q(v_d^(k))``, ``q(u_dj^(k))``: full Gaussians (mean + lower Cholesky) for the
  uncollapsed ELBO (in the collapsed bound they are optimal and integrated out).

Parameters: ``mu_k`` (N, Q) real, ``lam_k`` (N, Q) positive, ``qv_m_k`` (D_k, M),
``qv_L_k`` (D_k, M, M), ``qu_m_k`` (J, D_k, M), ``qu_L_k`` (J, D_k, M, M).
"""
from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

from tandem.inference.numerics import DTYPE, cholesky_jitter
from tandem.inference.validation import check_real_range
from tandem.models.mcgpds import dense_A, dense_time_K, hyperparams, param

__all__ = ["Guide", "variational_params", "mcgpds_guide", "guide", "q_latent_dense"]


def variational_params(data, frozen=()):
    """The registered variational parameters of q(X^(k)), view by view.

    Parameters
    ----------
    data : tandem.models.mcgpds.McGPDSData
        The model's data object (views, dimensions, initial values).
    frozen : iterable of str, default ()
        Names of parameters to return detached (held fixed).

    Returns
    -------
    tuple of list of torch.Tensor
        ``(mus, lams)``: lists over views of the (N, Q) means μ^(k) and the positive (N, Q) λ^(k).
    """
    frozen = frozenset(frozen)
    mus = [param(data, f"mu_{k}", frozen) for k in range(data.V)]
    lams = [param(data, f"lam_{k}", frozen) for k in range(data.V)]
    return mus, lams


def q_latent_dense(data, hp, mus, lams):
    """Dense moments of q(X^(s)) and q(X^(k)) (module docstring).

    S_q^(k) = A_k − A_k Λ^½ (I + Λ^½ A_k Λ^½)⁻¹ Λ^½ A_k (Λ = diag λ_q^(k)), and
    S^(s) = L_s B'⁻¹ L_sᵀ with B' = I + L_sᵀ [Σ_k (1−α_k)² A_k⁻¹] L_s, L_s the Cholesky
    factor of K_s: no explicit inverse of a covariance.

    Parameters
    ----------
    data : tandem.models.mcgpds.McGPDSData
        The model's data object.
    hp : dict
        Hyperparameters from :func:`tandem.models.mcgpds.hyperparams` (``"time_s"`` and, per
        view, ``"views"`` with ``"alpha"`` and the private kernel).
    mus : list of torch.Tensor
        Per view, the (N, Q) means μ^(k).
    lams : list of torch.Tensor
        Per view, the (N, Q) positive λ^(k).

    Returns
    -------
    tuple
        ``(mu_s, L_s, L_priv)``: mu_s (N, Q) the mean of X^(s); L_s (N, N) the Cholesky factor
        of S^(s); L_priv a list over views of (Q, N, N) Cholesky factors of S_q^(k).
    """
    N = data.N
    eye = torch.eye(N, dtype=DTYPE, device=data.device)
    Ks = dense_time_K(data, hp["time_s"])
    Lk = cholesky_jitter(Ks, "K_t^(s)")
    C = torch.zeros(N, N, dtype=DTYPE, device=data.device)
    b = torch.zeros(N, data.Q, dtype=DTYPE, device=data.device)
    Ls_priv = []
    for k, v in enumerate(hp["views"]):
        A = dense_A(data, v)
        LA = cholesky_jitter(A, f"A_{k}")
        Ainv = torch.cholesky_inverse(LA)
        C = C + (1 - v["alpha"]) ** 2 * Ainv
        b = b + (1 - v["alpha"]) * (Ainv @ mus[k])
        sl = lams[k].mT.sqrt()                                 # (Q, N)
        B = eye + sl[:, :, None] * A[None] * sl[:, None, :]
        LB = cholesky_jitter(B, "B_q")
        T = torch.linalg.solve_triangular(LB, sl[:, :, None] * A[None], upper=False)
        S = A[None] - T.mT @ T
        Ls_priv.append(cholesky_jitter(0.5 * (S + S.mT), f"S^({k})"))
    Bp = eye + Lk.mT @ C @ Lk
    LBp = cholesky_jitter(Bp, "B'")
    Wt = torch.linalg.solve_triangular(LBp, Lk.mT, upper=False)   # S^(s) = Wtᵀ Wt
    Ss = Wt.mT @ Wt
    mu_s = Ss @ b
    return mu_s, cholesky_jitter(0.5 * (Ss + Ss.mT), "S^(s)"), Ls_priv


def mcgpds_guide(data, inducing_scale: float = 0.1):
    """The guide: samples ``X_s``, ``X_k`` (Q, N), ``v_k`` (D_k, M), ``u_k`` (J, D_k, M).

    Parameters
    ----------
    data : tandem.models.mcgpds.McGPDSData
        The model's data object (the model's only argument).
    inducing_scale : float, default 0.1
        Initial Cholesky diagonal of q(V), q(U), a finite real > 0 (used when their parameters are
        created; a collapsed fit writes their optimal values into the store instead).

    Raises
    ------
    ValueError
        Naming ``inducing_scale`` when it is not a finite real > 0.
    """
    check_real_range(inducing_scale, "inducing_scale", 0.0, low_open=True)
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    mu_s, L_s, L_priv = q_latent_dense(data, hp, mus, lams)
    M, J = data.M, data.J
    with pyro.plate("latent_dim", data.Q, dim=-1):
        pyro.sample("X_s", dist.MultivariateNormal(mu_s.mT, scale_tril=L_s))
        for k in range(data.V):
            pyro.sample(f"X_{k}", dist.MultivariateNormal(mus[k].mT, scale_tril=L_priv[k]))
    for k in range(data.V):
        D = data.out_dims[k]
        eyeM = torch.eye(M, dtype=DTYPE, device=data.device)
        qv_m = pyro.param(f"qv_m_{k}", lambda: torch.zeros(D, M, dtype=DTYPE, device=data.device))
        qv_L = pyro.param(f"qv_L_{k}", lambda: inducing_scale * eyeM.expand(D, M, M).clone(),
                          constraint=constraints.lower_cholesky)
        qu_m = pyro.param(f"qu_m_{k}", lambda: torch.zeros(J, D, M, dtype=DTYPE, device=data.device))
        qu_L = pyro.param(f"qu_L_{k}", lambda: inducing_scale * eyeM.expand(J, D, M, M).clone(),
                          constraint=constraints.lower_cholesky)
        out_plate = pyro.plate(f"output_{k}", D, dim=-1)
        with out_plate:
            pyro.sample(f"v_{k}", dist.MultivariateNormal(qv_m, scale_tril=qv_L))
            with pyro.plate(f"basis_{k}", J, dim=-2):
                pyro.sample(f"u_{k}", dist.MultivariateNormal(qu_m, scale_tril=qu_L))


class Guide:
    """The hand-written McGPDS guide as an object (the contract every tandem guide follows).

    The instance is called with exactly the model's argument, ``guide(data)`` for a
    :class:`tandem.models.mcgpds.McGPDSData`, and samples every latent site of
    :func:`tandem.models.mcgpds.model` (see :func:`mcgpds_guide`).

    Parameters
    ----------
    inducing_scale : float, default 0.1
        Keyword-only: initial Cholesky diagonal of q(V), q(U) (> 0).

    Raises
    ------
    ValueError
        If ``inducing_scale`` is not a finite real > 0 (bools and strings such as "0.1" are not
        numbers here).
    """

    def __init__(self, *, inducing_scale: float = 0.1):
        self.inducing_scale = check_real_range(inducing_scale, "inducing_scale", 0.0, low_open=True)

    def __call__(self, data):
        return mcgpds_guide(data, inducing_scale=self.inducing_scale)

    def __repr__(self):
        return f"Guide(inducing_scale={self.inducing_scale})"


#: the function form (aliases kept for existing code)
guide = mcgpds_guide
