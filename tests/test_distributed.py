"""Data-parallel training and sharded evaluation on torch.distributed (two gloo workers, loopback).

Every multi-process test starts two worker processes with ``torch.multiprocessing.spawn``
and a ``file://`` rendezvous in a temporary folder (``tandem.inference.distributed.spawn``)
and compares with the same computation in this process.
"""
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoDelta, AutoNormal

from tandem.inference.distributed import (
    DataParallelLoss,
    shard_indices,
    sharded_map,
    spawn,
)
from tandem.inference.mcgpds import stochastic as st
from tandem.inference.svi import LBFGS, fit

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


# ----------------------------------------------------------------- a generic Pyro model
def _regression_data():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(40, 3, generator=g, dtype=torch.float64)
    y = X @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 * torch.randn(40, generator=g,
                                                                                       dtype=torch.float64)
    return X, y


def regression_model(X, y, idx, N):
    w = pyro.sample("w", dist.Normal(torch.zeros(3, dtype=torch.float64), 1.0).to_event(1))
    s = pyro.sample("s", dist.LogNormal(torch.tensor(0.0, dtype=torch.float64), 1.0))
    with pyro.plate("data", N, subsample=idx):
        pyro.sample("y", dist.Normal(X[idx] @ w, s), obs=y[idx])


def _fit_regression(idx, loss, steps=30, optim=None, guide_cls=AutoNormal):
    X, y = _regression_data()
    guide = guide_cls(regression_model)
    res = fit(regression_model, guide, X, y, idx, X.shape[0], loss=loss, num_steps=steps, seed=0,
              progress=False, optim=optim or pyro.optim.Adam({"lr": 0.05}))
    return {k: v.detach() for k, v in res.params.items()}, res.losses


def _worker_regression(rank, world):
    idx = shard_indices(40)
    return _fit_regression(idx, DataParallelLoss(Trace_ELBO(), reduce="mean"))


def _worker_regression_lbfgs(rank, world):
    idx = shard_indices(40)
    return _fit_regression(idx, DataParallelLoss(Trace_ELBO(), reduce="mean"), steps=3,
                           optim=LBFGS(max_iter=10), guide_cls=AutoDelta)


def test_two_gloo_workers_equal_single_process_generic_driver():
    """fit() with Trace_ELBO: 2 workers × 20 rows == 1 process × 40 rows, step for step."""
    ref_params, ref_losses = _fit_regression(torch.arange(40), Trace_ELBO())
    out = spawn(_worker_regression, 2)
    for params, losses in out:
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-9)
        for k, v in ref_params.items():
            torch.testing.assert_close(params[k], v, rtol=1e-9, atol=1e-11)
    # and the run moved: the regression weights were learned
    assert not torch.allclose(ref_params["AutoNormal.locs.w"], torch.zeros(3, dtype=torch.float64), atol=0.5)


def test_data_parallel_loss_outside_a_group_is_the_wrapped_loss():
    ref_params, ref_losses = _fit_regression(torch.arange(40), Trace_ELBO(), steps=10)
    params, losses = _fit_regression(torch.arange(40), DataParallelLoss(Trace_ELBO()), steps=10)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-12)
    for k, v in ref_params.items():
        torch.testing.assert_close(params[k], v, rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------- stochastic McGPDS
def _mcgpds_problem():
    sim = st.simulate_sequences(8, 20, [4, 3], Q=2, M=5, seed=1, chunk_frames=80)
    cfg = st.StochasticConfig(Q=2, M=5, window=20, batch=4, num_steps=12, lr=0.02, local_iters=10,
                              fixed=("alpha", "eps", "beta", "time"))
    return sim, cfg


def _fit_mcgpds(wrapper, masked=False):
    sim, cfg = _mcgpds_problem()
    views = sim["views"]
    if masked:      # missing entries: 30 % of view 1's frames, and view 0's first column in a quarter of the frames
        g = torch.Generator().manual_seed(5)
        views = [Y.clone() for Y in views]
        N = views[0].shape[0]
        views[1][torch.randperm(N, generator=g)[: int(0.3 * N)]] = float("nan")
        views[0][torch.randperm(N, generator=g)[: N // 4], 0] = float("nan")
    m = st.StochasticMcGPDS(cfg).fit(views, sim["times"], sim["seq_ids"], seed=0, loss_wrapper=wrapper)
    return {k: v.detach().clone() for k, v in m.param_store_.items()}, m.result.losses


def _worker_mcgpds(rank, world):
    return _fit_mcgpds(DataParallelLoss)


def _worker_mcgpds_masked(rank, world):
    return _fit_mcgpds(DataParallelLoss, masked=True)


def test_two_gloo_workers_equal_single_process_stochastic_mcgpds():
    """Same minibatch schedule: each worker takes half of every minibatch of windows; the
    natural-gradient statistics and the gradients are all-reduced. Parameters (hyper-
    parameters, learned W, every window's q(X), q(V), q(U)) equal the single-process fit. With the
    default per-epoch hyperparameter L-BFGS (five of the 12 steps) each worker sums its shard and
    the shards are added, another order of the same sums than one process's: measured ≤ 2.2e-10 of
    each tensor's scale (max |entry|), so the tolerance is 1e-8 of that scale, not of each entry
    (entries near 0 would otherwise need 1e-10 absolute)."""
    ref, ref_losses = _fit_mcgpds(None)
    out = spawn(_worker_mcgpds, 2)
    for params, losses in out:
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-9)
        assert set(params) == set(ref)
        for k, v in ref.items():
            scale = max(float(v.abs().max()), 1e-2) if v.numel() else 1.0
            torch.testing.assert_close(params[k], v, rtol=1e-8, atol=1e-8 * scale, msg=k)
    # the minibatches covered the windows and the fit moved the parameters
    assert sum(k.startswith("sq_") for k in ref) == 8
    assert ref_losses[-1] < ref_losses[0]


def test_two_gloo_workers_equal_single_process_stochastic_mcgpds_with_missing_entries():
    """The same with NaN entries (whole frames of view 1, part of a column of view 0): the masked
    window statistics (per group of columns, q(v) precision per group) are all-reduced like the
    unmasked ones, so the two workers' fit equals the single-process one at the tolerance of the
    unmasked test."""
    ref, ref_losses = _fit_mcgpds(None, masked=True)
    assert ref["qvP_1"].shape[0] == 1 and ref["qvP_0"].shape[0] == 2     # one and two groups of columns
    out = spawn(_worker_mcgpds_masked, 2)
    for params, losses in out:
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-9)
        assert set(params) == set(ref)
        for k, v in ref.items():
            scale = max(float(v.abs().max()), 1e-2) if v.numel() else 1.0
            torch.testing.assert_close(params[k], v, rtol=1e-8, atol=1e-8 * scale, msg=k)
    assert ref_losses[-1] < ref_losses[0]


def test_data_parallel_lbfgs_generic():
    """L-BFGS through the wrapper: 2 workers equal one process. L-BFGS needs a deterministic
    loss, so the guide is a point mass (AutoDelta: Trace_ELBO is then the exact MAP objective)."""
    ref_params, ref_losses = _fit_regression(torch.arange(40), Trace_ELBO(), steps=3, optim=LBFGS(max_iter=10),
                                             guide_cls=AutoDelta)
    out = spawn(_worker_regression_lbfgs, 2)
    for params, losses in out:
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-8)
        for k, v in ref_params.items():
            torch.testing.assert_close(params[k], v, rtol=1e-7, atol=1e-9)


# ----------------------------------------------------------------- embarrassingly parallel
def _twin_gp_predict(Xt, batch_size=None):
    from tandem.inference.twin_gp.predictor import TwinGP
    from tandem.models.twin_gp import simulate
    toy = simulate(1, seed=0)
    X, Y = toy["X_train"], toy["Y_train"]
    return TwinGP(X, Y, rho_x=0.05, rho_y=0.05, lam_x=1e-3).predict(Xt, "SMTGP", alpha=0.5, beta=0.99,
                                                                    batch_size=batch_size)


def _worker_twin_gp(rank, world):
    from tandem.models.twin_gp import simulate
    Xt = simulate(1, seed=0)["X_test"][:60]
    return sharded_map(_twin_gp_predict, Xt)


def test_sharded_twin_gp_prediction_equals_full():
    """60 test points over 2 workers (30 each) == the single-process prediction in chunks of
    30 (``batch_size=30``), to the last bits; and == the one-batch prediction to the
    optimiser's tolerance (the batched BFGS stops each point at gtol 1e-6, and BLAS rounds a
    30-row and a 60-row product differently, so points stop at slightly different iterates)."""
    from tandem.models.twin_gp import simulate
    Xt = simulate(1, seed=0)["X_test"][:60]
    ref_chunks = _twin_gp_predict(Xt, batch_size=30)
    ref_full = _twin_gp_predict(Xt)
    for pred in spawn(_worker_twin_gp, 2):
        assert pred.shape == ref_full.shape
        torch.testing.assert_close(pred, ref_chunks, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(pred, ref_full, rtol=0, atol=1e-5)


def _samtc_init(pairs):
    from tandem.inference.samtc.algorithm import ncut_snn_grid, select_setting
    out = []
    for X, h in pairs:
        labs, _ = ncut_snn_grid(X, h, 0)
        out.append(labs[select_setting(labs)])
    return out


def _samtc_problem():
    from tandem.inference.samtc.simulate import simulate_tasks
    sim = simulate_tasks(n_tasks=3, n_points=(60, 70, 50), n_private=(1, 1, 0), seed=2)
    return sim.tasks, sim.h


def _worker_samtc(rank, world):
    from tandem.inference.samtc.algorithm import samtc
    tasks, h = _samtc_problem()
    init = sharded_map(_samtc_init, list(zip(tasks, h)))
    return init, samtc(tasks, h, init_labels=init, seed=0).labels


def test_sharded_samtc_tasks_equal_full():
    """SAMTC's per-task step 0 (Ncut-SNN over the k grid) sharded over 2 workers: the same
    initial partitions, hence the same final labels as the single-process run."""
    from tandem.inference.samtc.algorithm import samtc
    tasks, h = _samtc_problem()
    ref = samtc(tasks, h, seed=0)
    for init, labels in spawn(_worker_samtc, 2):
        for a, b in zip(init, ref.init_labels):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(labels, ref.labels):
            np.testing.assert_array_equal(a, b)


def test_shard_indices_and_sharded_map_single_process():
    assert shard_indices(7, rank=1, world=3).tolist() == [1, 4]
    with pytest.raises(ValueError, match="rank"):
        shard_indices(7, rank=3, world=3)
    assert sharded_map(lambda xs: [2 * x for x in xs], [1, 2, 3]) == [2, 4, 6]
    with pytest.raises(TypeError, match="loss"):
        DataParallelLoss(3)


def test_init_from_env_names_the_missing_torchrun_variables(monkeypatch):
    from tandem.inference.distributed import init_from_env
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(RuntimeError, match="torchrun"):
        init_from_env()
