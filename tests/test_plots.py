"""tandem.plots: every helper draws on the Agg backend, labels its axes, warns nothing, and
draws what the data say (bar heights, band edges, matrix cells, correspondence lines)."""
from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyro  # noqa: E402
import pyro.distributions as dist  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from tandem import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _strict():
    """Any warning (matplotlib's included) fails the test; every figure is closed."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield
    plt.close("all")


def _labelled(ax):
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title(), (ax.get_xlabel(), ax.get_ylabel(), ax.get_title())
    ax.figure.canvas.draw()          # renders: layout or data errors surface here


def _band(ax, i=0):
    polys = [c for c in ax.collections if isinstance(c, PolyCollection)]
    return polys[i].get_paths()[0].vertices


def test_plot_loss_of_a_real_fit():
    from tandem.inference import fit

    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    guide = pyro.infer.autoguide.AutoNormal(model)
    res = fit(model, guide, torch.randn(20) + 3.0, num_steps=30, progress=False,
              optim=pyro.optim.Adam({"lr": 0.1}))
    ax = plots.plot_loss(res, label="AutoNormal")
    _labelled(ax)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), res.losses)
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), np.arange(1, 31))
    # spanning > 2 decades of positive losses switches to a log axis
    assert plots.plot_loss(np.geomspace(1e4, 1.0, 50)).get_yscale() == "log"
    with pytest.raises(ValueError, match="no steps"):
        plots.plot_loss(np.array([]))


def test_plot_relevance_any_number_of_views():
    ard = np.array([[4.0, 1.0, 0.0], [2.0, 2.0, 1.0], [0.5, 1.0, 0.25]])
    ax = plots.plot_relevance(alpha=[0.5, 0.2, 0.9], ard=ard)
    _labelled(ax)
    heights = np.array([p.get_height() for p in ax.patches]).reshape(3, 3)
    np.testing.assert_allclose(heights, ard / ard.max(1, keepdims=True))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["view 1 (α = 0.50)", "view 2 (α = 0.20)", "view 3 (α = 0.90)"]
    with pytest.raises(ValueError, match="alpha has 2 views"):
        plots.plot_relevance(alpha=[0.5, 0.5], ard=ard)


@pytest.fixture(scope="module")
def mcgpds_fit():
    from tandem.inference.mcgpds import McGPDS
    rng = np.random.default_rng(0)
    t = np.arange(30) * 0.1
    s = np.sin(t)
    views = [np.c_[s, np.cos(3 * t), s ** 2] + 0.05 * rng.standard_normal((30, 3)),
             np.c_[-s, s * np.cos(t)] + 0.05 * rng.standard_normal((30, 2))]
    m = McGPDS(Q=2, M=8, cycles=1, var_iters=3, model_iters=3, joint_iters=5, lbfgs_max_iter=5,
               progress=False).fit(views, t)
    return m, views, t


def test_mcgpds_plots_from_a_fitted_model(mcgpds_fit):
    m, views, t = mcgpds_fit
    f = m.fitted_
    ax = plots.plot_relevance(m)
    _labelled(ax)
    heights = np.array([p.get_height() for p in ax.patches]).reshape(2, 2)
    ard = np.stack([f.params[f"kh_ard_{k}"].numpy() for k in range(2)])
    np.testing.assert_allclose(heights, ard / ard.max(1, keepdims=True))

    ax = plots.plot_latents(m, truth=np.sin(t))
    _labelled(ax)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), f.mu_s[:, 0].numpy())
    band = _band(ax)
    sd = np.sqrt(f.s_s.numpy())
    assert np.isclose(band[:, 1].max(), (f.mu_s[:, 0].numpy() + 2 * sd).max())
    _labelled(plots.plot_latents(m, view=1))
    with pytest.raises(ValueError, match="view"):
        plots.plot_latents(m, view=2)

    pred = m.predict(views[0][:10], t[:10])
    ax = plots.plot_prediction(pred, views[1][:10], t[:10], dims=(0, 1))
    _labelled(ax)
    band = _band(ax, 1)             # second output's band: mean ± 2 sd
    mean, sd = pred.mean[:, 1], np.sqrt(pred.var[:, 1])
    np.testing.assert_allclose(band[:, 1].max(), (mean + 2 * sd).max())
    np.testing.assert_allclose(band[:, 1].min(), (mean - 2 * sd).min())
    _labelled(plots.plot_loss(m))


def test_plot_prediction_several_predictors_on_one_axes():
    rng = np.random.default_rng(3)
    Y = rng.standard_normal((12, 4))
    ax = plots.plot_prediction(mean=Y + 0.1, var=np.full(Y.shape, 0.04), truth=Y, dims=(2,), label="a", color="C0")
    plots.plot_prediction(mean=Y - 0.1, var=None, ax=ax, dims=(2,), label="b", color="C1")
    _labelled(ax)
    assert [ln.get_label() for ln in ax.lines] == ["true", "a", "b"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), Y[:, 2])
    np.testing.assert_allclose(_band(ax)[:, 1].max(), (Y[:, 2] + 0.1 + 0.4).max())


def test_plot_prediction_checks_shapes():
    with pytest.raises(ValueError, match="truth has shape"):
        plots.plot_prediction(mean=np.zeros((5, 2)), truth=np.zeros((4, 2)))


def test_plot_twin_gp_both_layouts():
    rng = np.random.default_rng(1)
    Y = rng.standard_normal((40, 3))
    P = Y + 0.1
    ax = plots.plot_twin_gp(P, Y)
    _labelled(ax)
    assert "MAE 0.1" in ax.get_title()
    np.testing.assert_allclose(ax.lines[0].get_ydata(), P.ravel())
    x = np.linspace(0, 1, 40)
    ax = plots.plot_twin_gp(P, Y, X=x, X_train=x, Y_train=Y, output=2)
    _labelled(ax)
    np.testing.assert_allclose(ax.lines[-1].get_ydata(), P[:, 2])
    with pytest.raises(ValueError, match="1-D input"):
        plots.plot_twin_gp(P, Y, X=np.zeros((40, 2)))


def test_samtc_relatedness_and_confusions():
    from tandem.inference.samtc import SAMTC
    from tandem.inference.samtc.simulate import simulate_tasks
    sim = simulate_tasks(n_points=(60, 80, 50), min_per_class=8, seed=0)
    tasks, labels = sim.tasks, sim.labels
    est = SAMTC(sim.h).fit(tasks)
    ax = plots.plot_relatedness(est)
    _labelled(ax)
    np.testing.assert_allclose(ax.images[0].get_array(), est.R_)
    assert len(ax.texts) == len(tasks) ** 2
    fig = plots.plot_task_confusions(est, labels)
    assert len(fig.axes) == len(tasks)
    for ax in fig.axes:
        _labelled(ax)


def test_confusion_matches_clusters_to_classes():
    true = np.repeat([0, 1, 2], [5, 3, 4])
    pred = np.array([7] * 5 + [2] * 3 + [5] * 3 + [2])      # a relabelled clustering with one error
    ax = plots.plot_confusion(true, pred)
    _labelled(ax)
    C = ax.images[0].get_array()
    np.testing.assert_array_equal(np.diag(C), [5, 3, 3])
    assert C.sum() == 12 and "acc 0.917" in ax.get_title()


def test_plot_embedding_draws_one_line_per_correspondence():
    from tandem.inference.coupled_projections import CoupledProjections
    rng = np.random.default_rng(2)
    th = np.linspace(0, 3, 40)
    X = np.c_[np.cos(th), np.sin(th), th] + 0.01 * rng.standard_normal((40, 3))
    Y = np.c_[th, th ** 2] + 0.01 * rng.standard_normal((40, 2))
    pairs = np.c_[np.arange(0, 40, 5), np.arange(0, 40, 5)]
    cp = CoupledProjections(d=2).fit(X, Y, pairs)
    ax = plots.plot_embedding(cp, color_x=th, color_y=th)
    _labelled(ax)
    assert len(ax.lines) == len(pairs)
    i, j = pairs[3]
    ex = getattr(cp, "embedding_x", getattr(cp, "embedding_x_", None))
    ey = getattr(cp, "embedding_y", getattr(cp, "embedding_y_", None))
    np.testing.assert_allclose(ax.lines[3].get_xdata(), [ex[i, 0], ey[j, 0]])
    with pytest.raises(ValueError, match="outside"):
        plots.plot_embedding(embedding_x=ex, embedding_y=ey, pairs=[[100, 0]])


def test_tandem_plots_is_lazy():
    import subprocess
    import sys

    from common import ROOT
    code = "import sys, tandem; assert 'tandem.plots' not in sys.modules; assert callable(tandem.plots.plot_loss)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)


# --- the ArviZ calls of docs/plotting.md, run under whichever ArviZ is installed -------------
# (CI runs ``-k arviz`` under ArviZ 0.17.1 and 1.x.)

def _conjugate_export(prior_sd: float, seed: int):
    """A tandem export (posterior_predictive) of y_i ~ N(μ, 1), μ ~ N(0, prior_sd²): one latent,
    for which AutoNormal holds the exact posterior (so LOO's Pareto k are good)."""
    from tandem.inference import fit, posterior_predictive

    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, prior_sd))
        with pyro.plate("obs", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    y = torch.randn(25, generator=torch.Generator().manual_seed(seed)) + 1.0
    guide = pyro.infer.autoguide.AutoNormal(model)
    fit(model, guide, y, num_steps=400, progress=False, optim=pyro.optim.Adam({"lr": 0.05}), seed=seed)
    return posterior_predictive(model, guide, y, num_samples=200, seed=seed, dims={"y": ["obs"]})


def test_arviz_calls_of_the_docs_table():
    """Every call of the docs' ArviZ table (trace, posterior, PPC, LOO, compare) for the installed
    major version runs on a tandem export and returns what the table says."""
    import arviz as az

    from tandem.inference.predictive import ARVIZ_MAJOR
    a, b = _conjugate_export(10.0, 0), _conjugate_export(0.1, 0)
    with warnings.catch_warnings():
        # ArviZ's own deprecation notices are not this package's warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        if ARVIZ_MAJOR == 0:
            assert az.plot_trace(a, var_names=["mu"]).shape == (1, 2)
            assert az.plot_posterior(a, var_names=["mu"]) is not None
            assert az.plot_ppc(a, data_pairs={"y": "y"}, num_pp_samples=20) is not None
        else:
            assert az.plot_trace_dist(a, var_names=["mu"], backend="matplotlib") is not None
            assert az.plot_dist(a, var_names=["mu"], backend="matplotlib") is not None
            assert az.plot_ppc_dist(a, var_names=["y"], backend="matplotlib") is not None
        loo = az.loo(a, pointwise=True)
        cmp = az.compare({"wide prior": a, "tight prior": b})
    elpd = float(getattr(loo, "elpd_loo", getattr(loo, "elpd", np.nan)))
    # exact posterior, 25 unit-noise points: elpd ≈ Σ log N(y_i; ȳ, 1 + 1/n) ≈ −25·1.43
    assert -45 < elpd < -28, elpd
    # the tight prior at 0 (data mean ≈ 1) fits worse: ranked second
    assert list(cmp.index) == ["wide prior", "tight prior"], cmp


def test_gallery_is_complete_small_and_shown_on_the_model_pages():
    """Every figure docs/make_gallery.py lists is committed, under its size limit, and shown on
    its model page; nothing stale sits in the gallery folder."""
    from common import ROOT, load_script
    mg = load_script("docs/make_gallery.py")
    expected = set()
    for example, (_extra, figures, page) in mg.GALLERY.items():
        assert (ROOT / "examples" / example).exists(), example
        text = (ROOT / "docs" / "models" / f"{page}.md").read_text()
        for f in figures:
            name = mg.gallery_name(example, f)
            expected.add(name)
            path = mg.OUT / name
            assert path.exists(), f"{name} missing: run python docs/make_gallery.py"
            assert path.stat().st_size < mg.MAX_BYTES, (name, path.stat().st_size)
            assert f"../_static/gallery/{name}" in text, f"docs/models/{page}.md does not show {name}"
    assert {p.name for p in mg.OUT.glob("*.png")} == expected
    for page in ("mcgpds", "twin_gp", "samtc", "coupled_projections"):
        assert "_static/gallery/" in (ROOT / "docs" / "models" / f"{page}.md").read_text(), page
