"""tandem.inference: the shared SVI driver, posterior predictive → ArviZ, metrics, numerics.

Typical use::

    from tandem.inference import fit, posterior_predictive
    result = fit(model, guide, *args, num_steps=2000, seed=0)
    idata = posterior_predictive(model, guide, *args, dims=dims(...))

Generic modules: :mod:`.svi` (driver), :mod:`.predictive` (ArviZ export), :mod:`.metrics`,
:mod:`.numerics` (float64, Cholesky with jitter), :mod:`.validation` (argument checks).
One subpackage per paper: :mod:`.mcgpds`, :mod:`.twin_gp`, :mod:`.samtc`,
:mod:`.coupled_projections`; :mod:`.experiments` holds the example scripts' plumbing
(argparse, results JSON, stage checkpoints) and :mod:`.datasets` the data loaders.

The names below are loaded on first use (PEP 562), so importing a leaf module such as
``tandem.inference.numerics`` (which every model needs) does not import the driver,
ArviZ or tqdm.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "fit": ("tandem.inference.svi", "fit"),
    "minimize": ("tandem.inference.svi", "minimize"),
    "FitResult": ("tandem.inference.svi", "FitResult"),
    "LBFGS": ("tandem.inference.svi", "LBFGS"),
    "posterior_predictive": ("tandem.inference.predictive", "posterior_predictive"),
    "loo": ("tandem.inference.psis", "loo"),
    "compare": ("tandem.inference.psis", "compare"),
    "Results": ("tandem.inference.experiments.results", "Results"),
    "cholesky_jitter": ("tandem.inference.numerics", "cholesky_jitter"),
    "DTYPE": ("tandem.inference.numerics", "DTYPE"),
    "metrics": ("tandem.inference.metrics", None),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'tandem.inference' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
