"""The streamed exact collapsed bound: working memory that does not grow with N.

The collapsed bound (:func:`tandem.inference.mcgpds.bound.collapsed_bound`) is a sum over
frames (ψ-statistics) and over sequences (the KL's block-diagonal algebra). Both are
accumulated in chunks, each chunk under a non-reentrant :func:`torch.utils.checkpoint.checkpoint`
so that autograd keeps only the chunk's inputs and recomputes its intermediates in the
backward pass:

* **ψ-statistics** — :func:`tandem.models.gp_kernels.psi_stream`: ``ψ0``, ``Ψ1ᵀ Y`` (M, D) and
  ``Ψ2`` (M, M) summed over ``PSI_CHUNK_ENTRIES // M`` frames at a time
  (O(chunk·M + M²) instead of the (N, M) Ψ1 and its autograd copies).
* **KL and private covariances** — :func:`tandem.inference.mcgpds.bound.latent_terms` takes the
  blocks (sequences) of each size group :func:`blocks_per_chunk` at a time (when all groups'
  stacks together exceed :data:`KL_UNCHUNKED_MB`, :func:`kl_chunked`), so the
  (V, Q, blocks, n, n) stacks (``A``, ``A⁻¹``, the private covariances ``S`` and their factors)
  exist for one chunk only: O(V·Q·n²) for the largest block n instead of O(V·Q·N·n).
* the cached prior factors (α, ε and the time kernels fixed) are kept only within
  :data:`PRIOR_CACHE_MB`; beyond it they are recomputed each evaluation.

The result is the same bound (the same operations; only the order of a few additions
differs), value and gradient, so the fits use it unchanged. With one chunk per group and
N ≤ ``PSI_CHUNK_ENTRIES // M`` (e.g. human pose, 566 frames) nothing is checkpointed: the computation is
the unstreamed one, bit for bit. :func:`unstreamed` restores the old, all-at-once path (for
comparisons and the tests). Peak resident memory of one value + gradient is measured by
``examples/bench_scale.py --mem-check``.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from tandem.inference import extended_precision
from tandem.inference.extended_precision import LD
from tandem.inference.numerics import limit_heap_fragmentation
from tandem.models import gp_kernels

__all__ = ["KL_CHUNK_MB", "KL_UNCHUNKED_MB", "PRIOR_CACHE_MB", "STABLE_H", "STABLE_H_MIN_FRAMES",
           "EXTENDED_RESIDUAL",
           "H_CHUNK_FRAMES", "PAIR_BLOCK_ENTRIES", "PAIR_BLOCK_MIN_FRAMES", "pair_block_frames", "kl_chunked",
           "blocks_per_chunk", "unstreamed", "streaming", "h_term_stable", "use_stable_h"]

#: target size (MB) of one chunk's (V, Q, blocks, n, n) float64 stack in the KL; ``0`` or
#: ``inf`` = every group at once (the old path)
KL_CHUNK_MB = 64.0
#: the KL is chunked only when the (V, Q, blocks, n, n) stacks of all groups together exceed this
#: (MB): smaller problems run all at once, without the checkpoints' recomputation (≈ 1.3× faster;
#: the all-at-once evaluation peaks at ≈ 3.3× this stack)
KL_UNCHUNKED_MB = 384.0
#: most memory (MB) the cached prior factors (α, ε, time kernels fixed) may take on one ``Blocks``:
#: 40 MB per 1000-frame sequence with two views (A and A⁻¹ per view, and the shared-space operator G),
#: so 512 MB keeps every sequence of a problem that still runs its KL in one piece (≈ 10⁴ frames;
#: there the cache leaves the peak unchanged and makes an evaluation 2.8× cheaper); beyond it the
#: factors are rebuilt at every evaluation
PRIOR_CACHE_MB = 512.0


def kl_chunked(V: int, Q: int, shapes) -> bool:
    """Whether the KL is chunked.

    True when the (V, Q, blocks, n, n) stacks of all groups ((nb, n) in ``shapes``) exceed
    :data:`KL_UNCHUNKED_MB` in total and :data:`KL_CHUNK_MB` is finite and > 0.

    Parameters
    ----------
    V, Q : int
        Views and latent dimensions.
    shapes : iterable of (int, int)
        (blocks, padded block size) of every group.

    Returns
    -------
    bool
        Chunk the KL's blocks (:func:`blocks_per_chunk` per chunk).
    """
    mb = float(KL_CHUNK_MB)
    if mb == 0 or math.isinf(mb):
        return False
    total = sum(8.0 * V * Q * nb * n * n for nb, n in shapes)
    return total > float(KL_UNCHUNKED_MB) * 2 ** 20


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
              prior_cache_mb: float | None = None, kl_unchunked_mb: float | None = None):
    """Temporarily set the chunk sizes (``None`` leaves a setting as it is).

    Parameters
    ----------
    psi_chunk : int, optional
        Frames per ψ-statistics chunk (:data:`tandem.models.gp_kernels.PSI_CHUNK`; 0 = unchunked).
    kl_chunk_mb : float, optional
        :data:`KL_CHUNK_MB` (0 = unchunked).
    prior_cache_mb : float, optional
        :data:`PRIOR_CACHE_MB`.
    kl_unchunked_mb : float, optional
        :data:`KL_UNCHUNKED_MB` (0: chunk whenever a group has more than one chunk).

    Raises
    ------
    ValueError
        A negative setting.
    """
    global KL_CHUNK_MB, PRIOR_CACHE_MB, KL_UNCHUNKED_MB
    for name, v in (("psi_chunk", psi_chunk), ("kl_chunk_mb", kl_chunk_mb), ("prior_cache_mb", prior_cache_mb),
                    ("kl_unchunked_mb", kl_unchunked_mb)):
        if v is not None and not float(v) >= 0:
            raise ValueError(f"{name}: expected a non-negative value, got {v!r}")
    old = (gp_kernels.PSI_CHUNK, KL_CHUNK_MB, PRIOR_CACHE_MB, KL_UNCHUNKED_MB)
    try:
        if psi_chunk is not None:
            gp_kernels.PSI_CHUNK = int(psi_chunk)
        if kl_chunk_mb is not None:
            KL_CHUNK_MB = float(kl_chunk_mb)
        if prior_cache_mb is not None:
            PRIOR_CACHE_MB = float(prior_cache_mb)
        if kl_unchunked_mb is not None:
            KL_UNCHUNKED_MB = float(kl_unchunked_mb)
        yield
    finally:
        gp_kernels.PSI_CHUNK, KL_CHUNK_MB, PRIOR_CACHE_MB, KL_UNCHUNKED_MB = old


def unstreamed():
    """Context manager: the old all-at-once collapsed bound, for comparisons with the streamed default.

    Every frame and every block in one pass, the prior factors always cached
    (``streaming(psi_chunk=0, kl_chunk_mb=0, prior_cache_mb=inf)``).

    Returns
    -------
    contextlib.AbstractContextManager
        The :func:`streaming` context with those settings.
    """
    return streaming(psi_chunk=0, kl_chunk_mb=0.0, prior_cache_mb=math.inf)


# --------------------------------------------------------------------------- stable h term
#: the form of the h part of the view bound: ``True`` the least-squares form
#: :func:`h_term_stable`, ``False`` the normal equations of
#: :func:`tandem.inference.mcgpds.bound.view_bound`, ``"auto"`` (default) the least-squares form
#: for views of at least :data:`STABLE_H_MIN_FRAMES` frames with a built-in mapping kernel
#: (:func:`use_stable_h`). Measured at N = 10⁴ (M = 20, kernel and inducing inputs learned,
#: ``docs/mcgpds_bound_noise.py``): under 1e-9 parameter perturbations the normal equations
#: move the view term by up to 0.75 nats (2.1e-6 of |F|, 8 draws) and sit 0.26 nats from a
#: long-double reference; the least-squares form with its extended residual by 1.7e-4 nats
#: (4.9e-10), 9e-5 nats from the reference, at ≈ 3× the view term's time.
STABLE_H = "auto"
#: with ``STABLE_H = "auto"``: the fewest frames of a view that get :func:`h_term_stable`. The
#: normal equations' cancellation grows with N; below this (every real data set of the
#: project: human pose 566 frames, CUAVE 194) the faster normal equations are kept, so fits
#: and their recorded numbers there are unchanged. Fixed per problem (never switched with the
#: parameters), so an optimiser always sees one objective.
STABLE_H_MIN_FRAMES = 2000


def use_stable_h(kind, N: int) -> bool:
    """Whether the view bound uses :func:`h_term_stable` for its h part.

    Parameters
    ----------
    kind : MappingKernel or str
        The mapping kernel. The least-squares form has closed forms for the built-in RBF-ARD and
        linear-ARD kernels only (exactly those classes or their alias names): any other kernel
        object uses the normal equations.
    N : int
        Frames of the view.

    Returns
    -------
    bool
        :data:`STABLE_H` if it is a bool (a kernel without a closed form always False), else
        ``N ≥ STABLE_H_MIN_FRAMES``.

    Raises
    ------
    ValueError
        :data:`STABLE_H` neither a bool nor ``"auto"``.
    """
    from tandem.models.kernels import RBFARD, LinearARD
    mode = STABLE_H
    if not (isinstance(mode, bool) or mode == "auto"):
        raise ValueError(f"STABLE_H: expected True, False or 'auto', got {mode!r}")
    builtin = isinstance(kind, str) or type(kind) in (RBFARD, LinearARD)
    if not builtin or mode is False:
        return False
    return True if mode is True else int(N) >= int(STABLE_H_MIN_FRAMES)


#: whether :func:`h_term_stable` takes its residual ``‖R₂₂‖²`` from C carried beyond float64
#: (:func:`_residual_extended`, where ``longdouble`` is wider than float64:
#: :data:`tandem.inference.extended_precision.AVAILABLE`). The residual's sensitivity to C is
#: β UUᵀ with U the (ill-determined) weights of the normal equations, so one ulp of C in float64
#: moved the bound by ≈ 1e-9 of |F| at N = 10⁴; C's compensated sum, K/2 + βC, its factor and the
#: elimination against the frames' triangle then run in ``longdouble`` (M × M, M + D columns).
#: The value changes at the rounding level only; the gradient is float64's.
EXTENDED_RESIDUAL = True
#: frames per chunk of :func:`h_term_stable`'s Ψ1 and QR passes ((chunk, M) Ψ1 and (M + chunk,
#: M + D) QR updates, each chunk under a checkpoint when there are several); C = Ψ2 − Ψ1ᵀΨ1 is summed
#: by :class:`_PairCovSum` in cache-sized blocks of its own
H_CHUNK_FRAMES = 20_000
#: target (frame, pair) entries of one block of :class:`_PairCovSum` (2¹⁶: two 512-KB tables that
#: stay in a 2-MB L2 cache between their products, exp/expm1 and sums), and its fewest frames
#: (keeps the products from degenerating into vector operations at large M)
PAIR_BLOCK_ENTRIES = 2 ** 16
PAIR_BLOCK_MIN_FRAMES = 32


def pair_block_frames(P: int) -> int:
    """Frames per block of :class:`_PairCovSum`.

    Parameters
    ----------
    P : int
        Pairs per frame, M(M+1)/2.

    Returns
    -------
    int
        ``max(PAIR_BLOCK_MIN_FRAMES, PAIR_BLOCK_ENTRIES // P)`` (312 at M = 20, 32 at M = 100).
    """
    return max(int(PAIR_BLOCK_MIN_FRAMES), int(PAIR_BLOCK_ENTRIES) // max(int(P), 1), 1)


class _PairCovSum(torch.autograd.Function):
    """``c_p = Σ_n exp(a_np) expm1(δ_np)`` over the pairs p = (m ≤ m') of M inducing inputs: (N, P) -> (P,), (P,).

    ``a = Fa GaT`` and, for the frames of block b (centre c_b), ``δ = Fd_b G(Z − c_b)`` with the
    pair features ``G(Z') = [z̄', z'_m z'_m', z̄'², 1]`` (Kd = 3Q + 1 rows; z̄' = (z'_m + z'_m')/2).

    Returns ``(c, lo)``: c rounded to float64 and the part of the compensated sum that float64
    cannot hold (``c + lo`` is the sum to about ε² relative, up to the blocks' own rounding;
    ``lo`` carries no gradient).

    Fa (N, Ka), GaT (Ka, P), Fd (N, Kd), Z (M, Q), centres (blocks, Q) constant: both exponents
    are low-rank products of per-frame and per-pair features (a constant rides along as a column
    of ones), so no (N, P) table is gathered or kept. The frames are taken
    :func:`pair_block_frames` at a time: each (b, P) block of ``a`` and ``δ`` is written by one
    product, exponentiated in place, multiplied and summed over its rows while it is in cache. The
    δ features are centred per block (the caller centres Fd's rows on the same c_b) so that the
    products stay small where δ is: the expansion's rounding is ε·|μ − c_b|·|z − c_b|, not ε·|μ|·|z|.
    Only the inputs are saved; the backward recomputes each block:

        ∂c_p/∂a_np = E_np X_np,   ∂c_p/∂δ_np = E_np (X_np + 1)   (E = exp a, X = expm1 δ),

    so with the upstream gradient ḡ (P,) scaling the pair side,
    ``∂Fa_b = (E∘X)_b (ḡ ∘ GaT)ᵀ``, ``∂Fd_b = (E∘e^δ)_b (ḡ ∘ G_b)ᵀ``,
    ``∂GaT = ḡ ∘ Σ_b Fa_bᵀ (E∘X)_b``, and Z's gradient from ``Σ_b Fd_bᵀ (E∘e^δ)_b`` through G,
    whose rows are linear in c_b once differentiated (so the per-block centres enter through one
    more accumulated product, of the c-weighted frame features).

    Hand-written because autograd over the same expression keeps every (N, P) intermediate (or,
    under a checkpoint, recomputes them through memory): measured at 10⁵ frames, M = 20, one
    value + gradient of C took 1.56 CPU s chunked and checkpointed against 0.37 s here.
    """

    @staticmethod
    def block_frames(N, P):
        """Frames per block for N frames and P pairs (the caller centres Fd on these blocks)."""
        return min(pair_block_frames(P), max(N, 1))

    @staticmethod
    def blocks(Fa, GaT, Fd, Z, centres):
        """Yield ``(rows, Gd, E, X)`` per block of frames: ``E = exp(Fa GaT)`` and
        ``X = expm1(Fd Gd)`` of those rows with the block's pair features ``Gd = G(Z − c_b)``
        (3Q + 1, P), all three in reused buffers (valid until the next block)."""
        from tandem.models.gp_kernels import _pairs
        N, P = Fa.shape[0], GaT.shape[1]
        Q = Z.shape[1]
        im, ip, _ = _pairs(Z.shape[0], Z.device)
        b = _PairCovSum.block_frames(N, P)
        if centres.shape[0] != -(-N // b):
            raise ValueError(f"centres: expected {-(-N // b)} blocks of {b} frames, got {centres.shape[0]}")
        zm, zp = Z[im].mT.contiguous(), Z[ip].mT.contiguous()                  # (Q, P)
        zb = 0.5 * (zm + zp)
        Gd = GaT.new_empty(3 * Q + 1, P)
        Gd[3 * Q] = 1.0
        tm, tp = torch.empty_like(zm), torch.empty_like(zp)
        bufa, bufd = GaT.new_empty(b, P), GaT.new_empty(b, P)
        for k, i in enumerate(range(0, N, b)):
            n = min(b, N - i)
            c = centres[k][:, None]                                            # (Q, 1)
            torch.sub(zb, c, out=Gd[:Q])                                       # z̄ − c
            torch.mul(torch.sub(zm, c, out=tm), torch.sub(zp, c, out=tp), out=Gd[Q:2 * Q])
            torch.mul(Gd[:Q], Gd[:Q], out=Gd[2 * Q:3 * Q])                     # (z̄ − c)²
            yield (slice(i, i + n), Gd, torch.mm(Fa[i:i + n], GaT, out=bufa[:n]).exp_(),
                   torch.mm(Fd[i:i + n], Gd, out=bufd[:n]).expm1_())

    @staticmethod
    def forward(ctx, Fa, GaT, Fd, Z, centres):
        # the blocks' sums are accumulated with their rounding errors (Neumaier's two-sum): ``hi``
        # is c rounded once, ``lo`` the rest (non-differentiable), for the callers that carry c
        # further than float64 (:func:`h_term_stable`'s extended residual); a plain running sum
        # would round once more at every block
        hi, lo = GaT.new_zeros(GaT.shape[1]), GaT.new_zeros(GaT.shape[1])
        for _, _, E, X in _PairCovSum.blocks(Fa, GaT, Fd, Z, centres):
            b = E.mul_(X).sum(0)
            s = hi + b
            bv = s - hi
            lo += (hi - (s - bv)) + (b - bv)
            hi = s
        s = hi + lo
        lo = lo - (s - hi)
        ctx.save_for_backward(Fa, GaT, Fd, Z, centres)
        ctx.mark_non_differentiable(lo)
        return s, lo

    @staticmethod
    def backward(ctx, gc, _glo):
        from tandem.models.gp_kernels import _pairs
        Fa, GaT, Fd, Z, centres = ctx.saved_tensors
        Q = Z.shape[1]
        need_f = ctx.needs_input_grad[0] or ctx.needs_input_grad[2]
        need_g = ctx.needs_input_grad[1] or ctx.needs_input_grad[3]
        ga_s = (GaT * gc).mT                                          # (P, Ka): ḡ scales the pair side
        dFa, dFd = (torch.empty_like(Fa), torch.empty_like(Fd)) if need_f else (None, None)
        dGa = dZ = None
        if need_g:
            dGa = torch.zeros_like(GaT)
            dGd = Fd.new_zeros(Fd.shape[1], GaT.shape[1])             # Σ_b Fd_bᵀ (E e^δ)_b
            dGc = Fd.new_zeros(2 * Q, GaT.shape[1])                   # the same, rows Q..3Q weighted by c_b
            N, b = Fa.shape[0], _PairCovSum.block_frames(Fa.shape[0], GaT.shape[1])
            cw = Fd[:, Q:3 * Q] * centres.repeat_interleave(b, 0)[:N].repeat(1, 2)
        for rows, Gd, E, X in _PairCovSum.blocks(Fa, GaT, Fd, Z, centres):
            X.mul_(E)                                                # E (e^δ − 1): ∂/∂a
            E.add_(X)                                                # E e^δ: ∂/∂δ
            if need_f:
                torch.mm(X, ga_s, out=dFa[rows])
                torch.mm(E, (Gd * gc).mT, out=dFd[rows])
            if need_g:
                dGa.addmm_(Fa[rows].mT, X)
                dGd.addmm_(Fd[rows].mT, E)
                dGc.addmm_(cw[rows].mT, E)
        if need_g:
            dGa = dGa * gc
            dGd, dGc = dGd * gc, dGc * gc
            im, ip, _ = _pairs(Z.shape[0], Z.device)
            zb = 0.5 * (Z[im] + Z[ip])                                       # (P, Q)
            g0, g1, g2 = dGd[:Q].mT, dGd[Q:2 * Q].mT, dGd[2 * Q:3 * Q].mT     # (P, Q) each
            c1, c2 = dGc[:Q].mT, dGc[Q:].mT
            # rows z̄ − c, (z_m − c)(z_m' − c), (z̄ − c)²: ∂/∂z_m = ½, z_m' − c, z̄ − c (and m ↔ m')
            common = 0.5 * g0 + zb * g2 - c2
            dZ = torch.zeros_like(Z)
            dZ.index_add_(0, im, common + Z[ip] * g1 - c1)
            dZ.index_add_(0, ip, common + Z[im] * g1 - c1)
        return dFa, dGa, dFd, dZ, None


def _cov_rbf_matrix(mu, s, Z, variance, ard, extended=False):
    """``C = Σ_n (⟨k_n k_nᵀ⟩ − ⟨k_n⟩⟨k_n⟩ᵀ)`` (M, M) of some frames for the ARD RBF kernel, summed
    as ``Σ_n ψ1_nm ψ1_nm' expm1(δ_nmm')`` with ``δ = log ψ2_n,mm' − log ψ1_nm − log ψ1_nm'`` in
    closed form.

    With ``u = μ_n − z̄``, ``z̄ = (z_m + z_m')/2``, ``Δ = z_m − z_m'`` (so that
    ``(μ − z_m)² + (μ − z_m')² = 2u² + Δ²/2``), per latent dimension q

        δ = Σ_q [ a² s u² / ((1 + a s)(1 + 2 a s)) − a² s Δ² / (4 (1 + a s))
                  + ½ log1p(a² s² / (1 + 2 a s)) ].

    Every term is O(a s): δ is small where the posterior variance is small and is obtained
    without subtracting the O(1) exponents of ψ2 and ψ1ψ1 (their difference lost ≈ |log ψ|/|δ|
    ulps of δ, i.e. of C, which the data fit amplifies through the conditioning of K_ZZ).

    The first two terms nearly cancel where μ is close to z_m or z_m' (u² ≈ Δ²/4); with
    ``u² − Δ²/4 = (μ − z_m)(μ − z_m')`` they are evaluated as

        w₁ (μ − z_m)(μ − z_m') − w₂ u²,   w₁ = a² s/(1 + a s),   w₂ = 2 a³ s²/((1 + a s)(1 + 2 a s)),

    i.e. with the features ``[−2 α μ', w₁, −w₂, h + Σ α μ'²]`` of each frame (α = w₁ − w₂, the
    first coefficient above; h the log1p term) against ``[z̄', z'_m z'_m', z̄'², 1]`` of each pair,
    all coordinates taken from the centre of the frame's block (μ' = μ − c_b, z' = z − c_b; the
    block's mean μ, a constant): the terms are then as small as δ where δ is small (measured at
    N = 10⁴ on the benchmark's data: C within 140 ulps of a long-double evaluation against 450
    with the plain expansion).

    Both ``log(ψ1_nm ψ1_nm'/σ⁴) = 2 g_n + [c μ, −½ c]_n · ([z, z²]_m + [z, z²]_m')`` (c = a/(1 + a s))
    and δ are products of per-frame and per-pair features, summed by :class:`_PairCovSum`
    over the M(M+1)/2 pairs m ≤ m' (C is symmetric).
    """
    from tandem.models.gp_kernels import _pairs
    M, N = Z.shape[0], mu.shape[0]
    d1, F1, g1 = _psi1_frame_side(mu, s, ard)
    d2 = 1.0 + 2.0 * ard * s
    a2s = ard * ard * s
    w1 = a2s / d1
    al = w1 / d2                                                                      # (N, Q)
    w2 = 2.0 * ard * s * al
    im, ip, full = _pairs(M, Z.device)
    G1 = torch.cat([Z, Z * Z], 1)                                                     # (M, 2Q)
    ones = Z.new_ones(im.numel(), 1)
    Fa = torch.cat([F1, 2.0 * g1[:, None]], 1)                                        # (N, 2Q + 1)
    GaT = torch.cat([G1[im] + G1[ip], ones], 1).mT.contiguous()                      # (2Q + 1, P)
    b = _PairCovSum.block_frames(N, im.numel())
    nb = -(-N // b)
    pad = mu.detach().new_zeros(nb * b, mu.shape[1])
    pad[:N] = mu.detach()
    counts = torch.full((nb, 1), float(b), dtype=mu.dtype, device=mu.device)
    counts[-1] = N - (nb - 1) * b
    centres = pad.reshape(nb, b, -1).sum(1) / counts                                  # (blocks, Q), constant
    mc = mu - centres.repeat_interleave(b, 0)[:N]
    h = 0.5 * torch.log1p(a2s * s / d2).sum(-1) + (al * mc * mc).sum(-1)             # (N,)
    Fd = torch.cat([-2.0 * al * mc, w1, -w2, h[:, None]], 1)                         # (N, 3Q + 1)
    Cp, lo = _PairCovSum.apply(Fa, GaT, Fd, Z, centres)
    C = (variance * variance) * Cp[full].reshape(M, M)
    if not extended:
        return C
    v = LD(float(variance.detach()) if torch.is_tensor(variance) else float(variance))
    c = Cp.detach().cpu().numpy().astype(LD) + lo.cpu().numpy().astype(LD)
    return C, (v * v) * c[full.cpu().numpy()].reshape(M, M)


def _psi1_part(kind, mu, s, Z, variance, ard):
    """Ψ1 (c, M) of a chunk of frames: ``log ψ1_nm = log σ² + g_n + [c μ, −½ c]_n · [z, z²]_m``
    (the frame side of :func:`_cov_rbf_matrix`'s first exponent); for the linear kernel ``μ (Z a)ᵀ``."""
    if kind == "linear":
        return mu @ (Z * ard).T
    _, F1, g1 = _psi1_frame_side(mu, s, ard)
    return variance * torch.addmm(g1[:, None], F1, torch.cat([Z, Z * Z], 1).T).exp()


def _psi1_frame_side(mu, s, ard):
    """``(1 + a s, [c μ, −½ c], g)`` of some frames (c = a/(1 + a s)), where
    ``log(ψ1_nm/σ²) = g_n + [c μ, −½ c]_n · [z_m, z_m²]`` and ``g = −½ Σ_q (c μ² + log(1 + a s))``."""
    d1 = 1.0 + ard * s
    c1 = ard / d1
    g1 = -0.5 * (c1 * mu * mu).sum(-1) - 0.5 * d1.log().sum(-1)
    return d1, torch.cat([c1 * mu, -0.5 * c1], 1), g1


def _cov_matrix(kind, mu, s, Z, variance, ard, extended=False):
    """``C = Ψ2 − Ψ1ᵀΨ1`` (M, M) of some frames, summed without cancellation (see :func:`_cov_rbf_matrix`).

    With ``extended=True`` returns ``(C, C_ext)``: also C as a numpy ``longdouble`` array,
    carried beyond float64 (the pair sum's compensated remainder, the kernel's variance applied
    in ``longdouble``), no gradient.
    """
    if kind == "rbfard":
        return _cov_rbf_matrix(mu, s, Z, variance, ard, extended=extended)
    if kind == "linear":     # Ψ2 − Ψ1ᵀΨ1 = Σ_n (Z a) diag(s_n) (Z a)ᵀ exactly
        Za = Z * ard
        C = (Za * s.sum(0)) @ Za.T
        if not extended:
            return C
        za = Za.detach().cpu().numpy().astype(LD)
        return C, (za * s.detach().cpu().numpy().astype(LD).sum(0)) @ za.T
    raise ValueError(f"kind: expected 'rbfard' or 'linear', got {kind!r}")


def _residual_extended(Kzz, beta, C_ext, Rk):
    """``‖R₂₂‖²`` of :func:`h_term_stable` in ``longdouble``: ``min_U ‖[chol(K/2 + βC)ᵀ, 0; R_k] [U; −I]‖²``.

    K_ZZ, β and R_k (the float64 triangle of ``[chol(K/2)ᵀ, 0; √β Ψ1, √β Y]``) enter as they
    are; C, K/2 + βC, its Cholesky factor and the elimination are extended. None when K/2 + βC
    is not positive definite there.
    """
    M = Kzz.shape[0]
    b = LD(float(beta.detach() if torch.is_tensor(beta) else beta))
    L = extended_precision.cholesky(LD(0.5) * Kzz.detach().cpu().numpy().astype(LD) + b * C_ext)
    if L is None:
        return None
    Rk = Rk.detach().cpu().numpy()
    A = np.zeros((M + Rk.shape[0], Rk.shape[1]), dtype=LD)
    A[:M, :M] = L.T
    A[M:] = Rk
    return extended_precision.lstsq_residual(A, M)


def h_term_stable(kind: str, mu: torch.Tensor, s: torch.Tensor, Z: torch.Tensor, variance, ard,
                  Y: torch.Tensor, beta: torch.Tensor, Kzz: torch.Tensor, LK: torch.Tensor) -> torch.Tensor:
    """The h part of the collapsed view bound in a least-squares form free of large cancellations.

    The bound's h part (module :mod:`tandem.inference.mcgpds.bound`)

        −D/2 log|I + β L⁻¹Ψ2L⁻ᵀ| − β/2 ‖Y‖² + β²/2 tr(YᵀΨ1 (K + βΨ2)⁻¹ Ψ1ᵀY) + Dβ/2 (tr K⁻¹Ψ2 − ψ0)

    forms the normal equations ``K + βΨ2`` (condition ≈ 10¹³ at N = 10⁴ with an RBF K_ZZ at
    its 1e-6 jitter), and its two data terms (each ≈ 5·10⁶ nats there) cancel to 10⁴: a one-ulp
    change of Ψ2 moved the bound by 0.06 nats. With ``C = Ψ2 − Ψ1ᵀΨ1 = Σ_n Cov_n ⪰ 0`` the same
    quantity is

        −D/2 (log|K + βΨ2| − log|K|) − ½ min_U [β ‖Y − Ψ1 U‖² + tr Uᵀ(K + βC)U] + Dβ/2 (‖L⁻¹Ψ1ᵀ‖² + tr K⁻¹C − ψ0),

    and both the minimum and ``log|K + βΨ2| = log|R₁₁ᵀR₁₁|`` come from one QR factorisation of the
    stacked matrix ``[[chol(K + βC)ᵀ, 0], [√β Ψ1, √β Y]] = Q [[R₁₁, R₁₂], [0, R₂₂]]``: the
    residual is ``‖R₂₂‖²`` (no subtraction), and the QR works on the rows, with the square root of
    the normal equations' condition. ``C`` is summed as ``ψ1_m ψ1_m' expm1(δ)`` (see
    :func:`_cov_rbf_matrix`), so no large terms cancel there either; its (frames, pairs) tables
    exist one cache-sized block at a time (:class:`_PairCovSum`). Ψ1 is taken
    :data:`H_CHUNK_FRAMES` frames at a time, each chunk under a checkpoint when there are
    several: C and ‖L⁻¹Ψ1ᵀ‖² first, then the frames' rows are reduced chunk by chunk
    (``R_k ← R([R_k; rows])``) under ``[chol(K/2)ᵀ, 0]``, and ``[chol(K/2 + βC)ᵀ, 0]`` is
    stacked on the small triangle R_k last (the same R; K split in halves keeps the chunked QR
    full rank, which its backward needs).

    With :data:`EXTENDED_RESIDUAL` the residual's value comes from :func:`_residual_extended`:
    C (carried beyond float64 by the pair sum's compensated remainder), ``K/2 + βC``, its factor
    and the elimination against R_k in ``longdouble``; its gradient is float64's. The residual
    is the term most sensitive to C (through β UUᵀ, U the weights of the ill-conditioned normal
    equations): one float64 ulp of C moved it by 1e-9 of |F| at N = 10⁴.

    Parameters
    ----------
    kind : str
        ``"rbfard"`` or ``"linear"``.
    mu, s : torch.Tensor
        (N, Q) means and variances of q(X).
    Z : torch.Tensor
        (M, Q) inducing inputs.
    variance : torch.Tensor or None
        The kernel's variance (scalar, RBF only).
    ard : torch.Tensor
        (Q,) the kernel's ARD weights.
    Y : torch.Tensor
        (N, D) targets.
    beta : torch.Tensor
        Noise precision (scalar).
    Kzz, LK : torch.Tensor
        K_ZZ (M, M) (with its jitter) and its lower Cholesky factor.

    Returns
    -------
    torch.Tensor
        The h part (scalar), equal to the normal-equation form up to its rounding noise.

    Raises
    ------
    ValueError
        An unknown ``kind``, or :data:`EXTENDED_RESIDUAL` not a bool.
    """
    from tandem.inference.numerics import cho_logdet, cholesky_jitter
    N, D = Y.shape
    M = Z.shape[0]
    chunk = max(1, int(H_CHUNK_FRAMES))
    grad = torch.is_grad_enabled()
    many = N > chunk
    if many:
        limit_heap_fragmentation()
    if not isinstance(EXTENDED_RESIDUAL, bool):
        raise ValueError(f"EXTENDED_RESIDUAL: expected True or False, got {EXTENDED_RESIDUAL!r}")
    extended = EXTENDED_RESIDUAL and extended_precision.AVAILABLE
    C = _cov_matrix(kind, mu, s, Z, variance, ard, extended=extended)   # all frames; O(N·Q + block·P)
    C, C_ext = C if extended else (C, None)
    tr1 = None
    P1s = []
    for i in range(0, N, chunk):
        args = (kind, mu[i:i + chunk], s[i:i + chunk], Z, variance, ard)
        P1c = checkpoint(_psi1_part, *args, use_reentrant=False) if (many and grad) else _psi1_part(*args)
        W = torch.linalg.solve_triangular(LK, P1c.mT, upper=False)
        tr1 = (W * W).sum() if tr1 is None else tr1 + (W * W).sum()
        if not many:
            P1s.append(P1c)
    C = 0.5 * (C + C.mT)
    # K + βC split as K/2 + (K/2 + βC): the frames' rows are reduced under [chol(K/2)ᵀ, 0], which
    # keeps that QR full rank (its backward needs it; [√β Ψ1, √β Y] alone is rank deficient for a
    # linear kernel with M > Q), and the small triangle R_k is what the extended residual reuses
    Kc = 0.5 * Kzz + beta * C
    Lc, info = torch.linalg.cholesky_ex(Kc)
    if info.any():              # needed jitter: the extended residual would factorise another matrix
        Lc, C_ext = cholesky_jitter(Kc, "K_ZZ/2 + β(Ψ2 − Ψ1ᵀΨ1)"), None
    sb = beta.sqrt()

    def qr_step(R, mu_c, s_c, Y_c):
        P1c = P1s[0] if P1s else _psi1_part(kind, mu_c, s_c, Z, variance, ard)
        return torch.linalg.qr(torch.cat([R, torch.cat([sb * P1c, sb * Y_c], 1)], 0), mode="reduced")[1]

    Rk = torch.cat([math.sqrt(0.5) * LK.mT, Y.new_zeros(M, D)], 1)                 # (M, M + D)
    if not many:
        Rk = qr_step(Rk, mu, s, Y)
    else:
        for i in range(0, N, chunk):
            args = (Rk, mu[i:i + chunk], s[i:i + chunk], Y[i:i + chunk])
            Rk = checkpoint(qr_step, *args, use_reentrant=False) if grad else qr_step(*args)
    R = torch.linalg.qr(torch.cat([torch.cat([Lc.mT, Y.new_zeros(M, D)], 1), Rk], 0), mode="reduced")[1]
    R11, R22 = R[:M, :M], R[M:, M:]
    logdet = 2.0 * R11.diagonal().abs().log().sum() - cho_logdet(LK)
    resid = (R22 * R22).sum()
    if C_ext is not None:
        # the residual's value from C carried beyond float64 (its gradient stays float64's)
        r_ext = _residual_extended(Kzz, beta, C_ext, Rk)
        if r_ext is not None:
            resid = resid + (float(r_ext) - resid.detach())
    trC = torch.cholesky_solve(C, LK).diagonal().sum()
    psi0 = N * variance if kind == "rbfard" else ((mu * mu + s) * ard).sum()
    return -0.5 * D * logdet - 0.5 * resid + 0.5 * D * beta * (tr1 + trC - psi0)
