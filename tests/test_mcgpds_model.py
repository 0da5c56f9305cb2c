"""McGPDS Pyro model and guide: shapes, prior simulation, ELBOs, AutoNormal, fixed params."""
import pyro
import pyro.optim
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoNormal

from tandem.guides.mcgpds import mcgpds_guide, variational_params
from tandem.inference import LBFGS, fit
from tandem.inference.mcgpds.bound import collapsed_bound, collapsed_loss
from tandem.inference.mcgpds.uncollapsed import optimal_q_inducing, uncollapsed_elbo_analytic
from tandem.models.mcgpds import DIMS, McGPDSData, default_init, dims, hyperparams, mcgpds_model, simulate

D64 = torch.float64


def small_data(seed=0, N=10, M=3, Q=2, J=1, fixed=()):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, N, dtype=D64)
    seq = torch.tensor([0] * (N // 2) + [1] * (N - N // 2))
    views = [torch.randn(N, 3, dtype=D64, generator=g), torch.randn(N, 2, dtype=D64, generator=g)]
    init = default_init(N, [3, 2], Q, M, J, times=t, generator=g, w_scale=0.5, beta=[5.0, 6.0])
    return McGPDSData(views, t, seq, Q, M, J, init=init, fixed=frozenset(fixed))


def test_simulate_shapes_and_dims():
    t = torch.linspace(0, 1, 12, dtype=D64)
    sim = simulate(t, torch.zeros(12), [4, 3], Q=2, M=5, J=2, seed=1)
    assert sim["X_s"].shape == (2, 12) and sim["X_0"].shape == (2, 12) and sim["X_1"].shape == (2, 12)
    assert sim["v_0"].shape == (4, 5) and sim["u_0"].shape == (2, 4, 5) and sim["u_1"].shape == (2, 3, 5)
    assert sim["y_0"].shape == (12, 4) and sim["y_1"].shape == (12, 3)
    assert set(dims(2)) == set(DIMS) and set(n for n in sim if n != "data") == set(DIMS)
    for name, d in DIMS.items():
        assert len(d) == sim[name].dim()
    # same seed, same draw
    assert torch.equal(simulate(t, torch.zeros(12), [4, 3], Q=2, M=5, J=2, seed=1)["y_0"], sim["y_0"])


def test_prior_private_latent_is_alpha_mixture_of_shared():
    """Var of X^(k) − (1−α)X^(s) matches diag A_k (many prior draws, α = 0.3)."""
    t = torch.linspace(0, 1, 5, dtype=D64)
    diffs = []
    for s in range(120):
        sim = simulate(t, torch.zeros(5), [2, 2], Q=1, M=2, seed=s, alpha=0.3, eps=0.2, time_bias=False,
                       time_white=False)
        diffs.append(sim["X_0"] - 0.7 * sim["X_s"])
    v = torch.stack(diffs).var(0).mean().item()
    expected = 0.3 ** 2 * 1.0 + 0.7 ** 2 * 0.2
    assert v == pytest.approx(expected, rel=0.3)


def test_trace_elbo_of_handwritten_guide_matches_analytic_uncollapsed_elbo():
    data = small_data()
    pyro.clear_param_store()
    # initialise the guide's q(U), q(V) at the optimum so both are well defined
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    q_v, q_u = optimal_q_inducing(data, hp, mus, lams)
    for k in range(2):
        pyro.param(f"qv_m_{k}", q_v[k][0].detach().clone())
        pyro.param(f"qv_L_{k}", q_v[k][1].detach().clone(), constraint=torch.distributions.constraints.lower_cholesky)
        pyro.param(f"qu_m_{k}", q_u[k][0].detach().clone())
        pyro.param(f"qu_L_{k}", q_u[k][1].detach().clone(), constraint=torch.distributions.constraints.lower_cholesky)
    analytic = uncollapsed_elbo_analytic(data, hp, mus, lams, q_v, q_u).item()
    collapsed = collapsed_bound(data, hp, mus, lams).item()
    assert analytic == pytest.approx(collapsed, rel=1e-8)
    pyro.set_rng_seed(0)
    vals = torch.tensor([-Trace_ELBO().loss(mcgpds_model, mcgpds_guide, data) for _ in range(150)])
    se = vals.std().item() / 150 ** 0.5
    assert abs(vals.mean().item() - analytic) < 4 * se + 1e-6 * abs(analytic)


def test_handwritten_guide_and_autonormal_run_with_the_driver():
    data = small_data()
    r = fit(mcgpds_model, mcgpds_guide, data, optim=pyro.optim.Adam({"lr": 0.01}), num_steps=4,
            seed=0, progress=False)
    assert r.num_steps == 4 and torch.isfinite(torch.tensor(r.losses)).all()
    guide = AutoNormal(mcgpds_model)
    r = fit(mcgpds_model, guide, data, optim=pyro.optim.Adam({"lr": 0.01}), num_steps=4, seed=0, progress=False)
    assert torch.isfinite(torch.tensor(r.losses)).all()
    tr = poutine.trace(guide).get_trace(data)
    assert tr.nodes["X_s"]["value"].shape == (2, 10) and tr.nodes["u_1"]["value"].shape == (1, 2, 3)


def test_collapsed_loss_lbfgs_and_adam_decrease_and_fixed_params_stay():
    data = small_data(fixed=("alpha", "time"))
    r = fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, optim=LBFGS(max_iter=20), num_steps=3,
            seed=0, progress=False)
    assert r.losses[-1] < r.losses[0]
    assert "alpha_0" not in r.params and "t_invw_s" not in r.params     # fixed -> constants
    assert "beta_0" in r.params and "mu_0" in r.params
    r2 = fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, optim=pyro.optim.Adam({"lr": 0.02}),
             num_steps=30, seed=0, progress=False)
    assert r2.losses[-1] < r2.losses[0]


def test_frozen_groups_do_not_move():
    data = small_data()
    fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, optim=LBFGS(max_iter=5), num_steps=1,
        seed=0, progress=False)
    before = {k: v.detach().clone() for k, v in pyro.get_param_store().items()}
    fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, optim=LBFGS(max_iter=5), num_steps=1,
        seed=0, progress=False, clear_params=False, frozen=("model",))
    after = {k: v.detach() for k, v in pyro.get_param_store().items()}
    assert torch.equal(before["W_0"], after["W_0"]) and torch.equal(before["beta_1"], after["beta_1"])
    assert not torch.equal(before["mu_0"], after["mu_0"])


def test_posterior_predictive_after_collapsed_fit():
    from tandem.inference import posterior_predictive
    from tandem.inference.mcgpds.uncollapsed import set_optimal_inducing
    data = small_data()
    fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, optim=LBFGS(max_iter=10), num_steps=1,
        seed=0, progress=False)
    set_optimal_inducing(data)
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    q_v, q_u = optimal_q_inducing(data, hp, mus, lams)
    assert torch.allclose(pyro.param("qv_m_0"), q_v[0][0])
    S = 200
    idata = posterior_predictive(mcgpds_model, mcgpds_guide, data, num_samples=S, seed=0, dims=DIMS)
    pp = idata.posterior_predictive["y_0"]
    assert pp.dims == ("chain", "draw", "time", "output_0") and pp.shape == (1, S, 10, 3)
    assert idata.log_likelihood["y_1"].shape == (1, S, 10, 2)
    # Monte Carlo mean/variance of the draws match the analytic predictive moments under q
    from tandem.inference.mcgpds.bound import latent_terms, predict_moments, view_posterior
    lt = latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    with torch.no_grad():
        post = view_posterior(data.views[0], mus[0], lt["s_diag"][0], hp["views"][0], "rbfard")
        mean, var = predict_moments(post, mus[0], lt["s_diag"][0])
    m = torch.as_tensor(pp.mean(("chain", "draw")).values)
    assert ((m - mean).abs() <= 4.5 * (var / S).sqrt() + 1e-6).float().mean() > 0.97
    v = torch.as_tensor(pp.var(("chain", "draw")).values)
    assert (v / var).mean().item() == pytest.approx(1.0, abs=0.2)
