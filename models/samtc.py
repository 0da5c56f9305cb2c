"""SAMTC's generative story: a shared-atom partial mixture over T clustering tasks.

Zhang, Zhang & Liu, *Self-Adapted Multi-Task Clustering* (IJCAI 2016) is an algorithm,
not a generative model; the spec (docs/specs/samtc.md, "Generative story") carries its ideas
into a probabilistic model whose posterior answers SAMTC's two questions — *which source
instances are reusable for a target* and *how related is source s to target t* — and in
which transfer flows only through linked atoms, so private clusters cannot transfer
negatively. The deterministic algorithm lives in ``inference/samtc.py``; fitting helpers
and the derived quantities in ``inference/samtc_model_fit.py``.

Generative story (tasks t = 1..T, each with n_t points in R^d and h_t cluster slots)::

    π            ~ Dirichlet(pi_conc · 1_{K+1})                 link probabilities; π_0 = private
    θ_k          ~ N(prior_loc, prior_scale² I_d),   k = 1..K     global cluster atoms
    for each task t:
      a_{t,c}    ~ Categorical(π),               c = 1..h_t      0: private slot, k ≥ 1: linked to θ_k
      μ_{t,c}    ~ N(θ_{a_{t,c}}, tau² I)        if a_{t,c} ≥ 1  (related label space)
                 ~ N(prior_loc, prior_scale² I)  if a_{t,c} = 0  (broad prior: a private class)
      w_t        ~ Dirichlet(alpha · 1_{h_t})                     label weights
      ρ_t        ~ Beta(rho_a, rho_b)                             fraction of typical instances
      σ_t        ~ LogNormal(log sigma_loc, sigma_scale)          within-cluster std
      for each instance i = 1..n_t:
        y_{t,i}  ~ Categorical(w_t)                               cluster
        u_{t,i}  ~ Bernoulli(ρ_t)                                 1: typical/reusable, 0: atypical
        x_{t,i}  ~ N(μ_{t,y}, s(u)² I_d),  s(1) = σ_t, s(0) = widen · σ_t

Sites and shapes (``DIMS`` names the dimensions; task index t is part of the site name
because h_t and n_t differ across tasks — see "Unequal tasks" below):

    pi        (K+1,)          theta   (K, d)           [plate "atoms"]
    a_t       (h_t,)          mu_t    (h_t, d)         [plate "slots_t"]       a_t enumerated
    w_t       (h_t,)          rho_t   ()               sigma_t ()
    y_t, u_t  (n_t,)          x_t     (n_t, d) obs     [plate "inst_t"]        y_t, u_t enumerated

Discrete sites ``a_t``, ``y_t``, ``u_t`` carry ``infer={"enumerate": "parallel"}`` and are
summed out exactly by ``TraceEnum_ELBO(max_plate_nesting=MAX_PLATE_NESTING)``; a guide
must not sample them. Every plate is one-dimensional and no two plates nest, so
``MAX_PLATE_NESTING = 1``.

Unequal tasks: rather than padding T tasks to (max n_t, max h_t) with masks (which would
need a masked Dirichlet for w_t), the model loops over tasks in Python with one named
plate per task (``slots_t``, ``inst_t``). T is small in multi-task clustering (2–4), so the
loop costs nothing, and every site has its true shape.

Minibatching: ``subsample_size=b`` subsamples each task's instance plate (``inst_t``) to
b points (or all n_t when n_t <= b); Pyro scales the batch's likelihood by n_t / b, so the
ELBO estimate stays unbiased. ``subsample`` (a dict t -> index tensor) fixes the indices
instead. Pyro's TraceEnum_ELBO requires one common scale for *all* enumerated sites, which
a_t (scale 1) and the subsampled instance plates of unequal tasks (n_t / b) cannot share;
so in minibatch mode y_t and u_t are summed out by hand inside ``x_t`` (a 2·h_t-component
mixture — the same sum enumeration computes; tests check the two paths agree) and only
a_t is enumerated. Posterior marginals of y, u come from the full-data (enumerated) model.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.ops.indexing import Vindex

from tandem.inference.numerics import DTYPE, set_seed
from tandem.inference.validation import check_int_range, check_real_range

__all__ = ["model", "dims", "simulate", "check_tasks", "DIMS", "MAX_PLATE_NESTING", "site_names"]

MAX_PLATE_NESTING = 1


def site_names(T: int) -> dict[str, list[str]]:
    """Site names of a T-task model, per kind.

    Parameters
    ----------
    T : int
        Number of tasks.

    Returns
    -------
    dict
        {"global": [...], "task": [...per task...], "enum": [...], "obs": [...]}.
    """
    return {"global": ["pi", "theta"],
            "task": [f"{s}_{t}" for t in range(T) for s in ("mu", "w", "rho", "sigma")],
            "enum": [f"{s}_{t}" for t in range(T) for s in ("a", "y", "u")],
            "obs": [f"x_{t}" for t in range(T)]}


def dims(T: int) -> dict[str, list[str]]:
    """ArviZ dimension names for every site of a T-task model.

    Per-task dims are suffixed with the task index, because n_t and h_t differ across tasks.

    Parameters
    ----------
    T : int
        Number of tasks.

    Returns
    -------
    dict
        {site: [dim names]} without chain/draw.
    """
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 1:
        raise ValueError(f"T: expected a positive number of tasks, got {T!r}")
    d = {"pi": ["link"], "theta": ["atom", "feature"]}
    for t in range(T):
        d.update({f"a_{t}": [f"slot_{t}"], f"mu_{t}": [f"slot_{t}", "feature"], f"w_{t}": [f"slot_{t}"],
                  f"rho_{t}": [], f"sigma_{t}": [], f"y_{t}": [f"instance_{t}"],
                  f"u_{t}": [f"instance_{t}"], f"x_{t}": [f"instance_{t}", "feature"]})
    return d


#: dims for up to 8 tasks (``posterior_predictive`` ignores entries of absent sites)
DIMS = dims(8)


def check_task_layout(shapes, h, h_name: str = "h") -> list[int]:
    """The structure every multi-task clustering input must have, whatever its array type.

    ``shapes``: [(n_t, d_t)] of the T tasks; ``h``: one cluster number h_t per task (named
    ``h_name`` in the messages). Raises ValueError for: no tasks, len(h) != T, an empty task,
    different feature dimensions, an h_t that is not an integer >= 2, or n_t < h_t. Returns
    [int(h_t)].
    """
    if len(shapes) == 0:
        raise ValueError("tasks: expected a non-empty list of (n_t, d) arrays")
    if h is None or isinstance(h, (str, bytes)) or not hasattr(h, "__len__") or len(h) != len(shapes):
        raise ValueError(f"{h_name}: expected one cluster number per task ({len(shapes)}), got {h!r}")
    d0 = shapes[0][1]
    hs = []
    for t, ((n, d), ht) in enumerate(zip(shapes, h)):
        if isinstance(ht, bool) or not isinstance(ht, (int, np.integer, float, np.floating)) \
                or int(ht) != ht or ht < 2:
            raise ValueError(f"{h_name}[{t}]: expected an integer number of clusters >= 2, got {ht!r}")
        if n == 0:
            raise ValueError(f"tasks[{t}]: is empty (0 points); every task needs at least h_t = {int(ht)} points")
        if d != d0:
            raise ValueError(f"tasks[{t}]: has {d} features but tasks[0] has {d0}; "
                             "all tasks must share one feature space")
        if n < ht:
            raise ValueError(f"tasks[{t}]: has {n} points, fewer than its {int(ht)} clusters")
        hs.append(int(ht))
    return hs


def check_tasks(tasks, h) -> tuple[list[torch.Tensor], list[int]]:
    """Validate the tasks and cluster counts; return float64 tensors.

    The structure is checked by :func:`check_task_layout`; here also that every task is a 2-d
    array of finite numbers. Every task is put on the device of the first task given as a tensor
    (the CPU if all are arrays).

    Parameters
    ----------
    tasks : list of array_like or torch.Tensor
        Task t's (n_t, d) data.
    h : list of int
        h_t per task.

    Returns
    -------
    tasks : list of torch.Tensor
        float64 tasks on one device.
    h : list of int
        The cluster counts.

    Raises
    ------
    ValueError, TypeError
        Naming the task and what is wrong.
    """
    if not isinstance(tasks, (list, tuple)) or len(tasks) == 0:
        raise ValueError("tasks: expected a non-empty list of (n_t, d) arrays")
    out = []
    dev = next((X.device for X in tasks if isinstance(X, torch.Tensor)), torch.device("cpu"))
    for t, X in enumerate(tasks):
        if isinstance(X, torch.Tensor):
            Xt = X.detach().to(device=dev, dtype=DTYPE) if X.requires_grad else X.to(device=dev, dtype=DTYPE)
        else:
            Xt = torch.as_tensor(np.asarray(X), dtype=DTYPE, device=dev)
        if Xt.dim() != 2:
            raise ValueError(f"tasks[{t}]: expected a 2-d (n_t, d) array, got shape {tuple(Xt.shape)}")
        out.append(Xt)
    hs = check_task_layout([tuple(X.shape) for X in out], h)
    for t, Xt in enumerate(out):
        if not torch.isfinite(Xt).all():
            raise ValueError(f"tasks[{t}]: contains NaN or inf; expected finite values")
    return out, hs


#: each scalar hyperparameter of :func:`model`, declared once: a finite real strictly above this
#: bound (``sigma_loc`` is the median of σ_t, the LogNormal's exp-location, so positive too)
HYPERPARAMETER_RANGES = {"tau": 0.0, "prior_scale": 0.0, "sigma_loc": 0.0, "sigma_scale": 0.0, "widen": 1.0,
                         "alpha": 0.0, "pi_conc": 0.0, "rho_a": 0.0, "rho_b": 0.0}


def check_hyperparameters(**values) -> dict:
    """Check scalar hyperparameters of :func:`model` against :data:`HYPERPARAMETER_RANGES`.

    Parameters
    ----------
    **values
        Some of the names in :data:`HYPERPARAMETER_RANGES` with their values; each must be a
        finite real above its bound.

    Returns
    -------
    dict
        The values as Python floats.

    Raises
    ------
    ValueError
        Naming the first value that is not a finite real in its range (a bool or a string is
        not a number here).
    """
    return {name: check_real_range(v, name, HYPERPARAMETER_RANGES[name], None, low_open=True)
            for name, v in values.items()}


def model(tasks: Sequence[torch.Tensor], h: Sequence[int], n_atoms: int, tau: float = 0.25,
          prior_loc=None, prior_scale: float = 5.0, sigma_loc: float = 1.0, sigma_scale: float = 0.5,
          widen: float = 3.0, alpha: float = 1.0, pi_conc: float = 1.0, rho_a: float = 5.0,
          rho_b: float = 1.0, subsample_size: int | None = None, subsample: dict | None = None):
    """Shared-atom partial mixture (see module docstring). Returns ``None``; observes ``x_t``.

    Parameters
    ----------
    tasks : list of T float64 tensors (n_t, d) (``check_tasks`` converts arrays).
    h : list of T ints, the cluster slots h_t of each task.
    n_atoms : K >= 1 global atoms.
    tau : std of a linked slot mean around its atom (small: linked slots ≈ same class).
    prior_loc, prior_scale : broad prior N(prior_loc, prior_scale² I) of atoms and private
        slot means (prior_loc defaults to the pooled data mean).
    sigma_loc, sigma_scale : LogNormal prior of σ_t.
    widen : s(0)/s(1), the widening of atypical instances' likelihood (> 1).
    alpha, pi_conc, rho_a, rho_b : Dirichlet / Beta hyperparameters of w_t, π, ρ_t.
    subsample_size, subsample : instance-plate minibatching (see module docstring).

    Raises
    ------
    ValueError
        Naming the argument: bad tasks or h (:func:`check_tasks`), ``n_atoms`` not an integer
        ≥ 1, a scalar hyperparameter outside its range (:data:`HYPERPARAMETER_RANGES`).
    """
    tasks, h = check_tasks(tasks, h)
    K, d = check_int_range(n_atoms, "n_atoms (number of atoms)", 1), tasks[0].shape[1]
    check_hyperparameters(tau=tau, prior_scale=prior_scale, sigma_loc=sigma_loc, sigma_scale=sigma_scale,
                          widen=widen, alpha=alpha, pi_conc=pi_conc, rho_a=rho_a, rho_b=rho_b)
    opts = dict(dtype=DTYPE, device=tasks[0].device)   # every site follows the data's device
    if prior_loc is None:
        prior_loc = torch.cat(tasks).mean(0)
    prior_loc = torch.as_tensor(prior_loc, **opts).expand(d)

    pi = pyro.sample("pi", dist.Dirichlet(torch.full((K + 1,), float(pi_conc), **opts)))
    with pyro.plate("atoms", K):
        theta = pyro.sample("theta", dist.Normal(prior_loc, torch.tensor(float(prior_scale), **opts)).to_event(1))
    # slot 0 of the extended table is the private (broad) component
    loc_ext = torch.cat([prior_loc.unsqueeze(0), theta], 0)                      # (K+1, d)
    scale_ext = torch.cat([torch.tensor([float(prior_scale)], **opts),
                           torch.full((K,), float(tau), **opts)])                  # (K+1,)

    for t, X in enumerate(tasks):
        n_t, h_t = X.shape[0], h[t]
        with pyro.plate(f"slots_{t}", h_t):
            a = pyro.sample(f"a_{t}", dist.Categorical(pi), infer={"enumerate": "parallel"})
            mu = pyro.sample(f"mu_{t}", dist.Normal(Vindex(loc_ext)[..., a, :],
                                                    scale_ext[a].unsqueeze(-1)).to_event(1))
        w = pyro.sample(f"w_{t}", dist.Dirichlet(torch.full((h_t,), float(alpha), **opts)))
        rho = pyro.sample(f"rho_{t}", dist.Beta(torch.tensor(float(rho_a), **opts), torch.tensor(float(rho_b), **opts)))
        sigma = pyro.sample(f"sigma_{t}", dist.LogNormal(torch.tensor(math.log(sigma_loc), **opts),
                                                          torch.tensor(float(sigma_scale), **opts)))
        idx = None if subsample is None else subsample.get(t)
        bs = None if subsample_size is None or idx is not None else min(int(subsample_size), n_t)
        minibatch = subsample_size is not None or subsample is not None
        with pyro.plate(f"inst_{t}", n_t, subsample_size=bs, subsample=idx) as ind:
            if not minibatch:
                y = pyro.sample(f"y_{t}", dist.Categorical(w), infer={"enumerate": "parallel"})
                u = pyro.sample(f"u_{t}", dist.Bernoulli(rho), infer={"enumerate": "parallel"})
                scale = sigma * (1.0 + (widen - 1.0) * (1.0 - u))
                pyro.sample(f"x_{t}", dist.Normal(Vindex(mu)[..., y, :], scale.unsqueeze(-1)).to_event(1),
                            obs=X.index_select(0, ind.to(X.device)))
            else:
                # Pyro's TraceEnum_ELBO needs ONE common scale for all enumerated sites, but the
                # slot sites a_t (scale 1) and the subsampled instance plates (scale n_t/b,
                # different per task) cannot share one. So on a minibatch y and u are summed out
                # by hand — the same sum as enumeration: p(x) = Σ_{c,u} w_c ρ^u (1-ρ)^(1-u)
                # N(x | μ_c, s(u)² I) — as a 2·h_t-component mixture, and only a_t is enumerated.
                logits = torch.cat([w.log() + rho.log(), w.log() + torch.log1p(-rho)], -1)   # (2h_t,)
                locs = torch.cat([mu, mu], -2)                                                  # (2h_t, d)
                scales = torch.cat([sigma.expand(h_t), (widen * sigma).expand(h_t)], -1)
                comp = dist.Normal(locs, scales.unsqueeze(-1)).to_event(1)
                pyro.sample(f"x_{t}", dist.MixtureSameFamily(dist.Categorical(logits=logits), comp),
                            obs=X.index_select(0, ind.to(X.device)))


def simulate(n, h, n_atoms: int, d: int = 2, seed: int = 0, prior_loc=None, **hyper) -> dict:
    """Draw T tasks from the generative story of :func:`model` (prior draws of every site).

    Runs the model itself with its observations removed (``poutine.uncondition``), seeded, so
    the draw follows exactly the documented story.

    Parameters
    ----------
    n : list of int
        n_t, instances per task.
    h : list of int
        h_t, cluster slots per task.
    n_atoms : int
        K, the number of shared atoms.
    d : int, default 2
        Feature dimension.
    seed : int, default 0
        Seed of the draw.
    prior_loc : array_like, optional
        Centre of the broad prior (default 0).
    **hyper
        The model's other keyword arguments (tau, prior_scale, sigma_loc, sigma_scale, widen,
        alpha, pi_conc, rho_a, rho_b).

    Returns
    -------
    dict
        {"tasks": [(n_t, d) float64 arrays], "labels": [(n_t,) y_t], "typical": [(n_t,) u_t],
        "links": [(h_t,) a_t (0 = private, k ≥ 1 = atom k)], "means": [(h_t, d) μ_t],
        "atoms": (K, d) θ, "weights": [(h_t,) w_t], "rho": [ρ_t], "sigma": [σ_t], "pi": (K+1,)}.

    Raises
    ------
    ValueError
        Naming ``n``/``h`` (not two lists of equal length), an entry ``n[t]`` or ``d`` or
        ``n_atoms`` that is not an integer ≥ 1, ``seed`` outside [0, 2³² − 1], or (from
        :func:`model`) a bad ``h`` or hyperparameter.
    """
    if not isinstance(n, (list, tuple)) or not isinstance(h, (list, tuple)) or len(n) != len(h) or not n:
        raise ValueError(f"n, h: expected two non-empty lists of equal length (one entry per task), "
                         f"got n={n!r}, h={h!r}")
    n = [check_int_range(nt, f"n[{t}] (instances of task {t})", 1) for t, nt in enumerate(n)]
    d = check_int_range(d, "d (feature dimension)", 1)
    # (n_atoms, h and the hyperparameters are checked by model(), the seed by set_seed, before any draw)
    # drawn on the CPU: the same seed gives the same tasks on every machine (numpy out)
    dummy = [torch.zeros(nt, d, dtype=DTYPE, device="cpu") for nt in n]
    loc = torch.zeros(d, dtype=DTYPE, device="cpu") if prior_loc is None \
        else torch.as_tensor(prior_loc, dtype=DTYPE, device="cpu")
    set_seed(seed)
    with torch.no_grad():
        tr = poutine.trace(poutine.uncondition(model)).get_trace(dummy, list(h), n_atoms, prior_loc=loc, **hyper)
    val = lambda name: tr.nodes[name]["value"].detach().cpu().numpy()  # noqa: E731
    T = len(n)
    return {"tasks": [val(f"x_{t}") for t in range(T)],
            "labels": [val(f"y_{t}").astype(np.int64) for t in range(T)],
            "typical": [val(f"u_{t}").astype(np.int64) for t in range(T)],
            "links": [val(f"a_{t}").astype(np.int64) for t in range(T)],
            "means": [val(f"mu_{t}") for t in range(T)],
            "weights": [val(f"w_{t}") for t in range(T)],
            "rho": [float(val(f"rho_{t}")) for t in range(T)],
            "sigma": [float(val(f"sigma_{t}")) for t in range(T)],
            "atoms": val("theta"), "pi": val("pi")}
