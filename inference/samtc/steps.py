"""The steps of SAMTC (Zhang, Zhang & Liu, IJCAI 2016), one function each.

Our copy of the paper lost its display equations; every formula here is rebuilt from
the prose and the cited methods (see ``docs/specs/samtc.md``). Rebuilt choices are marked
"Rebuilt:" in the docstrings.

Notation: task t has n_t points (rows of X_t, dense or scipy.sparse, one common
feature space of dimension d); clusters C^t_1..C^t_{h_t}; Z^t ⊂ task t and Z^s ⊂ task s
are the target and source subtasks of a (target t, source s) pair, ñ_t = |Z^t|,
ñ_s = |Z^s|, h̃_s = number of source clusters kept in Z^s.

The functions live in one module per step — :mod:`.representations` (reduced space,
similarities, neighbour orders), :mod:`.js_step` (step 1: JS divergence, mutual-nearest
pairs), :mod:`.kmm_step` (step 2: kernel mean matching, relatedness) and :mod:`.snn_step`
(step 3: relatedness-weighted SNN similarity, the k grid); this module gathers them.
"""
from __future__ import annotations

from tandem.inference.samtc.js_step import (  # noqa: F401
    _js_from_logs,
    _pair_bandwidths,
    js_divergence,
    js_matrix,
    kde_logpdf,
    mutual_nearest_pairs,
    silverman_bandwidths,
)
from tandem.inference.samtc.kmm_step import (  # noqa: F401
    _kmm_support,
    gaussian_kernel,
    kmm_frank_wolfe,
    kmm_lmo,
    kmm_objective,
    kmm_relatedness,
)
from tandem.inference.samtc.representations import neighbour_order, reduce_dimension, similarity
from tandem.inference.samtc.snn_step import k_grid, neighbour_indicator, snn_graph, weighted_snn

__all__ = ["reduce_dimension", "similarity", "neighbour_order", "silverman_bandwidths",
           "kde_logpdf", "js_divergence", "js_matrix", "mutual_nearest_pairs",
           "gaussian_kernel", "kmm_frank_wolfe", "kmm_lmo", "kmm_objective",
           "kmm_relatedness", "neighbour_indicator", "snn_graph", "weighted_snn", "k_grid"]
