"""The factors of McGPDS's latent prior that do not depend on q(X), for a batch of blocks of frames.

A block is a sequence (the collapsed bound, :mod:`tandem.inference.mcgpds.bound`) or a window
(the stochastic fit, :mod:`tandem.inference.mcgpds.stochastic_elbo`); blocks of one batch are
zero-padded to a common length n, padding rows and columns being those of the identity (so they
add exactly nothing to a log-determinant or a quadratic form). Per block, with ``K_s`` the shared
time kernel's Gram matrix and ``A_k = α_k² K_k + (1 − α_k)² ε_k I`` view k's private prior
covariance:

* ``Ls = chol K_s`` (nb, n, n);
* ``A`` (V, nb, n, n), ``Ainv = A⁻¹`` (from the Cholesky of A) and ``logdetA = log|A|`` (V, nb);
* ``LBp = chol B'`` with ``B' = I + L_sᵀ C L_s``, ``C = Σ_k (1 − α_k)² A_k⁻¹``.

Blocks with the same times (:func:`same_blocks`) share all of these: they are then one block's,
expanded over the batch without copies, and :func:`block_matmul` / :func:`block_solve_triangular`
apply them to all blocks in one product.

These depend on α, ε and the time kernels only. When those are fixed (the paper's protocol fixes
them, and so does the benchmark of the stochastic fit) every evaluation of an optimiser over q(X)
would rebuild the same factors; the callers compute them once and pass them on. ``Ainv_ok`` says
whether ``A`` is well conditioned (condition number < 1e8), in which case the private covariances
may be computed as ``(A⁻¹ + Λ)⁻¹`` (:class:`tandem.inference.mcgpds.private_cov._PrivateCovInv`);
``None`` when it was not decided (then the general form is used).
"""
from __future__ import annotations

import torch

from tandem.inference.numerics import cho_logdet, cholesky_jitter
from tandem.models.kernels import time_params_kernel

__all__ = ["block_matmul", "block_prior_factors", "block_solve_triangular", "factor_bytes", "private_prior_cov",
           "same_blocks", "shared_first", "well_conditioned"]

#: condition number of A below which ``(A⁻¹ + Λ)⁻¹`` is used for the private covariances
AINV_COND_MAX = 1e8


def _mask_kernel(K: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero the padding rows/cols of a batched (…, nb, n, n) matrix and put 1 on their diagonal."""
    if bool(mask.all()):         # no padding (equal-length blocks): nothing to do, and four passes saved
        return K
    m = mask.to(K.dtype)
    return K * (m[:, :, None] * m[:, None, :]) + torch.diag_embed(1.0 - m)


def _time_K(t: torch.Tensor, hp: dict | None, mask: torch.Tensor) -> torch.Tensor:
    """Padded block Gram matrices ``k(t_b, t_b)`` (nb, n, n) of the time kernel carried by ``hp``
    (a :class:`~tandem.models.kernels.TimeParams`; a plain dict is the paper's kernel, see
    :func:`~tandem.models.kernels.time_params_kernel`); ``None``: the identity."""
    if hp is None:  # "gplvm" private prior: identity instead of a time kernel
        n = t.shape[-1]
        return torch.eye(n, dtype=t.dtype, device=t.device).expand(t.shape[0], n, n)
    kern, params = time_params_kernel(hp)
    return _mask_kernel(kern.gram(t, t, params, same=True), mask)


def _time_key(hp) -> tuple | None:
    """Cache-key part of one time kernel: its structure and parameter names (values go separately)."""
    if hp is None:
        return None
    kern, params = time_params_kernel(hp)
    return (repr(kern), tuple(sorted(params)))


def _time_leaves(hp) -> list:
    """The tensors of one time kernel's hyperparameters, in a fixed (sorted-name) order."""
    if hp is None:
        return []
    _, params = time_params_kernel(hp)
    return [params[n] for n in sorted(params) if isinstance(params[n], torch.Tensor)]


def _view_scalars(views: list, name: str, like: torch.Tensor) -> torch.Tensor:
    """(V,) the per-view hyperparameter ``name`` (α or ε; tensors or numbers) stacked, in
    ``like``'s dtype and device (tensors keep their autograd graph)."""
    return torch.stack([torch.as_tensor(v[name], dtype=like.dtype, device=like.device).reshape(()) for v in views])


def prior_leaves(time_s, views_time: list, *tensors: torch.Tensor) -> list:
    """Every tensor the factors depend on: ``tensors`` (α, ε) and the time kernels' hyperparameters."""
    out = list(tensors) + _time_leaves(time_s)
    for thp in views_time:
        out += _time_leaves(thp)
    return out


def shared_first(x: torch.Tensor, dim: int) -> torch.Tensor | None:
    """The one block of ``x`` along ``dim`` when every block there is the same stored block (an
    expanded tensor: stride 0 and more than one block), keeping ``dim`` (size 1); else None.

    Parameters
    ----------
    x : torch.Tensor
        Any tensor.
    dim : int
        The block dimension.

    Returns
    -------
    torch.Tensor or None
        ``x.narrow(dim, 0, 1)`` or None.
    """
    if -x.dim() <= dim < x.dim() and x.shape[dim] > 1 and x.stride(dim) == 0:
        return x.narrow(dim, 0, 1)
    return None


def _one_product(op, M: torch.Tensor, X: torch.Tensor) -> torch.Tensor | None:
    """``op(M_b, X_b)`` for every block b as one call ``op(M_1, [X_1 … X_nb])`` when ``M`` is one
    (n, n) block expanded over the nb blocks; None when it is not."""
    one = shared_first(M, -3)
    if one is None:
        return None
    *lead, nb, n, Q = X.shape
    cols = X.movedim(-3, -2).reshape(*lead, n, nb * Q)                  # (…, n, nb·Q)
    return op(one.squeeze(-3), cols).reshape(*lead, n, nb, Q).movedim(-2, -3)


def block_matmul(M: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """``M @ X`` for (…, nb, n, n) block matrices and (…, nb, n, Q) blocks of columns.

    When ``M`` is one matrix expanded over the nb blocks (:func:`block_prior_factors` on blocks
    with the same times), the nb products are one (n, n) × (n, nb·Q) product: the matrix is read
    once instead of nb times, which on long archives is most of a λ-held evaluation's memory
    traffic. Otherwise the batched product.

    Parameters
    ----------
    M : torch.Tensor
        (…, nb, n, n).
    X : torch.Tensor
        (…, nb, n, Q), the same leading dimensions.

    Returns
    -------
    torch.Tensor
        (…, nb, n, Q).
    """
    out = _one_product(torch.matmul, M, X)
    return M @ X if out is None else out


def block_solve_triangular(L: torch.Tensor, X: torch.Tensor, upper: bool) -> torch.Tensor:
    """``L⁻¹ X`` for (…, nb, n, n) triangular blocks and (…, nb, n, Q) columns; one solve with
    nb·Q right-hand sides when ``L`` is one block expanded (as :func:`block_matmul`).

    Parameters
    ----------
    L : torch.Tensor
        (…, nb, n, n) triangular.
    X : torch.Tensor
        (…, nb, n, Q).
    upper : bool
        Whether ``L`` is upper triangular.

    Returns
    -------
    torch.Tensor
        (…, nb, n, Q).
    """
    out = _one_product(lambda M, C: torch.linalg.solve_triangular(M, C, upper=upper), L, X)
    return torch.linalg.solve_triangular(L, X, upper=upper) if out is None else out


def factor_bytes(*factors: dict) -> int:
    """Memory held by the tensors of some factor dicts (what a cache of them counts against
    :data:`tandem.inference.mcgpds.streamed.PRIOR_CACHE_MB`).

    Parameters
    ----------
    *factors : dict
        :func:`block_prior_factors` results (other values are ignored).

    Returns
    -------
    int
        Bytes.
    """
    storages = {}      # by storage: a factor expanded over identical blocks holds one block's memory
    for d in factors:
        for x in d.values():
            if isinstance(x, torch.Tensor):
                st = x.untyped_storage()
                storages[st.data_ptr()] = st.nbytes()
    return sum(storages.values())


def well_conditioned(A: torch.Tensor, Ainv: torch.Tensor | None = None) -> bool:
    """Whether every matrix of a stack is positive definite with condition number below
    :data:`AINV_COND_MAX`.

    Exact (one symmetric eigenvalue decomposition per matrix) unless a cheaper sufficient test
    settles it: given ``A⁻¹`` from a successful Cholesky factorisation (so A is positive
    definite), a symmetric matrix has ``‖A‖₂ ≤ ‖A‖_∞`` (the largest absolute row sum), hence
    ``cond₂ A ≤ ‖A‖_∞ ‖A⁻¹‖_∞``; when that bound is below the limit for every matrix the answer
    is True without the eigenvalues (at 1000-frame blocks the decomposition was ≈ 16 % of the
    first evaluation of the collapsed bound). Otherwise the eigenvalues decide, as before.

    Parameters
    ----------
    A : torch.Tensor
        (…, n, n) symmetric matrices.
    Ainv : torch.Tensor, optional
        Their inverses, computed from a Cholesky factor that exists.

    Returns
    -------
    bool
        True when all are well conditioned.
    """
    if A.dim() > 2 and shared_first(A, -3) is not None:      # one matrix expanded over identical blocks
        A = shared_first(A, -3)
        Ainv = None if Ainv is None or shared_first(Ainv, -3) is None else shared_first(Ainv, -3)
    if Ainv is not None:
        bound = A.abs().sum(-1).amax(-1) * Ainv.abs().sum(-1).amax(-1)
        if bool(torch.isfinite(bound).all()) and bool((bound < AINV_COND_MAX).all()):
            return True
    ev = torch.linalg.eigvalsh(A)
    return bool((ev[..., -1] < AINV_COND_MAX * ev[..., 0]).all() and (ev[..., 0] > 0).all())


def private_prior_cov(t: torch.Tensor, mask: torch.Tensor, views_time: list, alpha: torch.Tensor,
                      eps: torch.Tensor) -> torch.Tensor:
    """The views' private prior covariances ``A_k = α_k² K_k + (1 − α_k)² ε_k I`` of a batch of
    padded blocks, (V, nb, n, n), padding rows and columns those of the identity.

    Parameters
    ----------
    t : torch.Tensor
        (nb, n) times of the blocks' frames (any value at padding).
    mask : torch.Tensor
        (nb, n) real (1/True) or padding (0/False) slots.
    views_time : list
        Per view, its private time kernel (None: the identity).
    alpha, eps : torch.Tensor
        (V,) the views' α and ε.

    Returns
    -------
    torch.Tensor
        (V, nb, n, n).
    """
    nb, n = mask.shape
    V = len(views_time)
    eye = torch.eye(n, dtype=t.dtype, device=t.device)
    A = torch.stack([(a * a) * _time_K(t, thp, mask) + ((1 - a) ** 2 * e) * eye
                     for a, e, thp in zip(alpha, eps, views_time)])   # (V, nb, n, n)
    return _mask_kernel(A.reshape(V * nb, n, n), mask.repeat(V, 1)).reshape(V, nb, n, n)


def same_blocks(t: torch.Tensor, mask: torch.Tensor) -> bool:
    """Whether every block of a padded batch has the same real slots and the same times there
    (sequences sampled on one grid: then their prior factors are one block's).

    Parameters
    ----------
    t : torch.Tensor
        (nb, n) times (any value at padding).
    mask : torch.Tensor
        (nb, n) real (1/True) or padding (0/False) slots.

    Returns
    -------
    bool
        True when the blocks are bit-for-bit the same on their real slots.
    """
    if not bool((mask == mask[:1]).all()):
        return False
    tm = torch.where(mask.bool(), t, torch.zeros((), dtype=t.dtype, device=t.device))
    return bool((tm == tm[:1]).all())


def block_prior_factors(t: torch.Tensor, mask: torch.Tensor, time_s, views_time: list, alpha: torch.Tensor,
                        eps: torch.Tensor, ok: bool | None = None) -> dict:
    """The q(X)-independent factors of a batch of padded blocks (see the module docstring).

    Parameters
    ----------
    t : torch.Tensor
        (nb, n) times of the blocks' frames (any value at padding).
    mask : torch.Tensor
        (nb, n) real (1/True) or padding (0/False) slots; padding at the end of a block.
    time_s : TimeParams or dict or None
        The shared time kernel (None: the identity).
    views_time : list
        Per view, its private time kernel (None: the identity).
    alpha, eps : torch.Tensor
        (V,) the views' α and ε.
    ok : bool or None, default None
        ``Ainv_ok`` when the caller knows it; ``None`` leaves it undecided (see
        :func:`well_conditioned`).

    Returns
    -------
    dict
        ``Ls`` (nb, n, n), ``A``, ``Ainv`` (V, nb, n, n), ``logdetA`` (V, nb), ``LBp`` (nb, n, n)
        and ``Ainv_ok``. When all blocks have the same times (:func:`same_blocks`) these are one
        block's factors expanded over the nb blocks (stride 0, no copies): consumers broadcast,
        and :func:`block_matmul` turns their products into one matrix product.
    """
    nb, n = mask.shape
    if nb > 1 and same_blocks(t, mask):
        # every block has the same times: one block's factors, expanded (no copies) over the nb
        one = block_prior_factors(t[:1], mask[:1], time_s, views_time, alpha, eps, ok)
        V = len(views_time)
        return {"Ls": one["Ls"].expand(nb, n, n), "A": one["A"].expand(V, nb, n, n),
                "Ainv": one["Ainv"].expand(V, nb, n, n), "LBp": one["LBp"].expand(nb, n, n),
                "logdetA": one["logdetA"].expand(V, nb), "Ainv_ok": one["Ainv_ok"]}
    eye = torch.eye(n, dtype=t.dtype, device=t.device)
    Ls = cholesky_jitter(_time_K(t, time_s, mask), "shared time kernel K_t^(s)")
    A = private_prior_cov(t, mask, views_time, alpha, eps)
    LA = cholesky_jitter(A, "private prior covariance A_k")
    Ainv = torch.cholesky_inverse(LA)                          # block inverse via Cholesky
    C = (((1 - alpha) ** 2)[:, None, None, None] * Ainv).sum(0)
    if not bool(mask.all()):
        m = mask.to(t.dtype)
        C = C * (m[:, :, None] * m[:, None, :])
    LBp = cholesky_jitter(eye + Ls.mT @ C @ Ls, "B' = I + L_sᵀ C L_s")
    return {"Ls": Ls, "A": A, "Ainv": Ainv, "LBp": LBp, "logdetA": cho_logdet(LA), "Ainv_ok": ok}
