"""High-level McGPDS fitting and view-to-view prediction.

Usage::

    from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds, predict_view

    cfg = McGPDSConfig(Q=10, M=100, fixed=("alpha", "eps", "beta", "time", "W"))
    fitted = fit_mcgpds([Y1, Y2], times, seq_ends=[34, 57, 79, 240, 433, 513, 566], config=cfg)
    pred = predict_view(fitted, Y1_test, t_test, source=0, target=1, method="code",
                        test_iters=8, beta_target_override=100.0)
    pred.mean, pred.var          # (N*, D_2) in the model's (scaled) units
    pred.nn_index                # nearest training frame in the learned shared space

Every optimisation phase runs through :func:`tandem.inference.fit` with the collapsed bound
(:func:`tandem.inference.mcgpds.bound.collapsed_loss`) and :class:`tandem.inference.LBFGS`. The
authors' SCG schedule (``cycles`` × [``var_iters`` variational-only, ``model_iters``
model-only], then ``joint_iters`` joint) is rendered with L-BFGS iterations.

About W and β: the paper's bound fits y with h and with every w_j g_j separately (no cross
terms). With W learned, the predictive mean becomes ≈ h-fit + g-fit ≈ 2× the data once L-BFGS
leaves the w = 0 saddle of the authors' 1e-6 init; with W and β both learned the bound is
unbounded in β. Putting "W" in ``fixed`` keeps g switched off (h-only CGPDS, its kernel and
inducing inputs fixed too, its O(βw²) terms skipped) — recommended.

Prediction methods (spec §"Prediction", protocol §1.8 / §2.6):

* ``"paper"`` — test private latents of the source view fitted with the source view's
  bound (likelihood kept) with the test frames **appended** to the training frames (spec
  §"Prediction" step 1): the likelihood term is the collapsed bound of train ∪ test with
  the trained q(X^(source)) and parameters fixed, so q(U) stays anchored on the training
  data; the KL is that of the test block (its own time block, as in the authors' code). NN
  of the test shared means among the training shared means, predict the target view at
  that training frame's q(X^(target)) (mean and variance). (A bound of the test frames
  *alone* re-collapses q(U) on them and lets the test latents take any embedding that
  explains the test data: on oil, 1-NN accuracy fell below chance with it.)
* ``"code"`` — the authors' demo: NN-in-Y init from training shared means, variances
  0.2, ``fixll=True`` (test objective = −KL only), ``test_iters`` iterations (8 pose /
  10 CUAVE), optional β override, prediction at the training private mean with zero input
  variance; ``latent_for_prediction="y_nn"`` reproduces CUAVE's "option 2".
* tandem extensions (``predict_view`` keywords ``k_neighbours``, ``candidates``, ``extra_var``;
  :func:`holdout_predictions`, :func:`calibrated_extra_var`): k-NN moment-matched mixtures and
  predictive variances calibrated on held-out (leave-one-sequence-out) training predictions.
* ``"generative"`` — no NN step: ``X*^(t) | X*^(s) ~ N((1−α_t) μ*^(s), (1−α_t)² S*^(s) + diag A_t)``
  pushed through the ψ-statistics (uncertain-input predictive).
"""
from __future__ import annotations

import copy
import math
import time as _time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyro
import torch

from tandem.guides.mcgpds import mcgpds_guide, variational_params
from tandem.inference.checkpoints import content_hash
from tandem.inference.distances import knn
from tandem.inference.mcgpds.bound import (
    Blocks,
    collapsed_bound,
    collapsed_loss,
    latent_terms,
    predict_moments,
    set_optimal_inducing,
    view_bound,
    view_posterior,
)
from tandem.inference.mcgpds.missing import check_missing_views, has_missing, mean_fill, nan_var, observed_mask
from tandem.inference.numerics import DTYPE, NotPositiveDefiniteError
from tandem.inference.persistence import PersistenceError, dump, load
from tandem.inference.svi import LBFGS, fit, minimize
from tandem.inference.validation import as_tensor, check_real_range, check_time_order, resolve_device, sequence_labels
from tandem.models.kernels import MappingKernel, kernel_from_spec, mapping_kernel_kind, time_params_kernel
from tandem.models.mcgpds import PARAM_GROUPS, McGPDSData, default_init, hyperparams, mcgpds_model, pca_init

__all__ = ["McGPDSConfig", "McGPDSFitted", "Prediction", "fit_mcgpds", "fit_cgpds", "predict_view",
           "constant_hyperparams", "pca_init", "save_fitted", "load_fitted", "holdout_folds", "holdout_predictions",
           "calibrated_extra_var", "fit_fingerprint", "cached_fit", "INDUCING_STORE_LIMIT", "store_optimal_inducing",
           "fitted_to_dict", "fitted_from_dict", "view_sites"]


@dataclass
class McGPDSConfig:
    """Every setting of a McGPDS fit (defaults: the protocol's human-pose run).

    Attributes
    ----------
    Q : int, default 10
        Latent dimension (shared and every private latent).
    M : int, default 100
        Inducing inputs per view.
    J : int, default 1
        Number of g_j mappings per view (the w_j g_j terms).
    mapping_kernel : str or models.kernels.MappingKernel, default "rbfard"
        ``models.kernels.RBFARD()`` / ``LinearARD()``, or the alias ``"rbfard"`` | ``"linear"``.
    time_white : bool, default True
        Add a white term to the paper's RBF time kernel.
    time_bias : bool, default True
        Add a bias term to the paper's RBF time kernel.
    time_white_var : float, default 1e-2
        Initial variance of the white term (> 0).
    time_bias_var : float, default 1.0
        Initial variance of the bias term (> 0).
    time_invwidth : float or None, default None
        Initial inverse width of the RBF time kernel; None: 100 / range(t of the last sequence)².
    fixed : tuple of str, default ("alpha", "eps", "beta", "time")
        Parameter groups held at their initial values, from alpha, eps, beta, time, W, kernel,
        inducing (the protocol's; adding "W" is recommended, see the module docstring).
    cycles : int, default 5
        Cycles of [``var_iters`` variational-only, ``model_iters`` model-only] before the joint phase.
    var_iters : int, default 50
        L-BFGS iterations of each variational-only phase.
    model_iters : int, default 50
        L-BFGS iterations of each model-only phase.
    joint_iters : int, default 1000
        L-BFGS iterations of the final joint phase.
    lbfgs_max_iter : int, default 50
        Iterations per L-BFGS step (a phase of n iterations runs ceil(n / lbfgs_max_iter) steps).
    tol : float or None, default None
        Early-stopping tolerance passed to :func:`tandem.inference.fit`.
    init : str, default "pca"
        Latent initialisation: ``"pca"`` (PCA of the views side by side) or ``"separately"``
        (PCA of each view, ``init_dims`` columns each).
    init_dims : tuple of int or None, default None
        With ``init="separately"``: one latent dimension per view, summing to ``Q``.
    init_views : list of array_like or None, default None
        Arrays used only for the PCA initialisation (default: the views fitted).
    alpha_init : float, default 0.5
        Initial coupling α in (0, 1].
    eps_init : float, default 1e-3
        Initial ε (> 0).
    beta_init : str, float or sequence of float, default "snr"
        Initial noise precisions: ``"snr"`` (100 / variance of each view), one value, or one per view.
    w_init_scale : float, default 1e-6
        Scale of the initial w_j (the authors' 1e-6).
    lam_init : float, default 0.5
        Initial variational λ (> 0).
    private_prior : str, default "mcgpds"
        ``"mcgpds"`` (private latents coupled to the shared dynamics) or ``"gplvm"``.
    output_layer : str, default "cgpds"
        ``"cgpds"`` or ``"linear"`` (a linear mapping kernel).
    coupling : bool, default True
        False: α fixed to 1 (an independent CGPDS per view).
    dtype : str, default "float64"
        Floating-point type of the fit.
    time_kernel : models.kernels.TimeKernel, sequence of them, or None, default None
        None: the paper's RBF + white + bias (``time_white`` / ``time_bias`` / ``time_*_var`` /
        ``time_invwidth`` apply); a TimeKernel for the shared and every private kernel, or a
        sequence of V + 1.
    """
    Q: int = 10
    M: int = 100
    J: int = 1
    mapping_kernel: str = "rbfard"          # models.kernels.RBFARD() / LinearARD(), or alias "rbfard" | "linear"
    time_white: bool = True
    time_bias: bool = True
    time_white_var: float = 1e-2
    time_bias_var: float = 1.0
    time_invwidth: float | None = None      # None -> 100 / range(t of the last sequence)²
    fixed: tuple = ("alpha", "eps", "beta", "time")   # protocol; add "W" (recommended, see module doc)
    cycles: int = 5
    var_iters: int = 50
    model_iters: int = 50
    joint_iters: int = 1000
    lbfgs_max_iter: int = 50
    tol: float | None = None
    init: str = "pca"                        # "pca" | "separately"
    init_dims: tuple | None = None
    init_views: list | None = None           # arrays used only for the PCA init
    alpha_init: float = 0.5
    eps_init: float = 1e-3
    beta_init: object = "snr"                # "snr" | float | sequence of floats
    w_init_scale: float = 1e-6
    lam_init: float = 0.5
    private_prior: str = "mcgpds"            # "mcgpds" | "gplvm"
    output_layer: str = "cgpds"              # "cgpds" | "linear"
    coupling: bool = True                    # False: alpha fixed to 1 (independent CGPDS per view)
    dtype: str = "float64"
    #: None: the paper's RBF + white + bias (time_white/time_bias/time_*_var/time_invwidth apply);
    #: a models.kernels.TimeKernel for the shared and every private kernel, or a sequence of V + 1
    time_kernel: object = None

    def to_dict(self) -> dict:
        """The configuration as a JSON-able dict (``init_views`` recorded only as given or None).

        Returns
        -------
        dict
            One entry per field; kernels as their specs.
        """
        d = asdict(self)
        d["init_views"] = None if self.init_views is None else "given"
        d["mapping_kernel"] = mapping_kernel_kind(self.mapping_kernel)
        d["time_kernel"] = time_kernel_spec(self.time_kernel)
        return d


def time_kernel_spec(tk):
    """JSON-able spec of a ``time_kernel`` setting (None, a TimeKernel or a sequence of them)."""
    if tk is None:
        return None
    if isinstance(tk, (list, tuple)):
        return [k.to_spec() for k in tk]
    return tk.to_spec()


def time_kernel_from_spec(spec):
    """Inverse of :func:`time_kernel_spec`."""
    if spec is None:
        return None
    if isinstance(spec, (list, tuple)):
        return [kernel_from_spec(s) for s in spec]
    return kernel_from_spec(spec)


@dataclass
class McGPDSFitted:
    """A trained McGPDS: config, constrained parameters, q moments, data, loss trace.

    Attributes
    ----------
    config : McGPDSConfig
        The settings of the fit.
    data : tandem.models.mcgpds.McGPDSData
        The fitted data and model structure.
    params : dict
        Constrained parameters by Pyro site name.
    mu_s : torch.Tensor
        (N, Q) shared means.
    s_s : torch.Tensor
        (N,) shared variances (the same for every q).
    mu : list of torch.Tensor
        V × (N, Q) private means.
    s_diag : list of torch.Tensor
        V × (N, Q) private variances.
    losses : numpy.ndarray
        Loss trace of every optimisation phase.
    wall_time : float
        Training seconds.
    bound : float
        The collapsed bound at the end of the fit.
    meta : dict
        E.g. ``{"fingerprint": ...}`` of a cached fit.
    """
    config: McGPDSConfig
    data: McGPDSData
    params: dict
    mu_s: torch.Tensor            # (N, Q) shared means
    s_s: torch.Tensor             # (N,) shared variances (the same for every q)
    mu: list                      # V × (N, Q) private means
    s_diag: list                  # V × (N, Q) private variances
    losses: np.ndarray
    wall_time: float
    bound: float
    meta: dict = field(default_factory=dict)     # e.g. {"fingerprint": ...} of a cached fit

    @property
    def views(self):
        return self.data.views

    @property
    def times(self):
        return self.data.times

    def hyperparams(self) -> dict:
        """Hyperparameters as constants (:func:`constant_hyperparams`).

        Returns
        -------
        dict
            The model's hyperparameters, no Pyro parameter store involved.
        """
        return constant_hyperparams(self)

    def alpha(self) -> list[float]:
        """The fitted couplings α_k, one per view.

        Returns
        -------
        list of float
            V values.
        """
        return [float(self.params[f"alpha_{k}"]) for k in range(self.data.V)]


@dataclass
class Prediction:
    """Output of :func:`predict_view` (model units; the caller rescales).

    Attributes
    ----------
    mean : torch.Tensor
        (N*, D_t) predictive mean.
    var : torch.Tensor
        (N*, D_t) predictive variance incl. noise.
    shared_mean : torch.Tensor
        (N*, Q) test shared means μ*^(s).
    nn_index : torch.Tensor
        (N*,) shared-space NN indices into the training frames.
    test_mu : torch.Tensor
        (N*, Q) test private means of the source view.
    test_s : torch.Tensor
        (N*, Q) their variances.
    method : str
        The prediction method.
    nn_index_y : torch.Tensor or None
        (N*,) Y-space NN indices.
    latent_mean : torch.Tensor or None
        (N*, Q) the inputs used for the target view.
    latent_var : torch.Tensor or None
        (N*, Q) their variances.
    wall_time : float
        Prediction seconds.
    """
    mean: torch.Tensor            # (N*, D_t)
    var: torch.Tensor             # (N*, D_t) predictive variance incl. noise
    shared_mean: torch.Tensor     # (N*, Q) test shared means μ*^(s)
    nn_index: torch.Tensor        # (N*,) shared-space NN indices into the training frames
    test_mu: torch.Tensor         # (N*, Q) test private means of the source view
    test_s: torch.Tensor          # (N*, Q) their variances
    method: str
    nn_index_y: torch.Tensor | None = None
    latent_mean: torch.Tensor | None = None   # (N*, Q) the inputs used for the target view
    latent_var: torch.Tensor | None = None
    wall_time: float = 0.0


# ------------------------------------------------------------------ validation / init
def _seq_ids(N: int, seq_ends, sequence_ids) -> torch.Tensor:
    if seq_ends is not None and sequence_ids is not None:
        raise ValueError("give either seq_ends or sequence_ids, not both")
    if sequence_ids is not None:
        # any hashable labels (NaN refused, fractional labels never truncated)
        return torch.as_tensor(sequence_labels(sequence_ids, N), device="cpu")
    if seq_ends is None:
        return torch.zeros(N, dtype=torch.long, device="cpu")
    ends = [int(e) for e in np.asarray(seq_ends).reshape(-1)]
    if not ends or any(b <= a for a, b in zip([0] + ends[:-1], ends)) or ends[-1] != N:
        raise ValueError(f"seq_ends: expected strictly increasing sequence end indices ending at N={N}, "
                         f"got {ends}")
    ids = torch.zeros(N, dtype=torch.long, device="cpu")
    for i, (a, b) in enumerate(zip([0] + ends[:-1], ends)):
        ids[a:b] = i
    return ids


def _check_views(views, times):
    if not isinstance(views, (list, tuple)) or len(views) == 0:
        raise ValueError("views: expected a non-empty list of (N, D_k) arrays")
    # NaN entries are missing (masked likelihood, tandem.inference.mcgpds.missing); inf is an error
    vs = [as_tensor(Y, f"views[{k}]", ndim=2, finite=False) for k, Y in enumerate(views)]
    Ns = [int(Y.shape[0]) for Y in vs]
    if len(set(Ns)) != 1:
        raise ValueError(f"views: every view must have the same number of frames (rows), got {Ns}")
    if Ns[0] < 2:
        raise ValueError(f"views: expected at least 2 frames (rows) to fit a latent space, got {Ns[0]}")
    for k, Y in enumerate(vs):
        if Y.shape[1] < 1:
            raise ValueError(f"views[{k}]: expected at least one column, got shape {tuple(Y.shape)}")
    check_missing_views(vs)
    for k, Y in enumerate(vs):
        y = Y[observed_mask(Y)]
        if not bool((y != y[:1]).any()):
            raise ValueError(f"views[{k}]: every entry is the same value ({float(y[0]):g}); a constant "
                             "view carries no information to fit (drop it)")
    t = as_tensor(times, "times", ndim=1)
    if t.numel() != Ns[0]:
        raise ValueError(f"times: expected {Ns[0]} time stamps (one per frame), got {t.numel()}")
    return vs, t


def _check_test_missing(Y: torch.Tensor, name: str) -> None:
    """Test frames of the source view may have NaN (missing) entries, masked in the test-time
    latent step; an infinite entry or a frame with no observed entry is a ``ValueError``."""
    if bool(torch.isinf(Y).any()):
        raise ValueError(f"{name}: expected finite values or NaN (missing), got an infinite entry")
    empty = torch.isnan(Y).all(1)
    if bool(empty.any()):
        raise ValueError(f"{name}: test frames {torch.nonzero(empty).reshape(-1)[:10].tolist()} have every entry "
                         "missing (NaN); a test frame needs at least one observed entry of the source view")


def _check_config_values(cfg: McGPDSConfig) -> None:
    """Early errors for values the model cannot use (named after the config field)."""
    check_real_range(cfg.alpha_init, "alpha_init", 0.0, 1.0, low_open=True)
    check_real_range(cfg.eps_init, "eps_init", 0.0, low_open=True)
    check_real_range(cfg.lam_init, "lam_init", 0.0, low_open=True)
    check_real_range(cfg.w_init_scale, "w_init_scale", 0.0)
    check_real_range(cfg.time_white_var, "time_white_var", 0.0, low_open=True)
    check_real_range(cfg.time_bias_var, "time_bias_var", 0.0, low_open=True)
    if cfg.time_invwidth is not None:
        check_real_range(cfg.time_invwidth, "time_invwidth", 0.0, low_open=True)
    if cfg.beta_init != "snr":
        for b in (cfg.beta_init if isinstance(cfg.beta_init, (list, tuple)) else [cfg.beta_init]):
            check_real_range(b, "beta_init (noise precision)", 0.0, low_open=True)


def constant_hyperparams(fitted: McGPDSFitted) -> dict:
    """Hyperparameters of a fitted model as constants (no Pyro parameter store involved).

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.

    Returns
    -------
    dict
        The hyperparameters (``"time_s"``, ``"views"``, ...) with every group fixed at ``fitted.params``.
    """
    d = copy.copy(fitted.data)
    d.init = fitted.params
    d.fixed = frozenset(PARAM_GROUPS)
    return hyperparams(d)


# ------------------------------------------------------------------ fitting
def fit_mcgpds(views, times, seq_ends=None, sequence_ids=None, config: McGPDSConfig | None = None,
               seed: int = 0, progress: bool = True, checkpoint=None, device=None) -> McGPDSFitted:
    """Fit McGPDS to time-aligned views ``views`` (list of (N, D_k)) at ``times`` (N,).

    The views are fitted in the units given (the protocol's own scaling); the fit depends on
    them, and a view whose standard deviation is outside [1e-2, 1e2] warns. For fits that do
    not depend on the data's units use :class:`tandem.inference.mcgpds.McGPDS`.

    Parameters
    ----------
    views : list of array_like
        V arrays (N, D_k), time-aligned; NaN entries are missing (masked likelihood), inf is an error.
    times : array_like
        (N,) time stamps.
    seq_ends : array_like of int, optional
        Cumulative sequence end indices, e.g. [34, 57, ...], ending at N.
    sequence_ids : array_like, optional
        (N,) sequence labels (instead of ``seq_ends``).
    config : McGPDSConfig, optional
        Settings (default ``McGPDSConfig()``).
    seed : int, default 0
        Seed of the initialisation and the optimiser.
    progress : bool, default True
        Show progress bars.
    checkpoint : str or path, optional
        Prefix of per-phase checkpoint files (``<checkpoint>.phase<i>``), resumed when they belong
        to the same problem (``<checkpoint>.fingerprint``).
    device : str or torch.device, optional
        Where the fit runs ("cpu", "cuda", a :class:`torch.device`); default ``None`` = the device
        of the first tensor among ``views`` and ``times`` (the CPU for numpy inputs). The data are
        moved there; every fitted tensor lives there. The initial values are drawn on the CPU
        (same seed → same start on every device).

    Returns
    -------
    McGPDSFitted
        The trained model.

    Raises
    ------
    ValueError
        For malformed views, times or sequences, invalid configuration values, or checkpoints
        written for another problem.

    Warns
    -----
    RuntimeWarning
        When a view's standard deviation is outside [1e-2, 1e2].
    """
    cfg = McGPDSConfig() if config is None else config
    dev = resolve_device(device, views, times)
    vs, t = _check_views(views, times)
    vs, t = [Y.to(dev) for Y in vs], t.to(dev)
    N = vs[0].shape[0]
    Ds = [int(Y.shape[1]) for Y in vs]
    V = len(vs)
    seq = _seq_ids(N, seq_ends, sequence_ids).to(dev)
    _check_config_values(cfg)
    for k, Y in enumerate(vs):
        sd = float((Y - Y.mean(0)).pow(2).mean().sqrt()) if not has_missing(Y) else \
            float((Y - Y.nanmean(0)).pow(2).nanmean().sqrt())
        if not 1e-2 <= sd <= 1e2:
            # measured on a two-view toy (tests/test_mcgpds_api.py): the generative RMSE is 0.280,
            # 0.402, 0.528 for the view ×1e-3, ×1, ×1e3 — at ×1e3 worse than the training mean (0.425)
            warnings.warn(f"McGPDS: views[{k}] has standard deviation {sd:.3g}; fit_mcgpds fits the data in "
                          "the units given (kernel variances and latent scales start at 1), so the fit depends "
                          "on them — scale the views to about unit variance, or use "
                          "tandem.inference.mcgpds.McGPDS, which standardises internally", RuntimeWarning,
                          stacklevel=2)
    if cfg.Q < 1 or cfg.M < 1 or cfg.J < 1:
        raise ValueError(f"Q, M and J must be >= 1, got Q={cfg.Q}, M={cfg.M}, J={cfg.J}")
    mapping_kind = mapping_kernel_kind(cfg.mapping_kernel)   # a models.kernels object or alias
    if cfg.private_prior not in ("mcgpds", "gplvm"):
        raise ValueError(f"private_prior: expected 'mcgpds' or 'gplvm', got {cfg.private_prior!r}")
    if cfg.output_layer not in ("cgpds", "linear"):
        raise ValueError(f"output_layer: expected 'cgpds' or 'linear', got {cfg.output_layer!r}")
    bad = set(cfg.fixed) - {"alpha", "eps", "beta", "time", "W", "kernel", "inducing"}
    if bad:
        raise ValueError(f"fixed: unknown groups {sorted(bad)}; allowed alpha, eps, beta, time, W, kernel, "
                         "inducing")
    init_views = vs if cfg.init_views is None else [as_tensor(Y, f"init_views[{k}]", ndim=2).to(dev)
                                                     for k, Y in enumerate(cfg.init_views)]
    if cfg.init == "pca":
        if cfg.Q > sum(Ds) or cfg.Q >= N:
            raise ValueError(f"Q={cfg.Q} is larger than the data dimension (sum of view dims {sum(Ds)}, "
                             f"N={N} frames); choose Q <= {min(sum(Ds), N - 1)}")
        X0 = pca_init(mean_fill(torch.cat(init_views, 1)), cfg.Q)
    elif cfg.init == "separately":
        dims = cfg.init_dims
        if dims is None or len(dims) != V or sum(dims) != cfg.Q:
            raise ValueError(f"init_dims: with init='separately' give one dim per view summing to Q={cfg.Q}, "
                             f"got {dims}")
        for k, (q, D) in enumerate(zip(dims, Ds)):
            if q > D:
                raise ValueError(f"init_dims[{k}]={q} is larger than view {k}'s dimension {D}")
        X0 = torch.cat([pca_init(mean_fill(Y), q) for Y, q in zip(init_views, dims)], 1)
    else:
        raise ValueError(f"init: expected 'pca' or 'separately', got {cfg.init!r}")
    if cfg.beta_init == "snr":
        beta = [100.0 / nan_var(Y) for Y in vs]
    elif isinstance(cfg.beta_init, (list, tuple)):
        if len(cfg.beta_init) != V:
            raise ValueError(f"beta_init: expected {V} values, got {len(cfg.beta_init)}")
        beta = [float(b) for b in cfg.beta_init]
    else:
        beta = float(cfg.beta_init)
    if cfg.time_invwidth is None:
        last = t[seq == seq[-1]]
        rng_t = float(last.max() - last.min()) or float(t.max() - t.min()) or 1.0
        invw = 100.0 / rng_t ** 2
    else:
        invw = float(cfg.time_invwidth)
    fixed = set(cfg.fixed)
    if "W" in fixed:
        fixed.add("g")      # g switched off: its kernel/inducing inputs have (almost) no gradient
    # (learning β with W learned warns in McGPDSData: the paper's bound is unbounded in β then)
    alpha = cfg.alpha_init
    if not cfg.coupling:
        alpha, fixed = 1.0, fixed | {"alpha"}
    kind = "linear" if cfg.output_layer == "linear" else (
        cfg.mapping_kernel if isinstance(cfg.mapping_kernel, MappingKernel) else mapping_kind)
    gen = torch.Generator().manual_seed(int(seed))
    init = default_init(N, Ds, cfg.Q, cfg.M, cfg.J, kind, X0=X0, times=t, time_white=cfg.time_white,
                        time_bias=cfg.time_bias, alpha=alpha, eps=cfg.eps_init, beta=beta,
                        invwidth=invw, white_var=cfg.time_white_var, bias_var=cfg.time_bias_var,
                        w_scale=cfg.w_init_scale, lam=cfg.lam_init, private_prior=cfg.private_prior,
                        generator=gen, device=dev, time_kernel=cfg.time_kernel)
    data = McGPDSData(vs, t, seq, cfg.Q, cfg.M, cfg.J, kind, cfg.time_white, cfg.time_bias,
                      cfg.private_prior, frozenset(fixed), init, device=dev, time_kernel=cfg.time_kernel)
    phases = []
    for c in range(cfg.cycles):
        phases.append((f"var {c + 1}/{cfg.cycles}", cfg.var_iters, ("model",)))
        phases.append((f"model {c + 1}/{cfg.cycles}", cfg.model_iters, ("variational",)))
    phases.append(("joint", cfg.joint_iters, ()))
    if checkpoint is not None:
        _check_checkpoint(checkpoint, fit_fingerprint(vs, t, seq_ends, sequence_ids, cfg, seed))
    losses = []
    t0 = _time.perf_counter()
    first = True
    for i, (name, iters, frozen) in enumerate(phases):
        if iters <= 0:
            continue
        mi = min(cfg.lbfgs_max_iter, iters)
        ck = None if checkpoint is None else f"{checkpoint}.phase{i}"
        res = fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, optim=LBFGS(max_iter=mi),
                  num_steps=int(math.ceil(iters / mi)), seed=seed, progress=progress, tol=cfg.tol,
                  checkpoint=ck, clear_params=first, desc=f"McGPDS {name}", frozen=frozen)
        first = False
        losses.extend(res.losses.tolist())
    if first:  # no optimisation at all: register the parameters
        pyro.clear_param_store()
        collapsed_loss(mcgpds_model, mcgpds_guide, data)
    wall = _time.perf_counter() - t0
    params = dict(init)
    params.update({k: v.detach().clone() for k, v in pyro.get_param_store().items()})
    with torch.no_grad():
        hp = hyperparams(data)
        mus, lams = variational_params(data)
        F, parts = collapsed_bound(data, hp, mus, lams, return_parts=True)
        lt = latent_terms(t, data.blocks, hp["time_s"], hp["views"], mus, lams, need_shared_var=True)
    store_optimal_inducing(data)
    return McGPDSFitted(cfg, data, params, lt["mu_s"].detach(), lt["s_s"].detach(),
                        [m.detach().clone() for m in mus], [s.detach() for s in lt["s_diag"]],
                        np.asarray(losses), wall, float(F))


#: largest number of q(U), q(V) covariance entries ``Σ_k (1 + J) D_k M²`` that a collapsed fit
#: writes into Pyro's parameter store at its end (2·10⁷ float64 ≈ 160 MB; CUAVE's 3750-d video
#: view with M = 100 needs 7.5·10⁷, and its temporaries several times that)
INDUCING_STORE_LIMIT = 2e7


def store_optimal_inducing(data: McGPDSData, limit: float | None = None) -> bool:
    """After a collapsed fit: write the optimal q(V), q(U) into the parameter store.

    The collapsed bound integrates q(U), q(V) out, but the hand-written guide samples them
    from its ``qv_*`` / ``qu_*`` parameters; left at their initial values (mean 0, scale 0.1)
    the posterior-predictive draws of a collapsed fit would ignore the data.

    Parameters
    ----------
    data : tandem.models.mcgpds.McGPDSData
        The fitted data, its parameters in Pyro's store.
    limit : float, optional
        Largest number of covariance entries ``Σ_k (1 + J) D_k M²`` written (default
        :data:`INDUCING_STORE_LIMIT`).

    Returns
    -------
    bool
        True when written; above ``limit`` entries it warns and returns False — call
        :func:`tandem.inference.mcgpds.bound.set_optimal_inducing` yourself if you need the draws.
    """
    limit = INDUCING_STORE_LIMIT if limit is None else limit
    size = sum((1 + data.J) * D * data.M ** 2 for D in data.out_dims)
    if size > limit:
        warnings.warn(f"McGPDS: the optimal q(U), q(V) of this fit have {size:.3g} covariance entries (> "
                      f"{limit:.3g}), so they were not written into Pyro's parameter store; call "
                      "tandem.inference.mcgpds.bound.set_optimal_inducing(data) before drawing posterior-"
                      "predictive samples with the guide", RuntimeWarning, stacklevel=3)
        return False
    set_optimal_inducing(data)
    return True


def fit_fingerprint(views, times, seq_ends, sequence_ids, config: McGPDSConfig, seed: int) -> str:
    """Content fingerprint of one :func:`fit_mcgpds` problem.

    It covers the data values, sequence layout, every configuration field (``init_views`` by
    content) and the seed.

    Parameters
    ----------
    views : list of array_like
        V arrays (N, D_k).
    times : array_like
        (N,) time stamps.
    seq_ends : array_like of int or None
        Cumulative sequence end indices.
    sequence_ids : array_like or None
        (N,) sequence labels.
    config : McGPDSConfig
        Settings of the fit.
    seed : int
        Seed of the fit.

    Returns
    -------
    str
        64 hex characters.
    """
    return content_hash("fit_mcgpds/1", list(views), times, seq_ends, sequence_ids, config, int(seed), length=64)


def _check_checkpoint(checkpoint, key: str) -> None:
    """Refuse to resume phase checkpoints written for another problem (other data, config or
    seed): ``<checkpoint>.fingerprint`` records the problem the phase files belong to."""
    meta = Path(f"{checkpoint}.fingerprint")
    if meta.exists():
        old = meta.read_text().strip()
        if old != key:
            raise ValueError(f"checkpoint: {checkpoint!s}.phase* were written for a different problem (data, "
                             f"config or seed; fingerprint {old[:12]}… here {key[:12]}…); delete them or "
                             "choose another checkpoint path")
        return
    if any(Path(str(checkpoint)).parent.glob(Path(str(checkpoint)).name + ".phase*")):
        raise ValueError(f"checkpoint: {checkpoint!s}.phase* exist without a {meta.name} record of the problem "
                         "they belong to; delete them or choose another checkpoint path")
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(key + "\n")


def cached_fit(views, times, *, config: McGPDSConfig, seed: int = 0, cache_dir=None, tag: str = "mcgpds",
               seq_ends=None, sequence_ids=None, progress: bool = True):
    """:func:`fit_mcgpds`, or the saved fit of exactly this problem from ``cache_dir``.

    The file name carries the content fingerprint (:func:`fit_fingerprint`: data values,
    full config, seed), which is also stored in the file and checked on loading; an unreadable
    cache file warns and is refitted.

    Parameters
    ----------
    views : list of array_like
        V arrays (N, D_k).
    times : array_like
        (N,) time stamps.
    config : McGPDSConfig
        Settings of the fit.
    seed : int, default 0
        Seed of the fit.
    cache_dir : str or path, optional
        Folder of the saved fits; ``None`` always fits.
    tag : str, default "mcgpds"
        Prefix of the file name ``<tag>_seed<seed>_<fingerprint[:16]>.pt``.
    seq_ends : array_like of int, optional
        Cumulative sequence end indices.
    sequence_ids : array_like, optional
        (N,) sequence labels.
    progress : bool, default True
        Show progress bars.

    Returns
    -------
    fitted : McGPDSFitted
        The trained model.
    seconds : float
        Training time; that of a loaded fit is the one measured when it was fitted.
    loaded : bool
        Whether the fit came from the cache.
    """
    path = key = None
    if cache_dir is not None:
        key = fit_fingerprint(views, times, seq_ends, sequence_ids, config, seed)
        path = Path(cache_dir) / f"{tag}_seed{seed}_{key[:16]}.pt"
        if path.exists():
            try:
                f = load_fitted(path)
            except PersistenceError as err:
                warnings.warn(f"cached_fit: ignoring the unreadable cache file ({err}); refitting", RuntimeWarning)
            else:
                if f.meta.get("fingerprint") == key:
                    return f, f.wall_time, True
    t0 = _time.perf_counter()
    f = fit_mcgpds(views, times, seq_ends=seq_ends, sequence_ids=sequence_ids, config=config, seed=seed,
                   progress=progress)
    wall = _time.perf_counter() - t0
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        f.wall_time = wall
        f.meta["fingerprint"] = key
        save_fitted(f, path)
    return f, wall, False


def fit_cgpds(view, times, seq_ends=None, sequence_ids=None, config: McGPDSConfig | None = None,
              seed: int = 0, progress: bool = True, checkpoint=None) -> McGPDSFitted:
    """Single-view CGPDS (V = 1: one private latent coupled to the shared dynamics).

    Parameters
    ----------
    view : array_like
        (N, D) the single view.
    times : array_like
        (N,) time stamps.
    seq_ends : array_like of int, optional
        Cumulative sequence end indices.
    sequence_ids : array_like, optional
        (N,) sequence labels.
    config : McGPDSConfig, optional
        Settings (default ``McGPDSConfig()``).
    seed : int, default 0
        Seed of the fit.
    progress : bool, default True
        Show progress bars.
    checkpoint : str or path, optional
        Prefix of per-phase checkpoint files.

    Returns
    -------
    McGPDSFitted
        :func:`fit_mcgpds` of ``[view]``.
    """
    return fit_mcgpds([view], times, seq_ends, sequence_ids, config, seed, progress, checkpoint)


def fitted_to_dict(fitted: McGPDSFitted) -> dict:
    """A trained model as a dict of plain tensors/values; inverse :func:`fitted_from_dict`.

    No project classes, so a saved fit survives refactors of the bound code.

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.

    Returns
    -------
    dict
        ``{"format": 1, "config": ..., "views": ..., "params": ..., ...}``.
    """
    d = fitted.data
    return {"format": 1, "config": fitted.config.to_dict(),
            "views": [Y.detach() for Y in d.views], "times": d.times, "seq_ids": d.seq_ids,
            "Q": d.Q, "M": d.M, "J": d.J, "mapping_kernel": d.mapping_kernel, "time_white": d.time_white,
            "time_bias": d.time_bias, "private_prior": d.private_prior, "fixed": sorted(d.fixed),
            "time_kernel": time_kernel_spec(d.time_kernel),
            "init": {k: v.detach() if torch.is_tensor(v) else v for k, v in d.init.items()},
            "params": {k: v.detach() if torch.is_tensor(v) else v for k, v in fitted.params.items()},
            "mu_s": fitted.mu_s, "s_s": fitted.s_s, "mu": fitted.mu, "s_diag": fitted.s_diag,
            "losses": np.asarray(fitted.losses), "wall_time": fitted.wall_time, "bound": fitted.bound,
            "meta": dict(fitted.meta)}


def fitted_from_dict(z: dict) -> McGPDSFitted:
    """Inverse of :func:`fitted_to_dict`.

    Parameters
    ----------
    z : dict
        A dict written by :func:`fitted_to_dict`.

    Returns
    -------
    McGPDSFitted
        The trained model (``config.init_views`` is None: it is only used for the initialisation).
    """
    cfg_d = dict(z["config"])
    cfg_d["init_views"] = None                 # only used for the initialisation
    for k in ("fixed", "init_dims"):
        if isinstance(cfg_d.get(k), list):
            cfg_d[k] = tuple(cfg_d[k])
    cfg_d["time_kernel"] = time_kernel_from_spec(cfg_d.get("time_kernel"))
    data = McGPDSData(z["views"], z["times"], z["seq_ids"], z["Q"], z["M"], z["J"], z["mapping_kernel"],
                      z["time_white"], z["time_bias"], z["private_prior"], frozenset(z["fixed"]), z["init"],
                      time_kernel=time_kernel_from_spec(z.get("time_kernel")))
    return McGPDSFitted(McGPDSConfig(**cfg_d), data, z["params"], z["mu_s"], z["s_s"], z["mu"], z["s_diag"],
                        np.asarray(z["losses"]), float(z["wall_time"]), float(z["bound"]), dict(z.get("meta", {})))


def save_fitted(fitted: McGPDSFitted, path) -> None:
    """Write a trained model to ``path``, atomically.

    The file holds :func:`fitted_to_dict` in tandem's safe format
    (:func:`tandem.inference.persistence.dump`).

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.
    path : str or path
        The file written.
    """
    dump(fitted_to_dict(fitted), path, "McGPDSFitted")


def load_fitted(path) -> McGPDSFitted:
    """Read a model written by :func:`save_fitted` (safe reader: nothing is unpickled).

    Parameters
    ----------
    path : str or path
        The file read.

    Returns
    -------
    McGPDSFitted
        The trained model.

    Raises
    ------
    ValueError
        A damaged or foreign file, naming it.
    """
    return fitted_from_dict(load(path, "McGPDSFitted"))


# ------------------------------------------------------------------ prediction
def _test_loss(Ystar, tstar, blocks, time_s, vhp, kind, fixll, init_mu, init_lam, train):
    """−(bound of the test latents): −KL of the test block, plus (``fixll`` False) the collapsed
    bound of the source view on train ∪ test, ``train = (Y, μ, diag S)`` of the training frames
    held fixed (the test frames appended, spec §"Prediction" step 1).

    Several source views (``Ystar``, ``vhp``, ``train`` lists, ``init_mu``/``init_lam``
    (S, N*, Q)): the KL is the joint one of the shared latent and every source's private
    latent (one ``latent_terms`` call over the source views), and each source adds its bound.
    """
    multi = isinstance(vhp, (list, tuple))
    mu = pyro.param("test_mu", lambda: init_mu.clone())
    lam = pyro.param("test_lam", lambda: init_lam.clone(), constraint=torch.distributions.constraints.positive)
    vhps = list(vhp) if multi else [vhp]
    mus = list(mu.unbind(0)) if multi else [mu]
    lams = list(lam.unbind(0)) if multi else [lam]
    Ys = list(Ystar) if multi else [Ystar]
    trains = list(train) if multi else [train]
    try:
        lt = latent_terms(tstar, blocks, time_s, vhps, mus, lams)
        F = -lt["kl"]
        if not fixll:
            for i, (Yi, (Ytr, mu_tr, s_tr)) in enumerate(zip(Ys, trains)):
                F = F + view_bound(torch.cat([Ytr, Yi]), torch.cat([mu_tr, mus[i]]),
                                   torch.cat([s_tr, lt["s_diag"][i]]), vhps[i], kind)
    except NotPositiveDefiniteError:   # extreme line-search trial point: see collapsed_loss
        return torch.zeros((), dtype=DTYPE, device=Ys[0].device, requires_grad=True) + 1e30
    return -F


def _sources(source, Y_source_test, V: int, target: int):
    """``(list of source view indices, list of test arrays, several?)`` of a ``source`` argument
    (an int or a sequence of distinct ints) and its test data (one array, or one per source)."""
    multi = isinstance(source, (list, tuple, np.ndarray, torch.Tensor)) and not (
        isinstance(source, torch.Tensor) and source.ndim == 0)
    if not multi:
        src = [source]
        Ylist = [Y_source_test]
    else:
        src = [int(k) for k in (source.tolist() if hasattr(source, "tolist") else source)]
        if not src:
            raise ValueError("source: expected at least one source view")
        if len(set(src)) != len(src):
            raise ValueError(f"source: expected distinct view indices, got {src}")
        if not isinstance(Y_source_test, (list, tuple)) or len(Y_source_test) != len(src):
            raise ValueError(f"Y_source_test: with several sources {src} expected a list of {len(src)} arrays "
                             "(one per source, in the same order)")
        Ylist = list(Y_source_test)
    for k in src:
        if isinstance(k, bool) or not (0 <= int(k) < V):
            raise ValueError(f"source: expected a view index in [0, {V}), got {k}")
        if int(k) == int(target):
            raise ValueError(f"source: the target view {target} cannot also be a source")
    return [int(k) for k in src], Ylist, multi


def predict_view(fitted: McGPDSFitted, Y_source_test, t_test, source: int = 0, target: int = 1,
                 method: str = "paper", test_iters: int | None = None, fixll: bool | None = None,
                 nn_index_y=None, beta_target_override: float | None = None,
                 latent_for_prediction: str = "shared_nn", seed: int = 0,
                 progress: bool = False, shared_reference: str = "joint",
                 init_from: str | None = None, output_components: str = "all",
                 k_neighbours: int = 1, candidates=None, extra_var=None) -> Prediction:
    """Generate view ``target`` for test frames of view ``source`` (see module docstring).

    Several source views: ``source`` a list of view indices (not ``target``) and
    ``Y_source_test`` a list of (N*, D_k) arrays in the same order. The Y-space NN search runs
    on the sources' columns side by side, the test latents of every source are fitted together
    (their KL is the joint one: they share the test block's shared latent, whose posterior
    ``μ*^(s)`` combines them; with ``fixll`` False each source adds its bound), and the shared
    / private NN and generative steps use the combined latents. ``Prediction.test_mu`` /
    ``test_s`` are then those of the first source.

    ``shared_reference``: the training shared means the test shared means are matched
    against — "joint" (μ^(s) from all views, the paper/protocol) or "source_only" (μ^(s)
    recomputed from the source view alone, the same formula the test block uses; with two
    views the joint means are ≈ 1.3–2.3× larger on human pose, which biases the NN step).
    ``init_from``: initial test private means — "shared" (training μ^(s) at the Y-space NN,
    protocol §1.8 step 2; the default) or "private" (training μ^(source) at the Y-space NN, the
    space the test latents live in — the shared means are ≈ 1/(1−α) times larger).
    ``output_components``: "all" (h + Σ_j w_j g_j, the paper) or "h" (h alone — with W learned
    the paper's bound makes h and every w_j g_j separate fits of y, so their sum is ≈ 2× y).

    Tandem extensions (not in the paper or the authors' code; defaults reproduce them):

    * ``k_neighbours`` = k > 1 (NN predictors): the target view is predicted at the target
      latents of the k nearest training frames (shared-space NN; with ``"y_nn"`` the columns of
      a (N*, k) ``nn_index_y``) and the k Gaussian predictives are merged into one Gaussian by
      moment matching: mean = average of the means, var = average of (var + mean²) − mean².
    * ``candidates``: (K,) training-frame indices the NN searches may return (default all;
      used by :func:`holdout_predictions` to hold sequences out).
    * ``extra_var``: scalar or (D_t,) variance added to the predictive variance (model units),
      e.g. the held-out calibration of :func:`calibrated_extra_var`.

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.
    Y_source_test : array_like or list of array_like
        (N*, D_source) test frames of the source view (NaN entries missing), or one array per
        source when ``source`` is a list.
    t_test : array_like
        (N*,) test time stamps (the test block's own time axis).
    source : int or list of int, default 0
        Source view index, or several (not ``target``).
    target : int, default 1
        Target view index.
    method : str, default "paper"
        ``"paper"``, ``"code"`` or ``"generative"`` (module docstring).
    test_iters : int, optional
        L-BFGS iterations of the test latents (default 10 for ``"code"``, else 100).
    fixll : bool, optional
        Test objective −KL only (default True for ``"code"``, else False: the source bound on
        train ∪ test is kept).
    nn_index_y : array_like of int, optional
        (N*,) or (N*, k) Y-space NN indices (default: computed on the source columns).
    beta_target_override : float, optional
        Noise precision of the target view used for prediction (the authors' β override).
    latent_for_prediction : str, default "shared_nn"
        Where the target view is predicted: ``"shared_nn"``, ``"y_nn"`` (CUAVE's "option 2") or
        ``"private_nn"``.
    seed : int, default 0
        Seed of the test-latent optimisation.
    progress : bool, default False
        Show a progress bar.
    shared_reference : str, default "joint"
        ``"joint"`` or ``"source_only"`` (above).
    init_from : str, optional
        ``"shared"`` (the default) or ``"private"`` (above).
    output_components : str, default "all"
        ``"all"`` or ``"h"`` (above).
    k_neighbours : int, default 1
        k of the NN predictors (above).
    candidates : array_like of int, optional
        (K,) training-frame indices the NN searches may return.
    extra_var : float or array_like, optional
        Scalar or (D_t,) variance added to the predictive variance.

    Returns
    -------
    Prediction
        Predictive mean and variance (N*, D_t) in model units, with the test latents and NN indices.

    Raises
    ------
    ValueError
        For an unknown option, a bad view index, test data of the wrong shape or with an infinite
        entry or an all-missing frame, or bad ``candidates`` / ``nn_index_y`` / ``k_neighbours``.
    """
    t0 = _time.perf_counter()
    data = fitted.data
    V = data.V
    if method not in ("paper", "code", "generative"):
        raise ValueError(f"method: expected 'paper', 'code' or 'generative', got {method!r}")
    if output_components not in ("all", "h"):
        raise ValueError(f"output_components: expected 'all' or 'h', got {output_components!r}")
    if shared_reference not in ("joint", "source_only"):
        raise ValueError(f"shared_reference: expected 'joint' or 'source_only', got {shared_reference!r}")
    if latent_for_prediction not in ("shared_nn", "y_nn", "private_nn"):
        raise ValueError("latent_for_prediction: expected 'shared_nn', 'y_nn' or 'private_nn', "
                         f"got {latent_for_prediction!r}")
    if not (0 <= int(target) < V):
        raise ValueError(f"target: expected a view index in [0, {V}), got {target}")
    srcs, Ylist, multi = _sources(source, Y_source_test, V, target)
    dev = data.device
    Yl = []
    for i, (k, Yk) in enumerate(zip(srcs, Ylist)):
        nm = f"Y_source_test[{i}]" if multi else "Y_source_test"
        Yk = as_tensor(Yk, nm, ndim=2, finite=False).to(dev)          # NaN: missing entries
        if Yk.shape[1] != data.out_dims[k]:
            raise ValueError(f"{nm}: expected {data.out_dims[k]} columns (view {k}), got {Yk.shape[1]}")
        if Yk.shape[0] == 0:
            raise ValueError(f"{nm}: expected at least one test frame (row), got shape {tuple(Yk.shape)}")
        if Yl and Yk.shape[0] != Yl[0].shape[0]:
            raise ValueError(f"{nm}: expected {Yl[0].shape[0]} rows like the first source, got {Yk.shape[0]}")
        Yl.append(Yk)
    Ys = torch.cat(Yl, 1)                       # Y-space NN features: the sources side by side
    _check_test_missing(Ys, "Y_source_test")
    ts = as_tensor(t_test, "t_test", ndim=1, detach=True).to(dev)
    check_time_order(ts, None, times_name="t_test")
    Ns = Ys.shape[0]
    if ts.numel() != Ns:
        raise ValueError(f"t_test: expected {Ns} time stamps (one per test frame), got {ts.numel()}")
    if fixll is None:
        fixll = method == "code"
    if test_iters is None:
        test_iters = 10 if method == "code" else 100
    hp = constant_hyperparams(fitted)
    kind = getattr(data, "mapping_kernel_obj", data.mapping_kernel)
    k_nb = int(k_neighbours)
    if k_nb < 1:
        raise ValueError(f"k_neighbours: expected an integer >= 1, got {k_neighbours}")
    if candidates is None:
        cand = torch.arange(data.N, device=dev)
    else:
        cand = _index(candidates, dev).reshape(-1)
        if cand.numel() < k_nb or int(cand.min()) < 0 or int(cand.max()) >= data.N:
            raise ValueError(f"candidates: expected at least k_neighbours={k_nb} training indices in [0, {data.N})")
    Ytr_src = torch.cat([data.views[k] for k in srcs], 1)
    if nn_index_y is None:
        nn_y_all = cand[knn(Ys, Ytr_src[cand], k_nb)]
    else:
        nn_y_all = _index(nn_index_y, dev)
        if nn_y_all.ndim == 1:
            nn_y_all = nn_y_all[:, None]
        if nn_y_all.ndim != 2 or nn_y_all.shape[0] != Ns:
            raise ValueError(f"nn_index_y: expected {Ns} indices (or a ({Ns}, k) array), got shape "
                             f"{tuple(nn_y_all.shape)}")
    nn_y = nn_y_all[:, 0]
    # --- 1. test latents of the source view (test block = its own time block)
    blocks = Blocks(torch.zeros(Ns, dtype=torch.long, device=dev))
    vhps = [hp["views"][k] for k in srcs]
    if init_from is None:
        init_from = "shared"
    if init_from not in ("shared", "private"):
        raise ValueError(f"init_from: expected 'shared' or 'private', got {init_from!r}")
    inits = [(fitted.mu_s if init_from == "shared" else fitted.mu[k])[nn_y].clone() for k in srcs]
    trains = [(data.views[k], fitted.mu[k].detach(), fitted.s_diag[k].detach()) for k in srcs]
    if multi:
        init_mu = torch.stack(inits)
        args = (Yl, ts, blocks, hp["time_s"], vhps, kind, bool(fixll), init_mu, torch.full_like(init_mu, 0.2),
                trains)
    else:
        init_mu = inits[0]
        args = (Yl[0], ts, blocks, hp["time_s"], vhps[0], kind, bool(fixll), init_mu, torch.full_like(init_mu, 0.2),
                trains[0])
    init_lam = args[8]
    res = minimize(_test_loss, *args, optim=LBFGS(max_iter=max(int(test_iters), 1)),
                   num_steps=1 if test_iters > 0 else 0, seed=seed, progress=progress,
                   desc=f"McGPDS test latents ({method})")
    mu_t = res.params.get("test_mu", init_mu)
    lam_t = res.params.get("test_lam", init_lam)
    mus_t = list(mu_t.unbind(0)) if multi else [mu_t]
    lams_t = list(lam_t.unbind(0)) if multi else [lam_t]
    with torch.no_grad():
        lt = latent_terms(ts, blocks, hp["time_s"], vhps, mus_t, lams_t, need_shared_var=True)
        mu_s_t, s_s_t, s_t = lt["mu_s"], lt["s_s"], lt["s_diag"][0]
        mu_t = mus_t[0]
        if shared_reference == "joint":
            ref = fitted.mu_s
        else:
            ref = latent_terms(data.times, data.blocks, hp["time_s"], vhps, [fitted.mu[k] for k in srcs],
                               [fitted.params[f"lam_{k}"] for k in srcs])["mu_s"]
        nn_s_all = cand[knn(mu_s_t, ref[cand], k_nb)]                  # (N*, k)
        nn_s = nn_s_all[:, 0]
        tv = hp["views"][target]
        post = view_posterior(data.views[target], fitted.mu[target], fitted.s_diag[target], tv, kind,
                              beta=beta_target_override)
        if method == "generative":
            a = tv["alpha"]
            th = tv["time"]
            if th is None:
                kdiag = torch.tensor(1.0, dtype=DTYPE, device=dev)
            else:                      # k(t, t) of the target's private time kernel (white included)
                tkern, tpar = time_params_kernel(th)
                kdiag = tkern.diag(ts[:1], tpar)[0]
            x_mean = (1 - a) * mu_s_t
            x_var = ((1 - a) ** 2 * s_s_t)[:, None] + (a * a * kdiag + (1 - a) ** 2 * tv["eps"])
            x_var = x_var.expand_as(x_mean).clone()
        else:
            if latent_for_prediction == "y_nn":
                idx = nn_y_all
                if idx.shape[1] < k_nb:
                    raise ValueError(f"k_neighbours={k_nb} with latent_for_prediction='y_nn' needs a "
                                     f"(N*, {k_nb}) nn_index_y, got {tuple(idx.shape)}")
                idx = idx[:, :k_nb]
            elif latent_for_prediction == "private_nn":
                mtr = torch.cat([fitted.mu[k] for k in srcs], 1)
                idx = cand[knn(torch.cat(mus_t, 1), mtr[cand], k_nb)]
            else:
                idx = nn_s_all
            x_mean = fitted.mu[target][idx]                                 # (N*, k, Q)
            x_var = fitted.s_diag[target][idx] if method == "paper" else torch.zeros_like(x_mean)
        if x_mean.ndim == 3 and x_mean.shape[1] == 1:
            x_mean, x_var = x_mean[:, 0], x_var[:, 0]
        if x_mean.ndim == 3:       # k-NN mixture, moment matched
            kq = x_mean.shape[1]
            m_k, v_k = predict_moments(post, x_mean.reshape(-1, x_mean.shape[-1]),
                                       x_var.reshape(-1, x_var.shape[-1]), components=output_components)
            m_k, v_k = m_k.reshape(Ns, kq, -1), v_k.reshape(Ns, kq, -1)
            mean = m_k.mean(1)
            var = (v_k + m_k * m_k).mean(1) - mean * mean
            x_mean, x_var = x_mean[:, 0], x_var[:, 0]
        else:
            mean, var = predict_moments(post, x_mean, x_var, components=output_components)
        if extra_var is not None:
            var = var + as_tensor(extra_var, "extra_var").to(var.device)
    return Prediction(mean.detach(), var.detach(), mu_s_t.detach(), nn_s, mu_t.detach(), s_t.detach(),
                      method, nn_y, x_mean.detach(), x_var.detach(), _time.perf_counter() - t0)


# ------------------------------------------------------------------ held-out calibration (tandem)
def _index(x, device) -> torch.Tensor:
    """Integer index array (numpy, list or tensor on any device) as a long tensor on ``device``."""
    if isinstance(x, torch.Tensor):
        return x.long().to(device)
    return torch.as_tensor(np.asarray(x), device=device).long()


def holdout_folds(fitted: McGPDSFitted, n_chunks: int = 5) -> list[torch.Tensor]:
    """Folds of training rows for held-out checks.

    One fold per sequence when there are several (human pose: 7), else ``n_chunks`` contiguous
    chunks of the single sequence (CUAVE).

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.
    n_chunks : int, default 5
        Chunks of a single training sequence (>= 2).

    Returns
    -------
    list of torch.Tensor
        Row indices of each fold.

    Raises
    ------
    ValueError
        ``n_chunks`` < 2 with a single sequence.
    """
    seq = fitted.data.seq_ids
    labels = list(dict.fromkeys(seq.tolist()))
    if len(labels) > 1:
        return [torch.nonzero(seq == u).reshape(-1) for u in labels]
    if n_chunks < 2:
        raise ValueError(f"n_chunks: expected >= 2 for a single training sequence, got {n_chunks}")
    return [c for c in torch.arange(fitted.data.N, device=seq.device).tensor_split(int(n_chunks)) if c.numel()]


def holdout_predictions(fitted: McGPDSFitted, source: int = 0, target: int = 1, folds=None,
                        nn_features=None, n_chunks: int = 5, **predict_kwargs):
    """Held-out predictions of the TRAINING target view (tandem calibration; no test data).

    For every fold (:func:`holdout_folds`) its source-view frames are treated as a test block
    (times shifted to start at 0) and predicted with ``predict_view(**predict_kwargs)``, every
    nearest-neighbour search (the Y-space NN on ``nn_features`` (N, F) — default the source
    view, or the source views side by side when ``source`` is a list — and the
    shared/private-space NN) restricted to the frames of the other folds. The
    trained model itself has seen every frame; only the NN look-ups are held out, which is where
    the predictor's error comes from.

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.
    source : int or list of int, default 0
        Source view index, or several.
    target : int, default 1
        Target view index.
    folds : list of array_like, optional
        Row indices of each fold (default :func:`holdout_folds`).
    nn_features : array_like, optional
        (N, F) features of the Y-space NN search (default the source view(s)).
    n_chunks : int, default 5
        Chunks of a single training sequence for the default folds.
    **predict_kwargs
        Keywords of :func:`predict_view` (``nn_index_y`` and ``candidates`` are set per fold).

    Returns
    -------
    mean : torch.Tensor
        (N, D_target) held-out predictive means, model units, in training-row order.
    var : torch.Tensor
        (N, D_target) their predictive variances.

    Raises
    ------
    ValueError
        ``nn_features`` without one row per training frame.
    """
    data = fitted.data
    folds = holdout_folds(fitted, n_chunks) if folds is None else [_index(f, data.device) for f in folds]
    multi = isinstance(source, (list, tuple))        # several sources: their columns side by side
    srcs = [int(k) for k in source] if multi else [int(source)]
    Ysrcs = [data.views[k] for k in srcs]
    Ysrc = torch.cat(Ysrcs, 1)
    feats = Ysrc if nn_features is None else as_tensor(nn_features, "nn_features", ndim=2,
                                                       finite=False).to(data.device)
    if feats.shape[0] != data.N:
        raise ValueError(f"nn_features: expected {data.N} rows (training frames), got {feats.shape[0]}")
    k = int(predict_kwargs.get("k_neighbours", 1))
    kq = k if predict_kwargs.get("latent_for_prediction") == "y_nn" else 1
    D = data.out_dims[target]
    mean = torch.zeros(data.N, D, dtype=DTYPE, device=data.device)
    var = torch.zeros(data.N, D, dtype=DTYPE, device=data.device)
    for held in folds:
        keep = torch.ones(data.N, dtype=torch.bool, device=data.device)
        keep[held] = False
        cand = torch.nonzero(keep).reshape(-1)
        pk = dict(predict_kwargs)
        pk["nn_index_y"] = cand[knn(feats[held], feats[cand], kq)]
        pk["candidates"] = cand
        th = data.times[held]
        Yh = [Y[held] for Y in Ysrcs] if multi else Ysrcs[0][held]
        pred = predict_view(fitted, Yh, th - th[0], srcs if multi else srcs[0], target, **pk)
        mean[held], var[held] = pred.mean, pred.var
    return mean, var


def calibrated_extra_var(mean, var, Y) -> torch.Tensor:
    """Per-output variance to add so that held-out predictive variances match held-out squared errors.

    ``δ_d = max(0, mean_n (y_nd − m_nd)² − mean_n v_nd)``, on average over the frames; NaN
    (missing) entries of ``Y`` are skipped.

    Parameters
    ----------
    mean : array_like
        (N, D) held-out predictive means.
    var : array_like
        (N, D) held-out predictive variances.
    Y : array_like
        (N, D) the held-out truth, model units.

    Returns
    -------
    torch.Tensor
        (D,) δ, model units.
    """
    m, v = (as_tensor(a, nm, ndim=2) for a, nm in ((mean, "mean"), (var, "var")))
    y = as_tensor(Y, "Y", ndim=2, finite=False)                 # NaN entries (missing) are skipped
    return ((y - m) ** 2 - v).nanmean(0).nan_to_num(0.0).clamp_min(0.0)   # NaN in y: missing, skipped


def view_sites(scalers) -> dict:
    """The views' observed sites with their standardisation, for :func:`tandem.inference.predictive.rescale_sites`.

    Parameters
    ----------
    scalers : list of tandem.inference.distances.Standardizer
        One fitted :class:`~tandem.inference.distances.Standardizer` per view.

    Returns
    -------
    dict
        ``{"y_k": ("output_k", scale, mean)}``.
    """
    return {f"y_{k}": (f"output_{k}", st.scale.detach().cpu().numpy(), st.mean.detach().cpu().numpy())
            for k, st in enumerate(scalers)}
