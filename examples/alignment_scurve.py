"""Synthetic manifold alignment: coupled projections vs Ham vs Procrustes, plus the Pyro model.

Two synthetic pairs of data sets with a known correspondence (index i ↔ i):

* ``scurve_swissroll`` — an S-curve and a Swiss roll in R³ built from the same latent
  (u, v) ∈ [0, 1]² (inference/datasets/manifolds.py); d = 2;
* ``linear_curve`` — two noisy linear views (R¹⁰ and R⁸) of one trefoil knot; d = 3.

10–30 % of the pairs are known, the rest held out and matched by nearest neighbour in the
latent space (candidates: every point of the other view). Metrics (mean ± std over seeds):
``match_accuracy`` (exact partner), ``partner_latent_error`` (distance, in the true latent
coordinates, between the matched and the true partner — (u, v) for the S-curve, the angle
(cos τ, sin τ) for the curve, via tandem.inference.metrics.mean_norm_error), and
``oos_match_accuracy`` (25 % of the points removed from training in both views, mapped
afterwards by the linear maps / the Nyström extension, matched among all points).

Then the generative model (models/coupled_projections.py + guides/coupled_projections.py)
is fitted by SVI through the shared driver on a small linear-curve problem: the record
``svi_principal_angle_rad`` is the largest principal angle between SVI's projection and
the eigen-solution's, and the posterior of the latent positions is exported to ArviZ
(``alignment_scurve_posterior.nc``) and plotted.

Usage::

    python examples/alignment_scurve.py --out results          # full: 10 seeds
    python examples/alignment_scurve.py --quick --out /tmp/x
"""
from __future__ import annotations

# ruff: noqa: E402 — the thread settings below must precede the numpy import
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # small dense eigenproblems: one BLAS thread is fastest

import time

import numpy as np

from tandem import plots
from tandem.guides.coupled_projections import guide
from tandem.inference import fit, posterior_predictive
from tandem.inference.atomic_files import save_figure, save_netcdf  # noqa: E402
from tandem.inference.coupled_projections.baselines import HamAlignment, ProcrustesAlignment
from tandem.inference.coupled_projections.solver import CoupledProjections
from tandem.inference.datasets.manifolds import linear_views_of_curve, paired_scurve_swissroll
from tandem.inference.distances import nearest
from tandem.inference.experiments.cli import base_parser, fraction_list, int_at_least, seed_list
from tandem.inference.experiments.results import Results
from tandem.inference.metrics import match_accuracy, mean_norm_error
from tandem.models.coupled_projections import dims, model, orthonormal, whiten

EXPERIMENT = "alignment_scurve"
METHODS = ("coupled projections", "Ham", "Procrustes")




def parser():
    p = base_parser(__doc__.split("\n")[0], default_seeds=10)
    p.add_argument("--n", type=int_at_least(10), default=600, help="points per view (S-curve / Swiss roll)")
    p.add_argument("--n-curve", type=int_at_least(10), default=300, help="points per view (linear curve views)")
    p.add_argument("--fractions", type=fraction_list, default="0.1,0.2,0.3", help="fractions of known pairs")
    p.add_argument("--k", type=int_at_least(1), default=8, help="k nearest neighbours")
    p.add_argument("--noise", type=float, default=0.02, help="noise std of each view")
    p.add_argument("--svi-steps", type=int_at_least(0), default=800, help="SVI steps of the Pyro model")
    return p


def datasets(args, seed):
    X, Y, lat = paired_scurve_swissroll(args.n, args.noise, seed=seed)
    Xc, Yc, tau = linear_views_of_curve(args.n_curve, noise=args.noise, seed=seed)
    return {"scurve_swissroll": (X, Y, lat, 2),
            "linear_curve": (Xc, Yc, np.c_[np.cos(tau), np.sin(tau)], 3)}


def make(name, d, k):
    return {"coupled projections": CoupledProjections(d=d, k=k),
            "Ham": HamAlignment(d=d, k=k),
            "Procrustes": ProcrustesAlignment(d=d, k=k)}[name]


def evaluate(X, Y, lat, d, frac, k, seed, timings):
    n = X.shape[0]
    rng = np.random.default_rng(seed)
    K = max(int(round(frac * n)), d)
    known = np.sort(rng.choice(n, K, replace=False))
    held = np.setdiff1d(np.arange(n), known)
    oos = np.sort(rng.choice(n, n // 4, replace=False))
    train = np.setdiff1d(np.arange(n), oos)
    known_tr = np.sort(rng.choice(len(train), min(K, len(train)), replace=False))
    out, fitted = {}, {}
    for name in METHODS:
        t0 = time.perf_counter()
        m = make(name, d, k).fit(X, Y, np.c_[known, known])
        t1 = time.perf_counter()
        pred = nearest(m.embedding_x[held], m.embedding_y)
        r = {"match_accuracy": match_accuracy(pred, held),
             "partner_latent_error": mean_norm_error(lat[pred], lat[held])}
        m2 = make(name, d, k).fit(X[train], Y[train], np.c_[known_tr, known_tr])
        Ey = np.empty((n, d))
        Ey[train] = m2.embedding_y
        Ey[oos] = m2.transform_y(Y[oos])
        r["oos_match_accuracy"] = match_accuracy(nearest(m2.transform_x(X[oos]), Ey), oos)
        timings.setdefault(name, [0.0, 0.0])
        timings[name][0] += t1 - t0
        timings[name][1] += time.perf_counter() - t1
        out[name], fitted[name] = r, m
    return out, fitted, known


def plot_alignments(data, fitted, known, path):
    """Fig. 3-style panels: the two raw data sets, then the three alignments (per data set)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(20, 4 * len(data)))
    for r, (ds, (X, Y, lat, d)) in enumerate(data.items()):
        c = lat[:, 0] if ds == "scurve_swissroll" else np.arctan2(lat[:, 1], lat[:, 0])
        for j, (V, nm) in enumerate(((X, "view x"), (Y, "view y"))):
            a = fig.add_subplot(len(data), 5, 5 * r + j + 1, projection="3d")
            a.scatter(V[:, 0], V[:, 1], V[:, 2], c=c, cmap="viridis", s=4)
            a.set_title(f"{ds}: {nm}", fontsize=9)
        for j, name in enumerate(METHODS):
            m = fitted[ds][name]
            a = fig.add_subplot(len(data), 5, 5 * r + j + 3)
            kn = np.asarray(known[ds])
            # tandem.plots: both embeddings coloured by the latent coordinate, a line per known pair
            plots.plot_embedding(embedding_x=m.embedding_x, embedding_y=m.embedding_y, pairs=np.c_[kn, kn], ax=a,
                                 color_x=c, color_y=c)
            a.set_title(f"{ds}: {name}\n(o = x, ^ = y, line = known pair)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)


def run_svi(args, res, seed):
    """Fit the whitened GMRF model by SVI; compare with the eigen-solution; ArviZ export."""
    import matplotlib
    import pyro
    import scipy.linalg as sla
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, Y, tau = linear_views_of_curve(30, dx=4, dy=3, noise=0.3, seed=seed)
    rng = np.random.default_rng(seed)
    known = rng.choice(30, 8, replace=False)
    cp = CoupledProjections(d=2, k=4).fit(X, Y, np.c_[known, known])
    w = whiten(cp)
    beta = 1.0 / float(np.linalg.eigvalsh(w.omega.numpy()).max())
    sigma = 1e-5  # small σ ⇒ small guide spread ⇒ low-noise Q-gradient (the subspace is σ-free)
    fargs = (w.zhat, w.omega, 2, beta, 1e-3 * beta, sigma)
    steps = 150 if args.quick else args.svi_steps
    r = fit(model, guide, *fargs, num_steps=steps, seed=seed, progress=not args.no_progress,
            optim=pyro.optim.Adam({"lr": 0.03}), desc="SVI coupled projections")
    Q = orthonormal(r.params["Q_raw"]).numpy()
    angle = float(sla.subspace_angles(w.projection(Q), cp.P).max())
    res.add("coupled projections (SVI)", "svi_principal_angle_rad", angle, data_set="linear_curve (N=30+30)",
            setting=f"{steps} Adam steps, sigma={sigma}")
    res.time("coupled projections (SVI)", "train", r.wall_time)
    # posterior uncertainty of the latent positions at a σ where it is visible
    fargs_vis = (w.zhat, w.omega, 2, beta, 1e-3 * beta, 0.05)
    fit(model, guide, *fargs_vis, num_steps=150 if args.quick else 600, seed=seed, progress=False,
        optim=pyro.optim.Adam({"lr": 0.03}))
    idata = posterior_predictive(model, guide, *fargs_vis, num_samples=100, seed=seed, dims=dims())
    try:
        save_netcdf(idata, args.out / f"{EXPERIMENT}_posterior.nc")
    except Exception as e:  # netCDF back end missing: keep going, say so
        print(f"(could not write the ArviZ netCDF file: {e})")
    U = idata.posterior["U"].values[0]  # (draw, d, N)
    mu, sd = U.mean(0), U.std(0)
    fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(10, 5))
    plots.plot_loss(r, ax_loss, label=f"SVI, sigma={sigma}")     # tandem.plots: the FitResult's loss trace
    n = X.shape[0]
    for sl, c, nm in ((slice(0, n), "tab:blue", "x"), (slice(n, 2 * n), "tab:red", "y")):
        ax.errorbar(mu[0, sl], mu[1, sl], xerr=2 * sd[0, sl], yerr=2 * sd[1, sl], fmt="o", ms=3,
                    c=c, label=f"view {nm} (posterior mean ± 2 sd)")
    ax.set_title(f"Pyro model: latent positions (whitened), SVI angle {angle:.1e} rad", fontsize=9)
    ax.set(xlabel="latent dim 1", ylabel="latent dim 2")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, args.out / f"{EXPERIMENT}_posterior.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return angle


def main(args):
    seeds = seed_list(args)
    fractions = list(args.fractions)
    if args.quick:
        args.n, args.n_curve, fractions, seeds = 200, 120, [0.2], seeds[:2]
    for f in fractions:
        if not 0 < f < 1:
            raise ValueError(f"--fractions: {f} is not in (0, 1)")
    config = {k: (str(v) if not isinstance(v, (int, float, bool, type(None))) else v)
              for k, v in vars(args).items()}
    config.update(fractions=fractions, d={"scurve_swissroll": 2, "linear_curve": 3},
                  match_candidates="every point of the other view", oos_fraction=0.25)
    res = Results(EXPERIMENT, seeds, config)
    vals, timings = {}, {}
    fitted, known_plot, data0 = {}, {}, None
    for s in seeds:
        data = datasets(args, s)
        for ds, (X, Y, lat, d) in data.items():
            for f in fractions:
                out, fm, known = evaluate(X, Y, lat, d, f, args.k, s * 1000 + int(round(100 * f)), timings)
                for m, r in out.items():
                    for q, v in r.items():
                        vals.setdefault((ds, f, m, q), []).append(v)
                if s == seeds[0] and f == fractions[len(fractions) // 2]:
                    fitted[ds], known_plot[ds], data0 = fm, known, data
    for (ds, f, m, q), v in vals.items():
        res.add(m, q, v, data_set=ds, setting=f"{int(round(100 * f))}% known", known_fraction=f)
    for m, (tr, pr) in timings.items():
        res.time(m, "train", tr)
        res.time(m, "predict", pr)
    args.out.mkdir(parents=True, exist_ok=True)
    plot_alignments(data0, fitted, known_plot, args.out / f"{EXPERIMENT}_alignments.png")
    run_svi(args, res, seeds[0])
    path = res.write(args.out)
    print(res.table(("data_set", "setting")))
    print(f"wrote {path}")
    return res


if __name__ == "__main__":
    main(parser().parse_args())
