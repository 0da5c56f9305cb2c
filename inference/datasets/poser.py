"""The Poser split of Agarwal & Triggs (1927 train / 418 test) used by the twin-GP papers.

Source: ``human_pose/ankurDataPoseSilhouette.mat`` — ``Y`` (1927, 100) silhouette
descriptors (the twin GP's *inputs*), ``Z`` (1927, 63) poses = 21 joints × (x, y, z) (the
*outputs*), ``Y_test``/``Z_test`` (418, ·). The papers predicted 54 joint angles (degrees);
this copy has 3-D joint positions, so the metric is the mean per-joint position error
(:func:`tandem.inference.metrics.mean_joint_error`).
"""
from __future__ import annotations

import numpy as np

from tandem.inference.datasets import data_dir as resolve_data_dir
from tandem.inference.datasets import read_mat
from tandem.inference.validation import require_file

__all__ = ["load_poser", "HINT"]

HINT = "Get it from github.com/mcgpds/mcgpds (code/matlab/dataset/); see ../shared/data/README.md (human_pose/)"


def load_poser(data_dir=None) -> dict:
    """Load the Poser silhouette-to-pose data of the twin-GP experiments.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).

    Returns
    -------
    dict
        ``X_train`` (1927, 100), ``Y_train`` (1927, 63), ``X_test`` (418, 100), ``Y_test`` (418, 63).
    """
    p = require_file(resolve_data_dir(data_dir) / "human_pose" / "ankurDataPoseSilhouette.mat", "Poser data", HINT)
    m = read_mat(p, ["Y", "Z", "Y_test", "Z_test"], "Poser split (Agarwal & Triggs)")
    out = {"X_train": m["Y"], "Y_train": m["Z"], "X_test": m["Y_test"], "Y_test": m["Z_test"]}
    out = {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
    if out["X_train"].shape != (1927, 100) or out["Y_train"].shape != (1927, 63):
        raise ValueError(f"{p}: unexpected shapes {out['X_train'].shape}, {out['Y_train'].shape}")
    return out
