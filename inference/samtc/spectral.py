"""k-means and Normalized Cut (spectral clustering) for the SAMTC reference algorithm.

Both are deterministic given ``seed`` and need only numpy/scipy (no scikit-learn).

Normalized Cut
--------------
Shi & Malik minimise Ncut(A_1..A_h) = Σ_c cut(A_c, V∖A_c) / vol(A_c) over partitions of
a weighted graph W (n×n, symmetric, W ≥ 0). Its spectral relaxation takes the h
generalised eigenvectors of (D − W) u = λ D u with the smallest λ, i.e. (with
u = D^{-1/2} v) the h largest eigenvectors v of the normalised affinity
M = D^{-1/2} W D^{-1/2}. We follow Ng, Jordan & Weiss: stack those v as columns,
normalise each row to unit length, and run k-means (k-means++, several restarts) on
the rows. (Rebuilt choice: the paper only says "Normalized Cut"; NJW is the usual
multi-way discretisation.)

Isolated nodes (degree 0: no mutual-kNN partner) have no row in M. They are left out
of the eigenproblem and labelled −1 by :func:`ncut`; callers that have features
(e.g. :func:`tandem.inference.samtc.algorithm.ncut_snn`) then give them the label of their most similar
non-isolated point.

Determinism (why results used to depend on the machine)
-------------------------------------------------------
k-means on the rows of the embedding depends only on the *subspace* spanned by the
eigenvectors (row norms and pairwise distances are invariant to rotations and sign flips
of the columns), so the result is fixed whenever that subspace is. It is not when the
graph has c ≥ h + 1 connected components among its non-isolated nodes: the eigenvalue 1
of M then has multiplicity c, every h-dimensional subspace of its eigenspace is "the" top-h
eigenspace, and LAPACK/ARPACK return whichever one their blocking, thread count and start
vector produce. (A k = 3 SNN graph of two Gaussian blobs has ten components; the test that
clusters it failed on every fresh clone.) Ncut itself is indifferent there: every grouping
of the components into h clusters cuts no edge, Ncut = 0. So :func:`ncut` resolves that
case combinatorially, without an eigensolver: connected components (exact), and if there
are more than h of them they are merged — by average linkage on the callers' features
(``features=``: the two groups with the highest mean pairwise similarity merge first,
:func:`merge_components`), or, without features, by keeping the h − 1 largest components
and lumping the rest. With c = h the components are the clusters. With c < h the
eigenvalue-1 eigenspace lies wholly inside the top h, and any eigenvalue tied with the h-th
(|λ_h − λ_{h+1}| ≤ 1e-10) pulls its whole eigenspace into the embedding, so the embedded
subspace is unique again. k-means++ is seeded from ``seed`` and ties in every argmin/sort
go to the lowest index.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse.csgraph import connected_components

from tandem.inference.distances import sq_dists
from tandem.inference.validation import check_int_range, check_real_range, check_seed

__all__ = ["kmeans", "ncut", "ncut_value", "spectral_embedding", "components", "merge_components"]

#: eigenvalues closer than this to the h-th one count as tied (their whole eigenspace is used)
EIG_TIE_TOL = 1e-10

#: up to this many nodes the eigenproblem is solved densely (LAPACK, all eigenpairs);
#: above it, Lanczos (ARPACK ``eigsh``, seeded start vector) on the sparse matrix, with
#: the dense solver as fallback if ARPACK does not converge.
DENSE_EIG_MAX = 200


def _sq_dists(X, C):
    """Squared Euclidean distances between rows of X (n×d, dense or sparse) and C (k×d).

    Dense input goes to :func:`tandem.inference.distances.sq_dists`; scipy.sparse rows
    (k-means on tf-idf) are handled here, which the shared helper does not take."""
    if not sp.issparse(X):
        return sq_dists(X, C)
    xx = np.asarray(X.multiply(X).sum(1)).ravel()
    xc = np.asarray(X @ C.T)
    cc = np.einsum("ij,ij->i", C, C)
    return np.maximum(xx[:, None] - 2.0 * xc + cc[None, :], 0.0)


def _kmeanspp(X, k, rng):
    n = X.shape[0]
    idx = [int(rng.integers(n))]
    row = lambda i: (X[i].toarray().ravel() if sp.issparse(X) else X[i])  # noqa: E731
    C = [row(idx[0])]
    d2 = _sq_dists(X, np.asarray(C))[:, 0]
    for _ in range(1, k):
        tot = d2.sum()
        if tot <= 0:  # all remaining points coincide with centres: pick any new point
            j = int(rng.integers(n))
        else:
            j = int(rng.choice(n, p=d2 / tot))
        C.append(row(j))
        d2 = np.minimum(d2, _sq_dists(X, np.asarray(C[-1:]))[:, 0])
    return np.asarray(C, dtype=np.float64)


def kmeans(X, k: int, seed: int = 0, n_init: int = 10, max_iter: int = 100, tol: float = 1e-8):
    """Lloyd's k-means with k-means++ seeding; best of ``n_init`` restarts.

    Empty clusters are re-seeded at the point farthest from its centre. Deterministic for a given
    ``seed``.

    Parameters
    ----------
    X : array_like or scipy.sparse matrix
        (n, d) points.
    k : int
        Number of clusters.
    seed : int, default 0
        Seed of the seeding.
    n_init : int, default 10
        Restarts; the one of least inertia is returned.
    max_iter : int, default 100
        Lloyd iterations per restart.
    tol : float, default 1e-8
        Relative change of the inertia that stops a restart.

    Returns
    -------
    labels : numpy.ndarray
        (n,) int labels in 0..k−1.
    inertia : float
        Σ_i ‖x_i − c_{y_i}‖².
    """
    n = X.shape[0]
    k = check_int_range(k, f"k (clusters; n = {n} points)", 1, n)
    check_int_range(n_init, "n_init", 1)
    check_real_range(tol, "tol", 0.0)
    check_int_range(max_iter, "max_iter", 1)
    rng = np.random.default_rng(check_seed(seed))
    best = (None, np.inf)
    for _ in range(n_init):
        C = _kmeanspp(X, k, rng)
        prev = np.inf
        for _ in range(max_iter):
            D = _sq_dists(X, C)
            lab = D.argmin(1)
            inertia = float(D[np.arange(n), lab].sum())
            for c in range(k):
                m = lab == c
                if not m.any():
                    far = int(D[np.arange(n), lab].argmax())
                    lab[far] = c
                    m = lab == c
                C[c] = np.asarray(X[m].mean(0)).ravel()
            if np.isfinite(prev) and prev - inertia <= tol * max(abs(prev), 1.0):
                break
            prev = inertia
        D = _sq_dists(X, C)
        lab = D.argmin(1)
        inertia = float(D[np.arange(n), lab].sum())
        if inertia < best[1]:
            best = (lab.copy(), inertia)
    return best[0].astype(np.int64), best[1]


def _sym_sparse(W):
    W = sp.csr_matrix(W, dtype=np.float64)
    if W.shape[0] != W.shape[1]:
        raise ValueError(f"ncut: W must be square, got shape {W.shape}")
    if W.nnz and (not np.isfinite(W.data).all() or W.data.min() < 0):
        raise ValueError("ncut: W must be finite and non-negative")
    return W


_EMBED_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_EMBED_CACHE_SIZE = 128


def spectral_embedding(W, h: int):
    """Rows of the NJW embedding: top-h eigenvectors of D^{-1/2} W D^{-1/2}, rows normalised.

    The embedding is deterministic (Lanczos starts from a fixed vector; it takes no seed), so it is
    memoised on a digest of W: repeated runs that differ only in the k-means seed (the paper's 10
    runs) solve each eigenproblem once.

    Parameters
    ----------
    W : array_like or scipy.sparse matrix
        (n, n) symmetric non-negative similarity.
    h : int
        Embedding dimension.

    Returns
    -------
    U : numpy.ndarray
        (n_active, h) row-normalised embedding of the non-isolated nodes.
    eigenvalues : numpy.ndarray
        (h,) descending.
    active : numpy.ndarray
        (n,) bool mask of the non-isolated nodes (degree > 0).
    """
    W = _sym_sparse(W)
    W.sum_duplicates()
    W.sort_indices()
    dig = hashlib.blake2b(digest_size=16)
    for a in (W.indptr, W.indices, W.data):
        dig.update(np.ascontiguousarray(a).tobytes())
    key = (W.shape[0], int(h), dig.hexdigest())
    hit = _EMBED_CACHE.get(key)
    if hit is not None:
        _EMBED_CACHE.move_to_end(key)
        return tuple(x.copy() for x in hit)
    out = _spectral_embedding(W, h)
    _EMBED_CACHE[key] = out
    if len(_EMBED_CACHE) > _EMBED_CACHE_SIZE:
        _EMBED_CACHE.popitem(last=False)
    return tuple(x.copy() for x in out)


def _spectral_embedding(W, h):
    deg = np.asarray(W.sum(1)).ravel()
    active = deg > 0
    Wa = W[active][:, active]
    da = deg[active]
    m = int(active.sum())
    if m == 0:
        return np.zeros((0, h)), np.zeros(h), active
    dinv = 1.0 / np.sqrt(da)
    M = sp.diags(dinv) @ Wa @ sp.diags(dinv)
    hh = min(h, m)
    vals = None
    if m > DENSE_EIG_MAX and hh + 1 < m - 1:
        v0 = np.random.default_rng(12345).standard_normal(m)  # fixed: embedding is seed-free
        try:
            # one eigenpair more than needed, to see whether the h-th eigenvalue is tied
            vals, vecs = spla.eigsh(M, k=hh + 1, which="LA", v0=v0, tol=1e-8, maxiter=20 * m)
            order = np.argsort(vals)[::-1]
            vals, vecs = vals[order], vecs[:, order]
            if vals[hh - 1] - vals[hh] <= EIG_TIE_TOL:
                vals = None                  # tied: the dense solver sees the whole cluster
            else:
                vals, vecs = vals[:hh], vecs[:, :hh]
        except spla.ArpackNoConvergence:
            vals = None
    if vals is None:
        Md = M.toarray()
        Md = 0.5 * (Md + Md.T)
        allv, allU = np.linalg.eigh(Md)
        allv, allU = allv[::-1], allU[:, ::-1]
        # every eigenvalue tied with the h-th joins the embedding, so that the embedded
        # subspace is unique (k-means depends only on it; module docstring)
        keep = hh
        while keep < m and allv[hh - 1] - allv[keep] <= EIG_TIE_TOL:
            keep += 1
        vals, vecs = allv[:keep], allU[:, :keep]
    U = vecs
    nrm = np.linalg.norm(U, axis=1, keepdims=True)
    U = U / np.maximum(nrm, 1e-300)
    return U, vals, active


def components(W):
    """Connected components of the non-isolated nodes of the graph W (exact, deterministic).

    Parameters
    ----------
    W : array_like or scipy.sparse matrix
        (n, n) symmetric non-negative similarity.

    Returns
    -------
    labels : numpy.ndarray
        (n,) component ids 0..c−1, numbered by each component's smallest node index; −1 for
        isolated nodes (degree 0).
    c : int
        Number of components.
    """
    W = _sym_sparse(W)
    deg = np.asarray(W.sum(1)).ravel()
    _, raw = connected_components(W, directed=False)
    lab = -np.ones(W.shape[0], dtype=np.int64)
    nxt = 0
    remap = {}
    for i in np.flatnonzero(deg > 0):        # increasing node index → canonical numbering
        r = int(raw[i])
        if r not in remap:
            remap[r] = nxt
            nxt += 1
        lab[i] = remap[r]
    return lab, nxt


def _group_summaries(features, comp, c, metric):
    """Per component: size, and the sums needed by average linkage (see merge_components)."""
    n = comp.size
    G = sp.csr_matrix((np.ones(n), (comp, np.arange(n))), shape=(c, n))   # group indicator
    size = np.asarray(G.sum(1)).ravel()
    X = features
    if metric == "cosine":
        if sp.issparse(X):
            nr = np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel())
            X = sp.diags(1.0 / np.where(nr > 0, nr, 1.0)) @ X
        else:
            nr = np.linalg.norm(X, axis=1)
            X = X / np.where(nr > 0, nr, 1.0)[:, None]
        S = G @ X                                   # Σ of unit rows
        S = S.toarray() if sp.issparse(S) else np.asarray(S)
        # mean pairwise cosine between groups a, b: (Σ_a x̂)·(Σ_b x̂) / (n_a n_b)
        sim = (S @ S.T) / np.outer(size, size)
    elif metric == "euclidean":
        S = G @ X
        S = S.toarray() if sp.issparse(S) else np.asarray(S)
        sq = np.asarray(X.multiply(X).sum(1)).ravel() if sp.issparse(X) else np.einsum("ij,ij->i", X, X)
        q = G @ sq                                  # Σ ‖x‖² per group
        mu = S / size[:, None]
        # mean over pairs of −‖x − y‖² = −(q_a/n_a + q_b/n_b − 2 μ_a·μ_b)
        sim = -(q / size)[:, None] - (q / size)[None, :] + 2.0 * mu @ mu.T
    else:
        raise ValueError(f"metric: expected 'cosine' or 'euclidean', got {metric!r}")
    return size, sim


def merge_components(comp, h: int, features=None, metric: str = "euclidean"):
    """Group c > h components of a graph into h clusters (the Ncut = 0 ties, made unique).

    With ``features``: agglomerative average linkage, the two groups with the highest mean
    pairwise similarity (Euclidean: −‖x − y‖²; cosine: x·y/‖x‖‖y‖) merge, repeatedly, until h
    remain (Lance–Williams update; ties → the lowest pair of group ids). Without features: the
    h − 1 largest components (ties → lower id) stay, the rest form one cluster.

    Parameters
    ----------
    comp : array_like of int
        (n,) component ids 0..c−1 (−1 = isolated node, left at −1).
    h : int
        Number of clusters.
    features : array_like or scipy.sparse matrix, optional
        (n, d) rows of the same nodes.
    metric : {"euclidean", "cosine"}, default "euclidean"
        Similarity of ``features``.

    Returns
    -------
    numpy.ndarray
        (n,) labels 0..h−1 numbered by smallest node index, −1 kept for isolated nodes.
    """
    comp = np.asarray(comp, dtype=np.int64)
    c = int(comp.max()) + 1 if comp.size and comp.max() >= 0 else 0
    if c <= h:
        return comp.copy()
    act = comp >= 0
    if features is None:
        size = np.bincount(comp[act], minlength=c)
        keep = sorted(range(c), key=lambda g: (-size[g], g))[:h - 1]
        new = np.full(c, h - 1, dtype=np.int64)
        for i, g in enumerate(sorted(keep)):
            new[g] = i
        group = new
    else:
        F = features[np.flatnonzero(act)] if sp.issparse(features) else np.asarray(features, dtype=np.float64)[act]
        size, sim = _group_summaries(F, comp[act], c, metric)
        size = size.astype(np.float64)
        alive = np.ones(c, bool)
        group = np.arange(c)
        sim = sim.copy()
        np.fill_diagonal(sim, -np.inf)
        for _ in range(c - h):
            masked = np.where(alive[:, None] & alive[None, :], sim, -np.inf)
            a, b = np.unravel_index(int(np.argmax(masked)), masked.shape)   # first max: lowest (a, b)
            a, b = min(a, b), max(a, b)
            na, nb = size[a], size[b]
            row = (na * sim[a] + nb * sim[b]) / (na + nb)                  # average linkage
            sim[a], sim[:, a] = row, row
            sim[a, a] = -np.inf
            size[a] = na + nb
            alive[b] = False
            group[group == b] = a
    lab = -np.ones(comp.size, dtype=np.int64)
    lab[act] = group[comp[act]]
    # renumber 0..h−1 by smallest node index
    out = -np.ones_like(lab)
    nxt, remap = 0, {}
    for i in np.flatnonzero(act):
        g = int(lab[i])
        if g not in remap:
            remap[g] = nxt
            nxt += 1
        out[i] = remap[g]
    return out


def ncut(W, h: int, seed: int = 0, n_init: int = 10, features=None, metric: str = "euclidean"):
    """Normalized Cut of the graph W into h clusters (NJW relaxation + k-means).

    When the non-isolated nodes fall into c ≥ h connected components the result is
    combinatorial (no eigensolver, so it cannot depend on BLAS threads or start vectors): c = h →
    the components; c > h → :func:`merge_components` with ``features`` and ``metric``, or by size
    without features. See the module docstring.

    Parameters
    ----------
    W : array_like or scipy.sparse matrix
        (n, n) symmetric non-negative similarity.
    h : int
        Number of clusters.
    seed : int, default 0
        Seed of the k-means restarts.
    n_init : int, default 10
        k-means restarts.
    features : array_like or scipy.sparse matrix, optional
        (n, d) rows of the nodes, used to merge surplus components.
    metric : {"euclidean", "cosine"}, default "euclidean"
        Similarity of ``features`` for the merge.

    Returns
    -------
    numpy.ndarray
        (n,) labels in 0..h−1, −1 for isolated nodes (zero degree). If fewer than h nodes are
        connected, the connected ones get labels 0..m−1.
    """
    comp, c = components(W)
    if c >= h:
        return merge_components(comp, h, features, metric)
    U, _, active = spectral_embedding(W, h)
    lab = -np.ones(active.size, dtype=np.int64)
    m = int(active.sum())
    if m == 0:
        return lab
    k = min(h, m)
    lab[active], _ = kmeans(U, k, seed=seed, n_init=n_init)
    return lab


def ncut_value(W, labels) -> float:
    """Ncut objective Σ_c cut(C_c, V∖C_c) / vol(C_c) of a labelling (lower = better cut).

    Clusters of zero volume contribute 0.

    Parameters
    ----------
    W : array_like or scipy.sparse matrix
        (n, n) symmetric non-negative similarity.
    labels : array_like of int
        (n,) cluster labels.

    Returns
    -------
    float
        The Ncut value.
    """
    W = _sym_sparse(W)
    labels = np.asarray(labels)
    deg = np.asarray(W.sum(1)).ravel()
    total = 0.0
    for c in np.unique(labels):
        m = labels == c
        vol = deg[m].sum()
        if vol <= 0:
            continue
        within = W[m][:, m].sum()
        total += (vol - within) / vol
    return float(total)
