"""Twin GPs: the second audit's findings (divergence limits, β-invariant stopping, extreme units,
CV input checks).

* Sharma–Mittal's α = 1 limit has the right sign, and every limit branch of the divergences is
  continuous (checked against mpmath at high precision).
* SMTGP's ``form="sm"`` (the paper's L′, what the regressor runs) reaches the log-form minimiser
  for every β: β changes the optimisation path, not where it stops.
* Standardizer (hence TwinGPRegressor) is scale-safe beyond 1e±154.
* CV: non-finite / non-numeric metric values, ``neighbors`` > N, too few rows for the folds
  are errors naming the parameter.
"""
import math
import warnings

import mpmath
import numpy as np
import pytest
import torch

from tandem.inference.distances import Standardizer
from tandem.inference.twin_gp import TwinGP, TwinGPRegressor
from tandem.inference.twin_gp.certainty import smtgp_det_objective
from tandem.inference.twin_gp.divergences import kl_divergence, log_chernoff_coefficient, renyi, sharma_mittal, tsallis

D = torch.float64


# -- finding 1: the divergences' limit branches ------------------------------------------

def _pair():
    """Two 2-d Gaussians with unequal means and non-commuting covariances."""
    mp = torch.tensor([0.3, -0.2], dtype=D)
    Sp = torch.tensor([[1.0, 0.3], [0.3, 0.8]], dtype=D)
    mq = torch.tensor([1.0, 0.4], dtype=D)
    Sq = torch.tensor([[2.0, -0.4], [-0.4, 1.5]], dtype=D)
    return mp, Sp, mq, Sq


def _mp_log_c(alpha, pair):
    """log c_α = log ∫p^α q^{1−α} in mpmath (60 digits), from the same closed form."""
    mp, Sp, mq, Sq = (mpmath.matrix(t.tolist()) for t in pair)
    a = mpmath.mpf(alpha)
    M = (1 - a) * Sp + a * Sq
    d = mp - mq
    maha = (d.T * mpmath.inverse(M) * d)[0]
    return (((1 - a) * mpmath.log(mpmath.det(Sp)) + a * mpmath.log(mpmath.det(Sq)) - mpmath.log(mpmath.det(M))) / 2
            - a * (1 - a) * maha / 2)


def _mp_sm(alpha, beta, pair):
    a, b = mpmath.mpf(alpha), mpmath.mpf(beta)
    return mpmath.expm1((1 - b) / (1 - a) * _mp_log_c(a, pair)) / (b - 1)


def test_sharma_mittal_alpha_one_limit_matches_mpmath_and_the_nearby_alpha():
    pair = _pair()
    with mpmath.workdps(60):
        kl = -_mp_log_c(1 - mpmath.mpf(10) ** -40, pair) / mpmath.mpf(10) ** -40   # log c_α ≈ −(1−α) KL
        assert float(kl) == pytest.approx(kl_divergence(*pair).item(), rel=1e-12)
        for beta in (0.5, 0.99, 1.5, -2.0, 5.0):
            want = float(_mp_sm(1 - mpmath.mpf(10) ** -40, beta, pair))        # the α → 1 limit itself
            got = sharma_mittal(*pair, 1.0, beta).item()
            assert got == pytest.approx(want, rel=1e-12), beta
            assert got == pytest.approx(float(math.expm1((beta - 1) * float(kl)) / (beta - 1)), rel=1e-12)
            # continuity: α = 1 − 1e-7 is within the O(1 − α) slope (and cancellation) of the limit
            assert sharma_mittal(*pair, 1 - 1e-7, beta).item() == pytest.approx(got, rel=1e-5), beta
    # the audit's 1-d case: 0.318207..., not −0.378...
    z, o, eye = torch.zeros(1, dtype=D), torch.ones(1, dtype=D), torch.eye(1, dtype=D)
    assert sharma_mittal(z, eye, o, 2 * eye, 1.0, 0.5).item() == pytest.approx(0.3182071694925709, rel=1e-12)


@pytest.mark.parametrize("alpha", [1e-6, 0.1, 0.5, 0.9, 1 - 1e-6])
@pytest.mark.parametrize("beta", [0.5, 0.99, 1.5, -3.0])
def test_sharma_mittal_matches_mpmath(alpha, beta):
    pair = _pair()
    with mpmath.workdps(60):
        want = float(_mp_sm(alpha, beta, pair))
    # log c_α is a difference of O(1) log-determinants worth O(α(1−α)): relative accuracy ~ ε/α(1−α)
    tol = 1e-12 / (alpha * (1 - alpha))
    assert sharma_mittal(*pair, alpha, beta).item() == pytest.approx(want, rel=max(tol, 1e-11))


@pytest.mark.parametrize("alpha", [0.2, 0.7])
def test_every_limit_branch_is_continuous(alpha):
    pair = _pair()
    sm = lambda a, b: sharma_mittal(*pair, a, b).item()  # noqa: E731
    # β → 1: Rényi (the β = 1 branch), from both sides
    r = renyi(*pair, alpha).item()
    assert sm(alpha, 1.0) == pytest.approx(r, rel=1e-14)
    for eps in (1e-7, -1e-7):
        assert sm(alpha, 1 + eps) == pytest.approx(r, rel=1e-6)
    with mpmath.workdps(60):
        assert r == pytest.approx(float(_mp_log_c(alpha, pair) / (alpha - 1)), rel=1e-12)
        # β → α: Tsallis
        t = float(mpmath.expm1(_mp_log_c(alpha, pair)) / (alpha - 1))
    assert tsallis(*pair, alpha).item() == pytest.approx(t, rel=1e-12)
    assert sm(alpha, alpha) == pytest.approx(t, rel=1e-12)
    assert sm(alpha, alpha + 1e-8) == pytest.approx(t, rel=1e-6)
    # α → 1 with β = 1: KL
    assert sm(1.0, 1.0) == pytest.approx(kl_divergence(*pair).item(), rel=1e-14)
    assert sm(1 - 1e-7, 1.0) == pytest.approx(sm(1.0, 1.0), rel=1e-5)
    # α → 0: log c_0 = 0 exactly, and D_{α,β} → 0 linearly
    assert log_chernoff_coefficient(*pair, 0.0).item() == pytest.approx(0.0, abs=1e-15)
    for b in (0.5, 1.0, 1.5):
        assert abs(sm(1e-9, b)) < 1e-8


def test_smtgp_det_objective_at_alpha_one_is_the_limit():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (15, 2))
    Y = np.c_[np.sin(2 * X[:, 0]), X[:, 1]]
    m = TwinGP(X, Y, 0.8, 0.8, 1e-2)
    Xt, yt = X[:3] + 0.05, torch.as_tensor(Y[:3] + 0.1)
    for beta in (0.5, 1.5):
        at_one = smtgp_det_objective(m, Xt, yt, 1.0, beta)
        near = smtgp_det_objective(m, Xt, yt, 1 - 1e-9, beta)
        assert torch.isfinite(at_one).all()
        torch.testing.assert_close(at_one, near, rtol=1e-5, atol=0)


# -- findings 4, 5, 6, 9: the regressor's CV and its inputs -------------------------------

def _small(n=30, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 2))
    return X, np.c_[np.sin(3 * X[:, 0]), X[:, 1]]


_FAST = dict(rho_mult_x=(0.5, 1.0), rho_mult_y=(0.5,), lam_grid=(1e-2,), folds=3, ensemble=1)


def _mae(p, t):
    return float(np.mean(np.abs(np.asarray(p) - np.asarray(t))))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "0.1", np.array([0.1, 0.2])])
def test_cv_refuses_a_metric_value_that_is_not_a_finite_number(bad):
    X, Y = _small()
    calls = []

    def metric(p, t):  # the second setting's folds go wrong
        calls.append(1)
        return bad if len(calls) % 2 == 0 else _mae(p, t)
    with pytest.raises(ValueError, match=r"^metric .*setting \(rho_x, rho_y, lam\)"):
        TwinGPRegressor("KLTGP", metric=metric, **_FAST).fit(X, Y)
    calls.clear()  # (α, β) CV: α = 0 (KLTGP) is scored first on each fold, then (0.5, 0.99)
    with pytest.raises(ValueError, match=r"^metric .*setting \(alpha, beta\) = \(0\.5, 0\.99\)"):
        TwinGPRegressor("SMTGP", rho_x=0.8, rho_y=0.8, lam=1e-2, alphas=(0.0, 0.5), betas=(0.99,), folds=3,
                        metric=metric).fit(X, Y)


def test_cv_with_an_all_nan_metric_is_an_error_not_the_first_grid_point():
    X, Y = _small()
    with pytest.raises(ValueError, match="^metric"):
        TwinGPRegressor("KLTGP", metric=lambda p, t: float("nan"), **_FAST).fit(X, Y)


def test_cv_metric_numpy_and_tensor_scalars_still_work():
    X, Y = _small()
    a = TwinGPRegressor("KLTGP", metric=lambda p, t: np.float32(_mae(p, t)), **_FAST).fit(X, Y)
    b = TwinGPRegressor("KLTGP", metric=lambda p, t: torch.tensor(_mae(p, t)), **_FAST).fit(X, Y)
    assert a.settings_ == b.settings_


def test_near_ties_refuses_non_finite_scores():
    from tandem.inference.twin_gp.ensemble import near_ties
    with pytest.raises(ValueError, match="^scores: expected finite"):
        near_ties({"a": [0.1, 0.2], "b": [float("nan"), 0.1]})


def test_neighbors_above_n_is_refused_by_fit():
    X, Y = _small()
    with pytest.raises(ValueError, match=r"^neighbors: expected at most N = 30 .*got 100"):
        TwinGPRegressor("KLTGP", rho_x=.8, rho_y=.8, lam=1e-2, neighbors=100).fit(X, Y)
    TwinGPRegressor("KLTGP", rho_x=.8, rho_y=.8, lam=1e-2, neighbors=30).fit(X, Y).predict(X[:2])


@pytest.mark.parametrize("n, kw, match", [
    (3, dict(folds=2), r"^folds / cv_subset: .*training fold holds 1 row"),
    (12, dict(cv_subset=2, folds=2), r"^folds / cv_subset: cv_subset=2 of N=12 .*holds 1 row"),
    (12, dict(cv_subset=3), r"^folds: cv_subset=3 of N=12 training rows gives 3 CV rows, too few for folds=5"),
])
def test_cv_sizes_are_checked_up_front_naming_folds_and_cv_subset(n, kw, match):
    X, Y = _small()
    with pytest.raises(ValueError, match=match):
        TwinGPRegressor("KLTGP", **kw).fit(X[:n], Y[:n])
    # nothing cross-validated: the same sizes are fine
    TwinGPRegressor("KLTGP", rho_x=.8, rho_y=.8, lam=1e-2, **kw).fit(X[:n], Y[:n])


def test_return_info_must_be_a_bool():
    X, Y = _small()
    r = TwinGPRegressor("KLTGP", rho_x=.8, rho_y=.8, lam=1e-2).fit(X, Y)
    with pytest.raises(ValueError, match="^return_info: expected True or False"):
        r.predict(X[:2], return_info="no")
    assert isinstance(r.predict(X[:2], return_info=np.bool_(False)), np.ndarray)


def test_beta_is_none_at_the_alpha_endpoints_and_one_d_y_true():
    X, Y = _small()
    r = TwinGPRegressor("SMTGP", rho_x=.8, rho_y=.8, lam=1e-2, alphas=(0.0,), folds=3).fit(X, Y[:, 0])
    assert r.alpha_ == 0.0 and r.beta_ is None
    r2 = TwinGPRegressor("SMTGP", rho_x=.8, rho_y=.8, lam=1e-2, alpha=0.5).fit(X, Y[:, 0])
    assert r2.beta_ == 0.99
    idata = r.to_inference_data(X[:4], Y[:4, 0], num_samples=5)      # a 1-d Y_true, as fit took a 1-d Y
    assert idata["log_likelihood"]["y"].shape[-1] == 4
    with pytest.raises(ValueError, match="^Y_true"):
        r.to_inference_data(X[:4], Y[:3, 0], num_samples=5)


# -- finding 3: extreme units ------------------------------------------------------------

@pytest.mark.parametrize("c", [1e-200, 1e-160, 1e160, 1e300])
@pytest.mark.parametrize("as_t", [False, True])
@pytest.mark.parametrize("per", ["column", "matrix"])
def test_standardizer_is_scale_safe(c, as_t, per):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3)) + [0.0, 5.0, -1.0]
    X[:, 2] = 0.25                                                   # a constant column stays constant
    for Xm in (X, np.where(rng.random(X.shape) < 0.2, np.nan, X)):  # also with missing entries
        s0 = Standardizer(Xm, per=per)
        with warnings.catch_warnings():
            warnings.simplefilter("error")                           # no overflow warnings either
            s1 = Standardizer(torch.as_tensor(Xm * c) if as_t else Xm * c, per=per)
        np.testing.assert_allclose(np.asarray(s1.scale)[:2] / c, np.asarray(s0.scale)[:2], rtol=1e-14)
        np.testing.assert_allclose(np.asarray(s1.mean) / c, np.asarray(s0.mean), rtol=1e-14)
        if per == "column":
            assert float(np.asarray(s1.scale)[2]) == 1.0


@pytest.mark.parametrize("cx, cy", [(1.0, 1e160), (1e-200, 1.0), (1e160, 1.0), (1.0, 1e-200)])
def test_regressor_predicts_the_same_in_extreme_units(cx, cy):
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(12, 2))
    Y = np.c_[np.sin(3 * X[:, 0]), X[:, 1]]
    kw = dict(rho_x=0.8, rho_y=0.8, lam=1e-2)
    p = TwinGPRegressor("KLTGP", **kw).fit(X, Y).predict(X[:3])
    q = TwinGPRegressor("KLTGP", **kw).fit(X * cx, Y * cy).predict(X[:3] * cx) / cy
    assert not np.allclose(q, q[0])                                  # not every row the same
    np.testing.assert_allclose(q, p, atol=1e-12)


# -- finding 2: form="sm" stops at the log form's minimiser for every β ---------------------

@pytest.fixture(scope="module")
def toy1_model():
    from tandem.models.twin_gp import simulate
    d = simulate(1, seed=0)
    m = TwinGP(d["X_train"][:120], d["Y_train"][:120], 0.1, 0.2, 1e-3)
    Xt = d["X_test"][::10]
    return m, Xt, m.predict(Xt, "KLTGP")


def _log_excess(m, Xt, a, y):
    """Largest relative excess of the log-form objective at y over its minimum reached from y
    (tight tolerances)."""
    ctx = m.context(Xt, "SMTGP", a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (at gtol = 1e-12 some points stop on rounding)
        ylog = m.predict(Xt, "SMTGP", alpha=a, init=y, form="log", max_iter=1000, gtol=1e-12)
    f, f0 = m.objective(y, ctx), m.objective(ylog, ctx)
    return ((f - f0) / f0.abs().clamp_min(1.0)).max().item()


@pytest.mark.parametrize("a, b", [(0.5, 1 + 1e-9), (0.5, 1 - 1e-6), (0.5, 50.0), (0.999, 1.5), (0.9, 5.0)])
def test_sm_form_reaches_the_log_form_minimiser_for_every_beta(toy1_model, a, b):
    # the old code: relative excess 0.11, 1e-3, 0.09, 3.9 and ~1, every point "converged", no warning
    m, Xt, init = toy1_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a point at a kink of the λ floor may stop, flagged, as in the log form)
        y = m.predict(Xt, "SMTGP", alpha=a, beta=b, init=init, form="sm")
        ylog = m.predict(Xt, "SMTGP", alpha=a, init=init, form="log")
    # as close as the log form's own run gets (at α = 0.999 that is ~2e-6: ℓ_α is ill-conditioned there)
    assert _log_excess(m, Xt, a, y) <= max(1e-6, 5 * _log_excess(m, Xt, a, ylog))


def test_sm_form_guard_leaves_the_default_grid_alone(toy1_model, monkeypatch):
    # on ordinary data the paper's grid never reaches the guard: the same bits as L′ alone
    from tandem.inference.twin_gp import sm_finish
    m, Xt, init = toy1_model
    runs = [(a, b) for a in (0.1, 0.5, 0.9) for b in (0.99, 0.5, 1.5)]
    now = [m.predict(Xt, "SMTGP", alpha=a, beta=b, init=init, form="sm") for a, b in runs]
    monkeypatch.setattr(sm_finish, "_SM_MIN_SLOPE", 0.0)
    monkeypatch.setattr(sm_finish, "_SM_MIN_RATE", 0.0)
    for (a, b), y in zip(runs, now):
        assert torch.equal(y, m.predict(Xt, "SMTGP", alpha=a, beta=b, init=init, form="sm")), (a, b)
    # ... while without it a large β stops far from the minimiser, reporting convergence
    y, info = m.predict(Xt, "SMTGP", alpha=0.999, beta=1.5, init=init, form="sm", return_info=True)
    assert bool(info.converged.all()) and _log_excess(m, Xt, 0.999, y) > 1e-3


def test_regressor_with_beta_near_one_predicts_at_the_minimiser():
    X, Y = _small(60)
    kw = dict(rho_x=0.3, rho_y=0.5, lam=1e-3, alpha=0.5)
    r = TwinGPRegressor("SMTGP", beta=1 + 1e-9, **kw).fit(X, Y)
    Xt = X[:10] + 0.03
    p, info = r.predict(Xt, return_info=True)
    assert bool(info.converged.all())
    Zt = r.sx_.transform(torch.as_tensor(Xt))
    m = r.model_
    assert _log_excess(m, Zt, 0.5, r.sy_.transform(torch.as_tensor(p))) <= 1e-6
