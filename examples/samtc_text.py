"""SAMTC on the paper's six text multi-task sets (WebKB, 20 Newsgroups, Reuters-21578).

For every set and seed runs SAMTC, its ablations SAMTC-nr and SAMTC-ns, the single-task
baselines Ncut-SNN and k-means, and two pooled multi-task baselines that assume
completely related tasks ("pooled k-means", "pooled Ncut-SNN": all tasks clustered
jointly into max_t h_t clusters). Scores each task by clustering accuracy and NMI
(mean ± std over the seeds). Grid-tuned methods are reported twice: with the paper's
label-chosen grid setting (``selection="labels"``) and a label-free one (consensus).

    python examples/samtc_text.py --out results            # all six sets, 10 seeds
    python examples/samtc_text.py --sets NG-p1 WebKB-c --seeds 3
    python examples/samtc_text.py --quick                  # one small set, 1 seed (< 60 s)
    python examples/samtc_text.py --sets NG-p1 --source-rows subtask   # measured step-3 option

Writes ``OUT/samtc_text.json`` and ``OUT/samtc_text_<set>.png`` (bar charts).
"""
from __future__ import annotations

import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from tandem.inference.atomic_files import save_figure  # noqa: E402
from tandem.inference.datasets import text as tx  # noqa: E402
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

EXPERIMENT = "samtc_text"
METHODS = ["SAMTC", "SAMTC-nr", "SAMTC-ns", "Ncut-SNN", "k-means", "pooled Ncut-SNN", "pooled k-means"]
QUICK_SET = "Reuters-p1"
QUICK_PER_CLASS = 40



def label_chosen(grid, y):
    """The labels of the grid setting that the true labels ``y`` select (the paper's protocol)."""
    labels = [g["labels"] for g in grid]
    return labels[select_setting(labels, y)]


def parser():
    p = base_parser(__doc__.splitlines()[0], real_data=True, default_seeds=10)
    p.add_argument("--sets", nargs="+", default=None, choices=sorted(tx.SETS),
                   help="multi-task sets to run (default: all six; --quick: Reuters-p1 subsample)")
    p.add_argument("--per-class", type=int_at_least(1), default=None,
                   help="documents per class and task (default: the set's own cap)")
    p.add_argument("--reduce-dim", type=int_at_least(1), default=10, help="LSA dimensions for the KDE/KMM steps")
    add_step3_args(p)
    return p


def run_set(ds, seeds, reduce_dim, progress=True, source_rows="all", node_reach="k"):
    """All methods on one multi-task set; returns {(method, selection): [per-seed list of per-task labels]}."""
    X, Y, H = ds.tasks, ds.labels, ds.n_clusters
    out = {}
    timing = {}
    extra = {"R": [], "pairs": [], "reusable_fraction": [], "reusable_precision": []}

    def put(key, labs):
        out.setdefault(key, []).append(labs)

    for seed in seeds:
        set_seed(seed)
        t0 = time.perf_counter()
        put(("k-means", "n/a"), kmeans_baseline(X, H, seed=seed))
        timing["k-means"] = timing.get("k-means", 0) + time.perf_counter() - t0

        t0 = time.perf_counter()
        grids = [ncut_snn_grid(x, h, seed)[0] for x, h in zip(X, H)]
        put(("Ncut-SNN", "labels"), [g[select_setting(g, y)] for g, y in zip(grids, Y)])
        init = [g[select_setting(g)] for g in grids]
        put(("Ncut-SNN", "label-free"), init)
        timing["Ncut-SNN"] = timing.get("Ncut-SNN", 0) + time.perf_counter() - t0

        for variant, name in [("full", "SAMTC"), ("nr", "SAMTC-nr"), ("ns", "SAMTC-ns")]:
            t0 = time.perf_counter()
            res = samtc(X, H, variant=variant, select="label-free", reduce_dim=reduce_dim, seed=seed,
                        init_labels=init, source_rows=source_rows, node_reach=node_reach)
            timing[name] = timing.get(name, 0) + time.perf_counter() - t0
            put((name, "label-free"), res.labels)
            put((name, "labels"), [label_chosen(res.grid[t], Y[t]) for t in range(len(X))])
            if variant == "full":
                extra["R"].append(res.R.tolist())
                extra["pairs"].append({f"{t}<-{s}": p for (t, s), p in res.pairs.items()})
                extra["reusable_fraction"].append({f"{t}<-{s}": float(m.mean()) for (t, s), m in res.reusable.items()})
                extra["reusable_precision"].append(_reusable_precision(res, ds))

        t0 = time.perf_counter()
        put(("pooled k-means", "n/a"), pooled_baseline(X, H, method="kmeans", seed=seed))
        timing["pooled k-means"] = timing.get("pooled k-means", 0) + time.perf_counter() - t0
        t0 = time.perf_counter()
        sizes = np.cumsum([x.shape[0] for x in X])[:-1]
        P = sp.vstack(X).tocsr()
        g = ncut_snn_grid(P, max(H), seed)[0]
        put(("pooled Ncut-SNN", "labels"), np.split(g[_select_pooled(g, Y, sizes)], sizes))
        put(("pooled Ncut-SNN", "label-free"), np.split(g[select_setting(g)], sizes))
        timing["pooled Ncut-SNN"] = timing.get("pooled Ncut-SNN", 0) + time.perf_counter() - t0
        if progress:
            print(f"  {ds.name} seed {seed} done", flush=True)
    return out, timing, extra


def _reusable_precision(res, ds):
    """Per (target t, source s): fraction of the reusable source instances (Z^s) whose true
    class also exists in the target task, and the same fraction over the whole source task
    (what "reuse everything" would give). Scores the reusable-instance step on real data.
    NaN when Z^s is empty (no cluster pair passed the JS test: nothing is transferred)."""
    out = {}
    for (t, s), zs in res.reusable.items():
        names_s = np.asarray(ds.class_names[s])[ds.labels[s]]
        shared = np.isin(names_s, ds.class_names[t])
        out[f"{t}<-{s}"] = [float(shared[zs].mean()) if zs.any() else float("nan"), float(shared.mean())]
    return out


def _select_pooled(grid, Y, sizes):
    """Label-chosen setting of the pooled baseline: best mean per-task accuracy."""
    scores = [np.mean([clustering_accuracy(y, l) for y, l in zip(Y, np.split(lab, sizes))]) for lab in grid]
    return int(np.argmax(scores))


def plot_set(res, ds, out_dir, selection="labels"):
    T = len(ds.tasks)
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    width = 0.8 / len(METHODS)
    for ax, metric in zip(axes, ["accuracy", "nmi"]):
        for m, method in enumerate(METHODS):
            sel = "n/a" if "k-means" in method else selection
            mu = [res.get(method, metric, task=t, data_set=ds.name, selection=sel)["mean"] for t in range(T)]
            sd = [res.get(method, metric, task=t, data_set=ds.name, selection=sel)["std"] for t in range(T)]
            ax.bar(np.arange(T) + (m - len(METHODS) / 2 + 0.5) * width, mu, width, yerr=sd, label=method,
                   capsize=2)
        ax.set_xticks(range(T))
        ax.set_xticklabels([f"{n} (h={h})" for n, h in zip(ds.task_names, ds.n_clusters)])
        ax.set_ylabel(metric)
        ax.set_ylim(0, 1)
        ax.set_title(f"{ds.name}: {metric} ({selection}-chosen grid setting)")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = out_dir / f"{EXPERIMENT}_{ds.name}.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def claims(res, ds, selection):
    """The paper's claims on one set, per task: SAMTC rank; nr/ns between Ncut-SNN and SAMTC; pooled vs single."""
    rows = []
    for t in range(len(ds.tasks)):
        def acc(m):
            sel = "n/a" if "k-means" in m else selection
            return res.get(m, "accuracy", task=t, data_set=ds.name, selection=sel)["mean"]
        a = {m: acc(m) for m in METHODS}
        rank = 1 + sum(v > a["SAMTC"] + 1e-12 for m, v in a.items() if m != "SAMTC")
        rows.append({"task": t, "samtc_rank": rank,
                     "nr_between": bool(a["Ncut-SNN"] <= a["SAMTC-nr"] <= a["SAMTC"]),
                     "ns_between": bool(a["Ncut-SNN"] <= a["SAMTC-ns"] <= a["SAMTC"]),
                     "pooled_worse_than_single": bool(max(a["pooled Ncut-SNN"], a["pooled k-means"])
                                                      < max(a["Ncut-SNN"], a["k-means"]))})
    return rows


def main(args):
    sets = args.sets or ([QUICK_SET] if args.quick else list(tx.SETS))
    per_class = args.per_class if args.per_class is not None else (QUICK_PER_CLASS if args.quick else None)
    seeds = seed_list(args) if not args.quick else [args.seed]
    res = Results(EXPERIMENT, seeds, config={"sets": sets, "per_class": per_class, "reduce_dim": args.reduce_dim,
                                             "source_rows": args.source_rows,
                                             "node_reach": args.node_reach,
                                             "grid": "paper grid 3 (k_t) x 3 (k_s)",
                                             "kmm": {"B": 10.0, "eps": 0.5, "support_tol": 0.01},
                                             "data_seed": 0})
    args.out.mkdir(parents=True, exist_ok=True)
    res.config["set_details"] = {}
    res.config["claims"] = {}
    for name in sets:
        t0 = time.perf_counter()
        ds = tx.load_set(name, data_dir=args.data_dir, per_class=per_class)
        load_s = time.perf_counter() - t0
        labs, timing, extra = run_set(ds, seeds, args.reduce_dim, progress=not args.no_progress,
                                      source_rows=args.source_rows,
                                      node_reach=args.node_reach)
        for (method, selection), per_seed in labs.items():
            for t in range(len(ds.tasks)):
                y = ds.labels[t]
                res.add(method, "accuracy", [clustering_accuracy(y, ls[t]) for ls in per_seed],
                        task=t, data_set=name, selection=selection, task_name=ds.task_names[t])
                res.add(method, "nmi", [nmi(y, ls[t]) for ls in per_seed],
                        task=t, data_set=name, selection=selection, task_name=ds.task_names[t])
        for m, s in timing.items():
            res.time(f"{name}/{m}", "train", s)
        res.time(f"{name}/load", "load", load_s)
        res.config["set_details"][name] = {
            "task_names": ds.task_names, "n_clusters": ds.n_clusters, "classes": ds.class_names,
            "sizes": [int(x.shape[0]) for x in ds.tasks], "vocabulary": len(ds.vocabulary),
            "class_counts": [np.bincount(y).tolist() for y in ds.labels],
            "R_mean": np.mean(extra["R"], axis=0).tolist(), "pairs_seed0": extra["pairs"][0],
            "reusable_fraction_seed0": extra["reusable_fraction"][0],
            "reusable_precision_mean": {k: np.mean([e[k] for e in extra["reusable_precision"]], axis=0).tolist()
                                        for k in extra["reusable_precision"][0]},
            "wall_s": time.perf_counter() - t0}
        res.config["claims"][name] = {sel: claims(res, ds, sel) for sel in ("labels", "label-free")}
        plot_set(res, ds, args.out)
        print_set(res, ds)
    path = res.write(args.out)
    print(f"wrote {path}")
    return res


def print_set(res, ds):
    for selection in ("labels", "label-free"):
        print(f"\n{ds.name} (sizes {[x.shape[0] for x in ds.tasks]}, h {ds.n_clusters}); "
              f"grid setting chosen by {selection}; accuracy / NMI, mean ± std over {len(res.seeds)} seeds")
        head = ["task"] + METHODS
        rows = [head]
        for t in range(len(ds.tasks)):
            row = [f"{t}:{ds.task_names[t]}"]
            for m in METHODS:
                sel = "n/a" if "k-means" in m else selection
                a = res.get(m, "accuracy", task=t, data_set=ds.name, selection=sel)
                b = res.get(m, "nmi", task=t, data_set=ds.name, selection=sel)
                row.append(f"{a['mean']:.3f}±{a['std']:.3f} / {b['mean']:.3f}")
            rows.append(row)
        w = [max(len(r[i]) for r in rows) for i in range(len(head))]
        for r in rows:
            print("  ".join(c.ljust(x) for c, x in zip(r, w)))
        print("  R (mean over seeds):", np.round(res.config["set_details"][ds.name]["R_mean"], 2).tolist())
        rp = res.config["set_details"][ds.name]["reusable_precision_mean"]
        print("  reusable precision (Z^s vs whole source):", {k: [round(a, 2) for a in v] for k, v in rp.items()})
        cl = res.config["claims"][ds.name][selection]
        print("  SAMTC rank per task:", [c["samtc_rank"] for c in cl],
              "| nr between:", [c["nr_between"] for c in cl], "| ns between:", [c["ns_between"] for c in cl],
              "| pooled worse than single:", [c["pooled_worse_than_single"] for c in cl])


if __name__ == "__main__":
    main(parser().parse_args())
