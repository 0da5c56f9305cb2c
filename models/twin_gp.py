"""Twin Gaussian processes as a Pyro model: the test outputs are latent, −L(y) is a factor.

Generative story (docs/specs/twin_gp.md, "Pyro framing"). Given training pairs (X, Y) and B test
inputs Xt, the twin GP marginals p(X, x) = N(0, K_{X∪x}) and p(Y, y) = N(0, K_{Y∪y}) are
tied by a divergence between them; the prediction rule of each method is the mode of the
quasi-posterior

    p(y_b | x_b, X, Y) ∝ 1 · exp(−L(y_b)),     b = 1..B independently,

with a flat (improper) prior on each test output y_b ∈ R^{d_y} and L the KLTGP, IKLTGP or
SMTGP objective of :mod:`tandem.inference.twin_gp.predictor` (SMTGP: −log φ_α/(α(1−α)) in the O(N²) form, or
−log c_α from the full (N+1)×(N+1) determinants with ``form="det"``, the O(N³) form —
both have the same minimiser; ``form="sm"`` is rejected here because the paper's L′ is
only defined up to a per-point rescaling that the batched optimiser handles).

Sites (shapes):
    ``y``             latent, (B, d_y) — plate "test" (size B) × event d_y; ImproperUniform.
    ``twin_gp_loss``  factor, (B,) — log weight −L(y_b).

A point-mass guide (:class:`tandem.guides.twin_gp.TwinGPDeltaGuide`) makes the ELBO equal to
−Σ_b L(y_b), so SVI reproduces the paper's point estimate; a Gaussian guide gives a
quasi-posterior spread (an extension; compare with the certainty φ_α).
"""
from __future__ import annotations

import pyro
import pyro.distributions as dist
from torch.distributions import constraints

from tandem.inference.validation import check_real_range

__all__ = ["twin_gp_model", "DIMS", "METHODS", "validate_alpha_beta"]

#: the three twin-GP objectives (KL, inverse KL, Sharma–Mittal).
METHODS = ("KLTGP", "IKLTGP", "SMTGP")


def validate_alpha_beta(alpha, beta=None) -> tuple[float, float | None]:
    """α ∈ [0, 1]; β real and ≠ 1 (β = 1 is the Rényi limit, outside SMTGP's L′)."""
    a = check_real_range(alpha, "alpha", 0.0, 1.0)
    if beta is None:
        return a, None
    b = check_real_range(beta, "beta")
    if b == 1.0:
        raise ValueError("beta: expected a real number != 1 (the Sharma-Mittal objective L' has a "
                         "1/(beta-1) factor; beta = 1 is the Renyi limit), got 1")
    return a, b

#: dimension names of the model's sites for ArviZ (without chain/draw).
DIMS = {"y": ["test", "output"]}


def twin_gp_model(tgp, Xt, method: str = "SMTGP", alpha: float = 0.5, form: str = "log"):
    """The twin-GP model. ``tgp`` holds (X, Y), kernel widths and λ; ``Xt`` (B, d_x).

    The per-point context (kernel vectors, u_x, η_x, …) is cached on ``tgp`` keyed by the
    test tensor, so repeated SVI steps cost O(B N²) each (one product with the
    precomputed inverse kernel matrices), not O(N³).
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
    # cache key: the tensor's identity and a checksum of its values (a recycled id with new
    # values must not reuse a stale context)
    key = ("_model_ctx", id(Xt), tuple(Xt.shape), float(Xt.detach().double().sum()),
           float((Xt.detach().double() ** 2).sum()), method, a)
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
