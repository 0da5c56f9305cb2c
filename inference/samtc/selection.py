"""SAMTC's choice of one setting of a hyperparameter grid: by accuracy against true labels, or label-free.

Re-exported by :mod:`tandem.inference.samtc.algorithm`.
"""
from __future__ import annotations

import numpy as np

from tandem.inference import metrics

__all__ = ["select_setting", "select_partition"]


def _scores(labelings, labels_true=None) -> list:
    """Per labelling, a key to maximise: (accuracy, NMI) against ``labels_true``, or (label-free)
    the mean NMI to the other labellings."""
    m = len(labelings)
    if labels_true is not None:
        return [(metrics.clustering_accuracy(labels_true, y), metrics.nmi(labels_true, y)) for y in labelings]
    if m == 1:
        return [(0.0,)]
    A = np.zeros((m, m))
    for i in range(m):
        for j in range(i + 1, m):
            A[i, j] = A[j, i] = metrics.nmi(labelings[i], labelings[j])
    return [(float(v),) for v in A.sum(1) / (m - 1)]


def _best(scores, allowed) -> int:
    """The allowed index with the highest score (ties → the first)."""
    return max(allowed, key=lambda i: (*scores[i], -i))


def select_setting(labelings, labels_true=None):
    """Index of the chosen grid setting.

    With ``labels_true`` (the paper): the setting with the best clustering accuracy (ties → NMI,
    then first). Otherwise (label-free): the consensus setting, maximising the mean NMI to the
    other settings' labellings (ties → first).

    Parameters
    ----------
    labelings : list of array_like
        One (n,) labelling per grid setting.
    labels_true : array_like, optional
        (n,) true labels.

    Returns
    -------
    int
        Index into ``labelings``.
    """
    if len(labelings) == 1:
        return 0
    return _best(_scores(labelings, labels_true), range(len(labelings)))


def select_partition(labelings, h: int, labels_true=None):
    """:func:`select_setting`, the choice restricted to the labellings that use all ``h`` clusters.

    A grid setting whose labelling of the task's n points has fewer than h distinct labels is
    not an h-partition of the task (step 3's Ncut cuts the target's graph augmented with source
    nodes, and a cut may put a whole cluster on source nodes only: a task of n_t = h_t = 2
    points beside larger tasks got one cluster), so it cannot be chosen. It still takes part in
    the label-free consensus (it is one of the grid's opinions on which points belong together):
    a rule that dropped it from the consensus too changed recorded text results whose chosen
    partitions were complete (NG-p1, SAMTC-ns, seeds 0, 1, 3), while this one changes a choice
    only where the old choice had fewer than h clusters.

    Parameters
    ----------
    labelings : list of array_like
        One (n,) labelling per grid setting.
    h : int
        Number of clusters.
    labels_true : array_like, optional
        (n,) true labels (the paper's choice by accuracy).

    Returns
    -------
    int or None
        Index into ``labelings`` of the chosen setting; ``None`` when no labelling uses all h
        clusters (the caller falls back; see :func:`tandem.inference.samtc.algorithm.samtc`).
    """
    full = [i for i, y in enumerate(labelings) if np.unique(np.asarray(y)).size >= h]
    if not full:
        return None
    if len(full) == 1:
        return full[0]
    return _best(_scores(labelings, labels_true), full)
