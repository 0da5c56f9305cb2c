"""Scaling benchmark: McGPDS training time per epoch and peak memory vs the number of frames N.

Data: simulated from the model's own generative story
(:func:`tandem.inference.mcgpds.stochastic.simulate_sequences`: the first chunk with
``tandem.models.mcgpds.simulate``, further chunks with the model conditioned on the same
inducing values), ``N / seq_len`` sequences of ``seq_len`` frames, two views.

Methods, per N (each measured in a fresh subprocess so that peak memory is its own):

* **collapsed** — the paper's collapsed bound, one Adam step per epoch (a probe of an epoch's
  cost, not a fit: every frame, the sequences as blocks of the time kernel), skipped when its
  estimated memory exceeds ``--collapsed-max-gb`` (reported as "not run").
* **collapsed-lbfgs** — the same bound and start, one L-BFGS run (strong-Wolfe line search,
  ``--lbfgs-iters`` iterations, at most 1.25× as many evaluations, capped at ``--lbfgs-max-cpu``
  CPU seconds): the way to fit the collapsed bound. Every evaluation is a value + gradient on
  all N frames, so an "epoch" here is one evaluation and the trace has a point per evaluation
  (the best bound so far: see :func:`_lbfgs_fit`). Skipped, like the collapsed method, beyond
  ``--collapsed-max-gb``.
* **collapsed-held** — the same bound, start and cap, fitted by the λ-held schedule of
  :class:`tandem.inference.mcgpds.fit.McGPDSConfig` (``held_cycles``): L-BFGS runs of
  ``--held-iters`` iterations with the variational precisions λ held (the means, the mapping
  kernel and Z learned; the O(n³) private covariances are reused, so such an evaluation costs a
  fraction of a full one), each followed by ``--held-joint-iters`` iterations learning λ too,
  repeated until the phases' budgets reach ``--lbfgs-iters``, the CPU cap or a cycle that gains
  nothing.
  Traced like collapsed-lbfgs: a point per evaluation, whatever its cost.
* **stochastic** — :class:`tandem.inference.mcgpds.stochastic.StochasticMcGPDS`: windows
  of ``--window`` frames, ``--batch`` windows per step; an epoch is ``S / batch`` steps
  (S windows). The time of the second epoch is reported (the first also creates the
  per-window parameters).

Epoch time: the mean over the epochs run in ``--min-time`` seconds after a warm-up epoch,
as wall time (``time.perf_counter``; CUDA synchronised) and, on the CPU, as the process's
CPU time (``time.process_time``; with one thread that is the work done, which a shared
machine does not inflate). Memory: peak resident set size of the subprocess (CPU) or
``torch.cuda.max_memory_allocated`` (CUDA). Every method runs on every device asked for (the
collapsed start is built on that device). The growth exponent is the least-squares slope
of log(epoch time) on log N — CPU time on the CPU, wall time on CUDA.

Quality: after the warm-up epoch and after every timed epoch the **full-data collapsed
bound** F (the McGPDS ELBO on all N frames, standardised units, no parameter update) is
evaluated — for the collapsed method with :func:`tandem.inference.mcgpds.bound.collapsed_loss`,
for the stochastic one with ``StochasticMcGPDS.elbo(optimal_inducing=True)`` (q(V), q(U) at
their optimum: the value the collapsed bound has; the parameter store is restored afterwards so
the evaluation does not change the fit). Its CPU time is not counted. The trace of
(cumulative training CPU seconds incl. the warm-up epoch, F) pairs is recorded — on CUDA the
trace's clock is synchronised wall time instead (the host thread mostly waits there; a row's
``clock`` says which), and the ``*_cpu_s`` names then hold wall seconds; with F* the best
bound any method reached at that N and device, the time to quality is the first traced time with
F ≥ F* − 0.01·|F*| (within 1 %) and with F ≥ F* − 0.1·N (within 0.1 nats/frame); NaN (JSON
``null``) if never reached. At least ``--min-epochs`` timed epochs are run; with ``--flat-tol``
epochs continue until one gains less than that many nats per frame (the curve has flattened:
the fit's own best is then the reference where it is the only method), and ``--max-cpu`` caps a
fit's training CPU seconds (``stop`` in the record says which rule ended it). Each trace point is
also printed to stderr as it is taken, so a run stopped early leaves its curve in the log.

Divergence: a timed fit diverges when a traced bound is non-finite or F falls between two
consecutive trace points by more than ``--diverge-tol`` nats per frame (default 1.0). The
results are still written, then the script exits non-zero (``SystemExit`` naming method, N,
device and the numbers).

Writes ``bench_scale.json`` (records ``epoch_time_s``, ``peak_memory_mb``, ``final_bound``
(qualifier ``trace``: [[cpu_s, F], ...]), ``final_bound_per_frame``, ``time_to_1pct_cpu_s``,
``time_to_0.1nat_cpu_s`` with qualifiers ``n_frames``, ``device``; ``growth_exponent`` per
method/device) and ``bench_scale.png`` (log-log plot). ``--device both`` also runs CUDA when
present (else says it is absent).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyro
import torch

from tandem.guides.mcgpds import mcgpds_guide
from tandem.inference import metrics
from tandem.inference.atomic_files import save_figure, write_text_atomic
from tandem.inference.datasets.human_pose import load_human_pose
from tandem.inference.experiments.cli import base_parser, int_at_least, number_type, set_seed
from tandem.inference.experiments.results import Results, environment
from tandem.inference.mcgpds import stochastic as st
from tandem.inference.mcgpds.bound import collapsed_loss, likelihood_ceiling
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds, predict_view
from tandem.inference.mcgpds.preconditioner import PriorPreconditioner
from tandem.inference.svi import LBFGS, fit
from tandem.models.mcgpds import hyperparams, mcgpds_model

EXPERIMENT = "bench_scale"
#: the McGPDS fits timed
METHODS = ("collapsed", "collapsed-lbfgs", "collapsed-held", "stochastic")
#: the methods that fit the collapsed bound with L-BFGS (traced per evaluation, capped by --lbfgs-max-cpu)
LBFGS_METHODS = ("collapsed-lbfgs", "collapsed-held")
#: suffix of the method of a ``--reference-from`` row
REFERENCE = " reference"
#: default divergence tolerance: the full-data bound may fall by at most this many nats/frame over an epoch
DIVERGE_TOL = 1.0
#: collapsed-held: iterations per λ-held phase and per λ-learning phase after it (the library's defaults)
HELD_ITERS, HELD_JOINT_ITERS = McGPDSConfig.held_iters, McGPDSConfig.held_joint_iters


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
    p.add_argument("--min-epochs", type=int, default=3,
                   help="time at least this many epochs (after the warm-up) so the bound trace has several points")
    p.add_argument("--flat-tol", type=float, default=None,
                   help="keep running epochs until one raises the full-data bound by less than this many nats "
                        "per frame (default: off, --min-epochs/--min-time decide)")
    p.add_argument("--max-cpu", type=float, default=math.inf,
                   help="stop a fit once its training CPU seconds exceed this (default: no cap)")
    p.add_argument("--collapsed-max-cpu", type=float, default=None,
                   help="the collapsed method's own CPU cap (default: --max-cpu); its one Adam step per epoch "
                        "measures an epoch's cost and gains slowly, so a long run need not wait for it")
    p.add_argument("--lbfgs-iters", type=int_at_least(1), default=1000,
                   help="collapsed-lbfgs: L-BFGS iterations (at most 1.25× as many evaluations); collapsed-held: "
                        "the sum of its phases' iteration budgets")
    p.add_argument("--lbfgs-max-cpu", type=number_type(float, lambda v: v >= 0, "CPU seconds >= 0"), default=900.0,
                   help="collapsed-lbfgs, collapsed-held: their CPU cap in seconds (default: 15 CPU-minutes, the "
                        "time-to-quality budget of the scaling goal; inf: none)")
    p.add_argument("--precondition", action=argparse.BooleanOptionalAction, default=True,
                   help="collapsed-lbfgs, collapsed-held: L-BFGS with the means whitened by the private prior "
                        "covariances' Cholesky factors (tandem.inference.mcgpds.preconditioner; default); "
                        "--no-precondition: plain L-BFGS")
    p.add_argument("--held-iters", type=int_at_least(1), default=HELD_ITERS,
                   help="collapsed-held: L-BFGS iterations of each phase with the precisions λ held")
    p.add_argument("--held-joint-iters", type=int_at_least(0), default=HELD_JOINT_ITERS,
                   help="collapsed-held: L-BFGS iterations learning λ too after each λ-held phase")
    p.add_argument("--prior-cache-mb", type=number_type(float, lambda v: v >= 0, "MB >= 0"), default=None,
                   help="the collapsed bound's cache of prior factors (streamed.PRIOR_CACHE_MB; default: the "
                        "library's; inf: every sequence's, 40 MB per 1000-frame sequence with two views): memory "
                        "for time")
    p.add_argument("--kl-unchunked-mb", type=number_type(float, lambda v: v >= 0, "MB >= 0"), default=None,
                   help="the collapsed bound's KL stacks are computed in one piece up to this size "
                        "(streamed.KL_UNCHUNKED_MB; default: the library's; inf: never chunked)")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: the stochastic config's 0.05; Adam 0.01 for the collapsed bound)")
    p.add_argument("--hyper-iters", type=int, default=None,
                   help="stochastic: L-BFGS iterations on the hyperparameters per epoch (default: the config's 5; "
                        "0 = the old Adam step on the minibatch gradient every step, rate --lr)")
    p.add_argument("--diverge-tol", type=float, default=DIVERGE_TOL,
                   help="a fit diverges (exit non-zero) when its full-data bound is non-finite or falls over an "
                        "epoch by more than this many nats per frame (default %(default)s)")
    p.add_argument("--pose", action="store_true",
                   help="instead: stochastic vs collapsed McGPDS on the human-pose protocol (real data)")
    p.add_argument("--pose-steps", type=int, default=600, help="--pose: stochastic steps")
    p.add_argument("--pose-batch", type=int, default=3, help="--pose: sequences per step (of 7)")
    p.add_argument("--data-dir", type=Path, default=None, help="--pose: shared data folder")
    p.add_argument("--skip-peer", action="store_true",
                   help="do not time GPyTorch's Bayesian GPLVM (run by default when the 'peers' extra is installed)")
    p.add_argument("--peer-lr", type=float, default=0.01, help="GPyTorch peer: Adam learning rate")
    p.add_argument("--peer-tol", type=float, default=0.01,
                   help="GPyTorch peer: converged when a block of steps improves the mean minibatch ELBO by less "
                        "than this many nats per frame")
    p.add_argument("--peer-max-cpu", type=float, default=300.0, help="GPyTorch peer: CPU-second cap per N")
    p.add_argument("--in-process", action="store_true",
                   help="measure in this process (faster; peak memory is then cumulative)")
    p.add_argument("--mem-check", action="store_true",
                   help="instead: peak resident memory and CPU time of ONE value + gradient of the collapsed "
                        "bound (streamed, the fits' path) at --mem-sizes frames for each of --mem-M")
    p.add_argument("--mem-sizes", type=int, nargs="+", default=[100000], help="--mem-check: numbers of frames")
    p.add_argument("--mem-M", type=int, nargs="+", default=[20, 100], help="--mem-check: inducing points")
    p.add_argument("--mem-old", action="store_true",
                   help="--mem-check: also the old all-at-once bound (streamed.unstreamed; memory grows with N)")
    p.add_argument("--rows-from", type=Path, nargs="+", default=None,
                   help="run nothing: summarise raw rows from these files (a run's bench_scale_rows.json, the "
                        "JSON line of single-method runs, or an earlier bench_scale.json, whose rows are rebuilt "
                        "from its records) into bench_scale.json, e.g. to add a long 10^5 run; a later file's "
                        "row replaces an earlier one of the same method, N and device")
    p.add_argument("--reference-from", type=Path, nargs="+", default=None,
                   help="with --rows-from: the McGPDS rows of these files (earlier runs of the same fits, e.g. "
                        "before a speed-up) join as '<method> reference' rows: their bounds count for the best "
                        "bound F* of each N (a longer earlier run keeps the time to quality honest), their "
                        "times are reported beside, and they stay out of the growth exponents")
    p.add_argument("--one", nargs=3, metavar=("METHOD", "N", "DEVICE"), help=argparse.SUPPRESS)
    p.add_argument("--one-mem", nargs=3, metavar=("MODE", "N", "M"), help=argparse.SUPPRESS)
    return p


def collapsed_memory_gb(N, seq_len, V, Q, M, window=None, dims=(10, 8)):
    """Rough peak of one value + gradient of the (streamed) collapsed bound
    (:mod:`tandem.inference.mcgpds.streamed`): the cached prior factors (at most
    ``PRIOR_CACHE_MB``), about ten stacks of one KL chunk (``KL_CHUNK_MB`` each, or one block's
    (V, Q, n, n) stack when larger), one ψ chunk, and the O(N) parameters, moments and data
    (≈ 40 floats per latent column and 4 per output per frame), plus the interpreter (0.4 GB).
    Measured: 1.34 GB at N = 10⁵, M = 20, 1.88 GB at M = 100 (``--mem-check``)."""
    from tandem.inference.mcgpds import streamed
    from tandem.models import gp_kernels
    n = min(seq_len, N)
    stack = 8 * V * Q * math.ceil(N / n) * n * n
    chunk = max(streamed.KL_CHUNK_MB * 2 ** 20, 8 * V * Q * n * n)
    if stack <= streamed.KL_UNCHUNKED_MB * 2 ** 20:      # all at once: ≈ 3.3× the stack
        chunk = 0.33 * stack
    c = gp_kernels.PSI_CHUNK or max(1, gp_kernels.PSI_CHUNK_ENTRIES // M)
    psi = 8 * min(c, N) * 6 * M + 8 * 32 * M * (M + 1) / 2
    per_frame = 8 * (V * Q * 40 + 4 * sum(dims))
    return (0.4e9 + streamed.PRIOR_CACHE_MB * 2 ** 20 + 10 * chunk + psi + per_frame * N) / 1e9


def run_one(method: str, N: int, device: str, args) -> dict:
    """Simulate, fit for one/two epochs, return timings and memory (run in a subprocess), under
    the collapsed bound's memory settings of the command line (``--prior-cache-mb``,
    ``--kl-unchunked-mb``; recorded in the row when given)."""
    from tandem.inference.mcgpds import streamed
    cache, unchunked = getattr(args, "prior_cache_mb", None), getattr(args, "kl_unchunked_mb", None)
    with streamed.streaming(prior_cache_mb=cache, kl_unchunked_mb=unchunked):
        out = _run_one(method, N, device, args)
    if cache is not None or unchunked is not None:
        out["streaming"] = {"prior_cache_mb": cache, "kl_unchunked_mb": unchunked}
    return out


def _run_one(method: str, N: int, device: str, args) -> dict:
    set_seed(args.seed)
    n_seq = max(1, N // args.seq_len)
    seq_len = min(args.seq_len, N)
    sim = st.simulate_sequences(n_seq, seq_len, args.dims, Q=args.Q, M=args.M, seed=args.seed)
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    # the traces' clock: CPU time on the CPU (one thread: the work done); on an accelerator the
    # host thread mostly waits, so there it is synchronised wall time
    clock, clock_name = (time.process_time, "cpu") if dev.type == "cpu" else (time.perf_counter, "wall")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out = {"method": method, "n_frames": int(sim["times"].numel()), "device": device}
    if method == "stochastic":
        lr = {} if args.lr is None else {"lr": args.lr}
        if args.hyper_iters is not None:
            lr["hyper_iters"] = args.hyper_iters
        cfg = st.StochasticConfig(Q=args.Q, M=args.M, window=args.window, batch=args.batch, num_steps=0,
                                  fixed=("alpha", "eps", "beta", "time", "W"), **lr)
        m = st.StochasticMcGPDS(cfg, device=dev)
        m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=args.seed)
        pyro.clear_param_store()
        spe = math.ceil(m.data.windows.S / args.batch)
        sync()
        t0, c0 = time.perf_counter(), clock()
        m.train(spe, seed=args.seed, progress=False)          # warm-up epoch: creates the window params
        sync()
        first, first_cpu = time.perf_counter() - t0, clock() - c0
        bound = lambda: _stochastic_bound(m)                  # noqa: E731
        trace = [(first_cpu, bound())]
        _print_point(f"{method} N={N}", 0, trace[0], first, N)
        walls, cpus, stop = _epochs(lambda: m.train(spe, seed=args.seed, progress=False), sync, args.min_time,
                                    args.min_epochs, bound, trace, clock=clock, **_stop_rules(args, N, method))
        with torch.no_grad():
            ceiling = bound_ceiling([v["beta"] for v in st.model_params(m.data)["views"]], m.data.out_dims,
                                    m.data.N)
        out.update(epoch_time_s=_mean_or(walls, first), epoch_cpu_s=_mean_or(cpus, first_cpu), epochs_timed=len(walls),
                   first_epoch_s=first, steps_per_epoch=spe, final_loss=float(m.result.losses[-1]))
    elif method in LBFGS_METHODS:
        data = collapsed_start(sim, args.Q, args.M, seq_len, args.seed, device=dev)
        rules = _stop_rules(args, N, method)        # flat_tol does not apply to L-BFGS's evaluations
        phases = held_phases(args) if method == "collapsed-held" else None
        trace, walls, cpus, stop, evals = _lbfgs_fit(data, args, rules["max_cpu"], rules["label"], N, clock=clock,
                                                     phases=phases)
        ceiling = _collapsed_ceiling(data)
        out.update(epoch_time_s=_mean_or(walls[1:], walls[0]), epoch_cpu_s=_mean_or(cpus[1:], cpus[0]),
                   epochs_timed=len(walls) - 1, first_epoch_s=walls[0], steps_per_epoch=1,
                   final_loss=-float(evals[-1][1]), evaluations=[[float(c), float(b)] for c, b in evals],
                   preconditioned=bool(args.precondition))
    else:
        data = collapsed_start(sim, args.Q, args.M, seq_len, args.seed, device=dev)
        lr = 0.01 if args.lr is None else args.lr
        def step(first=False):
            return fit(mcgpds_model, mcgpds_guide, data, loss=collapsed_loss, num_steps=1, seed=args.seed,
                       progress=False, clear_params=first, optim=pyro.optim.Adam({"lr": lr}))
        sync()
        t0, c0 = time.perf_counter(), clock()
        res = step(True)                   # one Adam step on the collapsed bound = one epoch; warms caches
        sync()
        first, first_cpu = time.perf_counter() - t0, clock() - c0
        def bound():
            with torch.no_grad():
                return -float(collapsed_loss(mcgpds_model, mcgpds_guide, data))
        trace = [(first_cpu, bound())]
        _print_point(f"{method} N={N}", 0, trace[0], first, N)
        walls, cpus, stop = _epochs(step, sync, args.min_time, args.min_epochs, bound, trace, clock=clock,
                                    **_stop_rules(args, N, method))
        ceiling = _collapsed_ceiling(data)
        out.update(epoch_time_s=_mean_or(walls, first), epoch_cpu_s=_mean_or(cpus, first_cpu), epochs_timed=len(walls),
                   first_epoch_s=first, steps_per_epoch=1, final_loss=float(res.losses[-1]))
    out["trace"] = [[float(c), float(b)] for c, b in trace]
    out["clock"] = clock_name
    out["stop"] = stop
    out["final_bound"] = float(trace[-1][1])
    out["bound_ceiling"] = ceiling
    out["diverged"] = check_divergence(trace, out["n_frames"], args.diverge_tol, method, device, ceiling)
    if dev.type == "cuda":
        out["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    else:
        out["peak_memory_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _collapsed_ceiling(data) -> float:
    """:func:`bound_ceiling` of a collapsed model (``McGPDSData``) at its current β."""
    with torch.no_grad():
        return bound_ceiling([v["beta"] for v in hyperparams(data)["views"]], [int(Y.shape[1]) for Y in data.views],
                             int(data.N))


def held_phases(args):
    """collapsed-held's L-BFGS phases, ``(frozen groups, iterations)``: [``--held-iters`` with λ
    held, ``--held-joint-iters`` learning λ too] repeated (:class:`McGPDSConfig`'s ``held_cycles``
    without an end; :func:`_lbfgs_fit` stops it)."""
    while True:
        yield ("lam",), args.held_iters
        if args.held_joint_iters:
            yield (), args.held_joint_iters


def _lbfgs_fit(data, args, max_cpu: float = math.inf, label: str = "", n_frames: int | None = None,
               clock=time.process_time, phases=None):
    """Collapsed L-BFGS: :func:`tandem.inference.fit` runs of :class:`tandem.inference.LBFGS` on the
    collapsed bound (the mapping kernel, Z and q(X) learned), every evaluation traced.

    ``phases`` None: one run of ``LBFGS(max_iter=--lbfgs-iters)``. Else an iterable of
    ``(frozen, iterations)``: one run per phase with those parameter groups held
    (``collapsed_loss``'s ``frozen``), until the phases' iteration budgets add up to
    ``--lbfgs-iters`` (the last one cut to fit), or a whole round of the phases (until a phase
    repeats) raises the best bound by less than 10⁻⁹ of it (converged).

    Each evaluation is the bound on all N frames with its gradient, so it is both a training step's
    work and a full-data bound, and an "epoch" here is one evaluation. A trace point is
    (training CPU seconds when the evaluation's backward pass had finished — stamped at the next
    evaluation's start, or at the fit's end —, the best bound among the evaluations so far). The
    running best is the iterate's bound up to the line search under way: the strong-Wolfe search
    accepts a point only below the last iterate's loss and ends at the lowest point it bracketed.
    Stops after the iterations (torch's ≤ 1.25× as many evaluations), at its own
    convergence, once the CPU seconds exceed ``max_cpu`` (checked at each evaluation), or at
    SIGTERM.

    Returns ``(trace, walls, cpus, stop, evaluations)``: per evaluation its wall and CPU seconds,
    ``stop`` one of "iterations" (L-BFGS returned: its iteration limit or one of torch's own
    tolerances; with phases: the iterations or a round without gain), "max_cpu", "interrupted",
    and the raw (CPU s, bound) of every evaluation, line-search trials included."""
    trace, walls, cpus, evals = [], [], [], []
    pending = []                        # the evaluation whose backward pass is still to be timed
    best = [-math.inf]                  # the best finite bound so far
    last = {"w": time.perf_counter(), "c": clock()}
    c_start = last["c"]

    def stamp():
        if not pending:
            return
        w, c = time.perf_counter(), clock()
        walls.append(w - last["w"])
        cpus.append(c - last["c"])
        last.update(w=w, c=c)
        bound = pending.pop()
        evals.append((c - c_start, bound))
        if math.isfinite(bound):
            best[0] = max(best[0], bound)
        trace.append((c - c_start, best[0] if math.isfinite(best[0]) else bound))
        _print_point(label, len(trace) - 1, trace[-1], sum(walls), n_frames)
        if c - c_start > max_cpu:
            raise _Stopped("max_cpu")

    def traced(*a, **k):
        stamp()
        loss = collapsed_loss(*a, **k)
        pending.append(-float(loss.detach()))
        return loss

    traced.deterministic = True          # as collapsed_loss: the driver skips its re-check

    def on_term(signum, frame):
        raise _Stopped("interrupted")

    pre = PriorPreconditioner(data) if args.precondition else None

    def run(frozen, iters, first):
        fit(mcgpds_model, mcgpds_guide, data, loss=traced, num_steps=1, seed=args.seed, progress=False,
            clear_params=first, optim=LBFGS(max_iter=iters, preconditioner=pre), frozen=frozen)

    if phases is None:                          # plain L-BFGS: one phase holding nothing
        phases = [((), args.lbfgs_iters)]
    old = signal.signal(signal.SIGTERM, on_term)
    try:
        done, first, round_start, seen = 0, True, -math.inf, set()
        for frozen, iters in phases:
            iters = min(iters, args.lbfgs_iters - done)
            if iters <= 0:
                break
            if frozen in seen:              # a new round of the phases: stop if the last one gained nothing
                if best[0] - round_start <= 1e-9 * abs(best[0]):
                    break
                round_start, seen = best[0], set()
            seen.add(frozen)
            run(frozen, iters, first)
            first, done = False, done + iters
            stamp()                         # the phase's last evaluation counts for the round's gain
        stop = "iterations"
    except _Stopped as why:
        stop = why.args[0]
        print(f"trace {label}: stopped ({stop}) after {len(trace)} evaluations", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, old)
    if not trace:
        raise RuntimeError(f"{label}: stopped before the first evaluation completed")
    return trace, walls, cpus, stop, evals


def collapsed_start(sim: dict, Q: int, M: int, seq_len: int, seed: int, device=None):
    """The collapsed model at the benchmark's start (``McGPDSData``, an empty parameter store):
    the stochastic model's initialisation with windows = the sequences and one step of it, which
    registers every window's q(X), so both methods start from the same point and bound (β fixed
    at the stochastic default). ``docs/mcgpds_lbfgs_progress.py --init benchmark`` starts here too.
    ``device``: where that step runs and the returned data live (default: the CPU)."""
    cfg = st.StochasticConfig(Q=Q, M=M, window=seq_len, batch=1, num_steps=0,
                              fixed=("alpha", "eps", "beta", "time", "W"))
    m = st.StochasticMcGPDS(cfg, device=device)
    m.data = m.prepare(sim["views"], sim["times"], sim["seq_ids"], seed=seed)
    pyro.clear_param_store()
    m.train(1, seed=seed)
    data = m.collapsed_data()             # on the CPU
    pyro.clear_param_store()
    if device is not None:
        data = dataclasses.replace(data, mapping_kernel=data.mapping_kernel_obj, device=torch.device(device))
    return data


def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MB (Linux ``/proc``; else ru_maxrss twice)."""
    try:
        d = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
        return int(d["VmRSS"].split()[0]) / 1024, int(d["VmHWM"].split()[0]) / 1024
    except (OSError, KeyError, ValueError):
        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return r, r


def mem_one(mode: str, N: int, M: int, args) -> dict:
    """Peak RSS and CPU time of one value + gradient of the collapsed bound (run in a subprocess).

    The benchmark's simulated frames (``N / seq_len`` sequences, two views), α, ε, β, the time
    kernels and W fixed, the mapping kernel, inducing inputs and q(X) learned (they carry the
    gradient). ``mode`` "streamed" (the fits' path) or "old" (:func:`streamed.unstreamed`).
    """
    from tandem.inference.mcgpds import streamed
    from tandem.inference.numerics import limit_heap_fragmentation
    from tandem.models.mcgpds import McGPDSData
    if mode not in ("streamed", "old"):
        raise ValueError(f"mode: expected 'streamed' or 'old', got {mode!r}")
    if mode == "streamed":
        limit_heap_fragmentation()    # what the streamed bound does itself; here also during the simulation
    set_seed(args.seed)
    seq_len = min(args.seq_len, N)
    sim = st.simulate_sequences(max(1, N // seq_len), seq_len, args.dims, Q=args.Q, M=M, seed=args.seed)
    data = McGPDSData(sim["views"], sim["times"], sim["seq_ids"], args.Q, M, fixed=POSE_FIXED)
    del sim
    pyro.clear_param_store()
    before = _rss_mb()
    ctx = streamed.unstreamed() if mode == "old" else streamed.streaming()
    c0, w0 = time.process_time(), time.perf_counter()
    with ctx:
        loss = collapsed_loss(mcgpds_model, mcgpds_guide, data)
        loss.backward()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    gnorm = math.sqrt(sum(float((p.grad * p.grad).sum()) for p in pyro.get_param_store().values()
                          if p.grad is not None))
    after = _rss_mb()
    return {"mode": mode, "n_frames": int(data.N), "M": int(M), "Q": int(args.Q), "seq_len": int(seq_len),
            "rss_before_mb": before[0], "peak_before_mb": before[1], "peak_rss_mb": after[1],
            "value_grad_cpu_s": cpu, "value_grad_wall_s": wall, "bound": -float(loss), "grad_norm": gnorm}


def mem_check(args):
    """``--mem-check``: :func:`mem_one` in a fresh subprocess per (mode, N, M); records
    ``value_grad_peak_rss_mb`` (qualifiers ``n_frames``, ``M``, ``rss_before_mb``: the process
    after simulating the data), ``value_grad_cpu_s`` and the bound, in ``bench_scale_mem.json``."""
    res = Results(EXPERIMENT + "_mem", [args.seed], {"sizes": args.mem_sizes, "M": args.mem_M, "Q": args.Q,
                                                     "seq_len": args.seq_len, "dims": args.dims,
                                                     "fixed": POSE_FIXED, "old": bool(args.mem_old)})
    for N in args.mem_sizes:
        for M in args.mem_M:
            for mode in ("streamed", "old") if args.mem_old else ("streamed",):
                if args.in_process:
                    r = mem_one(mode, N, M, args)
                else:
                    cmd = [sys.executable, __file__, "--one-mem", mode, str(N), str(M), "--seed", str(args.seed),
                           "--seq-len", str(args.seq_len), "--Q", str(args.Q), "--dims", *map(str, args.dims)]
                    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
                    if p.returncode != 0:
                        print(f"{mode} N={N} M={M}: FAILED {p.stderr.strip().splitlines()[-1:]}")
                        res.add(f"McGPDS collapsed {mode} (cpu)", "failed", 1.0, n_frames=N, M=M,
                                error=p.stderr.strip().splitlines()[-1:])
                        continue
                    r = json.loads(p.stdout.strip().splitlines()[-1])
                name = f"McGPDS collapsed {mode} (cpu)"
                q = dict(n_frames=r["n_frames"], M=M, Q=r["Q"], seq_len=r["seq_len"])
                res.add(name, "value_grad_peak_rss_mb", r["peak_rss_mb"], rss_before_mb=r["rss_before_mb"],
                        peak_before_mb=r["peak_before_mb"], **q)
                res.add(name, "value_grad_cpu_s", r["value_grad_cpu_s"], wall_s=r["value_grad_wall_s"], **q)
                res.add(name, "bound", r["bound"], grad_norm=r["grad_norm"], **q)
                print(f"{name}: N={r['n_frames']} M={M}: value + gradient peak RSS {r['peak_rss_mb']:.0f} MB "
                      f"(process after the simulation {r['rss_before_mb']:.0f} MB, its peak so far "
                      f"{r['peak_before_mb']:.0f} MB), {r['value_grad_cpu_s']:.1f} s CPU, bound {r['bound']:.8g}",
                      flush=True)
    print(f"wrote {res.write(args.out)}")
    return res


def _stop_rules(args, N: int, label: str) -> dict:
    """The keyword arguments of :func:`_epochs` from the command line: ``--flat-tol`` (per
    frame, so × N nats), ``--max-cpu`` (``--collapsed-max-cpu`` for the collapsed method when
    given, ``--lbfgs-max-cpu`` for collapsed L-BFGS) and a label for the progress lines."""
    flat = None if args.flat_tol is None else args.flat_tol * N
    cap = args.max_cpu
    if label == "collapsed" and args.collapsed_max_cpu is not None:
        cap = args.collapsed_max_cpu
    if label in LBFGS_METHODS:
        cap = args.lbfgs_max_cpu
    return {"flat_tol": flat, "max_cpu": cap, "label": f"{label} N={N}", "n_frames": N}


def _epochs(run_epoch, sync, min_time: float, min_epochs: int = 1, bound=None, trace=None, flat_tol=None,
            max_cpu: float = math.inf, label: str = "", n_frames: int | None = None, clock=time.process_time):
    """Run epochs until ``min_time`` wall seconds have passed and at least ``min_epochs``
    (≥ 1) were run; per-epoch wall and CPU (``clock``: by default ``time.process_time``, this
    process; the caller passes synchronised wall time on an accelerator) seconds. CPU time is the
    number that a shared machine does not distort (one thread: CPU time = work).

    ``bound``/``trace``: after each epoch append (cumulative training CPU s, ``bound()``) to
    ``trace`` (its last entry holds the CPU time so far) and print it to stderr; the evaluation
    is not timed. Stops early at a non-finite bound (the fit has diverged; nothing more to learn
    from it). ``flat_tol`` (nats, needs ``bound``): besides the above, continue until an epoch
    raises the bound by less than this. ``max_cpu``: stop once the cumulative training CPU
    seconds (the trace's clock when traced) exceed it, whatever the other rules say.

    SIGTERM ends the run after the last complete epoch (the one under way is dropped; with none
    complete the lists are empty and the caller reports the warm-up epoch).

    Returns ``(walls, cpus, stop)`` with ``stop`` one of "min_epochs" (the minimum rules were
    met), "flat", "max_cpu", "non_finite" or "interrupted" (SIGTERM)."""
    if flat_tol is not None and (bound is None or not flat_tol >= 0):
        raise ValueError(f"flat_tol: expected a non-negative number of nats with a bound, got {flat_tol!r}")
    walls, cpus = [], []

    def on_term(signum, frame):
        raise _Stopped(signum)

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        while True:
            sync()
            w0, c0 = time.perf_counter(), clock()
            run_epoch()
            sync()
            walls.append(time.perf_counter() - w0)
            cpus.append(clock() - c0)
            spent = sum(cpus)
            if bound is not None:
                point = (trace[-1][0] + cpus[-1], bound())
                trace.append(point)
                spent = point[0]
                _print_point(label, len(walls), point, sum(walls), n_frames)
                if not math.isfinite(point[1]):
                    return walls, cpus, "non_finite"
            if spent > max_cpu:
                return walls, cpus, "max_cpu"
            if sum(walls) < min_time or len(walls) < min_epochs:
                continue
            if flat_tol is None:
                return walls, cpus, "min_epochs"
            if trace[-1][1] - trace[-2][1] < flat_tol:
                return walls, cpus, "flat"
    except _Stopped:
        # SIGTERM (a run stopped for time): the epoch under way is dropped, the completed ones kept
        if bound is not None:     # an epoch whose bound was being evaluated is dropped too
            del walls[len(trace) - 1:], cpus[len(trace) - 1:]
        print(f"trace {label}: stopped by SIGTERM after {len(walls)} complete epochs", file=sys.stderr, flush=True)
        return walls, cpus, "interrupted"
    finally:
        signal.signal(signal.SIGTERM, old)


def _clock_of(row: dict) -> str:
    """The clock of a row's trace: "cpu" (CPU seconds) or "wall" (synchronised wall seconds, on an
    accelerator); rows written before rows said so ran on the CPU."""
    return row.get("clock", "cpu" if row["device"] == "cpu" else "wall")


def _mean_or(xs, default: float) -> float:
    """Mean of ``xs``; ``default`` (the warm-up epoch's time) when no timed epoch completed."""
    return float(np.mean(xs)) if xs else float(default)


def _print_point(label: str, epoch: int, point, wall: float, n_frames: int | None) -> None:
    """One trace point on stderr (epoch 0 = after the warm-up epoch)."""
    per = f" ({point[1] / n_frames:.6g} nats/frame)" if n_frames else ""
    print(f"trace {label}: epoch {epoch}, CPU {point[0]:.2f} s, wall {wall:.1f} s, bound {point[1]:.10g}{per}",
          file=sys.stderr, flush=True)


class _Stopped(BaseException):
    """Raised by :func:`_epochs`'s SIGTERM handler (a BaseException, so no ``except Exception`` in
    the fit swallows it)."""


def _stochastic_bound(m) -> float:
    """Full-data ELBO of a stochastic fit at the optimal q(V), q(U) (= its collapsed bound),
    leaving the parameter store (running statistics, stored q(U)) as it was."""
    store = getattr(m, "param_store_", None)   # the estimator's own store (the global one before)
    if store is None:
        store = pyro.get_param_store()
    saved = {n: store[n].unconstrained().detach().clone() for n in store.keys()}
    try:
        return float(m.elbo(optimal_inducing=True))
    except (RuntimeError, ValueError) as e:   # a factorisation failing at a diverged point
        print(f"bound evaluation failed: {e}", file=sys.stderr)
        return float("nan")
    finally:
        with torch.no_grad():
            for n in list(store.keys()):
                if n in saved:
                    store[n].unconstrained().copy_(saved[n])
                else:
                    del store[n]


def bound_ceiling(betas, dims, n_frames: int) -> float:
    """Σ_k (N/2) Σ_d log(β_kd / 2π) (:func:`tandem.inference.mcgpds.bound.likelihood_ceiling`, every
    entry observed): above it the bound is numerically broken. ``betas``: per view, a scalar or
    (D_k,) tensor; ``dims``: the D_k."""
    return likelihood_ceiling(betas, [(n_frames, int(D)) for D in dims])


def check_divergence(trace, n_frames: int, tol_per_frame: float = DIVERGE_TOL, method: str = "",
                     device: str = "", ceiling: float = math.inf) -> str | None:
    """``None`` when the bound trace [(cpu_s, F), ...] is healthy, else a message: a
    non-finite F, F above ``ceiling`` (:func:`bound_ceiling`: impossible, so numerically
    broken), or F falling between consecutive points by more than ``tol_per_frame``·N."""
    if not tol_per_frame >= 0:
        raise ValueError(f"tol_per_frame: expected a non-negative number, got {tol_per_frame!r}")
    where = f"{method} N={n_frames} ({device})"
    for i, (c, b) in enumerate(trace):
        if not math.isfinite(b):
            return f"{where} diverged: non-finite full-data bound {b} at trace point {i} (CPU {c:.2f} s)"
        if b > ceiling:
            return (f"{where} diverged: full-data bound {b:.6g} exceeds the likelihood's ceiling "
                    f"{ceiling:.6g} (sum N/2 log(beta/2pi)) at trace point {i} (CPU {c:.2f} s): numerically broken")
        if i and trace[i - 1][1] - b > tol_per_frame * n_frames:
            prev = trace[i - 1][1]
            return (f"{where} diverged: full-data bound fell from {prev:.6g} to {b:.6g} "
                    f"({(prev - b) / n_frames:.3g} nats/frame > tolerance {tol_per_frame}) at CPU {c:.2f} s")
    return None


def time_to_quality(trace, best: float, n_frames: int) -> dict:
    """First traced CPU time with F ≥ best − 0.01·|best| (``1pct``) and F ≥ best − 0.1·N
    (``0.1nat``); NaN when never reached."""
    out = {}
    for key, gap in (("1pct", 0.01 * abs(best)), ("0.1nat", 0.1 * n_frames)):
        hits = [c for c, b in trace if math.isfinite(b) and b >= best - gap]
        out[key] = hits[0] if hits else float("nan")
    return out


def _child(method, N, device, args) -> dict:
    cmd = [sys.executable, __file__, "--one", method, str(N), device, "--seed", str(args.seed),
           "--seq-len", str(args.seq_len), "--window", str(args.window), "--batch", str(args.batch),
           "--Q", str(args.Q), "--M", str(args.M), "--dims", *map(str, args.dims), "--min-time", str(args.min_time),
           "--min-epochs", str(args.min_epochs), "--diverge-tol", str(args.diverge_tol),
           "--max-cpu", str(args.max_cpu), "--lbfgs-iters", str(args.lbfgs_iters),
           "--lbfgs-max-cpu", str(args.lbfgs_max_cpu), "--held-iters", str(args.held_iters),
           "--held-joint-iters", str(args.held_joint_iters),
           "--precondition" if args.precondition else "--no-precondition",
           *(["--prior-cache-mb", str(args.prior_cache_mb)] if args.prior_cache_mb is not None else []),
           *(["--kl-unchunked-mb", str(args.kl_unchunked_mb)] if args.kl_unchunked_mb is not None else []),
           *(["--collapsed-max-cpu", str(args.collapsed_max_cpu)] if args.collapsed_max_cpu is not None else []),
           *(["--flat-tol", str(args.flat_tol)] if args.flat_tol is not None else []),
           "--peer-lr", str(args.peer_lr), "--peer-tol", str(args.peer_tol), "--peer-max-cpu", str(args.peer_max_cpu),
           *(["--lr", str(args.lr)] if args.lr is not None else []),
           *(["--hyper-iters", str(args.hyper_iters)] if args.hyper_iters is not None else [])]
    # stderr is echoed line by line (the per-epoch trace lines show progress in a long run's log)
    # (stdout to a temporary file, so a full stdout pipe cannot block the child while stderr is read)
    with tempfile.TemporaryFile("w+") as fout, \
            subprocess.Popen(cmd, stdout=fout, stderr=subprocess.PIPE, text=True) as proc:
        err = []
        for line in proc.stderr:
            err.append(line.rstrip("\n"))
            print(line, end="", file=sys.stderr, flush=True)
        proc.wait()
        fout.seek(0)
        out = fout.read()
    if proc.returncode != 0:
        return {"method": method, "n_frames": N, "device": device, "error": [e for e in err if e.strip()][-1:]}
    return json.loads(out.strip().splitlines()[-1])


def growth_exponent(ns, ts) -> float:
    """Least-squares slope of log t on log N."""
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def gpytorch_available() -> bool:
    """Whether GPyTorch (the ``peers`` extra) can be imported."""
    try:
        import gpytorch  # noqa: F401
    except ImportError:
        return False
    return True


def run_peer(N: int, args) -> dict:
    """GPyTorch's Bayesian GPLVM on the same simulated frames as :func:`run_one` (a cost reference).

    The documented minibatch model: ``gpytorch.models.gplvm.BayesianGPLVM`` with a
    ``VariationalLatentVariable`` q(X) (N(0, I) prior), one independent GP per output column
    (``batch_shape = [D]``, ``CholeskyVariationalDistribution`` over M inducing inputs learned by a
    ``VariationalStrategy``, ``ScaleKernel(RBFKernel(ard_num_dims=Q))``, constant mean, a
    ``GaussianLikelihood`` per output) and ``gpytorch.mlls.VariationalELBO`` estimated from one
    reparameterised sample of X on a minibatch of frames, Adam (``--peer-lr``). It is a simpler
    model than McGPDS: one latent space for both views concatenated (each view scaled to unit
    overall variance as ours), no time prior, no private spaces, a Monte Carlo expected
    log-likelihood. Same Q and M; a step draws ``window × batch`` frames (the frames one stochastic
    McGPDS step touches), an epoch is ``ceil(N / that)`` steps.

    Convergence (its own): the mean minibatch ELBO per frame over blocks of ``max(50, one epoch)``
    steps; converged when a block improves on the previous block by less than ``--peer-tol`` nats
    per frame, or after ``--peer-max-cpu`` CPU seconds (then ``converged`` is False). Returns
    per-epoch CPU/wall time, the CPU time to convergence, the final block's ELBO per frame and the
    trace of (CPU s, block ELBO per frame) pairs.
    """
    import gpytorch
    from gpytorch.models.gplvm import BayesianGPLVM, VariationalLatentVariable

    set_seed(args.seed)
    n_seq = max(1, N // args.seq_len)
    sim = st.simulate_sequences(n_seq, min(args.seq_len, N), args.dims, Q=args.Q, M=args.M, seed=args.seed)
    Y = torch.cat([(v - v.mean(0)) / v.std(0).pow(2).mean().sqrt() for v in sim["views"]], 1).double()
    n, D = Y.shape
    Q, M = args.Q, args.M
    gen = torch.Generator().manual_seed(args.seed)
    U, Sv, _ = torch.linalg.svd(Y, full_matrices=False)
    X0 = U[:, :Q] * Sv[:Q] / math.sqrt(n)                      # PCA init, as ours
    Z0 = X0[torch.randperm(n, generator=gen)[:M]].expand(D, M, Q).clone()

    class Peer(BayesianGPLVM):
        def __init__(self):
            shape = torch.Size([D])
            q_u = gpytorch.variational.CholeskyVariationalDistribution(M, batch_shape=shape)
            strategy = gpytorch.variational.VariationalStrategy(self, Z0, q_u, learn_inducing_locations=True)
            prior = gpytorch.priors.NormalPrior(torch.zeros(n, Q, dtype=Y.dtype), torch.ones(n, Q, dtype=Y.dtype))
            super().__init__(VariationalLatentVariable(n, D, Q, X0.clone(), prior), strategy)
            self.mean_module = gpytorch.means.ConstantMean(batch_shape=shape)
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=Q,
                                                                                        batch_shape=shape),
                                                             batch_shape=shape)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = Peer().double()
    with torch.no_grad():
        model.X.q_log_sigma.fill_(math.log(math.expm1(math.sqrt(0.5))))   # softplus⁻¹: q(X) sd √0.5
    lik = gpytorch.likelihoods.GaussianLikelihood(batch_shape=torch.Size([D])).double()
    opt = torch.optim.Adam([*model.parameters(), *lik.parameters()], lr=args.peer_lr)
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=n)
    bsz = min(n, args.window * args.batch)
    spe = math.ceil(n / bsz)
    block = max(50, spe)
    Yt = Y.T.contiguous()

    def one_step() -> float:
        idx = torch.randperm(n, generator=gen)[:bsz].sort().values
        opt.zero_grad()
        x = model.sample_latent_variable()[idx]
        loss = -mll(model(x), Yt[:, idx]).sum()               # −ELBO / N, summed over the D outputs
        loss.backward()
        opt.step()
        return -float(loss.detach())                          # ELBO per frame (minibatch estimate)

    trace, vals, prev = [], [], -math.inf
    cpu, wall, steps, converged = 0.0, 0.0, 0, False
    while True:
        w0, c0 = time.perf_counter(), time.process_time()
        vals.append(one_step())
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        steps += 1
        if not math.isfinite(vals[-1]):
            break
        if steps % block == 0:
            cur = float(np.mean(vals[-block:]))
            trace.append([cpu, cur])
            if cur - prev < args.peer_tol:
                converged = True
                break
            prev = cur
        if cpu > args.peer_max_cpu:
            break
    return {"method": "gpytorch_bgplvm", "n_frames": n, "device": "cpu", "steps": steps, "steps_per_epoch": spe,
            "batch_frames": bsz, "epoch_cpu_s": cpu / steps * spe, "epoch_time_s": wall / steps * spe,
            "time_to_converge_cpu_s": cpu if converged else float("nan"), "converged": converged,
            "final_elbo_per_frame": float(np.mean(vals[-block:])), "trace": trace,
            "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


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
    if args.one_mem:
        mode, N, M = args.one_mem
        print(json.dumps(mem_one(mode, int(N), int(M), args)))
        return None
    if args.mem_check:
        if args.quick:
            args.mem_sizes, args.mem_M, args.seq_len, args.dims, args.in_process = [400], [5], 100, [4, 3], True
        return mem_check(args)
    if args.one:
        method, N, device = args.one
        one = run_peer(int(N), args) if method == "gpytorch_bgplvm" else run_one(method, int(N), device, args)
        # where the row was measured (a summary joined elsewhere with --rows-from keeps it)
        one["environment"] = environment() | (
            {"gpu": torch.cuda.get_device_name()} if torch.device(device).type == "cuda" else {})
        print(json.dumps(one))
        return None
    if args.quick:   # in this process (no subprocess start-up); memory is then the process's peak so far
        args.sizes, args.seq_len, args.window, args.batch, args.M, args.dims = [200, 400], 100, 50, 2, 5, [4, 3]
        args.in_process, args.min_time, args.peer_max_cpu = True, 0.0, min(args.peer_max_cpu, 3.0)
        args.lbfgs_iters = min(args.lbfgs_iters, 40)
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
    if args.reference_from and not args.rows_from:
        raise SystemExit("bench_scale: --reference-from goes with --rows-from")
    if args.rows_from:
        rows = {}
        for f in args.rows_from:      # a later file's row replaces an earlier one of the same method, N, device
            for r in _rows_in(f):
                key = (r["method"], r["n_frames"], r["device"])
                if key in rows:
                    print(f"rows from {f}: {key} replaces the row of an earlier file")
                rows[key] = r
        for f in args.reference_from or []:
            for r in _rows_in(f):
                if r["method"] in METHODS:
                    r = dict(r, method=f"{r['method']}{REFERENCE}")
                    rows[r["method"], r["n_frames"], r["device"]] = r
        rows = list(rows.values())
        res.config["row_environments"] = [json.loads(e) for e in dict.fromkeys(
            json.dumps(r["environment"], sort_keys=True) for r in rows if "environment" in r)]
        print(f"rows from {', '.join(map(str, args.rows_from))}: {len(rows)} rows, nothing run")
    else:
        rows = run_rows(args, res, devices)
    return summarise(rows, args, res)


def run_rows(args, res, devices) -> list:
    """Run every (device, N, method) of the command line, each in a fresh subprocess (or in this
    process with ``--in-process``), then the GPyTorch peer; returns the raw rows (dicts of
    :func:`run_one` / :func:`run_peer`, or ``{"error": ...}``). The collapsed bound is skipped
    (a ``not_run_estimated_memory_gb`` record in ``res``) beyond ``--collapsed-max-gb``."""
    rows = []
    for dev in devices:
        for N in args.sizes:
            for method in METHODS:
                if method in ("collapsed",) + LBFGS_METHODS:
                    gb = collapsed_memory_gb(N, args.seq_len, len(args.dims), args.Q, args.M, dims=args.dims)
                    if gb > args.collapsed_max_gb:
                        print(f"{method} N={N}: not run (estimated {gb:.1f} GB > {args.collapsed_max_gb} GB)")
                        res.add(f"McGPDS {method} ({dev})", "not_run_estimated_memory_gb", gb, n_frames=N,
                                device=dev)
                        continue
                r = run_one(method, N, dev, args) if args.in_process else _child(method, N, dev, args)
                rows.append(r)
                if "error" in r:
                    print(f"{method} N={N} {dev}: FAILED {r['error']}", flush=True)
    return rows + peer_rows(args, res)


def summarise(rows: list, args, res) -> Results:
    """Records, time to quality, growth exponents, plot and the rows file from raw rows.

    Adds per McGPDS row the epoch times, peak memory, ``final_bound`` (qualifier ``trace``) and
    ``stop``; per (N, device) the time to quality of every method against the best bound any of
    them reached (qualifiers ``best_bound``, ``reference``: the method that reached it); per
    method/device the growth exponent of the epoch time and of the time to within 1 % and within
    0.1 nats/frame (least-squares slope on log N over the sizes where it was reached); the peer's
    records (:func:`peer_records`). Writes ``bench_scale.json``, ``bench_scale_rows.json`` (the raw
    rows, for ``--rows-from``) and the plot; exits non-zero when a fit diverged."""
    peers = [r for r in rows if r.get("method") == "gpytorch_bgplvm"]
    rows = [r for r in rows if r.get("method") != "gpytorch_bgplvm"]
    for r in rows:
        if "error" in r:
            res.add(f"McGPDS {r['method']} ({r['device']})", "failed", 1.0, n_frames=r["n_frames"],
                    device=r["device"], error=r["error"])
            continue
        dev = r["device"]
        name = f"McGPDS {r['method']} ({dev})"
        res.add(name, "epoch_time_s", r["epoch_time_s"], n_frames=r["n_frames"], device=dev,
                steps_per_epoch=r["steps_per_epoch"], first_epoch_s=r["first_epoch_s"],
                epochs_timed=r["epochs_timed"])
        res.add(name, "epoch_cpu_time_s", r["epoch_cpu_s"], n_frames=r["n_frames"], device=dev)
        res.add(name, "peak_memory_mb", r["peak_memory_mb"], n_frames=r["n_frames"], device=dev)
        res.time(name, f"epoch_N{r['n_frames']}", r["epoch_time_s"])
        extra = {"evaluations": r["evaluations"]} if "evaluations" in r else {}   # collapsed-lbfgs: every trial
        res.add(name, "final_bound", r["final_bound"], n_frames=r["n_frames"], device=dev, trace=r["trace"],
                stop=r.get("stop"), bound_ceiling=r["bound_ceiling"], diverged=r["diverged"], **extra)
        res.add(name, "final_bound_per_frame", r["final_bound"] / r["n_frames"], n_frames=r["n_frames"],
                device=dev)
        res.add(name, "training_cpu_s", r["trace"][-1][0], n_frames=r["n_frames"], device=dev,
                epochs=len(r["trace"]), stop=r.get("stop"))
        res.add(name, "epochs_timed", len(r["trace"]) - 1, n_frames=r["n_frames"], device=dev, stop=r.get("stop"))
        clock = _clock_of(r)
        print(f"{name:32s} N={r['n_frames']:>8d}  epoch {r['epoch_time_s']:9.3f} s wall "
              f"{r['epoch_cpu_s']:9.3f} s {clock} "
              f"({r['steps_per_epoch']} steps)  peak {r['peak_memory_mb']:8.0f} MB  "
              f"bound {r['final_bound'] / r['n_frames']:.4g} nats/frame after {len(r['trace'])} epochs "
              f"({r['trace'][-1][0]:.2f} s {clock}; stopped: {r.get('stop')})", flush=True)
        if r["diverged"]:
            print(f"DIVERGED: {r['diverged']}", flush=True)
    ok = [r for r in rows if "error" not in r]
    devices = sorted({r["device"] for r in ok})
    tq_pts = {}
    for dev in devices:      # time to quality against the best bound any method reached at (N, device)
        for N in sorted({r["n_frames"] for r in ok if r["device"] == dev}):
            here = [r for r in ok if r["device"] == dev and r["n_frames"] == N]
            finite = [(b, r["method"]) for r in here for _, b in r["trace"]
                      if math.isfinite(b) and b <= r["bound_ceiling"]]
            if not finite:
                continue
            best, ref = max(finite)
            for r in here:
                name = f"McGPDS {r['method']} ({dev})"
                tq = time_to_quality(r["trace"], best, N)
                if len(r["trace"]) < 2:   # no timed epoch (stopped in the first): no curve to measure
                    tq = {"1pct": float("nan"), "0.1nat": float("nan")}
                for key, metric in (("1pct", "time_to_1pct_cpu_s"), ("0.1nat", "time_to_0.1nat_cpu_s")):
                    res.add(name, metric, tq[key], n_frames=N, device=dev, best_bound=best, reference=ref,
                            methods_run=sorted(x["method"] for x in here), clock=_clock_of(r))
                    tq_pts.setdefault((r["method"], dev, key), []).append((N, tq[key]))
                print(f"{name:32s} N={N:>8d}  best bound {best / N:.4g} nats/frame ({ref}); time to 1 %: "
                      f"{_fmt_s(tq['1pct'])}, to 0.1 nats/frame: {_fmt_s(tq['0.1nat'])} ({_clock_of(r)})")
    peer_records(peers, args, res)
    exps = {}
    for dev in devices:
        for method in METHODS:
            key = "epoch_cpu_s" if dev == "cpu" else "epoch_time_s"   # CPU time: robust on a shared machine
            pts = [(r["n_frames"], r[key]) for r in ok if r["method"] == method and r["device"] == dev]
            if len(pts) >= 2:
                e = growth_exponent(*zip(*pts))
                exps[method, dev] = e
                res.add(f"McGPDS {method} ({dev})", "growth_exponent", e, sizes=[p[0] for p in pts], time=key)
                print(f"growth exponent of the epoch time ({key}), {method} ({dev}): {e:.3f}")
            for tq_key, metric in (("1pct", "time_to_1pct_growth_exponent"),
                                   ("0.1nat", "time_to_0.1nat_growth_exponent")):
                pts = [(n, t) for n, t in tq_pts.get((method, dev, tq_key), []) if math.isfinite(t)]
                if len(pts) >= 2:
                    e = growth_exponent(*zip(*pts))
                    res.add(f"McGPDS {method} ({dev})", metric, e, sizes=[p[0] for p in pts],
                            times_cpu_s=[p[1] for p in pts])
                    print(f"growth exponent of the time to {tq_key} ({method}, {dev}): {e:.3f} over N = "
                          f"{[p[0] for p in pts]}")
    print(res.table(("n_frames", "device")))
    path = res.write(args.out)
    _write_json_atomic(Path(args.out) / f"{EXPERIMENT}_rows.json", rows + peers)
    _plot(ok, exps, Path(args.out) / f"{EXPERIMENT}.png")
    print(f"wrote {path}")
    diverged = [r["diverged"] for r in ok if r.get("diverged")]
    if diverged:
        raise SystemExit("bench_scale: a timed fit diverged (tolerance "
                         f"{args.diverge_tol} nats/frame per epoch):\n" + "\n".join(diverged))
    return res


def _rows_in(path) -> list:
    """The raw rows of one ``--rows-from`` file: a run's rows file (a list), one row (the JSON line of
    ``--one``) or a ``bench_scale.json`` (rebuilt by :func:`rows_of_results`)."""
    got = json.loads(Path(path).read_text())
    if isinstance(got, dict) and got.get("experiment") == EXPERIMENT:
        got = rows_of_results(got)
    return got if isinstance(got, list) else [got]


def rows_of_results(data: dict) -> list:
    """The raw rows behind a ``bench_scale.json`` (``data``: its parsed content), rebuilt from its
    records, so that ``--rows-from`` can join a recorded summary with a new run.

    Every field a row needs is a record or a qualifier of one: per McGPDS fit ``epoch_time_s``
    (with ``steps_per_epoch``, ``first_epoch_s``, ``epochs_timed``), ``epoch_cpu_time_s``,
    ``peak_memory_mb`` and ``final_bound`` (with ``trace``, ``stop``, ``bound_ceiling``,
    ``diverged``); a ``failed`` record gives an error row; the peer's records give its rows.
    Files written before ``bound_ceiling`` and ``diverged`` were recorded get no ceiling (∞) and
    the divergence check re-run on the trace with the file's ``diverge_tol``."""
    recs = data["results"]
    tol = data.get("config", {}).get("diverge_tol", DIVERGE_TOL)
    rows = []

    def one(method, metric, N, dev):
        hit = [x for x in recs if x["method"] == method and x["metric"] == metric and x.get("n_frames") == N
               and x.get("device", "cpu") == dev]
        if len(hit) != 1:
            raise ValueError(f"rows_of_results: expected one {metric!r} record of {method!r} at N={N} ({dev}), "
                             f"found {len(hit)}")
        return hit[0]
    for x in recs:
        name = x["method"]
        if name.startswith("McGPDS ") and x["metric"] in ("failed", "final_bound"):
            method, dev = name[len("McGPDS "):-1].rsplit(" (", 1)      # "McGPDS {method} ({device})"
        if name.startswith("McGPDS ") and x["metric"] == "failed" and "error" in x:
            rows.append({"method": method, "n_frames": x["n_frames"], "device": dev, "error": x["error"]})
        elif name.startswith("McGPDS ") and x["metric"] == "final_bound":
            N = x["n_frames"]
            ep = one(name, "epoch_time_s", N, dev)
            ceiling = x.get("bound_ceiling")
            ceiling = math.inf if ceiling is None else ceiling       # JSON writes ∞ as null
            trace = [[c, math.nan if b is None else b] for c, b in x["trace"]]    # JSON writes NaN as null
            diverged = x["diverged"] if "diverged" in x else check_divergence(trace, N, tol, method, dev, ceiling)
            rows.append({"method": method, "n_frames": N, "device": dev, "epoch_time_s": ep["mean"],
                         "steps_per_epoch": ep["steps_per_epoch"], "first_epoch_s": ep["first_epoch_s"],
                         "epochs_timed": ep["epochs_timed"],
                         "epoch_cpu_s": one(name, "epoch_cpu_time_s", N, dev)["mean"],
                         "peak_memory_mb": one(name, "peak_memory_mb", N, dev)["mean"],
                         "trace": trace, "final_bound": x["mean"], "stop": x.get("stop"),
                         "bound_ceiling": ceiling, "diverged": diverged,
                         **({"evaluations": x["evaluations"]} if "evaluations" in x else {})})
        elif name == PEER and x["metric"] == "final_elbo_per_frame":
            N = x["n_frames"]
            ep, conv = one(PEER, "epoch_cpu_time_s", N, "cpu"), one(PEER, "time_to_converge_cpu_s", N, "cpu")
            rows.append({"method": "gpytorch_bgplvm", "n_frames": N, "device": "cpu", "epoch_cpu_s": ep["mean"],
                         "steps_per_epoch": ep["steps_per_epoch"], "batch_frames": ep["batch_frames"],
                         "epoch_time_s": one(PEER, "epoch_time_s", N, "cpu")["mean"],
                         "time_to_converge_cpu_s": conv["mean"], "steps": conv["steps"],
                         "converged": conv["converged"], "final_elbo_per_frame": x["mean"], "trace": x["trace"],
                         "peak_memory_mb": one(PEER, "peak_memory_mb", N, "cpu")["mean"]})
    return rows


def _write_json_atomic(path: Path, obj) -> None:
    """``obj`` as JSON at ``path``, atomically (tandem's writer: a temporary file in the same folder, then
    ``os.replace``)."""
    write_text_atomic(path, json.dumps(obj))


PEER = "GPyTorch BayesianGPLVM (cpu)"


def peer_rows(args, res) -> list:
    """Time GPyTorch's Bayesian GPLVM (:func:`run_peer`) at every N on the CPU; returns the rows
    (their records are added by :func:`peer_records`). Skipped, saying so (a ``not_run`` record),
    with ``--skip-peer`` or without GPyTorch (the ``peers`` extra)."""
    if args.skip_peer:
        print("GPyTorch peer skipped (--skip-peer)")
        return []
    if not gpytorch_available():
        print("GPyTorch not installed (optional extra 'peers'): its Bayesian GPLVM is skipped")
        res.add(PEER, "not_run", float("nan"), reason="gpytorch not installed (optional extra peers)")
        return []
    return [run_peer(N, args) if args.in_process else _child("gpytorch_bgplvm", N, "cpu", args)
            for N in args.sizes]


def peer_records(rows: list, args, res) -> None:
    """Add the peer rows' records (``epoch_cpu_time_s``, ``epoch_time_s``, ``time_to_converge_cpu_s``,
    ``final_elbo_per_frame`` with qualifier ``trace``, ``peak_memory_mb``) to ``res``; a
    reference, kept out of the time to quality (its ELBO is another model's)."""
    for r in rows:
        if "error" in r:
            print(f"GPyTorch peer N={r['n_frames']}: FAILED {r['error']}")
            continue
        q = dict(n_frames=r["n_frames"], device="cpu")
        res.add(PEER, "epoch_cpu_time_s", r["epoch_cpu_s"], steps_per_epoch=r["steps_per_epoch"],
                batch_frames=r["batch_frames"], **q)
        res.add(PEER, "epoch_time_s", r["epoch_time_s"], **q)
        res.add(PEER, "time_to_converge_cpu_s", r["time_to_converge_cpu_s"], steps=r["steps"],
                converged=r["converged"], tol_nats_per_frame=args.peer_tol, max_cpu_s=args.peer_max_cpu, **q)
        res.add(PEER, "final_elbo_per_frame", r["final_elbo_per_frame"], trace=r["trace"], **q)
        res.add(PEER, "peak_memory_mb", r["peak_memory_mb"], **q)
        conv = (f"converged after {r['time_to_converge_cpu_s']:.2f} s CPU" if r["converged"]
                else f"not converged within {args.peer_max_cpu:g} s CPU")
        print(f"{PEER:32s} N={r['n_frames']:>8d}  epoch {r['epoch_cpu_s']:9.3f} s CPU ({r['steps_per_epoch']} steps of "
              f"{r['batch_frames']} frames), {conv} ({r['steps']} steps), ELBO {r['final_elbo_per_frame']:.4g} "
              "nats/frame (its own model: not comparable with McGPDS bounds)", flush=True)


def _fmt_s(x: float) -> str:
    return "not reached" if not math.isfinite(x) else f"{x:.2f} s"


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
    save_figure(fig, path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main(parser().parse_args())
