"""The common interface of the kernel objects (:class:`Kernel`) and its parameter lookup.

Every kernel is a small stateless object; its hyperparameters live outside it, in a dict
``params`` (name -> float64 tensor), so that the same object serves the Pyro model, the
collapsed bound and the stochastic fit. The time kernels are in :mod:`tandem.models.time_kernels`,
the mapping kernels with their ψ-statistics in :mod:`tandem.models.mapping_kernels`, the JSON
specs in :mod:`tandem.models.kernel_specs`; :mod:`tandem.models.kernels` gathers them all.
"""
from __future__ import annotations

import math

import torch
from torch.distributions import constraints

__all__ = ["Kernel"]


def _get(params: dict, name: str, kernel) -> torch.Tensor:
    if not isinstance(params, dict):
        raise TypeError(f"params: expected a dict of tensors for {type(kernel).__name__}, got {type(params).__name__}")
    if name not in params:
        raise ValueError(f"params: {type(kernel).__name__} needs parameter {name!r}; got {sorted(params)}")
    return torch.as_tensor(params[name], dtype=torch.float64)  # device: cpu-ok (a tensor keeps its device)


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
        out = {n: torch.as_tensor(self.defaults[n], dtype=torch.float64) for n in self.param_names}  # device: cpu-ok
        out.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in self.given_init.items()})  # device: cpu-ok
        out.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in overrides.items()})  # device: cpu-ok
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
        from tandem.models.kernel_specs import kernel_from_spec  # the specs know every kernel class
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
        from tandem.models.time_kernels import Sum, TimeKernel  # subclasses of this module's Kernel
        if not isinstance(other, TimeKernel) or not isinstance(self, TimeKernel):
            return NotImplemented
        left = list(self.parts) if isinstance(self, Sum) else [self]
        right = list(other.parts) if isinstance(other, Sum) else [other]
        return Sum(*left, *right)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.given_init.items()))
        return f"{type(self).__name__}({args})"


# checkpoint and cache fingerprints (tandem.inference.checkpoints), saved files (tandem.inference.
# persistence) and pickles name a class by module and qualname: the classes keep the module
# that defined them before it was split, so those names (and keys) stay the same
for _cls in (Kernel,):
    _cls.__module__ = "tandem.models.kernels"
