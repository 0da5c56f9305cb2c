"""Shared-atom partial mixture (models/samtc.py, guides/samtc.py, inference/samtc_model_fit.py)."""
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import TraceEnum_ELBO
from pyro.infer.autoguide import AutoNormal
from scipy.special import logsumexp
from scipy.stats import beta as beta_d
from scipy.stats import dirichlet, lognorm, norm

from tandem.guides.samtc import Guide
from tandem.inference import fit, posterior_predictive
from tandem.inference.metrics import clustering_accuracy
from tandem.inference.predictive import arviz_groups
from tandem.inference.samtc import SAMTC, samtc
from tandem.inference.samtc.model_fit import fit_model
from tandem.inference.samtc.simulate import reusable_scores, simulate_tasks
from tandem.models import samtc as M


def ELBO(**kw):  # noqa: N802 - reads as the ELBO class it builds
    return TraceEnum_ELBO(max_plate_nesting=M.MAX_PLATE_NESTING, **kw)


def small_problem(seed=0, n=(40, 30)):
    g = torch.Generator().manual_seed(seed)
    X0 = torch.randn(n[0], 2, generator=g, dtype=torch.float64) + torch.tensor([0.0, 0.0]).repeat(n[0], 1)
    X0[: n[0] // 2] += 6.0
    X1 = torch.randn(n[1], 2, generator=g, dtype=torch.float64)
    X1[: n[1] // 3] += torch.tensor([-6.0, 6.0], dtype=torch.float64)
    X1[n[1] // 3: 2 * n[1] // 3] += 6.0
    return [X0, X1], [2, 3]


def fixed_values(tasks, h, K, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = tasks[0].shape[1]
    v = {"pi": torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)[: K + 1] / 1.0,
         "theta": torch.randn(K, d, generator=g, dtype=torch.float64) * 3}
    v["pi"] = v["pi"] / v["pi"].sum()
    for t, ht in enumerate(h):
        v[f"mu_{t}"] = torch.randn(ht, d, generator=g, dtype=torch.float64) * 3
        w = torch.rand(ht, generator=g, dtype=torch.float64) + 0.2
        v[f"w_{t}"] = w / w.sum()
        v[f"rho_{t}"] = torch.tensor(0.8 - 0.1 * t, dtype=torch.float64)
        v[f"sigma_{t}"] = torch.tensor(1.0 + 0.3 * t, dtype=torch.float64)
    return v


def delta_guide(v):
    """Point-mass guide at fixed values: the enumerated ELBO is then log p(values, x) exactly."""
    def guide(tasks, h, n_atoms, **kw):
        pyro.sample("pi", dist.Delta(v["pi"]).to_event(1))
        with pyro.plate("atoms", n_atoms):
            pyro.sample("theta", dist.Delta(v["theta"]).to_event(1))
        for t, ht in enumerate(h):
            with pyro.plate(f"slots_{t}", ht):
                pyro.sample(f"mu_{t}", dist.Delta(v[f"mu_{t}"]).to_event(1))
            pyro.sample(f"w_{t}", dist.Delta(v[f"w_{t}"]).to_event(1))
            pyro.sample(f"rho_{t}", dist.Delta(v[f"rho_{t}"]))
            pyro.sample(f"sigma_{t}", dist.Delta(v[f"sigma_{t}"]))
    return guide


def test_enumerated_elbo_equals_closed_form():
    """TraceEnum_ELBO with a point-mass guide = log p(π, θ, μ, w, ρ, σ, x) with a, y, u summed
    out by hand (numpy/scipy): checks every site and the enumeration of the model."""
    tasks, h = small_problem()
    K, tau, s0, widen = 2, 0.25, 4.0, 3.0
    hyper = dict(tau=tau, prior_scale=s0, widen=widen, prior_loc=torch.zeros(2, dtype=torch.float64),
                 sigma_loc=1.0, sigma_scale=0.5, alpha=1.5, pi_conc=1.0, rho_a=5.0, rho_b=1.0)
    v = fixed_values(tasks, h, K)
    loss = ELBO().loss(M.model, delta_guide(v), tasks, h, K, **hyper)
    assert np.isfinite(loss)
    def n(k):
        return v[k].numpy()

    lp = dirichlet.logpdf(n("pi"), np.ones(K + 1)) + norm.logpdf(n("theta"), 0, s0).sum()
    locs = np.vstack([np.zeros(2), n("theta")])
    scales = np.array([s0] + [tau] * K)
    for t, X in enumerate(tasks):
        X = X.numpy()
        mu = n(f"mu_{t}")
        la = np.log(n("pi"))[None, :] + norm.logpdf(mu[:, None, :], locs[None], scales[None, :, None]).sum(-1)
        lp += logsumexp(la, axis=1).sum()
        w, rho, sg = n(f"w_{t}"), float(v[f"rho_{t}"]), float(v[f"sigma_{t}"])
        lp += dirichlet.logpdf(w, np.full(h[t], 1.5)) + beta_d.logpdf(rho, 5, 1) + lognorm.logpdf(sg, 0.5, scale=1.0)
        terms = []
        for u, pu in ((1, rho), (0, 1 - rho)):
            s = sg if u else widen * sg
            terms.append(np.log(w)[None] + np.log(pu) + norm.logpdf(X[:, None, :], mu[None], s).sum(-1))
        lp += logsumexp(np.concatenate(terms, 1), axis=1).sum()
    assert -loss == pytest.approx(lp, rel=1e-9)


def test_minibatch_elbo_unbiased():
    """E_subsample[minibatched ELBO] = full ELBO (Monte Carlo, point-mass guide so the only
    randomness is the subsample); a wrong n_t/b scaling would be off by far more than 4 s.e."""
    tasks, h = small_problem(n=(30, 24))
    K = 2
    v = fixed_values(tasks, h, K, seed=1)
    g = delta_guide(v)
    full = ELBO().loss(M.model, g, tasks, h, K)
    pyro.set_rng_seed(0)
    draws = np.array([ELBO().loss(M.model, g, tasks, h, K, subsample_size=6) for _ in range(150)])
    se = draws.std() / np.sqrt(len(draws))
    assert draws.std() > 0
    assert abs(draws.mean() - full) < 4 * se
    # the subsample is scaled: a single draw is on the full-data scale, not the batch scale
    half = ELBO().loss(M.model, g, tasks, h, K, subsample={0: torch.arange(30), 1: torch.arange(24)})
    assert half == pytest.approx(full)


def test_hand_guide_svi_and_autonormal_with_enumeration():
    tasks, h = small_problem()
    res = fit(M.model, Guide(), tasks, h, 2, loss=ELBO(), num_steps=15, progress=False, seed=0)
    assert np.all(np.isfinite(res.losses))
    cont = M.site_names(2)["global"] + M.site_names(2)["task"]
    auto = AutoNormal(poutine.block(M.model, expose=cont))
    res = fit(M.model, auto, tasks, h, 2, loss=ELBO(), num_steps=15, progress=False, seed=0)
    assert np.all(np.isfinite(res.losses))
    tr = poutine.trace(auto).get_trace(tasks, h, 2)
    assert {"pi", "theta", "mu_0", "sigma_1"} <= set(tr.nodes) and "y_0" not in tr.nodes


def test_posterior_predictive_inferencedata():
    tasks, h = small_problem()
    g = Guide()
    fit(M.model, g, tasks, h, 2, loss=ELBO(), num_steps=5, progress=False)
    idata = posterior_predictive(M.model, g, tasks, h, 2, num_samples=4, dims=M.DIMS)
    assert {"posterior", "observed_data"} <= set(arviz_groups(idata))
    assert idata.observed_data["x_0"].dims == ("instance_0", "feature")
    assert idata.posterior["mu_1"].shape == (1, 4, 3, 2)
    assert idata.posterior_predictive["x_1"].shape == (1, 4, 30, 2)


@pytest.fixture(scope="module")
def easy_fit():
    sim = simulate_tasks(n_tasks=2, n_shared=2, n_private=(1, 1), n_points=(90, 75), d=3,
                         separation=6.0, near=3.0, seed=4)
    pyro.clear_param_store()
    mf = fit_model(sim.tasks, sim.h, num_steps=80, seed=0)
    return sim, mf, mf.derived(num_samples=25)


def test_recovers_clusters_and_links(easy_fit):
    sim, mf, der = easy_fit
    labels = mf.labels(num_samples=4)
    for t in range(sim.T):
        assert clustering_accuracy(sim.labels[t], labels[t]) >= 0.9
        # each fitted slot -> majority true class; the slot is shared iff that class is shared
        for c in range(sim.h[t]):
            cls = np.bincount(sim.global_labels[t][labels[t] == c]).argmax()
            is_shared = cls < sim.config["n_shared"]
            assert (der["shared_slot"][t][c] > 0.5) == is_shared
    pred = {k: p > 0.5 for k, p in der["reusable_probs"].items()}
    prec, rec = reusable_scores(pred, sim.reusable)
    assert prec >= 0.9 and rec >= 0.9


def test_relatedness_asymmetric_in_unit_interval(easy_fit):
    sim, mf, der = easy_fit
    R = der["R"]
    assert R.shape == (2, 2) and np.all((R >= 0) & (R <= 1))
    np.testing.assert_array_equal(np.diag(R), 1.0)
    assert abs(R[0, 1] - R[1, 0]) > 0.05                     # truth is asymmetric here
    np.testing.assert_allclose(R, sim.R_true, atol=0.1)
    for k, p in der["reusable_probs"].items():
        assert p.shape == (len(sim.tasks[k[1]]),) and np.all((p >= 0) & (p <= 1))


@pytest.mark.parametrize("tasks,h,msg", [
    ([np.zeros((2, 2)) + np.arange(2)[:, None], np.random.rand(10, 2)], [3, 2], "fewer than"),
    ([np.random.rand(10, 2), np.random.rand(10, 3)], [2, 2], "features"),
    ([np.full((10, 2), np.nan), np.random.rand(10, 2)], [2, 2], "NaN"),
    ([np.random.rand(10, 2), np.random.rand(10, 2)], [2, 1], ">= 2"),
    ([np.random.rand(10, 2)], [2, 2], "one cluster number per task"),
    ([np.zeros((0, 2)), np.random.rand(10, 2)], [2, 2], r"tasks\[0\]: is empty"),
])
def test_bad_input(tasks, h, msg):
    with pytest.raises(ValueError, match=msg):
        M.model(tasks, h, 2)
    with pytest.raises(ValueError, match=msg):
        fit_model(tasks, h, num_steps=1)


def test_infer_discrete_draws_match_compute_marginals(easy_fit):
    """Joint posterior draws (infer_discrete) and exact marginals (compute_marginals) agree on q(y)."""
    sim, mf, _ = easy_fit
    smp = mf.discrete_samples(num_samples=30, seed=1)
    probs = mf.cluster_probs(num_samples=10, seed=2)["y"]
    for t in range(sim.T):
        freq = np.stack([(smp["y"][t] == c).mean(0) for c in range(sim.h[t])], 1)     # (n_t, h_t)
        assert np.abs(freq - probs[t]).max() < 0.35
        assert np.mean(freq.argmax(1) == probs[t].argmax(1)) > 0.97
        assert smp["a"][t].shape == (30, sim.h[t]) and smp["a"][t].max() <= mf.n_atoms


@pytest.mark.parametrize("kw,msg", [({"lr": -0.05}, "lr"), ({"lr": 0.0}, "lr"), ({"num_steps": -1}, "num_steps"),
                                    ({"restarts": 0}, "restarts"), ({"tau": 0.0}, "tau"), ({"widen": 1.0}, "widen"),
                                    ({"n_atoms": 0}, "n_atoms"), ({"subsample_size": 0}, "subsample_size")])
def test_fit_model_rejects_bad_options_before_fitting(kw, msg):
    tasks = [np.random.default_rng(0).normal(size=(10, 2)), np.random.default_rng(1).normal(size=(12, 2))]
    with pytest.raises(ValueError, match=msg):
        fit_model(tasks, [2, 2], **kw)


# ------------------------------------------------------------------ contract: dims, simulate, Guide, SAMTC

def test_dims_names_every_site_for_any_number_of_tasks():
    for T in (1, 3, 5):
        d = M.dims(T)
        names = M.site_names(T)
        assert set(d) == set(names["global"] + names["task"] + names["enum"] + names["obs"])
        assert d[f"x_{T - 1}"] == [f"instance_{T - 1}", "feature"]
    with pytest.raises(ValueError, match="T"):
        M.dims(0)


def test_simulate_follows_the_generative_story():
    """Monte Carlo checks of the prior draw: within-cluster spreads σ_t (typical) and
    widen·σ_t (atypical), linked slot means within tau of their atom, E[u] = a/(a+b)."""
    s = M.simulate([4000], [2], 1, d=3, seed=0, widen=3.0, sigma_loc=1.0, sigma_scale=0.1)
    X, y, u, mu, sg = s["tasks"][0], s["labels"][0], s["typical"][0], s["means"][0], s["sigma"][0]
    r = X - mu[y]
    assert abs(r[u == 1].std() / sg - 1) < 0.05 and abs(r[u == 0].std() / (3.0 * sg) - 1) < 0.1
    dev, typ = [], []
    for seed in range(300):
        s = M.simulate([20, 20], [3, 3], 2, d=2, seed=seed, tau=0.3, rho_a=3.0, rho_b=1.0)
        for t in range(2):
            a, m = s["links"][t], s["means"][t]
            dev += list((m[a >= 1] - s["atoms"][a[a >= 1] - 1]).ravel())
            typ.append(s["typical"][t].mean())
    assert abs(np.std(dev) / 0.3 - 1) < 0.05
    assert abs(np.mean(typ) - 0.75) < 0.02
    a, b = M.simulate([5, 6], [2, 3], 2, seed=4), M.simulate([5, 6], [2, 3], 2, seed=4)
    assert all(np.array_equal(x, z) for x, z in zip(a["tasks"], b["tasks"]))
    with pytest.raises(ValueError, match=r"n\[1\]"):
        M.simulate([5, 0], [2, 2], 1)


def test_guide_options_are_keyword_only_and_prefix_names_the_params():
    with pytest.raises(TypeError):
        Guide({"scale": 0.1})
    sim = M.simulate([12, 10], [2, 2], 1, d=2, seed=0)
    pyro.clear_param_store()
    Guide(prefix="mine_")(sim["tasks"], [2, 2], 1)
    assert all(n.startswith("mine_") for n in pyro.get_param_store().keys())


def test_samtc_object_fits_tasks_and_exports_the_model_posterior():
    sim = simulate_tasks(n_tasks=2, n_shared=2, n_private=(1, 0), d=2, sigma=0.5, separation=5.0,
                         n_points=(60, 40), seed=0)
    m = SAMTC(sim.h, seed=0).fit(sim.tasks)
    ref = samtc(sim.tasks, sim.h, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(m.labels_, ref.labels)) and np.array_equal(m.R_, ref.R)
    idata = m.to_inference_data(num_samples=6, num_steps=60)
    post = idata.posterior
    assert post["y_0"].dims == ("chain", "draw", "instance_0") and post["y_0"].shape == (1, 6, 60)
    assert post["mu_1"].dims == ("chain", "draw", "slot_1", "feature")
    # in the data's units: the observed data are the tasks themselves
    np.testing.assert_allclose(idata.observed_data["x_0"].values, sim.tasks[0], atol=1e-10)
    # posterior predictive draws live where the data are
    assert abs(float(idata.posterior_predictive["x_1"].mean()) - sim.tasks[1].mean()) < 1.0
    with pytest.raises(ValueError, match="fit"):
        SAMTC([2, 2]).to_inference_data()
    with pytest.raises(TypeError, match="n_clusters"):
        SAMTC(3)
