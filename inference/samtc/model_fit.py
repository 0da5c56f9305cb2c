"""Fitting the shared-atom partial mixture (models/samtc.py) and deriving SAMTC's quantities.

:func:`fit_model` scales the tasks (:func:`scale_tasks`), builds a data-driven initialisation
(:func:`initial_values`: k-means per task for the slot means, atoms from cross-task
matching of the slot means), fits the hand-written mean-field guide with the shared
driver ``tandem.inference.fit`` and ``TraceEnum_ELBO``, and keeps the best of ``restarts`` runs by
a Monte Carlo ELBO estimate. The returned :class:`ModelFit` gives

* ``cluster_probs()`` — posterior marginals q(y_{t,i} = c) from
  ``TraceEnum_ELBO.compute_marginals`` (averaged over guide draws) and ``labels()``;
* ``discrete_samples(S)`` — joint posterior draws of (a, y, u) from
  ``pyro.infer.infer_discrete`` (temperature 1) given guide draws;
* ``reusable_probs()`` — for every ordered pair (target t, source s) and source instance i,

      P(reusable_{t←s,i}) = E[ 1{a_{s, y_{s,i}} ≥ 1 and a_{s, y_{s,i}} ∈ {a_{t,c}}_c} · u_{s,i} ],

  i.e. the instance's cluster links to a global atom that some cluster of the target also
  links to, and the instance is typical (u = 1);
* ``relatedness()`` — R̂^(t)_s = E[(1/n_s) Σ_i 1{a_{s,y_{s,i}} ≥ 1, ∈ {a_{t,c}}}] (asymmetric,
  in [0, 1], R̂^(t)_t = 1), the model's counterpart of SAMTC's KMM relatedness R^(t)_s;
* ``shared_slot_probs()`` — P(slot (t, c) links to an atom that another task also uses).

Expectations are Monte Carlo averages over joint posterior draws of the discrete sites.
"""
from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field

import numpy as np
import pyro
import pyro.optim
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO, infer_discrete
from pyro.poutine.subsample_messenger import _Subsample
from scipy.sparse.csgraph import connected_components
from scipy.spatial.distance import cdist

from tandem.guides.samtc import Guide
from tandem.inference.numerics import DTYPE, set_seed
from tandem.inference.predictive import to_arviz
from tandem.inference.samtc.spectral import kmeans
from tandem.inference.svi import fit
from tandem.inference.validation import SEED_MAX, check_int_range, check_real_range, check_seed, resolve_device
from tandem.models import samtc as samtc_model
from tandem.models.samtc import MAX_PLATE_NESTING, check_tasks

__all__ = ["ModelFit", "fit_model", "initial_values", "scale_tasks", "MODEL_HYPERPARAMETERS"]


def scale_tasks(tasks, h, seed: int = 0):
    """Centre on the pooled mean and scale by the pooled within-cluster std of per-task k-means.

    Working in units of the within-cluster spread makes the default hyperparameters (tau = 0.25,
    sigma ≈ 1) meaningful for any data scale. One isotropic scale for every feature, not a
    per-column z-score (:func:`tandem.inference.distances.standardize`): the mixture's clusters
    are isotropic Gaussians, and rescaling columns separately would change their shapes.

    Parameters
    ----------
    tasks : list of array_like
        Task t's (n_t, d) data.
    h : list of int
        Clusters per task.
    seed : int, default 0
        Seed of the k-means.

    Returns
    -------
    tasks : list of torch.Tensor
        Scaled float64 tasks.
    centre : torch.Tensor
        (d,) pooled mean.
    scale : float
        Pooled within-cluster std.
    km : list
        k-means results per task.
    """
    Xs, hs = check_tasks(tasks, h)
    km = [_kmeans(X.detach().cpu().numpy(), hs[t], seed) for t, X in enumerate(Xs)]
    for t, k in enumerate(km):
        # each task has its own noise scale σ_t: a task whose h_t k-means clusters have no spread
        # (at most h_t distinct points, e.g. a constant task) drives σ_t → 0 and the ELBO to +∞
        if not k.inertia_ > 0:
            raise ValueError(f"tasks[{t}]: zero within-cluster spread (at most h_t = {hs[t]} distinct points, "
                             f"e.g. all points identical); the mixture needs more than h_t distinct points "
                             f"per task to estimate its noise scale")
    ss = sum(k.inertia_ for k in km)
    n = sum(len(X) for X in Xs)
    d = Xs[0].shape[1]
    scale = float(np.sqrt(ss / (n * d)))
    centre = torch.cat(Xs).mean(0)
    return [(X - centre) / scale for X in Xs], centre, scale, km


def initial_values(tasks_std, h, km=None, link_threshold: float | None = None, n_atoms: int | None = None,
                   seed: int = 0, tau: float = 0.25) -> tuple[dict, int]:
    """Starting values for :class:`tandem.guides.samtc.Guide` and the number of atoms K.

    Slot means: k-means centres of each task. Atoms: slots of different tasks whose centres are
    mutual nearest neighbours across the two tasks and closer than ``link_threshold`` are joined;
    each connected group spanning ≥ 2 tasks becomes one atom (initialised at the mean of its
    centres).

    Parameters
    ----------
    tasks_std : list of torch.Tensor
        The standardised tasks.
    h : list of int
        Clusters per task.
    km : list, optional
        Fitted k-means results to reuse.
    link_threshold : float, optional
        A finite real > 0; default 2·tau·√d within-cluster stds.
    n_atoms : int, optional
        Number of atoms (default: the number of linked groups, at least 1); extra atoms are
        padded with random slot centres.
    seed : int, default 0
        Seed of the k-means and the padding.
    tau : float, default 0.25
        Slot-to-atom std (sets the default threshold), in the model's range
        (:data:`tandem.models.samtc.HYPERPARAMETER_RANGES`).

    Returns
    -------
    init : dict
        Initial values of the guide's parameters.
    K : int
        The number of atoms.

    Raises
    ------
    ValueError
        Naming ``tau`` or ``link_threshold`` when it is not a finite real in its range (a NaN threshold
        would link nothing), before any k-means.
    """
    samtc_model.check_hyperparameters(tau=tau)
    if link_threshold is not None:
        check_real_range(link_threshold, "link_threshold", 0.0, low_open=True)
    Xs = [X.to(DTYPE) if isinstance(X, torch.Tensor) else torch.as_tensor(np.asarray(X), dtype=DTYPE, device="cpu")
          for X in tasks_std]
    T, d = len(Xs), Xs[0].shape[1]
    if km is None:
        km = [_kmeans(X.detach().cpu().numpy(), h[t], seed) for t, X in enumerate(Xs)]
    else:  # km fitted on raw data: map its labels to standardised centres
        km = [_Centres(X.detach().cpu().numpy(), k.labels_, h[t]) for t, (X, k) in enumerate(zip(Xs, km))]
    C = [k.cluster_centers_ for k in km]
    thr = 2.0 * tau * np.sqrt(d) if link_threshold is None else float(link_threshold)
    offs = np.cumsum([0] + [len(c) for c in C])
    N = offs[-1]
    A = np.zeros((N, N), dtype=bool)
    for t in range(T):
        for s in range(t + 1, T):
            D = cdist(C[t], C[s])
            for i in range(len(C[t])):
                j = int(D[i].argmin())
                if int(D[:, j].argmin()) == i and D[i, j] < thr:
                    A[offs[t] + i, offs[s] + j] = A[offs[s] + j, offs[t] + i] = True
    _, comp = connected_components(A, directed=False)
    task_of = np.repeat(np.arange(T), [len(c) for c in C])
    allc = np.concatenate(C)
    atoms = [allc[comp == g].mean(0) for g in np.unique(comp) if len(set(task_of[comp == g])) >= 2]
    rng = np.random.default_rng(seed)
    K = max(1, len(atoms)) if n_atoms is None else int(n_atoms)
    while len(atoms) < K:
        atoms.append(allc[rng.integers(N)] + 0.01 * rng.normal(size=d))
    atoms = np.array(atoms[:K])
    w_conc, sig = [], []
    for t, k in enumerate(km):
        counts = np.bincount(k.labels_, minlength=h[t]).astype(float)
        w_conc.append(counts + 1.0)
        resid = Xs[t].detach().cpu().numpy() - C[t][k.labels_]
        sig.append(float(np.sqrt((resid ** 2).mean())))
    init = {"theta_loc": atoms, "mu_loc": C, "w_conc": w_conc, "sigma": sig,
            "rho": [0.9] * T, "pi_conc": np.full(K + 1, 2.0)}
    return init, K


class _Centres:
    """Cluster labels and centres of one task (``labels_``, ``cluster_centers_``, ``inertia_``)."""

    def __init__(self, X, labels, h, inertia=float("nan")):
        self.labels_ = np.asarray(labels)
        self.cluster_centers_ = np.stack([X[self.labels_ == c].mean(0) if (self.labels_ == c).any()
                                          else X[c % len(X)] for c in range(h)])
        self.inertia_ = float(inertia)


def _kmeans(X, h, seed) -> _Centres:
    """k-means of one task with the project's own k-means++ (best of 10 restarts)."""
    labels, inertia = kmeans(X, h, seed=seed, n_init=10)
    return _Centres(X, labels, h, inertia)


@dataclass
class ModelFit:
    """A fitted shared-atom model: standardised data, model kwargs, guide and its parameters.

    Attributes
    ----------
    tasks : list of torch.Tensor
        The standardised (n_t, d) tasks (see :func:`scale_tasks`).
    h : list of int
        Clusters per task.
    n_atoms : int
        Number of shared atoms K.
    model_kwargs : dict
        Keyword arguments of :func:`tandem.models.samtc.model`.
    guide : tandem.guides.samtc.Guide
        The fitted guide.
    param_state : dict
        The Pyro parameter store's state of the fit (see :meth:`activate`).
    elbo : float
        The final ELBO estimate.
    losses : numpy.ndarray
        The loss trace.
    centre : torch.Tensor
        (d,) the pooled mean subtracted from the data.
    scale : float
        The pooled within-cluster std the data were divided by.
    wall_time : float
        Seconds of the fit.
    restart_elbos : list of float
        The ELBO of every restart.
    """
    tasks: list
    h: list
    n_atoms: int
    model_kwargs: dict
    guide: Guide
    param_state: dict
    elbo: float
    losses: np.ndarray
    centre: torch.Tensor
    scale: float
    wall_time: float = 0.0
    restart_elbos: list = field(default_factory=list)

    @property
    def args(self):
        return (self.tasks, self.h, self.n_atoms)

    def activate(self) -> None:
        """Load this fit's parameters into Pyro's global parameter store (clearing it first).
        """
        pyro.clear_param_store()
        pyro.get_param_store().set_state(self.param_state)

    def model(self, *args, **kwargs):
        """The shared-atom model, :func:`tandem.models.samtc.model`.

        Parameters
        ----------
        *args, **kwargs
            Passed to the model (normally ``self.args`` and ``self.model_kwargs``).

        Returns
        -------
        None
            The model's sample sites are recorded by Pyro.
        """
        return samtc_model.model(*args, **kwargs)

    def cluster_probs(self, num_samples: int = 10, seed: int = 0) -> dict:
        """Posterior marginals of the enumerated sites, averaged over guide draws (``compute_marginals``).

        Parameters
        ----------
        num_samples : int, default 10
            Number of guide draws.
        seed : int, default 0
            Seed of the draws.

        Returns
        -------
        dict
            {"y": [(n_t, h_t)], "u": [(n_t,) P(u = 1)], "a": [(h_t, K + 1)]} numpy arrays.
        """
        self.activate()
        set_seed(seed)
        elbo = TraceEnum_ELBO(max_plate_nesting=MAX_PLATE_NESTING)
        T = len(self.tasks)
        acc = {"y": [0.0] * T, "u": [0.0] * T, "a": [0.0] * T}
        check_int_range(num_samples, "num_samples", 1)     # 0 would divide by zero below
        with torch.no_grad():
            for _ in range(num_samples):
                m = elbo.compute_marginals(samtc_model.model, self.guide, *self.args, **self.model_kwargs)
                for t in range(T):
                    acc["y"][t] = acc["y"][t] + m[f"y_{t}"].probs.reshape(-1, self.h[t]).detach().cpu().numpy()
                    acc["u"][t] = acc["u"][t] + m[f"u_{t}"].probs.reshape(-1).detach().cpu().numpy()
                    acc["a"][t] = acc["a"][t] + m[f"a_{t}"].probs.reshape(self.h[t], -1).detach().cpu().numpy()
        return {k: [v / num_samples for v in vs] for k, vs in acc.items()}

    def labels(self, num_samples: int = 10, seed: int = 0) -> list:
        """Cluster labels per task, argmax_c q(y_{t,i} = c).

        Parameters
        ----------
        num_samples : int, default 10
            Number of guide draws.
        seed : int, default 0
            Seed of the draws.

        Returns
        -------
        list of numpy.ndarray
            (n_t,) labels per task.
        """
        return [p.argmax(1) for p in self.cluster_probs(num_samples, seed)["y"]]

    def _joint_trace(self, kw: dict):
        """One joint posterior draw: the guide's continuous sites, then the enumerated
        discrete sites (a_t, y_t, u_t) drawn exactly by ``infer_discrete`` given them.
        Returns ``(guide_draw, trace)``: the continuous values and the model's trace."""
        gtr = poutine.trace(self.guide).get_trace(*self.args, **kw)
        # condition (not replay) on the guide draw: replay marks sites "done", which hides
        # the enumerated a_t dims that mu_t's log-prob carries from infer_discrete
        draw = {n: s["value"] for n, s in gtr.nodes.items() if s["type"] == "sample"}
        m = infer_discrete(poutine.condition(samtc_model.model, data=draw),
                           first_available_dim=-1 - MAX_PLATE_NESTING, temperature=1)
        return draw, poutine.trace(m).get_trace(*self.args, **kw)

    def discrete_samples(self, num_samples: int = 100, seed: int = 0) -> dict:
        """Joint posterior draws of the enumerated sites via ``infer_discrete`` (temperature 1).

        Each draw: a guide sample of the continuous sites, then (a, y, u) from their exact
        conditional posterior given it.

        Parameters
        ----------
        num_samples : int, default 100
            Number of guide draws.
        seed : int, default 0
            Seed of the draws.

        Returns
        -------
        dict
            {"a": [(S, h_t)], "y": [(S, n_t)], "u": [(S, n_t)]}.
        """
        self.activate()
        set_seed(seed)
        T = len(self.tasks)
        out = {"a": [[] for _ in range(T)], "y": [[] for _ in range(T)], "u": [[] for _ in range(T)]}
        kw = {k: v for k, v in self.model_kwargs.items() if k not in ("subsample_size", "subsample")}
        check_int_range(num_samples, "num_samples", 1)
        with torch.no_grad():
            for _ in range(num_samples):
                _, tr = self._joint_trace(kw)
                for t in range(T):
                    for s in ("a", "y", "u"):
                        out[s][t].append(tr.nodes[f"{s}_{t}"]["value"].reshape(-1).long().detach().cpu().numpy())
        return {k: [np.stack(v) for v in vs] for k, vs in out.items()}

    @staticmethod
    def _shared_slots(a_t: np.ndarray, a_s: np.ndarray) -> np.ndarray:
        """(S, h_s) bool: slot c of s links to an atom (>=1) that some slot of t links to."""
        return np.array([np.isin(a_s[j], a_t[j][a_t[j] >= 1]) & (a_s[j] >= 1) for j in range(len(a_s))])

    def derived(self, num_samples: int = 100, seed: int = 0, samples: dict | None = None) -> dict:
        """SAMTC's quantities from joint posterior draws.

        Parameters
        ----------
        num_samples : int, default 100
            Number of guide draws.
        seed : int, default 0
            Seed of the draws.
        samples : dict, optional
            Draws of :meth:`discrete_samples` to reuse.

        Returns
        -------
        dict
            {"reusable_probs": {(t, s): (n_s,)}, "R": (T, T), "R_std": (T, T),
            "shared_slot": [(h_t,) P(slot shared with some other task)]}.
        """
        smp = self.discrete_samples(num_samples, seed) if samples is None else samples
        A, Y, U = smp["a"], smp["y"], smp["u"]
        T = len(self.tasks)
        S = len(A[0])
        reus, R, Rs = {}, np.eye(T), np.zeros((T, T))
        for t in range(T):
            for s in range(T):
                if s == t:
                    continue
                sh = self._shared_slots(A[t], A[s])                                     # (S, h_s)
                inst_shared = np.take_along_axis(sh, Y[s], axis=1)                      # (S, n_s)
                reus[(t, s)] = (inst_shared & (U[s] == 1)).mean(0)
                frac = inst_shared.mean(1)
                R[t, s], Rs[t, s] = frac.mean(), frac.std()
        shared_slot = []
        for t in range(T):
            anyo = np.zeros((S, self.h[t]), dtype=bool)
            for s in range(T):
                if s != t:
                    anyo |= self._shared_slots(A[s], A[t])
            shared_slot.append(anyo.mean(0))
        return {"reusable_probs": reus, "R": R, "R_std": Rs, "shared_slot": shared_slot}

    def to_inference_data(self, num_samples: int = 100, seed: int = 0):
        """Joint posterior draws of every model latent as ArviZ data, in the data's units.

        Each draw: the guide's continuous sites (π, θ, μ_t, w_t, ρ_t, σ_t), then the enumerated
        sites (a_t, y_t, u_t) from their exact conditional posterior given them (``infer_discrete``,
        as :meth:`discrete_samples`), then a posterior-predictive x_t from the model given all of
        them. The dimension names are those of :func:`tandem.models.samtc.dims` (the plates' index
        sites ``atoms``, ``slots_t``, ``inst_t`` are not variables).

        The fit works on tasks centred and scaled by :func:`scale_tasks`; locations (θ, μ_t, x_t) are
        mapped back as v·scale + centre and σ_t as σ·scale, so everything is in the units of the data
        passed to :func:`fit_model`; the densities of x (``log_likelihood`` and the observation part
        of ``lp``) carry the Jacobian −d·log(scale) per instance. ``lp`` and ``log_q`` keep the
        latents' densities in the fit's parametrisation (their Jacobians cancel in the ratio p/q).

        Parameters
        ----------
        num_samples : int, default 100
            Number of joint draws.
        seed : int, default 0
            Seed of the draws.

        Returns
        -------
        arviz.InferenceData or xarray.DataTree
            Groups ``posterior`` (the latents above), ``posterior_predictive`` and ``observed_data``
            (x_t), ``log_likelihood`` (x_t, (instance_t,) per draw: the density of instance n of task
            t with its labels summed out, log p(x_n | θ) = log Σ_{c,u} w_c ρ^u (1−ρ)^{1−u}
            N(x_n; μ_c, s_u² I), s_1 = σ_t, s_0 = widen·σ_t, the model's own likelihood at full
            batch) and ``sample_stats`` (``lp`` = log p(θ, x) with a, y, u summed out by
            TraceEnum_ELBO at the guide draw, ``log_q`` = log q(θ), for :func:`tandem.inference.loo`).
        """
        num_samples = check_int_range(num_samples, "num_samples", 1)
        self.activate()
        set_seed(seed)
        T = len(self.tasks)
        kw = {k: v for k, v in self.model_kwargs.items() if k not in ("subsample_size", "subsample")}
        c, sc = self.centre.detach().cpu().numpy(), float(self.scale)
        d = self.tasks[0].shape[1]
        jac = d * np.log(sc)                                       # per instance
        n_total = sum(int(X.shape[0]) for X in self.tasks)
        full = {t: torch.arange(int(X.shape[0]), device=X.device) for t, X in enumerate(self.tasks)}
        elbo = TraceEnum_ELBO(max_plate_nesting=MAX_PLATE_NESTING)
        post, ppc, loglik, stats = {}, {}, {}, {"lp": [], "log_q": []}
        with torch.no_grad():
            for _ in range(num_samples):
                gtr = poutine.trace(self.guide).get_trace(*self.args, **kw)
                draw = {n: s["value"] for n, s in gtr.nodes.items() if s["type"] == "sample"
                        and not isinstance(s["fn"], _Subsample)}
                m = infer_discrete(poutine.condition(samtc_model.model, data=draw),
                                   first_available_dim=-1 - MAX_PLATE_NESTING, temperature=1)
                tr = poutine.trace(m).get_trace(*self.args, **kw)
                latent = dict(draw)
                latent.update({n: s["value"] for n, s in tr.nodes.items()
                               if s["type"] == "sample" and not s["is_observed"]
                               and not isinstance(s["fn"], _Subsample)})
                free = poutine.trace(poutine.uncondition(poutine.condition(samtc_model.model, data=latent))
                                     ).get_trace(*self.args, **kw)
                # labels summed out: the model's own mixture likelihood (its minibatch branch,
                # here over every instance, so no rescaling)
                mix = poutine.trace(poutine.condition(samtc_model.model, data=draw)).get_trace(
                    *self.args, **{**kw, "subsample": full})
                log_q = float(gtr.log_prob_sum())
                lp = log_q - float(elbo.loss(samtc_model.model, poutine.replay(self.guide, trace=gtr),
                                             *self.args, **kw))
                stats["lp"].append(lp - n_total * jac)
                stats["log_q"].append(log_q)
                for n, v in latent.items():
                    discrete = n.split("_")[0] in ("a", "y", "u")
                    v = v.detach()
                    post.setdefault(n, []).append(v.reshape(-1).long().cpu().numpy() if discrete else v.cpu().numpy())
                for t in range(T):
                    site = mix.nodes[f"x_{t}"]
                    loglik.setdefault(f"x_{t}", []).append(
                        site["fn"].log_prob(site["value"]).detach().cpu().numpy() - jac)
                    ppc.setdefault(f"x_{t}", []).append(free.nodes[f"x_{t}"]["value"].detach().cpu().numpy() * sc + c)
        post = {n: np.stack(v) for n, v in post.items()}
        post["theta"] = post["theta"] * sc + c
        for t in range(T):
            post[f"mu_{t}"] = post[f"mu_{t}"] * sc + c
            post[f"sigma_{t}"] = post[f"sigma_{t}"] * sc
        obs = {f"x_{t}": self.tasks[t].detach().cpu().numpy() * sc + c for t in range(T)}
        dims = {k: v for k, v in samtc_model.dims(T).items() if k in post or k in obs}
        return to_arviz({"posterior": {k: v[None] for k, v in post.items()},
                         "posterior_predictive": {k: np.stack(v)[None] for k, v in ppc.items()},
                         "log_likelihood": {k: np.stack(v)[None] for k, v in loglik.items()},
                         "sample_stats": {k: np.asarray(v, dtype=float)[None] for k, v in stats.items()},
                         "observed_data": obs}, dims=dims)

    def reusable_probs(self, num_samples: int = 100, seed: int = 0) -> dict:
        """Posterior probability that each source instance is reusable, per (target, source) pair.

        Parameters
        ----------
        num_samples : int, default 100
            Number of guide draws.
        seed : int, default 0
            Seed of the draws.

        Returns
        -------
        dict
            {(t, s): (n_s,) probabilities} (:meth:`derived`'s ``reusable_probs``).
        """
        return self.derived(num_samples, seed)["reusable_probs"]

    def relatedness(self, num_samples: int = 100, seed: int = 0) -> np.ndarray:
        """Posterior mean relatedness between tasks.

        Parameters
        ----------
        num_samples : int, default 100
            Number of guide draws.
        seed : int, default 0
            Seed of the draws.

        Returns
        -------
        numpy.ndarray
            (T, T) R (:meth:`derived`'s ``R``).
        """
        return self.derived(num_samples, seed)["R"]

    def elbo_estimate(self, num_particles: int = 20) -> float:
        """Monte Carlo estimate of the full-data ELBO (no subsampling).

        Parameters
        ----------
        num_particles : int, default 20
            Particles of the estimate.

        Returns
        -------
        float
            The ELBO.
        """
        check_int_range(num_particles, "num_particles", 1)
        self.activate()
        kw = {k: v for k, v in self.model_kwargs.items() if k not in ("subsample_size", "subsample")}
        with torch.no_grad():
            loss = TraceEnum_ELBO(max_plate_nesting=MAX_PLATE_NESTING, num_particles=num_particles,
                                  vectorize_particles=False).loss(samtc_model.model, self.guide, *self.args, **kw)
        return -float(loss)


#: the keywords of :func:`tandem.models.samtc.model` that ``fit_model(**hyper)`` may set (the data,
#: the atom count, the minibatch arguments, tau and widen are fit_model's own arguments)
MODEL_HYPERPARAMETERS = tuple(
    n for n in inspect.signature(samtc_model.model).parameters
    if n not in ("tasks", "h", "n_atoms", "tau", "widen", "subsample_size", "subsample"))


def fit_model(tasks, h, n_atoms: int | None = None, num_steps: int = 600, lr: float = 0.05,
              restarts: int = 1, seed: int = 0, subsample_size: int | None = None,
              tau: float = 0.25, widen: float = 3.0, link_threshold: float | None = None,
              progress: bool = False, tol: float | None = None, device=None, **hyper) -> ModelFit:
    """Fit the shared-atom SAMTC model: standardise, initialise, SVI with TraceEnum_ELBO.

    The tasks are scaled by :func:`scale_tasks`, the guide starts from :func:`initial_values`,
    and :func:`tandem.inference.fit` runs ClippedAdam (lr decaying to 0.1·lr) on TraceEnum_ELBO (a, y, u summed
    out exactly). The best of ``restarts`` by final ELBO is kept; restart r uses k-means seed
    ``seed + r`` and SVI seed ``seed + r``.

    Parameters
    ----------
    tasks : list of array_like or torch.Tensor
        Task t's (n_t, d) data, one feature space.
    h : list of int
        Clusters per task (≥ 2).
    n_atoms : int, optional
        Number of shared atoms K (default: from the initialisation's cross-task links).
    num_steps : int, default 600
        SVI steps per restart.
    lr : float, default 0.05
        Initial learning rate.
    restarts : int, default 1
        Independent restarts.
    seed : int, default 0
        Base seed.
    subsample_size : int, optional
        Minibatch size of the instance plates (default full batch).
    tau : float, default 0.25
        Std of a linked slot mean around its atom, in within-cluster stds (> 0).
    widen : float, default 3.0
        s(0)/s(1), the widening of atypical instances' likelihood (> 1).
    link_threshold : float, optional
        Distance below which slot centres of different tasks are linked at initialisation
        (default 2·tau·√d).
    progress : bool, default False
        Show a progress bar.
    tol : float, optional
        Relative loss change that stops a restart early (the driver's stop rule).
    device : str or torch.device, optional
        Where the fit runs ("cpu", "cuda", ...; default: the device of tensor tasks, the CPU for
        numpy arrays); the k-means initialisation runs on the CPU.
    **hyper
        Model hyperparameters (``alpha``, ``pi_conc``, ``rho_a``, ``rho_b``, ``sigma_scale``,
        ``prior_scale``, ``prior_loc``, ``sigma_loc``: :data:`MODEL_HYPERPARAMETERS`; see
        :func:`tandem.models.samtc.model`). Any other keyword is a ``TypeError`` naming it.

    Returns
    -------
    ModelFit
        The best restart.

    Raises
    ------
    ValueError
        For bad tasks (see :func:`tandem.models.samtc.check_task_layout`; also a task with at most
        h_t distinct points, see :func:`scale_tasks`) or parameters.
    TypeError
        For a keyword that is not a model hyperparameter.
    """
    unknown = sorted(set(hyper) - set(MODEL_HYPERPARAMETERS))
    if unknown:   # else the first SVI step fails inside the model with "model() got an unexpected ..."
        raise TypeError(f"fit_model: unexpected keyword argument(s) {', '.join(map(repr, unknown))}; the model's "
                        f"hyperparameters are {', '.join(MODEL_HYPERPARAMETERS)}")
    check_int_range(restarts, "restarts", 1)
    seed = check_seed(seed)
    if seed + restarts - 1 > SEED_MAX:   # restart r runs with seed + r
        raise ValueError(f"seed: restart r uses seed + r, so seed + restarts - 1 = {seed + restarts - 1} must be "
                         f"at most {SEED_MAX}; got seed={seed}, restarts={restarts}")
    check_int_range(num_steps, "num_steps", 0)
    check_real_range(lr, "lr (learning rate)", 0.0, None, low_open=True)
    # the model's scalar hyperparameters, by their one declaration (before any work)
    samtc_model.check_hyperparameters(tau=tau, widen=widen, **{
        k: v for k, v in hyper.items() if k in samtc_model.HYPERPARAMETER_RANGES})
    if n_atoms is not None:
        check_int_range(n_atoms, "n_atoms", 1)
    if subsample_size is not None:
        check_int_range(subsample_size, "subsample_size", 1)
    if link_threshold is not None:
        check_real_range(link_threshold, "link_threshold", 0.0, None, low_open=True)
    dev = resolve_device(device, tasks)
    Xs, hs = check_tasks(tasks, h)
    Xs = [X.to(dev) for X in Xs]
    best = None
    elbos = []
    for r in range(restarts):
        Z, centre, scale, km = scale_tasks(Xs, hs, seed=seed + r)
        init, K = initial_values(Z, hs, km=km, link_threshold=link_threshold, n_atoms=n_atoms, seed=seed + r,
                                 tau=tau)
        spread = float(torch.cat(Z).std(0).max())
        kwargs = dict(tau=tau, widen=widen, prior_loc=Z[0].new_zeros(Z[0].shape[1]),
                      prior_scale=max(3.0, 2.0 * spread), sigma_loc=1.0, subsample_size=subsample_size)
        kwargs.update(hyper)
        g = Guide(init=init, seed=seed + r)
        res = fit(samtc_model.model, g, Z, hs, K, loss=TraceEnum_ELBO(max_plate_nesting=MAX_PLATE_NESTING),
                  optim=pyro.optim.ClippedAdam({"lr": lr, "lrd": 0.1 ** (1.0 / max(num_steps, 1))}),
                  num_steps=num_steps, seed=seed + r, progress=progress, tol=tol, window=20,
                  desc=f"SAMTC model (restart {r})", **kwargs)
        mf = ModelFit(Z, hs, K, kwargs, g, copy.deepcopy(pyro.get_param_store().get_state()), float("nan"), res.losses,
                      centre, scale, res.wall_time)
        mf.elbo = mf.elbo_estimate(num_particles=10)
        elbos.append(mf.elbo)
        if best is None or mf.elbo > best.elbo:
            best = mf
    best.restart_elbos = elbos
    best.activate()
    return best
