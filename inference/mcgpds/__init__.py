"""McGPDS inference: the user-facing :class:`McGPDS` object and the pieces behind it.

* :class:`McGPDS` (:mod:`.api`) — fit on your own views, ``predict`` one view from another
  (calibrated tandem predictor by default), ``to_inference_data``; unit-invariant, safe defaults.
* :mod:`.fit` — :func:`fit_mcgpds` / :class:`McGPDSConfig` (every setting of a fit; the
  protocol's defaults), :func:`predict_view` (paper-, code-faithful and generative predictors),
  held-out calibration, :func:`cached_fit`, save/load.
* :mod:`.predictor` — :func:`calibrated_prediction`, the tandem predictor;
  :func:`select_predictor`, its choice of neighbourhood on held-out training frames;
  :func:`stacked_predictor`, a stack of such predictors; :mod:`.predictor_choice` —
  :func:`choose_predictor` (``predict``'s default), the held-out choice between the selection
  and the stack.
* :mod:`.missing` — NaN (missing) entries: the masked collapsed bound and posterior.
* :mod:`.bound` — the paper's collapsed bound; :mod:`.uncollapsed` — the uncollapsed ELBO and the
  optimal q(V), q(U); :mod:`tandem.inference.mcgpds.baselines`.

Names are loaded on first use (PEP 562), so importing e.g. :mod:`.bound` stays light.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "McGPDS": "api", "McGPDSPrediction": "api", "McGPDSImputation": "api", "DEFAULT_SCHEDULE": "api",
    "McGPDSConfig": "fit", "McGPDSFitted": "fit", "Prediction": "fit", "fit_mcgpds": "fit", "fit_cgpds": "fit",
    "predict_view": "fit", "cached_fit": "fit", "save_fitted": "fit", "load_fitted": "fit",
    "calibrated_prediction": "predictor", "CalibratedPrediction": "predictor", "TANDEM_PREDICTOR": "predictor",
    "select_predictor": "predictor", "PredictorSelection": "predictor", "TANDEM_CANDIDATES": "predictor",
    "stacked_predictor": "predictor", "stacked_prediction": "predictor", "StackedPrediction": "predictor",
    "TANDEM_STACK_CANDIDATES": "predictor", "choose_predictor": "predictor_choice",
    "PredictorChoice": "predictor_choice", "nested_selection_score": "predictor_choice",
    "collapsed_loss": "bound", "set_optimal_inducing": "uncollapsed",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'tandem.inference.mcgpds' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
