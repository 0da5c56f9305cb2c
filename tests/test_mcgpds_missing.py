"""McGPDS with missing (NaN) entries: masked bound, model, posterior, fit, imputation, prediction."""

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine

from tandem.guides.mcgpds import variational_params
from tandem.inference.distances import Standardizer, knn, sq_dists
from tandem.inference.mcgpds.bound import (
    collapsed_bound,
    latent_terms,
    predict_moments,
    view_bound,
    view_posterior,
)
from tandem.inference.mcgpds.missing import column_patterns, masked_view_bound, masked_view_posterior
from tandem.models.mcgpds import McGPDSData, default_init, hyperparams, mcgpds_model

D64 = torch.float64


def problem(seed=0, kind="rbfard", J=1, sizes=(7, 5), M=4, Q=2, views=None):
    g = torch.Generator().manual_seed(seed)
    N = sum(sizes)
    t = torch.cat([torch.linspace(0, 1, n, dtype=D64) for n in sizes])
    seq = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    if views is None:
        views = [torch.randn(N, 3, dtype=D64, generator=g), torch.randn(N, 5, dtype=D64, generator=g)]
    Ds = [Y.shape[1] for Y in views]
    init = default_init(N, Ds, Q, M, J, kind, times=t, generator=g)
    for k in range(2):
        init[f"alpha_{k}"] = torch.tensor(0.3 + 0.3 * k, dtype=D64)
        init[f"eps_{k}"] = torch.tensor(0.05, dtype=D64)
        init[f"lam_{k}"] = torch.rand(N, Q, dtype=D64, generator=g) + 0.1
        init[f"mu_{k}"] = torch.randn(N, Q, dtype=D64, generator=g)
        init[f"W_{k}"] = torch.randn(Ds[k], J, dtype=D64, generator=g)
        init[f"beta_{k}"] = torch.tensor(4.0 + k, dtype=D64)
    data = McGPDSData(views, t, seq, Q, M, J, kind, init=init, fixed=frozenset())
    pyro.clear_param_store()
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    return data, hp, mus, lams


def _reduced_hp(v, keep):
    r = dict(v)
    r["W"] = v["W"][keep]
    return r


@pytest.mark.parametrize("kind,J", [("rbfard", 1), ("rbfard", 2), ("linear", 1)])
def test_columns_removed_equal_bound_without_them(kind, J):
    data, hp, mus, lams = problem(kind=kind, J=J)
    Y = data.views[1].clone()
    drop, keep = [1, 3], [0, 2, 4]
    Y[:, drop] = float("nan")
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    s = lt["s_diag"][1]
    masked = view_bound(Y, mus[1], s, hp["views"][1], kind)
    reduced = view_bound(data.views[1][:, keep], mus[1], s, _reduced_hp(hp["views"][1], keep), kind)
    assert abs(float((masked - reduced).detach())) < 1e-10
    # nothing missing: the masked formula is the bound itself
    full = view_bound(data.views[1], mus[1], s, hp["views"][1], kind)
    assert abs(float(masked_view_bound(data.views[1], mus[1], s, hp["views"][1], kind) - full)) < 1e-9


@pytest.mark.parametrize("kind,J", [("rbfard", 1), ("rbfard", 2), ("linear", 1)])
def test_whole_frames_missing_equal_hand_computed_reduced_bound(kind, J):
    data, hp, mus, lams = problem(kind=kind, J=J)
    rows_missing = torch.tensor([0, 3, 8, 11])
    obs = torch.ones(data.N, dtype=torch.bool)
    obs[rows_missing] = False
    Y1 = data.views[1].clone()
    Y1[rows_missing] = float("nan")
    data_m, _, _, _ = problem(kind=kind, J=J, views=[data.views[0], Y1])
    F = collapsed_bound(data_m, hp, mus, lams)
    # hand-computed: the KL of every frame, view 0 in full, view 1 on its observed frames only
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    ref = -lt["kl"] + view_bound(data.views[0], mus[0], lt["s_diag"][0], hp["views"][0], kind) \
        + view_bound(data.views[1][obs], mus[1][obs], lt["s_diag"][1][obs], hp["views"][1], kind)
    assert abs(float(F - ref)) < 1e-9 * max(1.0, abs(float(ref)))


@pytest.mark.parametrize("kind,J", [("rbfard", 2), ("linear", 1)])
def test_scattered_entries_equal_column_by_column_bound(kind, J):
    data, hp, mus, lams = problem(kind=kind, J=J)
    g = torch.Generator().manual_seed(3)
    Y = data.views[1].clone()
    miss = torch.rand(Y.shape, generator=g, dtype=D64) < 0.3
    miss[:, 0] = False                          # one full column, several patterns
    miss[:, 2] = miss[:, 4]                     # two columns sharing a pattern
    Y[miss] = float("nan")
    pats, cols = column_patterns(~miss)
    assert len(pats) == len({tuple(c.tolist()) for c in (~miss).T}) and sum(c.numel() for c in cols) == 5
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    s = lt["s_diag"][1]
    masked = view_bound(Y, mus[1], s, hp["views"][1], kind)
    ref = 0.0
    for d in range(Y.shape[1]):
        o = ~miss[:, d]
        ref = ref + view_bound(data.views[1][o][:, [d]], mus[1][o], s[o], _reduced_hp(hp["views"][1], [d]), kind)
    assert abs(float(masked - ref)) < 1e-9 * max(1.0, abs(float(ref)))


def test_masked_bound_gradients_finite_and_match_finite_differences():
    data, hp, mus, lams = problem(J=2, sizes=(5, 4))
    Y = data.views[1].clone()
    Y[[0, 2, 6], :] = float("nan")
    Y[4, [1, 3]] = float("nan")
    v = {k: (x.detach() if isinstance(x, torch.Tensor) else x) for k, x in hp["views"][1].items()}
    mu0 = mus[1].detach().clone()
    s0 = (0.2 + torch.rand(mu0.shape, dtype=D64, generator=torch.Generator().manual_seed(1)))
    Z0, W0 = v["Zh"].clone(), v["W"].clone()

    def f(mu, s, Z, W):
        vv = dict(v)
        vv["Zh"], vv["W"] = Z, W
        return masked_view_bound(Y, mu, s, vv, "rbfard")

    args = tuple(a.clone().requires_grad_(True) for a in (mu0, s0, Z0, W0))
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-5, rtol=1e-4)
    # the whole masked objective (every parameter learned) has finite gradients
    data_m, hp_m, mus_m, lams_m = problem(J=2, sizes=(5, 4), views=[data.views[0], Y])
    F = collapsed_bound(data_m, hp_m, mus_m, lams_m)
    F.backward()
    store = pyro.get_param_store()
    grads = [store[n].unconstrained().grad for n in store.keys()]
    grads = [g for g in grads if g is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)


def test_masked_posterior_without_gaps_equals_view_posterior_and_columns_removed():
    data, hp, mus, lams = problem(J=2)
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    s = lt["s_diag"][1]
    v = hp["views"][1]
    with torch.no_grad():
        p_full = view_posterior(data.views[1], mus[1], s, v, "rbfard")
        p_mask = masked_view_posterior(data.views[1], mus[1], s, v, "rbfard")
        assert torch.allclose(p_mask.bh, p_full.bh, atol=1e-10)
        assert torch.allclose(p_mask.Ch, p_full.Ch.expand_as(p_mask.Ch), atol=1e-10)
        assert torch.allclose(p_mask.bg, p_full.bg, atol=1e-10) and torch.allclose(p_mask.Cg, p_full.Cg, atol=1e-10)
        Y = data.views[1].clone()
        Y[:, [0, 3]] = float("nan")
        keep = [1, 2, 4]
        pm = view_posterior(Y, mus[1], s, v, "rbfard")
        pr = view_posterior(data.views[1][:, keep], mus[1], s, _reduced_hp(v, keep), "rbfard")
        xs, ss = mus[1][:4] + 0.1, s[:4]
        mm, vm = predict_moments(pm, xs, ss)
        mr, vr = predict_moments(pr, xs, ss)
        assert torch.allclose(mm[:, keep], mr, atol=1e-10) and torch.allclose(vm[:, keep], vr, atol=1e-10)


def _site_logp(data, cond):
    tr = poutine.trace(poutine.condition(mcgpds_model, data=cond)).get_trace(data)
    tr.compute_log_prob()
    return {n: float(tr.nodes[n]["log_prob_sum"]) for n in ("y_1", "paper_terms_1")}, tr


def test_pyro_model_masks_missing_entries():
    data, hp, mus, lams = problem(J=2)
    pyro.set_rng_seed(0)
    _, tr = _site_logp(data, {})
    cond = {n: tr.nodes[n]["value"] for n in ("X_s", "X_0", "X_1", "v_0", "u_0", "v_1", "u_1")}
    keep = [0, 2, 4]
    Y = data.views[1].clone()
    Y[:, [1, 3]] = float("nan")
    data_nan, _, _, _ = problem(J=2, views=[data.views[0], Y])
    data_red, _, _, _ = problem(J=2, views=[data.views[0], data.views[1][:, keep]])
    for dd in (data_nan, data_red):        # the same hyperparameters (W of the kept columns)
        dd.init = dict(data.init)
        dd.fixed = frozenset(dd.fixed) | {"W", "alpha", "eps", "beta", "time", "kernel", "inducing", "g",
                                           "variational"}
    data_red.init["W_1"] = data.init["W_1"][keep]
    lp_nan, _ = _site_logp(data_nan, cond)
    cond_red = dict(cond, v_1=cond["v_1"][keep], u_1=cond["u_1"][:, keep])
    lp_red, _ = _site_logp(data_red, cond_red)
    for n in lp_nan:
        assert abs(lp_nan[n] - lp_red[n]) < 1e-9 * max(1.0, abs(lp_red[n])), n
    # scattered entries: additive over entries (inclusion–exclusion of two disjoint gaps)
    a, b = (torch.tensor([0, 1]), torch.tensor([2, 2])), (torch.tensor([5, 9]), torch.tensor([0, 4]))

    def lp(gaps):
        Yg = data.views[1].clone()
        for r, c in gaps:
            Yg[r, c] = float("nan")
        dg, _, _, _ = problem(J=2, views=[data.views[0], Yg])
        dg.init, dg.fixed = data_nan.init, data_nan.fixed
        return sum(_site_logp(dg, cond)[0].values())

    incl = lp([]) - lp([a]) - lp([b]) + lp([a, b])
    assert abs(incl) < 1e-8


def test_standardizer_and_knn_ignore_nan():
    g = np.random.default_rng(0)
    X = g.normal(size=(30, 4)) * [1, 2, 3, 4] + 5
    Xn = X.copy()
    Xn[::3, 1] = np.nan
    st = Standardizer(Xn)
    assert np.allclose(st.mean[1], np.nanmean(Xn[:, 1])) and np.allclose(st.scale[1], np.nanstd(Xn[:, 1]))
    st_t = Standardizer(torch.as_tensor(Xn))
    assert np.allclose(st_t.scale.numpy(), st.scale)
    # without NaN knn is unchanged; with NaN the distance uses the jointly observed coordinates
    q = X[:5] + 0.01
    assert (knn(q, X, 2) == np.argsort(sq_dists(q, X), 1, kind="stable")[:, :2]).all()
    qn = q.copy()
    qn[:, 3] = np.nan
    ref = np.argsort(sq_dists(q[:, :3], X[:, :3]), 1, kind="stable")[:, :1]
    assert (knn(qn, X, 1) == ref).all()
    assert (knn(torch.as_tensor(qn), torch.as_tensor(X), 1).numpy() == ref).all()


def test_refuses_inf_all_missing_frame_and_view():
    from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds
    N = 12
    Y1, Y2 = np.random.default_rng(0).normal(size=(N, 3)), np.random.default_rng(1).normal(size=(N, 2))
    t = np.arange(N, dtype=float)
    cfg = McGPDSConfig(Q=2, M=4, cycles=0, joint_iters=0)
    bad = Y1.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        fit_mcgpds([bad, Y2], t, config=cfg, progress=False)
    a, b = Y1.copy(), Y2.copy()
    a[4], b[4] = np.nan, np.nan
    with pytest.raises(ValueError, match=r"frames \[4\].*every view"):
        fit_mcgpds([a, b], t, config=cfg, progress=False)
    with pytest.raises(ValueError, match="every entry is missing"):
        fit_mcgpds([Y1, np.full_like(Y2, np.nan)], t, config=cfg, progress=False)


def _toy(N=80, seed=0):
    """Two views of one smooth 2-d trajectory (known truth), three sequences."""
    rng = np.random.default_rng(seed)
    t = np.tile(np.linspace(0, 1, N // 2), 2)
    seq = np.repeat([0, 1], N // 2)
    x = np.stack([np.sin(2 * np.pi * t + seq), np.cos(3 * np.pi * t - seq)], 1)
    A1, A2 = rng.normal(size=(2, 4)), rng.normal(size=(2, 3))
    Y1 = np.tanh(x @ A1) + 0.05 * rng.normal(size=(N, 4))
    Y2 = np.sin(x @ A2) + 0.05 * rng.normal(size=(N, 3))
    return t, seq, Y1, Y2


def test_mcgpds_impute_is_the_predictive_at_the_frame_and_beats_the_mean(tmp_path):
    from tandem.inference.mcgpds import McGPDS
    from tandem.inference.mcgpds.fit import constant_hyperparams
    t, seq, Y1, Y2 = _toy()
    rng = np.random.default_rng(1)
    gone = np.sort(rng.choice(len(t), 16, replace=False))
    Y2m = Y2.copy()
    Y2m[gone] = np.nan
    Y2m[3, 1] = np.nan                                    # and one scattered entry
    m = McGPDS(Q=2, M=15, seed=0, joint_iters=60).fit([Y1, Y2m], times=t, sequence_ids=seq)
    imp = m.impute(1)
    assert imp.missing.sum() == 16 * 3 + 1 and np.isnan(imp.values).sum() == 0
    assert np.allclose(imp.values[~imp.missing], Y2m[~imp.missing], atol=1e-12)
    assert (imp.var > 0).all()
    # the imputation is the fitted model's predictive at that frame's latent (data units)
    f = m.fitted_
    hp = constant_hyperparams(f)
    with torch.no_grad():
        post = view_posterior(f.views[1], f.mu[1], f.s_diag[1], hp["views"][1], f.data.mapping_kernel)
        n = int(gone[0])
        mz, vz = predict_moments(post, f.mu[1][n:n + 1], f.s_diag[1][n:n + 1], components="h")
    st = m.scalers_[1]
    assert np.allclose(imp.values[n], st.inverse(mz).numpy()[0], atol=1e-10)
    assert np.allclose(imp.var[n], st.inverse_var(vz).numpy()[0], atol=1e-10)
    # and it knows the truth better than the training mean of the observed frames
    err = np.sqrt(((imp.values[gone] - Y2[gone]) ** 2).mean())
    base = np.sqrt(((np.nanmean(Y2m, 0) - Y2[gone]) ** 2).mean())
    assert err < 0.7 * base, (err, base)
    # calibrated-ish: the mean predictive variance is within a factor 10 of the squared error
    assert 0.1 < imp.var[gone].mean() / err ** 2 < 10
    # a saved fit with gaps reloads and imputes the same
    m.save(tmp_path / "gappy.tandem")
    imp2 = McGPDS.load(tmp_path / "gappy.tandem").impute(1)
    assert np.allclose(imp2.values, imp.values, atol=1e-12) and np.array_equal(imp2.missing, imp.missing)


def test_predict_accepts_nan_in_source_test_frames():
    from tandem.inference.mcgpds import McGPDS
    t, seq, Y1, Y2 = _toy()
    tr, te = seq == 0, seq == 1
    m = McGPDS(Q=2, M=15, seed=0, joint_iters=40).fit([Y1[tr], Y2[tr]], times=t[tr])
    Yt = Y1[te].copy()
    Yt[::4, 0] = np.nan
    for method in ("tandem", "paper", "code"):
        p = m.predict(Yt, t[te], source=0, target=1, method=method)
        assert np.isfinite(p.mean).all() and (p.var > 0).all()
    bad = Yt.copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="every entry"):
        m.predict(bad, t[te], source=0, target=1)



@pytest.mark.parametrize("kind,J", [("rbfard", 2), ("linear", 1)])
def test_patterns_with_many_frames_take_the_least_squares_h_term(kind, J, monkeypatch):
    # a pattern observed in ≥ STABLE_H_MIN_FRAMES frames uses h_term_stable, as a full view does; fewer
    # frames keep the normal equations. Lowered here so that both happen in one view: the masked bound
    # equals the column-by-column bound (each column dispatched by its own frame count) and, value
    # and gradient, the all-normal-equations bound
    from tandem.inference.mcgpds import streamed
    data, hp, mus, lams = problem(kind=kind, J=J)
    g = torch.Generator().manual_seed(4)
    Y = data.views[1].clone()
    miss = torch.zeros(Y.shape, dtype=torch.bool)
    miss[torch.rand(data.N, generator=g, dtype=D64) < 0.25, 1] = True     # column 1: a few frames missing
    miss[:6, 3] = True                                                    # column 3: half its frames
    Y[miss] = float("nan")
    counts = (~miss).sum(0)
    monkeypatch.setattr(streamed, "STABLE_H_MIN_FRAMES", int(counts[1]))
    assert bool((counts >= int(counts[1])).sum() == 4) and int(counts[3]) < int(counts[1])
    calls = []
    real = streamed.h_term_stable
    monkeypatch.setattr(streamed, "h_term_stable", lambda *a: calls.append(a[6].shape) or real(*a))
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    s = lt["s_diag"][1].detach()
    mu = mus[1].detach().clone().requires_grad_(True)
    masked = view_bound(Y, mu, s, hp["views"][1], kind)
    assert sorted(calls) == sorted([(int(counts[0]), 3), (int(counts[1]), 1)])   # full columns 0, 2, 4; column 1
    ref = 0.0
    for d in range(Y.shape[1]):
        o = ~miss[:, d]
        ref = ref + view_bound(data.views[1][o][:, [d]], mu[o], s[o], _reduced_hp(hp["views"][1], [d]), kind)
    assert abs(float(masked - ref)) < 1e-10 * abs(float(ref))
    monkeypatch.setattr(streamed, "STABLE_H", False)
    ne = view_bound(Y, mu, s, hp["views"][1], kind)
    assert abs(float(masked - ne)) < 1e-10 * abs(float(ne))
    (g1,), (g0,) = torch.autograd.grad(masked, [mu], retain_graph=True), torch.autograd.grad(ne, [mu])
    torch.testing.assert_close(g1, g0, rtol=1e-8, atol=1e-10)
