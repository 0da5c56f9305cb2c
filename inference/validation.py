"""Input validation shared by every entry point.

Each helper raises ``ValueError`` (or ``FileNotFoundError``) with a message that names
the argument, says what was wrong and what was expected — early, before any model code
could fail with an opaque shape error. Helpers return float64 torch tensors (or numpy
arrays for the deterministic reference algorithms) so callers need no further casting.
"""
from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from tandem.inference.numerics import DTYPE


class NotFittedError(ValueError, AttributeError):
    """A method that needs a fitted estimator was called before ``fit``.

    A ``ValueError`` and an ``AttributeError``, like scikit-learn's ``NotFittedError``. Exported as
    ``tandem.NotFittedError``.
    """


#: The seeds every entry point accepts: integers in [0, SEED_MAX] (numpy's legacy global RNG, which
#: ``pyro.set_rng_seed`` seeds, takes no more).
SEED_MAX = 2 ** 32 - 1

# numpy dtype kinds read as real numbers: signed/unsigned integers and floats. Bool ("b"),
# complex ("c"), datetime ("M"), timedelta ("m" — numpy files it under np.number), strings,
# bytes, void and object are not.
_REAL_KINDS = "iuf"


def _refuse_masked(x, name: str):
    """``x`` unchanged, or its data if ``x`` is a numpy masked array with no entry masked.

    ``np.asarray`` drops a mask silently, so a masked entry (a value the caller said not to use)
    would be read as data; such arrays are refused. An array whose mask masks nothing (``nomask`` or
    all False, e.g. ``np.ma.masked_invalid`` of clean data) loses nothing and is read as its data.
    """
    if isinstance(x, np.ma.MaskedArray):
        masked = np.ma.getmaskarray(x)
        if masked.any():
            idx = tuple(int(i) for i in np.argwhere(masked)[0])
            raise ValueError(f"{name}: got a numpy masked array with {int(masked.sum())} masked entries (first at "
                             f"index {idx}); masks are not read (np.asarray would drop it). Pass plain data: "
                             "x.filled(np.nan) where the argument takes NaN as missing, or drop the masked rows")
        return np.ma.getdata(x)
    return x


def _tensor_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU numpy copy/view of tensor ``t``; float dtypes numpy lacks (bfloat16, float8) are widened to
    float64 first (exactly: every such value is a float64)."""
    t = t.detach()
    if t.is_floating_point() and t.dtype not in (torch.float16, torch.float32, torch.float64):
        t = t.to(torch.float64)
    return t.cpu().numpy()


def _read_array(x, name: str) -> np.ndarray | torch.Tensor:
    """The one reader of array-likes: a torch tensor (detached later if asked), a numpy array,
    a scipy.sparse matrix or a sparse torch tensor (both densified), a numpy masked array with no
    entry masked (its data), a pandas frame/series or nested lists/tuples (via ``np.asarray``).
    Refuses meta-device tensors (they hold no values), masked arrays with masked entries, bool,
    complex, datetime/timedelta, string, object and ragged inputs, each with a ``ValueError``
    naming ``name``."""
    import scipy.sparse as sp
    if sp.issparse(x):
        x = x.toarray()
    x = _refuse_masked(x, name)
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise ValueError(f"{name}: got a tensor on the meta device, which holds no values; expected data "
                             "(a numpy array or a tensor on the CPU or a GPU)")
        if x.dtype == torch.bool or x.is_complex():
            raise ValueError(f"{name}: expected a real numeric array, got dtype {x.dtype}"
                             + (" (cast 0/1 flags to float explicitly)" if x.dtype == torch.bool else ""))
        if x.layout != torch.strided:   # sparse layouts: densified, as scipy.sparse matrices are
            x = x.to_dense()
        return x
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:   # ragged nested lists, odd containers
        raise ValueError(f"{name}: expected a rectangular numeric array, got {type(x).__name__} ({e})") from None
    if a.dtype == bool:
        raise ValueError(f"{name}: expected a real numeric array, got dtype bool (cast 0/1 flags to float explicitly)")
    if np.iscomplexobj(a):
        raise ValueError(f"{name}: expected a real numeric array, got complex values")
    if a.dtype.kind not in _REAL_KINDS:
        raise ValueError(f"{name}: expected a real numeric array, got dtype {a.dtype}")
    return a


def as_tensor(x, name: str, ndim: int | None = None, dtype: torch.dtype = DTYPE,
              finite: bool = True, min_rows: int | None = None,
              shape: Sequence[int | None] | None = None, detach: bool = False) -> torch.Tensor:
    """Convert ``x`` (array-like, any real numeric dtype) to a ``dtype`` tensor and check it.

    Accepted: numpy arrays of any real numeric dtype and memory layout, torch tensors of any real
    dtype (they stay on their device; sparse layouts are densified), nested lists/tuples,
    scipy.sparse matrices (densified), pandas frames, numpy masked arrays with no entry masked.
    Refused with a ``ValueError`` naming ``name``: ``None``, bool, complex, datetime/timedelta,
    string or object dtype, ragged lists, masked arrays with masked entries (the mask would be
    dropped), tensors on the meta device, the wrong rank or shape, a zero-length axis after the
    first (a (N, 0) array has no features), fewer than ``min_rows`` rows, and NaN/inf (when
    ``finite``). ``ndim`` and ``min_rows`` must be non-negative integers (not bools).

    Parameters
    ----------
    x : array_like, torch.Tensor or scipy.sparse matrix
        The input.
    name : str
        The argument's name, used in every message.
    ndim : int, optional
        The required number of dimensions; ``None`` → any.
    dtype : torch.dtype, default torch.float64
        The dtype of the result (``DTYPE``).
    finite : bool, default True
        Refuse NaN/inf entries (:func:`check_finite`).
    min_rows : int, optional
        The least number of rows (length of the first axis).
    shape : sequence of int or None, optional
        The required shape; ``None`` entries are free.
    detach : bool, default False
        Read a tensor with ``requires_grad`` as its values (the estimators' data inputs: data are
        never a graph); by default a graph is kept (objectives differentiate through this).

    Returns
    -------
    torch.Tensor
        ``x`` as a ``dtype`` tensor of the checked shape: on the tensor's device for a tensor input,
        on the CPU for everything else (callers move it to the device they work on).

    Raises
    ------
    ValueError
        Naming ``name``, for any of the refused inputs above.
    """
    if ndim is not None:
        check_int_range(ndim, "ndim", low=0)
    if min_rows is not None:
        check_int_range(min_rows, "min_rows", low=0)
    if x is None:
        raise ValueError(f"{name}: expected an array, got None")
    x = _read_array(x, name)
    if isinstance(x, torch.Tensor):
        t = x.detach() if (detach or not x.requires_grad) else x
        t = t.to(dtype)
    else:
        # numpy data start on the CPU; callers move them to the device they work on
        t = torch.as_tensor(x.astype(np.float64 if dtype == torch.float64 else np.float32), device="cpu")
        t = t.to(dtype)
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {tuple(t.shape)}")
    if shape is not None:
        if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name}: expected shape {want}, got {tuple(t.shape)}")
    if t.dim() >= 2 and 0 in t.shape[1:]:
        raise ValueError(f"{name}: has a zero-length axis (shape {tuple(t.shape)}); expected at least one "
                         "column (feature)")
    if min_rows is not None and (t.dim() == 0 or t.shape[0] < min_rows):
        raise ValueError(f"{name}: expected at least {min_rows} rows, got shape {tuple(t.shape)}")
    if finite:
        check_finite(t, name)
    return t


def as_index_array(x, name: str, shape: Sequence[int | None] | None = None) -> np.ndarray:
    """The one validator of integer index arrays (e.g. correspondence pairs): an int64 numpy array.

    Integer dtypes, and real values that are whole numbers, are accepted (lists, tensors of any
    real dtype, any layout, masked arrays with no entry masked); NaN, inf, fractional values,
    values outside the int64 range [−2⁶³, 2⁶³) (they would wrap round in the cast), bool, complex,
    datetime, string and object entries, masked entries and meta tensors are refused. Ranges
    within int64 are the caller's to check (they depend on the data).

    Parameters
    ----------
    x : array_like or torch.Tensor
        The indices.
    name : str
        The argument's name, used in every message.
    shape : sequence of int or None, optional
        The required shape, as in :func:`as_tensor` (``None`` entries are free).

    Returns
    -------
    numpy.ndarray
        ``x`` as an int64 array of the same shape.

    Raises
    ------
    ValueError
        Naming ``name``: ``None``, a refused dtype or entry (the first non-integer or out-of-range entry
        and its index are given), a meta tensor, the wrong shape.
    """
    if x is None:
        raise ValueError(f"{name}: expected an integer array, got None")
    a = _read_array(x, name)
    a = _tensor_numpy(a) if isinstance(a, torch.Tensor) else a
    if shape is not None and (a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape))):
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name}: expected an integer array of shape {want}, got shape {a.shape}")
    if np.issubdtype(a.dtype, np.integer):
        # only uint64 holds values int64 does not (≥ 2⁶³); they would wrap to negatives
        bad = a > np.iinfo(np.int64).max if a.dtype == np.uint64 else np.zeros(a.shape, bool)
        why = "outside the int64 range"
    else:
        f = a.astype(np.float64)
        fin = np.isfinite(f)
        bad = ~fin | (f != np.round(f))
        why = "not an integer"
        if not bad.any():
            # whole floats beyond int64 (1e20, 2.0**63) would be cast to -2**63
            bad = (f >= 2.0 ** 63) | (f < -2.0 ** 63)
            why = "outside the int64 range"
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: expected integer indices in the int64 range, got {a[idx]!r} at index {idx} "
                         f"({why})")
    return a.astype(np.int64)


def _is_missing(v) -> bool:
    """Whether label ``v`` is a missing-value marker: ``None``, a NaN of any float type (Python, numpy,
    ``Decimal``), NaT (numpy's or pandas') or pandas' ``NA`` — checked without importing pandas."""
    if v is None or type(v).__name__ in ("NAType", "NaTType"):
        return True
    if isinstance(v, (np.datetime64, np.timedelta64)):
        return bool(np.isnat(v))
    try:
        return bool(v != v)      # NaN is the one value unequal to itself
    except (TypeError, ValueError):   # arrays and other values without a plain truth value
        return False


def _label_list(y: list | tuple, column: bool = False) -> np.ndarray:
    """A Python list of labels as a 1-d object array, label by label: ``np.asarray`` would coerce
    it to one dtype and merge labels (``[1, "1"]`` to equal strings, ``[2**53, 2**53 + 1, 0.5]`` to
    floats, ``["a", "a\\0"]`` to one string: numpy strips trailing NULs). 0-d arrays/tensors are
    read as scalars; with ``column``, one-element rows (an (n, 1) column) as their elements; other
    nested lists go to ``np.asarray`` (the caller refuses their shape)."""
    def scalar(v):   # a 0-d tensor hashes by identity: read its value (0-d arrays: their numpy scalar)
        return v.item() if isinstance(v, torch.Tensor) and v.dim() == 0 else (
            v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v)

    rows = [scalar(v) for v in y]
    seq = (list, tuple, np.ndarray, torch.Tensor)
    if column and rows and all(isinstance(v, seq) and np.ndim(v) == 1 and len(v) == 1 for v in rows):
        rows = [scalar(v[0]) for v in rows]
    if any(isinstance(v, seq) for v in rows):
        return np.asarray(rows)
    a = np.empty(len(rows), dtype=object)
    a[:] = rows
    return a


def label_codes(y, n: int | None, name: str, column: bool = False) -> np.ndarray:
    """The one validator of per-row labels (sequence ids, class labels): (n,) int64 codes 0..L−1.

    Codes are given in order of first appearance. ``y`` may hold any hashable labels (ints, floats,
    strings; a list, numpy array, masked array with no entry masked, or tensor of any real dtype);
    two rows share a label iff their labels are equal (a fractional label is its own label, never
    truncated). A Python list is read label by label, never coerced to one dtype (``[1, "1"]``
    are two labels, large integers are not rounded through float64, ``"a"`` and ``"a\\0"`` stay
    two strings); labels of different types that Python finds equal (``1``, ``1.0``, ``True``)
    are one label.

    Parameters
    ----------
    y : array_like or torch.Tensor
        (n,) labels.
    n : int or None
        The number of rows the labels must cover (a non-negative integer, not a bool); ``None`` → any
        length.
    name : str
        The argument's name, used in every message.
    column : bool, default False
        Also accept an (n, 1) column (nested one-element lists, a 2-d array, frame or tensor), read
        as its n labels (the metrics take either form).

    Returns
    -------
    numpy.ndarray
        (n,) int64 codes in 0..L−1, L the number of distinct labels.

    Raises
    ------
    ValueError
        Naming ``name``: missing-value labels (``None``, NaN, NaT, ``pandas.NA``), masked entries, a
        scipy.sparse matrix, the wrong length or rank, meta tensors; naming ``n``, a bad ``n``.
    TypeError
        Naming ``name`` and the row, for an unhashable label.
    """
    import scipy.sparse as sp
    if n is not None:
        check_int_range(n, "n", low=0)
    want = "labels (one per row)" if n is None else f"{n} labels (one per row)"
    if sp.issparse(y):
        raise ValueError(f"{name}: expected {want} as a 1-d array, got a scipy.sparse matrix of shape {y.shape}")
    y = _refuse_masked(y, name)
    if isinstance(y, torch.Tensor):
        if y.device.type == "meta":
            raise ValueError(f"{name}: got a tensor on the meta device, which holds no values; expected labels")
        y = _tensor_numpy(y.to_dense() if y.layout != torch.strided else y)
    if column:
        want += " as a label vector (n,) or an (n, 1) column"
    try:
        a = _label_list(y, column) if isinstance(y, (list, tuple)) else np.asarray(y)
    except Exception as e:  # ragged or odd containers
        raise ValueError(f"{name}: expected {want}, got {type(y).__name__} ({e})") from None
    if column and a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        raise ValueError(f"{name}: expected {want}, got shape {a.shape}")
    if a.dtype.kind in "fcmM":
        miss = np.isnat(a) if a.dtype.kind in "mM" else np.isnan(a)
        if miss.any():
            raise ValueError(f"{name}: contains {'NaT' if a.dtype.kind in 'mM' else 'NaN'} labels (missing values; "
                             f"first at index {int(np.flatnonzero(miss)[0])}); expected one hashable label per row")
    elif a.dtype == object:
        for i, v in enumerate(a):
            if _is_missing(v):
                what = "NaN" if isinstance(v, float) and v != v else repr(v)   # nan's repr is lower-case
                raise ValueError(f"{name}: label {i} is {what}, a missing value; expected one hashable label per row")
            try:
                hash(v)
            except TypeError:
                raise TypeError(f"{name}: label {i} ({type(v).__name__}) is not hashable") from None
    codes = {}
    out = np.empty(a.shape[0], dtype=np.int64)
    for i, v in enumerate(a.tolist()):
        out[i] = codes.setdefault(v, len(codes))
    return out


def as_array(x, name: str, ndim: int | None = None, finite: bool = True,
             min_rows: int | None = None, sparse: bool = False) -> np.ndarray:
    """numpy float64 twin of :func:`as_tensor` for the deterministic reference code.

    A scipy.sparse input (any format, matrix or array class) is checked like a dense one
    (dtype, rank, zero-length axis, finiteness of its stored entries, rows) and then densified
    to a plain ``numpy.ndarray`` — never a ``numpy.matrix``, whose ``a[:, 0] - b[:, 0]``
    broadcasts to a square — unless the caller works on sparse data (``sparse=True``: a
    float64 CSR matrix is returned).

    Parameters
    ----------
    x : array_like, torch.Tensor or scipy.sparse matrix
        The input.
    name : str
        The argument's name, used in every message.
    ndim : int, optional
        The required number of dimensions (a sparse matrix is 2-d); ``None`` → any.
    finite : bool, default True
        Refuse NaN/inf entries.
    min_rows : int, optional
        The least number of rows.
    sparse : bool, default False
        Keep a sparse input sparse (as a float64 CSR matrix) instead of densifying it.

    Returns
    -------
    numpy.ndarray or scipy.sparse.csr_matrix
        A float64 array (a float64 CSR matrix for sparse input when ``sparse``).

    Raises
    ------
    ValueError
        Naming ``name``, as :func:`as_tensor`; for sparse input: a rank other than 2, a non-real
        dtype, a zero-length axis, NaN/inf data, fewer than ``min_rows`` rows.
    """
    import scipy.sparse as sp
    if sp.issparse(x):
        if ndim not in (None, 2):
            raise ValueError(f"{name}: a sparse matrix is 2-d, expected {ndim}-d")
        if x.dtype == bool or np.issubdtype(x.dtype, np.complexfloating) or not np.issubdtype(x.dtype, np.number):
            raise ValueError(f"{name}: expected a real numeric sparse matrix, got dtype {x.dtype}")
        if 0 in x.shape[1:]:
            raise ValueError(f"{name}: has a zero-length axis (shape {x.shape}); expected at least one column")
        x = sp.csr_matrix(x, dtype=np.float64)
        if finite and not np.isfinite(x.data).all():
            raise ValueError(f"{name}: contains NaN or inf entries")
        if min_rows is not None and x.shape[0] < min_rows:
            raise ValueError(f"{name}: expected at least {min_rows} rows, got shape {x.shape}")
        return x if sparse else x.toarray()
    return as_tensor(x, name, ndim=ndim, finite=finite, min_rows=min_rows).detach().cpu().numpy()


def like_input(out, like):
    """An output in the container type of an input: numpy in → numpy out, a tensor in → a tensor.

    Parameters
    ----------
    out : torch.Tensor or numpy.ndarray
        The result.
    like : object
        The input whose type the result follows (the estimator contract of the usage guide).

    Returns
    -------
    torch.Tensor or numpy.ndarray
        ``out`` as a detached tensor on ``like``'s device when ``like`` is a tensor, else as a
        plain ``numpy.ndarray`` (a tensor moved to the CPU; a numpy subclass such as
        ``numpy.matrix`` made a plain array).
    """
    if isinstance(like, torch.Tensor):
        if isinstance(out, torch.Tensor):
            return out.detach().to(like.device)
        return torch.as_tensor(np.asarray(out), device=like.device)
    if isinstance(out, torch.Tensor):
        return out.detach().cpu().numpy()
    return np.asarray(out)


def check_finite(x, name: str) -> None:
    """Raise ``ValueError`` if ``x`` has NaN or inf entries, saying how many and where.

    Parameters
    ----------
    x : array_like or torch.Tensor
        The values to check.
    name : str
        The argument's name, used in the message.

    Raises
    ------
    ValueError
        Naming ``name``, with the number of non-finite entries and the index of the first (and as
        :func:`as_tensor` for a non-numeric input).
    """
    if not isinstance(x, torch.Tensor):
        x = _read_array(x, name)
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x.astype(np.float64), device="cpu")
    bad = ~torch.isfinite(t)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name}: contains {int(bad.sum())} NaN or inf entries "
                         f"(first at index {idx}); expected finite values")


def resolve_device(device, *inputs) -> torch.device:
    """The device a high-level fit runs on.

    ``device`` if given, else the device of the first tensor among ``inputs`` (lists and tuples
    are searched one level deep), else the CPU (numpy inputs).

    Parameters
    ----------
    device : str or torch.device or None
        "cpu", "cuda", "cuda:1" or a :class:`torch.device`; ``None`` → from the inputs.
    *inputs : object
        The data inputs of the fit (tensors, arrays, lists/tuples of them).

    Returns
    -------
    torch.device
        The device.

    Raises
    ------
    ValueError
        Naming ``device``, for a value that is not a device, a device type other than cpu and
        cuda (``"meta"`` holds no data; ``"mps"``, ``"xpu"``, ... are not supported), CUDA asked
        for but not available, or a CUDA index beyond the devices present.
    """
    if device is not None:
        try:
            dev = torch.device(device)
        except (TypeError, RuntimeError):
            raise ValueError(f"device: expected 'cpu', 'cuda', 'cuda:<index>' or a torch.device, "
                             f"got {device!r}") from None
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"device: expected a cpu or cuda device, got {device!r} (type {dev.type!r}: "
                             "a meta device holds no data, and other backends are not supported)")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} was requested but CUDA is not available "
                             "(torch.cuda.is_available() is False)")
        if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device: {device!r} asks for CUDA device {dev.index}, but "
                             f"{torch.cuda.device_count()} are present")
        return dev
    for x in inputs:
        for y in (x if isinstance(x, (list, tuple)) else [x]):
            # a meta tensor holds no data: it is not a place to run, and the array reader
            # refuses it by name
            if isinstance(y, torch.Tensor) and y.device.type != "meta":
                return y.device
    return torch.device("cpu")


def check_same_rows(arrays: dict, what: str = "rows") -> int:
    """Check that all named arrays have the same first dimension; return it.

    Parameters
    ----------
    arrays : dict
        ``name -> array`` (anything with a ``shape``), at least one entry.
    what : str, default "rows"
        What the first axis counts, used in the message.

    Returns
    -------
    int
        The common number of rows.

    Raises
    ------
    ValueError
        Listing every array's number of rows, if they differ.
    """
    sizes = {k: int(v.shape[0]) for k, v in arrays.items()}
    if len(set(sizes.values())) > 1:
        desc = ", ".join(f"{k} has {n}" for k, n in sizes.items())
        raise ValueError(f"expected the same number of {what} in every input: {desc}")
    return next(iter(sizes.values()))


def check_int_range(value, name: str, low: int | None = None, high: int | None = None) -> int:
    """Check that ``value`` is an integer in ``[low, high]``; return it as ``int``.

    Parameters
    ----------
    value : int
        The value (Python or numpy integer; bools are refused).
    name : str
        The argument's name, used in the message.
    low : int, optional
        Lower bound (inclusive); ``None`` → none.
    high : int, optional
        Upper bound (inclusive); ``None`` → none.

    Returns
    -------
    int
        ``value``.

    Raises
    ------
    ValueError
        Naming ``name``, for a non-integer or a value outside the range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        rng = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        raise ValueError(f"{name}: expected an integer in {rng}, got {value}")
    return int(value)


def check_seed(seed, name: str = "seed") -> int:
    """The one validator of random seeds: an integer in [0, :data:`SEED_MAX`]; return it as ``int``.

    Python and numpy integers are accepted (``np.int64(5)`` — which ``random.seed``, and so
    ``pyro.set_rng_seed``, would refuse — becomes ``5``); bools, floats and values outside the range are
    refused. :class:`tandem.inference.params.Seed` declares the same range.

    Parameters
    ----------
    seed : int
        The seed.
    name : str, default "seed"
        The argument's name, used in the message.

    Returns
    -------
    int
        ``seed`` as a Python ``int``.

    Raises
    ------
    ValueError
        Naming ``name``, for a non-integer or a value outside [0, 2³² − 1].
    """
    return check_int_range(seed, name, low=0, high=SEED_MAX)


def check_real_range(value, name: str, low: float | None = None, high: float | None = None,
                     low_open: bool = False, high_open: bool = False) -> float:
    """Check that a real scalar lies in the given (half-)open or closed interval; return it as ``float``.

    Parameters
    ----------
    value : float
        A real scalar: a Python or numpy int/float, or a 0-d real numpy array or tensor. Strings,
        bools, arrays/tensors with one or more axes (even of one element), NaN and ±inf are refused.
    name : str
        The argument's name, used in the message.
    low : float, optional
        Lower bound; ``None`` → none.
    high : float, optional
        Upper bound; ``None`` → none.
    low_open : bool, default False
        Exclude ``low`` itself.
    high_open : bool, default False
        Exclude ``high`` itself.

    Returns
    -------
    float
        ``value``.

    Raises
    ------
    ValueError
        Naming ``name``, for a non-real, non-finite or out-of-range value.
    """
    # a 0-d array or tensor is a scalar (its bool/complex items are refused below); one with axes is not
    v = value.item() if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 0 else value
    # numbers.Real covers Python and numpy ints and floats; bools are ints to Python but not numbers here,
    # and strings ("0.5") are not parsed
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name}: expected a real number, got {value!r} of type {type(value).__name__}")
    v = float(v)
    bad = (not np.isfinite(v)
           or (low is not None and (v <= low if low_open else v < low))
           or (high is not None and (v >= high if high_open else v > high)))
    if bad:
        lo = "(" if low_open or low is None else "["
        hi = ")" if high_open or high is None else "]"
        raise ValueError(f"{name}: expected a value in {lo}{'-inf' if low is None else low}, "
                         f"{'inf' if high is None else high}{hi}, got {value!r}")
    return v


def require_file(path, what: str, hint: str = "") -> Path:
    """Return ``Path(path)`` if it is a readable file.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    what : str
        What the file is (the argument's name), used in the messages.
    hint : str, default ""
        Where to get the file (e.g. the data README), appended to the "does not exist" message.

    Returns
    -------
    pathlib.Path
        ``Path(path)``.

    Raises
    ------
    FileNotFoundError
        Naming the file, when it does not exist.
    ValueError
        Naming the file, when it is a folder or cannot be read.
    """
    p = Path(path)
    if not p.exists():
        msg = f"{what}: expected the file {p}, which does not exist"
        if hint:
            msg += f". {hint}"
        raise FileNotFoundError(msg)
    if p.is_dir():
        raise ValueError(f"{what}: expected the file {p}, which is a folder")
    if not os.access(p, os.R_OK):
        raise ValueError(f"{what}: the file {p} cannot be read (permission denied)")
    return p


def sequence_labels(ids, N: int, times=None, name: str = "sequence_ids") -> np.ndarray:
    """The one validator of per-frame sequence labels: (N,) int64 codes 0..S−1.

    Two frames are in one sequence iff their labels are equal — a fractional label is its own
    sequence, never truncated to an integer. Codes are given in order of first appearance
    (:func:`label_codes`). NaN or ``None`` labels are refused.

    Parameters
    ----------
    ids : array_like or torch.Tensor
        (N,) hashable labels (ints, floats, strings, a numpy/torch array).
    N : int
        The number of frames.
    times : array_like or torch.Tensor, optional
        (N,) time stamps: frames of one sequence must then be given in increasing time order
        (:func:`check_time_order`).
    name : str, default "sequence_ids"
        The argument's name, used in the messages.

    Returns
    -------
    numpy.ndarray
        (N,) int64 sequence codes.

    Raises
    ------
    ValueError
        As :func:`label_codes` and :func:`check_time_order`.
    TypeError
        For an unhashable label (:func:`label_codes`).
    """
    out = label_codes(ids, N, name)
    if times is not None:
        check_time_order(times, out, name)
    return out


def check_time_order(times, labels=None, name: str = "sequence_ids", times_name: str = "times") -> None:
    """Refuse frames given out of time order within a sequence.

    Frames out of order would be read as a different trajectory by the time kernels (the models
    do not reorder), so every entry point that takes time stamps (fits, predictions, data
    builders) refuses them.

    Parameters
    ----------
    times : array_like or torch.Tensor
        (N,) time stamps (any shape with N entries; it is flattened).
    labels : array_like, optional
        (N,) sequence codes; ``None`` → one sequence.
    name : str, default "sequence_ids"
        The name of the labels' argument, used in the message.
    times_name : str, default "times"
        The name of the time stamps' argument, named by the message.

    Raises
    ------
    ValueError
        Naming ``times_name`` and the first pair of frames out of order, unless within every
        sequence the frames are given in non-decreasing time order; naming both arguments when
        ``labels`` and ``times`` have different numbers of entries (and as :func:`as_tensor` for
        ``times``).
    """
    t = as_tensor(times, times_name, detach=True).cpu().numpy().reshape(-1)
    if labels is None:
        lab = np.zeros(t.shape[0], dtype=np.int64)
    else:
        lab = _refuse_masked(labels, name)
        lab = (_tensor_numpy(lab) if isinstance(lab, torch.Tensor) else np.asarray(lab)).reshape(-1)
        if lab.shape[0] != t.shape[0]:
            # a frame without a label (or a label without a frame) would go unchecked
            raise ValueError(f"{times_name} has {t.shape[0]} time stamps but {name} has {lab.shape[0]} labels; "
                             "expected one label per frame")
    order = np.argsort(lab, kind="stable")
    ls, ts = lab[order], t[order]
    bad = np.flatnonzero((ls[1:] == ls[:-1]) & (ts[1:] < ts[:-1]))
    if bad.size:
        i, j = int(order[bad[0]]), int(order[bad[0] + 1])
        where = "" if labels is None else f" of one sequence ({name})"
        raise ValueError(f"{times_name}: frames{where} must be given in increasing time order; frame {j} "
                         f"(t = {ts[bad[0] + 1]:g}) comes after frame {i} (t = {ts[bad[0]]:g}). Sort the rows "
                         "of every input by time within each sequence first")


def check_weights(S, name: str, n: int) -> np.ndarray:
    """The one validator of a neighbourhood weight matrix: (n, n), finite, non-negative and symmetric.

    A scipy.sparse matrix is densified (the solvers' Laplacian L = D − S is dense). Symmetry is
    checked to max |S − Sᵀ| ≤ 1e-10 · max(1, max |S|).

    Parameters
    ----------
    S : array_like or scipy.sparse matrix
        (n, n) weights.
    name : str
        The argument's name, used in the messages.
    n : int
        The number of points, at least 1 (an integer, not a bool).

    Returns
    -------
    numpy.ndarray
        (n, n) float64 weights.

    Raises
    ------
    ValueError
        Naming ``name``: the wrong shape, NaN/inf, negative or asymmetric weights; naming ``n``: a
        non-integer or n < 1 (weights between no points).
    """
    import scipy.sparse as sp
    check_int_range(n, "n (the number of points)", low=1)
    if sp.issparse(S):
        if S.shape != (n, n):
            raise ValueError(f"{name}: expected shape ({n}, {n}), got {S.shape}")
        S = S.toarray()
    S = as_array(S, name, ndim=2)
    if S.shape != (n, n):
        raise ValueError(f"{name}: expected shape ({n}, {n}), got {S.shape}")
    if (S < 0).any():
        raise ValueError(f"{name}: neighbourhood weights must be non-negative, got min {S.min():g}")
    asym = float(np.abs(S - S.T).max()) if n else 0.0
    if asym > 1e-10 * max(1.0, float(np.abs(S).max())):
        raise ValueError(f"{name}: neighbourhood weights must be symmetric (S = Sᵀ), got max |S − Sᵀ| = {asym:g}")
    return S
