"""Safe, versioned, atomic files: the one format every tandem file on disk uses.

Nothing here unpickles arbitrary objects. A file is written with ``torch.save`` of a
*plain* dict ``{"format": "tandem.safe", "version": 1, "kind": str, "meta": str,
"tensors": {str: Tensor}}`` and read back with ``torch.load(weights_only=True)``, whose
restricted unpickler only builds tensors, dicts, lists and primitive values: a crafted
file that names any other global (``os.system``, ``builtins.eval``, a ``__reduce__``
payload) is refused before anything runs.

``meta`` is a JSON text describing the saved object as a tree (:func:`encode`): plain
values stay plain, containers are tagged (``{"$l": [...]}``, ``{"$t": [...]}``, ``{"$d":
[[k, v], ...]}``, so tuples, int keys and nested dicts round-trip), a tensor is a
reference ``{"$T": i}`` into ``tensors``, a numpy array ``{"$A": i, "dtype", "shape"}`` (its
raw bytes as a ``uint8`` tensor; a masked array ``{"$MA": data, "mask", "fill"}``), and a
few value types have their own tag (numpy scalars, complex, sets, paths, bytes, torch
dtypes/devices, torch/pyro constraint objects, enums).
An instance of a class defined inside the ``tandem`` package is recorded by its class
name and its state (``__getstate__``); on reading, a name is followed only as a plain
dotted name from its module through classes (never through a module that module imports),
and only to a class or function *defined* in ``tandem`` (its ``__module__``; for
constraints, in ``torch.distributions.constraints`` / ``pyro.distributions.constraints``);
classes are rebuilt with ``cls.__new__`` plus their state — no constructor or other code of
the file's choosing runs.

Every write goes through :func:`atomic_write`: ``tempfile.mkstemp`` in the target folder
(an unpredictable name created with ``O_EXCL``, so a planted symlink is never followed),
write, ``flush`` + ``fsync``, ``os.replace`` over the target, and the temporary file is
removed on any failure. A kill at any point leaves either the old file or the new one.

A missing file raises ``FileNotFoundError``; an empty, truncated, corrupt, foreign or
wrong-kind file raises :class:`PersistenceError` (a ``ValueError``) naming the file.
"""
from __future__ import annotations

import enum
import importlib
import json
import math
import types
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import torch

# the atomic writers live in their own module; imported here so every name of the format stays
# importable from tandem.inference.persistence
from tandem.inference.atomic_files import (  # noqa: F401
    atomic_write,
    check_save_path,
    check_writable,
    write_bytes_atomic,
    write_text_atomic,
)

__all__ = ["FORMAT", "VERSION", "PersistenceError", "atomic_write", "write_bytes_atomic", "write_text_atomic",
           "check_writable", "check_save_path", "encode", "decode", "dump", "load", "save_estimator", "load_estimator"]

FORMAT = "tandem.safe"
VERSION = 1
_CONSTRAINT_MODULES = ("torch.distributions.constraints", "pyro.distributions.constraints")


class PersistenceError(ValueError):
    """A file cannot be read as a tandem file: empty, truncated, corrupt, foreign, or of another kind.

    A ``ValueError``; the message names the file.
    """


# ---------------------------------------------------------------------------------- tree encoding
def _qual(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _lookup(name: str, allowed: tuple[str, ...]):
    """The object a file names as ``"module:Qual.Name"``, looked up without leaving ``allowed``.

    Only plain dotted names are followed (identifiers; no ``<locals>``); every step
    after the module must stand on a class (a nested class or a method), never on a module that
    the named module happens to import (``tandem.x:np.random.RandomState``, ``tandem.x:os.system``);
    and the object found must itself be defined in ``allowed`` (its ``__module__``), so a name
    imported into a tandem module from elsewhere (``tandem.x:Path``) is refused too.
    """
    mod, sep, qual = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not sep or not all(p.isidentifier() for p in mod.split(".")):
        raise PersistenceError(f"refers to {name!r}, which is not a 'module:name' reference")
    if not _within(mod, allowed):
        raise PersistenceError(f"refers to {name!r}, outside the allowed modules {allowed}")
    parts = qual.split(".")
    if not all(p.isidentifier() for p in parts):
        kind = "the local class or function" if "<" in qual else "the non-plain name"
        raise PersistenceError(f"refers to {kind} {name!r}")
    obj = importlib.import_module(mod)
    for i, part in enumerate(parts):
        if i > 0 and not isinstance(obj, type):
            raise PersistenceError(f"refers to {name!r}, which reaches {'.'.join(parts[:i])!r}, not a class, "
                                   "on the way")
        obj = getattr(obj, part)
        if isinstance(obj, types.ModuleType):
            raise PersistenceError(f"refers to {name!r}, which walks through the module {obj.__name__!r}")
    home = getattr(obj, "__module__", None)
    if not (isinstance(home, str) and _within(home, allowed)):
        raise PersistenceError(f"refers to {name!r}, which is defined in {home!r}, outside the allowed modules "
                               f"{allowed}")
    return obj


def _within(mod: str, allowed: tuple[str, ...]) -> bool:
    return any(mod == a or mod.startswith(a + ".") for a in allowed)


def _resolve(name: str, allowed: tuple[str, ...]):
    """:func:`_lookup` of a class."""
    obj = _lookup(name, allowed)
    if not isinstance(obj, type):
        raise PersistenceError(f"refers to {name!r}, which is not a class")
    return obj


def _tandem_root() -> str:
    return __name__.split(".")[0]


def _constraint_singleton(obj):
    for modname in _CONSTRAINT_MODULES:
        mod = importlib.import_module(modname)
        for k, v in vars(mod).items():
            if v is obj and not k.startswith("_"):
                return f"{modname}:{k}"
    return None


class _Encoder:
    def __init__(self):
        self.tensors: dict[str, torch.Tensor] = {}

    def _add(self, t: torch.Tensor) -> str:
        k = str(len(self.tensors))
        self.tensors[k] = t
        return k

    def enc(self, obj, path: str):  # noqa: C901 - one case per value type
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, np.generic) and not isinstance(obj, np.object_):
            return {"$np": obj.dtype.str, "v": self.enc(obj.item(), path)}
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj) if math.isfinite(obj) else {"$f": repr(float(obj))}
        if isinstance(obj, complex):
            return {"$c": [self.enc(obj.real, path), self.enc(obj.imag, path)]}
        if isinstance(obj, torch.Tensor):
            t = obj.detach()
            if t.layout != torch.strided:
                raise TypeError(f"{path}: cannot save a {t.layout} tensor; convert it to a dense tensor")
            return {"$T": self._add(t.cpu().clone().contiguous()), "grad": bool(obj.requires_grad),
                    "device": str(obj.device)}
        if isinstance(obj, np.ma.MaskedArray):
            # an ndarray subclass: the plain-array case below would drop the mask without a word
            return {"$MA": self.enc(np.ma.getdata(obj), path), "mask": self.enc(np.ma.getmaskarray(obj), path),
                    "fill": self.enc(obj.fill_value, path)}
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                return {"$Aobj": self.enc(list(obj.ravel()), path), "shape": list(obj.shape)}
            a = np.ascontiguousarray(obj)
            raw = torch.from_numpy(np.frombuffer(a.tobytes(), dtype=np.uint8).copy())
            return {"$A": self._add(raw), "dtype": a.dtype.str, "shape": list(a.shape)}
        if _is_sparse(obj):
            c = obj.tocsr()
            return {"$sp": type(obj).__name__, "shape": list(c.shape),
                    "parts": self.enc((c.data, c.indices, c.indptr), path)}
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return self._object(obj, path)
        if isinstance(obj, tuple):
            return {"$t": [self.enc(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return {"$l": [self.enc(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            return {"$d": [[self.enc(k, f"{path}.<key>"), self.enc(v, f"{path}.{k}")] for k, v in obj.items()]}
        if isinstance(obj, (set, frozenset)):
            tag = "$fs" if isinstance(obj, frozenset) else "$s"
            return {tag: [self.enc(v, f"{path}.<item>") for v in sorted(obj, key=repr)]}
        if isinstance(obj, PurePath):
            return {"$path": str(obj)}
        if isinstance(obj, bytes):
            return {"$b": obj.hex()}
        if isinstance(obj, torch.dtype):
            return {"$dtype": str(obj).replace("torch.", "")}
        if isinstance(obj, torch.device):
            return {"$device": str(obj)}
        if isinstance(obj, np.dtype):
            return {"$npdtype": obj.str}
        if isinstance(obj, torch.distributions.constraints.Constraint):
            single = _constraint_singleton(obj)
            if single is not None:
                return {"$cs": single}
            cls = type(obj)
            if cls.__module__ not in _CONSTRAINT_MODULES:
                raise TypeError(f"{path}: cannot save the constraint {cls.__qualname__} from {cls.__module__}")
            return {"$cp": _qual(cls), "state": self.enc(dict(vars(obj)), path)}
        if isinstance(obj, types.FunctionType) or (isinstance(obj, type) and not isinstance(obj, enum.EnumMeta)):
            mod = getattr(obj, "__module__", "") or ""
            root = _tandem_root()
            if (mod == root or mod.startswith(root + ".")) and "<" not in obj.__qualname__:
                return {"$fn": f"{mod}:{obj.__qualname__}"}
            raise TypeError(f"{path}: cannot save the function or class {mod}.{getattr(obj, '__qualname__', obj)} "
                            "(only module-level functions and classes of tandem are stored, by name)")
        if isinstance(obj, enum.Enum):
            if not _is_tandem(obj):
                raise TypeError(f"{path}: cannot save the enum {_qual(type(obj))} (only tandem's own)")
            return {"$enum": _qual(type(obj)), "name": obj.name}
        if _is_tandem(obj) and not isinstance(obj, type):
            return self._object(obj, path)
        raise TypeError(f"{path}: cannot save a value of type {_qual(type(obj))} "
                        "(tandem files hold tensors, arrays, plain values and tandem objects only)")

    def _object(self, obj, path):
        cls = type(obj)
        if not _is_tandem(obj):
            raise TypeError(f"{path}: cannot save a {_qual(cls)} (only tandem's own classes)")
        if "<locals>" in cls.__qualname__:
            raise TypeError(f"{path}: cannot save an instance of the local class {cls.__qualname__}")
        if isinstance(obj, tuple):                      # namedtuple
            return {"$nt": _qual(cls), "v": [self.enc(v, f"{path}.{f}") for f, v in zip(obj._fields, obj)]}
        state = obj.__getstate__() if hasattr(obj, "__getstate__") else dict(vars(obj))
        if state is None:
            state = {}
        if isinstance(state, tuple) and len(state) == 2 and state[0] is None:   # __slots__ only
            state = state[1]
        return {"$o": _qual(cls), "state": self.enc(state, path)}


def _is_sparse(obj) -> bool:
    mod = type(obj).__module__ or ""
    if not mod.startswith("scipy.sparse"):
        return False
    import scipy.sparse as sp
    return sp.issparse(obj)


def _is_tandem(obj) -> bool:
    mod = type(obj).__module__ or ""
    root = _tandem_root()
    return mod == root or mod.startswith(root + ".")


def encode(obj, path: str = "value") -> tuple[Any, dict[str, torch.Tensor]]:
    """``(JSON-able tree, {key: tensor})`` describing ``obj`` (see the module doc).

    Parameters
    ----------
    obj : object
        Plain values, containers, tensors, numpy arrays, scipy.sparse matrices, and instances,
        functions, classes and enums of the ``tandem`` package.
    path : str, default "value"
        The name of ``obj`` in error messages (entries are named ``path[i]``, ``path.key``).

    Returns
    -------
    tree : object
        A JSON-able tree of plain values and tagged dicts; tensors and arrays are references into
        ``tensors``.
    tensors : dict of str to torch.Tensor
        The CPU, contiguous tensors referenced by ``tree`` (a numpy array as its raw ``uint8`` bytes).

    Raises
    ------
    TypeError
        Naming the offending entry (``path``) for a value that cannot be stored safely (functions,
        open files, foreign objects, sparse torch tensors).
    """
    e = _Encoder()
    tree = e.enc(obj, path)
    return tree, e.tensors


def decode(tree, tensors: dict, map_location=None):  # noqa: C901 - one case per tag
    """Inverse of :func:`encode`; tensors are put on ``map_location`` (or the recorded device).

    Only classes and functions defined in ``tandem`` (and constraint classes of ``torch``/``pyro``)
    are looked up, by plain dotted names that pass through no other module; classes are rebuilt
    with ``cls.__new__`` plus their state: no constructor or other code of the file's choosing runs.

    Parameters
    ----------
    tree : object
        The tree returned by :func:`encode` (after a JSON round trip).
    tensors : dict of str to torch.Tensor
        The tensors referenced by ``tree``.
    map_location : str or torch.device, optional
        Where to put the tensors; ``None`` → the device each was saved from.

    Returns
    -------
    object
        The rebuilt object.

    Raises
    ------
    PersistenceError
        For a malformed tree, an unknown tag, a reference outside the allowed modules, or a tensor
        on a device that is not available here (load with ``map_location='cpu'``).
    """
    def dec(n):
        if n is None or isinstance(n, (bool, int, float, str)):
            return n
        if isinstance(n, list):
            raise PersistenceError("malformed tree (untagged list)")
        if not isinstance(n, dict) or not n:
            raise PersistenceError(f"malformed tree node {type(n).__name__}")
        tag = next(iter(n))
        if tag == "$T":
            t = tensors[n["$T"]]
            dev = map_location if map_location is not None else n.get("device", "cpu")
            if dev != "cpu":
                try:
                    t = t.to(dev)
                except (RuntimeError, AssertionError) as err:
                    raise PersistenceError(f"holds a tensor on {dev}, which is not available here ({err}); "
                                           "load with map_location='cpu'") from None
            if n.get("grad") and (t.is_floating_point() or t.is_complex()):
                t.requires_grad_(True)
            return t
        if tag == "$A":
            raw = tensors[n["$A"]].cpu().numpy().tobytes()
            return np.frombuffer(raw, dtype=np.dtype(n["dtype"])).reshape(n["shape"]).copy()
        if tag == "$MA":
            data, mask = dec(n["$MA"]), dec(n["mask"])
            if not (isinstance(data, np.ndarray) and isinstance(mask, np.ndarray) and mask.shape == data.shape):
                raise PersistenceError("malformed masked array")
            return np.ma.masked_array(data, mask=mask, fill_value=dec(n["fill"]))
        if tag == "$Aobj":
            vals = dec(n["$Aobj"])
            a = np.empty(len(vals), dtype=object)
            a[:] = vals
            return a.reshape(tuple(n["shape"]))
        if tag == "$sp":
            import scipy.sparse as sp
            data, indices, indptr = dec(n["parts"])
            c = sp.csr_matrix((data, indices, indptr), shape=tuple(n["shape"]))
            fmt = str(n["$sp"])
            return c if fmt.startswith("csr") else c.asformat(fmt[:3]) if fmt[:3] in (
                "csc", "coo", "lil", "dok", "bsr", "dia") else c
        if tag == "$np":
            return np.dtype(n["$np"]).type(dec(n["v"]))
        if tag == "$f":
            return float(n["$f"])
        if tag == "$c":
            return complex(dec(n["$c"][0]), dec(n["$c"][1]))
        if tag == "$t":
            return tuple(dec(v) for v in n["$t"])
        if tag == "$l":
            return [dec(v) for v in n["$l"]]
        if tag == "$d":
            return {dec(k): dec(v) for k, v in n["$d"]}
        if tag == "$s":
            return {dec(v) for v in n["$s"]}
        if tag == "$fs":
            return frozenset(dec(v) for v in n["$fs"])
        if tag == "$path":
            return Path(n["$path"])
        if tag == "$b":
            return bytes.fromhex(n["$b"])
        if tag == "$dtype":
            dt = getattr(torch, n["$dtype"], None)
            if not isinstance(dt, torch.dtype):
                raise PersistenceError(f"unknown torch dtype {n['$dtype']!r}")
            return dt
        if tag == "$device":
            return torch.device(n["$device"])
        if tag == "$npdtype":
            return np.dtype(n["$npdtype"])
        if tag == "$cs":
            mod, _, name = n["$cs"].partition(":")
            if mod not in _CONSTRAINT_MODULES:
                raise PersistenceError(f"refers to {n['$cs']!r}, not a constraint")
            c = getattr(importlib.import_module(mod), name, None)
            if not isinstance(c, torch.distributions.constraints.Constraint):
                raise PersistenceError(f"refers to {n['$cs']!r}, not a constraint")
            return c
        if tag == "$cp":
            cls = _resolve(n["$cp"], _CONSTRAINT_MODULES)
            if not issubclass(cls, torch.distributions.constraints.Constraint):
                raise PersistenceError(f"refers to {n['$cp']!r}, not a constraint class")
            c = cls.__new__(cls)
            c.__dict__.update(dec(n["state"]))
            return c
        if tag == "$fn":
            obj = _lookup(n["$fn"], (_tandem_root(),))
            if not (isinstance(obj, (types.FunctionType, type))):
                raise PersistenceError(f"refers to {n['$fn']!r}, not a function or class")
            return obj
        if tag == "$enum":
            cls = _resolve(n["$enum"], (_tandem_root(),))
            if not issubclass(cls, enum.Enum):
                raise PersistenceError(f"refers to {n['$enum']!r}, not an enum")
            return cls[n["name"]]
        if tag == "$nt":
            cls = _resolve(n["$nt"], (_tandem_root(),))
            if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
                raise PersistenceError(f"refers to {n['$nt']!r}, not a named tuple")
            return cls(*[dec(v) for v in n["v"]])
        if tag == "$o":
            cls = _resolve(n["$o"], (_tandem_root(),))
            state = dec(n["state"])
            obj = cls.__new__(cls)
            if hasattr(cls, "__setstate__") and cls.__setstate__ is not getattr(object, "__setstate__", None):
                obj.__setstate__(state)
            elif isinstance(state, dict):
                obj.__dict__.update(state)
            else:
                raise PersistenceError(f"holds a malformed state for {n['$o']!r}")
            return obj
        raise PersistenceError(f"unknown tag {tag!r}")
    return dec(tree)


# ---------------------------------------------------------------------------------- files
def dump(obj, path, kind: str) -> Path:
    """Write ``obj`` to ``path`` in the safe format, tagged ``kind``, atomically; returns ``path``.

    Parameters
    ----------
    obj : object
        What to store (see :func:`encode`).
    path : str or os.PathLike
        The target file (written with :func:`atomic_write`).
    kind : str
        The kind recorded in the file, checked by :func:`load`.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    TypeError
        Naming the entry, if ``obj`` holds something that cannot be stored.
    """
    tree, tensors = encode(obj)
    meta = json.dumps(tree, allow_nan=False)
    payload = {"format": FORMAT, "version": VERSION, "kind": str(kind), "meta": meta, "tensors": tensors}
    return atomic_write(path, lambda f: torch.save(payload, f))


#: the only globals a file written by :func:`dump` names in its pickle (torch's tensor rebuild,
#: its typed storages, OrderedDict); anything else is refused before torch reads the file
_ALLOWED_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"), ("collections", "OrderedDict")}
#: opcodes :func:`torch.save` never writes (protocol 2, GLOBAL only) but a crafted pickle uses
_REFUSED_OPCODES = {"STACK_GLOBAL", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2", "EXT4"}


def check_archive(path: Path) -> None:
    """Refuse, before torch reads it, a file that is not the zip archive :func:`dump` writes.

    Checks, without unpickling anything: the zip magic ``PK\\x03\\x04`` (a raw pickle —
    torch's legacy format — or another file type is refused here, so torch never parses it
    and emits no "Detected pickle protocol" warning); that the archive opens (else it is
    truncated or corrupt); its layout (one top folder holding ``data.pkl``); every entry's
    CRC-32 (a damaged tensor payload, which ``torch.load`` would read as wrong numbers); and the
    opcodes of ``data.pkl``: only ``GLOBAL`` references to :data:`_ALLOWED_GLOBALS` or to a
    ``torch.*Storage`` class.

    Parameters
    ----------
    path : pathlib.Path
        The file.

    Raises
    ------
    PersistenceError
        Naming the file, if it cannot be read, is not a zip archive, is truncated or corrupt, has
        another layout, or its pickle holds a refused opcode or global.
    """
    import pickletools
    import zipfile
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as err:      # unreadable (permissions), a special file
        raise PersistenceError(f"{path} cannot be read ({type(err).__name__}: {err.strerror or err})") from None
    if head != b"PK\x03\x04":
        kind = "a raw pickle" if head[:1] == b"\x80" else "not a zip archive"
        raise PersistenceError(f"{path} is not a tandem file ({kind}; tandem files are torch zip archives); "
                               "refused without unpickling it")
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            tops = {n.split("/", 1)[0] for n in names}
            if len(tops) != 1 or f"{next(iter(tops))}/data.pkl" not in names:
                raise PersistenceError(f"{path} is a zip archive but not a tandem/torch file (entries: "
                                       f"{sorted(names)[:5]}...)")
            data = z.read(f"{next(iter(tops))}/data.pkl")
            # torch.load does not check the CRC-32 the archive stores for each entry: a flipped bit
            # in a tensor's bytes would load as a wrong number without a word
            bad = z.testzip()
            if bad is not None:
                raise PersistenceError(f"{path} is corrupt: the entry {bad!r} fails its CRC-32 check (the file was "
                                       "damaged after it was written)")
    except PersistenceError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, ValueError) as err:
        raise PersistenceError(f"{path} is truncated or corrupt ({type(err).__name__}: {err})") from None
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in _REFUSED_OPCODES:
                raise PersistenceError(f"{path} holds a pickle opcode ({op.name}) that a tandem file never has; "
                                       "refused without unpickling it")
            if op.name == "GLOBAL":
                mod, _, name = str(arg).partition(" ")
                if (mod, name) not in _ALLOWED_GLOBALS and not (mod == "torch" and name.endswith("Storage")):
                    raise PersistenceError(f"{path} names {mod}.{name} in its pickle, which a tandem file never "
                                           "does (it could run code when loaded); refused without unpickling it")
    except PersistenceError:
        raise
    except Exception as err:  # noqa: BLE001 - a damaged pickle stream
        raise PersistenceError(f"{path} is damaged ({type(err).__name__}: {err})") from None


def load(path, kind: str | None = None, map_location=None):
    """Read a file written by :func:`dump` (``kind`` checked when given).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    kind : str, optional
        The kind the file must hold; ``None`` → any.
    map_location : str or torch.device, optional
        Where to put the tensors (see :func:`decode`).

    Returns
    -------
    object
        The stored object.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    PersistenceError
        Naming the file if it is a folder, empty, truncated, corrupt, a pickle that names anything
        but plain values (refused by :func:`check_archive` and ``torch.load(weights_only=True)``
        before it runs), a file of another program, a newer format version, or of another kind.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise PersistenceError(f"{path} is a folder, expected a tandem file")
    if path.stat().st_size == 0:
        raise PersistenceError(f"{path} is empty (a write was interrupted?)")
    check_archive(path)
    try:
        z = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001 - anything torch/pickle/zip raises on a bad file
        msg = str(err).splitlines()[0][:300] if str(err) else ""
        raise PersistenceError(f"{path} cannot be read as a tandem file ({type(err).__name__}: {msg}); "
                               "it is truncated, corrupt, unsafe or not written by tandem") from None
    if not isinstance(z, dict) or z.get("format") != FORMAT:
        raise PersistenceError(f"{path} is not a tandem file (no {FORMAT!r} header); it was written by an older "
                               "version of tandem or by another program")
    version = z.get("version")
    # a plain int: True is an int to isinstance, and 0 or -5 are no version tandem ever wrote
    if type(version) is not int or version < 1:
        raise PersistenceError(f"{path} has a malformed format version {version!r} (expected an integer >= 1); "
                               "it is damaged or not written by tandem")
    if version > VERSION:
        raise PersistenceError(f"{path} has format version {version!r}; this tandem reads up to "
                               f"{VERSION}: upgrade tandem")
    if kind is not None and z.get("kind") != kind:
        raise PersistenceError(f"{path} holds a {z.get('kind')!r}, expected a {kind!r}")
    try:
        tree = json.loads(z["meta"])
        tensors = z["tensors"]
        if not isinstance(tensors, dict):
            raise PersistenceError("malformed tensor table")
        return decode(tree, tensors, map_location)
    except PersistenceError as err:
        raise PersistenceError(f"{path}: {err}") from None
    except (KeyError, TypeError, ValueError, AttributeError, ImportError, IndexError, RecursionError) as err:
        raise PersistenceError(f"{path} is damaged ({type(err).__name__}: {err})") from None


# ---------------------------------------------------------------------------------- estimators
def _kind(cls) -> str:
    return f"estimator:{cls.__qualname__}"


def save_estimator(est, path, extra=None) -> Path:
    """Save an estimator: its class, its init parameters and its state in the safe format.

    The init parameters come from ``get_params(deep=False)`` where defined (``None`` when they
    cannot be stored); the state from ``__getstate__`` (every attribute, fitted ones ending in
    ``_``). Private attributes (leading ``_``) that cannot be stored (caches such as compiled
    functions) are dropped. The file's kind is ``"estimator:<class qualname>"``.

    Parameters
    ----------
    est : object
        The estimator.
    path : str or os.PathLike
        The target file (written atomically).
    extra : object, optional
        A further value stored alongside (see :func:`encode`), returned by
        :func:`load_estimator` with ``with_extra``.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ValueError
        If ``path`` is not a path, is a folder, or its folder is missing or cannot be written
        (:func:`check_save_path`), before anything is serialised or written.
    TypeError
        Naming the attribute, if a public attribute cannot be stored.
    """
    check_save_path(path, f"{type(est).__name__}.save")
    state = est.__getstate__() if hasattr(est, "__getstate__") else dict(vars(est))
    state = dict(state) if isinstance(state, dict) else {"__state__": state}
    keep = {}
    for k, v in state.items():
        try:
            encode(v, k)
        except TypeError:
            if k.startswith("_"):
                continue
            raise
        keep[k] = v
    params = None
    if hasattr(est, "get_params"):
        try:
            params = est.get_params(deep=False)
            encode(params, "params")
        except TypeError:
            params = None
    obj = {"class": f"{type(est).__module__}:{type(est).__qualname__}", "params": params, "state": keep,
           "extra": extra}
    return dump(obj, path, _kind(type(est)))


def load_estimator(cls, path, map_location=None, with_extra: bool = False):
    """Inverse of :func:`save_estimator`: a ``cls`` instance rebuilt from ``path``.

    The instance is built with ``cls.__new__`` and its state (``__setstate__`` where defined);
    no constructor runs.

    Parameters
    ----------
    cls : type
        The estimator class the file must have been written for.
    path : str or os.PathLike
        The file.
    map_location : str or torch.device, optional
        Where to put the tensors (see :func:`decode`).
    with_extra : bool, default False
        Also return the ``extra`` value given to :func:`save_estimator`.

    Returns
    -------
    object or tuple
        The estimator, or ``(estimator, extra)`` when ``with_extra``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    PersistenceError
        Naming the file and ``cls``, if it was not written for ``cls`` by ``cls.save``, or is
        damaged (see :func:`load`).
    """
    try:
        z = load(path, _kind(cls), map_location)
    except PersistenceError as err:
        raise PersistenceError(f"{cls.__name__}.load: {err}; expected a file written by {cls.__name__}.save") from None
    if not isinstance(z, dict) or not isinstance(z.get("state"), dict):
        raise PersistenceError(f"{path} is damaged (no estimator state)")
    est = cls.__new__(cls)
    state = z["state"]
    if set(state) == {"__state__"}:
        state = state["__state__"]
    if hasattr(cls, "__setstate__") and cls.__setstate__ is not getattr(object, "__setstate__", None):
        est.__setstate__(state)
    else:
        est.__dict__.update(state)
    return (est, z.get("extra")) if with_extra else est
