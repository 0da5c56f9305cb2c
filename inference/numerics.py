"""Shared numerics for the GP code: float64 by default, Cholesky with escalating jitter.

Every kernel matrix in tandem is factorised through :func:`cholesky_jitter`; nothing
calls ``inverse()`` or ``det()`` on a kernel. Solves go through
``torch.linalg.solve_triangular`` / ``torch.cholesky_solve`` on the factor.
"""
from __future__ import annotations

import torch

#: dtype of all GP algebra in tandem.
DTYPE = torch.float64


class NotPositiveDefiniteError(ValueError):
    """Raised when a matrix is not symmetric positive definite: asymmetric, or still not positive
    definite after the largest jitter."""


def _max_asymmetry(K: torch.Tensor) -> torch.Tensor:
    """max |K − Kᵀ| over the batch, in row blocks so that no second n×n copy of a large K is held."""
    if K.numel() <= 1 << 22:            # small: one pass (the common case; per-op overhead dominates)
        return (K - K.mT).abs().amax()
    n = K.shape[-1]
    step = max(1, (1 << 22) // max(1, K[..., 0, :].numel()))   # about 4M entries per block
    return torch.stack([(K[..., i:i + step, :] - K[..., :, i:i + step].mT).abs().amax()
                        for i in range(0, n, step)]).amax()


def _not_finite(name: str, K: torch.Tensor) -> NotPositiveDefiniteError:
    return NotPositiveDefiniteError(f"{name}: contains NaN or inf entries (shape {tuple(K.shape)})")


def cholesky_jitter(K: torch.Tensor, name: str = "matrix", jitter: float = 1e-8,
                    max_tries: int = 7, growth: float = 10.0, assume_symmetric: bool = False) -> torch.Tensor:
    """Lower Cholesky factor L with L Lᵀ = K + δI for the smallest δ that works.

    Tries δ = 0, then ``jitter · mean(|diag K|)`` multiplied by ``growth`` on each retry, at most
    ``max_tries`` times. One δ is used for the whole batch so that batched results stay
    comparable. The jitter is relative to the scale of the diagonal, so a matrix whose diagonal is all
    zero (the zero matrix, if it is positive semi-definite) has no scale to set δ by and is refused
    in every dtype, rather than "factorised" with a δ of the order of the dtype's smallest number.

    K must be symmetric: only its lower triangle is read by the factorisation, so an asymmetric K
    would silently be replaced by its lower triangle's symmetric completion. It is checked to
    max |K − Kᵀ| ≤ ε^⅓ · max |K| over the batch (ε the dtype's machine epsilon: 6.1e-6 in float64,
    4.9e-3 in float32): far above round-off, even that of products such as L⁻¹ Ψ L⁻ᵀ that are
    symmetric only up to it (≤ 2.2e-10 relative over the McGPDS, twin-GP and coupled-projection test
    suites), and far below the O(1) asymmetry of a wrong or transposed block. The check reads K
    twice more and costs about as much as the factorisation of a small batched K, so internal
    callers that build K symmetric by construction skip it (``assume_symmetric=True``).

    Parameters
    ----------
    K : torch.Tensor
        (..., n, n) symmetric matrices of a real floating dtype.
    name : str, default "matrix"
        What K is, for the error message.
    jitter : float, default 1e-8
        First relative jitter, a finite real > 0.
    max_tries : int, default 7
        Number of jitter values tried after δ = 0, an integer ≥ 0 (0: no jitter, plain Cholesky).
    growth : float, default 10.0
        Factor between successive jitters, a finite real > 1.
    assume_symmetric : bool, default False
        Skip the symmetry check: for a K symmetric by construction, such as a matrix already
        checked (or made by ``torch.cholesky_inverse``, which is exactly symmetric) plus a
        diagonal, or such a matrix scaled by one diagonal on both sides. The caller vouches for it.
        NaN and inf entries are then found from the factorisation (a failed pivot or a
        non-finite diagonal of L) rather than by a pass over K, with the same error.

    Returns
    -------
    torch.Tensor
        (..., n, n) lower factor L.

    Raises
    ------
    ValueError
        Naming the argument: K not a tensor (numpy input: convert with ``torch.as_tensor``), not of a
        real floating dtype, of fewer than 2 dimensions or not square (naming ``name``); ``jitter``,
        ``max_tries`` or ``growth`` outside their ranges.
    NotPositiveDefiniteError
        (a ``ValueError``) naming ``name`` and its shape, when K is not symmetric, has NaN/inf
        entries, has an all-zero diagonal, or remains indefinite (then with the largest jitter
        tried). Callers that reject a line-search trial point on this error reject an asymmetric
        matrix alike.
    """
    from tandem.inference.validation import check_int_range, check_real_range  # validation imports this module
    check_real_range(jitter, "jitter", low=0.0, low_open=True)
    check_real_range(growth, "growth", low=1.0, low_open=True)
    check_int_range(max_tries, "max_tries", low=0)
    if not isinstance(assume_symmetric, bool):
        raise ValueError(f"assume_symmetric: expected a bool, got {type(assume_symmetric).__name__}")
    if not isinstance(K, torch.Tensor):
        raise ValueError(f"{name}: expected a torch tensor (..., n, n), got {type(K).__name__} "
                         "(convert with torch.as_tensor(K, dtype=torch.float64))")
    if not K.dtype.is_floating_point:
        raise ValueError(f"{name}: expected a real floating-point tensor, got dtype {K.dtype}")
    if K.dim() < 2 or K.shape[-1] != K.shape[-2]:
        raise ValueError(f"{name}: expected a square matrix (..., n, n), got shape {tuple(K.shape)}")
    # one reduction pass first (a NaN/inf entry makes the sum non-finite); the exact
    # element-wise test, ~30x slower on large batched K, only when the sum is not finite.
    # A K symmetric by construction is checked after the factorisation instead (see below)
    if not assume_symmetric and not torch.isfinite(K.sum()) and not torch.isfinite(K).all():
        raise _not_finite(name, K)
    if K.numel() and not assume_symmetric:
        with torch.no_grad():
            asym = _max_asymmetry(K)
            kmax = K.abs().amax() if K.numel() <= 1 << 22 else torch.maximum(K.amax(), -K.amin())
            bad = bool(asym > torch.finfo(K.dtype).eps ** (1 / 3) * kmax)   # one device sync
        if bad:
            asym, kmax = asym.item(), kmax.item()
            raise NotPositiveDefiniteError(
                f"{name}: expected a symmetric matrix, got max |K − Kᵀ| = {asym:.3g} against max |K| = {kmax:.3g} "
                f"(shape {tuple(K.shape)}); only the lower triangle would be used. Symmetrise it, e.g. "
                "(K + K.mT) / 2, if the asymmetry is round-off")
    L, info = torch.linalg.cholesky_ex(K)
    if not info.any():
        # Without the pass over K: a NaN anywhere in the lower triangle (so, K being symmetric,
        # anywhere) or an infinite off-diagonal entry makes a later pivot NaN or −inf, which
        # the factorisation reports; an infinite diagonal entry gives an infinite diagonal of L
        if assume_symmetric and not bool(torch.isfinite(L.diagonal(dim1=-2, dim2=-1)).all()):
            raise _not_finite(name, K)
        return L
    if assume_symmetric and not bool(torch.isfinite(K).all()):
        raise _not_finite(name, K)
    n = K.shape[-1]
    scale = K.diagonal(dim1=-2, dim2=-1).abs().mean().item()
    if scale == 0.0:
        raise NotPositiveDefiniteError(
            f"{name}: not positive definite (shape {tuple(K.shape)}) and its diagonal is all zero, so there is no "
            "scale for a relative jitter; check the kernel variances")
    if max_tries == 0:
        raise NotPositiveDefiniteError(
            f"{name}: not positive definite (shape {tuple(K.shape)}); no jitter was tried (max_tries=0)")
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


def set_seed(seed, name: str = "seed") -> int:
    """Seed Pyro's, torch's, numpy's and Python's global RNGs from a user seed; the package's one seeding call.

    ``pyro.set_rng_seed`` hands the seed to ``random.seed``, which refuses numpy integers
    (``np.int64(5)``, what numpy code produces); the seed is validated
    (:func:`~tandem.inference.validation.check_seed`) and passed on as a Python ``int``, so the
    streams are those of ``pyro.set_rng_seed(int(seed))``.

    Parameters
    ----------
    seed : int
        A Python or numpy integer in [0, 2³² − 1].
    name : str, default "seed"
        The argument's name, used in the message.

    Returns
    -------
    int
        The seed as a Python ``int``.

    Raises
    ------
    ValueError
        Naming ``name``, for a bool, a non-integer or a value outside [0, 2³² − 1].
    """
    import pyro

    from tandem.inference.validation import check_seed  # validation imports this module
    s = check_seed(seed, name)
    pyro.set_rng_seed(s)
    return s


def seeded_generator(seed, name: str = "seed") -> torch.Generator:
    """A new CPU ``torch.Generator`` seeded with ``seed`` (``Generator.manual_seed`` refuses numpy integers).

    Parameters
    ----------
    seed : int
        A Python or numpy integer in [0, 2³² − 1].
    name : str, default "seed"
        The argument's name, used in the message.

    Returns
    -------
    torch.Generator
        ``torch.Generator().manual_seed(int(seed))``.

    Raises
    ------
    ValueError
        Naming ``name``, as :func:`set_seed`.
    """
    from tandem.inference.validation import check_seed
    return torch.Generator().manual_seed(check_seed(seed, name))


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
