"""The tandem predictor: view-to-view prediction with held-out calibrated variances.

Beyond the paper and the authors' code, measured on human pose and CUAVE (the real-data
examples) as the best McGPDS predictor. It keeps the code-faithful pipeline of
:func:`tandem.inference.mcgpds.fit.predict_view` —

1. initialise the test latents of the source view at the training shared means of the
   nearest training frames in source-view space (Y-space NN, here on per-column
   standardised features by default, so no single large-variance column decides it);
2. a few KL-only iterations on the test latents (``fixll=True``);
3. nearest training frame(s) in the learned shared space; predict the target view with the
   h-only CGPDS predictive at their target latents (a moment-matched mixture for k > 1) —

with the model's own β of the target view (not the demo's β := 100), and adds a per-output
variance ``δ_d`` estimated on the *training* data alone: every sequence (or, for a single
sequence, each of ``n_chunks`` contiguous chunks) is predicted with the NN searches
restricted to the other folds (:func:`tandem.inference.mcgpds.fit.holdout_predictions`), and
``δ_d = max(0, mean_n (y_nd − m_nd)² − mean_n v_nd)`` makes the mean held-out predictive
variance match the mean held-out squared error
(:func:`tandem.inference.mcgpds.fit.calibrated_extra_var`). No test data enters any choice.

:func:`select_predictor` picks one candidate by its held-out error
(``McGPDS.predict(..., method="selected")``); :func:`stacked_predictor` mixes all of them (and the
training mean) with convex weights fitted on the held-out frames (:func:`stacked_prediction`,
``method="stacked"``). The default,
:func:`tandem.inference.mcgpds.predictor_choice.choose_predictor` (``method="tandem"``), computes
both from one set of candidate runs and keeps the one with the lower held-out error
(:mod:`tandem.inference.mcgpds.predictor_choice`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize

from tandem.inference.distances import Standardizer, knn
from tandem.inference.mcgpds.fit import (
    McGPDSFitted,
    Prediction,
    calibrated_extra_var,
    holdout_folds,
    holdout_predictions,
    predict_view,
)
from tandem.inference.mcgpds.view_prediction import PREDICT_VIEW_CONSTRAINTS
from tandem.inference.params import validate_params
from tandem.inference.validation import as_tensor, check_int_range

__all__ = ["TANDEM_PREDICTOR", "TANDEM_CANDIDATES", "CalibratedPrediction", "PredictorSelection", "nn_features",
           "calibrated_prediction", "select_predictor", "StackedPrediction", "simplex_least_squares",
           "stacked_prediction", "stacked_predictor", "TRAINING_MEAN", "TANDEM_STACK_CANDIDATES"]

#: ``predict_view`` keywords of the tandem predictor (k-NN size and the NN features apart)
TANDEM_PREDICTOR = dict(method="code", test_iters=8, fixll=True, beta_target_override=None,
                        latent_for_prediction="shared_nn", output_components="h")


#: the predictors :func:`select_predictor` chooses among by default: label → keywords of
#: :func:`calibrated_prediction` (over :data:`TANDEM_PREDICTOR`). The first is the single
#: nearest frame in the learned shared space (the pose protocol's best); the others average the
#: target predictives at the latents of the k nearest training frames in source-view space
#: (``latent_for_prediction="y_nn"``), k = 5 and 20, which shrink the prediction towards the
#: local mean of the target view (what pays where the source view says little about the target).
TANDEM_CANDIDATES = {
    "shared-space 1-NN": dict(k_neighbours=1),
    "source-space 5-NN": dict(k_neighbours=5, latent_for_prediction="y_nn"),
    "source-space 20-NN": dict(k_neighbours=20, latent_for_prediction="y_nn"),
}


#: the members of the stacked predictor (:func:`stacked_predictor`): Y-space NN features ∈
#: {std, raw} × k ∈ {1, 5, 20} × the target latent at the shared-space or the source-space
#: neighbours — every combination of what :func:`calibrated_prediction` offers. Stacking
#: (weights fitted on held-out training frames) decides how much each contributes; on CUAVE
#: the raw-feature source-space 1-NN member carries signal the standardised features miss.
TANDEM_STACK_CANDIDATES = {
    f"{feat} features, {'shared' if lat == 'shared_nn' else 'source'}-space {k}-NN":
        dict(features=feat, k_neighbours=k, **({} if lat == "shared_nn" else {"latent_for_prediction": "y_nn"}))
    for feat in ("std", "raw") for k in (1, 5, 20) for lat in ("shared_nn", "y_nn")
}


@dataclass
class CalibratedPrediction:
    """Output of :func:`calibrated_prediction` (model units).

    Attributes
    ----------
    prediction : tandem.inference.mcgpds.fit.Prediction
        The test prediction with ``delta`` added to its variance.
    holdout_mean : torch.Tensor
        (N, D_t) held-out predictive means of the training target view.
    holdout_var : torch.Tensor
        (N, D_t) their variances (before ``delta``).
    delta : torch.Tensor
        (D_t,) the calibrated extra variance.
    """
    prediction: Prediction
    holdout_mean: torch.Tensor
    holdout_var: torch.Tensor
    delta: torch.Tensor


def nn_features(train, test, kind: str = "std"):
    """(train, test) features of the Y-space NN search.

    Parameters
    ----------
    train : array_like
        (N, F) training features.
    test : array_like
        (N*, F) test features.
    kind : str, default "std"
        ``"raw"`` (as given) or ``"std"`` (columns standardised with the training mean and
        standard deviation; constant columns are only centred; NaN entries are missing, ignored
        by the statistics and the NN search).

    Returns
    -------
    train : torch.Tensor
        (N, F) float64, on the device of ``train`` (a tensor's, else the CPU).
    test : torch.Tensor
        (N*, F) float64, on the same device.

    Raises
    ------
    ValueError
        ``test`` with other columns than ``train``, or an unknown ``kind``.
    """
    tr = as_tensor(train, "train", ndim=2, finite=False)           # NaN: missing entries (NaN-aware NN)
    te = as_tensor(test, "test", ndim=2, finite=False).to(tr.device)
    if te.shape[1] != tr.shape[1]:
        raise ValueError(f"test: expected {tr.shape[1]} columns like train, got {te.shape[1]}")
    if kind == "raw":
        return tr, te
    if kind == "std":
        st = Standardizer(tr)
        return st.transform(tr), st.transform(te)
    raise ValueError(f"kind: expected 'raw' or 'std', got {kind!r}")


def calibrated_prediction(fitted: McGPDSFitted, Y_source_test, t_test, source: int = 0, target: int = 1, *,
                          features="std", k_neighbours: int = 1, n_chunks: int = 5,
                          **predict_kwargs) -> CalibratedPrediction:
    """Predict view ``target`` from test frames of view ``source`` with calibrated variances.

    ``Y_source_test`` (N*, D_s) and the fit are in model units; several sources: ``source`` a
    list of view indices and ``Y_source_test`` a list of arrays (see
    :func:`tandem.inference.mcgpds.fit.predict_view`). ``features``: the Y-space NN
    features — "std" (default), "raw", or a pair ``(train (N, F), test (N*, F))`` of arrays
    (e.g. the data in its original units). ``k_neighbours``: size of the shared-space k-NN
    mixture. ``predict_kwargs`` override :data:`TANDEM_PREDICTOR` (e.g. ``test_iters``,
    ``latent_for_prediction="y_nn"``). The held-out folds are the training sequences (or
    ``n_chunks`` chunks of a single sequence), see the module docstring.

    Parameters
    ----------
    fitted : tandem.inference.mcgpds.fit.McGPDSFitted
        A trained model.
    Y_source_test : array_like or list of array_like
        (N*, D_s) test frames of the source view, model units (one array per source for several).
    t_test : array_like
        (N*,) test time stamps.
    source : int or list of int, default 0
        Source view index, or several.
    target : int, default 1
        Target view index.
    features : str or tuple, default "std"
        The Y-space NN features: "std", "raw" (:func:`nn_features`) or a pair
        ``(train (N, F), test (N*, F))`` of arrays.
    k_neighbours : int, default 1
        Size of the k-NN mixture (>= 1).
    n_chunks : int, default 5
        Held-out chunks of a single training sequence.
    **predict_kwargs
        Override :data:`TANDEM_PREDICTOR` in :func:`tandem.inference.mcgpds.fit.predict_view`.

    Returns
    -------
    CalibratedPrediction
        The test prediction, the held-out predictions and δ.

    Raises
    ------
    ValueError
        Bad ``k_neighbours`` or ``features``, or test arrays that do not match the sources.
    """
    k = check_int_range(k_neighbours, "k_neighbours", 1)
    kw = dict(TANDEM_PREDICTOR)
    kw.update(predict_kwargs)
    kw["k_neighbours"] = k
    multi = isinstance(source, (list, tuple))
    if isinstance(features, str):
        if multi:        # several sources: their columns side by side (each column standardised)
            if not isinstance(Y_source_test, (list, tuple)) or len(Y_source_test) != len(source):
                raise ValueError(f"Y_source_test: with sources {list(source)} expected a list of {len(source)} "
                                 "arrays (one per source)")
            dev0 = fitted.data.device
            ftr, fte = nn_features(torch.cat([fitted.views[k] for k in source], 1),
                                   torch.cat([as_tensor(Y, f"Y_source_test[{i}]", ndim=2).to(dev0)
                                              for i, Y in enumerate(Y_source_test)], 1), features)
        else:
            ftr, fte = nn_features(fitted.views[source], Y_source_test, features)
    else:
        if not isinstance(features, (tuple, list)) or len(features) != 2:
            raise ValueError("features: expected 'std', 'raw' or a pair (train, test) of arrays")
        ftr, fte = features
    dev = fitted.data.device
    ftr_t = as_tensor(ftr, "features[0] (train)", ndim=2, finite=False).to(dev)
    fte_t = as_tensor(fte, "features[1] (test)", ndim=2, finite=False).to(dev)
    if ftr_t.shape[0] != fitted.data.N:
        raise ValueError(f"features[0] (train): expected {fitted.data.N} rows (one per training frame), "
                         f"got {ftr_t.shape[0]}")
    if fte_t.shape[1] != ftr_t.shape[1]:
        raise ValueError(f"features: the train and test features must have the same columns, got "
                         f"{ftr_t.shape[1]} and {fte_t.shape[1]}")
    kq = k if kw.get("latent_for_prediction") == "y_nn" else 1
    hm, hv = holdout_predictions(fitted, source, target, nn_features=ftr_t, n_chunks=n_chunks, **kw)
    delta = calibrated_extra_var(hm, hv, fitted.views[target])
    if isinstance(ftr, np.ndarray) and isinstance(fte, np.ndarray):
        nn_y = knn(fte, ftr, kq)              # numpy in → the same search as the caller's arrays
    else:
        nn_y = knn(fte_t, ftr_t, kq)
    pred = predict_view(fitted, Y_source_test, t_test, source, target, nn_index_y=nn_y, extra_var=delta, **kw)
    return CalibratedPrediction(pred, hm, hv, delta)


@dataclass
class PredictorSelection:
    """Output of :func:`select_predictor`.

    Attributes
    ----------
    label : str
        Label of the chosen predictor.
    kwargs : dict
        Its keywords of :func:`calibrated_prediction`.
    scores : dict
        Label → held-out mean squared error of the training target view, model units.
    result : CalibratedPrediction
        The chosen predictor's output.
    results : dict
        Label → :class:`CalibratedPrediction` of every candidate scored.
    """
    label: str
    kwargs: dict
    scores: dict
    result: CalibratedPrediction
    results: dict


def select_predictor(fitted: McGPDSFitted, Y_source_test, t_test, source: int = 0, target: int = 1, *,
                     candidates=None, features="std", n_chunks: int = 5, **predict_kwargs) -> PredictorSelection:
    """The tandem predictor chosen among ``candidates`` on held-out TRAINING frames only.

    Every candidate (label → keywords of :func:`calibrated_prediction`; default
    :data:`TANDEM_CANDIDATES`) predicts the training target view fold by fold, its NN searches
    restricted to the other folds (the training sequences, or ``n_chunks`` contiguous chunks of
    a single sequence; :func:`tandem.inference.mcgpds.fit.holdout_predictions`), and is scored by
    the held-out mean squared error::

        score = (1 / |O|) Σ_{(n,d)∈O} (y_nd − m_nd)²      (model units, the observed training entries O).

    The candidate with the lowest score (ties → the first listed) predicts the test frames with its
    held-out calibrated variances. A candidate whose ``k_neighbours`` exceeds the number of
    training frames outside the largest fold is skipped (short recordings). The test frames enter
    no choice.

    Parameters
    ----------
    fitted : tandem.inference.mcgpds.fit.McGPDSFitted
        A trained model.
    Y_source_test : array_like or list of array_like
        (N*, D_s) test frames of the source view, model units (one array per source for several).
    t_test : array_like
        (N*,) test time stamps.
    source : int or list of int, default 0
        Source view index, or several.
    target : int, default 1
        Target view index.
    candidates : dict, optional
        Label → keywords of :func:`calibrated_prediction` (default :data:`TANDEM_CANDIDATES`); a
        candidate's own ``features`` replaces ``features``.
    features : str or tuple, default "std"
        The Y-space NN features (:func:`calibrated_prediction`).
    n_chunks : int, default 5
        Held-out chunks of a single training sequence.
    **predict_kwargs
        Passed to every candidate (a candidate's own keywords take precedence).

    Returns
    -------
    PredictorSelection
        The chosen predictor, every score and every candidate's result.

    Raises
    ------
    ValueError
        ``candidates`` empty, not a mapping of label → dict of keywords, or none feasible.
    """
    cands = TANDEM_CANDIDATES if candidates is None else candidates
    results = _run_candidates(fitted, Y_source_test, t_test, source, target, cands, features, n_chunks,
                              predict_kwargs, {})
    return _selection(fitted, cands, results, target)


def _check_candidates(cands, name: str = "candidates") -> None:
    if not isinstance(cands, dict) or not cands or not all(isinstance(v, dict) for v in cands.values()):
        raise ValueError(f"{name}: expected a non-empty dict of label -> dict of calibrated_prediction keywords")
    for label, kw in cands.items():
        # the same declarations as predict_view's own keywords (features is calibrated_prediction's)
        validate_params(PREDICT_VIEW_CONSTRAINTS, {n: v for n, v in kw.items() if n != "features"},
                        f"{name}[{label!r}]: ")


def _run_key(features, kw: dict):
    # what makes two candidate runs the same computation: the Y-space NN features (a string, or
    # the very same pair of arrays) and every keyword of calibrated_prediction after defaults
    full = {**TANDEM_PREDICTOR, "k_neighbours": 1, **kw}
    fk = features if isinstance(features, str) else ("object", id(features))
    plain = (str, int, float, bool, type(None))
    return fk, tuple(sorted((k, repr(v) if isinstance(v, plain) else ("object", id(v))) for k, v in full.items()))


def _run_candidates(fitted, Y_source_test, t_test, source, target, cands: dict, features, n_chunks: int,
                    predict_kwargs: dict, cache: dict, name: str = "candidates"):
    """label → CalibratedPrediction of every feasible candidate; ``cache`` (run key → result) is
    read and filled, so a candidate shared by two sets is computed once."""
    _check_candidates(cands, name)
    folds = holdout_folds(fitted, n_chunks)
    n_other = fitted.data.N - max(int(f.numel()) for f in folds)     # fewest frames left to search
    results = {}
    for label, kw in cands.items():
        if int(kw.get("k_neighbours", 1)) > n_other:     # too few training frames for this k: not a candidate
            continue
        kw_c = {**predict_kwargs, **kw}
        feat = kw_c.pop("features", features)
        key = _run_key(feat, kw_c)
        if key not in cache:
            cache[key] = calibrated_prediction(fitted, Y_source_test, t_test, source, target,
                                               features=feat, n_chunks=n_chunks, **kw_c)
        results[label] = cache[key]
    if not results:
        raise ValueError(f"{name}: every candidate needs more neighbours than the {n_other} training frames "
                         "outside a held-out fold")
    return results


def _selection(fitted, cands: dict, results: dict, target: int) -> PredictorSelection:
    # the candidate with the lowest held-out MSE (ties → the first listed; NaN never wins)
    Y = fitted.views[target]
    scores = {lab: float(((Y - cp.holdout_mean) ** 2).nanmean()) for lab, cp in results.items()}
    order = list(scores)
    best = min(order, key=lambda lab: (np.nan_to_num(scores[lab], nan=np.inf), order.index(lab)))
    return PredictorSelection(best, dict(cands[best]), scores, results[best], results)


#: label of the training-mean member of :func:`stacked_prediction` (``include_mean=True``)
TRAINING_MEAN = "training mean"


def simplex_least_squares(A, b) -> np.ndarray:
    r"""Weights on the probability simplex minimising a least-squares error.

    ``w = argmin_{w ≥ 0, Σ_c w_c = 1} ‖A w − b‖²`` (a convex quadratic programme; SLSQP from the
    uniform start, with the exact gradient ``2 Aᵀ(A w − b)``; the result is clipped at 0 and
    renormalised to remove the solver's rounding).

    Parameters
    ----------
    A : array_like
        (n, C) one column per member (its predictions, flattened over frames and outputs).
    b : array_like
        (n,) the targets.

    Returns
    -------
    numpy.ndarray
        (C,) the weights (non-negative, summing to one).

    Raises
    ------
    ValueError
        ``A`` not 2-D with at least one column, ``b`` of another length, or non-finite entries.
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if A.ndim != 2 or A.shape[1] < 1 or b.shape != (A.shape[0],):
        raise ValueError(f"A, b: expected A (n, C) with C >= 1 and b (n,), got {A.shape} and {b.shape}")
    if not (np.isfinite(A).all() and np.isfinite(b).all()):
        raise ValueError("A, b: expected finite entries")
    C = A.shape[1]
    if C == 1:
        return np.ones(1)
    # scaled so the tolerance of SLSQP does not depend on the data's size and units
    s = max(float(np.sqrt(np.mean(b ** 2))), 1e-300)
    G, h = A.T @ A / (A.shape[0] * s * s), A.T @ b / (A.shape[0] * s * s)
    res = minimize(lambda w: w @ G @ w - 2 * h @ w, np.full(C, 1.0 / C), jac=lambda w: 2 * (G @ w - h),
                   method="SLSQP", bounds=[(0.0, 1.0)] * C,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(C)}],
                   options={"ftol": 1e-14, "maxiter": 500})
    w = np.clip(res.x, 0.0, None)
    return w / w.sum()


@dataclass
class StackedPrediction:
    """Output of :func:`stacked_prediction` (model units); reads like a :class:`CalibratedPrediction`.

    Attributes
    ----------
    prediction : tandem.inference.mcgpds.fit.Prediction
        The test prediction: the weighted mixture of the members, ``delta`` added to its
        variance (the latent fields are those of the member with the largest weight).
    holdout_mean : torch.Tensor
        (N, D_t) cross-validated held-out means of the training target view: each fold's frames
        mix the members' held-out means with weights fitted on the other folds.
    holdout_var : torch.Tensor
        (N, D_t) their mixture variances (before ``delta``).
    delta : torch.Tensor
        (D_t,) the calibrated extra variance of the stack.
    weights : dict
        Member label → weight used for the test prediction (fitted on every held-out frame).
    fold_weights : list of dict
        Per fold, the weights used for its held-out frames.
    members : dict or None
        Label → :class:`CalibratedPrediction` of every member (set by :func:`stacked_predictor`).
    """
    prediction: Prediction
    holdout_mean: torch.Tensor
    holdout_var: torch.Tensor
    delta: torch.Tensor
    weights: dict
    fold_weights: list
    members: dict | None = None


def _stack_weights(means: list, Y: torch.Tensor, rows) -> np.ndarray:
    # the observed entries of the given rows, one column per member
    obs = ~torch.isnan(Y[rows])
    A = np.stack([m[rows][obs].cpu().numpy() for m in means], 1)
    return simplex_least_squares(A, Y[rows][obs].cpu().numpy())


def _mixture(w, means: list, variances: list):
    # moment matching of the mixture Σ_c w_c N(m_c, v_c): mean Σ w m, variance Σ w (v + m²) − mean²
    mean = sum(float(wc) * m for wc, m in zip(w, means))
    second = sum(float(wc) * (v + m * m) for wc, v, m in zip(w, variances, means))
    return mean, (second - mean * mean).clamp_min(0.0)


def stacked_prediction(fitted: McGPDSFitted, members: dict, target: int = 1, *, include_mean: bool = True,
                       n_chunks: int = 5) -> StackedPrediction:
    r"""Mix the candidate predictors with weights fitted on held-out TRAINING frames (stacking).

    ``members`` (label → :class:`CalibratedPrediction`, e.g. :attr:`PredictorSelection.results`)
    carry held-out means ``m^c`` of the training target view (the folds of
    :func:`tandem.inference.mcgpds.fit.holdout_folds`). With ``include_mean`` the training mean
    of the target view is one more member (variance: the training variance per output). The
    weights are convex and shared by the outputs,

    .. math::

        w = \operatorname{argmin}_{w \ge 0,\ \sum_c w_c = 1}
            \sum_{(n,d) \in O} \bigl(y_{nd} - \sum_c w_c m^c_{nd}\bigr)^2

    (:func:`simplex_least_squares`; O the observed training entries), and the stack is the
    moment-matched mixture: mean ``Σ_c w_c m^c``, variance ``Σ_c w_c (v^c + (m^c)²) − mean²`` with
    the members' variances before their own δ. Its held-out predictions are cross-validated:
    the frames of each fold are mixed with the weights fitted on the other folds, so its held-out
    error is comparable with a member's. Its extra variance δ is calibrated on them
    (:func:`tandem.inference.mcgpds.fit.calibrated_extra_var`); the test prediction uses the
    weights fitted on every fold. No test data enters any choice.

    Parameters
    ----------
    fitted : tandem.inference.mcgpds.fit.McGPDSFitted
        The trained model the members were computed from.
    members : dict
        Label → :class:`CalibratedPrediction` (at least one; the same test frames).
    target : int, default 1
        Target view index.
    include_mean : bool, default True
        Add the training mean of the target view as a member (label :data:`TRAINING_MEAN`).
    n_chunks : int, default 5
        Chunks of a single training sequence (the folds the members were held out on).

    Returns
    -------
    StackedPrediction
        The test prediction, the cross-validated held-out predictions, δ and the weights.

    Raises
    ------
    ValueError
        No members, a member that is not a :class:`CalibratedPrediction`, or shapes that differ.
    """
    if not isinstance(members, dict) or not members:
        raise ValueError("members: expected a non-empty dict of label -> CalibratedPrediction")
    for lab, cp in members.items():
        if not isinstance(cp, CalibratedPrediction):
            raise ValueError(f"members[{lab!r}]: expected a CalibratedPrediction, got {type(cp).__name__}")
    if include_mean and TRAINING_MEAN in members:
        raise ValueError(f"members: the label {TRAINING_MEAN!r} is taken by include_mean=True")
    Y = fitted.views[target]
    labels = list(members)
    first = members[labels[0]]
    for lab in labels:
        cp = members[lab]
        if cp.holdout_mean.shape != Y.shape or cp.prediction.mean.shape != first.prediction.mean.shape:
            raise ValueError(f"members[{lab!r}]: held-out predictions {tuple(cp.holdout_mean.shape)} or test "
                             f"predictions {tuple(cp.prediction.mean.shape)} do not match the target view "
                             f"{tuple(Y.shape)} / the first member")
    folds = holdout_folds(fitted, n_chunks)
    N = Y.shape[0]
    h_means = [members[lab].holdout_mean for lab in labels]
    h_vars = [members[lab].holdout_var for lab in labels]
    t_means = [members[lab].prediction.mean for lab in labels]
    t_vars = [members[lab].prediction.var - members[lab].delta for lab in labels]      # before their own δ
    if include_mean:
        labels.append(TRAINING_MEAN)
        # the training mean of each fold is that of the OTHER folds (held out like the members)
        hm, hv = torch.empty_like(Y), torch.empty_like(Y)
        for f in folds:
            other = torch.ones(N, dtype=torch.bool, device=Y.device)
            other[f] = False
            hm[f], hv[f] = Y[other].nanmean(0), _nanvar(Y[other])
        h_means.append(hm)
        h_vars.append(hv)
        t_means.append(Y.nanmean(0).expand_as(t_means[0]).clone())
        t_vars.append(_nanvar(Y).expand_as(t_means[0]).clone())
    cv_mean, cv_var = torch.empty_like(Y), torch.empty_like(Y)
    fold_weights = []
    for f in folds:
        other = torch.ones(N, dtype=torch.bool, device=Y.device)
        other[f] = False
        w = _stack_weights(h_means, Y, other)
        fold_weights.append(dict(zip(labels, w.tolist())))
        cv_mean[f], cv_var[f] = _mixture(w, [m[f] for m in h_means], [v[f] for v in h_vars])
    delta = calibrated_extra_var(cv_mean, cv_var, Y)
    w = _stack_weights(h_means, Y, torch.ones(N, dtype=torch.bool, device=Y.device))
    mean, var = _mixture(w, t_means, t_vars)
    base_label = labels[int(np.argmax(w[:len(members)]))]
    pred = dataclasses.replace(members[base_label].prediction, mean=mean, var=var + delta, method="stacked")
    return StackedPrediction(pred, cv_mean, cv_var, delta, dict(zip(labels, w.tolist())), fold_weights)


def _nanvar(Y: torch.Tensor) -> torch.Tensor:
    # per-column variance (ddof 0) of the observed entries
    return ((Y - Y.nanmean(0)) ** 2).nanmean(0)


def stacked_predictor(fitted: McGPDSFitted, Y_source_test, t_test, source: int = 0, target: int = 1, *,
                      candidates=None, include_mean: bool = True, features="std", n_chunks: int = 5,
                      **predict_kwargs) -> StackedPrediction:
    """The stacked tandem predictor: every candidate, mixed with weights fitted on held-out TRAINING frames.

    Every candidate (label → keywords of :func:`calibrated_prediction`, a candidate's own
    ``features`` included; default :data:`TANDEM_STACK_CANDIDATES`) predicts the training target
    view fold by fold (as in :func:`select_predictor`) and the test frames; the candidates and,
    with ``include_mean``, the training mean are mixed by :func:`stacked_prediction` (convex
    weights minimising the held-out squared error, moment-matched variance, held-out calibrated
    δ). A candidate whose ``k_neighbours`` exceeds the training frames outside the largest fold
    is skipped. The test frames enter no choice.

    Parameters
    ----------
    fitted : tandem.inference.mcgpds.fit.McGPDSFitted
        A trained model.
    Y_source_test : array_like or list of array_like
        (N*, D_s) test frames of the source view, model units (one array per source for several).
    t_test : array_like
        (N*,) test time stamps.
    source : int or list of int, default 0
        Source view index, or several.
    target : int, default 1
        Target view index.
    candidates : dict, optional
        Label → keywords of :func:`calibrated_prediction` (default :data:`TANDEM_STACK_CANDIDATES`).
    include_mean : bool, default True
        Add the training mean of the target view as a member.
    features : str or tuple, default "std"
        The Y-space NN features of a candidate that names none.
    n_chunks : int, default 5
        Held-out chunks of a single training sequence.
    **predict_kwargs
        Passed to every candidate (a candidate's own keywords take precedence).

    Returns
    -------
    StackedPrediction
        The stacked test prediction, its cross-validated held-out predictions, the weights and
        every member (``members``).

    Raises
    ------
    ValueError
        ``candidates`` empty or not a mapping of label → dict of keywords, or none feasible.
    """
    sel = select_predictor(fitted, Y_source_test, t_test, source, target,
                           candidates=TANDEM_STACK_CANDIDATES if candidates is None else candidates,
                           features=features, n_chunks=n_chunks, **predict_kwargs)
    sp = stacked_prediction(fitted, sel.results, target, include_mean=include_mean, n_chunks=n_chunks)
    sp.members = sel.results
    return sp
