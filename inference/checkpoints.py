"""Fingerprints and checkpoint files for runs that resume where they stopped.

A resumable run (:func:`tandem.inference.fit`, the twin-GP stage folders, a cache of
fitted models) must only ever resume *its own* state. This module gives every such run
one way to say what "its own" means and to refuse anything else:

* :func:`fingerprint` turns named values — data tensors/arrays, settings, optimiser and
  loss objects, functions — into a flat ``{path: plain value}`` dict. Arrays and tensors
  are recorded by dtype, shape **and** a SHA-256 of their bytes, so a file written on
  other data of the same shape is recognised (a masked array with its mask; a pandas
  DataFrame/Series/Index by a hash of its values, dtypes, index and labels); classes by their
  qualified name; functions by their qualified name and a digest of their code, defaults and
  closure contents (see :func:`describe_callable` for what it cannot see); dataclasses field by
  field; dicts/lists element by element (paths such as ``args[0].views[1]`` or ``optim.lr``).
* :func:`fingerprint_diff` lists the paths whose values differ, for an error message
  that names what changed.
* :func:`content_hash` is one short hash of any such values (a cache key).
* :func:`save_atomic` writes in the safe format of :mod:`tandem.inference.persistence`
  (``tempfile.mkstemp`` + fsync + ``os.replace``) so that a kill mid-write leaves the previous file intact.
* :func:`load_checkpoint` reads a file written by :func:`save_atomic` and checks its
  ``kind`` tag; an empty, truncated or foreign file raises :class:`CheckpointError`
  naming the file and telling the user to delete it (instead of ``EOFError`` or an
  unpickling error from deep inside torch).
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from tandem.inference.persistence import PersistenceError, dump, load

__all__ = ["CheckpointError", "fingerprint", "fingerprint_diff", "check_fingerprint", "content_hash",
           "describe_callable", "save_atomic", "load_checkpoint"]

#: containers are described entry by entry down to this depth; a container below it is one entry, a
#: SHA-256 of its whole description (hashed just as fully, so nothing deeper is lost: only the paths stop)
_MAX_DEPTH = 24


class CheckpointError(ValueError):
    """A checkpoint file cannot be used: unreadable, foreign, or written by another run."""


def _qualname(obj) -> str:
    mod = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{mod}.{name}" if mod else name


def describe_callable(fn) -> str:
    """A stable name for a model, guide, loss or optimiser constructor.

    Functions: ``module.qualname`` plus a digest ``code:<sha>`` of what the function runs and
    holds: its code object (bytecode, constants, nested functions, the names it uses; not its
    file or line number), its default arguments and the contents of its closure cells (by
    :func:`fingerprint`, so a closure over data is told apart by the data's contents). So two
    lambdas, or two functions a factory made around different data (``make(Y)`` and
    ``make(Y + 5)``), get different names. Not covered: the *global* variables a function reads
    (a module-level constant edited between two runs), objects in a closure that
    :func:`fingerprint` records by type only (of a kind it does not know), and the state of a
    bound method's object. Bytecode differs between Python versions, so a function's name from
    another Python version differs too.

    Classes: ``module.qualname``. A wrapper that sets ``__wrapped__`` (``functools.wraps``) is
    named after what it wraps; a ``functools.partial`` after its function plus a digest of its
    bound arguments. A bound method: the class of its object, the method name and the function's
    digest. Any other callable object (e.g. an ``AutoNormal`` instance): its class, plus the name
    of the ``model`` it wraps when it has one; other settings held inside callable objects are
    not part of the name.

    Parameters
    ----------
    fn : callable
        The callable.

    Returns
    -------
    str
        Its name.
    """
    try:
        return _describe(fn, set())
    except RecursionError:   # a closure holding a value nested beyond the recursion limit
        raise ValueError(f"describe_callable: {_qualname(fn)}: holds a value nested too deeply to describe "
                         f"(beyond Python's recursion limit, {sys.getrecursionlimit()})") from None


def _describe(fn, stack: set) -> str:
    """:func:`describe_callable`; ``stack`` holds the ids of the objects being described above
    this one (a closure that refers to itself would otherwise recurse for ever)."""
    seen = 0
    while hasattr(fn, "__wrapped__") and seen < 10:
        fn, seen = fn.__wrapped__, seen + 1
    if hasattr(fn, "func") and hasattr(fn, "args") and hasattr(fn, "keywords"):  # functools.partial
        bound = _digest(stack, args=tuple(fn.args), keywords=dict(fn.keywords))
        return f"partial({_describe(fn.func, stack)}, args:{bound})"
    if hasattr(fn, "__self__") and hasattr(fn, "__func__"):                      # bound method
        digest = f" code:{_function_digest(fn.__func__, stack)}" if hasattr(fn.__func__, "__code__") else ""
        return f"{_qualname(type(fn.__self__))}.{fn.__func__.__name__}{digest}"
    if isinstance(fn, type) or type(fn).__name__ == "builtin_function_or_method":
        return _qualname(fn)
    if hasattr(fn, "__code__"):
        return f"{_qualname(fn)} code:{_function_digest(fn, stack)}"
    name = _qualname(type(fn))
    inner = getattr(fn, "model", None)
    if callable(inner) and inner is not fn:
        name += f"(model={_describe(inner, stack)})"
    return name


def _const_repr(c) -> str:
    """A repr of a code constant that does not depend on the process (frozenset order, ids)."""
    if isinstance(c, (frozenset, set)):
        return "frozenset{" + ",".join(sorted(_const_repr(x) for x in c)) + "}"
    if isinstance(c, tuple):
        return "(" + ",".join(_const_repr(x) for x in c) + ")"
    if isinstance(c, types.CodeType):
        return "code:" + _code_digest(c)
    return f"{type(c).__name__}:{c!r}"


def _code_digest(code: types.CodeType) -> str:
    """SHA-256 of what a code object runs: bytecode, constants (nested code by its own digest),
    the global/attribute names and the local/free variable names; not its file or line."""
    h = hashlib.sha256()
    h.update(code.co_code)
    for part in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                 (code.co_argcount, code.co_kwonlyargcount, code.co_flags)):
        h.update(repr(part).encode())
    h.update(_const_repr(tuple(code.co_consts)).encode())
    return h.hexdigest()[:16]


def _function_digest(fn, stack: set) -> str:
    """Digest of a function: its code, defaults and closure contents (see :func:`describe_callable`)."""
    if id(fn) in stack:
        return "recursive"
    stack.add(id(fn))
    try:
        cells = {}
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                cells[name] = cell.cell_contents
            except ValueError:                      # a cell not yet assigned
                cells[name] = "<empty cell>"
        held = _digest(stack, defaults=getattr(fn, "__defaults__", None),
                       kwdefaults=getattr(fn, "__kwdefaults__", None), closure=cells)
    finally:
        stack.discard(id(fn))
    return hashlib.sha256(f"{_code_digest(fn.__code__)}|{held}".encode()).hexdigest()[:16]


def _digest(stack: set, **named) -> str:
    """Short SHA-256 of the fingerprint of ``named`` (inside a description: shares ``stack``)."""
    out: dict = {}
    for k, v in named.items():
        _flatten(k, v, out, 0, stack)
    return hashlib.sha256(repr(sorted(out.items())).encode()).hexdigest()[:16]


def _array_entry(kind: str, dtype, shape, data: bytes) -> str:
    h = hashlib.sha256()
    h.update(f"{kind}|{dtype}|{tuple(shape)}|".encode())
    h.update(data)
    return f"{kind} {dtype} {tuple(int(s) for s in shape)} sha256:{h.hexdigest()[:16]}"


def _array_bytes(a: np.ndarray) -> bytes:
    """The contents of an array as bytes: raw for a plain dtype, a repr of the values for object arrays."""
    if a.dtype.hasobject:
        return repr(a.tolist()).encode()
    return np.ascontiguousarray(a).tobytes()


def _is_pandas(obj) -> bool:
    # by module name: pandas is imported only when the data are pandas objects already
    if not (type(obj).__module__ or "").startswith("pandas"):
        return False
    import pandas as pd
    return isinstance(obj, (pd.DataFrame, pd.Series, pd.Index))


def _pandas_entry(obj) -> str:
    """One entry for a DataFrame, Series or Index: its kind, shape and a hash of its values,
    dtypes, index, column labels and name (the class name alone told no two frames apart)."""
    import pandas as pd
    h = hashlib.sha256()

    def add(label: str, values) -> None:
        a = np.asarray(values)
        h.update(f"|{label}|{a.dtype.str}|{a.shape}|".encode())
        h.update(_array_bytes(a))
    kind = type(obj).__name__
    if isinstance(obj, pd.Index):
        add("values", obj.to_numpy())
        h.update(f"|names|{list(obj.names)!r}".encode())
    else:
        add("index", obj.index.to_numpy())
        h.update(f"|index names|{list(obj.index.names)!r}".encode())
        if isinstance(obj, pd.DataFrame):
            add("columns", obj.columns.to_numpy())
            for i in range(obj.shape[1]):
                col = obj.iloc[:, i]
                h.update(f"|column {i}|{col.dtype}".encode())
                add(f"column {i}", col.to_numpy())
        else:
            h.update(f"|name|{obj.name!r}|{obj.dtype}".encode())
            add("values", obj.to_numpy())
    return f"pandas.{kind} {tuple(int(s) for s in obj.shape)} sha256:{h.hexdigest()[:16]}"


def _flatten(path: str, obj: Any, out: dict, depth: int, stack: set) -> None:
    """Add ``path → plain value`` entries describing ``obj`` to ``out``."""
    if obj is None or isinstance(obj, (bool, str)):
        out[path] = obj
        return
    if isinstance(obj, np.bool_):
        out[path] = bool(obj)
        return
    if isinstance(obj, (int, np.integer)):
        out[path] = int(obj)
        return
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        out[path] = v if math.isfinite(v) else repr(v)   # NaN != NaN would never match
        return
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""  # device: cpu-ok
        out[path] = _array_entry("tensor", str(t.dtype).replace("torch.", ""), t.shape, data)
        return
    if isinstance(obj, np.ma.MaskedArray):
        # the mask is part of the data: the same values with another mask are other data
        a = np.ascontiguousarray(np.ma.getdata(obj))
        m = np.ascontiguousarray(np.ma.getmaskarray(obj))
        data = _array_bytes(a) + b"|mask|" + m.tobytes()
        out[path] = _array_entry("masked_array", a.dtype.str, a.shape, data)
        return
    if _is_pandas(obj):
        out[path] = _pandas_entry(obj)
        return
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            _flatten(path, obj.tolist(), out, depth, stack)
            return
        a = np.ascontiguousarray(obj)
        out[path] = _array_entry("array", a.dtype.str, a.shape, a.tobytes())
        return
    if sp.issparse(obj):
        c = obj.tocsr()
        c.sort_indices()
        data = b"".join(np.ascontiguousarray(x).tobytes() for x in (c.data, c.indices, c.indptr))
        out[path] = _array_entry("sparse", c.dtype.str, c.shape, data)
        return
    if isinstance(obj, enum.Enum):
        out[path] = f"{_qualname(type(obj))}.{obj.name}"
        return
    if isinstance(obj, (Path, torch.dtype, torch.device, complex)):
        out[path] = str(obj)
        return
    if isinstance(obj, bytes):
        out[path] = "bytes sha256:" + hashlib.sha256(obj).hexdigest()[:16]
        return
    if isinstance(obj, types.ModuleType):
        out[path] = f"module {obj.__name__}"
        return
    if callable(obj) and (isinstance(obj, type) or hasattr(obj, "__code__") or hasattr(obj, "__wrapped__")
                          or hasattr(obj, "__func__")):
        out[path] = _describe(obj, stack)
        return
    if id(obj) in stack:           # a reference back to a container above: described there
        out[path] = f"<cycle: {_qualname(type(obj))}>"
        return
    if depth >= _MAX_DEPTH:
        # the whole subtree, hashed (each further _MAX_DEPTH levels as one digest in turn): a setting
        # that differs 30 levels down still changes the fingerprint, its path just stops here
        sub: dict = {}
        _flatten("", obj, sub, 0, stack)
        digest = hashlib.sha256(repr(sorted(sub.items())).encode()).hexdigest()[:16]
        out[path] = f"<{_qualname(type(obj))} nested below depth {_MAX_DEPTH}> sha256:{digest}"
        return
    stack.add(id(obj))
    try:
        if isinstance(obj, dict):
            out[path] = f"dict[{len(obj)}]"
            for k in sorted(obj, key=str):
                _flatten(f"{path}.{k}" if path else str(k), obj[k], out, depth + 1, stack)
        elif isinstance(obj, (list, tuple)):
            out[path] = f"{type(obj).__name__}[{len(obj)}]"
            for i, v in enumerate(obj):
                _flatten(f"{path}[{i}]", v, out, depth + 1, stack)
        elif isinstance(obj, (set, frozenset)):
            out[path] = f"set{sorted(map(repr, obj))}"
        elif isinstance(obj, torch.nn.Module):
            out[path] = _qualname(type(obj))
            for k, v in obj.state_dict().items():
                _flatten(f"{path}.{k}", v, out, depth + 1, stack)
        elif dataclasses.is_dataclass(obj):
            out[path] = _qualname(type(obj))
            for f in dataclasses.fields(obj):
                _flatten(f"{path}.{f.name}" if path else f.name, getattr(obj, f.name), out, depth + 1, stack)
        elif callable(obj):
            out[path] = _describe(obj, stack)
        elif hasattr(obj, "__dict__"):
            # a plain object: its public attributes (private ones are caches and bookkeeping)
            out[path] = _qualname(type(obj))
            for k in sorted(vars(obj)):
                if not k.startswith("_"):
                    _flatten(f"{path}.{k}", vars(obj)[k], out, depth + 1, stack)
        else:
            out[path] = f"<{_qualname(type(obj))}>"
    finally:
        stack.discard(id(obj))


def fingerprint(**named) -> dict:
    """A flat ``{path: plain value}`` description of the named values (see the module docstring).

    ``fingerprint(data=(X, Y), lr=0.01)`` → ``{"data": "tuple[2]", "data[0]": "tensor float64
    (40, 3) sha256:…", "data[1]": …, "lr": 0.01}``. Values are str/int/float/bool/None, so the
    dict can be stored with ``torch.save`` or tandem's safe format (which keep those types).
    Compare two with :func:`fingerprint_diff`, not ``==``: ``==`` takes ``1``, ``1.0`` and
    ``True`` for one value and ``-0.0`` for ``0.0``; :func:`fingerprint_diff` tells them apart.

    Containers are described entry by entry down to depth 24; a container nested deeper is one
    entry holding a SHA-256 of its whole description (so a difference at any depth is seen),
    and a reference back to a container above (a cycle) is an entry ``<cycle: type>``.

    Parameters
    ----------
    **named
        The values to describe (tensors, arrays, containers, settings, callables).

    Returns
    -------
    dict
        The flat description.

    Raises
    ------
    ValueError
        Naming the value, if it is nested beyond Python's recursion limit (about a thousand
        containers inside each other): it is refused rather than described in part.
    """
    out: dict = {}
    for k, v in named.items():
        try:
            _flatten(k, v, out, 0, set())
        except RecursionError:
            # nested deeper than Python's recursion limit: refuse rather than describe part of it
            raise ValueError(f"fingerprint: {k}: nested too deeply to describe (containers inside containers "
                             f"beyond Python's recursion limit, {sys.getrecursionlimit()}); pass a flatter "
                             "value") from None
    return out


def fingerprint_diff(old: dict, new: dict, limit: int = 6) -> list[str]:
    """Human-readable lines ``"path: was A, now B"`` for the entries that differ.

    A container whose length or type changed is reported once, not element by element.

    Parameters
    ----------
    old, new : dict
        Two :func:`fingerprint` results.
    limit : int, default 6
        At most this many lines (then ``"… and N more"``).

    Returns
    -------
    list of str
        The differences.
    """
    keys = [k for k in sorted(set(old) | set(new), key=_path_order)
            if not _same(old.get(k, _MISSING), new.get(k, _MISSING))]
    # drop entries below a container that is itself reported (e.g. list length changed)
    keys = [k for k in keys if not any(k != p and k.startswith(p) and k[len(p)] in ".[" for p in keys)]
    lines = [f"{k}: was {_show(old.get(k, _MISSING))}, now {_show(new.get(k, _MISSING))}" for k in keys[:limit]]
    if len(keys) > limit:
        lines.append(f"… and {len(keys) - limit} more")
    return lines


_MISSING = object()


def _same(a, b) -> bool:
    """Equal values of the same type: ``==`` alone takes ``1``, ``1.0`` and ``True`` for one value
    and ``0.0`` for ``-0.0``, so a run with ``lr=1`` would resume a checkpoint of ``lr=True``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def _show(v) -> str:
    return "absent" if v is _MISSING else repr(v)


def _path_order(k: str):
    return (k.count(".") + k.count("["), k)


def check_fingerprint(path, stored: dict | None, current: dict, what: str = "run") -> None:
    """Refuse a checkpoint whose stored fingerprint differs from the current run's.

    Parameters
    ----------
    path : str or pathlib.Path
        The checkpoint file (named in the message).
    stored : dict or None
        The fingerprint stored in it.
    current : dict
        The current run's fingerprint.
    what : str, default "run"
        What the checkpoint belongs to, for the message.

    Raises
    ------
    CheckpointError
        Naming the file, each differing entry (old and new value) and the two ways out: restore
        the original settings/data, or delete the file (or use another).
    """
    if stored is None:
        raise CheckpointError(f"checkpoint {path} has no fingerprint (written by an older version of tandem or "
                              f"by another program); delete it to start the {what} afresh")
    diff = fingerprint_diff(stored, current)
    if diff:
        raise CheckpointError(f"checkpoint {path} was written by a different {what}; it differs in:\n  "
                              + "\n  ".join(diff)
                              + f"\nRun with the original settings and data to resume, or delete {path} "
                                "(or choose another checkpoint path) to start afresh")


def content_hash(*values, length: int = 16) -> str:
    """Hex SHA-256 of the :func:`fingerprint` of the values: a key for a cache of results.

    Depends on array contents, shapes and dtypes, settings and function names.

    Parameters
    ----------
    *values
        The inputs the cached result is computed from.
    length : int, default 16
        Number of hex characters kept.

    Returns
    -------
    str
        The key.
    """
    fp = fingerprint(values=values)
    h = hashlib.sha256(repr(sorted(fp.items())).encode())
    return h.hexdigest()[:length]


def save_atomic(obj: Any, path) -> Path:
    """Write an object to a file in tandem's safe format, atomically.

    A crash or kill during the write leaves the previous file (if any) untouched; the parent
    folder is created.

    Parameters
    ----------
    obj : object
        What :func:`tandem.inference.persistence.dump` stores (kind ``obj["kind"]`` for a dict
        with one).
    path : str or pathlib.Path
        The target file.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    kind = obj.get("kind", "checkpoint") if isinstance(obj, dict) else "checkpoint"
    return dump(obj, path, str(kind))


def load_checkpoint(path, kind: str) -> dict:
    """Read a checkpoint written by :func:`save_atomic` whose ``"kind"`` entry is ``kind``.

    Read with the safe reader (``torch.load(weights_only=True)``; nothing is unpickled).

    Parameters
    ----------
    path : str or pathlib.Path
        The checkpoint file.
    kind : str
        The expected kind.

    Returns
    -------
    dict
        The checkpoint's contents.

    Raises
    ------
    CheckpointError
        Naming ``path``: when it is a folder (saying to pass a file path), or, saying to delete it,
        when the file is empty, truncated, corrupt, not a tandem file, or holds something other than
        a ``kind`` checkpoint.
    """
    path = Path(path)
    if path.is_dir():   # never advise deleting a folder: the user gave a folder where a file belongs
        raise CheckpointError(f"checkpoint {path} is a folder; pass the path of a checkpoint *file* "
                              f"(e.g. {path / 'run.ckpt'})")
    remedy = f"delete {path} (or choose another checkpoint path) to start afresh"
    try:
        state = load(path, map_location="cpu")
    except PersistenceError as err:
        raise CheckpointError(f"checkpoint {err}; {remedy}") from None
    if not isinstance(state, dict) or state.get("kind") != kind:
        found = state.get("kind") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"checkpoint {path} is not a {kind!r} checkpoint (found {found!r}); it was written "
                              f"by an older version of tandem or by another program; {remedy}")
    return state
