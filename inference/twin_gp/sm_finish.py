"""SMTGP's ``form="sm"``: finishing in the log form the points where L′'s stopping tests say little.

:meth:`tandem.inference.twin_gp.predictor.TwinGP.predict` minimises the paper's L′ when
``form="sm"``; L′ is a monotone function of ℓ_α with the same minimiser, but its stopping tests,
read in ℓ_α, loosen with β (see :func:`finish_sm_in_log_form`). The points where they became
vacuous are continued here with the log form, whose tests do not depend on β.
"""
from __future__ import annotations

import torch

from tandem.inference.twin_gp.kernel_rows import _RowCache
from tandem.inference.twin_gp.optimizer import OptInfo, minimize_batched
from tandem.inference.validation import check_real_range

__all__ = ["finish_sm_in_log_form"]

# below this slope r = (β−1)L′ = dL′/dℓ relative to its start, or this rate |c| = |1−β|/(2(1−α)),
# L′'s stopping tests say little about ℓ_α
_SM_MIN_SLOPE, _SM_MIN_RATE = 1e-4, 1e-3


def finish_sm_in_log_form(gp, y, info: OptInfo, ctx: dict, a: float, b: float, ell0: torch.Tensor,
                          optimizer: str, max_iter: int, gtol: float, ftol: float, max_step: float):
    """Continue in the log form the points where ``form="sm"`` stopped on tests that L′'s
    reparametrisation of ℓ_α made vacuous; return the merged (y, info).

    ``gp`` is the :class:`~tandem.inference.twin_gp.predictor.TwinGP` whose ``predict`` ran.

    L′ = exp(−c(ℓ − ℓ0))/(β − 1), c = (1−β)/(2(1−α)), is a monotone function of ℓ with the
    same minimiser, but its stopping tests, read in ℓ, loosen: the gradient and absolute
    tests by 1/r, r = (β−1)L′ = exp(−c(ℓ − ℓ0)) the slope dL′/dℓ relative to its start
    (r → 0 for c ≪ 0: large β, or α near 1 with β > 1), the relative test by 1/|c| (β → 1:
    L′ ≈ 1/(β−1) then hides every change of ℓ). Where r < ``_SM_MIN_SLOPE`` or |c| <
    ``_SM_MIN_RATE`` and the log form's own gradient test fails, the point is finished by the
    log form (the same minimiser; its tests are β-free), so the result does not depend on β
    beyond the optimisation path. The thresholds lie far outside what the paper's grid
    (α ≤ 0.95, β ∈ {0.99, 0.5, 1.5}) reaches on ordinary data, whose results are unchanged.
    Finished points report the log form's converged / capped / stalled flags; ``f`` and
    ``grad_inf`` stay those of L′ (at the final point), ``n_iter`` and ``n_restart`` add up.

    Parameters
    ----------
    gp : TwinGP
        The predictor whose ``predict`` ran the L′ minimisation.
    y : torch.Tensor
        (B, d_y) the points where L′'s minimisation stopped (internal units).
    info : OptInfo
        Its optimiser record (updated in place for the finished points).
    ctx : dict
        The batch context of ``predict`` (``TwinGP.context``).
    a, b : float
        α and β.
    ell0 : torch.Tensor
        (B,) ℓ_α at the start, the reference ℓ0 of L′.
    optimizer : {"bfgs", "gd"}
        As ``predict``'s.
    max_iter : int
        Iterations per point at most.
    gtol, ftol : float
        The log form's stopping tolerances, ≥ 0.
    max_step : float
        The largest step.

    Returns
    -------
    tuple
        ``(y, info)``: the merged points and optimiser record.

    Raises
    ------
    ValueError
        Naming ``gtol`` (or, from :func:`minimize_batched`, ``ftol``/``max_step``) when it is not a
        finite real in its range.
    """
    check_real_range(gtol, "gtol", 0.0)
    c = (1 - b) / (2 * (1 - a))
    r = info.f * (b - 1)
    suspect = torch.ones_like(info.converged) if abs(c) < _SM_MIN_RATE else ~(r >= _SM_MIN_SLOPE)  # (NaN too)
    si = suspect.nonzero().squeeze(1)
    if si.numel() == 0:
        return y, info
    _, g = gp.value_and_grad_internal(y[si], gp._sub(ctx, si), form="log")
    pi = si[~(g.abs().amax(1) <= gtol)]
    if pi.numel() == 0:
        return y, info
    pctx = gp._sub(ctx, pi)
    rows = _RowCache(pctx["W"]) if pctx["W"] is not None and pctx["W"].dim() == 3 else None

    def fg(yy, idx):
        return gp.value_and_grad_internal(yy, gp._sub(pctx, idx, rows), form="log")
    yp, ip = minimize_batched(fg, y[pi], optimizer=optimizer, max_iter=max_iter, gtol=gtol, ftol=ftol,
                              max_step=max_step, on_active=None if rows is None else rows.shrink_to)
    f, g = gp.value_and_grad_internal(yp, pctx, beta=b, form="sm", ref=ell0[pi])
    y = y.clone()
    y[pi] = yp
    info.f[pi], info.grad_inf[pi] = f, g.abs().amax(1)
    info.n_iter[pi] += ip.n_iter
    info.n_restart[pi] += ip.n_restart
    info.converged[pi], info.capped[pi], info.stalled[pi] = ip.converged, ip.capped, ip.stalled
    info.n_eval += ip.n_eval
    info.wall_time += ip.wall_time
    return y, info
