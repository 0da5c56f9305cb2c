"""McGPDS, human pose: the default predictor against the selection and the stack on the same fit (a check).

For each seed the ``McGPDS`` object with every option at its default is fitted on the training
walks (sequences as held-out folds) and predicts the test poses with
:func:`tandem.inference.mcgpds.predictor_choice.choose_predictor` — ``predict``'s default: the held-out
choice between the single-predictor selection (``method="selected"``) and the stack
(``method="stacked"``), both computed from one set of candidate runs. One JSON line per seed
and predictor (the default, the selection, the stack): mean joint error and MSLL on test (every
coordinate, unmasked), held-out MSE (model units: the selection's nested-cross-validated, the
stack's cross-validated — the two scores the choice compares), which option the default chose,
and the stack's weights.

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
from tandem.inference.mcgpds.predictor_choice import choose_predictor


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
            t0 = time.perf_counter()
            ch = choose_predictor(est.fitted_, zs, tt, seed=seed)
            predict_s = time.perf_counter() - t0
            rows = {f"default (chose {ch.chosen})": (ch.prediction, ch.scores[ch.chosen], {}),
                    f"selected ({ch.selection.label})": (ch.selection.result.prediction, ch.scores["selected"], {}),
                    "stacked": (ch.stack.prediction, ch.scores["stacked"], ch.stack.weights)}
            for name, (pred, heldout, weights) in rows.items():
                mean, var = st.inverse(pred.mean).numpy(), st.inverse_var(pred.var).numpy()
                r = dict(seed=seed, method=name, chosen=ch.chosen, mean_joint_error=M.mean_joint_error(mean, d.Y2_test),
                         msll=M.msll(mean, var, d.Y2_test), heldout_mse=heldout,
                         nested_selection_per_fold=ch.fold_labels if name.startswith("selected") else None,
                         weights={k: round(v, 3) for k, v in weights.items() if v > 0.005},
                         fit_s=fit_s, predict_s=predict_s)
                print(json.dumps(r), file=out, flush=True)
                print(r, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
