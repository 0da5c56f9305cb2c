"""Manifold alignment by coupled linear projections (Jiang, Li, Yao & Liu, 2010): the exact
solver (:class:`CoupledProjections`, the common path: ``CoupledProjections().fit(X, Y, pairs)``)
and the baselines of Ham et al. and Procrustes (:mod:`tandem.inference.coupled_projections.baselines`)."""
from tandem.inference.coupled_projections.baselines import HamAlignment, ProcrustesAlignment
from tandem.inference.coupled_projections.solver import CoupledProjections, nearest_partner

__all__ = ["CoupledProjections", "HamAlignment", "ProcrustesAlignment", "nearest_partner"]
