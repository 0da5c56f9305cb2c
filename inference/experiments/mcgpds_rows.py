"""Rows of the McGPDS real-data tables beyond the protocol's own fits: the library's default estimator and GPy MRD.

:func:`default_estimator_prediction` is what a user gets — ``McGPDS(seed=s).fit(views).predict(...)``
with every default, on the training views in their original units — with the stacked and
selected predictors of the same fit beside it; :func:`mrd_fit_job` is one GPy MRD fit and
prediction (the peer the paper compares with). Both can read and write a content-keyed cache
(``--fit-cache``) so that a rerun of a protocol reuses its fits. Used by
:func:`tandem.inference.experiments.mcgpds_protocol.run_two_view` (and re-exported there).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from tandem.inference.checkpoints import content_hash
from tandem.inference.mcgpds.baselines import fit_gpy_mrd
from tandem.inference.persistence import write_text_atomic
from tandem.inference.validation import check_seed

__all__ = ["DEFAULT_ROW", "STACKED_ROW", "SELECTED_ROW", "sequence_ids_of", "default_estimator_prediction",
           "mrd_fit_job", "mrd_row"]


def _np(x):
    """A tensor or array-like as a numpy array (tensors detached and moved to the CPU)."""
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


#: name of the row of ``McGPDS(seed=s).fit(...).predict(...)`` with every default (the object a
#: user gets), fitted on the training views in their original units
DEFAULT_ROW = "McGPDS (tandem default)"
#: the stacked tandem predictor of the same fit (``predict(..., method="stacked")``)
STACKED_ROW = "McGPDS (tandem stacked)"
#: the single-predictor selection of the same fit (``predict(..., method="selected")``, the default before
#: the held-out choice between it and the stack)
SELECTED_ROW = "McGPDS (tandem selected)"

#: reduced schedule of the default row in ``--quick`` smoke runs
_QUICK_DEFAULT = dict(Q=3, M=10, cycles=1, var_iters=2, model_iters=2, joint_iters=4, lbfgs_max_iter=4)


def sequence_ids_of(seq_ends) -> np.ndarray:
    """(N,) sequence label of every training frame from the 1-based cumulative ends ``seq_ends``.

    Parameters
    ----------
    seq_ends : array_like
        Cumulative (1-based) end of each sequence; the last is N.

    Returns
    -------
    numpy.ndarray
        (N,) int64 labels 0, 1, ….
    """
    ends = np.asarray(seq_ends, dtype=np.int64)
    return np.repeat(np.arange(ends.size), np.diff(np.concatenate([[0], ends])))


def default_estimator_prediction(data, seed: int, quick: bool = False, cache_dir=None):
    """Fit :class:`tandem.inference.mcgpds.McGPDS` with its defaults and predict view 2 of the test frames.

    The fit is on the raw training views ``[data.Y1, data.Y2]`` at ``data.t`` (sequences from
    ``data.seq_ends``); the prediction from ``data.Y1_test`` with ``predict``'s defaults.
    ``predict``'s default is :func:`tandem.inference.mcgpds.predictor_choice.choose_predictor` on the
    fit's model-unit views (the held-out choice between the single-predictor selection and the
    stack); it is called here directly (the same computation, tested equal in
    ``tests/test_mcgpds_choose.py``) so that the selection, the stack and every candidate's test
    prediction are kept too.

    Parameters
    ----------
    data : tandem.inference.datasets.human_pose.TwoViewData
        The loaded data.
    seed : int
        Seed of the estimator.
    quick : bool, default False
        Shrink the schedule to a smoke-test size.
    cache_dir : str or path-like, optional
        ``--fit-cache``: the outcome of exactly this problem (content hash of the data, the seed,
        ``quick`` and the candidate sets) is read from / written to a JSON file there.

    Returns
    -------
    mean : numpy.ndarray
        (N*, D2) the default's predicted mean, original units.
    var : numpy.ndarray
        (N*, D2) its predicted variances, original units.
    train_s : float
        Training seconds.
    predict_s : float
        Prediction seconds (every candidate, the selection, the stack and the choice).
    selection : types.SimpleNamespace
        ``chosen`` ("selected" or "stacked"), ``choice_scores`` (the selection's nested and the
        stack's cross-validated held-out MSE, model units), ``fold_labels`` (the nested
        selection's candidate per fold), ``label`` and ``scores`` (the single-predictor selection
        and every candidate's held-out MSE), ``test``: label → (mean, var) of every candidate of
        the selection, ``selected`` and ``stacked`` (mean, var) of the two options,
        ``stacked_weights``, ``stacked_heldout_mse`` (original units for the predictions) and
        ``loaded`` (read from the cache).
    """
    import types

    import torch

    from tandem.inference.mcgpds.api import McGPDS
    from tandem.inference.mcgpds.predictor import TANDEM_CANDIDATES, TANDEM_STACK_CANDIDATES
    from tandem.inference.mcgpds.predictor_choice import choose_predictor
    path = None
    fields = ("chosen", "choice_scores", "fold_labels", "label", "scores", "stacked_weights", "stacked_heldout_mse")
    if cache_dir is not None:
        key = content_hash("mcgpds_default/3", data.Y1, data.Y2, data.t, list(data.seq_ends), data.Y1_test,
                           data.t_test, check_seed(seed), bool(quick), repr(TANDEM_CANDIDATES),
                           repr(TANDEM_STACK_CANDIDATES), length=64)
        path = Path(cache_dir) / f"mcgpds_default_seed{seed}_{key[:16]}.json"
        if path.exists():
            z = json.loads(path.read_text())
            if z.get("fingerprint") == key:
                arr = lambda mv: (np.asarray(mv[0]), np.asarray(mv[1]))      # noqa: E731
                sel = types.SimpleNamespace(**{f: z[f] for f in fields}, loaded=True,
                                            test={k: arr(mv) for k, mv in z["test"].items()},
                                            selected=arr(z["selected"]), stacked=arr(z["stacked"]))
                mean, var = sel.stacked if sel.chosen == "stacked" else sel.selected
                return mean, var, z["train_s"], z["predict_s"], sel
    t0 = time.perf_counter()
    est = McGPDS(seed=seed, **(_QUICK_DEFAULT if quick else {}))
    est.fit([data.Y1, data.Y2], times=data.t, sequence_ids=sequence_ids_of(data.seq_ends))
    t1 = time.perf_counter()
    zs = est.scalers_[0].transform(torch.as_tensor(data.Y1_test, dtype=torch.float64))  # device: cpu-ok
    t_test = torch.as_tensor(data.t_test, dtype=torch.float64)  # device: cpu-ok (the estimator moves it)
    ch = choose_predictor(est.fitted_, zs, t_test, seed=est.seed)
    tr_s, pr_s = t1 - t0, time.perf_counter() - t1
    st = est.scalers_[1]
    orig = lambda p: (_np(st.inverse(p.mean)), _np(st.inverse_var(p.var)))      # noqa: E731
    sel = types.SimpleNamespace(
        chosen=ch.chosen, choice_scores=dict(ch.scores), fold_labels=list(ch.fold_labels),
        label=ch.selection.label, scores=dict(ch.selection.scores),
        stacked_weights=dict(ch.stack.weights),
        stacked_heldout_mse=float(((est.fitted_.views[1] - ch.stack.holdout_mean) ** 2).nanmean()),
        test={lab: orig(cp.prediction) for lab, cp in ch.selection.results.items()},
        selected=orig(ch.selection.result.prediction), stacked=orig(ch.stack.prediction), loaded=False)
    mean, var = orig(ch.prediction)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        lists = lambda mv: [mv[0].tolist(), mv[1].tolist()]      # noqa: E731
        write_text_atomic(path, json.dumps({"fingerprint": key, "seed": seed, "train_s": tr_s, "predict_s": pr_s,
                                            **{f: getattr(sel, f) for f in fields},
                                            "test": {k: lists(mv) for k, mv in sel.test.items()},
                                            "selected": lists(sel.selected), "stacked": lists(sel.stacked)}))
    return mean, var, tr_s, pr_s, sel


def mrd_fit_job(m1, m2, m1_test, q: int, seed: int, quick: bool = False, cache_dir=None):
    """One GPy MRD fit and prediction on the scaled views; a picklable worker task.

    :func:`tandem.inference.mcgpds.baselines.fit_gpy_mrd` with latent dimension ``q``,
    M = min(100, N), seed ``seed``.

    Parameters
    ----------
    m1 : numpy.ndarray
        (N, D1) scaled training view 1.
    m2 : numpy.ndarray
        (N, D2) scaled training view 2.
    m1_test : numpy.ndarray
        (N*, D1) scaled test view 1.
    q : int
        Latent dimension.
    seed : int
        Seed of the fit.
    quick : bool, default False
        Smoke-test size (5 iterations of each stage).
    cache_dir : str or path-like, optional
        ``--fit-cache``: the prediction of exactly this problem (content hash of the three arrays,
        ``q``, ``seed``, ``quick``) is read from / written to a JSON file there, so a rerun of the
        same protocol reuses the peer's fits.

    Returns
    -------
    mean : numpy.ndarray
        (N*, D2) predicted mean, the views' units.
    var : numpy.ndarray
        (N*, D2) predicted variances, the views' units.
    train_s : float
        Training seconds.
    predict_s : float
        Prediction seconds.
    loaded : bool
        Whether it was read from the cache.
    """
    path = None
    if cache_dir is not None:
        key = content_hash("gpy_mrd/1", np.asarray(m1), np.asarray(m2), np.asarray(m1_test), int(q), check_seed(seed),
                           bool(quick), length=64)
        path = Path(cache_dir) / f"gpy_mrd_Q{q}_seed{seed}_{key[:16]}.json"
        if path.exists():
            z = json.loads(path.read_text())
            if z.get("fingerprint") == key:
                return np.asarray(z["mean"]), np.asarray(z["var"]), z["train_s"], z["predict_s"], True
    r = fit_gpy_mrd(m1, m2, m1_test, Q=q, M=min(100, len(m1)), seed=seed,
                    **(dict(max_iters=5, init_vardist_iters=5, predict_iters=5) if quick else {}))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps({"fingerprint": key, "Q": q, "seed": seed, "mean": r.mean.tolist(),
                                            "var": r.var.tolist(), "train_s": r.train_s,
                                            "predict_s": r.predict_s}))
    return r.mean, r.var, r.train_s, r.predict_s, False


def mrd_row(q: int) -> str:
    """Row name of GPy MRD with latent dimension ``q``.

    Parameters
    ----------
    q : int
        Latent dimension.

    Returns
    -------
    str
        ``"GPy MRD (Q = q)"``.
    """
    return f"GPy MRD (Q = {q})"
