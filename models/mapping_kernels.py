"""Mapping kernels on latent points (N, Q) and their ψ-statistics under a diagonal Gaussian q(X).

For ``q(x_n) = N(μ_n, diag s_n)``, ``mu, s`` (N, Q), inducing inputs ``Z`` (M, Q):
``psi0 = Σ_n ⟨κ(x_n, x_n)⟩`` (scalar), ``psi1[n, m] = ⟨κ(x_n, z_m)⟩`` (N, M),
``psi2 = Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩`` (M, M) — or per point ``(N,)``, ``(N, M)``,
``(N, M, M)`` with ``per_point=True``. The closed forms are those of
:mod:`tandem.models.gp_kernels`, which the objects call.

* :class:`RBFARD`     ``σ² exp(−½ Σ_q a_q (x_q − x'_q)²)`` (``variance``, ``ard`` (Q,))
* :class:`LinearARD`  ``Σ_q a_q x_q x'_q`` (``ard`` (Q,))

:func:`as_mapping_kernel` turns the deprecated strings ``"rbfard"``/``"linear"`` into these
objects (with a ``DeprecationWarning``). Re-exported by :mod:`tandem.models.kernels`.
"""
from __future__ import annotations

import warnings

import torch

from tandem.models import gp_kernels as _gk
from tandem.models.kernel_base import Kernel, _get

__all__ = ["MappingKernel", "RBFARD", "LinearARD", "as_mapping_kernel", "mapping_kernel_kind"]


class MappingKernel(Kernel):
    """Kernel on latent points (N, Q) with ψ-statistics under a diagonal Gaussian q(X).

    Parameters
    ----------
    **init : float
        Optional initial values of the subclass's ``param_names`` (only ``variance`` is used as a
        start; see :class:`Kernel`).
    """

    kind: str = ""

    def psi(self, mu, s, Z, params, per_point: bool = False):  # pragma: no cover - abstract
        """The three ψ-statistics under q(x_n) = N(μ_n, diag s_n) (abstract).

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            Per-point statistics instead of sums over n.

        Returns
        -------
        psi0 : torch.Tensor
            Σ_n ⟨κ(x_n, x_n)⟩ (scalar), or (N,) per point.
        psi1 : torch.Tensor
            (N, M) ⟨κ(x_n, z_m)⟩.
        psi2 : torch.Tensor
            (M, M) Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩, or (N, M, M) per point.
        """
        raise NotImplementedError

    def psi0(self, mu, s, params, per_point: bool = False):
        """ψ0 = Σ_n ⟨κ(x_n, x_n)⟩.

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            (N,) per point instead of the sum.

        Returns
        -------
        torch.Tensor
            Scalar, or (N,).
        """
        return self.psi(mu, s, mu[:1], params, per_point)[0]

    def psi1(self, mu, s, Z, params):
        """ψ1[n, m] = ⟨κ(x_n, z_m)⟩.

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (N, M).
        """
        return self.psi(mu, s, Z, params)[1]

    def psi2(self, mu, s, Z, params, per_point: bool = False):
        """ψ2 = Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩.

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            (N, M, M) per point instead of the sum.

        Returns
        -------
        torch.Tensor
            (M, M), or (N, M, M).
        """
        return self.psi(mu, s, Z, params, per_point)[2]

    def kzz(self, Z, params) -> torch.Tensor:
        """``K(Z, Z)`` plus the fixed jitter of :func:`models.gp_kernels.kzz` (1e-6 of the mean diagonal).

        Parameters
        ----------
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (M, M).
        """
        K = self.gram(Z, Z, params)
        jit = 1e-6 * K.diagonal().mean().clamp_min(1e-12)
        return K + jit * torch.eye(K.shape[0], dtype=K.dtype, device=K.device)

    def init_params(self, Q: int = 1, **overrides) -> dict:
        """Hyperparameters as float64 tensors: ``variance`` 1, ``ard`` ones (Q,).

        A ``variance`` given at construction replaces the default, then ``overrides`` apply.

        Parameters
        ----------
        Q : int, default 1
            Latent dimension (length of ``ard``).
        **overrides : float or torch.Tensor
            Values that replace the defaults.

        Returns
        -------
        dict
            name -> float64 tensor for every name in ``param_names``.

        Raises
        ------
        ValueError
            An unknown parameter name.
        """
        # init values on the CPU: the data (McGPDSData) move every init value to their device
        out = {"variance": torch.tensor(1.0, dtype=torch.float64),  # device: cpu-ok
               "ard": torch.ones(Q, dtype=torch.float64)}  # device: cpu-ok
        out = {n: out[n] for n in self.param_names}
        out.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in self.given_init.items()  # device: cpu-ok
                    if k == "variance"})
        bad = set(overrides) - set(self.param_names)
        if bad:
            raise ValueError(f"init_params: unknown parameter(s) {sorted(bad)} for {type(self).__name__}")
        out.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in overrides.items()})  # device: cpu-ok
        return out


class RBFARD(MappingKernel):
    """``κ = σ² exp(−½ Σ_q a_q (x_q − x'_q)²)``; ``variance`` σ², ``ard`` a (Q,) inverse squared lengthscales.

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance`` (``ard`` starts at ones (Q,)) (see :class:`Kernel`).
    """

    param_names = ("variance", "ard")
    kind = "rbfard"

    def gram(self, X1, X2, params, same=False):
        """Kernel matrix σ² exp(−½ Σ_q a_q (x_q − x'_q)²).

        Parameters
        ----------
        X1 : torch.Tensor
            (N1, Q) inputs.
        X2 : torch.Tensor
            (N2, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            Accepted for the common interface (a mapping kernel adds no white noise).

        Returns
        -------
        torch.Tensor
            (N1, N2) kernel matrix.
        """
        return _gk.rbf_ard(X1, X2, _get(params, "variance", self), _get(params, "ard", self))

    def diag(self, X, params):
        """The diagonal κ(x_n, x_n).

        Parameters
        ----------
        X : torch.Tensor
            (N, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (N,) the diagonal κ(x_n, x_n).
        """
        return _get(params, "variance", self).expand(X.shape[0]).clone()

    def psi(self, mu, s, Z, params, per_point=False):
        """The closed-form ψ-statistics under q(x_n) = N(μ_n, diag s_n).

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            Per-point statistics instead of sums over n.

        Returns
        -------
        psi0 : torch.Tensor
            Σ_n ⟨κ(x_n, x_n)⟩ (scalar), or (N,) per point.
        psi1 : torch.Tensor
            (N, M) ⟨κ(x_n, z_m)⟩.
        psi2 : torch.Tensor
            (M, M) Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩, or (N, M, M) per point.
        """
        return _gk.psi_rbf(mu, s, Z, _get(params, "variance", self), _get(params, "ard", self), per_point)


class LinearARD(MappingKernel):
    """``κ = Σ_q a_q x_q x'_q``; ``ard`` a (Q,).

    Parameters
    ----------
    **init : float
        Optional initial values of ``ard`` (ignored: ``ard`` starts at ones (Q,)) (see :class:`Kernel`).
    """

    param_names = ("ard",)
    kind = "linear"

    def gram(self, X1, X2, params, same=False):
        """Kernel matrix Σ_q a_q x_q x'_q.

        Parameters
        ----------
        X1 : torch.Tensor
            (N1, Q) inputs.
        X2 : torch.Tensor
            (N2, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            Accepted for the common interface (a mapping kernel adds no white noise).

        Returns
        -------
        torch.Tensor
            (N1, N2) kernel matrix.
        """
        return _gk.linear_ard(X1, X2, _get(params, "ard", self))

    def diag(self, X, params):
        """The diagonal κ(x_n, x_n).

        Parameters
        ----------
        X : torch.Tensor
            (N, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (N,) the diagonal κ(x_n, x_n).
        """
        return (X * X * _get(params, "ard", self)).sum(-1)

    def psi(self, mu, s, Z, params, per_point=False):
        """The closed-form ψ-statistics under q(x_n) = N(μ_n, diag s_n).

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            Per-point statistics instead of sums over n.

        Returns
        -------
        psi0 : torch.Tensor
            Σ_n ⟨κ(x_n, x_n)⟩ (scalar), or (N,) per point.
        psi1 : torch.Tensor
            (N, M) ⟨κ(x_n, z_m)⟩.
        psi2 : torch.Tensor
            (M, M) Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩, or (N, M, M) per point.
        """
        return _gk.psi_linear(mu, s, Z, _get(params, "ard", self), per_point)


_MAPPING_ALIASES = {"rbfard": RBFARD, "linear": LinearARD}


def as_mapping_kernel(kernel, stacklevel: int = 2) -> MappingKernel:
    """A :class:`MappingKernel` from an object or a deprecated string alias ``"rbfard"``/``"linear"``.

    Parameters
    ----------
    kernel : MappingKernel or {"rbfard", "linear"}
        The kernel or its deprecated alias.
    stacklevel : int, default 2
        ``stacklevel`` of the ``DeprecationWarning``.

    Returns
    -------
    MappingKernel

    Raises
    ------
    ValueError
        An unknown alias.
    TypeError
        Neither a kernel nor a string.
    """
    if isinstance(kernel, MappingKernel):
        return kernel
    if isinstance(kernel, str):
        if kernel not in _MAPPING_ALIASES:
            raise ValueError(f"mapping_kernel: expected a MappingKernel or one of {sorted(_MAPPING_ALIASES)}, "
                             f"got {kernel!r}")
        warnings.warn(f"mapping_kernel={kernel!r} is deprecated; pass models.kernels."
                      f"{_MAPPING_ALIASES[kernel].__name__}() instead", DeprecationWarning, stacklevel=stacklevel)
        return _MAPPING_ALIASES[kernel]()
    raise TypeError(f"mapping_kernel: expected a MappingKernel or a string alias, got {type(kernel).__name__}")


def mapping_kernel_kind(kernel) -> str:
    """The internal dispatch name (``"rbfard"``/``"linear"``) of a mapping kernel object or alias.

    Used by the data containers and fit configurations, which accept either; no warning here
    (the public entry point :class:`tandem.inference.mcgpds.McGPDS` warns on strings).

    Parameters
    ----------
    kernel : MappingKernel or {"rbfard", "linear"}
        The kernel or its alias.

    Returns
    -------
    str
        ``"rbfard"`` or ``"linear"``.

    Raises
    ------
    ValueError
        Anything else.
    """
    if isinstance(kernel, MappingKernel):
        return kernel.kind
    if isinstance(kernel, str) and kernel in _MAPPING_ALIASES:
        return kernel
    raise ValueError(f"mapping_kernel: expected a MappingKernel (models.kernels.RBFARD() / LinearARD()) or one of "
                     f"{sorted(_MAPPING_ALIASES)}, got {kernel!r}")


# checkpoint and cache fingerprints (tandem.inference.checkpoints), saved files (tandem.inference.
# persistence) and pickles name a class by module and qualname: the classes keep the module
# that defined them before it was split, so those names (and keys) stay the same
for _cls in (MappingKernel, RBFARD, LinearARD):
    _cls.__module__ = "tandem.models.kernels"
