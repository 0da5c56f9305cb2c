"""McGPDS, human pose: the stacked tandem predictor against the default on the same fit (a check).

For each seed the ``McGPDS`` object with every option at its default is fitted on the training
walks (sequences as held-out folds) and predicts the test poses with the default predictor
(:func:`tandem.inference.mcgpds.predictor.select_predictor`) and the stacked predictor
(:func:`tandem.inference.mcgpds.predictor.stacked_predictor`). One JSON line per seed and
predictor: mean joint error and MSLL on test (every coordinate, unmasked), held-out MSE (model
units, cross-validated for the stack) and the stack's weights.

Usage::

    OMP_NUM_THREADS=1 python docs/mcgpds_pose_stack_check.py results/pose_stack.jsonl 0,1
"""

from __future__ import annotations

import json
import sys
import time
import warnings

import torch

from tandem.inference import metrics as M
from tandem.inference.datasets.human_pose import load_human_pose
from tandem.inference.experiments.mcgpds_protocol import sequence_ids_of
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds.predictor import select_predictor, stacked_predictor


def main(out_path: str, seeds: str) -> None:
    warnings.simplefilter("ignore", DeprecationWarning)
    d = load_human_pose()          # TANDEM_DATA or the default data folder
    with open(out_path, "a") as out:
        for seed in [int(s) for s in seeds.split(",")]:
            t0 = time.perf_counter()
            est = McGPDS(seed=seed).fit([d.Y1, d.Y2], times=d.t, sequence_ids=sequence_ids_of(d.seq_ends))
            fit_s = time.perf_counter() - t0
            zs = est.scalers_[0].transform(torch.as_tensor(d.Y1_test, dtype=torch.float64))
            st = est.scalers_[1]
            tt = torch.as_tensor(d.t_test, dtype=torch.float64)
            sel = select_predictor(est.fitted_, zs, tt, seed=seed)
            sp = stacked_predictor(est.fitted_, zs, tt, seed=seed)
            for name, cp in {f"default ({sel.label})": sel.result, "stacked": sp}.items():
                mean, var = st.inverse(cp.prediction.mean).numpy(), st.inverse_var(cp.prediction.var).numpy()
                r = dict(seed=seed, method=name, mean_joint_error=M.mean_joint_error(mean, d.Y2_test),
                         msll=M.msll(mean, var, d.Y2_test),
                         heldout_mse=float(((est.fitted_.views[1] - cp.holdout_mean) ** 2).mean()),
                         weights={k: round(v, 3) for k, v in getattr(cp, "weights", {}).items() if v > 0.005},
                         fit_s=fit_s)
                print(json.dumps(r), file=out, flush=True)
                print(r, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
