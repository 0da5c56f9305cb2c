"""Model selection for twin GPs by K-fold cross-validation (the paper's protocol).

1. Kernel widths and λ by CV of KLTGP (:func:`select_kltgp`) over a grid; widths are
   given as multiples of the median pairwise distance (:func:`median_distance`).
2. α ∈ {0, 0.05, …, 1} and β ∈ {0.99, 0.5, 1.5} by CV of SMTGP (:func:`select_alpha_beta`)
   with the KLTGP widths fixed; α = 0 and α = 1 are evaluated as KLTGP and IKLTGP (the
   limits of SMTGP's minimiser), β only changes SMTGP's optimisation path (``form="sm"``,
   the paper's L′ with ≤ 50 steps).

On the large data sets the CV runs on a random subset of the training set (the examples
say which); every fold is a fresh :class:`~tandem.inference.twin_gp.predictor.TwinGP` on the other folds.
"""
from __future__ import annotations

import itertools
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from tandem.inference.checkpoints import check_fingerprint, content_hash, load_checkpoint, save_atomic
from tandem.inference.distances import median_distance
from tandem.inference.experiments.cli import grid_step
from tandem.inference.twin_gp.ensemble import ENSEMBLE, ENSEMBLE_SE, medoid, near_ties
from tandem.inference.twin_gp.optimizer import ConvergenceWarning, IterationCapWarning
from tandem.inference.twin_gp.predictor import (
    TwinGP,
    gpr_predict,
    hsic,
    kernel_alignment,
    kernel_knn_predict,
    rbf,
    wknn_predict,
)
from tandem.inference.validation import as_tensor, check_int_range, check_real_range, check_same_rows, check_seed

__all__ = ["kfold_indices", "select_kltgp", "select_alpha_beta", "select_gpr", "select_wknn",
           "select_alignment_knn", "run_real_experiment", "paired_differences", "paired_over_draws",
           "add_protocol_args", "alpha_grid", "StageCheckpoint",
           "ALPHAS", "BETAS"]

ALPHAS = tuple(round(0.05 * i, 2) for i in range(21))
BETAS = (0.99, 0.5, 1.5)


def kfold_indices(n: int, k: int = 5, seed: int = 0) -> list[np.ndarray]:
    """A random partition of range(n) into k folds (sizes differ by at most one).

    Parameters
    ----------
    n : int
        Items, n ≥ 2.
    k : int, default 5
        Folds, 2 ≤ k ≤ n.
    seed : int, default 0
        Seed of the permutation.

    Returns
    -------
    list of numpy.ndarray
        The k sorted index arrays.
    """
    n = check_int_range(n, "n", 2)
    k = check_int_range(k, "k", 2, n)
    perm = np.random.default_rng(check_seed(seed)).permutation(n)
    return [np.sort(f) for f in np.array_split(perm, k)]


def _score(metric, pred, true, setting):
    """``metric(pred, true)``, checked: a finite real number (a 0-d or one-element array or tensor
    also passes); the value itself is returned unchanged.

    A NaN would silently decide the CV (``min`` and ``sorted`` with NaN keys depend on where
    the NaN sits in the grid), an infinity would tie every fold it occurs in, and a string
    would fail later inside numpy: each is a ``ValueError`` naming ``metric`` and ``setting``."""
    v = metric(pred, true)
    name = f"metric (its value for the setting {setting})"
    if isinstance(v, (str, bytes)):
        raise ValueError(f"{name}: expected a finite real number (lower is better), got {v!r}")
    t = as_tensor(v, name)  # refuses non-numeric values and NaN/inf, naming metric
    if t.numel() != 1:
        raise ValueError(f"{name}: expected one real number (lower is better), got shape {tuple(t.shape)}")
    return v


def _folds(X, Y, k, seed):
    X = as_tensor(X, "X", ndim=2)
    Y = as_tensor(Y, "Y", ndim=2)
    check_same_rows({"X": X, "Y": Y}, "samples (rows)")
    folds = kfold_indices(X.shape[0], k, seed)
    for f in folds:
        tr = np.setdiff1d(np.arange(X.shape[0]), f)
        yield X[tr], Y[tr], X[f], Y[f]


class _CapCounter:
    """Counts the test points that hit the iteration cap, or stalled below it, inside a CV
    loop (the per-call :class:`IterationCapWarning` / :class:`ConvergenceWarning` would
    repeat hundreds of times); the totals are returned with the selection as ``"capped"``
    and ``"stalled"``, so they are reported, not hidden."""

    def __init__(self):
        self.count = 0
        self.stalled = 0

    def __enter__(self):
        self._cm = warnings.catch_warnings(record=True)
        self._log = self._cm.__enter__()
        warnings.simplefilter("always", ConvergenceWarning)
        return self

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)
        for w in self._log:
            if issubclass(w.category, IterationCapWarning):
                self.count += w.message.n_capped
            elif issubclass(w.category, ConvergenceWarning):
                self.stalled += w.message.n_points
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return False


def select_kltgp(X, Y, rho_x_grid, rho_y_grid, lam_grid, metric, k: int = 5, seed: int = 0,
                 neighbors: int | None = None, max_iter: int = 50, repeats: int = 1) -> dict:
    """Grid search of (ρ_x, ρ_y, λ) for KLTGP by k-fold CV; λ_X = λ_Y = λ.

    ``repeats`` > 1 averages over that many random partitions into folds (seeds ``seed``,
    ``seed + 1``, …), which steadies the choice when a few validation points dominate the score.

    Parameters
    ----------
    X : array_like
        (N, d_x) inputs.
    Y : array_like
        (N, d_y) outputs.
    rho_x_grid, rho_y_grid, lam_grid : sequence of float
        The grids of ρ_x, ρ_y and λ.
    metric : callable
        ``metric(pred, true) -> float``, lower is better; a value that is not a finite real
        number is a ``ValueError`` naming ``metric`` and the setting.
    k : int, default 5
        CV folds.
    seed : int, default 0
        Seed of the fold partition.
    neighbors : int, optional
        Local model with K nearest training points (None: global).
    max_iter : int, default 50
        BFGS iterations per validation point at most.
    repeats : int, default 1
        Random fold partitions averaged over.

    Returns
    -------
    dict
        ``{"best": (ρ_x, ρ_y, λ), "scores": {(ρ_x, ρ_y, λ): [per-fold values]}, "capped": n,
        "stalled": m}`` (n, m: validation points, summed over folds and grid, that hit the
        iteration cap / stopped unconverged below it).
    """
    repeats = check_int_range(repeats, "repeats", 1)
    seed = check_seed(seed)      # repeat r partitions with seed + r
    scores: dict = {}
    with _CapCounter() as cap:
        for r in range(repeats):
            for Xtr, Ytr, Xva, Yva in _folds(X, Y, k, seed + r):
                for rx, ry, lam in itertools.product(rho_x_grid, rho_y_grid, lam_grid):
                    m = TwinGP(Xtr, Ytr, rx, ry, lam)
                    pred = m.predict(Xva, "KLTGP", max_iter=max_iter, neighbors=neighbors)
                    scores.setdefault((rx, ry, lam), []).append(
                        _score(metric, pred, Yva, f"(rho_x, rho_y, lam) = {(rx, ry, lam)}"))
    best = min(scores, key=lambda key: np.mean(scores[key]))
    return {"best": best, "scores": scores, "capped": cap.count, "stalled": cap.stalled}


def select_alpha_beta(X, Y, rho_x: float, rho_y: float, lam: float, metric, alphas=ALPHAS,
                      betas=BETAS, k: int = 5, seed: int = 0, neighbors: int | None = None,
                      max_iter: int = 50, form: str = "sm") -> dict:
    """k-fold CV of SMTGP over α × β (α = 0: KLTGP, α = 1: IKLTGP, no β there).

    Endpoint keys use β = None. Ties are broken towards the smaller α, then the listed
    order of β.

    Parameters
    ----------
    X : array_like
        (N, d_x) inputs.
    Y : array_like
        (N, d_y) outputs.
    rho_x, rho_y, lam : float
        The kernel widths and λ (the twin GP's ridge), each > 0.
    metric : callable
        ``metric(pred, true) -> float``, lower is better; a value that is not a finite real
        number is a ``ValueError`` naming ``metric`` and the setting.
    alphas : sequence of float, default ALPHAS
        The α grid in [0, 1].
    betas : sequence of float, default BETAS
        The β grid (β ≠ 1).
    k : int, default 5
        CV folds.
    seed : int, default 0
        Seed of the fold partition.
    neighbors : int, optional
        Local model with K nearest training points (None: global).
    max_iter : int, default 50
        BFGS iterations per validation point at most.
    form : {"sm", "log"}, default "sm"
        SMTGP's objective form.

    Returns
    -------
    dict
        ``{"best": (α, β), "scores": {(α, β): [per-fold values]}, "capped": n, "stalled": m}``.

    Raises
    ------
    ValueError
        Naming ``rho_x``, ``rho_y`` or ``lam`` when it is not a finite real > 0, before any fold is fitted.
    """
    # TwinGP checks them again per fold; here they are refused under their own names, up front
    check_real_range(rho_x, "rho_x", 0.0, low_open=True)
    check_real_range(rho_y, "rho_y", 0.0, low_open=True)
    check_real_range(lam, "lam", 0.0, low_open=True)
    scores: dict = {}
    with _CapCounter() as cap:
        for Xtr, Ytr, Xva, Yva in _folds(X, Y, k, seed):
            m = TwinGP(Xtr, Ytr, rho_x, rho_y, lam)
            init = m.predict(Xva, "KLTGP", max_iter=max_iter, neighbors=neighbors)
            for a in alphas:
                if a == 0.0:
                    scores.setdefault((0.0, None), []).append(_score(metric, init, Yva, "alpha = 0 (KLTGP)"))
                elif a == 1.0:
                    pred = m.predict(Xva, "IKLTGP", init=init, max_iter=max_iter, neighbors=neighbors)
                    scores.setdefault((1.0, None), []).append(_score(metric, pred, Yva, "alpha = 1 (IKLTGP)"))
                else:
                    for b in betas:
                        pred = m.predict(Xva, "SMTGP", alpha=a, beta=b, init=init, max_iter=max_iter,
                                         neighbors=neighbors, form=form)
                        scores.setdefault((a, b), []).append(_score(metric, pred, Yva, f"(alpha, beta) = {(a, b)}"))
    order = list(scores)
    best = min(order, key=lambda key: (round(float(np.mean(scores[key])), 12), order.index(key)))
    return {"best": best, "scores": scores, "capped": cap.count, "stalled": cap.stalled}


def select_gpr(X, Y, rho_grid, noise_grid, metric, k: int = 5, seed: int = 0) -> dict:
    """k-fold CV of the GPR baseline's (ρ, σ²).

    Parameters
    ----------
    X : array_like
        (N, d_x) inputs.
    Y : array_like
        (N, d_y) outputs.
    rho_grid, noise_grid : sequence of float
        The grids of ρ and σ².
    metric : callable
        ``metric(pred, true) -> float``, lower is better; a value that is not a finite real
        number is a ``ValueError`` naming ``metric`` and the setting.
    k : int, default 5
        CV folds.
    seed : int, default 0
        Seed of the fold partition.

    Returns
    -------
    dict
        ``{"best": (ρ, σ²), "scores": {(ρ, σ²): [per-fold values]}}``.
    """
    scores: dict = {}
    for Xtr, Ytr, Xva, Yva in _folds(X, Y, k, seed):
        for r, s in itertools.product(rho_grid, noise_grid):
            scores.setdefault((r, s), []).append(
                _score(metric, gpr_predict(Xtr, Ytr, Xva, r, s), Yva, f"(rho, noise) = {(r, s)}"))
    return {"best": min(scores, key=lambda key: np.mean(scores[key])), "scores": scores}


def select_wknn(X, Y, ks, metric, k: int = 5, seed: int = 0) -> dict:
    """k-fold CV of the weighted k-NN baseline's neighbour count.

    Parameters
    ----------
    X : array_like
        (N, d_x) inputs.
    Y : array_like
        (N, d_y) outputs.
    ks : sequence of int
        Neighbour counts.
    metric : callable
        ``metric(pred, true) -> float``, lower is better; a value that is not a finite real
        number is a ``ValueError`` naming ``metric`` and the setting.
    k : int, default 5
        CV folds.
    seed : int, default 0
        Seed of the fold partition.

    Returns
    -------
    dict
        ``{"best": k, "scores": {k: [per-fold values]}}``.
    """
    scores: dict = {}
    for Xtr, Ytr, Xva, Yva in _folds(X, Y, k, seed):
        for kk in ks:
            scores.setdefault(kk, []).append(_score(metric, wknn_predict(Xtr, Ytr, Xva, kk), Yva, f"k = {kk}"))
    return {"best": min(scores, key=lambda key: np.mean(scores[key])), "scores": scores}


def select_alignment_knn(X, Y, rho_grid, rho_y: float, ks, metric, criterion: str = "kta", k: int = 5,
                         seed: int = 0) -> dict:
    """The kernel-alignment k-NN baselines ("KTA-kNN", "HSIC-kNN" of the twin-GP papers).

    1. Input-kernel width: ρ_x ∈ ``rho_grid`` maximising the alignment between the Gaussian
       input kernel on X and the Gaussian output kernel (width ``rho_y``) on Y — centred
       kernel–target alignment (``criterion="kta"``) or HSIC (``"hsic"``) — on all of (X, Y)
       (unsupervised in the test sense: no held-out error is used).
    2. k ∈ ``ks`` by k-fold CV of :func:`~tandem.inference.twin_gp.predictor.kernel_knn_predict` with that ρ_x.

    Parameters
    ----------
    X : array_like
        (N, d_x) inputs.
    Y : array_like
        (N, d_y) outputs.
    rho_grid : sequence of float
        Input-width grid.
    rho_y : float
        Output kernel width, > 0.
    ks : sequence of int
        Neighbour counts.
    metric : callable
        ``metric(pred, true) -> float``, lower is better; a value that is not a finite real
        number is a ``ValueError`` naming ``metric`` and the setting.
    criterion : {"kta", "hsic"}, default "kta"
        The alignment.
    k : int, default 5
        CV folds.
    seed : int, default 0
        Seed of the fold partition.

    Returns
    -------
    dict
        ``{"best": (ρ_x, k), "alignment": {ρ: value}, "scores": {k: [per-fold values]}}``.

    Raises
    ------
    ValueError
        On an unknown ``criterion`` or unequal row counts; naming ``rho_y`` when it is not a finite
        real > 0.
    """
    check_real_range(rho_y, "rho_y", 0.0, low_open=True)
    if criterion not in ("kta", "hsic"):
        raise ValueError(f"criterion: expected 'kta' or 'hsic', got {criterion!r}")
    X = as_tensor(X, "X", ndim=2)
    Y = as_tensor(Y, "Y", ndim=2)
    check_same_rows({"X": X, "Y": Y}, "samples (rows)")
    KY = rbf(Y, Y, rho_y)
    crit = kernel_alignment if criterion == "kta" else hsic
    align = {float(r): crit(rbf(X, X, r), KY) for r in rho_grid}
    rho = max(align, key=align.get)
    scores: dict = {}
    for Xtr, Ytr, Xva, Yva in _folds(X, Y, k, seed):
        for kk in ks:
            kk = min(kk, Xtr.shape[0])
            scores.setdefault(kk, []).append(
                _score(metric, kernel_knn_predict(Xtr, Ytr, Xva, kk, rho), Yva, f"k = {kk}"))
    return {"best": (rho, min(scores, key=lambda key: np.mean(scores[key]))), "alignment": align, "scores": scores}


class StageCheckpoint:
    """Results of the finished stages of a long run, kept in ``folder/state.pt``.

    An interrupted run resumes after its last finished stage.

    ``fingerprint`` (a dict of plain values: settings and a hash of the data) must equal the
    stored one; a folder written by a different run raises ``ValueError`` naming the keys
    that differ, rather than silently mixing results. Each :meth:`save` rewrites the file
    atomically (temporary file + ``os.replace``), so a kill mid-write leaves the previous
    state intact. ``folder=None`` turns checkpointing off (every stage is computed).

    Parameters
    ----------
    folder : str or pathlib.Path or None
        Where ``state.pt`` lives (None: checkpointing off).
    fingerprint : dict
        Plain values identifying the run.

    Raises
    ------
    ValueError
        When the stored fingerprint differs.
    """

    KIND = "tandem.stages/1"

    def __init__(self, folder, fingerprint: dict):
        self.path = None if folder is None else Path(folder) / "state.pt"
        self.fingerprint = fingerprint
        self.stages: dict = {}
        if self.path is not None and self.path.exists():
            state = load_checkpoint(self.path, self.KIND)
            check_fingerprint(self.path, state.get("fingerprint"), fingerprint, what="run")
            self.stages = state["stages"]

    def __contains__(self, stage: str) -> bool:
        return stage in self.stages

    def __getitem__(self, stage: str):
        return self.stages[stage]

    def save(self, stage: str, value) -> None:
        """Record a finished stage and rewrite the file atomically.

        Parameters
        ----------
        stage : str
            The stage's name.
        value : object
            Its result (tensors, arrays, plain values).
        """
        self.stages[stage] = value
        if self.path is not None:
            save_atomic({"kind": self.KIND, "fingerprint": self.fingerprint, "stages": self.stages}, self.path)


def paired_differences(preds: dict, Y, metric, methods, baselines) -> dict:
    """Per-test-point paired comparison of each of ``methods`` with each of ``baselines``.

    d_n = metric(method, point n) − metric(baseline, point n). The test-set means of two methods can differ by less
    than the spread of the per-point errors; this says whether the difference is beyond it.

    Parameters
    ----------
    preds : dict
        {name: (N, d_y) predictions}.
    Y : array_like
        (N, d_y) true outputs.
    metric : callable
        ``metric(pred, true) -> float``.
    methods, baselines : sequence of str
        Names in ``preds``.

    Returns
    -------
    dict
        ``{"A - B": {"mean", "se", "wins", "losses"}}`` (se = std(d)/√N; wins: d_n < 0, i.e.
        the method's error is lower).
    """
    Y = torch.as_tensor(Y)  # device: cpu-ok (CPU data)
    per_point = {name: np.array([metric(p[i:i + 1], Y[i:i + 1]) for i in range(Y.shape[0])])
                 for name, p in preds.items() if name in (*methods, *baselines)}
    out = {}
    for a in methods:
        for b in baselines:
            if a != b and a in per_point and b in per_point:
                d = per_point[a] - per_point[b]
                out[f"{a} - {b}"] = {"mean": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(d.size)),
                                     "wins": int((d < 0).sum()), "losses": int((d > 0).sum())}
    return out


def _ensemble_predictions(preds, twin_predict, kl_sel, k, se, a, b, Xtr, Ytr, Xte, opts, res):
    """Step 5 of :func:`run_real_experiment`: the medoid of KLTGP's and SMTGP's predictions
    with the CV's near-ties (member 0 is the selected setting, already predicted)."""
    members = near_ties(kl_sel["scores"], k, se)
    res.config["ensemble_settings"] = [list(map(float, st)) for st in members]
    kl, sm = [preds["KLTGP"]], [preds["SMTGP"]]
    # SMTGP at α = 0 / 1 is KLTGP / IKLTGP (the limits of its minimiser), as in step 4
    method = {0.0: "KLTGP", 1.0: "IKLTGP"}.get(a, "SMTGP")
    extra = dict(alpha=a, beta=b, form="sm") if method == "SMTGP" else {}
    for i, st in enumerate(members[1:], start=1):
        m = TwinGP(Xtr, Ytr, *st)
        twin_predict(f"KLTGP member {i}", lambda: m.predict(Xte, "KLTGP", **opts))
        kl.append(preds.pop(f"KLTGP member {i}"))
        if method == "KLTGP":
            sm.append(kl[-1])
        else:
            twin_predict(f"{method} member {i}", lambda: m.predict(Xte, method, init=kl[-1], **extra, **opts))
            sm.append(preds.pop(f"{method} member {i}"))
    preds["KLTGP (ensemble)"] = medoid(torch.stack(kl))[0]
    preds["SMTGP (ensemble)"] = medoid(torch.stack(sm))[0]


def paired_over_draws(values: dict, seeds, methods, baselines) -> dict:
    """Paired comparison across data draws.

    For each method A and baseline B (both in ``values``, one score per draw in ``seeds``
    order, lower is better), d_s = A_s − B_s.

    Parameters
    ----------
    values : dict
        {name: scores, one per draw}.
    seeds : sequence
        The draws' seeds.
    methods, baselines : sequence of str
        Names in ``values``.

    Returns
    -------
    dict
        ``{"A - B": {"mean", "se", "wins", "losses", "worst_draw": {"seed", "excess",
        "relative_excess"}, "spread_ratio"}}`` with se = std(d)/√S, wins: d_s < 0, the worst
        draw the one with the largest d_s (relative_excess = d_s / B_s), and spread_ratio =
        std(A)/std(B) over draws (ddof 1).

    Raises
    ------
    ValueError
        When a name's scores are not one per seed.
    """
    seeds = list(seeds)
    out = {}
    for a in methods:
        for b in baselines:
            if a == b or a not in values or b not in values:
                continue
            va, vb = np.asarray(values[a], dtype=float), np.asarray(values[b], dtype=float)
            if va.shape != vb.shape or va.size != len(seeds):
                raise ValueError(f"values: {a!r} and {b!r} need one score per seed ({len(seeds)}), "
                                 f"got {va.size} and {vb.size}")
            d = va - vb
            w = int(np.argmax(d))
            se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")
            sb = float(vb.std(ddof=1)) if vb.size > 1 else float("nan")
            out[f"{a} - {b}"] = {
                "mean": float(d.mean()), "se": se, "wins": int((d < 0).sum()), "losses": int((d > 0).sum()),
                "worst_draw": {"seed": seeds[w], "excess": float(d[w]), "relative_excess": float(d[w] / vb[w])},
                "spread_ratio": float(va.std(ddof=1) / sb) if vb.size > 1 and sb > 0 else float("nan")}
    return out


def alpha_grid(step: float) -> tuple:
    """The α grid 0, step, 2·step, …, 1.

    Parameters
    ----------
    step : float
        1/n for an integer n ≥ 1 (see :func:`~tandem.inference.experiments.cli.grid_step`).

    Returns
    -------
    tuple of float
        The n + 1 grid values.

    Raises
    ------
    ValueError
        When ``step`` is not 1/n.
    """
    n = int(round(1 / step))
    if n < 1 or abs(n * step - 1) > 1e-9:
        raise ValueError(f"step: expected 1/n for an integer n >= 1, got {step}")
    return tuple(round(i / n, 4) for i in range(n + 1))


def add_protocol_args(parser, unit: str = "points", cv_subset: int = 1000):
    """Add the command-line options of :func:`run_real_experiment` shared by the real-data examples.

    --cv-subset (default ``cv_subset``), --alpha-step, --neighbors, --max-iter, --ensemble,
    --checkpoint.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The parser to extend.
    unit : str, default "points"
        What a training row is called in the help text.
    cv_subset : int, default 1000
        Default of --cv-subset.

    Returns
    -------
    argparse.ArgumentParser
        ``parser``.
    """
    parser.add_argument("--cv-subset", type=int, default=cv_subset, help=f"training {unit} used for CV")
    parser.add_argument("--alpha-step", type=grid_step, default=0.1, help="alpha grid step (0.05: the full grid)")
    parser.add_argument("--neighbors", type=int, default=None, help="local model: K nearest training points")
    parser.add_argument("--max-iter", type=int, default=50, help="BFGS iterations per test point at most")
    parser.add_argument("--ensemble", type=int, default=ENSEMBLE,
                        help="also predict with at most this many CV width settings within one standard error "
                             "of the best CV score, keeping each test point's medoid ('KLTGP/SMTGP (ensemble)' "
                             "records; 1: off)")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="folder for the finished stages (CV selection, each twin-GP test prediction); "
                             "starting the same command again resumes after the last finished stage")
    return parser


def _positive_grid(grid, name: str) -> list[float]:
    """A grid of positive finite reals, each entry checked by name (``name[i]``)."""
    return [check_real_range(v, f"{name}[{i}]", 0.0, None, low_open=True) for i, v in enumerate(grid)]


def run_real_experiment(data: dict, metric, metric_name: str, res, *, cv_subset: int, folds: int = 5,
                        rho_mult=(0.5, 1.0, 2.0), rho_mult_y=None, lam_grid=(1e-3, 1e-2), alphas=None,
                        betas=BETAS, wknn_ks=(1, 3, 5, 10, 20), neighbors: int | None = None, max_iter: int = 50,
                        seed: int = 0, test_folds: int = 5, log=print, checkpoint=None,
                        progress: bool = False, ensemble: int = 1) -> dict:
    """The paper's protocol on a real data set, recording into ``res`` (a Results).

    1. CV (``folds``-fold, on a random ``cv_subset`` of the training set) of KLTGP's
       (ρ_x, ρ_y, λ): ρ_x on ``rho_mult`` × the median pairwise input distance, ρ_y on
       ``rho_mult_y`` (default ``rho_mult``) × the median output distance.
    2. CV of SMTGP's (α, β) with those widths (α = 0/1: KLTGP/IKLTGP).
    3. CV of the baselines (GPR: ρ_x grid × σ² ∈ ``lam_grid``; WKNN: k ∈ ``wknn_ks``;
       KTA-kNN / HSIC-kNN: input width by alignment with the output kernel of width ρ_y
       over ``rho_mult`` × median and a wider range, then k by CV).
    4. Test: every method trained on the full training set (``neighbors``: local model
       with that many nearest training points per test point), predicting all test points
       batched. Records the CV scores of the selected settings (``split="cv"``, one value
       per fold), the test score (``split="test"``) and the test score on ``test_folds``
       disjoint random parts of the test set (``split="test_folds"``: mean ± std over parts).
    5. ``ensemble`` > 1 (our addition): KLTGP and SMTGP (the selected α, β) also predict with
       the CV's near-ties of step 1 (at most ``ensemble`` settings within one paired standard
       error of the best CV score), and each test point keeps the medoid of those predictions
       (records "KLTGP (ensemble)", "SMTGP (ensemble)"; :mod:`~tandem.inference.twin_gp.ensemble`).
    ``checkpoint``: a folder; the CV selection and each twin-GP test prediction are saved
    there as they finish (:class:`StageCheckpoint`) and reused when the same run is started
    again, so an interrupted run resumes after its last finished stage (times recorded in
    ``res`` are those of the run that computed the stage). ``progress``: tqdm bars over
    the test points of each twin-GP prediction.

    Parameters
    ----------
    data : dict
        "X_train", "Y_train", "X_test", "Y_test" arrays.
    metric : callable
        ``metric(pred, true) -> float``, lower is better; a value that is not a finite real
        number is a ``ValueError`` naming ``metric`` and the setting.
    metric_name : str
        Its name in the records.
    res : tandem.inference.experiments.results.Results
        Where the records go.
    cv_subset : int
        Training rows used for CV.
    folds : int, default 5
        CV folds.
    rho_mult : sequence of float, default (0.5, 1.0, 2.0)
        ρ_x grid as multiples of the median input distance.
    rho_mult_y : sequence of float, optional
        ρ_y grid as multiples of the median output distance (default ``rho_mult``).
    lam_grid : sequence of float, default (1e-3, 1e-2)
        λ grid (and GPR's σ² grid).
    alphas : sequence of float, optional
        α grid (default ALPHAS).
    betas : sequence of float, default BETAS
        β grid.
    wknn_ks : sequence of int, default (1, 3, 5, 10, 20)
        WKNN's neighbour counts.
    neighbors : int, optional
        Local model with K nearest training points (None: global).
    max_iter : int, default 50
        BFGS iterations per test point at most.
    seed : int, default 0
        Seed of the CV subset and folds.
    test_folds : int, default 5
        Disjoint parts of the test set for ``split="test_folds"``.
    log : callable, default print
        Progress messages.
    checkpoint : str or pathlib.Path, optional
        The stage folder (see above).
    progress : bool, default False
        tqdm bars.
    ensemble : int, default 1
        Ensemble size of step 5 (1: off).

    Returns
    -------
    dict
        ``{"preds": {name: predictions}, "settings": res.config, "model": m}`` with ``m`` the
        TwinGP of the selected setting on the full training set.
    """
    alphas = ALPHAS if alphas is None else alphas
    ensemble = check_int_range(ensemble, "ensemble", 1)
    # every setting is checked before any work and recorded (in the checkpoint's fingerprint)
    # as the value that is used, never a truncation of it
    folds = check_int_range(folds, "folds", 2)
    cv_subset = check_int_range(cv_subset, "cv_subset", folds)
    max_iter = check_int_range(max_iter, "max_iter", 1)
    test_folds = check_int_range(test_folds, "test_folds", 1)
    wknn_ks = [check_int_range(k, f"wknn_ks[{i}]", 1) for i, k in enumerate(wknn_ks)]
    rho_mult, lam_grid = _positive_grid(rho_mult, "rho_mult"), _positive_grid(lam_grid, "lam_grid")
    if rho_mult_y is not None:
        rho_mult_y = _positive_grid(rho_mult_y, "rho_mult_y")
    rng = np.random.default_rng(check_seed(seed))
    Xtr, Ytr, Xte, Yte = (torch.as_tensor(data[k], dtype=torch.float64) for k in  # device: cpu-ok (CPU data)
                          ("X_train", "Y_train", "X_test", "Y_test"))
    sub = np.sort(rng.choice(Xtr.shape[0], min(cv_subset, Xtr.shape[0]), replace=False))
    sub = torch.as_tensor(sub)  # device: cpu-ok (indices index a tensor on any device)
    Xs, Ys = Xtr[sub], Ytr[sub]
    rho_mult_y = rho_mult if rho_mult_y is None else rho_mult_y
    ckpt = StageCheckpoint(checkpoint, {
        "data": content_hash(Xtr, Ytr, Xte, Yte), "metric": metric_name, "cv_subset": int(cv_subset),
        "folds": int(folds), "rho_mult": [float(r) for r in rho_mult], "rho_mult_y": [float(r) for r in rho_mult_y],
        "lam_grid": [float(v) for v in lam_grid], "alphas": [float(v) for v in alphas],
        "betas": [float(v) for v in betas], "wknn_ks": [int(k) for k in wknn_ks], "neighbors": neighbors,
        "max_iter": int(max_iter), "seed": int(seed), "test_folds": int(test_folds), "ensemble": int(ensemble)})
    mx, my = median_distance(Xtr), median_distance(Ytr)
    if "selection" in ckpt:
        kl_sel, ab, g_sel, w_sel, al_sel = (ckpt["selection"][k] for k in ("kl", "ab", "gpr", "wknn", "align"))
        rx, ry, lam = kl_sel["best"]
        log(f"CV selection loaded from {ckpt.path}")
    else:
        t0 = time.perf_counter()
        kl_sel = select_kltgp(Xs, Ys, [mx * r for r in rho_mult], [my * r for r in rho_mult_y], lam_grid, metric,
                              k=folds, seed=seed, max_iter=max_iter)
        rx, ry, lam = kl_sel["best"]
        log(f"KLTGP CV: rho_x={rx:.4g} ({rx / mx:.2g} x median), rho_y={ry:.4g} ({ry / my:.2g} x median), "
            f"lambda={lam:g}  [{time.perf_counter() - t0:.0f}s]")
        t0 = time.perf_counter()
        ab = select_alpha_beta(Xs, Ys, rx, ry, lam, metric, alphas=alphas, betas=betas, k=folds, seed=seed,
                               max_iter=max_iter)
        log(f"SMTGP CV: alpha={ab['best'][0]}, beta={ab['best'][1]}  [{time.perf_counter() - t0:.0f}s]")
        g_sel = select_gpr(Xs, Ys, [mx * r for r in rho_mult], lam_grid, metric, k=folds, seed=seed)
        w_sel = select_wknn(Xs, Ys, wknn_ks, metric, k=folds, seed=seed)
        al_grid = sorted({mx * r for r in (*rho_mult, 0.25, 0.5, 1.0, 2.0, 4.0)})
        al_sel = {name: select_alignment_knn(Xs, Ys, al_grid, ry, wknn_ks, metric, criterion=crit, k=folds,
                                             seed=seed)
                  for name, crit in (("KTA-kNN", "kta"), ("HSIC-kNN", "hsic"))}
        ckpt.save("selection", {"kl": kl_sel, "ab": ab, "gpr": g_sel, "wknn": w_sel, "align": al_sel})
    a, b = ab["best"]
    interior = {key: v for key, v in ab["scores"].items() if 0 < key[0] < 1}
    a_in, b_in = min(interior, key=lambda key: np.mean(interior[key])) if interior else (0.5, 0.99)
    log(f"SMTGP: alpha={a}, beta={b} (best interior alpha={a_in}, beta={b_in})")
    res.config.update({"median_dist_x": mx, "median_dist_y": my, "rho_x": rx, "rho_y": ry, "lambda": lam,
                       "alpha": a, "beta": b, "alpha_interior": a_in, "beta_interior": b_in,
                       "gpr": {"rho": g_sel["best"][0], "noise": g_sel["best"][1]}, "wknn_k": w_sel["best"],
                       "alignment_knn": {n: {"rho": v["best"][0], "rho_over_median": v["best"][0] / mx,
                                             "k": v["best"][1]} for n, v in al_sel.items()},
                       "cv_subset": int(len(sub)), "folds": folds, "neighbors": neighbors, "max_iter": max_iter,
                       "cv_alpha_beta": {f"{k[0]}/{k[1]}": float(np.mean(v)) for k, v in ab["scores"].items()}})
    res.add("KLTGP", metric_name, kl_sel["scores"][(rx, ry, lam)], split="cv")
    res.add("IKLTGP", metric_name, ab["scores"][(1.0, None)], split="cv")
    res.add("SMTGP", metric_name, ab["scores"][(a, b)], split="cv")
    res.add("GPR", metric_name, g_sel["scores"][g_sel["best"]], split="cv")
    res.add("WKNN", metric_name, w_sel["scores"][w_sel["best"]], split="cv")
    for name, v in al_sel.items():
        res.add(name, metric_name, v["scores"][v["best"][1]], split="cv")
    # test: full training set
    preds = {}
    m = TwinGP(Xtr, Ytr, rx, ry, lam)
    resumed = []

    def twin_predict(name, predict):
        """One twin-GP test prediction: from the checkpoint if it holds it, else computed
        (timed) and saved."""
        stage = f"predict {name}"
        if stage in ckpt:
            preds[name], seconds, cpu = ckpt[stage]
            resumed.append(name)
            log(f"{name} test: {metric(preds[name], Yte):.4f}  [loaded from {ckpt.path}]")
        else:
            t0, c0 = time.perf_counter(), time.process_time()
            preds[name] = predict()
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            ckpt.save(stage, (preds[name], seconds, cpu))
            log(f"{name} test: {metric(preds[name], Yte):.4f}  [{seconds:.0f}s wall, {cpu:.0f}s CPU]")
        # wall time, and CPU time of this process (robust on a shared machine)
        res.time(name, "predict", seconds)
        res.time(name, "predict_cpu", cpu)

    opts = dict(max_iter=max_iter, neighbors=neighbors, progress=progress)
    twin_predict("KLTGP", lambda: m.predict(Xte, "KLTGP", **opts))
    twin_predict("IKLTGP", lambda: m.predict(Xte, "IKLTGP", init=preds["KLTGP"], **opts))
    if a in (0.0, 1.0):  # the endpoints are KLTGP's and IKLTGP's minimisers
        preds["SMTGP"] = preds["KLTGP" if a == 0.0 else "IKLTGP"]
        res.time("SMTGP", "predict", 0.0)
        res.time("SMTGP", "predict_cpu", 0.0)
    else:
        twin_predict("SMTGP", lambda: m.predict(Xte, "SMTGP", alpha=a, beta=b, init=preds["KLTGP"], form="sm",
                                                **opts))
    if ensemble > 1:
        _ensemble_predictions(preds, twin_predict, kl_sel, ensemble, ENSEMBLE_SE, a, b, Xtr, Ytr, Xte, opts, res)
    if resumed:
        res.config["resumed_from_checkpoint"] = resumed
    preds["GPR"] = gpr_predict(Xtr, Ytr, Xte, *g_sel["best"])
    preds["WKNN"] = wknn_predict(Xtr, Ytr, Xte, w_sel["best"])
    for name, v in al_sel.items():
        preds[name] = kernel_knn_predict(Xtr, Ytr, Xte, v["best"][1], v["best"][0])
    twins = ("KLTGP", "SMTGP", "KLTGP (ensemble)", "SMTGP (ensemble)") if ensemble > 1 else ("KLTGP", "SMTGP")
    res.config["paired_test_differences"] = paired_differences(preds, Yte, metric, twins,
                                                               ("GPR", "WKNN", "KTA-kNN", "HSIC-kNN", "IKLTGP",
                                                                "KLTGP"))
    parts = kfold_indices(Xte.shape[0], min(test_folds, Xte.shape[0]), seed) if test_folds > 1 else []
    for name, p in preds.items():
        res.add(name, metric_name, metric(p, Yte), split="test")
        if parts:
            res.add(name, metric_name, [metric(p[torch.as_tensor(f)], Yte[torch.as_tensor(f)])  # device: cpu-ok
                                        for f in parts],
                    split="test_folds")
        log(f"{name} test: {metric(p, Yte):.4f}")
    return {"preds": preds, "settings": res.config, "model": m}
