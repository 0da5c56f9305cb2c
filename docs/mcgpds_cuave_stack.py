"""McGPDS, CUAVE: the stacked tandem predictor against the single selection, per seed, beside GPy MRD's saved fits.

For every seed the ``McGPDS`` object with every option at its default is fitted on the 194
training frames (the same fit as the default row of ``examples/mcgpds_cuave.py``) and predicts the
test MFCC with: the single selection (:func:`tandem.inference.mcgpds.predictor.select_predictor`
over its three candidates; ``predict``'s default when this script was written, ``method="selected"``
now, and still labelled "tandem default" in its rows), each of those candidates, the stacked predictor
(:func:`tandem.inference.mcgpds.predictor.stacked_predictor`: the 12 predictors of
:data:`~tandem.inference.mcgpds.predictor.TANDEM_STACK_CANDIDATES` and the training mean, convex
weights fitted on held-out training chunks) and the stack of the default's three candidates and
the training mean. Every choice is made on the training frames. Scored in raw MFCC units: test
RMSE, MSLL and the cross-validated held-out training RMSE.

GPy's MRD is not refitted here: with ``--mrd-cache`` its predictions are read from the fit cache
of an ``examples/mcgpds_cuave.py --gpy --fit-cache DIR`` run on the same data and seeds (only the
files whose content fingerprint matches; a missing one is reported, never fitted).

Usage::

    OMP_NUM_THREADS=1 python docs/mcgpds_cuave_stack.py --seeds 5 --mrd-cache results/cuave_fitcache --out results
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from tandem.inference import metrics as M
from tandem.inference.checkpoints import content_hash
from tandem.inference.datasets.cuave import load_cuave
from tandem.inference.experiments.mcgpds_protocol import mrd_row, sequence_ids_of
from tandem.inference.experiments.results import Results
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds.baselines import training_mean_predictor
from tandem.inference.mcgpds.predictor import select_predictor, stacked_prediction, stacked_predictor

EXPERIMENT = "mcgpds_cuave_stack"
DEFAULT = "McGPDS (tandem default)"
STACKED = "McGPDS (tandem stacked)"
STACKED3 = "McGPDS (stack of the default's 3 candidates + training mean)"


def saved_mrd(d, q: int, seed: int, cache_dir):
    """GPy MRD's (mean, var) in raw units from ``cache_dir``, or None (the key of ``mrd_fit_job``)."""
    key = content_hash("gpy_mrd/1", np.asarray(d.m1), np.asarray(d.m2), np.asarray(d.m1_test), int(q), int(seed),
                       False, length=64)
    path = Path(cache_dir) / f"gpy_mrd_Q{q}_seed{seed}_{key[:16]}.json"
    if not path.exists():
        return None
    z = json.loads(path.read_text())
    if z.get("fingerprint") != key:
        return None
    return d.unscale_mean(np.asarray(z["mean"])), d.unscale_var(np.asarray(z["var"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--mrd-cache", default=None, help="fit cache of an examples/mcgpds_cuave.py --gpy run (read only)")
    ap.add_argument("--out", default="results")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    d = load_cuave(args.data_dir)
    seeds = list(range(args.seeds))
    res = Results(EXPERIMENT, seeds, dict(held_out="5 contiguous training chunks", units="raw MFCC",
                                          mrd_cache=args.mrd_cache))
    acc: dict = {}
    tt = torch.as_tensor(d.t_test, dtype=torch.float64)
    mrd_missing = []
    for s in seeds:
        t0 = time.perf_counter()
        est = McGPDS(seed=s).fit([d.Y1, d.Y2], times=d.t, sequence_ids=sequence_ids_of(d.seq_ends))
        res.time(DEFAULT, "train", time.perf_counter() - t0)
        zs = est.scalers_[0].transform(torch.as_tensor(d.Y1_test, dtype=torch.float64))
        st = est.scalers_[1]
        sel = select_predictor(est.fitted_, zs, tt, seed=s)
        t1 = time.perf_counter()
        sp = stacked_predictor(est.fitted_, zs, tt, seed=s)
        res.time(STACKED, "predict", time.perf_counter() - t1)
        s3 = stacked_prediction(est.fitted_, sel.results, include_mean=True)
        preds = {DEFAULT: sel.result, **{f"McGPDS (tandem default candidate: {k})": v for k, v in sel.results.items()},
                 STACKED: sp, STACKED3: s3}
        for name, cp in preds.items():
            mean, var = st.inverse(cp.prediction.mean).numpy(), st.inverse_var(cp.prediction.var).numpy()
            acc.setdefault((name, "rmse"), []).append(M.rmse(mean, d.Y2_test))
            acc.setdefault((name, "msll"), []).append(M.msll(mean, var, d.Y2_test))
            acc.setdefault((name, "heldout_train_rmse"), []).append(M.rmse(st.inverse(cp.holdout_mean).numpy(), d.Y2))
        res.config.setdefault("stacked weights", []).append(
            {"seed": s, "weights": {k: round(v, 4) for k, v in sp.weights.items() if v > 5e-5}})
        res.config.setdefault("default selection", []).append({"seed": s, "selected": sel.label})
        m_tr, v_tr, _ = training_mean_predictor(d.Y2, len(d.Y2_test))
        acc.setdefault(("training mean", "rmse"), []).append(M.rmse(m_tr, d.Y2_test))
        acc.setdefault(("training mean", "msll"), []).append(M.msll(m_tr, v_tr, d.Y2_test))
        print(f"seed {s}: " + ", ".join(f"{n} {v[-1]:.4f}" for (n, m), v in acc.items() if m == "rmse"), flush=True)
    for q in (5, 10):         # read last: a protocol run that is still writing its cache may have caught up
        for s in seeds:
            got = saved_mrd(d, q, s, args.mrd_cache) if args.mrd_cache else None
            if got is None:
                mrd_missing.append(f"Q={q} seed {s}")
                continue
            acc.setdefault((mrd_row(q), "rmse"), []).append(M.rmse(got[0], d.Y2_test))
            acc.setdefault((mrd_row(q), "msll"), []).append(M.msll(got[0], got[1], d.Y2_test))
    for (name, met), vals in acc.items():
        # a peer with fits missing from the cache is over fewer seeds: say so in its name
        n = len(vals)
        res.add(name if n == len(seeds) else f"{name}, {n} of {len(seeds)} seeds", met, vals)
    res.config["GPy MRD fits not in --mrd-cache (not fitted here)"] = mrd_missing
    path = res.write(args.out)
    print(res.table())
    print(f"wrote {path}")
    return res


if __name__ == "__main__":
    main()
