"""GPy's missing-data Bayesian GPLVM as a peer (peers extra: skipped when GPy is absent).

The test latents of new frames are inferred from view 1 alone on an ordinary BGPLVM that holds
the view-1 columns of the missing-data model (baselines.gpy_observed_columns_model): checked to
carry exactly the missing-data model's posterior for those columns, and the whole peer is checked
on a simulation with a known 1-d latent against the training mean."""
import numpy as np
import pytest

from tandem.inference.mcgpds import baselines as B

GPy = pytest.importorskip("GPy")

N, NT, D1, D2 = 60, 25, 6, 5


def _rmse(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


@pytest.fixture(scope="module")
def fitted():
    """Two views of one smooth 1-d latent, 30 % of the training frames of view 2 removed."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, N + NT)
    F = np.stack([x, np.sin(2 * x), np.cos(x), x ** 2 / 2], 1)
    Y1 = F @ rng.normal(size=(4, D1)) + 0.05 * rng.normal(size=(N + NT, D1))
    Y2 = F @ rng.normal(size=(4, D2)) + 0.05 * rng.normal(size=(N + NT, D2))
    gone = np.zeros(N, dtype=bool)
    gone[rng.choice(N, 18, replace=False)] = True
    m2 = Y2[:N].copy()
    m2[gone] = np.nan
    res = B.fit_gpy_bgplvm_missing(Y1[:N], m2, Y1[N:], Q=2, M=12, max_iters=150, seed=0)
    return dict(res=res, Y1=Y1[:N], Y2=Y2[:N], Y1t=Y1[N:], Y2t=Y2[N:], gone=gone, m2=m2)


def test_observed_columns_model_carries_the_missing_data_posterior(fitted):
    """For columns observed in every frame, the ordinary BGPLVM with the fitted q(X), Z, kernel and
    noise has the missing-data model's per-column posterior (woodbury vector and inverse) and the
    same predictive, so infer_newX on it scores new frames on exactly those columns' bound."""
    model = fitted["res"].model
    plain = B.gpy_observed_columns_model(model, np.arange(D1))
    wv, wi = model.posterior.woodbury_vector, model.posterior.woodbury_inv
    assert wi.shape[-1] == D1 + D2                      # missing data: one posterior per column
    # tolerances: Kmm is ill-conditioned here (condition number ~1e5), so the woodbury terms carry
    # round-off of ~1e-6 relative (reordering the frames alone moves them that much); a wrong transfer
    # (noise, Z, q(X) variances) moves them by > 1e-2
    scale = np.abs(wv[:, :D1]).max()
    np.testing.assert_allclose(plain.posterior.woodbury_vector, wv[:, :D1], atol=1e-4 * scale)
    pwi = np.asarray(plain.posterior.woodbury_inv)
    pwi = pwi[..., None] if pwi.ndim == 2 else pwi
    np.testing.assert_allclose(np.broadcast_to(pwi, wi[:, :, :D1].shape), wi[:, :, :D1],
                               atol=1e-4 * np.abs(wi[:, :, :D1]).max())
    Xs = np.asarray(model.X.mean)[:7] + 0.3
    mp, vp = plain.predict(Xs, include_likelihood=True)
    mm, vm = model.predict(Xs, include_likelihood=True)
    np.testing.assert_allclose(mp, mm[:, :D1], atol=1e-6 * np.abs(mm).max())
    # the predictive variance carries the same ill-conditioned-Kmm round-off (1.3e-6 relative measured on
    # one machine); a wrong transfer moves it by > 1e-2
    np.testing.assert_allclose(np.broadcast_to(vp, mp.shape), np.broadcast_to(vm, mm.shape)[:, :D1], rtol=1e-5)
    # the view-2 columns differ between observed patterns: they cannot go into an ordinary model
    with pytest.raises(ValueError, match="columns"):
        B.gpy_observed_columns_model(model, [0, D1])
    with pytest.raises(ValueError, match="columns"):
        B.gpy_observed_columns_model(model, [D1 + D2])


def test_bgplvm_imputes_and_predicts_view2_from_view1(fitted):
    """Known truth: both views are smooth functions of one latent, so imputing the removed frames
    and predicting the test frames from view 1 alone must beat the training mean by far, with
    predictive variances of the right order (mean standardised squared error near 1)."""
    r, Y2, gone = fitted["res"], fitted["Y2"], fitted["gone"]
    assert r.impute_mean.shape == r.impute_var.shape == (N, D2)
    assert r.test_mean.shape == r.test_var.shape == (NT, D2) and r.test_latent.shape == (NT, 2)
    mean = Y2[~gone].mean(0)
    assert _rmse(r.impute_mean[gone], Y2[gone]) < 0.2 * _rmse(mean, Y2[gone])
    assert _rmse(r.test_mean, fitted["Y2t"]) < 0.2 * _rmse(mean, fitted["Y2t"])
    z = np.mean((r.test_mean - fitted["Y2t"]) ** 2 / r.test_var)
    assert 0.2 < z < 5, z
    # the inferred latents matter: view 2 at a permuted assignment of the test latents is far worse
    perm = r.model.predict(r.test_latent[::-1].copy())[0][:, D1:]
    assert _rmse(perm, fitted["Y2t"]) > 3 * _rmse(r.test_mean, fitted["Y2t"])


def test_bgplvm_inputs_are_checked(fitted):
    Y1, m2, Y1t = fitted["Y1"], fitted["m2"], fitted["Y1t"]
    bad = Y1.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="m1"):
        B.fit_gpy_bgplvm_missing(bad, m2, Y1t, max_iters=0)
    inf = m2.copy()
    inf[0, 0] = np.inf
    with pytest.raises(ValueError, match="m2: has infinite"):
        B.fit_gpy_bgplvm_missing(Y1, inf, Y1t, max_iters=0)
    gone_col = m2.copy()
    gone_col[:, 1] = np.nan
    with pytest.raises(ValueError, match=r"m2: columns \[1\]"):
        B.fit_gpy_bgplvm_missing(Y1, gone_col, Y1t, max_iters=0)
    with pytest.raises(ValueError, match="m1_test"):
        B.fit_gpy_bgplvm_missing(Y1, m2, Y1t[:, :3], max_iters=0)
    with pytest.raises(ValueError, match="X: expected shape"):
        B.fit_gpy_bgplvm_missing(Y1, m2, Y1t, Q=2, X=np.zeros((N, 3)), max_iters=0)
    with pytest.raises(ValueError, match="training frames"):
        B.fit_gpy_bgplvm_missing(Y1[:10], m2, Y1t, max_iters=0)
