"""Hand-written guide for models/coupled_projections.py: the tied linear encoder.

q(u_n) = N(Qᵀ ẑ_n, s² I_d) independently over points n, with the *same* orthonormal Q as
the model's decoder (``pyro.param("Q_raw")``, through
:func:`tandem.models.coupled_projections.frame`, so that the model's and the guide's paths
get the same gradient preconditioner) and one learned scale ``s`` > 0.

Written as the model's site: ``U`` (d, N) under plate ``latent_dim`` with event N, i.e.
U[k, n] ~ N((Ẑ Q)[n, k], s²). Because the encoder is Qᵀ and the decoder Q, the expected
reconstruction error does not depend on Q, and the ELBO is −½β Tr(Qᵀ Ẑᵀ Ω Ẑ Q) + terms
free of Q: its optimum over Q is the minor eigenspace of Ẑᵀ Ω Ẑ — the paper's solution
(see the model's docstring, which also says why guides with free means, such as
``AutoNormal``, have the same optimum but do not reach it in practice). The spread s is
the posterior uncertainty of every latent position; its optimum is
s² = N / (N / σ² + tr(βΩ + γI)) (closed form checked in the tests).
"""
from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from tandem.inference.validation import check_real_range
from tandem.models.coupled_projections import check_model_args, frame, q_raw_init

__all__ = ["Guide", "guide", "optimal_scale"]


class Guide:
    """Tied linear-encoder guide of the coupled-projections model; instances take the model's arguments.

    A draw is U = ẐQ + sε (ε standard normal).

    Control variate. The prior term log p(U) = −½ Σ_k u_kᵀΛu_k (Λ = βΩ + γI) has the Q-gradient
    −ẐᵀΛ(Ẑq_k + sε_k): its noise −sẐᵀΛε_k is of the size of the whole signal near the optimum
    (σ = 1e-5 on COIL-20: 1e-8 against eigen-gaps × angle ≈ 1e-5 × 1e-3), which left SVI ~1e-3 rad
    away. The guide therefore adds T = Σ_k (sε_k)ᵀ Λ (Ẑq_k) (ε held fixed) to the ELBO estimate
    (``pyro.factor("prior_control_variate", −T, has_rsample=True)``; a guide's factor is
    subtracted): E[T] = 0, so the ELBO estimate stays unbiased, and ∇T cancels the noise term
    exactly (it is the linear term of log p's Taylor expansion around the guide's mean), leaving a
    Q-gradient without Monte Carlo noise.

    Parameters
    ----------
    scale_init : float, optional
        Initial value of the spread s (None → the model's σ).
    name : str, default "s"
        Name of the s parameter (``Q_raw`` is the model's own parameter and is shared, not
        renamed).
    control_variate : bool, default True
        Add the zero-mean control variate above.
    """

    def __init__(self, *, scale_init: float | None = None, name: str = "s", control_variate: bool = True):
        if scale_init is not None:
            check_real_range(scale_init, "scale_init", 0.0, None, low_open=True)
        if not isinstance(name, str) or not name:
            raise TypeError(f"name: expected a non-empty string, got {name!r}")
        self.scale_init, self.name, self.control_variate = scale_init, name, bool(control_variate)

    def __call__(self, zhat, omega, d, beta: float = 1.0, gamma: float = 1e-3, sigma: float = 0.01,
                 precondition: bool = True):
        zhat, omega = check_model_args(zhat, omega, d, beta, gamma, sigma)
        N, D = zhat.shape
        Q = frame(pyro.param("Q_raw", lambda: q_raw_init(D, d, zhat.device)), zhat, omega, beta, precondition)
        s0 = float(sigma) if self.scale_init is None else float(self.scale_init)
        s = pyro.param(self.name, zhat.new_tensor(s0), constraint=constraints.positive)
        loc = (zhat @ Q).T  # (d, N): row k holds the k-th coordinate of every point
        with pyro.plate("latent_dim", d):
            U = pyro.sample("U", dist.Normal(loc, s).to_event(1))
        if self.control_variate:
            eps = ((U - loc) / s).detach()                    # the draw's standard-normal noise
            lam_loc = beta * (loc @ omega) + gamma * loc       # rows: Λ Ẑ q_k (Λ symmetric)
            T = (s * eps * lam_loc).sum()
            pyro.factor("prior_control_variate", -T, has_rsample=True)


#: the default tied guide (s starts at σ), for ``fit(model, guide, ...)``.
guide = Guide()


def optimal_scale(omega: torch.Tensor, beta: float, gamma: float, sigma: float) -> float:
    """The ELBO-optimal spread s of the guide: s² = N / (N/σ² + tr(βΩ + γI)).

    Parameters
    ----------
    omega : torch.Tensor
        (N, N) the model's Ω.
    beta, gamma : float
        The prior's weights, > 0.
    sigma : float
        The model's σ, > 0.

    Returns
    -------
    float
        s.

    Raises
    ------
    ValueError
        Naming ``beta``, ``gamma`` or ``sigma`` when it is not a finite real > 0 (the model's
        constants, :func:`~tandem.models.coupled_projections.check_model_args`).
    """
    check_real_range(beta, "beta", 0.0, low_open=True)
    check_real_range(gamma, "gamma", 0.0, low_open=True)
    check_real_range(sigma, "sigma", 0.0, low_open=True)
    N = omega.shape[0]
    tr = beta * float(torch.trace(omega)) + gamma * N
    return (N / (N / sigma ** 2 + tr)) ** 0.5
