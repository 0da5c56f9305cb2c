"""Measure how close each hand-written mean-field guide (tandem.guides.mean_field) gets to the
ELBO of the model's shipped guide, on a small simulated data set per model.

    python docs/mean_field_gaps.py          # prints the table of docs/guides.md

Every guide is fitted by the shared driver :func:`tandem.inference.fit` (seed 0); ELBOs are
Monte Carlo estimates with many particles unless a closed form exists (named per row).
``tests/test_mean_field_guides.py`` runs the same functions and checks the margins stated on
the page.
"""
from __future__ import annotations

import math

import numpy as np
import pyro
import torch
from pyro.infer import Trace_ELBO, TraceEnum_ELBO

D64 = torch.float64


def _mc_elbo(loss, model, guide, *args, **kwargs) -> tuple[float, float]:
    """Mean and standard error of 10 independent estimates of ``−loss``."""
    with torch.no_grad():
        vals = np.array([-loss.loss(model, guide, *args, **kwargs) for _ in range(10)])
    return float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(len(vals)))


# ------------------------------------------------------------------------------ McGPDS
def mcgpds_problem():
    """N = 12 frames, views of 4 and 3 outputs, Q = 2, M = 4, J = 1, drawn by ``simulate`` (seed 3);
    every model hyperparameter fixed at the simulation's values, so the guides differ only in q."""
    from tandem.models.mcgpds import PARAM_GROUPS, McGPDSData, simulate
    t = torch.linspace(0, 2, 12, dtype=D64)
    seq = torch.zeros(12)
    sim = simulate(t, seq, [4, 3], Q=2, M=4, seed=3)
    return McGPDSData([sim["y_0"], sim["y_1"]], t, seq, Q=2, M=4, fixed=frozenset(PARAM_GROUPS) - {"variational"})


def mcgpds_shipped(data) -> float:
    """The shipped guide at its optimum: the collapsed bound maximised by L-BFGS, q(V), q(U) set to
    their optimum; returns the uncollapsed ELBO in closed form (= the collapsed bound)."""
    from tandem.guides.mcgpds import Guide, variational_params
    from tandem.inference import LBFGS, fit
    from tandem.inference.mcgpds.bound import collapsed_loss
    from tandem.inference.mcgpds.uncollapsed import set_optimal_inducing, uncollapsed_elbo_analytic
    from tandem.models.mcgpds import hyperparams, model
    fit(model, Guide(), data, loss=collapsed_loss, optim=LBFGS(), num_steps=30, progress=False)
    set_optimal_inducing(data)
    st = pyro.get_param_store()
    with torch.no_grad():
        hp = hyperparams(data)
        mus, lams = variational_params(data)
        qv = [(st[f"qv_m_{k}"], st[f"qv_L_{k}"]) for k in range(data.V)]
        qu = [(st[f"qu_m_{k}"], st[f"qu_L_{k}"]) for k in range(data.V)]
        return float(uncollapsed_elbo_analytic(data, hp, mus, lams, qv, qu))


def mcgpds_gap(covariance: str = "full", num_steps: int = 4000) -> dict:
    """Fit :class:`~tandem.guides.mean_field.McGPDSMeanField` with Trace_ELBO and ClippedAdam
    (lr 0.1, decay 0.998 per step); return the shipped and mean-field ELBOs and their gap."""
    from tandem.guides.mean_field import McGPDSMeanField
    from tandem.inference import fit
    from tandem.models.mcgpds import model
    data = mcgpds_problem()
    ref = mcgpds_shipped(data)
    g = McGPDSMeanField(covariance=covariance, init_scale=0.02)
    fit(model, g, data, loss=Trace_ELBO(), optim=pyro.optim.ClippedAdam({"lr": 0.1, "lrd": 0.998}),
        num_steps=num_steps, seed=0, progress=False)
    pyro.set_rng_seed(1)
    e, se = _mc_elbo(Trace_ELBO(num_particles=20), model, g, data)
    return {"model": "McGPDS", "guide": f"McGPDSMeanField(covariance={covariance!r})", "steps": num_steps,
            "shipped": ref, "mean_field": e, "se": se, "gap": ref - e}


# ------------------------------------------------------------------------------ coupled projections
def coupled_projections_problem(sigma: float = 0.1):
    """``simulate(n=30, d=2, dx=5, dy=4, seed=3)``, every third pair known, whitened; β = 1, γ = 1e-3."""
    from tandem.inference.coupled_projections import CoupledProjections
    from tandem.models import coupled_projections as cpm
    sim = cpm.simulate(n=30, d=2, dx=5, dy=4, seed=3)
    known = np.arange(0, 30, 3)
    cp = CoupledProjections(d=2, k=4).fit(sim["X"], sim["Y"], np.c_[known, known])
    w = cpm.whiten(cp)
    return cp, w, (w.zhat, w.omega, 2, 1.0, 1e-3, sigma)


def tied_elbo(w, Q: torch.Tensor, s: float, beta: float, gamma: float, sigma: float) -> float:
    """ELBO (without the dropped whitening constant) of the shipped tied guide q(U) = N(ẐQ, s²),
    in closed form: E log p(U) + E log N_d(Qᵀẑ_n; u_n, σ²) + H(q)."""
    Zh, Om = w.zhat, w.omega
    N, d = Zh.shape[0], Q.shape[1]
    Lam = beta * Om + gamma * torch.eye(N, dtype=Om.dtype)
    M = Zh @ Q
    prior = (-0.5 * torch.trace(M.T @ Lam @ M) - 0.5 * d * s ** 2 * torch.trace(Lam)
             - 0.5 * N * d * math.log(2 * math.pi) + 0.5 * d * torch.logdet(Lam))
    lik = N * d * (-0.5 * s ** 2 / sigma ** 2 - 0.5 * math.log(2 * math.pi * sigma ** 2))
    ent = N * d * 0.5 * math.log(2 * math.pi * math.e * s ** 2)
    return float(prior + lik + ent)


def coupled_projections_gap(sigma: float = 0.1, num_steps: int = 800) -> dict:
    """The tied guide at its exact optimum (Q = the paper's subspace, s = its closed-form optimum;
    closed-form ELBO) against :class:`~tandem.guides.mean_field.CoupledProjectionsMeanField`
    fitted by Adam (lr 0.03); also the angle between the fitted and the paper's subspace."""
    import scipy.linalg as sla

    from tandem.guides.coupled_projections import optimal_scale
    from tandem.guides.mean_field import CoupledProjectionsMeanField
    from tandem.inference import fit
    from tandem.models import coupled_projections as cpm
    cp, w, args = coupled_projections_problem(sigma)
    Q = torch.as_tensor(w.Q_eig, dtype=D64)
    ref = tied_elbo(w, Q, optimal_scale(w.omega, 1.0, 1e-3, sigma), 1.0, 1e-3, sigma)
    g = CoupledProjectionsMeanField()
    res = fit(cpm.model, g, *args, num_steps=num_steps, optim=pyro.optim.Adam({"lr": 0.03}), seed=0,
              progress=False)
    pyro.set_rng_seed(1)
    e, se = _mc_elbo(Trace_ELBO(num_particles=50), cpm.model, g, *args)
    angle = float(sla.subspace_angles(w.projection(cpm.orthonormal(res.params["Q_raw"])), cp.P).max())
    return {"model": "coupled projections", "guide": "CoupledProjectionsMeanField()", "steps": num_steps,
            "sigma": sigma, "shipped": ref, "mean_field": e, "se": se, "gap": ref - e, "angle": angle}


# ------------------------------------------------------------------------------ SAMTC
def samtc_problem():
    """``simulate(n=[40, 30], h=[2, 3], n_atoms=2, d=2, seed=1)``, scaled and initialised as
    :func:`tandem.inference.samtc.model_fit.fit_model` does (k-means per task, matched atoms)."""
    from tandem.inference.samtc.model_fit import initial_values, scale_tasks
    from tandem.models import samtc
    sim = samtc.simulate([40, 30], [2, 3], n_atoms=2, d=2, seed=1, prior_scale=4.0, sigma_loc=0.5)
    Z, _, _, km = scale_tasks(sim["tasks"], [2, 3], seed=0)
    init, K = initial_values(Z, [2, 3], km=km, seed=0)
    return Z, [2, 3], K, init, dict(prior_loc=Z[0].new_zeros(2), prior_scale=3.0)


def samtc_gap(num_steps: int = 300) -> dict:
    """Both guides from the same starting values, TraceEnum_ELBO, ClippedAdam (lr 0.05 decayed
    to 0.005), ``num_steps`` steps each; ELBOs by Monte Carlo."""
    from tandem.guides.mean_field import SAMTCMeanField
    from tandem.guides.samtc import Guide
    from tandem.inference import fit
    from tandem.models import samtc
    Z, h, K, init, kw = samtc_problem()
    out = {}
    for name, g in (("shipped", Guide(init=init)), ("mean_field", SAMTCMeanField(init=init))):
        fit(samtc.model, g, Z, h, K, loss=TraceEnum_ELBO(max_plate_nesting=1),
            optim=pyro.optim.ClippedAdam({"lr": 0.05, "lrd": 0.1 ** (1 / num_steps)}), num_steps=num_steps,
            seed=0, progress=False, **kw)
        pyro.set_rng_seed(1)
        out[name], out[name + "_se"] = _mc_elbo(TraceEnum_ELBO(max_plate_nesting=1, num_particles=10),
                                                samtc.model, g, Z, h, K, **kw)
    return {"model": "SAMTC", "guide": "SAMTCMeanField(init=...)", "steps": num_steps, "shipped": out["shipped"],
            "mean_field": out["mean_field"], "se": out["mean_field_se"], "gap": out["shipped"] - out["mean_field"]}


def table(rows: list[dict]) -> str:
    """The markdown table of docs/guides.md from the rows of the ``*_gap`` functions."""
    lines = ["| model | mean-field guide | steps | shipped guide's ELBO | mean-field ELBO ± se | gap (nats) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        extra = f" (σ = {r['sigma']:g}; subspace {r['angle']:.2f} rad from the paper's)" if "angle" in r else ""
        lines.append(f"| {r['model']} | `{r['guide']}` | {r['steps']} | {r['shipped']:.2f} | "
                     f"{r['mean_field']:.2f} ± {r['se']:.2f} | {r['gap']:.2f}{extra} |")
    return "\n".join(lines) + "\n"


def main():
    from pathlib import Path
    rows = [mcgpds_gap("full"), mcgpds_gap("diag"), coupled_projections_gap(), samtc_gap()]
    text = table(rows)
    out = Path(__file__).resolve().parent / "_tables" / "mean_field_gaps.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
