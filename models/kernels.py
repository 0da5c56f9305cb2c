"""Kernels as objects: time kernels and mapping kernels with one common interface.

Every kernel is a small stateless object; its hyperparameters live outside it, in a dict
``params`` (name -> float64 tensor), so that the same object serves the Pyro model (where
the values are ``pyro.param`` sites), the collapsed bound and the stochastic fit.

Common interface (:class:`Kernel`)
----------------------------------
* ``param_names``  — tuple of hyperparameter names;
* ``constraints``  — dict name -> ``torch.distributions.constraints`` object;
* ``gram(x1, x2, params, same=False)`` — kernel matrix; time kernels take batched time
  vectors ``(..., n1)``, ``(..., n2)`` -> ``(..., n1, n2)``; mapping kernels take inputs
  ``(N1, Q)``, ``(N2, Q)`` -> ``(N1, N2)``. ``same`` says the two arguments are the same
  points (white noise is added only then);
* ``diag(x, params)`` — the diagonal ``k(x_i, x_i)``, shape ``(..., n)`` / ``(N,)``.

Time kernels (``r = |t − t'|``)
-------------------------------
* :class:`RBF`         ``σ² exp(−½ γ r²)``   (``variance`` σ², ``invwidth`` γ; the paper's kernel)
* :class:`Matern12`    ``σ² exp(−r/ℓ)``
* :class:`Matern32`    ``σ² (1 + √3 r/ℓ) exp(−√3 r/ℓ)``
* :class:`Matern52`    ``σ² (1 + √5 r/ℓ + 5r²/(3ℓ²)) exp(−√5 r/ℓ)``
* :class:`Periodic`    ``σ² exp(−2 sin²(π r/p)/ℓ²)``
* :class:`White`       ``σ_w² δ(t, t')`` (only when ``same``)
* :class:`Bias`        ``σ_b²``
* :class:`Sum`         ``Σ_j k_j``; parameter names are prefixed ``"<j>.<name>"`` unless
  given names (``Sum(rbf=RBF(), white=White(), bias=Bias())`` -> ``"rbf.variance"``...).
  :func:`paper_time_kernel` is the paper's (and the authors' code's) RBF + white + bias.

Mapping kernels and ψ-statistics
--------------------------------
For ``q(x_n) = N(μ_n, diag s_n)``, ``mu, s`` (N, Q), inducing inputs ``Z`` (M, Q):
``psi0 = Σ_n ⟨κ(x_n, x_n)⟩`` (scalar), ``psi1[n, m] = ⟨κ(x_n, z_m)⟩`` (N, M),
``psi2 = Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩`` (M, M) — or per point ``(N,)``, ``(N, M)``,
``(N, M, M)`` with ``per_point=True``. The closed forms are those of
:mod:`models.gp_kernels` (:func:`~models.gp_kernels.psi_rbf`,
:func:`~models.gp_kernels.psi_linear`), which the objects call, so the paper's
configuration gives bit-identical numbers to the string API.

* :class:`RBFARD`     ``σ² exp(−½ Σ_q a_q (x_q − x'_q)²)`` (``variance``, ``ard`` (Q,))
* :class:`LinearARD`  ``Σ_q a_q x_q x'_q`` (``ard`` (Q,))

:func:`as_mapping_kernel` turns the deprecated strings ``"rbfard"``/``"linear"`` into these
objects (with a ``DeprecationWarning``).
"""
from __future__ import annotations

import math
import warnings

import torch
from torch.distributions import constraints

from . import gp_kernels as _gk

__all__ = ["Kernel", "TimeKernel", "MappingKernel", "RBF", "Matern12", "Matern32", "Matern52", "Periodic",
           "White", "Bias", "Sum", "paper_time_kernel", "RBFARD", "LinearARD", "as_mapping_kernel",
           "as_time_kernel", "mapping_kernel_kind", "TimeParams", "time_params_kernel", "is_paper_kernel",
           "kernel_from_spec"]


def _get(params: dict, name: str, kernel) -> torch.Tensor:
    if not isinstance(params, dict):
        raise TypeError(f"params: expected a dict of tensors for {type(kernel).__name__}, got {type(params).__name__}")
    if name not in params:
        raise ValueError(f"params: {type(kernel).__name__} needs parameter {name!r}; got {sorted(params)}")
    return torch.as_tensor(params[name], dtype=torch.float64)


class Kernel:
    """Base class: ``param_names``, ``constraints``, ``gram``, ``diag``, ``init_params``.

    Parameters
    ----------
    **init : float
        Optional initial values of named hyperparameters (e.g. ``Matern32(lengthscale=5.0)``);
        they are used by :meth:`init_params` and by McGPDS as the starting values of the
        ``pyro.param`` s. The object stays stateless otherwise (values live in ``params``).

    Raises
    ------
    ValueError
        An unknown parameter name, or a value that is not a finite number.
    """

    param_names: tuple = ()
    defaults: dict = {}

    def __init__(self, **init):
        bad = set(init) - set(self.param_names)
        if bad:
            raise ValueError(f"{type(self).__name__}: unknown parameter(s) {sorted(bad)}; expected among "
                             f"{list(self.param_names)}")
        clean = {}
        for k, v in init.items():
            if isinstance(v, torch.Tensor) and v.numel() == 1:
                v = float(v)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                raise ValueError(f"{type(self).__name__}({k}=...): expected a finite number, got {v!r}")
            if float(v) <= 0 and isinstance(self.constraints.get(k), type(constraints.positive)):
                raise ValueError(f"{type(self).__name__}({k}={v!r}): expected a positive value")
            clean[k] = float(v)
        self.init = clean

    @property
    def constraints(self) -> dict:
        return {n: constraints.positive for n in self.param_names}

    @property
    def given_init(self) -> dict:
        """The initial values given at construction (name -> float)."""
        return dict(getattr(self, "init", {}))

    def init_params(self, **overrides) -> dict:
        """Hyperparameters as float64 tensors.

        The class defaults, then the values given at construction, then ``overrides``.

        Parameters
        ----------
        **overrides : float or torch.Tensor
            Values that replace the defaults and the construction values.

        Returns
        -------
        dict
            name -> float64 tensor for every name in ``param_names``.

        Raises
        ------
        ValueError
            An unknown parameter name.
        """
        bad = set(overrides) - set(self.param_names)
        if bad:
            raise ValueError(f"init_params: unknown parameter(s) {sorted(bad)} for {type(self).__name__}; "
                             f"expected among {list(self.param_names)}")
        out = {n: torch.as_tensor(self.defaults[n], dtype=torch.float64) for n in self.param_names}
        out.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in self.given_init.items()})
        out.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in overrides.items()})
        return out

    # ---------------------------------------------------------------- JSON spec (save/load)
    def to_spec(self) -> dict:
        """A JSON-able description of the kernel (:func:`kernel_from_spec` is the inverse).
 Used by save/load: nothing is pickled.

        Returns
        -------
        dict
            ``{"type": class name, "init": {...}}``.
        """
        return {"type": type(self).__name__, "init": self.given_init}

    def __getstate__(self):
        return {"spec": self.to_spec()}

    def __setstate__(self, state):
        if not isinstance(state, dict) or "spec" not in state:
            raise ValueError(f"{type(self).__name__}: malformed saved state (expected a kernel spec)")
        k = kernel_from_spec(state["spec"])
        if type(k) is not type(self):
            raise ValueError(f"kernel spec of type {state['spec'].get('type')!r} for a {type(self).__name__}")
        self.__dict__.update(k.__dict__)

    def __eq__(self, other):
        return isinstance(other, Kernel) and type(other) is type(self) and other.to_spec() == self.to_spec()

    def __hash__(self):
        return hash(repr(self))

    def gram(self, x1, x2, params: dict, same: bool = False) -> torch.Tensor:  # pragma: no cover - abstract
        """Kernel matrix between two sets of points (abstract).

        Parameters
        ----------
        x1, x2 : array_like
            Time vectors (..., n1), (..., n2) or inputs (N1, Q), (N2, Q).
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            The two arguments are the same points (white noise is added only then).

        Returns
        -------
        torch.Tensor
            (..., n1, n2) or (N1, N2) kernel matrix.
        """
        raise NotImplementedError

    def diag(self, x, params: dict) -> torch.Tensor:  # pragma: no cover - abstract
        """The diagonal k(x_i, x_i) (abstract).

        Parameters
        ----------
        x : array_like
            (..., n) time stamps or (N, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (..., n) or (N,).
        """
        raise NotImplementedError

    def __add__(self, other):
        if not isinstance(other, TimeKernel) or not isinstance(self, TimeKernel):
            return NotImplemented
        left = list(self.parts) if isinstance(self, Sum) else [self]
        right = list(other.parts) if isinstance(other, Sum) else [other]
        return Sum(*left, *right)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.given_init.items()))
        return f"{type(self).__name__}({args})"


class TimeKernel(Kernel):
    """Stationary kernel over scalar time stamps; ``gram`` works on batched vectors (..., n).

    Parameters
    ----------
    **init : float
        Optional initial values of the subclass's ``param_names`` (see :class:`Kernel`).
    """

    def _k_of_r(self, r, params):  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def _dist(t1, t2):
        t1 = torch.as_tensor(t1, dtype=torch.float64)
        t2 = torch.as_tensor(t2, dtype=torch.float64)
        return t1[..., :, None] - t2[..., None, :]

    def gram(self, t1, t2, params: dict, same: bool = False) -> torch.Tensor:
        """Kernel matrix k(|t1_i − t2_j|) of batched time vectors.

        Parameters
        ----------
        t1 : array_like
            (..., n1) time stamps.
        t2 : array_like
            (..., n2) time stamps.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            The two arguments are the same points (white noise is added only then).

        Returns
        -------
        torch.Tensor
            (..., n1, n2) kernel matrix.
        """
        return self._k_of_r(self._dist(t1, t2).abs(), params)

    def diag(self, t, params: dict) -> torch.Tensor:
        """The diagonal k(0) at every time stamp.

        Parameters
        ----------
        t : array_like
            (..., n) time stamps.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (..., n) the diagonal k(t_i, t_i).
        """
        t = torch.as_tensor(t, dtype=torch.float64)
        return self._k_of_r(torch.zeros_like(t), params)


class RBF(TimeKernel):
    """``k = σ² exp(−½ γ (t − t')²)``; parameters ``variance`` σ², ``invwidth`` γ.

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance``, ``invwidth`` (see :class:`Kernel`).
    """

    param_names = ("variance", "invwidth")
    defaults = {"variance": 1.0, "invwidth": 1.0}

    def gram(self, t1, t2, params, same=False):
        """Kernel matrix σ² exp(−½ γ (t1_i − t2_j)²).

        Parameters
        ----------
        t1 : array_like
            (..., n1) time stamps.
        t2 : array_like
            (..., n2) time stamps.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            The two arguments are the same points (white noise is added only then).

        Returns
        -------
        torch.Tensor
            (..., n1, n2) kernel matrix.
        """
        d = self._dist(t1, t2)
        return _get(params, "variance", self) * torch.exp(-0.5 * _get(params, "invwidth", self) * d * d)

    def _k_of_r(self, r, params):
        return _get(params, "variance", self) * torch.exp(-0.5 * _get(params, "invwidth", self) * r * r)


class Matern12(TimeKernel):
    """``k = σ² exp(−r/ℓ)`` (Ornstein–Uhlenbeck); ``variance``, ``lengthscale``.

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance``, ``lengthscale`` (see :class:`Kernel`).
    """

    param_names = ("variance", "lengthscale")
    defaults = {"variance": 1.0, "lengthscale": 1.0}

    def _k_of_r(self, r, params):
        return _get(params, "variance", self) * torch.exp(-r / _get(params, "lengthscale", self))


class Matern32(TimeKernel):
    """``k = σ² (1 + √3 r/ℓ) exp(−√3 r/ℓ)``; ``variance``, ``lengthscale``.

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance``, ``lengthscale`` (see :class:`Kernel`).
    """

    param_names = ("variance", "lengthscale")
    defaults = {"variance": 1.0, "lengthscale": 1.0}

    def _k_of_r(self, r, params):
        u = math.sqrt(3.0) * r / _get(params, "lengthscale", self)
        return _get(params, "variance", self) * (1.0 + u) * torch.exp(-u)


class Matern52(TimeKernel):
    """``k = σ² (1 + √5 r/ℓ + 5 r²/(3ℓ²)) exp(−√5 r/ℓ)``; ``variance``, ``lengthscale``.

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance``, ``lengthscale`` (see :class:`Kernel`).
    """

    param_names = ("variance", "lengthscale")
    defaults = {"variance": 1.0, "lengthscale": 1.0}

    def _k_of_r(self, r, params):
        u = math.sqrt(5.0) * r / _get(params, "lengthscale", self)
        return _get(params, "variance", self) * (1.0 + u + u * u / 3.0) * torch.exp(-u)


class Periodic(TimeKernel):
    """``k = σ² exp(−2 sin²(π r / p) / ℓ²)``; ``variance``, ``lengthscale`` ℓ, ``period`` p.

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance``, ``lengthscale``, ``period`` (see :class:`Kernel`).
    """

    param_names = ("variance", "lengthscale", "period")
    defaults = {"variance": 1.0, "lengthscale": 1.0, "period": 1.0}

    def _k_of_r(self, r, params):
        sn = torch.sin(math.pi * r / _get(params, "period", self))
        return _get(params, "variance", self) * torch.exp(-2.0 * sn * sn / _get(params, "lengthscale", self) ** 2)


class White(TimeKernel):
    """``k = σ_w² δ(t, t')``, added only when ``same`` (the two arguments are the same points).

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance`` (default 1e-3) (see :class:`Kernel`).
    """

    param_names = ("variance",)
    defaults = {"variance": 1e-3}

    def gram(self, t1, t2, params, same=False):
        """σ_w² I when ``same``, else zeros.

        Parameters
        ----------
        t1 : array_like
            (..., n1) time stamps.
        t2 : array_like
            (..., n2) time stamps.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            The two arguments are the same points (white noise is added only then).

        Returns
        -------
        torch.Tensor
            (..., n1, n2) kernel matrix.
        """
        d = self._dist(t1, t2)
        K = torch.zeros_like(d)
        if same:
            if d.shape[-1] != d.shape[-2]:
                raise ValueError(f"White.gram: same=True needs equal lengths, got {tuple(d.shape[-2:])}")
            K = K + _get(params, "variance", self) * torch.eye(d.shape[-1], dtype=d.dtype)
        return K

    def diag(self, t, params):
        """σ_w² at every time stamp.

        Parameters
        ----------
        t : array_like
            (..., n) time stamps.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (..., n) the diagonal k(t_i, t_i).
        """
        t = torch.as_tensor(t, dtype=torch.float64)
        return torch.zeros_like(t) + _get(params, "variance", self)


class Bias(TimeKernel):
    """``k = σ_b²`` (a constant).

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance`` (default 1e-3) (see :class:`Kernel`).
    """

    param_names = ("variance",)
    defaults = {"variance": 1e-3}

    def _k_of_r(self, r, params):
        return torch.zeros_like(r) + _get(params, "variance", self)


class Sum(TimeKernel):
    """Sum of time kernels ``k = Σ_j k_j``.

    Positional parts are named ``"0"``, ``"1"``...; keyword parts by their key.

    Parameters are ``"<part>.<name>"``, e.g. ``Sum(rbf=RBF(), white=White())`` has
    ``("rbf.variance", "rbf.invwidth", "white.variance")``.

    Parameters
    ----------
    *parts : TimeKernel
        Parts named ``"0"``, ``"1"``, ...
    **named : TimeKernel
        Parts named by their keyword (no ``"."`` in a name).

    Raises
    ------
    ValueError
        No part, or a name with ``"."``.
    TypeError
        A part that is not a :class:`TimeKernel`.
    """

    def __init__(self, *parts, **named):
        items = [(str(i), p) for i, p in enumerate(parts)] + list(named.items())
        if not items:
            raise ValueError("Sum: needs at least one kernel")
        for key, p in items:
            if not isinstance(p, TimeKernel):
                raise TypeError(f"Sum: part {key!r} must be a TimeKernel, got {type(p).__name__}")
            if "." in key:
                raise ValueError(f"Sum: part name {key!r} must not contain '.'")
        self.items = items
        self.init = {}

    def to_spec(self) -> dict:
        """A JSON-able description ``{"type": "Sum", "parts": [[name, spec], ...]}``.

        Returns
        -------
        dict
            The spec (:func:`kernel_from_spec` is the inverse).
        """
        return {"type": "Sum", "parts": [[k, p.to_spec()] for k, p in self.items]}

    @property
    def given_init(self) -> dict:
        return {f"{k}.{n}": v for k, p in self.items for n, v in p.given_init.items()}

    @property
    def parts(self):
        return [p for _, p in self.items]

    @property
    def param_names(self):
        return tuple(f"{k}.{n}" for k, p in self.items for n in p.param_names)

    @property
    def defaults(self):
        return {f"{k}.{n}": v for k, p in self.items for n, v in p.defaults.items()}

    @property
    def constraints(self):
        return {f"{k}.{n}": c for k, p in self.items for n, c in p.constraints.items()}

    def _sub(self, key, params):
        pre = key + "."
        return {n[len(pre):]: v for n, v in params.items() if n.startswith(pre)}

    def gram(self, t1, t2, params, same=False):
        """Σ_j of the parts' kernel matrices.

        Parameters
        ----------
        t1 : array_like
            (..., n1) time stamps.
        t2 : array_like
            (..., n2) time stamps.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            The two arguments are the same points (white noise is added only then).

        Returns
        -------
        torch.Tensor
            (..., n1, n2) kernel matrix.
        """
        return sum(p.gram(t1, t2, self._sub(k, params), same=same) for k, p in self.items)

    def diag(self, t, params):
        """Σ_j of the parts' diagonals.

        Parameters
        ----------
        t : array_like
            (..., n) time stamps.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (..., n) the diagonal k(t_i, t_i).
        """
        return sum(p.diag(t, self._sub(k, params)) for k, p in self.items)

    def __repr__(self):
        return "Sum(" + ", ".join(f"{k}={p!r}" for k, p in self.items) + ")"


def paper_time_kernel(white: bool = True, bias: bool = True) -> Sum:
    """The paper's temporal kernel ``RBF + White + Bias`` with parts named ``rbf``, ``white``, ``bias``.

    ``white=False`` / ``bias=False`` drop those parts (McGPDS's ``time_white`` /
    ``time_bias`` options).

    With ``params = {"rbf.variance": σ_t², "rbf.invwidth": γ, "white.variance": σ_w²,
    "bias.variance": σ_b²}``, ``gram(t, t, params, same=True)`` equals
    :func:`models.gp_kernels.time_kernel(t, t, σ_t², γ, σ_w², σ_b²)`.

    Parameters
    ----------
    white : bool, default True
        Include the ``white`` part.
    bias : bool, default True
        Include the ``bias`` part.

    Returns
    -------
    Sum
    """
    parts = {"rbf": RBF()}
    if white:
        parts["white"] = White()
    if bias:
        parts["bias"] = Bias()
    return Sum(**parts)


class MappingKernel(Kernel):
    """Kernel on latent points (N, Q) with ψ-statistics under a diagonal Gaussian q(X).

    Parameters
    ----------
    **init : float
        Optional initial values of the subclass's ``param_names`` (only ``variance`` is used as a
        start; see :class:`Kernel`).
    """

    kind: str = ""

    def psi(self, mu, s, Z, params, per_point: bool = False):  # pragma: no cover - abstract
        """The three ψ-statistics under q(x_n) = N(μ_n, diag s_n) (abstract).

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            Per-point statistics instead of sums over n.

        Returns
        -------
        psi0 : torch.Tensor
            Σ_n ⟨κ(x_n, x_n)⟩ (scalar), or (N,) per point.
        psi1 : torch.Tensor
            (N, M) ⟨κ(x_n, z_m)⟩.
        psi2 : torch.Tensor
            (M, M) Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩, or (N, M, M) per point.
        """
        raise NotImplementedError

    def psi0(self, mu, s, params, per_point: bool = False):
        """ψ0 = Σ_n ⟨κ(x_n, x_n)⟩.

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            (N,) per point instead of the sum.

        Returns
        -------
        torch.Tensor
            Scalar, or (N,).
        """
        return self.psi(mu, s, mu[:1], params, per_point)[0]

    def psi1(self, mu, s, Z, params):
        """ψ1[n, m] = ⟨κ(x_n, z_m)⟩.

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (N, M).
        """
        return self.psi(mu, s, Z, params)[1]

    def psi2(self, mu, s, Z, params, per_point: bool = False):
        """ψ2 = Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩.

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            (N, M, M) per point instead of the sum.

        Returns
        -------
        torch.Tensor
            (M, M), or (N, M, M).
        """
        return self.psi(mu, s, Z, params, per_point)[2]

    def kzz(self, Z, params) -> torch.Tensor:
        """``K(Z, Z)`` plus the fixed jitter of :func:`models.gp_kernels.kzz` (1e-6 of the mean diagonal).

        Parameters
        ----------
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (M, M).
        """
        K = self.gram(Z, Z, params)
        jit = 1e-6 * K.diagonal().mean().detach().clamp_min(1e-12)
        return K + jit * torch.eye(K.shape[0], dtype=K.dtype, device=K.device)

    def init_params(self, Q: int = 1, **overrides) -> dict:
        """Hyperparameters as float64 tensors: ``variance`` 1, ``ard`` ones (Q,).

        A ``variance`` given at construction replaces the default, then ``overrides`` apply.

        Parameters
        ----------
        Q : int, default 1
            Latent dimension (length of ``ard``).
        **overrides : float or torch.Tensor
            Values that replace the defaults.

        Returns
        -------
        dict
            name -> float64 tensor for every name in ``param_names``.

        Raises
        ------
        ValueError
            An unknown parameter name.
        """
        out = {"variance": torch.tensor(1.0, dtype=torch.float64), "ard": torch.ones(Q, dtype=torch.float64)}
        out = {n: out[n] for n in self.param_names}
        out.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in self.given_init.items()
                    if k == "variance"})
        bad = set(overrides) - set(self.param_names)
        if bad:
            raise ValueError(f"init_params: unknown parameter(s) {sorted(bad)} for {type(self).__name__}")
        out.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in overrides.items()})
        return out


class RBFARD(MappingKernel):
    """``κ = σ² exp(−½ Σ_q a_q (x_q − x'_q)²)``; ``variance`` σ², ``ard`` a (Q,) inverse squared lengthscales.

    Parameters
    ----------
    **init : float
        Optional initial values of ``variance`` (``ard`` starts at ones (Q,)) (see :class:`Kernel`).
    """

    param_names = ("variance", "ard")
    kind = "rbfard"

    def gram(self, X1, X2, params, same=False):
        """Kernel matrix σ² exp(−½ Σ_q a_q (x_q − x'_q)²).

        Parameters
        ----------
        X1 : torch.Tensor
            (N1, Q) inputs.
        X2 : torch.Tensor
            (N2, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            Accepted for the common interface (a mapping kernel adds no white noise).

        Returns
        -------
        torch.Tensor
            (N1, N2) kernel matrix.
        """
        return _gk.rbf_ard(X1, X2, _get(params, "variance", self), _get(params, "ard", self))

    def diag(self, X, params):
        """The diagonal κ(x_n, x_n).

        Parameters
        ----------
        X : torch.Tensor
            (N, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (N,) the diagonal κ(x_n, x_n).
        """
        return _get(params, "variance", self).expand(X.shape[0]).clone()

    def psi(self, mu, s, Z, params, per_point=False):
        """The closed-form ψ-statistics under q(x_n) = N(μ_n, diag s_n).

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            Per-point statistics instead of sums over n.

        Returns
        -------
        psi0 : torch.Tensor
            Σ_n ⟨κ(x_n, x_n)⟩ (scalar), or (N,) per point.
        psi1 : torch.Tensor
            (N, M) ⟨κ(x_n, z_m)⟩.
        psi2 : torch.Tensor
            (M, M) Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩, or (N, M, M) per point.
        """
        return _gk.psi_rbf(mu, s, Z, _get(params, "variance", self), _get(params, "ard", self), per_point)


class LinearARD(MappingKernel):
    """``κ = Σ_q a_q x_q x'_q``; ``ard`` a (Q,).

    Parameters
    ----------
    **init : float
        Optional initial values of ``ard`` (ignored: ``ard`` starts at ones (Q,)) (see :class:`Kernel`).
    """

    param_names = ("ard",)
    kind = "linear"

    def gram(self, X1, X2, params, same=False):
        """Kernel matrix Σ_q a_q x_q x'_q.

        Parameters
        ----------
        X1 : torch.Tensor
            (N1, Q) inputs.
        X2 : torch.Tensor
            (N2, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        same : bool, default False
            Accepted for the common interface (a mapping kernel adds no white noise).

        Returns
        -------
        torch.Tensor
            (N1, N2) kernel matrix.
        """
        return _gk.linear_ard(X1, X2, _get(params, "ard", self))

    def diag(self, X, params):
        """The diagonal κ(x_n, x_n).

        Parameters
        ----------
        X : torch.Tensor
            (N, Q) inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).

        Returns
        -------
        torch.Tensor
            (N,) the diagonal κ(x_n, x_n).
        """
        return (X * X * _get(params, "ard", self)).sum(-1)

    def psi(self, mu, s, Z, params, per_point=False):
        """The closed-form ψ-statistics under q(x_n) = N(μ_n, diag s_n).

        Parameters
        ----------
        mu : torch.Tensor
            (N, Q) means μ_n of q(x_n).
        s : torch.Tensor
            (N, Q) variances s_n of q(x_n).
        Z : torch.Tensor
            (M, Q) inducing inputs.
        params : dict
            Hyperparameters, name -> float64 tensor (``param_names``).
        per_point : bool, default False
            Per-point statistics instead of sums over n.

        Returns
        -------
        psi0 : torch.Tensor
            Σ_n ⟨κ(x_n, x_n)⟩ (scalar), or (N,) per point.
        psi1 : torch.Tensor
            (N, M) ⟨κ(x_n, z_m)⟩.
        psi2 : torch.Tensor
            (M, M) Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩, or (N, M, M) per point.
        """
        return _gk.psi_linear(mu, s, Z, _get(params, "ard", self), per_point)


_MAPPING_ALIASES = {"rbfard": RBFARD, "linear": LinearARD}


def as_mapping_kernel(kernel, stacklevel: int = 2) -> MappingKernel:
    """A :class:`MappingKernel` from an object or a deprecated string alias ``"rbfard"``/``"linear"``.

    Parameters
    ----------
    kernel : MappingKernel or {"rbfard", "linear"}
        The kernel or its deprecated alias.
    stacklevel : int, default 2
        ``stacklevel`` of the ``DeprecationWarning``.

    Returns
    -------
    MappingKernel

    Raises
    ------
    ValueError
        An unknown alias.
    TypeError
        Neither a kernel nor a string.
    """
    if isinstance(kernel, MappingKernel):
        return kernel
    if isinstance(kernel, str):
        if kernel not in _MAPPING_ALIASES:
            raise ValueError(f"mapping_kernel: expected a MappingKernel or one of {sorted(_MAPPING_ALIASES)}, "
                             f"got {kernel!r}")
        warnings.warn(f"mapping_kernel={kernel!r} is deprecated; pass models.kernels."
                      f"{_MAPPING_ALIASES[kernel].__name__}() instead", DeprecationWarning, stacklevel=stacklevel)
        return _MAPPING_ALIASES[kernel]()
    raise TypeError(f"mapping_kernel: expected a MappingKernel or a string alias, got {type(kernel).__name__}")


def as_time_kernel(kernel) -> TimeKernel:
    """A :class:`TimeKernel`; ``None`` gives the paper's :func:`paper_time_kernel`.

    Parameters
    ----------
    kernel : TimeKernel or None
        The kernel.

    Returns
    -------
    TimeKernel

    Raises
    ------
    TypeError
        Anything else.
    """
    if kernel is None:
        return paper_time_kernel()
    if isinstance(kernel, TimeKernel):
        return kernel
    raise TypeError(f"time_kernel: expected a TimeKernel (models.kernels) or None, got {type(kernel).__name__}")


def mapping_kernel_kind(kernel) -> str:
    """The internal dispatch name (``"rbfard"``/``"linear"``) of a mapping kernel object or alias.

    Used by the data containers and fit configurations, which accept either; no warning here
    (the public entry point :class:`tandem.inference.mcgpds.McGPDS` warns on strings).

    Parameters
    ----------
    kernel : MappingKernel or {"rbfard", "linear"}
        The kernel or its alias.

    Returns
    -------
    str
        ``"rbfard"`` or ``"linear"``.

    Raises
    ------
    ValueError
        Anything else.
    """
    if isinstance(kernel, MappingKernel):
        return kernel.kind
    if isinstance(kernel, str) and kernel in _MAPPING_ALIASES:
        return kernel
    raise ValueError(f"mapping_kernel: expected a MappingKernel (models.kernels.RBFARD() / LinearARD()) or one of "
                     f"{sorted(_MAPPING_ALIASES)}, got {kernel!r}")


#: the legacy parameter stems of the paper's kernel (``t_var_s`` ...): a fit with the paper's
#: time kernel keeps the parameter names (and numbers) of the string API
PAPER_NAMES = {"rbf.variance": "t_var", "rbf.invwidth": "t_invw", "white.variance": "t_white",
               "bias.variance": "t_bias"}
_PAPER_PARTS = {"rbf": RBF, "white": White, "bias": Bias}


def is_paper_kernel(kernel) -> bool:
    """Whether ``kernel`` has :func:`paper_time_kernel`'s structure.

    True for a :class:`Sum` with parts ``rbf`` (:class:`RBF`) and optionally ``white``
    (:class:`White`) and ``bias`` (:class:`Bias`).

    Parameters
    ----------
    kernel : object
        Any object.

    Returns
    -------
    bool
    """
    if not isinstance(kernel, Sum):
        return False
    keys = [k for k, _ in kernel.items]
    return ("rbf" in keys and len(set(keys)) == len(keys)
            and all(k in _PAPER_PARTS and type(p) is _PAPER_PARTS[k] for k, p in kernel.items))


class TimeParams(dict):
    """Hyperparameters of one time kernel: a dict ``name -> tensor`` (the kernel's
    ``param_names``) that also carries the kernel object as ``.kernel``.

    This is what :func:`tandem.models.mcgpds.hyperparams` returns for ``time_s`` and every
    view's ``time``, so the bound, the stochastic fit and the predictors evaluate
    ``params.kernel.gram(t, t, params, same=True)``.

    Parameters
    ----------
    kernel : TimeKernel
        The kernel whose hyperparameters these are.
    values : dict
        ``name -> tensor`` for every name in ``kernel.param_names``.
    """

    def __init__(self, kernel: TimeKernel, values: dict):
        super().__init__(values)
        if not isinstance(kernel, TimeKernel):
            raise TypeError(f"TimeParams: kernel must be a TimeKernel, got {type(kernel).__name__}")
        self.kernel = kernel

    def copy_with(self, values: dict) -> "TimeParams":
        """The same kernel with other values (e.g. detached copies).

        Parameters
        ----------
        values : dict
            ``name -> tensor`` for every name in ``kernel.param_names``.

        Returns
        -------
        TimeParams
        """
        return TimeParams(self.kernel, values)


_LEGACY_KEYS = {"var": "rbf.variance", "invw": "rbf.invwidth", "white": "white.variance", "bias": "bias.variance"}


def time_params_kernel(hp) -> tuple[TimeKernel, dict]:
    """``(kernel, params)`` of a time-kernel hyperparameter dict.

    A :class:`TimeParams` gives its own kernel. A plain dict is read as the paper's kernel:
    either with its parameter names (``"rbf.variance"``, ...) or with the legacy keys of the
    string API (``var``, ``invw``, ``white``, ``bias``; ``None`` values drop a part).

    Parameters
    ----------
    hp : dict or TimeParams
        The hyperparameters.

    Returns
    -------
    kernel : TimeKernel
        The kernel.
    params : dict
        Its hyperparameters under the kernel's parameter names.

    Raises
    ------
    TypeError
        ``hp`` is not a dict.
    ValueError
        A plain dict whose keys are neither form.
    """
    if isinstance(hp, TimeParams):
        return hp.kernel, hp
    if not isinstance(hp, dict):
        raise TypeError(f"time kernel hyperparameters: expected a dict (TimeParams), got {type(hp).__name__}")
    if set(hp) <= set(_LEGACY_KEYS) and "var" in hp:
        vals = {_LEGACY_KEYS[k]: v for k, v in hp.items() if v is not None}
    elif set(hp) <= set(PAPER_NAMES) and "rbf.variance" in hp:
        vals = {k: v for k, v in hp.items() if v is not None}
    else:
        raise ValueError(f"time kernel hyperparameters: a plain dict must hold the paper kernel's parameters "
                         f"({sorted(PAPER_NAMES)} or the legacy {sorted(_LEGACY_KEYS)}), got {sorted(hp)}; "
                         "pass a TimeParams for another kernel")
    names = {n.split(".")[0] for n in vals}
    return paper_time_kernel("white" in names, "bias" in names), vals


_SPEC_TYPES = {c.__name__: c for c in (RBF, Matern12, Matern32, Matern52, Periodic, White, Bias, RBFARD, LinearARD)}


def kernel_from_spec(spec) -> Kernel:
    """Rebuild a kernel from :meth:`Kernel.to_spec`.

    The spec is a plain dict; only the classes of this module are known, so a spec can never
    name other code.

    Parameters
    ----------
    spec : dict
        ``{"type": ..., "init": {...}}`` or ``{"type": "Sum", "parts": [[name, spec], ...]}``.

    Returns
    -------
    Kernel

    Raises
    ------
    ValueError
        A malformed spec or an unknown kernel type.
    """
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"kernel spec: expected a dict with a 'type', got {spec!r}")
    typ = spec["type"]
    if typ == "Sum":
        parts = spec.get("parts")
        if not isinstance(parts, (list, tuple)) or not parts:
            raise ValueError("kernel spec: a Sum needs a non-empty 'parts' list")
        pos, named = [], {}
        for item in parts:
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise ValueError(f"kernel spec: malformed Sum part {item!r}")
            key, sub = item
            if str(key) == str(len(pos)) and not named:
                pos.append(kernel_from_spec(sub))
            else:
                named[str(key)] = kernel_from_spec(sub)
        return Sum(*pos, **named)
    if typ not in _SPEC_TYPES:
        raise ValueError(f"kernel spec: unknown kernel type {typ!r}; expected one of {sorted(_SPEC_TYPES)} or 'Sum'")
    init = spec.get("init", {}) or {}
    if not isinstance(init, dict):
        raise ValueError(f"kernel spec: 'init' must be a dict, got {init!r}")
    return _SPEC_TYPES[typ](**init)
