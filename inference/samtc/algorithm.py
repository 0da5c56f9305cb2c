"""SAMTC — Self-Adapted Multi-Task Clustering (Zhang, Zhang & Liu, IJCAI 2016).

Deterministic reference implementation of the paper's algorithm, its ablations and the
baselines of its experiments. The steps live in :mod:`tandem.inference.samtc.steps` (one
function each) and :mod:`tandem.inference.samtc.spectral` (k-means, Normalized Cut).

Algorithm (equations rebuilt from the paper's prose; see ``docs/specs/samtc.md``)::

    0. init: y^t = Ncut-SNN(X_t, h_t) for every task t (own-task SNN graph)
    for every target t and source s ≠ t:
    1. D[i, j] = JS(C^t_i, C^s_j) from Gaussian KDEs (reduced space, leave-one-out;
       ``js_bandwidth="pooled"``: one bandwidth per cluster pair, signed estimate);
       keep mutual-nearest pairs with D ≤ τ·log 2 (τ = js_tau, default 0)
       → Z^t (kept target clusters), Z^s (kept source clusters); no pair → no transfer
    2. β = KMM(Z^s → Z^t) by Frank–Wolfe;  R[t, s] = |{β_i > 0}| / ñ_s,  R[t, t] = 1,
       divided by the same support fraction between two halves of Z^t (calibrate_R)
    3. transfer (``transfer="augment"``, default): the target graph gets the instances
       z of every Z^s as extra nodes with weight ω_z = R[t, s]/(T − 1); per block b
       (task t, each Z^s) the neighbourhoods N_b(u) of every node u; edges = mutual
       k-NN pairs (target–target in task t, target–source, source–source in Z^s):
       W^t(u, v) = ω_u ω_v Σ_b w_b |N_b(u) ∩ N_b(v)| / Σ_b w_b |N_b(u) ∪ N_b(v)|,
       w_t = 1, w_s = R[t, s];  y^t = Ncut(W^t, h_t) read off the target's own nodes
       (:func:`transfer_graph`). R ≡ 0 → exactly Ncut-SNN.
       ``transfer="reweight"`` (the spec's formula read literally, the previous
       default): no source nodes, N_s(x) only for x ∈ Z^t, the transfer only
       re-weights the target's own mutual-kNN edges — measured on text to leave the
       cut almost unchanged (see docs/models/samtc.md).

Ablations (of whichever ``transfer`` construction): ``variant="nr"`` (no
reusable-instance step: Z^t, Z^s = whole tasks, R by KMM of whole tasks — every source
instance enters, weighted by R), ``variant="ns"`` (no relatedness: R ≡ 1, ω ≡ 1/(T − 1)
on the reusable subtasks).

Hyperparameters: the paper's grid over k_t (own) × k_s (source, one grid level shared
by every source) — 9 settings per target — and either the paper's choice (best
accuracy against the labels, ``select="labels"``) or a label-free one
(``select="label-free"``: the consensus partition, i.e. the grid setting whose
labelling has the highest mean NMI with the other settings' labellings).

Rebuilt choices, all documented where they are made: the leave-one-out JS estimate and
the absolute JS test of step 1 (without them every mutual-nearest pair is kept, including
two unrelated private classes that happen to be each other's nearest — measured
reusable precision 0.56 vs 0.91 on the simulator's trap regime), the self-calibrated
relatedness of step 2 (the raw KMM support fraction is ≈ 0.75–0.9 even for identical
distributions), product KDEs in a common LSA/PCA
space of ``reduce_dim`` dimensions (default 10), the KMM box B = 10 and slack ε = 0.5,
"β_i > 0" as β_i > 0.01, own-task neighbours by cosine similarity for sparse (text)
data and Euclidean distance for dense data, cross-task neighbours by Gaussian-kernel
similarity (= Euclidean ranking), Ncut as NJW spectral clustering, isolated graph nodes
given the label of their most similar connected point, and the initial Ncut-SNN
partition taken label-free (consensus over the k_t grid) in every mode.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp

from tandem.inference.params import AnyValue, Boolean, Interval, Options, Seed, SequenceOf, validate_params
from tandem.inference.samtc import steps as st

# the input checks, the grid selection and the single-task Ncut-SNN / baselines live in their
# own modules; the "noqa: F401" imports keep their names importable from here
from tandem.inference.samtc.baselines import (  # noqa: F401
    _fill_isolated,
    _ncut_graph,
    kmeans_baseline,
    ncut_snn,
    ncut_snn_grid,
    pooled_baseline,
)
from tandem.inference.samtc.selection import select_partition, select_setting
from tandem.inference.samtc.spectral import kmeans, ncut
from tandem.inference.samtc.task_checks import _metric_for, _ValidatedTasks, validate_labels, validate_tasks

__all__ = ["samtc", "ncut_snn", "ncut_snn_grid", "node_weights", "transfer_graph", "kmeans_baseline",
           "pooled_baseline", "SAMTCResult", "select_setting", "validate_tasks", "add_step3_args", "SOURCE_ROWS",
           "NODE_REACH"]

# the values of samtc()'s step-3 options (first = default; see its docstring)
SOURCE_ROWS = ("all", "subtask")
NODE_REACH = ("k", "paired")


def add_step3_args(parser):
    """Add ``--source-rows`` and ``--node-reach``, :func:`samtc`'s measured step-3 options, to a parser.

    Shared by the examples; the defaults are :func:`samtc`'s.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The examples' parser.

    Returns
    -------
    argparse.ArgumentParser
        ``parser``.
    """
    parser.add_argument("--source-rows", choices=SOURCE_ROWS, default=SOURCE_ROWS[0],
                        help="samtc(source_rows=...): which target points link to the transferred source "
                             "instances (default all; 'subtask' = only Z^t, the spec's rows)")
    parser.add_argument("--node-reach", choices=NODE_REACH, default=NODE_REACH[0],
                        help="samtc(node_reach=...): target neighbourhood of a transferred source instance "
                             "(default k: its k_t+1 nearest target points; 'paired': at most the size of the "
                             "target cluster its source cluster is paired with)")
    return parser


@dataclass
class SAMTCResult:
    """Output of :func:`samtc`.

    Attributes
    ----------
    labels : list of numpy.ndarray
        Per task (n_t,) int cluster labels of the selected grid setting.
    R : numpy.ndarray
        (T, T) relatedness, R[t, s] = relatedness of source s for target t, diagonal 1.
    reusable : dict
        {(t, s): bool (n_s,) mask}: source s's instances in the source subtask Z^s of the pair
        (target t, source s) (all True for ``variant="nr"``).
    subtasks : dict
        {(t, s): (Z^t mask (n_t,), Z^s mask (n_s,))}.
    init_labels : list of numpy.ndarray
        Per task, the Ncut-SNN initial partition.
    params : list of dict
        Per task {"k_self", "k_src": {s: k}, "grid_index"} of the selected setting, chosen among the
        settings whose labels use all h_t clusters (:func:`select_partition`); when none does,
        {"k_self": None, "k_src": {}, "grid_index": None} and the task keeps its initial partition.
    pairs : dict
        {(t, s): [(target cluster, source cluster), ...]} mutual-nearest pairs.
    js : dict
        {(t, s): (h_t, h_s) JS-divergence matrix} (empty for "nr").
    beta : dict
        {(t, s): (ñ_s,) KMM weights over Z^s} (empty for "ns").
    grid : list of list of dict
        Per task, {"k_self", "k_src", "labels"} of every grid setting (so a caller can
        re-select, e.g. both label-chosen and label-free, from one run).
    variant : str
        The variant run.
    select : str
        The selection rule used.
    transferred : dict
        {(t, s): bool (n_s,) mask}: source instances that entered target t's graph as nodes
        (Z^s instances with node weight ω > 0; all False for ``transfer="reweight"``).
    transfer : str
        The transfer mode run.
    """
    labels: list
    R: np.ndarray
    reusable: dict
    subtasks: dict
    init_labels: list
    params: list
    pairs: dict = field(default_factory=dict)
    js: dict = field(default_factory=dict)
    beta: dict = field(default_factory=dict)
    grid: list = field(default_factory=list)
    variant: str = "full"
    select: str = "label-free"
    transferred: dict = field(default_factory=dict)
    transfer: str = "augment"


# ---------------------------------------------------------------------------------
# SAMTC
# ---------------------------------------------------------------------------------

_POS_INT = Interval(Integral, 1)

#: every option of :func:`samtc` and of :class:`tandem.inference.samtc.SAMTC`, declared once
#: (checked at the entry of both; the cross-option rules are checked in :func:`samtc`)
SAMTC_CONSTRAINTS = {
    "n_clusters": [SequenceOf(Interval(Integral, 2))],
    "variant": [Options(("full", "nr", "ns"))],
    "k_self": [None, _POS_INT, SequenceOf(_POS_INT)],
    "k_src": [None, _POS_INT, SequenceOf(_POS_INT)],
    "select": [Options(("labels", "label-free"))],
    "reduce_dim": [None, _POS_INT],
    "seed": [Seed()],
    "kmm_B": [Interval(Real, 0, closed="neither")],
    "kmm_eps": [Interval(Real, 0, 1, closed="left")],
    "init_labels": [None, AnyValue("per-task label arrays, checked by samtc against the tasks")],
    "js_tau": [None, Interval(Real, 0)],
    "calibrate_R": [Boolean()],
    "edges": [Options(("mutual", "symmetric"))],
    "pairing": [Options(("mutual", "close"))],
    "transfer": [Options(("augment", "reweight"))],
    "js_bandwidth": [Options(("separate", "pooled"))],
    "source_rows": [Options(SOURCE_ROWS)],
    "node_reach": [Options(NODE_REACH)],
}


def samtc(tasks, n_clusters, variant: str = "full", k_self=None, k_src=None,
          select: str = "label-free", labels=None, reduce_dim: int | None = None, seed: int = 0,
          kmm_B: float = 10.0, kmm_eps: float = 0.5, init_labels=None,
          js_tau: float | None = 0.0, calibrate_R: bool = True, edges: str = "mutual",
          pairing: str = "mutual", transfer: str = "augment",
          js_bandwidth: str = "separate", source_rows: str = "all", node_reach: str = "k") -> SAMTCResult:
    """Self-adapted multi-task clustering of T tasks (see the module docstring).

    Parameters
    ----------
    tasks : list of array_like or scipy.sparse matrices
        Task t's (n_t, d) data, one feature space.
    n_clusters : list of int
        h_t ≥ 2 per task.
    variant : {"full", "nr", "ns"}, default "full"
        Full SAMTC, without the relatedness step ("nr"), or without the subtask selection ("ns").
    k_self, k_src : int or list of int, optional
        Own-task / source neighbourhood sizes (one value, or one per task); ``None`` → the
        paper's grid (:func:`tandem.inference.samtc.steps.k_grid`).
    select : {"label-free", "labels"}, default "label-free"
        How the grid setting is chosen: "labels" (the paper: best accuracy against ``labels``) or
        "label-free" (consensus, :func:`select_setting`).
    labels : list of array_like, optional
        Per-task true labels, needed by ``select="labels"``.
    reduce_dim : int, optional
        Dimensions of the LSA/PCA space of the density steps (``None`` → min(d, 10)).
    seed : int, default 0
        Seed of the k-means restarts in every Ncut and of the SVD start vector.
    kmm_B, kmm_eps : float, default 10.0 and 0.5
        Weight bound and sum tolerance of kernel mean matching (step 2).
    init_labels : list of array_like, optional
        Initial partitions (default Ncut-SNN, label-free).
    js_tau : float or None, default 0.0
        Absolute test of step 1: a mutual-nearest cluster pair is kept only if its
        D̂_JS ≤ js_tau·log 2 (``None`` → no test, every mutual-nearest pair is kept; see
        :func:`tandem.inference.samtc.steps.mutual_nearest_pairs`). The default 0: the
        leave-one-out D̂_JS of two samples of one distribution is ≤ 0 (clipped to 0), so
        "D̂_JS = 0" reads "indistinguishable from one distribution". A source with no kept pair
        transfers nothing (Z^s = ∅, R = 0).
    calibrate_R : bool, default True
        Relatedness relative to the KMM support reached by two halves of the target subtask
        itself (:func:`tandem.inference.samtc.steps.kmm_relatedness`, ``calibrate``).
    edges : {"mutual", "symmetric"}, default "mutual"
        Own-task kNN edges of W^t: mutual (the spec) or one-sided (measured: worse).
    pairing : {"mutual", "close"}, default "mutual"
        Mutual-nearest pairs under the JS test, or every target/source cluster pair with
        D̂_JS ≤ js_tau·log 2 (a split class keeps both halves; measured on the simulator's trap
        regime: accuracy 0.940 vs 0.932, neutral on text with the label-free choice, −0.003 with
        the label choice; see docs/models/samtc.md).
    transfer : {"augment", "reweight"}, default "augment"
        The source subtasks' instances become nodes of the target graph (:func:`transfer_graph`),
        or the spec's formula read literally (source neighbourhoods only re-weight the target's
        own edges).
    js_bandwidth : {"separate", "pooled"}, default "separate"
        KDE bandwidths of step 1 (see Notes and :func:`tandem.inference.samtc.steps.js_divergence`).
    source_rows : {"all", "subtask"}, default "all"
        Which target points get source neighbour lists in the "augment" graph (see Notes).
    node_reach : {"k", "paired"}, default "k"
        The target neighbourhood of a transferred source node (see Notes).

    Returns
    -------
    SAMTCResult
        Labels, relatedness, subtasks and the per-step intermediates.

    Notes
    -----
    The measured alternatives below were compared with the default as it stood when they were
    measured, before a chosen grid setting had to keep all h_t clusters of every task (see
    :func:`tandem.inference.samtc.selection.select_partition`); they were not re-measured. With
    that rule the default's records (docs/results/samtc.md) are: simulator, 30 seeds,
    label-free 0.950 / 0.966 / 0.963 against Ncut-SNN 0.935 / 0.962 / 0.940; text,
    SAMTC − Ncut-SNN over the 21 tasks +0.0018 label-free / +0.0092 label-chosen.

    ``js_bandwidth``: "separate" (default; each cluster's KDE its own Silverman bandwidths,
    D̂_JS clipped to [0, log 2]) or "pooled" (measured alternative: the two KDEs
    of a cluster pair share one Silverman bandwidth from the pooled pair and D̂_JS is
    kept signed, so the mutual-nearest ranking has no ties; a pair is kept when
    D̂_JS ≤ js_tau·log 2). "pooled" raises the text sets' class precision of the
    transferred instances (seed 0, all 54 ordered pairs, instance-weighted: 0.887 vs
    0.736; on 20NG/Reuters no pair below 0.5, and the Reuters pairs without a shared
    class transfer nothing) but NOT the accuracy (label-free SAMTC − Ncut-SNN, mean over
    the six sets: −0.0001 vs +0.0040; WebKB-p2 +0.007 vs +0.035, because it drops a
    correct transfer to texas), and on the simulator's trap regime it moves the
    margin over Ncut-SNN to +0.0177 (se 0.0131, 6/4) from +0.0126 (se 0.0087, 7/3).
    See :func:`tandem.inference.samtc.steps.js_divergence` and docs/models/samtc.md.

    ``node_reach``: the target neighbourhood N_t(z) of a transferred source node z — "k"
    (default: its k_t + 1 nearest target points, like a target point's own list) or
    "paired" (measured alternative: at most |C^t_i| nearest target points, C^t_i
    the target cluster that z's source cluster C^s_j is paired with in step 1 — a source
    instance of a class should not reach further into the target than that class's
    cluster there; this targets the private-class spill described under
    ``source_rows``). Simulator, 30 seeds, label-free (Ncut-SNN 0.9299 / 0.9604 /
    0.9400): "paired" 0.9532 / 0.9686 / 0.9642 (wins/ties/losses vs Ncut-SNN 17/1/12,
    18/2/10, 25/2/3) vs "k" 0.9504 / 0.9666 / 0.9638 (16/0/14, 14/2/14, 22/3/5) — paired
    "paired" − "k" +0.0028 (se 0.0031) / +0.0021 (0.0017) / +0.0004 (0.0016); 100 seeds
    +0.0024 (0.0014) / +0.0022 (0.0008) / +0.0026 (0.0021) — small but consistent; text
    (examples/samtc_text.py, six sets × 10 runs, SAMTC − Ncut-SNN over
    the 21 tasks): +0.0019 label-free / +0.0088 label-chosen vs "k" +0.0017 / +0.0098
    (best-or-second 9/21 and 11/21 vs 9/21 and 12/21). Not better on both: not the default.

    ``source_rows``: which target points get source neighbour lists N_s(x) — hence mutual
    k-NN edges to the transferred source nodes — in the ``"augment"`` graph: "all"
    (default) or "subtask" (only x ∈ Z^t, the spec's rows; a measured alternative). Why
    the default, measured (simulator, 30 seeds, label-free accuracy; Ncut-SNN
    0.930 / 0.960 / 0.940 on partial / partial-no-trap / complete): "all" 0.950 / 0.967
    / 0.964, "subtask" 0.945 / 0.959 / 0.945. On the trap regime "all" loses mostly
    private-class points (30 seeds: 204 points right under Ncut-SNN turn wrong, 49 of
    shared classes): points of a private target class that borders a small shared class
    become mutual k-NN of that class's source nodes (a source node's k_t + 1 nearest
    target points overflow the small class) and are pulled into it, and a large private
    class can be re-cut (seed 25, task 1: 0.967 → 0.807). "subtask" removes exactly that
    (those seeds back to Ncut-SNN; the label-chosen SAMTC then never loses to label-free
    Ncut-SNN, 26/4/0 seeds) but also the rescue of badly initialised clusters that Z^t,
    cut from the initial partition, misses (seed 21: +0.143 → −0.002; seed 23: +0.151 →
    +0.063), and on the completely related set it keeps only a fifth of the gain.
    Splitting the two roles of the rows: N_s(x) for every x but target→source edges only
    from Z^t 0.950 / 0.964 / 0.946 (the lists carry part of the rescue, the edges the
    rest); N_s(x) dropped only for points without a mutual k-NN link to a source node
    0.951 on partial (= "all"). On text the balance is the other way round
    (examples/samtc_text.py, six sets × 10 runs, SAMTC − Ncut-SNN over the 21 tasks):
    "subtask" +0.0079 label-free / +0.0179 label-chosen vs "all" +0.0017 / +0.0098
    (best-or-second 12/21 vs 9/21 label-free, 10/21 vs 12/21 label-chosen), so neither
    setting is better on both; the default stays "all". Other step-3 changes measured and dropped (same
    protocols; partial label-free mean over 30 seeds / text label-free SAMTC − Ncut-SNN,
    seed 0, mean of the six set means, default +0.0040; see docs/models/samtc.md): Kron
    reduction of the source nodes before the Ncut 0.936 / −0.0010; one random-walk hop
    through them 0.940 / —; k-means of the NJW embedding on the target rows only
    0.949 / +0.0062 (label-chosen text 0.8351); source block weights w_s = R/(T − 1)
    0.950 / +0.0028; target–source edges capped by the target-block Jaccard 0.952 /
    +0.0017. Label-free criteria measured and dropped: the relative eigengap of the
    step-3 graph (0.936, and it also lowers Ncut-SNN to 0.920), consensus with k_t fixed
    to the initial partition's (0.935), consensus over SAMTC's grid ∪ Ncut-SNN's grid
    (0.946 partial / 0.970 no-trap / 0.962 complete).
    """
    # (n_clusters: checked with the tasks by validate_tasks, which names the entry)
    validate_params(SAMTC_CONSTRAINTS, dict(
        variant=variant, k_self=k_self, k_src=k_src, select=select, reduce_dim=reduce_dim,
        seed=seed, kmm_B=kmm_B, kmm_eps=kmm_eps, init_labels=init_labels, js_tau=js_tau, calibrate_R=calibrate_R,
        edges=edges, pairing=pairing, transfer=transfer, js_bandwidth=js_bandwidth, source_rows=source_rows,
        node_reach=node_reach), "samtc: ")
    if pairing == "close" and js_tau is None:
        raise ValueError("pairing='close' needs a JS threshold (js_tau)")
    if select == "labels" and labels is None:
        raise ValueError("select='labels' needs the true labels (labels=[y_1, ..., y_T])")
    # a cross-option rule the declaration cannot state (kmm_eps in [0, 1) is declared: ε ≥ 1
    # would admit β = 0, i.e. no transfer)
    if kmm_B < 1.0 - kmm_eps:
        raise ValueError(f"kmm_B: expected a bound B ≥ 1 − kmm_eps = {1.0 - kmm_eps:g} (else Σβ ≥ ñ_s(1 − ε) "
                         f"is infeasible), got {kmm_B!r}")
    if isinstance(tasks, _ValidatedTasks):
        # SAMTC.fit validated (and copied) them already: validate_tasks is O(data), once is enough
        if list(n_clusters) != list(tasks.n_clusters):
            raise ValueError(f"n_clusters: the validated tasks have h_t = {list(tasks.n_clusters)}, "
                             f"got {list(n_clusters)}")
        tasks, hs = list(tasks.tasks), list(tasks.n_clusters)
    else:
        tasks, hs = validate_tasks(tasks, n_clusters)
    labels = validate_labels(labels, tasks)      # the one check of the labels against the tasks
    T = len(tasks)
    ns = [X.shape[0] for X in tasks]
    k_self, k_src = _per_task_k(k_self, T, "k_self"), _per_task_k(k_src, T, "k_src")

    # own-task similarities and neighbour orders (computed once, sliced per k)
    S = [st.similarity(X, X, _metric_for(X)) for X in tasks]
    orders = [st.neighbour_order(S[t], exclude_self=True) for t in range(T)]

    # step 0: initial partitions
    if init_labels is None:
        init = []
        for t in range(T):
            labs, _ = ncut_snn_grid(tasks[t], hs[t], seed, S[t], orders[t])
            i = select_partition(labs, hs[t])
            init.append(labs[select_setting(labs) if i is None else i])
    else:
        if len(init_labels) != T:
            raise ValueError(f"init_labels: expected {T} arrays, got {len(init_labels)}")
        init = []
        for t, y in enumerate(init_labels):
            y = np.asarray(y)
            if y.shape != (ns[t],):
                raise ValueError(f"init_labels[{t}]: expected shape ({ns[t]},), got {y.shape}")
            if not (np.issubdtype(y.dtype, np.integer) or (np.issubdtype(y.dtype, np.floating)
                                                           and np.all(np.isfinite(y)) and np.all(y == np.round(y)))):
                raise ValueError(f"init_labels[{t}]: expected integer cluster labels, got dtype {y.dtype}")
            y = y.astype(np.int64)
            if y.size and (y.min() < 0 or y.max() >= hs[t]):
                raise ValueError(f"init_labels[{t}]: expected labels in [0, {hs[t] - 1}] (h_t = {hs[t]} "
                                 f"clusters), got values in [{y.min()}, {y.max()}]")
            init.append(y)

    Y = st.reduce_dimension(tasks, reduce_dim, seed) if T > 1 else None

    R = np.eye(T)
    reusable, subtasks, pairs, jsd, betas = {}, {}, {}, {}, {}
    h_tilde = {}
    for t in range(T):
        for s in range(T):
            if s == t:
                continue
            # step 1: reusable instances (mutual-nearest clusters by JS divergence)
            if variant == "nr":
                zt, zs = np.ones(ns[t], bool), np.ones(ns[s], bool)
                h_tilde[t, s] = hs[s]
            else:
                D, ct, cs = st.js_matrix(Y[t], init[t], Y[s], init[s], bandwidth=js_bandwidth,
                                         clip=js_bandwidth == "separate")
                if pairing == "close":  # every pair under the threshold
                    pr = [(int(i), int(j)) for i, j in zip(*np.nonzero(D <= js_tau * np.log(2.0)))]
                else:
                    pr = st.mutual_nearest_pairs(D, None if js_tau is None else js_tau * np.log(2.0))
                jsd[t, s] = D
                pairs[t, s] = [(int(ct[i]), int(cs[j])) for i, j in pr]
                zt = np.isin(init[t], [p[0] for p in pairs[t, s]])
                zs = np.isin(init[s], [p[1] for p in pairs[t, s]])
                h_tilde[t, s] = max(1, len({p[1] for p in pairs[t, s]}))
            subtasks[t, s] = (zt, zs)
            reusable[t, s] = zs
            # step 2: relatedness by kernel mean matching
            if variant == "ns":
                R[t, s] = 1.0
            else:
                R[t, s], betas[t, s], _ = st.kmm_relatedness(Y[s][zs], Y[t][zt], B=kmm_B, eps=kmm_eps,
                                                             seed=seed, calibrate=calibrate_R)

    # step 3: relatedness-weighted SNN on the target task augmented with the transferred
    # source instances + Ncut, over the grid
    out_labels, params, grid, transferred = [], [], [], {}
    for t in range(T):
        kt_vals = _k_values(k_self, t, st.k_grid(ns[t], hs[t], own=True), ns[t] - 1, "k_self")
        # sources with an empty subtask (no pair passed the JS test) or R = 0 transfer nothing
        src = [s for s in range(T) if s != t and subtasks[t, s][1].any() and R[t, s] > 0]
        ks_vals, parts = {}, []
        for s in src:
            zt, zs = subtasks[t, s]
            n_s = int(zs.sum())
            ks_vals[s] = _k_values(k_src, s, st.k_grid(n_s, h_tilde[t, s], own=False), n_s, "k_src")
            if transfer == "augment":
                # every target point may link to the transferred nodes (mutual k-NN keeps
                # most points of classes the source lacks away from them; see
                # transfer_graph); source_rows="subtask": only Z^t (measured, see docstring)
                omega = node_weights(variant, R[t, s], n_s, T)
                rows = np.ones(ns[t], bool) if source_rows == "all" else zt
            else:  # the spec read literally: N_s(x) only for x in Z^t, no source nodes
                omega, rows = np.zeros(n_s), zt
            parts.append(_SourcePart(tasks[t], tasks[s], rows, zs, omega, R[t, s],
                                     max(kt_vals) + 1, max(ks_vals[s])))
            if node_reach == "paired" and pairs.get((t, s)):
                # a node of source cluster C^s_j reaches at most |C^t_i| target points, C^t_i
                # the target cluster it is paired with in step 1 (see the docstring)
                size_t = {ct: int((init[t] == ct).sum()) for ct, _ in pairs[t, s]}
                cap_of = {cs: size_t[ct] for ct, cs in pairs[t, s]}
                lab_s = init[s][np.flatnonzero(zs)][parts[-1].node_pos]
                parts[-1].node_cap = np.array([cap_of.get(int(c), ns[t]) for c in lab_s], dtype=np.int64)
            mask = np.zeros(ns[s], bool)
            mask[np.flatnonzero(zs)[omega > 0]] = True
            transferred[t, s] = mask
        n_levels = max([len(v) for v in ks_vals.values()] or [1])
        # rows of every node of the step-3 graph (target points, then the transferred
        # source instances), used only to break Ncut's ties between graph components
        node_rows = [p.node_features for p in parts if p.node_pos.size]
        if not node_rows:
            feats = tasks[t]
        elif sp.issparse(tasks[t]):
            feats = sp.vstack([tasks[t], *[sp.csr_matrix(r) for r in node_rows]]).tocsr()
        else:
            feats = np.vstack([tasks[t], *[np.asarray(r.toarray() if sp.issparse(r) else r) for r in node_rows]])
        settings, labs = [], []
        for kt in kt_vals:
            for lvl in range(n_levels):
                kd = {s: ks_vals[s][min(lvl, len(ks_vals[s]) - 1)] for s in src}
                W = transfer_graph(orders[t], kt, parts, [kd[s] for s in src], edges=edges)
                lab = ncut(W, hs[t], seed=seed, features=feats, metric=_metric_for(tasks[t]))[:ns[t]]  # own nodes
                if (lab >= 0).sum() < hs[t]:              # (almost) no edges: k-means on the features
                    lab = kmeans(tasks[t], hs[t], seed=seed)[0]
                labs.append(_fill_isolated(lab, S[t]))
                settings.append({"k_self": int(kt), "k_src": kd})
        i = select_partition(labs, hs[t], None if select == "label-free" else np.asarray(labels[t]))
        if i is None:   # no setting cut the task into h_t clusters: no transfer (= Ncut-SNN's partition)
            out_labels.append(init[t])
            params.append({"k_self": None, "k_src": {}, "grid_index": None})
        else:
            out_labels.append(labs[i])
            params.append({**settings[i], "grid_index": i})
        grid.append([{**sg, "labels": lb} for sg, lb in zip(settings, labs)])
    return SAMTCResult(labels=out_labels, R=R, reusable=reusable, subtasks=subtasks,
                       init_labels=init, params=params, pairs=pairs, js=jsd, beta=betas,
                       grid=grid, variant=variant, select=select, transferred=transferred,
                       transfer=transfer)


def node_weights(variant, R_ts, n_s, n_tasks):
    """Node weights ω_z of the source subtask's instances in the target's augmented graph.

    Rebuilt: every instance of the source subtask Z^s enters target t's graph with weight
    ω_z = R^(t)_s / (T − 1) (``variant="ns"``, no relatedness step: ω_z = 1 / (T − 1)), so that
    all sources together weigh at most as much as one task.

    Parameters
    ----------
    variant : {"full", "nr", "ns"}
        The SAMTC variant.
    R_ts : float
        Relatedness of the source for the target.
    n_s : int
        Number of instances of the source subtask.
    n_tasks : int
        T.

    Returns
    -------
    numpy.ndarray
        (n_s,) weights.

    Notes
    -----
    Measured alternatives (simulator, 10 seeds, label-free mean accuracy on the partial /
    partial-no-trap / complete sets; Ncut-SNN 0.931 / 0.975 / 0.942), before a chosen grid
    setting had to keep all h_t clusters of every task (with that rule the 10-seed record is
    0.944 / 0.981 / 0.974 against Ncut-SNN 0.939 / 0.974 / 0.942; not re-measured):

    * ω_z = R^(t)_s / (T − 1) (chosen): 0.943 / 0.977 / 0.975;
    * ω_z = R^(t)_s: 0.954 / 0.962 / 0.968 — with perfect selection (precision 0.99) the
      shared clusters, swollen by T − 1 copies of the source instances, dominate the Ncut
      volumes and a small private target class is merged (no-trap seeds 0, 1: 0.99 → 0.93,
      0.97 → 0.90);
    * ω_z = R^(t)_s·min(1, ñ_t/ñ_s)·[/(T − 1)]: 0.944 / 0.976 / 0.968 [0.942 / 0.983 / 0.966];
    * ω_z = R^(t)_s·min(1, β_z) with the KMM weights (only the KMM support enters): 0.933 on
      ``partial`` — the Frank–Wolfe KMM solution is sparse (support 0.75–0.9 even for one
      distribution, 35–77 % of Z^s here), so it drops most reusable instances. β stays what R
      is computed from;
    * no edges between source nodes (they only bridge target points; with ω = R):
      0.941 / 0.978 / 0.947.

    Measured on 30 seeds (Ncut-SNN 0.9299 / 0.9604 / 0.9400): R/(T − 1) 0.9504 / 0.9666 /
    0.9638; ½·R/(T − 1) 0.9510 / 0.9685 / 0.9484; 2·R/(T − 1) (= R for T = 3) 0.9445 / 0.9572 /
    0.9652 — a stronger transfer helps the completely related set and hurts the partially
    related ones, a weaker one the reverse; R/(T − 1) is the only one of the three that is never
    far behind.
    """
    w = 1.0 if variant == "ns" else float(R_ts)
    return np.full(n_s, w / max(n_tasks - 1, 1))


class _SourcePart:
    """Neighbour lists of one source s for one target t (computed once, sliced per k).

    ord_ts: target rows (``rows`` mask) → Z^s positions (k_s nearest of a target point in
    the subtask);
    ord_nt: transferred source nodes → target points (their k_t+1 nearest target points);
    ord_ns: transferred source nodes → Z^s positions, self excluded.
    Cross-task neighbours rank by Euclidean distance (= Gaussian-kernel similarity, the
    spec); for L2-normalised tf-idf rows this is also the cosine ranking.
    """

    def __init__(self, Xt, Xs, rows, zs, omega, R_ts, max_kt, max_ks):
        self.zt_idx = np.flatnonzero(rows)                 # target points with source lists
        self.n_t, self.n_sub, self.R = Xt.shape[0], int(zs.sum()), float(R_ts)
        Zs = Xs[np.flatnonzero(zs)]
        self.ord_ts = st.neighbour_order(st.similarity(Xt[self.zt_idx], Zs, "euclidean"), max_k=max_ks)
        self.node_pos = np.flatnonzero(omega > 0)          # positions in Z^s of the nodes
        self.node_cap = None                               # per node cap on |N_t(z)| (node_reach)
        self.omega = omega[self.node_pos]
        self.node_features = Zs[self.node_pos]             # rows of the transferred nodes
        if self.node_pos.size:
            Zn = self.node_features
            self.ord_nt = st.neighbour_order(st.similarity(Zn, Xt, "euclidean"), max_k=max_kt)
            Sns = st.similarity(Zn, Zs, "euclidean")
            Sns[np.arange(self.node_pos.size), self.node_pos] = -np.inf   # exclude self
            self.ord_ns = st.neighbour_order(Sns, max_k=max(max_ks - 1, 1))


def transfer_graph(own_order, k_t, parts, k_src, edges="mutual"):
    """SAMTC's step 3 graph for one target t and one grid setting.

    Rebuilt (the paper's display equation is lost; the prose says the target is
    clustered "through instance transfer"). Nodes: the n_t target points, then for every
    source s the instances z of its subtask Z^s with node weight ω_z > 0
    (:func:`node_weights`). Neighbourhoods per block of the data:

    * target block: N_t(x) = {x} ∪ k_t-NN of x in task t (the Ncut-SNN lists);
      N_t(z) = the k_t + 1 nearest target points of a source node z (``node_reach=
      "paired"``: at most |C^t_i| of them, C^t_i the target cluster that z's source
      cluster is paired with in step 1);
    * source block s: N_s(x) = k_s-NN of x in Z^s for every target point x (rebuilt:
      the spec gives source lists only to x ∈ Z^t; with source nodes in the graph the
      mutual k-NN rule already keeps a point of a class the source lacks away from them,
      and Z^t, cut from the initial partition, misses the points of badly initialised
      clusters — simulator ``partial``, 10 seeds, measured with ω = R: 0.954 vs 0.947 with
      Z^t only);
      N_s(z) = {z} ∪ (k_s − 1)-NN of z in Z^s for a node z of s (∅ for nodes of other
      sources).

    Edges join mutual k-NN pairs: two target points mutual in their own task (the
    spec's rule), a target point x and a node z with z ∈ N_s(x) and x ∈ N_t(z),
    and two nodes of one source mutual in Z^s. Weight (:func:`tandem.inference.samtc.steps.snn_graph`)

        W(u, v) = ω_u ω_v Σ_b w_b |N_b(u) ∩ N_b(v)| / Σ_b w_b |N_b(u) ∪ N_b(v)|,

    block weights w_t = 1, w_s = R^(t)_s; ω = 1 on target points. On target–target
    edges this has the form of the spec's relatedness-weighted SNN (the transfer
    re-weights the target's own edges; ``transfer="reweight"`` is exactly the spec's); the
    source nodes add what that re-weighting
    cannot — paths through reusable source instances, so that a target point whose own
    neighbours are ambiguous is pulled towards the cluster that the matching source
    instances form. R = 0 for every source (or no part) → the Ncut-SNN graph exactly.
    With every ω = 0 (``transfer="reweight"``) it is the spec's re-weighting alone.

    Parameters
    ----------
    own_order : numpy.ndarray
        (n_t, ≥ k_t) own-task neighbour order.
    k_t : int
        Own-task neighbourhood size.
    parts : list of _SourcePart
        One per source with a non-empty subtask.
    k_src : list of int
        k_s per part.
    edges : {"mutual", "symmetric"}, default "mutual"
        Own-task kNN edges.

    Returns
    -------
    scipy.sparse.csr_matrix
        (N, N) symmetric weights, N = n_t + the number of source nodes.
    """
    n_t = own_order.shape[0]
    sizes = [p.node_pos.size for p in parts]
    N = n_t + sum(sizes)
    offs = np.cumsum([n_t] + sizes)[:-1]
    At = st.neighbour_indicator(own_order, k_t, n_t, n_rows=N, include_self=True)
    blocks, weights, knn_parts = [], [], []
    for p, off, ks in zip(parts, offs, k_src):
        m = p.node_pos.size
        node_ids = off + np.arange(m)
        A = st.neighbour_indicator(p.ord_ts, ks, p.n_sub, rows=p.zt_idx, n_rows=N)
        if m:
            if p.node_cap is None:
                At = At + st.neighbour_indicator(p.ord_nt, k_t + 1, n_t, rows=node_ids, n_rows=N)
            else:   # N_t(z) = the min(k_t + 1, cap_z) nearest target points of node z
                o = np.asarray(p.ord_nt)[:, :k_t + 1]
                keep = np.arange(o.shape[1])[None, :] < np.minimum(p.node_cap, k_t + 1)[:, None]
                r = np.broadcast_to(node_ids[:, None], o.shape)[keep]
                At = At + sp.csr_matrix((np.ones(r.size), (r, o[keep])), shape=(N, n_t))
            A = A + st.neighbour_indicator(p.ord_ns, ks - 1, p.n_sub, rows=node_ids, n_rows=N,
                                           include_self=True, self_cols=p.node_pos)
        A = A.tocsr()
        blocks.append(A)
        weights.append(p.R)
        # position in Z^s → node id (the k-NN relation only links nodes)
        P = sp.csr_matrix((np.ones(m), (p.node_pos, node_ids)), shape=(p.n_sub, N))
        knn_parts.append(A @ P)
    At = At.tocsr()
    knn = sp.hstack([At, sp.csr_matrix((N, N - n_t))]).tocsr() if N > n_t else At.copy()
    for K in knn_parts:
        knn = knn + K
    omega = np.concatenate([np.ones(n_t)] + [p.omega for p in parts])
    return st.snn_graph(knn, [At, *blocks], [1.0, *weights], node_weights=omega, edges=edges)


def _per_task_k(k, T: int, name: str):
    """``k_self``/``k_src`` as None (the grid) or one value per task, checked against T.

    An int is used for every task; a list, tuple or 1-d integer array must have exactly one
    entry per task (a short list failed deep inside, extra entries were silently ignored).
    """
    if k is None or (isinstance(k, (int, np.integer)) and not isinstance(k, bool)):
        return k
    if isinstance(k, (list, tuple, np.ndarray)) and np.ndim(k) == 1:
        if len(k) != T:
            raise ValueError(f"{name}: expected one value per task ({T} tasks), got {len(k)}: {list(k)!r}")
        return list(k)
    raise ValueError(f"{name}: expected None, an integer or one integer per task, got {k!r}")


def _k_values(k, t, grid, cap, name):
    """The k values to try for task t: the grid, or the user's int (or per-task list, see
    :func:`_per_task_k`)."""
    if k is None:
        return grid
    v = k[t] if isinstance(k, list) else k
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= cap:
        raise ValueError(f"{name}: expected an integer in [1, {cap}] for task {t}, got {v!r}")
    return [int(v)]
