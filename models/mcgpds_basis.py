"""One sparse-GP function of a McGPDS view's output layer (:class:`Basis`) and the mapping-kernel objects behind it.

:class:`Basis` holds ``K_ZZ`` and its Cholesky factor, the ψ-statistics under q(X), the
projected-process pieces and the whitened ψ-statistics of the collapsed bound, written once
for the model, the bounds and the predictors. Re-exported by :mod:`tandem.models.mcgpds`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tandem.inference.numerics import cholesky_jitter
from tandem.models.gp_kernels import stream_psi_sums
from tandem.models.kernels import MappingKernel, as_mapping_kernel, mapping_kernel_kind

__all__ = ["Basis", "view_bases", "mapping_object", "kzz_diag"]


def _mapping_object(kernel) -> MappingKernel:
    """The mapping-kernel object of an object or a (silently accepted) alias string."""
    if isinstance(kernel, MappingKernel):
        return kernel
    mapping_kernel_kind(kernel)                       # validates the alias
    import warnings as _w
    with _w.catch_warnings():
        _w.simplefilter("ignore", DeprecationWarning)
        return as_mapping_kernel(kernel)


def kzz_diag(kind, X, variance, ard):
    """diag κ(X, X) (N,) of a mapping kernel (object or alias name).

    Parameters
    ----------
    kind : str or MappingKernel
        The mapping kernel.
    X : torch.Tensor
        (N, Q) inputs.
    variance : torch.Tensor or None
        Kernel variance (None for kernels without one).
    ard : torch.Tensor
        (Q,) ARD weights.

    Returns
    -------
    torch.Tensor
        (N,) κ(x_n, x_n).
    """
    return Basis(kind, X[:1], variance, ard).diag(X)


_ALIAS_OBJECTS: dict = {}


def mapping_object(kernel) -> MappingKernel:
    """A :class:`~tandem.models.kernels.MappingKernel` from an object or an alias name.

    Alias names ("rbfard" / "linear") are accepted here without a warning: internal callers
    carry names.

    Parameters
    ----------
    kernel : str or MappingKernel
        The kernel or its alias name.

    Returns
    -------
    tandem.models.kernels.MappingKernel
        The kernel object (one cached object per alias).

    Raises
    ------
    ValueError
        An unknown name.
    """
    if isinstance(kernel, MappingKernel):
        return kernel
    if kernel not in _ALIAS_OBJECTS:
        _ALIAS_OBJECTS[mapping_kernel_kind(kernel)] = _mapping_object(kernel)
    return _ALIAS_OBJECTS[kernel]


@dataclass(frozen=True)
class Basis:
    """One sparse-GP function of a view's output layer — ``h`` or a basis function ``g_j``.

    ``kind``: the mapping kernel — a :class:`~tandem.models.kernels.MappingKernel` (or its
    alias name "rbfard" | "linear") — with ``variance`` (scalar; None for kernels without
    one, e.g. linear) and ARD weights ``ard`` (Q,), inducing inputs ``Z`` (M, Q). Every
    McGPDS objective and predictor needs the same few pieces of it — ``K_ZZ`` and its
    Cholesky, the ψ-statistics under q(X), the whitened ψ-statistics of the collapsed bound —
    so they are written once here, through the kernel object's ``psi`` / ``kzz`` / ``gram`` /
    ``diag`` methods.

    Attributes
    ----------
    kind : MappingKernel or str
        The mapping kernel (object or alias name).
    Z : torch.Tensor
        (M, Q) inducing inputs.
    variance : torch.Tensor or None
        Scalar kernel variance; None for kernels without one (e.g. linear).
    ard : torch.Tensor
        (Q,) ARD weights.
    name : str, default "h"
        The function's name ("h", "g_1", ...), used in error messages.
    """
    kind: object
    Z: torch.Tensor
    variance: torch.Tensor | None
    ard: torch.Tensor
    name: str = "h"

    @property
    def kernel(self) -> MappingKernel:
        """The mapping-kernel object."""
        return mapping_object(self.kind)

    @property
    def params(self) -> dict:
        """The kernel's hyperparameters ``{"variance", "ard"}`` (those it declares)."""
        vals = {"variance": self.variance, "ard": self.ard}
        return {n: vals[n] for n in self.kernel.param_names}

    def kzz(self) -> torch.Tensor:
        """``K_ZZ`` (M, M) with the small fixed jitter of :meth:`MappingKernel.kzz`."""
        return self.kernel.kzz(self.Z, self.params)

    def chol(self) -> torch.Tensor:
        """Lower Cholesky factor of ``K_ZZ`` (M, M)."""
        return cholesky_jitter(self.kzz(), f"K_ZZ of {self.name}")

    def diag(self, X: torch.Tensor) -> torch.Tensor:
        """``κ(x_n, x_n)`` (N,) at fixed inputs X.

        Parameters
        ----------
        X : torch.Tensor
            (N, Q) inputs.

        Returns
        -------
        torch.Tensor
            (N,) diagonal of the kernel.
        """
        return self.kernel.diag(X, self.params)

    def psi(self, mu: torch.Tensor, s: torch.Tensor, per_point: bool = False):
        """ψ-statistics under ``N(mu, diag s)``.

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means of q(X).
        s : torch.Tensor
            (N, Q) variances of q(X).
        per_point : bool, default False
            Return Ψ2 per point (N, M, M) instead of its sum (M, M).

        Returns
        -------
        tuple of torch.Tensor
            ``(ψ0, Ψ1 (N, M), Ψ2 (M, M) or (N, M, M))``.
        """
        return self.kernel.psi(mu, s, self.Z, self.params, per_point)

    def projection(self, X: torch.Tensor, L: torch.Tensor, per_point: bool = False):
        """The projected-process pieces at fixed inputs X.

        Parameters
        ----------
        X : torch.Tensor
            (N, Q) inputs.
        L : torch.Tensor
            (M, M) lower Cholesky factor of ``K_ZZ`` (see :meth:`chol`).
        per_point : bool, default False
            Return the (N,) diagonal of ``K_XX − K_XZ K_ZZ⁻¹ K_ZX`` instead of its trace (for
            masked likelihoods).

        Returns
        -------
        tuple of torch.Tensor
            ``(K_ZZ⁻¹ K_ZX (M, N), tr(K_XX − K_XZ K_ZZ⁻¹ K_ZX))`` (scalar, or (N,) with
            ``per_point``).
        """
        Kx = self.kernel.gram(X, self.Z, self.params)                       # (N, M)
        A = torch.cholesky_solve(Kx.mT, L)
        tr = self.diag(X) - (Kx * A.mT).sum(-1)
        return A, (tr if per_point else tr.sum())

    def whitened(self, mu: torch.Tensor, s: torch.Tensor, Y: torch.Tensor):
        """The collapsed bound's whitened pieces, ``K_ZZ = L Lᵀ``.

        The ψ-sums are streamed over chunks of frames (:func:`tandem.models.gp_kernels.stream_psi_sums`):
        memory O(chunk·M + M²).

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means of the inputs ``N(mu, diag s)``.
        s : torch.Tensor
            (N, Q) variances of the inputs.
        Y : torch.Tensor
            (N, D) targets.

        Returns
        -------
        tuple of torch.Tensor
            ``(ψ0, Ã = L⁻¹ Ψ2 L⁻ᵀ (M, M), R = L⁻¹ Ψ1ᵀ Y (M, D))``.
        """
        # ψ-sums streamed over chunks of frames (gp_kernels.stream_psi_sums): memory O(chunk·M + M²)
        psi0, P1Y, Psi2 = stream_psi_sums(self.psi, mu, s, Y, self.Z.shape[0])
        L = self.chol()
        tmp = torch.linalg.solve_triangular(L, Psi2, upper=False)
        At = torch.linalg.solve_triangular(L, tmp.mT, upper=False)
        R = torch.linalg.solve_triangular(L, P1Y, upper=False)
        return psi0, At, R


def view_bases(v: dict, kind) -> tuple[Basis, list[Basis]]:
    """``(h, [g_1, …, g_J])`` of one view from its hyperparameters.

    Parameters
    ----------
    v : dict
        An entry of ``hyperparams(data)["views"]``: ``Zh`` (M, Q), ``kh_var``, ``kh_ard`` (Q,),
        ``Zg`` (J, M, Q), ``kg_var`` (J,) or None, ``kg_ard`` (J, Q), ``W`` (D, J).
    kind : str or MappingKernel
        The mapping kernel (object or alias name).

    Returns
    -------
    tuple
        ``(Basis h, list of J Basis g_j)``.
    """
    kern = mapping_object(kind)
    h = Basis(kern, v["Zh"], v.get("kh_var"), v["kh_ard"], "h")
    kg = v.get("kg_var")
    gs = [Basis(kern, v["Zg"][j], None if kg is None else kg[j], v["kg_ard"][j], f"g_{j + 1}")
          for j in range(v["W"].shape[1])]
    return h, gs


# checkpoint and cache fingerprints (tandem.inference.checkpoints), saved files (tandem.inference.
# persistence) and pickles name a class by module and qualname: the classes keep the module
# that defined them before it was split, so those names (and keys) stay the same
for _cls in (Basis,):
    _cls.__module__ = "tandem.models.mcgpds"
