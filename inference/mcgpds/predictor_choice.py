"""The default McGPDS predictor: the held-out choice between a selected and a stacked predictor.

:func:`choose_predictor` (``McGPDS.predict(..., method="tandem")``) runs the candidate tandem
predictors of :mod:`tandem.inference.mcgpds.predictor` once, builds from those runs both the
single predictor picked by held-out error (:func:`~tandem.inference.mcgpds.predictor.select_predictor`)
and the convex stack (:func:`~tandem.inference.mcgpds.predictor.stacked_prediction`), and keeps
the one whose held-out error on the TRAINING frames is lower. The two errors are estimated alike:
the selection's by nested cross-validation (:func:`nested_selection_score`: each fold scored with
the candidate chosen on the other folds), the stack's by cross-validation (each fold mixed with
weights fitted on the other folds). No test data enters the choice.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tandem.inference.mcgpds.fit import McGPDSFitted, Prediction, holdout_folds
from tandem.inference.mcgpds.predictor import (
    TANDEM_CANDIDATES,
    TANDEM_STACK_CANDIDATES,
    CalibratedPrediction,
    PredictorSelection,
    StackedPrediction,
    _check_candidates,
    _run_candidates,
    _selection,
    stacked_prediction,
)
from tandem.inference.validation import as_tensor

__all__ = ["nested_selection_score", "PredictorChoice", "choose_between", "choose_predictor", "SELECTED", "STACKED"]


def _fold_sse(Y: torch.Tensor, mean: torch.Tensor, folds) -> tuple[np.ndarray, np.ndarray]:
    # per fold: the sum of squared errors over its observed entries, and their count
    err = (Y - mean) ** 2
    obs = ~torch.isnan(Y)
    sse = np.array([float(err[f][obs[f]].sum()) for f in folds])
    cnt = np.array([int(obs[f].sum()) for f in folds])
    return sse, cnt


def nested_selection_score(Y, holdout_means: dict, folds) -> tuple[float, list]:
    r"""Held-out error of *choosing* a candidate by held-out error, nested-cross-validated.

    Candidate c has held-out means :math:`m^c` of the training target view: the frames of each
    fold :math:`F_k` (:func:`tandem.inference.mcgpds.fit.holdout_folds`) predicted without
    that fold. Per fold and candidate, over the observed entries O,

    .. math::

        E_c(F_k) = \sum_{(n,d) \in O,\ n \in F_k} (y_{nd} - m^c_{nd})^2, \qquad
        N(F_k) = |\{(n,d) \in O : n \in F_k\}|.

    For each fold the candidate is chosen by the held-out MSE of the OTHER folds and scored on
    this fold only,

    .. math::

        c_k = \operatorname{argmin}_c \frac{\sum_{j \ne k} E_c(F_j)}{\sum_{j \ne k} N(F_j)}
        \quad (\text{ties → the first listed}), \qquad
        S = \frac{\sum_k E_{c_k}(F_k)}{\sum_k N(F_k)},

    so the selection's own error is estimated like the stack's cross-validated error
    (:func:`stacked_prediction`: each fold mixed with weights fitted on the other folds).
    The held-out MSE of the candidate chosen on all folds (:attr:`PredictorSelection.scores`)
    was chosen by looking at every fold and is optimistic; ``S`` is not (with one candidate
    the two are equal). As for every held-out score here, the model itself was fitted on all
    training frames; only the predictor's choices (NN searches, weights, the candidate) are
    held out.

    Parameters
    ----------
    Y : array_like
        (N, D) the training target view (NaN: missing, not scored).
    holdout_means : dict
        Candidate label → (N, D) held-out means (at least one).
    folds : sequence of array_like
        Row indices of each fold (at least two).

    Returns
    -------
    score : float
        The nested held-out MSE ``S``.
    fold_labels : list of str
        ``c_k``, the candidate chosen for each fold.

    Raises
    ------
    ValueError
        No candidates, means of another shape than ``Y``, fewer than two folds, row indices out
        of range, or a fold whose other folds have no observed entry.
    """
    Yt = as_tensor(Y, "Y", ndim=2, finite=False)
    if not isinstance(holdout_means, dict) or not holdout_means:
        raise ValueError("holdout_means: expected a non-empty dict of label -> (N, D) held-out means")
    means = {}
    for lab, m in holdout_means.items():
        mt = as_tensor(m, f"holdout_means[{lab!r}]", ndim=2, finite=False).to(Yt.device)
        if mt.shape != Yt.shape:
            raise ValueError(f"holdout_means[{lab!r}]: expected shape {tuple(Yt.shape)} like Y, got {tuple(mt.shape)}")
        means[lab] = mt
    folds = [f.long().reshape(-1).to(Yt.device) if isinstance(f, torch.Tensor)
             else torch.as_tensor(np.asarray(f), device=Yt.device).long().reshape(-1) for f in folds]
    if len(folds) < 2:
        raise ValueError(f"folds: expected at least two folds, got {len(folds)}")
    N = Yt.shape[0]
    for i, f in enumerate(folds):
        if f.numel() and (int(f.min()) < 0 or int(f.max()) >= N):
            raise ValueError(f"folds[{i}]: row indices must lie in [0, {N}), got {int(f.min())}..{int(f.max())}")
    labels = list(means)
    per = {lab: _fold_sse(Yt, means[lab], folds) for lab in labels}
    cnt = per[labels[0]][1]
    tot_sse, tot_cnt, fold_labels = 0.0, 0, []
    for k in range(len(folds)):
        n_other = int(cnt.sum() - cnt[k])
        if n_other == 0:
            raise ValueError(f"folds: the folds other than fold {k} have no observed entry to choose by")
        other = {lab: (per[lab][0].sum() - per[lab][0][k]) / n_other for lab in labels}
        c = min(labels, key=lambda lab: (np.nan_to_num(other[lab], nan=np.inf), labels.index(lab)))
        fold_labels.append(c)
        tot_sse += float(per[c][0][k])
        tot_cnt += int(cnt[k])
    if tot_cnt == 0:
        raise ValueError("Y: no observed entry in any fold")
    return tot_sse / tot_cnt, fold_labels


#: the two options of :func:`choose_predictor`
SELECTED, STACKED = "selected", "stacked"


@dataclass
class PredictorChoice:
    """Output of :func:`choose_predictor` / :func:`choose_between` (model units).

    Attributes
    ----------
    chosen : str
        ``"selected"`` (the single predictor of :func:`select_predictor`) or ``"stacked"``
        (:func:`stacked_prediction`).
    scores : dict
        ``{"selected": S, "stacked": T}``: the selection's nested held-out MSE
        (:func:`nested_selection_score`) and the stack's cross-validated held-out MSE, model units.
    selection : PredictorSelection
        The single-predictor selection (its test prediction in ``selection.result``).
    stack : StackedPrediction
        The stack (``members``: every member run).
    fold_labels : list of str
        The candidate the nested selection chose for each held-out fold.
    """
    chosen: str
    scores: dict
    selection: PredictorSelection
    stack: StackedPrediction
    fold_labels: list

    @property
    def result(self) -> CalibratedPrediction | StackedPrediction:
        """The chosen predictor's output (``selection.result`` or ``stack``)."""
        return self.stack if self.chosen == STACKED else self.selection.result

    @property
    def prediction(self) -> Prediction:
        """The chosen predictor's test prediction."""
        return self.result.prediction


def choose_between(fitted: McGPDSFitted, selection: PredictorSelection, stack: StackedPrediction,
                   target: int = 1, *, n_chunks: int = 5) -> PredictorChoice:
    r"""Choose between a single-predictor selection and a stack by held-out error on TRAINING frames.

    ``S`` = :func:`nested_selection_score` of the selection's candidates (``selection.results``;
    each fold's candidate chosen on the other folds), ``T`` = the stack's cross-validated held-out
    MSE (each fold mixed with weights fitted on the other folds),

    .. math::

        T = \frac{1}{|O|} \sum_{(n,d) \in O} (y_{nd} - \bar m_{nd})^2

    (``stack.holdout_mean`` = :math:`\bar m`; O the observed training entries). The stack is
    chosen iff ``T < S`` (a tie keeps the single predictor). Only held-out means of the training
    target view enter; the test predictions carried by ``selection`` and ``stack`` do not.

    Parameters
    ----------
    fitted : tandem.inference.mcgpds.fit.McGPDSFitted
        The trained model both were computed from.
    selection : PredictorSelection
        Output of :func:`select_predictor` (or the selection of :func:`choose_predictor`).
    stack : StackedPrediction
        Output of :func:`stacked_prediction` / :func:`stacked_predictor` on the same folds.
    target : int, default 1
        Target view index.
    n_chunks : int, default 5
        Chunks of a single training sequence (the folds both were held out on).

    Returns
    -------
    PredictorChoice
        Which was chosen, both scores and both predictors.

    Raises
    ------
    ValueError
        Arguments of the wrong type, or held-out means that do not match the target view.
    """
    if not isinstance(selection, PredictorSelection):
        raise ValueError(f"selection: expected a PredictorSelection, got {type(selection).__name__}")
    if not isinstance(stack, StackedPrediction):
        raise ValueError(f"stack: expected a StackedPrediction, got {type(stack).__name__}")
    Y = fitted.views[target]
    if stack.holdout_mean.shape != Y.shape:
        raise ValueError(f"stack: held-out means {tuple(stack.holdout_mean.shape)} do not match the target view "
                         f"{tuple(Y.shape)}")
    folds = holdout_folds(fitted, n_chunks)
    s_sel, fold_labels = nested_selection_score(Y, {lab: cp.holdout_mean for lab, cp in selection.results.items()},
                                                folds)
    s_stack = float(((Y - stack.holdout_mean) ** 2).nanmean())
    chosen = STACKED if s_stack < s_sel else SELECTED
    return PredictorChoice(chosen, {SELECTED: s_sel, STACKED: s_stack}, selection, stack, fold_labels)


def choose_predictor(fitted: McGPDSFitted, Y_source_test, t_test, source: int = 0, target: int = 1, *,
                     candidates=None, stack_candidates=None, include_mean: bool = True, features="std",
                     n_chunks: int = 5, **predict_kwargs) -> PredictorChoice:
    """The default tandem predictor: the held-out choice between the selected single predictor and the stack.

    1. Every run is computed once (:func:`calibrated_prediction`, held-out means of the training
       target view and the test prediction): the ``candidates`` of the selection (default
       :data:`TANDEM_CANDIDATES`, with ``features``) and the ``stack_candidates`` (default
       :data:`TANDEM_STACK_CANDIDATES`, each with its own features) share their common runs —
       with ``features="std"`` the three default candidates are three of the twelve stack members.
    2. The selection (:func:`select_predictor`: the candidate of lowest held-out MSE) and the stack
       (:func:`stacked_prediction` of the stack candidates and, with ``include_mean``, the
       training mean).
    3. :func:`choose_between`: the selection's nested-cross-validated held-out MSE against the
       stack's cross-validated held-out MSE; the lower wins (a tie keeps the selection).

    No test data enters any choice: the scores use the training target view only, and the test
    frames of the source view are only predicted.

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
        The selection's candidates, label → keywords of :func:`calibrated_prediction` (default
        :data:`TANDEM_CANDIDATES`).
    stack_candidates : dict, optional
        The stack's members, label → keywords (default :data:`TANDEM_STACK_CANDIDATES`).
    include_mean : bool, default True
        Add the training mean of the target view to the stack.
    features : str or tuple, default "std"
        The Y-space NN features of a candidate that names none.
    n_chunks : int, default 5
        Held-out chunks of a single training sequence.
    **predict_kwargs
        Passed to every candidate (a candidate's own keywords take precedence).

    Returns
    -------
    PredictorChoice
        Which was chosen (``chosen``), both scores, the selection and the stack; the test
        prediction is ``.prediction``.

    Raises
    ------
    ValueError
        ``candidates`` or ``stack_candidates`` empty, not a mapping of label → dict of keywords,
        or none feasible.
    """
    cands = TANDEM_CANDIDATES if candidates is None else candidates
    scands = TANDEM_STACK_CANDIDATES if stack_candidates is None else stack_candidates
    _check_candidates(cands, "candidates")
    _check_candidates(scands, "stack_candidates")
    cache: dict = {}
    members = _run_candidates(fitted, Y_source_test, t_test, source, target, scands, features, n_chunks,
                              predict_kwargs, cache, "stack_candidates")
    results = _run_candidates(fitted, Y_source_test, t_test, source, target, cands, features, n_chunks,
                              predict_kwargs, cache, "candidates")
    selection = _selection(fitted, cands, results, target)
    stack = stacked_prediction(fitted, members, target, include_mean=include_mean, n_chunks=n_chunks)
    stack.members = members
    return choose_between(fitted, selection, stack, target, n_chunks=n_chunks)
