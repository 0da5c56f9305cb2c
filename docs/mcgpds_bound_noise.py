"""McGPDS collapsed bound: where its rounding noise enters, term by term.

Evidence for issue 21 item 2. On simulated frames (``simulate_sequences(n_seq, seq_len,
[10, 8], Q=2, M=20, seed=0)``, the benchmark's data) with the mapping kernel and the inducing
inputs learned (α, ε, β, the time kernels and W fixed), every unconstrained parameter p is
perturbed to ``p (1 + rel ξ)`` (ξ standard normal, rel = 1e-9) and each term T of the bound is
scored by its *noise* ``T(θ + δ) − T(θ) − ∇T(θ)·δ`` (the part of the change that the gradient
does not predict; at rel = 1e-9 the second-order term is far below it). The terms: the KL and,
per view, ``−β/2 ‖Y‖²``, ``−D/2 log|I + βÃ|``, the data fit ``β²/2 ‖L_P⁻¹R‖²`` and the trace
term ``Dβ/2 (tr Ã − ψ0)`` of :func:`tandem.inference.mcgpds.bound.view_bound`, and the view
bound as the code computes it. Printed relative to |F|.

Usage::

    OMP_NUM_THREADS=1 python docs/mcgpds_bound_noise.py --n-seq 10 --seq-len 1000 --steps 0 --reps 4
"""
from __future__ import annotations

import argparse
import json
import math

import pyro
import torch

from tandem.guides.mcgpds import variational_params
from tandem.inference.mcgpds import bound as B
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds
from tandem.inference.mcgpds.stochastic import simulate_sequences
from tandem.inference.numerics import cho_logdet, cholesky_jitter
from tandem.models.mcgpds import hyperparams, view_bases


def terms(data) -> dict:
    """Every term of the collapsed bound at the current parameter store (scalars with autograd)."""
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    lt = B.latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    out = {"kl": -lt["kl"]}
    for k, Y in enumerate(data.views):
        v = hp["views"][k]
        N, D = Y.shape
        beta = v["beta"]
        bh, _ = view_bases(v, B._mapping(data))
        psi0, At, R = bh.whitened(mus[k], lt["s_diag"][k], Y)
        M = At.shape[0]
        LP = cholesky_jitter(torch.eye(M, dtype=Y.dtype) + beta * At, "I + β Ã")
        RP = torch.linalg.solve_triangular(LP, R, upper=False)
        out[f"yy_{k}"] = -0.5 * beta * (Y * Y).sum() + 0.5 * N * D * (beta.log() - math.log(2 * math.pi))
        out[f"logdet_{k}"] = -0.5 * D * cho_logdet(LP)
        out[f"fit_{k}"] = 0.5 * beta * beta * (RP * RP).sum()
        out[f"trace_{k}"] = 0.5 * D * beta * (At.diagonal().sum() - psi0)
        out[f"view_{k}"] = B.view_bound(Y, mus[k], lt["s_diag"][k], v, B._mapping(data))
    out["F"] = out["kl"] + sum(out[f"view_{k}"] for k in range(data.V))
    return out


def diagnose(data, reps: int = 4, rel: float = 1e-9, seed: int = 0) -> dict:
    """Noise of every term under ``reps`` random relative perturbations of size ``rel``."""
    store = pyro.get_param_store()
    params = {n: p for n, p in store.named_parameters() if p.requires_grad}
    t0 = terms(data)
    names = list(t0)
    grads = {}
    for i, n in enumerate(names):
        if not t0[n].requires_grad:
            grads[n] = None
            continue
        gs = torch.autograd.grad(t0[n], list(params.values()), retain_graph=i < len(names) - 1, allow_unused=True)
        grads[n] = [torch.zeros_like(p) if g is None else g for g, p in zip(gs, params.values())]
    v0 = {n: float(t0[n]) for n in names}
    F = abs(v0["F"])
    gen = torch.Generator().manual_seed(seed)
    noise = {n: [] for n in names}
    base = {n: p.detach().clone() for n, p in params.items()}
    for _ in range(reps):
        deltas = {n: rel * b * torch.randn(b.shape, dtype=b.dtype, generator=gen) for n, b in base.items()}
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(base[n] + deltas[n])
            t1 = terms(data)
            for n, p in params.items():
                p.copy_(base[n])
        for n in names:
            lin = 0.0 if grads[n] is None else sum(float((g * deltas[m]).sum()) for g, m in zip(grads[n], params))
            noise[n].append(float(t1[n]) - v0[n] - lin)
    return {"F": v0["F"], "values": v0,
            "noise_rel_max": {n: max(abs(x) for x in noise[n]) / F for n in names},
            "noise_abs": noise}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-seq", type=int, default=10)
    p.add_argument("--seq-len", type=int, default=1000)
    p.add_argument("--steps", type=int, default=0, help="L-BFGS iterations (kernel, Z, q(X) learned) before")
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--rel", type=float, default=1e-9)
    p.add_argument("--out", default=None, help="write the result as JSON here")
    a = p.parse_args()
    torch.set_default_dtype(torch.float64)
    sim = simulate_sequences(a.n_seq, a.seq_len, [10, 8], Q=2, M=20, seed=0)
    cfg = McGPDSConfig(Q=2, M=20, fixed=("alpha", "eps", "beta", "time", "W"), cycles=0,
                       joint_iters=a.steps, lbfgs_max_iter=max(1, a.steps))
    fitted = fit_mcgpds(sim["views"], sim["times"], sequence_ids=sim["seq_ids"], config=cfg, seed=0,
                        progress=False)
    data = fitted.data
    r = diagnose(data, a.reps, a.rel)
    print(f"N = {data.N}, steps = {a.steps}, F = {r['F']:.6e} ({r['F'] / data.N:.3f} nats/frame)")
    for n, x in r["noise_rel_max"].items():
        print(f"  {n:10s} value {r['values'][n]: .6e}   noise/|F| max {x:.2e}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
