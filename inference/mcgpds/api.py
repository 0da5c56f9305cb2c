"""McGPDS on the user's own data: ``McGPDS().fit(views).predict(...)``.

The common path in one object, with defaults that are safe on any data::

    from tandem.inference.mcgpds import McGPDS

    m = McGPDS(Q=5).fit([Y1, Y2], times=t, sequence_ids=seq)   # numpy or torch, (N, D_k) each
    pred = m.predict(Y1_test, t_test, source=0, target=1)        # generate view 2 from view 1
    pred.mean, pred.var                                          # (N*, D_2), in Y2's units
    idata = m.to_inference_data(num_samples=200)                 # ArviZ, in the data's units

What it does for you:

* **Units.** Each view is centred per column and divided by one scalar (the root mean column
  variance; ``scale="column"`` divides each column by its own standard deviation) before
  fitting, and predictions, predictive variances, posterior-predictive draws and
  log-likelihoods are mapped back. Fits and predictions are therefore the same (to rounding)
  whether the data are in metres or millimetres — with the raw data, multiplying a view by
  1000 changes the fit (the kernels and noise start at unit scale).
* **Safe defaults.** α, ε, β, the time kernels and W (with g) stay at their initial values
  (:data:`tandem.models.mcgpds.SAFE_FIXED`); the mapping kernel, the inducing inputs and the
  variational parameters are learned with the collapsed bound and L-BFGS
  (:func:`tandem.inference.mcgpds.fit.fit_mcgpds`). Pass ``fixed=(...)`` to learn more (β with W
  learned warns: the paper's bound is unbounded in β then).
* **Gaps.** NaN entries in any view (whole frames missing from one view, or some columns
  missing in some frames) are missing data: the likelihood does not score them
  (:mod:`tandem.inference.mcgpds.missing`), the standardisation ignores them,
  :meth:`McGPDS.impute` fills them with predictive means and variances, and ``predict``
  accepts NaN in the source view's test frames. A frame missing in every view is an error.
* **Predictor.** ``predict`` uses the tandem predictor by default
  (:func:`tandem.inference.mcgpds.predictor.calibrated_prediction`: standardised-Y NN
  initialisation, the model's own β, variances calibrated on held-out training sequences):
  the held-out choice (:func:`tandem.inference.mcgpds.predictor_choice.choose_predictor`) between the
  single predictor of lowest held-out training error (one shared-space neighbour, or 5 or 20
  source-space neighbours; ``method="selected"``) and the stack of 12 such predictors and the
  training mean (``method="stacked"``), each scored by cross-validation on the training
  frames; ``method="paper" | "code" | "generative"`` gives the paper's predictors.
"""
from __future__ import annotations

import copy
import inspect
import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import pyro
import torch

from tandem.guides.mcgpds import Guide
from tandem.inference.mcgpds.fit import (
    FIT_GROUPS,
    McGPDSConfig,
    Prediction,
    check_test_sources,
    fit_mcgpds,
    predict_view,
    view_sites,
)
from tandem.inference.mcgpds.missing import check_missing_views, impute_view, standardize_views
from tandem.inference.mcgpds.predictor import select_predictor, stacked_predictor
from tandem.inference.mcgpds.predictor_choice import choose_predictor
from tandem.inference.mcgpds.uncollapsed import set_optimal_inducing
from tandem.inference.mcgpds.view_prediction import PREDICT_VIEW_CONSTRAINTS
from tandem.inference.params import (
    AnyValue,
    Boolean,
    Device,
    InstanceOf,
    Interval,
    Options,
    Seed,
    SequenceOf,
    TandemEstimator,
    check_param,
    own_params,
    validate_params,
)
from tandem.inference.persistence import load_estimator, save_estimator
from tandem.inference.predictive import posterior_predictive, rescale_sites
from tandem.inference.validation import as_tensor, check_int_range, check_time_order, resolve_device, sequence_labels
from tandem.models.kernels import MappingKernel, TimeKernel
from tandem.models.mcgpds import SAFE_FIXED, dims, model

__all__ = ["McGPDS", "McGPDSPrediction", "McGPDSImputation", "DEFAULT_SCHEDULE"]

#: the default L-BFGS schedule of :class:`McGPDS` (3 × [20 variational + 20 model] + 100 joint)
DEFAULT_SCHEDULE = dict(cycles=3, var_iters=20, model_iters=20, joint_iters=100)


@dataclass
class McGPDSPrediction:
    """Prediction of view ``target`` in the user's units (output of :meth:`McGPDS.predict`).

    Attributes
    ----------
    mean : numpy.ndarray or torch.Tensor
        (N*, D_target) predictive mean; numpy arrays, torch tensors if the test input was a tensor.
    var : numpy.ndarray or torch.Tensor
        (N*, D_target) predictive variance.
    raw : tandem.inference.mcgpds.fit.Prediction
        The model-unit prediction (latents, NN indices, ...).
    method : str
        The method asked for ("tandem", "selected", "stacked", "paper", "code" or "generative").
    details : object or None
        The tandem predictors' own output, model units:
        :class:`~tandem.inference.mcgpds.predictor_choice.PredictorChoice` for "tandem" (``chosen`` says
        which predictor, ``scores`` both held-out errors),
        :class:`~tandem.inference.mcgpds.predictor.PredictorSelection` for "selected",
        :class:`~tandem.inference.mcgpds.predictor.StackedPrediction` for "stacked"; ``None`` for
        the paper's predictors.
    """
    mean: np.ndarray | torch.Tensor
    var: np.ndarray | torch.Tensor
    raw: Prediction
    method: str
    details: object = None


@dataclass
class McGPDSImputation:
    """Output of :meth:`McGPDS.impute` (the view's units, numpy arrays, each (N, D)).

    Attributes
    ----------
    values : numpy.ndarray
        (N, D) the training view with every missing entry replaced by its predictive mean.
    mean : numpy.ndarray
        (N, D) the predictive mean at every entry.
    var : numpy.ndarray
        (N, D) the predictive variance (noise included) at every entry.
    missing : numpy.ndarray
        (N, D) boolean, True where the entry was missing (NaN).
    """
    values: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    missing: np.ndarray


#: a positive count, a non-negative count, a positive finite real, a non-negative finite real
_POS_INT = Interval(Integral, 1)
_NONNEG_INT = Interval(Integral, 0)
_POS = Interval(Real, 0, closed="neither")
_NONNEG = Interval(Real, 0)

#: declared constraints of every :class:`tandem.inference.mcgpds.fit.McGPDSConfig` field that
#: :class:`McGPDS` passes through (Q, M, J, fixed are McGPDS's own parameters)
CONFIG_CONSTRAINTS = {
    "mapping_kernel": [Options(("rbfard", "linear")), InstanceOf(MappingKernel)],
    "time_kernel": [None, InstanceOf(TimeKernel), SequenceOf(InstanceOf(TimeKernel))],
    "time_white": [Boolean()], "time_bias": [Boolean()],
    "time_white_var": [_POS], "time_bias_var": [_POS], "time_invwidth": [None, _POS],
    "cycles": [_NONNEG_INT], "var_iters": [_NONNEG_INT], "model_iters": [_NONNEG_INT],
    "joint_iters": [_NONNEG_INT], "held_cycles": [_NONNEG_INT], "held_iters": [_NONNEG_INT],
    "held_joint_iters": [_NONNEG_INT], "lbfgs_max_iter": [_POS_INT], "tol": [None, _POS],
    "precondition": [Boolean()],
    "init": [Options(("pca", "separately"))],
    "init_dims": [None, SequenceOf(_POS_INT)],
    "init_views": [None, AnyValue("arrays used only for the PCA init; checked as arrays by fit_mcgpds")],
    # (0, 1]: the range fit_mcgpds accepts (McGPDSConfig.alpha_init)
    "alpha_init": [Interval(Real, 0, 1, closed="right")], "eps_init": [_POS],
    "beta_init": [Options(("snr",)), _POS, SequenceOf(_POS)],
    "w_init_scale": [_NONNEG], "lam_init": [_POS],
    "private_prior": [Options(("mcgpds", "gplvm"))], "output_layer": [Options(("cgpds", "linear"))],
    "coupling": [Boolean()], "dtype": [Options(("float64",))],
}

#: McGPDSConfig fields that McGPDS exposes as its own keyword parameters
_CONFIG_FIELDS = tuple(n for n in McGPDSConfig.__dataclass_fields__ if n not in ("Q", "M", "J", "fixed"))


def _config_default(name):
    if name in DEFAULT_SCHEDULE:
        return DEFAULT_SCHEDULE[name]
    f = McGPDSConfig.__dataclass_fields__[name]
    return f.default


#: the keywords of :meth:`McGPDS.predict` taken by the tandem predictors themselves
#: (:func:`~tandem.inference.mcgpds.predictor_choice.choose_predictor`,
#: :func:`~tandem.inference.mcgpds.predictor.select_predictor`,
#: :func:`~tandem.inference.mcgpds.predictor.stacked_predictor`); the others go to every candidate's
#: :func:`~tandem.inference.mcgpds.fit.predict_view` (:data:`PREDICT_VIEW_CONSTRAINTS`). ``candidates``,
#: ``stack_candidates`` and ``features`` are checked by those functions (each candidate against
#: :data:`PREDICT_VIEW_CONSTRAINTS` too).
TANDEM_PREDICT_CONSTRAINTS = {
    "tandem": {"candidates": [None, AnyValue("checked by choose_predictor")],
               "stack_candidates": [None, AnyValue("checked by choose_predictor")],
               "include_mean": [Boolean()], "features": [AnyValue("checked by calibrated_prediction")],
               "n_chunks": [_POS_INT]},
    "selected": {"candidates": [None, AnyValue("checked by select_predictor")],
                 "features": [AnyValue("checked by calibrated_prediction")], "n_chunks": [_POS_INT]},
    "stacked": {"candidates": [None, AnyValue("checked by stacked_predictor")], "include_mean": [Boolean()],
                "features": [AnyValue("checked by calibrated_prediction")], "n_chunks": [_POS_INT]},
}
_METHODS = ("tandem", "selected", "stacked", "paper", "code", "generative")


def _check_predict_options(method, seed, kwargs: dict) -> None:
    """The options of :meth:`McGPDS.predict` against their declarations, before any work: ``method``,
    ``seed``, and every keyword (the tandem predictors' own, the rest :func:`predict_view`'s)."""
    check_param([Options(_METHODS)], "method", method, "McGPDS.predict: ")
    check_param([Seed()], "seed", seed, "McGPDS.predict: ")
    own = TANDEM_PREDICT_CONSTRAINTS.get(method, {})
    pv = {n: c for n, c in PREDICT_VIEW_CONSTRAINTS.items() if n not in ("method", "seed")}
    validate_params({**pv, **own}, kwargs, "McGPDS.predict: ")


class McGPDS(TandemEstimator):
    r"""Multi-view collaborative GP dynamical system, fitted on the user's arrays.

    Follows the estimator contract (:mod:`tandem.inference.params`): ``get_params`` /
    ``set_params`` / ``sklearn.base.clone``; every parameter's constraint is declared in
    ``_parameter_constraints`` and checked at construction and in :meth:`fit`; the learned
    state is in ``fitted_``, ``scalers_``, ``param_store_`` (its own Pyro parameters);
    ``predict``/``save``/``to_inference_data`` before ``fit`` raise
    :class:`tandem.NotFittedError`.

    Parameters
    ----------
    Q : int, optional
        Latent dimension (default ``min(5, N − 1, Σ_k D_k)``). Keyword-only, like every parameter.
    M : int, optional
        Inducing points (default ``min(50, N)``).
    J : int, default 1
        Basis functions g_j.
    fixed : sequence or set of str, optional
        Parameter groups held at their initial values, out of
        :data:`tandem.inference.mcgpds.fit_config.FIT_GROUPS` ("alpha", "eps", "beta", "time", "W",
        "kernel", "inducing"; fixing "W" also switches g off); default ``None`` =
        :data:`tandem.models.mcgpds.SAFE_FIXED` without g.
    scale : str, default "view"
        "view" (one scalar per view) or "column" (per-column standard deviation).
    seed : int, default 0
        Seeds the initialisation and the optimiser.
    progress : bool, default False
        Show progress bars.
    device : str or torch.device, optional
        Where the fit runs ("cpu", "cuda", ...); default ``None`` = the device of the
        views given to :meth:`fit` (the CPU for numpy arrays). Predictions come back as numpy
        arrays for numpy test inputs and as tensors on the test input's device otherwise.
    **config
        Any other :class:`tandem.inference.mcgpds.fit.McGPDSConfig` field (schedule,
        kernels, private prior, ...), each a parameter of its own (``get_params`` lists them):
        e.g. ``time_kernel`` (``None`` = the paper's :func:`tandem.models.kernels.paper_time_kernel`,
        a :class:`~tandem.models.kernels.TimeKernel` for the shared and every private kernel, or
        a list of V + 1 of them, shared first) and ``mapping_kernel``
        (:class:`~tandem.models.kernels.RBFARD` / :class:`~tandem.models.kernels.LinearARD`);
        the schedule defaults to :data:`DEFAULT_SCHEDULE`.

    Attributes
    ----------
    fitted\_ : tandem.inference.mcgpds.fit.McGPDSFitted
        The trained model, in standardised units.
    scalers\_ : list of tandem.inference.distances.Standardizer
        One per view: the standardisation of ``scale``.
    param_store\_ : pyro.infer.ParamStoreDict
        This object's own Pyro parameters.

    Raises
    ------
    TypeError
        An unknown keyword.
    ValueError
        A parameter outside its declared constraint.
    """

    _parameter_constraints = {
        "Q": [None, _POS_INT], "M": [None, _POS_INT], "J": [_POS_INT],
        # the groups fit_mcgpds can hold fixed (g follows W; the variational parameters never)
        "fixed": [None, SequenceOf(Options(FIT_GROUPS), nonempty=False, sets=True)],
        "scale": [Options(("view", "column"))], "seed": [Seed()], "progress": [Boolean()],
        "device": [None, Device()], **CONFIG_CONSTRAINTS,
    }

    def __init__(self, *, Q: int | None = None, M: int | None = None, J: int = 1, fixed=None,
                 scale: str = "view", seed: int = 0, progress: bool = False, device=None, **config):
        bad = set(config) - set(_CONFIG_FIELDS)
        if bad:
            raise TypeError(f"McGPDS: unknown option(s) {sorted(bad)}; expected McGPDS parameters or "
                            f"McGPDSConfig fields {sorted(_CONFIG_FIELDS)}")
        self.Q, self.M, self.J, self.fixed, self.scale = Q, M, J, fixed, scale
        self.seed, self.progress, self.device = seed, progress, device
        for name in _CONFIG_FIELDS:
            setattr(self, name, config.get(name, _config_default(name)))
        self._validate_params()
        if isinstance(config.get("mapping_kernel"), str):
            # stored as given (the estimator contract); the objects of models.kernels replace it
            warnings.warn(f"McGPDS(mapping_kernel={config['mapping_kernel']!r}): the strings are deprecated "
                          "aliases; pass tandem.models.kernels.RBFARD() or LinearARD()", DeprecationWarning,
                          stacklevel=2)

    @classmethod
    def _get_param_names(cls):
        return sorted(("Q", "M", "J", "fixed", "scale", "seed", "progress", "device") + _CONFIG_FIELDS)

    def __repr__(self, N_CHAR_MAX=700):
        # the parameters that differ from their defaults (the McGPDSConfig fields are not in the
        # signature, so scikit-learn's repr would list every one of them)
        sig = inspect.signature(type(self).__init__).parameters
        changed = []
        for name, value in self.get_params(deep=False).items():
            default = sig[name].default if name in sig else _config_default(name)
            if repr(value) != repr(default):
                changed.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(changed)})"

    @property
    def config(self) -> dict:
        """The McGPDSConfig fields of this object (schedule, kernels, ...) as a dict."""
        return {name: getattr(self, name) for name in _CONFIG_FIELDS}

    def _fixed(self) -> tuple:
        return tuple(sorted(SAFE_FIXED - {"g"})) if self.fixed is None else tuple(self.fixed)

    # ------------------------------------------------------------------ fit
    @own_params
    def fit(self, views, times=None, sequence_ids=None) -> "McGPDS":
        """Fit on time-aligned views (standardised per view, see ``scale``).

        Parameters
        ----------
        views : list of array_like
            V arrays (N, D_k), numpy or torch; NaN entries are missing (masked likelihood, see
            :meth:`impute`), inf is an error.
        times : array_like, optional
            (N,) time stamps (default 0, 1, …, N−1). Within a sequence the frames must be in
            increasing time order.
        sequence_ids : array_like, optional
            (N,) sequence labels (default one sequence; any hashable labels, see
            :func:`tandem.inference.validation.sequence_labels`).

        Returns
        -------
        McGPDS
            ``self``.

        Raises
        ------
        ValueError
            Views with different row counts, fewer than 2 frames, a constant view, or times of
            the wrong length or out of order.
        """
        self._validate_params()
        if not isinstance(views, (list, tuple)) or not views:
            raise ValueError("views: expected a non-empty list of (N, D_k) arrays")
        dev = resolve_device(self.device, views, times)
        # NaN entries are missing (masked likelihood, see impute); inf is refused by fit_mcgpds
        vs = [as_tensor(Y, f"views[{k}]", ndim=2, detach=True, finite=False).to(dev) for k, Y in enumerate(views)]
        Ns = [int(Y.shape[0]) for Y in vs]
        if len(set(Ns)) != 1:
            raise ValueError(f"views: every view must have the same number of rows (frames), got {Ns}")
        check_missing_views(vs)
        N = Ns[0]
        if N < 2:
            raise ValueError(f"views: expected at least 2 frames (rows) to fit a latent space, got {N}")
        t = torch.arange(N, dtype=torch.float64, device=dev) if times is None \
            else as_tensor(times, "times", ndim=1, detach=True).to(dev)
        if t.numel() != N:
            raise ValueError(f"times: expected {N} time stamps (one per row), got {t.numel()}")
        # "view": one scalar per view keeps the columns' relative sizes (the protocol's scaling);
        # refuses never-observed columns and constant views (the one check of both estimators)
        scalers, zs = standardize_views(vs, "matrix" if self.scale == "view" else "column")
        D = sum(int(Y.shape[1]) for Y in vs)
        Q = min(5, N - 1, D) if self.Q is None else self.Q
        M = min(50, N) if self.M is None else self.M
        if sequence_ids is not None:
            sequence_ids = torch.as_tensor(sequence_labels(sequence_ids, N, t), device="cpu")
        else:
            check_time_order(t, None)
        cfg = McGPDSConfig(Q=Q, M=M, J=self.J, fixed=self._fixed(), **self.config)
        fitted = fit_mcgpds(zs, t, sequence_ids=sequence_ids, config=cfg, seed=self.seed,
                            progress=self.progress, device=dev)
        # every fitted attribute together, only once the fit has succeeded: a failed re-fit
        # leaves the previous fit whole (its scalers belong to its fitted_)
        self.fitted_, self.scalers_, self._times_given = fitted, scalers, times is not None
        return self

    def _check_fitted(self):
        super()._check_fitted("fitted_", "fit(views, ...)")

    # ------------------------------------------------------------------ predict
    @own_params
    def predict(self, source_view_test, t_test=None, source: int = 0, target: int = 1, *,
                sources=None, method: str = "tandem", **kwargs) -> McGPDSPrediction:
        """Generate view ``target`` for test frames of view ``source`` (N*, D_source), or of
        several observed views.

        Parameters
        ----------
        source_view_test : array (N*, D_source), or with ``sources`` the test views
            One array per source in the order of ``sources``, a list of all V views (entries
            not in ``sources`` ignored, may be ``None``), or a dict ``{view index: array}``.
        t_test : array (N*,), optional
            Time stamps of the test frames (one new sequence; default 0, 1, …, required if
            ``fit`` was given ``times``).
        source : int, default 0
            Source view (ignored when ``sources`` is given).
        target : int, default 1
            Target view.
        sources : sequence of int, optional
            Condition on several observed views (V ≥ 3): their test latents are fitted
            jointly (one shared latent), the Y-space nearest-neighbour search uses their
            standardised columns side by side. Same predictors as with one source.
        method : str
            "tandem" (default: "selected" or "stacked", whichever has the lower held-out error on
            the training frames — the selection's nested-cross-validated, the stack's
            cross-validated; :func:`tandem.inference.mcgpds.predictor_choice.choose_predictor`, the
            choice in ``details``), "selected" (the calibrated predictor chosen on held-out
            training frames among :data:`tandem.inference.mcgpds.predictor.TANDEM_CANDIDATES`,
            :func:`tandem.inference.mcgpds.predictor.select_predictor`; ``candidates={label:
            {...}}`` gives other choices, a single entry fixes the predictor), "stacked" (every
            candidate of :data:`tandem.inference.mcgpds.predictor.TANDEM_STACK_CANDIDATES` and the
            training mean, mixed with convex weights fitted on held-out training frames,
            :func:`tandem.inference.mcgpds.predictor.stacked_predictor`), or "paper", "code",
            "generative" (:func:`tandem.inference.mcgpds.fit.predict_view`).
        **kwargs
            Passed to that function; each is checked first against its declaration
            (:data:`TANDEM_PREDICT_CONSTRAINTS` for the tandem predictors' own,
            :data:`tandem.inference.mcgpds.view_prediction.PREDICT_VIEW_CONSTRAINTS` for the rest,
            e.g. ``test_iters``, ``k_neighbours``, ``extra_var``, ``nn_index_y``). ``seed`` seeds
            this prediction (default: the estimator's ``seed``).

        Returns
        -------
        McGPDSPrediction
            Mean and variance (N*, D_target) in the target view's units.

        Raises
        ------
        ValueError
            A bad view index (the target among the sources), wrong columns, rows that differ
            between sources, a missing ``t_test``, or a keyword outside its declaration
            (:class:`tandem.inference.params.InvalidParameterError`, also a ``TypeError``).
        TypeError
            An unknown keyword.
        """
        self._check_fitted()
        V = self.fitted_.data.V
        seed = kwargs.pop("seed", self.seed)       # a seed of this prediction, else the estimator's
        _check_predict_options(method, seed, kwargs)
        check_int_range(target, "target", 0, V - 1)
        if sources is None:
            check_int_range(source, "source", 0, V - 1)
            if source == target:
                raise ValueError(f"target: expected a view other than source={source}")
            srcs, tests = [source], [source_view_test]
        else:
            if isinstance(sources, (str, bytes)) or not hasattr(sources, "__iter__"):
                raise ValueError(f"sources: expected a sequence of view indices, got {sources!r}")
            srcs = list(sources)
            if not srcs:
                raise ValueError("sources: expected at least one source view")
            for i, k in enumerate(srcs):
                check_int_range(k, f"sources[{i}]", 0, V - 1)
            srcs = [int(k) for k in srcs]
            if len(set(srcs)) != len(srcs):
                raise ValueError(f"sources: expected distinct views, got {srcs}")
            if target in srcs:
                raise ValueError(f"sources: the target view {target} cannot be a source")
            tv = source_view_test
            if isinstance(tv, dict):
                missing = [k for k in srcs if k not in tv]
                if missing:
                    raise ValueError(f"source_view_test: no test data for source view(s) {missing}")
                tests = [tv[k] for k in srcs]
            elif isinstance(tv, (list, tuple)) and len(tv) == len(srcs):
                tests = list(tv)
            elif isinstance(tv, (list, tuple)) and len(tv) == V:
                tests = [tv[k] for k in srcs]
            else:
                raise ValueError(f"source_view_test: with sources={srcs} expected a list of {len(srcs)} arrays "
                                 f"(one per source), a list of all {V} views, or a dict view -> array")
        as_torch = isinstance(tests[0], torch.Tensor)
        dev = self.fitted_.data.device
        raws, names = [], []
        for k, Y in zip(srcs, tests):
            nm = "source_view_test" if sources is None else f"source_view_test (view {k})"
            # NaN entries of the test frames are missing: masked in the test-time latent step and the NN searches
            Ys = as_tensor(Y, nm, ndim=2, detach=True, finite=False).to(dev)
            D_s = self.fitted_.data.out_dims[k]
            if Ys.shape[1] != D_s:
                raise ValueError(f"{nm}: expected {D_s} columns (view {k}), got {Ys.shape[1]}")
            if Ys.shape[0] == 0:
                raise ValueError(f"{nm}: expected at least one test frame (row), got 0")
            if raws and Ys.shape[0] != raws[0].shape[0]:
                raise ValueError(f"{nm}: expected {raws[0].shape[0]} rows like the other sources, got {Ys.shape[0]}")
            raws.append(Ys)
            names.append(nm)
        check_test_sources(raws, names)     # inf refused per source, named; all-missing frames across sources
        Zs = [self.scalers_[k].transform(Ys) for k, Ys in zip(srcs, raws)]
        if t_test is not None:
            t_test = as_tensor(t_test, "t_test", ndim=1, detach=True).to(dev)
            check_time_order(t_test, None, times_name="t_test")
        if t_test is None:
            if self._times_given:
                raise ValueError("t_test: fit was given times, so give the test frames' time stamps too")
            t_test = torch.arange(Zs[0].shape[0], dtype=torch.float64, device=dev)
        src_arg, Z_arg = (srcs[0], Zs[0]) if sources is None else (srcs, Zs)
        details = None
        if method == "tandem":
            details = choose_predictor(self.fitted_, Z_arg, t_test, src_arg, target, seed=seed, **kwargs)
            raw = details.prediction
        elif method == "selected":
            details = select_predictor(self.fitted_, Z_arg, t_test, src_arg, target, seed=seed, **kwargs)
            raw = details.result.prediction
        elif method == "stacked":
            details = stacked_predictor(self.fitted_, Z_arg, t_test, src_arg, target, seed=seed, **kwargs)
            raw = details.prediction
        else:
            raw = predict_view(self.fitted_, Z_arg, t_test, src_arg, target, method=method, seed=seed, **kwargs)
        st = self.scalers_[target]
        mean, var = st.inverse(raw.mean), st.inverse_var(raw.var)
        if as_torch:
            mean, var = mean.to(tests[0].device), var.to(tests[0].device)
        else:
            mean, var = mean.detach().cpu().numpy(), var.detach().cpu().numpy()
        return McGPDSPrediction(mean, var, raw, method, details)

    # ------------------------------------------------------------------ missing entries
    @own_params
    def impute(self, view: int) -> McGPDSImputation:
        """Impute the missing (NaN) entries of training view ``view`` with predictive variances.

        For every training frame n the view's fitted predictive at its own latent
        ``q(x_n^(k)) = N(μ_n^(k), diag S_n^(k))`` is
        ``E[y_nd] = ψ1(x_n) b_d`` and ``Var[y_nd] = ψ0 − tr(C_d ψ2) + b_dᵀ ψ2 b_d − E[y_nd]² + β⁻¹``
        (:func:`tandem.inference.mcgpds.bound.predict_moments`, h-only output layer as in the tandem
        predictor, with the masked posterior of
        :func:`tandem.inference.mcgpds.missing.masked_view_posterior`: each column's q(v_d) uses
        only the frames where it is observed), mapped back to the view's units. Through its
        latent, a frame missing from this view is informed by the other views (the shared
        latent) and by the neighbouring frames (the time kernels).

        Parameters
        ----------
        view : int
            The training view, 0 ≤ view < V.

        Returns
        -------
        McGPDSImputation
            ``values`` (N, D): the training view with its missing entries replaced by the
            predictive mean; ``mean``, ``var`` (N, D): the predictive moments at every entry
            (observed ones too); ``missing`` (N, D) boolean. numpy arrays.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        ValueError
            If ``view`` is not a view index.
        """
        self._check_fitted()
        f = self.fitted_
        check_int_range(view, "view", 0, f.data.V - 1)
        from tandem.inference.mcgpds.fit import constant_hyperparams
        with torch.no_grad():
            hp = constant_hyperparams(f)
            out = impute_view(f.data.views[view], f.mu[view], f.s_diag[view], hp["views"][view],
                              f.data.mapping_kernel, self.scalers_[view])
        return McGPDSImputation(*(x.cpu().numpy() for x in out))

    # ------------------------------------------------------------------ save / load
    def save(self, path) -> None:
        """Write the fitted object to ``path`` in tandem's safe format, atomically.

        Plain tensors + JSON (:func:`tandem.inference.persistence.save_estimator`); a kill or full
        disk during the write leaves the previous file intact.

        Parameters
        ----------
        path : str or path
            The file written.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        ValueError
            ``path`` is a folder, or its folder is missing or cannot be written (checked first).
        """
        self._check_fitted()
        save_estimator(self, path)   # checks the path first (persistence.check_save_path)

    @classmethod
    def load(cls, path, map_location=None) -> "McGPDS":
        """Read an object written by :meth:`save` (ready to ``predict``); nothing is unpickled.

        Parameters
        ----------
        path : str or path
            The file read.
        map_location : str or torch.device, optional
            Puts every tensor on that device (e.g. "cpu" to read a CUDA fit on a machine without a GPU).

        Returns
        -------
        McGPDS
            The fitted object.

        Raises
        ------
        ValueError
            A damaged or foreign file, naming it.
        """
        m = load_estimator(cls, path, map_location)
        if map_location is not None and "device" in vars(m):
            m.device = None                 # the tensors' (mapped) device decides
        return m

    # ------------------------------------------------------------------ ArviZ
    @own_params
    def to_inference_data(self, num_samples: int = 100, seed: int = 0):
        """Posterior and posterior-predictive draws of the fitted model as ``arviz.InferenceData``.

        Latents (``X_s``; ``X_0``, ``v_0``, ``u_0``, ... per view) come from the hand-written guide with the
        optimal q(V), q(U) of the collapsed fit; ``y_k`` (posterior predictive and observed
        data) are in the user's units and ``log_likelihood`` is the density of the data in those
        units (the model-unit log density minus log of the scale per entry); a missing (NaN) entry
        of a view is NaN in ``log_likelihood`` and ``observed_data`` (not a point). Resets Pyro's
        parameter store to this fit: its own store (``param_store_``); the user's global Pyro
        parameter store is left as it was.

        Parameters
        ----------
        num_samples : int, default 100
            Posterior draws.
        seed : int, default 0
            Seed of the draws.

        Returns
        -------
        arviz.InferenceData or xarray.DataTree
            The installed ArviZ's object (:func:`tandem.inference.predictive.posterior_predictive`),
            with the groups posterior, posterior_predictive, observed_data, log_likelihood.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        """
        self._check_fitted()
        f = self.fitted_
        data = copy.copy(f.data)
        data.init = dict(f.params)             # the model/guide create their params from these
        pyro.clear_param_store()
        set_optimal_inducing(data)
        idata = posterior_predictive(model, Guide(), data, num_samples=num_samples, seed=seed,
                                     dims=dims(data.V))
        return rescale_sites(idata, view_sites(self.scalers_))
