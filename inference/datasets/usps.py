"""USPS digits for twin-GP image reconstruction (outer 240 pixels → centre 16 pixels).

Source: ``usps/usps_9298.mat`` (9298 16×16 digits, values in [0, 1]; mapped to [−1, 1] by
2v − 1) and the class counts of the common 4649/4649 resampling
(``usps_gpml_resampled_{train,test}_labels.txt``, one-of-10 rows of ±1). The images of that
exact split are not available, so :func:`load_usps_reconstruction` draws a stratified split
with exactly those per-class counts from the 9298 images with a fixed seed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tandem.inference.datasets import data_dir as resolve_data_dir
from tandem.inference.datasets import read_mat
from tandem.inference.validation import check_seed, require_file

__all__ = ["load_usps_reconstruction", "centre_mask", "HINT"]

HINT = "Get it from github.com/chenbocqu/SEMMDL (data/USPS.mat); see ../shared/data/README.md (usps/)"


def centre_mask() -> np.ndarray:
    """Boolean (256,) mask of the centre 4×4 block (rows/cols 6..9) of a 16×16 image in the
    upright (row-major after ``reshape(16, 16, order='F').T``-free) pixel order used here:
    pixel index r·16 + c of the upright image."""
    m = np.zeros((16, 16), bool)
    m[6:10, 6:10] = True
    return m.ravel()


def _label_counts(path: Path) -> np.ndarray:
    """Images per digit from a GPML label file: 10 comma-separated rows of ±1, one +1 per column.

    A damaged file (not text, non-numeric entries, ragged rows, no rows) raises ``ValueError``
    naming it and the line."""
    try:
        lines = [ln for ln in path.read_text().split() if ln.strip()]
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a text file ({err}); the USPS label file is damaged") from None
    rows = []
    for i, line in enumerate(lines, start=1):
        try:
            rows.append(np.array([float(v) for v in line.split(",")]))
        except ValueError:
            raise ValueError(f"{path}: row {i} holds a value that is not a number; the USPS label file is "
                             "damaged (expected 10 rows of comma-separated ±1)") from None
        if rows[-1].size != rows[0].size:
            raise ValueError(f"{path}: row {i} has {rows[-1].size} labels, row 1 has {rows[0].size}; the USPS "
                             "label file is damaged or truncated")
    if not rows:
        raise ValueError(f"{path}: no label rows; the USPS label file is empty or damaged")
    L = np.stack(rows)  # (10, n) of ±1
    if L.shape[0] != 10 or not np.all(np.abs(L) == 1):
        raise ValueError(f"{path}: expected 10 rows of ±1 labels, got shape {L.shape}")
    if not np.all((L > 0).sum(0) == 1):
        raise ValueError(f"{path}: expected exactly one +1 per column")
    return (L > 0).sum(1)


def load_usps_reconstruction(data_dir=None, seed: int = 0) -> dict:
    """USPS centre-pixel reconstruction: a stratified 4649/4649 split, as float64 arrays.

    Label-file row k is digit k (its counts match: row 0 ↔ .mat label 10 = digit 0, 1553 images).

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).
    seed : int, default 0
        Seed of the split.

    Returns
    -------
    dict
        ``X_train`` (4649, 240) outer pixels, ``Y_train`` (4649, 16) centre pixels, likewise
        ``X_test``/``Y_test``; ``labels_train``/``labels_test`` (digit 0..9), ``images_train``/
        ``images_test`` (n, 16, 16) upright in [−1, 1], ``counts_train``/``counts_test``.
    """
    d = resolve_data_dir(data_dir) / "usps"
    mat = read_mat(require_file(d / "usps_9298.mat", "USPS images", HINT),
                   ["Train_DAT", "Test_DAT", "trainlabels", "testlabels"], "USPS images (usps_9298.mat)")
    ctr = _label_counts(require_file(d / "usps_gpml_resampled_train_labels.txt", "USPS train labels", HINT))
    cte = _label_counts(require_file(d / "usps_gpml_resampled_test_labels.txt", "USPS test labels", HINT))
    imgs = np.concatenate([mat["Train_DAT"], mat["Test_DAT"]], 1).T.astype(np.float64)  # (9298, 256)
    lab = np.concatenate([mat["trainlabels"].ravel(), mat["testlabels"].ravel()]).astype(int)  # 1..10
    if imgs.shape != (9298, 256):
        raise ValueError(f"usps_9298.mat: expected 9298 images of 256 pixels, got {imgs.shape}")
    # column-major 16×16 → upright image → row-major pixel vector
    up = imgs.reshape(-1, 16, 16).transpose(0, 2, 1) * 2.0 - 1.0
    flat = up.reshape(-1, 256)
    rng = np.random.default_rng(check_seed(seed))
    tr, te = [], []
    for k in range(10):
        cls = np.flatnonzero(lab % 10 == k)
        if len(cls) != ctr[k] + cte[k]:
            raise ValueError(f"USPS digit {k}: {len(cls)} images but the label files ask for "
                             f"{ctr[k]} + {cte[k]}")
        p = rng.permutation(cls)
        tr.append(p[:ctr[k]])
        te.append(p[ctr[k]:])
    tr, te = np.sort(np.concatenate(tr)), np.sort(np.concatenate(te))
    m = centre_mask()
    digit = lab % 10
    return {"X_train": flat[tr][:, ~m], "Y_train": flat[tr][:, m], "X_test": flat[te][:, ~m],
            "Y_test": flat[te][:, m], "labels_train": digit[tr], "labels_test": digit[te],
            "images_train": up[tr], "images_test": up[te], "counts_train": ctr, "counts_test": cte}
