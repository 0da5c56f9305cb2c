"""COIL-20 (Columbia Object Image Library, Nene, Nayar & Murase 1996), 32×32 version.

Reads ``<data_dir>/coil20/COIL20_32x32.mat``: ``fea`` (1440 × 1024, grey levels in [0, 1])
and ``gnd`` (1440 × 1, object 1..20 in blocks of 72). Within an object, row j is the pose
at 5°·j on a turntable (rows are consecutive views; pose 71 is adjacent to pose 0; the
absolute start angle is unknown). ``fea[i].reshape(32, 32)`` is upright.

**Which objects the paper's 'duck' and 'block' are.** Object 1 is the rubber duck.
Objects 4 and 16 are not blocks in this copy of the data: rendered, object 4 is a ceramic
cat figurine and object 16 a bottle. The wooden blocks
are objects 2, 7 and 11 (checked by rendering every object, poses 0–63); the default
'block' is **object 2** (:data:`BLOCK`), the first of the wooden blocks (the paper does
not give the index; its Fig. 3 could not be checked here); 7 and 11 are the other wooden
pieces, and the all-pairs experiment covers every choice.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tandem.inference.datasets import data_dir as resolve_data_dir
from tandem.inference.datasets import read_mat
from tandem.inference.validation import check_int_range, require_file

__all__ = ["COIL20_FILE", "DUCK", "BLOCK", "WOODEN_BLOCKS", "N_POSES", "POSE_STEP_DEG",
           "Coil20", "load_coil20"]

COIL20_FILE = Path("coil20") / "COIL20_32x32.mat"
DUCK = 1
BLOCK = 2
WOODEN_BLOCKS = (2, 7, 11)
N_POSES = 72
POSE_STEP_DEG = 5.0
HINT = ("COIL-20 (32×32) is a copy of github.com/SK4772/GReBLS data/COIL20_32x32.mat; "
        "see ../shared/data/README.md")


@dataclass
class Coil20:
    """The COIL-20 images: object o (1-based) is ``images[o − 1]``, pose j at ``POSE_STEP_DEG · j`` degrees.

    Parameters
    ----------
    images : numpy.ndarray
        (20, 72, 1024) float64 in [0, 1].
    """
    images: np.ndarray

    def object(self, o: int) -> np.ndarray:
        """The images of one object, in pose order.

        Parameters
        ----------
        o : int
            The object, 1-based (1..20).

        Returns
        -------
        numpy.ndarray
            (72, 1024).
        """
        o = check_int_range(o, "object (1-based COIL-20 index)", 1, self.images.shape[0])
        return self.images[o - 1]


def load_coil20(data_dir=None) -> Coil20:
    """Load COIL-20.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).

    Returns
    -------
    Coil20
        The images.

    Raises
    ------
    FileNotFoundError
        Naming the expected file if it is missing.
    """
    path = require_file(resolve_data_dir(data_dir) / COIL20_FILE, "COIL-20 data", HINT)
    m = read_mat(path, ["fea", "gnd"], "COIL-20 32×32 images (fea 1440 × 1024, gnd 1440 × 1)")
    fea = np.asarray(m["fea"], dtype=np.float64)
    gnd = np.asarray(m["gnd"]).ravel().astype(int)
    if fea.shape != (1440, 1024) or gnd.shape != (1440,):
        raise ValueError(f"{path}: expected fea (1440, 1024) and gnd (1440,), got {fea.shape}, {gnd.shape}")
    if not np.array_equal(gnd, np.repeat(np.arange(1, 21), N_POSES)):
        raise ValueError(f"{path}: expected gnd = objects 1..20 in blocks of {N_POSES} rows")
    return Coil20(fea.reshape(20, N_POSES, 1024))
