"""Content fingerprints: the key of McGPDS's fit cache and of its resumable checkpoints.

A saved fit (or a resumable checkpoint) may only be reused for the *same* problem: the same
data values, the same full configuration and the same seed. Keying on the configuration and
the data's shapes alone (what the examples' ``--fit-cache`` did) silently returns a fit of
other data of the same size; keying on a checkpoint path alone returned a Q = 2 model when
Q = 3 was asked for. :func:`fingerprint` hashes the bytes of every array together with its
dtype and shape, and every other value through its ``repr``, so any change gives a new key.
(Used by :func:`tandem.inference.mcgpds.fit.cached_fit` and ``fit_mcgpds(checkpoint=...)``.)
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, is_dataclass

import numpy as np
import torch

__all__ = ["fingerprint"]


def _feed(h, x) -> None:
    """Feed a canonical byte form of ``x`` (arrays by content, containers recursively)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().contiguous().numpy()
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        h.update(f"array{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    elif is_dataclass(x) and not isinstance(x, type):
        h.update(type(x).__name__.encode())
        _feed(h, asdict(x))
    elif isinstance(x, dict):
        h.update(b"dict{")
        for k in sorted(x, key=str):
            _feed(h, str(k))
            _feed(h, x[k])
        h.update(b"}")
    elif isinstance(x, (list, tuple)):
        h.update(f"{type(x).__name__}[".encode())
        for v in x:
            _feed(h, v)
        h.update(b"]")
    elif isinstance(x, (frozenset, set)):
        _feed(h, sorted(x, key=repr))
    else:
        h.update(repr(x).encode())
    h.update(b";")


def fingerprint(*objs) -> str:
    """SHA-256 hex digest of the contents of ``objs`` (arrays, tensors, dataclasses, dicts,
    lists and scalars; arrays by their values, dtype and shape)."""
    h = hashlib.sha256()
    for o in objs:
        _feed(h, o)
    return h.hexdigest()
