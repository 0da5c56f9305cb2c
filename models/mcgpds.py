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

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints

from tandem.inference.numerics import DTYPE, cholesky_jitter
from tandem.inference.validation import as_tensor, check_int_range, check_time_order, label_codes, resolve_device
from tandem.models.gp_kernels import stream_psi_sums
from tandem.models.kernels import (
    PAPER_NAMES,
    MappingKernel,
    TimeKernel,
    TimeParams,
    as_mapping_kernel,
    is_paper_kernel,
    mapping_kernel_kind,
    paper_time_kernel,
    time_params_kernel,
)
from tandem.models.sequence_blocks import Blocks

__all__ = ["McGPDSData", "hyperparams", "mcgpds_model", "model", "simulate", "DIMS", "dims",
           "param_group", "default_init", "PARAM_GROUPS", "block_mask", "Basis", "view_bases",
           "SAFE_FIXED", "pca_init", "required_params", "check_init", "param", "time_kernels",
           "time_param_names", "time_init_values"]

#: parameter groups the ``fixed`` / ``frozen`` mechanism understands
PARAM_GROUPS = ("alpha", "eps", "beta", "time", "kernel", "inducing", "W", "g", "variational")

#: the groups held at their initial values unless the user asks otherwise (``McGPDSData.fixed``).
#: Learned, each has a direction in which the objective is unbounded or degenerate: the paper's
#: bound fits y with h and with every w_j g_j separately, so with W and β free it grows without
#: limit in β; with α, ε and the time kernels free, α drifts to 1 (decoupling the views) and the
#: time kernels' white-noise variance runs away. Fixing W ≈ 0 switches g off, so "g" (its kernel
#: and inducing inputs, then without gradient) is fixed with it. The mapping kernel h, its
#: inducing inputs and the variational parameters are learned.
SAFE_FIXED = frozenset({"alpha", "eps", "beta", "time", "W", "g"})


def dims(V: int = 2) -> dict:
    """Named dims of every site for V views (for :func:`tandem.inference.posterior_predictive`).

    Parameters
    ----------
    V : int, default 2
        Number of views.

    Returns
    -------
    dict
        ``{site name: [dim names]}`` for ``X_s`` and every view's ``X_k``, ``v_k``, ``u_k``, ``y_k``.
    """
    d = {"X_s": ["latent_dim", "time"]}
    for k in range(V):
        d[f"X_{k}"] = ["latent_dim", "time"]
        d[f"v_{k}"] = [f"output_{k}", "inducing"]
        d[f"u_{k}"] = ["basis", f"output_{k}", "inducing"]
        d[f"y_{k}"] = ["time", f"output_{k}"]
    return d


#: dims for the paper's two-view model
DIMS = dims(2)


def param_group(name: str) -> str:
    """The group of a parameter name (``alpha_0`` → "alpha", ``t_invw_s`` → "time", ...).

    "g" holds the kernel and inducing inputs of the g_j functions; fixing "W" at ≈ 0 (which
    switches g off) should fix "g" too, else L-BFGS wanders along their flat directions.

    Parameters
    ----------
    name : str
        A McGPDS parameter name (e.g. ``"kh_ard_0"``).

    Returns
    -------
    str
        One of :data:`PARAM_GROUPS` (names matching no other prefix are "kernel").
    """
    if name.startswith(("mu_", "lam_")):
        return "variational"
    if name.startswith("alpha_"):
        return "alpha"
    if name.startswith("eps_"):
        return "eps"
    if name.startswith("beta_"):
        return "beta"
    if name.startswith("t_"):
        return "time"
    if name.startswith(("Zg_", "kg_")):
        return "g"          # the g_j functions' kernel and inducing inputs
    if name.startswith("Zh_"):
        return "inducing"
    if name.startswith("W_"):
        return "W"
    return "kernel"


_POS = constraints.positive
_CONSTRAINTS = {"alpha": constraints.unit_interval, "eps": _POS, "beta": _POS, "t_var": _POS,
                "t_invw": _POS, "t_white": _POS, "t_bias": _POS, "kh_var": _POS, "kh_ard": _POS,
                "kg_var": _POS, "kg_ard": _POS, "W": constraints.real, "Zh": constraints.real,
                "Zg": constraints.real, "mu": constraints.real, "lam": _POS}


def constraint_of(name: str, data=None):
    """The constraint of parameter ``name`` (time-kernel parameters: their kernel's declared one).

    Parameters
    ----------
    name : str
        A McGPDS parameter name.
    data : McGPDSData, optional
        The problem; needed for the constraints of a non-paper time kernel's parameters.

    Returns
    -------
    torch.distributions.constraints.Constraint
        The parameter's constraint.

    Raises
    ------
    ValueError
        An unknown parameter name.
    """
    if data is not None and name.startswith("t_"):
        c = _time_constraints(data).get(name)
        if c is not None:
            return c
    base = name.rsplit("_", 1)[0]
    if base not in _CONSTRAINTS:
        raise ValueError(f"unknown McGPDS parameter {name!r}")
    return _CONSTRAINTS[base]


def _time_tags(V: int, private_prior: str) -> list[str]:
    """The time kernels of the model: ``"s"`` (shared) and, with the McGPDS private prior, one per view."""
    return ["s"] + ([str(k) for k in range(V)] if private_prior == "mcgpds" else [])


def time_kernels(data) -> dict:
    """``{tag: TimeKernel}`` of the model's time kernels (tags ``"s"``, ``"0"``, ``"1"``, ...).

    ``data.time_kernel`` (any object with the McGPDS data attributes) is ``None`` — the paper's
    :func:`~tandem.models.kernels.paper_time_kernel` (with ``data.time_white`` /
    ``data.time_bias``) for the shared and every private kernel — one
    :class:`~tandem.models.kernels.TimeKernel` used for all of them (each with its own
    hyperparameters, as in the paper), or a sequence of V + 1 kernels (shared first, then
    view 0, 1, ...; with ``private_prior="gplvm"`` only the first is used).

    Parameters
    ----------
    data : McGPDSData or object
        Anything with the attributes ``time_kernel``, ``time_white``, ``time_bias``, ``V`` and
        ``private_prior``.

    Returns
    -------
    dict
        ``{tag: TimeKernel}``; ``"s"`` the shared kernel, ``"0"``, ``"1"``, ... the private ones
        (only with ``private_prior="mcgpds"``).

    Raises
    ------
    TypeError, ValueError
        ``time_kernel`` is not one of these forms.
    """
    tk = getattr(data, "time_kernel", None)
    tags = _time_tags(data.V, data.private_prior)
    if tk is None:
        k = paper_time_kernel(bool(data.time_white), bool(data.time_bias))
        return {t: k for t in tags}
    if isinstance(tk, TimeKernel):
        return {t: tk for t in tags}
    if isinstance(tk, (list, tuple)):
        if len(tk) != data.V + 1 or not all(isinstance(x, TimeKernel) for x in tk):
            raise ValueError(f"time_kernel: a sequence must hold V + 1 = {data.V + 1} TimeKernels (shared, then "
                             f"one per view), got {[type(x).__name__ for x in tk]}")
        return {t: tk[0 if t == "s" else int(t) + 1] for t in tags}
    raise TypeError(f"time_kernel: expected None, a TimeKernel (tandem.models.kernels) or a sequence of V + 1 "
                    f"of them, got {type(tk).__name__}")


def time_param_names(kernel: TimeKernel, tag: str) -> dict:
    """``{kernel parameter name: McGPDS parameter name}`` of one time kernel.

    The paper's kernel keeps the names of the string API (``t_var_s``, ``t_invw_s``,
    ``t_white_s``, ``t_bias_s``); any other kernel's parameter ``p`` is ``t_<p>_<tag>``
    (e.g. ``t_0.lengthscale_s`` for ``Matern32() + White()``). All are in the "time" group.

    Parameters
    ----------
    kernel : tandem.models.kernels.TimeKernel
        The time kernel.
    tag : str
        Its tag: ``"s"`` (shared) or the view index ``"0"``, ``"1"``, ...

    Returns
    -------
    dict
        ``{kernel parameter name: McGPDS parameter name}``.
    """
    if is_paper_kernel(kernel):
        return {n: f"{PAPER_NAMES[n]}_{tag}" for n in kernel.param_names}
    return {n: f"t_{n}_{tag}" for n in kernel.param_names}


def _time_constraints(data) -> dict:
    out = {}
    for tag, kern in time_kernels(data).items():
        cons = kern.constraints
        for n, full in time_param_names(kern, tag).items():
            out[full] = cons[n]
    return out


def time_init_values(kernel: TimeKernel, times=None, invwidth=None, white_var=1e-2, bias_var=1.0) -> dict:
    """Initial values ``{kernel parameter name: float}`` of a time kernel.

    Values given to the kernel's constructor win. Otherwise the paper's rules: RBF variance 1,
    inverse width ``invwidth`` (default ``100/range(t)²``), white ``white_var``, bias ``bias_var``;
    for the other kernels a ``lengthscale`` of ``range(t)/10`` (the same scale: ``ℓ = γ^{-½}``),
    a ``period`` of ``range(t)/2`` and the class defaults for the rest.

    Parameters
    ----------
    kernel : tandem.models.kernels.TimeKernel
        The time kernel.
    times : array_like, optional
        (N,) time stamps; their range sets the scales (``None``: range 1).
    invwidth : float, optional
        RBF inverse width γ; ``None`` → ``100/range(t)²``.
    white_var : float, default 1e-2
        White-noise variance of the paper's kernel.
    bias_var : float, default 1.0
        Bias variance of the paper's kernel.

    Returns
    -------
    dict
        ``{kernel parameter name: float}``.
    """
    rng_t = 1.0
    if times is not None:
        t = torch.as_tensor(times, dtype=DTYPE, device=times.device if isinstance(times, torch.Tensor) else "cpu")
        rng_t = float(t.max() - t.min()) or 1.0
    invw = 100.0 / rng_t ** 2 if invwidth is None else float(invwidth)
    out = {}
    paper = is_paper_kernel(kernel)
    given = kernel.given_init
    for n in kernel.param_names:
        leaf = n.rsplit(".", 1)[-1]
        if n in given:
            out[n] = float(given[n])
        elif paper:
            out[n] = {"rbf.variance": 1.0, "rbf.invwidth": invw, "white.variance": float(white_var),
                      "bias.variance": float(bias_var)}[n]
        elif leaf == "lengthscale":
            out[n] = invw ** -0.5
        elif leaf == "invwidth":
            out[n] = invw
        elif leaf == "period":
            out[n] = rng_t / 2.0
        else:
            out[n] = float(kernel.defaults[n])
    return out


@dataclass
class McGPDSData:
    """Everything the model, guide and losses need (the one argument they all take).

    Validated on construction; NaN entries of a view are missing (masked likelihood), inf is
    an error. Learning β together with W is allowed but warns (``RuntimeWarning``): the paper's
    bound is unbounded in β then.

    Attributes
    ----------
    views : list of array_like or None
        The (N, D_k) views (numpy or torch; converted to float64 tensors), or ``None`` to
        simulate (then ``out_dims`` gives the D_k).
    times : torch.Tensor
        (N,) time stamps; frames of one sequence must come in time order.
    seq_ids : torch.Tensor
        (N,) sequence labels (each sequence a block of the time kernels); integer labels are
        kept, any other hashable labels are coded 0, 1, ...
    Q : int
        Latent dimension (≥ 1).
    M : int
        Number of inducing points per function (≥ 1).
    J : int, default 1
        Number of basis functions g_j per view.
    mapping_kernel : str or tandem.models.kernels.MappingKernel, default "rbfard"
        A :class:`~tandem.models.kernels.MappingKernel` (kept in ``mapping_kernel_obj``; the
        bound calls its ψ-statistics) or an alias name; the attribute ``mapping_kernel`` holds
        its name.
    time_white : bool, default True
        The paper's time kernel has a white-noise term.
    time_bias : bool, default True
        The paper's time kernel has a bias term.
    private_prior : {"mcgpds", "gplvm"}, default "mcgpds"
        Private latent prior: ``A_k = α_k² K_t^(k) + (1−α_k)² ε_k I``; "gplvm": ``K_t^(k) → I``.
    fixed : frozenset of str, default SAFE_FIXED
        Parameter groups held at their init values; default :data:`SAFE_FIXED` (α, ε, β, the
        time kernels, W and g).
    init : dict
        Initial *constrained* value of every parameter (see :func:`default_init`); names
        missing from it get :func:`default_init`'s values, with the latent means from the PCA of
        the (centred) views and β_k = 100 / var(Y_k) when data are given.
    out_dims : list of int, optional
        The D_k; required when ``views`` is ``None``, else read from the views.
    seed : int, default 0
        Seed of the default initialisation (draws the inducing inputs and W).
    device : torch.device or str, optional
        Where every tensor lives (data, time stamps, sequence labels, ``init``); default
        ``None`` = the device of the first tensor among ``views`` and ``times`` (CPU for numpy
        inputs). The model, guide and bounds follow it.
    time_kernel : None, TimeKernel or sequence of TimeKernel
        ``None`` (the paper's RBF + white + bias, shaped by ``time_white`` / ``time_bias``), a
        :class:`~tandem.models.kernels.TimeKernel` used for the shared and every private time
        kernel (each with its own hyperparameters), or a sequence of V + 1 kernels (shared
        first); see :func:`time_kernels`. ``hyperparams`` returns each kernel's values as a
        :class:`~tandem.models.kernels.TimeParams` carrying the kernel object.

    Raises
    ------
    ValueError
        A bad parameter (fewer than 2 time stamps, wrong label count, frames out of time order,
        Q/M/J < 1, unknown ``private_prior`` or ``fixed`` group, views of the wrong shape or
        constant, an init value outside its constraint).
    TypeError
        A ``time_kernel`` of none of the accepted forms.
    """
    views: list | None
    times: torch.Tensor
    seq_ids: torch.Tensor
    Q: int
    M: int
    J: int = 1
    mapping_kernel: str = "rbfard"
    time_white: bool = True
    time_bias: bool = True
    private_prior: str = "mcgpds"
    fixed: frozenset = SAFE_FIXED
    init: dict = field(default_factory=dict)
    out_dims: list | None = None
    seed: int = 0
    device: torch.device | str | None = None
    time_kernel: object = None

    def __post_init__(self):
        self.device = resolve_device(self.device, self.views or [], self.times)
        self.times = as_tensor(self.times, "times").reshape(-1).to(self.device)
        N = int(self.times.numel())
        if N < 2:
            raise ValueError(f"times: expected at least 2 time stamps (frames) to fit a latent space, got {N}")
        raw = self.seq_ids.detach() if isinstance(self.seq_ids, torch.Tensor) else self.seq_ids
        if raw is None:
            raise ValueError(f"seq_ids: expected {N} sequence labels (one per time stamp), got None")
        if isinstance(raw, torch.Tensor):
            integral = (raw.device.type != "meta" and raw.dtype != torch.bool and not raw.is_floating_point()
                        and not raw.is_complex())
        else:
            raw = np.asarray(raw) if isinstance(raw, (list, tuple, np.ndarray)) else raw
            integral = isinstance(raw, np.ndarray) and np.issubdtype(raw.dtype, np.integer)
        if integral:      # integer labels are kept as given (the estimators pass codes)
            seq = torch.as_tensor(raw, device=self.device).long().reshape(-1)
            if seq.numel() != N:
                raise ValueError(f"seq_ids: expected {N} labels (one per time stamp), got {seq.numel()}")
        else:             # any other hashable labels: one validator (NaN refused, never truncated)
            seq = torch.as_tensor(label_codes(raw, N, "seq_ids"), device=self.device)
        self.seq_ids = seq
        # frames of one sequence must come in time order (the time kernels read rows in order)
        check_time_order(self.times, self.seq_ids.cpu().numpy(), "seq_ids")
        self.blocks = Blocks(self.seq_ids)
        for name in ("Q", "M", "J"):
            setattr(self, name, check_int_range(getattr(self, name), name, 1))
        #: the mapping kernel object (the bound calls its psi/kzz methods); ``mapping_kernel`` keeps its name
        self.mapping_kernel_obj = _mapping_object(self.mapping_kernel)
        self.mapping_kernel = mapping_kernel_kind(self.mapping_kernel)   # a models.kernels object or alias
        if self.private_prior not in ("mcgpds", "gplvm"):
            raise ValueError(f"private_prior: expected 'mcgpds' or 'gplvm', got {self.private_prior!r}")
        if isinstance(self.fixed, str):
            raise ValueError(f"fixed: expected a collection of group names, got the string {self.fixed!r}")
        self.fixed = frozenset(self.fixed)
        bad = self.fixed - set(PARAM_GROUPS) - {"model"}
        if bad:
            raise ValueError(f"fixed: unknown parameter groups {sorted(bad)}; expected some of {PARAM_GROUPS}")
        if self.views is not None:
            if not isinstance(self.views, (list, tuple)) or not self.views:
                raise ValueError("views: expected a non-empty list of (N, D_k) arrays, or None to simulate")
            # NaN entries are missing (masked likelihood); inf is an error
            self.views = [as_tensor(Y, f"views[{k}]", ndim=2, finite=False).to(self.device)
                          for k, Y in enumerate(self.views)]
            from tandem.models.missing import check_missing_views
            for k, Y in enumerate(self.views):
                if Y.shape[0] != N:
                    raise ValueError(f"views[{k}]: expected {N} rows (one per time stamp), got {Y.shape[0]}")
                if Y.shape[1] < 1:
                    raise ValueError(f"views[{k}]: expected at least one column, got shape {tuple(Y.shape)}")
            check_missing_views(self.views)
            for k, Y in enumerate(self.views):
                y = Y[~torch.isnan(Y)]
                if not bool((y != y[:1]).any()):
                    raise ValueError(f"views[{k}]: every entry is the same value; a constant view carries no "
                                     "information to fit (drop it)")
            self.out_dims = [int(Y.shape[1]) for Y in self.views]
        elif self.out_dims is None or not len(self.out_dims):
            raise ValueError("out_dims: expected the output dimension of every view when views is None")
        self.out_dims = [check_int_range(int(d) if isinstance(d, torch.Tensor) else d, f"out_dims[{k}]", 1)
                         for k, d in enumerate(self.out_dims)]
        time_kernels(self)           # validates time_kernel against V
        self.init = dict(self.init or {})
        missing = set(required_params(self)) - set(self.init)
        if missing:
            self.init = {**self._default_init(), **self.init}
        self.init = {k: torch.as_tensor(v, dtype=DTYPE, device=self.device) for k, v in self.init.items()}
        check_init(self.init)
        for name, con in _time_constraints(self).items():
            v = self.init.get(name)
            if v is not None and not bool(con.check(v).all()):
                raise ValueError(f"init[{name!r}] (a time-kernel hyperparameter): expected a value satisfying "
                                 f"{con}, got {v.tolist()}")
        if "beta" not in self.fixed and "W" not in self.fixed:
            warnings.warn("McGPDS: learning β with W learned can diverge — the paper's bound fits y with h "
                          "and with every w_j g_j separately, so when both fit well its β coefficient is "
                          "positive and the bound grows without limit in β (fix 'beta' or 'W')",
                          RuntimeWarning, stacklevel=3)

    def _default_init(self) -> dict:
        """:func:`default_init` for this problem (PCA latents and β = 100 / var(Y_k) from the data)."""
        gen = torch.Generator().manual_seed(int(self.seed))
        X0, beta = None, None
        if self.views is not None:
            limit = min(sum(self.out_dims), self.N - 1)
            if self.Q > limit:
                raise ValueError(f"Q={self.Q}: the PCA initialisation needs Q <= min(sum of view dims "
                                 f"{sum(self.out_dims)}, N - 1 = {self.N - 1}) = {limit}")
            from tandem.models.missing import mean_fill, nan_var
            X0 = pca_init(mean_fill(torch.cat(self.views, 1)), self.Q)
            beta = [100.0 / nan_var(Y) for Y in self.views]
        return default_init(self.N, self.out_dims, self.Q, self.M, self.J, self.mapping_kernel, X0=X0,
                            times=self.times, time_white=self.time_white, time_bias=self.time_bias, beta=beta,
                            private_prior=self.private_prior, generator=gen, device=self.device,
                            time_kernel=self.time_kernel)

    @property
    def N(self) -> int:
        """Number of time stamps (frames)."""
        return int(self.times.numel())

    @property
    def V(self) -> int:
        """Number of views."""
        return len(self.out_dims)

    @property
    def n_entries(self) -> int:
        """Number of entries ``N · Σ_k D_k`` of all views."""
        return self.N * sum(self.out_dims)

    def view_names(self):
        """The view names ``["0", "1", ...]`` (the k of the site names)."""
        return [str(k) for k in range(self.V)]


def pca_init(Y: torch.Tensor, q: int) -> torch.Tensor:
    """Unit-variance principal-component scores (N, q) of the centred ``Y`` (PPCA embedding).

    The sign of each column is fixed (its largest-magnitude entry positive), so the result is
    deterministic.

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) data (no NaN).
    q : int
        Number of components.

    Returns
    -------
    torch.Tensor
        (N, q) scores ``U[:, :q] √(N − 1)``.
    """
    Yc = Y - Y.mean(0)
    U, S, Vh = torch.linalg.svd(Yc, full_matrices=False)
    X = U[:, :q] * math.sqrt(max(Y.shape[0] - 1, 1))
    # deterministic sign: largest-magnitude entry positive
    sign = torch.sign(X.gather(0, X.abs().argmax(0, keepdim=True)))
    return X * sign


def required_params(data: "McGPDSData") -> list[str]:
    """Names of every parameter the model and the guide's q(X) read for ``data``'s settings.

    Parameters
    ----------
    data : McGPDSData
        The problem (its V, time kernels and mapping kernel).

    Returns
    -------
    list of str
        The parameter names.
    """
    names = []
    for tn, kern in time_kernels(data).items():
        names += list(time_param_names(kern, tn).values())
    for k in range(data.V):
        names += [f"{n}_{k}" for n in ("alpha", "eps", "beta", "W", "Zh", "Zg", "kh_ard", "kg_ard", "mu", "lam")]
        if data.mapping_kernel == "rbfard":
            names += [f"kh_var_{k}", f"kg_var_{k}"]
    return names


def check_init(init: dict) -> None:
    """Check that every initial value is finite and inside its constraint.

    α in [0, 1]; ε, β, time-kernel and RBF variances, ARD weights, λ positive.

    Parameters
    ----------
    init : dict
        ``{parameter name: torch.Tensor}`` of constrained values.

    Raises
    ------
    ValueError
        Naming the parameter, if a value is outside its constraint or not finite.
    """
    for name, v in init.items():
        if not bool(torch.isfinite(v).all()):
            raise ValueError(f"init[{name!r}]: expected finite values")
        base = name.rsplit("_", 1)[0]
        con = _CONSTRAINTS.get(base)
        if con is constraints.unit_interval and not bool(((v >= 0) & (v <= 1)).all()):
            raise ValueError(f"init[{name!r}] (α, the private share): expected values in [0, 1], got {v.tolist()}")
        if con is _POS and not bool((v > 0).all()):
            what = {"eps": "ε, the private noise variance", "beta": "β, the noise precision",
                    "lam": "λ, the variational precisions"}.get(base, "a variance / inverse width")
            raise ValueError(f"init[{name!r}] ({what}): expected positive values, got min {float(v.min()):g}")


def default_init(N: int, out_dims: list, Q: int, M: int, J: int = 1, kind: str = "rbfard",
                 X0: torch.Tensor | None = None, times: torch.Tensor | None = None,
                 time_white: bool = True, time_bias: bool = True, alpha=0.5, eps=1e-3, beta=None,
                 invwidth=None, white_var=1e-2, bias_var=1.0, w_scale=1e-6, lam=0.5,
                 private_prior: str = "mcgpds", generator: torch.Generator | None = None,
                 device=None, time_kernel=None) -> dict:
    """Initial constrained values of every parameter (spec/protocol rules).

    α=0.5, ε=1e-3, RBF variance 1, ARD ``5/range(X_q)²``, time inverse width ``100/range(t)²``,
    W ~ 1e-6·U(0,1), λ = 0.5, inducing inputs = rows of one random permutation of ``X0`` (first
    M for h, last M for g; with N < M jittered copies).

    The values are computed on the CPU (the ``generator`` is a CPU generator, so the same seed
    gives the same initial values on every device) and returned on ``device`` (default: the
    device of ``X0``, else of ``times``, else the CPU).

    Parameters
    ----------
    N : int
        Number of time stamps.
    out_dims : list of int
        The D_k of the V views.
    Q : int
        Latent dimension.
    M : int
        Inducing points per function.
    J : int, default 1
        Basis functions per view.
    kind : str or MappingKernel, default "rbfard"
        The mapping kernel (object or alias name).
    X0 : torch.Tensor, optional
        (N, Q) initial latent means (``mu_k``); ``None`` → standard normal draws.
    times : torch.Tensor, optional
        (N,) time stamps; ``None`` → ``linspace(0, 1, N)``.
    time_white : bool, default True
        The paper's time kernel has a white term.
    time_bias : bool, default True
        The paper's time kernel has a bias term.
    alpha : float or sequence of float, default 0.5
        α_k (one value or one per view).
    eps : float or sequence of float, default 1e-3
        ε_k (one value or one per view).
    beta : float or sequence of float, optional
        β_k; ``None`` → 100.
    invwidth : float, optional
        Time inverse width; ``None`` → ``100/range(t)²``.
    white_var : float, default 1e-2
        White variance of the paper's time kernel.
    bias_var : float, default 1.0
        Bias variance of the paper's time kernel.
    w_scale : float, default 1e-6
        W ~ ``w_scale``·U(0, 1), (D_k, J).
    lam : float, default 0.5
        Initial variational precisions λ, (N, Q).
    private_prior : {"mcgpds", "gplvm"}, default "mcgpds"
        With "gplvm" there are no private time kernels.
    generator : torch.Generator, optional
        CPU generator of the random draws.
    device : torch.device or str, optional
        Where the returned tensors live.
    time_kernel : None, TimeKernel or sequence of TimeKernel
        As :attr:`McGPDSData.time_kernel` (``None``: the paper's kernel); its initial values
        follow :func:`time_init_values`.

    Returns
    -------
    dict
        ``{parameter name: torch.Tensor}`` (float64, on ``device``).
    """
    if device is None:
        device = X0.device if X0 is not None else times.device if isinstance(times, torch.Tensor) else "cpu"
    kind = mapping_kernel_kind(kind)          # an object or its alias name
    gen = generator
    if X0 is None:
        X0 = torch.randn(N, Q, dtype=DTYPE, generator=gen, device="cpu")
    X0 = X0.detach().cpu()
    V = len(out_dims)
    if times is None:
        times = torch.linspace(0, 1, N, dtype=DTYPE, device="cpu")
    rng_t = float(times.max() - times.min()) or 1.0
    invw = 100.0 / rng_t ** 2 if invwidth is None else float(invwidth)
    rngX = (X0.max(0).values - X0.min(0).values).clamp_min(1e-6)
    ard = 5.0 / rngX ** 2 if kind == "rbfard" else torch.ones(Q, dtype=DTYPE, device="cpu")
    init = {}

    class _Shape:   # what time_kernels reads
        pass
    shape = _Shape()
    shape.time_kernel, shape.time_white, shape.time_bias = time_kernel, time_white, time_bias
    shape.V, shape.private_prior = V, private_prior
    for tn, kern in time_kernels(shape).items():
        vals = time_init_values(kern, times, invw, white_var, bias_var)
        for n, full in time_param_names(kern, tn).items():
            init[full] = torch.tensor(vals[n], dtype=DTYPE, device="cpu")

    def per_view(x, k):
        if isinstance(x, (list, tuple)):
            return float(x[k])
        return float(x)

    for k in range(V):
        init[f"alpha_{k}"] = torch.tensor(per_view(alpha, k), dtype=DTYPE, device="cpu")
        init[f"eps_{k}"] = torch.tensor(per_view(eps, k), dtype=DTYPE, device="cpu")
        init[f"beta_{k}"] = torch.tensor(per_view(beta if beta is not None else 100.0, k), dtype=DTYPE, device="cpu")
        init[f"W_{k}"] = w_scale * torch.rand(out_dims[k], J, dtype=DTYPE, generator=gen, device="cpu")
        perm = torch.randperm(N, generator=gen, device="cpu")
        if N >= M:
            zh, zg = X0[perm[:M]], X0[perm[-M:]]
        else:  # fewer points than inducing inputs: jittered copies
            reps = perm[torch.arange(M, device="cpu") % N]
            zh = X0[reps] + 1e-3 * torch.randn(M, Q, dtype=DTYPE, generator=gen, device="cpu")
            zg = X0[reps.flip(0)] + 1e-3 * torch.randn(M, Q, dtype=DTYPE, generator=gen, device="cpu")
        init[f"Zh_{k}"] = zh.clone()
        init[f"Zg_{k}"] = zg.clone()[None].repeat(J, 1, 1)
        if kind == "rbfard":
            init[f"kh_var_{k}"] = torch.tensor(1.0, dtype=DTYPE, device="cpu")
            init[f"kg_var_{k}"] = torch.ones(J, dtype=DTYPE, device="cpu")
        init[f"kh_ard_{k}"] = ard.clone()
        init[f"kg_ard_{k}"] = ard.clone()[None].repeat(J, 1)
        init[f"mu_{k}"] = X0.clone()
        init[f"lam_{k}"] = torch.full((N, Q), float(lam), dtype=DTYPE, device="cpu")
    return {k: v.to(device) for k, v in init.items()}


def param(data: McGPDSData, name: str, frozen=()) -> torch.Tensor:
    """The constrained value of parameter ``name``.

    ``data.init[name]`` if its group is in ``data.fixed``, else the registered ``pyro.param``
    (created from ``data.init``), detached when its group is in ``frozen`` (or ``"model"`` is,
    for every non-variational group).

    Parameters
    ----------
    data : McGPDSData
        The problem (``init`` and ``fixed``).
    name : str
        The parameter name.
    frozen : collection of str, default ()
        Groups whose value is detached (no gradient).

    Returns
    -------
    torch.Tensor
        The constrained value.
    """
    group = param_group(name)
    if group in data.fixed:
        return data.init[name]
    v = pyro.param(name, lambda: data.init[name].clone(), constraint=constraint_of(name, data))
    if group in frozen or (group != "variational" and "model" in frozen):
        v = v.detach()
    return v


#: the old private name (kept for code written against it)


def _time_hp(data, tn, frozen, kernels=None):
    """:class:`~tandem.models.kernels.TimeParams` of time kernel ``tn`` (its registered parameters)."""
    kern = (kernels or time_kernels(data))[tn]
    return TimeParams(kern, {n: param(data, full, frozen) for n, full in time_param_names(kern, tn).items()})


def _mapping_object(kernel) -> MappingKernel:
    """The mapping-kernel object of an object or a (silently accepted) alias string."""
    if isinstance(kernel, MappingKernel):
        return kernel
    mapping_kernel_kind(kernel)                       # validates the alias
    import warnings as _w
    with _w.catch_warnings():
        _w.simplefilter("ignore", DeprecationWarning)
        return as_mapping_kernel(kernel)


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


def kzz_diag(kind, X, variance, ard):
    """diag κ(X, X) (N,) of a mapping kernel (object or alias name).

    Parameters
    ----------
    kind : str or MappingKernel
        The mapping kernel.
    X : torch.Tensor
        (N, Q) inputs.
    variance : torch.Tensor or None
        Kernel variance (None for kernels without one).
    ard : torch.Tensor
        (Q,) ARD weights.

    Returns
    -------
    torch.Tensor
        (N,) κ(x_n, x_n).
    """
    return Basis(kind, X[:1], variance, ard).diag(X)


_ALIAS_OBJECTS: dict = {}


def mapping_object(kernel) -> MappingKernel:
    """A :class:`~tandem.models.kernels.MappingKernel` from an object or an alias name.

    Alias names ("rbfard" / "linear") are accepted here without a warning: internal callers
    carry names.

    Parameters
    ----------
    kernel : str or MappingKernel
        The kernel or its alias name.

    Returns
    -------
    tandem.models.kernels.MappingKernel
        The kernel object (one cached object per alias).

    Raises
    ------
    ValueError
        An unknown name.
    """
    if isinstance(kernel, MappingKernel):
        return kernel
    if kernel not in _ALIAS_OBJECTS:
        _ALIAS_OBJECTS[mapping_kernel_kind(kernel)] = _mapping_object(kernel)
    return _ALIAS_OBJECTS[kernel]


@dataclass(frozen=True)
class Basis:
    """One sparse-GP function of a view's output layer — ``h`` or a basis function ``g_j``.

    ``kind``: the mapping kernel — a :class:`~tandem.models.kernels.MappingKernel` (or its
    alias name "rbfard" | "linear") — with ``variance`` (scalar; None for kernels without
    one, e.g. linear) and ARD weights ``ard`` (Q,), inducing inputs ``Z`` (M, Q). Every
    McGPDS objective and predictor needs the same few pieces of it — ``K_ZZ`` and its
    Cholesky, the ψ-statistics under q(X), the whitened ψ-statistics of the collapsed bound —
    so they are written once here, through the kernel object's ``psi`` / ``kzz`` / ``gram`` /
    ``diag`` methods.

    Attributes
    ----------
    kind : MappingKernel or str
        The mapping kernel (object or alias name).
    Z : torch.Tensor
        (M, Q) inducing inputs.
    variance : torch.Tensor or None
        Scalar kernel variance; None for kernels without one (e.g. linear).
    ard : torch.Tensor
        (Q,) ARD weights.
    name : str, default "h"
        The function's name ("h", "g_1", ...), used in error messages.
    """
    kind: object
    Z: torch.Tensor
    variance: torch.Tensor | None
    ard: torch.Tensor
    name: str = "h"

    @property
    def kernel(self) -> MappingKernel:
        """The mapping-kernel object."""
        return mapping_object(self.kind)

    @property
    def params(self) -> dict:
        """The kernel's hyperparameters ``{"variance", "ard"}`` (those it declares)."""
        vals = {"variance": self.variance, "ard": self.ard}
        return {n: vals[n] for n in self.kernel.param_names}

    def kzz(self) -> torch.Tensor:
        """``K_ZZ`` (M, M) with the small fixed jitter of :meth:`MappingKernel.kzz`."""
        return self.kernel.kzz(self.Z, self.params)

    def chol(self) -> torch.Tensor:
        """Lower Cholesky factor of ``K_ZZ`` (M, M)."""
        return cholesky_jitter(self.kzz(), f"K_ZZ of {self.name}")

    def diag(self, X: torch.Tensor) -> torch.Tensor:
        """``κ(x_n, x_n)`` (N,) at fixed inputs X.

        Parameters
        ----------
        X : torch.Tensor
            (N, Q) inputs.

        Returns
        -------
        torch.Tensor
            (N,) diagonal of the kernel.
        """
        return self.kernel.diag(X, self.params)

    def psi(self, mu: torch.Tensor, s: torch.Tensor, per_point: bool = False):
        """ψ-statistics under ``N(mu, diag s)``.

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means of q(X).
        s : torch.Tensor
            (N, Q) variances of q(X).
        per_point : bool, default False
            Return Ψ2 per point (N, M, M) instead of its sum (M, M).

        Returns
        -------
        tuple of torch.Tensor
            ``(ψ0, Ψ1 (N, M), Ψ2 (M, M) or (N, M, M))``.
        """
        return self.kernel.psi(mu, s, self.Z, self.params, per_point)

    def projection(self, X: torch.Tensor, L: torch.Tensor, per_point: bool = False):
        """The projected-process pieces at fixed inputs X.

        Parameters
        ----------
        X : torch.Tensor
            (N, Q) inputs.
        L : torch.Tensor
            (M, M) lower Cholesky factor of ``K_ZZ`` (see :meth:`chol`).
        per_point : bool, default False
            Return the (N,) diagonal of ``K_XX − K_XZ K_ZZ⁻¹ K_ZX`` instead of its trace (for
            masked likelihoods).

        Returns
        -------
        tuple of torch.Tensor
            ``(K_ZZ⁻¹ K_ZX (M, N), tr(K_XX − K_XZ K_ZZ⁻¹ K_ZX))`` (scalar, or (N,) with
            ``per_point``).
        """
        Kx = self.kernel.gram(X, self.Z, self.params)                       # (N, M)
        A = torch.cholesky_solve(Kx.mT, L)
        tr = self.diag(X) - (Kx * A.mT).sum(-1)
        return A, (tr if per_point else tr.sum())

    def whitened(self, mu: torch.Tensor, s: torch.Tensor, Y: torch.Tensor):
        """The collapsed bound's whitened pieces, ``K_ZZ = L Lᵀ``.

        The ψ-sums are streamed over chunks of frames (:func:`tandem.models.gp_kernels.stream_psi_sums`):
        memory O(chunk·M + M²).

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means of the inputs ``N(mu, diag s)``.
        s : torch.Tensor
            (N, Q) variances of the inputs.
        Y : torch.Tensor
            (N, D) targets.

        Returns
        -------
        tuple of torch.Tensor
            ``(ψ0, Ã = L⁻¹ Ψ2 L⁻ᵀ (M, M), R = L⁻¹ Ψ1ᵀ Y (M, D))``.
        """
        # ψ-sums streamed over chunks of frames (gp_kernels.stream_psi_sums): memory O(chunk·M + M²)
        psi0, P1Y, Psi2 = stream_psi_sums(self.psi, mu, s, Y, self.Z.shape[0])
        L = self.chol()
        tmp = torch.linalg.solve_triangular(L, Psi2, upper=False)
        At = torch.linalg.solve_triangular(L, tmp.mT, upper=False)
        R = torch.linalg.solve_triangular(L, P1Y, upper=False)
        return psi0, At, R


def view_bases(v: dict, kind) -> tuple[Basis, list[Basis]]:
    """``(h, [g_1, …, g_J])`` of one view from its hyperparameters.

    Parameters
    ----------
    v : dict
        An entry of ``hyperparams(data)["views"]``: ``Zh`` (M, Q), ``kh_var``, ``kh_ard`` (Q,),
        ``Zg`` (J, M, Q), ``kg_var`` (J,) or None, ``kg_ard`` (J, Q), ``W`` (D, J).
    kind : str or MappingKernel
        The mapping kernel (object or alias name).

    Returns
    -------
    tuple
        ``(Basis h, list of J Basis g_j)``.
    """
    kern = mapping_object(kind)
    h = Basis(kern, v["Zh"], v.get("kh_var"), v["kh_ard"], "h")
    kg = v.get("kg_var")
    gs = [Basis(kern, v["Zg"][j], None if kg is None else kg[j], v["kg_ard"][j], f"g_{j + 1}")
          for j in range(v["W"].shape[1])]
    return h, gs


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
    gen = torch.Generator().manual_seed(seed)
    init = default_init(len(times), out_dims, Q, M, J, mapping_kernel, times=times, generator=gen,
                        **init_kwargs)
    data = McGPDSData(None, times, seq_ids, Q, M, J, mapping_kernel,
                      time_white=init_kwargs.get("time_white", True), time_bias=init_kwargs.get("time_bias", True),
                      private_prior=init_kwargs.get("private_prior", "mcgpds"), out_dims=list(out_dims), init=init,
                      time_kernel=init_kwargs.get("time_kernel"))
    pyro.set_rng_seed(seed)
    # every parameter from ``init`` (all groups fixed while drawing): values left in Pyro's
    # parameter store by an earlier fit or simulation must not leak into this draw
    data.fixed = frozenset(PARAM_GROUPS)
    with poutine.block():
        tr = poutine.trace(mcgpds_model).get_trace(data)
    data.fixed = SAFE_FIXED
    res = {n: tr.nodes[n]["value"].detach() for n in tr.stochastic_nodes if n in dims(data.V)}
    res["data"] = data
    return res
