"""The batched per-point optimiser behind :meth:`~tandem.inference.twin_gp.predictor.TwinGP.predict`.

Batched optimisation (``optimizer="bfgs"`` or ``"gd"``): all test points move at once, but
every point keeps its own BFGS inverse-Hessian, its own backtracking (Armijo) step and its
own stopping test. Summing the per-point losses and running one L-BFGS on the sum would
couple the points through the shared line search and the shared curvature pairs; here
each point's iterate is exactly what the same method run on that point alone produces
(the per-point loop in ``examples/bench_twin_gp.py`` and the tests check this), and
converged points drop out of the batch. ``"bfgs"`` follows the TGP code (BFGS, ≤ 50
iterations, tolerance 1e-6); ``"gd"`` is the paper's ≤ 50-step gradient rule with a
per-point step size (backtracking, doubled after each accepted step).

:class:`OptInfo` holds the per-point diagnostics; :class:`ConvergenceWarning` and
:class:`IterationCapWarning` are the warnings :meth:`TwinGP.predict` raises for points that
stopped unconverged (both are re-exported by :mod:`tandem.inference.twin_gp.predictor`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from tandem.inference.validation import check_int_range, check_real_range

__all__ = ["ConvergenceWarning", "IterationCapWarning", "OptInfo", "minimize_batched"]


class ConvergenceWarning(RuntimeWarning):
    """Some test points' optimisations stopped unconverged.

    :class:`IterationCapWarning` (the cap) is the case with its own class.

    Parameters
    ----------
    message : str
        The warning's text.
    n_points : int, default 0
        How many points stopped unconverged (kept as ``n_points``).
    """

    def __init__(self, message: str, n_points: int = 0):
        super().__init__(message)
        self.n_points = int(n_points)


class IterationCapWarning(ConvergenceWarning):
    """Some test points were still improving when the iteration cap was reached.

    Parameters
    ----------
    message : str
        The warning's text.
    n_capped : int, default 0
        How many points were capped (kept as ``n_capped`` and ``n_points``).
    """

    def __init__(self, message: str, n_capped: int = 0):
        super().__init__(message, n_capped)
        self.n_capped = int(n_capped)


@dataclass
class OptInfo:
    """Per-point diagnostics of :func:`minimize_batched` (tensors of length B).

    Attributes
    ----------
    n_iter : torch.Tensor
        (B,) iterations per point.
    n_eval : int
        Calls of ``fg`` (batched evaluations) in all.
    f : torch.Tensor
        (B,) final objective values.
    grad_inf : torch.Tensor
        (B,) final ‖g‖_∞.
    converged : torch.Tensor
        (B,) bool, the point met a stopping test.
    wall_time : float, default 0.0
        Seconds spent.
    capped : torch.Tensor, optional
        (B,) bool, points still improving when the iteration cap was reached.
    extra : dict
        Free-form further diagnostics (empty from :func:`minimize_batched`).
    stalled : torch.Tensor, optional
        (B,) bool, points whose line search failed from steepest descent before any stopping
        test held: stopped unconverged below the cap.
    n_restart : torch.Tensor, optional
        (B,) long, restarts from steepest descent after a failed quasi-Newton line search.
    """
    n_iter: torch.Tensor
    n_eval: int
    f: torch.Tensor
    grad_inf: torch.Tensor
    converged: torch.Tensor
    wall_time: float = 0.0
    capped: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)
    stalled: torch.Tensor | None = None
    n_restart: torch.Tensor | None = None


# Hager & Zhang's approximate Wolfe constants: their δ and σ; their ε (1e-6, the rise of f a
# step may show) is tightened to 1e-10, near the objectives' rounding level: at 1e-6 a BFGS
# step across a flat stretch was accepted uphill and left a point's basin (SMTGP, α → 1)
_HZ_DELTA, _HZ_SIGMA, _HZ_EPS = 0.1, 0.9, 1e-10


def minimize_batched(fg, y0: torch.Tensor, optimizer: str = "bfgs", max_iter: int = 50,
                     gtol: float = 1e-6, ftol: float = 1e-10, max_ls: int = 20,
                     c1: float = 1e-4, max_step: float | None = None, progress=None,
                     on_active=None, inv_hessian: torch.Tensor | None = None) -> tuple[torch.Tensor, OptInfo]:
    """Minimise B independent objectives at once.

    Each point
    has its own inverse-Hessian approximation H (BFGS) or step size (``"gd"``), its own
    backtracking line search (halving from step 1, or from min(1, 1/‖g‖₁) on the first
    BFGS iteration, as torch's L-BFGS does; a trial is accepted on Armijo's test, or on
    Hager & Zhang's approximate Wolfe test where f's rounding hides the decrease) and its
    own stop (‖g‖_∞ ≤ gtol, or relative change of f ≤ ftol). A line search that fails
    along a BFGS direction restarts the point from steepest descent; one that fails from
    steepest descent stops the point unconverged (``info.stalled``), as does a decrease
    below rounding level (counted as converged); stopped points leave the batch. A point's iterates
    therefore do not depend on the other points in the batch. ``max_step`` caps the length
    of a trial step ‖t p‖ (a trust radius in y units; :meth:`TwinGP.predict` uses ρ_y,
    the distance over which K_y changes, so a step cannot jump over the narrow basins
    that the λ floor creates around training outputs).

    Parameters
    ----------
    fg : callable
        ``fg(y, idx) -> (f (b,), g (b, d))``; ``idx`` (long, (b,)) says which points the rows of
        ``y`` (b, d) belong to.
    y0 : torch.Tensor
        (B, d) starting points.
    optimizer : {"bfgs", "gd"}, default "bfgs"
        BFGS or gradient descent.
    max_iter : int, default 50
        Iterations per point at most.
    gtol : float, default 1e-6
        Stop when ‖g‖_∞ ≤ gtol.
    ftol : float, default 1e-10
        Stop when the relative change of f ≤ ftol.
    max_ls : int, default 20
        Line-search trials per iteration at most.
    c1 : float, default 1e-4
        Armijo constant, in (0, 1).
    max_step : float, optional
        Cap on the length of a trial step ‖t p‖ (see above), > 0.
    progress : tqdm.tqdm, optional
        A bar advanced by one for each point that stops.
    on_active : callable, optional
        ``on_active(idx)`` is called at the start of every iteration with the points still
        running; every ``fg`` call of that iteration asks for a subset of them (lets the
        caller compact per-point data once per iteration instead of on every evaluation).
    inv_hessian : torch.Tensor, optional
        (B, d, d) symmetric positive definite starting inverse-Hessian approximations (BFGS
        only; default the identity, scaled after the first step). With it the first step is a
        quasi-Newton step of length 1, like every later one, and a restart after a failed line
        search still falls back to the identity.

    Returns
    -------
    y : torch.Tensor
        (B, d) the minimisers.
    info : OptInfo
        Per-point diagnostics.

    Raises
    ------
    ValueError
        On an unknown ``optimizer``, a negative ``max_iter``/``gtol``/``ftol``, ``max_ls`` < 1,
        ``c1`` outside (0, 1), ``max_step`` ≤ 0 (any of them NaN, inf or not a real number), or an
        ``inv_hessian`` of the wrong shape or with ``"gd"``.
    """
    if optimizer not in ("bfgs", "gd"):
        raise ValueError(f"optimizer: expected 'bfgs' or 'gd', got {optimizer!r}")
    check_int_range(max_iter, "max_iter", 0)
    check_int_range(max_ls, "max_ls (line-search steps)", 1)
    check_real_range(gtol, "gtol", 0.0)
    check_real_range(ftol, "ftol", 0.0)
    check_real_range(c1, "c1 (Armijo constant)", 0.0, 1.0, low_open=True, high_open=True)
    if max_step is not None:
        check_real_range(max_step, "max_step", 0.0, low_open=True)
    if inv_hessian is not None:
        if optimizer != "bfgs":
            raise ValueError("inv_hessian: only the 'bfgs' optimizer keeps an inverse Hessian")
        want = (y0.shape[0], y0.shape[1], y0.shape[1])
        if tuple(inv_hessian.shape) != want:
            raise ValueError(f"inv_hessian: expected shape {want}, got {tuple(inv_hessian.shape)}")
    t0 = time.perf_counter()
    y = y0.detach().clone()
    B, d = y.shape
    dev, dt = y.device, y.dtype
    allidx = torch.arange(B, device=dev)
    f, g = fg(y, allidx)
    n_eval = 1
    eye = torch.eye(d, dtype=dt, device=dev)
    if optimizer != "bfgs":
        H = None
    elif inv_hessian is None:
        H = eye.expand(B, d, d).clone()
    else:
        H = inv_hessian.to(device=dev, dtype=dt).clone()
    # "first": the next step is from H = I (length min(1, 1/‖g‖₁), H rescaled after it)
    first = torch.full((B,), inv_hessian is None, dtype=torch.bool, device=dev)
    step = torch.ones(B, dtype=dt, device=dev)
    n_iter = torch.zeros(B, dtype=torch.long, device=dev)
    n_restart = torch.zeros(B, dtype=torch.long, device=dev)
    stalled = torch.zeros(B, dtype=torch.bool, device=dev)
    converged = g.abs().amax(1) <= gtol
    active = ~converged
    n_active = B
    for _ in range(max_iter):
        idx = active.nonzero().squeeze(1)
        if progress is not None:
            progress.update(n_active - idx.numel())
            n_active = idx.numel()
        if idx.numel() == 0:
            break
        if on_active is not None:
            on_active(idx)
        yi, fi, gi = y[idx], f[idx], g[idx]
        if optimizer == "bfgs":
            p = -(H[idx] @ gi.unsqueeze(-1)).squeeze(-1)
        else:
            p = -gi
        dphi = (gi * p).sum(1)
        bad = ~(dphi < 0)
        if bad.any():  # not a descent direction: restart from steepest descent
            p[bad] = -gi[bad]
            dphi = (gi * p).sum(1)
            if H is not None:
                H[idx[bad]] = eye
                first[idx[bad]] = True
        if optimizer == "bfgs":
            t = torch.where(first[idx], (1.0 / gi.abs().sum(1)).clamp(max=1.0), torch.ones_like(fi))
        else:
            t = step[idx].clone()
        if max_step is not None:
            t = torch.minimum(t, max_step / p.norm(dim=1).clamp_min(1e-300))
        pending = torch.ones_like(fi, dtype=torch.bool)
        tiny = torch.zeros_like(pending)
        approx = torch.zeros_like(pending)
        y_new, f_new, g_new = yi.clone(), fi.clone(), gi.clone()
        for _ls in range(max_ls):
            pi = pending.nonzero().squeeze(1)
            if pi.numel() == 0:
                break
            ytry = yi[pi] + t[pi].unsqueeze(1) * p[pi]
            ft, gt = fg(ytry, idx[pi])
            n_eval += 1
            armijo = torch.isfinite(ft) & (ft <= fi[pi] + c1 * t[pi] * dphi[pi])
            # Near a minimum, f's rounding error can exceed the decrease Armijo asks for
            # while the gradient is still accurate; Hager & Zhang's (2005) approximate
            # Wolfe test then accepts a step on the directional derivative instead:
            # σφ'(0) ≤ φ'(t) ≤ (2δ − 1)φ'(0) and φ(t) ≤ φ(0) + ε|φ(0)| (their δ, σ, ε)
            dtry = (gt * p[pi]).sum(1)
            wolfe = (torch.isfinite(ft) & torch.isfinite(dtry) & (ft <= fi[pi] + _HZ_EPS * fi[pi].abs().clamp_min(1.0))
                     & (dtry >= _HZ_SIGMA * dphi[pi]) & (dtry <= (2 * _HZ_DELTA - 1) * dphi[pi]))
            acc = armijo | wolfe
            ai = pi[acc]
            y_new[ai], f_new[ai], g_new[ai] = ytry[acc], ft[acc], gt[acc]
            approx[pi[acc & ~armijo]] = True
            pending[ai] = False
            t[pi[~acc]] *= 0.5
            # a decrease below rounding level cannot be resolved: the point has converged
            ri = pi[~acc]
            unresolvable = (t[ri] * dphi[ri]).abs() <= 1e-13 * fi[ri].abs().clamp_min(1.0)
            tiny[ri[unresolvable]] = True
            pending[ri[unresolvable]] = False
        # a failed line search along a quasi-Newton direction restarts from steepest
        # descent (H = I) instead of stopping; one that fails from steepest descent stalls
        retry = pending & ~first[idx] if H is not None else torch.zeros_like(pending)
        if retry.any():
            H[idx[retry]] = eye
            first[idx[retry]] = True
            n_restart[idx[retry]] += 1
        stalled[idx[pending & ~retry]] = True
        moved = ~pending & ~tiny
        if H is not None and moved.any():
            mi = moved.nonzero().squeeze(1)
            s = y_new[mi] - yi[mi]
            yk = g_new[mi] - gi[mi]
            sy = (s * yk).sum(1)
            upd = sy > 1e-12 * s.norm(dim=1) * yk.norm(dim=1).clamp_min(1e-300)
            if upd.any():
                ui = idx[mi[upd]]
                su, yu, syu = s[upd], yk[upd], sy[upd]
                Hu = H[ui]
                fst = first[ui]
                scale = (syu / (yu * yu).sum(1)).view(-1, 1, 1)
                Hu = torch.where(fst.view(-1, 1, 1), scale * eye, Hu)
                rho = (1.0 / syu).view(-1, 1, 1)
                V = eye - rho * su.unsqueeze(2) * yu.unsqueeze(1)
                H[ui] = V @ Hu @ V.transpose(1, 2) + rho * su.unsqueeze(2) * su.unsqueeze(1)
                first[ui] = False
        if optimizer == "gd":
            step[idx] = torch.where(moved, 2.0 * t, t)
        y[idx], f[idx], g[idx] = y_new, f_new, g_new
        n_iter[idx] += moved.long()
        small_g = g_new.abs().amax(1) <= gtol
        # (a step accepted on the approximate Wolfe test says nothing about f's change)
        small_f = ~approx & ((fi - f_new).abs() <= ftol * fi.abs().clamp_min(1.0))
        done = moved & (small_g | small_f)
        converged[idx[done | tiny]] = True
        active[idx[done | (pending & ~retry) | tiny]] = False
    if progress is not None:
        progress.update(n_active)  # points still running at the iteration cap
    info = OptInfo(n_iter, n_eval, f, g.abs().amax(1), converged, time.perf_counter() - t0, active.clone(),
                   stalled=stalled & ~converged, n_restart=n_restart)
    return y, info
