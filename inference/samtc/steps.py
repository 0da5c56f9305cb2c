"""The steps of SAMTC (Zhang, Zhang & Liu, IJCAI 2016), one function each.

Our copy of the paper lost its display equations; every formula here is rebuilt from
the prose and the cited methods (see ``docs/specs/samtc.md``). Rebuilt choices are marked
"Rebuilt:" in the docstrings.

Notation: task t has n_t points (rows of X_t, dense or scipy.sparse, one common
feature space of dimension d); clusters C^t_1..C^t_{h_t}; Z^t ⊂ task t and Z^s ⊂ task s
are the target and source subtasks of a (target t, source s) pair, ñ_t = |Z^t|,
ñ_s = |Z^s|, h̃_s = number of source clusters kept in Z^s.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.special import logsumexp

from tandem.inference.distances import median_distance, sq_dists

__all__ = ["reduce_dimension", "similarity", "neighbour_order", "silverman_bandwidths",
           "kde_logpdf", "js_divergence", "js_matrix", "mutual_nearest_pairs",
           "gaussian_kernel", "kmm_frank_wolfe", "kmm_lmo", "kmm_objective",
           "kmm_relatedness", "neighbour_indicator", "snn_graph", "weighted_snn", "k_grid"]


# ---------------------------------------------------------------------------------
# representations
# ---------------------------------------------------------------------------------

def reduce_dimension(tasks, dim: int | None, seed: int = 0):
    """Project all tasks into one common r-dimensional space for the density steps.

    Rebuilt: the paper estimates product KDEs in the raw feature space, which underflows and is
    meaningless for thousands of tf-idf terms (spec pitfall). We stack the tasks and take a
    truncated SVD: LSA (no centring, keeps sparsity) for sparse input, PCA (centred) for dense
    input.

    Parameters
    ----------
    tasks : list of array_like or scipy.sparse matrices
        Task t's (n_t, d) data, one common feature space.
    dim : int or None
        r; ``None`` → min(d, 10); ``dim ≥ d`` (dense input) → the raw features.
    seed : int, default 0
        Seed of the sparse SVD's start vector.

    Returns
    -------
    list of numpy.ndarray
        Dense (n_t, r) representations, one per task.

    Raises
    ------
    ValueError
        If ``dim`` < 1.
    """
    d = tasks[0].shape[1]
    sparse = any(sp.issparse(X) for X in tasks)
    r = min(d, 10) if dim is None else int(dim)
    if r < 1:
        raise ValueError(f"reduce_dim: expected a positive number of dimensions, got {dim}")
    sizes = [X.shape[0] for X in tasks]
    if not sparse and r >= d:
        return [np.asarray(X, dtype=np.float64) for X in tasks]
    r = min(r, d - 1, sum(sizes) - 1) if sparse else min(r, d)
    if sparse:
        S = sp.vstack([sp.csr_matrix(X, dtype=np.float64) for X in tasks]).tocsr()
        v0 = np.random.default_rng(seed).standard_normal(min(S.shape))
        U, s, Vt = spla.svds(S, k=r, v0=v0, tol=1e-10)
        order = np.argsort(s)[::-1]
        Y = np.asarray(S @ Vt[order].T)
    else:
        S = np.vstack([np.asarray(X, dtype=np.float64) for X in tasks])
        S = S - S.mean(0)
        U, s, Vt = np.linalg.svd(S, full_matrices=False)
        Y = S @ Vt[:r].T
    out, i = [], 0
    for n in sizes:
        out.append(Y[i:i + n])
        i += n
    return out


def similarity(X, Y=None, metric: str = "euclidean"):
    """Dense similarity matrix between the rows of X and Y.

    ``cosine``: x·y / (‖x‖‖y‖) (zero rows → 0); ``euclidean``: −‖x − y‖², so that larger is
    more similar (its ranking equals the ranking by a Gaussian kernel of any width).

    Parameters
    ----------
    X : array_like or scipy.sparse matrix
        (n, d).
    Y : array_like or scipy.sparse matrix, optional
        (m, d); ``None`` → X.
    metric : {"euclidean", "cosine"}, default "euclidean"
        The similarity.

    Returns
    -------
    numpy.ndarray
        (n, m) similarities.

    Raises
    ------
    ValueError
        For an unknown ``metric``.
    """
    Y = X if Y is None else Y
    if metric == "cosine":
        def nrm(A):
            a = np.sqrt(np.asarray(A.multiply(A).sum(1)).ravel()) if sp.issparse(A) else np.linalg.norm(A, axis=1)
            return np.where(a > 0, a, 1.0)
        G = X @ Y.T
        G = G.toarray() if sp.issparse(G) else np.asarray(G)
        return G / nrm(X)[:, None] / nrm(Y)[None, :]
    if metric == "euclidean":
        if not sp.issparse(X) and not sp.issparse(Y):
            return -sq_dists(np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64))
        G = X @ Y.T
        G = G.toarray() if sp.issparse(G) else np.asarray(G)
        xx = np.asarray(X.multiply(X).sum(1)).ravel() if sp.issparse(X) else np.einsum("ij,ij->i", X, X)
        yy = np.asarray(Y.multiply(Y).sum(1)).ravel() if sp.issparse(Y) else np.einsum("ij,ij->i", Y, Y)
        return -np.maximum(xx[:, None] - 2 * G + yy[None, :], 0.0)
    raise ValueError(f"metric: expected 'cosine' or 'euclidean', got {metric!r}")


def neighbour_order(S, exclude_self: bool = False, max_k: int | None = None):
    """Column indices of S sorted by decreasing similarity, per row.

    Ties are broken by column index (stable sort), so the result is deterministic.

    Parameters
    ----------
    S : array_like
        (n, m) similarities.
    exclude_self : bool, default False
        (Square S) remove each point from its own list.
    max_k : int, optional
        Keep at most this many neighbours.

    Returns
    -------
    numpy.ndarray
        (n, m′) int indices, m′ = min(max_k, available).
    """
    S = np.array(S, dtype=np.float64, copy=True)
    n, m = S.shape
    if exclude_self:
        np.fill_diagonal(S, -np.inf)
    order = np.argsort(-S, axis=1, kind="stable")
    if exclude_self:
        order = order[:, :m - 1]
    if max_k is not None:
        order = order[:, :max_k]
    return order


# ---------------------------------------------------------------------------------
# step 1: JS divergence between clusters from Gaussian KDEs, mutual-nearest pairs
# ---------------------------------------------------------------------------------

def silverman_bandwidths(Y, floor: np.ndarray | float | None = None):
    """Per-dimension Silverman bandwidths h_m = 1.06 σ_m |C|^{-1/5} of a cluster.

    Safe bandwidths (spec pitfall): σ_m uses ddof = 0 (defined for n = 1) and h_m is floored, so
    constant dimensions and singleton clusters give a narrow but finite kernel.

    Parameters
    ----------
    Y : array_like
        (n, r) points of the cluster C.
    floor : numpy.ndarray or float, optional
        Lower bound per dimension; default 1e-3·max(σ) + 1e-12.

    Returns
    -------
    numpy.ndarray
        (r,) bandwidths.
    """
    Y = np.asarray(Y, dtype=np.float64)
    n = Y.shape[0]
    sd = Y.std(axis=0)
    h = 1.06 * sd * n ** (-0.2)
    if floor is None:
        floor = 1e-3 * max(float(sd.max()), 0.0) + 1e-12
    return np.maximum(h, floor)


def kde_logpdf(X, Y, h, leave_one_out: bool = False):
    """Log density of the product-Gaussian KDE f(x) = (1/m) Σ_j Π_m N(x_m; y_jm, h_m²).

    Computed in log space with logsumexp (no underflow in high dimension).

    Parameters
    ----------
    X : array_like
        (n, r) evaluation points.
    Y : array_like
        (m, r) sample.
    h : array_like
        (r,) bandwidths.
    leave_one_out : bool, default False
        (X is Y, m ≥ 2) f(x_i) = (1/(m−1)) Σ_{j≠i} k(x_i, y_j), the leave-one-out density of a
        sample at its own points.

    Returns
    -------
    numpy.ndarray
        (n,) log f(x).

    Raises
    ------
    ValueError
        If ``leave_one_out`` is asked for with X other than Y.
    """
    X = np.asarray(X, dtype=np.float64) / h
    Ys = np.asarray(Y, dtype=np.float64) / h
    d2 = np.maximum((X * X).sum(1)[:, None] - 2 * X @ Ys.T + (Ys * Ys).sum(1)[None, :], 0.0)
    r = X.shape[1]
    m = Ys.shape[0]
    if leave_one_out and m >= 2:
        if X.shape[0] != m:
            raise ValueError("kde_logpdf: leave_one_out needs X to be the sample Y itself")
        np.fill_diagonal(d2, np.inf)
        m = m - 1
    const = -math.log(m) - np.log(h).sum() - 0.5 * r * math.log(2 * math.pi)
    return logsumexp(-0.5 * d2, axis=1) + const


def _pair_bandwidths(A, B, floor, bandwidth):
    if bandwidth == "separate":
        return silverman_bandwidths(A, floor), silverman_bandwidths(B, floor)
    if bandwidth == "pooled":
        h = silverman_bandwidths(np.vstack([A, B]), floor)
        return h, h
    raise ValueError(f"bandwidth: expected 'separate' or 'pooled', got {bandwidth!r}")


def js_divergence(A, B, floor=None, leave_one_out: bool = True, bandwidth: str = "separate",
                  clip: bool = True):
    """Jensen–Shannon divergence between the distributions of samples A and B, in nats.

    D_JS = ½ D(P‖M) + ½ D(Q‖M), M = ½(P + Q); each KL by a sample average of log density ratios,
    D̂(P‖M) = (1/|A|) Σ_{x∈A} log[2 f_A(x) / (f_A(x) + f_B(x))], f a Gaussian KDE with
    Silverman bandwidths.

    Rebuilt (``leave_one_out=True``, the default): f_A at A's own points is the leave-one-out
    KDE. With the point's own kernel included, f_A(x) ≫ f_B(x) at Silverman bandwidths in r ≥ 5
    dimensions even when A and B are two halves of ONE sample, and D̂_JS saturates near log 2
    for every pair (measured on the simulator: 0.80–0.95·log 2 for two halves of one class,
    0.82–0.89 for matching classes, 0.91–1.0 for the negative-transfer traps), so no threshold
    could separate related from unrelated clusters. Leave-one-out is the standard consistent
    plug-in estimate.

    Rebuilt (``bandwidth``): "separate" gives each cluster's KDE its own Silverman bandwidths
    (the spec read literally); "pooled" gives both KDEs ONE bandwidth vector, Silverman's rule on
    the pooled sample A ∪ B (a sample of M). With separate bandwidths the log-ratio compares two
    kernels of different widths: in a 10-d LSA space a cluster with wider bandwidths has a larger
    cross density f_B(x) at A's points than A's own leave-one-out density, the estimate goes
    negative and is clipped to 0 for unrelated clusters (measured on the text sets: most entries
    of the JS matrices are exactly 0, and the mutual-nearest pairs are decided by ties). With one
    common kernel, f_A(x) (leave-one-out) and f_B(x) have the same expectation when A and B come
    from one distribution. The signed estimate is still biased downwards by the noise of the
    leave-one-out KDE (each summand is ≤ log 2 but unbounded below; measured for two samples of
    N(0, I_10), n = 80–100: −2.8 to −5.1·log 2), so it ranks cluster pairs rather than measuring
    a divergence. Measured on the text sets and the simulator (see
    :func:`tandem.inference.samtc.algorithm.samtc`, ``js_bandwidth``): better class precision of
    the pairs, no better accuracy, so "separate" stays the default.

    Parameters
    ----------
    A, B : array_like
        (n_A, r) and (n_B, r) samples.
    floor : numpy.ndarray or float, optional
        Bandwidth floor (:func:`silverman_bandwidths`).
    leave_one_out : bool, default True
        Leave-one-out KDE at a sample's own points.
    bandwidth : {"separate", "pooled"}, default "separate"
        One bandwidth vector per sample, or one for both.
    clip : bool, default True
        Clip to [0, log 2] (0 for identical samples, → log 2 for far ones); ``False`` returns the
        signed plug-in estimate (≤ log 2; < 0 when the sampling noise exceeds the divergence).

    Returns
    -------
    float
        D̂_JS.
    """
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    hA, hB = _pair_bandwidths(A, B, floor, bandwidth)
    return _js_from_logs(kde_logpdf(A, A, hA, leave_one_out), kde_logpdf(A, B, hB),
                         kde_logpdf(B, B, hB, leave_one_out), kde_logpdf(B, A, hA), clip)


def _js_from_logs(fa_a, fb_a, fb_b, fa_b, clip=True):
    log2 = math.log(2.0)
    kl_p = np.mean(log2 + fa_a - np.logaddexp(fa_a, fb_a))
    kl_q = np.mean(log2 + fb_b - np.logaddexp(fb_b, fa_b))
    v = 0.5 * (kl_p + kl_q)
    return float(np.clip(v, 0.0, log2)) if clip else float(min(v, log2))


def js_matrix(Yt, lab_t, Ys, lab_s, floor=None, leave_one_out: bool = True,
              bandwidth: str = "separate", clip: bool = True):
    """Matrix of D̂_JS between every target cluster and every source cluster.

    Parameters
    ----------
    Yt : array_like
        (n_t, r) reduced representation of the target task.
    lab_t : array_like
        (n_t,) target cluster labels (clusters are the sorted unique labels).
    Ys : array_like
        (n_s, r) reduced representation of the source task.
    lab_s : array_like
        (n_s,) source cluster labels.
    floor, leave_one_out, bandwidth, clip
        As in :func:`js_divergence` ("pooled": one Silverman bandwidth per cluster pair, from the
        pooled pair).

    Returns
    -------
    D : numpy.ndarray
        (h_t, h_s) divergences.
    target_ids, source_ids : numpy.ndarray
        The cluster labels of D's rows and columns.
    """
    ct, cs = np.unique(lab_t), np.unique(lab_s)
    At = [Yt[lab_t == c] for c in ct]
    As = [Ys[lab_s == c] for c in cs]
    D = np.zeros((len(ct), len(cs)))
    if bandwidth == "separate":
        ht = [silverman_bandwidths(a, floor) for a in At]
        hs = [silverman_bandwidths(a, floor) for a in As]
        self_t = [kde_logpdf(a, a, h, leave_one_out) for a, h in zip(At, ht)]
        self_s = [kde_logpdf(a, a, h, leave_one_out) for a, h in zip(As, hs)]
        for i, (a, h_a) in enumerate(zip(At, ht)):
            for j, (b, h_b) in enumerate(zip(As, hs)):
                D[i, j] = _js_from_logs(self_t[i], kde_logpdf(a, b, h_b), self_s[j],
                                        kde_logpdf(b, a, h_a), clip)
        return D, ct, cs
    for i, a in enumerate(At):
        for j, b in enumerate(As):
            D[i, j] = js_divergence(a, b, floor, leave_one_out, bandwidth, clip)
    return D, ct, cs


def mutual_nearest_pairs(D, max_value: float | None = None):
    """Cluster pairs (i, j) that are each other's nearest in D.

    j = argmin_j′ D[i, j′] and i = argmin_i′ D[i′, j]. Rebuilt: the paper "keeps the pairs of
    clusters closest to each other"; we read it as mutual nearest clusters of the JS matrix that
    are also close in absolute terms. Without the absolute test two clusters of different classes
    that happen to be each other's nearest (the paper's Medicine/Business case) are always
    paired. Each cluster appears in at most one pair; ties → the lowest index.

    Parameters
    ----------
    D : array_like
        (h_t, h_s) non-empty divergence matrix.
    max_value : float, optional
        Keep only pairs with D[i, j] ≤ max_value. ``None``: no absolute test; then the global
        minimum is always such a pair, so at least one pair is kept.

    Returns
    -------
    list of tuple of int
        The pairs (i, j), sorted by i (possibly empty when ``max_value`` is given).

    Raises
    ------
    ValueError
        If D is not a non-empty 2-d matrix.
    """
    D = np.asarray(D, dtype=np.float64)
    if D.ndim != 2 or D.size == 0:
        raise ValueError(f"mutual_nearest_pairs: expected a non-empty 2-d matrix, got shape {D.shape}")
    row_best = D.argmin(1)
    col_best = D.argmin(0)
    out = [(i, int(row_best[i])) for i in range(D.shape[0]) if col_best[row_best[i]] == i]
    if max_value is not None:
        out = [(i, j) for i, j in out if D[i, j] <= max_value]
    return out


# ---------------------------------------------------------------------------------
# step 2: kernel mean matching by Frank–Wolfe → asymmetric relatedness
# ---------------------------------------------------------------------------------

def gaussian_kernel(X, Y, width):
    """Gaussian kernel matrix k(x, y) = exp(−‖x − y‖² / (2 width²)).

    Parameters
    ----------
    X : array_like or scipy.sparse matrix
        (n, d).
    Y : array_like or scipy.sparse matrix
        (m, d).
    width : float
        The kernel width.

    Returns
    -------
    numpy.ndarray
        Dense (n, m) kernel matrix.
    """
    return np.exp(similarity(X, Y, "euclidean") / (2.0 * width ** 2))


def kmm_lmo(g, B, lo, hi):
    """Linear minimisation oracle of KMM: argmin_v g·v over {0 ≤ v ≤ B, lo ≤ Σv ≤ hi}.

    A continuous knapsack: fill coordinates in increasing order of g with B each, up to the total
    T = min(hi, max(lo, B·#{g < 0})), i.e. the negative-gradient coordinates while they lower the
    objective, and the smallest positive ones only as far as Σv ≥ lo demands.

    Parameters
    ----------
    g : numpy.ndarray
        (n,) gradient.
    B : float
        Upper bound of each coordinate.
    lo, hi : float
        Bounds of the sum.

    Returns
    -------
    numpy.ndarray
        (n,) the minimising vertex.
    """
    order = np.argsort(g, kind="stable")
    T = min(hi, max(lo, B * float((g < 0).sum())))
    before = np.concatenate([[0.0], np.cumsum(np.full(g.size, B))[:-1]])
    v = np.zeros_like(g)
    v[order] = np.clip(T - before, 0.0, B)
    return v


def kmm_objective(beta, K, kappa):
    """The KMM objective ½ βᵀKβ − κᵀβ.

    Parameters
    ----------
    beta : numpy.ndarray
        (n,) weights.
    K : numpy.ndarray
        (n, n) source kernel matrix.
    kappa : numpy.ndarray
        (n,) source-to-target kernel sums.

    Returns
    -------
    float
        The objective value.
    """
    return float(0.5 * beta @ K @ beta - kappa @ beta)


def kmm_frank_wolfe(K, kappa, B: float = 10.0, eps: float = 0.5, max_iter: int = 5000,
                    tol: float = 1e-8, away_steps: bool = True):
    """Kernel mean matching, min_β ½ βᵀKβ − κᵀβ subject to 0 ≤ β_i ≤ B, |Σβ_i − ñ_s| ≤ ñ_s ε.

    Frank–Wolfe with exact line search (the objective is quadratic): start at the vertex
    minimising the linear term, then move towards v = LMO(∇f) (:func:`kmm_lmo`) or, with
    ``away_steps`` (Lacoste-Julien & Jaggi's away-step FW), away from the worst active vertex
    when that promises more descent. β stays a convex combination of few vertices, each with
    about ñ_s/B non-zeros, so β is sparse; away steps drop vertices and so set weights exactly
    back to 0 (plain FW only shrinks them geometrically) and converge much faster. Stops when the
    FW duality gap −∇fᵀ(v − β) < tol·(1 + |f|).

    Parameters
    ----------
    K : array_like
        (ñ_s, ñ_s) source kernel matrix.
    kappa : array_like
        (ñ_s,) κ_i = (ñ_s/ñ_t) Σ_j k(z^s_i, z^t_j).
    B : float, default 10.0
        Upper bound of each weight.
    eps : float, default 0.5
        Relative tolerance ε of the weights' sum.
    max_iter : int, default 5000
        Iteration cap.
    tol : float, default 1e-8
        Relative duality-gap tolerance.
    away_steps : bool, default True
        Use away steps.

    Returns
    -------
    beta : numpy.ndarray
        (ñ_s,) weights.
    info : dict
        ``iterations``, ``gap``, ``objective``, ``active_vertices``.

    Raises
    ------
    ValueError
        If the constraints are infeasible (B·ñ_s < ñ_s(1 − ε)).
    """
    K = np.asarray(K, dtype=np.float64)
    kappa = np.asarray(kappa, dtype=np.float64)
    n = kappa.size
    lo, hi = max(0.0, n * (1 - eps)), n * (1 + eps)
    if B * n < lo:
        raise ValueError(f"kmm: infeasible, B·n = {B * n} < n(1−ε) = {lo}")
    v0 = kmm_lmo(-kappa, B, lo, hi)
    # active set: rows of V (vertices) with convex weights w (0 = dropped); index by bytes
    V = np.zeros((max_iter + 2, n))
    w = np.zeros(max_iter + 2)
    V[0], w[0], m = v0, 1.0, 1
    where = {v0.tobytes(): 0}
    beta = v0.copy()
    Kb = K @ beta
    gap = np.inf
    it = 0
    for it in range(1, max_iter + 1):
        g = Kb - kappa
        s = kmm_lmo(g, B, lo, hi)
        d_fw = s - beta
        gap = float(-g @ d_fw)
        f = 0.5 * beta @ Kb - kappa @ beta
        if gap <= tol * (1.0 + abs(f)):
            break
        use_away = False
        if away_steps:
            alive = np.flatnonzero(w[:m] > 0)
            if alive.size > 1:
                scores = V[alive] @ g
                a = int(alive[np.argmax(scores)])
                gap_aw = float(scores.max() - g @ beta)
                use_away = gap_aw > gap and w[a] < 1.0
        if use_away:
            d, gmax, descent = beta - V[a], w[a] / (1.0 - w[a]), gap_aw
        else:
            d, gmax, descent = d_fw, 1.0, gap
        Kd = K @ d
        dKd = float(d @ Kd)
        gamma = gmax if dKd <= 0 else min(gmax, descent / dKd)
        beta = beta + gamma * d
        Kb = Kb + gamma * Kd
        if use_away:
            w[:m] *= 1.0 + gamma
            w[a] -= gamma
            if gamma >= gmax * (1 - 1e-12):  # drop step: the away vertex leaves the active set
                w[a] = 0.0
        else:
            w[:m] *= 1.0 - gamma
            key = s.tobytes()
            j = where.get(key)
            if j is None:
                j = where[key] = m
                V[m] = s
                m += 1
            w[j] += gamma
            if gamma >= 1.0 - 1e-15:
                w[:m] = 0.0
                w[j] = 1.0
        if it % 100 == 0:  # re-sync β with its active set (rounding drift)
            w[:m] = np.where(w[:m] > 1e-14, w[:m], 0.0)
            w[:m] /= w[:m].sum()
            beta = w[:m] @ V[:m]
            Kb = K @ beta
    return beta, {"iterations": it, "gap": gap, "objective": kmm_objective(beta, K, kappa),
                  "active_vertices": int((w[:m] > 0).sum())}


def kmm_relatedness(Zs, Zt, width=None, B: float = 10.0, eps: float = 0.5,
                    support_tol: float = 1e-2, max_iter: int = 500, seed: int = 0,
                    calibrate: bool = False):
    """Relatedness R^(t)_s = |{i : β_i > 0}| / ñ_s of a source subtask Zs to a target Zt.

    K_s(i, j) = k(z^s_i, z^s_j), κ_i = (ñ_s/ñ_t) Σ_j k(z^s_i, z^t_j) with a Gaussian kernel; β by
    away-step Frank–Wolfe (:func:`kmm_frank_wolfe`). Asymmetric: the source instances that the
    target needs, not the converse. Rebuilt: "β_i > 0" is read as β_i > ``support_tol``, so that
    weights left tiny by an iteration budget that ran out do not count as reuse (at convergence
    away-step FW returns exact zeros).

    Parameters
    ----------
    Zs : array_like
        (ñ_s, r) source subtask.
    Zt : array_like
        (ñ_t, r) target subtask.
    width : float, optional
        Kernel width; default the median pairwise distance of Zs ∪ Zt (the spec;
        :func:`tandem.inference.distances.median_distance` on at most 1000 seeded points).
    B : float, default 10.0
        Upper bound of each weight.
    eps : float, default 0.5
        Relative tolerance of the weights' sum.
    support_tol : float, default 1e-2
        Weights above this count as reused (1 % of the uniform weight 1).
    max_iter : int, default 500
        Frank–Wolfe iteration cap.
    seed : int, default 0
        Seed of the width subsample and of the calibration split.
    calibrate : bool, default False
        Rebuilt, label-free: the KMM solution is sparse even when source and target come from ONE
        distribution, so the raw support fraction is biased low (≈ 0.75 for identical
        distributions on our simulator). The ceiling is measured on the target itself, R_self =
        support fraction of KMM from one random half of Zt to the other half, and
        R = min(1, R_raw / R_self) is reported.

    Returns
    -------
    R : float
        The relatedness in [0, 1] (0 for an empty subtask).
    beta : numpy.ndarray
        (ñ_s,) KMM weights.
    width : float
        The kernel width used.
    """
    Zs = np.asarray(Zs, dtype=np.float64)
    Zt = np.asarray(Zt, dtype=np.float64)
    if Zs.shape[0] == 0 or Zt.shape[0] == 0:
        return 0.0, np.zeros(Zs.shape[0]), float(width or 1.0)
    if width is None:
        # the shared helper, on at most 1000 points (a seeded subsample; O(1000²))
        width = median_distance(np.vstack([Zs, Zt]), max_points=1000, seed=seed)
    R, beta = _kmm_support(Zs, Zt, width, B, eps, support_tol, max_iter)
    if calibrate and Zt.shape[0] >= 4:
        perm = np.random.default_rng(seed).permutation(Zt.shape[0])
        half = Zt.shape[0] // 2
        r_self, _ = _kmm_support(Zt[perm[:half]], Zt[perm[half:]], width, B, eps, support_tol, max_iter)
        if r_self > 0:
            R = min(1.0, R / r_self)
    return R, beta, width


def _kmm_support(Zs, Zt, width, B, eps, support_tol, max_iter):
    """(support fraction |{β_i > tol}| / ñ_s, β) of KMM from Zs to Zt."""
    Ks = gaussian_kernel(Zs, Zs, width)
    kappa = (Zs.shape[0] / Zt.shape[0]) * gaussian_kernel(Zs, Zt, width).sum(1)
    beta, _ = kmm_frank_wolfe(Ks, kappa, B=B, eps=eps, max_iter=max_iter)
    return float((beta > support_tol).mean()), beta


# ---------------------------------------------------------------------------------
# step 3: relatedness-weighted shared-nearest-neighbour similarity
# ---------------------------------------------------------------------------------

def neighbour_indicator(order, k: int, n_cols: int, rows=None, n_rows=None, col_index=None,
                        include_self: bool = False, self_cols=None):
    """Sparse 0/1 matrix A with A[i, j] = 1 iff j ∈ N(i).

    Parameters
    ----------
    order : array_like of int
        (len(rows), ≥ k) neighbour lists: indices into ``col_index`` if given, else columns.
    k : int
        Neighbours kept per row.
    n_cols : int
        Number of columns of A.
    rows : array_like of int, optional
        Which rows of A the lists fill (default all).
    n_rows : int, optional
        Number of rows of A (default len(order)).
    col_index : array_like of int, optional
        Maps list entries to columns.
    include_self : bool, default False
        Also set A[i, i] = 1 (own-task lists, so that N_t(x) = {x} ∪ kNN(x)), or
        A[rows[i], self_cols[i]] = 1 when given.
    self_cols : array_like of int, optional
        Each row's own column when it is not its row number (a source instance's own column in
        its source block).

    Returns
    -------
    scipy.sparse.csr_matrix
        (n_rows, n_cols) indicator; duplicates count once.
    """
    order = np.asarray(order)[:, :k]
    m = order.shape[0]
    rows = np.arange(m) if rows is None else np.asarray(rows)
    n_rows = m if n_rows is None else n_rows
    cols = order if col_index is None else np.asarray(col_index)[order]
    r = np.repeat(rows, order.shape[1])
    c = cols.ravel()
    if include_self:
        r = np.concatenate([r, rows])
        c = np.concatenate([c, rows if self_cols is None else np.asarray(self_cols)])
    A = sp.csr_matrix((np.ones(r.size), (r, c)), shape=(n_rows, n_cols))
    A.data[:] = 1.0  # duplicates (self already in the list) count once
    return A


def snn_graph(knn, blocks, weights, node_weights=None, edges: str = "mutual"):
    """Block-weighted shared-nearest-neighbour graph over N nodes.

    For every edge (u, v), mutual k-NN (knn[u, v] = knn[v, u] = 1) or one-sided,

        W(u, v) = ω_u ω_v · Σ_b w_b |N_b(u) ∩ N_b(v)| / Σ_b w_b |N_b(u) ∪ N_b(v)|,

    with |A ∪ B| = |A| + |B| − |A ∩ B|; W = 0 for other pairs and on the diagonal.

    Parameters
    ----------
    knn : scipy.sparse matrix
        (N, N) 0/1 k-NN relation, knn[u, v] = 1 iff v is in u's list (the diagonal is ignored).
    blocks : list of scipy.sparse matrices
        (N, m_b) indicators of the neighbourhoods N_b(u) inside block b (a task, or a source
        subtask).
    weights : list of float
        w_b ≥ 0 per block.
    node_weights : array_like, optional
        ω_u ≥ 0 per node (default 1).
    edges : {"mutual", "symmetric"}, default "mutual"
        Mutual or one-sided k-NN edges.

    Returns
    -------
    scipy.sparse.csr_matrix
        (N, N) symmetric weights in [0, max ω²].

    Raises
    ------
    ValueError
        For an unknown ``edges``.
    """
    knn = sp.csr_matrix(knn, dtype=np.float64)
    n = knn.shape[0]
    knn = knn - sp.diags(knn.diagonal())
    knn.eliminate_zeros()
    if edges == "mutual":
        E = knn.multiply(knn.T).tocoo()
    elif edges == "symmetric":
        E = ((knn + knn.T) > 0).astype(np.float64).tocoo()
    else:
        raise ValueError(f"edges: expected 'mutual' or 'symmetric', got {edges!r}")
    i, j = E.row, E.col
    num = np.zeros(i.size)
    den = np.zeros(i.size)
    for A, w in zip(blocks, weights):
        if w == 0:
            continue
        # |N_b(u) ∩ N_b(v)| for all pairs: a dense 0/1 product (BLAS, float32 is exact
        # for counts < 2^24) is far faster than the sparse one when k is a sizeable
        # fraction of n, as in the paper's grid
        Ad = A.toarray().astype(np.float32) if sp.issparse(A) else np.asarray(A, dtype=np.float32)
        size = Ad.sum(1, dtype=np.float64)
        P = Ad @ Ad.T
        inter = P[i, j].astype(np.float64)
        num += w * inter
        den += w * (size[i] + size[j] - inter)
    vals = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    if node_weights is not None:
        om = np.asarray(node_weights, dtype=np.float64)
        vals = vals * om[i] * om[j]
    W = sp.csr_matrix((vals, (i, j)), shape=(n, n))
    W.eliminate_zeros()
    return 0.5 * (W + W.T)


def weighted_snn(own, sources=(), R=(), edges: str = "mutual"):
    """Relatedness-weighted shared-nearest-neighbour similarity of one target task.

    For x_i, x_j mutual kNN in their own task

        W(x_i, x_j) = Σ_s R_s |N_s(x_i) ∩ N_s(x_j)| / Σ_s R_s |N_s(x_i) ∪ N_s(x_j)|,

    W = 0 for other pairs and on the diagonal. This is :func:`snn_graph` on the target's own nodes
    only (the spec's step 3 read literally: transfer re-weights the target's own mutual-kNN
    edges; SAMTC's default graph adds source nodes, see
    :func:`tandem.inference.samtc.algorithm.transfer_graph`).

    Parameters
    ----------
    own : scipy.sparse matrix
        (n_t, n_t) indicator of N_t(x) = {x} ∪ kNN_t(x) (own task, R_t = 1).
    sources : sequence of scipy.sparse matrices, default ()
        (n_t, n_s) indicators of N_s(x), the k_s nearest points of Z^s (empty rows for x ∉ Z^t).
    R : sequence of float, default ()
        Their relatedness weights.
    edges : {"mutual", "symmetric"}, default "mutual"
        Mutual (the spec) or one-sided k-NN edges.

    Returns
    -------
    scipy.sparse.csr_matrix
        (n_t, n_t) symmetric weights in [0, 1].
    """
    own = sp.csr_matrix(own)
    return snn_graph(own, [own, *sources], [1.0, *R], edges=edges)


def k_grid(n: int, h: int, own: bool):
    """The paper's neighbourhood-size grid {⌈n/(2h)⌉, ⌈n/h⌉, min(⌈2n/h⌉, cap)}.

    Parameters
    ----------
    n : int
        Number of points.
    h : int
        Number of clusters.
    own : bool
        Own task (cap = n − 1: a point is not its own neighbour) or source subtask (cap = n).

    Returns
    -------
    list of int
        The three values, clipped to [1, cap].
    """
    cap = n - 1 if own else n
    cap = max(cap, 1)
    vals = [math.ceil(n / (2 * h)), math.ceil(n / h), min(math.ceil(2 * n / h), cap)]
    return [int(min(max(v, 1), cap)) for v in vals]
