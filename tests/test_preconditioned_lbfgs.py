"""L-BFGS with a per-parameter preconditioner (inference.preconditioned_lbfgs, LBFGS(preconditioner=)):
it is plain L-BFGS on θ = θ₀ + P ν, whitening a Gaussian prior reaches a closed-form optimum that
plain L-BFGS does not reach in the same iterations, and the driver wires it in (identity = plain
bit for bit, checkpoint/resume exact, bad factors raise)."""
import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

from tandem.inference import LBFGS, fit
from tandem.inference.preconditioned_lbfgs import PreconditionedLBFGS


class Dense:
    """P as a dense matrix on a flat parameter."""

    def __init__(self, P):
        self.P = P

    def apply(self, v):
        return (self.P @ v.reshape(-1)).reshape(v.shape)

    def apply_t(self, v):
        return (self.P.T @ v.reshape(-1)).reshape(v.shape)


class Truncating:
    """Not shape-preserving: a broken factor."""

    def apply(self, v):
        return v[:3]

    def apply_t(self, v):
        return v[:3]


def _objective(theta, W, c, H):
    """A smooth, non-quadratic test function: Σ softplus(Wθ − c) + ½ θᵀHθ."""
    return torch.nn.functional.softplus(W @ theta - c).sum() + 0.5 * theta @ H @ theta


def test_preconditioned_iterates_are_plain_lbfgs_on_the_whitened_variable():
    g = torch.Generator().manual_seed(0)
    n = 12
    W = torch.randn(20, n, generator=g, dtype=torch.float64)
    c = torch.randn(20, generator=g, dtype=torch.float64)
    H = torch.eye(n, dtype=torch.float64) * 0.3
    P = torch.tril(torch.randn(n, n, generator=g, dtype=torch.float64)) * 0.3 + 2 * torch.eye(n, dtype=torch.float64)
    theta0 = torch.randn(n, generator=g, dtype=torch.float64)
    kw = dict(max_iter=15, history_size=5, line_search_fn="strong_wolfe")

    theta = theta0.clone().requires_grad_()
    opt = PreconditionedLBFGS([theta], [Dense(P)], **kw)

    def closure():
        opt.zero_grad()
        f = _objective(theta, W, c, H)
        f.backward()
        return f

    opt.step(closure)

    nu = torch.zeros(n, dtype=torch.float64, requires_grad=True)
    ref = torch.optim.LBFGS([nu], **kw)

    def closure_nu():
        ref.zero_grad()
        f = _objective(theta0 + P @ nu, W, c, H)
        f.backward()
        return f

    ref.step(closure_nu)
    assert opt.state[theta]["n_iter"] == ref.state[nu]["n_iter"] > 3
    torch.testing.assert_close(theta.detach(), theta0 + P @ nu.detach(), rtol=0, atol=1e-10)


def _gp_problem(n=200):
    """½ θᵀK⁻¹θ + ½ β ‖θ − y‖² with K an RBF Gram matrix on a dense grid (condition ≈ 10⁶):
    the optimum is θ* = (K⁻¹ + βI)⁻¹ β y = K (K + I/β)⁻¹ y."""
    t = torch.linspace(0, 1, n, dtype=torch.float64)
    K = torch.exp(-0.5 * (t[:, None] - t[None]) ** 2 / 0.1 ** 2) + 1e-6 * torch.eye(n, dtype=torch.float64)
    L = torch.linalg.cholesky(K)
    y = torch.sin(6 * t) + 0.1 * torch.randn(n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    beta = 10.0
    star = K @ torch.linalg.solve(K + torch.eye(n, dtype=torch.float64) / beta, y)

    def f(theta):
        a = torch.cholesky_solve(theta[:, None], L)[:, 0]
        return 0.5 * theta @ a + 0.5 * beta * ((theta - y) ** 2).sum()

    return f, L, star


@pytest.mark.parametrize("whiten", [False, True])
def test_whitening_the_prior_reaches_the_closed_form_optimum(whiten):
    f, L, star = _gp_problem()
    theta = torch.zeros_like(star, requires_grad=True)
    kw = dict(max_iter=80, history_size=10, line_search_fn="strong_wolfe", tolerance_grad=0.0, tolerance_change=0.0)
    opt = PreconditionedLBFGS([theta], [Dense(L)], **kw) if whiten else torch.optim.LBFGS([theta], **kw)

    def closure():
        opt.zero_grad()
        v = f(theta)
        v.backward()
        return v

    opt.step(closure)
    err = float((theta.detach() - star).abs().max() / star.abs().max())
    # measured: 1.1e-5 whitened (in ν the Hessian is I + β LᵀL, condition ≈ 500), 0.067 plain (the
    # prior's spectrum, condition ≈ 10⁶, defeats 10 curvature pairs: 0.060 after 40 iterations)
    if whiten:
        assert err < 1e-4
    else:
        assert err > 1e-2


# ------------------------------------------------------------------ the driver
def _model(y):
    pass


def _guide(y):
    pass


def _loss(model, guide, y):
    """−log N(y | θ, I) − log N(θ | 0, K) up to constants, θ = pyro.param("theta")."""
    theta = pyro.param("theta", lambda: torch.zeros_like(y))
    s = pyro.param("s", lambda: torch.tensor(1.0, dtype=y.dtype), constraint=dist.constraints.positive)
    K = _K(len(y))
    return 0.5 * ((y - theta) ** 2).sum() / s + 0.5 * len(y) * torch.log(s) + \
        0.5 * theta @ torch.linalg.solve(K, theta)


_loss.deterministic = True


def _K(n):
    t = torch.linspace(0, 1, n, dtype=torch.float64)
    return torch.exp(-0.5 * (t[:, None] - t[None]) ** 2 / 0.2 ** 2) + 1e-4 * torch.eye(n, dtype=torch.float64)


@pytest.fixture
def y():
    return torch.cos(3 * torch.linspace(0, 1, 30, dtype=torch.float64)) + 0.05 * torch.randn(
        30, generator=torch.Generator().manual_seed(2), dtype=torch.float64)


def test_identity_preconditioner_is_plain_lbfgs_bit_for_bit(y):
    plain = fit(_model, _guide, y, loss=_loss, optim=LBFGS(max_iter=5), num_steps=3, progress=False)
    seen = []

    def none(names):
        seen.append(list(names))
        return {}

    same = fit(_model, _guide, y, loss=_loss, optim=LBFGS(max_iter=5, preconditioner=none), num_steps=3,
               progress=False)
    assert seen == [["s", "theta"]]                  # called once per fit, with the sorted names
    np.testing.assert_array_equal(plain.losses, same.losses)
    for k in plain.params:
        assert torch.equal(plain.params[k], same.params[k])


def test_preconditioned_fit_resumes_exactly(y, tmp_path):
    L = torch.linalg.cholesky(_K(len(y)))
    optim = LBFGS(max_iter=3, preconditioner=lambda names: {"theta": Dense(L)})
    full = fit(_model, _guide, y, loss=_loss, optim=optim, num_steps=6, seed=3, progress=False)
    ckpt = tmp_path / "run.ckpt"
    fit(_model, _guide, y, loss=_loss, optim=optim, num_steps=3, seed=3, progress=False, checkpoint=ckpt,
        checkpoint_every=3)
    pyro.clear_param_store()
    resumed = fit(_model, _guide, y, loss=_loss, optim=optim, num_steps=6, seed=3, progress=False,
                  checkpoint=ckpt, checkpoint_every=3)
    assert resumed.resumed_from == 3
    np.testing.assert_allclose(resumed.losses, full.losses, rtol=0, atol=1e-12)
    for k in full.params:
        torch.testing.assert_close(resumed.params[k], full.params[k], rtol=0, atol=1e-12)
    assert math.isfinite(full.losses[-1]) and full.losses[-1] < full.losses[0]


@pytest.mark.parametrize("pre, match", [
    (lambda names: {"nope": None}, r"factors for \['nope'\], which are not parameters of this fit"),
    (lambda names: [("theta", None)], "expected it to return a dict"),
    (lambda names: {"theta": "P"}, "not a ParamFactor"),
    (lambda names: {"theta": Truncating()}, "keep its parameter's shape"),
])
def test_bad_preconditioners_raise_naming_the_problem(y, pre, match):
    with pytest.raises(ValueError, match=match):
        fit(_model, _guide, y, loss=_loss, optim=LBFGS(max_iter=2, preconditioner=pre), num_steps=1,
            progress=False)


def test_factor_list_must_match_the_parameters():
    p = torch.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="2 factors for 1 parameters"):
        PreconditionedLBFGS([p], [None, None])
