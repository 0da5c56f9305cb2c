"""The per-epoch hyperparameter step of the stochastic McGPDS fit and its L-BFGS.

:func:`hyper_step` moves the learned hyperparameters by ``iters`` L-BFGS iterations with Armijo
backtracking on the full-data collapsed bound at the windows' current q(X)
(:func:`collapsed_value_and_grad`: value and gradient streamed over chunks of windows, memory
O(chunk)), then recomputes the running statistics
(:func:`tandem.inference.mcgpds.stochastic_elbo.refresh_statistics`). :func:`lbfgs_sharded` is
the L-BFGS of that step and of the local q(X) step of
:class:`tandem.inference.mcgpds.stochastic_elbo.StochasticELBO`; its inner products are summed
over the ranks, so every rank takes the step one process would.
"""
from __future__ import annotations

import math

import pyro
import torch
from pyro import poutine

from tandem.inference.distributed import all_reduce_sum, rank_world
from tandem.inference.mcgpds.bound import likelihood_ceiling
from tandem.inference.mcgpds.prior_factors import factor_bytes
from tandem.inference.mcgpds.stochastic_elbo import (
    _collapsed_value,
    _detached,
    _g_on,
    _optimal_natural,
    _stat_size,
    _unflatten,
    _window_terms,
    batch_prior,
    refresh_statistics,
    windows_per_chunk,
)
from tandem.inference.mcgpds.window_prior_kl import prior_is_constant
from tandem.inference.mcgpds.windows import StochasticData, guide_params, model_params
from tandem.inference.numerics import DTYPE, NotPositiveDefiniteError
from tandem.inference.validation import check_int_range, resolve_device

__all__ = ["bound_ceiling", "collapsed_value_and_grad", "hyper_step", "lbfgs_sharded"]


# --------------------------------------------------------------------------- local optimiser
def _dot(a: list, b: list, device) -> float:
    """Σ over this rank's tensors of ⟨a, b⟩, summed over the ranks."""
    tot = torch.zeros((), dtype=DTYPE, device=device)
    for x, y in zip(a, b):
        tot = tot + (x * y).sum()
    return float(all_reduce_sum(tot))


def lbfgs_sharded(fun, params: list, iters: int, history: int = 10, device="cpu", replicated: bool = False) -> float:
    """Minimise ``fun`` over ``params`` (this rank's share) by L-BFGS with Armijo backtracking.

    Every inner product is summed over the ranks, so each rank takes the step one process
    holding all the parameters would take (the same collectives in the same order on every
    rank). Stops early when the gradient vanishes or no step decreases ``fun``.

    Parameters
    ----------
    fun : callable
        ``fun()`` returns ``(value, grads)``: the value summed over the ranks (identical on
        all) and this rank's gradients, or ``(math.inf, None)`` where it is undefined (such a
        trial point is rejected).
    params : list of torch.Tensor
        The tensors optimised in place.
    iters : int
        Iterations at most.
    history : int, default 10
        Number of (s, y) pairs kept.
    device : str or torch.device, default "cpu"
        Device of the inner products' accumulators.
    replicated : bool, default False
        Every rank holds all of ``params`` and ``fun`` returns the full (already summed)
        gradient, so the inner products are local (the ranks compute the same step).

    Returns
    -------
    float
        The final value of ``fun``.
    """
    device = resolve_device(device)
    if replicated:      # every rank holds the whole vectors: local inner products
        def dot(a, b, dev):
            return float(sum(((x * y).sum() for x, y in zip(a, b)), torch.zeros((), dtype=DTYPE, device=dev)))
    else:
        dot = _dot
    f, g = fun()
    if g is None:
        return f
    hist = []                                         # (s, y, 1/sᵀy)
    for it in range(iters):
        gg = dot(g, g, device)
        if not math.isfinite(gg) or gg <= 1e-20:
            break
        # two-loop recursion: d = −H g
        qv = [x.clone() for x in g]
        alphas = []
        for s, y, r in reversed(hist):
            a = r * dot(s, qv, device)
            alphas.append(a)
            qv = [q_ - a * y_ for q_, y_ in zip(qv, y)]
        if hist:
            s, y, r = hist[-1]
            gamma = 1.0 / (r * dot(y, y, device))
        else:
            gamma = min(1.0, 1.0 / math.sqrt(gg))       # first step: at most unit length
        qv = [gamma * q_ for q_ in qv]
        for (s, y, r), a in zip(hist, reversed(alphas)):
            b = r * dot(y, qv, device)
            qv = [q_ + (a - b) * s_ for q_, s_ in zip(qv, s)]
        d = [-q_ for q_ in qv]
        gd = dot(g, d, device)
        if not gd < 0:                                # not a descent direction: restart
            hist, d, gd = [], [-x * min(1.0, 1.0 / math.sqrt(gg)) for x in g], -min(gg, math.sqrt(gg))
        x0 = [p.detach().clone() for p in params]
        t, accepted = 1.0, False
        for _ in range(30):
            with torch.no_grad():
                for p, x, d_ in zip(params, x0, d):
                    p.copy_(x + t * d_)
            f_new, g_new = fun()                        # math.inf: a point outside the domain
            if math.isfinite(f_new) and f_new <= f + 1e-4 * t * gd:
                accepted = True
                break
            t *= 0.5
        if not accepted:
            with torch.no_grad():
                for p, x in zip(params, x0):
                    p.copy_(x)
            break
        s = [t * d_ for d_ in d]
        y = [gn - go for gn, go in zip(g_new, g)]
        sy = dot(s, y, device)
        if sy > 1e-12 * math.sqrt(dot(y, y, device) * dot(s, s, device)):   # keep H positive definite
            hist = (hist + [(s, y, 1.0 / sy)])[-history:]
        f, g = f_new, g_new
    return f




# --------------------------------------------------------------------------- hyperparameter step
def _learned_params(sdata: StochasticData) -> tuple[list, list]:
    """Names and unconstrained tensors of the learned hyperparameters (the ``pyro.param`` s that
    :func:`model_params` registers; fixed groups are constants there)."""
    with poutine.trace(param_only=True) as tr:
        model_params(sdata)
    names = sorted(tr.trace.nodes)
    store = pyro.get_param_store()
    return names, [store[n].unconstrained() for n in names]


class _LazyGrads:
    """A sequence of gradients computed on first iteration (a line search's rejected trial
    points never need theirs)."""

    def __init__(self, fn):
        self._fn, self._v = fn, None

    def __iter__(self):
        if self._v is None:
            self._v = self._fn()
        return iter(self._v)


def _chunk_prior(sdata: StochasticData, hp: dict, part: torch.Tensor, j: int, priors: dict | None):
    """The prior factors of chunk ``j`` (windows ``part``) kept in ``priors`` across the evaluations
    of one hyperparameter step (A constant), within
    :data:`tandem.inference.mcgpds.streamed.PRIOR_CACHE_MB`; ``None`` (computed per evaluation)
    when ``priors`` is ``None`` or the budget is spent."""
    if priors is None:
        return None
    if j not in priors:
        from tandem.inference.mcgpds import streamed
        pr = batch_prior(sdata, _detached(hp), part)
        if pr is None or factor_bytes(pr, *priors.values()) > streamed.PRIOR_CACHE_MB * 2 ** 20:
            return pr
        priors[j] = pr
    return priors[j]


def collapsed_value_and_grad(sdata: StochasticData, params: list, chunk: int = 64, lazy: bool = False,
                             priors: dict | None = None):
    """The full-data collapsed bound F(θ) at the windows' current q(X) and its gradient.

    The gradient is in the hyperparameters' unconstrained tensors ``params``; both are streamed
    over chunks of windows.

    Parameters
    ----------
    sdata : StochasticData
        The data.
    params : list of torch.Tensor
        The learned hyperparameters' unconstrained tensors.
    chunk : int, default 64
        Windows per chunk (fewer for long windows: :func:`~tandem.inference.mcgpds.stochastic_elbo.windows_per_chunk`).
    lazy : bool, default False
        ``grads`` is computed (pass 2) when first iterated, at the parameters of then.
    priors : dict, optional
        A store for the chunks' prior factors, kept by the caller over evaluations at which α, ε
        and the time kernels do not change (``None``: computed in every evaluation).

    Returns
    -------
    F : float
        The bound, or ``−inf`` where a factorisation fails (every rank alike).
    grads : list of torch.Tensor or None
        ∇θ F per tensor of ``params`` (summed over the ranks), ``None`` where F is ``−inf``.

    Notes
    -----
    ``F(θ) = Σ_i terms_i(θ) + Σ_k C_k(T_k(θ), θ)``, ``T_k = Σ_i s_ik(θ)`` (the summed statistics,
    :func:`_window_terms`), ``C_k`` the value at the optimal q(V), q(U) (:func:`_collapsed_value`).
    Pass 1 (no graph) sums ``terms`` and ``T``; then ``G_k = ∂C_k/∂T_k``, and pass 2 accumulates
    ``∇θ Σ_i [terms_i + Σ_k ⟨G_k, s_ik⟩]`` chunk by chunk plus the direct ``∇θ C_k(T_k, θ)`` at
    fixed T — the chain rule, with memory O(chunk) windows rather than O(N). Sharded: rank r takes
    windows ``r::world``; value and gradient are summed over the ranks (identical on all).
    """
    rank, world = rank_world()
    S = sdata.windows.S
    chunk = windows_per_chunk(sdata, chunk)
    mine = torch.arange(S, device="cpu")[rank::world]
    parts = [mine[lo:lo + chunk] for lo in range(0, mine.numel(), chunk)] or [mine]
    M, J, dev = sdata.M, sdata.J, sdata.device
    failed, terms = 0.0, torch.zeros((), dtype=DTYPE, device=dev)
    vms = sdata.view_masks
    tot = [torch.zeros(_stat_size(M, D, J, vm), dtype=DTYPE, device=dev) for D, vm in zip(sdata.out_dims, vms)]
    with torch.no_grad():
        hp0 = _detached(model_params(sdata))
        try:
            for j, part in enumerate(parts):
                q = guide_params(sdata, part) if part.numel() else {}
                t, f = _window_terms(sdata, hp0, _detached(q), part, _chunk_prior(sdata, hp0, part, j, priors))
                terms = terms + t
                tot = [a + b for a, b in zip(tot, f)]
        except NotPositiveDefiniteError:
            failed = 1.0
    head = all_reduce_sum(torch.stack([terms.detach() if not failed else torch.zeros((), dtype=DTYPE, device=dev),
                                       torch.tensor(failed, dtype=DTYPE, device=dev)]))
    if float(head[1]) > 0:
        return -math.inf, None
    tot = [all_reduce_sum(x) for x in tot]
    g_on = [_g_on(sdata, v) for v in hp0["views"]]
    value, Gs = float(head[0]), []
    for k, D in enumerate(sdata.out_dims):
        tk = tot[k].clone().requires_grad_()
        with torch.enable_grad():
            try:
                c = _collapsed_value(_optimal_natural(hp0["views"][k], _unflatten(tk, M, D, J, vms[k]), g_on[k],
                                                      vms[k]), g_on[k], vms[k])
            except NotPositiveDefiniteError:
                return -math.inf, None
            (G,) = torch.autograd.grad(c, tk)
        value += float(c)
        Gs.append(G)
    if lazy:
        return value, _LazyGrads(lambda: _collapsed_grads(sdata, params, parts, Gs, tot, g_on, priors))
    return value, _collapsed_grads(sdata, params, parts, Gs, tot, g_on, priors)


def _collapsed_grads(sdata, params, parts, Gs, tot, g_on, priors=None) -> list:
    """Pass 2 of :func:`collapsed_value_and_grad`: the chain-rule gradient, summed over the ranks."""
    rank, world = rank_world()
    M, J, vms = sdata.M, sdata.J, sdata.view_masks
    grads = [torch.zeros_like(p) for p in params]
    with torch.enable_grad():
        for j, part in enumerate(parts):
            if not part.numel():
                continue
            hp = model_params(sdata)
            q = _detached(guide_params(sdata, part))
            t, f = _window_terms(sdata, hp, q, part, _chunk_prior(sdata, hp, part, j, priors))
            sur = t + sum((G * fk).sum() for G, fk in zip(Gs, f))
            gs = torch.autograd.grad(sur, params, allow_unused=True)
            grads = [a if b is None else a + b for a, b in zip(grads, gs)]
        if rank == 0:          # the direct dependence of C_k on θ (β, W) at the summed statistics
            hp = model_params(sdata)
            sur = sum(_collapsed_value(_optimal_natural(hp["views"][k], _unflatten(tot[k], M, D, J, vms[k]), g_on[k],
                                                        vms[k]), g_on[k], vms[k]) for k, D in enumerate(sdata.out_dims))
            if sur.requires_grad:
                gs = torch.autograd.grad(sur, params, allow_unused=True)
                grads = [a if b is None else a + b for a, b in zip(grads, gs)]
    if world > 1:
        flat = all_reduce_sum(torch.cat([g.reshape(-1) for g in grads]))
        grads = [x.reshape(g.shape) for x, g in zip(flat.split([g.numel() for g in grads]), grads)]
    return grads


def bound_ceiling(sdata: StochasticData) -> float:
    """:func:`tandem.inference.mcgpds.bound.likelihood_ceiling` of ``sdata`` at the current β (and
    W, which decides whether the g terms are on): no full-data bound can exceed it (observed entries
    only, for views with missing entries).

    Parameters
    ----------
    sdata : StochasticData
        The data (its registered hyperparameters are read).

    Returns
    -------
    float
        The ceiling in nats.
    """
    with torch.no_grad():
        views = model_params(sdata)["views"]
        counts, g2 = [], []
        for Y, D, vm, v in zip(sdata.views, sdata.out_dims, sdata.view_masks, views):
            counts.append((sdata.N, D) if vm is None else vm.obs.sum(0))
            # the g terms of the paper's surrogate likelihood add up to ½ β Σ y² each (likelihood_ceiling)
            g2.append(sdata.J * torch.nan_to_num(Y).pow(2).sum(0) if _g_on(sdata, v) else None)
        return likelihood_ceiling([v["beta"] for v in views], counts, g2)


@torch.no_grad()
def hyper_step(sdata: StochasticData, iters: int, chunk: int = 64) -> float | None:
    """L-BFGS iterations on the full-data collapsed bound in the learned hyperparameters.

    ``iters`` iterations (Armijo backtracking, :func:`lbfgs_sharded` with replicated
    parameters) at the windows' current q(X) (:func:`collapsed_value_and_grad`), then
    :func:`refresh_statistics` at the new values. The bound does not decrease (a step that
    fails Armijo is undone), and a trial point whose bound exceeds the likelihood's ceiling
    (:func:`bound_ceiling`: numerically broken) is rejected like one where a factorisation fails.

    Parameters
    ----------
    sdata : StochasticData
        The data.
    iters : int
        L-BFGS iterations (≥ 1).
    chunk : int, default 64
        Windows per chunk of the streamed bound.

    Returns
    -------
    float or None
        The bound after the step, ``None`` when no hyperparameter is learned.

    Raises
    ------
    FloatingPointError
        The bound at the starting point already exceeds the ceiling.
    """
    check_int_range(iters, "iters", low=1)
    _, params = _learned_params(sdata)
    if not params:
        return None

    first = []
    # α, ε and the time kernels not learned: the windows' prior factors serve every evaluation
    with torch.enable_grad():        # (under no_grad no parameter would look learned)
        hp = model_params(sdata)
    priors = {} if prior_is_constant(hp["time_s"], hp["views"]) else None

    def fun():
        F, grads = collapsed_value_and_grad(sdata, params, chunk, lazy=True, priors=priors)
        if grads is None:
            return math.inf, None
        ceiling = bound_ceiling(sdata)
        if not F <= ceiling:          # impossible for a bound: a numerically broken evaluation
            if not first:
                raise FloatingPointError(
                    f"hyper_step: the full-data bound {F:.6g} exceeds the likelihood's ceiling {ceiling:.6g} "
                    "at the current parameters: the fit is numerically broken (check q(X) and the kernel "
                    "hyperparameters for extreme values)")
            return math.inf, None     # a trial point of the line search: rejected
        first.append(F)
        return -F, _LazyGrads(lambda: [-g for g in grads])

    f = lbfgs_sharded(fun, params, iters, device=sdata.device, replicated=True)
    refresh_statistics(sdata)
    return -f
