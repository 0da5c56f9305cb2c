"""Shared GP kernels and their ψ-statistics (float64, vectorised).

Kernels
-------
* ARD RBF  ``κ(x, x') = σ² exp(−½ Σ_q a_q (x_q − x'_q)²)``   (``a`` = inverse squared lengthscales)
* ARD linear ``κ(x, x') = Σ_q a_q x_q x'_q``
* RBF time kernel with optional white and bias terms
  ``k(t, t') = σ_t² exp(−½ γ (t − t')²) + σ_w² δ(t, t') + σ_b²`` — the authors' code uses
  ``rbf + white + bias`` for every temporal kernel.

ψ-statistics (Titsias & Lawrence 2010) of a kernel κ under ``q(x_n) = N(μ_n, diag s_n)``,
inducing inputs ``Z`` (M, Q):

* ``psi0 = Σ_n ⟨κ(x_n, x_n)⟩``                     (scalar)
* ``Psi1[n, m] = ⟨κ(x_n, z_m)⟩``                    (N, M)
* ``Psi2 = Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩``               (M, M)  (or per point: (N, M, M))

For the RBF ψ1 and ψ2 the squared distances are expanded, ``(μ − z̄)² = μ² − 2μz̄ + z̄²``,
so that the only (N, M) / (N, M(M+1)/2) work is one matrix product and one ``exp``
(no (N, M, Q) or (N, M, M, Q) tensor); ψ2 is summed over the pairs m ≤ m' only.
"""
from __future__ import annotations

import contextlib

import torch
from torch.utils.checkpoint import checkpoint

from tandem.inference.numerics import limit_heap_fragmentation

__all__ = ["kzz", "rbf_ard", "linear_ard", "time_kernel", "psi_rbf", "psi_linear", "kernel_matrix",
           "psi_stats", "psi_stream", "stream_psi_sums", "psi2_pair_path"]


def rbf_ard(X1: torch.Tensor, X2: torch.Tensor, variance: torch.Tensor, ard: torch.Tensor) -> torch.Tensor:
    """ARD RBF kernel matrix ``σ² exp(−½ Σ_q a_q (x_q − x'_q)²)``.

    Parameters
    ----------
    X1 : torch.Tensor
        (N1, Q) inputs.
    X2 : torch.Tensor
        (N2, Q) inputs.
    variance : torch.Tensor
        Scalar σ².
    ard : torch.Tensor
        (Q,) inverse squared lengthscales a_q.

    Returns
    -------
    torch.Tensor
        (N1, N2) kernel matrix.
    """
    s = ard.sqrt()
    A, B = X1 * s, X2 * s
    d2 = (A * A).sum(-1)[:, None] + (B * B).sum(-1)[None, :] - 2.0 * A @ B.T
    return variance * torch.exp(-0.5 * d2.clamp_min(0.0))


def linear_ard(X1: torch.Tensor, X2: torch.Tensor, ard: torch.Tensor) -> torch.Tensor:
    """ARD linear kernel ``X1 diag(a) X2ᵀ``.

    Parameters
    ----------
    X1 : torch.Tensor
        (N1, Q) inputs.
    X2 : torch.Tensor
        (N2, Q) inputs.
    ard : torch.Tensor
        (Q,) weights a_q.

    Returns
    -------
    torch.Tensor
        (N1, N2) kernel matrix.
    """
    return (X1 * ard) @ X2.T


def kernel_matrix(kind: str, X1, X2, variance, ard):
    """Kernel matrix of the mapping kernel named ``kind`` (:func:`rbf_ard` or :func:`linear_ard`).

    Parameters
    ----------
    kind : {"rbfard", "linear"}
        The kernel.
    X1 : torch.Tensor
        (N1, Q) inputs.
    X2 : torch.Tensor
        (N2, Q) inputs.
    variance : torch.Tensor or None
        Scalar σ² (unused for linear).
    ard : torch.Tensor
        (Q,) ARD weights.

    Returns
    -------
    torch.Tensor
        (N1, N2) kernel matrix.

    Raises
    ------
    ValueError
        An unknown ``kind``.
    """
    if kind == "rbfard":
        return rbf_ard(X1, X2, variance, ard)
    if kind == "linear":
        return linear_ard(X1, X2, ard)
    raise ValueError(f"mapping kernel: expected 'rbfard' or 'linear', got {kind!r}")


def time_kernel(t1: torch.Tensor, t2: torch.Tensor, variance, invwidth, white=None, bias=None,
                same: bool = True) -> torch.Tensor:
    """RBF time kernel over batched time vectors.

    ``k(t, t') = σ_t² exp(−½ γ (t − t')²) + σ_w² δ(t, t') + σ_b²``.

    Parameters
    ----------
    t1 : torch.Tensor
        (..., n1) time stamps.
    t2 : torch.Tensor
        (..., n2) time stamps.
    variance : torch.Tensor or float
        σ_t².
    invwidth : torch.Tensor or float
        Inverse width γ.
    white : torch.Tensor or float, optional
        σ_w²: adds ``σ_w² I`` (only when ``same``).
    bias : torch.Tensor or float, optional
        σ_b²: adds a constant.
    same : bool, default True
        ``t1`` and ``t2`` describe the same points (the white term applies).

    Returns
    -------
    torch.Tensor
        (..., n1, n2) kernel matrices.
    """
    d = t1[..., :, None] - t2[..., None, :]
    K = variance * torch.exp(-0.5 * invwidth * d * d)
    if bias is not None:
        K = K + bias
    if white is not None and same:
        K = K + white * torch.eye(t1.shape[-1], dtype=K.dtype, device=K.device)
    return K


def psi_rbf(mu: torch.Tensor, s: torch.Tensor, Z: torch.Tensor, variance: torch.Tensor,
            ard: torch.Tensor, per_point: bool = False):
    """ψ-statistics of the ARD RBF kernel.

    Parameters
    ----------
    mu : torch.Tensor
        (N, Q) means of q(x_n).
    s : torch.Tensor
        (N, Q) variances of q(x_n).
    Z : torch.Tensor
        (M, Q) inducing inputs.
    variance : torch.Tensor
        Scalar σ².
    ard : torch.Tensor
        (Q,) inverse squared lengthscales a_q.
    per_point : bool, default False
        Return Ψ2 per point (N, M, M) and ψ0 per point (N,).

    Returns
    -------
    tuple of torch.Tensor
        ``(psi0, Psi1, Psi2)``: scalar, (N, M) and (M, M) — or (N,), (N, M), (N, M, M) when
        ``per_point``.

    Notes
    -----
    ``Psi1[n,m] = σ² Π_q (1 + a_q s_nq)^{-½} exp(−½ a_q (μ_nq − z_mq)² / (1 + a_q s_nq))``
    ``Psi2[m,m'] = σ⁴ Σ_n Π_q (1 + 2a_q s_nq)^{-½}
                   exp(−a_q (z_mq − z_m'q)²/4 − a_q (μ_nq − z̄_q)² / (1 + 2 a_q s_nq))``,
    ``z̄ = (z_m + z_m')/2``.

    Both exponents are expanded so that their (N, M) / (N, pairs) parts are single matrix
    products (``(μ − z)² = μ² − 2μz + z²``, no (N, M, Q) tensor): with ``c1 = a/(1 + a s)``,
    ``log Psi1 = log σ² − ½ Σ log(1 + a s) − ½ Σ c1 μ² + [c1 μ, −½ c1] · [z, z²]``, and
    with ``c = a/(1 + 2 a s)``, ``Psi2`` needs ``Σ_n exp(g_n + [2 c μ, −c]_n · [z̄, z̄²]_p)``,
    ``g_n = −Σ_q c μ² − ½ Σ_q log(1 + 2 a s)``, only over the M(M+1)/2 pairs p = (m ≤ m')
    (ψ2 is symmetric) — see :class:`_BlockedPairExpSum` (the default, frames in
    blocks of :data:`PSI2_BLOCK`) and the unblocked :class:`_PairExpSum` (``PSI2_BLOCK = 0``).
    """
    N = mu.shape[0]
    Z2 = Z * Z
    # Psi1 (N, M): one (N, 2Q) x (2Q, M) product
    d1 = 1.0 + ard * s                                              # (N, Q)
    c1 = ard / d1
    g1 = -0.5 * (c1 * mu * mu).sum(-1) - 0.5 * d1.log().sum(-1)      # (N,)
    log1 = torch.addmm(g1[:, None], torch.cat([c1 * mu, -0.5 * c1], 1), torch.cat([Z, Z2], 1).T)
    Psi1 = variance * torch.exp(log1)
    d2 = 1.0 + 2.0 * ard * s                                         # (N, Q)
    c = ard / d2                                                     # (N, Q)
    g = -(c * mu * mu).sum(-1) - 0.5 * d2.log().sum(-1)              # (N,)
    zs = Z * ard.sqrt()
    dz2 = ((zs * zs).sum(-1)[:, None] + (zs * zs).sum(-1)[None, :] - 2.0 * zs @ zs.T).clamp_min(0.0)
    pref = (variance * variance) * torch.exp(-0.25 * dz2)            # (M, M)
    if per_point:
        e = (c * mu) @ Z.T - 0.25 * (c @ Z2.T)                       # (N, M)
        cross = torch.einsum("nq,mq,pq->nmp", c, Z, Z)               # (N, M, M)
        expo = g[:, None, None] + e[:, :, None] + e[:, None, :] - 0.5 * cross
        return variance.expand(N), Psi1, pref * torch.exp(expo)
    M = Z.shape[0]
    im, ip, full = _pairs(M, Z.device)
    zbar = 0.5 * (Z[im] + Z[ip])                                     # (P, Q)
    Fn = torch.cat([2.0 * c * mu, -c], 1)                            # (N, 2Q)
    Fp = torch.cat([zbar, zbar * zbar], 1)                           # (P, 2Q)
    pair_sum = _PairExpSum.apply if PSI2_BLOCK <= 0 else _BlockedPairExpSum.apply
    S = pair_sum(g, Fn, Fp)[full].reshape(M, M)                      # symmetric (M, M)
    return N * variance, Psi1, pref * S


_PAIRS: dict = {}


def _pairs(M: int, device):
    """Index vectors of the pairs m ≤ m' (row-major) and, for every (m, m'), its pair index."""
    key = (M, str(device))
    if key not in _PAIRS:
        im, ip = torch.triu_indices(M, M, device=device)
        full = torch.empty(M, M, dtype=torch.long, device=device)
        p = torch.arange(im.numel(), device=device)
        full[im, ip] = p
        full[ip, im] = p
        _PAIRS[key] = (im, ip, full.reshape(-1))
    return _PAIRS[key]


class _PairExpSum(torch.autograd.Function):
    """``s_p = Σ_n exp(g_n + F_n · G_p)`` for g (N,), F (N, K), G (P, K) -> (P,).

    The (P, N) table ``E = exp([G, 1] [F, g]ᵀ)`` is one matrix product (g rides along as an
    extra column, so no broadcast copy) and one in-place ``exp``; it is kept for the
    backward (P·N floats: 23 MB for N = 566, M = 100), which is then two matrix products:
    with ``R = E ∘ ḡ_s``, ``[∂F, ∂g] = Rᵀ [G, 1]`` and ``∂G = R F``.
    Hand-written because autograd would keep the same table plus the exponent and redo the
    broadcasts; this is the single largest cost of the collapsed bound (ψ2 over pairs).
    """

    @staticmethod
    def forward(ctx, g, F, G):
        Fa = torch.cat([F, g[:, None]], 1)                           # (N, K+1)
        Ga = torch.cat([G, G.new_ones(G.shape[0], 1)], 1)            # (P, K+1)
        E = (Ga @ Fa.mT).exp_()                                      # (P, N)
        ctx.save_for_backward(E, F, Ga)
        return E.sum(1)

    @staticmethod
    def backward(ctx, gs):
        E, F, Ga = ctx.saved_tensors
        R = E * gs[:, None]
        dg = dF = dG = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            # (K+1, N) product then transposed: faster in MKL than (N, K+1) = Rᵀ Ga
            dFa = (Ga.mT @ R).mT
            dF, dg = dFa[:, :-1], dFa[:, -1]
        if ctx.needs_input_grad[2]:
            dG = (F.mT @ R.mT).mT
        return dg, dF, dG


#: frames per block of the RBF ψ2 pair sum (:class:`_BlockedPairExpSum`); ``0`` selects the
#: unblocked :class:`_PairExpSum` (the old path, kept for comparison: :func:`psi2_pair_path`,
#: ``examples/bench_mcgpds.py --psi2-block 0`` / ``--compare-old``). 64 frames × 5050 pairs
#: (M = 100) is a 2.6 MB block, which stays in cache between its product, ``exp`` and sum.
PSI2_BLOCK = 64
#: pairs per tile of the forward pass of :class:`_BlockedPairExpSum` on the CPU when the table is not kept:
#: a (64, 1024) tile is 512 KB, within a core's L2 cache on current x86 processors; each pair's sum over
#: a block of frames is the same column sum whatever the tiling (forward 0.82× the untiled block
#: at pose's sizes). The backward keeps whole (b, P) blocks: its ∂F product sums over the pairs,
#: and tiling it would change the order of that sum.
PSI2_TILE_PAIRS = 1024
#: largest (N, P) exp table (MB) that :class:`_BlockedPairExpSum` keeps for its backward; a larger
#: one is not kept and each block is recomputed in the backward instead (working memory
#: O(b·P), independent of N). Default 0: always recompute. On the CPU recomputing a block that
#: stays in cache is cheaper than writing the table and reading it back: on pose (566 frames,
#: M = 100, a 23 MB table, freshly allocated and page-faulted in every evaluation) keeping it made
#: the benchmark's fit ≈ 1.2× slower, and still ≈ 1.15× with glibc's allocator tuned to fault no
#: pages. Both give the same bits (the same products and ``exp`` per block).
PSI2_KEEP_MB = 0.0


@contextlib.contextmanager
def psi2_pair_path(block: int, keep_mb: float | None = None):
    """Select the RBF ψ2 pair sum inside a ``with`` block (restored on exit).

    Parameters
    ----------
    block : int
        Frames per block of :class:`_BlockedPairExpSum`; ``0`` = the unblocked (P, N) table of
        :class:`_PairExpSum` (the old path). Sets :data:`PSI2_BLOCK` for the duration.
    keep_mb : float, optional
        Sets :data:`PSI2_KEEP_MB` for the duration (``0``: always recompute in the backward);
        default: unchanged.

    Yields
    ------
    int
        The block size in force.

    Raises
    ------
    ValueError
        ``block`` negative, or ``keep_mb`` negative or NaN.
    """
    global PSI2_BLOCK, PSI2_KEEP_MB
    block = int(block)
    if block < 0:
        raise ValueError(f"block: expected a non-negative number of frames, got {block}")
    keep = PSI2_KEEP_MB if keep_mb is None else float(keep_mb)
    if not keep >= 0:
        raise ValueError(f"keep_mb: expected a non-negative size in MB, got {keep_mb}")
    old = (PSI2_BLOCK, PSI2_KEEP_MB)
    PSI2_BLOCK, PSI2_KEEP_MB = block, keep
    try:
        yield block
    finally:
        PSI2_BLOCK, PSI2_KEEP_MB = old


class _BlockedPairExpSum(torch.autograd.Function):
    """The same ``s_p = Σ_n exp(g_n + F_n · G_p)`` as :class:`_PairExpSum`, cache-blocked.

    The frames are taken ``PSI2_BLOCK`` (= b) at a time: the (b, P) block
    ``E_b = exp([F_b, g_b] [G, 1]ᵀ)`` (b = 64, M = 100: 2.6 MB) is written by one product,
    exponentiated in place and summed over its rows while it is in cache (the unblocked path
    streams the whole (P, N) table through memory three times). The blocks are laid out
    (frames, pairs), so the products' long dimension P is the contiguous one.

    When the whole (N, P) table is within :data:`PSI2_KEEP_MB` the blocks are written into one
    table kept for the backward; otherwise (the default) the forward runs each block (on the CPU
    in tiles of :data:`PSI2_TILE_PAIRS` pairs) through one reused buffer and the backward recomputes each
    (b, P) block (working memory O(b·P), independent of N).

    Backward, with ``R_b = E_b diag(ḡ_s)``: ``[∂F_b, ∂g_b] = R_b [G, 1] = E_b (ḡ_s ∘ [G, 1])`` and
    ``[∂G, ·]ᵀ = Σ_b [F_b, g_b]ᵀ R_b = (Σ_b [F_b, g_b]ᵀ E_b) diag(ḡ_s)``: the upstream gradient
    scales the (P, K+1) factors, never the (b, P) blocks, so the backward is two products per
    block (plus the recomputation when the table is not kept), the second only when G needs a
    gradient. The sums differ from :class:`_PairExpSum` only by the order of the additions.
    """

    @staticmethod
    def forward(ctx, g, F, G):
        b = max(int(PSI2_BLOCK), 1)
        Fa = torch.cat([F, g[:, None]], 1)                           # (N, K+1)
        GaT = torch.cat([G, G.new_ones(G.shape[0], 1)], 1).mT.contiguous()   # (K+1, P)
        N, P = Fa.shape[0], GaT.shape[1]
        keep = N * P * GaT.element_size() <= PSI2_KEEP_MB * 2 ** 20
        table = G.new_empty(N, P) if keep else None
        # tiles only on the CPU, where the cache sizes were measured; a GPU would pay a kernel
        # launch per tile and op for nothing
        t = max(int(PSI2_TILE_PAIRS), 1) if not keep and GaT.device.type == "cpu" else P
        buf = None if keep else G.new_empty(min(b, N) * min(t, P))
        out = G.new_zeros(P)
        for i in range(0, N, b):
            Fb = Fa[i:i + b]
            for j in range(0, P, t):      # (b, t) tiles in L2 cache; kept: one tile, the table's rows
                Gt = GaT[:, j:j + t]
                E = table[i:i + b] if keep else buf[:Fb.shape[0] * Gt.shape[1]].view(Fb.shape[0], Gt.shape[1])
                torch.mm(Fb, Gt, out=E).exp_()
                out[j:j + t] += E.sum(0)
        ctx.block = b
        ctx.save_for_backward(Fa, GaT, table)
        return out

    @staticmethod
    def backward(ctx, gs):
        Fa, GaT, table = ctx.saved_tensors
        b = ctx.block
        need_f = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        need_g = ctx.needs_input_grad[2]
        N, P = Fa.shape[0], GaT.shape[1]
        GsT = GaT * gs                                               # (K+1, P): ḡ_s scales G's side
        dFa = torch.empty_like(Fa) if need_f else None
        dGaT = torch.zeros_like(GaT) if need_g else None
        buf = None if table is not None else GaT.new_empty(min(b, N), P)
        for i in range(0, N, b):
            Fb = Fa[i:i + b]
            if table is not None:
                E = table[i:i + b]
            else:
                E = buf[:Fb.shape[0]]
                torch.mm(Fb, GaT, out=E).exp_()                       # recomputed (b, P) block
            if need_f:
                torch.mm(E, GsT.mT, out=dFa[i:i + b])
            if need_g:
                dGaT.addmm_(Fb.mT, E)
        dg = dF = dG = None
        if need_f:
            dF, dg = dFa[:, :-1], dFa[:, -1]
        if need_g:
            dG = dGaT.mul_(gs)[:-1].mT
        return dg, dF, dG


def psi_linear(mu: torch.Tensor, s: torch.Tensor, Z: torch.Tensor, ard: torch.Tensor,
               per_point: bool = False):
    """ψ-statistics of the ARD linear kernel ``κ(x,x') = Σ_q a_q x_q x'_q``.

    ``psi0 = Σ_nq a_q (μ_nq² + s_nq)``, ``Psi1 = μ diag(a) Zᵀ``,
    ``Psi2 = Σ_n (Z a)(μ_n μ_nᵀ + diag s_n)(Z a)ᵀ``.

    Parameters
    ----------
    mu : torch.Tensor
        (N, Q) means of q(x_n).
    s : torch.Tensor
        (N, Q) variances of q(x_n).
    Z : torch.Tensor
        (M, Q) inducing inputs.
    ard : torch.Tensor
        (Q,) weights a_q.
    per_point : bool, default False
        Return ψ0 (N,) and Ψ2 (N, M, M) per point instead of their sums.

    Returns
    -------
    tuple of torch.Tensor
        ``(psi0, Psi1 (N, M), Psi2 (M, M))`` (per point: (N,), (N, M), (N, M, M)).
    """
    Za = Z * ard                                                     # (M, Q)
    Psi1 = mu @ Za.T
    if per_point:
        psi0 = ((mu * mu + s) * ard).sum(-1)
        Psi2 = Psi1[:, :, None] * Psi1[:, None, :] + torch.einsum("mq,nq,pq->nmp", Za, s, Za)
        return psi0, Psi1, Psi2
    psi0 = ((mu * mu + s) * ard).sum()
    Psi2 = Psi1.T @ Psi1 + (Za * s.sum(0)) @ Za.T
    return psi0, Psi1, Psi2


def psi_stats(kind: str, mu, s, Z, variance, ard, per_point: bool = False):
    """ψ-statistics of the mapping kernel named ``kind`` (:func:`psi_rbf` or :func:`psi_linear`).

    Parameters
    ----------
    kind : {"rbfard", "linear"}
        The kernel.
    mu : torch.Tensor
        (N, Q) means of q(x_n).
    s : torch.Tensor
        (N, Q) variances of q(x_n).
    Z : torch.Tensor
        (M, Q) inducing inputs.
    variance : torch.Tensor or None
        Scalar σ² (unused for linear).
    ard : torch.Tensor
        (Q,) ARD weights.
    per_point : bool, default False
        Per-point ψ0 and Ψ2.

    Returns
    -------
    tuple of torch.Tensor
        ``(psi0, Psi1, Psi2)`` as :func:`psi_rbf`.

    Raises
    ------
    ValueError
        An unknown ``kind``.
    """
    if kind == "rbfard":
        return psi_rbf(mu, s, Z, variance, ard, per_point)
    if kind == "linear":
        return psi_linear(mu, s, Z, ard, per_point)
    raise ValueError(f"mapping kernel: expected 'rbfard' or 'linear', got {kind!r}")


#: frames per chunk of :func:`psi_stream` (the streamed ψ-statistics of the collapsed bound);
#: ``None``: ``PSI_CHUNK_ENTRIES // M`` frames; ``0`` turns streaming off (one unchunked
#: :func:`psi_stats` call, the old path).
PSI_CHUNK: int | None = None
#: (frame, inducing point) entries per ψ chunk when ``PSI_CHUNK`` is ``None`` (16 MB per (chunk, M) table)
PSI_CHUNK_ENTRIES = 2 ** 21


def psi_stream(kind: str, mu: torch.Tensor, s: torch.Tensor, Z: torch.Tensor, variance, ard,
               Y: torch.Tensor, chunk: int | None = None):
    """``(ψ0, Ψ1ᵀ Y, Ψ2)`` of the built-in kernels, accumulated over chunks of frames.

    :func:`stream_psi_sums` with :func:`psi_stats` of ``kind`` as the per-chunk statistics.

    Parameters
    ----------
    kind : str
        ``"rbfard"`` or ``"linear"``.
    mu, s : torch.Tensor
        (N, Q) means and variances of q(x_n).
    Z : torch.Tensor
        (M, Q) inducing inputs.
    variance, ard : torch.Tensor
        Kernel variance (scalar; ignored for linear) and ARD weights (Q,).
    Y : torch.Tensor
        (N, D) targets.
    chunk : int, optional
        As in :func:`stream_psi_sums`.

    Returns
    -------
    tuple
        ``psi0`` (scalar), ``Psi1ᵀ Y`` (M, D), ``Psi2`` (M, M).
    """
    return stream_psi_sums(lambda mu_c, s_c: psi_stats(kind, mu_c, s_c, Z, variance, ard), mu, s, Y,
                           Z.shape[0], chunk)


def stream_psi_sums(psi, mu: torch.Tensor, s: torch.Tensor, Y: torch.Tensor, M: int, chunk: int | None = None):
    """``(ψ0, Ψ1ᵀ Y, Ψ2)`` accumulated over chunks of frames, recomputed in the backward pass.

    The collapsed bound needs only the sums ``ψ0 = Σ_n ⟨κ(x_n, x_n)⟩``,
    ``Ψ1ᵀ Y = Σ_n ⟨κ(Z, x_n)⟩ y_nᵀ`` (M, D) and ``Ψ2 = Σ_n ⟨κ(Z, x_n) κ(x_n, Z)⟩`` (M, M), so
    the frames are taken ``chunk`` at a time (default :data:`PSI_CHUNK`, else ``PSI_CHUNK_ENTRIES // M``): each chunk's
    statistics run under :func:`torch.utils.checkpoint.checkpoint` (non-reentrant),
    so autograd keeps only the chunk's inputs and recomputes its (chunk, M) tables in the
    backward. Working memory O(chunk·M + M²) instead of O(N·M); the sums differ from the
    unchunked ones only by the order of the additions.

    Parameters
    ----------
    psi : callable
        ``psi(mu_c, s_c) -> (ψ0, Ψ1 (c, M), Ψ2 (M, M))`` of a chunk of frames (any kernel).
    mu, s : torch.Tensor
        (N, Q) means and variances of q(x_n).
    Y : torch.Tensor
        (N, D) targets.
    M : int
        Number of inducing inputs (sets the default chunk).
    chunk : int, optional
        Frames per chunk; ``None`` = :data:`PSI_CHUNK` (itself ``None``: ``PSI_CHUNK_ENTRIES // M``);
        ``0`` (or ≥ N) = one unchunked call.

    Returns
    -------
    tuple
        ``psi0`` (scalar), ``Psi1ᵀ Y`` (M, D), ``Psi2`` (M, M).

    Raises
    ------
    ValueError
        ``chunk`` negative, or ``Y`` without N rows.
    """
    if chunk is None:
        chunk = max(1, PSI_CHUNK_ENTRIES // max(M, 1)) if PSI_CHUNK is None else PSI_CHUNK
    chunk = int(chunk)
    if chunk < 0:
        raise ValueError(f"chunk: expected a non-negative number of frames, got {chunk}")
    N = mu.shape[0]
    if Y.shape[0] != N:
        raise ValueError(f"Y: expected {N} rows (one per frame of mu), got shape {tuple(Y.shape)}")
    if chunk == 0 or N <= chunk:
        psi0, P1, P2 = psi(mu, s)
        return psi0, P1.mT @ Y, P2

    def part(mu_c, s_c, Y_c):
        p0, P1, P2 = psi(mu_c, s_c)
        return p0, P1.mT @ Y_c, P2

    limit_heap_fragmentation()
    grad = torch.is_grad_enabled()
    psi0 = P1Y = P2 = None
    for i in range(0, N, chunk):
        args = (mu[i:i + chunk], s[i:i + chunk], Y[i:i + chunk])
        r = checkpoint(part, *args, use_reentrant=False) if grad else part(*args)
        if psi0 is None:
            psi0, P1Y, P2 = r
        else:
            psi0, P1Y, P2 = psi0 + r[0], P1Y + r[1], P2 + r[2]
    return psi0, P1Y, P2


def kzz(kind: str, Z: torch.Tensor, variance, ard) -> torch.Tensor:
    """K(Z, Z) with a small fixed jitter (1e-6 of the mean diagonal) for a stable Cholesky.

    Parameters
    ----------
    kind : {"rbfard", "linear"}
        The kernel.
    Z : torch.Tensor
        (M, Q) inducing inputs.
    variance : torch.Tensor or None
        Scalar σ² (unused for linear).
    ard : torch.Tensor
        (Q,) ARD weights.

    Returns
    -------
    torch.Tensor
        (M, M) ``K_ZZ + jitter · I``.

    Raises
    ------
    ValueError
        An unknown ``kind``.
    """
    K = kernel_matrix(kind, Z, Z, variance, ard)
    jit = 1e-6 * K.diagonal().mean().clamp_min(1e-12)
    return K + jit * torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
