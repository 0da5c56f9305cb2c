"""Gaussian divergences (tandem.inference.twin_gp.divergences) against quadrature and their limits."""
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from tandem.inference.twin_gp.divergences import (
    bhattacharyya,
    kl_divergence,
    log_chernoff_coefficient,
    renyi,
    sharma_mittal,
    tsallis,
)


def _rand_gauss(n, seed):
    g = np.random.default_rng(seed)
    A = g.normal(size=(n, n))
    return g.normal(size=n), A @ A.T / n + 0.5 * np.eye(n)


@pytest.mark.parametrize("alpha", [0.2, 0.5, 0.8])
def test_chernoff_1d_quadrature(alpha):
    mp, Sp = _rand_gauss(1, 0)
    mq, Sq = _rand_gauss(1, 1)
    p = stats.norm(mp[0], math.sqrt(Sp[0, 0]))
    q = stats.norm(mq[0], math.sqrt(Sq[0, 0]))
    val, _ = integrate.quad(lambda x: p.pdf(x) ** alpha * q.pdf(x) ** (1 - alpha), -30, 30, epsabs=1e-13)
    got = log_chernoff_coefficient(mp, Sp, mq, Sq, alpha).item()
    assert got == pytest.approx(math.log(val), abs=1e-9)
    for beta in (0.5, 1.5, 3.0):
        sm = (val ** ((1 - beta) / (1 - alpha)) - 1) / (beta - 1)
        assert sharma_mittal(mp, Sp, mq, Sq, alpha, beta).item() == pytest.approx(sm, rel=1e-8)


def test_sharma_mittal_2d_quadrature():
    mp, Sp = _rand_gauss(2, 2)
    mq, Sq = _rand_gauss(2, 3)
    alpha, beta = 0.3, 0.7
    g = np.linspace(-12, 12, 801)
    xx, yy = np.meshgrid(g, g, indexing="ij")
    pts = np.stack([xx, yy], -1)
    lp = stats.multivariate_normal(mp, Sp).logpdf(pts)
    lq = stats.multivariate_normal(mq, Sq).logpdf(pts)
    integrand = np.exp(alpha * lp + (1 - alpha) * lq)
    c = integrate.trapezoid(integrate.trapezoid(integrand, g, axis=1), g)
    sm = (c ** ((1 - beta) / (1 - alpha)) - 1) / (beta - 1)
    assert sharma_mittal(mp, Sp, mq, Sq, alpha, beta).item() == pytest.approx(sm, rel=1e-6)
    kl_q = integrate.trapezoid(integrate.trapezoid(np.exp(lp) * (lp - lq), g, axis=1), g)
    assert kl_divergence(mp, Sp, mq, Sq).item() == pytest.approx(kl_q, rel=1e-6)


def test_limits():
    mp, Sp = _rand_gauss(4, 4)
    mq, Sq = _rand_gauss(4, 5)
    a = 0.4
    eps = 1e-7
    # β → 1: Rényi
    assert sharma_mittal(mp, Sp, mq, Sq, a, 1 + eps).item() == pytest.approx(renyi(mp, Sp, mq, Sq, a).item(), rel=1e-5)
    assert sharma_mittal(mp, Sp, mq, Sq, a, 1.0).item() == pytest.approx(renyi(mp, Sp, mq, Sq, a).item(), rel=1e-12)
    # β → α: Tsallis (exactly equal at β = α)
    assert sharma_mittal(mp, Sp, mq, Sq, a, a).item() == pytest.approx(tsallis(mp, Sp, mq, Sq, a).item(), rel=1e-12)
    # α, β → 1: KL
    kl = kl_divergence(mp, Sp, mq, Sq).item()
    assert sharma_mittal(mp, Sp, mq, Sq, 1 - 1e-6, 1 - 1e-6).item() == pytest.approx(kl, rel=1e-4)
    assert renyi(mp, Sp, mq, Sq, 1 - 1e-6).item() == pytest.approx(kl, rel=1e-4)
    assert sharma_mittal(mp, Sp, mq, Sq, 1.0, 1.0).item() == pytest.approx(kl, rel=1e-12)
    # Bhattacharyya = ½ D_{½,1}
    half = 0.5 * sharma_mittal(mp, Sp, mq, Sq, 0.5, 1.0).item()
    assert bhattacharyya(mp, Sp, mq, Sq).item() == pytest.approx(half, rel=1e-12)
    # non-negative, zero for p = q
    assert sharma_mittal(mp, Sp, mq, Sq, a, 2.0).item() > 0
    assert abs(sharma_mittal(mp, Sp, mp, Sp, a, 2.0).item()) < 1e-12


def test_large_n_log_space_no_overflow():
    # log|Σ| ~ ±1000: the naive determinant ratio would overflow; the log form is finite
    n = 600
    Sp = torch.eye(n, dtype=torch.float64) * 5.0
    Sq = torch.eye(n, dtype=torch.float64) * 0.2
    mu = torch.zeros(n, dtype=torch.float64)
    lc = log_chernoff_coefficient(mu, Sp, mu, Sq, 0.5).item()
    assert lc == pytest.approx(0.5 * n * (0.5 * math.log(5) + 0.5 * math.log(0.2) - math.log(2.6)), rel=1e-10)
    d = sharma_mittal(mu, Sp, mu, Sq, 0.5, 0.5).item()
    assert math.isfinite(d) and d > 0


def test_bad_input():
    mp, Sp = _rand_gauss(2, 0)
    with pytest.raises(ValueError, match="alpha"):
        sharma_mittal(mp, Sp, mp, Sp, 1.5, 0.5)
    with pytest.raises(ValueError, match="dimension"):
        kl_divergence(mp, Sp, np.zeros(3), np.eye(3))
    with pytest.raises(ValueError, match="NaN"):
        renyi(np.array([np.nan, 0.0]), Sp, mp, Sp, 0.5)
