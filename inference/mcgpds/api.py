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
* **Predictor.** ``predict`` uses the tandem predictor by default
  (:func:`tandem.inference.mcgpds.predictor.calibrated_prediction`: standardised-Y NN
  initialisation, the model's own β, variances calibrated on held-out training sequences);
  ``method="paper" | "code" | "generative"`` gives the paper's predictors.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pyro
import torch

from tandem.guides.mcgpds import Guide
from tandem.inference.distances import Standardizer
from tandem.inference.mcgpds.bound import set_optimal_inducing
from tandem.inference.mcgpds.fit import (
    McGPDSConfig,
    McGPDSFitted,
    Prediction,
    fit_mcgpds,
    fitted_from_dict,
    fitted_to_dict,
    predict_view,
    view_sites,
)
from tandem.inference.mcgpds.predictor import calibrated_prediction
from tandem.inference.predictive import posterior_predictive, rescale_sites
from tandem.inference.validation import as_tensor, check_int_range, resolve_device
from tandem.models.kernels import as_mapping_kernel
from tandem.models.mcgpds import SAFE_FIXED, dims, model

__all__ = ["McGPDS", "McGPDSPrediction", "DEFAULT_SCHEDULE"]

#: the default L-BFGS schedule of :class:`McGPDS` (3 × [20 variational + 20 model] + 100 joint)
DEFAULT_SCHEDULE = dict(cycles=3, var_iters=20, model_iters=20, joint_iters=100)


@dataclass
class McGPDSPrediction:
    """Prediction of view ``target`` in the user's units: ``mean``, ``var`` (N*, D_target),
    numpy arrays (torch tensors if the test input was a tensor); ``raw``: the model-unit
    :class:`tandem.inference.mcgpds.fit.Prediction` (latents, NN indices, ...)."""
    mean: np.ndarray | torch.Tensor
    var: np.ndarray | torch.Tensor
    raw: Prediction
    method: str


class McGPDS:
    """Multi-view collaborative GP dynamical system, fitted on the user's arrays.

    Parameters (keyword-only)
    -------------------------
    Q : latent dimension (default ``min(5, N − 1, Σ_k D_k)``); M : inducing points
        (default ``min(50, N)``); J : basis functions g_j.
    fixed : parameter groups held at their initial values (default
        :data:`tandem.models.mcgpds.SAFE_FIXED`).
    scale : "view" (default; one scalar per view) or "column" (per-column standard deviation).
    seed : seeds the initialisation and the optimiser; progress : show progress bars.
    device : where the fit runs ("cpu", "cuda", ...); default ``None`` = the device of the
        views given to :meth:`fit` (the CPU for numpy arrays). Predictions come back as numpy
        arrays for numpy test inputs and as tensors on the test input's device otherwise.
    **config : any other :class:`tandem.inference.mcgpds.fit.McGPDSConfig` field (schedule,
        kernels, private prior, ...); the schedule defaults to :data:`DEFAULT_SCHEDULE`.
    """

    def __init__(self, *, Q: int | None = None, M: int | None = None, J: int = 1, fixed=None,
                 scale: str = "view", seed: int = 0, progress: bool = False, device=None, **config):
        if scale not in ("view", "column"):
            raise ValueError(f"scale: expected 'view' or 'column', got {scale!r}")
        if Q is not None:
            check_int_range(Q, "Q", 1)
        if M is not None:
            check_int_range(M, "M", 1)
        check_int_range(J, "J", 1)
        bad = set(config) - set(McGPDSConfig.__dataclass_fields__)
        if bad:
            raise TypeError(f"McGPDS: unknown option(s) {sorted(bad)}; expected McGPDSConfig fields")
        fixed = tuple(sorted(SAFE_FIXED - {"g"})) if fixed is None else tuple(fixed)
        self.Q, self.M, self.J, self.fixed, self.scale = Q, M, J, fixed, scale
        self.seed, self.progress = int(seed), bool(progress)
        self.device = None if device is None else str(resolve_device(device))
        if "mapping_kernel" in config:
            # a models.kernels.MappingKernel; the strings "rbfard" / "linear" are deprecated aliases
            config["mapping_kernel"] = as_mapping_kernel(config["mapping_kernel"], stacklevel=3)
        self.config = {**DEFAULT_SCHEDULE, **config}
        self.fitted_: McGPDSFitted | None = None
        self.scalers_: list[Standardizer] | None = None

    def __repr__(self):
        return (f"McGPDS(Q={self.Q}, M={self.M}, J={self.J}, fixed={self.fixed}, scale={self.scale!r}, "
                f"seed={self.seed})" + ("" if self.fitted_ is None else " [fitted]"))

    # ------------------------------------------------------------------ fit
    def _scaler(self, Y: torch.Tensor, k: int) -> Standardizer:
        # "view": one scalar per view keeps the columns' relative sizes (the protocol's scaling)
        st = Standardizer(Y, per="matrix" if self.scale == "view" else "column")
        if not bool((Y != Y[:1]).any()):
            raise ValueError(f"views[{k}]: every entry is the same value; a constant view carries no information "
                             "to fit (drop it)")
        return st

    def fit(self, views, times=None, sequence_ids=None) -> "McGPDS":
        """Fit on time-aligned views (list of (N, D_k) arrays, numpy or torch) at ``times`` (N,)
        (default 0, 1, …, N−1) with sequences ``sequence_ids`` (N,) (default one sequence).
        Returns ``self``."""
        if not isinstance(views, (list, tuple)) or not views:
            raise ValueError("views: expected a non-empty list of (N, D_k) arrays")
        dev = resolve_device(self.device, views, times)
        vs = [as_tensor(Y, f"views[{k}]", ndim=2).to(dev) for k, Y in enumerate(views)]
        Ns = [int(Y.shape[0]) for Y in vs]
        if len(set(Ns)) != 1:
            raise ValueError(f"views: every view must have the same number of rows (frames), got {Ns}")
        N = Ns[0]
        if N < 2:
            raise ValueError(f"views: expected at least 2 frames (rows) to fit a latent space, got {N}")
        t = torch.arange(N, dtype=torch.float64, device=dev) if times is None \
            else as_tensor(times, "times", ndim=1).to(dev)
        if t.numel() != N:
            raise ValueError(f"times: expected {N} time stamps (one per row), got {t.numel()}")
        self.scalers_ = [self._scaler(Y, k) for k, Y in enumerate(vs)]
        zs = [st.transform(Y) for st, Y in zip(self.scalers_, vs)]
        D = sum(int(Y.shape[1]) for Y in vs)
        Q = min(5, N - 1, D) if self.Q is None else self.Q
        M = min(50, N) if self.M is None else self.M
        cfg = McGPDSConfig(Q=Q, M=M, J=self.J, fixed=self.fixed, **self.config)
        self.fitted_ = fit_mcgpds(zs, t, sequence_ids=sequence_ids, config=cfg, seed=self.seed,
                                  progress=self.progress, device=dev)
        self._times_given = times is not None
        return self

    def _check_fitted(self):
        if self.fitted_ is None:
            raise RuntimeError("McGPDS: call fit(views, ...) before predict / to_inference_data")

    # ------------------------------------------------------------------ predict
    def predict(self, source_view_test, t_test=None, source: int = 0, target: int = 1, *,
                method: str = "tandem", **kwargs) -> McGPDSPrediction:
        """Generate view ``target`` for test frames of view ``source`` (N*, D_source).

        ``t_test`` (N*,): time stamps of the test frames (one new sequence; default 0, 1, …,
        required if ``fit`` was given ``times``). ``method``: "tandem" (default: calibrated
        predictor, :func:`tandem.inference.mcgpds.predictor.calibrated_prediction`), or "paper",
        "code", "generative" (:func:`tandem.inference.mcgpds.fit.predict_view`); ``kwargs`` go
        to that function. Mean and variance are returned in the target view's units.
        """
        self._check_fitted()
        V = self.fitted_.data.V
        for nm, k in (("source", source), ("target", target)):
            check_int_range(k, nm, 0, V - 1)
        if source == target:
            raise ValueError(f"target: expected a view other than source={source}")
        as_torch = isinstance(source_view_test, torch.Tensor)
        dev = self.fitted_.data.device
        Ys = as_tensor(source_view_test, "source_view_test", ndim=2).to(dev)
        D_s = self.fitted_.data.out_dims[source]
        if Ys.shape[1] != D_s:
            raise ValueError(f"source_view_test: expected {D_s} columns (view {source}), got {Ys.shape[1]}")
        if Ys.shape[0] == 0:
            raise ValueError("source_view_test: expected at least one test frame (row), got 0")
        if t_test is None:
            if self._times_given:
                raise ValueError("t_test: fit was given times, so give the test frames' time stamps too")
            t_test = torch.arange(Ys.shape[0], dtype=torch.float64, device=dev)
        Zs = self.scalers_[source].transform(Ys)
        if method == "tandem":
            raw = calibrated_prediction(self.fitted_, Zs, t_test, source, target, seed=self.seed,
                                        **kwargs).prediction
        elif method in ("paper", "code", "generative"):
            raw = predict_view(self.fitted_, Zs, t_test, source, target, method=method, seed=self.seed, **kwargs)
        else:
            raise ValueError(f"method: expected 'tandem', 'paper', 'code' or 'generative', got {method!r}")
        st = self.scalers_[target]
        mean, var = st.inverse(raw.mean), st.inverse_var(raw.var)
        if as_torch:
            mean, var = mean.to(source_view_test.device), var.to(source_view_test.device)
        else:
            mean, var = mean.detach().cpu().numpy(), var.detach().cpu().numpy()
        return McGPDSPrediction(mean, var, raw, method)

    # ------------------------------------------------------------------ save / load
    def save(self, path) -> None:
        """Write the fitted object to ``path`` (``torch.save`` of plain tensors and values)."""
        self._check_fitted()
        torch.save({"format": "McGPDS/1",
                    "options": dict(Q=self.Q, M=self.M, J=self.J, fixed=self.fixed, scale=self.scale,
                                    seed=self.seed, progress=self.progress, device=self.device, **self.config),
                    "scalers": [(st.mean, st.scale) for st in self.scalers_],
                    "times_given": self._times_given, "fitted": fitted_to_dict(self.fitted_)}, str(path))

    @classmethod
    def load(cls, path, map_location=None) -> "McGPDS":
        """Read an object written by :meth:`save` (ready to ``predict``); ``map_location`` as in
        :func:`torch.load` (e.g. "cpu" to read a CUDA fit on a machine without a GPU)."""
        z = torch.load(str(path), weights_only=False, map_location=map_location)
        if not isinstance(z, dict) or z.get("format") != "McGPDS/1":
            raise ValueError(f"path: {path!s} is not a file written by McGPDS.save")
        opts = dict(z["options"])
        if map_location is not None:
            opts["device"] = None           # the tensors' (mapped) device decides
        m = cls(**opts)
        m.scalers_ = []
        for mean, scale in z["scalers"]:
            st = Standardizer(mean.new_zeros(1, mean.numel()))
            st.mean, st.scale = mean, scale
            m.scalers_.append(st)
        m._times_given = bool(z["times_given"])
        m.fitted_ = fitted_from_dict(z["fitted"])
        return m

    # ------------------------------------------------------------------ ArviZ
    def to_inference_data(self, num_samples: int = 100, seed: int = 0):
        """Posterior and posterior-predictive draws of the fitted model as ``arviz.InferenceData``.

        Latents (``X_s``, ``X_k``, ``v_k``, ``u_k``) come from the hand-written guide with the
        optimal q(V), q(U) of the collapsed fit; ``y_k`` (posterior predictive and observed
        data) are in the user's units and ``log_likelihood`` is the density of the data in those
        units (the model-unit log density minus log of the scale per entry). Resets Pyro's
        parameter store to this fit.
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
