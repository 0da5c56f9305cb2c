"""SAMTC for the common user path: ``SAMTC(n_clusters).fit(tasks).labels_``.

A thin object over :func:`tandem.inference.samtc.algorithm.samtc` (the paper's algorithm,
deterministic for a seed) with good defaults, plus the Pyro generative model of the same
tasks (:func:`tandem.inference.samtc.model_fit.fit_model`) for ``to_inference_data()``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tandem.inference.params import TandemEstimator, own_params
from tandem.inference.samtc.algorithm import SAMTC_CONSTRAINTS, SAMTCResult, samtc, validate_tasks
from tandem.inference.samtc.model_fit import ModelFit, fit_model
from tandem.inference.samtc.task_checks import _ValidatedTasks
from tandem.inference.validation import check_int_range, like_input

__all__ = ["SAMTC"]


class SAMTC(TandemEstimator):
    r"""Self-adapted multi-task clustering of T partially related tasks.

    ``SAMTC(n_clusters=[h_1, ..., h_T], ...).fit(tasks)`` clusters every task (rows of
    ``tasks[t]``, dense or scipy.sparse, one feature space). The defaults are the paper's
    algorithm with the label-free choice of the neighbourhood sizes; every option goes to
    :func:`tandem.inference.samtc.algorithm.samtc`, whose docstring gives the measured reasons
    behind each default.

    Follows the estimator contract (:mod:`tandem.inference.params`): every option is a keyword
    parameter with a declared constraint (checked at construction and in ``fit``),
    ``get_params``/``set_params``/``clone`` work, an unknown keyword is a ``TypeError``, and
    methods that need a fit raise :class:`tandem.NotFittedError` before it.

    Parameters
    ----------
    n_clusters : list of int
        h_t ≥ 2 per task.
    variant : {"full", "nr", "ns"}, default "full"
        Full SAMTC, without relatedness ("nr"), or without subtask selection ("ns").
    k_self, k_src : int or list of int, optional
        Own-task / source neighbourhood sizes; ``None`` → the paper's grid.
    select : {"label-free", "labels"}, default "label-free"
        How the grid setting is chosen; "labels" needs ``fit(tasks, labels=...)``.
    reduce_dim : int, optional
        Dimensions of the density steps' LSA/PCA space (``None`` → min(d, 10)).
    seed : int, default 0
        Seed of the k-means restarts and the SVD start vector.
    kmm_B, kmm_eps : float, default 10.0 and 0.5
        Kernel mean matching's weight bound and sum tolerance.
    init_labels : list of array_like, optional
        Initial partitions (default Ncut-SNN).
    js_tau : float or None, default 0.0
        Absolute JS test of step 1 (``None``: none).
    calibrate_R : bool, default True
        Relatedness relative to the target's own two-halves KMM support.
    edges : {"mutual", "symmetric"}, default "mutual"
        Own-task kNN edges.
    pairing : {"mutual", "close"}, default "mutual"
        Which cluster pairs step 1 keeps.
    transfer : {"augment", "reweight"}, default "augment"
        Source instances as graph nodes, or re-weighting of the target's edges only.
    js_bandwidth : {"separate", "pooled"}, default "separate"
        KDE bandwidths of step 1.
    source_rows : {"all", "subtask"}, default "all"
        Target points that get source neighbour lists.
    node_reach : {"k", "paired"}, default "k"
        Target neighbourhood of a transferred source node.

    Attributes
    ----------
    labels\_ : list of numpy.ndarray
        Per task, (n_t,) cluster labels in 0..h_t − 1.
    tasks\_ : list
        The validated tasks the fit used: float64 copies (dense arrays, or CSR matrices with
        unit-norm rows), never the caller's objects.
    R\_ : numpy.ndarray
        (T, T) relatedness, R_[t, s] of source s for target t (diagonal 1).
    reusable\_ : dict
        {(t, s): (n_s,) bool}, the source instances SAMTC transfers to t.
    result\_ : tandem.inference.samtc.algorithm.SAMTCResult
        The full result.
    """

    _parameter_constraints = SAMTC_CONSTRAINTS

    def __init__(self, n_clusters, *, variant: str = "full", k_self=None, k_src=None,
                 select: str = "label-free", reduce_dim: int | None = None, seed: int = 0, kmm_B: float = 10.0,
                 kmm_eps: float = 0.5, init_labels=None, js_tau: float | None = 0.0, calibrate_R: bool = True,
                 edges: str = "mutual", pairing: str = "mutual", transfer: str = "augment",
                 js_bandwidth: str = "separate", source_rows: str = "all", node_reach: str = "k"):
        if isinstance(n_clusters, (int, np.integer)) or not hasattr(n_clusters, "__len__"):
            raise TypeError(f"n_clusters: expected one cluster number per task (a list), got {n_clusters!r}")
        self.n_clusters, self.variant, self.k_self, self.k_src = n_clusters, variant, k_self, k_src
        self.select, self.reduce_dim, self.seed, self.kmm_B, self.kmm_eps = select, reduce_dim, seed, kmm_B, kmm_eps
        self.init_labels, self.js_tau, self.calibrate_R, self.edges = init_labels, js_tau, calibrate_R, edges
        self.pairing, self.transfer, self.js_bandwidth = pairing, transfer, js_bandwidth
        self.source_rows, self.node_reach = source_rows, node_reach
        self._validate_params()

    @property
    def options(self) -> dict:
        """The options passed on to :func:`tandem.inference.samtc.algorithm.samtc`."""
        p = self.get_params(deep=False)
        for n in ("n_clusters", "variant", "select", "seed"):
            p.pop(n)
        return p

    def fit(self, tasks, labels=None) -> "SAMTC":
        """Cluster the tasks.

        Parameters
        ----------
        tasks : list of array_like or scipy.sparse matrices
            Task t's (n_t, d) data, one feature space.
        labels : list of array_like, optional
            Per-task true labels, used only by ``select="labels"``.

        Returns
        -------
        SAMTC
            ``self``, fitted.
        """
        self._validate_params()
        # the validated float64 copies (plain arrays / CSR; never the caller's objects: a DataFrame
        # could not be saved, and a later change to the caller's array would change the fit);
        # samtc runs on them as they are, without validating them a second time (O(data)), and
        # checks the labels against them
        tasks, hs = validate_tasks(tasks, list(self.n_clusters))
        tasks = [X.copy() for X in tasks]
        self.result_: SAMTCResult = samtc(_ValidatedTasks(tuple(tasks), tuple(hs)), hs, variant=self.variant,
                                          select=self.select, labels=labels, seed=self.seed, **self.options)
        self.tasks_ = tasks
        self.labels_ = self.result_.labels
        self.R_ = self.result_.R
        self.reusable_ = self.result_.reusable
        # the state of a refit derives from this fit only: the generative model fitted to the
        # previous tasks goes, and with it its Pyro parameters (param_store_ survived a refit and
        # was saved with the new fit, as if it belonged to it)
        self.model_fit_ = None
        self.__dict__.pop("param_store_", None)
        return self

    def fit_predict(self, tasks, labels=None) -> list:
        """Fit and return the cluster labels.

        Parameters
        ----------
        tasks : list of array_like or scipy.sparse matrices
            Task t's (n_t, d) data.
        labels : list of array_like, optional
            Per-task true labels for ``select="labels"``.

        Returns
        -------
        list of numpy.ndarray or torch.Tensor
            ``fit(tasks, labels).labels_``, each in its task's container type (the estimator
            contract: numpy in → numpy out, a tensor task in → an int64 tensor on its device).
            The fitted ``labels_`` stay numpy arrays.
        """
        self.fit(tasks, labels)
        return [like_input(y, X) for y, X in zip(self.labels_, tasks)]

    @own_params
    def fit_model(self, **kwargs) -> ModelFit:
        """Fit the Pyro generative model (the shared-atom partial mixture) to the fitted tasks.

        Parameters
        ----------
        **kwargs
            Passed to :func:`tandem.inference.samtc.model_fit.fit_model`, e.g. ``num_steps``,
            ``restarts``.

        Returns
        -------
        tandem.inference.samtc.model_fit.ModelFit
            The fitted model.
        """
        self._check_fitted()
        if any(sp.issparse(X) for X in self.tasks_):
            raise ValueError("tasks: the generative model is a Gaussian mixture in R^d and needs dense "
                             "features; reduce sparse (text) tasks first, e.g. with "
                             "tandem.inference.samtc.steps.reduce_dimension")
        tasks, hs = validate_tasks(self.tasks_, list(self.n_clusters))
        self.model_fit_ = fit_model(tasks, hs, seed=self.seed, **kwargs)
        return self.model_fit_

    @own_params
    def to_inference_data(self, num_samples: int = 100, **fit_kwargs):
        """Posterior of the generative model as ArviZ data (fitting it first if needed).

        Continuous sites come from the guide; cluster labels y_t, typical flags u_t and slot links
        a_t from their exact conditional posterior (dense features only; h_t slots per task). See
        :meth:`tandem.inference.samtc.model_fit.ModelFit.to_inference_data` for the groups.

        Parameters
        ----------
        num_samples : int, default 100
            Number of joint draws.
        **fit_kwargs
            Passed to :meth:`fit_model` when the model is not yet fitted.

        Returns
        -------
        arviz.InferenceData or xarray.DataTree
            The export, in the data's units.
        """
        self._check_fitted()
        check_int_range(num_samples, "num_samples", 1)   # before a model fit replaces model_fit_
        if self.model_fit_ is None or fit_kwargs:
            self.fit_model(**fit_kwargs)
        return self.model_fit_.to_inference_data(num_samples=num_samples, seed=self.seed)

    def _check_fitted(self):
        super()._check_fitted("result_", "fit(tasks)")
