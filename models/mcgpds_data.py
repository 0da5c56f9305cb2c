"""McGPDS data container and initial values: :class:`McGPDSData`, parameter groups, constraints, :func:`default_init`.

:class:`McGPDSData` is the one argument of the model (:mod:`tandem.models.mcgpds`), the guide
and the losses; it validates the views, time stamps and sequences and fills the initial
values (PCA latents, the paper's rules) that the ``pyro.param`` s start from.
Re-exported by :mod:`tandem.models.mcgpds`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from pyro.distributions import constraints

from tandem.inference.numerics import DTYPE
from tandem.inference.validation import as_tensor, check_int_range, check_time_order, label_codes, resolve_device
from tandem.models.kernels import mapping_kernel_kind
from tandem.models.mcgpds_basis import _mapping_object
from tandem.models.mcgpds_time import _time_constraints, time_init_values, time_kernels, time_param_names
from tandem.models.sequence_blocks import Blocks

__all__ = ["McGPDSData", "DIMS", "dims", "param_group", "default_init", "PARAM_GROUPS", "SAFE_FIXED", "pca_init",
           "required_params", "check_init", "constraint_of"]


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
        self.Q, self.M, self.J = check_sizes(self.Q, self.M, self.J)
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
        elif self.out_dims is None:
            raise ValueError("out_dims: expected the output dimension of every view when views is None")
        self.out_dims = check_out_dims(self.out_dims)
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


def check_sizes(Q, M, J) -> tuple[int, int, int]:
    """The one check of the model's sizes Q (latent dimension), M (inducing points), J (basis functions).

    Parameters
    ----------
    Q, M, J : int
        Each an integer ≥ 1 (Python or numpy; bools refused).

    Returns
    -------
    tuple of int
        ``(Q, M, J)`` as Python ints.

    Raises
    ------
    ValueError
        Naming the first size that is not an integer ≥ 1.
    """
    return tuple(check_int_range(v, name, 1) for v, name in ((Q, "Q"), (M, "M"), (J, "J")))


def check_out_dims(out_dims) -> list[int]:
    """The one check of the views' output dimensions D_1 … D_V: a non-empty sequence of integers ≥ 1.

    Parameters
    ----------
    out_dims : sequence of int
        A list, tuple, 1-d array or 1-d integer tensor (a string is refused, not read as
        characters; a float entry is refused, not truncated).

    Returns
    -------
    list of int
        The D_k as Python ints.

    Raises
    ------
    ValueError
        Naming ``out_dims`` (not a non-empty sequence) or the entry ``out_dims[k]`` that is not
        an integer ≥ 1.
    """
    if isinstance(out_dims, (np.ndarray, torch.Tensor)) and out_dims.ndim == 1:
        out_dims = out_dims.tolist()      # numpy/torch scalars → Python numbers (floats stay floats)
    if not isinstance(out_dims, (list, tuple)) or not out_dims:
        raise ValueError(f"out_dims: expected a non-empty list of output dimensions (one per view), got {out_dims!r}")
    return [check_int_range(d.item() if isinstance(d, (np.ndarray, torch.Tensor)) and d.ndim == 0 else d,
                            f"out_dims[{k}]", 1) for k, d in enumerate(out_dims)]


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

    Raises
    ------
    ValueError
        Naming ``out_dims`` or one of ``Q``, ``M``, ``J`` when it is not an integer ≥ 1
        (:func:`check_out_dims`, :func:`check_sizes`); naming ``device`` when it is not a cpu or
        cuda device that is present (:func:`~tandem.inference.validation.resolve_device`).
    """
    device = resolve_device(device, X0, times)          # given, else X0's, else times', else the CPU
    out_dims = check_out_dims(out_dims)
    Q, M, J = check_sizes(Q, M, J)
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


# checkpoint and cache fingerprints (tandem.inference.checkpoints), saved files (tandem.inference.
# persistence) and pickles name a class by module and qualname: the classes keep the module
# that defined them before it was split, so those names (and keys) stay the same
for _cls in (McGPDSData,):
    _cls.__module__ = "tandem.models.mcgpds"
