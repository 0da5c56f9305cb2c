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
model-only], then ``joint_iters`` joint) is rendered with L-BFGS iterations. For long archives
``held_cycles`` × [``held_iters`` with the precisions λ held, ``held_joint_iters`` learning λ
too] run before the joint phase: with λ held the private covariances are reused, so those
evaluations cost a fraction of a full one.

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

import math
import time as _time
import warnings
from pathlib import Path

import numpy as np
import pyro
import torch

from tandem.guides.mcgpds import mcgpds_guide, variational_params
from tandem.inference.atomic_files import write_text_atomic
from tandem.inference.checkpoints import content_hash
from tandem.inference.mcgpds.bound import (
    collapsed_bound,
    collapsed_loss,
    latent_terms,
)

# the config (.fit_config), the fitted container (.fitted) and the prediction (.view_prediction) live in their
# own modules; the "noqa: F401" imports keep their names importable from here
from tandem.inference.mcgpds.fit_config import (  # noqa: F401
    FIT_GROUPS,
    McGPDSConfig,
    time_kernel_from_spec,
    time_kernel_spec,
)
from tandem.inference.mcgpds.fitted import (  # noqa: F401
    McGPDSFitted,
    Prediction,
    constant_hyperparams,
    fitted_from_dict,
    fitted_to_dict,
    load_fitted,
    save_fitted,
)
from tandem.inference.mcgpds.missing import check_missing_views, has_missing, mean_fill, nan_var, observed_mask
from tandem.inference.mcgpds.preconditioner import PriorPreconditioner
from tandem.inference.mcgpds.uncollapsed import set_optimal_inducing
from tandem.inference.mcgpds.view_prediction import (  # noqa: F401
    _index,
    _sources,
    _test_loss,
    calibrated_extra_var,
    check_test_sources,
    holdout_folds,
    holdout_predictions,
    predict_view,
)
from tandem.inference.numerics import seeded_generator
from tandem.inference.persistence import PersistenceError
from tandem.inference.svi import LBFGS, fit
from tandem.inference.validation import as_tensor, check_real_range, check_seed, resolve_device, sequence_labels
from tandem.models.kernels import MappingKernel, mapping_kernel_kind
from tandem.models.mcgpds import McGPDSData, default_init, hyperparams, mcgpds_model, pca_init

__all__ = ["McGPDSConfig", "McGPDSFitted", "Prediction", "fit_mcgpds", "fit_cgpds", "predict_view",
           "constant_hyperparams", "pca_init", "save_fitted", "load_fitted", "holdout_folds", "holdout_predictions",
           "calibrated_extra_var", "fit_fingerprint", "cached_fit", "INDUCING_STORE_LIMIT", "store_optimal_inducing",
           "fitted_to_dict", "fitted_from_dict", "view_sites"]


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


def _check_init_views(init_views, N: int, dev) -> list:
    """``init_views``: a non-empty list of finite 2-d arrays with one row per frame (they are put
    side by side for the PCA initialisation of the N frames' latents)."""
    if not isinstance(init_views, (list, tuple)) or not init_views:
        raise ValueError(f"init_views: expected a non-empty list of (N, D) arrays, got {type(init_views).__name__}")
    out = [as_tensor(Y, f"init_views[{k}]", ndim=2).to(dev) for k, Y in enumerate(init_views)]
    for k, Y in enumerate(out):
        if Y.shape[0] != N:
            raise ValueError(f"init_views[{k}]: expected {N} rows (one per frame of the views), got {Y.shape[0]}")
    return out


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
    if not isinstance(cfg.beta_init, str):
        for b in (cfg.beta_init if isinstance(cfg.beta_init, (list, tuple, np.ndarray)) else [cfg.beta_init]):
            check_real_range(b, "beta_init (noise precision)", 0.0, low_open=True)


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
    bad = set(cfg.fixed) - set(FIT_GROUPS)
    if bad:
        raise ValueError(f"fixed: unknown groups {sorted(bad)}; allowed {', '.join(FIT_GROUPS)}")
    init_views = vs if cfg.init_views is None else _check_init_views(cfg.init_views, N, dev)
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
    if isinstance(cfg.beta_init, str) and cfg.beta_init == "snr":
        beta = [100.0 / nan_var(Y) for Y in vs]
    elif isinstance(cfg.beta_init, (list, tuple, np.ndarray)):     # one per view (a numpy array too)
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
    gen = seeded_generator(seed)
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
    for c in range(cfg.held_cycles):
        phases.append((f"λ held {c + 1}/{cfg.held_cycles}", cfg.held_iters, ("lam",)))
        phases.append((f"λ learned {c + 1}/{cfg.held_cycles}", cfg.held_joint_iters, ()))
    phases.append(("joint", cfg.joint_iters, ()))
    if checkpoint is not None:
        _check_checkpoint(checkpoint, fit_fingerprint(vs, t, seq_ends, sequence_ids, cfg, seed))
    losses = []
    t0 = _time.perf_counter()
    first = True
    pre = PriorPreconditioner(data) if cfg.precondition else None     # one object: phases share its factors
    for i, (name, iters, frozen) in enumerate(phases):
        if iters <= 0:
            continue
        mi = min(cfg.lbfgs_max_iter, iters)
        ck = None if checkpoint is None else f"{checkpoint}.phase{i}"
        res = fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, optim=LBFGS(max_iter=mi, preconditioner=pre),
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
        :func:`tandem.inference.mcgpds.uncollapsed.set_optimal_inducing` yourself if you need the draws.
    """
    limit = INDUCING_STORE_LIMIT if limit is None else limit
    size = sum((1 + data.J) * D * data.M ** 2 for D in data.out_dims)
    if size > limit:
        warnings.warn(f"McGPDS: the optimal q(U), q(V) of this fit have {size:.3g} covariance entries (> "
                      f"{limit:.3g}), so they were not written into Pyro's parameter store; call "
                      "tandem.inference.mcgpds.uncollapsed.set_optimal_inducing(data) before drawing posterior-"
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
    return content_hash("fit_mcgpds/1", list(views), times, seq_ends, sequence_ids, config, check_seed(seed), length=64)


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
    write_text_atomic(meta, key + "\n")      # creates the folder; never half a record


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
