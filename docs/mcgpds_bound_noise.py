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

``--forms`` then compares, on view 0 (μ, Z, σ², ARD perturbed; the variances s held), the forms
of the h term: the normal equations, the least-squares form with δ = log ψ2 − log ψ1ψ1 by
subtraction (as it was) and with δ in closed form (:func:`tandem.inference.mcgpds.streamed._cov_rbf_matrix`),
the latter with its residual in float64 and from C carried beyond float64
(:data:`tandem.inference.mcgpds.streamed.EXTENDED_RESIDUAL`, the default), each against a
long-double reference (:func:`long_double_h`), and prints the floors: the change of the float64
least-squares form when one of its inputs (Ψ1, C, K_ZZ) is rounded by one more ulp, and
``ε Σ|∂F/∂θ · θ|`` (the parameters' own conditioning).

Usage (``--out`` writes ``mcgpds_bound_noise.json`` in the results schema; the docs' table is
generated from it)::

    OMP_NUM_THREADS=1 python docs/mcgpds_bound_noise.py --n-seq 10 --seq-len 1000 --steps 0 \\
        --reps 8 --forms --out docs/results
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import pyro
import torch

from tandem.guides.mcgpds import variational_params
from tandem.inference.experiments.results import Results
from tandem.inference.mcgpds import bound as B
from tandem.inference.mcgpds import streamed
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
    v0 = {n: float(t0[n].detach()) for n in names}
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


def long_double_h(Y, mu, s, Z, var, ard, beta, jitter: float = 1e-6) -> float:
    """The h part of the RBF view bound, without its constant ``N D/2 (log β − log 2π)``, in numpy long double.

    The least-squares form (:func:`tandem.inference.mcgpds.streamed.h_term_stable`) evaluated
    entirely in long double (64-bit mantissa on x86: ≈ 2000× float64's precision) from the float64
    inputs: direct differences in every exponent (no expanded squares), C = Ψ2 − Ψ1ᵀΨ1 summed
    per frame, ``log|K + βΨ2|`` and the residual from one Householder elimination of
    ``[[chol(K + βC)ᵀ, 0], [√β Ψ1, √β Y]]`` (:func:`tandem.inference.extended_precision.eliminate`),
    K_ZZ with the kernel's relative jitter. (The normal equations, even in long double, were
    4e-4 nats off at N = 10⁴ on the benchmark's data: their condition, 10¹³, times long double's
    ε is not small there.) A reference for the float64 forms; O(N M Q) memory per row of C.
    """
    from tandem.inference import extended_precision as ep
    ld = np.longdouble
    mu, Z, s, Y = (x.detach().cpu().numpy().astype(ld) for x in (mu, Z, s, Y))
    a = ard.detach().cpu().numpy().astype(ld)
    v, b = ld(float(var)), ld(float(beta))
    N, D = Y.shape
    M = Z.shape[0]
    d1, d2 = 1 + a * s, 1 + 2 * a * s
    l1 = -0.5 * (((mu[:, None] - Z[None]) ** 2) * (a / d1)[:, None]).sum(-1) - 0.5 * np.log(d1).sum(-1)[:, None]
    P1 = v * np.exp(l1)
    zb, dz = 0.5 * (Z[:, None] + Z[None]), Z[:, None] - Z[None]
    C = np.zeros((M, M), dtype=ld)
    for m in range(M):
        u2 = (((mu[:, None] - zb[m][None]) ** 2) * (a / d2)[:, None]).sum(-1)
        l2 = -0.25 * (a * dz[m] ** 2).sum(-1)[None] - u2 - 0.5 * np.log(d2).sum(-1)[:, None]
        a1 = l1[:, m][:, None] + l1
        C[m] = (v * v * np.exp(a1) * np.expm1(l2 - a1)).sum(0)
    C = 0.5 * (C + C.T)
    K = v * np.exp(-0.5 * ((dz ** 2) * a).sum(-1)) + ld(jitter) * v * np.eye(M, dtype=ld)

    def fsolve(L, B):
        X = np.zeros_like(B)
        for i in range(L.shape[0]):
            X[i] = (B[i] - L[i, :i] @ X[:i]) / L[i, i]
        return X

    LK, Lc = ep.cholesky(K), ep.cholesky(K + b * C)
    A = np.zeros((M + N, M + D), dtype=ld)
    A[:M, :M] = Lc.T
    A[M:, :M], A[M:, M:] = np.sqrt(b) * P1, np.sqrt(b) * Y
    E = ep.eliminate(A, M)
    logdet = 2 * (np.log(np.abs(np.diag(E[:M, :M]))).sum() - np.log(np.diag(LK)).sum())
    resid = (E[M:, M:] ** 2).sum()
    W = fsolve(LK, P1.T)
    trK = (W * W).sum() + np.trace(fsolve(LK, fsolve(LK, C).T))
    return float(-0.5 * D * logdet - 0.5 * resid + 0.5 * D * b * (trK - N * v))


def _cov_rbf_subtracted(mu, s, Z, variance, ard, extended=False):
    """The least-squares form's C as first written: δ = log ψ2 − (log ψ1_m + log ψ1_m') by subtraction."""
    from tandem.models.gp_kernels import _pairs
    M = Z.shape[0]
    d1 = 1.0 + ard * s
    c1 = ard / d1
    g1 = -0.5 * (c1 * mu * mu).sum(-1) - 0.5 * d1.log().sum(-1)
    log1 = torch.addmm(g1[:, None], torch.cat([c1 * mu, -0.5 * c1], 1), torch.cat([Z, Z * Z], 1).T)
    d2 = 1.0 + 2.0 * ard * s
    c2 = ard / d2
    g2 = -(c2 * mu * mu).sum(-1) - 0.5 * d2.log().sum(-1)
    im, ip, full = _pairs(M, Z.device)
    zbar, dz = 0.5 * (Z[im] + Z[ip]), Z[im] - Z[ip]
    log2 = torch.addmm(g2[:, None], torch.cat([2.0 * c2 * mu, -c2], 1), torch.cat([zbar, zbar * zbar], 1).T) \
        - 0.25 * (ard * dz * dz).sum(-1)
    a = log1[:, im] + log1[:, ip]
    Cp = (a.exp() * torch.expm1(log2 - a)).sum(0)
    C = (variance * variance) * Cp[full].reshape(M, M)
    return (C, C.detach().numpy().astype(np.longdouble)) if extended else C


def compare_forms(data, reps: int = 4, rel: float = 1e-9, seed: int = 1) -> dict:
    """Noise and reference error of the h-term forms on view 0, and the least-squares form's floors."""
    hp = hyperparams(data)
    mus, lams = variational_params(data)
    with torch.no_grad():
        lt = B.latent_terms(data.times, data.blocks, hp["time_s"], hp["views"], mus, lams)
    v = hp["views"][0]
    Y = data.views[0]
    N, D = Y.shape
    s = lt["s_diag"][0].detach()
    x0 = [mus[0].detach(), v["Zh"].detach(), v["kh_var"].detach(), v["kh_ard"].detach()]
    beta = v["beta"].detach()
    const = 0.5 * N * D * (math.log(float(beta)) - math.log(2 * math.pi))

    def view(mu, Z, var, ard):
        h = dict(v, Zh=Z, kh_ard=ard, kh_var=var, W=v["W"].detach())
        return B.view_bound(Y, mu, s, h, B._mapping(data))

    def with_form(flag, sub=False, extended=False):
        def f(*x):
            old, old_cov, old_ext = streamed.STABLE_H, streamed._cov_rbf_matrix, streamed.EXTENDED_RESIDUAL
            streamed.STABLE_H, streamed.EXTENDED_RESIDUAL = flag, extended
            if sub:
                streamed._cov_rbf_matrix = _cov_rbf_subtracted
            try:
                return view(*x)
            finally:
                streamed.STABLE_H, streamed._cov_rbf_matrix, streamed.EXTENDED_RESIDUAL = old, old_cov, old_ext
        return f

    ref = long_double_h(Y, x0[0], s, x0[1], x0[2], x0[3], beta) + const
    gen = torch.Generator().manual_seed(seed)
    deltas = [[rel * x * torch.randn(x.shape, dtype=x.dtype, generator=gen) for x in x0] for _ in range(reps)]
    out = {"reference": ref, "forms": {}}
    for name, f in (("normal equations", with_form(False)), ("least squares, δ subtracted", with_form(True, True)),
                    ("least squares, float64 residual", with_form(True)),
                    ("least squares, extended residual (default)", with_form(True, extended=True))):
        xs = [x.clone().requires_grad_(True) for x in x0]
        F = f(*xs)
        grads = torch.autograd.grad(F, xs)
        F0 = float(F.detach())
        noise = []
        for d in deltas:
            with torch.no_grad():
                F1 = float(f(*[x + dx for x, dx in zip(x0, d)]))
            noise.append(F1 - F0 - sum(float((g * dx).sum()) for g, dx in zip(grads, d)))
        out["forms"][name] = {"value": F0, "minus_reference": F0 - ref, "noise": noise,
                              "noise_rel_max": max(map(abs, noise)) / abs(F0)}
        if name.startswith("least squares, extended"):
            out["theta_floor"] = 2.0 ** -53 * sum(float((g * x).abs().sum()) for g, x in zip(grads, x0))
    out["input_floors"] = _input_floors(Y, x0, s, beta, reps, seed)
    return out


def _input_floors(Y, x0, s, beta, reps, seed) -> dict:
    """Largest change of the least-squares h term when Ψ1, C or K_ZZ is rounded by one more ulp (rest fixed)."""
    from tandem.models.kernels import RBFARD
    mu, Z, var, ard = x0
    M = Z.shape[0]
    K = RBFARD().kzz(Z, {"variance": var, "ard": ard})
    P1, C = streamed._psi1_part("rbfard", mu, s, Z, var, ard), streamed._cov_matrix("rbfard", mu, s, Z, var, ard)
    C = 0.5 * (C + C.mT)
    sb = beta.sqrt()

    def h(P1, C, K):
        L = torch.linalg.cholesky(K)
        Lc = torch.linalg.cholesky(K + beta * C)
        R = torch.linalg.qr(torch.cat([torch.cat([Lc.mT, Y.new_zeros(M, Y.shape[1])], 1),
                                       torch.cat([sb * P1, sb * Y], 1)], 0), mode="r")[1]
        W = torch.linalg.solve_triangular(L, P1.mT, upper=False)
        return float(-0.5 * Y.shape[1] * (2.0 * R[:M, :M].diagonal().abs().log().sum() - cho_logdet(L))
                     - 0.5 * (R[M:, M:] ** 2).sum()
                     + 0.5 * Y.shape[1] * beta * ((W * W).sum() + torch.cholesky_solve(C, L).diagonal().sum()))

    base = h(P1, C, K)
    gen = torch.Generator().manual_seed(seed)
    eps = 2.0 ** -53

    def ulp(X, sym=False):
        E = torch.randn(X.shape, dtype=X.dtype, generator=gen)
        return X * (1 + eps * (0.5 * (E + E.mT) if sym else E))

    out = {}
    for name, args in (("Psi1", lambda: (ulp(P1), C, K)), ("C", lambda: (P1, ulp(C, True), K)),
                       ("K_ZZ", lambda: (P1, C, ulp(K, True)))):
        out[name] = max(abs(h(*args()) - base) for _ in range(max(reps, 1)))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-seq", type=int, default=10)
    p.add_argument("--seq-len", type=int, default=1000)
    p.add_argument("--steps", type=int, default=0, help="L-BFGS iterations (kernel, Z, q(X) learned) before")
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--rel", type=float, default=1e-9)
    p.add_argument("--forms", action="store_true", help="also compare the h-term forms on view 0")
    p.add_argument("--out", default=None, help="write mcgpds_bound_noise.json (the results schema) into this folder")
    a = p.parse_args()
    torch.set_default_dtype(torch.float64)
    sim = simulate_sequences(a.n_seq, a.seq_len, [10, 8], Q=2, M=20, seed=0)
    cfg = McGPDSConfig(Q=2, M=20, fixed=("alpha", "eps", "beta", "time", "W"), cycles=0,
                       joint_iters=a.steps, lbfgs_max_iter=max(1, a.steps))
    fitted = fit_mcgpds(sim["views"], sim["times"], sequence_ids=sim["seq_ids"], config=cfg, seed=0,
                        progress=False)
    data = fitted.data
    r = diagnose(data, a.reps, a.rel)
    F = abs(r["F"])
    print(f"N = {data.N}, steps = {a.steps}, F = {r['F']:.6e} ({r['F'] / data.N:.3f} nats/frame)")
    for n, x in r["noise_rel_max"].items():
        print(f"  {n:10s} value {r['values'][n]: .6e}   noise/|F| max {x:.2e}")
    res = Results("mcgpds_bound_noise", [0], config={"n_frames": data.N, "n_seq": a.n_seq, "seq_len": a.seq_len,
                                                      "steps": a.steps, "draws": a.reps, "rel": a.rel, "M": 20,
                                                      "Q": 2, "F": r["F"]})
    res.add("collapsed bound F (all terms)", "noise_max_nats", max(map(abs, r["noise_abs"]["F"])))
    res.add("collapsed bound F (all terms)", "noise_rel_F", r["noise_rel_max"]["F"])
    if a.forms:
        c = compare_forms(data, a.reps, a.rel)
        r["view0_forms"] = c
        print(f"view 0, h-term forms (long-double reference {c['reference']:.10e}):")
        for n, x in c["forms"].items():
            worst = max(map(abs, x["noise"]))
            print(f"  {n:30s} value {x['value']:.10e}  − ref {x['minus_reference']: .2e}  "
                  f"noise max {worst:.2e} nats ({worst / F:.1e} of the bound's |F|)")
            res.add(f"view 0: {n}", "noise_max_nats", worst)
            res.add(f"view 0: {n}", "noise_rel_F", worst / F)
            res.add(f"view 0: {n}", "minus_reference_nats", x["minus_reference"])
        print(f"  floors (nats): parameters {c['theta_floor']:.1e}, "
              + ", ".join(f"{k} rounded {v:.1e}" for k, v in c["input_floors"].items()))
    if a.out:
        print(f"wrote {res.write(a.out)}")


if __name__ == "__main__":
    main()
