"""Stochastic McGPDS: an uncollapsed, minibatched ELBO over windows of the sequences.

The collapsed bound (:func:`tandem.inference.mcgpds.bound.collapsed_bound`) needs every
frame at every step. Here q(V), q(U) are explicit and the objective is a sum over
independent time blocks, so a step only touches a minibatch of blocks (Hensman, Fusi &
Lawrence 2013, "Gaussian processes for big data", with the ψ-statistics of Titsias &
Lawrence 2010 for the uncertain latent inputs).

Windows (the approximation)
---------------------------
Sequences are cut into consecutive, non-overlapping windows of ``window`` frames (the
last window of a sequence may be shorter); every window is an independent block of the
time kernels, i.e. the model is McGPDS with ``seq_ids`` := window ids. Within a window
the time prior is exact (the paper's RBF + white + bias kernels); across a window
boundary the prior correlation is dropped, and the bias term (a constant offset per
sequence) becomes one offset per window. With RBF inverse width γ and frame spacing Δt
the dropped correlation at distance d frames is ``exp(−γ (d Δt)² / 2)``; it is negligible
once the window is several time-lengthscales long (the default inverse width
``100/range(t)²`` of one window gives a lengthscale of a tenth of the window). A
sequence no longer than ``window`` is not cut at all, so on data made of short sequences
(human pose: 7 sequences of ≤ 194 frames, ``window ≥ 194``) this is the paper's model.
Why windows rather than a Markovian (state-space) time prior: windows keep the
paper's kernel, its bias and white terms and the Opper–Archambeau q(X) unchanged; a
state-space prior would replace the RBF time kernel by a Matérn one. The cost of a
window is O(L³) and an epoch costs O(N L² + N M²), linear in the number of frames N.

Objective (per step, minibatch ``I`` of ``B`` out of ``S`` windows)
-------------------------------------------------------------------
``ELBO ≈ (S/B) Σ_{i∈I} [E_q log p(Y_i | X_i, U, V) − KL_i(q(X) ‖ p(X))] − Σ_k KL(q(V_k, U_k) ‖ p)``

* ``KL_i``: the spec's KL of the shared + private latents of window i (the well-conditioned
  form of :mod:`tandem.inference.mcgpds.bound`; ``q(x_q^(k)) = N(μ, (A_k⁻¹ + Λ)⁻¹)``,
  ``q(X^(s))`` in closed form).
* Expected log-likelihood with the paper's surrogate (h and every w_j g_j fit y
  separately, as in the collapsed bound), in whitened inducing coordinates
  ``v_d = L_H ṽ_d`` (``H = L_H L_Hᵀ``), ``q(ṽ_d) = N(m_d, S)``:
  ``−β/2 [yᵀy − 2 r_dᵀ m_d + m_dᵀ Ã m_d + tr(Ã S) + ψ0 − tr Ã]`` with
  ``Ã = L_H⁻¹ Ψ2 L_H⁻ᵀ``, ``r_d = L_H⁻¹ Ψ1ᵀ y_d``, plus ``½ n D log(β/2π)``; the same for
  u_dj with weight w_dj, and ``KL(q(ṽ_d) ‖ N(0, I)) = ½ [tr S + mᵀm − M − log|S|]``.
* The windows are drawn with ``pyro.plate("windows", S, subsample_size=B)`` from the
  seeded RNG and the window terms are scaled by ``S/B`` (unbiased).

Updates (incremental, Neal & Hinton 1998; the SVI of Hoffman et al. 2013 with the local
step solved). The ELBO depends on the windows' q(X) only through the window terms and
the summed statistics ``T = Σ_i s_i``, ``s_i = (Ã_i, R_i, Ã_ij, R_ij …)``; given T the
optimal q(V), q(U) is ``P = I + β Ã``, ``θ = β R`` (h; ``P_d = I + β w_d² Ã_j``,
``θ_d = β w_d r_jd`` for g_j) — the natural-gradient step of length 1 — and the ELBO at
it is the collapsed bound, ``Σ_i terms_i + Σ ½ θᵀP⁻¹θ − ½ log|P|``. The running T (in the
parameter store, ``qstat_k``) holds every window's statistics from its last visit. A step

1. draws B windows I and removes their old statistics from T (``T_o = T − s_I``);
2. **local step**: ``local_iters`` L-BFGS iterations on the q(X) parameters of I, maximising
   the collapsed bound as a function of them with the other windows' statistics fixed,
   ``Σ_{i∈I} terms_i + collapsed(T_o + s_I)`` — q(V), q(U) follow q(X_I) inside the step,
   which is what makes it converge: plain alternation (q(X) given q(U), then q(U) given
   q(X)) is slow on this model, the two being strongly coupled at high β;
3. puts the new statistics back (``T = T_o + s_I``) and sets q(V), q(U) to their optimum;
4. returns −ELBO of the minibatch at that q(V), q(U) (window terms scaled by S/B; the
   window parameters enter it detached): its gradient is an unbiased estimate of the
   collapsed bound's gradient in the hyperparameters (envelope theorem), which take an
   Adam step through :func:`tandem.inference.fit` with the learning rate decaying
   geometrically to ``lr_final`` × ``lr`` (Robbins–Monro).

With the hyperparameters fixed this is block-coordinate ascent on the collapsed bound
(every step increases it) and T stays exact; with them learned each Adam step changes
every window's statistics, so T is recomputed over all windows once per epoch (one pass
without gradients; also at the first step, which sets q(V), q(U) from the initial q(X)).
Each window's μ, log λ (all views) are one ``pyro.param`` (``sq_i``), so a step touches
only the B windows it drew: its cost does not grow with N.

Data parallel. On every rank the same windows are drawn; rank r owns windows
``I[r::world]`` (plus the global KL on rank 0). The local step's L-BFGS
(:func:`lbfgs_sharded`) all-reduces the statistics, the objective value and every inner
product, so each rank takes the step one process would; the per-epoch refresh is sharded
the same way, and :class:`tandem.inference.distributed.DataParallelLoss` all-reduces the
hyperparameter gradients.

Device. Everything follows ``device`` (the data are moved there); the algebra is
float64. Units: every view is standardised internally (mean 0, unit overall variance)
so the fit does not depend on the data's units; :meth:`StochasticMcGPDS.to_data_units`
maps back.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import pyro
import pyro.optim
import torch
from pyro import poutine

from tandem.guides.mcgpds import Guide, variational_params
from tandem.inference.distances import Standardizer
from tandem.inference.distributed import all_reduce_sum, rank_world
from tandem.inference.mcgpds.bound import collapsed_bound, latent_terms, set_optimal_inducing
from tandem.inference.mcgpds.fit import McGPDSConfig, McGPDSFitted, view_sites
from tandem.inference.numerics import DTYPE, NotPositiveDefiniteError, cho_logdet, cholesky_jitter
from tandem.inference.params import (
    Boolean,
    Device,
    InstanceOf,
    Interval,
    Options,
    Seed,
    SequenceOf,
    TandemEstimator,
    check_param,
    own_params,
    validate_params,
)
from tandem.inference.persistence import load_estimator, save_estimator
from tandem.inference.predictive import posterior_predictive, rescale_sites
from tandem.inference.svi import fit
from tandem.inference.validation import (
    NotFittedError,
    as_tensor,
    check_int_range,
    check_time_order,
    resolve_device,
    sequence_labels,
)
from tandem.models.gp_kernels import kzz, psi_stats, time_kernel
from tandem.models.kernels import mapping_kernel_kind
from tandem.models.mcgpds import (
    McGPDSData,
    default_init,
    dims,
    hyperparams,
    mcgpds_model,
    pca_init,
    simulate,
)

__all__ = [
    "StochasticConfig",
    "StochasticData",
    "StochasticELBO",
    "StochasticMcGPDS",
    "Windows",
    "guide_params",
    "lbfgs_sharded",
    "model_params",
    "refresh_statistics",
    "simulate_sequences",
    "window_kl",
]


# --------------------------------------------------------------------------- windows
class Windows:
    """Frames cut into windows of at most ``window`` consecutive frames of one sequence.

    ``seq_ids`` (N,) sequence labels (frames of a sequence in row order; they need not be
    contiguous). Attributes: ``rows`` (S, L) frame indices (padding 0), ``mask`` (S, L)
    bool, ``ids`` (N,) window id of every frame. Vectorised, O(N log N). The bookkeeping stays
    on the CPU (:class:`StochasticData` moves ``rows`` and ``mask`` to the data's device).
    """

    def __init__(self, seq_ids, window: int):
        seq_ids = (seq_ids.detach() if isinstance(seq_ids, torch.Tensor)
                   else torch.as_tensor(np.asarray(seq_ids), device="cpu")).long().reshape(-1).cpu()
        L = check_int_range(window, "window", low=1)
        N = seq_ids.numel()
        if N == 0:
            raise ValueError("seq_ids: expected at least one frame")
        order = torch.argsort(seq_ids, stable=True)
        s = seq_ids[order]
        new = torch.ones(N, dtype=torch.bool, device="cpu")
        new[1:] = s[1:] != s[:-1]
        start = torch.cummax(torch.where(new, torch.arange(N, device="cpu"),
                                         torch.zeros(N, dtype=torch.long, device="cpu")), 0).values
        pos = torch.arange(N, device="cpu") - start                          # position within its sequence
        wstart = new | (pos % L == 0)
        wid_sorted = torch.cumsum(wstart.long(), 0) - 1
        S = int(wid_sorted[-1]) + 1
        rows = torch.zeros(S, L, dtype=torch.long, device="cpu")
        mask = torch.zeros(S, L, dtype=torch.bool, device="cpu")
        rows[wid_sorted, pos % L] = order
        mask[wid_sorted, pos % L] = True
        ids = torch.empty(N, dtype=torch.long, device="cpu")
        ids[order] = wid_sorted
        self.rows, self.mask, self.ids, self.window = rows, mask, ids, L

    @property
    def S(self) -> int:
        return int(self.rows.shape[0])


@dataclass
class StochasticData:
    """The one argument of the stochastic model/guide/objective (scaled views on ``device``).

    Carries the attributes :func:`tandem.models.mcgpds.hyperparams` reads (``fixed``,
    ``init``, ``V``, ``mapping_kernel``, ``private_prior``, ``time_white``, ``time_bias``),
    so the hyperparameters are the model's own ``pyro.param`` s with its names and
    constraints.
    """
    views: list
    times: torch.Tensor
    windows: Windows
    Q: int
    M: int
    J: int
    init: dict
    X0: torch.Tensor
    fixed: frozenset = frozenset()
    mapping_kernel: str = "rbfard"
    time_white: bool = True
    time_bias: bool = True
    private_prior: str = "mcgpds"
    lam_init: float = 0.5
    out_dims: list = field(default_factory=list)

    def __post_init__(self):
        self.mapping_kernel = mapping_kernel_kind(self.mapping_kernel)   # a models.kernels object or alias
        self.out_dims = [int(Y.shape[1]) for Y in self.views]
        self.device = self.times.device
        self.rows = self.windows.rows.to(self.device)
        self.mask = self.windows.mask.to(self.device)

    @property
    def V(self) -> int:
        return len(self.views)

    @property
    def N(self) -> int:
        return int(self.times.numel())


# --------------------------------------------------------------------------- model / guide params
def model_params(sdata: StochasticData, idx=None) -> dict:
    """The model side: registers (or reads) the McGPDS hyperparameters, as the model does."""
    return hyperparams(sdata)


def guide_params(sdata: StochasticData, idx: torch.Tensor) -> dict:
    """The guide side for windows ``idx`` (B,): their q(X) parameters and q(V), q(U).

    Returns ``mu``, ``lam``: V × (B, L, Q). Window i has ONE parameter ``sq_i`` (V, L, 2Q)
    holding ``[μ, log λ]`` of every view (one tensor per window keeps the per-step optimiser
    work at B small updates; λ = exp(·) > 0), created from the PCA init on first use. The
    natural parameters of the whitened q(ṽ), q(ũ) — ``qvP_k`` (M, M), ``qvT_k`` (M, D),
    ``quP_k`` (J, D, M, M), ``quT_k`` (J, M, D) — are registered here and set to their
    optimum given the running statistics by :class:`StochasticELBO` (never by the
    optimiser), so they enter the loss detached.
    """
    dev, M, J, Q, V = sdata.device, sdata.M, sdata.J, sdata.Q, sdata.V
    rows = sdata.windows.rows
    loglam = math.log(float(sdata.lam_init))

    def init(r):
        x0 = sdata.X0[r.to(dev)]
        return torch.cat([x0, torch.full_like(x0, loglam)], -1).expand(V, -1, -1).clone()

    packed = torch.stack([pyro.param(f"sq_{i}", lambda r=rows[i]: init(r)) for i in idx.tolist()])
    packed = packed.movedim(1, 0)                                  # (V, B, L, 2Q)
    mus = list(packed[..., :Q].unbind(0))
    lams = list(packed[..., Q:].exp().unbind(0))
    eye = torch.eye(M, dtype=DTYPE, device=dev)
    for k, D in enumerate(sdata.out_dims):
        pyro.param(f"qvP_{k}", lambda: eye.clone())
        pyro.param(f"qvT_{k}", lambda D=D: torch.zeros(M, D, dtype=DTYPE, device=dev))
        pyro.param(f"quP_{k}", lambda D=D: eye.expand(J, D, M, M).clone())
        pyro.param(f"quT_{k}", lambda D=D: torch.zeros(J, M, D, dtype=DTYPE, device=dev))
    return {"mu": mus, "lam": lams}


def _natural_params(k: int) -> dict:
    """The current (detached) natural parameters of view k's q(ṽ), q(ũ) from the store."""
    return {n: pyro.param(f"q{n}_{k}").detach() for n in ("vP", "vT", "uP", "uT")}


# --------------------------------------------------------------------------- pieces
def _mask_kernel(K: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Zero padding rows/cols of (…, B, L, L) and put 1 on their diagonal (m (B, L) float)."""
    return K * (m[:, :, None] * m[:, None, :]) + torch.diag_embed(1.0 - m)


def window_kl(t: torch.Tensor, m: torch.Tensor, time_s: dict, views: list, mu: torch.Tensor,
              lam: torch.Tensor):
    """KL(q(X_s, X_1..V) ‖ p) of a batch of windows and the private variances.

    t (B, L) times, m (B, L) float mask, ``views[k]`` with ``alpha``, ``eps``, ``time``
    (dict, or None for the identity private prior); mu, lam (V, B, L, Q), zero at padding.
    Returns ``(kl (B,), s_diag (V, B, L, Q))``. Same algebra as ``bound.latent_terms``:
    ``KL = ½ Σ_q [log|B'| + Σ_k (log|B_q^(k)| − Σ_n λ S_nn + μᵀA⁻¹μ) − bᵀ S^(s) b]``.
    """
    B, L = m.shape
    Q = mu.shape[-1]
    eye = torch.eye(L, dtype=t.dtype, device=t.device)

    def tk(hp):
        if hp is None:
            return eye.expand(B, L, L)
        return _mask_kernel(time_kernel(t, t, hp["var"], hp["invw"], hp.get("white"), hp.get("bias")), m)

    Ls = cholesky_jitter(tk(time_s), "shared time kernel K_t^(s)")             # (B, L, L)
    A = torch.stack([_mask_kernel(v["alpha"] ** 2 * tk(v["time"]) + (1 - v["alpha"]) ** 2 * v["eps"] * eye, m)
                     for v in views])                                          # (V, B, L, L)
    LA = cholesky_jitter(A, "private prior covariance A_k")
    alpha = torch.stack([torch.as_tensor(v["alpha"], dtype=t.dtype, device=t.device).reshape(()) for v in views])
    T = torch.linalg.solve_triangular(LA, Ls.expand_as(LA), upper=False)       # L_A⁻¹ L_s
    mm = m[:, :, None] * m[:, None, :]
    C = (((1 - alpha) ** 2)[:, None, None, None] * (T.mT @ T)).sum(0) * mm     # L_sᵀ C L_s
    LBp = cholesky_jitter(eye + C, "B' = I + L_sᵀ C L_s")
    Aimu = torch.cholesky_solve(mu, LA)                                        # A⁻¹ μ (V, B, L, Q)
    quad1 = (mu * Aimu).sum((0, 2, 3))                                         # (B,)
    b = ((1 - alpha)[:, None, None, None] * Aimu).sum(0)                       # (B, L, Q)
    w = torch.linalg.solve_triangular(LBp, Ls.mT @ b, upper=False)
    quad2 = (w * w).sum((1, 2))
    # padding entries: λ = 0 selected with where (not λ·0), so that neither a NaN there nor
    # the infinite derivative of √λ at 0 reaches the gradient of the real entries
    valid = (m > 0)[None, :, :, None].expand_as(lam)
    lam_p = torch.where(valid, lam, torch.zeros_like(lam)).permute(0, 3, 1, 2)   # (V, Q, B, L)
    sl = torch.where(valid, lam.clamp_min(1e-300).sqrt(), torch.zeros_like(lam)).permute(0, 3, 1, 2)
    slA = sl[..., :, None] * A[:, None]                                        # Λ^½ A  (V, Q, B, L, L)
    LB = cholesky_jitter(eye + slA * sl[..., None, :], "B_q = I + Λ^½ A Λ^½")
    TB = torch.linalg.solve_triangular(LB, slA, upper=False)
    sdiag = (A.diagonal(dim1=-2, dim2=-1)[:, None] - (TB * TB).sum(-2)).clamp_min(1e-12)   # (V, Q, B, L)
    kl = 0.5 * (Q * cho_logdet(LBp) + cho_logdet(LB).sum((0, 1)) - (lam_p * sdiag).sum((0, 1, 3))
                + quad1 - quad2)
    return kl, sdiag.permute(0, 2, 3, 1)


def _whitened_stats(kind, mu, s, Y, Z, variance, ard):
    """``(LK, psi0, Ã = L⁻¹Ψ2L⁻ᵀ, R = L⁻¹Ψ1ᵀY)`` of one function's inducing set over rows (n, ·)."""
    psi0, P1, P2 = psi_stats(kind, mu, s, Z, variance, ard)
    LK = cholesky_jitter(kzz(kind, Z, variance, ard), "K_ZZ")
    tmp = torch.linalg.solve_triangular(LK, P2, upper=False)
    At = torch.linalg.solve_triangular(LK, tmp.mT, upper=False)
    R = torch.linalg.solve_triangular(LK, P1.mT @ Y, upper=False)
    return LK, psi0, At, R


def _q_moments(P: torch.Tensor, T: torch.Tensor):
    """Mean (…, M, D) and Cholesky of the precision from natural parameters P (…, M, M), T."""
    LP = cholesky_jitter(0.5 * (P + P.mT), "precision of q(U)")
    return torch.cholesky_solve(T, LP), LP


def _kl_white(m, LP):
    """Σ_d KL(N(m_d, P⁻¹) ‖ N(0, I)); m (M, D), LP (M, M) shared or (D, M, M)."""
    M, D = m.shape
    eye = torch.eye(M, dtype=m.dtype, device=m.device)
    Linv = torch.linalg.solve_triangular(LP, eye.expand(LP.shape), upper=False)   # L_P⁻¹
    trS = (Linv * Linv).sum((-1, -2))
    logdetS = -cho_logdet(LP)
    if LP.dim() == 2:
        trS, logdetS = D * trS, D * logdetS
    else:
        trS, logdetS = trS.sum(), logdetS.sum()
    return 0.5 * (trS + (m * m).sum() - M * D - logdetS)


def _g_on(sdata, v) -> bool:
    """Whether the w_j g_j functions are in the model: not when W is fixed with β w² < 1e-8
    (the authors' 1e-6·U(0,1) init; the collapsed bound switches g off the same way)."""
    return "W" not in sdata.fixed or float((v["beta"].detach() * v["W"] * v["W"]).max()) >= 1e-8


def _detached(obj):
    """A copy of a nested dict/list/tuple of tensors with every tensor detached."""
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, dict):
        return {k: _detached(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_detached(v) for v in obj)
    return obj


def _learns_hyperparams(hp) -> bool:
    """True when any hyperparameter tensor in the nested ``hp`` requires a gradient."""
    if isinstance(hp, torch.Tensor):
        return hp.requires_grad
    if isinstance(hp, dict):
        return any(_learns_hyperparams(v) for v in hp.values())
    if isinstance(hp, (list, tuple)):
        return any(_learns_hyperparams(v) for v in hp)
    return False


# --------------------------------------------------------------------------- window terms
def _stat_size(M: int, D: int, J: int) -> int:
    """Length of one view's flat statistics ``[Ã_h, R_h, Ã_g1, R_g1, …]`` (M², M·D per function)."""
    return (1 + J) * (M * M + M * D)


def _unflatten(flat: torch.Tensor, M: int, D: int, J: int) -> list:
    """``[(Ã_h, R_h), (Ã_g1, R_g1), …]`` from a view's flat statistics."""
    out, off = [], 0
    for _ in range(1 + J):
        A = flat[off:off + M * M].reshape(M, M)
        R = flat[off + M * M:off + M * M + M * D].reshape(M, D)
        out.append((A, R))
        off += M * M + M * D
    return out


def _window_terms(sdata: StochasticData, hp: dict, q: dict, local: torch.Tensor):
    """The q(U)-free part of the windows ``local`` (CPU indices) and their statistics.

    ``q``: ``mu``, ``lam`` V × (b, L, Q) of these windows. Returns ``(terms, flats)``:
    ``terms`` = Σ_i [½ n_i D log(β/2π) − β/2 (y_iᵀy_i + D(ψ0_i − tr Ã_i))
    − β/2 Σ_j ‖w_j‖² (ψ0_ij − tr Ã_ij) − KL_i] summed over views, and ``flats[k]`` the
    flat statistics ``[Σ_i Ã_i, Σ_i R_i, …]`` of view k (zeros for a switched-off g).
    The rest of the ELBO is linear in the statistics (:func:`_expected_fit`).
    """
    dev, M, J, kind = sdata.device, sdata.M, sdata.J, sdata.mapping_kernel
    terms = torch.zeros((), dtype=DTYPE, device=dev)
    flats = []
    if not local.numel():
        return terms, [torch.zeros(_stat_size(M, D, J), dtype=DTYPE, device=dev) for D in sdata.out_dims]
    li = local.to(dev)
    # padding sits at the end of a window: drop the slots that are padding in every window
    # of the batch (windows of uneven length cost O(L³) at the batch's longest, not at L)
    Lb = int(sdata.mask[li].sum(1).max())
    valid = sdata.mask[li][:, :Lb]
    m = valid.to(DTYPE)                                                    # (b, Lb)
    rows = sdata.rows[li][:, :Lb]
    mu = torch.stack(q["mu"])[:, :, :Lb] * m[None, :, :, None]
    lam = torch.stack(q["lam"])[:, :, :Lb]
    kl, sdiag = window_kl(sdata.times[rows] * m, m, hp["time_s"], hp["views"], mu, lam)
    terms = terms - kl.sum()
    for k, Y in enumerate(sdata.views):
        v = hp["views"][k]
        beta = v["beta"]
        Yb, mk, sk = Y[rows[valid]], mu[k][valid], sdiag[k][valid]
        n, D = Yb.shape
        _, psi0, At, R = _whitened_stats(kind, mk, sk, Yb, v["Zh"], v.get("kh_var"), v["kh_ard"])
        terms = terms + 0.5 * n * D * (beta.log() - math.log(2 * math.pi)) \
            - 0.5 * beta * ((Yb * Yb).sum() + D * (psi0 - At.diagonal().sum()))
        parts = [At.reshape(-1), R.reshape(-1)]
        g_on = _g_on(sdata, v)
        for j in range(J):
            if g_on:
                kgv = v["kg_var"][j] if v.get("kg_var") is not None else None
                _, psi0g, Ag, Rg = _whitened_stats(kind, mk, sk, Yb, v["Zg"][j], kgv, v["kg_ard"][j])
                terms = terms - 0.5 * beta * (v["W"][:, j] ** 2).sum() * (psi0g - Ag.diagonal().sum())
                parts += [Ag.reshape(-1), Rg.reshape(-1)]
            else:
                parts += [torch.zeros(M * M + M * D, dtype=DTYPE, device=dev)]
        flats.append(torch.cat(parts))
    return terms, flats


def _psd_part(flat: torch.Tensor, M: int, D: int, J: int) -> torch.Tensor:
    """The flat statistics with every Ã replaced by its nearest PSD matrix (negative
    eigenvalues set to 0; R unchanged)."""
    out = flat.clone()
    off = 0
    for _ in range(1 + J):
        A = out[off:off + M * M].reshape(M, M)
        w, U = torch.linalg.eigh(0.5 * (A + A.mT))
        if float(w.min()) < 0:
            out[off:off + M * M] = ((U * w.clamp_min(0)) @ U.mT).reshape(-1)
        off += M * M + M * D
    return out


def _expected_fit(v: dict, stats: list, nat: dict, g_on: bool) -> torch.Tensor:
    """The q(U)-dependent part of view k's expected log-likelihood given its statistics.

    ``β Σ_d r_dᵀ m_d − β/2 Σ_d [m_dᵀ Ã m_d + tr(Ã S)]`` for h and the same with weights
    w_dj (and per-output S_dj) for every w_j g_j; q(ṽ), q(ũ) from the natural parameters ``nat``.
    """
    beta = v["beta"]
    mv, LPv = _q_moments(nat["vP"], nat["vT"])
    (At, R), gstats = stats[0], stats[1:]
    D = R.shape[1]
    trAS = torch.cholesky_solve(At, LPv).diagonal().sum()
    out = beta * (R * mv).sum() - 0.5 * beta * ((mv * (At @ mv)).sum() + D * trAS)
    if g_on:
        for j, (Ag, Rg) in enumerate(gstats):
            w = v["W"][:, j]
            mu_, LPu = _q_moments(nat["uP"][j], nat["uT"][j].mT[..., None])
            mu_ = mu_[..., 0].mT                                                # (M, D)
            trASg = torch.cholesky_solve(Ag.expand(LPu.shape), LPu).diagonal(dim1=-2, dim2=-1).sum(-1)   # (D,)
            out = out + beta * (w * (Rg * mu_).sum(0)).sum() \
                - 0.5 * beta * (w * w * ((mu_ * (Ag @ mu_)).sum(0) + trASg)).sum()
    return out


def _optimal_natural(v: dict, stats: list, g_on: bool) -> dict:
    """Natural parameters of the optimal q(ṽ), q(ũ) given view k's total statistics:
    ``P = I + β Ã``, ``θ = β R`` (h); ``P_d = I + β w_d² Ã_j``, ``θ_d = β w_d r_jd`` (g_j)."""
    beta = v["beta"]
    (At, R), gstats = stats[0], stats[1:]
    M, D = R.shape
    eye = torch.eye(M, dtype=At.dtype, device=At.device)
    nat = {"vP": eye + beta * At, "vT": beta * R}
    if g_on:
        uP, uT = [], []
        for j, (Ag, Rg) in enumerate(gstats):
            w = v["W"][:, j]
            uP.append(eye + (beta * w * w)[:, None, None] * Ag)
            uT.append(beta * w * Rg)
        nat["uP"], nat["uT"] = torch.stack(uP), torch.stack(uT)
    return nat


def _collapsed_value(nat: dict, g_on: bool) -> torch.Tensor:
    """``max_q [E_q fit − KL(q ‖ p)]`` of the q(U)-dependent part: ``½ θᵀP⁻¹θ − ½ log|P|``
    summed over the outputs (h: one P shared by the D outputs; g_j: one P_d per output)."""
    LP = cholesky_jitter(0.5 * (nat["vP"] + nat["vP"].mT), "precision of q(V)")
    T = nat["vT"]
    out = 0.5 * (T * torch.cholesky_solve(T, LP)).sum() - 0.5 * T.shape[1] * cho_logdet(LP)
    if g_on:
        LPu = cholesky_jitter(0.5 * (nat["uP"] + nat["uP"].mT), "precision of q(U)")      # (J, D, M, M)
        Tu = nat["uT"].mT[..., None]                                                       # (J, D, M, 1)
        out = out + 0.5 * (Tu * torch.cholesky_solve(Tu, LPu)).sum() - 0.5 * cho_logdet(LPu).sum()
    return out


def _store_natural(store, k: int, nat: dict, g_on: bool) -> None:
    with torch.no_grad():
        for n in ("vP", "vT") + (("uP", "uT") if g_on else ()):
            store[f"q{n}_{k}"].unconstrained().copy_(nat[n])


# --------------------------------------------------------------------------- local optimiser
def _dot(a: list, b: list, device) -> float:
    """Σ over this rank's tensors of ⟨a, b⟩, summed over the ranks."""
    tot = torch.zeros((), dtype=DTYPE, device=device)
    for x, y in zip(a, b):
        tot = tot + (x * y).sum()
    return float(all_reduce_sum(tot))


def lbfgs_sharded(fun, params: list, iters: int, history: int = 10, device="cpu") -> float:
    """Minimise ``fun`` over ``params`` (this rank's share) by L-BFGS with Armijo backtracking.

    ``fun()`` returns ``(value, grads)``: the value summed over the ranks (identical on
    all) and this rank's gradients, or ``(math.inf, None)`` where it is undefined (such a
    trial point is rejected). Every inner product is summed over the ranks, so each rank
    takes the step one process holding all the parameters would take (the same
    collectives in the same order on every rank). ``iters`` iterations at most; stops
    early when the gradient vanishes or no step decreases ``fun``. Returns the final value.
    """
    f, g = fun()
    if g is None:
        return f
    hist = []                                         # (s, y, 1/sᵀy)
    for it in range(iters):
        gg = _dot(g, g, device)
        if not math.isfinite(gg) or gg <= 1e-20:
            break
        # two-loop recursion: d = −H g
        qv = [x.clone() for x in g]
        alphas = []
        for s, y, r in reversed(hist):
            a = r * _dot(s, qv, device)
            alphas.append(a)
            qv = [q_ - a * y_ for q_, y_ in zip(qv, y)]
        if hist:
            s, y, r = hist[-1]
            gamma = 1.0 / (r * _dot(y, y, device))
        else:
            gamma = min(1.0, 1.0 / math.sqrt(gg))       # first step: at most unit length
        qv = [gamma * q_ for q_ in qv]
        for (s, y, r), a in zip(hist, reversed(alphas)):
            b = r * _dot(y, qv, device)
            qv = [q_ + (a - b) * s_ for q_, s_ in zip(qv, s)]
        d = [-q_ for q_ in qv]
        gd = _dot(g, d, device)
        if not gd < 0:                                # not a descent direction: restart
            hist, d, gd = [], [-x * min(1.0, 1.0 / math.sqrt(gg)) for x in g], -min(gg, math.sqrt(gg))
        x0 = [p.detach().clone() for p in params]
        t, accepted = 1.0, False
        for _ in range(30):
            with torch.no_grad():
                for p, x, d_ in zip(params, x0, d):
                    p.copy_(x + t * d_)
            f_new, g_new = fun()                        # math.inf: a point outside the domain
            if math.isfinite(f_new) and f_new <= f + 1e-4 * t * gd:
                accepted = True
                break
            t *= 0.5
        if not accepted:
            with torch.no_grad():
                for p, x in zip(params, x0):
                    p.copy_(x)
            break
        s = [t * d_ for d_ in d]
        y = [gn - go for gn, go in zip(g_new, g)]
        sy = _dot(s, y, device)
        if sy > 1e-12 * math.sqrt(_dot(y, y, device) * _dot(s, s, device)):   # keep H positive definite
            hist = (hist + [(s, y, 1.0 / sy)])[-history:]
        f, g = f_new, g_new
    return f


# --------------------------------------------------------------------------- the objective
class StochasticELBO:
    """Negative minibatch ELBO for :func:`tandem.inference.fit` (a custom loss callable).

    ``loss(model, guide, sdata)``: ``model``/``guide`` are :func:`model_params` /
    :func:`guide_params` (or compatible registrations). ``batch``: windows per step
    (``None`` or ≥ S: all windows, deterministic). ``local_iters``: L-BFGS iterations on
    the drawn windows' q(X) per step (see the module docstring). ``windows``: fix the
    windows of every step (evaluation, tests) instead of drawing them.

    With ``update=True`` (a training step) a call first updates the drawn windows' q(X)
    and the running statistics, sets q(V), q(U) to their optimum given the statistics, and
    then returns −ELBO of the minibatch whose gradient (hyperparameters only; the window
    parameters enter it detached) the driver's optimiser applies. ``update=False``
    evaluates −ELBO at the current parameters and changes nothing.
    """

    def __init__(self, batch: int | None = None, local_iters: int = 20, windows=None):
        self.batch = batch
        self.local_iters = check_int_range(local_iters, "local_iters", low=1)
        self.windows = windows

    def _draw(self, S: int) -> tuple[torch.Tensor, float]:
        if self.windows is not None:
            idx = torch.as_tensor(self.windows, device="cpu").long().reshape(-1)
            return idx, S / idx.numel()
        B = S if self.batch is None else min(int(self.batch), S)
        with pyro.plate("windows", S, subsample_size=B) as idx:
            pass
        return idx.cpu(), S / B

    def __call__(self, model, guide, sdata: StochasticData, update: bool = True) -> torch.Tensor:
        S = sdata.windows.S
        idx, scale = self._draw(S)
        rank, world = rank_world()
        local = idx[rank::world]
        hp = model(sdata, idx)
        if update:
            self._update(sdata, hp, idx, local, _learns_hyperparams(hp))
        q = guide(sdata, idx)
        mine = torch.arange(idx.numel(), device="cpu")[rank::world].to(sdata.device)
        ql = {n: [x[mine] for x in q[n]] for n in ("mu", "lam")}
        if update:   # the window parameters were just optimised; only the hyperparameters take the gradient
            ql = _detached(ql)
        terms, flats = _window_terms(sdata, hp, ql, local)
        elbo = scale * terms
        for k, D in enumerate(sdata.out_dims):
            v = hp["views"][k]
            g_on = _g_on(sdata, v)
            nat = _natural_params(k)
            if local.numel():
                elbo = elbo + scale * _expected_fit(v, _unflatten(flats[k], sdata.M, D, sdata.J), nat, g_on)
            if rank == 0:
                elbo = elbo - _q_kl(nat, g_on, sdata.J)
        return -elbo

    # ------------------------------------------------------------------ training step
    @torch.no_grad()
    def _update(self, sdata, hp, idx, local, learned: bool):
        """Local step, running statistics and q(V), q(U) (see the module docstring)."""
        store = pyro.get_param_store()
        hp = _detached(hp)
        world = rank_world()[1]
        # the step counter lives in the parameter store, so a checkpoint resumes it
        store.setdefault("stoch_steps", torch.zeros((), dtype=DTYPE, device=sdata.device))
        n = int(store["stoch_steps"].item())
        per_epoch = math.ceil(sdata.windows.S / idx.numel())
        # once at the start; once per epoch when hyperparameters are learned (their steps
        # change every window's statistics, and the incremental sum would drift)
        if n == 0 or (n % per_epoch == 0 and learned):
            refresh_statistics(sdata)
        stats = [store[f"qstat_{k}"].detach().clone() for k in range(sdata.V)]
        q_old = guide_params(sdata, local) if local.numel() else {}
        _, old = _window_terms(sdata, hp, q_old, local)
        # the other windows' statistics; their Ã are sums of PSD matrices, but when the
        # hyperparameters moved since T was summed the difference can lose that (and with it
        # P = I + β Ã its definiteness): clamp negative eigenvalues (T is recomputed each epoch)
        others = [_psd_part(s - all_reduce_sum(o.clone()), sdata.M, D, sdata.J)
                  for s, o, D in zip(stats, old, sdata.out_dims)]
        params = [store[f"sq_{i}"].unconstrained() for i in local.tolist()]
        g_on = [_g_on(sdata, v) for v in hp["views"]]
        M, J = sdata.M, sdata.J

        def fun():
            with torch.enable_grad():
                try:
                    q = guide_params(sdata, local) if local.numel() else {}
                    terms, flats = _window_terms(sdata, hp, q, local)
                    failed = 0.0
                except NotPositiveDefiniteError:      # a trial point of the line search: reject it
                    terms, flats, failed = None, None, 1.0
                # one collective first, so every rank takes the same branch (a rank that
                # failed must not skip collectives the others make)
                head = torch.tensor([0.0 if terms is None else float(terms.detach()), failed], dtype=DTYPE,
                                    device=sdata.device)
                head = all_reduce_sum(head)
                if float(head[1]) > 0:
                    return math.inf, None
                value = float(head[0])
                sur = terms
                for k, D in enumerate(sdata.out_dims):
                    tot = (others[k] + all_reduce_sum(flats[k].detach().clone())).requires_grad_()
                    c = _collapsed_value(_optimal_natural(hp["views"][k], _unflatten(tot, M, D, J), g_on[k]),
                                         g_on[k])
                    (G,) = torch.autograd.grad(c, tot)
                    value += float(c.detach())
                    sur = sur + (G * flats[k]).sum()      # chain rule through the summed statistics
                grads = torch.autograd.grad(sur, params) if params else []
            return -value, [-g for g in grads]

        lbfgs_sharded(fun, params, self.local_iters, device=sdata.device)
        if world > 1:   # every rank keeps every window's q(X): share the windows this rank optimised
            rank = rank_world()[0]
            packed = torch.stack([store[f"sq_{i}"].unconstrained().detach() for i in idx.tolist()])
            mask = torch.zeros(idx.numel(), dtype=DTYPE, device=sdata.device)
            mask[rank::world] = 1.0
            packed = all_reduce_sum(packed * mask[:, None, None, None])
            for i, x in zip(idx.tolist(), packed):
                store[f"sq_{i}"].unconstrained().copy_(x)
        q_new = guide_params(sdata, local) if local.numel() else {}
        _, new = _window_terms(sdata, hp, q_new, local)
        for k, D in enumerate(sdata.out_dims):
            tot = others[k] + all_reduce_sum(new[k].clone())
            store[f"qstat_{k}"].unconstrained().copy_(tot)
            _store_natural(store, k, _optimal_natural(hp["views"][k], _unflatten(tot, M, D, J), g_on[k]), g_on[k])
        store["stoch_steps"].unconstrained().add_(1)


def _q_kl(nat: dict, g_on: bool, J: int) -> torch.Tensor:
    """KL(q(ṽ), q(ũ) ‖ N(0, I)) of one view from its natural parameters."""
    mv, LPv = _q_moments(nat["vP"], nat["vT"])
    out = _kl_white(mv, LPv)
    if g_on:
        for j in range(J):
            mu_, LPu = _q_moments(nat["uP"][j], nat["uT"][j].mT[..., None])
            out = out + _kl_white(mu_[..., 0].mT, LPu)
    return out


@torch.no_grad()
def refresh_statistics(sdata: StochasticData, chunk: int = 256) -> None:
    """Recompute every view's running statistics over all windows (sharded over the ranks)
    and set q(V), q(U) to their optimum given them (the full-data natural-gradient step of
    length 1: the uncollapsed ELBO then equals the collapsed bound)."""
    store = pyro.get_param_store()
    hp = _detached(model_params(sdata))
    rank, world = rank_world()
    S = sdata.windows.S
    mine = torch.arange(S, device="cpu")[rank::world]
    tot = [torch.zeros(_stat_size(sdata.M, D, sdata.J), dtype=DTYPE, device=sdata.device) for D in sdata.out_dims]
    for lo in range(0, max(mine.numel(), 1), chunk):
        part = mine[lo:lo + chunk]
        q = guide_params(sdata, part) if part.numel() else {}
        _, flats = _window_terms(sdata, hp, q, part)
        tot = [a + b for a, b in zip(tot, flats)]
    if mine.numel() < S:                   # windows of other ranks: register their parameters here too
        guide_params(sdata, torch.arange(S, device="cpu"))
    for k, D in enumerate(sdata.out_dims):
        t = all_reduce_sum(tot[k])
        v = hp["views"][k]
        g_on = _g_on(sdata, v)
        store.setdefault(f"qstat_{k}", torch.zeros_like(t))
        store[f"qstat_{k}"].unconstrained().copy_(t)
        _store_natural(store, k, _optimal_natural(v, _unflatten(t, sdata.M, D, sdata.J), g_on), g_on)


# --------------------------------------------------------------------------- high level
@dataclass
class StochasticConfig:
    """Settings of a stochastic McGPDS fit (defaults: the protocol's fixed groups, g off)."""
    Q: int = 10
    M: int = 100
    J: int = 1
    window: int = 200
    batch: int = 16                 # windows per step
    num_steps: int = 2000
    local_iters: int = 20           # L-BFGS iterations on the drawn windows' q(X) per step
    lr: float = 0.05                # Adam, hyperparameters (unconstrained units)
    lr_final: float = 0.1           # the learning rate decays geometrically to this fraction at the end
    fixed: tuple = ("alpha", "eps", "beta", "time", "W")
    mapping_kernel: str = "rbfard"
    time_white: bool = True
    time_bias: bool = True
    time_white_var: float = 1e-2
    time_bias_var: float = 1.0
    time_invwidth: float | None = None   # None: 100 / (range of t over one window)²
    alpha_init: float = 0.5
    eps_init: float = 1e-3
    beta_init: float = 100.0        # on the standardised views (= 100 / var(Y) in data units)
    w_init_scale: float = 1e-6
    lam_init: float = 0.5
    private_prior: str = "mcgpds"

    def __post_init__(self):
        validate_params(_STOCHASTIC_CONSTRAINTS, {n: getattr(self, n) for n in self.__dataclass_fields__},
                        "StochasticConfig: ")


_POS_INT, _NONNEG_INT = Interval(Integral, 1), Interval(Integral, 0)
_POS = Interval(Real, 0, closed="neither")
#: declared constraints of every :class:`StochasticConfig` field (checked at construction)
_STOCHASTIC_CONSTRAINTS = {
    "Q": [_POS_INT], "M": [_POS_INT], "J": [_POS_INT], "window": [_POS_INT], "batch": [_POS_INT],
    "num_steps": [_NONNEG_INT], "local_iters": [_POS_INT],
    "lr": [_POS], "lr_final": [Interval(Real, 0, 1, closed="right")],
    "fixed": [SequenceOf(Options(("alpha", "eps", "beta", "time", "kernel", "inducing", "W", "g", "variational",
                                  "model")), nonempty=False),
              InstanceOf(set, frozenset, what="a set of parameter groups")],
    "mapping_kernel": [Options(("rbfard", "linear"))], "time_white": [Boolean()], "time_bias": [Boolean()],
    "time_white_var": [_POS], "time_bias_var": [_POS], "time_invwidth": [None, _POS],
    "alpha_init": [Interval(Real, 0, 1)], "eps_init": [_POS], "beta_init": [_POS],
    "w_init_scale": [Interval(Real, 0)], "lam_init": [_POS], "private_prior": [Options(("mcgpds", "gplvm"))],
}


class StochasticMcGPDS(TandemEstimator):
    """McGPDS on long archives: ``StochasticMcGPDS(config, device=...).fit(views, times, seq_ids)``.

    ``views`` list of (N, D_k) arrays, ``times`` (N,), ``seq_ids`` (N,) sequence labels
    (default: one sequence). ``device``: "cpu", "cuda", ... (float64 there); default ``None`` =
    the device of the views given to :meth:`fit` (the CPU for numpy arrays). After
    :meth:`fit`: ``result`` (the driver's FitResult), :meth:`elbo` (exact full-data ELBO),
    :meth:`latents` (per-frame q moments), :meth:`to_fitted` (a collapsed-code
    :class:`~tandem.inference.mcgpds.fit.McGPDSFitted` with the windows as sequences, for
    :func:`~tandem.inference.mcgpds.fit.predict_view`), :meth:`to_inference_data` (ArviZ
    draws in the data's units).
    """

    _parameter_constraints = {"config": [None, InstanceOf(StochasticConfig)], "device": [None, Device()]}

    def __init__(self, config: StochasticConfig | None = None, device=None):
        self.config = config
        self.device = device
        self._validate_params()

    def _config(self) -> StochasticConfig:
        return StochasticConfig() if self.config is None else self.config

    # learned state (``data_``, ``result_``, ``objective_``, ``seq_ids_``); the names without
    # the trailing underscore are kept as aliases
    @property
    def data(self) -> StochasticData:
        if "data_" not in self.__dict__:
            raise NotFittedError("This StochasticMcGPDS instance is not fitted yet: call fit(views, times, seq_ids) "
                                 "(or prepare()) before using this method")
        return self.data_

    @data.setter
    def data(self, value):
        self.data_ = value

    @property
    def result(self):
        self._check_fitted("result_", "fit(views, times, seq_ids)")
        return self.result_

    # ------------------------------------------------------------------ data
    def prepare(self, views, times, seq_ids=None, seed: int = 0) -> StochasticData:
        """Validate, standardise and window the data; build the initial values."""
        cfg = self._config()
        if not isinstance(views, (list, tuple)) or not views:
            raise ValueError("views: expected a non-empty list of (N, D_k) arrays")
        dev = resolve_device(self.device, views, times)
        vs = [as_tensor(Y, f"views[{k}]", ndim=2, detach=True).to(dev) for k, Y in enumerate(views)]
        N = vs[0].shape[0]
        if any(Y.shape[0] != N for Y in vs):
            raise ValueError(f"views: every view must have the same number of rows, got {[Y.shape[0] for Y in vs]}")
        t = as_tensor(times, "times", ndim=1, detach=True).to(dev)
        if t.numel() != N:
            raise ValueError(f"times: expected {N} time stamps (one per frame), got {t.numel()}")
        # sequence labels are CPU bookkeeping (Windows): any hashable labels, NaN refused, frames
        # of a sequence in time order (one validator for every estimator)
        if seq_ids is None:
            seq = torch.zeros(N, dtype=torch.long, device="cpu")
            check_time_order(t, None)
        else:
            seq = torch.as_tensor(sequence_labels(seq_ids, N, t, name="seq_ids"), device="cpu")
        for name in ("Q", "M", "J", "window", "batch"):
            check_int_range(getattr(cfg, name), name, low=1)
        if cfg.Q > sum(Y.shape[1] for Y in vs):
            raise ValueError(f"Q={cfg.Q}: expected at most the total view dimension {sum(Y.shape[1] for Y in vs)}")
        # one scale per view (the RMS of its column standard deviations) keeps the outputs'
        # relative sizes, as the collapsed McGPDS object does
        self.scalers_ = [Standardizer(Y, per="matrix") for Y in vs]
        vs = [sc.transform(Y) for sc, Y in zip(self.scalers_, vs)]
        win = Windows(seq, cfg.window)
        X0 = pca_init(torch.cat(vs, 1), cfg.Q)
        if cfg.time_invwidth is None:
            w0 = win.rows[0][win.mask[0]]
            rng_t = float(t[w0].max() - t[w0].min()) or float(t.max() - t.min()) or 1.0
            invw = 100.0 / rng_t ** 2
        else:
            invw = float(cfg.time_invwidth)
        gen = torch.Generator().manual_seed(int(seed))
        # default_init draws Z from a random subset of X0 (first M rows of a permutation)
        sub = torch.randperm(N, generator=gen, device="cpu")[:max(cfg.M, 1) * 2].to(dev)
        init = default_init(sub.numel(), [Y.shape[1] for Y in vs], cfg.Q, cfg.M, cfg.J, cfg.mapping_kernel,
                            X0=X0[sub], times=t[sub], time_white=cfg.time_white, time_bias=cfg.time_bias,
                            alpha=cfg.alpha_init, eps=cfg.eps_init, beta=cfg.beta_init, invwidth=invw,
                            white_var=cfg.time_white_var, bias_var=cfg.time_bias_var, w_scale=cfg.w_init_scale,
                            lam=cfg.lam_init, private_prior=cfg.private_prior, generator=gen)
        for k in range(len(vs)):
            init.pop(f"mu_{k}")
            init.pop(f"lam_{k}")
        init = {n: x.to(dev) for n, x in init.items()}
        fixed = set(cfg.fixed)
        if "W" in fixed:
            fixed.add("g")
        self.seq_ids_ = seq
        return StochasticData([Y.to(dev) for Y in vs], t.to(dev), win, cfg.Q, cfg.M, cfg.J, init, X0.to(dev),
                              frozenset(fixed), cfg.mapping_kernel, cfg.time_white, cfg.time_bias,
                              cfg.private_prior, cfg.lam_init)

    def optimizer(self):
        cfg = self._config()
        # Adam on the hyperparameters only (the window parameters get no gradient); the rate
        # decays geometrically to lr_final × lr over num_steps (Robbins–Monro: the minibatch
        # noise must be averaged out at the end)
        lrd = float(cfg.lr_final) ** (1.0 / max(int(cfg.num_steps), 1))
        return pyro.optim.ClippedAdam({"lr": cfg.lr, "lrd": lrd, "clip_norm": 1e6})

    @own_params
    def fit(self, views, times, seq_ids=None, seed: int = 0, progress: bool = False, loss_wrapper=None,
            checkpoint=None, checkpoint_every: int = 100):
        """Fit through :func:`tandem.inference.fit`: per step an L-BFGS local step on the drawn
        windows' q(X), q(V), q(U) at their optimum, Adam on the hyperparameters.

        ``loss_wrapper``: e.g. :class:`tandem.inference.distributed.DataParallelLoss` (called
        with the objective) for data-parallel training. ``checkpoint``, ``checkpoint_every``: as in
        :func:`tandem.inference.fit` — a run killed part-way resumes from the file and ends where
        the uninterrupted run ends. Returns ``self``.
        """
        self._validate_params()
        check_param([Seed()], "seed", seed, "StochasticMcGPDS.fit: ")
        self.data_ = self.prepare(views, times, seq_ids, seed)
        pyro.clear_param_store()
        return self.train(int(self._config().num_steps), seed=seed, progress=progress, loss_wrapper=loss_wrapper,
                          checkpoint=checkpoint, checkpoint_every=checkpoint_every)

    @own_params
    def train(self, num_steps: int, seed: int = 0, progress: bool = False, loss_wrapper=None, checkpoint=None,
              checkpoint_every: int = 100):
        """``num_steps`` more steps on the prepared data, keeping the parameter store (a fresh
        optimiser state). Sets ``result`` and returns ``self``."""
        cfg = self._config()
        self.data  # noqa: B018 - NotFittedError before fit / prepare
        self.objective_ = StochasticELBO(batch=cfg.batch, local_iters=cfg.local_iters)
        loss = self.objective_ if loss_wrapper is None else loss_wrapper(self.objective_)
        self.result_ = fit(model_params, guide_params, self.data, loss=loss, optim=self.optimizer(),
                          num_steps=int(num_steps), seed=seed, progress=progress, checkpoint=checkpoint,
                          checkpoint_every=checkpoint_every, clear_params=False, desc="McGPDS (stochastic)")
        return self

    # ------------------------------------------------------------------ save / load
    def save(self, path) -> None:
        """Write this object (settings, prepared data, fit result and its Pyro parameters) to
        ``path`` in tandem's safe format (plain tensors + JSON), atomically."""
        store = getattr(self, "param_store_", None)
        save_estimator(self, path, extra=None if store is not None else pyro.get_param_store().get_state())

    @classmethod
    def load(cls, path, map_location=None) -> "StochasticMcGPDS":
        """Read an object written by :meth:`save` (its Pyro parameters are put back into the
        parameter store). Nothing is unpickled: a damaged or foreign file raises ``ValueError``."""
        m, params = load_estimator(cls, path, map_location, with_extra=True)
        if params is not None:
            pyro.get_param_store().set_state(params)
        return m

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    @own_params
    def elbo(self, chunk: int = 256, optimal_inducing: bool = False) -> float:
        """Exact full-data ELBO in the standardised units (windows in chunks; no parameter update).

        ``optimal_inducing``: first recompute the statistics over all windows and set q(V),
        q(U) to their optimum given everything else (:func:`refresh_statistics`): the value
        the collapsed bound has. (After training they are at the optimum for the running
        statistics, which equal the recomputed ones when no hyperparameter is learned.)
        """
        S = self.data.windows.S
        if optimal_inducing:
            refresh_statistics(self.data, chunk)
        total = 0.0
        for lo in range(0, S, chunk):
            idx = torch.arange(lo, min(lo + chunk, S), device="cpu")
            obj = StochasticELBO(windows=idx)
            # scale S/|idx| is wrong for a partition; undo it: the window terms have weight 1
            val = _partition_term(obj, self.data, idx, S)
            total += val
        total -= float(_global_kl(self.data))
        return total

    @torch.no_grad()
    @own_params
    def latents(self, chunk: int = 256) -> dict:
        """Per-frame q moments in frame order: ``mu`` V × (N, Q), ``s`` V × (N, Q) private
        means/variances (standardised-data latent space)."""
        d = self.data
        hp = model_params(d)
        N, Q, V = d.N, d.Q, d.V
        mu = torch.zeros(V, N, Q, dtype=DTYPE, device=d.device)
        s = torch.zeros_like(mu)
        for lo in range(0, d.windows.S, chunk):
            idx = torch.arange(lo, min(lo + chunk, d.windows.S), device="cpu")
            mub, sd, rows, valid = _window_moments(d, hp, idx)
            mu[:, rows[valid]] = mub[:, valid]
            s[:, rows[valid]] = sd[:, valid]
        return {"mu": list(mu.unbind(0)), "s": list(s.unbind(0))}

    @own_params
    def collapsed_data(self) -> McGPDSData:
        """The same model as a :class:`McGPDSData` with windows as sequences (CPU), whose
        ``init`` holds the current parameters — for the collapsed code (small N only)."""
        d = self.data
        lat = self.latents()
        init = {}
        store = pyro.get_param_store()
        for n, x in d.init.items():
            init[n] = (store[n] if n in store else x).detach().cpu().clone()
        lams = self._frame_lams()
        for k in range(d.V):
            init[f"mu_{k}"] = lat["mu"][k].cpu().clone()
            init[f"lam_{k}"] = lams[k].cpu().clone()
        return McGPDSData([Y.cpu() for Y in d.views], d.times.cpu(), d.windows.ids, d.Q, d.M, d.J,
                          d.mapping_kernel, d.time_white, d.time_bias, d.private_prior,
                          frozenset(d.fixed), init)

    @own_params
    def to_fitted(self):
        """A :class:`~tandem.inference.mcgpds.fit.McGPDSFitted` of this fit (CPU, standardised
        units, windows as sequences) for the collapsed code's predictors
        (:func:`~tandem.inference.mcgpds.fit.predict_view`: give it test data through
        :meth:`to_model_units` and map its predictions back with :meth:`to_data_units`).
        The prediction re-collapses q(V), q(U) to their optimum given q(X) — at convergence
        the natural-gradient q(V), q(U) themselves."""
        cfg = self._config()
        data = self.collapsed_data()
        store = pyro.get_param_store()
        saved = store.get_state()
        try:
            pyro.clear_param_store()
            with torch.no_grad():
                hp = hyperparams(data)
                mus, lams = variational_params(data)
                F = collapsed_bound(data, hp, mus, lams)
                lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams,
                                  need_shared_var=True)
        finally:   # set_state adds to the store: clear what the collapsed code registered first
            pyro.clear_param_store()
            store.set_state(saved)
        mc = McGPDSConfig(Q=cfg.Q, M=cfg.M, J=cfg.J, mapping_kernel=cfg.mapping_kernel,
                          time_white=cfg.time_white, time_bias=cfg.time_bias, fixed=tuple(cfg.fixed),
                          private_prior=cfg.private_prior)
        res = getattr(self, "result_", None)
        return McGPDSFitted(mc, data, dict(data.init), lt["mu_s"], lt["s_s"], [m.detach() for m in mus],
                            [s.detach() for s in lt["s_diag"]],
                            np.asarray([] if res is None else res.losses), 0.0 if res is None else res.wall_time,
                            float(F))

    def to_model_units(self, Y, view: int) -> torch.Tensor:
        """Data units → the standardised units of the fit (view ``view``)."""
        self._check_fitted("scalers_", "fit(views, times, seq_ids)")
        sc = self.scalers_[view]
        return (as_tensor(Y, "Y", ndim=2) - sc.mean.cpu()) / sc.scale.cpu()

    def to_data_units(self, mean, var=None, view: int = 1):
        """Standardised units → data units: ``(mean, var)`` of view ``view``."""
        self._check_fitted("scalers_", "fit(views, times, seq_ids)")
        sc = self.scalers_[view]
        scale = sc.scale.to(mean.device)
        m = mean * scale + sc.mean.to(mean.device)
        return m if var is None else (m, var * scale ** 2)

    @own_params
    def to_inference_data(self, num_samples: int = 100, seed: int = 0):
        """Posterior and posterior-predictive draws of the fit as ArviZ data.

        ``arviz.InferenceData`` under ArviZ 0.x, ``xarray.DataTree`` under 1.x (as
        :func:`tandem.inference.posterior_predictive`). The draws come from the McGPDS guide
        on :meth:`collapsed_data` (windows as sequences, the fit's q(X) and hyperparameters)
        with q(V), q(U) at their optimum given them; ``y_k`` (posterior predictive and observed
        data) are in the user's units and ``log_likelihood`` is the density in those units (the
        model-unit log density minus the log scale per entry). Dims: :func:`tandem.models.mcgpds.dims`
        (the latents are (latent_dim, time) over all N frames, so this is for archives whose
        N × N per-window blocks fit in memory). The fit's parameter store is left as it was.
        """
        self.data  # noqa: B018 - NotFittedError before fit
        check_int_range(num_samples, "num_samples", low=1)
        data = self.collapsed_data()
        store = pyro.get_param_store()
        saved = store.get_state()
        try:
            pyro.clear_param_store()
            set_optimal_inducing(data)
            idata = posterior_predictive(mcgpds_model, Guide(), data, num_samples=num_samples, seed=seed,
                                         dims=dims(data.V))
        finally:   # set_state adds to the store: clear what the collapsed code registered first
            pyro.clear_param_store()
            store.set_state(saved)
        return rescale_sites(idata, view_sites(self.scalers_))

    @torch.no_grad()
    @own_params
    def _frame_lams(self):
        d = self.data
        out = torch.zeros(d.V, d.N, d.Q, dtype=DTYPE, device=d.device)
        for lo in range(0, d.windows.S, 256):
            idx = torch.arange(lo, min(lo + 256, d.windows.S), device="cpu")
            q = guide_params(d, idx)
            valid = d.mask[idx.to(d.device)]
            rows = d.rows[idx.to(d.device)]
            out[:, rows[valid]] = torch.stack(q["lam"])[:, valid]
        return list(out.unbind(0))


def _window_moments(d: StochasticData, hp: dict, idx: torch.Tensor):
    """q(X) moments of the windows ``idx`` (CPU indices): ``(mu, s, rows, valid)`` with
    ``mu``, ``s`` (V, n_windows, window length, Q) private means/variances (zero on padding),
    ``rows`` the frame index of each slot and ``valid`` the mask of real (unpadded) slots."""
    q = guide_params(d, idx)
    li = idx.to(d.device)
    m = d.mask[li].to(DTYPE)
    rows = d.rows[li]
    mu = torch.stack(q["mu"]) * m[None, :, :, None]
    _, sdiag = window_kl(d.times[rows] * m, m, hp["time_s"], hp["views"], mu, torch.stack(q["lam"]))
    return mu, sdiag, rows, d.mask[li]


def _global_kl(d: StochasticData) -> torch.Tensor:
    """Σ_k KL(q(ṽ_k), q(ũ_k) ‖ p) at the stored natural parameters."""
    hp = model_params(d)
    return sum((_q_kl(_natural_params(k), _g_on(d, v), d.J) for k, v in enumerate(hp["views"])),
               torch.zeros((), dtype=DTYPE, device=d.device))


def _partition_term(obj: StochasticELBO, d: StochasticData, idx: torch.Tensor, S: int) -> float:
    """Σ over windows ``idx`` of [E log lik − KL_i] (weight 1), without the global KL."""
    # the objective returns −(c Σ_i terms_i − KL_global) with c = S/|idx|
    c = S / idx.numel()
    val = obj(model_params, guide_params, d, update=False)
    return float((-val + _global_kl(d)) / c)


# --------------------------------------------------------------------------- simulation
def simulate_sequences(n_seq: int, seq_len: int, out_dims: list, Q: int = 2, M: int = 10, J: int = 1,
                       chunk_frames: int = 2000, seed: int = 0, **init_kwargs) -> dict:
    """Many sequences from ONE McGPDS draw, with the model's own simulator.

    :func:`tandem.models.mcgpds.simulate` builds the dense N×N time kernel, so it cannot
    draw 10⁵ frames at once. Sequences are independent given the output functions, so the
    first chunk of sequences is drawn with ``simulate`` (which also draws the inducing
    values v_k, u_k that define h and g), and every further chunk with the model itself
    (:func:`tandem.models.mcgpds.model`) conditioned on those same inducing values and
    hyperparameters. Times are ``0, 1/seq_len, …`` within each sequence.

    Returns ``views`` (list of (N, D_k) tensors), ``times`` (N,), ``seq_ids`` (N,),
    ``X_s`` (N, Q), ``init`` (the hyperparameters).
    """
    n_seq = check_int_range(n_seq, "n_seq", low=1)
    seq_len = check_int_range(seq_len, "seq_len", low=1)
    per = max(1, chunk_frames // seq_len)
    # drawn on the CPU (the same seed gives the same data everywhere); move the result to a device
    t1 = torch.arange(seq_len, dtype=DTYPE, device="cpu") / seq_len
    views, Xs = [[] for _ in out_dims], []
    first = min(per, n_seq)
    times0 = t1.repeat(first)
    seq0 = torch.arange(first, device="cpu").repeat_interleave(seq_len)
    sim = simulate(times0, seq0, out_dims, Q=Q, M=M, J=J, seed=seed, **init_kwargs)
    data0 = sim["data"]
    for k in range(len(out_dims)):
        views[k].append(sim[f"y_{k}"])
    Xs.append(sim["X_s"].mT)
    cond = {f"v_{k}": sim[f"v_{k}"] for k in range(len(out_dims))}
    cond.update({f"u_{k}": sim[f"u_{k}"] for k in range(len(out_dims))})
    done = first
    pyro.set_rng_seed(seed + 1)
    while done < n_seq:
        nb = min(per, n_seq - done)
        d = McGPDSData(None, t1.repeat(nb), torch.arange(nb, device="cpu").repeat_interleave(seq_len), Q, M, J,
                       data0.mapping_kernel, data0.time_white, data0.time_bias, data0.private_prior,
                       out_dims=list(out_dims), init=data0.init, fixed=frozenset(
                           ("alpha", "eps", "beta", "time", "kernel", "inducing", "W", "g")))
        with poutine.block():
            tr = poutine.trace(poutine.condition(mcgpds_model, cond)).get_trace(d)
        for k in range(len(out_dims)):
            views[k].append(tr.nodes[f"y_{k}"]["value"].detach())
        Xs.append(tr.nodes["X_s"]["value"].detach().mT)
        done += nb
    return {"views": [torch.cat(v) for v in views], "times": t1.repeat(n_seq),
            "seq_ids": torch.arange(n_seq, device="cpu").repeat_interleave(seq_len), "X_s": torch.cat(Xs),
            "init": data0.init}
