"""Baselines and kernels beside the twin GP: the Gaussian kernel, ridge regression, GPR, k-NN.

* :func:`rbf` — the Gaussian kernel exp(−‖a−b‖²/(2ρ²)) every twin-GP matrix is built from.
* :func:`ridge_predict` — ridge linear regression, KLTGP's starting point (the TGP code's init).
* :func:`gpr_predict`, :func:`wknn_predict`, :func:`kernel_knn_predict` — the paper's baselines
  (GP regression, weighted k-NN, kernel-weighted k-NN with the width chosen by kernel alignment).
* :func:`kernel_alignment`, :func:`hsic` — centred kernel–target alignment and HSIC between kernel
  matrices (the criteria of the KTA/HSIC k-NN baselines).

All of them are re-exported by :mod:`tandem.inference.twin_gp.predictor`.
"""
from __future__ import annotations

import torch

from tandem.inference.distances import constant_columns, knn, sq_dists
from tandem.inference.numerics import DTYPE, cho_solve, cholesky_jitter
from tandem.inference.validation import as_tensor, check_int_range, check_real_range

__all__ = ["rbf", "ridge_predict", "gpr_predict", "wknn_predict", "kernel_alignment", "hsic",
           "kernel_knn_predict"]


def rbf(A: torch.Tensor, B: torch.Tensor, rho: float) -> torch.Tensor:
    """Gaussian kernel exp(−‖a−b‖²/(2ρ²)) for rows of A (..., n, d) and B (..., m, d) → (..., n, m).

    ‖a‖² + ‖b‖² − 2aᵀb from one matrix product; without autograd every later pass works
    in place on that product's output (the local model builds (64, 800, 800) blocks, where
    each temporary costs as much as the product).

    Parameters
    ----------
    A : torch.Tensor
        (..., n, d) rows a.
    B : torch.Tensor
        (..., m, d) rows b.
    rho : float
        Kernel width ρ > 0.

    Returns
    -------
    torch.Tensor
        (..., n, m) kernel values.

    Raises
    ------
    ValueError
        Naming ``rho`` when it is not a finite real > 0 (ρ enters squared, so −ρ would pass
        as ρ; NaN would give a NaN kernel).
    """
    check_real_range(rho, "rho (kernel width)", 0.0, low_open=True)
    nA, nB = (A * A).sum(-1).unsqueeze(-1), (B * B).sum(-1).unsqueeze(-2)
    AB = A @ B.transpose(-1, -2)
    if torch.is_grad_enabled() and (A.requires_grad or B.requires_grad):
        return torch.exp(-(nA + nB - 2.0 * AB).clamp_min(0.0) / (2.0 * rho * rho))
    sq = AB.mul_(-2.0).add_(nA).add_(nB).clamp_min_(0.0)
    return sq.mul_(-1.0 / (2.0 * rho * rho)).exp_()


def ridge_predict(X, Y, Xt, lam: float = 1e-2) -> torch.Tensor:
    """Ridge linear regression on [1, x] (the TGP code's LinearRegressor, used as the init).

    W = (X̃ᵀX̃ + r I)⁻¹ X̃ᵀY with X̃ = [1, X_v] (N, 1 + d_v) and prediction [1, x_v] W, where
    X_v are the columns of X that vary over the training rows (a constant column is a
    multiple of the intercept column and carries nothing else, so dropping it keeps the
    prediction unchanged when constant columns are appended and the ridge's size free of
    their count). The ridge r is ``lam`` × the mean diagonal of X̃ᵀX̃ (1e-2: with 240-d inputs
    and few training points a near-zero ridge extrapolates far outside the output range,
    where K_y ≈ 0 and the twin-GP gradients vanish). Shapes: X (N, d_x), Y (N, d_y),
    Xt (B, d_x) → (B, d_y).

    Parameters
    ----------
    X : torch.Tensor
        (N, d_x) training inputs.
    Y : torch.Tensor
        (N, d_y) training outputs.
    Xt : torch.Tensor
        (B, d_x) test inputs.
    lam : float, default 1e-2
        The ridge as a multiple of the mean diagonal of X̃ᵀX̃.

    Returns
    -------
    torch.Tensor
        (B, d_y) predictions.

    Raises
    ------
    ValueError
        Naming ``lam`` when it is not a finite real ≥ 0.
    """
    lam = check_real_range(lam, "lam (ridge)", 0.0)
    keep = ~constant_columns(X)
    X, Xt = X[:, keep], Xt[:, keep]
    Xa = torch.cat([torch.ones(X.shape[0], 1, dtype=X.dtype, device=X.device), X], 1)
    Ta = torch.cat([torch.ones(Xt.shape[0], 1, dtype=X.dtype, device=X.device), Xt], 1)
    G = Xa.T @ Xa
    G = G + lam * G.diagonal().mean() * torch.eye(G.shape[0], dtype=X.dtype, device=X.device)
    W = cho_solve(cholesky_jitter(G, "ridge Gram matrix"), Xa.T @ Y)
    return Ta @ W


def gpr_predict(X, Y, Xt, rho: float, noise: float) -> torch.Tensor:
    """GP regression mean with independent outputs: k_X(x, X)(K + σ²I)⁻¹ Y (baseline "GPR").

    Parameters
    ----------
    X : array_like
        (N, d_x) training inputs.
    Y : array_like
        (N, d_y) training outputs.
    Xt : array_like
        (B, d_x) test inputs.
    rho : float
        Kernel width ρ.
    noise : float
        Noise variance σ².

    Returns
    -------
    torch.Tensor
        (B, d_y) predictive means.

    Raises
    ------
    ValueError
        Naming ``rho`` or ``noise`` when it is not a finite real > 0.
    """
    rho = check_real_range(rho, "rho (kernel width)", 0.0, None, low_open=True)
    noise = check_real_range(noise, "noise (variance)", 0.0, None, low_open=True)
    X, Y, Xt = (as_tensor(a, n, ndim=2) for a, n in ((X, "X"), (Y, "Y"), (Xt, "Xt")))
    K = rbf(X, X, rho) + noise * torch.eye(X.shape[0], dtype=DTYPE, device=X.device)
    W = cho_solve(cholesky_jitter(K, "GPR kernel"), Y)
    return rbf(Xt, X, rho) @ W


def wknn_predict(X, Y, Xt, k: int) -> torch.Tensor:
    """Weighted k-NN regression (baseline "WKNN").

    The mean of the k nearest outputs weighted by 1/distance (as in the TGP code's WKNNRegressor);
    an exact match takes its output.

    Parameters
    ----------
    X : array_like
        (N, d_x) training inputs.
    Y : array_like
        (N, d_y) training outputs.
    Xt : array_like
        (B, d_x) test inputs.
    k : int
        Neighbours, 1 ≤ k ≤ N.

    Returns
    -------
    torch.Tensor
        (B, d_y) predictions.
    """
    X, Y, Xt = (as_tensor(a, n, ndim=2) for a, n in ((X, "X"), (Y, "Y"), (Xt, "Xt")))
    k = check_int_range(k, "k", 1, X.shape[0])
    idx = knn(Xt, X, k)
    dist = sq_dists(Xt.unsqueeze(1), X[idx]).squeeze(1).sqrt()
    w = 1.0 / dist.clamp_min(1e-12)
    w = w / w.sum(1, keepdim=True)
    return (w.unsqueeze(-1) * Y[idx]).sum(1)


def _centre(K: torch.Tensor) -> torch.Tensor:
    """H K H with H = I − 11ᵀ/n (double centring)."""
    return K - K.mean(0, keepdim=True) - K.mean(1, keepdim=True) + K.mean()


def kernel_alignment(KA: torch.Tensor, KB: torch.Tensor) -> float:
    """Centred kernel–target alignment of two (n, n) kernel matrices.

    ⟨HK_AH, HK_BH⟩_F / (‖HK_AH‖_F ‖HK_BH‖_F) ∈ [−1, 1] (Cortes et al.'s centred KTA), with
    H = I − 11ᵀ/n.

    Parameters
    ----------
    KA, KB : torch.Tensor
        (n, n) kernel matrices.

    Returns
    -------
    float
        The alignment.
    """
    A, B = _centre(KA), _centre(KB)
    return float((A * B).sum() / (A.norm() * B.norm()).clamp_min(1e-300))


def hsic(KA: torch.Tensor, KB: torch.Tensor) -> float:
    """Biased HSIC estimate tr(K_A H K_B H)/(n − 1)² (Gretton et al.).

    Parameters
    ----------
    KA, KB : torch.Tensor
        (n, n) kernel matrices.

    Returns
    -------
    float
        The estimate.
    """
    n = KA.shape[0]
    return float((_centre(KA) * KB).sum() / (n - 1) ** 2)


def kernel_knn_predict(X, Y, Xt, k: int, rho: float) -> torch.Tensor:
    """Kernel-weighted k-NN regression (baselines "KTA-kNN"/"HSIC-kNN").

    The k nearest training outputs weighted by the input kernel exp(−‖x − x_i‖²/(2ρ²)) (normalised in log
    space, so far test points still get finite weights). ρ is the width chosen by kernel
    alignment with the output kernel (:func:`tandem.inference.twin_gp.selection.select_alignment_knn`).

    Parameters
    ----------
    X : array_like
        (N, d_x) training inputs.
    Y : array_like
        (N, d_y) training outputs.
    Xt : array_like
        (B, d_x) test inputs.
    k : int
        Neighbours, 1 ≤ k ≤ N.
    rho : float
        Input kernel width ρ > 0.

    Returns
    -------
    torch.Tensor
        (B, d_y) predictions.
    """
    X, Y, Xt = (as_tensor(a, n, ndim=2) for a, n in ((X, "X"), (Y, "Y"), (Xt, "Xt")))
    k = check_int_range(k, "k", 1, X.shape[0])
    rho = check_real_range(rho, "rho", 0.0, low_open=True)
    idx = knn(Xt, X, k)
    w = torch.softmax(-sq_dists(Xt.unsqueeze(1), X[idx]).squeeze(1) / (2.0 * rho * rho), dim=1)
    return (w.unsqueeze(-1) * Y[idx]).sum(1)
