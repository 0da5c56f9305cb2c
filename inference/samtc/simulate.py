"""Simulator of partially related clustering tasks with ground truth (SAMTC spec, "Evaluation").

The paper's motivating picture: two universities both have Mathematics and Engineering
pages, one also Medicine, the other Business. Transferring Medicine pages to help cluster
Business pages is *negative transfer*. :func:`simulate_tasks` builds that situation in
R^d with Gaussian classes:

* a pool of ``n_shared`` classes present in every task (the related label space);
* ``n_private[t]`` classes present only in task ``t`` (so ``h_t = n_shared + n_private[t]``
  may differ across tasks);
* private classes are placed at distance ``near`` (in units of the within-class standard
  deviation ``sigma``) from a private class of another task, so that an algorithm which
  pairs "closest clusters" without care transfers the wrong instances;
* uneven label marginals: class weights per task ~ Dirichlet(``alpha``·1), floored so every
  class keeps at least ``min_per_class`` points;
* shared classes have the same mean in every task (plus optional task jitter ``shift``).

Ground truth returned (:class:`SimulatedTasks`):

* ``reusable[(t, s)]`` — boolean mask over the instances of *source* ``s``: True where the
  instance's class also exists in *target* ``t`` (the instances SAMTC should transfer);
* ``R_true[t, s]`` — fraction of source-``s`` instances reusable for target ``t`` (asymmetric;
  ``R_true[t, t] = 1``), the quantity SAMTC's relatedness R^(t)_s estimates.

Scores: :func:`reusable_scores` (precision/recall of a predicted reusable mask against the
truth, pooled over all ordered (target, source) pairs) and :func:`relatedness_abs_error`
(mean |R − R_true| over the off-diagonal entries).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np

from tandem.inference.params import Interval, Seed, SequenceOf, validate_params

__all__ = ["SimulatedTasks", "simulate_tasks", "reusable_scores", "relatedness_abs_error"]


@dataclass
class SimulatedTasks:
    """Simulated multi-task clustering problem.

    Attributes
    ----------
    tasks : list of T arrays (n_t, d), float64.
    labels : list of T int arrays (n_t,), task-local class index in 0..h_t−1.
    global_labels : list of T int arrays (n_t,), index into the global class pool
        (shared classes first: 0..n_shared−1, then every task's private classes).
    h : list of T ints, number of classes of each task.
    class_sets : list of T sorted lists of global class ids present in each task.
    means : (n_classes_total, d) class means.
    reusable : dict (t, s) -> bool array (n_s,), t != s.
    R_true : (T, T) array, R_true[t, s] = mean(reusable[(t, s)]), diagonal 1.
    traps : list of (private class id, earlier private class id it was placed next to).
    config : every setting used.
    """
    tasks: list
    labels: list
    global_labels: list
    h: list
    class_sets: list
    means: np.ndarray
    reusable: dict
    R_true: np.ndarray
    traps: list = field(default_factory=list)
    config: dict = field(default_factory=dict)

    @property
    def T(self) -> int:
        return len(self.tasks)


_COUNT = Interval(Integral, 0)
_POSITIVE = Interval(Real, 0, closed="neither")

#: simulate_tasks' settings, declared once (checked on entry; a bad value is an
#: InvalidParameterError naming the setting, before anything is drawn)
SIMULATE_CONSTRAINTS = {
    "n_tasks": [Interval(Integral, 2)],
    "n_shared": [Interval(Integral, 1)],
    "n_private": [_COUNT, SequenceOf(_COUNT)],
    "n_points": [Interval(Integral, 1), SequenceOf(Interval(Integral, 1))],
    "d": [Interval(Integral, 2)],
    "sigma": [_POSITIVE],           # σ = 0 would make every point its class mean (constant classes)
    "separation": [_POSITIVE],
    "near": [None, _POSITIVE],
    "alpha": [_POSITIVE],           # a Dirichlet concentration
    "min_per_class": [Interval(Integral, 1)],
    "shift": [Interval(Real, 0)],
    "seed": [Seed()],
}


def _is_count(v) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool)


def _spread_points(rng, m, d, min_dist, scale, existing=None, tries=2000):
    """m points in a cube of half-width ``scale`` at pairwise distance >= min_dist (rejection)."""
    pts = [] if existing is None else list(existing)
    out = []
    for _ in range(m):
        for _ in range(tries):
            p = rng.uniform(-scale, scale, size=d)
            if all(np.linalg.norm(p - q) >= min_dist for q in pts):
                break
        else:
            raise RuntimeError("could not place class means; increase spread or reduce classes")
        pts.append(p)
        out.append(p)
    return np.array(out).reshape(m, d)


def simulate_tasks(n_tasks: int = 3, n_shared: int = 3, n_private=(1, 2, 1), n_points=(240, 300, 180),
                   d: int = 5, sigma: float = 1.0, separation: float = 7.0, near: float = 3.5,
                   alpha: float = 3.0, min_per_class: int = 15, shift: float = 0.0,
                   seed: int = 0) -> SimulatedTasks:
    """Simulate ``n_tasks`` partially related clustering tasks (see module docstring).

    Parameters
    ----------
    n_tasks : T >= 2.
    n_shared : classes common to every task (>= 1).
    n_private : int or length-T sequence, private classes per task (0 gives a completely
        related control when all are 0).
    n_points : int or length-T sequence, n_t.
    d : feature dimension (>= 2).
    sigma : within-class standard deviation (isotropic).
    separation : minimum distance between "anchor" class means, in units of sigma.
    near : distance (units of sigma) of a private class of task t > 0 from a private class
        of an earlier task (the negative-transfer trap). ``None`` places private classes
        freely like the shared ones.
    alpha : Dirichlet concentration of each task's class weights (smaller = more uneven).
    min_per_class : floor on the points per class.
    shift : per-task jitter (units of sigma) added to shared class means (0: identical).
    seed : numpy seed, in [0, 2**32).

    Returns
    -------
    SimulatedTasks
        The tasks, their labels and the ground truth of the transfer; ``config`` holds every
        setting as a plain Python value.

    Raises
    ------
    ValueError
        Every setting is declared in :data:`SIMULATE_CONSTRAINTS`; a value outside it raises
        :class:`tandem.inference.params.InvalidParameterError` (a ValueError) naming the
        setting. Also when a task's ``n_points`` cannot give each of its classes
        ``min_per_class`` points.
    """
    validate_params(SIMULATE_CONSTRAINTS, dict(
        n_tasks=n_tasks, n_shared=n_shared, n_private=n_private, n_points=n_points, d=d, sigma=sigma,
        separation=separation, near=near, alpha=alpha, min_per_class=min_per_class, shift=shift, seed=seed),
        "simulate_tasks: ")
    # one entry per task: an integer is used for every task
    n_private = [int(n_private)] * n_tasks if _is_count(n_private) else [int(v) for v in n_private]
    n_points = [int(n_points)] * n_tasks if _is_count(n_points) else [int(v) for v in n_points]
    for name, v in (("n_private", n_private), ("n_points", n_points)):
        if len(v) != n_tasks:
            raise ValueError(f"{name}: expected an integer or one entry per task ({n_tasks} tasks), got {len(v)}")
    h = [n_shared + p for p in n_private]
    for t in range(n_tasks):
        if n_points[t] < h[t] * min_per_class:
            raise ValueError(f"n_points[{t}] = {n_points[t]} < h_t·min_per_class = {h[t] * min_per_class}")
    rng = np.random.default_rng(seed)
    scale = separation * sigma * max(1.0, (n_shared + sum(n_private)) ** (1.0 / d))
    shared_means = _spread_points(rng, n_shared, d, separation * sigma, scale)
    means = list(shared_means)
    class_sets = [list(range(n_shared)) for _ in range(n_tasks)]
    private_ids = [[] for _ in range(n_tasks)]
    traps = []
    next_id = n_shared
    for t in range(n_tasks):
        for j in range(n_private[t]):
            anchor = None
            if near is not None:
                # the trap: sit next to a private class of an earlier task (the Medicine /
                # Business pair), but stay well apart from every class of *this* task
                cands = [pid for u in range(t) for pid in private_ids[u]]
                rng.shuffle(cands)
                for pid in cands:
                    for _ in range(500):
                        v = rng.normal(size=d)
                        p = means[pid] + near * sigma * v / np.linalg.norm(v)
                        own = [means[c] for c in class_sets[t]]
                        others = [m for i, m in enumerate(means) if i != pid]
                        if (all(np.linalg.norm(p - q) >= separation * sigma for q in own)
                                and all(np.linalg.norm(p - q) >= near * sigma for q in others)):
                            anchor = p
                            traps.append((next_id, pid))
                            break
                    if anchor is not None:
                        break
            if anchor is None:
                anchor = _spread_points(rng, 1, d, separation * sigma, scale, existing=means)[0]
            means.append(anchor)
            class_sets[t].append(next_id)
            private_ids[t].append(next_id)
            next_id += 1
    means = np.array(means)

    tasks, labels, glabels = [], [], []
    for t in range(n_tasks):
        w = rng.dirichlet(alpha * np.ones(h[t]))
        counts = np.full(h[t], min_per_class)
        extra = n_points[t] - counts.sum()
        counts += rng.multinomial(extra, w)
        lab = np.repeat(np.arange(h[t]), counts)
        rng.shuffle(lab)
        gl = np.array(class_sets[t])[lab]
        task_shift = shift * sigma * rng.normal(size=(n_shared, d))
        mu = means[gl].copy()
        sh = gl < n_shared
        mu[sh] += task_shift[gl[sh]]
        X = mu + sigma * rng.normal(size=(n_points[t], d))
        tasks.append(X)
        labels.append(lab.astype(np.int64))
        glabels.append(gl.astype(np.int64))

    reusable, R = {}, np.eye(n_tasks)
    for t in range(n_tasks):
        for s in range(n_tasks):
            if s == t:
                continue
            m = np.isin(glabels[s], class_sets[t])
            reusable[(t, s)] = m
            R[t, s] = m.mean()
    cfg = dict(n_tasks=n_tasks, n_shared=n_shared, n_private=n_private, n_points=n_points, d=d,
               sigma=sigma, separation=separation, near=near, alpha=alpha,
               min_per_class=min_per_class, shift=shift, seed=seed)
    # the settings as plain Python numbers (a numpy seed or size would not serialise to JSON)
    cfg = {k: v.item() if isinstance(v, np.generic) else v for k, v in cfg.items()}
    return SimulatedTasks(tasks, labels, glabels, h, [sorted(c) for c in class_sets], means,
                          reusable, R, traps, cfg)


def reusable_scores(pred: dict, truth: dict) -> tuple[float, float]:
    """Precision and recall of predicted reusable-instance masks, pooled over (t, s) pairs.

    precision = Σ_{t≠s} |P_ts ∩ G_ts| / Σ |P_ts|, recall = Σ |P_ts ∩ G_ts| / Σ |G_ts|, with P_ts
    the predicted and G_ts the true reusable source-s instances for target t. An empty
    prediction has precision 1 by convention (nothing wrongly transferred); an empty truth gives
    recall 1.

    Parameters
    ----------
    pred, truth : dict
        {(t, s): bool (n_s,) mask}, predicted and true.

    Returns
    -------
    precision, recall : float
    """
    tp = fp = fn = 0
    for key, g in truth.items():
        if key not in pred:
            raise ValueError(f"reusable_scores: prediction misses pair {key}")
        p = np.asarray(pred[key], dtype=bool)
        g = np.asarray(g, dtype=bool)
        if p.shape != g.shape:
            raise ValueError(f"reusable_scores: pair {key} has {p.shape} predicted vs {g.shape} true")
        tp += int((p & g).sum())
        fp += int((p & ~g).sum())
        fn += int((~p & g).sum())
    prec = tp / (tp + fp) if tp + fp else 1.0
    rec = tp / (tp + fn) if tp + fn else 1.0
    return float(prec), float(rec)


def relatedness_abs_error(R, R_true) -> float:
    """Mean absolute error of the off-diagonal relatedness entries.

    (1/(T(T−1))) Σ_{t≠s} |R_ts − R_true,ts|.

    Parameters
    ----------
    R, R_true : array_like
        (T, T) estimated and true relatedness.

    Returns
    -------
    float
        The mean absolute error.
    """
    R, R_true = np.asarray(R, dtype=float), np.asarray(R_true, dtype=float)
    if R.shape != R_true.shape or R.ndim != 2 or R.shape[0] != R.shape[1]:
        raise ValueError(f"relatedness_abs_error: expected two equal square matrices, got {R.shape} and {R_true.shape}")
    off = ~np.eye(R.shape[0], dtype=bool)
    return float(np.abs(R - R_true)[off].mean())
