"""Hand-written guide for models/coupled_projections.py: the tied linear encoder.

q(u_n) = N(Qᵀ ẑ_n, s² I_d) independently over points n, with the *same* orthonormal Q as
the model's decoder (``pyro.param("Q_raw")``, orthonormalised by
:func:`tandem.models.coupled_projections.orthonormal`) and one learned scale ``s`` > 0.

Written as the model's site: ``U`` (d, N) under plate ``latent_dim`` with event N, i.e.
U[k, n] ~ N((Ẑ Q)[n, k], s²). Because the encoder is Qᵀ and the decoder Q, the expected
reconstruction error does not depend on Q, and the ELBO's optimum over Q is the minor
eigenspace of Ẑ Ω Ẑᵀ — the paper's solution (see the model's docstring). The spread s
is the posterior uncertainty of every latent position; its optimum is
s² = N d / (N d / σ² + d tr(βΩ + γI)) (closed form checked in the tests).
"""
from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from tandem.models.coupled_projections import check_model_args, orthonormal, q_raw_init

__all__ = ["guide", "optimal_scale"]


def guide(zhat, omega, d, beta: float = 1.0, gamma: float = 1e-3, sigma: float = 0.01):
    """Tied linear-encoder guide; takes exactly the model's arguments (s starts at σ)."""
    zhat, omega = check_model_args(zhat, omega, d, beta, gamma, sigma)
    N, D = zhat.shape
    Q = orthonormal(pyro.param("Q_raw", lambda: q_raw_init(D, d)))
    s = pyro.param("s", torch.tensor(float(sigma), dtype=zhat.dtype), constraint=constraints.positive)
    loc = (zhat @ Q).T  # (d, N): row k holds the k-th coordinate of every point
    with pyro.plate("latent_dim", d):
        pyro.sample("U", dist.Normal(loc, s).to_event(1))


def optimal_scale(omega: torch.Tensor, beta: float, gamma: float, sigma: float) -> float:
    """The ELBO-optimal s: s² = N / (N/σ² + tr(βΩ + γI))."""
    N = omega.shape[0]
    tr = beta * float(torch.trace(omega)) + gamma * N
    return (N / (N / sigma ** 2 + tr)) ** 0.5
