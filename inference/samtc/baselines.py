"""Single-task Ncut-SNN (also SAMTC's initial partition) and the baselines of the paper's experiments.

* :func:`ncut_snn` / :func:`ncut_snn_grid` — Normalized Cut on the Jarvis–Patrick SNN graph
  of one task (SAMTC's s = t term), at one k or over the paper's k_t grid;
* :func:`kmeans_baseline` — k-means on every task alone;
* :func:`pooled_baseline` — all tasks pooled (completely related tasks) and clustered jointly.

Re-exported by :mod:`tandem.inference.samtc.algorithm`.
"""
from __future__ import annotations

from numbers import Integral

import numpy as np
import scipy.sparse as sp

from tandem.inference import metrics
from tandem.inference.params import Interval, Options, Seed, validate_params
from tandem.inference.samtc import steps as st
from tandem.inference.samtc.selection import select_setting
from tandem.inference.samtc.spectral import kmeans, ncut
from tandem.inference.samtc.task_checks import _metric_for, validate_labels, validate_tasks

__all__ = ["ncut_snn", "ncut_snn_grid", "kmeans_baseline", "pooled_baseline", "BASELINE_CONSTRAINTS"]

_POS_INT = Interval(Integral, 1)
#: the options of the public baselines, declared once (each checks the ones it takes)
BASELINE_CONSTRAINTS = {
    "k": [None, _POS_INT], "seed": [Seed()], "metric": [None, Options(("cosine", "euclidean"))],
    "n_init": [_POS_INT], "method": [Options(("ncut_snn", "kmeans"))],
}


def _fill_isolated(lab, S):
    """Give isolated nodes (label −1) the label of their most similar labelled point."""
    bad = lab < 0
    if bad.any():
        good = np.flatnonzero(~bad)
        Sb = S[np.ix_(np.flatnonzero(bad), good)]
        lab = lab.copy()
        lab[bad] = lab[good[np.argmax(Sb, axis=1)]]
    return lab


def _ncut_graph(W, h, seed, S, X):
    # features break the Ncut = 0 ties of a graph with more than h components (spectral.ncut)
    lab = ncut(W, h, seed=seed, features=X, metric=_metric_for(X))
    if (lab >= 0).sum() < h:  # (almost) no edges: fall back to k-means on the features
        return kmeans(X, h, seed=seed)[0]
    return _fill_isolated(lab, S)


def ncut_snn(X, h: int, k: int | None = None, seed: int = 0, metric: str | None = None):
    """Single-task Ncut-SNN: Normalized Cut on the Jarvis–Patrick SNN graph.

    W(x_i, x_j) = |N(x_i) ∩ N(x_j)| / |N(x_i) ∪ N(x_j)| for mutual k-NN pairs, with
    N(x) = {x} ∪ kNN(x); this is SAMTC's s = t term.

    Parameters
    ----------
    X : array_like or scipy.sparse matrix
        (n, d) data.
    h : int
        Number of clusters.
    k : int, optional
        Neighbourhood size; ``None`` → ⌈n/h⌉ (the middle of the paper's grid).
    seed : int, default 0
        Seed of the Ncut's k-means.
    metric : {"cosine", "euclidean"}, optional
        Default cosine for sparse data, Euclidean for dense.

    Returns
    -------
    numpy.ndarray
        (n,) labels.
    """
    validate_params(BASELINE_CONSTRAINTS, dict(k=k, seed=seed, metric=metric), "ncut_snn: ")
    (X,), (h,) = validate_tasks([X], [h])
    metric = metric or _metric_for(X)
    S = st.similarity(X, X, metric)
    n = X.shape[0]
    k = st.k_grid(n, h, own=True)[1] if k is None else int(k)
    if not 1 <= k <= n - 1:
        raise ValueError(f"ncut_snn: k must be in [1, n−1] = [1, {n - 1}], got {k}")
    order = st.neighbour_order(S, exclude_self=True, max_k=k)
    own = st.neighbour_indicator(order, k, n, include_self=True)
    return _ncut_graph(st.weighted_snn(own), h, seed, S, X)


def ncut_snn_grid(X, h, seed, S=None, order=None):
    """Ncut-SNN over the paper's k_t grid.

    Parameters
    ----------
    X : array_like or scipy.sparse matrix
        (n, d) data.
    h : int
        Number of clusters.
    seed : int
        Seed of the Ncut's k-means.
    S : numpy.ndarray, optional
        Precomputed own-task similarity (n, n).
    order : numpy.ndarray, optional
        Precomputed neighbour order (rows of S sorted, self excluded).

    Returns
    -------
    labelings : list of numpy.ndarray
        One (n,) labelling per grid value.
    k_values : list of int
        The grid.
    """
    n = X.shape[0]
    if S is None:
        S = st.similarity(X, X, _metric_for(X))
    ks = st.k_grid(n, h, own=True)
    if order is None:
        order = st.neighbour_order(S, exclude_self=True, max_k=max(ks))
    labs = []
    for k in ks:
        own = st.neighbour_indicator(order, k, n, include_self=True)
        labs.append(_ncut_graph(st.weighted_snn(own), h, seed, S, X))
    return labs, ks


def kmeans_baseline(tasks, n_clusters, seed: int = 0, n_init: int = 10):
    """k-means (k-means++, best of ``n_init``) on every task alone.

    Parameters
    ----------
    tasks : list of array_like or scipy.sparse matrices
        Task t's (n_t, d) data.
    n_clusters : list of int
        h_t per task.
    seed : int, default 0
        Seed of the seeding.
    n_init : int, default 10
        Restarts.

    Returns
    -------
    list of numpy.ndarray
        Per-task labels.
    """
    validate_params(BASELINE_CONSTRAINTS, dict(seed=seed, n_init=n_init), "kmeans_baseline: ")
    tasks, hs = validate_tasks(tasks, n_clusters)
    return [kmeans(X, h, seed=seed, n_init=n_init)[0] for X, h in zip(tasks, hs)]


def pooled_baseline(tasks, n_clusters, method: str = "ncut_snn", seed: int = 0, k=None,
                    labels=None):
    """Multi-task baseline that assumes *completely related* tasks.

    All tasks are pooled into one data set (equivalently: SAMTC with Z = whole task and R ≡ 1 for
    every pair, with neighbours searched across the pooled tasks) and clustered jointly into
    H = max_t h_t clusters (completely related tasks share one label space); each task gets the
    restriction of the pooled partition.

    Parameters
    ----------
    tasks : list of array_like or scipy.sparse matrices
        Task t's (n_t, d) data.
    n_clusters : list of int
        h_t per task.
    method : {"ncut_snn", "kmeans"}, default "ncut_snn"
        "ncut_snn": a grid over k like Ncut-SNN (with ``labels`` the setting of best mean
        per-task accuracy, else the consensus setting); "kmeans".
    seed : int, default 0
        Seed of the k-means.
    k : int, optional
        One neighbourhood size instead of the grid.
    labels : list of array_like, optional
        Per-task true labels for the label-chosen setting.

    Returns
    -------
    list of numpy.ndarray
        Per-task labels (values in 0..H−1).
    """
    validate_params(BASELINE_CONSTRAINTS, dict(method=method, seed=seed, k=k), "pooled_baseline: ")
    tasks, hs = validate_tasks(tasks, n_clusters, labels)
    labels = validate_labels(labels, tasks)
    sizes = [X.shape[0] for X in tasks]
    if any(sp.issparse(X) for X in tasks):
        P = sp.vstack([sp.csr_matrix(X) for X in tasks]).tocsr()
    else:
        P = np.vstack(tasks)
    H = max(hs)
    if method == "kmeans":
        lab = kmeans(P, H, seed=seed)[0]
    else:   # "ncut_snn" (the declared options)
        if k is not None:
            lab = ncut_snn(P, H, k=k, seed=seed)
        else:
            labs, _ = ncut_snn_grid(P, H, seed)
            if labels is None:
                lab = labs[select_setting(labs)]
            else:  # label ids are per task: score each task on its own, average
                cut = np.cumsum(sizes)[:-1]
                score = [np.mean([metrics.clustering_accuracy(y, l) for y, l in zip(labels, np.split(g, cut))])
                         for g in labs]
                lab = labs[int(np.argmax(score))]
    return np.split(lab, np.cumsum(sizes)[:-1])
