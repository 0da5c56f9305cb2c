"""SAMTC's choice of one setting of a hyperparameter grid: by accuracy against true labels, or label-free.

Re-exported by :mod:`tandem.inference.samtc.algorithm`.
"""
from __future__ import annotations

import numpy as np

from tandem.inference import metrics

__all__ = ["select_setting"]


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
    m = len(labelings)
    if m == 1:
        return 0
    if labels_true is not None:
        scores = [(metrics.clustering_accuracy(labels_true, y), metrics.nmi(labels_true, y)) for y in labelings]
        return max(range(m), key=lambda i: (scores[i][0], scores[i][1], -i))
    A = np.zeros((m, m))
    for i in range(m):
        for j in range(i + 1, m):
            A[i, j] = A[j, i] = metrics.nmi(labelings[i], labelings[j])
    mean = A.sum(1) / (m - 1)
    return int(np.argmax(mean))
