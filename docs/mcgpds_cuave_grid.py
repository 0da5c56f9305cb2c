"""McGPDS, CUAVE: held-out training error against test error over a grid of configurations.

Evidence for the CUAVE results page (issue 20 item 4): can a McGPDS configuration chosen on
the TRAINING data beat GPy's MRD on test? For one seed, every fit configuration of the
``McGPDS`` object (``scale`` ∈ {view, column} × Q ∈ {5, 10} × mapping kernel ∈ {RBF-ARD,
linear-ARD}, every other option at its default) is fitted on the 194 training frames, and
every tandem predictor (Y-space NN features ∈ {std, raw} × k ∈ {1, 5, 20} × latent at the
shared-space or the source-space neighbours) is scored twice: by its held-out RMSE on the
training MFCC (5 contiguous chunks; :func:`tandem.inference.mcgpds.predictor.calibrated_prediction`)
and by its test RMSE / MSLL. The test scores are never used to choose anything here; the point
is how well the held-out number ranks the candidates.

Usage::

    OMP_NUM_THREADS=1 python docs/mcgpds_cuave_grid.py --seed 0 --out results
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
import warnings
from pathlib import Path

import torch

from tandem.inference import metrics as M
from tandem.inference.datasets.cuave import load_cuave
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds.predictor import calibrated_prediction
from tandem.models.kernels import RBFARD, LinearARD


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="results")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    d = load_cuave(args.data_dir)
    rows = []
    for scale, Q, kern in itertools.product(("view", "column"), (5, 10), ("rbf", "lin")):
        t0 = time.perf_counter()
        m = McGPDS(seed=args.seed, Q=Q, scale=scale, mapping_kernel=RBFARD() if kern == "rbf" else LinearARD())
        m.fit([d.Y1, d.Y2], times=d.t)
        fit_s = time.perf_counter() - t0
        zs = m.scalers_[0].transform(torch.as_tensor(d.Y1_test))
        st = m.scalers_[1]
        for feat, k, lat in itertools.product(("std", "raw"), (1, 5, 20), ("shared_nn", "y_nn")):
            cp = calibrated_prediction(m.fitted_, zs, torch.as_tensor(d.t_test), features=feat, k_neighbours=k,
                                       latent_for_prediction=lat, seed=args.seed)
            mean, var = st.inverse(cp.prediction.mean).numpy(), st.inverse_var(cp.prediction.var).numpy()
            r = dict(seed=args.seed, scale=scale, Q=Q, kernel=kern, features=feat, k=k, latent=lat,
                     fit_s=round(fit_s, 1), heldout_train_rmse=M.rmse(st.inverse(cp.holdout_mean).numpy(), d.Y2),
                     rmse=M.rmse(mean, d.Y2_test), msll=M.msll(mean, var, d.Y2_test))
            print(json.dumps(r), flush=True)
            rows.append(r)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mcgpds_cuave_grid.json").write_text(json.dumps({"experiment": "mcgpds_cuave_grid", "rows": rows}))
    return rows


if __name__ == "__main__":
    main()
