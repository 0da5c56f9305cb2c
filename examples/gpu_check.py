"""GPU check: every model's smallest computation on CUDA and on the CPU — same numbers, times.

Convention checked here: **the models follow the device of their input tensors** (data,
time stamps, test inputs; float64), and the high-level objects take ``device=``
(``McGPDS(device=)``, ``fit_mcgpds(..., device=)``, ``StochasticMcGPDS(config, device=)``,
``fit_model(..., device=)`` of SAMTC, ``TwinGP(..., device=)``). For every check the
script runs the computation on the CPU and, when CUDA is present, on CUDA, compares the
numbers (relative tolerance ``--rtol``) and prints both times. On a machine without CUDA
it runs the CPU side, says that CUDA is absent, and exits 0 — the first machine with a
GPU verifies everything in a few minutes with ``python examples/gpu_check.py``.

Checks
------
* ``model:<name>`` — the log density of each Pyro model (McGPDS, twin GP, SAMTC's
  mixture, coupled projections) at the same latent values: traced on the CPU, then
  conditioned on those values with every input moved to the device.
* ``driver`` — :func:`tandem.inference.fit` (MAP of a Bayesian regression, AutoDelta,
  deterministic) with data on the device.
* ``mcgpds_collapsed_bound`` — the paper's collapsed bound on the device.
* ``mcgpds_stochastic`` — 10 full-batch steps of the stochastic McGPDS fit (deterministic).
* ``mcgpds_fit`` — ``McGPDS(device=...)`` on numpy views: a short L-BFGS schedule of the
  collapsed bound (deterministic; the final bound and a prediction are compared with
  ``100 × rtol``: a few L-BFGS iterations amplify round-off differences).
* ``samtc_fit`` — :func:`tandem.inference.samtc.model_fit.fit_model` with ``device=...`` (SVI
  with TraceEnum_ELBO; Monte Carlo, so only the number of atoms — chosen on the CPU — is
  compared; the check shows the whole fit runs on the device).
* ``twin_gp_predict`` — batched SMTGP prediction of 60 test points (toy 1).

A failing check prints its error (the first line names the file and line) and the
script exits 1 — that list is what the CUDA owners fix. Results JSON: ``gpu_check.json``
(``max_rel_diff`` and ``time_s`` per check and device; failures as ``failed`` records).
"""
from __future__ import annotations

import functools
import time
import traceback

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoDelta, init_to_feasible

from tandem.guides.mcgpds import variational_params
from tandem.inference.experiments.cli import base_parser, set_seed
from tandem.inference.experiments.results import Results
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds import stochastic as st
from tandem.inference.mcgpds.bound import collapsed_bound
from tandem.inference.samtc.model_fit import fit_model
from tandem.inference.samtc.simulate import simulate_tasks
from tandem.inference.svi import fit
from tandem.inference.twin_gp.predictor import TwinGP, ridge_predict
from tandem.models import coupled_projections, mcgpds, samtc, twin_gp
from tandem.models.mcgpds import McGPDSData, hyperparams, simulate
from tandem.models.twin_gp import simulate as simulate_twin_gp

EXPERIMENT = "gpu_check"
DTYPE = torch.float64


def parser():
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--rtol", type=float, default=1e-6, help="relative tolerance CPU vs CUDA")
    p.add_argument("--device", default="cuda", help="the accelerator device to compare with the CPU")
    return p


def _to(x, dev):
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, dev) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, dev) for k, v in x.items()}
    return x


# ------------------------------------------------------------------ model log densities
def _mcgpds_args(dev):
    t = torch.linspace(0, 1, 30, dtype=DTYPE)
    seq = torch.zeros(30, dtype=torch.long)
    sim = simulate(t, seq, [4, 3], Q=2, M=5, seed=0)
    d0 = sim["data"]
    data = McGPDSData([sim["y_0"].to(dev), sim["y_1"].to(dev)], t.to(dev), seq, 2, 5, 1, d0.mapping_kernel,
                      init=_to(d0.init, dev), fixed=frozenset(("alpha", "eps", "beta", "time", "kernel", "inducing",
                                                               "W", "g")))
    return (data,), {}


def _twin_gp_args(dev):
    toy = simulate_twin_gp(1, seed=0)
    X, Y, Xt = toy["X_train"], toy["Y_train"], toy["X_test"]
    # y has an improper flat prior (ImproperUniform): evaluate at the ridge-regression outputs
    return (TwinGP(X[:50], Y[:50], 0.05, 0.05, 1e-3, device=dev), Xt[:5].to(dev)), {}, \
        {"y": ridge_predict(X[:50], Y[:50], Xt[:5])}


def _samtc_args(dev):
    sim = simulate_tasks(n_tasks=2, n_points=(60, 60), n_private=(1, 0), seed=0)
    return ([torch.as_tensor(X, dtype=DTYPE).to(dev) for X in sim.tasks], sim.h, 3), {}


def _cp_args(dev):
    g = torch.Generator().manual_seed(0)
    Z = torch.linalg.qr(torch.randn(12, 4, generator=g, dtype=DTYPE))[0]
    A = torch.randn(12, 12, generator=g, dtype=DTYPE)
    return (Z.to(dev), (A @ A.T / 12).to(dev), 2), {}


def _models():
    return {"mcgpds": (mcgpds.model, _mcgpds_args), "twin_gp": (twin_gp.twin_gp_model, _twin_gp_args),
            "samtc": (samtc.model, _samtc_args), "coupled_projections": (coupled_projections.model, _cp_args)}


def model_log_density(name, dev, values=None):
    """log p of the model at ``values`` (or at a fresh CPU draw, returned with the value)."""
    fn, make = _models()[name]
    pyro.clear_param_store()
    set_seed(0)
    args, kw, *default = make(dev)
    if values is None and default:
        values = default[0]
    if values is None:
        tr = poutine.trace(fn).get_trace(*args, **kw)
        vals = {n: s["value"].detach() for n, s in tr.nodes.items()
                if s["type"] == "sample" and not s["is_observed"]}
    else:
        vals = _to(values, dev)
        tr = poutine.trace(poutine.condition(fn, vals)).get_trace(*args, **kw)
    return tr.log_prob_sum().detach(), vals


# ------------------------------------------------------------------ higher-level checks
def _regression(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(3, dtype=DTYPE, device=X.device), 1.0).to_event(1))
    with pyro.plate("data", X.shape[0], device=X.device):
        pyro.sample("y", dist.Normal(X @ w, 0.3), obs=y)


def driver(dev):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(50, 3, generator=g, dtype=DTYPE)
    y = X @ torch.tensor([1.0, -2.0, 0.5], dtype=DTYPE) + 0.3 * torch.randn(50, generator=g, dtype=DTYPE)
    X, y = X.to(dev), y.to(dev)
    # init_to_feasible: the same start on every device (the default init draws from the prior with
    # the device's own random generator, so CPU and CUDA would start from different points)
    res = fit(_regression, AutoDelta(_regression, init_loc_fn=init_to_feasible), X, y, num_steps=100, progress=False,
              optim=pyro.optim.Adam({"lr": 0.05}))
    return res.params["AutoDelta.w"]


def mcgpds_collapsed_bound(dev):
    (data,), _ = _mcgpds_args(dev)
    pyro.clear_param_store()
    with torch.no_grad():
        return collapsed_bound(data, hyperparams(data), *variational_params(data))


def mcgpds_stochastic(dev):
    sim = st.simulate_sequences(4, 25, [4, 3], Q=2, M=5, seed=0)
    cfg = st.StochasticConfig(Q=2, M=5, window=25, batch=4, num_steps=10, fixed=("alpha", "eps", "beta", "time"))
    m = st.StochasticMcGPDS(cfg, device=dev).fit(sim["views"], sim["times"], sim["seq_ids"], seed=0)
    return torch.tensor([m.elbo(), *m.result.losses], dtype=DTYPE)


def mcgpds_fit(dev):
    t = torch.linspace(0, 1, 30, dtype=DTYPE)
    sim = simulate(t, torch.zeros(30, dtype=torch.long), [4, 3], Q=2, M=5, seed=0)
    views = [sim["y_0"].numpy(), sim["y_1"].numpy()]
    m = McGPDS(Q=2, M=5, cycles=1, var_iters=5, model_iters=5, joint_iters=5, device=dev)
    m.fit(views, times=t.numpy())
    pred = m.predict(views[0][:6], t[:6].numpy(), method="paper", test_iters=3)
    return torch.cat([torch.tensor([m.fitted_.bound], dtype=DTYPE), torch.as_tensor(pred.mean).reshape(-1)])


def samtc_fit(dev):
    sim = simulate_tasks(n_tasks=2, n_points=(60, 60), n_private=(1, 0), seed=0)
    mf = fit_model(sim.tasks, sim.h, num_steps=20, seed=0, device=dev)
    return torch.tensor([float(mf.n_atoms)], dtype=DTYPE)


#: checks whose numbers are compared with a looser tolerance (multiples of --rtol)
LOOSE = {"mcgpds_fit": 100.0}


def twin_gp_predict(dev):
    toy = simulate_twin_gp(1, seed=0)
    X, Y, Xt = toy["X_train"], toy["Y_train"], toy["X_test"]
    return TwinGP(X, Y, 0.05, 0.05, 1e-3, device=dev).predict(Xt[:60].to(dev), "SMTGP", alpha=0.5, beta=0.99)


def _timed(fn, dev):
    sync = torch.cuda.synchronize if torch.device(dev).type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t0


def _rel(a, b) -> float:
    a = torch.as_tensor(a).detach().cpu().double().reshape(-1)
    b = torch.as_tensor(b).detach().cpu().double().reshape(-1)
    return float(((a - b).abs() / b.abs().clamp_min(1e-12)).max())


def main(args):
    cuda = torch.cuda.is_available() and torch.device(args.device).type == "cuda"
    devices = ["cpu"] + ([args.device] if cuda else [])
    if not cuda:
        print(f"CUDA is absent on this machine (torch {torch.__version__}, torch.cuda.is_available() = "
              f"{torch.cuda.is_available()}): running the CPU side only; no CUDA number is measured.")
    res = Results(EXPERIMENT, [args.seed], {"devices": devices, "rtol": args.rtol, "cuda_available": cuda,
                                            "quick": args.quick})
    checks = [(f"model:{n}", functools.partial(model_log_density, n))
              for n in ("mcgpds", "twin_gp", "samtc", "coupled_projections")]
    checks += [("driver", driver), ("mcgpds_collapsed_bound", mcgpds_collapsed_bound),
               ("mcgpds_stochastic", mcgpds_stochastic), ("mcgpds_fit", mcgpds_fit), ("samtc_fit", samtc_fit),
               ("twin_gp_predict", twin_gp_predict)]
    failed = []
    for name, fn in checks:
        ref = None
        for dev in devices:
            try:
                if name.startswith("model:"):
                    call = functools.partial(fn, dev, None if ref is None else ref[1])
                    (val, vals), sec = _timed(call, dev)
                    out = (val, vals)
                    num = val
                else:
                    out, sec = _timed(functools.partial(fn, dev), dev)
                    num = out
            except Exception as err:  # noqa: BLE001  (report and continue: the failures are the result)
                tb = traceback.extract_tb(err.__traceback__)
                where = next((f"{f.filename}:{f.lineno}" for f in reversed(tb) if "tandem" in f.filename
                              or "/models/" in f.filename or "/inference/" in f.filename), "?")
                msg = f"{type(err).__name__}: {str(err).splitlines()[0][:200]} (at {where})"
                print(f"{name:28s} {dev:6s} FAILED {msg}")
                res.add(name, "failed", 1.0, device=dev, error=msg)
                failed.append((name, dev, msg))
                continue
            res.add(name, "time_s", sec, device=dev)
            if ref is None:
                ref = out
                print(f"{name:28s} {dev:6s} {sec:8.3f} s  value {float(torch.as_tensor(num).reshape(-1)[0]):.6g}")
            else:
                d = _rel(num, ref[0] if name.startswith("model:") else ref)
                tol = args.rtol * LOOSE.get(name, 1.0)
                ok = d <= tol
                res.add(name, "max_rel_diff", d, device=dev)
                print(f"{name:28s} {dev:6s} {sec:8.3f} s  max rel diff vs cpu {d:.2e} {'ok' if ok else 'MISMATCH'}")
                if not ok:
                    failed.append((name, dev, f"max rel diff {d:.2e} > {tol}"))
    path = res.write(args.out)
    print(f"wrote {path}")
    if failed:
        print(f"{len(failed)} check(s) failed:")
        for f in failed:
            print("  ", *f)
    return res, failed


if __name__ == "__main__":
    _, fails = main(parser().parse_args())
    raise SystemExit(1 if fails else 0)
