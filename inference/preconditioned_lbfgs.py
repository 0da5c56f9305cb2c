"""L-BFGS with a fixed linear preconditioner per parameter.

For a fixed invertible linear map ``P`` (one block per parameter tensor, the identity where none
is given) write ``θ = θ₀ + P ν``. L-BFGS run on ``ν`` sees the gradient ``Pᵀ ∇_θ f`` and moves
``θ`` by ``P`` times its step in ``ν``. In ``θ`` this is L-BFGS whose initial inverse-Hessian
approximation is ``γ P Pᵀ`` instead of ``γ I``; the secant pairs, the two-loop recursion and
the strong-Wolfe line search are torch's, unchanged, acting on ``ν``. The iteration never needs
``P⁻¹``: it only reads gradients and adds steps.

Where ``f`` has a term ``½ θᵀ K⁻¹ θ`` (a Gaussian prior on θ with covariance ``K``) and ``P`` is
a square root of ``K`` (``P Pᵀ = K``, e.g. its Cholesky factor), that term becomes ``½ ‖ν‖²``.
This is the whitening that makes GP latent-variable bounds tractable for first-order
methods: in ``θ`` the prior term's Hessian ``K⁻¹`` has the condition number of the kernel
(≫ 10⁶ for smooth kernels on dense time grids), which L-BFGS with a few dozen curvature
pairs cannot learn over 10⁵ variables; in ``ν`` it is the identity.

:class:`PreconditionedLBFGS` is ``torch.optim.LBFGS`` with this change of variables.
``torch.optim.LBFGS`` reads gradients only through ``_gather_flat_grad`` and moves the
parameters only through ``_add_grad``; overriding those two is the whole change.
:class:`tandem.inference.LBFGS` (``preconditioner=``) selects it in :func:`tandem.inference.fit`.
"""
from __future__ import annotations

import torch

__all__ = ["ParamFactor", "PreconditionedLBFGS"]


class ParamFactor:
    """A fixed linear map ``P`` on one parameter tensor (shape preserved): the interface.

    ``apply(v) = P v`` and ``apply_t(v) = Pᵀ v`` for a tensor ``v`` of the parameter's
    (unconstrained) shape. ``P`` must be invertible, and it must not change during a run
    (the curvature pairs L-BFGS keeps are in the preconditioned coordinates). Any object with
    these two methods serves (subclassing is optional).
    """

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """``P v``.

        Parameters
        ----------
        v : torch.Tensor
            A tensor of the parameter's shape.

        Returns
        -------
        torch.Tensor
            The same shape.
        """
        raise NotImplementedError

    def apply_t(self, v: torch.Tensor) -> torch.Tensor:
        """``Pᵀ v``.

        Parameters
        ----------
        v : torch.Tensor
            A tensor of the parameter's shape.

        Returns
        -------
        torch.Tensor
            The same shape.
        """
        raise NotImplementedError


class PreconditionedLBFGS(torch.optim.LBFGS):
    """``torch.optim.LBFGS`` on ``θ = θ₀ + P ν`` (module docstring).

    Parameters
    ----------
    params : iterable of torch.Tensor
        The parameters (leaf tensors), as for ``torch.optim.LBFGS``.
    factors : sequence of ParamFactor or None
        One per parameter, in the same order: its ``P`` (None: the identity).
    **kwargs
        ``torch.optim.LBFGS``'s settings (lr, max_iter, history_size, line_search_fn, …).
        ``tolerance_grad`` and ``tolerance_change`` apply to the preconditioned gradient and
        steps.

    Raises
    ------
    ValueError
        If ``factors`` has another length than the parameters, an entry is neither None nor
        a :class:`ParamFactor`, a parameter is complex, or a factor returns another shape than
        its parameter's.
    """

    def __init__(self, params, factors, **kwargs):
        params = list(params)
        super().__init__(params, **kwargs)
        factors = list(factors)
        if len(factors) != len(self._params):
            raise ValueError(f"PreconditionedLBFGS: {len(factors)} factors for {len(self._params)} parameters")
        for i, f in enumerate(factors):
            if f is not None and not (callable(getattr(f, "apply", None)) and callable(getattr(f, "apply_t", None))):
                raise ValueError(f"PreconditionedLBFGS: factor {i} is a {type(f).__name__}, not a ParamFactor "
                                 "(an object with apply(v) and apply_t(v)) or None")
        if any(torch.is_complex(p) for p in self._params):
            raise ValueError("PreconditionedLBFGS: complex parameters are not supported")
        self._factors = factors

    @staticmethod
    def _mapped(f, v: torch.Tensor, transpose: bool) -> torch.Tensor:
        out = f.apply_t(v) if transpose else f.apply(v)
        if out.shape != v.shape:
            raise ValueError(f"PreconditionedLBFGS: a factor mapped shape {tuple(v.shape)} to {tuple(out.shape)}; "
                             "it must keep its parameter's shape")
        return out

    def _gather_flat_grad(self):
        # Pᵀ ∇θ f, the gradient in ν
        views = []
        for p, f in zip(self._params, self._factors):
            g = p.new_zeros(p.shape) if p.grad is None else p.grad
            if g.is_sparse:
                g = g.to_dense()
            if f is not None:
                g = self._mapped(f, g, True)
            views.append(g.reshape(-1))
        return torch.cat(views, 0)

    def _add_grad(self, step_size, update) -> None:
        # θ += step_size · P u for the step u in ν
        offset = 0
        for p, f in zip(self._params, self._factors):
            numel = p.numel()
            u = update[offset:offset + numel].view_as(p)
            if f is not None:
                u = self._mapped(f, u, False)
            p.add_(u, alpha=step_size)
            offset += numel
        if offset != self._numel():
            raise AssertionError(f"expected offset {offset} to equal {self._numel()}")
