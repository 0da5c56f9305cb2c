"""Posterior and posterior-predictive draws from any (model, guide) pair, as ArviZ data.

:func:`posterior_predictive` draws ``num_samples`` latent samples from the guide, replays
the model on each (conditioned, for ``log_likelihood``; unconditioned, for
``posterior_predictive``) and returns an :class:`arviz.InferenceData` with the groups
``posterior``, ``posterior_predictive``, ``observed_data`` and ``log_likelihood``, with
the dimension names a model module supplies (``dims={"Y1": ["time", "output"]}``).
"""
from __future__ import annotations

from typing import Callable

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.poutine.subsample_messenger import _Subsample

__all__ = ["posterior_predictive", "draw"]


def _is_factor(site) -> bool:
    return isinstance(site["fn"], dist.Unit) or (site["name"].startswith("_") and site["is_observed"])


def _sites(trace):
    for name, site in trace.nodes.items():
        if site["type"] == "sample" and not _is_factor(site) and not isinstance(site["fn"], _Subsample):
            yield name, site


def draw(model: Callable, guide: Callable, *args, num_samples: int = 100, seed: int = 0,
         log_likelihood: bool = True, **kwargs) -> dict[str, dict[str, np.ndarray]]:
    """Draw ``num_samples`` joint posterior / posterior-predictive samples.

    Returns ``{"posterior": {site: (S, ...)}, "posterior_predictive": {site: (S, ...)},
    "observed_data": {site: (...)}, "log_likelihood": {site: (S, ...)}}`` as numpy arrays.
    Latent sites come from the guide (and model-only latents such as deterministic
    sites or sites the guide does not cover, from the model given the guide's draw).
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples: expected a positive integer, got {num_samples!r}")
    pyro.set_rng_seed(seed)
    post, ppc, obs, loglik = {}, {}, {}, {}
    with torch.no_grad():
        for _ in range(num_samples):
            gtr = poutine.trace(guide).get_trace(*args, **kwargs)
            cond = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(*args, **kwargs)
            free = poutine.trace(poutine.replay(poutine.uncondition(model), trace=gtr)).get_trace(*args, **kwargs)
            for name, site in _sites(cond):
                if site["is_observed"]:
                    obs.setdefault(name, site["value"].detach().cpu().numpy())
                    if log_likelihood:
                        lp = site["fn"].log_prob(site["value"])
                        loglik.setdefault(name, []).append(lp.detach().cpu().numpy())
                    ppc.setdefault(name, []).append(free.nodes[name]["value"].detach().cpu().numpy())
                else:
                    post.setdefault(name, []).append(site["value"].detach().cpu().numpy())
            for name, site in cond.nodes.items():
                if site["type"] == "sample" and site.get("infer", {}).get("_deterministic"):
                    post[name][-1] = site["value"].detach().cpu().numpy()
    stack = lambda d: {k: np.stack(v) for k, v in d.items()}
    return {"posterior": stack(post), "posterior_predictive": stack(ppc), "observed_data": obs,
            "log_likelihood": stack(loglik)}


def posterior_predictive(model: Callable, guide: Callable, *args, num_samples: int = 100,
                         seed: int = 0, dims: dict[str, list[str]] | None = None,
                         coords: dict[str, list] | None = None, log_likelihood: bool = True,
                         **kwargs) -> az.InferenceData:
    """:func:`draw` packed into an ``arviz.InferenceData`` (one chain, ``num_samples`` draws).

    ``dims`` maps a site name to the names of its dimensions (without chain/draw), e.g.
    the ``DIMS`` constant of a model module; ``coords`` gives coordinate values.
    ``log_likelihood`` holds the pointwise log-density of each observed site, so
    ``az.loo``/``az.waic`` work where the observations are conditionally independent.
    """
    d = draw(model, guide, *args, num_samples=num_samples, seed=seed,
             log_likelihood=log_likelihood, **kwargs)
    add_chain = lambda g: {k: v[None] for k, v in g.items()}
    dims = dict(dims or {})
    # only keep dims whose rank matches the data, so a model's DIMS may cover optional sites
    def fit_dims(group, chain=True):
        out = {}
        for k, v in group.items():
            nd = v.ndim - (2 if chain else 0)  # chain and draw come first
            if k in dims and len(dims[k]) == nd:
                out[k] = dims[k]
        return out
    groups = {}
    if d["posterior"]:
        groups["posterior"] = add_chain(d["posterior"])
    if d["posterior_predictive"]:
        groups["posterior_predictive"] = add_chain(d["posterior_predictive"])
    if d["log_likelihood"]:
        groups["log_likelihood"] = add_chain(d["log_likelihood"])
    all_dims = {}
    for g in groups.values():
        all_dims.update(fit_dims(g))
    all_dims.update(fit_dims(d["observed_data"], chain=False))
    return az.from_dict(**groups, observed_data=d["observed_data"] or None,
                        dims=all_dims or None, coords=coords)
