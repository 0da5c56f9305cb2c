"""Held-out stacking of the tandem predictors (simplex_least_squares, stacked_prediction)."""
import dataclasses
import itertools

import numpy as np
import pytest
import torch

from common import two_view_split
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds, holdout_folds
from tandem.inference.mcgpds.predictor import (
    TANDEM_CANDIDATES,
    TRAINING_MEAN,
    CalibratedPrediction,
    select_predictor,
    simplex_least_squares,
    stacked_prediction,
)

SHORT = dict(cycles=1, var_iters=10, model_iters=10, joint_iters=30)


def test_simplex_least_squares_recovers_a_known_mixing():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(400, 4))
    w_true = np.array([0.5, 0.0, 0.3, 0.2])
    w = simplex_least_squares(A, A @ w_true)
    np.testing.assert_allclose(w, w_true, atol=1e-6)
    # with noise: the least-squares estimate, within a few standard errors of the truth
    w = simplex_least_squares(A, A @ w_true + 0.1 * rng.standard_normal(400))
    np.testing.assert_allclose(w, w_true, atol=0.03)
    assert w.min() >= 0 and w.sum() == pytest.approx(1.0, abs=1e-12)


def test_simplex_least_squares_is_the_constrained_minimum():
    """Against a fine grid of the 2-simplex (three members), and the KKT conditions."""
    rng = np.random.default_rng(1)
    A = rng.normal(size=(60, 3)) + np.array([1.0, -0.5, 0.2])
    b = rng.normal(size=60)
    w = simplex_least_squares(A, b)
    f = lambda v: float(np.sum((A @ v - b) ** 2))       # noqa: E731
    grid = [np.array([a, c, 1 - a - c]) for a, c in itertools.product(np.linspace(0, 1, 201), repeat=2)
            if a + c <= 1 + 1e-12]
    assert f(w) <= min(f(v) for v in grid) + 1e-10
    g = 2 * A.T @ (A @ w - b)                             # KKT: equal gradients on the support, larger off it
    on = w > 1e-8
    assert np.ptp(g[on]) < 1e-5 * np.abs(g).max()
    assert np.all(g[~on] >= g[on].min() - 1e-6)
    assert simplex_least_squares(A[:, :1], b).tolist() == [1.0]


def test_simplex_least_squares_rejects_bad_input():
    with pytest.raises(ValueError, match="A, b"):
        simplex_least_squares(np.ones((3, 2)), np.ones(4))
    with pytest.raises(ValueError, match="finite"):
        simplex_least_squares(np.array([[1.0, np.nan]]), np.ones(1))


@pytest.fixture(scope="module")
def fitted():
    train, test, t, tt = two_view_split()
    cfg = McGPDSConfig(Q=2, M=12, fixed=("alpha", "eps", "beta", "time", "W"), **SHORT)
    f = fit_mcgpds(train, t, config=cfg, progress=False)
    sel = select_predictor(f, test[0], tt, test_iters=3)
    return f, sel


def _member(base: CalibratedPrediction, hm, tm):
    return CalibratedPrediction(dataclasses.replace(base.prediction, mean=tm, var=base.prediction.var),
                                hm, base.holdout_var, base.delta)


def test_stacking_recovers_a_known_mixing(fitted):
    """Two synthetic members whose 0.3 / 0.7 mixture is exactly the training target view: the
    weights (on every fold and overall) are 0.3 / 0.7 and the training mean gets none; the test
    mean is that mixture of the members' test means."""
    f, sel = fitted
    base = sel.results[sel.label]
    Y = f.views[1]
    g = torch.Generator().manual_seed(0)
    A = torch.randn(Y.shape, generator=g, dtype=Y.dtype)
    B = (Y - 0.3 * A) / 0.7
    tA, tB = (torch.randn(base.prediction.mean.shape, generator=g, dtype=Y.dtype) for _ in range(2))
    members = {"a": _member(base, A, tA), "b": _member(base, B, tB)}
    sp = stacked_prediction(f, members, include_mean=True)
    assert sp.weights["a"] == pytest.approx(0.3, abs=1e-5)
    assert sp.weights["b"] == pytest.approx(0.7, abs=1e-5)
    assert sp.weights[TRAINING_MEAN] == pytest.approx(0.0, abs=1e-5)
    assert len(sp.fold_weights) == len(holdout_folds(f))
    for fw in sp.fold_weights:
        assert fw["a"] == pytest.approx(0.3, abs=1e-5) and fw["b"] == pytest.approx(0.7, abs=1e-5)
    torch.testing.assert_close(sp.holdout_mean, Y, atol=1e-4, rtol=0)
    torch.testing.assert_close(sp.prediction.mean, 0.3 * tA + 0.7 * tB, atol=1e-4, rtol=0)


def test_stack_variance_is_the_moment_matched_mixture_plus_its_delta(fitted):
    f, sel = fitted
    sp = stacked_prediction(f, sel.results, include_mean=False)
    labs = list(sel.results)
    w = [sp.weights[k] for k in labs]
    m = torch.stack([sel.results[k].prediction.mean for k in labs])
    v = torch.stack([sel.results[k].prediction.var - sel.results[k].delta for k in labs])
    wt = torch.tensor(w, dtype=m.dtype)[:, None, None]
    mean = (wt * m).sum(0)
    torch.testing.assert_close(sp.prediction.mean, mean)
    torch.testing.assert_close(sp.prediction.var, ((wt * (v + m * m)).sum(0) - mean ** 2).clamp_min(0) + sp.delta)
    # δ makes the mean held-out variance match the mean held-out squared error (where δ > 0)
    Y = f.views[1]
    err = ((Y - sp.holdout_mean) ** 2).mean(0)
    pos = sp.delta > 0
    torch.testing.assert_close((sp.holdout_var + sp.delta).mean(0)[pos], err[pos])


def test_stack_is_no_worse_than_its_best_member_on_heldout_frames(fitted):
    """In-sample the overall weights can only improve on the best member (a one-hot weight is
    feasible); cross-validated (weights from the other folds) it stays within noise of it."""
    f, sel = fitted
    Y = f.views[1]
    for include_mean in (False, True):
        sp = stacked_prediction(f, sel.results, include_mean=include_mean)
        labs = [k for k in sp.weights if k != TRAINING_MEAN]
        mix = sum(sp.weights[k] * sel.results[k].holdout_mean for k in labs)
        if include_mean:            # the training mean's held-out member: the mean of the other folds
            hm = torch.empty_like(Y)
            for fold in holdout_folds(f):
                other = torch.ones(Y.shape[0], dtype=torch.bool)
                other[fold] = False
                hm[fold] = Y[other].mean(0)
            mix = mix + sp.weights[TRAINING_MEAN] * hm
        best = min(sel.scores.values())
        in_sample = float(((Y - mix) ** 2).mean())
        assert in_sample <= best + 1e-10
        cv = float(((Y - sp.holdout_mean) ** 2).mean())
        assert cv <= 1.1 * best


def test_stacked_prediction_rejects_bad_members(fitted):
    f, sel = fitted
    with pytest.raises(ValueError, match="members"):
        stacked_prediction(f, {})
    with pytest.raises(ValueError, match="members"):
        stacked_prediction(f, {"x": 1.0})
    with pytest.raises(ValueError, match="taken"):
        stacked_prediction(f, {TRAINING_MEAN: sel.result})
    cp = sel.result
    short = CalibratedPrediction(cp.prediction, cp.holdout_mean[:-1], cp.holdout_var[:-1], cp.delta)
    with pytest.raises(ValueError, match="do not match"):
        stacked_prediction(f, {"a": cp, "b": short})
    assert set(TANDEM_CANDIDATES) <= set(sel.results)


def test_stacked_predictor_is_stacking_of_every_stack_candidate_and_mcgpds_predict_uses_it():
    from tandem.inference.mcgpds import McGPDS
    from tandem.inference.mcgpds.predictor import TANDEM_STACK_CANDIDATES, stacked_predictor
    train, test, t, tt = two_view_split(seed=2)
    est = McGPDS(Q=2, M=12, seed=0, fixed=("alpha", "eps", "beta", "time", "W"), **SHORT).fit(train, times=t)
    f = est.fitted_
    zs = est.scalers_[0].transform(torch.as_tensor(test[0]))
    sp = stacked_predictor(f, zs, tt, test_iters=3)
    assert set(sp.members) == set(TANDEM_STACK_CANDIDATES) and len(TANDEM_STACK_CANDIDATES) == 12
    assert sp.weights.keys() == set(TANDEM_STACK_CANDIDATES) | {TRAINING_MEAN}
    # a candidate's own features are used: the raw-feature members differ from their std twins
    assert not torch.equal(sp.members["raw features, source-space 1-NN"].holdout_mean,
                           sp.members["std features, source-space 1-NN"].holdout_mean)
    again = stacked_prediction(f, sp.members, include_mean=True)
    torch.testing.assert_close(again.prediction.mean, sp.prediction.mean)
    pred = est.predict(test[0], tt, method="stacked", test_iters=3)
    st = est.scalers_[1]
    np.testing.assert_allclose(pred.mean, st.inverse(sp.prediction.mean).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pred.var, st.inverse_var(sp.prediction.var).numpy(), rtol=1e-10, atol=1e-12)
