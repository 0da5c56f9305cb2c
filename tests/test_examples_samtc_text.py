"""Smoke test of examples/samtc_text.py (--quick)."""
import json

import pytest

from common import DATA_DIR, run_example
from tandem.inference.datasets.text import REUTERS_RAW


@pytest.mark.skipif(not (DATA_DIR / REUTERS_RAW).exists(), reason="Reuters data not present")
def test_samtc_text_quick(tmp_path):
    run_example("samtc_text.py", "--quick", "--out", str(tmp_path), "--no-progress", timeout=300)
    out = json.loads((tmp_path / "samtc_text.json").read_text())
    assert out["experiment"] == "samtc_text"
    methods = {r["method"] for r in out["results"]}
    assert {"SAMTC", "SAMTC-nr", "SAMTC-ns", "Ncut-SNN", "k-means", "pooled k-means",
            "pooled Ncut-SNN"} <= methods
    assert {r["metric"] for r in out["results"]} == {"accuracy", "nmi"}
    assert all("task" in r and r["data_set"] == "Reuters-p1" for r in out["results"])
    assert all(0.0 <= v <= 1.0 for r in out["results"] for v in r["values"])
    assert (tmp_path / "samtc_text_Reuters-p1.png").exists()


def test_samtc_text_missing_data(tmp_path):
    proc = run_example("samtc_text.py", "--quick", "--out", str(tmp_path), "--data-dir", str(tmp_path / "nowhere"),
                       timeout=120, returncode=None)
    assert proc.returncode != 0
    assert "FileNotFoundError" in proc.stderr and "reuters21578_raw_sgml.tar.gz" in proc.stderr


@pytest.mark.parametrize("args,option", [(["--per-class", "-5"], "--per-class"),
                                         (["--reduce-dim", "0"], "--reduce-dim")])
def test_bad_command_line_values_are_argparse_errors_naming_the_option(args, option):
    proc = run_example("samtc_text.py", *args, timeout=120, returncode=None)
    assert proc.returncode == 2 and f"argument {option}" in proc.stderr, proc.stderr[-2000:]
