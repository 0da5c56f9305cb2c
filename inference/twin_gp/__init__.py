"""Twin Gaussian processes (KLTGP, IKLTGP, SMTGP; Bo & Sminchisescu 2010, Elhoseiny & Elgammal 2015).

* :class:`TwinGPRegressor` — the user path: ``TwinGPRegressor("SMTGP").fit(X, Y).predict(Xt)``
  (standardised internally, widths/λ/α/β by cross-validation), ``to_inference_data()``.
* :mod:`.predictor` — :class:`TwinGP` (batched prediction, objectives, certainty φ_α).
* :mod:`.baselines` — the Gaussian kernel, the ridge starting point and the baselines (GPR,
  weighted k-NN, kernel-alignment k-NN), re-exported by :mod:`.predictor`.
* :mod:`.optimizer` — :func:`~.optimizer.minimize_batched`, the batched per-point BFGS / gradient
  descent, its diagnostics (:class:`~.optimizer.OptInfo`) and warnings.
* :mod:`.selection` — the paper's CV protocol and the real-data experiment driver.
* :mod:`.divergences` — Sharma–Mittal / Rényi / Tsallis / KL between Gaussians.
"""
from tandem.inference.twin_gp.optimizer import ConvergenceWarning, IterationCapWarning
from tandem.inference.twin_gp.predictor import METHODS, TwinGP
from tandem.inference.twin_gp.regressor import TwinGPRegressor

__all__ = ["TwinGPRegressor", "TwinGP", "ConvergenceWarning", "IterationCapWarning", "METHODS"]
