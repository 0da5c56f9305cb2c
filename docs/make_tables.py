"""Write the documentation's results tables (Markdown) from results JSON.

Every table on the results pages is generated here from a results file in the project's
schema (``experiment``, ``seeds``, ``results``: a flat list of records with ``method``,
``metric``, ``mean``, ``std``, ``values`` and qualifying keys such as ``data_set`` or
``setting``), so a table cannot drift from the numbers it shows:

* ``docs/results/*.json`` were written by the example scripts for this build (the command
  is given in :data:`TABLES`);
* ``docs/results/recorded/*.json`` hold the printed output of earlier full-size runs that
  are too expensive to repeat here; each carries a ``provenance`` object (the command and
  the fact that the numbers were not regenerated), which is printed above its table.

Usage (from the repository root)::

    python docs/make_tables.py            # (re)write docs/results/_tables/*.md
    python docs/make_tables.py --check    # exit status 1 if a committed table differs

``tests/test_docs.py`` runs the check.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

DOCS = Path(__file__).resolve().parent
RESULTS = DOCS / "results"
OUT = RESULTS / "_tables"


@dataclass(frozen=True)
class Table:
    """One generated table: the records of ``source`` pivoted into rows × columns.

    ``rows`` are record keys whose values label a row (one table column each); ``columns``
    lists ``(value, header)`` pairs of the record key ``column_key`` (``"metric"`` unless
    given). ``where`` keeps only records whose keys have the given values (a tuple: any of them). ``digits`` is the
    number of significant digits of freshly generated means; recorded numbers are shown
    exactly as they were printed. ``command`` is the command that wrote a generated JSON.
    ``average_over`` names a record key (e.g. ``"task"``) whose records are averaged per seed
    before the mean ± std over seeds is taken (e.g. the per-seed mean accuracy over tasks).
    ``pool`` joins the values of all records that fall into one cell (e.g. one record per
    seed) before taking mean ± std.
    ``counts`` names columns whose single values count something (points converged): shown as integers.
    ``order`` lists values of the first row key in the order the rows should appear (rows
    otherwise keep the order of the records).
    ``paired`` names a data set of ``config["paired_over_draws"]`` (the twin-GP toy script's
    per-draw comparison of each method with each baseline); the table then shows, per method
    (row) and baseline (column), the mean paired difference ± its standard error, wins/losses,
    the worst draw's relative excess and the spread ratio std(method)/std(baseline).
    """

    name: str
    source: str
    rows: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    column_key: str = "metric"
    where: dict = field(default_factory=dict)
    row_headers: tuple[str, ...] = ()
    digits: int = 3
    command: str = ""
    average_over: str | None = None
    pool: bool = False
    order: tuple[str, ...] = ()
    counts: tuple[str, ...] = ()
    paired: str | None = None


def _decimals(x: float, digits: int) -> int:
    """Decimal places that show ``x`` to ``digits`` significant digits."""
    if x == 0 or not math.isfinite(x):
        return digits - 1
    return max(0, digits - 1 - math.floor(math.log10(abs(x))))


def _cell(rec: dict, digits: int, count: bool = False) -> str:
    """``mean ± std`` of one record (``count``: a single value that counts something, as an integer).

    A recorded record carries ``decimals`` (the printed decimals of mean and std) and is shown
    exactly as printed; a generated one shows the mean to ``digits`` significant digits and the
    std to the same decimal place, and shows no spread for a single value.
    """
    std = rec.get("std")
    if rec.get("mean") is None:       # a non-finite value (JSON null): e.g. a time to quality never reached
        return "not reached" if rec.get("metric", "").startswith("time_to") else "n/a"
    if "decimals" in rec:
        dm, *ds = rec["decimals"]
        text = f"{rec['mean']:.{dm}f}"
        return text + (f" ± {std:.{ds[0]}f}" if std is not None and ds else "")
    if count and len(rec.get("values") or []) == 1 and float(rec["mean"]).is_integer():
        return f"{rec['mean']:.0f}"
    if 0 < abs(rec["mean"]) < 1e-4 and len(rec.get("values") or []) <= 1:   # e.g. a relative difference
        return f"{rec['mean']:.{digits - 1}e}"
    dm = _decimals(rec["mean"], digits)
    text = f"{rec['mean']:.{dm}f}"
    if std is not None and len(rec.get("values") or []) > 1:
        text += f" ± {std:.{dm}f}"
    return text


def _combine(group: list[dict], table: Table) -> dict:
    """The one record of a table cell; with ``average_over``, the per-seed average of the group."""
    if table.pool:
        values = [v for r in group for v in r["values"]]
        return {"mean": statistics.fmean(values), "std": statistics.pstdev(values), "values": values}
    if table.average_over is None:
        if len(group) > 1:
            raise ValueError(f"table {table.name!r}: {len(group)} records for one cell: {group[:2]}")
        return group[0]
    if len({r.get(table.average_over) for r in group}) != len(group):
        raise ValueError(f"table {table.name!r}: the records of one cell differ in more than "
                         f"{table.average_over!r}: {group[:2]}")
    per_seed = [sum(vals) / len(vals) for vals in zip(*(r["values"] for r in group))]
    return {"mean": statistics.fmean(per_seed), "std": statistics.pstdev(per_seed), "values": per_seed}


def _provenance(data: dict, table: Table) -> str:
    prov = data.get("provenance")
    if prov:
        line = (f"*Recorded, not regenerated by this build:* the numbers below are the printed "
                f"output of an earlier run of `{prov['command']}` "
                f"(`docs/results/{table.source}`).")
        if prov.get("note"):
            line += f" {prov['note']}."
        return line
    env = data.get("environment", {})
    where = ", ".join(f"{k} {env[k]}" for k in ("python", "torch", "threads", "device") if k in env)
    seeds = data.get("seeds", [])
    return (f"*Generated* from `docs/results/{table.source}`, written by `{table.command}` "
            f"({len(seeds)} seed{'s' if len(seeds) != 1 else ''}; {where}).")


def _paired_cell(c: dict) -> str:
    worst = c["worst_draw"]
    return (f"{c['mean']:+.4f} ± {c['se']:.4f}; {c['wins']}/{c['losses']}; "
            f"worst {100 * worst['relative_excess']:+.1f} % (draw {worst['seed']}); "
            f"spread {c['spread_ratio']:.2f}×")


def _render_paired(table: Table, data: dict) -> str:
    comp = data["config"]["paired_over_draws"][table.paired]
    methods: list[str] = []
    cells: dict[tuple[str, str], str] = {}
    for key, c in comp.items():
        method, base = key.rsplit(" - ", 1)
        if method not in methods:
            methods.append(method)
        cells[method, base] = _paired_cell(c)
    heads = list(table.row_headers or ("method",)) + [f"vs {h}" for _, h in table.columns]
    lines = [_provenance(data, table), "",
             "| " + " | ".join(heads) + " |",
             "|" + "---|" * len(heads)]
    for m in methods:
        lines.append("| " + " | ".join([m] + [cells.get((m, b), "–") for b, _ in table.columns]) + " |")
    return "\n".join(lines) + "\n"


def render(table: Table) -> str:
    """The Markdown of one table: a provenance line, a blank line, the pipe table."""
    data = json.loads((RESULTS / table.source).read_text())
    if table.paired is not None:
        return _render_paired(table, data)
    recs = [r for r in data["results"]
            if all(r.get(k) in v if isinstance(v, tuple) else r.get(k) == v for k, v in table.where.items())]
    wanted = {c for c, _ in table.columns}
    row_ids: list[tuple] = []
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in recs:
        col = r.get(table.column_key)
        if col not in wanted:
            continue
        rid = tuple(str(r.get(k, "")) for k in table.rows)
        if rid not in groups:
            row_ids.append(rid)
            groups[rid] = {}
        groups[rid].setdefault(col, []).append(r)
    cells = {rid: {col: _cell(_combine(g, table), table.digits, col in table.counts) for col, g in cols.items()}
             for rid, cols in groups.items()}
    if not row_ids:
        raise ValueError(f"table {table.name!r}: no records of {table.source} match {table.where}")
    if table.order:
        rank = {v: i for i, v in enumerate(table.order)}
        row_ids.sort(key=lambda rid: rank.get(rid[0], len(rank)))
    heads = list(table.row_headers or table.rows) + [h for _, h in table.columns]
    lines = [_provenance(data, table), "",
             "| " + " | ".join(heads) + " |",
             "|" + "---|" * len(heads)]
    for rid in row_ids:
        row = list(rid) + [cells[rid].get(c, "–") for c, _ in table.columns]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _cols(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple((n, n) for n in names)


_SAMTC_METHODS = ("SAMTC", "SAMTC-nr", "SAMTC-ns", "Ncut-SNN", "k-means", "pooled Ncut-SNN", "pooled k-means")
_SAMTC_SYNTH_CMD = ("OMP_NUM_THREADS=1 nice python examples/samtc_synthetic.py --sets {s} --seeds 30 "
                    "--no-generative --out results/samtc_synth_30_{s}")

_TWIN_TOY_METHODS = ("SMTGP", "KLTGP", "IKLTGP", "SMTGP (best CV setting)", "KLTGP (best CV setting)",
                     "KLTGP (authors' widths)", "IKLTGP (authors' widths)", "GPR", "GPR (CV)", "WKNN")
_TWIN_TOY_CMD = ("OMP_NUM_THREADS=1 nice python examples/twin_gp_toy.py --seed {seed} --seeds 20 --alpha-step 0.1 "
                 "--toys {toy} --out results/{toy}")
#: the draws the ensemble rule was designed on (seeds 100–119) and fresh ones (200–219)
_TWIN_TOY_RUNS = (("", 100), ("_fresh", 200))

#: the headline rows of the CUAVE runs against GPy MRD (issue 20 item 4)
_CUAVE_HEADLINE = ("training mean", "NN in Y space (raw)", "NN in Y space (standardised)", "GPy MRD (Q = 5)",
                   "GPy MRD (Q = 10)", "McGPDS (tandem default)", "McGPDS (tandem selected)",
                   "McGPDS (tandem stacked)",
                   "McGPDS (tandem default candidate: shared-space 1-NN)",
                   "McGPDS (tandem default candidate: source-space 5-NN)",
                   "McGPDS (tandem default candidate: source-space 20-NN)")

_CUAVE_GRID_FITS = _cols(*(f"{sc} scale, Q = {q}, {k}" for sc in ("view", "column") for q in (5, 10)
                           for k in ("RBF-ARD", "linear-ARD")))
_CUAVE_GRID_CMD = ("OMP_NUM_THREADS=1 nice python docs/mcgpds_cuave_grid.py --seed 0 "
                   "--fit-cache results/cuave_grid_fits "
                   "--out docs/results")
_CUAVE_STACK_CMD = ("OMP_NUM_THREADS=1 nice python docs/mcgpds_cuave_stack.py --seeds 5 "
                    "--mrd-cache results/cuave_fitcache --out docs/results")

#: every table of the results pages, in page order
#: the pose fit's old (unblocked) and new (blocked) ψ2 paths: times, then bounds and predictions
_COMPARE_OLD = (
    ("", (("cpu_time_s", "fit + predict, CPU s"), ("cpu_time_ratio", "CPU ratio (minima)")), 3),
    ("_agreement", (("final_bound", "final bound"), ("prediction_spread", "max abs Δ prediction within the path"),
                    ("max_abs_prediction_difference", "max abs Δ prediction, new − old")), 10),
)
#: how docs/results/bench_scale.json was written: each fit on its own (``--one``, one per core),
#: the rows joined with the previous file's (whose reference rows, runs of earlier code on the
#: same data, bound and seed, stay and count for the best bound)
BENCH_SCALE_COMMAND = (
    "OMP_NUM_THREADS=1 python examples/bench_scale.py --one M N cpu --min-time 0 --flat-tol 0.01 "
    "--max-cpu 300 --collapsed-max-cpu 30 > M_N.json` (M = collapsed, stochastic; N = 1000, 10000), "
    "`... --one collapsed-lbfgs N cpu --lbfgs-max-cpu 600 > L_N.json` (N = 1000, 10000), "
    "`... --one collapsed-lbfgs 100000 cpu --lbfgs-max-cpu inf > L_100000.json` (stopped by SIGTERM), "
    "`... --one stochastic 100000 cpu --min-time 0 --min-epochs 8 --max-cpu 1500 > S.json`, "
    "`... --one collapsed-lbfgs 10000 cpu --lbfgs-max-cpu 600 --prior-cache-mb inf > C.json` (replaces the "
    "256-MB-cache row), `... --one collapsed-held 10000 cpu --lbfgs-max-cpu 600 > H_10000.json`, "
    "`... --one collapsed-held 1000 cpu --lbfgs-max-cpu 600 --lbfgs-iters 100000 > H_1000.json`, "
    "`... --one collapsed-held 100000 cpu --prior-cache-mb inf > H_100000.json` and, with "
    "`--lbfgs-max-cpu 2700`, `R.json` (the earlier rows were joined the same way: "
    "`... --rows-from PREVIOUS/bench_scale.json C.json H_*.json --reference-from R.json --out results`); "
    "the three collapsed-held rows were then run again, same commands, on the code with the cache-blocked "
    "pair sums and the cached shared-space operator (the other rows keep the code they ran on), and joined with "
    "`... --rows-from PREVIOUS/bench_scale.json H_*.json --out results`; "
    "the three collapsed-held rows were then run again on the code with the whitened means (L-BFGS "
    "preconditioned, the default; N = 1000 with `--no-precondition`, where it hurts) and the shared prior "
    "factors of sequences on one time grid, N = 100000 with `--held-iters 1000`, and the "
    "collapsed-held reference row replaced by `... --one collapsed-held 100000 cpu --prior-cache-mb inf "
    "--lbfgs-max-cpu 2700 > R.json` (preconditioned, before the shared factors): "
    "`... --rows-from PREVIOUS/bench_scale.json H_*.json --reference-from R.json --out results")

#: how docs/results/bench_scale_h200.json and gpu_check_h200.json were written: one run of
#: examples/gpu_bench.sh on a lent machine with one NVIDIA H200 (16 cores), the rows then joined
GPU_BENCH_COMMAND = (
    "OUT=results/gpu bash examples/gpu_bench.sh` (deadline 500 s; CUDA rows: `--one stochastic 10000 cuda "
    "--max-cpu 30`, `--one collapsed-lbfgs 10000 cuda --lbfgs-max-cpu 60`, `--one stochastic 100000 cuda "
    "--max-cpu 60` (stopped by its timeout after the warm-up epoch), `--one collapsed-lbfgs 100000 cuda "
    "--lbfgs-max-cpu 140`, `--one collapsed 10000 cuda --collapsed-max-cpu 5`; the machine's CPU rows, one "
    "thread each, beside them: N = 1000, 10000 with `--max-cpu 30 --lbfgs-max-cpu 60 --collapsed-max-cpu 10`; "
    "all with `--min-epochs 2 --min-time 2`), then, one file per line of its rows.jsonl, "
    "`python examples/bench_scale.py --rows-from ROW_FILES --out results")

TABLES: tuple[Table, ...] = (
    # ---- quickstart / McGPDS
    Table("quickstart", "quickstart.json", ("method",), (("rmse", "RMSE"), ("msll", "MSLL")),
          command="OMP_NUM_THREADS=1 python examples/quickstart.py --out results"),
    Table("mcgpds_toy1", "mcgpds_toy.json", ("method",),
          (("private_1", "private 1"), ("private_2", "private 2"), ("shared", "shared")), column_key="signal",
          where={"data_set": "toy1", "metric": "recovery_abs_corr"}, pool=True,
          command="OMP_NUM_THREADS=1 python examples/mcgpds_toy.py --seeds 5 --out results"),
    Table("mcgpds_toy2", "mcgpds_toy.json", ("metric",),
          tuple((v, str(v)) for v in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)),
          column_key="private_var_2", where={"data_set": "toy2", "design": "mix"},
          row_headers=("learned α (rows) vs view-2 private variance (columns)",),
          command="OMP_NUM_THREADS=1 python examples/mcgpds_toy.py --seeds 5 --out results"),
    Table("mcgpds_human_pose", "recorded/mcgpds_human_pose.json", ("method",),
          (("mean_joint_error", "mean joint error"), ("msll", "MSLL"),
           ("heldout_train_mean_joint_error", "held-out training error"))),
    Table("mcgpds_human_pose_protocol", "recorded/mcgpds_human_pose_protocol.json", ("method",),
          (("mean_joint_error", "mean joint error"), ("msll", "MSLL"))),
    Table("mcgpds_human_pose_ablations", "recorded/mcgpds_human_pose_ablations.json", ("method", "setting"),
          (("mean_joint_error", "mean joint error"), ("msll", "MSLL")), row_headers=("model", "predictor")),
    Table("mcgpds_cuave", "recorded/mcgpds_cuave.json", ("method",),
          (("rmse", "RMSE"), ("msll", "MSLL"), ("heldout_train_mse_model_units", "held-out MSE (model units)")),
          where={"method": _CUAVE_HEADLINE}, order=_CUAVE_HEADLINE, digits=4),
    Table("mcgpds_cuave_default", "recorded/mcgpds_cuave_default.json", ("method",),
          (("rmse", "RMSE"), ("msll", "MSLL"), ("heldout_train_mse_model_units", "held-out MSE (model units)")),
          where={"method": _CUAVE_HEADLINE}, order=_CUAVE_HEADLINE, digits=4),
    Table("mcgpds_cuave_protocol", "recorded/mcgpds_cuave_protocol.json", ("method",),
          (("rmse", "RMSE"), ("msll", "MSLL"), ("heldout_train_rmse", "held-out training RMSE"))),
    *(Table(f"mcgpds_cuave_grid_{met}", "mcgpds_cuave_grid_seed0.json", ("method",), _CUAVE_GRID_FITS,
            column_key="fit", where={"metric": met}, row_headers=(f"{head}: predictor (rows) × fit (columns)",),
            digits=4, command=_CUAVE_GRID_CMD)
      for met, head in (("heldout_train_rmse", "held-out training RMSE"), ("rmse", "test RMSE"),
                        ("msll", "test MSLL"))),
    Table("mcgpds_cuave_grid_summary", "mcgpds_cuave_grid_seed0.json", ("method", "predictor", "fit_of"),
          (("heldout_train_rmse", "held-out training RMSE"), ("rmse", "test RMSE"), ("msll", "test MSLL"),
           ("value", "value")), where={"fit": "summary"}, row_headers=("", "predictor", "fit"), digits=4,
          command=_CUAVE_GRID_CMD),
    Table("mcgpds_cuave_stack", "mcgpds_cuave_stack.json", ("method",),
          (("rmse", "RMSE"), ("msll", "MSLL"), ("heldout_train_rmse", "held-out training RMSE")), digits=4,
          command=_CUAVE_STACK_CMD),
    Table("mcgpds_oil", "recorded/mcgpds_oil.json", ("setting",),
          _cols("McGPDS latent (labels as view 2)", "CGPDS latent (12-d only)", "data, standardised", "data, raw"),
          column_key="method", row_headers=("training size, evaluation",)),
    Table("bench_mcgpds", "recorded/bench_mcgpds.json", ("method",),
          (("wall_time_s", "train + predict, wall s"), ("cpu_time_s", "CPU s"),
           ("mean_joint_error", "mean joint error"), ("msll", "MSLL"))),
    *(Table(f"bench_mcgpds_compare_old{suffix}", "bench_mcgpds_compare_old.json", ("method",), cols, digits=dig,
            command="OMP_NUM_THREADS=1 python examples/bench_mcgpds.py --compare-old --repeats 2 --no-progress "
                    "--out docs/results")
      for suffix, cols, dig in _COMPARE_OLD),
    Table("bench_mcgpds_against_commit", "bench_mcgpds_against_commit.json", ("method",),
          (("cpu_time_s", "fit + predict, CPU s"), ("mean_joint_error", "mean joint error"),
           ("cpu_ratio_mean", "CPU ratio (means)"), ("cpu_ratio_min", "CPU ratio (minima)")),
          digits=4, command="python docs/bench_pose_against.py --commit 09c28e8 --rounds 4"),
    Table("mcgpds_missing", "recorded/mcgpds_missing.json", ("removed", "method"),
          (("impute_rmse", "imputation RMSE"), ("impute_msll", "imputation MSLL"), ("test_rmse", "test RMSE"),
           ("test_mean_joint_error", "test mean joint error")),
          row_headers=("pose frames removed", "method"), digits=4, pool=True),
    # ---- twin GP
    *(Table(f"twin_gp_{toy}{run}", f"twin_gp_{toy}{run}.json", ("data_set",), _cols(*_TWIN_TOY_METHODS),
            column_key="method", row_headers=("data",), digits=4, command=_TWIN_TOY_CMD.format(toy=toy, seed=seed))
      for run, seed in _TWIN_TOY_RUNS for toy in ("toy1", "toy2")),
    *(Table(f"twin_gp_{toy}{run}_paired", f"twin_gp_{toy}{run}.json", (), (("GPR", "GPR (authors' γ)"),
            ("GPR (CV)", "GPR (CV)"), ("WKNN", "WKNN")), paired=toy,
            command=_TWIN_TOY_CMD.format(toy=toy, seed=seed))
      for run, seed in _TWIN_TOY_RUNS for toy in ("toy1", "toy2")),
    Table("twin_gp_usps", "recorded/twin_gp_usps.json", ("setting",),
          _cols("KLTGP", "IKLTGP", "SMTGP", "GPR", "WKNN", "KTA-kNN", "HSIC-kNN"), column_key="method",
          row_headers=("evaluation",)),
    Table("twin_gp_usps_splits", "recorded/twin_gp_usps_splits.json", ("setting",),
          _cols("KLTGP = SMTGP", "IKLTGP", "GPR", "WKNN", "KTA-/HSIC-kNN"), column_key="method",
          row_headers=("split",)),
    Table("twin_gp_poser", "twin_gp_poser.json", ("split",),
          _cols("KLTGP", "IKLTGP", "SMTGP", "GPR", "WKNN", "KTA-kNN", "HSIC-kNN"), column_key="method",
          row_headers=("evaluation",), digits=4,
          command="OMP_NUM_THREADS=1 python examples/twin_gp_poser.py --cv-subset 600 --out results"),
    Table("twin_gp_usps_small", "twin_gp_usps_small.json", ("split",),
          _cols("KLTGP", "IKLTGP", "SMTGP", "GPR", "WKNN", "KTA-kNN", "HSIC-kNN"), column_key="method",
          row_headers=("evaluation",), digits=4,
          command="OMP_NUM_THREADS=1 python examples/twin_gp_usps.py --seed 0 --n-train 1500 --n-test 1000 "
                  "--cv-subset 600 --out results"),
    Table("bench_twin_gp", "bench_twin_gp_full.json", ("method",),
          (("seconds_per_test_point", "CPU s per test point"), ("mean_norm_error", "mean norm error")),
          digits=4, command="OMP_NUM_THREADS=1 python examples/bench_twin_gp.py --out results"),
    Table("twin_gp_hessian_start", "twin_gp_hessian_start.json", ("method",),
          (("mean_iterations", "iterations per point"), ("point_evaluations_per_point", "point-evaluations per point"),
           ("hessian_cost_in_evaluations_per_point", "Hessian's cost (evaluations per point)"),
           ("implied_smtgp_over_kltgp", "implied SMTGP / KLTGP cost"), ("converged", "converged"),
           ("other_minimum", "at another minimum"), ("higher_objective", "at a higher objective")),
          digits=3, counts=("converged", "other_minimum", "higher_objective"),
          command="OMP_NUM_THREADS=1 python docs/twin_gp_hessian_start.py --n-train 4649 --n-test 1000 "
                  "--no-approx --out docs/results"),
    # ---- scaling
    Table("bench_scale", "bench_scale.json", ("n_frames", "method"),
          (("epoch_cpu_time_s", "epoch CPU time (s)"), ("epoch_time_s", "epoch wall time (s)"),
           ("peak_memory_mb", "peak RSS (MB)"), ("not_run_estimated_memory_gb", "not run: estimated memory (GB)")),
          row_headers=("N frames", "method"), command=BENCH_SCALE_COMMAND),
    Table("bench_scale_exponent", "bench_scale.json", ("method",),
          (("growth_exponent", "epoch CPU time"), ("time_to_1pct_growth_exponent", "time to 1 %"),
           ("time_to_0.1nat_growth_exponent", "time to 0.1 nats/frame")),
          command=BENCH_SCALE_COMMAND),
    Table("bench_scale_quality", "bench_scale.json", ("n_frames", "method"),
          (("final_bound_per_frame", "last bound (nats/frame)"), ("epochs_timed", "epochs after the warm-up"),
           ("training_cpu_s", "training CPU (s)"),
           ("time_to_1pct_cpu_s", "CPU s to within 1 %"), ("time_to_0.1nat_cpu_s", "CPU s to within 0.1 nats/frame")),
          row_headers=("N frames", "method"), digits=4, command=BENCH_SCALE_COMMAND),
    Table("bench_scale_h200", "bench_scale_h200.json", ("n_frames", "method"),
          (("epoch_time_s", "epoch wall time (s)"), ("peak_memory_mb", "peak memory (MB)"),
           ("final_bound_per_frame", "last bound (nats/frame)"), ("epochs_timed", "epochs after the warm-up"),
           ("training_cpu_s", "training time (s)"), ("time_to_1pct_cpu_s", "s to within 1 %")),
          row_headers=("N frames", "method"), digits=4, command=GPU_BENCH_COMMAND),
    Table("gpu_check_h200", "gpu_check_h200.json", ("method",),
          (("time_s", "CUDA time (s)"), ("max_rel_diff", "max relative difference from the CPU")),
          where={"device": "cuda"}, row_headers=("check",), command=GPU_BENCH_COMMAND),
    Table("bench_scale_mem", "bench_scale_mem.json", ("n_frames", "M", "method"),
          (("value_grad_peak_rss_mb", "peak RSS, value + gradient (MB)"), ("value_grad_cpu_s", "CPU (s)"),
           ("bound", "bound")), row_headers=("N frames", "M", "method"), digits=6,
          command="OMP_NUM_THREADS=1 python examples/bench_scale.py --mem-check"),
    Table("mcgpds_bound_noise", "mcgpds_bound_noise.json", ("method",),
          (("noise_max_nats", "noise, largest of 8 draws (nats)"), ("noise_rel_F", "noise relative to the bound"),
           ("minus_reference_nats", "value − long-double reference (nats)")),
          row_headers=("term and form",), digits=2,
          command="OMP_NUM_THREADS=1 python docs/mcgpds_bound_noise.py --n-seq 10 --seq-len 1000 --steps 0 "
                  "--reps 8 --forms --out docs/results"),
    *(Table(f"bench_scale_pose_seed{sd}", f"bench_scale_pose_seed{sd}.json", ("method",),
            (("bound", "bound"), ("mean_joint_error", "mean joint error")), digits=6,
            command=f"OMP_NUM_THREADS=1 python examples/bench_scale.py --pose --pose-steps 100 --seed {sd} "
                    "--out results")
      for sd in (0, 1)),
    # ---- SAMTC
    *(Table(f"samtc_text_{sel.replace('-', '_')}", "samtc_text.json", ("data_set",), _cols(*_SAMTC_METHODS),
            column_key="method", where={"metric": "accuracy", "selection": (sel, "n/a")}, average_over="task",
            row_headers=("set",), command="OMP_NUM_THREADS=1 python examples/samtc_text.py --out results")
      for sel in ("labels", "label-free")),
    Table("samtc_synthetic", "samtc_synthetic.json", ("method", "selection"),
          _cols("partial", "partial-no-trap", "complete"), column_key="data_set",
          where={"metric": "accuracy"}, average_over="task", order=_SAMTC_METHODS + ("SAMTC generative (Pyro)",),
          row_headers=("method", "grid setting chosen by"),
          command="OMP_NUM_THREADS=1 nice python examples/samtc_synthetic.py --seeds 10 --out results"),
    Table("samtc_synthetic_transfer", "samtc_synthetic.json", ("method", "data_set"),
          (("reusable_precision", "reusable precision"), ("reusable_recall", "reusable recall"),
           ("relatedness_abs_error", "mean abs. error of R"),
           ("relatedness_abs_error_effective", "mean abs. error of R_eff")), row_headers=("method", "set"),
          command="OMP_NUM_THREADS=1 nice python examples/samtc_synthetic.py --seeds 10 --out results"),
    *(Table(f"samtc_synthetic_30_{s}", f"samtc_synthetic_30_{s}.json", ("method", "selection"),
            (("accuracy", "accuracy"), ("nmi", "NMI")), average_over="task", order=_SAMTC_METHODS,
            row_headers=("method", "grid setting chosen by"), command=_SAMTC_SYNTH_CMD.format(s=s))
      for s in ("partial", "partial-no-trap", "complete")),
    Table("samtc_synthetic_30_partial_transfer", "samtc_synthetic_30_partial.json", ("method",),
          (("reusable_precision", "reusable precision"), ("reusable_recall", "reusable recall"),
           ("relatedness_abs_error", "mean abs. error of R"),
           ("relatedness_abs_error_effective", "mean abs. error of R_eff")),
          command=_SAMTC_SYNTH_CMD.format(s="partial")),
    # ---- coupled projections
    Table("alignment_scurve", "alignment_scurve.json", ("data_set", "setting", "method"),
          _cols("match_accuracy", "partner_latent_error", "oos_match_accuracy", "svi_principal_angle_rad"),
          row_headers=("data", "known pairs", "method"),
          command="OMP_NUM_THREADS=1 python examples/alignment_scurve.py --out results"),
    Table("alignment_coil20", "alignment_coil20.json", ("setting", "method"),
          _cols("match_accuracy", "match_accuracy_pm1", "pose_error_deg", "oos_match_accuracy",
                "oos_match_accuracy_pm1"), where={"data_set": "mean over 190 object pairs"},
          row_headers=("known pairs", "method"),
          command="OMP_NUM_THREADS=1 python examples/alignment_coil20.py --seeds 5 --out results"),
    Table("alignment_coil20_duck_block", "alignment_coil20_duck_block.json", ("setting", "method"),
          _cols("match_accuracy", "match_accuracy_pm1", "pose_error_deg", "oos_match_accuracy",
                "oos_match_accuracy_pm1"), row_headers=("known pairs", "method"),
          command="OMP_NUM_THREADS=1 python examples/alignment_coil20.py --pairs duck-block --seeds 20 "
                  "--out results/coil_duck_block"),
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed tables, write nothing")
    args = ap.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    stale = []
    for t in TABLES:
        path = OUT / f"{t.name}.md"
        text = render(t)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if args.check and stale:
        print("out of date (run python docs/make_tables.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
