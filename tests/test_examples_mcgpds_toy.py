"""Smoke test of examples/mcgpds_toy.py (--quick)."""
import json
import sys

import pytest

from common import ROOT, run_example


def test_mcgpds_toy_quick(tmp_path):
    run_example("mcgpds_toy.py", "--quick", "--out", str(tmp_path), "--no-progress")
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
    # toy 2: the learned α^(2) rises strictly with view 2's private noise variance (0.1, 0.5, 1.0)
    # and stays away from the saturation at 1 of the earlier setting (docs/results/mcgpds.md, "Toy 2")
    a2 = sorted(((r["private_var_2"], r["mean"]) for r in recs if r["metric"] == "alpha_2"))
    assert [v for v, _ in a2] == [0.1, 0.5, 1.0]
    vals = [a for _, a in a2]
    assert all(0.0 < a < 0.95 for a in vals), vals
    assert vals[0] < vals[1] < vals[2] and vals[2] - vals[0] > 0.1, vals
    rho = [r for r in recs if r["metric"] == "alpha_2_spearman"][0]
    assert rho["mean"] == 1.0
    assert (tmp_path / "mcgpds_toy1_seed0.png").exists() and (tmp_path / "mcgpds_toy2.png").exists()


def test_toy2_designs_follow_the_story():
    """mix: each view is rank one (one latent signal, shared + private); blocks: rank two."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from mcgpds_toy import toy2_data
    finally:
        sys.path.pop(0)
    import numpy as np
    for design, rank in (("mix", 1), ("blocks", 2)):
        views, t = toy2_data(0, 1.0, noise=0.0, design=design)
        assert len(views) == 2 and all(Y.shape == (100, 15) for Y in views)
        for Y in views:
            assert np.linalg.matrix_rank(Y, tol=1e-8) == rank
    # the private signal's variance scales as requested: same draws, var 0.1 vs 1.0
    lo, _ = toy2_data(3, 0.1, noise=0.0)
    hi, _ = toy2_data(3, 1.0, noise=0.0)
    assert np.allclose(lo[0], hi[0])                       # view 1 (var 0.1) unchanged
    t = np.linspace(-1, 1, 100)
    s = np.sin(2 * np.pi * t)
    # view 2 = (s + sqrt(v) z) bᵀ: Y_hi − Y_lo = (1 − sqrt(0.1)) z bᵀ, and Y_hi − z bᵀ = s bᵀ
    d = hi[1] - lo[1]
    assert np.linalg.matrix_rank(d, tol=1e-8) == 1
    shared_part = hi[1] - d / (1.0 - np.sqrt(0.1))
    coef = s @ shared_part / (s @ s)                       # least-squares b from s
    assert np.allclose(shared_part, np.outer(s, coef)) and np.all(coef > 0)
    with pytest.raises(ValueError):
        toy2_data(0, 0.5, design="other")
