"""tandem — probabilistic models for learning across related data.

Four papers, each a Pyro model with a hand-written variational guide, fitted by one
shared SVI driver:

* :mod:`tandem.models` — the generative stories (McGPDS, twin GPs, SAMTC, coupled
  projections) and shared GP kernels;
* :mod:`tandem.guides` — the hand-written guides, one module per model;
* :mod:`tandem.inference` — the driver (:func:`~tandem.inference.fit`,
  :func:`~tandem.inference.minimize`), posterior predictive → ArviZ, metrics, numerics,
  and one subpackage per paper (solvers, reference algorithms, baselines, predictors).

The repository keeps ``models/``, ``guides/`` and ``inference/`` at its top level; they
install as subpackages of ``tandem`` so that nothing generic lands in site-packages.

The common path of each paper is one object, also importable from here:
:class:`~tandem.inference.mcgpds.McGPDS`, :class:`~tandem.inference.twin_gp.TwinGPRegressor`,
:class:`~tandem.inference.samtc.SAMTC` and
:class:`~tandem.inference.coupled_projections.CoupledProjections`.
"""
import importlib as _importlib
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("tandem")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

#: the common path of each paper (one object per model) and the driver, loaded on first use
#: so that ``import tandem`` stays light.
_LAZY = {
    "McGPDS": "tandem.inference.mcgpds",
    "TwinGPRegressor": "tandem.inference.twin_gp",
    "SAMTC": "tandem.inference.samtc",
    "CoupledProjections": "tandem.inference.coupled_projections",
    "fit": "tandem.inference",
    "minimize": "tandem.inference",
    "posterior_predictive": "tandem.inference",
    "NotFittedError": "tandem.inference.validation",
    "StochasticMcGPDS": "tandem.inference.mcgpds.stochastic",
}

#: submodules reachable as attributes (``tandem.plots``), also imported on first use
_SUBMODULES = ("plots",)

__all__ = ["__version__", *_LAZY, *_SUBMODULES]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return _importlib.import_module(f"tandem.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module 'tandem' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
