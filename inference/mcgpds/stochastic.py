"""Stochastic McGPDS: an uncollapsed, minibatched ELBO over windows of the sequences.

The collapsed bound (:func:`tandem.inference.mcgpds.bound.collapsed_bound`) needs every
frame at every step. Here q(V), q(U) are explicit and the objective is a sum over
independent time blocks, so a step only touches a minibatch of blocks (Hensman, Fusi &
Lawrence 2013, "Gaussian processes for big data", with the ψ-statistics of Titsias &
Lawrence 2010 for the uncertain latent inputs).

The pieces live in :mod:`tandem.inference.mcgpds.windows` (the windows and the guide's
parameters), :mod:`tandem.inference.mcgpds.stochastic_elbo` (the objective and its updates) and
:mod:`tandem.inference.mcgpds.hyper_step` (the per-epoch hyperparameter step);
the configuration is in :mod:`tandem.inference.mcgpds.stochastic_config` and the simulator of
long archives in :mod:`tandem.inference.mcgpds.simulation`; this module holds the estimator
(both are re-exported here).

Data parallel. On every rank the same windows are drawn; rank r owns windows
``I[r::world]`` (plus the global KL on rank 0). The local step's L-BFGS
(:func:`~tandem.inference.mcgpds.hyper_step.lbfgs_sharded`) all-reduces the statistics, the
objective value and every inner product, so each rank takes the step one process would; the per-epoch refresh is sharded
the same way, and :class:`tandem.inference.distributed.DataParallelLoss` all-reduces the
hyperparameter gradients.

Device. Everything follows ``device`` (the data are moved there); the algebra is
float64. Units: every view is standardised internally (mean 0, unit overall variance)
so the fit does not depend on the data's units; :meth:`StochasticMcGPDS.to_data_units`
maps back.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyro
import pyro.optim
import torch
from pyro.params.param_store import ParamStoreDict

from tandem.guides.mcgpds import Guide, variational_params
from tandem.inference.mcgpds.bound import collapsed_bound, latent_terms
from tandem.inference.mcgpds.fit import McGPDSConfig, McGPDSFitted, view_sites
from tandem.inference.mcgpds.hyper_step import lbfgs_sharded
from tandem.inference.mcgpds.missing import check_missing_views, impute_view, mean_fill, standardize_views
from tandem.inference.mcgpds.simulation import simulate_sequences
from tandem.inference.mcgpds.stochastic_config import StochasticConfig
from tandem.inference.mcgpds.stochastic_elbo import (
    StochasticELBO,
    _detached,
    _global_kl,
    _partition_term,
    _window_moments,
    refresh_statistics,
    window_kl,
    windows_per_chunk,
)
from tandem.inference.mcgpds.uncollapsed import set_optimal_inducing
from tandem.inference.mcgpds.windows import StochasticData, Windows, guide_params, model_params
from tandem.inference.numerics import DTYPE
from tandem.inference.params import (
    Device,
    InstanceOf,
    Seed,
    TandemEstimator,
    check_param,
    own_params,
)
from tandem.inference.persistence import check_writable, load_estimator, save_estimator
from tandem.inference.predictive import posterior_predictive, rescale_sites
from tandem.inference.svi import FIT_CONSTRAINTS, fit
from tandem.inference.validation import (
    NotFittedError,
    as_tensor,
    check_int_range,
    check_time_order,
    like_input,
    resolve_device,
    sequence_labels,
)
from tandem.models.mcgpds import (
    McGPDSData,
    default_init,
    dims,
    hyperparams,
    mcgpds_model,
    pca_init,
)

__all__ = [
    "StochasticConfig",
    "StochasticData",
    "StochasticELBO",
    "StochasticMcGPDS",
    "Windows",
    "guide_params",
    "lbfgs_sharded",
    "model_params",
    "refresh_statistics",
    "simulate_sequences",
    "window_kl",
]


class StochasticMcGPDS(TandemEstimator):
    r"""McGPDS on long archives: ``StochasticMcGPDS(config, device=...).fit(views, times, seq_ids)``.

    The data given to :meth:`fit` are ``views`` (list of (N, D_k) arrays), ``times`` (N,) and
    ``seq_ids`` (N,) sequence labels (default: one sequence). After :meth:`fit`: ``result``
    (the driver's FitResult), :meth:`elbo` (exact full-data ELBO), :meth:`latents` (per-frame q
    moments), :meth:`to_fitted` (a collapsed-code :class:`~tandem.inference.mcgpds.fit.McGPDSFitted`
    with the windows as sequences, for :func:`~tandem.inference.mcgpds.fit.predict_view`),
    :meth:`to_inference_data` (ArviZ draws in the data's units), :meth:`impute` (the missing entries of a
    training view, with variances).

    Parameters
    ----------
    config : StochasticConfig, optional
        Settings of the fit (default ``StochasticConfig()``).
    device : str or torch.device, optional
        "cpu", "cuda", ... (float64 there); default ``None`` = the device of the views given to
        :meth:`fit` (the CPU for numpy arrays).

    Attributes
    ----------
    data\_ : tandem.inference.mcgpds.windows.StochasticData
        The prepared (standardised, windowed) data (alias ``data``).
    result\_ : tandem.inference.svi.FitResult
        The driver's result of the last :meth:`fit` / :meth:`train` (alias ``result``).
    objective\_ : tandem.inference.mcgpds.stochastic_elbo.StochasticELBO
        The objective of the last :meth:`train`.
    scalers\_ : list of tandem.inference.distances.Standardizer
        One standardiser per view.
    seq_ids\_ : torch.Tensor
        (N,) the sequence labels (CPU).
    """

    _parameter_constraints = {"config": [None, InstanceOf(StochasticConfig)], "device": [None, Device()]}

    def __init__(self, config: StochasticConfig | None = None, device=None):
        self.config = config
        self.device = device
        self._validate_params()

    def _config(self) -> StochasticConfig:
        # the fields are checked again wherever the config is used (they may be set after construction)
        return StochasticConfig() if self.config is None else self.config.validate()

    # learned state (``data_``, ``result_``, ``objective_``, ``seq_ids_``); the names without
    # the trailing underscore are kept as aliases
    @property
    def data(self) -> StochasticData:
        """The prepared data ``data_`` (:class:`~tandem.inference.mcgpds.windows.StochasticData`).

        Raises
        ------
        NotFittedError
            Before :meth:`fit` or :meth:`prepare`.
        """
        if "data_" not in self.__dict__:
            raise NotFittedError("This StochasticMcGPDS instance is not fitted yet: call fit(views, times, seq_ids) "
                                 "(or prepare()) before using this method")
        return self.data_

    @data.setter
    def data(self, value):
        self.data_ = value
        self._optim = None      # new data: the next train() starts a fresh optimiser
        # the standardisation and labels go with the data they describe (set by prepare); data built
        # otherwise carry none, and those of earlier data would map its units wrongly
        for attr, name in (("scalers", "scalers_"), ("seq_ids", "seq_ids_")):
            if getattr(value, attr, None) is not None:
                setattr(self, name, getattr(value, attr))
            else:
                self.__dict__.pop(name, None)

    @property
    def result(self):
        """The driver's FitResult ``result_`` of the last :meth:`fit` / :meth:`train`.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        """
        self._check_fitted("result_", "fit(views, times, seq_ids)")
        return self.result_

    # ------------------------------------------------------------------ data
    def prepare(self, views, times, seq_ids=None, seed: int = 0) -> StochasticData:
        """Validate, standardise and window the data; build the initial values.

        Each view is divided by one scale (the RMS of its column standard deviations) after
        centring, which keeps the outputs' relative sizes. This object is not changed: the
        returned data carry their standardisation (``scalers``) and sequence codes (``seq_ids``),
        which become ``scalers_`` and ``seq_ids_`` when the data are assigned (``m.data = m.prepare(...)``).

        Parameters
        ----------
        views : list of array_like
            The (N, D_k) views; NaN entries are missing (not scored: the window statistics are summed
            per group of columns over their observed frames, see
            :mod:`tandem.inference.mcgpds.stochastic_elbo`).
        times : array_like
            (N,) time stamps, in time order within each sequence.
        seq_ids : array_like, optional
            (N,) hashable sequence labels (default: one sequence).
        seed : int, default 0
            Seed of the inducing-point initialisation.

        Returns
        -------
        tandem.inference.mcgpds.windows.StochasticData
            The standardised, windowed data with the initial values.

        Raises
        ------
        ValueError
            If a view has an infinite entry, a column with no observed entry or is constant, a frame
            is missing (NaN) in every view, the views' row counts or ``times`` disagree, the frames of
            a sequence are out of time order, ``seed`` is not a seed, or ``Q`` exceeds the total view
            dimension.
        """
        cfg = self._config()
        check_param([Seed()], "seed", seed, "StochasticMcGPDS.prepare: ")
        if not isinstance(views, (list, tuple)) or not views:
            raise ValueError("views: expected a non-empty list of (N, D_k) arrays")
        dev = resolve_device(self.device, views, times)
        # the one array reader first (it names the argument for every kind of bad input); NaN
        # entries are missing (masked likelihood), checked by the collapsed path's validator
        vs = [as_tensor(Y, f"views[{k}]", ndim=2, detach=True, finite=False).to(dev) for k, Y in enumerate(views)]
        N = vs[0].shape[0]
        if any(Y.shape[0] != N for Y in vs):
            raise ValueError(f"views: every view must have the same number of rows, got {[Y.shape[0] for Y in vs]}")
        check_missing_views(vs)          # ±inf, a view with no observed entry, a frame missing in every view
        # a copy: the fit keeps the times, and as_tensor shares a float64 tensor's memory
        t = as_tensor(times, "times", ndim=1, detach=True).to(dev).clone()
        if t.numel() != N:
            raise ValueError(f"times: expected {N} time stamps (one per frame), got {t.numel()}")
        # sequence labels are CPU bookkeeping (Windows): any hashable labels, NaN refused, frames
        # of a sequence in time order (one validator for every estimator)
        if seq_ids is None:
            seq = torch.zeros(N, dtype=torch.long, device="cpu")
            check_time_order(t, None)
        else:
            seq = torch.as_tensor(sequence_labels(seq_ids, N, t, name="seq_ids"), device="cpu")
        for name in ("Q", "M", "J", "window", "batch"):
            check_int_range(getattr(cfg, name), name, low=1)
        if cfg.Q > sum(Y.shape[1] for Y in vs):
            raise ValueError(f"Q={cfg.Q}: expected at most the total view dimension {sum(Y.shape[1] for Y in vs)}")
        # one scale per view (the RMS of its column standard deviations) keeps the outputs'
        # relative sizes; the one check of both estimators (never-observed columns, constant views)
        scalers, vs = standardize_views(vs, "matrix")
        win = Windows(seq, cfg.window)
        X0 = pca_init(mean_fill(torch.cat(vs, 1)), cfg.Q)     # missing entries: column means, for the init only
        if cfg.time_invwidth is None:
            w0 = win.rows[0][win.mask[0]]
            rng_t = float(t[w0].max() - t[w0].min()) or float(t.max() - t.min()) or 1.0
            invw = 100.0 / rng_t ** 2
        else:
            invw = float(cfg.time_invwidth)
        gen = torch.Generator().manual_seed(int(seed))
        # default_init draws Z from a random subset of X0 (first M rows of a permutation)
        sub = torch.randperm(N, generator=gen, device="cpu")[:max(cfg.M, 1) * 2].to(dev)
        init = default_init(sub.numel(), [Y.shape[1] for Y in vs], cfg.Q, cfg.M, cfg.J, cfg.mapping_kernel,
                            X0=X0[sub], times=t[sub], time_white=cfg.time_white, time_bias=cfg.time_bias,
                            alpha=cfg.alpha_init, eps=cfg.eps_init, beta=cfg.beta_init, invwidth=invw,
                            white_var=cfg.time_white_var, bias_var=cfg.time_bias_var, w_scale=cfg.w_init_scale,
                            lam=cfg.lam_init, private_prior=cfg.private_prior, generator=gen,
                            time_kernel=cfg.time_kernel)
        for k in range(len(vs)):
            init.pop(f"mu_{k}")
            init.pop(f"lam_{k}")
        init = {n: x.to(dev) for n, x in init.items()}
        fixed = set(cfg.fixed)
        if "W" in fixed:
            fixed.add("g")
        data = StochasticData([Y.to(dev) for Y in vs], t.to(dev), win, cfg.Q, cfg.M, cfg.J, init, X0.to(dev),
                              frozenset(fixed), cfg.mapping_kernel, cfg.time_white, cfg.time_bias,
                              cfg.private_prior, cfg.lam_init, time_kernel=cfg.time_kernel)
        data.scalers, data.seq_ids = scalers, seq
        return data

    def decay_steps(self) -> int:
        """Number of steps T over which the hyperparameters' learning rate decays.

        It decays from ``lr`` to ``lr_final`` × ``lr``.

        Returns
        -------
        int
            ``lr_decay_steps``, else ``num_steps``, else (``num_steps = 0``: training by
            :meth:`train` calls only) 2000, the default ``num_steps``.
        """
        cfg = self._config()
        if cfg.lr_decay_steps is not None:
            return int(cfg.lr_decay_steps)
        return int(cfg.num_steps) if int(cfg.num_steps) > 0 else 2000

    def optimizer(self):
        """A fresh Adam (``pyro.optim.ClippedAdam``) for the hyperparameters.

        Returns
        -------
        pyro.optim.ClippedAdam
            Adam with ``lr``, per-step decay ``lrd`` and ``clip_norm = 1e6``.

        Notes
        -----
        The learning rate after t steps is ``lr · lr_final^(t/T)`` (T = :meth:`decay_steps`;
        Robbins–Monro: the minibatch noise must be averaged out at the end), i.e. a per-step
        factor ``lrd = lr_final^(1/T)``. :meth:`fit` builds one and every later :meth:`train`
        call continues it (moments and rate), so the schedule runs over the whole training however
        it is split into calls. (Before, each call started afresh at ``lr``, and with
        ``num_steps = 0`` the per-step factor was ``lr_final`` itself: every call began with a full
        Adam step of size ``lr`` in every coordinate and then froze.)
        """
        cfg = self._config()
        lrd = float(cfg.lr_final) ** (1.0 / self.decay_steps())
        return pyro.optim.ClippedAdam({"lr": cfg.lr, "lrd": lrd, "clip_norm": 1e6})

    def fit(self, views, times, seq_ids=None, seed: int = 0, progress: bool = False, loss_wrapper=None,
            checkpoint=None, checkpoint_every: int = 100):
        """Fit through :func:`tandem.inference.fit`.

        Per step an L-BFGS local step on the drawn windows' q(X), q(V), q(U) at their optimum,
        Adam on the hyperparameters; ``num_steps`` steps of the config after :meth:`prepare`.

        Parameters
        ----------
        views : list of array_like
            The (N, D_k) views.
        times : array_like
            (N,) time stamps.
        seq_ids : array_like, optional
            (N,) sequence labels (default: one sequence).
        seed : int, default 0
            Seed of the initialisation and of the window draws.
        progress : bool, default False
            Show a progress bar.
        loss_wrapper : callable, optional
            E.g. :class:`tandem.inference.distributed.DataParallelLoss` (called with the objective)
            for data-parallel training.
        checkpoint : str or path-like, optional
            As in :func:`tandem.inference.fit`: a run killed part-way resumes from the file and ends
            where the uninterrupted run ends.
        checkpoint_every : int, default 100
            Steps between checkpoints.

        Returns
        -------
        StochasticMcGPDS
            ``self``, fitted.

        Raises
        ------
        ValueError
            As :meth:`prepare`; a setting outside its declaration (the config's fields, ``seed``,
            ``progress``, ``checkpoint_every``), or a checkpoint path that cannot be written. Every
            argument is checked before anything changes, and if the fit fails anyway the object
            keeps its previous fit (data, parameters, optimiser, result).
        """
        self._validate_params()
        cfg = self._config()
        where = "StochasticMcGPDS.fit: "
        check_param([Seed()], "seed", seed, where)
        check_param(FIT_CONSTRAINTS["progress"], "progress", progress, where)
        check_param(FIT_CONSTRAINTS["checkpoint"], "checkpoint", checkpoint, where)
        check_param(FIT_CONSTRAINTS["checkpoint_every"], "checkpoint_every", checkpoint_every, where)
        if checkpoint is not None and not Path(checkpoint).exists():
            try:            # fail now, not after the state has been replaced (as the driver would)
                check_writable(Path(checkpoint).parent)
            except OSError as err:
                raise ValueError(f"checkpoint: cannot write {checkpoint} ({err.strerror or err}); choose a "
                                 "checkpoint path in a folder you can write to") from None
        data = self.prepare(views, times, seq_ids, seed)
        # a failure from here on leaves the previous fit whole: TandemEstimator makes every fit
        # all-or-nothing (params._all_or_nothing restores the attributes, param_store_ included)
        self.data = data                       # with its scalers and sequence codes
        self.param_store_ = ParamStoreDict()   # a fresh store: the previous fit's stays intact
        return self.train(int(cfg.num_steps), seed=seed, progress=progress, loss_wrapper=loss_wrapper,
                          checkpoint=checkpoint, checkpoint_every=checkpoint_every)

    @own_params
    def train(self, num_steps: int, seed: int = 0, progress: bool = False, loss_wrapper=None, checkpoint=None,
              checkpoint_every: int = 100):
        """``num_steps`` more steps on the prepared data.

        Keeps the parameter store and the optimiser (Adam's moments and the decayed learning rate
        of the earlier :meth:`fit` / :meth:`train` calls: k calls of n steps follow the schedule of
        one call of k·n steps; the first call after :meth:`prepare` or :meth:`load` builds a fresh
        one). Sets ``result``.

        Parameters
        ----------
        num_steps : int
            Number of further steps.
        seed : int, default 0
            Seed of the window draws.
        progress : bool, default False
            Show a progress bar.
        loss_wrapper : callable, optional
            Wraps the objective, e.g. :class:`tandem.inference.distributed.DataParallelLoss`.
        checkpoint : str or path-like, optional
            Checkpoint file, as in :func:`tandem.inference.fit`.
        checkpoint_every : int, default 100
            Steps between checkpoints.

        Returns
        -------
        StochasticMcGPDS
            ``self``.

        Raises
        ------
        NotFittedError
            Before :meth:`fit` or :meth:`prepare`.
        ValueError
            ``num_steps`` not an integer ≥ 0, ``seed`` not a seed (bools and fractions refused, never cast).
        """
        cfg = self._config()
        self.data  # noqa: B018 - NotFittedError before fit / prepare
        check_param(FIT_CONSTRAINTS["num_steps"], "num_steps", num_steps, "StochasticMcGPDS.train: ")
        check_param([Seed()], "seed", seed, "StochasticMcGPDS.train: ")
        objective = StochasticELBO(batch=cfg.batch, local_iters=cfg.local_iters, hyper_iters=cfg.hyper_iters)
        loss = objective if loss_wrapper is None else loss_wrapper(objective)
        if getattr(self, "_optim", None) is None:
            self._optim = self.optimizer()
        with warnings.catch_warnings():
            # hyper_iters > 0: the returned loss carries no gradient (the objective moves the
            # hyperparameters itself, once per epoch), which the driver would warn about
            warnings.filterwarnings("ignore", message="loss: the callable loss returned a tensor that depends on no")
            result = fit(model_params, guide_params, self.data, loss=loss, optim=self._optim,
                         num_steps=int(num_steps), seed=seed, progress=progress, checkpoint=checkpoint,
                         checkpoint_every=checkpoint_every, clear_params=False, desc="McGPDS (stochastic)")
        self.objective_, self.result_ = objective, result
        return self

    # ------------------------------------------------------------------ save / load
    def save(self, path) -> None:
        """Write this object (settings, prepared data, fit result and its Pyro parameters).

        The file is in tandem's safe format (plain tensors + JSON), written atomically.

        Parameters
        ----------
        path : str or path-like
            The file to write.

        Raises
        ------
        NotFittedError
            Before :meth:`fit` (or data assigned from :meth:`prepare`).
        ValueError
            ``path`` is a folder, or its folder is missing or cannot be written (checked first).
        """
        self.data  # noqa: B018 - NotFittedError before fit / prepare
        # the parameters are this object's own store (param_store_, saved with the state): the
        # user's global Pyro store is never written into the file
        save_estimator(self, path)

    @classmethod
    def load(cls, path, map_location=None) -> "StochasticMcGPDS":
        """Read an object written by :meth:`save`.

        Its Pyro parameters become the object's own store (``param_store_``); the user's global Pyro
        parameter store is left as it was. Nothing is unpickled.

        Parameters
        ----------
        path : str or path-like
            The file written by :meth:`save`.
        map_location : str or torch.device, optional
            Device to load the tensors onto.

        Returns
        -------
        StochasticMcGPDS
            The restored object.

        Raises
        ------
        ValueError
            If the file is damaged or foreign.
        """
        m, params = load_estimator(cls, path, map_location, with_extra=True)
        if params is not None:      # files of older versions kept the parameters beside the state
            store = ParamStoreDict()
            store.set_state(params)
            m.param_store_ = store
        return m

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    @own_params
    def elbo(self, chunk: int = 256, optimal_inducing: bool = False) -> float:
        """Exact full-data ELBO in the standardised units (windows in chunks; no parameter update).

        Parameters
        ----------
        chunk : int, default 256
            Windows per chunk (fewer for long windows:
            :func:`~tandem.inference.mcgpds.stochastic_elbo.windows_per_chunk`).
        optimal_inducing : bool, default False
            First recompute the statistics over all windows and set q(V), q(U) to their optimum
            given everything else (:func:`refresh_statistics`): the value the collapsed bound has.
            (After training they are at the optimum for the running statistics, which equal the
            recomputed ones when no hyperparameter is learned.)

        Returns
        -------
        float
            The sum of the window terms (weight 1 each) minus the global KL.
        """
        S = self.data.windows.S
        chunk = windows_per_chunk(self.data, chunk)
        if optimal_inducing:
            refresh_statistics(self.data, chunk)
        total = 0.0
        for lo in range(0, S, chunk):
            idx = torch.arange(lo, min(lo + chunk, S), device="cpu")
            obj = StochasticELBO(windows=idx)
            # scale S/|idx| is wrong for a partition; undo it: the window terms have weight 1
            val = _partition_term(obj, self.data, idx, S)
            total += val
        total -= float(_global_kl(self.data))
        return total

    @torch.no_grad()
    @own_params
    def latents(self, chunk: int = 256) -> dict:
        """Per-frame q moments in frame order (standardised-data latent space).

        Parameters
        ----------
        chunk : int, default 256
            Windows per chunk (fewer for long windows:
            :func:`~tandem.inference.mcgpds.stochastic_elbo.windows_per_chunk`).

        Returns
        -------
        dict
            ``mu``: V × (N, Q) private means, ``s``: V × (N, Q) private variances (lists of
            tensors on the data's device).
        """
        d = self.data
        chunk = windows_per_chunk(d, chunk)
        hp = model_params(d)
        N, Q, V = d.N, d.Q, d.V
        mu = torch.zeros(V, N, Q, dtype=DTYPE, device=d.device)
        s = torch.zeros_like(mu)
        for lo in range(0, d.windows.S, chunk):
            idx = torch.arange(lo, min(lo + chunk, d.windows.S), device="cpu")
            mub, sd, rows, valid = _window_moments(d, hp, idx)
            mu[:, rows[valid]] = mub[:, valid]
            s[:, rows[valid]] = sd[:, valid]
        return {"mu": list(mu.unbind(0)), "s": list(s.unbind(0))}

    @torch.no_grad()
    @own_params
    def impute(self, view: int):
        """Impute the missing (NaN) entries of training view ``view`` with predictive variances.

        The same predictive as :meth:`tandem.inference.mcgpds.McGPDS.impute` (shared code,
        :func:`tandem.inference.mcgpds.missing.impute_view`): at every training frame's own latent
        q(x_n^(k)) (:meth:`latents`, the windows' q(X)), with each column's q(v_d) optimal over the
        frames where that column is observed, in the view's units. A frame missing from this view is
        informed by the other views (the shared latent) and by the neighbouring frames of its window.

        Parameters
        ----------
        view : int
            The training view, 0 ≤ view < V.

        Returns
        -------
        tandem.inference.mcgpds.McGPDSImputation
            ``values`` (N, D): the view with its missing entries replaced by the predictive mean;
            ``mean``, ``var`` (N, D): the predictive moments at every entry (noise included);
            ``missing`` (N, D) boolean. numpy arrays, frames in the order given to :meth:`fit`.

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        ValueError
            If ``view`` is not a view index.
        """
        from tandem.inference.mcgpds.api import McGPDSImputation
        d = self.data
        check_int_range(view, "view", 0, d.V - 1)
        lat = self.latents()
        hp = _detached(model_params(d))
        out = impute_view(d.views[view], lat["mu"][view], lat["s"][view], hp["views"][view], d.mapping_kernel_obj,
                          self.scalers_[view])
        return McGPDSImputation(*(x.cpu().numpy() for x in out))

    @own_params
    def collapsed_data(self) -> McGPDSData:
        """The same model as a :class:`McGPDSData` with windows as sequences (CPU).

        Its ``init`` holds the current parameters — for the collapsed code (small N only).

        Returns
        -------
        tandem.models.mcgpds.McGPDSData
            The data with the current q(X) moments and hyperparameters as ``init``.
        """
        d = self.data
        lat = self.latents()
        init = {}
        store = pyro.get_param_store()
        for n, x in d.init.items():
            init[n] = (store[n] if n in store else x).detach().cpu().clone()
        lams = self._frame_lams()
        for k in range(d.V):
            init[f"mu_{k}"] = lat["mu"][k].cpu().clone()
            init[f"lam_{k}"] = lams[k].cpu().clone()
        return McGPDSData([Y.cpu() for Y in d.views], d.times.cpu(), d.windows.ids, d.Q, d.M, d.J,
                          d.mapping_kernel_obj, d.time_white, d.time_bias, d.private_prior,
                          frozenset(d.fixed), init, time_kernel=d.time_kernel)

    @own_params
    def to_fitted(self):
        """A :class:`~tandem.inference.mcgpds.fit.McGPDSFitted` of this fit for the collapsed code's predictors.

        CPU, standardised units, windows as sequences; for
        :func:`~tandem.inference.mcgpds.fit.predict_view` give it test data through
        :meth:`to_model_units` and map its predictions back with :meth:`to_data_units`.
        The prediction re-collapses q(V), q(U) to their optimum given q(X) — at convergence
        the natural-gradient q(V), q(U) themselves.

        Returns
        -------
        tandem.inference.mcgpds.fit.McGPDSFitted
            The fit, with the collapsed bound's value as its ELBO; the parameter store is left
            as it was.
        """
        cfg = self._config()
        data = self.collapsed_data()
        store = pyro.get_param_store()
        saved = store.get_state()
        try:
            pyro.clear_param_store()
            with torch.no_grad():
                hp = hyperparams(data)
                mus, lams = variational_params(data)
                F = collapsed_bound(data, hp, mus, lams)
                lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams,
                                  need_shared_var=True)
        finally:   # set_state adds to the store: clear what the collapsed code registered first
            pyro.clear_param_store()
            store.set_state(saved)
        mc = McGPDSConfig(Q=cfg.Q, M=cfg.M, J=cfg.J, mapping_kernel=cfg.mapping_kernel,
                          time_white=cfg.time_white, time_bias=cfg.time_bias, fixed=tuple(cfg.fixed),
                          private_prior=cfg.private_prior, time_kernel=cfg.time_kernel)
        res = getattr(self, "result_", None)
        return McGPDSFitted(mc, data, dict(data.init), lt["mu_s"], lt["s_s"], [m.detach() for m in mus],
                            [s.detach() for s in lt["s_diag"]],
                            np.asarray([] if res is None else res.losses), 0.0 if res is None else res.wall_time,
                            float(F))

    def _units_input(self, x, name: str, view: int):
        """Validate a (n, D_view) array of view ``view`` (one per row); returns the float64
        tensor on the scaler's device and whether the caller gave a tensor."""
        check_int_range(view, "view", 0, len(self.scalers_) - 1)
        sc = self.scalers_[view]
        t = as_tensor(x, name, ndim=2, min_rows=1, detach=True)
        D = int(sc.mean.reshape(-1).shape[0])
        if t.shape[1] != D:
            raise ValueError(f"{name}: expected {D} columns (view {view}), got {t.shape[1]}")
        return t, isinstance(x, torch.Tensor), sc

    def to_model_units(self, Y, view: int):
        """Data units → the standardised units of the fit: (Y − μ_view) / s_view.

        Parameters
        ----------
        Y : array_like or torch.Tensor
            (n, D_view) data of view ``view``.
        view : int
            Index of the view.

        Returns
        -------
        numpy.ndarray or torch.Tensor
            (n, D_view); a tensor in gives a tensor on its device, numpy (or lists) give numpy.

        Raises
        ------
        ValueError
            If ``view`` is out of range or ``Y`` has the wrong number of columns.
        """
        self._check_fitted("scalers_", "fit(views, times, seq_ids)")
        t, _, sc = self._units_input(Y, "Y", view)
        return like_input((t.cpu() - sc.mean.cpu()) / sc.scale.cpu(), Y)

    def to_data_units(self, mean, var=None, view: int = 1):
        """Standardised units → data units of view ``view``: mean ↦ mean · s + μ, var ↦ var · s².

        Parameters
        ----------
        mean : array_like or torch.Tensor
            (n, D_view) means in the standardised units.
        var : array_like or torch.Tensor, optional
            (n, D_view) non-negative variances in the standardised units.
        view : int, default 1
            Index of the view.

        Returns
        -------
        numpy.ndarray or torch.Tensor or tuple
            The mean in data units, or the pair (mean, var) when ``var`` is given. A tensor in
            gives a tensor on its device; numpy (or lists) give numpy.

        Raises
        ------
        ValueError
            If ``view`` is out of range, the shapes are wrong or ``var`` has negative entries.
        """
        self._check_fitted("scalers_", "fit(views, times, seq_ids)")
        m, _, sc = self._units_input(mean, "mean", view)
        scale, mu = sc.scale.cpu(), sc.mean.cpu()
        out = like_input(m.cpu() * scale + mu, mean)
        if var is None:
            return out
        v, _, _ = self._units_input(var, "var", view)
        if v.shape != m.shape:
            raise ValueError(f"var: expected the shape of mean {tuple(m.shape)}, got {tuple(v.shape)}")
        if (v < 0).any():
            raise ValueError("var: variances must be non-negative")
        return out, like_input(v.cpu() * scale ** 2, var)

    @own_params
    def to_inference_data(self, num_samples: int = 100, seed: int = 0):
        """Posterior and posterior-predictive draws of the fit as ArviZ data.

        Parameters
        ----------
        num_samples : int, default 100
            Number of draws (≥ 1).
        seed : int, default 0
            Seed of the draws.

        Returns
        -------
        arviz.InferenceData or xarray.DataTree
            The draws, ``y_k`` in the data's units.

        Notes
        -----
        ``arviz.InferenceData`` under ArviZ 0.x, ``xarray.DataTree`` under 1.x (as
        :func:`tandem.inference.posterior_predictive`). The draws come from the McGPDS guide
        on :meth:`collapsed_data` (windows as sequences, the fit's q(X) and hyperparameters)
        with q(V), q(U) at their optimum given them; ``y_k`` (posterior predictive and observed
        data) are in the user's units and ``log_likelihood`` is the density in those units (the
        model-unit log density minus the log scale per entry). Dims: :func:`tandem.models.mcgpds.dims`
        (the latents are (latent_dim, time) over all N frames, so this is for archives whose
        N × N per-window blocks fit in memory). The fit's parameter store is left as it was.
        """
        self.data  # noqa: B018 - NotFittedError before fit
        check_int_range(num_samples, "num_samples", low=1)
        data = self.collapsed_data()
        store = pyro.get_param_store()
        saved = store.get_state()
        try:
            pyro.clear_param_store()
            set_optimal_inducing(data)
            idata = posterior_predictive(mcgpds_model, Guide(), data, num_samples=num_samples, seed=seed,
                                         dims=dims(data.V))
        finally:   # set_state adds to the store: clear what the collapsed code registered first
            pyro.clear_param_store()
            store.set_state(saved)
        return rescale_sites(idata, view_sites(self.scalers_))

    @torch.no_grad()
    @own_params
    def _frame_lams(self):
        d = self.data
        out = torch.zeros(d.V, d.N, d.Q, dtype=DTYPE, device=d.device)
        for lo in range(0, d.windows.S, 256):
            idx = torch.arange(lo, min(lo + 256, d.windows.S), device="cpu")
            q = guide_params(d, idx)
            valid = d.mask[idx.to(d.device)]
            rows = d.rows[idx.to(d.device)]
            out[:, rows[valid]] = torch.stack(q["lam"])[:, valid]
        return list(out.unbind(0))
