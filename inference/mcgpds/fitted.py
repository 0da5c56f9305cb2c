"""A trained McGPDS (:class:`McGPDSFitted`), the output of a prediction (:class:`Prediction`), and their files.

:func:`save_fitted` / :func:`load_fitted` write and read a fit as plain tensors and values
(:func:`fitted_to_dict`) in tandem's safe format; nothing is unpickled.
Re-exported by :mod:`tandem.inference.mcgpds.fit`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch

from tandem.inference.mcgpds.fit_config import McGPDSConfig, time_kernel_from_spec, time_kernel_spec
from tandem.inference.persistence import dump, load
from tandem.models.mcgpds import PARAM_GROUPS, McGPDSData, hyperparams

__all__ = ["McGPDSFitted", "Prediction", "constant_hyperparams", "fitted_to_dict", "fitted_from_dict",
           "save_fitted", "load_fitted"]


@dataclass
class McGPDSFitted:
    """A trained McGPDS: config, constrained parameters, q moments, data, loss trace.

    Attributes
    ----------
    config : McGPDSConfig
        The settings of the fit.
    data : tandem.models.mcgpds.McGPDSData
        The fitted data and model structure.
    params : dict
        Constrained parameters by Pyro site name.
    mu_s : torch.Tensor
        (N, Q) shared means.
    s_s : torch.Tensor
        (N,) shared variances (the same for every q).
    mu : list of torch.Tensor
        V × (N, Q) private means.
    s_diag : list of torch.Tensor
        V × (N, Q) private variances.
    losses : numpy.ndarray
        Loss trace of every optimisation phase.
    wall_time : float
        Training seconds.
    bound : float
        The collapsed bound at the end of the fit.
    meta : dict
        E.g. ``{"fingerprint": ...}`` of a cached fit.
    """
    config: McGPDSConfig
    data: McGPDSData
    params: dict
    mu_s: torch.Tensor            # (N, Q) shared means
    s_s: torch.Tensor             # (N,) shared variances (the same for every q)
    mu: list                      # V × (N, Q) private means
    s_diag: list                  # V × (N, Q) private variances
    losses: np.ndarray
    wall_time: float
    bound: float
    meta: dict = field(default_factory=dict)     # e.g. {"fingerprint": ...} of a cached fit

    @property
    def views(self):
        return self.data.views

    @property
    def times(self):
        return self.data.times

    def hyperparams(self) -> dict:
        """Hyperparameters as constants (:func:`constant_hyperparams`).

        Returns
        -------
        dict
            The model's hyperparameters, no Pyro parameter store involved.
        """
        return constant_hyperparams(self)

    def alpha(self) -> list[float]:
        """The fitted couplings α_k, one per view.

        Returns
        -------
        list of float
            V values.
        """
        return [float(self.params[f"alpha_{k}"]) for k in range(self.data.V)]


@dataclass
class Prediction:
    """Output of :func:`predict_view` (model units; the caller rescales).

    Attributes
    ----------
    mean : torch.Tensor
        (N*, D_t) predictive mean.
    var : torch.Tensor
        (N*, D_t) predictive variance incl. noise.
    shared_mean : torch.Tensor
        (N*, Q) test shared means μ*^(s).
    nn_index : torch.Tensor
        (N*,) shared-space NN indices into the training frames.
    test_mu : torch.Tensor
        (N*, Q) test private means of the source view.
    test_s : torch.Tensor
        (N*, Q) their variances.
    method : str
        The prediction method.
    nn_index_y : torch.Tensor or None
        (N*,) Y-space NN indices.
    latent_mean : torch.Tensor or None
        (N*, Q) the inputs used for the target view.
    latent_var : torch.Tensor or None
        (N*, Q) their variances.
    wall_time : float
        Prediction seconds.
    """
    mean: torch.Tensor            # (N*, D_t)
    var: torch.Tensor             # (N*, D_t) predictive variance incl. noise
    shared_mean: torch.Tensor     # (N*, Q) test shared means μ*^(s)
    nn_index: torch.Tensor        # (N*,) shared-space NN indices into the training frames
    test_mu: torch.Tensor         # (N*, Q) test private means of the source view
    test_s: torch.Tensor          # (N*, Q) their variances
    method: str
    nn_index_y: torch.Tensor | None = None
    latent_mean: torch.Tensor | None = None   # (N*, Q) the inputs used for the target view
    latent_var: torch.Tensor | None = None
    wall_time: float = 0.0


def constant_hyperparams(fitted: McGPDSFitted) -> dict:
    """Hyperparameters of a fitted model as constants (no Pyro parameter store involved).

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.

    Returns
    -------
    dict
        The hyperparameters (``"time_s"``, ``"views"``, ...) with every group fixed at ``fitted.params``.
    """
    d = copy.copy(fitted.data)
    d.init = fitted.params
    d.fixed = frozenset(PARAM_GROUPS)
    return hyperparams(d)


def fitted_to_dict(fitted: McGPDSFitted) -> dict:
    """A trained model as a dict of plain tensors/values; inverse :func:`fitted_from_dict`.

    No project classes, so a saved fit survives refactors of the bound code.

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.

    Returns
    -------
    dict
        ``{"format": 1, "config": ..., "views": ..., "params": ..., ...}``.
    """
    d = fitted.data
    return {"format": 1, "config": fitted.config.to_dict(),
            "views": [Y.detach() for Y in d.views], "times": d.times, "seq_ids": d.seq_ids,
            "Q": d.Q, "M": d.M, "J": d.J, "mapping_kernel": d.mapping_kernel, "time_white": d.time_white,
            "time_bias": d.time_bias, "private_prior": d.private_prior, "fixed": sorted(d.fixed),
            "time_kernel": time_kernel_spec(d.time_kernel),
            "init": {k: v.detach() if torch.is_tensor(v) else v for k, v in d.init.items()},
            "params": {k: v.detach() if torch.is_tensor(v) else v for k, v in fitted.params.items()},
            "mu_s": fitted.mu_s, "s_s": fitted.s_s, "mu": fitted.mu, "s_diag": fitted.s_diag,
            "losses": np.asarray(fitted.losses), "wall_time": fitted.wall_time, "bound": fitted.bound,
            "meta": dict(fitted.meta)}


def fitted_from_dict(z: dict) -> McGPDSFitted:
    """Inverse of :func:`fitted_to_dict`.

    Parameters
    ----------
    z : dict
        A dict written by :func:`fitted_to_dict`.

    Returns
    -------
    McGPDSFitted
        The trained model (``config.init_views`` is None: it is only used for the initialisation).
    """
    cfg_d = dict(z["config"])
    cfg_d["init_views"] = None                 # only used for the initialisation
    for k in ("fixed", "init_dims"):
        if isinstance(cfg_d.get(k), list):
            cfg_d[k] = tuple(cfg_d[k])
    cfg_d["time_kernel"] = time_kernel_from_spec(cfg_d.get("time_kernel"))
    data = McGPDSData(z["views"], z["times"], z["seq_ids"], z["Q"], z["M"], z["J"], z["mapping_kernel"],
                      z["time_white"], z["time_bias"], z["private_prior"], frozenset(z["fixed"]), z["init"],
                      time_kernel=time_kernel_from_spec(z.get("time_kernel")))
    return McGPDSFitted(McGPDSConfig(**cfg_d), data, z["params"], z["mu_s"], z["s_s"], z["mu"], z["s_diag"],
                        np.asarray(z["losses"]), float(z["wall_time"]), float(z["bound"]), dict(z.get("meta", {})))


def save_fitted(fitted: McGPDSFitted, path) -> None:
    """Write a trained model to ``path``, atomically.

    The file holds :func:`fitted_to_dict` in tandem's safe format
    (:func:`tandem.inference.persistence.dump`).

    Parameters
    ----------
    fitted : McGPDSFitted
        A trained model.
    path : str or path
        The file written.
    """
    dump(fitted_to_dict(fitted), path, "McGPDSFitted")


def load_fitted(path) -> McGPDSFitted:
    """Read a model written by :func:`save_fitted` (safe reader: nothing is unpickled).

    Parameters
    ----------
    path : str or path
        The file read.

    Returns
    -------
    McGPDSFitted
        The trained model.

    Raises
    ------
    ValueError
        A damaged or foreign file, naming it.
    """
    return fitted_from_dict(load(path, "McGPDSFitted"))


# checkpoint and cache fingerprints (tandem.inference.checkpoints), saved files (tandem.inference.
# persistence) and pickles name a class by module and qualname: the classes keep the module
# that defined them before it was split, so those names (and keys) stay the same
for _cls in (McGPDSFitted, Prediction):
    _cls.__module__ = "tandem.inference.mcgpds.fit"
