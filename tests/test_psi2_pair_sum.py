"""The blocked RBF ψ2 pair sum against the old unblocked (P, N) table: same bound and gradient."""
from __future__ import annotations

import numpy as np
import pyro
import pytest
import torch

from common import DATA_DIR
from tandem.guides.mcgpds import variational_params
from tandem.inference.mcgpds.bound import collapsed_bound
from tandem.models import gp_kernels as gk
from tandem.models.mcgpds import McGPDSData, default_init, hyperparams

D64 = torch.float64


def _value_grad(data, block, frozen=(), keep_mb=None):
    """F and its gradient (one flat vector over the learned parameters) with ψ2 blocks of ``block``."""
    pyro.clear_param_store()
    hp = hyperparams(data, frozen=frozen)
    mus, lams = variational_params(data, frozen=frozen)
    params = [p for p in pyro.get_param_store().values() if p.requires_grad]
    with gk.psi2_pair_path(block, keep_mb):
        F = collapsed_bound(data, hp, mus, lams)
        gs = torch.autograd.grad(F, params, allow_unused=True)
    flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, gs)])
    return F.detach(), flat


def test_psi2_pair_path_sets_and_restores_the_block():
    before = gk.PSI2_BLOCK
    with gk.psi2_pair_path(0) as b:
        assert b == 0 and gk.PSI2_BLOCK == 0
        with gk.psi2_pair_path(5):
            assert gk.PSI2_BLOCK == 5
        assert gk.PSI2_BLOCK == 0
    assert gk.PSI2_BLOCK == before
    keep = gk.PSI2_KEEP_MB
    with gk.psi2_pair_path(4, keep_mb=0):
        assert gk.PSI2_KEEP_MB == 0
    assert gk.PSI2_KEEP_MB == keep
    with pytest.raises(ValueError, match="block"):
        with gk.psi2_pair_path(-1):
            pass
    with pytest.raises(ValueError, match="keep_mb"):
        with gk.psi2_pair_path(4, keep_mb=float("nan")):
            pass
    assert gk.PSI2_BLOCK == before and gk.PSI2_KEEP_MB == keep


@pytest.mark.parametrize("tile", [1024, 3])
@pytest.mark.parametrize("keep_mb", [64.0, 0.0])
@pytest.mark.parametrize("need", ["F", "G", "both"])
def test_blocked_pair_sum_gradients_of_each_input(need, keep_mb, tile, monkeypatch):
    # only some inputs requiring a gradient (the variational phase: F only; Z alone: G only);
    # the exp table kept for the backward, or every block recomputed there (keep_mb = 0), the
    # forward then in tiles of `tile` pairs (3: 11 pairs in tiles of 3, 3, 3, 2)
    monkeypatch.setattr(gk, "PSI2_TILE_PAIRS", tile)
    g = torch.Generator().manual_seed(3)
    N, P, K = 37, 11, 4
    gv = -torch.rand(N, dtype=D64, generator=g)
    F = 0.3 * torch.randn(N, K, dtype=D64, generator=g)
    G = 0.3 * torch.randn(P, K, dtype=D64, generator=g)
    w = torch.randn(P, dtype=D64, generator=g)
    ref = [x.clone().requires_grad_() for x in (gv, F, G)]
    s0 = (torch.exp(ref[0][:, None] + ref[1] @ ref[2].mT).sum(0) * w).sum()   # autograd, dense
    d0 = torch.autograd.grad(s0, ref)
    args = [gv.clone().requires_grad_(need in ("F", "both")), F.clone().requires_grad_(need in ("F", "both")),
            G.clone().requires_grad_(need in ("G", "both"))]
    with gk.psi2_pair_path(8, keep_mb):
        s1 = (gk._BlockedPairExpSum.apply(*args) * w).sum()
        d1 = torch.autograd.grad(s1, [a for a in args if a.requires_grad])
    assert abs(float((s1 - s0).detach())) <= 1e-13 * abs(float(s0.detach()))
    want = [d for d, a in zip(d0, args) if a.requires_grad]
    for a, b in zip(want, d1):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-13 * float(a.abs().max()))


@pytest.mark.skipif(not (DATA_DIR / "human_pose").exists(), reason="human pose data not present")
@pytest.mark.parametrize("frozen", [("model",), ("variational",), ()])
def test_blocked_bound_equals_old_table_on_pose(frozen):
    """The bench's problem (pose, Q = 10, M = 100, α/ε/β/time/W fixed) at a PCA start: the collapsed
    bound with the blocked ψ2 equals the old unblocked table to 1e-10 relative and its gradient to
    1e-8 relative (norm and largest entry), in both phases of the schedule and jointly, with the
    exp table kept for the backward and with every block recomputed."""
    from tandem.inference.datasets.human_pose import load_human_pose
    d = load_human_pose(DATA_DIR)
    seq = np.repeat(np.arange(len(d.seq_ends)), np.diff([0, *d.seq_ends]))
    views = [torch.as_tensor(v) for v in d.views]
    N, Q, M = views[0].shape[0], 10, 100
    t = torch.as_tensor(np.asarray(d.t, dtype=np.float64).reshape(-1))
    Yc = torch.cat(views, 1) - torch.cat(views, 1).mean(0)
    init = default_init(N, [v.shape[1] for v in views], Q, M, times=t, generator=torch.Generator().manual_seed(0),
                        X0=torch.linalg.svd(Yc, full_matrices=False)[0][:, :Q] * 3.0)
    data = McGPDSData(views, t, torch.as_tensor(seq), Q, M, init=init,
                      fixed=frozenset(("alpha", "eps", "beta", "time", "W", "g")))
    F0, g0 = _value_grad(data, 0, frozen)
    F1, g1 = _value_grad(data, 64, frozen, keep_mb=64.0)  # the (N, P) table kept (23 MB)
    F2, g2 = _value_grad(data, 7, frozen, keep_mb=0.0)    # recomputed; 566 not a multiple of 7
    F3, g3 = _value_grad(data, 64, frozen)                # the default: recomputed, forward in tiles
    assert float(g0.norm()) > 0
    # the default gives the kept table's bits: the same products, exp and sums per block
    assert torch.equal(F3, F1) and torch.equal(g3, g1)
    for F, gr in ((F1, g1), (F2, g2), (F3, g3)):
        assert abs(float(F - F0)) <= 1e-10 * abs(float(F0))
        assert float((gr - g0).norm()) <= 1e-8 * float(g0.norm())
        assert float((gr - g0).abs().max()) <= 1e-8 * float(g0.abs().max())
