"""McGPDS collapsed L-BFGS at N = 10⁴ with the mapping kernel and the inducing inputs learned: bound per evaluation.

Evidence for issue 21 item 2: whether the fit makes steady progress with the normal-equation
h term and with the least-squares one (:data:`tandem.inference.mcgpds.streamed.STABLE_H`). The
data are the benchmark's simulated frames (``simulate_sequences(n_seq, seq_len, [10, 8], Q=2,
M=20, seed=0)``); α, ε, β, the time kernels and W are fixed, everything else (q(X), the kernel,
Z) is learned by ``fit_mcgpds``'s joint phase: one L-BFGS run of ``--iters`` iterations (strong-Wolfe
line search, torch's default of at most 1.25·iters evaluations in all), every evaluation logged.

``--init benchmark`` starts instead where ``examples/bench_scale.py`` starts its fits (the
stochastic model's initialisation, one step of it, and its fixed β = 100 on the standardised
views, the β of the benchmark's full-data bound), collapses it (``StochasticMcGPDS.collapsed_data``,
windows = sequences) and runs one L-BFGS of ``--iters`` iterations on the collapsed bound through
:func:`tandem.inference.fit`: its bounds are the benchmark's, so they compare with the stochastic
fit's time to quality there.

Usage::

    OMP_NUM_THREADS=1 python docs/mcgpds_lbfgs_progress.py --stable-h 1 --iters 40 --out stable.json
    OMP_NUM_THREADS=1 python docs/mcgpds_lbfgs_progress.py --init benchmark --iters 40 --out bench.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import torch

from tandem.guides.mcgpds import mcgpds_guide
from tandem.inference import LBFGS, fit
from tandem.inference.mcgpds import fit as fit_module
from tandem.inference.mcgpds import streamed
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds
from tandem.inference.mcgpds.stochastic import simulate_sequences
from tandem.models.mcgpds import mcgpds_model


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-seq", type=int, default=10)
    p.add_argument("--seq-len", type=int, default=1000)
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--stable-h", choices=("0", "1", "auto"), default="auto",
                   help="the h term's form: 0 normal equations, 1 least squares, auto the default")
    p.add_argument("--out", default=None)
    p.add_argument("--log", default=None, help="append every evaluation (CPU s, bound) here as it happens")
    p.add_argument("--init", choices=("pca", "benchmark"), default="pca",
                   help="fit_mcgpds's PCA start (β by SNR) or bench_scale's start (β = 100 on standardised views)")
    a = p.parse_args()
    evals = []
    inner = fit_module.collapsed_loss

    def logged(*args, **kwargs):
        # every evaluation of the loss, line-search trials included, with its CPU time
        loss = inner(*args, **kwargs)
        evals.append((time.process_time(), -float(loss.detach())))
        if a.log:
            with open(a.log, "a") as fh:
                fh.write(f"{evals[-1][0]:.2f} {evals[-1][1]:.9e}\n")
        return loss

    logged.deterministic = True
    fit_module.collapsed_loss = logged
    if a.stable_h != "auto":
        streamed.STABLE_H = a.stable_h == "1"
    sim = simulate_sequences(a.n_seq, a.seq_len, [10, 8], Q=2, M=20, seed=0)
    if a.init == "benchmark":
        return _from_benchmark_start(a, sim, logged, evals)
    cfg = McGPDSConfig(Q=2, M=20, fixed=("alpha", "eps", "beta", "time", "W"), cycles=0,
                       joint_iters=a.iters, lbfgs_max_iter=a.iters)
    t0 = time.process_time()
    f = fit_mcgpds(sim["views"], sim["times"], sequence_ids=sim["seq_ids"], config=cfg, seed=0, progress=False)
    cpu = time.process_time() - t0
    N = int(sim["times"].numel())
    bounds = [-float(x) for x in f.losses]
    print(f"N = {N}, STABLE_H = {streamed.STABLE_H}, cpu {cpu:.0f} s, final bound {f.bound:.6e}")
    for i, b in enumerate(bounds):
        print(f"  iter {i + 1:3d}  bound {b: .6e}  ({b / N:.4f} nats/frame)")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"N": N, "stable_h": streamed.STABLE_H, "cpu_s": cpu, "bounds": bounds, "evals": evals,
                       "final_bound": f.bound, "torch": torch.__version__}, fh, indent=1)


def _from_benchmark_start(a, sim, loss, evals):
    """One L-BFGS run on the collapsed bound from bench_scale's start (see the module docstring)."""
    bench = importlib.util.spec_from_file_location(
        "bench_scale", Path(__file__).resolve().parents[1] / "examples" / "bench_scale.py")
    bench_scale = importlib.util.module_from_spec(bench)
    bench.loader.exec_module(bench_scale)
    data = bench_scale.collapsed_start(sim, 2, 20, min(a.seq_len, int(sim["times"].numel())), 0)
    t0 = time.process_time()
    res = fit(mcgpds_model, mcgpds_guide, data, loss=loss, num_steps=1, seed=0, progress=False,
              clear_params=True, optim=LBFGS(max_iter=a.iters))
    cpu = time.process_time() - t0
    evals = [(t - t0, b) for t, b in evals]   # CPU seconds since the start of the fit
    N = int(sim["times"].numel())
    best = max(b for _, b in evals)
    print(f"N = {N}, STABLE_H = {streamed.STABLE_H}, benchmark start, cpu {cpu:.0f} s, "
          f"start {evals[0][1] / N:.4f}, best {best / N:.4f} nats/frame ({len(evals)} evaluations)")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"N": N, "init": "benchmark", "stable_h": streamed.STABLE_H, "cpu_s": cpu, "evals": evals,
                       "best_bound": best, "final_loss": float(res.final_loss), "torch": torch.__version__},
                      fh, indent=1)


if __name__ == "__main__":
    main()
