"""The one SVI driver that every model and example in tandem uses.

:func:`fit` runs stochastic (or deterministic) variational inference for any
``(model, guide)`` pair: a Pyro ELBO or a custom loss callable
``loss(model, guide, *args, **kwargs) -> scalar tensor``, a Pyro optimiser or L-BFGS,
a tqdm progress bar with the current loss, optional early stopping on a relative-change
tolerance, and an optional checkpoint file from which an interrupted run resumes exactly
(parameter store, optimiser state, RNG states, loss trace). A checkpoint only resumes the
run that wrote it: it stores a fingerprint of the model, guide, loss, optimiser, seed and
the data (shapes and a hash of the contents), and a different run is refused.
"""
from __future__ import annotations

import inspect
import os
import random
import time
import traceback
import warnings
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.optim
import torch
from pyro import poutine
from pyro.infer import ELBO, SVI, Trace_ELBO, TraceEnum_ELBO
from pyro.poutine.subsample_messenger import _Subsample
from tqdm.auto import tqdm

from tandem.inference.checkpoints import (
    CheckpointError,
    check_fingerprint,
    describe_callable,
    fingerprint,
    load_checkpoint,
    save_atomic,
)
from tandem.inference.numerics import set_seed
from tandem.inference.params import Boolean, InstanceOf, Interval, validate_params
from tandem.inference.params import Callable as CallableC
from tandem.inference.persistence import check_writable
from tandem.inference.preconditioned_lbfgs import PreconditionedLBFGS
from tandem.inference.validation import check_int_range, check_real_range, check_seed

__all__ = ["fit", "minimize", "FitResult", "LBFGS", "fit_fingerprint"]

#: ``kind`` tag of the checkpoint files written by :func:`fit`.
CHECKPOINT_KIND = "tandem.fit/2"


@dataclass
class LBFGS:
    """Use ``torch.optim.LBFGS`` (strong-Wolfe line search by default) as the optimiser.

    Each driver step is one ``LBFGS.step(closure)`` call of up to ``max_iter`` inner
    iterations. Only for **deterministic** losses, because the line search compares loss
    values at different points and a Monte Carlo estimate makes those comparisons
    meaningless. :func:`fit` accepts L-BFGS when

    * ``loss`` is a Pyro ELBO and every latent site is exact: each guide sample site is a
      point mass (``dist.Delta``, possibly ``.to_event``/masked/expanded — e.g.
      ``AutoDelta``, i.e. MAP), or is enumerated under ``TraceEnum_ELBO``; every model
      latent site is in the guide or enumerated; no plate subsamples; or
    * ``loss`` is a callable that returns the same value for the same parameters under
      two different random seeds (checked once, with one extra evaluation, skipped for a
      callable with the attribute ``deterministic = True``, such as McGPDS's collapsed loss).

    The evaluation that discovers the parameters is reused as the first closure call.

    Anything else raises ``ValueError`` before the first step.

    Attributes
    ----------
    lr : float, default 1.0
        Step size of ``torch.optim.LBFGS`` (> 0).
    max_iter : int, default 20
        Inner iterations per driver step (≥ 1).
    history_size : int, default 50
        Number of curvature pairs kept (≥ 1).
    line_search_fn : {"strong_wolfe", None}, default "strong_wolfe"
        The line search; None takes fixed steps of ``lr``.
    tolerance_grad : float, default 1e-9
        Inner stop when the gradient's max-norm is below it (≥ 0).
    tolerance_change : float, default 1e-12
        Inner stop when the loss or parameter change is below it (≥ 0).
    preconditioner : callable or None, default None
        ``preconditioner(names) -> {name: factor}``, called once per :func:`fit` call after the
        parameters are created, with the sorted names of the parameters L-BFGS optimises; each
        factor is a :class:`tandem.inference.preconditioned_lbfgs.ParamFactor` (a fixed
        invertible ``P`` on that parameter's unconstrained tensor, ``apply``/``apply_t``), and
        L-BFGS then runs on ``θ = θ₀ + P ν``: its initial inverse Hessian is ``γ P Pᵀ`` instead
        of ``γ I`` (:class:`tandem.inference.preconditioned_lbfgs.PreconditionedLBFGS`). A
        square root of a Gaussian prior's covariance whitens the prior term (for McGPDS:
        :class:`tandem.inference.mcgpds.preconditioner.PriorPreconditioner`). Names it returns
        that are not among ``names`` raise ``ValueError``.

    Raises
    ------
    ValueError
        If a setting is out of range, ``line_search_fn`` is neither "strong_wolfe" nor None,
        or ``preconditioner`` is neither None nor callable.
    """
    lr: float = 1.0
    max_iter: int = 20
    history_size: int = 50
    line_search_fn: str | None = "strong_wolfe"
    tolerance_grad: float = 1e-9
    tolerance_change: float = 1e-12
    preconditioner: Callable[[list[str]], dict] | None = None

    def __post_init__(self):
        check_real_range(self.lr, "LBFGS lr", low=0.0, low_open=True)
        check_int_range(self.max_iter, "LBFGS max_iter", low=1)
        check_int_range(self.history_size, "LBFGS history_size", low=1)
        if self.line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS line_search_fn: expected 'strong_wolfe' or None, got {self.line_search_fn!r}")
        check_real_range(self.tolerance_grad, "LBFGS tolerance_grad", low=0.0)
        check_real_range(self.tolerance_change, "LBFGS tolerance_change", low=0.0)
        if self.preconditioner is not None and not callable(self.preconditioner):
            raise ValueError(f"LBFGS preconditioner: expected None or a callable names -> {{name: factor}}, got "
                             f"{type(self.preconditioner).__name__}")


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    losses : numpy.ndarray
        (num_steps,) loss per step (a resumed run's include the checkpoint's).
    wall_time : float
        Seconds spent in this call.
    num_steps : int
        Steps done in total, counting a resumed checkpoint's.
    converged : bool
        Whether the early stop triggered.
    params : dict of str to torch.Tensor, default {}
        Constrained values of every ``pyro.param``, detached copies.
    resumed_from : int or None, default None
        The step a checkpoint resumed at (None: a fresh run).
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
    """Every RNG a fit draws from: torch (CPU and, once CUDA is initialised, each CUDA
    device's generator), numpy and Python's ``random``."""
    s = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    # only when CUDA is already in use: querying it would otherwise initialise it (slow, and
    # wrong in a forked worker)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        s["torch_cuda"] = torch.cuda.get_rng_state_all()
    return s


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"].cpu())
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
    cuda = s.get("torch_cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) <= torch.cuda.device_count():
        torch.cuda.set_rng_state_all([c.cpu() for c in cuda])


# ---------------------------------------------------------------- fingerprint of a run
# ELBO attributes that do not change the objective's value (layout/diagnostic switches;
# max_plate_nesting is also overwritten by the ELBO itself on first use).
_ELBO_IGNORED = {"max_plate_nesting", "max_iarange_nesting", "strict_enumeration_warning", "ignore_jit_warnings",
                 "jit_options", "retain_graph"}


def _describe_loss(loss) -> Any:
    if isinstance(loss, ELBO):
        settings = {k: v for k, v in vars(loss).items()
                    if not k.startswith("_") and k not in _ELBO_IGNORED
                    and (v is None or isinstance(v, (bool, int, float, str)))}
        return {"class": describe_callable(type(loss)), **settings}
    return describe_callable(loss)


def _describe_optim(optim) -> Any:
    if isinstance(optim, LBFGS):
        return optim
    return {"class": describe_callable(type(optim)),
            "constructor": (getattr(optim, "pt_scheduler_constructor", None)
                            or getattr(optim, "pt_optim_constructor", None)),
            "args": getattr(optim, "pt_optim_args", None), "clip": getattr(optim, "pt_clip_args", None)}


def fit_fingerprint(model: Callable, guide: Callable, args: tuple, kwargs: dict, loss, optim, seed: int) -> dict:
    """What identifies a :func:`fit` run, as a flat dict (see ``checkpoints.fingerprint``).

    Model and guide by qualified name and, for a function, a digest of its code, defaults
    and closure contents (for an autoguide: its class and its model's name;
    ``checkpoints.describe_callable`` says what the digest cannot see, e.g. global variables
    the function reads), the loss (ELBO class and its particle settings, or the callable's
    name and digest), the
    optimiser (class/constructor and its arguments, e.g. ``lr``; or the :class:`LBFGS`
    settings), the seed, and every positional/keyword data argument by dtype, shape and
    SHA-256 of its contents. ``num_steps``, ``tol`` and the checkpoint settings are not
    part of it: a run may be resumed with more steps or another stopping rule.

    Parameters
    ----------
    model : callable
        The model.
    guide : callable
        The guide.
    args : tuple
        The positional data arguments.
    kwargs : dict
        The keyword data arguments.
    loss : pyro.infer.ELBO or callable
        The loss.
    optim : pyro.optim.PyroOptim or LBFGS
        The optimiser.
    seed : int
        The seed.

    Returns
    -------
    dict
        The flat fingerprint.
    """
    return fingerprint(model=describe_callable(model), guide=describe_callable(guide), loss=_describe_loss(loss),
                       optim=_describe_optim(optim), seed=check_seed(seed), args=tuple(args), kwargs=dict(kwargs))


def _load_fit_state(path: Path, fp: dict, num_steps: int) -> dict:
    state = load_checkpoint(path, CHECKPOINT_KIND)
    check_fingerprint(path, state.get("fingerprint"), fp, what="fit")
    if state["step"] > num_steps:
        raise CheckpointError(f"checkpoint {path} holds {state['step']} steps, more than num_steps={num_steps}; "
                              f"a resumed run cannot undo steps: pass num_steps >= {state['step']} to resume it, "
                              f"or delete {path} to start afresh")
    return state


# ---------------------------------------------------------------- L-BFGS admissibility
def _point_mass(fn) -> bool:
    while isinstance(fn, (torch.distributions.Independent, dist.MaskedDistribution, dist.ExpandedDistribution)):
        fn = fn.base_dist
    return isinstance(fn, (dist.Delta, dist.Unit))


def _is_latent(site) -> bool:
    return (site["type"] == "sample" and not site["is_observed"] and not isinstance(site["fn"], _Subsample)
            and not site.get("infer", {}).get("_deterministic") and not isinstance(site["fn"], dist.Unit))


def _check_deterministic_elbo(loss: ELBO, model, guide, args, kwargs) -> None:
    """Raise ``ValueError`` unless ``loss`` (a Pyro ELBO) is exact for this model and guide."""
    enum_ok = isinstance(loss, TraceEnum_ELBO)
    advice = ("L-BFGS needs a deterministic loss: make every guide site a point mass (dist.Delta, e.g. "
              "AutoDelta for MAP), enumerate discrete sites with TraceEnum_ELBO, or pass a deterministic loss "
              "callable (an analytic or collapsed bound); otherwise use a stochastic optimiser such as "
              "pyro.optim.Adam")
    rng = _rng_state()
    try:
        with poutine.block():
            gtr = poutine.trace(guide).get_trace(*args, **kwargs)
            mtr = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(*args, **kwargs)
    finally:
        _set_rng_state(rng)
    name = type(loss).__name__
    for who, tr in (("guide", gtr), ("model", mtr)):
        for site in tr.nodes.values():
            fn = site.get("fn")
            if site["type"] == "sample" and isinstance(fn, _Subsample) and fn.subsample_size is not None \
                    and fn.subsample_size < fn.size:
                raise ValueError(f"LBFGS with {name}: plate {site['name']!r} in the {who} subsamples "
                                 f"{fn.subsample_size} of {fn.size}, so the loss is random. {advice}")
    for site in gtr.nodes.values():
        if _is_latent(site) and not _point_mass(site["fn"]) and not (enum_ok and site["infer"].get("enumerate")):
            raise ValueError(f"LBFGS with {name}: guide site {site['name']!r} samples from "
                             f"{type(site['fn']).__name__}, so the loss is a Monte Carlo estimate. {advice}")
    for site in mtr.nodes.values():
        if _is_latent(site) and site["name"] not in gtr.nodes and not (enum_ok and site["infer"].get("enumerate")):
            raise ValueError(f"LBFGS with {name}: model latent site {site['name']!r} is not in the guide, so the "
                             f"ELBO draws it from the prior and the loss is random. {advice}")


def _check_deterministic_callable(loss_fn, first_value: float, seed: int) -> None:
    """Evaluate a custom loss once more under another RNG state; raise if the value changed."""
    rng = _rng_state()
    try:
        set_seed((check_seed(seed) + 1_000_003) % 2 ** 32)   # a Python int: numpy int32 + 1_000_003 may overflow
        with torch.no_grad():
            second = float(loss_fn().detach())
    finally:
        _set_rng_state(rng)
    a, b = first_value, second
    if np.isfinite(a) and np.isfinite(b) and abs(a - b) > 1e-9 * max(1.0, abs(a), abs(b)):
        raise ValueError(f"LBFGS: the loss callable returned {a!r} and then {b!r} for the same parameters under "
                         "two random seeds, so it is random (a Monte Carlo estimate?); L-BFGS's line search needs "
                         "a deterministic loss. Use a stochastic optimiser such as pyro.optim.Adam, or make the "
                         "loss deterministic")


def _make_loss_fn(loss, model, guide, args, kwargs) -> Callable[[], torch.Tensor]:
    """A zero-argument differentiable loss for L-BFGS."""
    if isinstance(loss, ELBO):
        if not hasattr(loss, "differentiable_loss"):
            raise ValueError(f"loss: {type(loss).__name__} has no differentiable_loss; L-BFGS needs one "
                             "(use Trace_ELBO/TraceMeanField_ELBO/TraceEnum_ELBO or a custom loss)")
        return lambda: loss.differentiable_loss(model, guide, *args, **kwargs)
    return lambda: loss(model, guide, *args, **kwargs)


def _nonfinite_message(desc: str, value: float, step: int, optim) -> str:
    """Advice for a non-finite loss that fits the situation (the learning rate is not always the cause)."""
    head = f"{desc}: loss became {value} at step {step}"
    if step == 0:
        return (f"{head}, at the initial parameters before any update (the optimiser and its learning rate "
                "play no part); check the data for NaN/inf or extreme scales, the initial values, and the "
                "model for invalid operations (log of <= 0, overflowing exp, a parameter outside its support)")
    if isinstance(optim, LBFGS):
        if optim.line_search_fn is None:
            return (f"{head}; L-BFGS without a line search took too long a step: use "
                    "LBFGS(line_search_fn='strong_wolfe') or a smaller LBFGS(lr=...)")
        return (f"{head}; the L-BFGS line search reached parameters where the loss is not finite (a smaller "
                "learning rate does not help here): the objective overflows or is undefined somewhere along the "
                "search direction — standardise the data, bound the parameters with constraints, or check the "
                "model for log of <= 0 / overflowing exp")
    return f"{head}; lower the learning rate or check the data scaling"


def _accepts(fn, args, kwargs) -> bool:
    """Whether ``fn(*args, **kwargs)`` binds to ``fn``'s signature (True when it cannot be inspected)."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def _check_writable(path: Path) -> None:
    """Fail before training, not at the first checkpoint save, when ``path`` cannot be written."""
    try:
        check_writable(path.parent)
    except OSError as err:
        raise ValueError(f"checkpoint: cannot write {path} ({err.strerror or err}); "
                         "choose a checkpoint path in a folder you can write to") from None


def _check_lbfgs_params(names: list[str], params: list[torch.Tensor], desc: str) -> None:
    """Raise ``RuntimeError`` unless the tensors L-BFGS holds are still the store's parameters
    and the loss reached at least one of them.

    ``torch.optim.LBFGS`` reads a missing gradient as zero and stops at once: a parameter the
    model or guide replaced in the store (a PyroModule re-wrapping it in a new
    ``nn.Parameter``, a ``set_state`` inside the loss) would otherwise freeze the fit without
    a word. A single parameter without a gradient is legitimate (the loss does not depend
    on it; it stays where it is).
    """
    live = dict(pyro.get_param_store().named_parameters())
    stale = [n for n, p in zip(names, params) if live.get(n) is not p]
    if stale:
        raise RuntimeError(f"{desc}: the parameters {stale} in Pyro's param store are no longer the tensors L-BFGS "
                           "optimises (the model, guide or loss replaced them, e.g. a PyroModule re-wrapping a "
                           "parameter or a param-store set_state/clear during the fit); their updates would not "
                           "reach the loss and the fit would stall. Create parameters once and update them in place")
    if params and all(p.grad is None for p in params):
        raise RuntimeError(f"{desc}: the loss has no gradient with respect to any of the parameters L-BFGS "
                           f"optimises ({names}); L-BFGS would stop at once. Check that the loss uses the "
                           "parameters (not detached copies of them)")


def _lbfgs_factors(preconditioner, names: list[str]) -> list:
    """The per-parameter factors of an :class:`LBFGS` preconditioner, in the order of ``names``
    (None: the identity); a factor for a name that L-BFGS does not optimise raises."""
    given = preconditioner(list(names))
    if not isinstance(given, dict):
        raise ValueError(f"LBFGS preconditioner: expected it to return a dict name -> factor, got "
                         f"{type(given).__name__}")
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"LBFGS preconditioner: factors for {unknown}, which are not parameters of this fit "
                         f"({names})")
    return [given.get(n) for n in names]


#: declared constraints of :func:`fit`'s own keyword parameters (its other keywords go to the model)
FIT_CONSTRAINTS = {
    "loss": [None, InstanceOf(ELBO), CallableC()],
    "optim": [None, InstanceOf(pyro.optim.PyroOptim, what="a pyro.optim optimiser"),
              InstanceOf(LBFGS, what="tandem.inference.LBFGS")],
    "num_steps": [Interval(Integral, 0)], "seed": [Interval(Integral, 0, 2 ** 32 - 1)], "progress": [Boolean()],
    "tol": [None, Interval(Real, 0, closed="neither")], "window": [Interval(Integral, 1)],
    "min_steps": [Interval(Integral, 0)], "checkpoint": [None, InstanceOf(str, os.PathLike)],
    "checkpoint_every": [Interval(Integral, 1)], "clear_params": [Boolean()], "desc": [InstanceOf(str)],
}
#: declared constraints of :func:`minimize`'s own parameters (the rest are :func:`fit`'s)
MINIMIZE_CONSTRAINTS = {"loss_fn": [CallableC()], "desc": [InstanceOf(str)]}


class _CheckedLoss:
    """A callable loss whose every value is checked: a scalar ``torch.Tensor`` (a Python
    number cannot be differentiated, so the driver would train nothing); warns once when the
    first value depends on no parameter. ``__wrapped__`` keeps the checkpoint fingerprint."""

    def __init__(self, fn):
        self.__wrapped__ = fn
        self._warned = False

    def __getattr__(self, name):
        return getattr(self.__dict__["__wrapped__"], name)

    def __call__(self, *args, **kwargs):
        value = self.__wrapped__(*args, **kwargs)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            what = (type(value).__name__ if not isinstance(value, torch.Tensor)
                    else f"tensor of shape {tuple(value.shape)}")
            raise TypeError(f"loss: a callable loss must return a differentiable scalar torch.Tensor "
                            f"(loss(model, guide, *args, **kwargs)), got a {what}; nothing could be trained")
        if not self._warned and torch.is_grad_enabled() and not value.requires_grad:
            self._warned = True
            warnings.warn("loss: the callable loss returned a tensor that depends on no parameter "
                          "(requires_grad=False): the optimiser has nothing to train", RuntimeWarning, stacklevel=2)
        return value


def _validate(num_steps, seed, tol, window, min_steps, checkpoint_every) -> None:
    check_int_range(num_steps, "num_steps", low=0)
    check_seed(seed)
    if tol is not None:
        check_real_range(tol, "tol", low=0.0, low_open=True)
    check_int_range(window, "window", low=1)
    check_int_range(min_steps, "min_steps", low=0)
    check_int_range(checkpoint_every, "checkpoint_every", low=1)


def fit(model: Callable, guide: Callable, *args, loss: ELBO | Callable | None = None,
        optim: pyro.optim.PyroOptim | LBFGS | None = None, num_steps: int = 1000, seed: int = 0,
        progress: bool = True, tol: float | None = None, window: int = 1, min_steps: int = 0,
        checkpoint: str | os.PathLike | None = None, checkpoint_every: int = 100,
        clear_params: bool = True, desc: str = "SVI", **kwargs) -> FitResult:
    """Fit ``guide`` (and the model's ``pyro.param`` s) by minimising ``loss``.

    Parameters
    ----------
    model, guide : callable
        Callables taking ``(*args, **kwargs)``.
    *args
        Positional data arguments of the model and the guide.
    loss : pyro.infer.ELBO or callable, optional
        A Pyro ``ELBO`` instance (default ``Trace_ELBO()``) or a callable
        ``loss(model, guide, *args, **kwargs)`` returning a differentiable scalar tensor
        (e.g. McGPDS's collapsed bound).
    optim : pyro.optim.PyroOptim or LBFGS, optional
        A Pyro optimiser (default ``pyro.optim.Adam({"lr": 0.01})``) or :class:`LBFGS`
        (deterministic losses only; see :class:`LBFGS` for the rule).
    num_steps : int, default 1000
        Total number of steps (a resumed run continues up to this number).
    seed : int, default 0
        Integer in [0, 2³²) seeding Pyro/torch/numpy/python before the first step. On
        resume the checkpoint's RNG states are restored instead (the seed must match the
        one the checkpoint was written with).
    progress : bool, default True
        Show a tqdm progress bar.
    tol : float or None, default None
        Early stop once the relative change between the mean loss of the last ``window``
        steps and of the ``window`` steps before is at most ``tol``
        (``|new - old| <= tol * max(|old|, 1e-12)``, after at least
        ``min_steps`` steps). A resumed run whose loaded losses already meet the rule
        returns at once. None: no early stop.
    window : int, default 1
        Steps averaged by the stopping rule; ``window > 1`` smooths a noisy ELBO.
    min_steps : int, default 0
        Steps before the stopping rule applies.
    checkpoint : str or os.PathLike, optional
        Save parameter store, optimiser state, RNG states, the loss trace and the run's
        fingerprint (:func:`fit_fingerprint`) to this file every ``checkpoint_every`` steps
        and at the end (atomically). If the file exists when ``fit`` starts, the run
        resumes from it — exactly: the losses and parameters equal those of an
        uninterrupted run. A file written by a different run (other data, model, guide,
        loss, optimiser settings or seed), one holding more than ``num_steps`` steps, or
        an unreadable file raises ``CheckpointError`` (a ``ValueError``) naming the file
        and what differs; so does a folder (pass a file path). Functions are told apart by
        their code, defaults and closure contents, not by the global variables they read
        (see :func:`fit_fingerprint`).
    checkpoint_every : int, default 100
        Steps between checkpoints.
    clear_params : bool, default True
        Clear Pyro's parameter store first (not when resuming).
    desc : str, default "SVI"
        Label of the progress bar and of error messages.
    **kwargs
        Keyword data arguments of the model and the guide.

    Returns
    -------
    FitResult
        Loss trace, timing, step count, convergence flag and the fitted parameters.

    Raises
    ------
    FloatingPointError
        When the loss becomes NaN/inf, with advice that fits the case (initial
        parameters, L-BFGS, or a stochastic optimiser's step size).
    ValueError
        For an invalid option, a loss or optimiser of the wrong kind, L-BFGS with a
        stochastic loss, or a checkpoint of another run (``CheckpointError``).
    """
    validate_params(FIT_CONSTRAINTS, dict(loss=loss, optim=optim, num_steps=num_steps, seed=seed, progress=progress,
                                          tol=tol, window=window, min_steps=min_steps, checkpoint=checkpoint,
                                          checkpoint_every=checkpoint_every, clear_params=clear_params, desc=desc),
                    "fit: ")
    _validate(num_steps, seed, tol, window, min_steps, checkpoint_every)
    loss = Trace_ELBO() if loss is None else loss
    if not isinstance(loss, ELBO):
        loss = _CheckedLoss(loss)
    if not (isinstance(loss, ELBO) or callable(loss)):
        raise ValueError(f"loss: expected a Pyro ELBO or a callable, got {type(loss).__name__}")
    optim = pyro.optim.Adam({"lr": 0.01}) if optim is None else optim
    if not isinstance(optim, (pyro.optim.PyroOptim, LBFGS)):
        raise ValueError("optim: expected a pyro.optim optimiser or tandem.inference.LBFGS, "
                         f"got {type(optim).__name__}")
    use_lbfgs = isinstance(optim, LBFGS)
    ckpt_path = Path(checkpoint) if checkpoint is not None else None
    fp = fit_fingerprint(model, guide, args, kwargs, loss, optim, seed) if ckpt_path is not None else None
    state = _load_fit_state(ckpt_path, fp, num_steps) if ckpt_path is not None and ckpt_path.exists() else None
    if ckpt_path is not None and state is None:
        _check_writable(ckpt_path)

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
        set_seed(seed)

    def restore_params():
        # Lazily built guides (autoguides) create their parameters on the first call and
        # may overwrite stored values while doing so; the first call of an uninterrupted
        # run happened at step 0, so on resume the guide is built first (the RNG draws
        # this costs are undone below) and the checkpoint's parameters are put back.
        if state is not None:
            # The values are copied *into* the tensors the guide just created, not swapped
            # for the file's tensors: a PyroModule guide (every autoguide) holds its own
            # nn.Parameter objects and, finding another tensor in the store, wraps that in a
            # new nn.Parameter; the gradients then land on the new objects while L-BFGS holds
            # the old ones, and the fit stalls. copy_ also puts a CPU-read checkpoint back on
            # the device the model/guide created each parameter on (the data's device).
            live = dict(pyro.get_param_store().named_parameters())
            default = next(iter(live.values()), None)
            saved = dict(state["params"])
            restored = {}
            for n, v in saved["params"].items():
                cur = live.get(n)
                if cur is not None and cur.shape == v.shape and cur.dtype == v.dtype:
                    with torch.no_grad():
                        cur.copy_(v)
                    restored[n] = cur
                else:  # not built by the guide's first call (created on demand later)
                    restored[n] = v.to(cur.device if cur is not None
                                       else default.device if default is not None else v.device)
            saved["params"] = restored
            pyro.clear_param_store()
            pyro.get_param_store().set_state(saved)

    if use_lbfgs:
        if isinstance(loss, ELBO):
            _check_deterministic_elbo(loss, model, guide, args, kwargs)
        loss_fn = _make_loss_fn(loss, model, guide, args, kwargs)
        with poutine.trace(param_only=True) as ptrace:
            first = loss_fn()  # creates every param, so L-BFGS sees them all
        rechecked = not isinstance(loss, ELBO) and not getattr(loss, "deterministic", False)
        if rechecked:
            _check_deterministic_callable(loss_fn, float(first.detach()), seed)
        # A fresh run: the parameters are still those of the discovery evaluation, so it serves
        # as L-BFGS's first closure call (its value and graph at the starting point) instead of
        # being recomputed. On resume the checkpoint's parameters replace them: evaluate anew.
        # Not after the re-check of a callable loss: its later evaluation is the live one (a
        # data-parallel wrapper's collectives follow the last call; reusing the stale graph
        # left the first step of two gloo workers where it started)
        pending_first = [first if state is None and not rechecked else None]
        del first
        restore_params()
        names = sorted(ptrace.trace.nodes)
        params = [pyro.param(n).unconstrained() for n in names]
        settings = dict(lr=optim.lr, max_iter=optim.max_iter, history_size=optim.history_size,
                        line_search_fn=optim.line_search_fn, tolerance_grad=optim.tolerance_grad,
                        tolerance_change=optim.tolerance_change)
        if optim.preconditioner is None:
            torch_opt = torch.optim.LBFGS(params, **settings)
        else:
            torch_opt = PreconditionedLBFGS(params, _lbfgs_factors(optim.preconditioner, names), **settings)
        if state is not None:
            torch_opt.load_state_dict(state["optim"])

        def closure():
            torch_opt.zero_grad()
            value = pending_first[0] if pending_first[0] is not None else loss_fn()
            pending_first[0] = None
            value.backward()
            _check_lbfgs_params(names, params, desc)
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
                if "_strong_wolfe" not in _traceback_functions(err):
                    raise
                if line_search_failures[0] >= 1:
                    raise RuntimeError(
                        f"{desc}: the L-BFGS line search failed twice in a row (torch's strong-Wolfe bracket "
                        "collapsed); the loss is probably not finite or not smooth along the search direction, "
                        "and a smaller learning rate does not help here: check the model for log of <= 0 or "
                        "overflowing exp, bound the parameters with constraints, standardise the data, or use "
                        "a stochastic optimiser such as pyro.optim.Adam") from err
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
            if _accepts(guide, args, kwargs):
                # build a lazily built guide first; a guide that the loss calls with other
                # arguments (e.g. a minibatch index) creates its parameters on demand instead
                poutine.block(poutine.trace(guide).get_trace)(*args, **kwargs)
            restore_params()
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
            save_atomic({"kind": CHECKPOINT_KIND, "fingerprint": fp, "step": step_no,
                         "params": pyro.get_param_store().get_state(), "optim": optim_state(),
                         "rng": _rng_state(), "losses": losses}, ckpt_path)

    def stop_rule_met() -> bool:
        if tol is None or len(losses) < max(min_steps, 2 * window):
            return False
        new = float(np.mean(losses[-window:]))
        old = float(np.mean(losses[-2 * window:-window]))
        return abs(new - old) <= tol * max(abs(old), 1e-12)

    # a resumed run that had already converged under this rule must not train on
    converged = state is not None and stop_rule_met()
    t0 = time.perf_counter()
    bar = tqdm(total=num_steps, initial=start_step, desc=desc, disable=not progress, dynamic_ncols=True)
    try:
        for i in range(start_step, num_steps if not converged else start_step):
            value = step()
            if not np.isfinite(value):
                raise FloatingPointError(_nonfinite_message(desc, value, i, optim))
            losses.append(value)
            bar.update(1)
            if i % 10 == 0 or i == num_steps - 1:
                bar.set_postfix(loss=f"{value:.6g}")
            done = i + 1
            if ckpt_path is not None and done % checkpoint_every == 0:
                save(done)
            if stop_rule_met():
                converged = True
                break
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    if ckpt_path is not None and (state is None or len(losses) > start_step):
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
    ``tol``, ``checkpoint``, ``progress``, ``clear_params``, ...) applies unchanged; a
    checkpoint's fingerprint names ``loss_fn``.

    Parameters
    ----------
    loss_fn : callable
        ``loss_fn(*args)`` returning a differentiable scalar tensor.
    *args
        Its positional arguments.
    desc : str, default "minimize"
        Label of the progress bar and of error messages.
    **kwargs
        Options of :func:`fit` (not ``loss``).

    Returns
    -------
    FitResult
        As :func:`fit`.

    Raises
    ------
    ValueError
        If ``loss_fn`` is not callable or ``loss=`` is passed; and as :func:`fit`.
    """
    if not callable(loss_fn):
        raise ValueError(f"loss_fn: expected a callable returning a scalar tensor, got {type(loss_fn).__name__}")
    validate_params(MINIMIZE_CONSTRAINTS, dict(loss_fn=loss_fn, desc=desc), "minimize: ")
    if "loss" in kwargs:
        raise ValueError("minimize: pass the objective as loss_fn, not as loss=")

    def objective(_model, _guide, *a):
        return loss_fn(*a)
    objective.__wrapped__ = loss_fn  # the checkpoint fingerprint names loss_fn, not this wrapper
    return fit(_no_program, _no_program, *args, loss=objective, desc=desc, **kwargs)


def _traceback_functions(err: BaseException) -> set:
    """Names of the functions on ``err``'s traceback (to recognise torch's line search)."""
    return {frame.name for frame in traceback.extract_tb(err.__traceback__)}
