"""tandem.inference: the shared SVI driver, posterior predictive → ArviZ, metrics, numerics.

Typical use::

    from inference import fit, posterior_predictive
    result = fit(model, guide, data, num_steps=2000, seed=0)
    idata = posterior_predictive(model, guide, data, dims=module.DIMS)
"""
from . import metrics
from .numerics import DTYPE, cholesky_jitter
from .predictive import posterior_predictive
from .results import Results
from .svi import LBFGS, FitResult, fit

__all__ = ["fit", "FitResult", "LBFGS", "posterior_predictive", "metrics", "Results",
           "cholesky_jitter", "DTYPE"]
