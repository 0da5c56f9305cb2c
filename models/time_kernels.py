"""Time kernels over scalar time stamps (``r = |t − t'|``) and the hyperparameter dict that carries one.

* :class:`RBF`         ``σ² exp(−½ γ r²)``   (``variance`` σ², ``invwidth`` γ; the paper's kernel)
* :class:`Matern12`    ``σ² exp(−r/ℓ)``
* :class:`Matern32`    ``σ² (1 + √3 r/ℓ) exp(−√3 r/ℓ)``
* :class:`Matern52`    ``σ² (1 + √5 r/ℓ + 5r²/(3ℓ²)) exp(−√5 r/ℓ)``
* :class:`Periodic`    ``σ² exp(−2 sin²(π r/p)/ℓ²)``
* :class:`White`       ``σ_w² δ(t, t')`` (only when ``same``)
* :class:`Bias`        ``σ_b²``
* :class:`Sum`         ``Σ_j k_j`` with parameter names ``"<part>.<name>"``;
  :func:`paper_time_kernel` is the paper's RBF + white + bias.

:class:`TimeParams` is a hyperparameter dict that carries its kernel; :func:`time_params_kernel`
reads one (or a plain dict of the paper's kernel). Re-exported by :mod:`tandem.models.kernels`.
"""
from __future__ import annotations

import math

import torch

from tandem.models.kernel_base import Kernel, _get

__all__ = ["TimeKernel", "RBF", "Matern12", "Matern32", "Matern52", "Periodic", "White", "Bias", "Sum",
           "paper_time_kernel", "as_time_kernel", "TimeParams", "time_params_kernel", "is_paper_kernel",
           "PAPER_NAMES"]


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
        t1 = torch.as_tensor(t1, dtype=torch.float64)  # device: cpu-ok (a tensor keeps its device)
        t2 = torch.as_tensor(t2, dtype=torch.float64)  # device: cpu-ok (a tensor keeps its device)
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
        t = torch.as_tensor(t, dtype=torch.float64)  # device: cpu-ok (a tensor keeps its device)
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
            K = K + _get(params, "variance", self) * torch.eye(d.shape[-1], dtype=d.dtype, device=d.device)
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
        t = torch.as_tensor(t, dtype=torch.float64)  # device: cpu-ok (a tensor keeps its device)
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


# checkpoint and cache fingerprints (tandem.inference.checkpoints), saved files (tandem.inference.
# persistence) and pickles name a class by module and qualname: the classes keep the module
# that defined them before it was split, so those names (and keys) stay the same
for _cls in (TimeKernel, RBF, Matern12, Matern32, Matern52, Periodic, White, Bias, Sum, TimeParams):
    _cls.__module__ = "tandem.models.kernels"
