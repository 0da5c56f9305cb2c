"""The stochastic McGPDS fit with missing (NaN) entries: masked window statistics against the
masked collapsed bound, against the reduced data, the fit itself and its imputation."""
import math

import numpy as np
import pyro
import pytest
import torch

from tandem.guides.mcgpds import mcgpds_guide
from tandem.inference.mcgpds import stochastic as st
from tandem.inference.mcgpds.bound import collapsed_loss
from tandem.inference.mcgpds.windows import StochasticData, ViewMask, view_masks
from tandem.models.mcgpds import mcgpds_model

NAN = float("nan")


@pytest.fixture(scope="module")
def sim():
    # 6 sequences of 24 frames, two views (5 and 4 outputs), one draw of the model
    return st.simulate_sequences(6, 24, [5, 4], Q=2, M=6, seed=0, chunk_frames=48)


def _gaps(sim, pattern, seed=0):
    """The simulated views with NaN entries: ``frames`` — 30 % of view 1's frames removed;
    ``columns`` — in view 0 a column never observed and 20 % of the other entries removed at
    random (columns missing in some frames), with one frame of view 1 removed too."""
    g = torch.Generator().manual_seed(seed)
    views = [Y.clone() for Y in sim["views"]]
    N = views[0].shape[0]
    if pattern == "frames":
        views[1][torch.randperm(N, generator=g)[: int(0.3 * N)]] = NAN
    else:
        views[0][torch.rand(N, 5, generator=g) < 0.2] = NAN
        views[0][:, 4] = NAN
        views[1][7] = NAN
    return views


def _prepared(views, sim, kind="rbfard", M=6, fixed=("alpha", "eps", "beta", "time"), **kw):
    cfg = st.StochasticConfig(Q=2, M=M, window=24, batch=3, num_steps=0, fixed=fixed, mapping_kernel=kind, **kw)
    m = st.StochasticMcGPDS(cfg)
    # the estimator refuses a column never observed (its standardisation would be made up); the
    # objective's handling of one is checked here on prepared data with those columns blanked after
    never = [torch.nonzero(torch.isnan(Y).all(0)).reshape(-1) for Y in views]
    filled = [torch.where(torch.isnan(Y).all(0), Y0, Y) for Y, Y0 in zip(views, sim["views"])]
    m.data = m.prepare(filled, sim["times"], sim["seq_ids"], seed=0)
    if any(c.numel() for c in never):
        for Y, c in zip(m.data.views, never):
            Y[:, c] = NAN
        m.data._view_masks = view_masks(m.data.views)
    pyro.clear_param_store()
    m.param_store_ = pyro.get_param_store()        # the low-level functions use Pyro's global store
    return m


def _perturb(m, seed=1):
    """Register everything, then move every window's q(X) and the learnable hyperparameters."""
    g = torch.Generator().manual_seed(seed)
    st.StochasticELBO(windows=torch.arange(m.data.windows.S))(st.model_params, st.guide_params, m.data,
                                                              update=False)
    store = pyro.get_param_store()
    with torch.no_grad():
        for name in list(store.keys()):
            p = store[name].unconstrained()
            if name.startswith(("sq_", "kh_ard", "Zh_", "W_", "kg_ard", "Zg_")):
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _objective_at_optimal_q(d: StochasticData):
    """−ELBO over all windows at the optimal q(V), q(U) and its gradient (every non-q parameter)."""
    st.refresh_statistics(d)
    neg = st.StochasticELBO(windows=torch.arange(d.windows.S))(st.model_params, st.guide_params, d, update=False)
    store = pyro.get_param_store()
    names = sorted(n for n in store if not n.startswith("q"))
    grads = torch.autograd.grad(neg, [store[n].unconstrained() for n in names], allow_unused=True)
    return float(neg.detach()), dict(zip(names, grads))


def _rel(a, b):
    return float((a - b).norm() / max(float(b.norm()), 1e-300))


# ------------------------------------------------------------------ the exact limit
@pytest.mark.parametrize("pattern", ["frames", "columns"])
@pytest.mark.parametrize("kind,M", [("rbfard", 6), ("linear", 2)])
def test_masked_objective_at_optimal_q_equals_masked_collapsed_bound(sim, pattern, kind, M):
    """Windows = whole sequences (the exact limit): at the optimal q(V), q(U) the masked stochastic
    objective (window statistics per group of columns over their observed frames, one q(v) precision
    per group) equals the masked collapsed bound of the same model (``collapsed_loss`` on
    ``collapsed_data``: :func:`tandem.inference.mcgpds.missing.masked_view_bound`) to 1e-10 relative,
    and so does its gradient in every hyperparameter and every window's q(X) (‖Δg‖/‖g‖ per tensor) to
    1e-9: measured ≤ 2e-11 for every tensor but one, the g kernel variance of view 1 under the
    ``columns`` gaps at 2.7e-10 (a scalar gradient of size 1e3; without any mask the same comparison
    gives up to 3.7e-12 on it — the two codes sum the g terms differently, Cholesky here and an
    eigendecomposition in the collapsed bound). The linear kernel is taken with M = Q: with M > Q its
    K_ZZ = Z Zᵀ is singular up to the jitter and the Z gradients of the two codes agree only to ~3e-9,
    with or without a mask."""
    m = _prepared(_gaps(sim, pattern), sim, kind=kind, M=M)
    d = m.data
    assert d.view_masks[1] is not None and (d.view_masks[0] is not None) == (pattern == "columns")
    _perturb(m)
    lower = m.elbo()                                   # q(V), q(U) away from their optimum
    neg, g_st = _objective_at_optimal_q(d)
    assert lower < -neg - 1.0
    cd = m.collapsed_data()
    assert bool(torch.isnan(cd.views[1]).any())        # the collapsed code sees the same gaps
    pyro.clear_param_store()
    negF = collapsed_loss(mcgpds_model, mcgpds_guide, cd)
    cs = pyro.get_param_store()
    negF_v = float(negF.detach())
    assert abs(neg - negF_v) <= 1e-10 * abs(negF_v), (neg, negF_v)
    n_checked = 0
    for n, g in g_st.items():
        if n.startswith("sq_") or g is None:
            continue
        gc = torch.autograd.grad(negF, cs[n].unconstrained(), retain_graph=True)[0]
        assert _rel(g, gc) <= 1e-9, (n, _rel(g, gc))
        n_checked += 1
    assert n_checked >= 6
    gmu = torch.autograd.grad(negF, [cs[f"mu_{k}"].unconstrained() for k in range(2)], retain_graph=True)
    glam = torch.autograd.grad(negF, [cs[f"lam_{k}"].unconstrained() for k in range(2)])
    W = d.windows
    for i in range(W.S):
        rows = W.rows[i][W.mask[i]]
        g = g_st[f"sq_{i}"]
        for k in range(2):
            assert _rel(g[k, :rows.numel(), :2], gmu[k][rows]) <= 1e-9
            assert _rel(g[k, :rows.numel(), 2:], glam[k][rows]) <= 1e-9


def test_nan_columns_give_the_objective_of_the_view_without_them(sim):
    """Columns never observed add nothing: the masked objective (at the optimal q(V), q(U), with the
    same parameter values) equals the objective of the view with those columns removed, to 1e-12."""
    views = [Y.clone() for Y in sim["views"]]
    views[0][:, [1, 3]] = NAN
    m = _prepared(views, sim, fixed=("alpha", "eps", "beta", "time"))
    d = m.data
    _perturb(m)
    neg_full, g_full = _objective_at_optimal_q(d)
    state = pyro.get_param_store().get_state()
    keep = torch.tensor([0, 2, 4])
    init = dict(d.init)
    init["W_0"] = init["W_0"][keep]
    red = StochasticData([d.views[0][:, keep], d.views[1]], d.times, d.windows, d.Q, d.M, d.J, init, d.X0,
                         d.fixed, d.mapping_kernel_obj, d.time_white, d.time_bias, d.private_prior, d.lam_init,
                         time_kernel=d.time_kernel)
    assert red.view_masks == [None, None]
    # the same parameter values (unconstrained, bit for bit); q(V), q(U) are set by refresh_statistics
    params = {n: v for n, v in state["params"].items() if not n.startswith("q") and n != "stoch_steps"}
    params["W_0"] = params["W_0"][keep] if "W_0" in params else None
    params = {n: v for n, v in params.items() if v is not None}
    pyro.clear_param_store()
    pyro.get_param_store().set_state({"params": params,
                                      "constraints": {n: state["constraints"][n] for n in params}})
    neg_red, g_red = _objective_at_optimal_q(red)
    assert abs(neg_full - neg_red) <= 1e-12 * abs(neg_red), (neg_full, neg_red)
    for n, g in g_red.items():
        if g is None:
            continue
        gf = g_full[n][keep] if n == "W_0" else g_full[n]
        assert _rel(gf, g) <= 1e-10, n


def test_masked_code_on_a_full_view_equals_the_unmasked_code(sim):
    """The masked statistics generalise the unmasked ones: a fully observed view pushed through the
    masked code (one group, every frame) gives the unmasked objective and gradient to 1e-12; and with
    no NaN the data carry no mask, so the unmasked path runs unchanged."""
    m = _prepared(list(sim["views"]), sim)
    d = m.data
    assert d.view_masks == [None, None]
    _perturb(m)
    neg0, g0 = _objective_at_optimal_q(d)
    state = pyro.get_param_store().get_state()
    d.view_masks = [ViewMask(Y) for Y in d.views]
    assert [vm.P for vm in d.view_masks] == [1, 1]
    keep = [n for n in state["params"] if not n.startswith("q")]      # q(V): one precision per group now
    pyro.clear_param_store()
    pyro.get_param_store().set_state({"params": {n: state["params"][n] for n in keep},
                                      "constraints": {n: state["constraints"][n] for n in keep}})
    neg1, g1 = _objective_at_optimal_q(d)
    assert abs(neg0 - neg1) <= 1e-12 * abs(neg0), (neg0, neg1)
    # the masked path forms the same sums in another order; the kernel-variance gradients are
    # differences of large terms, so they agree to ~1e-12 relative (measured up to 1.1e-12), not
    # to the last bits
    for n, g in g0.items():
        if g is not None:
            assert _rel(g1[n], g) <= 1e-10, n


# ------------------------------------------------------------------ the fit
def test_fit_with_30_percent_of_a_view_missing_ascends_and_imputes_better_than_the_mean(sim):
    """Default ``StochasticMcGPDS`` (kernels and inducing inputs learned, per-epoch hyperparameter
    L-BFGS) with 30 % of view 1's frames removed: the full-data masked bound at the optimal q(V),
    q(U) never decreases from epoch to epoch, and the imputation of the removed frames (known truth
    from ``simulate_sequences``) beats the training mean of the observed frames (measured RMSE 0.16
    against 0.46 after 20 epochs)."""
    views = _gaps(sim, "frames")
    gone = torch.nonzero(torch.isnan(views[1][:, 0])).reshape(-1)
    cfg = st.StochasticConfig(Q=2, M=6, window=24, batch=3, num_steps=2)
    m = st.StochasticMcGPDS(cfg).fit([Y.numpy() for Y in views], sim["times"], sim["seq_ids"], seed=0)
    values = [m.elbo(optimal_inducing=True)]
    for e in range(15):
        m.train(2, seed=e + 1)
        values.append(m.elbo(optimal_inducing=True))
    assert all(math.isfinite(v) for v in values)
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(values, values[1:])), values
    assert values[-1] > values[0] + 0.5 * abs(values[0])
    imp = m.impute(1)
    truth = sim["views"][1][gone].numpy()
    assert imp.missing[gone.numpy()].all() and imp.missing.sum() == gone.numel() * 4
    obs = ~imp.missing
    np.testing.assert_allclose(imp.values[obs], views[1].numpy()[obs], rtol=1e-12, atol=1e-12)
    assert np.isfinite(imp.var).all() and (imp.var > 0).all()
    rmse = float(np.sqrt(((imp.values[gone.numpy()] - truth) ** 2).mean()))
    mean = np.nanmean(views[1].numpy(), 0)
    rmse_mean = float(np.sqrt(((mean - truth) ** 2).mean()))
    print(f"stochastic imputation RMSE {rmse:.4f}, training mean {rmse_mean:.4f}")
    assert rmse < 0.6 * rmse_mean, (rmse, rmse_mean)


def test_bad_missing_entries_raise_named_errors(sim):
    """One validator with the collapsed path: ±inf, a view with no observed entry and a frame
    missing in every view are ValueErrors naming the view or the frames."""
    t, seq = sim["times"], sim["seq_ids"]
    m = st.StochasticMcGPDS(st.StochasticConfig(Q=2, M=4, window=24, batch=2, num_steps=0))
    for val in (math.inf, -math.inf):
        a = sim["views"][1].clone()
        a[3, 1] = val
        with pytest.raises(ValueError, match=r"views\[1\].*infinite"):
            m.fit([sim["views"][0], a], t, seq)
    with pytest.raises(ValueError, match=r"views\[0\].*every entry is missing"):
        m.fit([torch.full_like(sim["views"][0], NAN), sim["views"][1]], t, seq)
    a, b = sim["views"][0].clone(), sim["views"][1].clone()
    a[5], b[5] = NAN, NAN
    with pytest.raises(ValueError, match=r"frames \[5\].*every view"):
        m.fit([a, b], t, seq)


def test_save_load_keeps_the_masks(sim, tmp_path):
    """A fit with missing entries saved and loaded (safe format) has the same masks, ELBO and
    imputation; data saved without the masks (older files) get them recomputed from the views."""
    views = _gaps(sim, "columns")
    views[0][0, 4] = sim["views"][0][0, 4]      # the estimator refuses a column never observed
    m = st.StochasticMcGPDS(st.StochasticConfig(Q=2, M=4, window=24, batch=2, num_steps=3)).fit(
        views, sim["times"], sim["seq_ids"], seed=0)
    e, imp = m.elbo(), m.impute(0)
    m.save(tmp_path / "m.tnd")
    m2 = st.StochasticMcGPDS.load(tmp_path / "m.tnd")
    assert [vm.P for vm in m2.data.view_masks] == [vm.P for vm in m.data.view_masks]
    assert m2.elbo() == e
    np.testing.assert_array_equal(m2.impute(0).values, imp.values)
    del m2.data.__dict__["_view_masks"]
    assert m2.elbo() == e
