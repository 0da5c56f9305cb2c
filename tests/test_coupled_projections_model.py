"""Whitened GMRF model + tied linear-encoder guide (models/ and guides/coupled_projections.py):
SVI through the shared driver recovers the exact eigen-solution; ArviZ export."""
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import scipy.linalg as sla
import torch
from pyro.infer.autoguide import AutoNormal

from tandem.guides.coupled_projections import Guide, guide, optimal_scale
from tandem.inference import fit, posterior_predictive
from tandem.inference.coupled_projections.solver import CoupledProjections
from tandem.inference.datasets.coil20 import load_coil20
from tandem.models.coupled_projections import (
    DIMS,
    FrameNormal,
    dims,
    model,
    orthonormal,
    simulate,
    whiten,
    whitening_constant,
)


def _small_problem(ridge=0.0, seed=0):
    rng = np.random.default_rng(seed)
    n = 25
    lat = rng.standard_normal((n, 2))
    X = lat @ rng.standard_normal((2, 3)) + 0.3 * rng.standard_normal((n, 3))
    Y = lat @ rng.standard_normal((2, 3)) + 0.3 * rng.standard_normal((n, 3))
    known = rng.choice(n, 8, replace=False)
    cp = CoupledProjections(d=2, k=4, ridge=ridge).fit(X, Y, np.c_[known, known])
    w = whiten(cp)
    beta = 1.0 / float(np.linalg.eigvalsh(w.omega.numpy()).max())  # puts βΩ on a unit scale
    return cp, w, beta


@pytest.mark.parametrize("ridge", [0.0, 0.05])
def test_whitening_is_exact_and_eigenspace_matches_solver(ridge):
    cp, w, _ = _small_problem(ridge)
    Zh = w.zhat.numpy()
    D = Zh.shape[1]
    assert np.allclose(Zh.T @ Zh, np.eye(D), atol=1e-12)  # Ẑ Ẑᵀ = I (ridge as pseudo-points)
    assert Zh.shape[0] == 50 + (D if ridge else 0)
    Ahat = Zh.T @ w.omega.numpy() @ Zh
    lam, V = np.linalg.eigh(Ahat)
    assert np.allclose(lam[:2], cp.eigenvalues, rtol=1e-9)
    assert sla.subspace_angles(V[:, :2], w.Q_eig).max() < 1e-8
    assert np.allclose(w.Q_eig.T @ w.Q_eig, np.eye(2), atol=1e-10)
    assert sla.subspace_angles(w.projection(w.Q_eig), cp.P).max() < 1e-10


def test_expected_reconstruction_does_not_depend_on_Q():
    """log p(Ẑ | U = Ẑ Q) is the same for every orthonormal Q (since Ẑ Ẑᵀ = I)."""
    _, w, _ = _small_problem()
    Zh = w.zhat
    vals = []
    for s in range(4):
        Q = orthonormal(torch.randn(Zh.shape[1], 2, dtype=Zh.dtype, generator=torch.Generator().manual_seed(s)))
        U = Zh @ Q
        vals.append(float(dist.Normal(U @ Q.T, 0.1).log_prob(Zh).sum()))
    assert np.allclose(vals, vals[0], rtol=1e-12)


def test_svi_subspace_matches_eigen_solution():
    cp, w, beta = _small_problem()
    sigma = 1e-5  # the guide's spread s ≈ σ sets the Monte Carlo noise of the Q-gradient
    args = (w.zhat, w.omega, 2, beta, 1e-3 * beta, sigma)
    res = fit(model, guide, *args, num_steps=600, seed=0, progress=False,
              optim=pyro.optim.Adam({"lr": 0.05}))
    Q = orthonormal(res.params["Q_raw"]).numpy()
    init = orthonormal(torch.randn(Q.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    angle_q = sla.subspace_angles(Q, w.Q_eig).max()
    angle_p = sla.subspace_angles(w.projection(Q), cp.P).max()
    assert angle_q < 1e-3 and angle_p < 1e-3, (angle_q, angle_p)
    assert sla.subspace_angles(init.numpy(), w.Q_eig).max() > 0.1  # it did have to move
    # the learned posterior spread is the ELBO-optimal closed form
    s_opt = optimal_scale(w.omega, beta, 1e-3 * beta, sigma)
    assert abs(float(res.params["s"]) / s_opt - 1) < 0.1


def test_posterior_latent_positions_to_arviz():
    cp, w, beta = _small_problem()
    args = (w.zhat, w.omega, 2, beta, 1e-3 * beta, 0.05)
    fit(model, guide, *args, num_steps=150, seed=1, progress=False, optim=pyro.optim.Adam({"lr": 0.05}))
    idata = posterior_predictive(model, guide, *args, num_samples=100, seed=0, dims=DIMS)
    U = idata.posterior["U"]
    assert U.dims == ("chain", "draw", "latent_dim", "point") and U.shape == (1, 100, 2, 50)
    assert idata.observed_data["zhat"].dims == ("point", "feature")
    assert "zhat" in idata.log_likelihood and "zhat" in idata.posterior_predictive
    Q = orthonormal(pyro.param("Q_raw")).detach()
    s = float(pyro.param("s").detach())
    mean = U.mean(("chain", "draw")).values
    assert np.allclose(mean, (w.zhat @ Q).T.numpy(), atol=5 * s / np.sqrt(100))
    assert abs(float(U.std(("chain", "draw")).mean()) / s - 1) < 0.1  # 100 draws × 100 values


def test_model_accepts_another_guide():
    """The model does not depend on its guide: AutoNormal runs through the same driver."""
    _, w, beta = _small_problem()
    res = fit(model, AutoNormal(model), w.zhat, w.omega, 2, beta, 1e-3 * beta, 0.1,
              num_steps=20, seed=0, progress=False)
    assert np.all(np.isfinite(res.losses))


def test_model_bad_input():
    _, w, beta = _small_problem()
    with pytest.raises(ValueError, match="omega"):
        model(w.zhat, w.omega[:5], 2)
    with pytest.raises(ValueError, match="sigma"):
        model(w.zhat, w.omega, 2, sigma=0.0)
    with pytest.raises(ValueError, match="d"):
        model(w.zhat, w.omega, 99)


# ------------------------------------------------------------------ the documented settings

def _documented_fit(w):
    """The usage the docs give: d = 2, β = 1, γ = 1e-3, σ = 1e-5, 800 Adam steps at lr 0.03."""
    args = (w.zhat, w.omega, 2, 1.0, 1e-3, 1e-5)
    res = fit(model, guide, *args, num_steps=800, optim=pyro.optim.Adam({"lr": 0.03}), progress=False)
    return res, w.projection(orthonormal(res.params["Q_raw"]))


def test_documented_settings_reach_the_exact_subspace_on_a_simulated_problem():
    sim = simulate(n=60, d=2, dx=6, dy=5, seed=3)
    known = np.arange(0, 60, 4)
    cp = CoupledProjections(d=2, k=4).fit(sim["X"], sim["Y"], np.c_[known, known])
    w = whiten(cp)
    res, P = _documented_fit(w)
    assert sla.subspace_angles(P, cp.P).max() < 1e-3
    # the loss carries no constant: it equals −ELBO of the tied guide in closed form
    Q = orthonormal(res.params["Q_raw"]).double()
    s = float(res.params["s"])
    assert abs(np.mean(res.losses[-100:]) / _neg_elbo(w, Q, s, 1.0, 1e-3, 1e-5) - 1) < 0.02
    assert abs(np.mean(res.losses[-100:])) < 1e4  # the dropped constant is ≈ 1e11 here


def _neg_elbo(w, Q, s, beta, gamma, sigma):
    """−ELBO of the tied guide q(U) = N(ẐQ, s²) without the whitening constant, in closed form:
    E log p(U) + E log N_d(Qᵀẑ_n; u_n, σ²) + H(q)."""
    Zh, Om = w.zhat.double(), w.omega.double()
    N, d = Zh.shape[0], Q.shape[1]
    Lam = beta * Om + gamma * torch.eye(N, dtype=Om.dtype)
    M = Zh @ Q
    prior = (-0.5 * torch.trace(M.T @ Lam @ M) - 0.5 * d * s ** 2 * torch.trace(Lam)
             - 0.5 * N * d * np.log(2 * np.pi) + 0.5 * d * torch.logdet(Lam))
    lik = N * d * (-0.5 * s ** 2 / sigma ** 2 - 0.5 * np.log(2 * np.pi * sigma ** 2))
    ent = N * d * 0.5 * np.log(2 * np.pi * np.e * s ** 2)
    return -float(prior + lik + ent)


def test_documented_settings_reach_the_exact_subspace_on_coil20():
    try:
        coil = load_coil20()
    except FileNotFoundError:
        pytest.skip("COIL-20 data not present")
    X, Y = coil.object(1), coil.object(2)
    known = np.arange(0, 72, 5)
    cp = CoupledProjections(d=2, k=4, pca=20).fit(X, Y, np.c_[known, known])
    _, P = _documented_fit(whiten(cp))
    assert sla.subspace_angles(P, cp.P).max() < 1e-3


def test_frame_normal_log_prob_is_the_gaussian_density():
    """FrameNormal's split log-density (frame part + residual) equals N(Q u_n, σ² I_D)."""
    g = torch.Generator().manual_seed(0)
    Q = orthonormal(torch.randn(6, 2, dtype=torch.float64, generator=g))
    U = torch.randn(2, 9, dtype=torch.float64, generator=g)
    z = torch.randn(9, 6, dtype=torch.float64, generator=g)
    ref = dist.Normal(U.T @ Q.T, 0.3).to_event(1).log_prob(z)
    assert torch.allclose(FrameNormal(Q, U, 0.3).log_prob(z), ref, rtol=1e-12)
    draws = FrameNormal(Q, U, 0.3).sample(torch.Size([4000]))
    assert torch.allclose(draws.mean(0), U.T @ Q.T, atol=0.03) and abs(float((draws - U.T @ Q.T).std()) - 0.3) < 0.01


def test_whitening_constant_is_the_dropped_part_of_the_likelihood():
    """For whitened data, Σ_n log N(ẑ_n; Q u_n, σ²) − Σ_n log N_d(Qᵀẑ_n; u_n, σ²) = C for every Q."""
    _, w, _ = _small_problem()
    Zh = w.zhat
    N, D = Zh.shape
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        Q = orthonormal(torch.randn(D, 2, dtype=Zh.dtype, generator=g))
        U = torch.randn(2, N, dtype=Zh.dtype, generator=g)
        full = float(dist.Normal(U.T @ Q.T, 0.1).to_event(1).log_prob(Zh).sum())
        frame_part = float(dist.Normal(U.T, 0.1).to_event(1).log_prob(Zh @ Q).sum())
        assert abs((full - frame_part) / whitening_constant(N, D, 2, 0.1) - 1) < 1e-10


def _q_grad(w, beta, seed, **guide_opts):
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    g = Guide(**guide_opts)
    args = (w.zhat, w.omega, 2, beta, 1e-3 * beta, 1e-5)
    # near the optimum, where the noise matters: the exact frame plus a 1e-3 perturbation
    pyro.param("Q_raw", torch.as_tensor(w.Q_eig) + 1e-3 * torch.randn(
        w.zhat.shape[1], 2, dtype=torch.float64, generator=torch.Generator().manual_seed(7)))
    loss = pyro.infer.Trace_ELBO().differentiable_loss(model, g, *args)
    q = pyro.param("Q_raw").unconstrained()
    return torch.autograd.grad(loss, q)[0]


def test_control_variate_removes_the_monte_carlo_noise_of_the_q_gradient():
    _, w, beta = _small_problem()
    with_cv = [_q_grad(w, beta, s) for s in range(3)]
    without = [_q_grad(w, beta, s, control_variate=False) for s in range(3)]
    spread = lambda gs: max(float((g - gs[0]).norm() / gs[0].norm()) for g in gs[1:])  # noqa: E731
    assert spread(without) > 1e-2 and spread(with_cv) < 1e-3 * spread(without)
    # unbiased: the average of the noisy gradients tends to the noise-free one
    noisy = torch.stack([_q_grad(w, beta, s, control_variate=False) for s in range(100)])
    se = noisy.std(0) / 10.0
    assert bool((noisy.mean(0) - with_cv[0]).abs().le(5 * se + 1e-12).all())


def test_preconditioned_gradient_is_a_descent_direction_that_vanishes_at_the_optimum():
    _, w, beta = _small_problem()
    args = (w.zhat, w.omega, 2, beta, 1e-3 * beta, 1e-5)

    def grad_at(q0, precondition):
        pyro.clear_param_store()
        pyro.param("Q_raw", q0.clone())
        loss = pyro.infer.Trace_ELBO().differentiable_loss(model, guide, *args[:-1], 1e-5, precondition)
        return torch.autograd.grad(loss, pyro.param("Q_raw").unconstrained())[0]

    q0 = torch.randn(w.zhat.shape[1], 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    g, h = grad_at(q0, False), grad_at(q0, True)
    assert float((g * h).sum()) > 0 and not torch.allclose(g / g.norm(), h / h.norm(), atol=1e-2)
    q_opt = torch.as_tensor(w.Q_eig)
    g0, h0 = grad_at(q_opt, False), grad_at(q_opt, True)
    assert float(g0.norm()) < 1e-6 * float(g.norm()) and float(h0.norm()) < 1e-6 * float(h.norm())


def test_model_rejects_data_that_is_not_whitened():
    _, w, beta = _small_problem()
    with pytest.raises(ValueError, match="zhat: expected whitened"):
        model(2.0 * w.zhat, w.omega, 2)


def test_dims_and_guide_options():
    assert dims() == DIMS == {"U": ["latent_dim", "point"], "zhat": ["point", "feature"]}
    with pytest.raises(ValueError, match="scale_init"):
        Guide(scale_init=-1.0)
    with pytest.raises(TypeError):
        Guide(0.1)  # options are keyword-only


def test_simulate_draws_a_smooth_shared_curve_that_the_solver_recovers():
    sim = simulate(n=80, d=2, dx=5, dy=4, noise=0.0, seed=0)
    U, X, Y = sim["latent"], sim["X"], sim["Y"]
    assert X.shape == (80, 5) and Y.shape == (80, 4) and U.shape == (80, 2)
    # "U" has the model site's layout (latent_dim, point): X's points, then Y's
    assert sim["U"].shape == (2, 160) and np.array_equal(sim["U"], np.hstack([U.T, U.T]))
    assert np.allclose(X, U @ sim["Ax"]) and np.allclose(Y, U @ sim["Ay"])
    # the latent curve is a draw of the chain GMRF N(0, (βL + γI)^{-1}), centred: Monte Carlo
    # covariance of one coordinate against H (βL + γI)^{-1} H (H the centring matrix)
    n, beta, gamma = 6, 2.0, 0.5
    draws = np.stack([simulate(n=n, d=1, dx=1, dy=1, beta=beta, gamma=gamma, seed=s)["latent"][:, 0]
                      for s in range(4000)])
    Lc = np.diag([1.0, 2, 2, 2, 2, 1]) - np.eye(n, k=1) - np.eye(n, k=-1)
    H = np.eye(n) - 1.0 / n
    C = H @ np.linalg.inv(beta * Lc + gamma * np.eye(n)) @ H
    assert np.abs(draws.T @ draws / len(draws) - C).max() < 0.06 * np.abs(C).max()
    known = np.arange(0, 80, 5)
    cp = CoupledProjections(d=2, k=4).fit(X, Y, np.c_[known, known])
    # noiseless linear views: both embeddings span the true latent positions
    assert sla.subspace_angles(cp.embedding_x, U).max() < 1e-6
    assert sla.subspace_angles(cp.embedding_y, U).max() < 1e-6
    a, b = simulate(seed=5), simulate(seed=5)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="dx"):
        simulate(d=3, dx=2)


def test_coupled_projections_to_inference_data_goes_through_the_pyro_model():
    sim = simulate(n=40, d=2, dx=5, dy=4, seed=2)
    known = np.arange(0, 40, 4)
    cp = CoupledProjections(d=2, k=4).fit(sim["X"], sim["Y"], np.c_[known, known])
    idata = cp.to_inference_data(num_samples=30, sigma=1e-5)
    U = idata.posterior["U"]
    assert U.dims == ("chain", "draw", "latent_dim", "point") and U.shape == (1, 30, 2, 80)
    Q = orthonormal(cp.svi_result_.params["Q_raw"])
    assert sla.subspace_angles(cp.whitened_.projection(Q), cp.P).max() < 1e-3
    # posterior mean of the latent positions = the tied encoder ẐQ: a linear image of the embedding
    mean = U.mean(("chain", "draw")).values.T[:80]
    emb = np.vstack([cp.embedding_x, cp.embedding_y])
    assert sla.subspace_angles(mean, emb).max() < 1e-3
    with pytest.raises(ValueError, match="fit"):
        CoupledProjections().to_inference_data()
