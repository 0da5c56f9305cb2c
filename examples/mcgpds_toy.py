"""McGPDS toy experiments (spec "Synthetic data"): shared/private signal recovery and α.

Toy 1: t = 100 points in [−1, 1]; private signals cos(π² t) (view 1), cos(√5 π t)
(view 2), shared sin(2π t). Each private signal is projected to 10 dims, the shared to 5,
by random U(0, 1) matrices; each view = [private 10, shared 5] + N(0, 0.1²) noise.
Linear mapping kernels. Every latent has Q = 2 columns (a linear map of one 1-d latent
cannot produce a view that carries two independent signals, so "Q = 1 per latent" is
read as one signal per latent column); with linear kernels M = Q inducing inputs make the
sparse GP exact ("no inducing points").

Recovery = max over latent columns of |corr(column, true signal)| (sign/scale free):
for McGPDS the shared signal is looked for in μ^(s), the private ones in the views'
private latents; the MRD-style shared-only model (α fixed to 0 and ε tiny, so
X^(1) = X^(2) = X^(s): one latent space for both views) has only μ^(s).

Toy 2: shared sin(2π t); private signals white Gaussian noise p_k with variance 0.1
(view 1) and 0.1 → 1.0 (view 2). The learned α^(2) must rise with the private variance.
Default design "mix" follows the model's own story (X^(k) = (1−α_k) X̂ + α_k X̃: a view's
latent is the shared signal plus its private signal): x^(k) = sin(2πt) + p_k, projected to
15 dims by a random U(0, 1) row, + N(0, 0.1²) noise; Q = 1, private prior "gplvm"
(K_t^(k) = I: white private dynamics, the matched prior for white-noise private signals).
Design "blocks" builds the views like toy 1 ([private 10, shared 5], Q = 2).

Why the earlier setting (blocks, Q = 2, RBF private time kernels) saturated at α ≈ 1 (see
docs/results/mcgpds.md, "Toy 2"): (1) a private prior A_k = α² K_t^(k) + (1−α)² ε I whose time kernel
is RBF (ℓ = 0.2) + 0.01 white can carry only α²·0.01 of white variance, so a white-noise
private signal pushes α to its maximum, where the views decouple; (2) with the blocks design
the shared and private signals sit in different latent columns that share one α per view:
the shared column wants α → 0, the private one α → 1, and the fit ends at one of the two ends
(bimodal, seed dependent); the private variance only rescales the private column.

Usage::

    python examples/mcgpds_toy.py --seeds 5 --out results          # full (10 noise levels)
    python examples/mcgpds_toy.py --quick --out /tmp/x   # < 60 s
    python examples/mcgpds_toy.py --toy 2 --toy2-design blocks --toy2-prior mcgpds --toy2-Q 2  # old setting
"""
from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tandem import plots  # noqa: E402
from tandem.inference.atomic_files import save_figure  # noqa: E402
from tandem.inference.experiments.cli import base_parser, seed_list, set_seed  # noqa: E402
from tandem.inference.experiments.results import Results  # noqa: E402
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds  # noqa: E402

EXPERIMENT = "mcgpds_toy"


def toy1_data(seed: int, N: int = 100, noise: float = 0.1):
    """Views (N, 15) × 2, times (N,), true signals dict (N,) each."""
    rng = np.random.default_rng(seed)
    t = np.linspace(-1, 1, N)
    sig = {"private_1": np.cos(np.pi ** 2 * t), "private_2": np.cos(np.sqrt(5) * np.pi * t),
           "shared": np.sin(2 * np.pi * t)}
    views = []
    for k in (1, 2):
        P = rng.uniform(0, 1, (1, 10))
        S = rng.uniform(0, 1, (1, 5))
        Y = np.hstack([sig[f"private_{k}"][:, None] @ P, sig["shared"][:, None] @ S])
        views.append(Y + noise * rng.standard_normal(Y.shape))
    return views, t, sig


def toy2_data(seed: int, var2: float, N: int = 100, var1: float = 0.1, noise: float = 0.1,
              design: str = "mix"):
    """Views (N, 15) × 2 and times (N,) for toy 2.

    The private signals are ``p_k = sqrt(var_k) · z_k`` with z_k ~ N(0, I) drawn from ``seed``
    (the same z_k at every var2, so one seed is one controlled sweep).
    ``design="mix"``: view k = (sin(2πt) + p_k) b_kᵀ + noise, b_k ~ U(0, 1)^15 (one latent
    signal per view: shared plus private, the model's story). ``design="blocks"``: view k =
    [p_k P_k, sin(2πt) S_k] + noise with P_k ~ U(0, 1)^10, S_k ~ U(0, 1)^5 (toy 1's layout).
    """
    if design not in ("mix", "blocks"):
        raise ValueError(f"design: expected 'mix' or 'blocks', got {design!r}")
    rng = np.random.default_rng(seed)
    t = np.linspace(-1, 1, N)
    shared = np.sin(2 * np.pi * t)
    views = []
    for v in (var1, var2):
        priv = np.sqrt(v) * rng.standard_normal(N)
        if design == "mix":
            Y = (shared + priv)[:, None] @ rng.uniform(0, 1, (1, 15))
        else:
            P = rng.uniform(0, 1, (1, 10))
            S = rng.uniform(0, 1, (1, 5))
            Y = np.hstack([priv[:, None] @ P, shared[:, None] @ S])
        views.append(Y + noise * rng.standard_normal(Y.shape))
    return views, t


def _center(views):
    return [Y - Y.mean(0) for Y in views]


def recovery(latent: np.ndarray, signal: np.ndarray) -> float:
    """max over columns of |corr(column, signal)|."""
    best = 0.0
    for q in range(latent.shape[1]):
        x = latent[:, q]
        if x.std() < 1e-12:
            continue
        best = max(best, abs(float(np.corrcoef(x, signal)[0, 1])))
    return best


def toy_config(quick: bool, **kw) -> McGPDSConfig:
    base = dict(Q=2, M=2, J=1, mapping_kernel="linear", fixed=("eps", "time", "W"), beta_init="snr",
                w_init_scale=1e-6, cycles=1, var_iters=50, model_iters=50,
                joint_iters=150 if quick else 500, lbfgs_max_iter=50, tol=1e-9)
    base.update(kw)
    return McGPDSConfig(**base)


def run_toy1(seed: int, quick: bool, progress: bool, res: Results, out: Path):
    views, t, sig = toy1_data(seed)
    views = _center(views)
    t0 = time.perf_counter()
    fm = fit_mcgpds(views, t, config=toy_config(quick), seed=seed, progress=progress)
    res.time("McGPDS", "train", time.perf_counter() - t0)
    t0 = time.perf_counter()
    # MRD-style shared-only model: α = 0 and ε tiny -> X^(1) = X^(2) = X^(s)
    fs = fit_mcgpds(views, t, config=toy_config(quick, alpha_init=1e-4, eps_init=1e-6,
                                                fixed=("alpha", "eps", "time", "W")),
                    seed=seed, progress=progress)
    res.time("shared-only (MRD-style)", "train", time.perf_counter() - t0)
    rec = {}
    lat_m = {"shared": fm.mu_s.numpy(), "private_1": fm.mu[0].numpy(), "private_2": fm.mu[1].numpy()}
    for name, s in sig.items():
        r_m = recovery(lat_m[name], s)
        r_s = recovery(fs.mu_s.numpy(), s)
        res.add("McGPDS", "recovery_abs_corr", r_m, data_set="toy1", signal=name)
        res.add("shared-only (MRD-style)", "recovery_abs_corr", r_s, data_set="toy1", signal=name)
        rec[name] = (r_m, r_s)
    res.add("McGPDS", "alpha", fm.alpha(), data_set="toy1")
    # tandem.plots: each latent space against its true signal (linear read-out), the per-view
    # relevance of the latent dimensions with α, and the bound's trace
    fig, axes = plt.subplots(2, 3, figsize=(14, 6.5))
    which = {"shared": None, "private_1": 0, "private_2": 1}
    for ax, (name, s) in zip(axes[0], sig.items()):
        plots.plot_latents(fm, t, ax, view=which[name], truth=s)
        ax.set_title(f"{name} latents vs the true {name} signal")
    plots.plot_relevance(fm, axes[1, 0])
    plots.plot_loss(fm, axes[1, 1], label="McGPDS")
    plots.plot_relevance(fs, axes[1, 2])
    axes[1, 2].set_title("shared-only (MRD-style): relevance")
    fig.tight_layout()
    save_figure(fig, out / f"mcgpds_toy1_seed{seed}.png", dpi=90)
    plt.close(fig)
    return rec, fm


def toy2_config(quick: bool, args=None) -> McGPDSConfig:
    """Toy 2 fit: linear kernels, M = Q (exact), W fixed ≈ 0 (g off), ε and time kernels fixed;
    α, β, the linear kernels' ARD weights and the latents learned."""
    Q = 1 if args is None else args.toy2_Q
    prior = "gplvm" if args is None else args.toy2_prior
    return toy_config(quick, Q=Q, M=Q, private_prior=prior)


def toy2_levels(quick: bool) -> list[float]:
    return [0.1, 0.5, 1.0] if quick else [round(0.1 * i, 1) for i in range(1, 11)]


def spearman(x, y) -> float:
    """Spearman rank correlation ρ = Pearson correlation of the ranks (ties averaged)."""
    from scipy.stats import rankdata
    rx, ry = rankdata(x), rankdata(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def run_toy2(seed: int, quick: bool, progress: bool, args=None):
    """α^(1), α^(2) learned at every private variance level of view 2 (one seed)."""
    design = "mix" if args is None else args.toy2_design
    levels = toy2_levels(quick)
    alphas = []
    for v in levels:
        views, t = toy2_data(seed, v, design=design)
        f = fit_mcgpds(_center(views), t, config=toy2_config(quick, args), seed=seed, progress=progress)
        alphas.append(f.alpha())
    return levels, alphas


def report_toy2(per_seed: dict, res: Results, out: Path, design: str):
    """Records: per level α^(1), α^(2) over seeds; per seed Spearman ρ(var, α^(2)) and strict
    monotonicity; ρ of the seed-mean curve. Plot: mean ± std over seeds."""
    seeds = sorted(per_seed)
    levels = per_seed[seeds[0]][0]
    a2 = np.array([[a[1] for a in per_seed[s][1]] for s in seeds])      # (S, L)
    a1 = np.array([[a[0] for a in per_seed[s][1]] for s in seeds])
    for j, v in enumerate(levels):
        res.add("McGPDS", "alpha_2", a2[:, j].tolist(), data_set="toy2", private_var_2=v, design=design)
        res.add("McGPDS", "alpha_1", a1[:, j].tolist(), data_set="toy2", private_var_2=v, design=design)
    rho = [spearman(levels, a2[i]) for i in range(len(seeds))]
    res.add("McGPDS", "alpha_2_spearman", rho, data_set="toy2", design=design)
    res.add("McGPDS", "alpha_2_monotone", [float(np.all(np.diff(a2[i]) > 0)) for i in range(len(seeds))],
            data_set="toy2", design=design)
    res.add("McGPDS", "alpha_2_mean_spearman", spearman(levels, a2.mean(0)), data_set="toy2", design=design)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.errorbar(levels, a2.mean(0), yerr=a2.std(0), marker="o", capsize=3, label="α^(2)")
    ax.errorbar(levels, a1.mean(0), yerr=a1.std(0), marker="s", ls="--", capsize=3, label="α^(1) (var 0.1)")
    ax.set_xlabel("private noise variance in view 2")
    ax.set_ylabel(f"learned α (mean ± std, {len(seeds)} seeds)")
    ax.set_ylim(0, 1.05)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, out / "mcgpds_toy2.png", dpi=90)
    plt.close(fig)
    return levels, a2, rho


def parser():
    p = base_parser("McGPDS toy experiments (shared/private recovery; α vs private noise)")
    p.add_argument("--toy", choices=["1", "2", "both"], default="both")
    p.add_argument("--toy2-design", choices=["mix", "blocks"], default="mix",
                   help="toy 2 views: 'mix' = (shared + private) projected (model story), 'blocks' = toy 1 layout")
    p.add_argument("--toy2-prior", choices=["gplvm", "mcgpds"], default="gplvm",
                   help="private prior K_t^(k): 'gplvm' = I (white), 'mcgpds' = RBF + white + bias")
    p.add_argument("--toy2-Q", type=int, default=1, help="latent dimension for toy 2")
    return p


def main(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = seed_list(args)
    res = Results(EXPERIMENT, seeds, config={
        "quick": args.quick, "toy1": toy_config(args.quick).to_dict(),
        "toy2": {**toy2_config(args.quick, args).to_dict(), "design": args.toy2_design,
                 "levels": toy2_levels(args.quick)}})
    progress = not args.no_progress
    toy2 = {}
    for seed in seeds:
        set_seed(seed)
        if args.toy in ("1", "both"):
            rec, fm = run_toy1(seed, args.quick, progress, res, out)
            print(f"[toy1 seed {seed}] |corr| McGPDS / shared-only: "
                  + ", ".join(f"{k} {a:.3f}/{b:.3f}" for k, (a, b) in rec.items())
                  + f"; alpha = {[round(a, 3) for a in fm.alpha()]}")
        if args.toy in ("2", "both"):
            t0 = time.perf_counter()
            toy2[seed] = run_toy2(seed, args.quick, progress, args)
            res.time("McGPDS", "toy2 sweep", time.perf_counter() - t0)
            levels, alphas = toy2[seed]
            print(f"[toy2 seed {seed}] private var 2 -> alpha_2: "
                  + ", ".join(f"{v}: {a[1]:.4f}" for v, a in zip(levels, alphas))
                  + f"  (Spearman {spearman(levels, [a[1] for a in alphas]):.3f})", flush=True)
    if toy2:
        levels, a2, rho = report_toy2(toy2, res, out, args.toy2_design)
        print(f"[toy2] alpha_2 mean ± std over {len(toy2)} seeds: "
              + ", ".join(f"{v}: {m:.3f}±{sd:.3f}" for v, m, sd in zip(levels, a2.mean(0), a2.std(0)))
              + f"; Spearman per seed {np.round(rho, 3).tolist()}")
    print(res.table(["data_set", "signal", "private_var_2"]))
    res.write(out)
    return res


if __name__ == "__main__":
    main(parser().parse_args())
