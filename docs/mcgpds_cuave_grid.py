"""McGPDS, CUAVE: held-out training error against test error over a grid of configurations.

Evidence for the CUAVE results page (issue 20 item 4): can a McGPDS configuration chosen on
the TRAINING data beat GPy's MRD on test? For one seed, every fit configuration of the
``McGPDS`` object (``scale`` ∈ {view, column} × Q ∈ {5, 10} × mapping kernel ∈ {RBF-ARD,
linear-ARD}, every other option at its default) is fitted on the 194 training frames, and
every tandem predictor (Y-space NN features ∈ {std, raw} × k ∈ {1, 5, 20} × latent at the
shared-space or the source-space neighbours) is scored twice: by its held-out RMSE on the
training MFCC (5 contiguous chunks; :func:`tandem.inference.mcgpds.predictor.calibrated_prediction`)
and by its test RMSE / MSLL. The test scores are never used to choose anything here; the point
is how well the held-out number ranks the candidates. Per fit, the held-out stacked predictor
(:func:`tandem.inference.mcgpds.predictor.stacked_prediction` over the fit's 12 predictors and the
training mean) is scored the same way.

The summary: the candidate with the lowest held-out RMSE and its test scores, the best
candidate on test (an oracle, not a choice), and the Pearson / Spearman correlation of held-out
and test RMSE over the candidates.

Usage::

    OMP_NUM_THREADS=1 python docs/mcgpds_cuave_grid.py --seed 0 --fit-cache results/cuave_grid_fits --out results
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from tandem.inference import metrics as M
from tandem.inference.checkpoints import content_hash
from tandem.inference.datasets.cuave import load_cuave
from tandem.inference.experiments.results import Results
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds.predictor import calibrated_prediction, stacked_prediction
from tandem.models.kernels import RBFARD, LinearARD

EXPERIMENT = "mcgpds_cuave_grid"
KERNELS = {"RBF-ARD": RBFARD, "linear-ARD": LinearARD}
#: the McGPDS fit configurations: (scale, Q, mapping kernel label)
FITS = tuple(itertools.product(("view", "column"), (5, 10), tuple(KERNELS)))
#: the tandem predictors: (NN features, k, latent_for_prediction)
PREDICTORS = tuple(itertools.product(("std", "raw"), (1, 5, 20), ("shared_nn", "y_nn")))
STACKED = "held-out stacked (12 predictors + training mean)"


def fit_label(scale, Q, kern) -> str:
    return f"{scale} scale, Q = {Q}, {kern}"


def predictor_label(feat, k, lat) -> str:
    return f"{feat}-Y, {k}-NN, {'shared' if lat == 'shared_nn' else 'source'} space"


def fitted_model(d, seed: int, scale: str, Q: int, kern: str, cache_dir):
    """The fitted ``McGPDS`` of one configuration, and its fit seconds (read from ``cache_dir`` if there)."""
    path = None
    if cache_dir is not None:
        key = content_hash("mcgpds_cuave_grid/1", d.Y1, d.Y2, d.t, seed, scale, Q, kern)
        path = Path(cache_dir) / f"cuave_grid_seed{seed}_{scale}_Q{Q}_{kern}_{key}.tandem"
        meta = path.with_suffix(".json")
        if path.exists() and meta.exists():
            return McGPDS.load(path), json.loads(meta.read_text())["fit_s"], True
    t0 = time.perf_counter()
    m = McGPDS(seed=seed, Q=Q, scale=scale, mapping_kernel=KERNELS[kern]())
    m.fit([d.Y1, d.Y2], times=d.t)
    fit_s = time.perf_counter() - t0
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        m.save(path)
        path.with_suffix(".json").write_text(json.dumps({"fit_s": fit_s}))
    return m, fit_s, False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--fit-cache", default=None, help="folder of saved fits (read if there, else written)")
    ap.add_argument("--out", default="results")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    d = load_cuave(args.data_dir)
    res = Results(f"{EXPERIMENT}_seed{args.seed}", [args.seed],
                  dict(fits=[fit_label(*f) for f in FITS], held_out="5 contiguous chunks", units="raw MFCC"))
    rows = []
    t_test = torch.as_tensor(d.t_test, dtype=torch.float64)
    for scale, Q, kern in FITS:
        m, fit_s, loaded = fitted_model(d, args.seed, scale, Q, kern, args.fit_cache)
        fit = fit_label(scale, Q, kern)
        res.time(fit, "train", fit_s)
        zs = m.scalers_[0].transform(torch.as_tensor(d.Y1_test, dtype=torch.float64))
        st = m.scalers_[1]
        members = {}
        for feat, k, lat in PREDICTORS:
            cp = calibrated_prediction(m.fitted_, zs, t_test, features=feat, k_neighbours=k,
                                       latent_for_prediction=lat, seed=args.seed)
            members[predictor_label(feat, k, lat)] = cp
        sp = stacked_prediction(m.fitted_, members, include_mean=True)
        for name, cp in {**members, STACKED: sp}.items():
            mean, var = st.inverse(cp.prediction.mean).numpy(), st.inverse_var(cp.prediction.var).numpy()
            r = dict(method=name, fit=fit, heldout_train_rmse=M.rmse(st.inverse(cp.holdout_mean).numpy(), d.Y2),
                     rmse=M.rmse(mean, d.Y2_test), msll=M.msll(mean, var, d.Y2_test), stacked=name == STACKED)
            print(json.dumps(dict(r, fit_s=round(fit_s, 1), loaded=loaded)), flush=True)
            rows.append(r)
            for met in ("heldout_train_rmse", "rmse", "msll"):
                res.add(name, met, r[met], fit=fit)
    grid = [r for r in rows if not r["stacked"]]
    h = np.array([r["heldout_train_rmse"] for r in grid])
    e = np.array([r["rmse"] for r in grid])
    chosen = grid[int(np.argmin(h))]
    stacked = [r for r in rows if r["stacked"]]
    res.config["summary"] = dict(
        n_candidates=len(grid), pearson_heldout_vs_test_rmse=float(stats.pearsonr(h, e)[0]),
        spearman_heldout_vs_test_rmse=float(stats.spearmanr(h, e)[0]), chosen_by_heldout=chosen,
        best_on_test_oracle=grid[int(np.argmin(e))],
        stacked_chosen_by_heldout=min(stacked, key=lambda r: r["heldout_train_rmse"]),
        stacked_best_on_test_oracle=min(stacked, key=lambda r: r["rmse"]))
    summ = res.config["summary"]
    for key, head in (("chosen_by_heldout", "chosen by held-out RMSE"),
                      ("best_on_test_oracle", "best on test (oracle)"),
                      ("stacked_chosen_by_heldout", "stacked, chosen by held-out RMSE"),
                      ("stacked_best_on_test_oracle", "stacked, best on test (oracle)")):
        r = summ[key]
        for met in ("heldout_train_rmse", "rmse", "msll"):
            res.add(head, met, r[met], fit="summary", predictor=r["method"], fit_of=r["fit"])
    for key in ("pearson_heldout_vs_test_rmse", "spearman_heldout_vs_test_rmse"):
        res.add(key.split("_")[0].capitalize() + " correlation, held-out vs test RMSE (96 candidates)", "value",
                summ[key], fit="summary")
    print(json.dumps(summ, indent=1))
    path = res.write(args.out)
    print(f"wrote {path}")
    return res


if __name__ == "__main__":
    main()
