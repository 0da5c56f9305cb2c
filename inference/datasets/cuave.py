"""CUAVE video → MFCC data, prepared as in the McGPDS protocol (§2).

Reads ``<data_dir>/cuave/AudioVideoAlignedData1.mat``. Everything is cast to float64 first
(the file stores uint8 video and a uint8 ``seqTr``; MATLAB integer arithmetic on it would
round the time stamps, protocol §2.3). Training = the 194 frames as one sequence,
t = 0, 0.05, …, 9.65; test = the 51 frames in file order, t* = 0 … 2.5.
Scaling (§2.4): per-dimension standardisation of both views, bias = column means,
scale = column std (ddof = 1) with 0 → 1.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tandem.inference.datasets import data_dir as resolve_data_dir
from tandem.inference.datasets import read_mat
from tandem.inference.datasets.human_pose import DATA_HINT, DT, TwoViewData
from tandem.inference.validation import check_real_range, require_file

__all__ = ["load_cuave", "CUAVE_FILE", "per_dim_scale"]

CUAVE_FILE = Path("cuave") / "AudioVideoAlignedData1.mat"


def per_dim_scale(Y) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension standardisation: column means and column std (ddof = 1), 0 → 1.

    Parameters
    ----------
    Y : numpy.ndarray
        (N, D) data.

    Returns
    -------
    bias, scale : numpy.ndarray
        (D,) each.
    """
    Y = np.asarray(Y, dtype=np.float64)
    bias = Y.mean(axis=0)
    scale = Y.std(axis=0, ddof=1) if Y.shape[0] > 1 else np.ones(Y.shape[1])
    scale = np.where(scale == 0, 1.0, scale)
    return bias, scale


def load_cuave(data_dir=None, dt: float = DT) -> TwoViewData:
    """Load the McGPDS CUAVE split. View 1: 3750-d video, view 2: 13-d MFCC.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).
    dt : float, default 0.05
        Time step between frames, > 0.

    Returns
    -------
    TwoViewData
        The two views, raw and scaled, with their times.

    Raises
    ------
    FileNotFoundError
        Naming ``cuave/AudioVideoAlignedData1.mat`` when absent.
    ValueError
        Naming ``dt`` when it is not a finite real > 0 (before the file is read).
    """
    check_real_range(dt, "dt", 0.0, low_open=True)
    data_dir = resolve_data_dir(data_dir)
    path = require_file(data_dir / CUAVE_FILE, "CUAVE data (McGPDS)", DATA_HINT)
    d = read_mat(path, ["videoTr", "mfccTr", "videoTs", "mfccTs", "seqTr", "seqTs"], "CUAVE split (McGPDS)")
    V, A = np.asarray(d["videoTr"], dtype=np.float64), np.asarray(d["mfccTr"], dtype=np.float64)
    Vt, At = np.asarray(d["videoTs"], dtype=np.float64), np.asarray(d["mfccTs"], dtype=np.float64)
    n = int(np.asarray(d["seqTr"], dtype=np.float64).ravel()[0])
    nt = int(np.asarray(d["seqTs"], dtype=np.float64).ravel()[0])
    if n != V.shape[0] or nt != Vt.shape[0]:
        raise ValueError(f"{path}: seqTr/seqTs ({n}, {nt}) disagree with the frame counts "
                         f"({V.shape[0]}, {Vt.shape[0]})")
    b1, s1 = per_dim_scale(V)
    b2, s2 = per_dim_scale(A)
    return TwoViewData(
        name="cuave", Y1=V, Y2=A, Y1_test=Vt, Y2_test=At,
        bias1=b1, bias2=b2, scale1=s1, scale2=s2,
        t=np.arange(n, dtype=np.float64) * dt, seq_ends=[n],
        t_test=np.arange(nt, dtype=np.float64) * dt, test_seq_ends=[nt],
        view_names=("video", "mfcc"),
        info={"file": str(path), "dt": dt, "time_range_for_init": float((n - 1) * dt),
              # §2.4: the authors' PPCA init is 'separately' on the centred views: 7 + 3 dims.
              "init_separately_dims": [7, 3]})
