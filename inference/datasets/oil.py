"""Netlab's three-phase oil-flow data (Bishop & James 1993), for the McGPDS paper's Fig. 9.

Reads ``<data_dir>/oil/oilTrn.dat`` and ``oilTst.dat`` in Netlab's text format: a header
``nin 12 / nout K / ndata 500`` followed by one row per point (12 inputs, then K outputs).
The two files are concatenated into 1000 points.

**What the files actually hold.** The data README describes the outputs as the 3-class
one-hot flow-regime labels. The stored files say ``nout 2`` and their two outputs are the
*phase fractions* (oil, water; gas = 1 − oil − water) in [0, 1] — Netlab's regression
version of the data. The flow-regime labels (Lawrence's ``DataTrnLbls.txt``) are not in
``../shared/data``. So the loader derives a documented **proxy class**: the dominant
phase, argmax(oil, water, gas) ∈ {0, 1, 2}, and returns its one-hot coding as the label
view. When a file with ``nout 3`` (true one-hot labels) is supplied instead, its labels
are used as they are (``label_kind = "flow regime"``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tandem.inference.datasets import data_dir as resolve_data_dir
from tandem.inference.datasets.human_pose import DATA_HINT
from tandem.inference.validation import require_file

__all__ = ["OilData", "load_oil", "read_netlab", "OIL_FILES"]

OIL_FILES = (Path("oil") / "oilTrn.dat", Path("oil") / "oilTst.dat")


@dataclass
class OilData:
    """The oil-flow data, concatenated over the two files.

    Attributes
    ----------
    X : numpy.ndarray
        (N, 12) inputs.
    outputs : numpy.ndarray
        (N, K) the file's outputs.
    labels : numpy.ndarray
        (N,) ints in {0, 1, 2}.
    onehot : numpy.ndarray
        (N, 3) the label view.
    label_kind : str
        "flow regime" (one-hot file) or "dominant phase (proxy)" (fraction file).
    files : tuple of str
        The files read.
    """
    X: np.ndarray
    outputs: np.ndarray
    labels: np.ndarray
    onehot: np.ndarray
    label_kind: str
    files: tuple

    @property
    def n(self) -> int:
        return int(self.X.shape[0])


def read_netlab(path) -> tuple[np.ndarray, np.ndarray]:
    """Parse one Netlab data file.

    Parameters
    ----------
    path : str or os.PathLike
        The file: a header ``nin/nout/ndata <int>`` then ndata rows of nin + nout numbers.

    Returns
    -------
    tuple of numpy.ndarray
        ``(inputs, outputs)``: (ndata, nin) and (ndata, nout).

    Raises
    ------
    ValueError
        If the file is not text, the header is malformed, the body has the wrong shape or
        non-numeric, NaN or inf entries.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a text file ({e}); expected a Netlab data file") from None
    head = {}
    for ln in lines[:3]:
        parts = ln.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise ValueError(f"{path}: expected a Netlab header 'nin/nout/ndata <int>', got {ln!r}")
        head[parts[0]] = int(parts[1])
    if set(head) != {"nin", "nout", "ndata"}:
        raise ValueError(f"{path}: header must name nin, nout, ndata; got {sorted(head)}")
    try:
        a = np.loadtxt(lines[3:], dtype=np.float64, ndmin=2)
    except ValueError as e:
        raise ValueError(f"{path}: expected {head['ndata']} rows of {head['nin'] + head['nout']} numbers "
                         f"after the header ({e})") from None
    if a.shape != (head["ndata"], head["nin"] + head["nout"]):
        raise ValueError(f"{path}: expected {head['ndata']} rows × {head['nin'] + head['nout']} "
                         f"columns, got {a.shape}")
    bad = ~np.isfinite(a)
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{path}: contains {int(bad.sum())} NaN or inf values (first at data row {r}, "
                         f"column {c}); expected finite inputs and outputs")
    return a[:, :head["nin"]], a[:, head["nin"]:]


def load_oil(data_dir=None) -> OilData:
    """Load and concatenate oilTrn.dat + oilTst.dat (1000 points).

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).

    Returns
    -------
    OilData
        Inputs, outputs and the label view (see the module docstring for the proxy class).

    Raises
    ------
    FileNotFoundError
        If a file is missing.
    ValueError
        If a file is malformed or has neither 2 nor 3 outputs.
    """
    data_dir = resolve_data_dir(data_dir)
    files = tuple(require_file(data_dir / f, "oil-flow data (McGPDS Fig. 9)", DATA_HINT) for f in OIL_FILES)
    parts = [read_netlab(f) for f in files]
    X = np.concatenate([p[0] for p in parts])
    out = np.concatenate([p[1] for p in parts])
    if out.shape[1] == 3 and set(np.unique(out)) <= {0.0, 1.0}:
        labels, kind = out.argmax(axis=1), "flow regime"
    elif out.shape[1] == 2:
        frac = np.column_stack([out, 1.0 - out.sum(axis=1)])
        labels, kind = frac.argmax(axis=1), "dominant phase (proxy)"
    else:
        raise ValueError(f"oil data: expected 2 (phase fractions) or 3 (one-hot) outputs, got {out.shape[1]}")
    onehot = np.eye(3)[labels]
    return OilData(X=X, outputs=out, labels=labels.astype(np.int64), onehot=onehot,
                   label_kind=kind, files=tuple(str(f) for f in files))
