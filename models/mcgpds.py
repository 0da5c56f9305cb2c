"""McGPDS — Multi-view Collaborative Gaussian Process Dynamical Systems (Sun et al., JMLR 2023).

Generative story for V ≥ 1 views observed at the same time stamps ``t`` (N,), with
sequences as independent blocks of every time kernel:

1. shared latent  ``x_q^(s) ~ N(0, K_t^(s))``, q = 1..Q
2. private latent ``x_q^(k) | x_q^(s) ~ N((1−α_k) x_q^(s), A_k)``,
   ``A_k = α_k² K_t^(k) + (1−α_k)² ε_k I``   (``private_prior="gplvm"``: ``K_t^(k) → I``)
3. CGPDS output layer per view, per output d: inducing values ``v_d = h_d(Z_h)`` and
   ``u_dj = g_dj(Z_g,j)``; ``h_d(X) = K_XZh H⁻¹ v_d``, ``g_dj(X) = K_XZg G⁻¹ u_dj``
   (the projected-process form the sparse bound uses)
4. ``y_nd^(k) ~ N(h_d(x_n) + Σ_j w_dj g_dj(x_n), β_k⁻¹)``.

Why per-output inducing values: the paper's collapsed bound (spec) corrects every output
d with its own optimal q(v_d), q(u_dj) ("separate Woodbury corrections"), so the model in
which that bound is an ELBO has per-output functions h_d, g_dj that share kernels (GP
draws scaled by w_dj). With observed data the model adds one ``pyro.factor`` per view,
``paper_terms_k``, holding the sparse-GP trace terms ``−β/2 tr(K_XX − Q_XX)`` (h and each
g_j) and the cross terms the paper's bound leaves out (it fits y with h and with each
w_j g_j separately): ``β/2 [(Σ_j w_j g_j)² − Σ_j w_j² g_j²] + β h Σ_j w_j g_j``. With it,
``Trace_ELBO`` of this model with the hand-written guide equals, in expectation, the
analytic uncollapsed ELBO of :mod:`tandem.inference.mcgpds.bound`, which equals the paper's
collapsed bound at the optimal q(U), q(V).

Sites and shapes (V views; D_k outputs; M inducing points; J basis functions):

============  ==============  =========================================
site          shape           plates (dims)
============  ==============  =========================================
X_s           (Q, N)          latent_dim (-1); event: time (N)
X_k           (Q, N)          latent_dim (-1); event: time (N)
v_k           (D_k, M)        output_k (-1); event: inducing (M)
u_k           (J, D_k, M)     basis_k (-2), output_k (-1); event: inducing
y_k           (N, D_k)        time (-2), output_k (-1)
paper_terms_k ()              (factor, only with observed data)
============  ==============  =========================================

Missing entries: NaN entries of an observed view are not scored — ``y_k`` is observed under
``poutine.mask`` with the observation mask (N, D_k) and ``paper_terms_k`` sums its per-entry
terms over the observed entries only (see :mod:`tandem.inference.mcgpds.missing`).

``k`` is the 0-based view index and part of the site name: the sites are ``X_0``, ``X_1``,
…, ``v_0``, ``u_0``, ``y_0``, … (there is no site called ``X_k``). Hyperparameters are ``pyro.param`` s (constraints in
:data:`PARAM_SPECS`); parameters named in ``data.fixed`` groups are constants.
"""
from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine

from tandem.inference.numerics import DTYPE, cholesky_jitter, seeded_generator, set_seed
from tandem.models.kernels import TimeParams, time_params_kernel

# the data container, the time-kernel plumbing and the output-layer functions live in their
# own modules; their names stay importable from here
from tandem.models.mcgpds_basis import (  # noqa: F401
    _ALIAS_OBJECTS,
    Basis,
    _mapping_object,
    kzz_diag,
    mapping_object,
    view_bases,
)
from tandem.models.mcgpds_data import (  # noqa: F401
    _CONSTRAINTS,
    _POS,
    DIMS,
    PARAM_GROUPS,
    SAFE_FIXED,
    McGPDSData,
    check_init,
    constraint_of,
    default_init,
    dims,
    param_group,
    pca_init,
    required_params,
)
from tandem.models.mcgpds_time import (  # noqa: F401
    _time_constraints,
    _time_tags,
    time_init_values,
    time_kernels,
    time_param_names,
)

__all__ = ["McGPDSData", "hyperparams", "mcgpds_model", "model", "simulate", "DIMS", "dims",
           "param_group", "default_init", "PARAM_GROUPS", "block_mask", "Basis", "view_bases",
           "SAFE_FIXED", "pca_init", "required_params", "check_init", "param", "time_kernels",
           "time_param_names", "time_init_values"]

def param(data: McGPDSData, name: str, frozen=()) -> torch.Tensor:
    """The constrained value of parameter ``name``.

    ``data.init[name]`` if its group is in ``data.fixed``, else the registered ``pyro.param``
    (created from ``data.init``), detached when its group is in ``frozen`` (or ``"model"`` is,
    for every non-variational group; ``"mu"`` or ``"lam"`` for μ^(k) or λ^(k) alone).

    Parameters
    ----------
    data : McGPDSData
        The problem (``init`` and ``fixed``).
    name : str
        The parameter name.
    frozen : collection of str, default ()
        Groups whose value is detached (no gradient); ``"model"`` stands for every
        non-variational group, ``"mu"`` / ``"lam"`` for the variational means / precisions alone.

    Returns
    -------
    torch.Tensor
        The constrained value.
    """
    group = param_group(name)
    if group in data.fixed:
        return data.init[name]
    v = pyro.param(name, lambda: data.init[name].clone(), constraint=constraint_of(name, data))
    if (group in frozen or (group != "variational" and "model" in frozen)
            or (group == "variational" and name.split("_", 1)[0] in frozen)):
        v = v.detach()
    return v


#: the old private name (kept for code written against it)


def _time_hp(data, tn, frozen, kernels=None):
    """:class:`~tandem.models.kernels.TimeParams` of time kernel ``tn`` (its registered parameters)."""
    kern = (kernels or time_kernels(data))[tn]
    return TimeParams(kern, {n: param(data, full, frozen) for n, full in time_param_names(kern, tn).items()})


def hyperparams(data: McGPDSData, frozen=()) -> dict:
    """Register (or read) every model hyperparameter.

    Parameters
    ----------
    data : McGPDSData
        The problem.
    frozen : collection of str, default ()
        Groups whose values are detached (see :func:`param`).

    Returns
    -------
    dict
        ``{"time_s": TimeParams, "views": [{alpha, eps, beta, W (D,J), Zh (M,Q), Zg (J,M,Q),
        kh_var, kh_ard (Q,), kg_var (J,), kg_ard (J,Q), time}, ...]}`` (constrained values;
        ``kh_var``/``kg_var`` are None for kernels without a variance, ``time`` None for the
        "gplvm" private prior).
    """
    frozen = frozenset(frozen)
    tks = time_kernels(data)
    hp = {"time_s": _time_hp(data, "s", frozen, tks), "views": []}
    rbf = data.mapping_kernel == "rbfard"
    for k in range(data.V):
        v = {n: param(data, f"{n}_{k}", frozen) for n in ("alpha", "eps", "beta", "W", "Zh", "Zg",
                                                           "kh_ard", "kg_ard")}
        v["kh_var"] = param(data, f"kh_var_{k}", frozen) if rbf else None
        v["kg_var"] = param(data, f"kg_var_{k}", frozen) if rbf else None
        v["time"] = _time_hp(data, str(k), frozen, tks) if data.private_prior == "mcgpds" else None
        hp["views"].append(v)
    return hp


def block_mask(seq_ids: torch.Tensor) -> torch.Tensor:
    """(N, N) 1/0 matrix: same sequence.

    Parameters
    ----------
    seq_ids : torch.Tensor
        (N,) sequence labels.

    Returns
    -------
    torch.Tensor
        (N, N) float64, 1 where the two frames belong to one sequence.
    """
    return (seq_ids[:, None] == seq_ids[None, :]).to(DTYPE)


def dense_time_K(data: McGPDSData, thp: dict | None) -> torch.Tensor:
    """Full N×N block-diagonal time kernel (or I for the "gplvm" private prior).

    Parameters
    ----------
    data : McGPDSData
        The problem (time stamps and sequence labels).
    thp : TimeParams or None
        The kernel's hyperparameters; ``None`` → the identity.

    Returns
    -------
    torch.Tensor
        (N, N) ``K_t ⊙ [same sequence]``.
    """
    N = data.N
    if thp is None:
        return torch.eye(N, dtype=DTYPE, device=data.times.device)
    t = data.times
    kern, params = time_params_kernel(thp)
    return kern.gram(t, t, params, same=True) * block_mask(data.seq_ids)


def dense_A(data: McGPDSData, v: dict) -> torch.Tensor:
    """The private prior covariance ``A_k = α_k² K_t^(k) + (1−α_k)² ε_k I``.

    Parameters
    ----------
    data : McGPDSData
        The problem.
    v : dict
        One view's hyperparameters (an entry of ``hyperparams(data)["views"]``).

    Returns
    -------
    torch.Tensor
        (N, N) A_k.
    """
    a = v["alpha"]
    eye = torch.eye(data.N, dtype=DTYPE, device=data.times.device)
    return a * a * dense_time_K(data, v["time"]) + (1 - a) ** 2 * v["eps"] * eye


def mcgpds_model(data: McGPDSData):
    """The Pyro model (see the module docstring for the sites and the ``paper_terms_k`` factor).

    Parameters
    ----------
    data : McGPDSData
        The problem; ``data.views`` observed (NaN entries masked), or ``None`` to draw them.

    Returns
    -------
    dict
        The draws ``X_s``, ``X_k`` (Q, N) and ``y_k`` (N, D_k) of every view k.
    """
    hp = hyperparams(data)
    N, Q, M, J = data.N, data.Q, data.M, data.J
    kind = getattr(data, "mapping_kernel_obj", data.mapping_kernel)
    Ls = cholesky_jitter(dense_time_K(data, hp["time_s"]), "K_t^(s)")
    out = {}
    with pyro.plate("latent_dim", Q, dim=-1):
        Xs = pyro.sample("X_s", dist.MultivariateNormal(Ls.new_zeros(N), scale_tril=Ls))
        Xk = []
        for k, v in enumerate(hp["views"]):
            LA = cholesky_jitter(dense_A(data, v), f"A_{k}")
            Xk.append(pyro.sample(f"X_{k}", dist.MultivariateNormal((1 - v["alpha"]) * Xs, scale_tril=LA)))
    out["X_s"] = Xs
    time_plate = pyro.plate("time", N, dim=-2)
    for k, v in enumerate(hp["views"]):
        D = data.out_dims[k]
        bh, bgs = view_bases(v, kind)
        LH = bh.chol()
        LG = torch.stack([b.chol() for b in bgs])
        out_plate = pyro.plate(f"output_{k}", D, dim=-1)
        with out_plate:
            vv = pyro.sample(f"v_{k}", dist.MultivariateNormal(LH.new_zeros(M), scale_tril=LH))
            with pyro.plate(f"basis_{k}", J, dim=-2):
                uu = pyro.sample(f"u_{k}", dist.MultivariateNormal(LG.new_zeros(M),
                                                                   scale_tril=LG[:, None]))
        X = Xk[k].mT                                                     # (N, Q)
        obs = None if data.views is None else data.views[k]
        # NaN entries of a view are missing: not scored (y_k masked, paper_terms_k per entry)
        obs_mask = None if obs is None or not bool(torch.isnan(obs).any()) else ~torch.isnan(obs)
        Ah, tr_h = bh.projection(X, LH, per_point=obs_mask is not None)  # H⁻¹ K_ZX, tr(K_XX − Q_XX)
        h = Ah.mT @ vv.mT                                                # (N, D)
        wg_sum = torch.zeros_like(h)
        wg2_sum = torch.zeros_like(h)
        trace = D * tr_h if obs_mask is None else tr_h[:, None].expand(N, D)
        for j, bg in enumerate(bgs):
            Ag, tr_g = bg.projection(X, LG[j], per_point=obs_mask is not None)
            wg = (Ag.mT @ uu[j].mT) * v["W"][:, j]
            wg_sum = wg_sum + wg
            wg2_sum = wg2_sum + wg * wg
            if obs_mask is None:
                trace = trace + (v["W"][:, j] ** 2).sum() * tr_g
            else:                                                        # (N, D) per entry
                trace = trace + tr_g[:, None] * (v["W"][:, j] ** 2)
        mean = h + wg_sum
        beta = v["beta"]
        if obs_mask is None:
            with time_plate, out_plate:
                y = pyro.sample(f"y_{k}", dist.Normal(mean, beta.rsqrt()), obs=obs)
            if obs is not None:
                pyro.factor(f"paper_terms_{k}", -0.5 * beta * trace
                            + 0.5 * beta * (wg_sum * wg_sum - wg2_sum).sum() + beta * (h * wg_sum).sum())
        else:
            m = obs_mask.to(mean.dtype)
            with time_plate, out_plate, poutine.mask(mask=obs_mask):
                y = pyro.sample(f"y_{k}", dist.Normal(mean, beta.rsqrt()), obs=torch.nan_to_num(obs))
            pyro.factor(f"paper_terms_{k}", (m * (-0.5 * beta * trace + 0.5 * beta * (wg_sum * wg_sum - wg2_sum)
                                                  + beta * h * wg_sum)).sum())
        out[f"X_{k}"], out[f"y_{k}"] = Xk[k], y
    return out


#: alias following the other tandem models
model = mcgpds_model


def simulate(times, seq_ids, out_dims: list, Q: int = 2, M: int = 10, J: int = 1,
             mapping_kernel: str = "rbfard", seed: int = 0, **init_kwargs) -> dict:
    """Draw latents and data from the prior (default hyperparameters, :func:`default_init`).

    Every hyperparameter comes from :func:`default_init`, never from Pyro's parameter store.

    Parameters
    ----------
    times : array_like
        (N,) time stamps.
    seq_ids : array_like
        (N,) sequence labels.
    out_dims : list of int
        The D_k of the V views.
    Q : int, default 2
        Latent dimension.
    M : int, default 10
        Inducing points per function.
    J : int, default 1
        Basis functions per view.
    mapping_kernel : str or MappingKernel, default "rbfard"
        The mapping kernel.
    seed : int, default 0
        Seed of the initial values and of the draws.
    **init_kwargs
        Passed to :func:`default_init` (e.g. ``alpha``, ``eps``, ``beta``, ``time_kernel``).

    Returns
    -------
    dict
        Tensors keyed by the model's site names — ``X_s``, ``X_0``, ``X_1``, … (Q, N), ``v_0``,
        … (D_k, M), ``u_0``, … (J, D_k, M) and ``y_0``, ``y_1``, … (N, D_k), one of each per view
        k = 0 … V−1 — plus ``data`` (the :class:`McGPDSData` with ``views=None`` and the default
        ``fixed`` groups, :data:`SAFE_FIXED`).
    """
    times = torch.as_tensor(times, dtype=DTYPE, device=times.device if isinstance(times, torch.Tensor) else None)
    gen = seeded_generator(seed)
    init = default_init(len(times), out_dims, Q, M, J, mapping_kernel, times=times, generator=gen,
                        **init_kwargs)
    data = McGPDSData(None, times, seq_ids, Q, M, J, mapping_kernel,
                      time_white=init_kwargs.get("time_white", True), time_bias=init_kwargs.get("time_bias", True),
                      private_prior=init_kwargs.get("private_prior", "mcgpds"), out_dims=list(out_dims), init=init,
                      time_kernel=init_kwargs.get("time_kernel"))
    set_seed(seed)
    # every parameter from ``init`` (all groups fixed while drawing): values left in Pyro's
    # parameter store by an earlier fit or simulation must not leak into this draw
    data.fixed = frozenset(PARAM_GROUPS)
    with poutine.block():
        tr = poutine.trace(mcgpds_model).get_trace(data)
    data.fixed = SAFE_FIXED
    res = {n: tr.nodes[n]["value"].detach() for n in tr.stochastic_nodes if n in dims(data.V)}
    res["data"] = data
    return res
