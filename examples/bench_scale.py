"""Scaling benchmark: McGPDS training time per epoch and peak memory vs the number of frames N.

Data: simulated from the model's own generative story
(:func:`tandem.inference.mcgpds.stochastic.simulate_sequences`: the first chunk with
``tandem.models.mcgpds.simulate``, further chunks with the model conditioned on the same
inducing values), ``N / seq_len`` sequences of ``seq_len`` frames, two views.

Methods, per N (each measured in a fresh subprocess so that peak memory is its own):

* **collapsed** — the paper's collapsed bound (one step = one epoch: every frame, the
  sequences as blocks of the time kernel, so its memory grows with N·seq_len²), skipped
  when its estimated memory exceeds ``--collapsed-max-gb`` (reported as "not run").
* **stochastic** — :class:`tandem.inference.mcgpds.stochastic.StochasticMcGPDS`: windows
  of ``--window`` frames, ``--batch`` windows per step; an epoch is ``S / batch`` steps
  (S windows). The time of the second epoch is reported (the first also creates the
  per-window parameters).

Epoch time: the mean over the epochs run in ``--min-time`` seconds after a warm-up epoch,
as wall time (``time.perf_counter``; CUDA synchronised) and, on the CPU, as the process's
CPU time (``time.process_time``; with one thread that is the work done, which a shared
machine does not inflate). Memory: peak resident set size of the subprocess (CPU) or
``torch.cuda.max_memory_allocated`` (CUDA). The growth exponent is the least-squares slope
of log(epoch time) on log N — CPU time on the CPU, wall time on CUDA.

Writes ``bench_scale.json`` (records ``epoch_time_s``, ``peak_memory_mb`` with qualifiers
``n_frames``, ``device``; ``growth_exponent`` per method/device) and ``bench_scale.png``
(log-log plot). ``--device both`` also runs CUDA when present (else says it is absent).
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyro
import torch

from tandem.guides.mcgpds import mcgpds_guide
from tandem.inference import metrics
from tandem.inference.datasets.human_pose import load_human_pose
from tandem.inference.experiments.cli import base_parser, set_seed
from tandem.inference.experiments.results import Results
from tandem.inference.mcgpds import stochastic as st
from tandem.inference.mcgpds.bound import collapsed_loss
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds, predict_view
from tandem.inference.svi import fit
from tandem.models.mcgpds import mcgpds_model

EXPERIMENT = "bench_scale"


def parser():
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000], help="numbers of frames N")
    p.add_argument("--seq-len", type=int, default=1000, help="frames per simulated sequence")
    p.add_argument("--window", type=int, default=100, help="stochastic: frames per window")
    p.add_argument("--batch", type=int, default=10, help="stochastic: windows per step")
    p.add_argument("--Q", type=int, default=2)
    p.add_argument("--M", type=int, default=20)
    p.add_argument("--dims", type=int, nargs="+", default=[10, 8], help="output dimension of each view")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "both"))
    p.add_argument("--collapsed-max-gb", type=float, default=4.0,
                   help="skip the collapsed bound when its estimated memory exceeds this")
    p.add_argument("--min-time", type=float, default=5.0,
                   help="time epochs until this many seconds have passed (mean per epoch)")
    p.add_argument("--pose", action="store_true",
                   help="instead: stochastic vs collapsed McGPDS on the human-pose protocol (real data)")
    p.add_argument("--pose-steps", type=int, default=600, help="--pose: stochastic steps")
    p.add_argument("--pose-batch", type=int, default=3, help="--pose: sequences per step (of 7)")
    p.add_argument("--data-dir", type=Path, default=None, help="--pose: shared data folder")
    p.add_argument("--in-process", action="store_true",
                   help="measure in this process (faster; peak memory is then cumulative)")
    p.add_argument("--one", nargs=3, metavar=("METHOD", "N", "DEVICE"), help=argparse.SUPPRESS)
    return p


def collapsed_memory_gb(N, seq_len, V, Q, M, window=None):
    """Rough peak of the collapsed bound: the (V, Q, blocks, n, n) private-covariance stack
    and its autograd copies (≈ 6 of them), plus the ψ2 pair table (M(M+1)/2 × N) ×3."""
    n = min(seq_len, N)
    blocks = math.ceil(N / n)
    return 8 * (6 * (V * Q + 4) * blocks * n * n + 3 * M * (M + 1) / 2 * N * V) / 1e9


def run_one(method: str, N: int, device: str, args) -> dict:
    """Simulate, fit for one/two epochs, return timings and memory (run in a subprocess)."""
    set_seed(args.seed)
    n_seq = max(1, N // args.seq_len)
    seq_len = min(args.seq_len, N)
    sim = st.simulate_sequences(n_seq, seq_len, args.dims, Q=args.Q, M=args.M, seed=args.seed)
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out = {"method": method, "n_frames": int(sim["times"].numel()), "device": device}
    if method == "stochastic":
        cfg = st.StochasticConfig(Q=args.Q, M=args.M, window=args.window, batch=args.batch, num_steps=0,
                                  fixed=("alpha", "eps", "beta", "time", "W"))
        m = st.StochasticMcGPDS(cfg, device=dev)
        m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=args.seed)
        pyro.clear_param_store()
        spe = math.ceil(m.data.windows.S / args.batch)
        sync()
        t0 = time.perf_counter()
        m.train(spe, seed=args.seed, progress=False)          # warm-up epoch: creates the window params
        sync()
        first = time.perf_counter() - t0
        walls, cpus = _epochs(lambda: m.train(spe, seed=args.seed, progress=False), sync, args.min_time)
        out.update(epoch_time_s=float(np.mean(walls)), epoch_cpu_s=float(np.mean(cpus)), epochs_timed=len(walls),
                   first_epoch_s=first, steps_per_epoch=spe, final_loss=float(m.result.losses[-1]))
    else:
        cfg = st.StochasticConfig(Q=args.Q, M=args.M, window=seq_len, batch=1, num_steps=0,
                                  fixed=("alpha", "eps", "beta", "time", "W"))
        m = st.StochasticMcGPDS(cfg)
        m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=args.seed)
        pyro.clear_param_store()
        m.train(1, seed=args.seed)        # registers every window's q(X): the same init
        data = m.collapsed_data()          # windows = the sequences: the collapsed model
        pyro.clear_param_store()
        def step(first=False):
            return fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, num_steps=1, seed=args.seed,
                       progress=False, clear_params=first, optim=pyro.optim.Adam({"lr": 0.01}))
        t0 = time.perf_counter()
        res = step(True)                   # one Adam step on the collapsed bound = one epoch; warms caches
        first = time.perf_counter() - t0
        walls, cpus = _epochs(step, sync, args.min_time)
        out.update(epoch_time_s=float(np.mean(walls)), epoch_cpu_s=float(np.mean(cpus)), epochs_timed=len(walls),
                   first_epoch_s=first, steps_per_epoch=1, final_loss=float(res.losses[-1]))
    if dev.type == "cuda":
        out["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    else:
        out["peak_memory_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _epochs(run_epoch, sync, min_time: float):
    """Run epochs until ``min_time`` wall seconds have passed (at least one); per-epoch wall
    and CPU (``time.process_time``, this process) seconds. CPU time is the number that a
    shared machine does not distort (one thread: CPU time = work)."""
    walls, cpus = [], []
    while not walls or sum(walls) < min_time:
        sync()
        w0, c0 = time.perf_counter(), time.process_time()
        run_epoch()
        sync()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return walls, cpus


def _child(method, N, device, args) -> dict:
    cmd = [sys.executable, __file__, "--one", method, str(N), device, "--seed", str(args.seed),
           "--seq-len", str(args.seq_len), "--window", str(args.window), "--batch", str(args.batch),
           "--Q", str(args.Q), "--M", str(args.M), "--dims", *map(str, args.dims), "--min-time", str(args.min_time)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return {"method": method, "n_frames": N, "device": device, "error": r.stderr.strip().splitlines()[-1:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def growth_exponent(ns, ts) -> float:
    """Least-squares slope of log t on log N."""
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


#: the code-faithful pose predictor of bench_mcgpds (h only, authors' demo settings)
POSE_PREDICTOR = dict(method="code", test_iters=8, fixll=True, beta_target_override=100.0,
                      latent_for_prediction="shared_nn", output_components="h")
POSE_FIXED = ("alpha", "eps", "beta", "time", "W")


def pose(args):
    """Human pose (566 frames, 7 sequences): the stochastic fit with windows = sequences (the
    paper's model) and minibatches of ``--pose-batch`` sequences vs the collapsed fit with
    bench_mcgpds's short schedule (3 × [20 + 20] L-BFGS); Q = 10, M = 100, α/ε/β/time/W fixed;
    the same code-faithful predictor; mean joint error in original units."""
    data = load_human_pose(args.data_dir)
    seq = np.zeros(data.n_train, dtype=np.int64)
    ends = list(data.seq_ends)
    for i, (a, b) in enumerate(zip([0, *ends[:-1]], ends)):
        seq[a:b] = i
    Q, M, sched = 10, 100, dict(cycles=3, var_iters=20, model_iters=20, joint_iters=0)
    if args.quick:   # smoke size
        Q, M, args.pose_steps = 3, 10, 2
        sched = dict(cycles=1, var_iters=2, model_iters=2, joint_iters=0, lbfgs_max_iter=2)
    res = Results(EXPERIMENT + "_pose", [args.seed], {"steps": args.pose_steps, "batch": args.pose_batch,
                                                      "Q": Q, "M": M, "fixed": POSE_FIXED, "collapsed": sched,
                                                      "predictor": POSE_PREDICTOR, "quick": args.quick})
    cfg = st.StochasticConfig(Q=Q, M=M, window=int(np.diff([0, *ends]).max()), batch=args.pose_batch,
                              num_steps=args.pose_steps, fixed=POSE_FIXED)
    t0 = time.perf_counter()
    m = st.StochasticMcGPDS(cfg).fit(data.views, data.t, seq, seed=args.seed)
    t_fit = time.perf_counter() - t0
    elbo = m.elbo(optimal_inducing=True)
    f = m.to_fitted()     # predict_view clears the parameter store: evaluate the ELBO first
    pred = predict_view(f, m.to_model_units(torch.as_tensor(data.m1_test), 0), data.t_test, seed=args.seed,
                        **POSE_PREDICTOR)
    err = float(metrics.mean_joint_error(data.unscale_mean(m.to_data_units(pred.mean, view=1).numpy()),
                                         data.Y2_test))
    res.add("McGPDS stochastic", "mean_joint_error", err)
    res.add("McGPDS stochastic", "bound", elbo)
    res.time("McGPDS stochastic", "train", t_fit)
    print(f"stochastic: {args.pose_steps} steps of {args.pose_batch}/7 sequences, ELBO {elbo:.1f}, "
          f"mean joint error {err:.3f}, train {t_fit:.1f} s", flush=True)
    cc = McGPDSConfig(Q=Q, M=M, J=1, fixed=POSE_FIXED, init="pca", beta_init="snr", **sched)
    t0 = time.perf_counter()
    fc = fit_mcgpds(data.views, data.t, seq_ends=data.seq_ends, config=cc, seed=args.seed, progress=False)
    t_c = time.perf_counter() - t0
    pc = predict_view(fc, data.m1_test, data.t_test, seed=args.seed, **POSE_PREDICTOR)
    err_c = float(metrics.mean_joint_error(data.unscale_mean(pc.mean.numpy()), data.Y2_test))
    res.add("McGPDS collapsed", "mean_joint_error", err_c)
    res.add("McGPDS collapsed", "bound", fc.bound)
    res.time("McGPDS collapsed", "train", t_c)
    print(f"collapsed: bound {fc.bound:.1f}, mean joint error {err_c:.3f}, train {t_c:.1f} s")
    print(res.table())
    print(f"wrote {res.write(args.out)}")
    return res


def main(args):
    if args.pose:
        return pose(args)
    if args.one:
        method, N, device = args.one
        print(json.dumps(run_one(method, int(N), device, args)))
        return None
    if args.quick:   # in this process (no subprocess start-up); memory is then the process's peak so far
        args.sizes, args.seq_len, args.window, args.batch, args.M, args.dims = [200, 400], 100, 50, 2, 5, [4, 3]
        args.in_process, args.min_time = True, 0.0
    devices = ["cpu"]
    cuda_note = None
    if args.device in ("cuda", "both"):
        if torch.cuda.is_available():
            devices = ["cuda"] if args.device == "cuda" else ["cpu", "cuda"]
        else:
            cuda_note = "CUDA requested but absent on this machine: CPU only"
            print(cuda_note)
    res = Results(EXPERIMENT, [args.seed], {k: v for k, v in vars(args).items() if k not in ("out", "one")}
                  | {"cuda_note": cuda_note})
    rows = []
    for dev in devices:
        for N in args.sizes:
            for method in ("collapsed", "stochastic"):
                if method == "collapsed":
                    if dev == "cuda":
                        continue    # the collapsed bound's code is CPU-only (see docs/_incoming/scale.md)
                    gb = collapsed_memory_gb(N, args.seq_len, len(args.dims), args.Q, args.M)
                    if gb > args.collapsed_max_gb:
                        print(f"collapsed N={N}: not run (estimated {gb:.1f} GB > {args.collapsed_max_gb} GB)")
                        res.add(f"McGPDS collapsed ({dev})", "not_run_estimated_memory_gb", gb, n_frames=N,
                                device=dev)
                        continue
                r = run_one(method, N, dev, args) if args.in_process else _child(method, N, dev, args)
                rows.append(r)
                if "error" in r:
                    print(f"{method} N={N} {dev}: FAILED {r['error']}")
                    continue
                name = f"McGPDS {method} ({dev})"
                res.add(name, "epoch_time_s", r["epoch_time_s"], n_frames=r["n_frames"], device=dev,
                        steps_per_epoch=r["steps_per_epoch"], first_epoch_s=r["first_epoch_s"],
                        epochs_timed=r["epochs_timed"])
                res.add(name, "epoch_cpu_time_s", r["epoch_cpu_s"], n_frames=r["n_frames"], device=dev)
                res.add(name, "peak_memory_mb", r["peak_memory_mb"], n_frames=r["n_frames"], device=dev)
                res.time(name, f"epoch_N{r['n_frames']}", r["epoch_time_s"])
                print(f"{name:32s} N={r['n_frames']:>8d}  epoch {r['epoch_time_s']:9.3f} s wall "
                      f"{r['epoch_cpu_s']:9.3f} s CPU "
                      f"({r['steps_per_epoch']} steps)  peak {r['peak_memory_mb']:8.0f} MB", flush=True)
    exps = {}
    for dev in devices:
        for method in ("collapsed", "stochastic"):
            key = "epoch_cpu_s" if dev == "cpu" else "epoch_time_s"   # CPU time: robust on a shared machine
            pts = [(r["n_frames"], r[key]) for r in rows
                   if r["method"] == method and r["device"] == dev and "error" not in r]
            if len(pts) >= 2:
                e = growth_exponent(*zip(*pts))
                exps[method, dev] = e
                res.add(f"McGPDS {method} ({dev})", "growth_exponent", e, sizes=[p[0] for p in pts], time=key)
                print(f"growth exponent of the epoch time ({key}), {method} ({dev}): {e:.3f}")
    print(res.table(("n_frames", "device")))
    path = res.write(args.out)
    _plot(rows, exps, Path(args.out) / f"{EXPERIMENT}.png")
    print(f"wrote {path}")
    return res


def _plot(rows, exps, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 4))
    for (method, dev), e in sorted(exps.items()):
        key = "epoch_cpu_s" if dev == "cpu" else "epoch_time_s"
        pts = sorted((r["n_frames"], r[key]) for r in rows
                     if r["method"] == method and r["device"] == dev and "error" not in r)
        ax.loglog(*zip(*pts), "o-", label=f"{method} ({dev}), slope {e:.2f}")
    ax.set_xlabel("frames N")
    ax.set_ylabel("time per epoch (s; CPU time on cpu, wall on cuda)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main(parser().parse_args())
