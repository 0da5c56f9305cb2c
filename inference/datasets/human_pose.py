"""Agarwal & Triggs silhouette → pose data, prepared as in the McGPDS protocol (§1).

Reads ``<data_dir>/human_pose/humanPoseDataset.mat`` (see ``../shared/data/README.md``) and
builds exactly the authors' training/test split:

* training: every sequence subsampled by 3 (1-based rows 1, 4, 7, …), sequences
  [1 3 4 5 6 7 8] in that order → 566 frames, sequence ends [34 57 79 240 433 513 566];
* test: all 158 frames of ``Y_test``/``Z_test`` (not subsampled);
* time stamps: restart at 0 in every training sequence with dt = 0.05; test t* = 0 … 7.85
  (protocol §1.4 — a test step spans 1 raw frame, a training step 3, as in the code);
* scaling (§1.5): bias = training column means, ONE scalar scale per view
  s_k = sqrt(var(all N·D training entries)) with ddof = 1 (silhouette 2.554206, pose
  20.648137); model data m_k = (Y_k − bias_k)/s_k; predictive variances map back × s_k².

The container :class:`TwoViewData` is shared with the CUAVE loader.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tandem.inference.datasets import data_dir as resolve_data_dir
from tandem.inference.datasets import read_mat
from tandem.inference.validation import check_real_range, require_file

__all__ = ["TwoViewData", "load_human_pose", "HUMAN_POSE_FILE", "TRAIN_SEQUENCES", "SUBSAMPLE",
           "DT", "constant_columns", "DATA_HINT"]

HUMAN_POSE_FILE = Path("human_pose") / "humanPoseDataset.mat"
#: 1-based sequence numbers kept for training (sequence 2, "drunk", is dropped).
TRAIN_SEQUENCES = (1, 3, 4, 5, 6, 7, 8)
SUBSAMPLE = 3
DT = 0.05
DATA_HINT = ("See ../shared/data/README.md (data folder of the project) for where the real data "
             "sets come from; pass --data-dir to point at another folder.")


@dataclass
class TwoViewData:
    """Two time-aligned views, raw and scaled, with the protocol's time stamps.

    The scaled views ``m1``, ``m2``, ``m1_test``, ``m2_test`` are m = (Y − bias)/scale.

    Attributes
    ----------
    name : str
        The data set.
    Y1, Y2 : numpy.ndarray
        (N, D1), (N, D2) raw training views.
    Y1_test, Y2_test : numpy.ndarray
        (N*, D1), (N*, D2) raw test views.
    bias1, bias2 : numpy.ndarray
        (D_k,) per-view offsets.
    scale1, scale2 : numpy.ndarray
        A scalar (pose) or (D_k,) (CUAVE) per view.
    t : numpy.ndarray
        (N,) training times (restarting per sequence).
    seq_ends : list of int
        1-based cumulative sequence ends (MATLAB ``seq``).
    t_test : numpy.ndarray
        (N*,) test times.
    test_seq_ends : list of int
        Likewise for the test block.
    view_names : tuple of str
        Names of the two views.
    info : dict
        Provenance.
    """
    name: str
    Y1: np.ndarray
    Y2: np.ndarray
    Y1_test: np.ndarray
    Y2_test: np.ndarray
    bias1: np.ndarray
    bias2: np.ndarray
    scale1: np.ndarray
    scale2: np.ndarray
    t: np.ndarray
    seq_ends: list
    t_test: np.ndarray
    test_seq_ends: list
    view_names: tuple = ("view 1", "view 2")
    info: dict = field(default_factory=dict)

    @property
    def m1(self):
        return (self.Y1 - self.bias1) / self.scale1

    @property
    def m2(self):
        return (self.Y2 - self.bias2) / self.scale2

    @property
    def m1_test(self):
        return (self.Y1_test - self.bias1) / self.scale1

    @property
    def m2_test(self):
        return (self.Y2_test - self.bias2) / self.scale2

    @property
    def views(self):
        """Scaled training views [m1, m2] (what the model is fitted to)."""
        return [self.m1, self.m2]

    @property
    def n_train(self) -> int:
        return int(self.Y1.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.Y1_test.shape[0])

    def unscale_mean(self, mean_scaled, view: int = 2) -> np.ndarray:
        """Map a scaled prediction of a view back to the original units, m·s + bias.

        Parameters
        ----------
        mean_scaled : numpy.ndarray
            (n, D_k) scaled values.
        view : {1, 2}, default 2
            The view.

        Returns
        -------
        numpy.ndarray
            (n, D_k) in the original units.
        """
        b, s = (self.bias1, self.scale1) if view == 1 else (self.bias2, self.scale2)
        return np.asarray(mean_scaled, dtype=np.float64) * s + b

    def unscale_var(self, var_scaled, view: int = 2) -> np.ndarray:
        """Map a scaled predictive variance of a view back to the original units, v·s².

        Parameters
        ----------
        var_scaled : numpy.ndarray
            (n, D_k) scaled variances.
        view : {1, 2}, default 2
            The view.

        Returns
        -------
        numpy.ndarray
            (n, D_k) in the original units.
        """
        s = self.scale1 if view == 1 else self.scale2
        return np.asarray(var_scaled, dtype=np.float64) * np.asarray(s) ** 2


def seq_times(seq_ends, dt: float = DT) -> np.ndarray:
    """Time stamps restarting at 0 in every sequence: t = 0, dt, …, (n_s − 1)·dt per block.

    ``dt`` must be a finite real > 0 (a ``ValueError`` names it): NaN or a negative step would give
    NaN or decreasing time stamps.
    """
    check_real_range(dt, "dt", 0.0, low_open=True)
    ends = np.asarray(seq_ends, dtype=np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    return np.concatenate([np.arange(e - s) * dt for s, e in zip(starts, ends)]).astype(np.float64)


def constant_columns(Y, tol: float = 0.0) -> np.ndarray:
    """Mask of the columns whose training values are all equal (std ≤ tol).

    In the pose data the 6 coordinates of joints 1–2 are constant; a per-coordinate Gaussian
    predictive has zero variance there, so MSLL is scored on ``~constant_columns``.

    Parameters
    ----------
    Y : numpy.ndarray
        (N, D) training values.
    tol : float, default 0.0
        Largest std counted as constant, ≥ 0.

    Returns
    -------
    numpy.ndarray
        (D,) bool.

    Raises
    ------
    ValueError
        Naming ``tol`` when it is not a finite real ≥ 0 (NaN or a negative ``tol`` would find
        no column constant, ``inf`` every one).
    """
    check_real_range(tol, "tol", 0.0)
    Y = np.asarray(Y, dtype=np.float64)
    return Y.std(axis=0) <= tol


def _load_mat(path):
    return read_mat(path, ["Y", "Z", "Y_test", "Z_test"], "human-pose data set (McGPDS)")


def load_human_pose(data_dir=None, subsample: int = SUBSAMPLE,
                    sequences=TRAIN_SEQUENCES, dt: float = DT) -> TwoViewData:
    """Load the McGPDS human-pose split (protocol §1.2–1.5).

    View 1: 100-d HoG silhouettes, view 2: 63-d poses (21 joints × xyz, interleaved).

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).
    subsample : int, default 3
        Keep every ``subsample``-th frame.
    sequences : tuple of int, default (1, 3, 4, 5, 6, 7, 8)
        The training sequences.
    dt : float, default 0.05
        Time step between kept frames.

    Returns
    -------
    TwoViewData
        The two views, raw and scaled, with their times.

    Raises
    ------
    FileNotFoundError
        Naming ``human_pose/humanPoseDataset.mat`` when absent.
    """
    data_dir = resolve_data_dir(data_dir)
    path = require_file(data_dir / HUMAN_POSE_FILE, "human pose data (McGPDS)", DATA_HINT)
    d = _load_mat(path)
    Ys, Zs = d["Y"].ravel(), d["Z"].ravel()
    if len(Ys) != 8 or len(Zs) != 8:
        raise ValueError(f"{path}: expected 8 training sequences in Y and Z, got {len(Ys)} and {len(Zs)}")
    y1, y2, ends = [], [], []
    for s in sequences:
        a = np.asarray(Ys[s - 1], dtype=np.float64)[::subsample]   # 1-based rows 1, 4, 7, …
        b = np.asarray(Zs[s - 1], dtype=np.float64)[::subsample]
        y1.append(a)
        y2.append(b)
        ends.append((ends[-1] if ends else 0) + a.shape[0])
    Y1, Y2 = np.concatenate(y1), np.concatenate(y2)
    Y1t = np.asarray(d["Y_test"], dtype=np.float64)
    Y2t = np.asarray(d["Z_test"], dtype=np.float64)
    # Protocol §1.5: column-mean bias, one scalar scale per view (ddof = 1, about the global mean).
    bias1, bias2 = Y1.mean(axis=0), Y2.mean(axis=0)
    scale1 = np.float64(np.std(Y1.ravel(), ddof=1))
    scale2 = np.float64(np.std(Y2.ravel(), ddof=1))
    return TwoViewData(
        name="human_pose", Y1=Y1, Y2=Y2, Y1_test=Y1t, Y2_test=Y2t,
        bias1=bias1, bias2=bias2, scale1=scale1, scale2=scale2,
        t=seq_times(ends, dt), seq_ends=ends,
        t_test=np.arange(Y1t.shape[0], dtype=np.float64) * dt, test_seq_ends=[int(Y1t.shape[0])],
        view_names=("silhouette", "pose"),
        info={"file": str(path), "subsample": subsample, "sequences": list(sequences), "dt": dt,
              # §1.4: initial temporal inverse width uses the LAST sequence's time range.
              "time_range_for_init": (float((ends[-1] - ends[-2] - 1) * dt) if len(ends) > 1
                                      else float((ends[0] - 1) * dt)),
              "constant_pose_columns": np.flatnonzero(constant_columns(Y2)).tolist()})
