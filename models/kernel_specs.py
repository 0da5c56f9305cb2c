"""Kernels from their JSON specs (:meth:`tandem.models.kernel_base.Kernel.to_spec` is the inverse).

Save/load describe kernels by these plain dicts; nothing is pickled. Re-exported by
:mod:`tandem.models.kernels`.
"""
from __future__ import annotations

from tandem.models.kernel_base import Kernel
from tandem.models.mapping_kernels import RBFARD, LinearARD
from tandem.models.time_kernels import RBF, Bias, Matern12, Matern32, Matern52, Periodic, Sum, White

__all__ = ["kernel_from_spec"]


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
