"""Kernels as objects: time kernels and mapping kernels with one common interface.

Every kernel is a small stateless object; its hyperparameters live outside it, in a dict
``params`` (name -> float64 tensor), so that the same object serves the Pyro model (where
the values are ``pyro.param`` sites), the collapsed bound and the stochastic fit.

Common interface (:class:`Kernel`)
----------------------------------
* ``param_names``  — tuple of hyperparameter names;
* ``constraints``  — dict name -> ``torch.distributions.constraints`` object;
* ``gram(x1, x2, params, same=False)`` — kernel matrix; time kernels take batched time
  vectors ``(..., n1)``, ``(..., n2)`` -> ``(..., n1, n2)``; mapping kernels take inputs
  ``(N1, Q)``, ``(N2, Q)`` -> ``(N1, N2)``. ``same`` says the two arguments are the same
  points (white noise is added only then);
* ``diag(x, params)`` — the diagonal ``k(x_i, x_i)``, shape ``(..., n)`` / ``(N,)``.

Time kernels (``r = |t − t'|``)
-------------------------------
* :class:`RBF`         ``σ² exp(−½ γ r²)``   (``variance`` σ², ``invwidth`` γ; the paper's kernel)
* :class:`Matern12`    ``σ² exp(−r/ℓ)``
* :class:`Matern32`    ``σ² (1 + √3 r/ℓ) exp(−√3 r/ℓ)``
* :class:`Matern52`    ``σ² (1 + √5 r/ℓ + 5r²/(3ℓ²)) exp(−√5 r/ℓ)``
* :class:`Periodic`    ``σ² exp(−2 sin²(π r/p)/ℓ²)``
* :class:`White`       ``σ_w² δ(t, t')`` (only when ``same``)
* :class:`Bias`        ``σ_b²``
* :class:`Sum`         ``Σ_j k_j``; parameter names are prefixed ``"<j>.<name>"`` unless
  given names (``Sum(rbf=RBF(), white=White(), bias=Bias())`` -> ``"rbf.variance"``...).
  :func:`paper_time_kernel` is the paper's (and the authors' code's) RBF + white + bias.

Mapping kernels and ψ-statistics
--------------------------------
For ``q(x_n) = N(μ_n, diag s_n)``, ``mu, s`` (N, Q), inducing inputs ``Z`` (M, Q):
``psi0 = Σ_n ⟨κ(x_n, x_n)⟩`` (scalar), ``psi1[n, m] = ⟨κ(x_n, z_m)⟩`` (N, M),
``psi2 = Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩`` (M, M) — or per point ``(N,)``, ``(N, M)``,
``(N, M, M)`` with ``per_point=True``. The closed forms are those of
:mod:`models.gp_kernels` (:func:`~models.gp_kernels.psi_rbf`,
:func:`~models.gp_kernels.psi_linear`), which the objects call, so the paper's
configuration gives bit-identical numbers to the string API.

* :class:`RBFARD`     ``σ² exp(−½ Σ_q a_q (x_q − x'_q)²)`` (``variance``, ``ard`` (Q,))
* :class:`LinearARD`  ``Σ_q a_q x_q x'_q`` (``ard`` (Q,))

:func:`as_mapping_kernel` turns the deprecated strings ``"rbfard"``/``"linear"`` into these
objects (with a ``DeprecationWarning``).

The objects live in :mod:`tandem.models.kernel_base` (the common interface),
:mod:`tandem.models.time_kernels`, :mod:`tandem.models.mapping_kernels` (with the
ψ-statistics) and :mod:`tandem.models.kernel_specs` (the JSON specs); this module gathers
them under one name.
"""
from __future__ import annotations

from tandem.models.kernel_base import Kernel, _get  # noqa: F401
from tandem.models.kernel_specs import _SPEC_TYPES, kernel_from_spec  # noqa: F401
from tandem.models.mapping_kernels import (  # noqa: F401
    _MAPPING_ALIASES,
    RBFARD,
    LinearARD,
    MappingKernel,
    as_mapping_kernel,
    mapping_kernel_kind,
)
from tandem.models.time_kernels import (  # noqa: F401
    _LEGACY_KEYS,
    _PAPER_PARTS,
    PAPER_NAMES,
    RBF,
    Bias,
    Matern12,
    Matern32,
    Matern52,
    Periodic,
    Sum,
    TimeKernel,
    TimeParams,
    White,
    as_time_kernel,
    is_paper_kernel,
    paper_time_kernel,
    time_params_kernel,
)

__all__ = ["Kernel", "TimeKernel", "MappingKernel", "RBF", "Matern12", "Matern32", "Matern52", "Periodic",
           "White", "Bias", "Sum", "paper_time_kernel", "RBFARD", "LinearARD", "as_mapping_kernel",
           "as_time_kernel", "mapping_kernel_kind", "TimeParams", "time_params_kernel", "is_paper_kernel",
           "kernel_from_spec"]
