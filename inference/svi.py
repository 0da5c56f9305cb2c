"""The one SVI driver that every model and example in tandem uses.

:func:`fit` runs stochastic (or deterministic) variational inference for any
``(model, guide)`` pair: a Pyro ELBO or a custom loss callable
``loss(model, guide, *args, **kwargs) -> scalar tensor``, a Pyro optimiser or L-BFGS,
a tqdm progress bar with the current loss, optional early stopping on a relative-change
tolerance, and an optional checkpoint file from which an interrupted run resumes exactly
(parameter store, optimiser state, RNG states, loss trace).
"""
from __future__ import annotations

import os
import random
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyro
import pyro.optim
import torch
from pyro import poutine
from pyro.infer import ELBO, SVI, Trace_ELBO
from tqdm.auto import tqdm

__all__ = ["fit", "minimize", "FitResult", "LBFGS"]


@dataclass
class LBFGS:
    """Use ``torch.optim.LBFGS`` (float64, strong-Wolfe line search) as the optimiser.

    Each driver step is one ``LBFGS.step(closure)`` call of up to ``max_iter`` inner
    iterations. Only for deterministic losses (a collapsed bound, a MAP objective, a
    point-mass guide): a Monte Carlo ELBO breaks the line search.
    """
    lr: float = 1.0
    max_iter: int = 20
    history_size: int = 50
    line_search_fn: str | None = "strong_wolfe"
    tolerance_grad: float = 1e-9
    tolerance_change: float = 1e-12


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes: ``losses`` (loss per step, numpy), ``wall_time`` (seconds spent in this
    call), ``num_steps`` (steps done in total, counting a resumed checkpoint's),
    ``converged`` (early stop triggered), ``params`` (constrained values of every
    ``pyro.param``, detached copies), ``resumed_from`` (step a checkpoint resumed at).
    """
    losses: np.ndarray
    wall_time: float
    num_steps: int
    converged: bool
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    resumed_from: int | None = None

    @property
    def final_loss(self) -> float:
        return float(self.losses[-1]) if len(self.losses) else float("nan")


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])


def _save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _make_loss_fn(loss, model, guide, args, kwargs) -> Callable[[], torch.Tensor]:
    """A zero-argument differentiable loss for L-BFGS."""
    if isinstance(loss, ELBO):
        if not hasattr(loss, "differentiable_loss"):
            raise ValueError(f"{type(loss).__name__} has no differentiable_loss; L-BFGS needs one "
                             "(use Trace_ELBO/TraceMeanField_ELBO/TraceEnum_ELBO or a custom loss)")
        return lambda: loss.differentiable_loss(model, guide, *args, **kwargs)
    return lambda: loss(model, guide, *args, **kwargs)


def fit(model: Callable, guide: Callable, *args, loss: ELBO | Callable | None = None,
        optim: pyro.optim.PyroOptim | LBFGS | None = None, num_steps: int = 1000, seed: int = 0,
        progress: bool = True, tol: float | None = None, window: int = 1, min_steps: int = 0,
        checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 100,
        clear_params: bool = True, desc: str = "SVI", **kwargs) -> FitResult:
    """Fit ``guide`` (and the model's ``pyro.param`` s) by minimising ``loss``.

    Parameters
    ----------
    model, guide : callables taking ``(*args, **kwargs)``.
    loss : a Pyro ``ELBO`` instance (default ``Trace_ELBO()``) or a callable
        ``loss(model, guide, *args, **kwargs)`` returning a differentiable scalar tensor
        (e.g. McGPDS's collapsed bound).
    optim : a Pyro optimiser (default ``pyro.optim.Adam({"lr": 0.01})``) or :class:`LBFGS`.
    num_steps : total number of steps (a resumed run continues up to this number).
    seed : seeds Pyro/torch/numpy/python before the first step (ignored on resume, where
        the checkpoint's RNG states are restored instead).
    tol, window, min_steps : early stop once the relative change between the mean loss of
        the last ``window`` steps and of the ``window`` steps before is below ``tol``
        (after at least ``min_steps`` steps). ``window > 1`` smooths a noisy ELBO.
    checkpoint, checkpoint_every : save parameter store, optimiser state, RNG states and
        the loss trace to ``checkpoint`` every ``checkpoint_every`` steps and at the end;
        if the file exists when ``fit`` starts, the run resumes from it.
    clear_params : clear Pyro's parameter store first (not when resuming).
    """
    if not isinstance(num_steps, int) or num_steps < 0:
        raise ValueError(f"num_steps: expected a non-negative integer, got {num_steps!r}")
    if tol is not None and not tol > 0:
        raise ValueError(f"tol: expected a positive float or None, got {tol!r}")
    if window < 1 or checkpoint_every < 1:
        raise ValueError("window and checkpoint_every must be >= 1")
    loss = Trace_ELBO() if loss is None else loss
    if not (isinstance(loss, ELBO) or callable(loss)):
        raise ValueError(f"loss: expected a Pyro ELBO or a callable, got {type(loss).__name__}")
    optim = pyro.optim.Adam({"lr": 0.01}) if optim is None else optim
    if not isinstance(optim, (pyro.optim.PyroOptim, LBFGS)):
        raise ValueError("optim: expected a pyro.optim optimiser or tandem's tandem.inference.LBFGS, "
                         f"got {type(optim).__name__}")
    ckpt_path = Path(checkpoint) if checkpoint is not None else None
    state = torch.load(ckpt_path, weights_only=False) if ckpt_path is not None and ckpt_path.exists() else None

    losses: list[float] = []
    start_step = 0
    if state is not None:
        pyro.clear_param_store()
        pyro.get_param_store().set_state(state["params"])
        losses = list(state["losses"])
        start_step = state["step"]
    else:
        if clear_params:
            pyro.clear_param_store()
        pyro.set_rng_seed(seed)

    use_lbfgs = isinstance(optim, LBFGS)
    if use_lbfgs:
        loss_fn = _make_loss_fn(loss, model, guide, args, kwargs)
        with poutine.trace(param_only=True) as ptrace:
            loss_fn()  # creates every param, so L-BFGS sees them all
        names = sorted(ptrace.trace.nodes)
        params = [pyro.param(n).unconstrained() for n in names]
        torch_opt = torch.optim.LBFGS(params, lr=optim.lr, max_iter=optim.max_iter,
                                      history_size=optim.history_size,
                                      line_search_fn=optim.line_search_fn,
                                      tolerance_grad=optim.tolerance_grad,
                                      tolerance_change=optim.tolerance_change)
        if state is not None:
            torch_opt.load_state_dict(state["optim"])

        def closure():
            torch_opt.zero_grad()
            value = loss_fn()
            value.backward()
            return value

        def step() -> float:
            # LBFGS.step returns the loss at the start of the step (its first closure call).
            # torch's strong-Wolfe zoom can end with a one-point bracket and raise IndexError
            # (seen on McGPDS bounds whose trial points hit the 1e30 not-PD guard). That is a
            # failed line search, not a bug in the model: undo the partial step, drop the
            # curvature history (the next step starts along the steepest-descent direction)
            # and report the starting loss; a second failure in a row is raised.
            before = [p.detach().clone() for p in params]
            try:
                out = float(torch_opt.step(closure).detach())
                line_search_failures[0] = 0
                return out
            except IndexError as err:
                if line_search_failures[0] >= 1 or "_strong_wolfe" not in _traceback_functions(err):
                    raise
                line_search_failures[0] += 1
                warnings.warn(f"{desc}: L-BFGS line search failed (torch strong-Wolfe bracket "
                              "collapsed); step undone, curvature history reset", RuntimeWarning)
                with torch.no_grad():
                    for p, b in zip(params, before):
                        p.copy_(b)
                torch_opt.state.clear()
                with torch.no_grad():
                    return float(loss_fn().detach())

        line_search_failures = [0]

        def optim_state():
            return torch_opt.state_dict()
    else:
        if state is not None:
            optim.set_state(state["optim"])
        svi = SVI(model, guide, optim, loss)

        def step() -> float:
            return float(svi.step(*args, **kwargs))

        def optim_state():
            return optim.get_state()

    if state is not None:
        _set_rng_state(state["rng"])

    def save(step_no: int) -> None:
        if ckpt_path is not None:
            _save_atomic({"step": step_no, "params": pyro.get_param_store().get_state(),
                          "optim": optim_state(), "rng": _rng_state(), "losses": losses}, ckpt_path)

    converged = False
    t0 = time.perf_counter()
    bar = tqdm(total=num_steps, initial=start_step, desc=desc, disable=not progress, dynamic_ncols=True)
    try:
        for i in range(start_step, num_steps):
            value = step()
            if not np.isfinite(value):
                raise FloatingPointError(f"{desc}: loss became {value} at step {i}; lower the "
                                         "learning rate or check the data scaling")
            losses.append(value)
            bar.update(1)
            if i % 10 == 0 or i == num_steps - 1:
                bar.set_postfix(loss=f"{value:.6g}")
            done = i + 1
            if ckpt_path is not None and done % checkpoint_every == 0:
                save(done)
            if tol is not None and done >= max(min_steps, 2 * window):
                new = float(np.mean(losses[-window:]))
                old = float(np.mean(losses[-2 * window:-window]))
                if abs(new - old) <= tol * max(abs(old), 1e-12):
                    converged = True
                    break
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    if ckpt_path is not None:
        save(len(losses))
    params = {k: v.detach().clone() for k, v in pyro.get_param_store().items()}
    return FitResult(np.asarray(losses), wall, len(losses), converged, params,
                     resumed_from=start_step if state is not None else None)


def _no_program(*args, **kwargs):
    """Stands for the model and guide in :func:`minimize` (the loss reads ``pyro.param`` s itself)."""
    return None


def minimize(loss_fn: Callable[..., torch.Tensor], *args, desc: str = "minimize", **kwargs) -> FitResult:
    """Minimise ``loss_fn(*args)`` over the ``pyro.param`` s it registers, with the driver.

    For objectives that are not a (model, guide) pair — e.g. McGPDS's bound of the test
    latents given a fitted model. ``loss_fn`` takes the positional ``args`` and returns a
    differentiable scalar; every option of :func:`fit` (``optim``, ``num_steps``, ``seed``,
    ``tol``, ``checkpoint``, ``progress``, ``clear_params``, ...) applies unchanged.
    """
    if not callable(loss_fn):
        raise ValueError(f"loss_fn: expected a callable returning a scalar tensor, got {type(loss_fn).__name__}")
    if "loss" in kwargs:
        raise ValueError("minimize: pass the objective as loss_fn, not as loss=")
    return fit(_no_program, _no_program, *args, loss=lambda _m, _g, *a: loss_fn(*a), desc=desc, **kwargs)


def _traceback_functions(err: BaseException) -> set:
    """Names of the functions on ``err``'s traceback (to recognise torch's line search)."""
    return {frame.name for frame in traceback.extract_tb(err.__traceback__)}
