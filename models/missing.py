"""Missing (NaN) entries of observed views: masks and checks shared by the models and the fits.

NaN marks a missing entry of a view (N, D). The likelihoods that use these helpers do not score
missing entries (:mod:`tandem.inference.mcgpds.missing`); the helpers here only find, check and
fill them (for initialisation).
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["has_missing", "observed_mask", "fill_missing", "nan_var", "mean_fill", "check_missing_views"]


def has_missing(Y) -> bool:
    """True when the array/tensor ``Y`` holds a NaN entry.

    Parameters
    ----------
    Y : array_like or torch.Tensor
        Any array.

    Returns
    -------
    bool
        Whether some entry is NaN.
    """
    if isinstance(Y, torch.Tensor):
        return bool(torch.isnan(Y).any())
    return bool(np.isnan(np.asarray(Y, dtype=np.float64)).any())


def observed_mask(Y: torch.Tensor) -> torch.Tensor:
    """Boolean (N, D) tensor, True where ``Y`` is observed (not NaN).

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) view, NaN where missing.

    Returns
    -------
    torch.Tensor
        (N, D) boolean.
    """
    return ~torch.isnan(Y)


def fill_missing(Y: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """``Y`` with its NaN entries replaced by ``value`` (the masked formulas never read them).

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) view, NaN where missing.
    value : float, default 0.0
        The fill value.

    Returns
    -------
    torch.Tensor
        (N, D) without NaN.
    """
    return torch.nan_to_num(Y, nan=value)


def nan_var(Y: torch.Tensor) -> float:
    """Unbiased variance of the observed (non-NaN) entries of ``Y`` (``Y.var()`` without NaN).

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) view, NaN where missing.

    Returns
    -------
    float
        The variance of all observed entries together.
    """
    if not has_missing(Y):
        return float(Y.var())
    y = Y[observed_mask(Y)]
    return float(y.var())


def mean_fill(Y: torch.Tensor) -> torch.Tensor:
    """``Y`` with every NaN replaced by its column's mean over the observed frames.

    A column never observed is filled with 0. Used only to initialise latents (PCA), never in
    an objective.

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) view, NaN where missing.

    Returns
    -------
    torch.Tensor
        (N, D) without NaN (``Y`` itself when nothing is missing).
    """
    if not has_missing(Y):
        return Y
    obs = observed_mask(Y)
    cnt = obs.sum(0).clamp_min(1)
    m = fill_missing(Y).sum(0) / cnt
    return torch.where(obs, Y, m.expand_as(Y))


def check_missing_views(views: list) -> None:
    """Validate the missing entries of time-aligned views (list of (N, D_k) tensors).

    NaN marks a missing entry; infinite values, a view with no observed entry and a frame
    missing in every view are errors.

    Parameters
    ----------
    views : list of torch.Tensor
        V time-aligned views (N, D_k), NaN where missing.

    Raises
    ------
    ValueError
        Naming the view or the frames at fault.
    """
    N = int(views[0].shape[0])
    any_obs = torch.zeros(N, dtype=torch.bool, device=views[0].device)
    for k, Y in enumerate(views):
        if bool(torch.isinf(Y).any()):
            raise ValueError(f"views[{k}]: expected finite values or NaN (missing), got an infinite entry")
        obs = observed_mask(Y)
        if not bool(obs.any()):
            raise ValueError(f"views[{k}]: every entry is missing (NaN); drop the view")
        any_obs = any_obs | obs.any(1)
    if not bool(any_obs.all()):
        bad = torch.nonzero(~any_obs).reshape(-1)[:10].tolist()
        raise ValueError(f"views: frames {bad}{'…' if int((~any_obs).sum()) > 10 else ''} are missing (NaN) in "
                         "every view; a frame observed in no view carries no information (remove it)")
