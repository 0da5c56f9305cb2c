"""Per-view PCA (centring and projection on the leading principal directions), sign fixing and nearest partners.

The helpers of :class:`tandem.inference.coupled_projections.CoupledProjections` and its
baselines; re-exported by :mod:`tandem.inference.coupled_projections.solver`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tandem.inference.distances import nearest

__all__ = ["PCA", "nearest_partner", "sign_fix"]


@dataclass
class PCA:
    """Centring + projection on leading principal directions: x ↦ (x − mean) V, V (D × p).

    Parameters
    ----------
    n_components : int or None, default None
        p, the number of directions kept; None keeps every direction with singular value
        above ``rtol · s_max`` (the rank of the centred data).
    rtol : float, default 1e-10
        Relative singular-value threshold of the rank.

    Attributes
    ----------
    mean : numpy.ndarray
        (D,) mean of the fitted data (set by :meth:`fit`).
    components : numpy.ndarray
        (D, p) V, the kept principal directions (set by :meth:`fit`).
    singular_values : numpy.ndarray
        (p,) their singular values (set by :meth:`fit`).
    rank : int
        Rank of the centred data (set by :meth:`fit`).
    """
    n_components: int | None = None
    rtol: float = 1e-10
    mean: np.ndarray = field(init=False, repr=False)
    components: np.ndarray = field(init=False, repr=False)
    singular_values: np.ndarray = field(init=False, repr=False)
    rank: int = field(init=False, default=0)

    def fit(self, X: np.ndarray, name: str = "X") -> "PCA":
        """Centre X and keep its leading principal directions.

        Parameters
        ----------
        X : numpy.ndarray
            (N, D) points (rows).
        name : str, default "X"
            The data's name in the error message.

        Returns
        -------
        PCA
            ``self``, fitted.

        Raises
        ------
        ValueError
            If every point is identical after centring (zero variance).
        """
        self.mean = X.mean(0)
        Xc = X - self.mean
        _, s, Vt = np.linalg.svd(Xc, full_matrices=False)
        self.rank = int(np.sum(s > self.rtol * (s[0] if s.size and s[0] > 0 else 1.0)))
        if self.rank == 0:
            raise ValueError(f"{name}: every point is identical after centring (zero variance); "
                             "nothing to project")
        p = self.rank if self.n_components is None else min(self.n_components, self.rank)
        self.components = Vt[:p].T
        self.singular_values = s[:p]
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Project points: (x − mean) V.

        Parameters
        ----------
        X : numpy.ndarray
            (M, D) points (rows).

        Returns
        -------
        numpy.ndarray
            (M, p) coordinates.
        """
        return (X - self.mean) @ self.components


#: index of the nearest row of ``Ub`` for every row of ``Ua`` (Euclidean; ties → lower index):
#: :func:`tandem.inference.distances.nearest`, under the name the alignment docs use.
nearest_partner = nearest


def sign_fix(V: np.ndarray) -> np.ndarray:
    """Columns of V signed so that each column's largest-magnitude entry is positive.

    Parameters
    ----------
    V : numpy.ndarray
        (D, d) matrix.

    Returns
    -------
    numpy.ndarray
        (D, d) V with each column's sign fixed.
    """
    j = np.argmax(np.abs(V), axis=0)
    s = np.sign(V[j, np.arange(V.shape[1])])
    s[s == 0] = 1.0
    return V * s


# checkpoint and cache fingerprints (tandem.inference.checkpoints), saved files (tandem.inference.
# persistence) and pickles name a class by module and qualname: the classes keep the module
# that defined them before it was split, so those names (and keys) stay the same
for _cls in (PCA,):
    _cls.__module__ = "tandem.inference.coupled_projections.solver"
