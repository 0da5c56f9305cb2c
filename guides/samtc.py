"""Hand-written mean-field guide for the shared-atom partial mixture (models/samtc.py).

    q(π) q(θ) Π_t q(μ_t) q(w_t) q(ρ_t) q(σ_t)
    q(π)     = Dirichlet(pi_conc_q)                     (K+1,)
    q(θ_k)   = N(theta_loc_k, diag(theta_scale_k²))    (K, d)      plate "atoms"
    q(μ_t,c) = N(mu_loc_t,c, diag(mu_scale_t,c²))      (h_t, d)    plate "slots_t"
    q(w_t)   = Dirichlet(w_conc_t)                      (h_t,)
    q(ρ_t)   = Beta(rho_a_t, rho_b_t)
    q(σ_t)   = LogNormal(sigma_loc_t, sigma_scale_t)

The enumerated discrete sites a_t, y_t, u_t are *not* in the guide: TraceEnum_ELBO sums
them out exactly in the model. The guide takes exactly the model's arguments (it ignores
the hyperparameters) and can be swapped for ``AutoNormal(poutine.block(model, hide=...))``
or any user guide.

Good initialisation matters for mixtures: :class:`Guide` takes an ``init`` dict of
starting values (``tandem.inference.samtc.model_fit.initial_values`` builds one from per-task
k-means and cross-task matching of the slot means); missing entries fall back to data-
driven defaults (random data points as means).
"""
from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from tandem.inference.numerics import DTYPE, seeded_generator
from tandem.inference.validation import check_seed
from tandem.models.samtc import check_tasks

__all__ = ["Guide", "SAMTCGuide", "guide"]


class Guide:
    """Callable mean-field guide of the SAMTC model; ``Guide(init=...)(tasks, h, n_atoms, **model_kwargs)``.

    Parameters
    ----------
    init : dict, optional
        Starting values, keys (all optional) ``theta_loc`` (K, d), ``mu_loc`` (list of (h_t, d)),
        ``w_conc`` (list of (h_t,)), ``sigma`` (list of floats), ``rho`` (list of floats),
        ``pi_conc`` (K+1,), ``scale`` (initial posterior std of locations, default 0.05).
    seed : int, default 0
        Seed of the random data points used as means when ``init`` has none.
    prefix : str, default ``"q_"``
        Parameter names are ``<prefix><site>_<kind>``, so two guides can live in one parameter
        store.
    """

    def __init__(self, *, init: dict | None = None, seed: int = 0, prefix: str = "q_"):
        if init is not None and not isinstance(init, dict):
            raise TypeError(f"init: expected a dict of starting values or None, got {type(init).__name__}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix: expected a string, got {prefix!r}")
        self.init = dict(init or {})
        self.seed = check_seed(seed)
        self.prefix = prefix

    def _get(self, key, t=None, default=None, device=None):
        v = self.init.get(key)
        if v is None:
            return default()
        v = v[t] if t is not None else v
        return torch.as_tensor(v, dtype=DTYPE, device=device).clone()

    def __call__(self, tasks, h, n_atoms, subsample_size=None, subsample=None, **_hyper):
        tasks, h = check_tasks(tasks, h)
        K, d = int(n_atoms), tasks[0].shape[1]
        s0 = float(self.init.get("scale", 0.05))
        dev = tasks[0].device
        opts = dict(dtype=DTYPE, device=dev)    # the parameters follow the data's device
        pos = constraints.positive
        # a CPU generator: the same seed picks the same starting points on every device
        gen = seeded_generator(self.seed)
        pooled = torch.cat(tasks)

        def rand_points(m):
            return pooled[torch.randint(len(pooled), (m,), generator=gen, device="cpu").to(dev)].clone()

        def get(key, t=None, default=None):
            return self._get(key, t, default=default, device=dev)

        p = self.prefix
        pc = pyro.param(p + "pi_conc", lambda: get("pi_conc", default=lambda: torch.full((K + 1,), 2.0, **opts)),
                        constraint=pos)
        pyro.sample("pi", dist.Dirichlet(pc))
        tl = pyro.param(p + "theta_loc", lambda: get("theta_loc", default=lambda: rand_points(K)))
        ts = pyro.param(p + "theta_scale", lambda: torch.full((K, d), s0, **opts), constraint=pos)
        with pyro.plate("atoms", K):
            pyro.sample("theta", dist.Normal(tl, ts).to_event(1))
        for t, X in enumerate(tasks):
            h_t = h[t]
            ml = pyro.param(f"{p}mu_{t}_loc", lambda: get("mu_loc", t, default=lambda: rand_points(h_t)))
            ms = pyro.param(f"{p}mu_{t}_scale", lambda: torch.full((h_t, d), s0, **opts), constraint=pos)
            with pyro.plate(f"slots_{t}", h_t):
                pyro.sample(f"mu_{t}", dist.Normal(ml, ms).to_event(1))
            wc = pyro.param(f"{p}w_{t}_conc", lambda: get(
                "w_conc", t, default=lambda: torch.full((h_t,), X.shape[0] / h_t + 1.0, **opts)), constraint=pos)
            pyro.sample(f"w_{t}", dist.Dirichlet(wc))
            r0 = float(self.init["rho"][t]) if "rho" in self.init else 0.9
            ra = pyro.param(f"{p}rho_{t}_a", lambda: torch.tensor(50.0 * r0, **opts), constraint=pos)
            rb = pyro.param(f"{p}rho_{t}_b", lambda: torch.tensor(50.0 * (1 - r0), **opts), constraint=pos)
            pyro.sample(f"rho_{t}", dist.Beta(ra, rb))
            sg0 = float(self.init["sigma"][t]) if "sigma" in self.init else float(X.std(0).mean())
            sl = pyro.param(f"{p}sigma_{t}_loc", lambda: torch.tensor(sg0, **opts).log())
            ss = pyro.param(f"{p}sigma_{t}_scale", lambda: torch.tensor(0.05, **opts), constraint=pos)
            pyro.sample(f"sigma_{t}", dist.LogNormal(sl, ss))


class SAMTCGuide(Guide):
    """The former name and signature of :class:`Guide`, kept for existing scripts.

    Parameters
    ----------
    init : dict, optional
        As in :class:`Guide`, here positional.
    seed : int, default 0
        As in :class:`Guide`.
    prefix : str, default ``"q_"``
        As in :class:`Guide`.
    """

    def __init__(self, init: dict | None = None, seed: int = 0, prefix: str = "q_"):
        super().__init__(init=init, seed=seed, prefix=prefix)


#: default-initialised guide (random data points as means); prefer Guide(init=initial_values(...)[0])
guide = Guide()
