"""Input validation shared by every entry point.

Each helper raises ``ValueError`` (or ``FileNotFoundError``) with a message that names
the argument, says what was wrong and what was expected — early, before any model code
could fail with an opaque shape error. Helpers return float64 torch tensors (or numpy
arrays for the deterministic reference algorithms) so callers need no further casting.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from tandem.inference.numerics import DTYPE


def as_tensor(x, name: str, ndim: int | None = None, dtype: torch.dtype = DTYPE,
              finite: bool = True, min_rows: int | None = None,
              shape: Sequence[int | None] | None = None) -> torch.Tensor:
    """Convert ``x`` (array-like, any numeric dtype) to a ``dtype`` tensor and check it.

    ``shape`` entries that are ``None`` are free. Raises ``ValueError`` on wrong rank,
    wrong shape, non-numeric data, too few rows, or NaN/inf (when ``finite``).
    """
    if x is None:
        raise ValueError(f"{name}: expected an array, got None")
    if isinstance(x, torch.Tensor):
        t = x.detach() if not x.requires_grad else x
        if t.dtype == torch.bool or t.is_complex():
            raise ValueError(f"{name}: expected a real numeric array, got dtype {t.dtype}")
        t = t.to(dtype)
    else:
        a = np.asarray(x)
        if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
            raise ValueError(f"{name}: expected a real numeric array, got dtype {a.dtype}")
        if np.iscomplexobj(a):
            raise ValueError(f"{name}: expected a real numeric array, got complex values")
        # numpy data start on the CPU; callers move them to the device they work on
        t = torch.as_tensor(a.astype(np.float64 if dtype == torch.float64 else np.float32), device="cpu")
        t = t.to(dtype)
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {tuple(t.shape)}")
    if shape is not None:
        if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name}: expected shape {want}, got {tuple(t.shape)}")
    if min_rows is not None and (t.dim() == 0 or t.shape[0] < min_rows):
        raise ValueError(f"{name}: expected at least {min_rows} rows, got shape {tuple(t.shape)}")
    if finite:
        check_finite(t, name)
    return t


def as_array(x, name: str, ndim: int | None = None, finite: bool = True,
             min_rows: int | None = None) -> np.ndarray:
    """numpy float64 twin of :func:`as_tensor` for the deterministic reference code.

    Sparse scipy matrices pass through unchanged (after a finiteness check of their data).
    """
    import scipy.sparse as sp
    if sp.issparse(x):
        if ndim not in (None, 2):
            raise ValueError(f"{name}: a sparse matrix is 2-d, expected {ndim}-d")
        if finite and not np.isfinite(x.data).all():
            raise ValueError(f"{name}: contains NaN or inf entries")
        if min_rows is not None and x.shape[0] < min_rows:
            raise ValueError(f"{name}: expected at least {min_rows} rows, got shape {x.shape}")
        return x
    return as_tensor(x, name, ndim=ndim, finite=finite, min_rows=min_rows).detach().cpu().numpy()


def check_finite(x, name: str) -> None:
    """Raise ``ValueError`` if ``x`` has NaN or inf entries, saying how many and where."""
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x, dtype=np.float64), device="cpu")
    bad = ~torch.isfinite(t)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name}: contains {int(bad.sum())} NaN or inf entries "
                         f"(first at index {idx}); expected finite values")


def resolve_device(device, *inputs) -> torch.device:
    """The device a high-level fit runs on: ``device`` if given ("cpu", "cuda", "cuda:1", a
    :class:`torch.device`), else the device of the first tensor among ``inputs`` (lists and
    tuples are searched one level deep), else the CPU (numpy inputs).

    Raises ``ValueError`` naming ``device`` when CUDA is asked for but not available.
    """
    if device is not None:
        try:
            dev = torch.device(device)
        except (TypeError, RuntimeError):
            raise ValueError(f"device: expected 'cpu', 'cuda', 'cuda:<index>' or a torch.device, "
                             f"got {device!r}") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} was requested but CUDA is not available "
                             "(torch.cuda.is_available() is False)")
        return dev
    for x in inputs:
        for y in (x if isinstance(x, (list, tuple)) else [x]):
            if isinstance(y, torch.Tensor):
                return y.device
    return torch.device("cpu")


def check_same_rows(arrays: dict, what: str = "rows") -> int:
    """Check that all named arrays have the same first dimension; return it."""
    sizes = {k: int(v.shape[0]) for k, v in arrays.items()}
    if len(set(sizes.values())) > 1:
        desc = ", ".join(f"{k} has {n}" for k, n in sizes.items())
        raise ValueError(f"expected the same number of {what} in every input: {desc}")
    return next(iter(sizes.values()))


def check_int_range(value, name: str, low: int | None = None, high: int | None = None) -> int:
    """Check that ``value`` is an integer in ``[low, high]``; return it as ``int``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        rng = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        raise ValueError(f"{name}: expected an integer in {rng}, got {value}")
    return int(value)


def check_real_range(value, name: str, low: float | None = None, high: float | None = None,
                     low_open: bool = False, high_open: bool = False) -> float:
    """Check that a real scalar lies in the given (half-)open or closed interval."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a real number, got {value!r}") from None
    bad = (not np.isfinite(v)
           or (low is not None and (v <= low if low_open else v < low))
           or (high is not None and (v >= high if high_open else v > high)))
    if bad:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ValueError(f"{name}: expected a value in {lo}{low}, {high}{hi}, got {value!r}")
    return v


def require_file(path, what: str, hint: str = "") -> Path:
    """Return ``Path(path)`` if it exists, else raise ``FileNotFoundError`` naming it.

    ``hint`` says where to get the file (e.g. the data README)."""
    p = Path(path)
    if not p.exists():
        msg = f"{what}: expected the file {p}, which does not exist"
        if hint:
            msg += f". {hint}"
        raise FileNotFoundError(msg)
    return p
