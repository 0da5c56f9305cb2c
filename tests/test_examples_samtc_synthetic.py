"""Smoke test of examples/samtc_synthetic.py (run with --quick from the project root)."""
import json

import pytest

from common import run_example

METHODS = {"SAMTC", "SAMTC-nr", "SAMTC-ns", "Ncut-SNN", "k-means", "pooled Ncut-SNN", "pooled k-means",
           "SAMTC generative (Pyro)"}


def test_samtc_synthetic_quick(tmp_path):
    proc = run_example("samtc_synthetic.py", "--quick", "--out", str(tmp_path), "--no-progress", returncode=None)
    assert proc.returncode == 0, f"samtc_synthetic.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    res = json.loads((tmp_path / "samtc_synthetic.json").read_text())
    assert res["experiment"] == "samtc_synthetic" and len(res["seeds"]) == 1
    assert {r["method"] for r in res["results"]} == METHODS
    assert {r["metric"] for r in res["results"]} == {"accuracy", "nmi", "reusable_precision", "reusable_recall",
                                                    "relatedness_abs_error", "relatedness_abs_error_effective"}
    assert all("task" in r and "data_set" in r for r in res["results"])
    assert {r["data_set"] for r in res["results"]} == {"partial", "complete"}
    # every method clusters every task; scores are valid
    for r in res["results"]:
        assert all(0.0 <= v <= 1.0 + 1e-9 for v in r["values"])  # nmi may exceed 1 by an ulp
    acc = [r for r in res["results"] if r["metric"] == "accuracy" and r["data_set"] == "partial"
           and r["method"] == "SAMTC generative (Pyro)"]
    assert len(acc) == 3
    # transfer quality is reported for the algorithm and the model
    for m in ("SAMTC", "SAMTC generative (Pyro)"):
        assert any(r["method"] == m and r["metric"] == "reusable_precision" for r in res["results"])
    for f in ("samtc_synthetic_data.png", "samtc_synthetic_R.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert "transfer quality" in proc.stdout


def test_samtc_synthetic_quick_without_generative_model(tmp_path):
    """--no-generative: the algorithm and the baselines only (no Pyro fit); the paired
    per-seed claims are still written."""
    proc = run_example("samtc_synthetic.py", "--quick", "--sets", "partial", "--no-generative", "--out", str(tmp_path),
                       "--no-progress", timeout=300, returncode=None)
    assert proc.returncode == 0, f"samtc_synthetic.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    res = json.loads((tmp_path / "samtc_synthetic.json").read_text())
    assert {r["method"] for r in res["results"]} == METHODS - {"SAMTC generative (Pyro)"}
    assert res["config"]["generative_model"] is False
    c = res["config"]["claims"]["partial"]
    assert set(c["mean_accuracy_label_free"]) == METHODS - {"SAMTC generative (Pyro)"}
    assert c["SAMTC - Ncut-SNN per seed"]["wins"] + c["SAMTC - Ncut-SNN per seed"]["ties"] \
        + c["SAMTC - Ncut-SNN per seed"]["losses"] == 1
    assert (tmp_path / "samtc_synthetic_R.png").stat().st_size > 0


@pytest.mark.parametrize("args,option", [(["--restarts", "0"], "--restarts"), (["--steps", "-1"], "--steps"),
                                         (["--steps", "many"], "--steps")])
def test_bad_command_line_values_are_argparse_errors_naming_the_option(args, option):
    proc = run_example("samtc_synthetic.py", *args, timeout=120, returncode=None)
    assert proc.returncode == 2 and f"argument {option}" in proc.stderr, proc.stderr[-2000:]
