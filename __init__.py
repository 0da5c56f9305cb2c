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
"""
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("tandem")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
