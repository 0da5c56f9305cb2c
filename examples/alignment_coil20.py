"""COIL-20 object alignment (Jiang et al. 2010, Fig. 3): coupled projections vs Ham vs Procrustes.

Two COIL-20 objects, 72 poses each (5° steps on a turntable), are aligned from a few
known pose correspondences (10–30 % of the poses, pose i ↔ pose i); the other poses are
held out and matched by nearest neighbour in the shared latent space (candidates: all 72
poses of the other object). Metrics (mean ± std over random choices of the known pairs):

* ``match_accuracy`` — held-out x poses whose nearest y is the true partner;
* ``match_accuracy_pm1`` — the same within ±1 pose step (circular, 72 steps);
* ``pose_error_deg`` — mean circular error of the matched pose, degrees;
* ``oos_match_accuracy`` (and ``_pm1``) — out-of-sample: ``--oos-fraction`` of the poses
  are removed from *training* in both objects, the known pairs are drawn among the rest,
  and the removed x poses are mapped with the learned linear maps (coupled projections)
  or the Nyström / kernel-regression extension (Ham, Procrustes) and matched against all
  72 y poses (training embeddings + mapped removed poses).

'duck' is object 1, 'block' object 2 (a wooden block; see inference/datasets/coil20.py for
why not 4 or 16). ``--pairs all`` (default) evaluates the 190 object pairs (the duck–block
pair is reported separately); ``--pairs duck-block`` or ``--pairs 1-2,3-7`` for subsets.

Usage::

    python examples/alignment_coil20.py --out results            # full: 190 pairs × 5 seeds
    python examples/alignment_coil20.py --pairs duck-block --seeds 20 --out results
    python examples/alignment_coil20.py --quick --out /tmp/x
"""
from __future__ import annotations

# ruff: noqa: E402 — the thread settings below must precede the numpy import
import os

# the solvers work on small dense matrices (≤ 144 × 144): one BLAS thread is fastest and
# avoids oversubscription when several runs share a machine (set before numpy loads)
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import itertools
import time

import numpy as np

from tandem import plots
from tandem.inference.atomic_files import save_figure, write_text_atomic  # noqa: E402
from tandem.inference.coupled_projections.baselines import HamAlignment, ProcrustesAlignment, laplacian_eigenmaps
from tandem.inference.coupled_projections.solver import CoupledProjections, knn_heat_weights
from tandem.inference.datasets.coil20 import BLOCK, DUCK, N_POSES, POSE_STEP_DEG, load_coil20
from tandem.inference.distances import nearest
from tandem.inference.experiments.cli import base_parser, fraction_list, int_at_least, seed_list
from tandem.inference.experiments.results import Results
from tandem.inference.metrics import circular_pose_error_deg, match_accuracy

EXPERIMENT = "alignment_coil20"
METHODS = ("coupled projections", "Ham", "Procrustes")
METRICS = ("match_accuracy", "match_accuracy_pm1", "pose_error_deg", "oos_match_accuracy",
           "oos_match_accuracy_pm1")




def parser():
    p = base_parser(__doc__.split("\n")[0], real_data=True, default_seeds=5)
    p.add_argument("--pairs", default="all",
                   help="'all' (190 pairs), 'duck-block', or a list like '1-2,3-7' (1-based objects)")
    p.add_argument("--fractions", type=fraction_list, default="0.1,0.2,0.3", help="fractions of poses with known pairs")
    p.add_argument("--d", type=int_at_least(1), default=2, help="latent dimension")
    p.add_argument("--k", type=int_at_least(1), default=4, help="k nearest neighbours of the graphs")
    p.add_argument("--pca", type=int_at_least(1), default=20, help="per-view PCA components (coupled projections)")
    p.add_argument("--ridge", type=float, default=0.0, help="relative ridge on Z Zᵀ")
    p.add_argument("--alpha", type=float, default=1.0, help="α_x = α_y (paper: 1)")
    p.add_argument("--block", type=int, default=BLOCK, help="COIL-20 object used as 'block'")
    p.add_argument("--oos-fraction", type=float, default=0.25,
                   help="fraction of poses withheld from training for the out-of-sample metric")
    return p


def parse_pairs(spec: str, block: int) -> list[tuple[int, int]]:
    if spec == "all":
        return list(itertools.combinations(range(1, 21), 2))
    if spec == "duck-block":
        return [(DUCK, block)]
    out = []
    for tok in spec.split(","):
        try:
            a, b = (int(v) for v in tok.split("-"))
        except ValueError:
            raise ValueError(f"--pairs: cannot parse {tok!r}; expected 'a-b' with objects 1..20") from None
        if not (1 <= a <= 20 and 1 <= b <= 20 and a != b):
            raise ValueError(f"--pairs: {tok!r}: objects must be distinct integers in 1..20")
        out.append((a, b))
    return out


def make_methods(args):
    return {"coupled projections": CoupledProjections(d=args.d, k=args.k, pca=args.pca, ridge=args.ridge,
                                                      alpha_x=args.alpha, alpha_y=args.alpha),
            "Ham": HamAlignment(d=args.d, k=args.k),
            "Procrustes": ProcrustesAlignment(d=args.d, k=args.k)}


def evaluate_pair(X, Y, frac, seed, args, timings=None):
    """All metrics of the three methods for one object pair, one fraction, one seed.

    Returns {method: {metric: value}} and the fitted in-sample models.
    """
    n = N_POSES
    rng = np.random.default_rng(seed)
    K = max(int(round(frac * n)), args.d)
    known = np.sort(rng.choice(n, K, replace=False))
    held = np.setdiff1d(np.arange(n), known)
    # out-of-sample split: poses never seen in training (both objects), pairs among the rest
    n_oos = int(round(args.oos_fraction * n))
    oos = np.sort(rng.choice(n, n_oos, replace=False))
    train = np.setdiff1d(np.arange(n), oos)
    known_tr = np.sort(rng.choice(len(train), min(K, len(train)), replace=False))
    out, fitted = {}, {}
    for name, m in make_methods(args).items():
        t0 = time.perf_counter()
        m.fit(X, Y, np.c_[known, known])
        pred = nearest(m.embedding_x[held], m.embedding_y)
        r = {"match_accuracy": match_accuracy(pred, held, 0, n),
             "match_accuracy_pm1": match_accuracy(pred, held, 1, n),
             "pose_error_deg": circular_pose_error_deg(POSE_STEP_DEG * pred, POSE_STEP_DEG * held)}
        t1 = time.perf_counter()
        fitted[name] = m
        m2 = make_methods(args)[name].fit(X[train], Y[train], np.c_[known_tr, known_tr])
        Ey = np.empty((n, args.d))
        Ey[train] = m2.embedding_y
        Ey[oos] = m2.transform_y(Y[oos])
        pred = nearest(m2.transform_x(X[oos]), Ey)
        r["oos_match_accuracy"] = match_accuracy(pred, oos, 0, n)
        r["oos_match_accuracy_pm1"] = match_accuracy(pred, oos, 1, n)
        out[name] = r
        if timings is not None:
            timings.setdefault(name, [0.0, 0.0])
            timings[name][0] += t1 - t0
            timings[name][1] += time.perf_counter() - t1
    return out, fitted


def plot_fig3(X, Y, frac, seed, args, path, labels=("duck", "block")):
    """Fig. 3 of the paper: each object's own embedding, then the three alignments."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    _, fitted = evaluate_pair(X, Y, frac, seed, args)
    rng = np.random.default_rng(seed)
    known = np.sort(rng.choice(N_POSES, max(int(round(frac * N_POSES)), args.d), replace=False))
    fig, ax = plt.subplots(1, 5, figsize=(20, 4))
    ang = POSE_STEP_DEG * np.arange(N_POSES)
    for a, (V, nm) in zip(ax[:2], ((X, labels[0]), (Y, labels[1]))):
        F, _ = laplacian_eigenmaps(knn_heat_weights(V - V.mean(0), args.k), 2)
        sc = a.scatter(F[:, 0], F[:, 1], c=ang, cmap="hsv", s=14)
        a.plot(*np.vstack([F, F[:1]]).T, lw=0.5, c="grey")
        a.set_title(f"{nm}: own embedding\n(Laplacian eigenmaps)", fontsize=9)
    for a, (name, m) in zip(ax[2:], fitted.items()):
        ex, ey = m.embedding_x[:, :2], m.embedding_y[:, :2]
        # tandem.plots: both objects in the joint embedding, a line between the two images of each pose
        plots.plot_embedding(embedding_x=ex, embedding_y=ey, pairs=np.c_[np.arange(N_POSES), np.arange(N_POSES)],
                             ax=a, names=labels)
        a.scatter(ex[known, 0], ex[known, 1], facecolors="none", edgecolors="k", s=50, label="known pair")
        a.set_title(f"{name}\n({int(round(100 * frac))}% of poses paired)", fontsize=9)
        a.legend(fontsize=7)
    fig.subplots_adjust(wspace=0.4)            # room for the embedding panels' axis labels
    fig.colorbar(sc, ax=ax[:2], label="pose (deg)")
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_pair_matrix(acc, path, frac):
    """Held-out matching accuracy (±1 step) of every object pair, one panel per method."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(16, 5))
    for a, name in zip(ax, METHODS):
        M = np.full((20, 20), np.nan)
        for (i, j), v in acc[name].items():
            M[i - 1, j - 1] = M[j - 1, i - 1] = v
        im = a.imshow(M, vmin=0, vmax=1, cmap="viridis")
        a.set_title(f"{name}\nmatch acc. ±1 ({int(round(100 * frac))}% known), mean {np.nanmean(M):.2f}", fontsize=9)
        a.set_xticks(range(20), range(1, 21), fontsize=6)
        a.set_yticks(range(20), range(1, 21), fontsize=6)
    fig.colorbar(im, ax=ax)
    save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(args):
    seeds = seed_list(args)
    fractions = list(args.fractions)
    if args.quick:
        args.pairs, fractions, seeds = "duck-block", [0.2], seeds[:2]
    for f in fractions:
        if not 0 < f < 1:
            raise ValueError(f"--fractions: {f} is not in (0, 1)")
    if not 0 < args.oos_fraction < 1:
        raise ValueError(f"--oos-fraction: {args.oos_fraction} is not in (0, 1)")
    pairs = parse_pairs(args.pairs, args.block)
    data = load_coil20(args.data_dir)
    config = {k: (str(v) if not isinstance(v, (int, float, bool, type(None))) else v)
              for k, v in vars(args).items()}
    config.update(fractions=fractions, n_pairs=len(pairs), duck=DUCK, block=args.block,
                  match_candidates="all 72 poses of the other object",
                  graph="symmetrised k-NN, heat kernel, width = mean squared edge length")
    res = Results(EXPERIMENT, seeds, config)
    timings = {}
    # per[(frac)][method][metric] -> array (n_pairs, n_seeds)
    per = {f: {m: {q: np.zeros((len(pairs), len(seeds))) for q in METRICS} for m in METHODS}
           for f in fractions}
    t_start = time.perf_counter()
    for pi, (a, b) in enumerate(pairs):
        X, Y = data.object(a), data.object(b)
        for f in fractions:
            for si, s in enumerate(seeds):
                # the known pairs depend on (seed, fraction) only: every object pair sees the same
                out, _ = evaluate_pair(X, Y, f, s * 1000 + int(round(100 * f)), args, timings)
                for m in METHODS:
                    for q in METRICS:
                        per[f][m][q][pi, si] = out[m][q]
        if not args.no_progress and (pi + 1) % 10 == 0:
            print(f"  {pi + 1}/{len(pairs)} pairs, {time.perf_counter() - t_start:.0f} s", flush=True)
    for m, (tr, pr) in timings.items():
        res.time(m, "train", tr)
        res.time(m, "predict", pr)
    dbi = pairs.index((DUCK, args.block)) if (DUCK, args.block) in pairs else None
    for f in fractions:
        setting = f"{int(round(100 * f))}% known"
        for m in METHODS:
            for q in METRICS:
                A = per[f][m][q]
                if dbi is not None:
                    res.add(m, q, A[dbi], data_set=f"duck-block (objects {DUCK}-{args.block})",
                            setting=setting, known_fraction=f)
                if len(pairs) > 1:
                    # mean over object pairs per seed; std over seeds
                    res.add(m, q, A.mean(0), data_set=f"mean over {len(pairs)} object pairs",
                            setting=setting, known_fraction=f, std_over_pairs=float(A.mean(1).std()))
        if len(pairs) > 1:
            acc = per[f]["coupled projections"]["match_accuracy"].mean(1)
            for m in ("Ham", "Procrustes"):
                other = per[f][m]["match_accuracy"].mean(1)
                res.config.setdefault("pairs_where_coupled_projections_beats", {})[
                    f"{m} @ {setting}"] = f"{int((acc > other).sum())}/{len(pairs)} (ties {int((acc == other).sum())})"
            for m in ("coupled projections", "Ham"):
                own = per[f][m]["match_accuracy"].mean(1)
                res.config.setdefault("pairs_where_beats_procrustes", {})[
                    f"{m} @ {setting}"] = (
                        f"{int((own > per[f]['Procrustes']['match_accuracy'].mean(1)).sum())}/{len(pairs)}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = res.write(args.out)
    # per-pair table (means over seeds), for inspection
    rows = ["object_a,object_b,known_fraction,method," + ",".join(METRICS)]
    for f in fractions:
        for pi, (a, b) in enumerate(pairs):
            for m in METHODS:
                rows.append(f"{a},{b},{f},{m}," + ",".join(f"{per[f][m][q][pi].mean():.4f}" for q in METRICS))
    write_text_atomic(args.out / f"{EXPERIMENT}_pairs.csv", "\n".join(rows) + "\n")
    f0 = 0.2 if 0.2 in fractions else fractions[0]
    plot_fig3(data.object(DUCK), data.object(args.block), f0, seeds[0] * 1000 + int(round(100 * f0)), args,
              args.out / f"{EXPERIMENT}_fig3_duck_block.png")
    if len(pairs) > 1:
        acc = {m: {pr: per[f0][m]["match_accuracy_pm1"][pi].mean() for pi, pr in enumerate(pairs)}
               for m in METHODS}
        plot_pair_matrix(acc, args.out / f"{EXPERIMENT}_pairs.png", f0)
    print(res.table(("data_set", "setting")))
    print(f"wrote {path}")
    return res


if __name__ == "__main__":
    main(parser().parse_args())
