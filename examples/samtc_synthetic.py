"""SAMTC on simulated partially related tasks, with ground truth for reusable instances and R.

Data (inference/samtc_simulate.py; a fresh draw per seed): three tasks in R^5 sharing
three classes, each with private classes (h_t = 5, 6, 5), uneven label marginals
(Dirichlet(1) class weights, >= 15 points per class), classes >= 2.5 stds apart, and
the negative-transfer trap: private classes sit 2.5 within-class stds from another task's
private class (the paper's Medicine / Business pair). Data sets:

* ``partial``          — partially related with the trap (the main regime);
* ``partial-no-trap``  — partially related, private classes placed freely;
* ``complete``         — completely related control (4 shared classes, no private ones).

Methods: SAMTC, SAMTC-nr, SAMTC-ns (inference/samtc.py; grid setting chosen label-free by
consensus — ``selection="label-free"`` — and by the labels as in the paper —
``selection="labels"``), Ncut-SNN and k-means on each task alone, the pooled baselines
"pooled Ncut-SNN" / "pooled k-means" (all tasks clustered jointly into max h_t clusters),
and "SAMTC generative (Pyro)" (models/samtc.py fitted with TraceEnum_ELBO through
tandem.inference.fit). Metrics: per task accuracy and NMI; reusable-instance precision and recall
against the simulator's truth ("reusable_precision", "reusable_recall", pooled over all
ordered target/source pairs) and mean |R − R_true| off the diagonal
("relatedness_abs_error") for the algorithm and the model. The algorithm's R is the
relatedness of the source *subtask* Z^s while R_true is a fraction of the whole source
task, so "relatedness_abs_error_effective" also scores R_eff = R·ñ_s/n_s (for the model
R̂ is already a whole-task fraction: both metrics coincide).

    python examples/samtc_synthetic.py --out results             # 3 data sets, 10 seeds
    python examples/samtc_synthetic.py --quick --out /tmp/q       # 1 seed, small tasks, 2 sets (< 60 s)
    # algorithm + baselines only:
    python examples/samtc_synthetic.py --sets partial --seeds 30 --no-generative --out results/x

Writes ``OUT/samtc_synthetic.json``, ``OUT/samtc_synthetic_data.png`` (2-D PCA scatter
coloured by class, marker by task) and ``OUT/samtc_synthetic_R.png`` (R_true vs the
algorithm's R vs the model's R̂, mean over seeds).
"""
from __future__ import annotations

import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tandem import plots  # noqa: E402
from tandem.inference.atomic_files import save_figure  # noqa: E402
from tandem.inference.experiments.cli import base_parser, int_at_least, seed_list, set_seed  # noqa: E402
from tandem.inference.experiments.results import Results  # noqa: E402
from tandem.inference.metrics import clustering_accuracy, nmi  # noqa: E402
from tandem.inference.samtc.algorithm import (  # noqa: E402
    add_step3_args,
    kmeans_baseline,
    ncut_snn_grid,
    pooled_baseline,
    samtc,
    select_setting,
)
from tandem.inference.samtc.model_fit import fit_model  # noqa: E402
from tandem.inference.samtc.simulate import relatedness_abs_error, reusable_scores, simulate_tasks  # noqa: E402

EXPERIMENT = "samtc_synthetic"
MODEL = "SAMTC generative (Pyro)"
METHODS = ["SAMTC", "SAMTC-nr", "SAMTC-ns", "Ncut-SNN", "k-means", "pooled Ncut-SNN", "pooled k-means", MODEL]
GRID_TUNED = {"SAMTC", "SAMTC-nr", "SAMTC-ns", "Ncut-SNN", "pooled Ncut-SNN"}
BASE = dict(n_tasks=3, d=5, sigma=1.0, separation=2.5, alpha=1.0)
DATA_SETS = {
    "partial": dict(n_shared=3, n_private=(2, 3, 2), near=2.5),
    "partial-no-trap": dict(n_shared=3, n_private=(2, 3, 2), near=None),
    "complete": dict(n_shared=4, n_private=0, near=None),
}
N_POINTS = (240, 300, 180)
QUICK_N_POINTS = (100, 120, 80)



def parser():
    p = base_parser(__doc__.splitlines()[0], default_seeds=10)
    p.add_argument("--sets", nargs="+", default=None, choices=list(DATA_SETS),
                   help="data sets (default: all three; --quick: partial and complete)")
    p.add_argument("--steps", type=int_at_least(0), default=None,
                   help="SVI steps of the generative model (default 250; quick 80)")
    p.add_argument("--restarts", type=int_at_least(1), default=1, help="restarts of the generative model (best ELBO)")
    add_step3_args(p)
    p.add_argument("--no-generative", action="store_true",
                   help="skip the Pyro generative model (the slow part); the algorithm and baselines only")
    return p


def simulate(name, seed, quick):
    return simulate_tasks(**BASE, **DATA_SETS[name], n_points=QUICK_N_POINTS if quick else N_POINTS, seed=seed)


def run_seed(sim, seed, steps, restarts, progress, draws=100, generative=True, source_rows="all", node_reach="k"):
    """All methods on one simulated problem (``generative=False``: without the Pyro model).

    Returns ({(method, selection): per-task labels}, {method: (reusable dict, R)}, timings, extras).
    """
    X, Y, H = sim.tasks, sim.labels, sim.h
    labs, transfer, timing = {}, {}, {}

    def tick(name, t0):
        timing[name] = timing.get(name, 0.0) + time.perf_counter() - t0

    set_seed(seed)
    t0 = time.perf_counter()
    labs["k-means", "n/a"] = kmeans_baseline(X, H, seed=seed)
    tick("k-means", t0)
    t0 = time.perf_counter()
    grids = [ncut_snn_grid(x, h, seed)[0] for x, h in zip(X, H)]
    labs["Ncut-SNN", "labels"] = [g[select_setting(g, y)] for g, y in zip(grids, Y)]
    init = [g[select_setting(g)] for g in grids]
    labs["Ncut-SNN", "label-free"] = init
    tick("Ncut-SNN", t0)
    for variant, name in [("full", "SAMTC"), ("nr", "SAMTC-nr"), ("ns", "SAMTC-ns")]:
        t0 = time.perf_counter()
        res = samtc(X, H, variant=variant, select="label-free", seed=seed, init_labels=init,
                    source_rows=source_rows, node_reach=node_reach)
        tick(name, t0)
        labs[name, "label-free"] = res.labels
        labs[name, "labels"] = [res.grid[t][select_setting([g["labels"] for g in res.grid[t]], Y[t])]["labels"]
                                for t in range(len(X))]
        # R[t, s] is the paper's relatedness of the source SUBTASK Z^s; R_true[t, s] is the
        # fraction of the WHOLE source task that is reusable. The comparable algorithm
        # quantity is R_eff[t, s] = R[t, s]·ñ_s/n_s (share of the source task transferred)
        R_eff = res.R.copy()
        for (t, s), (_, zs) in res.subtasks.items():
            R_eff[t, s] = res.R[t, s] * zs.mean()
        transfer[name] = (res.reusable, res.R, R_eff)
    t0 = time.perf_counter()
    labs["pooled k-means", "n/a"] = pooled_baseline(X, H, method="kmeans", seed=seed)
    tick("pooled k-means", t0)
    t0 = time.perf_counter()
    labs["pooled Ncut-SNN", "labels"] = pooled_baseline(X, H, method="ncut_snn", seed=seed, labels=Y)
    labs["pooled Ncut-SNN", "label-free"] = pooled_baseline(X, H, method="ncut_snn", seed=seed)
    tick("pooled Ncut-SNN", t0)

    if not generative:
        return labs, transfer, timing, {}
    t0 = time.perf_counter()
    mf = fit_model(X, H, num_steps=steps, restarts=restarts, seed=seed, progress=progress)
    labs[MODEL, "n/a"] = mf.labels(num_samples=10, seed=seed)
    der = mf.derived(num_samples=draws, seed=seed)
    tick(MODEL, t0)
    transfer[MODEL] = ({k: p > 0.5 for k, p in der["reusable_probs"].items()}, der["R"], der["R"])
    extras = {"model_elbo": mf.elbo, "model_atoms": mf.n_atoms,
              "model_shared_slot": [s.tolist() for s in der["shared_slot"]]}
    return labs, transfer, timing, extras


def main(args):
    quick = args.quick
    seeds = [args.seed] if quick else seed_list(args)
    steps = args.steps if args.steps is not None else (50 if quick else 250)
    draws = 20 if quick else 100
    args.sets = args.sets or (["partial", "complete"] if quick else list(DATA_SETS))
    generative = not args.no_generative
    methods = METHODS if generative else [m for m in METHODS if m != MODEL]
    res = Results(EXPERIMENT, seeds, config={
        "data_sets": {n: {**BASE, **DATA_SETS[n], "n_points": QUICK_N_POINTS if quick else N_POINTS}
                      for n in args.sets},
        "samtc": "tandem.inference.samtc.algorithm.samtc defaults (transfer='augment': source-subtask instances "
                 "as nodes of the "
                 "target graph, weight R/(T-1); paper grid 3x3, KMM B=10, eps=0.5), init = label-free Ncut-SNN",
        "model": {"steps": steps, "restarts": args.restarts, "tau": 0.25, "widen": 3.0,
                  "optim": "ClippedAdam lr 0.05 (decayed x0.1)", "loss": "TraceEnum_ELBO(max_plate_nesting=1)",
                  "reusable_threshold": 0.5, "posterior_draws": draws},
        "data_seed": "= method seed (a fresh simulated problem per seed)",
        "generative_model": generative, "source_rows": args.source_rows,
        "node_reach": args.node_reach})
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {}
    first_seed = {}   # data set -> (simulated problem, SAMTC's per-task labels) of the first seed
    for name in args.sets:
        per = {}          # (method, selection) -> per seed list of per-task labels
        tr = {}           # method -> {"prec": [], "rec": [], "rerr": [], "R": []}
        R_true, extras_all, sims = [], [], []
        for seed in seeds:
            sim = simulate(name, seed, quick)
            sims.append(sim)
            labs, transfer, timing, extras = run_seed(sim, seed, steps, args.restarts, not args.no_progress, draws,
                                                      generative, args.source_rows,
                                                      args.node_reach)
            for k, v in labs.items():
                per.setdefault(k, []).append((sim, v))
            for m, (reus, R, R_eff) in transfer.items():
                p, r = reusable_scores(reus, sim.reusable)
                d = tr.setdefault(m, {"prec": [], "rec": [], "rerr": [], "rerr_eff": [], "R": []})
                d["rerr_eff"].append(relatedness_abs_error(R_eff, sim.R_true))
                d["prec"].append(p)
                d["rec"].append(r)
                d["rerr"].append(relatedness_abs_error(R, sim.R_true))
                d["R"].append(np.asarray(R))
            R_true.append(sim.R_true)
            extras_all.append(extras)
            for m, s in timing.items():
                res.time(f"{name}/{m}", "train", s)
            if not args.no_progress:
                print(f"  {name} seed {seed} done", flush=True)
        T = sims[0].T
        first_seed[name] = per["SAMTC", "label-free"][0]
        for (method, selection), runs in per.items():
            for t in range(T):
                res.add(method, "accuracy", [clustering_accuracy(s.labels[t], l[t]) for s, l in runs],
                        task=t, data_set=name, selection=selection)
                res.add(method, "nmi", [nmi(s.labels[t], l[t]) for s, l in runs],
                        task=t, data_set=name, selection=selection)
        for m, d in tr.items():
            sel = "n/a" if m == MODEL else "label-free"
            res.add(m, "reusable_precision", d["prec"], task="all", data_set=name, selection=sel)
            res.add(m, "reusable_recall", d["rec"], task="all", data_set=name, selection=sel)
            res.add(m, "relatedness_abs_error", d["rerr"], task="all", data_set=name, selection=sel)
            res.add(m, "relatedness_abs_error_effective", d["rerr_eff"], task="all", data_set=name,
                    selection=sel)
        summary[name] = {"R_true_mean": np.mean(R_true, 0), "h": sims[0].h,
                         "R_mean": {m: np.mean(d["R"], 0) for m, d in tr.items()},
                         "model": extras_all}
        res.config.setdefault("R_mean", {})[name] = {"R_true": np.mean(R_true, 0).tolist(),
                                                     **{m: np.mean(d["R"], 0).tolist() for m, d in tr.items()}}
        res.config.setdefault("model_details", {})[name] = extras_all
        print_set(res, name, T, len(seeds), methods)
    res.config["claims"] = claims(res, args.sets, methods)
    for name, c in res.config["claims"].items():
        for k, v in c.items():
            if k.endswith("per seed"):
                print(f"{name}: {k}: {v['mean']:+.4f} ± {v['std']:.4f} (std; se {v['se']:.4f}), "
                      f"wins/ties/losses {v['wins']}/{v['ties']}/{v['losses']}")
    plot_data(args.sets, seeds[0], quick, args.out)
    plot_R(summary, args.out)
    plot_confusions(first_seed, seeds[0], args.out)
    path = res.write(args.out)
    print(f"wrote {path}")
    return res


def mean_acc(res, method, name, T, selection):
    return float(np.mean([res.get(method, "accuracy", task=t, data_set=name, selection=selection)["mean"]
                          for t in range(T)]))


def seed_acc(res, method, name, T, selection):
    """Per-seed accuracy averaged over the T tasks, (n_seeds,)."""
    return np.mean([res.get(method, "accuracy", task=t, data_set=name, selection=selection)["values"]
                    for t in range(T)], axis=0)


def _sel(m, selection):
    return selection if m in GRID_TUNED else "n/a"


def claims(res, sets, methods=METHODS):
    """Targets of the task: on ``partial``, SAMTC (label-free) beats Ncut-SNN and the pooled
    baselines on mean accuracy; reusable-instance precision/recall >= 0.8."""
    out = {}
    for name in sets:
        T = len([r for r in res.records if r["method"] == "k-means" and r["metric"] == "accuracy"
                 and r["data_set"] == name])
        acc = {m: mean_acc(res, m, name, T, _sel(m, "label-free")) for m in methods}
        c = {"mean_accuracy_label_free": acc,
             "samtc_beats_ncut_snn": acc["SAMTC"] > acc["Ncut-SNN"],
             "samtc_beats_pooled": acc["SAMTC"] > max(acc["pooled Ncut-SNN"], acc["pooled k-means"])}
        # seed noise: per-seed (task-mean) accuracy differences, paired over seeds
        for other in ("Ncut-SNN", "pooled Ncut-SNN", "pooled k-means"):
            d = seed_acc(res, "SAMTC", name, T, "label-free") - seed_acc(res, other, name, T, _sel(other, "label-free"))
            c[f"SAMTC - {other} per seed"] = {"mean": float(d.mean()),
                                               "std": float(d.std(ddof=1)) if d.size > 1 else 0.0,
                                             "se": float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0,
                                             "wins": int((d > 0).sum()), "ties": int((d == 0).sum()),
                                             "losses": int((d < 0).sum())}
        for m in [m for m in ("SAMTC", MODEL) if m in methods]:
            sel = "n/a" if m == MODEL else "label-free"
            p = res.get(m, "reusable_precision", data_set=name, selection=sel)["mean"]
            r = res.get(m, "reusable_recall", data_set=name, selection=sel)["mean"]
            c[f"{m}: reusable precision, recall >= 0.8"] = bool(p >= 0.8 and r >= 0.8)
        out[name] = c
    return out


def print_set(res, name, T, n_seeds, methods=METHODS):
    for selection in ("label-free", "labels"):
        print(f"\n{name}: accuracy / NMI per task, mean ± std over {n_seeds} seeds "
              f"(grid-tuned methods: setting chosen {selection})")
        rows = [["method"] + [f"task {t}" for t in range(T)] + ["mean acc"]]
        for m in methods:
            sel = _sel(m, selection)
            row = [m]
            for t in range(T):
                a = res.get(m, "accuracy", task=t, data_set=name, selection=sel)
                b = res.get(m, "nmi", task=t, data_set=name, selection=sel)
                row.append(f"{a['mean']:.3f}±{a['std']:.3f} / {b['mean']:.3f}±{b['std']:.3f}")
            row.append(f"{mean_acc(res, m, name, T, sel):.3f}")
            rows.append(row)
        w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(c.ljust(x) for c, x in zip(r, w)))
    print(f"\n{name}: transfer quality (mean ± std over seeds)")
    for m in [m for m in ("SAMTC", "SAMTC-nr", "SAMTC-ns", MODEL) if m in methods]:
        sel = "n/a" if m == MODEL else "label-free"
        vals = [res.get(m, k, data_set=name, selection=sel) for k in
                ("reusable_precision", "reusable_recall", "relatedness_abs_error",
                 "relatedness_abs_error_effective")]
        print(f"  {m:26s} precision {vals[0]['mean']:.3f}±{vals[0]['std']:.3f}  recall "
              f"{vals[1]['mean']:.3f}±{vals[1]['std']:.3f}  |R−R_true| {vals[2]['mean']:.3f}±{vals[2]['std']:.3f}"
              f"  |R_eff−R_true| {vals[3]['mean']:.3f}±{vals[3]['std']:.3f}")


def plot_data(sets, seed, quick, out_dir):
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 4.2), squeeze=False)
    markers = "os^Dv"
    for ax, name in zip(axes[0], sets):
        sim = simulate(name, seed, quick)
        P = np.vstack(sim.tasks)
        P = P - P.mean(0)
        V = np.linalg.svd(P, full_matrices=False)[2][:2].T
        cmap = plt.get_cmap("tab10")
        for t in range(sim.T):
            Z = (sim.tasks[t] - np.vstack(sim.tasks).mean(0)) @ V
            ax.scatter(Z[:, 0], Z[:, 1], s=9, marker=markers[t % 5], c=[cmap(g % 10) for g in sim.global_labels[t]],
                       alpha=0.6)
            ax.scatter([], [], s=15, marker=markers[t % 5], c="grey", label=f"task {t} (h={sim.h[t]})")
        ax.set_title(f"{name} (seed {seed}): colour = class, marker = task", fontsize=9)
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out_dir / f"{EXPERIMENT}_data.png", dpi=110)
    plt.close(fig)


def plot_confusions(first_seed, seed, out_dir):
    """SAMTC's per-task confusion matrices (first seed), one row per data set (tandem.plots)."""
    fig = plt.figure(figsize=(3.2 * max(len(s.tasks) for s, _ in first_seed.values()), 3.3 * len(first_seed)),
                     layout="constrained")
    for sub, (name, (sim, labels)) in zip(np.atleast_1d(fig.subfigures(len(first_seed), 1)), first_seed.items()):
        plots.plot_task_confusions(labels, sim.labels, sub)
        sub.suptitle(f"{name} (seed {seed}): SAMTC clusters vs true classes", fontsize=9)
    save_figure(fig, out_dir / f"{EXPERIMENT}_confusion.png", dpi=110)
    plt.close(fig)


def plot_R(summary, out_dir):
    names = list(summary)
    cols = ["R_true", "SAMTC"] + ([MODEL] if MODEL in summary[names[0]]["R_mean"] else [])
    fig, axes = plt.subplots(len(names), len(cols), figsize=(3.4 * len(cols), 3.2 * len(names)), squeeze=False,
                             layout="constrained")
    for i, name in enumerate(names):
        mats = [summary[name]["R_true_mean"]] + [summary[name]["R_mean"][c] for c in cols[1:]]
        for j, (c, Mx) in enumerate(zip(cols, mats)):
            plots.plot_relatedness(np.asarray(Mx), axes[i, j])      # tandem.plots: heat map, values, colour bar
            axes[i, j].set_title(f"{name}: {c}", fontsize=9)
    save_figure(fig, out_dir / f"{EXPERIMENT}_R.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(parser().parse_args())
