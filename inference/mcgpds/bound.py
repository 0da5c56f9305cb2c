"""McGPDS's collapsed bound (the paper's objective, a custom loss) and the predictions of a fitted view.

The uncollapsed ELBO and the optimal q(V), q(U) are in :mod:`tandem.inference.mcgpds.uncollapsed`.

Everything here is float64 and Cholesky based (``tandem.inference.numerics``).

Notation (spec ``mcgpds.md``): views k = 1..V with data ``Y_k`` (N, D_k); latents
``X^(s)`` (shared) and ``X^(k)`` (private), Q columns each; time kernels ``K_s``, ``K_k``
block diagonal over sequences; ``A_k = α_k² K_k + (1−α_k)² ε_k I``;
``q(x_q^(k)) = N(μ_q^(k), S_q^(k))``, ``S_q^(k) = (A_k⁻¹ + diag λ_q^(k))⁻¹``;
``q(X^(s))`` closed form.

KL in a well-conditioned form
-----------------------------
With ``C = Σ_k (1−α_k)² A_k⁻¹``, ``K_s = L_s L_sᵀ``, ``B' = I + L_sᵀ C L_s`` and
``B_q^(k) = I + Λ_q^½ A_k Λ_q^½`` the spec's KL equals

    KL = ½ Σ_q [ log|B'| + Σ_k (log|B_q^(k)| + tr(B_q^(k)⁻¹) − N)
                 + Σ_k μ_q^(k)ᵀ A_k⁻¹ μ_q^(k) − b_qᵀ S^(s) b_q ],

``b_q = Σ_k (1−α_k) A_k⁻¹ μ_q^(k)``, ``μ_q^(s) = S^(s) b_q``,
``S^(s) = L_s B'⁻¹ L_sᵀ``. (log|K_s| − log|S^(s)| = log|B'| and
tr(C S^(s)) + tr(K_s⁻¹ S^(s)) = N; the mean terms collapse to ``Σ μᵀA⁻¹μ − bᵀS^(s)b``.)
No ``K_s⁻¹`` is ever formed, so RBF time kernels without a white term are fine.
``tr(B⁻¹) = N − Σ_n λ_n S_nn``.

Block structure
---------------
Every N×N matrix is block diagonal over sequences. Blocks are grouped by similar size
and zero-padded (padding rows are identity, λ = 0, μ = 0, so they add exactly nothing),
so each group is one batched Cholesky / triangular solve over (views, Q, blocks).

Collapsed likelihood per view (J = 1 eigen-trick, any J)
-------------------------------------------------------
``Ã = L_G⁻¹ ψ5 L_G⁻ᵀ = U diag(e) Uᵀ``, ``r_d = L_G⁻¹ ψ1ᵀ y_d``, ``t_d = β w_d²``:
``log|β w_d² ψ5 + G| − log|G| = Σ_i log(1 + t_d e_i)`` and
``β² w_d² y_dᵀ ψ1 (β w_d² ψ5 + G)⁻¹ ψ1ᵀ y_d = β t_d Σ_i c_id² / (1 + t_d e_i)``, ``c = Uᵀ R``:
one eigendecomposition per view and basis function, O(M³ + D M²). The custom autograd
function :class:`_EigLogdetQuad` gives the gradient in closed form in the eigenbasis
(no ``1/(e_i − e_j)`` terms, so degenerate spectra are harmless).

Note on the paper's bound: it fits ``y_d`` with ``h`` and with each ``w_dj g_j``
through separate Woodbury corrections, i.e. it is the ELBO of the surrogate likelihood
``log N(y|h) + Σ_j log N(y|w_j g_j) − J log N(y|0)`` (= the Gaussian likelihood of
``h + Σ w g`` without its cross terms). The uncollapsed ELBO (:mod:`.uncollapsed`) uses the same
surrogate, so both objectives agree exactly at the optimal q(U), q(V).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from tandem.guides.mcgpds import variational_params
from tandem.inference.mcgpds.prior_factors import (  # noqa: F401  (re-exported)
    _mask_kernel,
    _time_K,
    _time_key,
    _time_leaves,
    _view_scalars,
    block_matmul,
    block_prior_factors,
    block_solve_triangular,
    factor_bytes,
    prior_leaves,
    same_blocks,
    shared_first,
    well_conditioned,
)
from tandem.inference.mcgpds.private_cov import (  # noqa: F401  (re-exported)
    PRIVATE_VAR_SWITCH,
    _PrivateCov,
    _PrivateCovInv,
    private_cov_terms,
    private_var_diag,
)
from tandem.inference.numerics import NotPositiveDefiniteError, cho_logdet, cholesky_jitter, limit_heap_fragmentation
from tandem.models.kernels import mapping_kernel_kind
from tandem.models.mcgpds import hyperparams, view_bases
from tandem.models.sequence_blocks import Blocks

__all__ = ["Blocks", "latent_terms", "view_bound", "collapsed_bound", "collapsed_loss",
           "ViewPosterior", "view_posterior", "predict_moments", "likelihood_ceiling"]


def _prior_key(times, g: int, time_s, views, alpha, eps, sel: slice):
    """The cache key of the prior factors of the blocks ``sel`` of group ``g`` (the times, the
    blocks, the values of α, ε and the time kernels); ``None`` when one of these hyperparameters
    requires a gradient (the factors then depend on the graph and are not cached)."""
    leaves = prior_leaves(time_s, [v["time"] for v in views], alpha, eps)
    if any(x.requires_grad for x in leaves):
        return None
    return (g, sel.start, sel.stop, times.detach().cpu().numpy().tobytes(),
            tuple(float(x) for x in leaves for x in x.reshape(-1)),
            _time_key(time_s), tuple(_time_key(v["time"]) for v in views))


def _on_one_grid(times, blocks: Blocks, g: int) -> bool:
    """Whether the sequences of group ``g`` share their time grid (:func:`same_blocks`)."""
    return same_blocks(blocks.pack(times, g), blocks.groups[g][1])


def _prior_cached(times, blocks: Blocks, g: int, time_s, views, alpha, eps, sel: slice | None,
                  grid: bool | None = None) -> bool:
    """Whether the prior factors of the blocks ``sel`` of group ``g`` are in the cache (constant
    hyperparameters, within :data:`tandem.inference.mcgpds.streamed.PRIOR_CACHE_MB`). ``grid``:
    :func:`_on_one_grid` when the caller has it (None: computed here)."""
    if sel is not None and (_on_one_grid(times, blocks, g) if grid is None else grid):
        sel = None                           # one time grid: the chunks are views of the group's entry
    key = _prior_key(times, g, time_s, views, alpha, eps, slice(None) if sel is None else sel)
    return key is not None and "A" in blocks.__dict__.get("_prior_cache", {}).get(key, {})


def _prior_factors(times, blocks: Blocks, g: int, time_s, views, alpha, eps, sel: slice | None = None,
                   grid: bool | None = None) -> dict:
    """Factorisations of group ``g`` (its blocks ``sel``, default all) that depend only on α, ε
    and the time kernels.

    ``Ls`` (chol K_s), ``A`` (V, nb, n, n), ``Ainv``, ``logdetA`` (V, nb), ``LBp`` (chol of
    ``B' = I + L_sᵀ C L_s``) and ``Ainv_ok`` (``A`` well conditioned, cond < 1e8, so the
    private covariances may use ``(A⁻¹ + Λ)⁻¹``). When none of these hyperparameters
    requires a gradient (the protocol fixes α, ε and the time kernels) the result is cached
    on ``blocks`` (keyed by the times, the blocks and the hyperparameter values): every L-BFGS
    evaluation would otherwise redo the same Cholesky factorisations. The factors are cached
    only while the cache stays within :data:`tandem.inference.mcgpds.streamed.PRIOR_CACHE_MB`
    (beyond it only ``Ainv_ok`` is kept and the factors are recomputed: memory that does not
    grow with N). Cached factors carry ``G`` and ``logdetBp`` instead of ``Ls`` and ``LBp``
    (:func:`_with_mean_operator`). ``grid``: :func:`_on_one_grid` when the caller has it (None:
    computed here when ``sel`` is a proper chunk).
    """
    _, mask = blocks.groups[g]
    if sel is not None and sel != slice(None) and (_on_one_grid(times, blocks, g) if grid is None else grid):
        # one time grid: a chunk's factors are views of the group's one block (cached once)
        whole = _prior_factors(times, blocks, g, time_s, views, alpha, eps)
        return {k: _chunk_of(k, v, sel) for k, v in whole.items()}
    sel = slice(None) if sel is None else sel
    key = _prior_key(times, g, time_s, views, alpha, eps, sel)
    const = key is not None
    known_ok = None
    if const:
        cache = blocks.__dict__.setdefault("_prior_cache", {})
        if key in cache:
            if "A" in cache[key]:
                return cache[key]
            known_ok = cache[key]["Ainv_ok"]
    t = blocks.pack(times, g)[sel]                             # (nb, n)
    out = block_prior_factors(t, mask[sel], time_s, [v["time"] for v in views], alpha, eps)
    if const:
        out["Ainv_ok"] = well_conditioned(out["A"], out["Ainv"]) if known_ok is None else known_ok
        out["key"] = key
        if len(cache) > 1024 and key not in cache:    # many problems (test blocks etc.): start afresh
            cache.clear()
        from tandem.inference.mcgpds import streamed
        # kept with the shared mean operator G in place of Ls and LBp (same shape: one fewer stack)
        size, used = factor_bytes(out) - out["Ls"].untyped_storage().nbytes(), factor_bytes(*cache.values())
        if used + size <= streamed.PRIOR_CACHE_MB * 2 ** 20:
            out = cache[key] = _with_mean_operator(out)
        else:
            cache[key] = {"Ainv_ok": out["Ainv_ok"]}
    return out


#: the block dimension of each prior factor (the others are not per block)
_BLOCK_DIM = {"Ls": 0, "LBp": 0, "G": 0, "logdetBp": 0, "A": 1, "Ainv": 1, "logdetA": 1}


def _chunk_of(name: str, value, sel: slice):
    """The blocks ``sel`` of one prior factor (a view; non-tensor entries as they are)."""
    dim = _BLOCK_DIM.get(name)
    if dim is None or not isinstance(value, torch.Tensor):
        return value
    return value.narrow(dim, sel.start, sel.stop - sel.start)


def _one_block(Ls: torch.Tensor, LBp: torch.Tensor):
    """``(Ls, LBp, nb)``: the (1, n, n) factors when both are one block expanded over the nb
    blocks (sequences on one time grid), else the (nb, n, n) stacks themselves; expanding a
    result computed from them to nb blocks is then a view or a no-op."""
    nb = Ls.shape[0]
    one_s, one_b = shared_first(Ls, -3), shared_first(LBp, -3)
    if one_s is not None and one_b is not None:
        return one_s, one_b, nb
    return Ls, LBp, nb


def _with_mean_operator(factors: dict) -> dict:
    """Cached prior factors with ``G = L_s B'⁻¹ L_sᵀ`` (nb, n, n) and ``logdetBp`` (nb,) in place of
    ``Ls`` and ``LBp``.

    The KL's shared-space terms need ``bᵀ G b`` and ``μ_s = G b`` (b = Σ_k (1 − α_k) A_k⁻¹ μ_k,
    see :func:`_group_terms`): with ``Ls`` and ``LBp`` that is a product and two triangular
    solves per block and evaluation, each a pass over an n × n matrix (and as many again in the
    backward); with G it is one product. G costs one triangular solve and one product per block,
    paid once while the factors are cached (α, ε and the time kernels fixed). ``diag G`` is the
    shared space's marginal variance.
    """
    Ls, LBp, nb = _one_block(factors["Ls"], factors["LBp"])
    H = torch.linalg.solve_triangular(LBp, Ls.mT, upper=False)   # B'^{-1/2} L_sᵀ
    out = {k: v for k, v in factors.items() if k not in ("Ls", "LBp")}
    out["G"] = (H.mT @ H).expand(nb, -1, -1)
    out["logdetBp"] = cho_logdet(LBp).expand(nb)
    return out


def _private_terms(blocks: Blocks, g: int, sel: slice | None, cst: dict, lam_p: torch.Tensor):
    """:func:`private_cov_terms` of the blocks ``sel`` of group ``g``, reused while λ is held.

    ``(log|B_q|, diag S)`` depend only on λ and on the prior covariance A. When neither carries a
    gradient (A constant: α, ε and the time kernels fixed; λ frozen, as in the λ-held phases of
    :func:`tandem.inference.mcgpds.fit.fit_mcgpds`, ``McGPDSConfig.held_cycles``) the last result
    of the same blocks is returned while λ and A's key are bit-for-bit the same. These terms are the O(n³)
    per (view, q, block) part of an evaluation (≈ 90 % of it at 1000-frame blocks), so holding λ
    makes an evaluation of the means, the mapping kernel and Z several times cheaper. One entry
    per (group, chunk): memory of one (V, Q, blocks, n) result.
    """
    if lam_p.requires_grad or cst.get("key") is None:     # no key: A depends on learned hyperparameters
        return private_cov_terms(cst, lam_p)
    slot = (g, None if sel is None else (sel.start, sel.stop))
    key = (cst["key"], tuple(lam_p.shape), lam_p.detach().cpu().numpy().tobytes())
    memo = blocks.__dict__.setdefault("_private_memo", {})
    hit = memo.get(slot)
    if hit is not None and hit[0] == key:
        return hit[1]
    out = private_cov_terms(cst, lam_p)
    memo[slot] = (key, out)
    return out


def likelihood_ceiling(betas, counts, g_sq_sums=None) -> float:
    """An upper limit that no McGPDS ELBO can exceed; a bound above it is numerically broken.

    ``F ≤ log p̃(Y) ≤ max_f log p̃(Y | f)`` (the KL terms are ≥ 0). With only h,
    ``p̃ = Π N(y | h, β⁻¹)`` and the maximum is ``Σ_{observed (n, d)} ½ log(β_d / 2π)``. With the
    w_j g_j functions on, the bound is that of the paper's surrogate likelihood
    ``log N(y | h) + Σ_j [log N(y | w_j g_j) − log N(y | 0)]`` (see the module docstring), whose
    j-th term is at most ``½ β y²``: the limit gains ``½ Σ_d β_d Σ_j Σ_n y_nd²`` per view.
    Used to reject such evaluations in the fits' line searches
    (:func:`tandem.inference.mcgpds.hyper_step.hyper_step`) and by the benchmark.

    Parameters
    ----------
    betas : sequence
        Per view, the noise precision: a scalar or a (D_k,) tensor (broadcast to ``counts``).
    counts : sequence
        Per view, the observed entries: ``(n_frames, D_k)`` (every entry observed) or a (D_k,)
        tensor of observed frames per column.
    g_sq_sums : sequence, optional
        Per view, ``None`` (g off) or the (D_k,) sums over the g functions j of the observed
        ``Σ_n y_nd²`` (i.e. J_on · Σ_n y_nd²) in the units the bound sees.

    Returns
    -------
    float
        The limit (+inf when some β is infinite).
    """
    total = 0.0
    g_sq_sums = [None] * len(betas) if g_sq_sums is None else g_sq_sums
    for beta, n, g2 in zip(betas, counts, g_sq_sums):
        b = torch.as_tensor(beta, dtype=torch.float64, device="cpu").detach()
        if isinstance(n, tuple):                      # (n_frames, D): every entry observed
            n = torch.full((int(n[1]),), float(n[0]), dtype=torch.float64, device="cpu")
        n = torch.as_tensor(n, dtype=torch.float64, device="cpu").detach()
        b, n = torch.broadcast_tensors(b, n)
        total += 0.5 * float((n * torch.log(b / (2 * math.pi))).sum())
        if g2 is not None:
            total += 0.5 * float((b * torch.as_tensor(g2, dtype=torch.float64, device="cpu").detach()).sum())
    return total


def _mean_terms(cst: dict, mu_g: torch.Tensor, alpha: torch.Tensor):
    """The KL's mean terms of some blocks, ``(Σ μᵀA⁻¹μ − bᵀ S^(s) b, μ_s)``, from their prior
    factors ``cst`` (G when cached, else Ls and LBp); mu_g (V, nb, n, Q), μ_s (nb, n, Q)."""
    # block_matmul/block_solve_triangular: one product for all blocks when they share their times
    Aimu = block_matmul(cst["Ainv"], mu_g)
    quad1 = (mu_g * Aimu).sum()
    b = ((1 - alpha)[:, None, None, None] * Aimu).sum(0)      # (nb, n, Q)
    if "G" in cst:                                             # cached: G = L_s B'⁻¹ L_sᵀ (_with_mean_operator)
        mu_s = block_matmul(cst["G"], b)
        quad2 = (b * mu_s).sum()
    else:
        Ls, LBp = cst["Ls"], cst["LBp"]
        w = block_solve_triangular(LBp, block_matmul(Ls.mT, b), upper=False)
        quad2 = (w * w).sum()
        mu_s = block_matmul(Ls, block_solve_triangular(LBp.mT, w, upper=True))
    return quad1 - quad2, mu_s


def _group_terms(times, blocks: Blocks, g: int, sel: slice, time_s, views, alpha, eps, mu_g, lam_g,
                 need_shared_var: bool, means: bool = True, grid: bool | None = None):
    """KL contribution and moments of the blocks ``sel`` of group ``g``.

    mu_g, lam_g (V, nb, n, Q) (those blocks, packed). Returns ``(kl, s_diag (V, nb, n, Q),
    mu_s (nb, n, Q), s_s (nb, n) or None)``. ``means=False``: without the mean terms
    (:func:`_mean_terms`; the caller adds them, ``mu_s`` None). ``grid``: as :func:`_prior_factors`.
    """
    Q = mu_g.shape[-1]
    cst = _prior_factors(times, blocks, g, time_s, views, alpha, eps, sel, grid)
    quad, mu_s = _mean_terms(cst, mu_g, alpha) if means else (0.0, None)
    logdetBp = cst["logdetBp"] if "G" in cst else cho_logdet(cst["LBp"])
    lam_p = lam_g.clamp_min(0).permute(0, 3, 1, 2)             # (V, Q, nb, n)
    # with A constant (α, ε, time kernels fixed) a closed-form backward; well conditioned, one
    # Cholesky + one cholesky_inverse per (view, q, block) (private_cov_terms picks the form)
    logdetB, sdiag = _private_terms(blocks, g, sel, cst, lam_p)
    # diag S ≥ 0 (private_var_diag avoids the cancellation of large λ; a floor such as 1e-12
    # here would make λ·S, and with it the KL, wrong by λ·1e-12 for λ ≫ 1e12)
    sdiag = sdiag.clamp_min(0.0)
    tr_minus_n = -(lam_p * sdiag).sum()
    kl = 0.5 * (Q * logdetBp.sum() + logdetB.sum() + tr_minus_n + quad)
    s_s = None
    if need_shared_var and "G" in cst:
        s_s = cst["G"].diagonal(dim1=-2, dim2=-1)              # (nb, n)
    elif need_shared_var:
        Ls, LBp, nb = _one_block(cst["Ls"], cst["LBp"])
        Ws = torch.linalg.solve_triangular(LBp, Ls.mT, upper=False)
        s_s = (Ws * Ws).sum(-2).expand(nb, -1)                 # (nb, n)
    return kl, sdiag.permute(0, 2, 3, 1), mu_s, s_s


# --------------------------------------------------------------------------- KL
def latent_terms(times: torch.Tensor, blocks: Blocks, time_s: dict, views: list[dict],
                 mus: list[torch.Tensor], lams: list[torch.Tensor], need_shared_var: bool = False):
    """KL and the moments needed by the likelihood.

    Parameters
    ----------
    times : torch.Tensor
        (N,) time stamps.
    blocks : Blocks
        The sequence blocks of the time kernels.
    time_s : TimeParams or dict
        Hyperparameters of the shared time kernel.
    views : list of dict
        ``views[k]`` holds ``alpha``, ``eps`` and ``time`` (TimeParams/dict, or None for the
        identity private prior).
    mus : list of torch.Tensor
        (N, Q) variational means μ^(k), one per view.
    lams : list of torch.Tensor
        (N, Q) variational precisions λ^(k), one per view.
    need_shared_var : bool, default False
        Also return ``s_s``.

    Returns
    -------
    dict
        ``kl`` (scalar), ``s_diag`` (list of (N, Q) diag S^(k)), ``mu_s`` (N, Q) and, with
        ``need_shared_var``, ``s_s`` (N,) = diag S^(s) (the same for every q).

    Notes
    -----
    Streamed: when all groups' (V, Q, blocks, n, n) stacks together exceed
    :data:`tandem.inference.mcgpds.streamed.KL_UNCHUNKED_MB`, the blocks of each group are taken
    in chunks of at most :data:`tandem.inference.mcgpds.streamed.KL_CHUNK_MB` of working stack
    (:func:`tandem.inference.mcgpds.streamed.blocks_per_chunk`); with more than one chunk each
    runs under a non-reentrant :func:`torch.utils.checkpoint.checkpoint` (its stacks are
    recomputed in the backward), so memory is O(largest chunk), not O(N · block size).
    """
    from tandem.inference.mcgpds import streamed
    Q = mus[0].shape[1]
    mu = torch.stack(mus)                      # (V, N, Q)
    lam = torch.stack(lams)
    alpha, eps = _view_scalars(views, "alpha", mu), _view_scalars(views, "eps", mu)
    # Nothing requires a gradient (the schedule's model-only phases with α, ε and the time
    # kernels fixed): the KL and the moments are constants, so the last result is reused
    # when μ, λ and the hyperparameters are bit-for-bit the same.
    leaves = [mu, lam, alpha, eps] + [x for d in [time_s] + [v["time"] for v in views] for x in _time_leaves(d)]
    memo_key = None
    grad = torch.is_grad_enabled() and any(x.requires_grad for x in leaves)
    if not any(x.requires_grad for x in leaves):
        memo_key = (bool(need_shared_var), times.detach().cpu().numpy().tobytes(),
                    tuple(x.detach().cpu().numpy().tobytes() for x in leaves),
                    _time_key(time_s), tuple(_time_key(v["time"]) for v in views))
        memo = blocks.__dict__.get("_lt_memo")
        if memo is not None and memo[0] == memo_key:
            return dict(memo[1])
    kl = mu.new_zeros(())
    sd_parts, mus_parts, ss_parts = [], [], []
    chunked = streamed.kl_chunked(len(views), Q, [m.shape for _, m in blocks.groups])
    for g, (idx, mask) in enumerate(blocks.groups):
        nb, n = mask.shape
        mu_g = blocks.pack(mu, g, dim=1)                           # (V, nb, n, Q)
        lam_g = blocks.pack(lam, g, dim=1)
        step = streamed.blocks_per_chunk(len(views), Q, n, nb) if chunked else nb
        if step < nb:
            limit_heap_fragmentation()     # chunks of equal-sized temporaries: keep the heap from fragmenting
        # sequences on one time grid share their factors: the mean terms then take the whole group
        # in one product (one pass over A⁻¹ and G), outside the chunks, which stream only the
        # private covariances (chunked, they would read the shared matrices once per chunk)
        grid = step < nb and _on_one_grid(times, blocks, g)     # decided once per group and evaluation
        parts = []
        for c0 in range(0, nb, step):
            sel = slice(c0, min(nb, c0 + step))
            args = (times, blocks, g, sel if step < nb else None, time_s, views, alpha, eps,
                    mu_g[:, sel], lam_g[:, sel], need_shared_var, not grid, grid)
            # A checkpoint keeps a chunk's (V, Q, blocks, n, n) stacks out of the backward. With λ
            # held and the chunk's prior factors cached, the private terms carry no gradient and
            # the backward keeps only references to the cached factors: no recomputation needed.
            if step < nb and grad and (lam.requires_grad or not _prior_cached(times, blocks, g, time_s, views,
                                                                                alpha, eps, args[3], grid)):
                parts.append(checkpoint(_group_terms, *args, use_reentrant=False))
            else:
                parts.append(_group_terms(*args))
        for r in parts:
            kl = kl + r[0]
        sd_parts.append(torch.cat([r[1] for r in parts], 1) if len(parts) > 1 else parts[0][1])
        if grid:                           # the mean terms of the whole group, one product
            cst = _prior_factors(times, blocks, g, time_s, views, alpha, eps)     # one block's, expanded
            quad, mu_s = _mean_terms(cst, mu_g, alpha)
            kl = kl + 0.5 * quad
            mus_parts.append(mu_s)
        else:
            mus_parts.append(torch.cat([r[2] for r in parts], 0) if len(parts) > 1 else parts[0][2])
        if need_shared_var:
            ss_parts.append(torch.cat([r[3] for r in parts], 0) if len(parts) > 1 else parts[0][3])
    s_diag = blocks.unpack(sd_parts, dim=1)
    out = {"kl": kl, "s_diag": list(s_diag.unbind(0)), "mu_s": blocks.unpack(mus_parts)}
    if need_shared_var:
        out["s_s"] = blocks.unpack(ss_parts)
    if memo_key is not None:
        blocks._lt_memo = (memo_key, dict(out))
    return out


# --------------------------------------------------------------------------- J-trick
class _EigLogdetQuad(torch.autograd.Function):
    """``(Σ_d log|I + t_d Ã|, Σ_d t_d r_dᵀ (I + t_d Ã)⁻¹ r_d)`` from one eigendecomposition.

    Ã (M, M) symmetric PSD (symmetrised on input), R (M, D), t (D,). Gradient in closed
    form: with ``c = UᵀR``, ``den = 1 + e tᵀ``, ``v = c / den``:
    ``∂ld/∂Ã = U diag(Σ_d t_d/den_d) Uᵀ``, ``∂qd/∂Ã = −U (Σ_d t_d² v_d v_dᵀ) Uᵀ``,
    ``∂qd/∂R = 2 U (v ∘ t)``, ``∂ld/∂t_d = Σ_i e_i/den_id``, ``∂qd/∂t_d = Σ_i c_id²/den_id²``.
    """

    @staticmethod
    def forward(ctx, At, R, t):
        e, U = torch.linalg.eigh(0.5 * (At + At.mT))
        c = U.mT @ R
        den = 1.0 + e[:, None] * t[None, :]
        ld = den.log().sum()
        qd = (t[None, :] * c * c / den).sum()
        ctx.save_for_backward(e, U, c, den, t)
        return ld, qd

    @staticmethod
    def backward(ctx, gl, gq):
        e, U, c, den, t = ctx.saved_tensors
        v = c / den
        inner = torch.diag_embed(gl * (t[None, :] / den).sum(1)) - gq * ((v * (t * t)[None, :]) @ v.mT)
        dA = U @ inner @ U.mT
        dR = (2.0 * gq) * (U @ (v * t[None, :]))
        dt = gl * (e[:, None] / den).sum(0) + gq * (c * c / (den * den)).sum(0)
        return dA, dR, dt


def eig_logdet_quad(At, R, t):
    """``(Σ_{i,d} log(1 + t_d e_i), Σ_{i,d} t_d c_id² / (1 + t_d e_i))`` with the closed-form gradient.

    ``Ã = U diag(e) Uᵀ``, ``c = Uᵀ R`` (see the module docstring, "Collapsed likelihood per view").

    Parameters
    ----------
    At : torch.Tensor
        (M, M) symmetric Ã = L_G⁻¹ ψ5 L_G⁻ᵀ.
    R : torch.Tensor
        (M, D) L_G⁻¹ ψ1ᵀ Y.
    t : torch.Tensor
        (D,) t_d = β w_d².

    Returns
    -------
    tuple of torch.Tensor
        ``(ld, qd)``, two scalars.
    """
    return _EigLogdetQuad.apply(At, R, t)


# --------------------------------------------------------------------------- likelihood
def view_bound(Y: torch.Tensor, mu: torch.Tensor, s: torch.Tensor, hp: dict, kind) -> torch.Tensor:
    """The spec's collapsed bound ``L̂^(k) = Σ_d L̂_d`` of one view.

    NaN entries of ``Y`` are missing and not scored
    (:func:`tandem.inference.mcgpds.missing.masked_view_bound`). The h part comes from the
    normal equations below or, for views of at least
    :data:`tandem.inference.mcgpds.streamed.STABLE_H_MIN_FRAMES` frames with a built-in kernel
    (:func:`tandem.inference.mcgpds.streamed.use_stable_h`), from the equal least-squares form
    :func:`tandem.inference.mcgpds.streamed.h_term_stable`, whose rounding noise does not grow with
    the cancellation of the two data terms (measured at N = 10⁴: 5e-10 of |F| against 2e-6). When W is a constant with
    β w² < 1e-8 the g terms (each O(β w²) relative to the h terms) are skipped; measured on pose
    at the init: the skipped terms sum to 19 on a bound of 5.7·10⁶ (relative 3·10⁻⁹).

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) the view's data.
    mu : torch.Tensor
        (N, Q) means of q(X^(k)).
    s : torch.Tensor
        (N, Q) variances diag S^(k).
    hp : dict
        The view's hyperparameters: ``beta``, ``W`` (D, J), ``Zh`` (M, Q), ``Zg`` (J, M, Q),
        ``kh_var``, ``kh_ard`` (Q,), ``kg_var`` (J,), ``kg_ard`` (J, Q).
    kind : MappingKernel or str
        The mapping kernel (a :class:`~tandem.models.kernels.MappingKernel`, or its alias
        name); its ψ-statistics and ``K_ZZ`` come from the object's methods.

    Returns
    -------
    torch.Tensor
        Scalar L̂^(k).
    """
    if torch.isnan(Y).any():
        from tandem.inference.mcgpds.missing import masked_view_bound
        return masked_view_bound(Y, mu, s, hp, kind)
    N, D = Y.shape
    beta = hp["beta"]
    W = hp["W"]
    F = -0.5 * N * D * math.log(2 * math.pi) + 0.5 * N * D * beta.log()
    bh, bgs = view_bases(hp, kind)
    from tandem.inference.mcgpds import streamed
    if streamed.use_stable_h(kind, N):   # least-squares form: no normal equations, no large cancellations
        # the stable form has closed forms for the two built-in kernels only: it takes their dispatch name
        F = F + streamed.h_term_stable(mapping_kernel_kind(kind), mu, s, bh.Z, bh.variance, bh.ard, Y, beta,
                                       bh.kzz(), bh.chol())
    else:
        # h: shared Woodbury correction for all outputs (one M×M Cholesky)
        psi0, At, R = bh.whitened(mu, s, Y)                              # L⁻¹ ψ4 L⁻ᵀ, L⁻¹ ψ0ᵀ Y
        M = At.shape[0]
        LP = cholesky_jitter(torch.eye(M, dtype=Y.dtype, device=Y.device) + beta * At, "I + β L⁻¹ψ4L⁻ᵀ")
        RP = torch.linalg.solve_triangular(LP, R, upper=False)
        F = F - 0.5 * beta * (Y * Y).sum() - 0.5 * D * cho_logdet(LP) + 0.5 * beta * beta * (RP * RP).sum() \
            + 0.5 * D * beta * (At.diagonal().sum() - psi0)
    # g_j: per-output corrections through one eigendecomposition per j. When W is a constant
    # with β w² < 1e-8 (W fixed at the authors' 1e-6·U(0,1) init: g switched off; on pose
    # β w² ≤ 2e-9) every g term is O(β w²) relative to the h terms, so they are skipped (saves
    # half the ψ work). Measured on pose at the init: the skipped terms sum to 19 on a bound of
    # 5.7·10⁶ (relative 3·10⁻⁹).
    if not W.requires_grad and float((beta.detach() * W * W).max()) < 1e-8:
        return F
    for j, bg in enumerate(bgs):
        psi0g, Ag, Rg = bg.whitened(mu, s, Y)
        w2 = W[:, j] * W[:, j]
        ld, qd = eig_logdet_quad(Ag, Rg, beta * w2)
        F = F - 0.5 * ld + 0.5 * beta * qd + 0.5 * beta * w2.sum() * (Ag.diagonal().sum() - psi0g)
    return F


def _mapping(data):
    """The mapping kernel of ``data``: its object when it has one (else the alias name)."""
    return getattr(data, "mapping_kernel_obj", data.mapping_kernel)


def collapsed_bound(data, hp: dict, mus: list, lams: list, return_parts: bool = False):
    """F = Σ_k L̂^(k) − KL for a :class:`tandem.models.mcgpds.McGPDSData` problem.

    Parameters
    ----------
    data : McGPDSData
        The problem (with observed views).
    hp : dict
        Hyperparameters, as :func:`tandem.models.mcgpds.hyperparams` returns them.
    mus : list of torch.Tensor
        (N, Q) variational means, one per view.
    lams : list of torch.Tensor
        (N, Q) variational precisions, one per view.
    return_parts : bool, default False
        Also return the parts.

    Returns
    -------
    torch.Tensor or tuple
        Scalar F; with ``return_parts`` ``(F, {"kl", "lik" (list, one per view), "mu_s",
        "s_diag"})``.
    """
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    F = -lt["kl"]
    lik = []
    for k, Y in enumerate(data.views):
        Lk = view_bound(Y, mus[k], lt["s_diag"][k], hp["views"][k], _mapping(data))
        lik.append(Lk)
        F = F + Lk
    if return_parts:
        return F, {"kl": lt["kl"], "lik": lik, "mu_s": lt["mu_s"], "s_diag": lt["s_diag"]}
    return F


def collapsed_loss(model, guide, data, frozen=(), **kwargs) -> torch.Tensor:
    """Custom loss for :func:`tandem.inference.fit`: ``−F`` (the negative collapsed bound).

    Reads the hyperparameters through the model's parameter registration and the
    variational parameters through the guide's (the same ``pyro.param`` names the
    Pyro model/guide use). A trial point at which a kernel is not positive definite gives a
    huge finite loss (1e30, zero gradient), so an L-BFGS line search shrinks the step.

    Parameters
    ----------
    model : callable
        The Pyro model (unused: the signature of a custom loss).
    guide : callable
        The Pyro guide (unused).
    data : McGPDSData
        The problem.
    frozen : collection of str, default ()
        Parameter groups ("variational", "model", "alpha", ...) held constant in this phase
        (the SCG schedule's alternation).
    **kwargs
        Ignored.

    Returns
    -------
    torch.Tensor
        Scalar −F.
    """
    hp = hyperparams(data, frozen=frozen)
    mus, lams = variational_params(data, frozen=frozen)
    try:
        return -collapsed_bound(data, hp, mus, lams)
    except NotPositiveDefiniteError:
        # An L-BFGS line-search trial point so extreme that a kernel overflowed: report a
        # huge finite loss (zero gradient) so the strong-Wolfe search shrinks the step
        # instead of aborting the run. Never returned at an accepted point.
        return torch.zeros((), dtype=torch.float64, device=data.device, requires_grad=True) + _FAILED_LOSS


_FAILED_LOSS = 1e30
#: a deterministic function of the parameters: :func:`tandem.inference.fit` skips its
#: random-seed re-evaluation (the determinism check) for L-BFGS
collapsed_loss.deterministic = True


# --------------------------------------------------------------------------- prediction
@dataclass
class ViewPosterior:
    """Optimal q(V), q(U) of one view in the form needed for predictions.

    ``bh`` (M, D): ``β (H + β ψ4)⁻¹ ψ0ᵀ Y``; ``bg`` (J, M, D): ``β w_dj (G + β w_dj² ψ5)⁻¹ ψ1ᵀ y_d``;
    ``Ch`` (M, M) = ``H⁻¹ − (H + β ψ4)⁻¹``; ``Cg`` (J, D, M, M) likewise per output.

    Attributes
    ----------
    kind : str or MappingKernel
        The mapping kernel.
    hp : dict
        The view's hyperparameters.
    beta : torch.Tensor
        The noise precision used (possibly overridden).
    bh : torch.Tensor
        (M, D) ``β (H + β ψ4)⁻¹ ψ0ᵀ Y``.
    bg : torch.Tensor
        (J, M, D) ``β w_dj (G + β w_dj² ψ5)⁻¹ ψ1ᵀ y_d``.
    Ch : torch.Tensor
        (M, M) ``H⁻¹ − (H + β ψ4)⁻¹``; (D, M, M) for a view with missing entries.
    Cg : torch.Tensor
        (J, D, M, M) ``G⁻¹ − (G + β w_dj² ψ5)⁻¹``.
    """
    kind: str
    hp: dict
    beta: torch.Tensor
    bh: torch.Tensor
    bg: torch.Tensor
    Ch: torch.Tensor
    Cg: torch.Tensor


def view_posterior(Y, mu, s, hp, kind, beta=None) -> ViewPosterior:
    """Optimal inducing posteriors of a trained view.

    A view with NaN (missing) entries gets per-column posteriors
    (:func:`tandem.inference.mcgpds.missing.masked_view_posterior`; ``Ch`` is then (D, M, M)).

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) the view's data.
    mu : torch.Tensor
        (N, Q) means of q(X^(k)).
    s : torch.Tensor
        (N, Q) variances of q(X^(k)).
    hp : dict
        The view's hyperparameters (see :func:`view_bound`).
    kind : MappingKernel or str
        The mapping kernel.
    beta : float or torch.Tensor, optional
        Overrides β (protocol §1.8.7); ``None`` → ``hp["beta"]``.

    Returns
    -------
    ViewPosterior
        The optimal q(V), q(U) in prediction form.
    """
    if torch.isnan(Y).any():
        from tandem.inference.mcgpds.missing import masked_view_posterior
        return masked_view_posterior(Y, mu, s, hp, kind, beta)
    beta = hp["beta"] if beta is None else torch.as_tensor(beta, dtype=Y.dtype, device=Y.device)
    W = hp["W"]
    fh, fgs = view_bases(hp, kind)
    _, Psi1, Psi2 = fh.psi(mu, s)
    H = fh.kzz()
    LH = cholesky_jitter(H, "K_ZZ of h")
    LHP = cholesky_jitter(H + beta * Psi2, "K_ZZ + β ψ4")
    bh = beta * torch.cholesky_solve(Psi1.mT @ Y, LHP)
    Ch = torch.cholesky_inverse(LH) - torch.cholesky_inverse(LHP)
    bgs, Cgs = [], []
    for j, fg in enumerate(fgs):
        _, Psi1g, Psi2g = fg.psi(mu, s)
        G = fg.kzz()
        LG = cholesky_jitter(G, f"K_ZZ of {fg.name}")
        w = W[:, j]
        Gd = G[None] + (beta * w * w)[:, None, None] * Psi2g[None]      # (D, M, M)
        LGd = cholesky_jitter(Gd, "K_ZZ + β w² ψ5")
        rhs = (Psi1g.mT @ Y).mT[:, :, None]                              # (D, M, 1)
        bgs.append((beta * w)[:, None] * torch.cholesky_solve(rhs, LGd)[..., 0])   # (D, M)
        Cgs.append(torch.cholesky_inverse(LG)[None] - torch.cholesky_inverse(LGd))
    return ViewPosterior(kind, hp, beta, bh, torch.stack(bgs).mT, Ch, torch.stack(Cgs))


def predict_moments(post: ViewPosterior, mu_star: torch.Tensor, s_star: torch.Tensor,
                    components: str = "all"):
    """Predictive mean and variance (N*, D) at uncertain inputs ``N(mu_star, diag s_star)``.

    ``E[y_d] = ψ0* b_h + Σ_j w_dj ψ1* b_gj``; the variance adds, for h and each w_j g_j,
    ``ψ_0* − tr(C ψ2*) + bᵀ ψ2* b − (ψ1* b)²`` and finally ``β⁻¹`` (cgpdsPosteriorMeanVar).

    Parameters
    ----------
    post : ViewPosterior
        The view's optimal inducing posteriors (:func:`view_posterior`).
    mu_star : torch.Tensor
        (N*, Q) input means.
    s_star : torch.Tensor
        (N*, Q) input variances.
    components : {"all", "h"}, default "all"
        "h" drops the g terms: under the paper's bound h and each w_j g_j are separate fits
        of y, so with W learned their sum double-counts the data.

    Returns
    -------
    tuple of torch.Tensor
        ``(mean, var)``, each (N*, D).
    """
    hp, kind = post.hp, post.kind
    W = hp["W"]
    bh, bgs = view_bases(hp, kind)
    psi0h, P1h, P2h = bh.psi(mu_star, s_star, per_point=True)
    mean_h = P1h @ post.bh                                                # (N*, D)
    if post.Ch.ndim == 3:      # per-column C_h (D, M, M): a view with missing entries
        trCh = psi0h[:, None] - torch.einsum("nmp,dpm->nd", P2h, post.Ch)
    else:
        trCh = (psi0h - (P2h * post.Ch).sum((-1, -2)))[:, None]
    var = trCh \
        + torch.einsum("md,nmp,pd->nd", post.bh, P2h, post.bh) - mean_h * mean_h
    mean = mean_h
    for j, bg in enumerate(bgs if components == "all" else []):
        psi0g, P1g, P2g = bg.psi(mu_star, s_star, per_point=True)
        w = W[:, j]
        b = post.bg[j]                                                   # (M, D)
        mg = P1g @ b                                                     # (N*, D)
        mean = mean + w * mg
        trC = torch.einsum("nmp,dpm->nd", P2g, post.Cg[j])
        vg = psi0g[:, None] - trC + torch.einsum("md,nmp,pd->nd", b, P2g, b) - mg * mg
        var = var + (w * w) * vg
    var = var.clamp_min(0.0) + 1.0 / post.beta
    return mean, var
