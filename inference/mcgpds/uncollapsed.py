"""The uncollapsed McGPDS ELBO in closed form, and the optimal q(V), q(U) it agrees with.

With explicit Gaussian posteriors over the inducing outputs of every view —
``q(v_d) = N(m_d, L_d L_dᵀ)`` for the shared function ``h`` and ``q(u_dj)`` for each basis
function ``g_j`` — the ELBO is

    ELBO = −KL[q(X) ‖ p(X)] + Σ_k Σ_d E_q [log N(y_d | h_d) + Σ_j log N(y_d | w_dj g_dj)
                                          − J log N(y_d | 0)] − Σ KL[q(v), q(u) ‖ prior],

the same surrogate likelihood as the collapsed bound (:mod:`tandem.inference.mcgpds.bound`),
so the two objectives agree exactly when q(V), q(U) are at their optima
(:func:`optimal_q_inducing`). The expectations use the ψ-statistics of q(X); everything is
float64 and Cholesky based.
"""
from __future__ import annotations

import math

import pyro
import torch
from pyro.distributions import constraints

from tandem.guides.mcgpds import variational_params
from tandem.inference.mcgpds.bound import _mapping, latent_terms
from tandem.inference.mcgpds.missing import column_patterns, fill_missing, observed_mask
from tandem.inference.numerics import cho_logdet, cholesky_jitter
from tandem.models.mcgpds import hyperparams, view_bases

__all__ = ["uncollapsed_elbo_analytic", "optimal_q_inducing", "set_optimal_inducing", "gauss_kl_diag_prior"]


def gauss_kl_diag_prior(m: torch.Tensor, L: torch.Tensor, LK: torch.Tensor) -> torch.Tensor:
    """Σ over the batch of KL(N(m, L Lᵀ) ‖ N(0, K)) with ``K = LK LKᵀ``.

    Parameters
    ----------
    m : torch.Tensor
        (..., M) means.
    L : torch.Tensor
        (..., M, M) lower Cholesky factors of the covariances.
    LK : torch.Tensor
        (M, M) lower Cholesky factor of the prior covariance K (broadcast over the batch).

    Returns
    -------
    torch.Tensor
        Scalar ``½ Σ [‖LK⁻¹L‖² + ‖LK⁻¹m‖² − M + log|K| − log|L Lᵀ|]``.
    """
    M = m.shape[-1]
    A = torch.linalg.solve_triangular(LK, L, upper=False)
    a = torch.linalg.solve_triangular(LK, m[..., None], upper=False)[..., 0]
    return 0.5 * ((A * A).sum((-1, -2)) + (a * a).sum(-1) - M + cho_logdet(LK) - cho_logdet(L)).sum()


def _expected_fit(Y, beta, w, m_u, S_u, LK, psi0, Psi1, Psi2):
    """E_{q(X) q(u)} [−β/2 Σ_d (y_d − w_d f_d)²] for f_d = K_xZ K⁻¹ u_d plus the Titsias trace.

    Returns ``Σ_d −β/2 [ y_dᵀy_d − 2 w_d y_dᵀ Ψ1 K⁻¹ m_d + w_d² tr(K⁻¹ Ψ2 K⁻¹ (m_d m_dᵀ + S_d))
    + w_d² (ψ0 − tr(K⁻¹ Ψ2)) ]`` with m_u (D, M), S_u (D, M, M).
    """
    a = torch.cholesky_solve(m_u.mT, LK)                                 # K⁻¹ m   (M, D)
    lin = (Y * (Psi1 @ a)).sum(0)                                        # (D,)
    KiP2Ki = torch.cholesky_solve(torch.cholesky_solve(Psi2, LK).mT, LK)  # K⁻¹ Ψ2 K⁻¹
    quad = (a * (Psi2 @ a)).sum(0) + (KiP2Ki[None] * S_u).sum((-1, -2))
    trace = psi0 - torch.cholesky_solve(Psi2, LK).diagonal().sum()
    return -0.5 * beta * ((Y * Y).sum(0) - 2 * w * lin + w * w * (quad + trace)).sum()


def uncollapsed_elbo_analytic(data, hp: dict, mus: list, lams: list, q_v: list, q_u: list):
    """The uncollapsed ELBO evaluated in closed form (deterministic).

    Uses the paper's surrogate likelihood (see the module docstring):
    ``E log N(y|h) + Σ_j E log N(y|w_j g_j) − J log N(y|0)``.

    Parameters
    ----------
    data : McGPDSData
        The problem (with observed views).
    hp : dict
        Hyperparameters (:func:`tandem.models.mcgpds.hyperparams`).
    mus : list of torch.Tensor
        (N, Q) variational means, one per view.
    lams : list of torch.Tensor
        (N, Q) variational precisions, one per view.
    q_v : list of tuple
        ``q_v[k] = (m (D, M), L (D, M, M))`` for ``v_d = h_d(Z_h)``.
    q_u : list of tuple
        ``q_u[k] = (m (J, D, M), L (J, D, M, M))`` for ``u_dj = g_dj(Z_g)``.

    Returns
    -------
    torch.Tensor
        Scalar ELBO.
    """
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    elbo = -lt["kl"]
    kind = _mapping(data)
    for k, Y in enumerate(data.views):
        v = hp["views"][k]
        N, D = Y.shape
        beta = v["beta"]
        mu, s = mus[k], lt["s_diag"][k]
        elbo = elbo - 0.5 * N * D * math.log(2 * math.pi) + 0.5 * N * D * beta.log()
        bh, bgs = view_bases(v, kind)
        psi0, P1, P2 = bh.psi(mu, s)
        LH = bh.chol()
        mv, Lv = q_v[k]
        elbo = elbo + _expected_fit(Y, beta, Y.new_ones(D), mv, Lv @ Lv.mT, LH, psi0, P1, P2)
        elbo = elbo - gauss_kl_diag_prior(mv, Lv, LH)
        mu_, Lu = q_u[k]
        for j, bg in enumerate(bgs):
            psi0g, P1g, P2g = bg.psi(mu, s)
            LG = bg.chol()
            elbo = elbo + _expected_fit(Y, beta, v["W"][:, j], mu_[j], Lu[j] @ Lu[j].mT, LG, psi0g, P1g, P2g)
            elbo = elbo - gauss_kl_diag_prior(mu_[j], Lu[j], LG)
            elbo = elbo + 0.5 * beta * (Y * Y).sum()          # − log N(y|0) (quadratic part)
    return elbo


def _optimal_q_columns(bh, bgs, W, beta, mu, s, Y):
    """Optimal q(v_d), q(u_dj) of columns ``Y`` (n, D) observed in the frames of ``mu``, ``s`` (n, Q).

    Returns ``((m (D, M), L (D, M, M)), (m (J, D, M), L (J, D, M, M)))``.
    """
    D = Y.shape[1]
    _, P1, P2 = bh.psi(mu, s)
    H = bh.kzz()
    Sig = H + beta * P2
    m = beta * H @ torch.linalg.solve(Sig, P1.mT @ Y)                # (M, D)
    cov = H @ torch.linalg.solve(Sig, H)
    cov = 0.5 * (cov + cov.mT)
    q_v = (m.mT.contiguous(), cholesky_jitter(cov, "optimal q(v) covariance").expand(D, -1, -1).contiguous())
    ms, Ls = [], []
    for j, bg in enumerate(bgs):
        _, P1g, P2g = bg.psi(mu, s)
        G = bg.kzz()
        w = W[:, j]
        Sg = G[None] + (beta * w * w)[:, None, None] * P2g[None]
        mj = (beta * w)[:, None] * (G[None] @ torch.linalg.solve(Sg, (P1g.mT @ Y).mT[..., None]))[..., 0]
        cj = G[None] @ torch.linalg.solve(Sg, G[None].expand_as(Sg))
        ms.append(mj)
        Ls.append(cholesky_jitter(0.5 * (cj + cj.mT), "optimal q(u) covariance"))
    return q_v, (torch.stack(ms), torch.stack(Ls))


def _optimal_q_masked(bh, bgs, W, beta, mu, s, Y):
    """:func:`_optimal_q_columns` of a view with NaN entries: column d uses only the frames O_d where
    it is observed (the masked likelihood the model scores), columns grouped by pattern as in
    :func:`tandem.inference.mcgpds.missing.masked_view_posterior`; a column never observed keeps
    its prior, N(0, K_ZZ)."""
    N, D = Y.shape
    M, J = bh.kzz().shape[0], len(bgs)
    LH = cholesky_jitter(bh.kzz(), "K_ZZ of h")
    LG = [cholesky_jitter(bg.kzz(), "K_ZZ of g") for bg in bgs]
    mv, Lv = Y.new_zeros(D, M), LH.expand(D, M, M).clone()
    mu_u = Y.new_zeros(J, D, M)
    Lu = torch.stack([L.expand(D, M, M) for L in LG]) if J else Y.new_zeros(0, D, M, M)
    Y0 = fill_missing(Y)
    for pat, cp in zip(*column_patterns(observed_mask(Y))):
        rows = torch.nonzero(pat).reshape(-1)
        (m, L), (mj, Lj) = _optimal_q_columns(bh, bgs, W[cp], beta, mu[rows], s[rows], Y0[rows][:, cp])
        mv[cp], Lv[cp] = m, L
        mu_u[:, cp], Lu[:, cp] = mj, Lj
    return (mv, Lv), (mu_u, Lu)


def optimal_q_inducing(data, hp: dict, mus: list, lams: list):
    """The optimal q(V), q(U) (per output) of every view, as (mean, Cholesky) pairs.

    ``q(v_d) = N(β H (H + βψ4)⁻¹ ψ0ᵀ y_d, H (H + βψ4)⁻¹ H)`` and likewise for ``u_dj`` with
    ``β w_dj`` and ``β w_dj² ψ5``. For a view with NaN (missing) entries the model scores only
    the observed ones, so column d's statistics run over the frames where it is observed (a
    column never observed keeps its prior N(0, K_ZZ)).

    Parameters
    ----------
    data : McGPDSData
        The problem (with observed views, NaN where missing).
    hp : dict
        Hyperparameters (:func:`tandem.models.mcgpds.hyperparams`).
    mus : list of torch.Tensor
        (N, Q) variational means, one per view.
    lams : list of torch.Tensor
        (N, Q) variational precisions, one per view.

    Returns
    -------
    tuple of list
        ``(q_v, q_u)`` in the form :func:`uncollapsed_elbo_analytic` takes.
    """
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    kind = _mapping(data)
    q_v, q_u = [], []
    for k, Y in enumerate(data.views):
        v = hp["views"][k]
        bh, bgs = view_bases(v, kind)
        # NaN entries are missing (masked in the model): they must not reach the statistics
        columns = _optimal_q_masked if bool(torch.isnan(Y).any()) else _optimal_q_columns
        qv, qu = columns(bh, bgs, v["W"], v["beta"], mus[k], lt["s_diag"][k], Y)
        q_v.append(qv)
        q_u.append(qu)
    return q_v, q_u


def set_optimal_inducing(data):
    """Write the optimal q(V), q(U) into the parameter store.

    Given the current q(X) and hyperparameters; e.g. after a collapsed fit, before drawing
    posterior-predictive samples with :func:`~tandem.guides.mcgpds.mcgpds_guide`. Sets
    ``qv_m_k``, ``qv_L_k``, ``qu_m_k``, ``qu_L_k`` of every view k (replacing old values).

    Parameters
    ----------
    data : McGPDSData
        The problem (with observed views).
    """
    store = pyro.get_param_store()
    with torch.no_grad():
        hp = hyperparams(data)
        mus, lams = variational_params(data)
        q_v, q_u = optimal_q_inducing(data, hp, mus, lams)
    for k in range(data.V):
        for name, val, con in ((f"qv_m_{k}", q_v[k][0], constraints.real),
                               (f"qv_L_{k}", q_v[k][1], constraints.lower_cholesky),
                               (f"qu_m_{k}", q_u[k][0], constraints.real),
                               (f"qu_L_{k}", q_u[k][1], constraints.lower_cholesky)):
            if name in store:
                del store[name]
            pyro.param(name, val.detach().clone(), constraint=con)
