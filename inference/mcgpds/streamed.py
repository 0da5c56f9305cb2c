"""The streamed exact collapsed bound: working memory that does not grow with N.

The collapsed bound (:func:`tandem.inference.mcgpds.bound.collapsed_bound`) is a sum over
frames (ψ-statistics) and over sequences (the KL's block-diagonal algebra). Both are
accumulated in chunks, each chunk under a non-reentrant :func:`torch.utils.checkpoint.checkpoint`
so that autograd keeps only the chunk's inputs and recomputes its intermediates in the
backward pass:

* **ψ-statistics** — :func:`tandem.models.gp_kernels.psi_stream`: ``ψ0``, ``Ψ1ᵀ Y`` (M, D) and
  ``Ψ2`` (M, M) summed over :data:`tandem.models.gp_kernels.PSI_CHUNK` frames at a time
  (O(chunk·M + M²) instead of the (N, M) Ψ1 and its autograd copies).
* **KL and private covariances** — :func:`tandem.inference.mcgpds.bound.latent_terms` takes the
  blocks (sequences) of each size group :func:`blocks_per_chunk` at a time, so the
  (V, Q, blocks, n, n) stacks (``A``, ``A⁻¹``, the private covariances ``S`` and their factors)
  exist for one chunk only: O(V·Q·n²) for the largest block n instead of O(V·Q·N·n).
* the cached prior factors (α, ε and the time kernels fixed) are kept only within
  :data:`PRIOR_CACHE_MB`; beyond it they are recomputed each evaluation.

The result is the same bound (the same operations; only the order of a few additions
differs), value and gradient, so the fits use it unchanged. With one chunk per group and
N ≤ ``PSI_CHUNK`` (e.g. human pose, 566 frames) nothing is checkpointed: the computation is
the unstreamed one, bit for bit. :func:`unstreamed` restores the old, all-at-once path (for
comparisons and the tests). Peak resident memory of one value + gradient is measured by
``examples/bench_scale.py --mem-check``.
"""
from __future__ import annotations

import contextlib
import math

from tandem.models import gp_kernels

__all__ = ["KL_CHUNK_MB", "PRIOR_CACHE_MB", "blocks_per_chunk", "unstreamed", "streaming"]

#: target size (MB) of one chunk's (V, Q, blocks, n, n) float64 stack in the KL; ``0`` or
#: ``inf`` = every group at once (the old path)
KL_CHUNK_MB = 64.0
#: most memory (MB) the cached prior factors (α, ε, time kernels fixed) may take on one ``Blocks``
PRIOR_CACHE_MB = 256.0


def blocks_per_chunk(V: int, Q: int, n: int, nb: int) -> int:
    """Blocks of size ``n`` (of ``nb`` in the group) per KL chunk.

    The largest stack of a chunk of b blocks is the (V, Q, b, n, n) private covariances:
    ``8 V Q b n²`` bytes; b is the largest that keeps it within :data:`KL_CHUNK_MB` (at least 1,
    at most ``nb``).

    Parameters
    ----------
    V, Q, n, nb : int
        Views, latent dimensions, (padded) block size and number of blocks in the group.

    Returns
    -------
    int
        Blocks per chunk, ``1 ≤ b ≤ nb``.

    Raises
    ------
    ValueError
        :data:`KL_CHUNK_MB` negative or NaN.
    """
    mb = float(KL_CHUNK_MB)
    if not mb >= 0:
        raise ValueError(f"KL_CHUNK_MB: expected a non-negative size in MB (0 or inf: unchunked), got {mb}")
    if mb == 0 or math.isinf(mb):
        return max(int(nb), 1)
    per_block = 8.0 * V * Q * n * n
    return int(min(max(int(nb), 1), max(1, int(mb * 2 ** 20 // per_block))))


@contextlib.contextmanager
def streaming(psi_chunk: int | None = None, kl_chunk_mb: float | None = None,
              prior_cache_mb: float | None = None):
    """Temporarily set the chunk sizes (``None`` leaves a setting as it is).

    Parameters
    ----------
    psi_chunk : int, optional
        Frames per ψ-statistics chunk (:data:`tandem.models.gp_kernels.PSI_CHUNK`; 0 = unchunked).
    kl_chunk_mb : float, optional
        :data:`KL_CHUNK_MB` (0 = unchunked).
    prior_cache_mb : float, optional
        :data:`PRIOR_CACHE_MB`.

    Raises
    ------
    ValueError
        A negative setting.
    """
    global KL_CHUNK_MB, PRIOR_CACHE_MB
    for name, v in (("psi_chunk", psi_chunk), ("kl_chunk_mb", kl_chunk_mb), ("prior_cache_mb", prior_cache_mb)):
        if v is not None and not float(v) >= 0:
            raise ValueError(f"{name}: expected a non-negative value, got {v!r}")
    old = (gp_kernels.PSI_CHUNK, KL_CHUNK_MB, PRIOR_CACHE_MB)
    try:
        if psi_chunk is not None:
            gp_kernels.PSI_CHUNK = int(psi_chunk)
        if kl_chunk_mb is not None:
            KL_CHUNK_MB = float(kl_chunk_mb)
        if prior_cache_mb is not None:
            PRIOR_CACHE_MB = float(prior_cache_mb)
        yield
    finally:
        gp_kernels.PSI_CHUNK, KL_CHUNK_MB, PRIOR_CACHE_MB = old


def unstreamed():
    """Context manager: the old all-at-once collapsed bound (every frame and every block in one
    pass, the prior factors always cached), for comparisons with the streamed default."""
    return streaming(psi_chunk=0, kl_chunk_mb=0.0, prior_cache_mb=math.inf)
