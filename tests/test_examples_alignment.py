"""Smoke tests of the alignment examples (run with --quick from the project root)."""
import json
import sys

import pytest

from common import DATA_DIR, ROOT, run_example
from tandem.inference.datasets.coil20 import COIL20_FILE

METHODS = {"coupled projections", "Ham", "Procrustes"}


def test_alignment_scurve_quick(tmp_path):
    proc = run_example("alignment_scurve.py", "--quick", "--out", str(tmp_path), "--no-progress")
    res = json.loads((tmp_path / "alignment_scurve.json").read_text())
    assert res["experiment"] == "alignment_scurve"
    methods = {r["method"] for r in res["results"]}
    assert METHODS | {"coupled projections (SVI)"} == methods
    metrics = {r["metric"] for r in res["results"]}
    assert {"match_accuracy", "partner_latent_error", "oos_match_accuracy",
            "svi_principal_angle_rad"} <= metrics
    # linear views of a shared curve: the linear method recovers the correspondence
    cp = [r for r in res["results"] if r["method"] == "coupled projections"
          and r["metric"] == "match_accuracy" and r["data_set"] == "linear_curve"][0]
    assert cp["mean"] > 0.9
    for f in ("alignment_scurve_alignments.png", "alignment_scurve_posterior.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert "mean ± std" in proc.stdout


@pytest.mark.skipif(not (DATA_DIR / COIL20_FILE).exists(), reason="COIL-20 data not present")
def test_alignment_coil20_quick(tmp_path):
    run_example("alignment_coil20.py", "--quick", "--out", str(tmp_path), "--no-progress")
    res = json.loads((tmp_path / "alignment_coil20.json").read_text())
    assert res["experiment"] == "alignment_coil20"
    assert {r["method"] for r in res["results"]} == METHODS
    assert {r["metric"] for r in res["results"]} >= {"match_accuracy", "match_accuracy_pm1",
                                                     "pose_error_deg", "oos_match_accuracy"}
    for r in res["results"]:
        assert r["data_set"].startswith("duck-block") and len(r["values"]) == 2
        if "accuracy" in r["metric"]:
            assert 0.0 <= r["mean"] <= 1.0
    assert (tmp_path / "alignment_coil20_fig3_duck_block.png").stat().st_size > 0


def test_alignment_coil20_missing_data_names_the_file(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import alignment_coil20 as ex
    finally:
        sys.path.pop(0)
    args = ex.parser().parse_args(["--quick", "--out", str(tmp_path), "--data-dir", str(tmp_path / "nope")])
    with pytest.raises(FileNotFoundError, match="COIL20_32x32.mat"):
        ex.main(args)
    with pytest.raises(ValueError, match="--pairs"):
        ex.parse_pairs("1-21", 2)


@pytest.mark.parametrize("script,args,option", [
    ("alignment_coil20.py", ["--fractions", "abc"], "--fractions"),
    ("alignment_coil20.py", ["--fractions", "0.2,0"], "--fractions"),
    ("alignment_scurve.py", ["--fractions", "0.1,1.5"], "--fractions"),
    ("alignment_coil20.py", ["--k", "0"], "--k"), ("alignment_scurve.py", ["--svi-steps", "-3"], "--svi-steps")])
def test_bad_command_line_values_are_argparse_errors_naming_the_option(script, args, option):
    proc = run_example(script, *args, timeout=120, returncode=2)
    assert f"argument {option}" in proc.stderr, proc.stderr[-2000:]
