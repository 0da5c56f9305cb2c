"""Overhead of the driver's L-BFGS path over a bare ``torch.optim.LBFGS`` loop (human pose).

The pose fit of ``bench_mcgpds.py`` (Q = 10, M = 100, α/ε/β/time/W fixed, the short schedule
3 × [20 variational + 20 model] L-BFGS iterations: six driver calls of one ``LBFGS.step`` of
``max_iter = 20``) is run twice from the same initial parameters:

* **driver** — :func:`tandem.inference.fit` with ``optim=LBFGS(max_iter=20)``,
  ``loss=collapsed_loss`` and ``frozen=`` as :func:`tandem.inference.mcgpds.fit.fit_mcgpds` calls it;
* **bare** — the same parameters (the unconstrained tensors of the same ``pyro.param`` s, in the
  same order) in ``torch.optim.LBFGS`` with the same settings, and the closure
  ``zero_grad(); loss = collapsed_loss(...); loss.backward()``.

Both count their evaluations of ``collapsed_loss`` (they must take the same path: the same number
of evaluations and the same final loss), and the CPU time (``time.process_time``, one torch
thread) of each whole schedule is taken as the minimum over ``--repeats`` alternated runs.
Reports ``overhead = driver / bare − 1`` (target ≤ 5 %) and the evaluations per variant.
Writes ``bench_lbfgs_overhead.json``.
"""
from __future__ import annotations

import dataclasses
import time

import pyro
import torch
from pyro import poutine

from tandem.guides.mcgpds import mcgpds_guide
from tandem.inference.datasets.human_pose import load_human_pose
from tandem.inference.experiments.cli import base_parser
from tandem.inference.experiments.mcgpds_protocol import protocol_config
from tandem.inference.experiments.results import Results
from tandem.inference.mcgpds.bound import collapsed_loss
from tandem.inference.mcgpds.fit import fit_mcgpds
from tandem.inference.svi import LBFGS, fit
from tandem.models.mcgpds import mcgpds_model

EXPERIMENT = "bench_lbfgs_overhead"
#: bench_mcgpds's short schedule and fixed groups
CYCLES, ITERS = 3, 20
FIXED = ("alpha", "eps", "beta", "time", "W")


def parser():
    p = base_parser(__doc__.splitlines()[0], real_data=True)
    p.add_argument("--repeats", type=int, default=2, help="alternated runs of each variant (minimum CPU time kept)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    return p


class _Counted:
    """``collapsed_loss`` with a call counter (keeps its ``deterministic`` mark)."""
    deterministic = True

    def __init__(self):
        self.calls = 0
        self.__wrapped__ = collapsed_loss

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return collapsed_loss(*args, **kwargs)


def phases():
    """The six (frozen groups) phases of the short schedule, in order."""
    out = []
    for _ in range(CYCLES):
        out += [("model",), ("variational",)]
    return out


def _restore(state) -> None:
    """Put a copy of ``state`` into a cleared store (``get_state`` holds the live tensors, which an
    optimiser changes in place: the saved start must not move with them)."""
    pyro.clear_param_store()
    params = {n: v.detach().clone().requires_grad_() for n, v in state["params"].items()}
    pyro.get_param_store().set_state({"params": params, "constraints": dict(state["constraints"])})


def run_driver(data, state) -> tuple[float, int, float]:
    _restore(state)
    loss = _Counted()
    c0 = time.process_time()
    for frozen in phases():
        fit(mcgpds_model, mcgpds_guide, data, loss=loss, optim=LBFGS(max_iter=ITERS), num_steps=1, seed=0,
            progress=False, clear_params=False, frozen=frozen)
    cpu = time.process_time() - c0
    with torch.no_grad():
        final = float(collapsed_loss(mcgpds_model, mcgpds_guide, data))
    return cpu, loss.calls, final


def run_bare(data, state) -> tuple[float, int, float]:
    _restore(state)
    with poutine.trace(param_only=True) as tr:          # the driver's parameter list (same order), untimed
        collapsed_loss(mcgpds_model, mcgpds_guide, data)
    names = sorted(tr.trace.nodes)
    calls = [0]
    c0 = time.process_time()
    for frozen in phases():
        params = [pyro.param(n).unconstrained() for n in names]
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=ITERS, history_size=50, line_search_fn="strong_wolfe",
                                tolerance_grad=1e-9, tolerance_change=1e-12)

        def closure(frozen=frozen):
            opt.zero_grad()
            calls[0] += 1
            v = collapsed_loss(mcgpds_model, mcgpds_guide, data, frozen=frozen)
            v.backward()
            return v
        opt.step(closure)
    cpu = time.process_time() - c0
    with torch.no_grad():
        final = float(collapsed_loss(mcgpds_model, mcgpds_guide, data))
    return cpu, calls[0], final


def main(args):
    torch.set_num_threads(max(1, int(args.threads)))
    data = load_human_pose(args.data_dir)
    cfg = protocol_config("pose", args.quick, args.seed, data, fixed=FIXED, cycles=CYCLES, var_iters=ITERS,
                          model_iters=ITERS, joint_iters=0)
    init = fit_mcgpds(data.views, data.t, seq_ends=data.seq_ends, seed=args.seed, progress=False,
                      config=dataclasses.replace(cfg, cycles=0, joint_iters=0))      # registers the start
    mdata = init.data
    pyro.clear_param_store()
    collapsed_loss(mcgpds_model, mcgpds_guide, mdata)
    state = pyro.get_param_store().get_state()
    state = {"params": {n: v.detach().clone().requires_grad_() for n, v in state["params"].items()},
             "constraints": dict(state["constraints"])}
    run_bare(mdata, state)                               # warm-up (allocator, caches), untimed
    times = {"driver": [], "bare": []}
    meta = {}
    for _ in range(max(1, int(args.repeats))):
        for name, fn in (("driver", run_driver), ("bare", run_bare)):
            cpu, calls, final = fn(mdata, state)
            times[name].append(cpu)
            meta[name] = (calls, final)
    d, b = min(times["driver"]), min(times["bare"])
    over = d / b - 1.0
    res = Results(EXPERIMENT, [args.seed], {"cycles": CYCLES, "iters": ITERS, "fixed": FIXED, "Q": cfg.Q, "M": cfg.M,
                                            "repeats": args.repeats, "torch_threads": torch.get_num_threads(),
                                            "quick": args.quick})
    for name in ("driver", "bare"):
        res.add(name, "cpu_s", min(times[name]), runs=times[name])
        res.add(name, "evaluations", meta[name][0])
        res.add(name, "final_loss", meta[name][1])
    res.add("driver", "overhead", over, target=0.05)
    for name in ("driver", "bare"):
        print(f"{name:7s} CPU {min(times[name]):8.3f} s (runs {', '.join(f'{t:.3f}' for t in times[name])}), "
              f"{meta[name][0]} evaluations, final loss {meta[name][1]:.10g}")
    print(f"driver overhead over bare torch.optim.LBFGS: {100 * over:+.2f} % (target <= 5 %)")
    print(f"wrote {res.write(args.out)}")
    return res


if __name__ == "__main__":
    main(parser().parse_args())
