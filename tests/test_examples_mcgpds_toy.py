"""Smoke test of examples/mcgpds_toy.py (--quick)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mcgpds_toy_quick(tmp_path):
    r = subprocess.run([sys.executable, "examples/mcgpds_toy.py", "--quick", "--out", str(tmp_path),
                        "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "mcgpds_toy.json").read_text())
    assert res["experiment"] == "mcgpds_toy"
    recs = res["results"]
    assert {r["data_set"] for r in recs} == {"toy1", "toy2"}
    assert {r["method"] for r in recs} >= {"McGPDS", "shared-only (MRD-style)"}
    rec = {(r["method"], r.get("signal")): r["mean"] for r in recs if r["metric"] == "recovery_abs_corr"}
    # McGPDS recovers the shared and both private signals (up to sign/scale) from its latents
    for sig in ("shared", "private_1", "private_2"):
        assert rec[("McGPDS", sig)] > 0.9, (sig, rec)
    # a single latent space with Q = 2 columns cannot hold three independent signals
    assert min(rec[("shared-only (MRD-style)", s)] for s in ("private_1", "private_2")) < 0.5
    a2 = [r for r in recs if r["metric"] == "alpha_2"][0]
    assert len(a2["values"]) == 3 and all(0.0 <= a <= 1.0 for a in a2["values"])
    assert (tmp_path / "mcgpds_toy1_seed0.png").exists() and (tmp_path / "mcgpds_toy2_seed0.png").exists()
