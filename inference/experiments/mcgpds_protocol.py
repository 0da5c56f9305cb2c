"""The McGPDS real-data protocol harness shared by the example scripts.

``examples/mcgpds_human_pose.py``, ``examples/mcgpds_cuave.py`` and
``examples/bench_mcgpds.py`` are thin scripts over this module: the protocol's configuration
(:func:`protocol_config`, the authors' settings for human pose and CUAVE), the fits of every
seed and variant with an optional content-keyed fit cache, the McGPDS predictors (paper-,
code-faithful, generative, and the tandem predictors of
:mod:`tandem.inference.mcgpds.predictor` with held-out calibrated variances), the baselines
(the rows of the library's default estimator and of GPy MRD come from
:mod:`tandem.inference.experiments.mcgpds_rows`), the scoring in the data's original units
(:func:`score`), the results table and the trajectory plots. ``data`` is a loader's result
(:mod:`tandem.inference.datasets.human_pose` or :mod:`tandem.inference.datasets.cuave`):
``views``/``m1``/``m1_test`` scaled, ``Y1``, ``Y2``, ``Y1_test``, ``Y2_test`` in original units,
``unscale_mean``/``unscale_var``.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from tandem.inference import metrics as M
from tandem.inference.atomic_files import save_figure
from tandem.inference.experiments.cli import seed_list, set_seed
from tandem.inference.experiments.mcgpds_rows import (  # noqa: F401  (re-exported)
    DEFAULT_ROW,
    SELECTED_ROW,
    STACKED_ROW,
    _np,
    default_estimator_prediction,
    mrd_fit_job,
    mrd_row,
    sequence_ids_of,
)
from tandem.inference.experiments.results import Results
from tandem.inference.mcgpds.baselines import gpy_available, nn_y_space, training_mean_predictor
from tandem.inference.mcgpds.fit import McGPDSConfig, cached_fit, predict_view
from tandem.inference.mcgpds.predictor import calibrated_prediction, nn_features
from tandem.inference.validation import check_seed

__all__ = ["protocol_config", "tandem_config", "OVERRIDES", "overrides", "score", "fit_for", "protocol_features",
           "calibrated_predictor", "run_two_view", "print_table", "plot_traces", "PLOT_METHODS",
           "add_common_options", "run_and_report", "TANDEM_POSE"]


def protocol_config(dataset: str, quick: bool, seed: int, data=None, **over):
    """McGPDSConfig of the authors' protocol (§1.6–1.7 pose, §2.4–2.5 CUAVE).

    Pose: 5 cycles, 1000 joint iterations, PCA init, β from the signal-to-noise ratio. CUAVE:
    β = 1 + 0.1·U(0,1) per view, 'separately' PPCA init (7 + 3) on centred data.

    Parameters
    ----------
    dataset : str
        "pose" for human pose; anything else is CUAVE.
    quick : bool
        CI smoke size: tiny latent space and a handful of L-BFGS iterations.
    seed : int
        Seed of CUAVE's random β initialisation.
    data : tandem.inference.datasets.human_pose.TwoViewData, optional
        The loaded data; for CUAVE its centred training views are the PPCA init's input.
    **over
        Config fields overriding the protocol (``None`` values are ignored).

    Returns
    -------
    tandem.inference.mcgpds.fit.McGPDSConfig
        The protocol's configuration.
    """
    kw = dict(Q=10, M=100, J=1, fixed=("alpha", "eps", "beta", "time"), var_iters=50, model_iters=50,
              alpha_init=0.5, eps_init=1e-3, w_init_scale=1e-6, lam_init=0.5)
    if dataset == "pose":
        kw.update(cycles=5, joint_iters=1000, init="pca", beta_init="snr")
    else:  # CUAVE: β = 1 + 0.1·U(0,1) per view, 'separately' PPCA init (7 + 3) on centred data
        rng = np.random.default_rng(10_000 + check_seed(seed))
        kw.update(cycles=1, joint_iters=100, init="separately", init_dims=(7, 3),
                  beta_init=[float(1 + 0.1 * u) for u in rng.uniform(size=2)])
        if data is not None:
            kw["init_views"] = [data.Y1 - data.bias1, data.Y2 - data.bias2]
    if quick:   # CI smoke size: tiny latent space and a handful of L-BFGS iterations
        kw.update(Q=3, M=10, cycles=1, var_iters=2, model_iters=2, joint_iters=4, lbfgs_max_iter=4)
        if dataset != "pose":
            kw.update(init_dims=(2, 1))
    kw.update({k: v for k, v in over.items() if v is not None})
    return McGPDSConfig(**kw)


#: command-line overrides of the protocol schedule (None = protocol value), see add_common_options
OVERRIDES = ("Q", "M", "cycles", "var_iters", "model_iters", "joint_iters")


def overrides(args) -> dict:
    """Schedule/size overrides given on the command line (a reduced run is recorded as such).

    Parameters
    ----------
    args : argparse.Namespace
        Parsed options (see :func:`add_common_options`).

    Returns
    -------
    dict
        {name: value} of the :data:`OVERRIDES` given (not ``None``).
    """
    return {k: getattr(args, k) for k in OVERRIDES if getattr(args, k, None) is not None}


def tandem_config(dataset: str, quick: bool, seed: int, data=None, **over):
    """The config of "McGPDS (tandem)": α, ε and the time kernels learned (the protocol fixes them).

    β stays at its initial value because the paper's collapsed bound is unbounded in β (it fits
    y with h and with w·g separately, see :mod:`tandem.inference.mcgpds.bound`), so learning β
    diverges.

    Parameters
    ----------
    dataset : str
        "pose" or CUAVE, as in :func:`protocol_config`.
    quick : bool
        CI smoke size.
    seed : int
        Seed of CUAVE's random β initialisation.
    data : tandem.inference.datasets.human_pose.TwoViewData, optional
        The loaded data.
    **over
        Config fields overriding these (default ``fixed=("beta",)``) and the protocol's.

    Returns
    -------
    tandem.inference.mcgpds.fit.McGPDSConfig
        The configuration.
    """
    kw = dict(fixed=("beta",))
    kw.update(over)
    return protocol_config(dataset, quick, seed, data, **kw)


def score(data, mean_scaled, var_scaled, metric: str, mask=None, truth=None):
    """Error and MSLL of a prediction in the data's original units.

    Parameters
    ----------
    data : tandem.inference.datasets.human_pose.TwoViewData
        The loaded data (its ``unscale_mean`` / ``unscale_var`` map to original units).
    mean_scaled : numpy.ndarray
        (N*, D2) predicted mean in the scaled units.
    var_scaled : numpy.ndarray or None
        Predicted variances in the scaled units, broadcastable to the mean; ``None`` for point
        predictors.
    metric : {"mean_joint_error", "rmse"}
        The error measure (anything but "mean_joint_error" is the RMSE).
    mask : numpy.ndarray, optional
        (D2,) bool, the target coordinates scored by the MSLL.
    truth : numpy.ndarray, optional
        (N*, D2) target in original units (default: the test target view ``data.Y2_test``; the
        held-out check passes the training view ``data.Y2``).

    Returns
    -------
    error : float
        The error.
    msll : float or None
        The MSLL (``None`` without variances).
    mean : numpy.ndarray
        The mean in original units.
    var : numpy.ndarray or None
        The variances in original units.
    """
    truth = data.Y2_test if truth is None else truth
    mean = data.unscale_mean(mean_scaled)
    err = M.mean_joint_error(mean, truth) if metric == "mean_joint_error" else M.rmse(mean, truth)
    if var_scaled is None:
        return err, None, mean, None
    var = data.unscale_var(np.broadcast_to(np.asarray(var_scaled), mean.shape))
    return err, M.msll(mean, var, truth, mask=mask), mean, var


def fit_for(data, cfg, seed: int, cache_dir, tag: str, progress: bool):
    """``fit_mcgpds`` on the data's training views, or the saved fit of exactly this problem.

    The saved fit (data values, full config, seed) comes from ``cache_dir`` (``--fit-cache``, see
    :func:`tandem.inference.mcgpds.fit.cached_fit`).

    Parameters
    ----------
    data : tandem.inference.datasets.human_pose.TwoViewData
        The loaded data (scaled views ``data.views`` at ``data.t``, sequences ``data.seq_ends``).
    cfg : tandem.inference.mcgpds.fit.McGPDSConfig
        The configuration.
    seed : int
        Seed of the fit.
    cache_dir : str or path-like or None
        Folder of saved fits (``None``: always fit).
    tag : str
        Name prefix of the cached file.
    progress : bool
        Show progress.

    Returns
    -------
    fitted : tandem.inference.mcgpds.fit.McGPDSFitted
        The fit.
    seconds : float
        Training seconds.
    loaded : bool
        Whether it was read from the cache.
    """
    return cached_fit(data.views, data.t, config=cfg, seed=seed, cache_dir=cache_dir, tag=tag,
                      seq_ends=data.seq_ends, progress=progress)


def protocol_features(data, name: str):
    """(train, test) view-1 features for the Y-space NN in the data's original units.

    Parameters
    ----------
    data : tandem.inference.datasets.human_pose.TwoViewData
        The loaded data (``data.Y1``, ``data.Y1_test``).
    name : {"raw", "std"}
        "raw" (protocol) or "std" (per-column standardised with training statistics).

    Returns
    -------
    train : numpy.ndarray
        (N, D1) features of the training frames.
    test : numpy.ndarray
        (N*, D1) features of the test frames.

    Raises
    ------
    ValueError
        If ``name`` is neither "raw" nor "std".
    """
    if name not in ("raw", "std"):
        raise ValueError(f"unknown NN feature space {name!r} (raw | std)")
    tr, te = nn_features(data.Y1, data.Y1_test, name)
    return tr.numpy(), te.numpy()  # device: cpu-ok (CPU features)


def calibrated_predictor(fitted, data, metric: str, mask, label: str, kw: dict, feat: str):
    """One tandem predictor (:func:`tandem.inference.mcgpds.predictor.calibrated_prediction`) with its held-out check.

    The check uses the training data only.

    Parameters
    ----------
    fitted : tandem.inference.mcgpds.fit.McGPDSFitted
        The fit.
    data : tandem.inference.datasets.human_pose.TwoViewData
        The loaded data.
    metric : {"mean_joint_error", "rmse"}
        The error measure.
    mask : numpy.ndarray
        (D2,) bool, the target coordinates scored by the MSLL.
    label : str
        Name of the predictor.
    kw : dict
        ``predict_view`` keywords (incl. ``k_neighbours``).
    feat : {"raw", "std"}
        Y-space NN features (:func:`protocol_features`).

    Returns
    -------
    dict
        ``label``, ``kw``, ``feat``; ``holdout_error`` and ``holdout_msll`` of the training target
        view (original units; the error chooses among candidates); ``delta`` (δ) and ``pred``, the
        test prediction with δ added (model units).
    """
    kw = dict(kw)
    k = int(kw.pop("k_neighbours", 1))
    cp = calibrated_prediction(fitted, data.m1_test, data.t_test, features=protocol_features(data, feat),
                               k_neighbours=k, **kw)
    hm, hv, delta = cp.holdout_mean, cp.holdout_var, cp.delta
    herr, _, _, _ = score(data, _np(hm), None, metric, truth=data.Y2)
    _, hll, _, _ = score(data, _np(hm), _np(hv + delta), metric, mask, truth=data.Y2)
    return dict(label=label, kw=dict(kw, k_neighbours=k), feat=feat, holdout_error=herr, holdout_msll=hll,
                delta=_np(delta), pred=cp.prediction)


def run_two_view(data, args, experiment: str, dataset: str, metric: str, code_kwargs: dict,
                 variants=None, paper=None, tandem_candidates=None):
    """Fit McGPDS variants for every seed, score them beside the baselines, return Results.

    Parameters
    ----------
    data : tandem.inference.datasets.human_pose.TwoViewData
        The loaded data.
    args : argparse.Namespace
        Parsed options (seeds, ``quick``, ``fit_cache``, ``gpy``, ``jobs``, overrides, ...; see
        :func:`add_common_options`).
    experiment : str
        Name of the experiment (of the results file).
    dataset : str
        "pose" or CUAVE (see :func:`protocol_config`).
    metric : {"mean_joint_error", "rmse"}
        The error measure.
    code_kwargs : dict
        The keyword arguments of ``predict_view`` for the code-faithful predictor.
    variants : list of str, optional
        Names of the extra fits to run ("tandem", "independent", "gplvm", "linear"; default all).
    paper : dict, optional
        The paper's numbers, recorded in the config.
    tandem_candidates : list of tuple, optional
        [(label, predict_view keywords, Y-NN feature "raw" | "std")] — tandem predictors scored
        with held-out calibrated variances (:func:`calibrated_predictor`); the one with the lowest
        held-out training error is also reported as "McGPDS (tandem: held-out selected,
        calibrated)" (chosen without the test data).

    Returns
    -------
    results : tandem.inference.experiments.results.Results
        Every row's per-seed scores and timings.
    keep : dict
        Method → (mean, var) of seed 0 in original units (for the plots).

    Raises
    ------
    ValueError
        If a variant is unknown.
    """
    seeds = seed_list(args)
    cache = getattr(args, "fit_cache", None)
    quick = bool(args.quick)
    ov = overrides(args)
    if ov.get("Q") and dataset != "pose" and "init_dims" not in ov:
        q2 = max(1, round(0.3 * ov["Q"]))                                   # video : MFCC as 7 : 3
        ov["init_dims"] = (ov["Q"] - q2, q2)
    test_iters = 2 if quick else getattr(args, "test_iters", None)
    variants = list(variants if variants is not None else ["tandem", "independent", "gplvm", "linear"])
    mask = data.Y2.std(axis=0) > 0               # constant training coordinates are not scored
    gpy_qs = list(getattr(args, "gpy_q", None) or []) if getattr(args, "gpy", False) else []
    if gpy_qs and not gpy_available():
        print("GPy is not installed (optional extra 'peers'): GPy MRD skipped")
        gpy_qs = []
    res = Results(experiment, seeds, config={
        "dataset": dataset, "quick": quick, "n_train": data.n_train, "n_test": data.n_test,
        "seq_ends": data.seq_ends, "scale": "scalar per view" if np.ndim(data.scale2) == 0 else "per dimension",
        "msll_mask": f"{int(mask.sum())} of {mask.size} target coordinates (non-constant in training); "
                     "variances rescaled to original units (× scale²)",
        "protocol_config": repr(protocol_config(dataset, quick, seeds[0], None, **ov)),
        "overrides (reduced run if non-empty)": ov, "test_iters (paper/generative)": test_iters,
        "tandem_config": repr(tandem_config(dataset, quick, seeds[0], None, **ov)),
        "code_predictor": {k: v for k, v in code_kwargs.items()},
        "variants": variants, "data_dir": str(args.data_dir), "paper": paper or {},
        "gpy_mrd": {"Q": gpy_qs, "M": min(100, data.n_train), "seeds": "every seed of this run",
                    "inputs": "the protocol's scaled views (data.m1, data.m2)"} if gpy_qs else "not run",
        "default_row": f"{DEFAULT_ROW}: McGPDS(seed=s).fit([Y1, Y2], times=t, sequence_ids=...).predict(Y1_test, "
                       "t_test), every other option at its default" + (" (quick: reduced schedule)" if quick else ""),
        "tandem_candidates": [(lab, kw, ft) for lab, kw, ft in (tandem_candidates or [])]})
    # Deterministic baselines (seed-independent): one value each.
    nn_raw, idx_raw = nn_y_space(data.Y1, data.Y2, data.Y1_test)
    nn_std, _ = nn_y_space(data.Y1, data.Y2, data.Y1_test, standardise=True)
    m_mean, v_mean, _ = training_mean_predictor(data.Y2, data.n_test)
    err_fn = M.mean_joint_error if metric == "mean_joint_error" else M.rmse
    res.add("NN in Y space (raw)", metric, err_fn(nn_raw, data.Y2_test))
    res.add("NN in Y space (standardised)", metric, err_fn(nn_std, data.Y2_test))
    res.add("training mean", metric, err_fn(m_mean, data.Y2_test))
    res.add("training mean", "msll", M.msll(m_mean, v_mean, data.Y2_test, mask=mask))

    acc: dict[tuple[str, str], list] = {}
    keep = {}

    def put(name, err, ll):
        acc.setdefault((name, metric), []).append(err)
        if ll is not None:
            acc.setdefault((name, "msll"), []).append(ll)

    def predict_and_score(name, fitted, s, **kw):
        """Predict the target view with ``predict_view(**kw)``, time it, score it, keep seed 0's."""
        t0 = time.perf_counter()
        pred = predict_view(fitted, data.m1_test, data.t_test, seed=s, **kw)
        res.time(name, "predict", time.perf_counter() - t0)
        err, ll, mean, var = score(data, _np(pred.mean), _np(pred.var), metric, mask)
        put(name, err, ll)
        if s == seeds[0]:
            keep[name] = (mean, var)
        return pred

    # --jobs J > 1: the MRD fits (independent of McGPDS) run in J − 1 worker processes while this
    # process fits McGPDS; each seed's MRD rows are added when that seed's McGPDS work is done
    jobs = int(getattr(args, "jobs", 1) or 1)
    mrd_jobs, pool = {}, None
    if gpy_qs and jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(max_workers=jobs - 1, mp_context=mp.get_context("spawn"))
        for s in seeds:
            for q in gpy_qs:
                mrd_jobs[(s, q)] = pool.submit(mrd_fit_job, data.m1, data.m2, data.m1_test, q, s, quick, cache)
    code_kw = dict(code_kwargs)
    code_kw.setdefault("nn_index_y", idx_raw)
    if quick:
        code_kw["test_iters"] = 2
    def default_and_peers(s):
        """The default-estimator row and GPy MRD of seed ``s``."""
        # the estimator a user gets, every default (fit on the raw views, its own scaling)
        m_d, v_d, tr_s, pr_s, sel = default_estimator_prediction(data, s, quick, cache)
        if sel.loaded:
            res.config.setdefault("fits loaded from --fit-cache", []).append(f"tandem default seed {s}")
        res.time(DEFAULT_ROW, "train", tr_s)
        res.time(DEFAULT_ROW, "predict", pr_s)
        put(DEFAULT_ROW, err_fn(m_d, data.Y2_test), M.msll(m_d, v_d, data.Y2_test, mask=mask))
        acc.setdefault((DEFAULT_ROW, "heldout_train_mse_model_units"), []).append(sel.choice_scores[sel.chosen])
        res.config.setdefault("tandem default: held-out choice between the selection and the stack", []).append(
            {"seed": s, "chosen": sel.chosen,
             "heldout_mse (selected: nested CV, stacked: CV)": {k: round(v, 5) for k, v in sel.choice_scores.items()},
             "nested selection per fold": sel.fold_labels})
        # evidence: every candidate of the selection on test (never used to choose)
        for lab, (m_c, v_c) in sel.test.items():
            row = f"{DEFAULT_ROW[:-1]} candidate: {lab})"
            put(row, err_fn(m_c, data.Y2_test), M.msll(m_c, v_c, data.Y2_test, mask=mask))
            acc.setdefault((row, "heldout_train_mse_model_units"), []).append(sel.scores[lab])
        res.config.setdefault("tandem selected: selection by held-out training MSE (model units)", []).append(
            {"seed": s, "selected": sel.label, "heldout_mse": {k: round(v, 5) for k, v in sel.scores.items()}})
        m_se, v_se = sel.selected
        put(SELECTED_ROW, err_fn(m_se, data.Y2_test), M.msll(m_se, v_se, data.Y2_test, mask=mask))
        acc.setdefault((SELECTED_ROW, "heldout_train_mse_model_units"), []).append(sel.choice_scores["selected"])
        m_st, v_st = sel.stacked
        put(STACKED_ROW, err_fn(m_st, data.Y2_test), M.msll(m_st, v_st, data.Y2_test, mask=mask))
        acc.setdefault((STACKED_ROW, "heldout_train_mse_model_units"), []).append(sel.stacked_heldout_mse)
        res.config.setdefault("tandem stacked: weights fitted on held-out training frames", []).append(
            {"seed": s, "weights": {k: round(v, 4) for k, v in sel.stacked_weights.items() if v > 5e-5}})
        if s == seeds[0]:
            keep[DEFAULT_ROW] = (m_d, v_d)
        # GPy MRD, the peer, on every seed and at every latent dimension asked for
        for q in gpy_qs:
            job = mrd_jobs.pop((s, q), None)
            mean, var, tr_s, pr_s, loaded = job.result() if job is not None else mrd_fit_job(
                data.m1, data.m2, data.m1_test, q, s, quick, cache)
            if loaded:
                res.config.setdefault("fits loaded from --fit-cache", []).append(f"GPy MRD Q={q} seed {s}")
            err, ll, mean, var = score(data, mean, var, metric, mask)
            put(mrd_row(q), err, ll)
            res.time(mrd_row(q), "train", tr_s)
            res.time(mrd_row(q), "predict", pr_s)
            if s == seeds[0]:
                keep[mrd_row(q)] = (mean, var)

    protocol_fit = not getattr(args, "no_protocol_fit", False)
    if not protocol_fit:
        res.config["protocol fit"] = "skipped (--no-protocol-fit): baselines, the default estimator and GPy MRD only"
    for s in seeds:
        default_and_peers(s)
        if not protocol_fit:
            if getattr(args, "out", None) is not None and s != seeds[-1]:
                _finish(res, acc, seeds[:seeds.index(s) + 1]).write(args.out)
            continue
        set_seed(s)
        cfg = protocol_config(dataset, quick, s, data, **ov)
        fitted, wall, loaded = fit_for(data, cfg, s, cache, f"{dataset}_protocol", not args.no_progress)
        res.time("McGPDS (protocol fit)", "train", wall)
        if loaded:
            res.config.setdefault("fits loaded from --fit-cache", []).append(f"protocol seed {s}")
        predictors = [("McGPDS (paper-faithful)", dict(method="paper", test_iters=test_iters)),
                      ("McGPDS (code-faithful)", dict(method="code", **code_kw)),
                      ("McGPDS (generative)", dict(method="generative", test_iters=test_iters))]
        # With W learned (the protocol) the paper's bound fits y with h and with w·g separately,
        # so h + w·g double-counts the signal; the h-only predictor is the consistent one
        # (tandem.inference.mcgpds.fit, "Findings about the paper's bound").
        predictors += [(name[:-1] + ", h only)", dict(kw, output_components="h")) for name, kw in predictors]
        for name, kw in predictors:
            pred = predict_and_score(name, fitted, s, **kw)
            if kw["method"] == "code" and "output_components" not in kw:
                nnx = data.Y2[_np(pred.nn_index).astype(int)]
                put("NN in learned shared space (McGPDS)", err_fn(nnx, data.Y2_test), None)
        if tandem_candidates:
            cal = []
            for label, kw, feat in tandem_candidates:
                kw = dict(kw)
                if quick:
                    kw["test_iters"] = min(int(kw.get("test_iters") or 2), 2)
                t0 = time.perf_counter()
                c = calibrated_predictor(fitted, data, metric, mask, label, kw, feat)
                res.time(f"McGPDS (tandem candidate: {label})", "predict", time.perf_counter() - t0)
                err, ll, mean, var = score(data, _np(c["pred"].mean), _np(c["pred"].var), metric, mask)
                put(f"McGPDS (tandem candidate: {label})", err, ll)
                acc.setdefault((f"McGPDS (tandem candidate: {label})", f"heldout_train_{metric}"), []).append(
                    c["holdout_error"])
                cal.append((c, err, ll, mean, var))
            best = min(cal, key=lambda z: z[0]["holdout_error"])
            c, err, ll, mean, var = best
            put("McGPDS (tandem: held-out selected, calibrated)", err, ll)
            res.config.setdefault("tandem selection (by held-out training error)", []).append(
                {"seed": s, "selected": c["label"],
                 "holdout_error": {z[0]["label"]: round(float(z[0]["holdout_error"]), 4) for z in cal}})
            if s == seeds[0]:
                keep["McGPDS (tandem: held-out selected, calibrated)"] = (mean, var)
        for v in variants:
            if v == "tandem":
                name, cfg_v = "McGPDS (tandem)", tandem_config(dataset, quick, s, data, **ov)
                pk = dict(method="generative", test_iters=test_iters)
            elif v == "independent":
                name, cfg_v = "independent CGPDS", protocol_config(dataset, quick, s, data, coupling=False, **ov)
                pk = dict(method="paper", latent_for_prediction="private_nn", test_iters=test_iters)
            elif v == "gplvm":
                name = "McGPDS, GPLVM private prior"
                cfg_v = protocol_config(dataset, quick, s, data, private_prior="gplvm", **ov)
                pk = dict(method="paper", test_iters=test_iters)
            elif v == "linear":
                name = "McGPDS, linear output layer"
                cfg_v = protocol_config(dataset, quick, s, data, output_layer="linear", **ov)
                pk = dict(method="paper", test_iters=test_iters)
            else:
                raise ValueError(f"unknown variant {v!r}")
            set_seed(s)
            f_v, wall, loaded = fit_for(data, cfg_v, s, cache, f"{dataset}_{v}", not args.no_progress)
            res.time(name, "train", wall)
            if loaded:
                res.config.setdefault("fits loaded from --fit-cache", []).append(f"{v} seed {s}")
            predict_and_score(name, f_v, s, **pk)
            if v != "tandem":
                # the paper's ablation rows, also with the consistent predictor of the protocol
                # fit (code-faithful, h only): the paper-faithful "all" rows carry the h + w·g
                # double count and the paper-faithful failure, which would hide the ablation
                ab_kw = dict(method="code", **code_kw, output_components="h")
                if v == "independent" and ab_kw.get("latent_for_prediction", "shared_nn") == "shared_nn":
                    ab_kw["latent_for_prediction"] = "private_nn"   # no shared space to match in
                predict_and_score(f"{name} (code-faithful, h only)", f_v, s, **ab_kw)
            if v == "tandem":   # the tandem fit also with the paper-faithful NN predictor
                pred = predict_view(f_v, data.m1_test, data.t_test, seed=s, method="paper", test_iters=test_iters)
                err, ll, _, _ = score(data, _np(pred.mean), _np(pred.var), metric, mask)
                put("McGPDS (tandem, paper predictor)", err, ll)
        if getattr(args, "out", None) is not None and s != seeds[-1]:
            _finish(res, acc, seeds[:seeds.index(s) + 1]).write(args.out)   # partial results survive
    res = _finish(res, acc, seeds)
    if pool is not None:
        pool.shutdown()

    res.config["plot_methods"] = list(keep)
    return res, keep


def _finish(res: Results, acc: dict, seeds_done) -> Results:
    """A copy of ``res`` with the per-seed records of ``acc`` added (seeds done so far)."""
    out = copy.deepcopy(res)
    out.seeds = list(seeds_done)
    for (name, met), vals in acc.items():
        out.add(name, met, vals)
    # Time of the shared protocol fit is attributed to each of its three predictors' rows.
    for name in ("McGPDS (paper-faithful)", "McGPDS (code-faithful)", "McGPDS (generative)"):
        if "McGPDS (protocol fit)" in out.timings:
            out.time(name, "train", out.timings["McGPDS (protocol fit)"]["train"] / len(seeds_done),
                     accumulate=False)
    return out


def print_table(res: Results, paper: dict | None = None) -> None:
    """Print the results table and, if given, the paper's numbers.

    Parameters
    ----------
    res : tandem.inference.experiments.results.Results
        The results.
    paper : dict, optional
        {metric: (error, MSLL or None)} of Sun et al. (2023).
    """
    print(res.table(("Q",)))
    if paper:
        print("\npaper (Sun et al. 2023):", ", ".join(
            f"{k}: {v[0]}" + (f" / MSLL {v[1]}" if v[1] is not None else "") for k, v in paper.items()))


def plot_traces(data, keep: dict, names: list, coords: list, title: str, out: Path,
                show_training_mean: bool = False) -> Path:
    """Predicted vs true trajectories of target columns (original units), ±2σ bands.

    Parameters
    ----------
    data : tandem.inference.datasets.human_pose.TwoViewData
        The loaded data (``Y2_test``, ``bias2``, ``n_test``).
    keep : dict
        Method → (mean (N*, D), var (N*, D) or None).
    names : list of str
        Methods to draw (those missing from ``keep`` are skipped).
    coords : list of tuple
        [(column, axis label)], one panel each.
    title : str
        Figure title.
    out : pathlib.Path
        The PNG file to write.
    show_training_mean : bool, default False
        Draw the training mean of each column.

    Returns
    -------
    pathlib.Path
        ``out``.
    """
    names = [n for n in names if n in keep]
    fig, axes = plt.subplots(len(coords), 1, figsize=(10, 2.6 * len(coords)), sharex=True)
    tt = np.arange(data.n_test)
    from tandem import plots
    for ax, (c, lab) in zip(axes, coords):
        if show_training_mean:
            ax.axhline(data.bias2[c], color="gray", ls=":", label="training mean")
        # tandem.plots: one call per predictor on a shared axes (the truth drawn with the first)
        for j, n in enumerate(names):
            mean, var = keep[n]
            plots.plot_prediction(mean=mean, var=var, truth=data.Y2_test if j == 0 else None, times=tt, ax=ax,
                                  dims=(c,), label=n, color=f"C{j}")
        if not names:
            ax.plot(tt, data.Y2_test[:, c], "k-", lw=2, label="true")
        ax.set(ylabel=lab, xlabel="", title="")
        if ax is not axes[0] and ax.get_legend() is not None:
            ax.get_legend().remove()
    axes[0].legend(fontsize=7, ncol=3)
    axes[-1].set_xlabel("test frame")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, out, dpi=90)      # atomically: a half-written figure never replaces one
    plt.close(fig)
    return out


#: methods drawn in the trajectory plots of the real-data scripts
PLOT_METHODS = ["McGPDS (paper-faithful)", "McGPDS (code-faithful)", "McGPDS (generative)", "McGPDS (tandem)",
                "McGPDS (tandem default)", "GPy MRD (Q = 5)", "GPy MRD (Q = 10)"]


def _int_list(text: str) -> list[int]:
    """argparse ``type=``: comma-separated positive integers, e.g. ``'5,10'``."""
    import argparse
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers like '5,10', got {text!r}") \
            from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers like '5,10', got {text!r}")
    return vals


def add_common_options(p):
    """Add the options every real-data McGPDS script shares to an argument parser.

    ``--variants``, ``--gpy``, ``--fit-cache``, ``--gpy-q``, ``--no-protocol-fit``, ``--jobs``,
    ``--no-tandem-predictors`` and the reduced-run overrides (:data:`OVERRIDES`, ``--test-iters``).

    Parameters
    ----------
    p : argparse.ArgumentParser
        The parser.

    Returns
    -------
    argparse.ArgumentParser
        ``p``.
    """
    p.add_argument("--variants", default="tandem,independent,gplvm,linear",
                   help="extra fits per seed (comma list of tandem,independent,gplvm,linear; '' for none)")
    p.add_argument("--gpy", action="store_true", help="also fit GPy MRD on every seed (needs GPy)")
    p.add_argument("--fit-cache", default=None,
                   help="folder of saved fits: a fit of the same (dataset, config, seed) is loaded instead of "
                        "refitted, new fits are saved there (predictor studies without refitting)")
    p.add_argument("--gpy-q", type=_int_list, default=[5, 10],
                   help="latent dimensions of GPy MRD, comma list (default 5,10: one MRD fit per Q and seed)")
    p.add_argument("--no-protocol-fit", action="store_true",
                   help="skip the protocol fit and its predictors: the baselines, the default estimator "
                        "(McGPDS().fit().predict()) and --gpy MRD only")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes: with J > 1 the GPy MRD fits run in J − 1 worker processes beside the McGPDS fits")
    p.add_argument("--no-tandem-predictors", action="store_true",
                   help="skip the tandem predictors (held-out calibrated variances, k-NN, standardised-Y NN)")
    g = p.add_argument_group("reduced runs (default: the protocol's values)")
    for k in OVERRIDES:
        g.add_argument("--" + k.replace("_", "-"), dest=k, type=int, default=None)
    g.add_argument("--test-iters", type=int, default=None,
                   help="test-latent iterations of the paper/generative predictors (default 100)")
    return p


def run_and_report(args, data, experiment: str, dataset: str, metric: str, code_kwargs: dict, plot, paper,
                   tandem_candidates=None):
    """The body every real-data McGPDS script shares.

    Fit and score every seed (:func:`run_two_view`), write ``<out>/<experiment>.json`` and the
    plot, print the table. ``--quick`` runs no variants; ``--no-tandem-predictors`` drops the
    tandem candidates.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed options (``variants``, ``quick``, ``out``, ...).
    data : tandem.inference.datasets.human_pose.TwoViewData
        The loaded data.
    experiment : str
        Name of the experiment.
    dataset : str
        "pose" or CUAVE.
    metric : {"mean_joint_error", "rmse"}
        The error measure.
    code_kwargs : dict
        ``predict_view`` keywords of the code-faithful predictor.
    plot : callable
        ``plot(data, keep, out)`` draws the figures into the folder ``out``.
    paper : dict or None
        The paper's numbers.
    tandem_candidates : list of tuple, optional
        The tandem predictors (see :func:`run_two_view`).

    Returns
    -------
    tandem.inference.experiments.results.Results
        The results.
    """
    variants = [v for v in args.variants.split(",") if v]
    if args.quick:
        variants = []        # smoke size: the protocol fit and its predictors only
    if getattr(args, "no_tandem_predictors", False):
        tandem_candidates = None
    res, keep = run_two_view(data, args, experiment, dataset, metric, code_kwargs, variants, paper,
                             tandem_candidates)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res.write(out)
    plot(data, keep, out)
    print_table(res, paper)
    return res


#: Tandem predictors (beyond the paper), each with held-out calibrated variances
#: (:func:`calibrated_predictor`). They keep the code-faithful pipeline (NN-in-Y init of the test
#: latents, 8 KL-only test iterations, shared-space NN, h-only CGPDS predictive) but use the
#: model's own β⁽²⁾ instead of the demo's β⁽²⁾ := 100 (whose noise floor, 100⁻¹·20.65² = 4.3 per
#: coordinate, swamps the many small-variance coordinates) plus the per-coordinate held-out
#: variance δ. First the raw-Y NN init (the protocol's), then the standardised-Y NN init with a
#: k-NN mixture in the learned shared space, k = 1, 3, 5, 8 (k is chosen by held-out error).
_TANDEM_BASE = dict(method="code", test_iters=8, fixll=True, beta_target_override=None,
                    latent_for_prediction="shared_nn", output_components="h")
TANDEM_POSE = [("raw-Y init, 1-NN, model β", dict(_TANDEM_BASE), "raw")] + [
    (f"std-Y init, {k}-NN, model β", dict(_TANDEM_BASE, k_neighbours=k), "std") for k in (1, 3, 5, 8)]
