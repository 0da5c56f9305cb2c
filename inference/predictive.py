"""Posterior and posterior-predictive draws from any (model, guide) pair, as ArviZ data.

:func:`draw` draws ``num_samples`` joint samples: the guide's latent draw θ ~ q(θ);
then, for latent sites the model enumerates (``infer={"enumerate": "parallel"}``) and the
guide does not cover, an exact draw z ~ p(z | θ, data) by ``pyro.infer.infer_discrete``
(forward-filter backward-sample over the enumerated sites); then the model replayed on
(θ, z) — conditioned, for ``log_likelihood``, and unconditioned, for the posterior
predictive draw of each observed site. Latent sites that are neither in the guide nor
enumerated have no posterior here (the replay draws them from their prior): they are left
out of the ``posterior`` group with a warning, never reported as posterior draws.

:func:`posterior_predictive` packs the draws into the ArviZ object the installed ArviZ
provides — ``arviz.InferenceData`` for ArviZ 0.x (0.17 or later), an ``xarray.DataTree``
for ArviZ 1.x — with the groups ``posterior``, ``posterior_predictive``,
``observed_data``, ``log_likelihood`` and ``sample_stats`` (``lp``, ``log_q``) and the
dimension names a model module supplies (``dims={"Y1": ["time", "output"]}``). Both support ``idata.posterior["mu"]``,
``az.summary`` and ``to_netcdf``.
"""
from __future__ import annotations

import warnings
from numbers import Integral
from typing import Callable

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import torch
import xarray as xr
from pyro import poutine
from pyro.distributions.torch_distribution import MaskedDistribution
from pyro.distributions.util import scale_and_mask
from pyro.infer import infer_discrete
from pyro.poutine.subsample_messenger import _Subsample

from tandem.inference.numerics import set_seed
from tandem.inference.params import Boolean, InstanceOf, Interval, Seed, validate_params
from tandem.inference.validation import check_int_range, check_seed

__all__ = ["posterior_predictive", "draw", "ARVIZ_MAJOR", "to_arviz", "arviz_groups", "rescale_sites",
           "scored_log_likelihood"]

#: Major version of the installed ArviZ: 0 (``InferenceData``) or 1 (``xarray.DataTree``).
ARVIZ_MAJOR = int(az.__version__.split(".")[0])


def _is_factor(site) -> bool:
    return isinstance(site["fn"], dist.Unit) or (site["name"].startswith("_") and site["is_observed"])


def _is_deterministic(site) -> bool:
    return bool(site.get("infer", {}).get("_deterministic"))


def _sample_sites(trace):
    for name, site in trace.nodes.items():
        if site["type"] == "sample" and not _is_factor(site) and not isinstance(site["fn"], _Subsample):
            yield name, site


def _latent_only(trace) -> poutine.Trace:
    """The latent sample sites of ``trace`` (what an unconditioned replay must reuse)."""
    out = poutine.Trace()
    for name, site in _sample_sites(trace):
        if not site["is_observed"]:
            out.add_node(name, **site)
    return out


def _max_plate_nesting(trace) -> int:
    dims = [f.dim for site in trace.nodes.values() if site["type"] == "sample"
            for f in site["cond_indep_stack"] if f.vectorized and f.dim is not None]
    return -min(dims) if dims else 0


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def _dist_entry_mask(fn):
    """Which entries of a value of ``fn`` its log-density scores (``Distribution.mask``, possibly
    under ``to_event``): a bool tensor broadcastable to batch_shape + event_shape, or None."""
    if isinstance(fn, MaskedDistribution):
        m = fn._mask.bool() if isinstance(fn._mask, torch.Tensor) \
            else torch.as_tensor(fn._mask, dtype=torch.bool)  # device: cpu-ok (a Python bool)
        m = m.reshape(m.shape + (1,) * len(fn.event_shape))      # a batch mask covers the event entries
        inner = _dist_entry_mask(fn.base_dist)
        return m if inner is None else m & inner
    if isinstance(fn, torch.distributions.Independent):          # same value shape, batch dims reinterpreted
        return _dist_entry_mask(fn.base_dist)
    return None


def _scored(site):
    """The entries and the points of an observed site that its log-density scores.

    An entry is unscored when ``poutine.mask`` (``site["mask"]``) or a ``Distribution.mask``
    (at any level of the distribution) masks it; a point (one entry of the log-density, the event
    dims summed) is scored when any of its entries is. Returns ``(entries, points)``: bool tensors
    of the value's shape and of the log-density's shape, or ``(None, None)`` when nothing is masked.
    """
    fn, value = site["fn"], site["value"]
    ev = len(fn.event_shape)
    m = _dist_entry_mask(fn)
    if site["mask"] is not None:
        sm = torch.as_tensor(site["mask"], dtype=torch.bool, device=value.device)
        sm = sm.reshape(sm.shape + (1,) * ev)
        m = sm if m is None else m & sm
    if m is None:
        return None, None
    m = torch.broadcast_to(m.to(value.device), value.shape)
    return m, (m.flatten(-ev).any(-1) if ev else m)


def draw(model: Callable, guide: Callable, *args, num_samples: int = 100, seed: int = 0,
         log_likelihood: bool = True, **kwargs) -> dict[str, dict[str, np.ndarray]]:
    """Draw ``num_samples`` joint posterior / posterior-predictive samples.

    Per draw: θ ~ q(θ) from the guide; for the model's enumerated discrete sites that the guide
    does not cover, an exact draw z ~ p(z | θ, data) (``infer_discrete``); then the model replayed
    on (θ, z) without its observations for the predictive draws.

    Parameters
    ----------
    model, guide : callable
        The Pyro model and guide; both are called with ``*args, **kwargs``.
    *args
        The model's positional arguments.
    num_samples : int, default 100
        Number of joint draws S (≥ 1).
    seed : int, default 0
        Seed of Pyro's RNG.
    log_likelihood : bool, default True
        Compute the pointwise log-likelihoods.
    **kwargs
        The model's keyword arguments.

    Returns
    -------
    dict
        ``{"posterior": {site: (S, ...)}, "posterior_predictive": {site: (S, ...)},
        "observed_data": {site: (...)}, "log_likelihood": {site: (S, ...)},
        "sample_stats": {"lp": (S,), "log_q": (S,)}}`` as numpy arrays:

        - ``posterior``: the guide's latent sites, the enumerated sites drawn as above and
          ``pyro.deterministic`` sites. Model latent sites outside these are left out with a
          ``UserWarning`` naming them (their values would be prior draws).
        - ``posterior_predictive``: a fresh draw of every observed site given each joint draw.
        - ``log_likelihood``: log p(y_i | θ) pointwise — one value per entry of the site's batch
          shape (event dims summed) — the enumerated sites summed out (not conditional on the
          drawn labels). Each value is the term that ``lp`` holds for that point: multiplied by
          the site's ``poutine.scale``, and NaN at a point the model masks (``poutine.mask`` or
          ``Distribution.mask``: missing data, not a point; :func:`tandem.inference.loo` leaves
          it out, :func:`scored_log_likelihood` drops it for ``az.loo``). So Σ over the non-NaN
          entries is the observation part of ``lp``.
        - ``observed_data``: the observed values, NaN at the entries the model masks (floating
          values; integer values are kept as given).
        - ``sample_stats``: ``lp`` = log p(θ, y), the model's joint log-density of the draw and all
          observations (``pyro.factor`` terms included, enumerated sites summed out by
          ``TraceEnum_ELBO``), and ``log_q`` = log q(θ).

    Raises
    ------
    ValueError
        If ``num_samples`` or ``seed`` is out of range.
    """
    check_int_range(num_samples, "num_samples", low=1)
    check_seed(seed)
    set_seed(seed)
    post, ppc, obs, loglik = {}, {}, {}, {}
    stats: dict[str, list] = {"lp": [], "log_q": []}
    enumerated: list[str] = []
    first = True
    with torch.no_grad():
        for _ in range(num_samples):
            gtr = poutine.trace(guide).get_trace(*args, **kwargs)
            guide_latents = {n for n, s in _sample_sites(gtr) if not s["is_observed"]}
            if first:
                probe = poutine.trace(poutine.replay(model, trace=gtr)).get_trace(*args, **kwargs)
                uncovered = [n for n, s in _sample_sites(probe)
                             if not s["is_observed"] and not _is_deterministic(s) and n not in guide_latents]
                enumerated = [n for n in uncovered if probe.nodes[n]["infer"].get("enumerate") == "parallel"]
                prior_only = [n for n in uncovered if n not in enumerated]
                if prior_only:
                    warnings.warn(
                        f"posterior_predictive: latent site(s) {prior_only} of the model are not in the guide "
                        "and not enumerated, so they have no posterior here: they are left out of the posterior "
                        "group, and the posterior predictive and log-likelihood use prior draws of them",
                        UserWarning, stacklevel=3)
                first_dim = -1 - _max_plate_nesting(probe)
                first = False
            given = _latent_only(gtr)
            if enumerated:
                # exact p(z | θ, data) for the enumerated sites, given the guide's draw θ. Condition
                # (not replay) on θ: replay marks sites done, which hides the enumeration dims that
                # the log-density of a continuous site depending on z must carry.
                theta = {n: s["value"] for n, s in given.nodes.items()}
                tr = poutine.trace(infer_discrete(poutine.condition(model, data=theta), temperature=1,
                                                  first_available_dim=first_dim)).get_trace(*args, **kwargs)
                for n in enumerated:
                    site = dict(tr.nodes[n])
                    site["value"] = site["value"].reshape(probe.nodes[n]["value"].shape)
                    given.add_node(n, **site)
            cond = poutine.trace(poutine.replay(model, trace=given)).get_trace(*args, **kwargs)
            log_q = _log_density(gtr, latent_only=True, model_trace=cond)
            if enumerated:      # log p(θ, y) with the enumerated sites summed out: −loss = log p(θ, y) − log q(θ)
                lp = _enumerated_log_joint(model, guide, gtr, -1 - first_dim, log_q, args, kwargs)
            else:
                lp = _log_density(cond, latent_only=False)
            stats["lp"].append(np.float64(lp))
            stats["log_q"].append(np.float64(log_q))
            if enumerated and log_likelihood:
                marginal = _marginal_log_likelihood(model, {n: s["value"] for n, s in _latent_only(gtr).nodes.items()},
                                                    first_dim, enumerated, args, kwargs)
            latents = _latent_only(cond)
            free = poutine.trace(poutine.replay(poutine.uncondition(model), trace=latents)).get_trace(*args, **kwargs)
            for name, site in _sample_sites(cond):
                if _is_deterministic(site):
                    post.setdefault(name, []).append(_np(site["value"]))
                elif site["is_observed"]:
                    entries, points = _scored(site)
                    if name not in obs:
                        value = site["value"]
                        if entries is not None and value.is_floating_point():
                            value = torch.where(entries, value, torch.nan)     # not observed
                        obs[name] = _np(value)
                    if log_likelihood:
                        pointwise = site["fn"].log_prob(site["value"])
                        if enumerated:
                            m = marginal[name]
                            while m.dim() > pointwise.dim():      # the (now singleton) enumeration dims
                                m = m.squeeze(0)
                            pointwise = torch.broadcast_to(m, pointwise.shape)
                        # the term of lp this point stands for (scaled as in lp), so that leaving the
                        # point out of lp removes exactly it; a masked point is none: NaN
                        pointwise = pointwise * site["scale"]
                        if points is not None:
                            pointwise = torch.where(points, pointwise, torch.nan)
                        loglik.setdefault(name, []).append(_np(pointwise))
                    ppc.setdefault(name, []).append(_np(free.nodes[name]["value"]))
                elif name in guide_latents or name in enumerated:
                    post.setdefault(name, []).append(_np(site["value"]))
    def stack(d):
        return {k: np.stack(v) for k, v in d.items()}

    return {"posterior": stack(post), "posterior_predictive": stack(ppc), "observed_data": obs,
            "log_likelihood": stack(loglik), "sample_stats": stack(stats)}


def _marginal_log_likelihood(model, theta: dict, first_dim: int, enumerated: list, args, kwargs) -> dict:
    """Pointwise log p(y_i | θ) of every observed site with the enumerated sites summed out.

    The model is run under parallel enumeration (``poutine.enum``), conditioned on the guide's
    draw θ: each enumerated site z carries its support in an enumeration dim (left of the plate
    dims), and the observed site's log-density broadcasts over those dims. Then

        log p(y_i | θ) = logsumexp_z [Σ_z log p(z | ·) + log p(y_i | z, θ)],

    taken over the enumeration dims only, keeping the plate dims: exact for labels local to the
    observation's plates (mixtures, one label per point) and for global labels (a label outside
    every plate is summed out of each point's density separately, which is its marginal).
    A label the observation does not depend on (no size > 1 along its enumeration dim) is left
    out: it sums to one. (Pyro's enumeration itself refuses an observation outside a plate that
    depends on a label inside it, so every remaining label broadcasts with the observation.)

    Parameters
    ----------
    model : callable
        The Pyro model.
    theta : dict
        Values of the guide's latent sites (one draw of q).
    first_dim : int
        The first enumeration dim (``-1 - max_plate_nesting``).
    enumerated : list of str
        The model's enumerated sites that the guide does not cover.
    args, kwargs
        The model's arguments.

    Returns
    -------
    dict
        ``{observed site: tensor}``, each broadcastable to the site's batch shape.
    """
    enum_model = poutine.enum(poutine.condition(model, data=theta), first_available_dim=first_dim)
    tr = poutine.trace(enum_model).get_trace(*args, **kwargs)
    n_plate = -1 - first_dim
    z_lp = [scale_and_mask(tr.nodes[n]["fn"].log_prob(tr.nodes[n]["value"]), tr.nodes[n]["scale"],
                           tr.nodes[n]["mask"]) for n in enumerated]
    out = {}
    for name, site in _sample_sites(tr):
        if not site["is_observed"] or _is_deterministic(site) or name in theta:
            continue
        lp = site["fn"].log_prob(site["value"])
        total = lp
        for n, zl in zip(enumerated, z_lp):
            # z's own enumeration dim (counted from the right): a label the observation does not
            # depend on sums to one and is left out
            zdim = next(d for d in range(n_plate + 1, zl.dim() + 1) if zl.shape[-d] > 1) if zl.dim() > n_plate else None
            if zdim is None or lp.dim() < zdim or lp.shape[-zdim] == 1:
                continue
            total = total + zl
        enum_dims = tuple(d for d in range(total.dim()) if d < total.dim() - n_plate and total.shape[d] > 1)
        out[name] = torch.logsumexp(total, dim=enum_dims, keepdim=True) if enum_dims else total
    return out


def _enumerated_log_joint(model, guide, gtr, max_plate_nesting, log_q, args, kwargs) -> float:
    """log p(θ, y) = log q(θ) − TraceEnum_ELBO loss of the guide replayed at θ (one particle, the
    enumerated sites summed out exactly). NaN, with a warning, where Pyro's enumeration cannot
    evaluate the model (e.g. mixed float32/float64 factors): then :func:`tandem.inference.loo`
    refuses the export instead of using a wrong joint."""
    elbo = pyro.infer.TraceEnum_ELBO(max_plate_nesting=max_plate_nesting)
    try:
        # pyro.deterministic sites add nothing to the density (their masked Delta is float32, which
        # the enumeration's contraction would refuse to mix with float64 factors): hidden
        visible = poutine.block(model, hide_fn=lambda msg: bool(msg.get("infer", {}).get("_deterministic")))
        return log_q - float(elbo.loss(visible, poutine.replay(guide, trace=gtr), *args, **kwargs))
    except (RuntimeError, ValueError) as e:
        warnings.warn(f"posterior_predictive: log p(θ, y) with the enumerated sites summed out could not be "
                      f"computed ({e}); sample_stats['lp'] is NaN", UserWarning, stacklevel=4)
        return float("nan")


def _model_points(model_trace, name: str, gsite):
    """The points of guide site ``name`` that the model scores (a bool tensor of the guide
    log-density's shape), or None when the model scores all of them or no model site matches.

    The model site is the one of the same name or, for Pyro's autoguides (AutoNormal draws
    ``x_unconstrained`` and returns ``x`` as a Delta), the name without ``_unconstrained``;
    it must have the guide value's shape and event rank (an unconstrained companion of a
    constrained site of another shape is left alone)."""
    base = name[:-len("_unconstrained")] if name.endswith("_unconstrained") else name
    msite = model_trace.nodes.get(base)
    if msite is None or msite["type"] != "sample" or isinstance(msite["fn"], _Subsample):
        return None
    if msite["value"].shape != gsite["value"].shape or len(msite["fn"].event_shape) != len(gsite["fn"].event_shape):
        return None
    _, points = _scored(msite)
    lp_shape = gsite["fn"].batch_shape
    if points is None or points.shape != torch.broadcast_shapes(lp_shape, points.shape):
        return None
    return points


def _log_density(trace, latent_only: bool, model_trace=None) -> float:
    """Σ of the (scaled, masked) log-densities of a trace's sample sites: every site (latent,
    observed, ``pyro.factor``) → log p(θ, y) of a model trace; ``latent_only`` → log q(θ) of a
    guide trace.

    With ``model_trace`` (the model replayed on this guide trace), a guide site's points that the
    model's site of the same name does not score are left out of log q: entries of a latent the
    model masks (Pyro's ``obs_mask=`` imputation site ``y_unobserved`` is masked where y is
    observed; AutoNormal still samples every entry) do not enter p(θ, y), so their q-density
    would only add noise to the importance ratio p/q. Leaving them out gives the ratio of the
    scored latents exactly when q factorises over the site's batch points (mean-field and
    per-point guides); a guide that couples them (a joint Gaussian) draws them through one
    latent site and is left as it is.
    """
    total = 0.0
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or isinstance(site["fn"], _Subsample):
            continue
        if latent_only and site["is_observed"]:
            continue
        lp = scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"], site["mask"])
        points = _model_points(model_trace, name, site) if model_trace is not None else None
        if points is not None:
            lp = torch.where(points, lp, torch.zeros_like(lp))
        total += float(lp.sum())
    return total


def to_arviz(groups: dict[str, dict[str, np.ndarray]], dims: dict[str, list[str]] | None = None,
             coords: dict[str, list] | None = None):
    """Build the installed ArviZ's data object from ``{group: {var: array}}``.

    ArviZ 0.x gives ``az.InferenceData``, ArviZ 1.x an ``xarray.DataTree`` (``az.from_dict``
    changed its signature in 1.0: one nested dict instead of one keyword per group).

    Parameters
    ----------
    groups : dict
        ``{group: {variable: numpy.ndarray}}``. Arrays of every group except ``observed_data``
        have leading (chain, draw) axes.
    dims : dict, optional
        ``{variable: [dim names]}`` without chain/draw. Entries whose length does not match a
        variable's rank are ignored, so a model's dims constant may cover optional sites.
    coords : dict, optional
        ``{dim: coordinate values}``.

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        The data object of the installed ArviZ.
    """
    dims = dict(dims or {})
    groups = {g: v for g, v in groups.items() if v}
    used: dict[str, list[str]] = {}
    for g, vars_ in groups.items():
        lead = 0 if g == "observed_data" else 2
        for k, v in vars_.items():
            if k in dims and len(dims[k]) == v.ndim - lead:
                used[k] = list(dims[k])
    if ARVIZ_MAJOR >= 1:
        return az.from_dict(groups, dims=used or None, coords=coords)
    return az.from_dict(**groups, dims=used or None, coords=coords)


def arviz_groups(data) -> list[str]:
    """Names of the groups (posterior, observed_data, ...) of an ArviZ object of either API.

    Parameters
    ----------
    data : arviz.InferenceData or xarray.DataTree
        ``InferenceData`` (ArviZ 0.x, its ``groups()``) or a ``DataTree`` (ArviZ 1.x, its children).

    Returns
    -------
    list of str
        The group names.
    """
    groups = getattr(data, "groups")
    if callable(groups):
        return list(groups())
    return list(data.children)


def _set_group(data, name: str, ds) -> None:
    """Replace group ``name`` of an ArviZ object of either API by the Dataset ``ds``, in place
    (a DataTree takes item assignment; ArviZ 0.x's InferenceData holds its groups as attributes
    and only gained item assignment in later 0.x releases)."""
    if ARVIZ_MAJOR >= 1:
        data[name] = ds
    else:
        setattr(data, name, ds)


def rescale_sites(data, sites: dict):
    """Map observed sites of an ArviZ object from standardised to the data's units, in place.

    With y_data = y · scale + mean per entry of the site's last dimension, the draws in
    ``posterior_predictive`` and the values in ``observed_data`` are mapped. The log-densities
    lose the Jacobian, log scale per scored entry: a ``log_likelihood`` point loses the sum over
    its entries (one entry per point, or the whole event of a ``to_event`` site, whose
    log-likelihood has the event dims summed), and ``sample_stats["lp"]`` (log p(θ, y)) loses
    the sum over every scored entry of the site. Entries the model masks (NaN in
    ``observed_data``, see :func:`draw`) carry no Jacobian: they are in neither density.

    Parameters
    ----------
    data : arviz.InferenceData or xarray.DataTree
        An export of :func:`posterior_predictive` (either ArviZ API).
    sites : dict
        ``{site name: (dim, scale, mean)}``: the name ``dim`` of the site's last dimension in
        ``observed_data`` and per-entry ``scale``, ``mean`` (array-likes of that length).

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        ``data``, modified in place.

    Raises
    ------
    ValueError
        If ``dim`` is not the last dimension of the site in ``observed_data``, or the site has a
        log-likelihood but no ``observed_data`` (needed to tell its event dims and masked entries).
    """
    groups = arviz_groups(data)
    for name, (dim, scale, mean) in sites.items():
        sc = xr.DataArray(np.asarray(scale, dtype=float), dims=[dim])
        mu = xr.DataArray(np.asarray(mean, dtype=float), dims=[dim])
        obs = data["observed_data"][name] if "observed_data" in groups and name in data["observed_data"] else None
        if obs is not None and obs.dims[-1] != dim:
            raise ValueError(f"sites[{name!r}]: dim {dim!r} is not the last dimension of {name!r} in observed_data "
                             f"(its dims are {list(obs.dims)})")
        has_ll = "log_likelihood" in groups and name in data["log_likelihood"]
        if has_ll and obs is None:
            raise ValueError(f"sites[{name!r}]: the log_likelihood needs {name!r} in observed_data to be rescaled "
                             "(its event dims and masked entries)")
        if obs is not None:
            # log scale of every scored entry, in the data's shape (0 at masked entries: NaN in observed_data)
            jac = (xr.zeros_like(obs, dtype=float) + np.log(sc)).where(obs.notnull(), 0.0)
        if has_ll:
            ll = data["log_likelihood"][name]
            event = obs.dims[ll.ndim - 2:]       # data dims the log-likelihood sums (to_event), by position
            per_point = jac.sum(dim=list(event)) if event else jac
            data["log_likelihood"][name] = ll.copy(data=ll.values - per_point.values)
        for group in ("posterior_predictive", "observed_data"):
            if group in groups and name in data[group]:
                data[group][name] = data[group][name] * sc + mu
        if "sample_stats" in groups and "lp" in data["sample_stats"] and obs is not None:
            if bool(obs.notnull().all()):    # every entry scored: (size / len(scale)) · Σ log scale, as always
                shift = obs.size / sc.size * float(np.log(sc).sum())
            else:
                shift = float(jac.sum())
            data["sample_stats"]["lp"] = data["sample_stats"]["lp"] - shift
    return data


def scored_log_likelihood(data):
    """A copy of an export whose log-likelihood holds only the points the model scores, for ``az.loo``.

    :func:`draw` stores NaN at the points a model masks (missing data); ArviZ's ``az.loo`` /
    ``az.waic`` would propagate them. Here every log-likelihood variable with NaN entries is
    flattened to its non-NaN entries along a new dimension ``<name>_point``, whose coordinate is
    the entry's flat (C-order) index in the original variable; variables without NaN are kept
    as they are. ``az.loo`` of the result equals ``az.loo`` of the model with only the scored
    points. (:func:`tandem.inference.loo` leaves masked points out by itself.)

    Parameters
    ----------
    data : arviz.InferenceData or xarray.DataTree
        An export of :func:`posterior_predictive` (either ArviZ API) with a ``log_likelihood``
        group.

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        A copy of ``data``; ``data`` itself is left unchanged.

    Raises
    ------
    ValueError
        If ``data`` has no ``log_likelihood`` group, or an entry is NaN in some draws only.
    """
    if "log_likelihood" not in arviz_groups(data):
        raise ValueError("data: expected an export with a log_likelihood group")
    out = data.copy()
    ds = data["log_likelihood"]
    ds = getattr(ds, "ds", ds).copy()                                # DataTree node → Dataset
    for name in list(ds.data_vars):
        da = ds[name]
        v = np.asarray(da.values)
        flat = v.reshape(v.shape[:2] + (-1,))
        nan = np.isnan(flat)
        if not nan.any():
            continue
        keep = ~nan.all(axis=(0, 1))
        if nan[..., keep].any():
            raise ValueError(f"log_likelihood {name!r}: entries NaN in some draws only (a masked point is NaN in "
                             "every draw)")
        point = f"{name}_point"
        ds = ds.drop_vars(name)
        ds[name] = xr.DataArray(flat[..., keep], dims=[*da.dims[:2], point], coords={point: np.flatnonzero(keep)})
    unused = [d for d in ds.dims if not any(d in ds[v].dims for v in ds.data_vars)]
    _set_group(out, "log_likelihood", ds.drop_dims(unused))   # the replaced variables' old dims
    return out


#: declared constraints of :func:`posterior_predictive`'s own keyword parameters
PREDICTIVE_CONSTRAINTS = {
    "num_samples": [Interval(Integral, 1)], "seed": [Seed()],
    "dims": [None, InstanceOf(dict, what="a dict {site: [dim names]}")],
    "coords": [None, InstanceOf(dict, what="a dict {dim: values}")], "log_likelihood": [Boolean()],
}


def posterior_predictive(model: Callable, guide: Callable, *args, num_samples: int = 100,
                         seed: int = 0, dims: dict[str, list[str]] | None = None,
                         coords: dict[str, list] | None = None, log_likelihood: bool = True,
                         **kwargs):
    """Posterior and posterior-predictive draws of a (model, guide) pair as ArviZ data.

    :func:`draw` packed into one chain of ``num_samples`` draws, with the groups
    ``posterior``, ``posterior_predictive``, ``observed_data``, ``log_likelihood`` (pointwise
    log p(y_i | θ), enumerated labels summed out) and ``sample_stats`` (``lp`` = log p(θ, y),
    ``log_q`` = log q(θ), what :func:`tandem.inference.loo` needs).

    Parameters
    ----------
    model, guide : callable
        The Pyro model and guide; both are called with ``*args, **kwargs``.
    *args
        The model's positional arguments.
    num_samples : int, default 100
        Number of joint draws (≥ 1).
    seed : int, default 0
        Seed of Pyro's RNG for the draws.
    dims : dict, optional
        ``{site: [dim names]}`` without chain/draw, e.g. ``dims(...)`` of a model module.
    coords : dict, optional
        ``{dim: coordinate values}``.
    log_likelihood : bool, default True
        Store the ``log_likelihood`` group.
    **kwargs
        The model's keyword arguments.

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        ``InferenceData`` under ArviZ 0.x, ``DataTree`` under ArviZ 1.x (see :func:`to_arviz`).

    Raises
    ------
    ValueError
        If a keyword parameter is outside its declared constraint (``PREDICTIVE_CONSTRAINTS``).
    """
    validate_params(PREDICTIVE_CONSTRAINTS, dict(num_samples=num_samples, seed=seed, dims=dims, coords=coords,
                                                 log_likelihood=log_likelihood), "posterior_predictive: ")
    d = draw(model, guide, *args, num_samples=num_samples, seed=seed, log_likelihood=log_likelihood, **kwargs)

    def add_chain(g):                  # one chain: a leading axis of length 1
        return {k: v[None] for k, v in g.items()}

    return to_arviz({"posterior": add_chain(d["posterior"]),
                     "posterior_predictive": add_chain(d["posterior_predictive"]),
                     "log_likelihood": add_chain(d["log_likelihood"]),
                     "sample_stats": add_chain(d["sample_stats"]),
                     "observed_data": d["observed_data"]}, dims=dims, coords=coords)
