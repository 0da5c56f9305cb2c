"""A whitening preconditioner for L-BFGS on McGPDS's collapsed bound.

The bound's KL holds the means μ^(k) of q(X^(k)) through ``½ Σ_q μ_qᵀ A_k⁻¹ μ_q − …`` (see
:mod:`tandem.inference.mcgpds.bound`), with ``A_k = α_k² K_k + (1 − α_k)² ε_k I`` block diagonal
over sequences. The Hessian of that term in μ is ``A_k⁻¹``: for a smooth time kernel on a
1000-frame sequence its eigenvalues span the ratio ``α_k² λ_max(K_k) / ((1 − α_k)² ε_k)``
(≈ 10⁶ and more), and L-BFGS with 50 curvature pairs over ``V·N·Q`` means learns almost none
of that spectrum (at N = 10⁵ frames: 4·10⁵ means).

:class:`PriorPreconditioner` gives :class:`tandem.inference.LBFGS` the Cholesky factor
``L_k`` of ``A_k`` for each ``mu_k``: L-BFGS then runs on ``ν = L_k⁻¹ (μ − μ₀)``, in which the
term ``μᵀ A_k⁻¹ μ`` is ``‖ν‖²`` up to linear terms (:mod:`tandem.inference.preconditioned_lbfgs`).
What remains is ``I + L_kᵀ H_lik L_k`` (H_lik the likelihood's curvature, of order β per frame):
well conditioned where the prior's spectrum was the obstacle (many long sequences, a start far
from the optimum), worse than plain L-BFGS where ``β λ_max(A_k)`` dominates (measured both ways:
docs/scaling.md, "Whitening the means"; hence ``McGPDSConfig.precondition`` is off by default). The
shared space's correction ``−bᵀ S^(s) b`` only lowers the KL's curvature (it couples the
views through ``K_s``) and is left out: including it would need the (V n)² joint prior
covariance per sequence. The factor is computed once per :func:`tandem.inference.fit` call
from the hyperparameters at that moment; where α, ε or the time kernels are learned in the
same call it stays a fixed (slightly stale) preconditioner, which changes the path but not the
objective.

Memory: one (V, blocks, n, n) stack of factors per group (1.6 GB at 10⁵ frames in 1000-frame
sequences with two views), held while L-BFGS runs; one block's when the group's sequences share
their time grid (:func:`tandem.inference.mcgpds.prior_factors.same_blocks`).
"""
from __future__ import annotations

import torch

from tandem.inference.mcgpds import streamed
from tandem.inference.mcgpds.bound import _prior_key
from tandem.inference.mcgpds.prior_factors import (
    _time_key,
    _view_scalars,
    block_matmul,
    prior_leaves,
    private_prior_cov,
    same_blocks,
)
from tandem.inference.numerics import cholesky_jitter
from tandem.inference.preconditioned_lbfgs import ParamFactor
from tandem.models.mcgpds import hyperparams
from tandem.models.sequence_blocks import Blocks

__all__ = ["BlockCholeskyFactor", "PriorPreconditioner"]


class BlockCholeskyFactor(ParamFactor):
    """``P = blockdiag(L_b)`` on an (N, Q) tensor, ``L_b`` lower triangular per sequence block.

    Parameters
    ----------
    blocks : Blocks
        The sequence blocks (row packing).
    factors : list of torch.Tensor
        Per group of ``blocks``, the (nb, n, n) factors (padding rows/columns those of the
        identity: padding entries stay zero).
    """

    def __init__(self, blocks: Blocks, factors: list[torch.Tensor]):
        if len(factors) != len(blocks.groups):
            raise ValueError(f"BlockCholeskyFactor: {len(factors)} factor stacks for {len(blocks.groups)} groups")
        self.blocks, self.factors = blocks, factors

    def _map(self, v: torch.Tensor, transpose: bool) -> torch.Tensor:
        if v.dim() != 2 or v.shape[0] != self.blocks.N:
            raise ValueError(f"BlockCholeskyFactor: expected an ({self.blocks.N}, Q) tensor, got {tuple(v.shape)}")
        parts = []
        for g, L in enumerate(self.factors):
            x = self.blocks.pack(v, g)                          # (nb, n, Q)
            parts.append(block_matmul(L.mT if transpose else L, x))
        return self.blocks.unpack(parts)

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """``P v``: each sequence's rows multiplied by its factor.

        Parameters
        ----------
        v : torch.Tensor
            (N, Q), rows in the data's order.

        Returns
        -------
        torch.Tensor
            (N, Q).
        """
        return self._map(v, False)

    def apply_t(self, v: torch.Tensor) -> torch.Tensor:
        """``Pᵀ v``: each sequence's rows multiplied by its factor's transpose.

        Parameters
        ----------
        v : torch.Tensor
            (N, Q), rows in the data's order.

        Returns
        -------
        torch.Tensor
            (N, Q).
        """
        return self._map(v, True)


class PriorPreconditioner:
    """``LBFGS(preconditioner=PriorPreconditioner(data))``: each view's means ``mu_k`` whitened
    by the Cholesky factor of its private prior covariance ``A_k`` (module docstring).

    Parameters
    ----------
    data : tandem.models.mcgpds.McGPDSData
        The problem; its hyperparameters are read from Pyro's parameter store when the fit
        calls the preconditioner.

    Notes
    -----
    The "gplvm" private prior (no private time kernel) has ``A_k = α_k² I + (1 − α_k)² ε_k I``, a
    multiple of the identity; the factor then only rescales the means.
    """

    def __init__(self, data):
        self.data = data
        self._last = None       # (key of the hyperparameters, factor stacks): phases of one schedule share them

    def __call__(self, names: list[str]) -> dict:
        """Factors for the ``mu_k`` among ``names``.

        Parameters
        ----------
        names : list of str
            The parameters the fit optimises.

        Returns
        -------
        dict
            ``{"mu_k": BlockCholeskyFactor}`` for each view k whose means are among ``names``.
        """
        data = self.data
        wanted = [k for k in range(data.V) if f"mu_{k}" in names]
        if not wanted:
            return {}
        stacks = self._factor_stacks()
        return {f"mu_{k}": BlockCholeskyFactor(data.blocks, [L[k] for L in stacks]) for k in wanted}

    def _factor_stacks(self) -> list[torch.Tensor]:
        """Per group, chol A (V, nb, n, n) at the stored hyperparameters; the last result again
        while α, ε and the time kernels are bit-for-bit the same (a λ-held schedule calls the
        preconditioner once per phase)."""
        data = self.data
        with torch.no_grad():
            hp = hyperparams(data)
            views = hp["views"]
            like = data.times.to(torch.float64)
            alpha, eps = _view_scalars(views, "alpha", like), _view_scalars(views, "eps", like)
            leaves = prior_leaves(hp["time_s"], [v["time"] for v in views], alpha, eps)
            key = (tuple(float(x) for x in leaves for x in x.reshape(-1)), tuple(_time_key(v["time"]) for v in views))
            if self._last is not None and self._last[0] == key:
                return self._last[1]
            self._last = None               # the old stacks go before the new ones are built
            stacks = [self._group_factor(g, hp, alpha, eps) for g in range(len(data.blocks.groups))]
        self._last = (key, stacks)
        return stacks

    def _group_factor(self, g: int, hp: dict, alpha: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """chol A (V, nb, n, n) of group ``g``. Where the bound's prior cache holds A for a run of
        the group's blocks (α, ε and the time kernels constant: the first evaluation built them,
        whole or in the streamed KL's chunks) that A is factorised; the rest is built afresh, a
        KL chunk's worth of blocks at a time (:func:`streamed.blocks_per_chunk`), so the
        temporaries stay O(chunk) and only the factors grow with N."""
        data, views = self.data, hp["views"]
        _, mask = data.blocks.groups[g]
        nb, n = mask.shape
        t = data.blocks.pack(data.times, g)
        if nb > 1 and same_blocks(t, mask):      # one grid: one factor, expanded (applied as one product)
            A = private_prior_cov(t[:1], mask[:1], [v["time"] for v in views], alpha, eps)
            return cholesky_jitter(A, "private prior covariance A_k").expand(len(views), nb, n, n)
        cached = {}                                   # first block -> (end, A of the run)
        whole = _prior_key(data.times, g, hp["time_s"], views, alpha, eps, slice(None))
        if whole is not None:
            for key, val in data.blocks.__dict__.get("_prior_cache", {}).items():
                if key[0] == g and key[3:] == whole[3:] and "A" in val:
                    cached[key[1] or 0] = (nb if key[2] is None else key[2], val["A"])
        L = t.new_empty((len(views), nb, n, n))
        c0 = 0
        while c0 < nb:
            if c0 in cached:
                c1, A = cached[c0]
            else:   # up to the next cached run, in the streamed KL's chunks (no N-sized temporaries)
                step = streamed.blocks_per_chunk(len(views), 1, n, nb)
                c1 = min([s for s in cached if s > c0] + [c0 + step, nb])
                A = private_prior_cov(t[c0:c1], mask[c0:c1], [v["time"] for v in views], alpha, eps)
            L[:, c0:c1] = cholesky_jitter(A, "private prior covariance A_k")
            c0 = c1
        return L

    def __repr__(self) -> str:
        return "PriorPreconditioner()"
