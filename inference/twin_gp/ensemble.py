"""Combining twin-GP predictions made with several cross-validated settings.

On small training sets the cross-validation score of the kernel widths is noisy: on the
S-shaped toy problems (250 points) the setting with the best CV score is often not the one
with the best test error, and which branch of a multi-valued output a twin GP commits to
follows the chosen widths. Predicting with the CV's near-ties — at most ``k`` settings that
the CV cannot tell from the best (:func:`near_ties`: their per-fold difference from the best
is within ``se`` standard errors of zero) — and keeping, for each test point, the **medoid**
of their predictions (the one with the smallest summed Euclidean distance to the others)
keeps a single, coherent structured output (one of the candidates, never an average of two
branches) chosen by the majority, and cuts the draw-to-draw spread that a single noisy
choice brings (by a quarter to a half on the toy problems; see the twin-GP results page).
For a single output and odd ``k`` the medoid is the median of the candidates.

Where the CV has a clear winner (e.g. USPS with CV on 600 images: the runner-up is 2.1
standard errors behind) there are no near-ties and the prediction is the single best
setting's, as in the paper. This is our addition to the paper's protocol (which predicts
with the single best setting, ``k = 1``).
"""
from __future__ import annotations

import numpy as np
import torch

from tandem.inference.validation import as_tensor, check_int_range, check_real_range

__all__ = ["medoid", "near_ties", "ENSEMBLE", "ENSEMBLE_SE"]

#: default: at most this many CV settings are combined ...
ENSEMBLE = 5
#: ... those within this many standard errors of the best (paired over the CV folds)
ENSEMBLE_SE = 1.0
#: medoid costs this close (relative to the largest) count as a tie
TIE_RTOL = 1e-4


def near_ties(scores: dict, k: int = ENSEMBLE, se: float = ENSEMBLE_SE) -> list:
    """The cross-validation's near-ties: the best setting and at most k − 1 more.

    In order of mean score (lower is better), the settings whose per-fold differences from the
    best, d_f = s_f − best_f, have mean(d) ≤ ``se`` · std(d)/√F (F folds; a paired test, so the
    folds' shared difficulty cancels), up to rounding (10⁻⁹ of the best's mean score). Equal
    means keep the dict's (grid) order.

    Parameters
    ----------
    scores : dict
        {setting: [per-fold values]} as returned by the selection functions, every list over the
        same folds in the same order.
    k : int, default 5
        At most this many settings are returned.
    se : float, default 1.0
        Standard errors of the paired test.

    Returns
    -------
    list
        The settings, best first.

    Raises
    ------
    ValueError
        On no settings, unequal or fewer than two fold counts, or a non-finite value.
    """
    k = check_int_range(k, "k", 1)
    se = check_real_range(se, "se", 0.0)
    if not scores:
        raise ValueError("scores: expected at least one setting with its CV values, got none")
    folds = {key: np.asarray(v, dtype=float).ravel() for key, v in scores.items()}
    if len({v.size for v in folds.values()}) != 1 or next(iter(folds.values())).size < 2:
        raise ValueError("scores: expected the same number (>= 2) of per-fold values for every setting, got "
                         f"{sorted({v.size for v in folds.values()})}")
    bad = [key for key, v in folds.items() if not np.isfinite(v).all()]
    if bad:  # sorted() with NaN keys orders by grid position, not by score
        raise ValueError(f"scores: expected finite per-fold values, got {folds[bad[0]].tolist()} for the "
                         f"setting {bad[0]}")
    ranked = sorted(folds, key=lambda key: folds[key].mean())
    best = folds[ranked[0]]
    # settings equal but for rounding (d ~ 1e-16) are ties, whatever the sign of the noise
    floor = 1e-9 * float(np.abs(best).mean())
    out = [ranked[0]]
    for key in ranked[1:]:
        if len(out) == k:
            break
        d = folds[key] - best
        if d.mean() <= se * d.std(ddof=1) / np.sqrt(d.size) + floor:
            out.append(key)
    return out


def medoid(preds) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-test-point medoid of k candidate predictions.

    index[b] = argmin_i c_ib with c_ib = Σ_j ‖preds[i, b] − preds[j, b]‖₂. Ties go to the lower
    index (list the candidates best first), and costs within ``TIE_RTOL`` × max_i c_ib of the
    minimum count as ties: with an even k a two-against-two split is a near-tie that the
    optimiser's last digits (e.g. a change of the data's units) would otherwise decide. Memory
    O(k B d): the k × k distances are accumulated one candidate at a time.

    Parameters
    ----------
    preds : torch.Tensor
        (k, B, d) k predictions of B test points with d outputs each.

    Returns
    -------
    chosen : torch.Tensor
        (B, d) the medoid prediction of each test point.
    index : torch.Tensor
        (B,) which candidate it is.
    """
    P = as_tensor(preds, "preds", ndim=3, min_rows=1)
    k = P.shape[0]
    if k == 1:
        return P[0], torch.zeros(P.shape[1], dtype=torch.long, device=P.device)
    cost = torch.stack([(P - P[i]).norm(dim=-1).sum(0) for i in range(k)])  # (k, B)
    tied = cost <= cost.min(0).values + TIE_RTOL * cost.max(0).values
    idx = tied.to(torch.int8).argmax(0)  # the first (best-ranked) near-minimal candidate
    return P[idx, torch.arange(P.shape[1], device=P.device)], idx
