"""Twin Gaussian processes as a Pyro model: the test outputs are latent, −L(y) is a factor.

Generative story. Given training pairs (X, Y) and B test inputs Xt, the twin GP marginals
p(X, x) = N(0, K_{X∪x}) and p(Y, y) = N(0, K_{Y∪y}) are tied by a divergence between them;
the prediction rule of each method is the mode of the quasi-posterior

    p(y_b | x_b, X, Y) ∝ 1 · exp(−L(y_b)),     b = 1..B independently,

with a flat (improper) prior on each test output y_b ∈ R^{d_y} and L the KLTGP, IKLTGP or
SMTGP objective of :mod:`tandem.inference.twin_gp.predictor` (SMTGP: −log φ_α/(α(1−α)) in the O(N²) form, or
−log c_α from the full (N+1)×(N+1) determinants with ``form="det"``, the O(N³) form —
both have the same minimiser; ``form="sm"`` is rejected here because the paper's L′ is
only defined up to a per-point rescaling that the batched optimiser handles).

Sites (shapes):
    ``y``             latent, (B, d_y) — plate "test" (size B) × event d_y; ImproperUniform.
    ``twin_gp_loss``  factor, (B,) — log weight −L(y_b).

A point-mass guide (:class:`tandem.guides.twin_gp.Guide`) makes the ELBO equal to
−Σ_b L(y_b), so SVI reproduces the paper's point estimate; a Gaussian guide gives a
quasi-posterior spread (an extension; compare with the certainty φ_α).

:func:`simulate` draws the twin-GP papers' synthetic data sets (the S-shaped inverse
problems "Toy 1" and "Toy 2"), the data whose multi-valued inverse the twin GPs are for.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from tandem.inference.numerics import DTYPE, seeded_generator
from tandem.inference.validation import check_int_range, check_real_range

__all__ = ["model", "twin_gp_model", "dims", "simulate", "DIMS", "METHODS", "validate_alpha_beta"]

#: the three twin-GP objectives (KL, inverse KL, Sharma–Mittal).
METHODS = ("KLTGP", "IKLTGP", "SMTGP")


def validate_alpha_beta(alpha: float, beta: float | None = None) -> tuple[float, float | None]:
    """Check the Sharma–Mittal orders: α ∈ [0, 1], β real and ≠ 1.

    β = 1 is the Rényi limit, outside SMTGP's L′.

    Parameters
    ----------
    alpha : float
        α.
    beta : float, optional
        β.

    Returns
    -------
    alpha : float
    beta : float or None

    Raises
    ------
    ValueError
        Naming the order outside its range.
    """
    a = check_real_range(alpha, "alpha", 0.0, 1.0)
    if beta is None:
        return a, None
    b = check_real_range(beta, "beta")
    if b == 1.0:
        raise ValueError("beta: expected a real number != 1 (the Sharma-Mittal objective L' has a "
                         "1/(beta-1) factor; beta = 1 is the Renyi limit), got 1")
    return a, b


def dims() -> dict:
    """Named dims of the model's sites for ArviZ (without chain/draw).

    The latent test outputs ``y`` (B, d_y) → ["test", "output"]. (The twin GP has one input and
    one output side for any d_x, d_y; the factor site carries no sample.)

    Returns
    -------
    dict
        {site: [dim names]}.
    """
    return {"y": ["test", "output"]}


#: dimension names of the model's sites for ArviZ (without chain/draw).
DIMS = dims()


def _content_key(t: torch.Tensor) -> tuple:
    """Identify a tensor's values (not its identity): shape, dtype and a SHA-1 of its bytes,
    so an in-place change of the test inputs can never reuse a stale context."""
    a = np.ascontiguousarray(t.detach().cpu().numpy())
    return tuple(t.shape), str(t.dtype), hashlib.sha1(a.tobytes()).hexdigest()


def twin_gp_model(tgp, Xt, method: str = "SMTGP", alpha: float = 0.5, form: str = "log"):
    """The twin-GP model: an improper flat prior on the test outputs and the method's objective as a factor.

    The per-point context (kernel vectors, u_x, η_x, …) is cached on ``tgp`` keyed by the test
    inputs' values (a hash of their bytes, so an in-place change is seen), the method and α, so
    repeated SVI steps cost O(B N²) each (one product with the precomputed inverse kernel
    matrices), not O(N³).

    Parameters
    ----------
    tgp : tandem.inference.twin_gp.predictor.TwinGP
        Holds the training (X, Y), the kernel widths and λ.
    Xt : torch.Tensor
        (B, d_x) test inputs.
    method : {"KLTGP", "IKLTGP", "SMTGP"}, default "SMTGP"
        The twin-GP objective.
    alpha : float, default 0.5
        The SMTGP order α.
    form : {"log", "det"}, default "log"
        SMTGP's O(N²) form −log φ_α/(α(1−α)), or −log c_α from the full (N+1)×(N+1)
        determinants (O(N³)); both have the same minimiser.

    Raises
    ------
    ValueError
        For an unknown ``method`` or ``form``.
    """
    # duck-typed (context + objective): the model must not import the inference layer
    if not (hasattr(tgp, "context") and hasattr(tgp, "objective") and hasattr(tgp, "dy")):
        raise ValueError("tgp: expected a tandem.inference.twin_gp.TwinGP (with context(), objective() "
                         f"and dy), got {type(tgp).__name__}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    if form not in ("log", "det"):
        raise ValueError(f"form: expected 'log' (O(N^2)) or 'det' (O(N^3)), got {form!r}")
    a, _ = validate_alpha_beta(alpha)
    if not isinstance(Xt, torch.Tensor):
        raise TypeError(f"Xt: expected a torch.Tensor of test inputs (B, d_x), got {type(Xt).__name__}")
    key = ("_model_ctx", _content_key(Xt), method, a)
    cache = tgp.__dict__.setdefault("_model_cache", {})
    if key not in cache:
        cache.clear()
        cache[key] = tgp.context(Xt, method, a)
    ctx = cache[key]
    B = ctx["B"]
    with pyro.plate("test", B):
        y = pyro.sample("y", dist.ImproperUniform(constraints.real, (B,), (tgp.dy,)))
        pyro.factor("twin_gp_loss", -tgp.objective(y, ctx, form=form))
    return y


#: the model under the name every tandem model module exposes
model = twin_gp_model


def _s_curve(t: torch.Tensor) -> torch.Tensor:
    return t + 0.3 * torch.sin(2 * torch.pi * t)


def simulate(which: int = 1, seed: int = 0, noise: float = 0.005, n_train: int = 250) -> dict:
    """The twin-GP papers' S-shaped inverse problems ("Toy 1" / "Toy 2"): predict y from x.

    Generator: y ~ U(0, 1), x = y + 0.3 sin(2πy) + ε, ε ~ N(0, noise²) (0.005 as in the SMTGP
    paper; Bo & Sminchisescu used 0.05). x ↦ y is three-valued for x ∈ (0.41, 0.59).

    * Toy 1: ``n_train`` training pairs; test: 250 equally spaced outputs y in (0, 1) with
      x = y + 0.3 sin(2πy) (noise-free, as in the TGP code's GenSData.m: y is not a function
      of x, so "equally spaced" can only index the outputs).
    * Toy 2 (reconstructed from the SMTGP authors' toy script): the training pairs and a copy
      shifted by (−1, −1) (for this curve x(y − 1) = x(y) − 1, so the copy continues the
      generator), concatenated (two S shapes, y ∈ (−1, 1)), sorted by x and downsampled by 2 to
      ``n_train`` training points; test: 500 equally spaced y in (−1, 1).

    Parameters
    ----------
    which : {1, 2}, default 1
        Toy 1 or Toy 2.
    seed : int, default 0
        The same seed gives the same draw.
    noise : float, default 0.005
        Std of ε.
    n_train : int, default 250
        Training pairs.

    Returns
    -------
    dict
        float64 tensors ``X_train`` (N, 1), ``Y_train`` (N, 1), ``X_test`` (T, 1),
        ``Y_test`` (T, 1).

    Raises
    ------
    ValueError
        Naming ``which`` (not the integer 1 or 2), ``seed`` (not an integer in [0, 2³² − 1]),
        ``noise`` (negative) or ``n_train`` (below 2).
    """
    which = check_int_range(which, "which (1 = Toy 1, 2 = Toy 2)", 1, 2)
    noise = check_real_range(noise, "noise", 0.0)
    n = check_int_range(n_train, "n_train", 2)
    g = seeded_generator(seed)
    y = torch.rand(n, 1, generator=g, dtype=DTYPE)  # device: cpu-ok (simulated data, on the CPU)
    x = _s_curve(y) + noise * torch.randn(n, 1, generator=g, dtype=DTYPE)  # device: cpu-ok (simulated data, on the CPU)
    if which == 1:
        yt = torch.linspace(0, 1, 252, dtype=DTYPE)[1:-1, None]  # device: cpu-ok (simulated data, on the CPU)
        return {"X_train": x, "Y_train": y, "X_test": _s_curve(yt), "Y_test": yt}
    x2, y2 = torch.cat([x - 1.0, x]), torch.cat([y - 1.0, y])
    order = x2[:, 0].argsort()
    x2, y2 = x2[order][::2].contiguous(), y2[order][::2].contiguous()
    yt = torch.linspace(-1, 1, 502, dtype=DTYPE)[1:-1, None]  # device: cpu-ok (simulated data, on the CPU)
    return {"X_train": x2, "Y_train": y2, "X_test": _s_curve(yt), "Y_test": yt}
