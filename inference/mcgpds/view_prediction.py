"""McGPDS view-to-view prediction (:func:`predict_view`) and the held-out calibration helpers.

The prediction methods ("paper", "code", "generative") and the tandem extensions
(k-NN moment-matched mixtures, held-out calibrated variances) are described in
:mod:`tandem.inference.mcgpds.fit`, which re-exports every name of this module.
"""
from __future__ import annotations

import time as _time
from numbers import Integral, Real

import numpy as np
import pyro
import torch

from tandem.inference.distances import knn
from tandem.inference.mcgpds.bound import (
    Blocks,
    latent_terms,
    predict_moments,
    view_bound,
    view_posterior,
)
from tandem.inference.mcgpds.fitted import McGPDSFitted, Prediction, constant_hyperparams
from tandem.inference.numerics import DTYPE, NotPositiveDefiniteError
from tandem.inference.params import AnyValue, Boolean, Interval, Options, Seed, validate_params
from tandem.inference.svi import LBFGS, minimize
from tandem.inference.validation import as_index_array, as_tensor, check_int_range, check_time_order
from tandem.models.kernels import time_params_kernel

__all__ = ["predict_view", "holdout_folds", "holdout_predictions", "calibrated_extra_var", "check_test_sources",
           "PREDICT_VIEW_CONSTRAINTS"]

#: declared constraints of :func:`predict_view`'s options, checked at its entry: every predictor
#: (``McGPDS.predict(method=...)``, the candidates of the tandem predictors) reaches them through it.
#: The index and variance arrays are checked against the data by :func:`_check_arrays`.
PREDICT_VIEW_CONSTRAINTS = {
    "method": [Options(("paper", "code", "generative"))],
    "test_iters": [None, Interval(Integral, 0)],
    "fixll": [None, Boolean()],
    "nn_index_y": [None, AnyValue("an integer array of training-frame indices, checked against the data")],
    "beta_target_override": [None, Interval(Real, 0, closed="neither")],
    "latent_for_prediction": [Options(("shared_nn", "y_nn", "private_nn"))],
    "seed": [Seed()], "progress": [Boolean()],
    "shared_reference": [Options(("joint", "source_only"))],
    "init_from": [None, Options(("shared", "private"))],
    "output_components": [Options(("all", "h"))],
    "k_neighbours": [Interval(Integral, 1)],
    "candidates": [None, AnyValue("an integer array of training-frame indices, checked against the data")],
    "extra_var": [None, AnyValue("a finite non-negative scalar or (D_target,) array, checked against the data")],
}


def _check_arrays(fitted: McGPDSFitted, target: int, nn_index_y, candidates, extra_var):
    """``nn_index_y`` and ``candidates``: integer indices of training frames (the one index
    validator, in [0, N)); ``extra_var``: finite, ≥ 0, a scalar or one value per target column."""
    N = fitted.data.N
    for name, x in (("nn_index_y", nn_index_y), ("candidates", candidates)):
        if x is None:
            continue
        a = as_index_array(x, name)
        if a.size and (int(a.min()) < 0 or int(a.max()) >= N):
            raise ValueError(f"{name}: expected training-frame indices in [0, {N}), got values in "
                             f"[{int(a.min())}, {int(a.max())}]")
    if extra_var is not None:
        D = fitted.data.out_dims[target]
        ev = as_tensor(extra_var, "extra_var", detach=True)          # finite
        if ev.dim() > 1 or (ev.dim() == 1 and ev.numel() != D):
            raise ValueError(f"extra_var: expected a scalar or {D} values (one per column of view {target}), "
                             f"got shape {tuple(ev.shape)}")
        if bool((ev < 0).any()):
            raise ValueError(f"extra_var: expected variances >= 0, got min {float(ev.min()):g}")


def check_test_sources(sources, names) -> None:
    """Refuse test frames of the source view(s) that the test-time latent step cannot use.

    NaN entries are missing (masked in the test-time latent step and the nearest-neighbour
    searches). An infinite entry of a source is a ``ValueError`` naming that source; so is a
    frame with no observed entry in any source (a frame missing from one source but observed
    in another is valid: its shared latent is informed by the other source).

    Parameters
    ----------
    sources : list of torch.Tensor
        The S source views' test frames, (N*, D_k) each with the same N*.
    names : list of str
        The S argument names used in the error messages (e.g. ``"Y_source_test[0]"``).

    Raises
    ------
    ValueError
        An infinite entry (naming its source), or frames with every entry missing in every source.
    """
    for Y, name in zip(sources, names):
        if bool(torch.isinf(Y).any()):
            raise ValueError(f"{name}: expected finite values or NaN (missing), got an infinite entry")
    empty = torch.stack([torch.isnan(Y).all(1) for Y in sources]).all(0)
    if bool(empty.any()):
        frames = torch.nonzero(empty).reshape(-1)[:10].tolist()
        if len(names) == 1:
            raise ValueError(f"{names[0]}: test frames {frames} have every entry missing (NaN); a test frame "
                             "needs at least one observed entry of the source view")
        raise ValueError(f"{', '.join(names)}: test frames {frames} have every entry missing (NaN) in every "
                         "source; a test frame needs at least one observed entry in one of the source views")


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
    validate_params(PREDICT_VIEW_CONSTRAINTS, dict(
        method=method, test_iters=test_iters, fixll=fixll, nn_index_y=nn_index_y,
        beta_target_override=beta_target_override, latent_for_prediction=latent_for_prediction, seed=seed,
        progress=progress, shared_reference=shared_reference, init_from=init_from,
        output_components=output_components, k_neighbours=k_neighbours, candidates=candidates,
        extra_var=extra_var), "predict_view: ")
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
    check_test_sources(Yl, [f"Y_source_test[{i}]" if multi else "Y_source_test" for i in range(len(Yl))])
    Ys = torch.cat(Yl, 1)                       # Y-space NN features: the sources side by side
    ts = as_tensor(t_test, "t_test", ndim=1, detach=True).to(dev)
    check_time_order(ts, None, times_name="t_test")
    Ns = Ys.shape[0]
    if ts.numel() != Ns:
        raise ValueError(f"t_test: expected {Ns} time stamps (one per test frame), got {ts.numel()}")
    _check_arrays(fitted, int(target), nn_index_y, candidates, extra_var)
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
    check_int_range(n_chunks, "n_chunks", 1)        # (used with a single training sequence only)
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
