"""Hand-written mean-field guides, one per tandem model with latent sample sites.

These are the guides a user writes from the site tables of ``docs/guides.md`` ("Writing your
own guide"): each samples every latent site of its model, with the model's plate names and
the model's event dims, from a family that factorises over sites and over the members of
every plate. They are fitted by the shared driver :func:`tandem.inference.fit` like the
shipped guides, and ``tests/test_mean_field_guides.py`` checks that each reaches the shipped
guide's ELBO within the margin stated on the docs page.

* :class:`McGPDSMeanField` — ``X_s``, ``X_k`` (Q, N), ``v_k`` (D_k, M), ``u_k`` (J, D_k, M):
  one Gaussian per plate member (latent dimension q, output d, basis function j) over the
  site's event (time for X, inducing points for v and u), with a free mean and a free
  lower-Cholesky scale (``covariance="full"``) or a free diagonal (``covariance="diag"``).
  No parameter is shared with the model (the shipped :class:`tandem.guides.mcgpds.Guide`
  reads the model's α, ε and time kernels).
* :class:`SAMTCMeanField` — every continuous site (π, θ, μ_t, w_t, ρ_t, σ_t) as a diagonal
  Normal in the unconstrained space of its support, mapped back by the support's bijection
  (``torch.distributions.biject_to``): the simplex sites π (K+1,) and w_t (h_t,) have K and
  h_t − 1 unconstrained coordinates (stick breaking), ρ_t ∈ (0, 1) a sigmoid, σ_t > 0 an exp.
  The enumerated sites a_t, y_t, u_t are not sampled.
* :class:`CoupledProjectionsMeanField` — ``U`` (d, N): independent N(m_kn, s_kn²) with free
  means (started at the data's coordinates in the initial frame) and free scales.

The twin GP's shipped guide is a point mass (:class:`tandem.guides.twin_gp.Guide`: the
ELBO is then the paper's objective, −Σ_b L(y_b)); its mean-field Gaussian guide is the
shipped :class:`tandem.guides.twin_gp.NormalGuide`, so there is none here.
"""
from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import biject_to, constraints

from tandem.inference.numerics import DTYPE, seeded_generator
from tandem.inference.validation import check_real_range, check_seed
from tandem.models.coupled_projections import check_model_args, frame, q_raw_init
from tandem.models.samtc import check_tasks

__all__ = ["McGPDSMeanField", "SAMTCMeanField", "CoupledProjectionsMeanField"]


def _check_prefix(prefix):
    if not isinstance(prefix, str) or not prefix:
        raise TypeError(f"prefix: expected a non-empty string, got {prefix!r}")
    return prefix


class McGPDSMeanField:
    r"""Mean-field guide for :func:`tandem.models.mcgpds.model`.

    .. math::

        q = \prod_q q(x^{(s)}_q) \prod_k \Big[\prod_q q(x^{(k)}_q)
            \prod_d q(v^{(k)}_d) \prod_{j,d} q(u^{(k)}_{jd})\Big],

    each factor a Gaussian over the site's event: ``N(m, L Lᵀ)`` with free m and free lower
    triangular L > 0 on the diagonal (``covariance="full"``), or ``N(m, diag s²)``
    (``covariance="diag"``). Sites, plates and events (the model's; see the McGPDS table
    of ``docs/guides.md``):

    ======  ===========  =================================  ===========
    site    shape        plates (dim)                       event
    ======  ===========  =================================  ===========
    X_s     (Q, N)       latent_dim (-1)                    time (N)
    X_k     (Q, N)       latent_dim (-1)                    time (N)
    v_k     (D_k, M)     output_k (-1)                      inducing (M)
    u_k     (J, D_k, M)  basis_k (-2), output_k (-1)        inducing (M)
    ======  ===========  =================================  ===========

    Parameters (with the default ``prefix="mf_"``): ``mf_X_s_loc`` (Q, N), ``mf_X_s_scale`` (Q, N, N) or
    (Q, N); likewise ``mf_X_k_*``, ``mf_v_k_*`` (D_k, M[, M]) and ``mf_u_k_*`` (J, D_k, M[, M]).
    The means of X_k start at the model's initial latent means ``data.init["mu_k"]`` (the PCA
    of the views, transposed to (Q, N)), those of X_s at the average of ``mu_k / (1 − α_k)``
    (α_k from ``data.init``: the prior mean of X_k is (1 − α_k) X_s), those of v and u at 0;
    the scales of X start at ``init_scale``, those of v and u at ``inducing_scale`` (the prior
    std of an inducing value is the mapping kernel's variance, 1 by default), times I for the
    full form.

    Parameters
    ----------
    covariance : {"full", "diag"}
        The covariance of each factor over its event.
    init_scale : float
        Initial standard deviation of the latent positions X_s, X_k (> 0).
    inducing_scale : float
        Initial standard deviation of the inducing values v_k, u_k (> 0).
    prefix : str
        Prefix of the parameter names, so that two guides can share one parameter store.

    Raises
    ------
    ValueError
        If ``covariance`` is not "full" or "diag", or a scale is not a finite real > 0.
    TypeError
        If ``prefix`` is not a non-empty string.
    """

    def __init__(self, *, covariance: str = "full", init_scale: float = 0.1, inducing_scale: float = 1.0,
                 prefix: str = "mf_"):
        if covariance not in ("full", "diag"):
            raise ValueError(f"covariance: expected 'full' or 'diag', got {covariance!r}")
        self.covariance = covariance
        self.init_scale = check_real_range(init_scale, "init_scale", 0.0, low_open=True)
        self.inducing_scale = check_real_range(inducing_scale, "inducing_scale", 0.0, low_open=True)
        self.prefix = _check_prefix(prefix)

    def _factor(self, name, loc0, s0):
        """The guide's factor over the last dim of ``loc0`` (batch = the leading dims), scale ``s0``."""
        p = self.prefix + name
        loc = pyro.param(p + "_loc", lambda: loc0.detach().clone())
        n = loc0.shape[-1]
        if self.covariance == "diag":
            scale = pyro.param(p + "_scale", lambda: torch.full_like(loc0, s0), constraint=constraints.positive)
            return dist.Normal(loc, scale).to_event(1)
        eye = torch.eye(n, dtype=loc0.dtype, device=loc0.device)
        tril = pyro.param(p + "_scale", lambda: (s0 * eye).expand(*loc0.shape, n).clone(),
                          constraint=constraints.lower_cholesky)
        return dist.MultivariateNormal(loc, scale_tril=tril)

    def __call__(self, data):
        """Sample ``X_s``, ``X_k``, ``v_k``, ``u_k`` for a :class:`tandem.models.mcgpds.McGPDSData`."""
        V, Q, M, J = data.V, data.Q, data.M, data.J
        opts = dict(dtype=DTYPE, device=data.device)
        mus = [data.init[f"mu_{k}"].mT.to(**opts) for k in range(V)]          # (Q, N) each
        # the prior mean of X_k is (1 − α_k) X_s: start X_s where it explains the X_k means
        shared = torch.stack([m / (1 - data.init[f"alpha_{k}"].to(**opts)).clamp_min(1e-3)
                              for k, m in enumerate(mus)]).mean(0)
        with pyro.plate("latent_dim", Q, dim=-1):
            pyro.sample("X_s", self._factor("X_s", shared, self.init_scale))
            for k in range(V):
                pyro.sample(f"X_{k}", self._factor(f"X_{k}", mus[k], self.init_scale))
        for k in range(V):
            D = data.out_dims[k]
            with pyro.plate(f"output_{k}", D, dim=-1):
                pyro.sample(f"v_{k}", self._factor(f"v_{k}", torch.zeros(D, M, **opts), self.inducing_scale))
                with pyro.plate(f"basis_{k}", J, dim=-2):
                    pyro.sample(f"u_{k}", self._factor(f"u_{k}", torch.zeros(J, D, M, **opts),
                                                           self.inducing_scale))

    def __repr__(self):
        return f"McGPDSMeanField(covariance={self.covariance!r}, init_scale={self.init_scale})"


class SAMTCMeanField:
    r"""Mean-field guide for :func:`tandem.models.samtc.model`, in unconstrained coordinates.

    Every continuous site z with support :math:`\mathcal{S}` is
    :math:`z = T(\zeta)`, :math:`\zeta \sim N(m, \mathrm{diag}\, s^2)`, with
    :math:`T` = ``biject_to(support)``; the density of z carries T's log-Jacobian (Pyro's
    ``TransformedDistribution``). Sites (the model's plates and events):

    ==========  ========  ================  =====  ===============================
    site        shape     plate             event  ζ (unconstrained) shape
    ==========  ========  ================  =====  ===============================
    pi          (K+1,)    —                 1      (K,)   stick breaking
    theta       (K, d)    atoms             1      (K, d) identity
    mu_t        (h_t, d)  slots_t           1      (h_t, d) identity
    w_t         (h_t,)    —                 1      (h_t − 1,) stick breaking
    rho_t       ()        —                 0      () sigmoid
    sigma_t     ()        —                 0      () exp
    ==========  ========  ================  =====  ===============================

    The enumerated sites a_t, y_t, u_t are summed out by ``TraceEnum_ELBO`` in the model and
    are not sampled here. Called with exactly the model's arguments ``(tasks, h, n_atoms,
    **hyper)``; ``subsample_size``/``subsample`` are accepted and ignored (no site of the
    guide lives in an instance plate).

    Parameters
    ----------
    init : dict or None
        Starting values in the constrained space, keys (all optional) ``theta_loc`` (K, d),
        ``mu_loc`` (list of (h_t, d)), ``w_conc`` (list of (h_t,); the mean w_conc / Σ w_conc
        is used), ``rho`` (list), ``sigma`` (list), ``pi_conc`` (K+1,) — the dict
        :func:`tandem.inference.samtc.model_fit.initial_values` builds. Missing entries:
        random data points as means, uniform weights, ρ = 0.9, σ_t = the task's mean std.
    init_scale : float
        Initial standard deviation of every ζ (> 0).
    seed : int
        Seed of the random data points used as means when ``init`` has none.
    prefix : str
        Prefix of the parameter names (``<prefix><site>_loc`` and ``_scale``).

    Raises
    ------
    TypeError
        If ``init`` is not a dict or None, or ``prefix`` is not a non-empty string.
    ValueError
        If ``init_scale`` is not a finite real > 0.
    """

    def __init__(self, *, init: dict | None = None, init_scale: float = 0.05, seed: int = 0,
                 prefix: str = "mfs_"):
        if init is not None and not isinstance(init, dict):
            raise TypeError(f"init: expected a dict of starting values or None, got {type(init).__name__}")
        self.init = dict(init or {})
        self.init_scale = check_real_range(init_scale, "init_scale", 0.0, low_open=True)
        self.seed = check_seed(seed)
        self.prefix = _check_prefix(prefix)

    def _site(self, name, support, value0):
        """Sample site ``name``: Normal in ``biject_to(support)``'s domain, pushed forward."""
        t = biject_to(support)
        zeta0 = t.inv(value0).detach().clone()
        p = self.prefix + name
        loc = pyro.param(p + "_loc", lambda: zeta0)
        scale = pyro.param(p + "_scale", lambda: torch.full_like(zeta0, self.init_scale),
                           constraint=constraints.positive)
        base = dist.Normal(loc, scale)
        if t.domain.event_dim:
            base = base.to_event(t.domain.event_dim)
        return dist.TransformedDistribution(base, [t])

    def _value(self, key, t, default, opts):
        v = self.init.get(key)
        if v is None:
            return default()
        return torch.as_tensor(v[t] if t is not None else v, **opts).clone()

    def __call__(self, tasks, h, n_atoms, subsample_size=None, subsample=None, **_hyper):
        """Sample π, θ, μ_t, w_t, ρ_t, σ_t (see the class docstring for shapes)."""
        tasks, h = check_tasks(tasks, h)
        K = int(n_atoms)
        opts = dict(dtype=DTYPE, device=tasks[0].device)
        gen = seeded_generator(self.seed)
        pooled = torch.cat(tasks)

        def rand_points(m):
            return pooled[torch.randint(len(pooled), (m,), generator=gen).to(pooled.device)].clone()  # device: cpu-ok

        pc = self._value("pi_conc", None, lambda: torch.ones(K + 1, **opts), opts)
        pyro.sample("pi", self._site("pi", constraints.simplex, pc / pc.sum()))
        with pyro.plate("atoms", K):
            pyro.sample("theta", self._site("theta", constraints.real_vector,
                                            self._value("theta_loc", None, lambda: rand_points(K), opts)))
        for t, X in enumerate(tasks):
            h_t = h[t]
            with pyro.plate(f"slots_{t}", h_t):
                pyro.sample(f"mu_{t}", self._site(f"mu_{t}", constraints.real_vector,
                                                  self._value("mu_loc", t, lambda: rand_points(h_t), opts)))
            wc = self._value("w_conc", t, lambda: torch.ones(h_t, **opts), opts)
            pyro.sample(f"w_{t}", self._site(f"w_{t}", constraints.simplex, wc / wc.sum()))
            r0 = float(self.init["rho"][t]) if "rho" in self.init else 0.9
            pyro.sample(f"rho_{t}", self._site(f"rho_{t}", constraints.unit_interval, torch.tensor(r0, **opts)))
            s0 = float(self.init["sigma"][t]) if "sigma" in self.init else float(X.std(0).mean())
            pyro.sample(f"sigma_{t}", self._site(f"sigma_{t}", constraints.positive, torch.tensor(s0, **opts)))

    def __repr__(self):
        return f"SAMTCMeanField(init_scale={self.init_scale}, seed={self.seed})"


class CoupledProjectionsMeanField:
    r"""Mean-field guide for :func:`tandem.models.coupled_projections.model`.

    .. math:: q(U) = \prod_{k=1}^{d} \prod_{n=1}^{N} N(U_{kn};\, m_{kn}, s_{kn}^2),

    site ``U`` (d, N) under plate ``latent_dim`` (size d, dim −1) with event N (the points):
    written ``Normal(m, s).to_event(1)`` inside the plate, matching the model's
    ``MultivariateNormal`` over the N points. Parameters ``<prefix>U_loc`` (d, N), started at
    the data's coordinates in the model's initial frame, (ẐQ₀)ᵀ — the guide registers the
    model's ``Q_raw`` to read Q₀ (the model's own initial value) but the means are free after
    that — and ``<prefix>U_scale`` (d, N) > 0, started at ``init_scale`` (default: the
    model's σ).

    Parameters
    ----------
    init_scale : float or None
        Initial standard deviation of every U_kn (> 0); None uses the model's σ.
    prefix : str
        Prefix of the parameter names.

    Raises
    ------
    ValueError
        If ``init_scale`` is given and not a finite real > 0.
    TypeError
        If ``prefix`` is not a non-empty string.
    """

    def __init__(self, *, init_scale: float | None = None, prefix: str = "mfc_"):
        self.init_scale = None if init_scale is None else check_real_range(init_scale, "init_scale", 0.0,
                                                                           low_open=True)
        self.prefix = _check_prefix(prefix)

    def __call__(self, zhat, omega, d, beta: float = 1.0, gamma: float = 1e-3, sigma: float = 0.01,
                 precondition: bool = True):
        """Sample ``U`` (d, N); takes exactly the model's arguments."""
        zhat, omega = check_model_args(zhat, omega, d, beta, gamma, sigma)
        N, D = zhat.shape
        s0 = float(sigma) if self.init_scale is None else self.init_scale
        p = self.prefix

        def loc0():
            Q0 = frame(pyro.param("Q_raw", lambda: q_raw_init(D, d, zhat.device)), zhat, omega, beta, False)
            return (zhat @ Q0).T.detach().clone()

        loc = pyro.param(p + "U_loc", loc0)
        scale = pyro.param(p + "U_scale", lambda: torch.full((d, N), s0, dtype=zhat.dtype, device=zhat.device),
                           constraint=constraints.positive)
        with pyro.plate("latent_dim", d):
            pyro.sample("U", dist.Normal(loc, scale).to_event(1))

    def __repr__(self):
        return f"CoupledProjectionsMeanField(init_scale={self.init_scale})"
