"""McGPDS on recordings with gaps: human pose with 10 %, 30 %, 50 % of the pose frames removed.

The human-pose protocol (examples/mcgpds_human_pose.py: 566 training frames in 7 sequences,
the 158-frame test walk, one scalar scale per view) with a seeded random share of the
TRAINING frames of view 2 (the 63-d pose) set to NaN — the same masks for every method
(mask seed ``--mask-seed`` + the percentage, independent of the method seed). View 2 is
centred and scaled with the statistics of its observed frames only. Two questions per mask:

* **imputation** — the pose of the removed training frames (their silhouettes are observed):
  RMSE and MSLL in the original units over the removed frames;
* **test prediction** — the pose of the test walk from its silhouettes, RMSE and mean joint
  error (protocol §1.9).

Methods (every one sees exactly the same masked data):

* "McGPDS (masked likelihood)": :func:`tandem.inference.mcgpds.fit.fit_mcgpds` with the NaN
  entries not scored (:mod:`tandem.inference.mcgpds.missing`), α/ε/β/time kernels fixed as in
  the protocol, W fixed (g off: the h-only CGPDS output layer). Imputation = the fitted
  predictive at the removed frame's own latent q(x_n^(2)) (h only); test prediction = the tandem
  predictor (:func:`tandem.inference.mcgpds.predictor.calibrated_prediction`).
* "NN in Y space (standardised silhouettes)": the pose of the nearest frame with an observed
  pose (imputation) / nearest training frame with an observed pose (test).
* "training mean": per-coordinate mean of the observed poses (Gaussian predictive with their
  variance).
* "GPy MRD (missing_data)", "GPy BGPLVM (missing_data)" (``--gpy``; skipped cleanly when GPy is
  not installed; fitted on every seed, numpy's generator seeded with it): GPy's MRD (it switches
  its missing-data inference on for a view with NaN) and a Bayesian GPLVM with
  ``missing_data=True`` on the concatenated views [silhouette, pose], both Q = ``--gpy-q``,
  M = 100, ARD RBF + bias kernels, the same PCA init on the mean-filled data, ``--gpy-iters``
  L-BFGS iterations; neither sees the test frames while fitting. Imputation = the model's pose
  predictive at the removed frame's latent mean. Test prediction, MRD: as MRD's pose demo (infer
  q(X*) from the silhouettes with the silhouette view's ``infer_newX``, take the nearest
  training latent mean, pose predictive there). Test prediction, BGPLVM
  (:func:`tandem.inference.mcgpds.baselines.fit_gpy_bgplvm_missing`): q(x*) inferred from the
  silhouettes by GPy's ``infer_newX`` on the bound of the silhouette columns (observed in every
  training frame, so an ordinary BGPLVM with the fitted q(X), Z, kernel and noise holds exactly
  their part of the missing-data bound), pose predictive at the inferred latent mean.

``--merge A.json B.json --out DIR`` joins the results files of runs on disjoint seeds (one
process per seed) into one file (:func:`tandem.inference.experiments.results.merge_results`).

Usage::

    python examples/mcgpds_missing.py --quick --seeds 1                       # smoke test
    # the recorded run (docs/mcgpds_recordings.md, "Recordings with gaps"; reduced schedule)
    for s in 0 1; do OMP_NUM_THREADS=1 python examples/mcgpds_missing.py --seed $s --cycles 3 \
        --var-iters 20 --model-iters 20 --joint-iters 200 --gpy --gpy-iters 100 --no-progress \
        --out /tmp/missing/s$s & done; wait
    python examples/mcgpds_missing.py --merge /tmp/missing/s0/mcgpds_missing.json \
        /tmp/missing/s1/mcgpds_missing.json --out docs/results/recorded --provenance-command "..."
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from tandem.inference import metrics as M
from tandem.inference.datasets.human_pose import constant_columns, load_human_pose
from tandem.inference.distances import Standardizer, knn
from tandem.inference.experiments.cli import base_parser, prepare_out, seed_list, set_seed
from tandem.inference.experiments.mcgpds_protocol import protocol_config
from tandem.inference.experiments.results import Results, merge_results
from tandem.inference.mcgpds.baselines import fit_gpy_bgplvm_missing, gpy_available
from tandem.inference.mcgpds.bound import predict_moments, view_posterior
from tandem.inference.mcgpds.fit import constant_hyperparams, fit_mcgpds
from tandem.inference.mcgpds.missing import mean_fill
from tandem.inference.mcgpds.predictor import calibrated_prediction
from tandem.inference.persistence import write_text_atomic

EXPERIMENT = "mcgpds_missing"
MCGPDS = "McGPDS (masked likelihood)"
NN = "NN in Y space (standardised silhouettes)"
MEAN = "training mean"
MRD = "GPy MRD (missing_data)"
BGPLVM = "GPy BGPLVM (missing_data)"


def removal_mask(n: int, fraction: float, seed: int) -> np.ndarray:
    """Boolean (n,) mask of the removed frames: ``round(fraction · n)`` frames drawn without
    replacement with ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    out = np.zeros(n, dtype=bool)
    out[rng.choice(n, int(round(fraction * n)), replace=False)] = True
    return out


def _scores(res, method, pct, truth_imp, mean_imp, var_imp, truth_te, mean_te, msll_mask):
    if mean_imp is not None:
        res.add(method, "impute_rmse", M.rmse(mean_imp, truth_imp), removed=pct)
        if var_imp is not None:
            res.add(method, "impute_msll", M.msll(mean_imp, var_imp, truth_imp, mask=msll_mask), removed=pct)
    if mean_te is not None:
        res.add(method, "test_rmse", M.rmse(mean_te, truth_te), removed=pct)
        res.add(method, "test_mean_joint_error", M.mean_joint_error(mean_te, truth_te), removed=pct)


def _gpy_peers(m1, m2, m1_test, gone, Q, M_ind, iters, seed):
    """GPy MRD and BGPLVM (missing data) on the scaled views; returns {method: (imp, imp_var, test)}
    in scaled units, or the error text of a peer that failed."""
    import GPy
    out = {}
    N, D1 = m1.shape
    Yc = np.concatenate([m1, m2], 1)
    X0 = torch.linalg.svd(torch.as_tensor(mean_fill(torch.as_tensor(Yc)) - np.nanmean(Yc, 0)),
                          full_matrices=False)
    X0 = (X0[0][:, :Q] * X0[1][:Q]).numpy()
    X0 = X0 / X0.std(0)
    for name in (MRD, BGPLVM):
        np.random.seed(seed)
        t0 = time.perf_counter()
        try:
            if name == MRD:
                kerns = [GPy.kern.RBF(Q, ARD=True) + GPy.kern.Bias(Q) for _ in range(2)]
                mdl = GPy.models.MRD([m1, m2], input_dim=Q, X=X0.copy(), num_inducing=M_ind, kernel=kerns,
                                     initz="permute")
                for bg, Yk in zip(mdl.bgplvms, (m1, m2)):
                    bg.likelihood.variance[:] = 0.01 * float(np.nanvar(Yk))
            else:
                r = fit_gpy_bgplvm_missing(m1, m2, m1_test, Q=Q, M=M_ind, max_iters=iters, seed=seed, X=X0)
                out[name] = (r.impute_mean[gone], r.impute_var[gone], r.test_mean, time.perf_counter() - t0)
                continue
            mdl.optimize(max_iters=iters, messages=False)
            mu = np.asarray(mdl.X.mean)
            imp, iv = mdl.bgplvms[1].predict(mu[gone], include_likelihood=True)
            Xn, _ = mdl.bgplvms[0].infer_newX(m1_test, optimize=True)
            te, _ = mdl.bgplvms[1].predict(mu[knn(np.asarray(Xn.mean), mu, 1)[:, 0]])
            out[name] = (np.asarray(imp), np.broadcast_to(np.asarray(iv), np.shape(imp)).copy(),
                         None if te is None else np.asarray(te), time.perf_counter() - t0)
        except Exception as e:   # a peer failing must not lose the run: recorded in the config
            out[name] = f"{type(e).__name__}: {e}"
    return out


def _score_gpy_peers(res, pct, data, m2, gone, s2, b2, truth_imp, msll_mask, args, seed):
    """Fit the GPy peers on one mask and seed and add their scores (a failed peer goes into the config)."""
    peers = _gpy_peers(data.m1, m2, data.m1_test, gone, args.gpy_q, 100, args.gpy_iters, seed)
    for name, r in peers.items():
        if isinstance(r, str):
            res.config.setdefault("gpy_failures", {})[f"{name}, {pct}, seed {seed}"] = r
            print(f"[{pct}] seed {seed}: {name} failed: {r}", flush=True)
            continue
        imp, iv, te, secs = r
        res.time(name, "train+predict", secs)
        _scores(res, name, pct, truth_imp, imp * s2 + b2, iv * s2 ** 2, data.Y2_test,
                None if te is None else te * s2 + b2, msll_mask)
        print(f"[{pct}] seed {seed}: {name} impute RMSE {M.rmse(imp * s2 + b2, truth_imp):.3f}"
              + ("" if te is None else f", test RMSE {M.rmse(te * s2 + b2, data.Y2_test):.3f}")
              + f" ({secs:.0f} s)", flush=True)


def parser():
    p = base_parser(__doc__.split("\n")[0], real_data=True, default_seeds=1)
    p.add_argument("--fractions", default="0.1,0.3,0.5", help="comma list of shares of view-2 frames removed")
    p.add_argument("--mask-seed", type=int, default=2026, help="seed of the removal masks (+ the percentage)")
    p.add_argument("--gpy", action="store_true", help="also fit GPy MRD and BGPLVM with missing data (needs GPy)")
    p.add_argument("--gpy-q", type=int, default=5, help="latent dimension of the GPy peers")
    p.add_argument("--gpy-iters", type=int, default=300, help="L-BFGS iterations of the GPy peers")
    p.add_argument("--merge", nargs="+", metavar="JSON", default=None,
                   help="join the results files of runs on disjoint seeds (e.g. one process per seed) into "
                        "--out/mcgpds_missing.json and stop (fits nothing)")
    p.add_argument("--provenance-command", default=None,
                   help="with --merge: the commands that wrote the joined files, stored as the provenance")
    p.add_argument("--provenance-note", default="", help="with --merge: a note stored with the provenance")
    g = p.add_argument_group("reduced runs (default: the protocol's values)")
    for k in ("Q", "M", "cycles", "var_iters", "model_iters", "joint_iters"):
        g.add_argument("--" + k.replace("_", "-"), dest=k, type=int, default=None)
    return p


def merge(args) -> Path:
    """``--merge``: write the join of the given results files (:func:`merge_results`) to ``--out``."""
    prov = None
    if args.provenance_command:
        prov = {"command": args.provenance_command,
                "source": "the JSON files written by these commands, joined by examples/mcgpds_missing.py "
                          "--merge; not regenerated by this build",
                "note": args.provenance_note}
    data = merge_results(args.merge, provenance=prov)
    if data["experiment"] != EXPERIMENT:
        raise SystemExit(f"--merge: expected {EXPERIMENT} results, got {data['experiment']!r}")
    path = Path(args.out) / f"{EXPERIMENT}.json"
    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False))
    print(f"joined seeds {data['seeds']} into {path}")
    return path


def main(args):
    out = prepare_out(args)
    if args.merge:
        return merge(args)
    data = load_human_pose(args.data_dir)
    fractions = [float(f) for f in str(args.fractions).split(",") if f.strip()]
    if not fractions or any(not 0 < f < 1 for f in fractions):
        raise SystemExit(f"--fractions: expected shares in (0, 1), got {args.fractions!r}")
    seeds = seed_list(args)
    over = {k: getattr(args, k) for k in ("Q", "M", "cycles", "var_iters", "model_iters", "joint_iters")
            if getattr(args, k) is not None}
    use_gpy = bool(args.gpy) and not args.quick
    config = {"fractions": fractions, "mask_seed": args.mask_seed, "overrides": over, "quick": bool(args.quick),
              "mcgpds": "protocol config (α, ε, β, time kernels fixed) + W fixed; imputation h-only predictive "
                        "at q(x_n^(2)); test: tandem calibrated predictor",
              "gpy": ("skipped (--gpy not given)" if not args.gpy else "skipped (--quick)" if args.quick
                      else "skipped (GPy not installed)" if not gpy_available() else
                      {"Q": args.gpy_q, "M": 100, "iters": args.gpy_iters})}
    res = Results(EXPERIMENT, seeds, config)
    N = data.n_train
    msll_mask = ~constant_columns(data.Y2)
    feats_tr = Standardizer(data.Y1).transform(data.Y1)
    feats_te = Standardizer(data.Y1).transform(data.Y1_test)
    for f in fractions:
        pct = f"{round(100 * f)} %"
        gone = removal_mask(N, f, args.mask_seed + round(100 * f))
        kept = ~gone
        b2, s2 = data.Y2[kept].mean(0), float(np.std(data.Y2[kept].ravel(), ddof=1))
        m2 = (data.Y2 - b2) / s2
        m2[gone] = np.nan
        truth_imp = data.Y2[gone]
        # deterministic baselines (seed-free)
        nn_imp = data.Y2[np.flatnonzero(kept)[knn(feats_tr[gone], feats_tr[kept], 1)[:, 0]]]
        nn_te = data.Y2[np.flatnonzero(kept)[knn(feats_te, feats_tr[kept], 1)[:, 0]]]
        _scores(res, NN, pct, truth_imp, nn_imp, None, data.Y2_test, nn_te, msll_mask)
        mu2, v2 = data.Y2[kept].mean(0), data.Y2[kept].var(0, ddof=1)
        _scores(res, MEAN, pct, truth_imp, np.tile(mu2, (gone.sum(), 1)), np.tile(v2, (gone.sum(), 1)),
                data.Y2_test, np.tile(mu2, (data.n_test, 1)), msll_mask)
        for seed in seeds:
            set_seed(seed)
            cfg = protocol_config("pose", args.quick, seed, **over)
            cfg.fixed = tuple(sorted(set(cfg.fixed) | {"W"}))
            t0 = time.perf_counter()
            fitted = fit_mcgpds([data.m1, m2], data.t, seq_ends=data.seq_ends, config=cfg, seed=seed,
                                progress=not args.no_progress)
            res.time(MCGPDS, "train", time.perf_counter() - t0)
            t1 = time.perf_counter()
            with torch.no_grad():
                hp = constant_hyperparams(fitted)
                post = view_posterior(fitted.views[1], fitted.mu[1], fitted.s_diag[1], hp["views"][1],
                                      fitted.data.mapping_kernel)
                g = torch.as_tensor(np.flatnonzero(gone))
                mz, vz = predict_moments(post, fitted.mu[1][g], fitted.s_diag[1][g], components="h")
            imp, imp_var = mz.numpy() * s2 + b2, vz.numpy() * s2 ** 2
            cp = calibrated_prediction(fitted, data.m1_test, data.t_test, 0, 1, seed=seed)
            te = cp.prediction.mean.numpy() * s2 + b2
            res.time(MCGPDS, "predict", time.perf_counter() - t1)
            _scores(res, MCGPDS, pct, truth_imp, imp, imp_var, data.Y2_test, te, msll_mask)
            print(f"[{pct}] seed {seed}: McGPDS impute RMSE {M.rmse(imp, truth_imp):.3f}, test RMSE "
                  f"{M.rmse(te, data.Y2_test):.3f} (train {res.timings[MCGPDS]['train']:.0f} s so far)", flush=True)
            if use_gpy and gpy_available():
                _score_gpy_peers(res, pct, data, m2, gone, s2, b2, truth_imp, msll_mask, args, seed)
            res.write(out)           # after every fit: a long run keeps what it has
    print(res.table(("removed",)))
    path = res.write(out)
    print(f"wrote {path}")
    return res


if __name__ == "__main__":
    main(parser().parse_args())
