"""Shared numerics for the GP code: float64 by default, Cholesky with escalating jitter.

Every kernel matrix in tandem is factorised through :func:`cholesky_jitter`; nothing
calls ``inverse()`` or ``det()`` on a kernel. Solves go through
``torch.linalg.solve_triangular`` / ``torch.cholesky_solve`` on the factor.
"""
from __future__ import annotations

import numpy as np
import torch

#: dtype of all GP algebra in tandem.
DTYPE = torch.float64


class NotPositiveDefiniteError(ValueError):
    """Raised when a matrix is still not positive definite after the largest jitter."""


def cholesky_jitter(K: torch.Tensor, name: str = "matrix", jitter: float = 1e-8,
                    max_tries: int = 7, growth: float = 10.0) -> torch.Tensor:
    """Lower Cholesky factor L with L Lᵀ = K + δI for the smallest δ that works.

    Tries δ = 0, then ``jitter · mean(diag K)`` multiplied by ``growth`` on each retry, at most
    ``max_tries`` times. One δ is used for the whole batch so that batched results stay
    comparable.

    Parameters
    ----------
    K : torch.Tensor
        (..., n, n) symmetric matrices.
    name : str, default "matrix"
        What K is, for the error message.
    jitter : float, default 1e-8
        First relative jitter.
    max_tries : int, default 7
        Number of jitter values tried after δ = 0.
    growth : float, default 10.0
        Factor between successive jitters.

    Returns
    -------
    torch.Tensor
        (..., n, n) lower factor L.

    Raises
    ------
    NotPositiveDefiniteError
        (a ``ValueError``) naming ``name``, its shape and the largest jitter tried, when K has
        NaN/inf entries or remains indefinite.
    """
    if K.shape[-1] != K.shape[-2]:
        raise ValueError(f"{name}: expected a square matrix (..., n, n), got shape {tuple(K.shape)}")
    # one reduction pass first (a NaN/inf entry makes the sum non-finite); the exact
    # element-wise test, ~30x slower on large batched K, only when the sum is not finite
    if not torch.isfinite(K.sum()) and not torch.isfinite(K).all():
        raise NotPositiveDefiniteError(f"{name}: contains NaN or inf entries (shape {tuple(K.shape)})")
    L, info = torch.linalg.cholesky_ex(K)
    if not info.any():
        return L
    n = K.shape[-1]
    scale = K.diagonal(dim1=-2, dim2=-1).abs().mean().clamp_min(1e-300).item()
    eye = torch.eye(n, dtype=K.dtype, device=K.device)
    delta = jitter * scale
    for _ in range(max_tries):
        L, info = torch.linalg.cholesky_ex(K + delta * eye)
        if not info.any():
            return L
        delta *= growth
    raise NotPositiveDefiniteError(
        f"{name}: not positive definite (shape {tuple(K.shape)}) even with jitter "
        f"{delta / growth:.3g} added to the diagonal; check the kernel hyperparameters "
        f"and inputs for duplicates, NaN or extreme scales")


def cho_solve(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Solve (L Lᵀ) X = B given the lower Cholesky factor L.

    Parameters
    ----------
    L : torch.Tensor
        (..., n, n) lower Cholesky factor.
    B : torch.Tensor
        (..., n, k) right-hand sides.

    Returns
    -------
    torch.Tensor
        (..., n, k) solution X.
    """
    return torch.cholesky_solve(B, L)


def cho_logdet(L: torch.Tensor) -> torch.Tensor:
    """log|L Lᵀ| = 2 Σ log diag L from the lower Cholesky factor.

    Parameters
    ----------
    L : torch.Tensor
        (..., n, n) lower Cholesky factor.

    Returns
    -------
    torch.Tensor
        (...,) log-determinants.
    """
    return 2.0 * L.diagonal(dim1=-2, dim2=-1).log().sum(-1)


def tri_solve(L: torch.Tensor, B: torch.Tensor, upper: bool = False, left: bool = True) -> torch.Tensor:
    """Triangular solve L⁻¹B by ``torch.linalg.solve_triangular``.

    Parameters
    ----------
    L : torch.Tensor
        (..., n, n) triangular matrix, lower unless ``upper``.
    B : torch.Tensor
        (..., n, k) right-hand sides (or (..., k, n) with ``left=False``).
    upper : bool, default False
        L is upper triangular (pass ``L.mT`` of a lower factor to solve with Lᵀ, i.e. L⁻ᵀB).
    left : bool, default True
        Solve L X = B (``True``) or X L = B (``False``).

    Returns
    -------
    torch.Tensor
        The solution, B's shape.
    """
    return torch.linalg.solve_triangular(L, B, upper=upper, left=left)


_HEAP_LIMITED: bool | None = None


def limit_heap_fragmentation(threshold_mb: float = 1.0) -> bool:
    """Have glibc serve every allocation above ``threshold_mb`` by ``mmap`` (returned to the OS on free).

    glibc raises its mmap threshold dynamically (up to 32 MB) after the first large free, so
    the many same-sized temporaries of a streamed computation (chunks of the collapsed bound)
    are then carved from the heap, which fragments: resident memory grows with the number of
    chunks although only one chunk is live. A fixed threshold (``mallopt(M_MMAP_THRESHOLD)``)
    keeps resident memory at what is live. Process-wide and set once; called by the streamed
    bound only when a problem needs more than one chunk (large problems, where the extra page
    faults are negligible beside the O(n³) work per block). A no-op returning ``False`` where
    glibc is absent.

    Parameters
    ----------
    threshold_mb : float
        Allocations above this many MB are mmapped.

    Returns
    -------
    bool
        Whether the threshold is set (now or by an earlier call).

    Raises
    ------
    ValueError
        ``threshold_mb`` not positive.
    """
    global _HEAP_LIMITED
    if not threshold_mb > 0:
        raise ValueError(f"threshold_mb: expected a positive size in MB, got {threshold_mb!r}")
    if _HEAP_LIMITED is None:
        try:
            import ctypes
            libc = ctypes.CDLL("libc.so.6")
            _HEAP_LIMITED = bool(libc.mallopt(-3, int(threshold_mb * 2 ** 20)) == 1)   # M_MMAP_THRESHOLD
        except (OSError, AttributeError):
            _HEAP_LIMITED = False
    return _HEAP_LIMITED


def set_rng_seed(seed) -> None:
    """Seed Python's, numpy's, torch's and Pyro's generators (``pyro.set_rng_seed``).

    The one place the package seeds from a user's seed: numpy integers (``np.int64(0)``, what
    indexing an array of seeds gives) are accepted like Python ints, which ``random.seed``
    refuses from Python 3.11; bools and fractional values are refused.

    Parameters
    ----------
    seed : int or numpy integer
        A seed in [0, 2³²).

    Raises
    ------
    TypeError
        If ``seed`` is not an integer (or is a bool).
    ValueError
        If it lies outside [0, 2³²).
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected an integer in [0, 2**32), got {seed!r} of type {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed < 2 ** 32:
        raise ValueError(f"seed: expected an integer in [0, 2**32), got {seed}")
    import pyro  # here, not at the top: the leaf module stays importable without Pyro's start-up
    pyro.set_rng_seed(seed)
