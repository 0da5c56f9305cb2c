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

Toy 2: shared sin(2π t); private signals white Gaussian noise with variance 0.1 (view 1)
and 0.1 → 1.0 (view 2), projected as above. α, W, kernels learned; ε and the time kernels
fixed. The learned α^(2) must rise with the private noise variance.

Usage::

    python examples/mcgpds_toy.py --out results          # full (10 noise levels)
    python examples/mcgpds_toy.py --quick --out /tmp/x   # < 60 s
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from inference.experiment import base_parser, seed_list, set_seed  # noqa: E402
from inference.mcgpds_fit import McGPDSConfig, fit_mcgpds  # noqa: E402
from inference.results import Results  # noqa: E402

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


def toy2_data(seed: int, var2: float, N: int = 100, var1: float = 0.1, noise: float = 0.1):
    rng = np.random.default_rng(seed)
    t = np.linspace(-1, 1, N)
    shared = np.sin(2 * np.pi * t)
    views = []
    for v in (var1, var2):
        priv = np.sqrt(v) * rng.standard_normal(N)
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
    fig, axes = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
    for ax, (name, s) in zip(axes, sig.items()):
        L = lat_m[name]
        q = int(np.argmax([abs(np.corrcoef(L[:, j], s)[0, 1]) for j in range(L.shape[1])]))
        z = (L[:, q] - L[:, q].mean()) / (L[:, q].std() + 1e-12)
        z *= np.sign(np.corrcoef(z, s)[0, 1])
        ax.plot(t, s / s.std(), "k-", label="truth")
        ax.plot(t, z, "r--", label=f"McGPDS latent col {q}")
        ax.set_ylabel(name)
        ax.legend(fontsize=7)
    axes[-1].set_xlabel("t")
    fig.tight_layout()
    fig.savefig(out / f"mcgpds_toy1_seed{seed}.png", dpi=90)
    plt.close(fig)
    return rec, fm


def run_toy2(seed: int, quick: bool, progress: bool, res: Results, out: Path):
    levels = [0.1, 0.5, 1.0] if quick else [round(0.1 * i, 1) for i in range(1, 11)]
    alphas = []
    for v in levels:
        views, t = toy2_data(seed, v)
        f = fit_mcgpds(_center(views), t, config=toy_config(quick), seed=seed, progress=progress)
        alphas.append(f.alpha())
    a2 = [a[1] for a in alphas]
    res.add("McGPDS", "alpha_2", a2, data_set="toy2", private_var_2=levels)
    res.add("McGPDS", "alpha_1", [a[0] for a in alphas], data_set="toy2", private_var_2=levels)
    monotone = bool(np.all(np.diff(a2) > 0))
    res.add("McGPDS", "alpha_2_monotone", float(monotone), data_set="toy2")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(levels, a2, "o-", label="α^(2)")
    ax.plot(levels, [a[0] for a in alphas], "s--", label="α^(1)")
    ax.set_xlabel("private noise variance in view 2")
    ax.set_ylabel("learned α")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"mcgpds_toy2_seed{seed}.png", dpi=90)
    plt.close(fig)
    return levels, alphas


def parser():
    p = base_parser("McGPDS toy experiments (shared/private recovery; α vs private noise)")
    p.add_argument("--toy", choices=["1", "2", "both"], default="both")
    return p


def main(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = seed_list(args)
    res = Results(EXPERIMENT, seeds, config={"quick": args.quick, "toy1": toy_config(args.quick).to_dict(),
                                             "toy2_levels": "0.1..1.0" if not args.quick else [0.1, 0.5, 1.0]})
    progress = not args.no_progress
    for seed in seeds:
        set_seed(seed)
        if args.toy in ("1", "both"):
            rec, fm = run_toy1(seed, args.quick, progress, res, out)
            print(f"[toy1 seed {seed}] |corr| McGPDS / shared-only: "
                  + ", ".join(f"{k} {a:.3f}/{b:.3f}" for k, (a, b) in rec.items())
                  + f"; alpha = {[round(a, 3) for a in fm.alpha()]}")
        if args.toy in ("2", "both"):
            levels, alphas = run_toy2(seed, args.quick, progress, res, out)
            print(f"[toy2 seed {seed}] private var 2 -> alpha_2: "
                  + ", ".join(f"{v}: {a[1]:.4f}" for v, a in zip(levels, alphas)))
    print(res.table(["data_set", "signal"]) if hasattr(res, "table") else "")
    res.write(out)
    return res


if __name__ == "__main__":
    main(parser().parse_args())
