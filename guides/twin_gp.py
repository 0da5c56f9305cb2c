"""Hand-written guides for :func:`tandem.models.twin_gp.model` (the twin-GP model).

* :class:`Guide` — a point mass at ``y_loc`` (B, d_y), initialised at the KLTGP prediction
  (which itself starts from ridge regression), as in the paper. With it the Trace_ELBO
  loss is exactly Σ_b L(y_b) (Delta and ImproperUniform have log-density 0), so
  ``tandem.inference.fit(..., optim=tandem.inference.LBFGS())`` returns the paper's estimate.
* :class:`NormalGuide` — an extension: independent Gaussians N(y_loc, diag y_scale²) per
  test point, fitted by the ELBO E_q[−L(y)] + H(q); its spread is a quasi-posterior
  uncertainty to compare with the paper's certainty φ_α.

Options are keyword-only in the constructor; instances are called with exactly the model's
arguments ``(tgp, Xt, method, alpha, form)``. ``TwinGPDeltaGuide`` / ``TwinGPNormalGuide``
are the older names of the same classes.
"""
from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from tandem.inference.validation import as_tensor, check_real_range

__all__ = ["Guide", "NormalGuide", "TwinGPDeltaGuide", "TwinGPNormalGuide", "kltgp_init"]


def kltgp_init(tgp, Xt) -> torch.Tensor:
    """The paper's initial point: the KLTGP prediction started from ridge regression.

    Parameters
    ----------
    tgp : tandem.inference.twin_gp.predictor.TwinGP
        The fitted twin GP.
    Xt : torch.Tensor
        (B, d_x) test inputs.

    Returns
    -------
    torch.Tensor
        (B, d_y) KLTGP predictions.
    """
    return tgp.predict(Xt, "KLTGP")


class Guide:
    """Point mass q(y_b) = δ(y_b − y_loc_b) on the test outputs.

    Parameters
    ----------
    init : torch.Tensor, optional
        (B, d_y) starting values; default KLTGP's prediction (:func:`kltgp_init`).
    prefix : str, default "twin_gp"
        Names the parameter ``{prefix}_y_loc`` in Pyro's parameter store.
    """

    def __init__(self, *, init=None, prefix: str = "twin_gp"):
        self.init = None if init is None else as_tensor(init, "init", ndim=2)
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix: expected a non-empty string, got {prefix!r}")
        self.prefix = prefix

    def _loc(self, tgp, Xt) -> torch.Tensor:
        """The ``y_loc`` parameter (B, d_y), created at ``init`` (KLTGP's prediction by default)."""
        if self.init is None:
            self.init = kltgp_init(tgp, Xt)
        if self.init.shape != (Xt.shape[0], tgp.dy):
            raise ValueError(f"init: expected shape ({Xt.shape[0]}, {tgp.dy}) (test points, output dimension), "
                             f"got {tuple(self.init.shape)}")
        return pyro.param(f"{self.prefix}_y_loc", lambda: self.init.detach().clone())

    def __call__(self, tgp, Xt, method="SMTGP", alpha=0.5, form="log"):
        loc = self._loc(tgp, Xt)
        with pyro.plate("test", loc.shape[0]):
            return pyro.sample("y", dist.Delta(loc, event_dim=1))


class NormalGuide(Guide):
    """Gaussian q(y_b) = N(y_loc_b, diag(y_scale_b²)) on the test outputs.

    Parameters
    ----------
    init : torch.Tensor, optional
        (B, d_y) starting locations; default KLTGP's prediction (:func:`kltgp_init`).
    init_scale : float, default 0.01
        Every scale's starting value, in the outputs' units.
    prefix : str, default "twin_gp"
        Names the parameters ``{prefix}_y_loc`` and ``{prefix}_y_scale``.
    """

    def __init__(self, *, init=None, init_scale: float = 0.01, prefix: str = "twin_gp"):
        super().__init__(init=init, prefix=prefix)
        self.init_scale = check_real_range(init_scale, "init_scale", 0.0, low_open=True)

    def __call__(self, tgp, Xt, method="SMTGP", alpha=0.5, form="log"):
        loc = self._loc(tgp, Xt)
        scale = pyro.param(f"{self.prefix}_y_scale", lambda: torch.full_like(loc.detach(), self.init_scale),
                           constraint=constraints.positive)
        with pyro.plate("test", loc.shape[0]):
            return pyro.sample("y", dist.Normal(loc, scale).to_event(1))


#: older names of the same guides
TwinGPDeltaGuide = Guide
TwinGPNormalGuide = NormalGuide
