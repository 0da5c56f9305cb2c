"""Whitened GMRF model + tied linear-encoder guide (models/ and guides/coupled_projections.py):
SVI through the shared driver recovers the exact eigen-solution; ArviZ export."""
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import scipy.linalg as sla
import torch
from pyro.infer.autoguide import AutoNormal

from tandem.guides.coupled_projections import guide, optimal_scale
from tandem.inference import fit, posterior_predictive
from tandem.inference.coupled_projections.solver import CoupledProjections
from tandem.models.coupled_projections import DIMS, model, orthonormal, whiten


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
