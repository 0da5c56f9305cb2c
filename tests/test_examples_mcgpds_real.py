"""Smoke tests of the McGPDS real-data scripts: each runs with --quick --seeds 1 and writes
its results JSON in the schema of docs/specs/results_schema.md (skipped when ../shared/data is absent)."""
import json
import sys

import pytest

from common import DATA_DIR as DATA
from common import ROOT, run_example

pytestmark = pytest.mark.skipif(not DATA.exists(), reason="../shared/data not present")


def _run(script, tmp_path, *extra):
    return run_example(script, "--quick", "--seeds", "1", "--no-progress", "--out", str(tmp_path), *extra)


def _load(tmp_path, experiment):
    res = json.loads((tmp_path / f"{experiment}.json").read_text())
    assert res["experiment"] == experiment
    assert {"experiment", "seeds", "results", "timings_s", "config", "environment"} <= set(res)
    for r in res["results"]:
        assert r["values"] and all(v == v for v in r["values"])      # no NaN
    return res


def _methods(res, metric):
    return {r["method"] for r in res["results"] if r["metric"] == metric}


def test_human_pose_quick(tmp_path):
    proc = _run("mcgpds_human_pose.py", tmp_path)
    res = _load(tmp_path, "mcgpds_human_pose")
    err = _methods(res, "mean_joint_error")
    assert {"McGPDS (paper-faithful)", "McGPDS (code-faithful)", "McGPDS (generative)",
            "NN in learned shared space (McGPDS)", "NN in Y space (raw)", "NN in Y space (standardised)",
            "training mean"} <= err
    assert {"McGPDS (paper-faithful)", "training mean"} <= _methods(res, "msll")
    nn = next(r for r in res["results"] if r["method"] == "NN in Y space (raw)")
    assert round(nn["mean"], 4) == 2.6523
    assert "57 of 63" in res["config"]["msll_mask"]
    # tandem predictors: held-out selected row, chosen among the candidates by held-out error
    sel = res["config"]["tandem selection (by held-out training error)"][0]
    assert {"McGPDS (tandem: held-out selected, calibrated)",
            f"McGPDS (tandem candidate: {sel['selected']})"} <= err & _methods(res, "msll")
    assert min(sel["holdout_error"].values()) == sel["holdout_error"][sel["selected"]]
    assert len(_methods(res, "heldout_train_mean_joint_error")) == len(sel["holdout_error"])
    assert (tmp_path / "mcgpds_human_pose.png").stat().st_size > 0
    assert "mean ± std" in proc.stdout


def test_cuave_quick(tmp_path):
    proc = _run("mcgpds_cuave.py", tmp_path)
    res = _load(tmp_path, "mcgpds_cuave")
    assert {"McGPDS (paper-faithful)", "McGPDS (code-faithful)", "training mean"} <= _methods(res, "rmse")
    mean = next(r for r in res["results"] if r["method"] == "training mean" and r["metric"] == "rmse")
    assert round(mean["mean"], 3) == 1.106
    assert "McGPDS (tandem: held-out selected, calibrated)" in _methods(res, "msll")
    # the stacked predictor of the default fit, with its weights on the simplex
    assert {"McGPDS (tandem default)", "McGPDS (tandem stacked)"} <= _methods(res, "rmse") & _methods(res, "msll")
    w = res["config"]["tandem stacked: weights fitted on held-out training frames"][0]["weights"]
    assert abs(sum(w.values()) - 1) < 1e-3 and min(w.values()) >= 0
    assert "training mean" in proc.stdout
    assert (tmp_path / "mcgpds_cuave.png").stat().st_size > 0


def test_oil_quick(tmp_path):
    _run("mcgpds_oil.py", tmp_path)
    res = _load(tmp_path, "mcgpds_oil")
    recs = [r for r in res["results"] if r["metric"] == "accuracy"]
    assert any("McGPDS" in r["method"] for r in recs)
    assert all("setting" in r and 0.0 <= r["mean"] <= 1.0 for r in recs)


def test_bench_quick(tmp_path):
    _run("bench_mcgpds.py", tmp_path)
    res = _load(tmp_path, "bench_mcgpds")
    assert "McGPDS" in res["timings_s"]
    assert {"train", "predict"} <= set(res["timings_s"]["McGPDS"])
    try:
        import GPy  # noqa: F401
        assert "GPy MRD" in res["timings_s"]
    except ImportError:
        assert "GPy MRD" not in res["timings_s"]


def test_bench_compare_old_quick(tmp_path):
    """``--compare-old``: both ψ2 paths timed in one run; their fits agree (same problem, same start)."""
    _run("bench_mcgpds.py", tmp_path, "--compare-old", "--repeats", "1")
    res = _load(tmp_path, "bench_mcgpds_compare_old")
    rec = {(r["method"], r["metric"]): r for r in res["results"]}
    cpu_old, cpu_new = rec[("McGPDS (old ψ2 path)", "cpu_time_s")], rec[("McGPDS (new ψ2 path)", "cpu_time_s")]
    assert len(cpu_old["values"]) == len(cpu_new["values"]) == 1 and cpu_old["mean"] > 0 and cpu_new["mean"] > 0
    ratio = rec[("new / old", "cpu_time_ratio")]["mean"]
    assert ratio == pytest.approx(cpu_new["mean"] / cpu_old["mean"], rel=1e-9)
    b_old = rec[("McGPDS (old ψ2 path)", "final_bound")]["mean"]
    b_new = rec[("McGPDS (new ψ2 path)", "final_bound")]["mean"]
    assert b_new == pytest.approx(b_old, rel=1e-6)
    assert res["config"]["order"] == ["old", "new"]
    assert 0 <= rec[("new / old", "max_abs_prediction_difference")]["mean"] < 1e-3


def test_bench_psi2_block_rejects_negative(tmp_path):
    proc = run_example("bench_mcgpds.py", "--quick", "--psi2-block", "-1", "--out", str(tmp_path), returncode=None)
    assert proc.returncode != 0 and "--psi2-block" in proc.stderr


def test_missing_data_dir_names_file(tmp_path):
    proc = run_example("mcgpds_cuave.py", "--quick", "--data-dir", str(tmp_path), "--out", str(tmp_path),
                       timeout=120, returncode=None)
    assert proc.returncode != 0
    assert "FileNotFoundError" in proc.stderr and "AudioVideoAlignedData1.mat" in proc.stderr


def test_oil_heldout_latents_recover_training_latents():
    """``heldout_latents`` (trained mapping and q(v) fixed) on copies of the training points
    returns latents whose nearest training latent is the point's own (> 95 %)."""
    import numpy as np
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from mcgpds_oil import heldout_latents
    finally:
        sys.path.pop(0)
    from tandem.inference.datasets.cuave import per_dim_scale
    from tandem.inference.datasets.oil import load_oil
    from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds
    d = load_oil()
    sub = np.random.default_rng(0).permutation(d.n)[:100]
    X, L = d.X[sub], d.onehot[sub]
    bx, sx = per_dim_scale(X)
    bl, sl = per_dim_scale(L)
    views = [(X - bx) / sx, (L - bl) / sl]
    f = fit_mcgpds(views, np.zeros(100), seq_ends=list(range(1, 101)), progress=False,
                   config=McGPDSConfig(Q=3, M=20, fixed=("alpha", "eps", "beta", "time", "W"), time_bias=False,
                                       cycles=1, var_iters=30, model_iters=30, joint_iters=100))
    mu = np.asarray(heldout_latents(f, views[0], 100, 0))
    tr = f.mu[0].numpy()
    own = ((mu[:, None] - tr[None]) ** 2).sum(-1).argmin(1) == np.arange(100)
    assert own.mean() > 0.95, own.mean()


def test_missing_quick(tmp_path):
    """examples/mcgpds_missing.py: the same masks for every method, every metric of every share."""
    proc = _run("mcgpds_missing.py", tmp_path, "--fractions", "0.1,0.5")
    res = _load(tmp_path, "mcgpds_missing")
    methods = {"McGPDS (masked likelihood)", "NN in Y space (standardised silhouettes)", "training mean"}
    for metric in ("impute_rmse", "test_rmse", "test_mean_joint_error"):
        assert methods <= _methods(res, metric)
    for pct in ("10 %", "50 %"):
        assert {r["method"] for r in res["results"] if r.get("removed") == pct} >= methods
    mean = next(r for r in res["results"] if r["method"] == "training mean" and r["metric"] == "impute_rmse"
                and r["removed"] == "10 %")
    nn = next(r for r in res["results"] if r["method"].startswith("NN") and r["metric"] == "impute_rmse"
              and r["removed"] == "10 %")
    assert nn["mean"] < mean["mean"]          # the silhouettes carry the pose: NN beats the mean
    assert "skipped" in str(res["config"]["gpy"])
    assert "impute_rmse" in proc.stdout
    # --merge joins runs on disjoint seeds (one process per seed): a second run's file with seed 1
    first = json.loads((tmp_path / "mcgpds_missing.json").read_text())
    second = dict(first, seeds=[1])
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "mcgpds_missing.json").write_text(json.dumps(second))
    run_example("mcgpds_missing.py", "--merge", str(tmp_path / "mcgpds_missing.json"),
                str(tmp_path / "s1" / "mcgpds_missing.json"), "--out", str(tmp_path / "joined"),
                "--provenance-command", "two runs", "--provenance-note", "test")
    joined = json.loads((tmp_path / "joined" / "mcgpds_missing.json").read_text())
    assert joined["seeds"] == [0, 1] and joined["results"] == first["results"]   # identical records kept once
    assert joined["provenance"]["command"] == "two runs"
    with pytest.raises(AssertionError, match="occur in more than one file"):   # the same seed twice
        run_example("mcgpds_missing.py", "--merge", str(tmp_path / "mcgpds_missing.json"),
                    str(tmp_path / "mcgpds_missing.json"), "--out", str(tmp_path / "joined"))
