"""Maintainer script: the pose benchmark's CPU time on this checkout against another commit, side by side.

``examples/bench_mcgpds.py --compare-old`` compares the two ψ2 paths inside today's code; a
change elsewhere (the private covariances, say) speeds both up alike. This script measures the
whole difference: it checks ``--commit`` out into a temporary git worktree, then runs
``examples/bench_mcgpds.py --skip-gpy`` of each checkout in its own process, ``--rounds`` times in
the order base, this, this, base (so that a drift of the machine's load falls on both), each
with ``OMP_NUM_THREADS=1`` and the one-time ``torch._dynamo`` import paid before the benchmark
starts (as today's benchmark does itself; the base's might not). It records the McGPDS fit +
code-faithful prediction CPU time and mean joint error of every run and the ratios of the CPU
times (means and minima) in ``<--out>/bench_mcgpds_against_commit.json`` (default folder
docs/results; written atomically by :class:`~tandem.inference.experiments.results.Results`).
The worktree is removed at the end.

Usage: ``python docs/bench_pose_against.py --commit 09c28e8 --rounds 4``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "bench_mcgpds_against_commit"
#: run inside each benchmark process: the import torch._dynamo is not charged to the first fit
RUNNER = ("import runpy, sys, torch; torch.optim.LBFGS([torch.zeros(1, requires_grad=True)]); "
          "sys.argv = ['bench_mcgpds.py'] + sys.argv[1:]; "
          "runpy.run_path('examples/bench_mcgpds.py', run_name='__main__')")


def run_bench(checkout: Path, package_parent: Path | None, data_dir: Path, out: Path) -> dict:
    """One benchmark process of ``checkout``; returns its McGPDS CPU time and mean joint error."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if package_parent is not None:        # import `tandem` from this checkout, not the installed one
        env["PYTHONPATH"] = str(package_parent)
    subprocess.run([sys.executable, "-c", RUNNER, "--skip-gpy", "--no-progress", "--data-dir", str(data_dir),
                    "--out", str(out)], cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL)
    rec = json.loads((out / "bench_mcgpds.json").read_text())
    get = {(r["method"], r["metric"]): r["values"][0] for r in rec["results"]}
    return {"cpu_time_s": get[("McGPDS", "cpu_time_s")], "mean_joint_error": get[("McGPDS", "mean_joint_error")]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commit", required=True, help="the commit to compare against")
    p.add_argument("--rounds", type=int, default=4, help="rounds of base, this, this, base (default 4)")
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results",
                   help=f"folder of {EXPERIMENT}.json (default docs/results)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds: expected a positive number of rounds, got {args.rounds}")
    from tandem.inference.experiments.results import Results

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    base = subprocess.run(["git", "rev-parse", args.commit], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    runs = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        parent = tmp / "pkg"
        parent.mkdir()
        checkout = parent / "tandem"     # the package is the checkout's root, imported as `tandem`
        subprocess.run(["git", "worktree", "add", "--detach", str(checkout), base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for r in range(args.rounds):
                for name in ("base", "this", "this", "base"):
                    where = (checkout, parent) if name == "base" else (ROOT, None)
                    rec = run_bench(*where, args.data_dir, tmp / f"{name}_{r}")
                    runs[name].append(rec)
                    print(f"round {r}: {name} {rec['cpu_time_s']:.2f} s CPU, mean joint error "
                          f"{rec['mean_joint_error']:.6f}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(checkout)], cwd=ROOT, check=False)
    cpu = {k: [r["cpu_time_s"] for r in v] for k, v in runs.items()}
    ratio_mean = (sum(cpu["this"]) / len(cpu["this"])) / (sum(cpu["base"]) / len(cpu["base"]))
    ratio_min = min(cpu["this"]) / min(cpu["base"])
    res = Results(EXPERIMENT, [0], config={
        "this_commit": head, "base_commit": base, "rounds": args.rounds, "order": ["base", "this", "this", "base"],
        "cpu_ratio_this_over_base_mean": ratio_mean, "cpu_ratio_this_over_base_min": ratio_min})
    names = {"base": f"base ({base[:7]})", "this": f"this ({head[:7]})"}
    for k, v in runs.items():
        res.add(names[k], "cpu_time_s", cpu[k])
        res.add(names[k], "mean_joint_error", [r["mean_joint_error"] for r in v])
    res.add("this / base", "cpu_ratio_mean", ratio_mean)
    res.add("this / base", "cpu_ratio_min", ratio_min)
    res.write(args.out)
    print(f"CPU time this / base = {ratio_mean:.3f} (means), {ratio_min:.3f} (minima)")
    print(res.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
