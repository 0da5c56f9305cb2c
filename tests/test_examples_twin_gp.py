"""Smoke tests: every twin-GP example runs with --quick and writes its results JSON."""
import json

import pytest

from common import DATA_DIR, run_example

HAVE_USPS = (DATA_DIR / "usps" / "usps_9298.mat").exists()
HAVE_POSER = (DATA_DIR / "human_pose" / "ankurDataPoseSilhouette.mat").exists()
TGP = {"KLTGP", "IKLTGP", "SMTGP", "GPR", "WKNN"}
# the real-data protocol adds the alignment k-NN baselines and the ensemble over the CV's near-ties
REAL = TGP | {"KTA-kNN", "HSIC-kNN", "KLTGP (ensemble)", "SMTGP (ensemble)"}


def _run(script, tmp_path, *extra):
    return run_example(script, "--quick", "--out", str(tmp_path), "--no-progress", *extra)


def _load(tmp_path, name):
    d = json.loads((tmp_path / f"{name}.json").read_text())
    assert d["experiment"] == name
    return d


def test_twin_gp_toy(tmp_path):
    _run("twin_gp_toy.py", tmp_path)
    d = _load(tmp_path, "twin_gp_toy")
    assert {r["method"] for r in d["results"]} == TGP | {"GPR (CV)", "KLTGP (authors' widths)",
                                                         "IKLTGP (authors' widths)", "KLTGP (best CV setting)",
                                                         "SMTGP (best CV setting)"}
    assert {r["data_set"] for r in d["results"]} == {"toy1", "toy2"}
    assert all(0 < r["mean"] < 1 and len(r["values"]) == len(d["seeds"]) for r in d["results"])
    # the paired comparison across draws of every twin GP with GPR and WKNN, with the worst draw
    pairs = d["config"]["paired_over_draws"]["toy2"]
    for m in ("KLTGP", "IKLTGP", "SMTGP"):
        for b in ("GPR", "WKNN"):
            assert {"mean", "se", "wins", "losses", "worst_draw", "spread_ratio"} <= set(pairs[f"{m} - {b}"])
    sel = d["config"]["selected"]["toy1/seed0"]
    assert set(sel) >= {"rho_x", "rho_y", "lambda", "alpha", "beta", "ensemble_settings"}
    assert sel["ensemble_settings"][0] == [sel["rho_x"], sel["rho_y"], sel["lambda"]]  # the best setting first
    assert (tmp_path / "twin_gp_toy1.png").exists()


@pytest.mark.skipif(not HAVE_USPS, reason="USPS data not available")
def test_twin_gp_usps(tmp_path):
    _run("twin_gp_usps.py", tmp_path)
    d = _load(tmp_path, "twin_gp_usps")
    assert {r["method"] for r in d["results"]} == REAL
    assert {r["split"] for r in d["results"]} == {"cv", "test", "test_folds"}
    assert all(r["metric"] == "mean_norm_error" for r in d["results"])


@pytest.mark.skipif(not HAVE_POSER, reason="Poser data not available")
def test_twin_gp_poser(tmp_path):
    _run("twin_gp_poser.py", tmp_path)
    d = _load(tmp_path, "twin_gp_poser")
    assert {r["method"] for r in d["results"]} == REAL
    ens = d["config"]["ensemble_settings"]  # the quick grid has 4 settings, the best first
    assert 1 <= len(ens) <= 4 and ens[0] == [d["config"]["rho_x"], d["config"]["rho_y"], d["config"]["lambda"]]
    assert all(r["metric"] == "mean_joint_error" for r in d["results"])


@pytest.mark.skipif(not HAVE_USPS, reason="USPS data not available")
def test_bench_twin_gp(tmp_path):
    _run("bench_twin_gp.py", tmp_path)
    d = _load(tmp_path, "bench_twin_gp")
    methods = {r["method"] for r in d["results"] if r["metric"] == "seconds_per_test_point"}
    assert methods == {"SMTGP batched", "SMTGP per-point loop", "KLTGP batched"}
    c = d["config"]
    assert c["loop_vs_batched_max_abs_diff"] < 1e-4
    # the cost decomposition: point-evaluations per point (batch and loop evaluate the same
    # iterates) and the machine's GEMM-vs-GEMV ceiling
    assert set(c["point_evaluations_per_point"]) == methods
    assert all(v >= 1 for v in c["point_evaluations_per_point"].values())
    ceil = c["gemm_vs_gemv_ceiling"]
    assert ceil["ratio"] > 0
    # measured before and after the timed runs; the summary lies between the two
    lo, hi = sorted((ceil["before"]["ratio"], ceil["after"]["ratio"]))
    assert lo * (1 - 1e-12) <= ceil["ratio"] <= hi * (1 + 1e-12)
    # per point-evaluation: the loop's and the batch's seconds per row of an objective call
    spe = c["seconds_per_point_evaluation"]
    assert c["speedup_per_point_evaluation"] == pytest.approx(spe["SMTGP per-point loop"] / spe["SMTGP batched"])
    assert c["fraction_of_ceiling"]["per_point_evaluation"] == pytest.approx(
        c["speedup_per_point_evaluation"] / ceil["ratio"])
    assert c["fraction_of_ceiling"]["per_test_point"] == pytest.approx(c["speedup_batched_vs_loop"] / ceil["ratio"])
    # quality beside time: every timed run converged (the script exits non-zero otherwise)
    q = c["quality"]
    assert set(q) == methods and all(v["converged"] == v["points"] and v["finite"] for v in q.values())
    assert q["SMTGP batched"]["mean_norm_error"] == pytest.approx(
        [r["mean"] for r in d["results"] if r["method"] == "SMTGP" and r["metric"] == "mean_norm_error"][0])


@pytest.mark.skipif(not HAVE_USPS, reason="USPS data not available")
def test_bench_twin_gp_capped_iterations(tmp_path):
    # the bounded-time variant (issue setting at full size): same cap and start for batch and loop
    _run("bench_twin_gp.py", tmp_path, "--max-iter", "2", "--init", "ridge", "--loop-points", "5")
    d = _load(tmp_path, "bench_twin_gp")
    c = d["config"]
    assert c["max_iter"] == 2 and c["init"] == "ridge"
    assert max(c["iterations_per_point"].values()) <= 2
    assert c["loop_vs_batched_max_abs_diff"] < 1e-6
    assert c["speedup_batched_vs_loop_wall"] > 0 and c["smtgp_over_kltgp_wall"] > 0


def test_missing_data_names_the_file(tmp_path):
    r = run_example("twin_gp_poser.py", "--quick", "--out", str(tmp_path), "--data-dir", str(tmp_path / "nowhere"),
                    returncode=None)
    assert r.returncode != 0
    assert "ankurDataPoseSilhouette.mat" in r.stderr and "FileNotFoundError" in r.stderr


@pytest.mark.parametrize("script", ["twin_gp_toy.py", "twin_gp_poser.py", "twin_gp_usps.py"])
@pytest.mark.parametrize("step", ["0", "0.3", "-0.1", "abc"])
def test_bad_alpha_step_is_an_argparse_error_naming_the_option(script, step):
    proc = run_example(script, "--alpha-step", step, "--quick", timeout=120, returncode=2)
    assert "argument --alpha-step" in proc.stderr, proc.stderr[-2000:]
