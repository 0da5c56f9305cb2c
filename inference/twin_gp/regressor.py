"""The user path for twin GPs: ``TwinGPRegressor(method="SMTGP").fit(X, Y).predict(Xt)``.

Fit on your own arrays with the paper's protocol as the default:

1. Standardise every column of X and of Y (zero mean, unit variance), so nothing depends
   on the data's units; predictions are mapped back.
2. Kernel widths and λ by k-fold CV of KLTGP (:func:`~tandem.inference.twin_gp.selection.select_kltgp`)
   on a grid of multiples of the median pairwise distance of each side. The default grid
   reaches down to 1/16 of the median: on multi-valued inverse problems (the S-shaped toys)
   the input kernel must be narrow enough that a test input's weights u_x stay on its own
   stretch of the curve; a width of the order of the input range lets the choice between
   branches follow training points far away, which changes from one data draw to the next.
3. For SMTGP, α and β by k-fold CV (:func:`~tandem.inference.twin_gp.selection.select_alpha_beta`;
   α = 0 / 1 are KLTGP / IKLTGP, the limits of SMTGP's minimiser).
4. Prediction: ridge regression → KLTGP → (IKLTGP or SMTGP), batched over all test points.
5. Ensemble over the CV's near-ties (our addition; ``ensemble=1`` is the paper's single
   setting): the (at most ``ensemble``) settings (ρ_x, ρ_y, λ) whose CV score is within
   ``ensemble_se`` paired standard errors of the best each predict, and each test point
   keeps the medoid of those predictions (:func:`~tandem.inference.twin_gp.ensemble.medoid`).
   On 250-point sets the CV score cannot tell the grid's best few settings apart, and which
   branch of a multi-valued output the prediction commits to follows that choice; the medoid
   takes the majority's branch and cuts the spread of the test error across data draws.

Any hyperparameter given to the constructor is used as is (in standardised units for the
widths) and skips its CV.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import pyro
import torch

from tandem.guides.twin_gp import Guide
from tandem.inference.distances import Standardizer, median_distance
from tandem.inference.metrics import mean_abs_error
from tandem.inference.params import (
    Callable,
    Device,
    Interval,
    Options,
    Seed,
    SequenceOf,
    TandemEstimator,
    own_params,
)
from tandem.inference.predictive import posterior_predictive, to_arviz
from tandem.inference.twin_gp.ensemble import ENSEMBLE, ENSEMBLE_SE, medoid, near_ties
from tandem.inference.twin_gp.predictor import METHODS, TwinGP
from tandem.inference.twin_gp.selection import BETAS, select_alpha_beta, select_kltgp
from tandem.inference.validation import as_tensor, check_int_range, check_same_rows, check_seed, like_input
from tandem.models.twin_gp import dims, model

__all__ = ["TwinGPRegressor", "EnsembleInfo", "RHO_MULT_X", "RHO_MULT_Y", "LAM_GRID", "ALPHA_GRID", "ENSEMBLE"]

#: default CV grids: widths as multiples of the median pairwise distance (standardised data)
RHO_MULT_X = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
RHO_MULT_Y = (1 / 8, 1 / 4, 1 / 2, 1.0)
LAM_GRID = (1e-3, 1e-2)
#: α step 0.1 (the authors: it suffices); 0 and 1 are KLTGP and IKLTGP
ALPHA_GRID = tuple(round(0.1 * i, 1) for i in range(11))


@dataclass
class EnsembleInfo:
    """Diagnostics of an ensemble prediction.

    Attributes
    ----------
    members : list of tandem.inference.twin_gp.optimizer.OptInfo
        The optimiser's per-point :class:`~tandem.inference.twin_gp.optimizer.OptInfo` of each
        member, best CV setting first.
    chosen : torch.Tensor
        (B,) the member whose prediction each test point kept.
    """
    members: list
    chosen: torch.Tensor


_POS = Interval(Real, 0, closed="neither")


class TwinGPRegressor(TandemEstimator):
    r"""Twin-GP structured regression with hyperparameters by cross-validation.

    All parameters after ``method`` are keyword-only. Any hyperparameter given here is used as is
    (in standardised units for the widths) and skips its CV.

    Parameters
    ----------
    method : {"KLTGP", "IKLTGP", "SMTGP"}, default "SMTGP"
        The twin GP that predicts.
    rho_x, rho_y, lam : float, optional
        Kernel widths (standardised units) and λ; ``None`` → by CV of KLTGP over
        ``rho_mult_x`` × median distance of the standardised inputs, ``rho_mult_y`` × that of
        the outputs, and ``lam_grid``.
    alpha, beta : float, optional
        SMTGP's order parameters (α in [0, 1], β ≠ 1); ``None`` → by CV over ``alphas`` × ``betas``.
    rho_mult_x, rho_mult_y : sequence of float, default RHO_MULT_X and RHO_MULT_Y
        CV grids of the widths as multiples of the median pairwise distance.
    lam_grid : sequence of float, default LAM_GRID
        CV grid of λ.
    alphas, betas : sequence of float, default ALPHA_GRID and BETAS
        CV grids of SMTGP's α and β.
    folds : int, default 5
        CV folds.
    cv_repeats : int, default 1
        The width/λ CV is averaged over this many random fold partitions (steadier choice on
        small sets, at cv_repeats× the cost).
    cv_subset : int, default 1000
        At most this many training rows are used for CV (a seeded random subset; the final
        model uses all rows).
    metric : callable, default mean_abs_error
        ``metric(pred, true) -> float``, lower is better.
    neighbors : int, optional
        Local model with the K nearest training points per test point (None: all).
    max_iter : int, default 50
        BFGS iterations per test point at most (the paper: 50).
    seed : int, default 0
        The CV folds' and subset's seed.
    ensemble, ensemble_se : int and float, default ENSEMBLE and ENSEMBLE_SE
        Predict with the CV's near-ties — at most ``ensemble`` settings of (ρ_x, ρ_y, λ) whose
        CV score is within ``ensemble_se`` standard errors of the best's (paired over the
        folds; :func:`~tandem.inference.twin_gp.ensemble.near_ties`) — and keep each test
        point's medoid prediction (``ensemble=1``: the single best setting, the paper's
        protocol). Prediction costs one model's per member.
    device : str or torch.device, optional
        Device of the fitted models (None: the CPU).

    Attributes
    ----------
    model\_ : TwinGP
        The :class:`TwinGP` of the best setting, on standardised data.
    models\_ : list of TwinGP
        One per ensemble member, best first.
    settings\_ : list of tuple
        The members' [(ρ_x, ρ_y, λ)].
    rho_x\_, rho_y\_, lam\_ : float
        The best setting.
    alpha\_, beta\_ : float or None
        Selected or given; shared by the members. ``beta_`` is None where β plays no part: for
        KLTGP/IKLTGP, and for SMTGP at a selected (or given) α of 0 or 1 (KLTGP/IKLTGP predict),
        unless β was given.
    cv\_ : dict
        The CV scores; empty where nothing was selected.
    sx\_, sy\_ : tandem.inference.distances.Standardizer
        The standardisations of X and Y.
    """

    _parameter_constraints = {
        "method": [Options(METHODS)],
        "rho_x": [None, _POS], "rho_y": [None, _POS], "lam": [None, _POS],
        "alpha": [None, Interval(Real, 0, 1)], "beta": [None, Interval(Real)],
        "rho_mult_x": [SequenceOf(_POS)], "rho_mult_y": [SequenceOf(_POS)], "lam_grid": [SequenceOf(_POS)],
        "alphas": [SequenceOf(Interval(Real, 0, 1))], "betas": [SequenceOf(Interval(Real))],
        "folds": [Interval(Integral, 2)], "cv_repeats": [Interval(Integral, 1)], "cv_subset": [Interval(Integral, 2)],
        "metric": [Callable()], "neighbors": [None, Interval(Integral, 2)], "max_iter": [Interval(Integral, 1)],
        "seed": [Seed()], "ensemble": [Interval(Integral, 1)], "ensemble_se": [Interval(Real, 0)],
        "device": [None, Device()],
    }

    def __init__(self, method: str = "SMTGP", *, rho_x: float | None = None, rho_y: float | None = None,
                 lam: float | None = None, alpha: float | None = None, beta: float | None = None,
                 rho_mult_x=RHO_MULT_X, rho_mult_y=RHO_MULT_Y, lam_grid=LAM_GRID, alphas=ALPHA_GRID,
                 betas=BETAS, folds: int = 5, cv_repeats: int = 1, cv_subset: int = 1000, metric=mean_abs_error,
                 neighbors: int | None = None, max_iter: int = 50, seed: int = 0, ensemble: int = ENSEMBLE,
                 ensemble_se: float = ENSEMBLE_SE, device=None):
        self.method = method
        self.rho_x, self.rho_y, self.lam, self.alpha, self.beta = rho_x, rho_y, lam, alpha, beta
        self.rho_mult_x, self.rho_mult_y, self.lam_grid = rho_mult_x, rho_mult_y, lam_grid
        self.alphas, self.betas = alphas, betas
        self.folds, self.cv_repeats, self.cv_subset, self.metric = folds, cv_repeats, cv_subset, metric
        self.neighbors, self.max_iter, self.seed = neighbors, max_iter, seed
        self.ensemble, self.ensemble_se, self.device = ensemble, ensemble_se, device
        self._validate_params()

    def _validate_params(self):
        super()._validate_params()
        if self.beta is not None and float(self.beta) == 1.0:
            raise ValueError("TwinGPRegressor: beta: expected a real number != 1 (beta = 1 is the Renyi limit), got 1")
        if any(float(b) == 1.0 for b in self.betas):
            raise ValueError(f"TwinGPRegressor: betas: expected a non-empty sequence of values != 1, "
                             f"got {self.betas!r}")

    # -- fitting ----------------------------------------------------------------------
    def fit(self, X, Y) -> "TwinGPRegressor":
        """Standardise, select the hyperparameters by CV where not given, build the twin GP.

        Parameters
        ----------
        X : array_like
            (N, d_x) training inputs.
        Y : array_like
            (N, d_y) training outputs; a 1-d ``Y`` is read as one output column.

        Returns
        -------
        TwinGPRegressor
            ``self``, fitted.

        Raises
        ------
        ValueError
            On bad shapes, unequal row counts, fewer rows than ``folds``, ``neighbors`` > N, CV
            training folds of fewer than 2 rows (``folds`` against min(``cv_subset``, N)), or a
            ``metric`` value that is not a finite real number.
        """
        self._validate_params()
        X = as_tensor(X, "X", ndim=2, min_rows=2, detach=True)
        Y = as_tensor(Y, "Y", min_rows=2, detach=True)
        if Y.dim() == 1:
            Y = Y.unsqueeze(1)
        if Y.dim() != 2:
            raise ValueError(f"Y: expected a 1-d or 2-d array, got shape {tuple(Y.shape)}")
        check_same_rows({"X": X, "Y": Y}, "samples (rows)")
        if X.shape[0] < self.folds:
            raise ValueError(f"X: {X.shape[0]} training rows cannot be split into folds={self.folds} CV folds")
        self._check_sizes(X.shape[0])
        self.sx_, self.sy_ = Standardizer(X), Standardizer(Y)
        Z, W = self.sx_.transform(X), self.sy_.transform(Y)
        rng = np.random.default_rng(self.seed)
        sub = np.sort(rng.choice(Z.shape[0], min(self.cv_subset, Z.shape[0]), replace=False))
        sub = torch.as_tensor(sub)  # device: cpu-ok (indices index a tensor on any device)
        Zs, Ws = Z[sub], W[sub]
        self.cv_ = {}
        if None in (self.rho_x, self.rho_y, self.lam):
            mx, my = median_distance(Z, seed=self.seed), median_distance(W, seed=self.seed)
            gx = [float(self.rho_x)] if self.rho_x is not None else [mx * float(r) for r in self.rho_mult_x]
            gy = [float(self.rho_y)] if self.rho_y is not None else [my * float(r) for r in self.rho_mult_y]
            gl = [float(self.lam)] if self.lam is not None else [float(v) for v in self.lam_grid]
            sel = select_kltgp(Zs, Ws, gx, gy, gl, self.metric, k=self.folds, seed=self.seed,
                               neighbors=self._cv_neighbors(Zs), max_iter=self.max_iter, repeats=self.cv_repeats)
            self.cv_["kltgp"] = sel
            self.settings_ = near_ties(sel["scores"], self.ensemble, self.ensemble_se)
        else:
            self.settings_ = [(float(self.rho_x), float(self.rho_y), float(self.lam))]
        self.rho_x_, self.rho_y_, self.lam_ = self.settings_[0]
        self.alpha_ = None if self.alpha is None else float(self.alpha)
        self.beta_ = None if self.beta is None else float(self.beta)
        if self.method == "SMTGP" and self.alpha is None:
            betas = tuple(self.betas) if self.beta is None else (float(self.beta),)
            sel = select_alpha_beta(Zs, Ws, self.rho_x_, self.rho_y_, self.lam_, self.metric,
                                    alphas=tuple(map(float, self.alphas)),
                                    betas=betas, k=self.folds, seed=self.seed, neighbors=self._cv_neighbors(Zs),
                                    max_iter=self.max_iter)
            self.cv_["alpha_beta"] = sel
            self.alpha_, self.beta_ = sel["best"]
        if self.method == "SMTGP" and self.beta_ is None and self.alpha_ not in (0.0, 1.0):
            # β changes only SMTGP's optimisation path (paper's default list starts here); at the
            # endpoints α = 0 / 1 KLTGP / IKLTGP predict and β stays None (the CV's key there too)
            self.beta_ = 0.99
        self.models_ = [TwinGP(Z, W, rx, ry, lam, device=self.device) for rx, ry, lam in self.settings_]
        self.model_ = self.models_[0]
        return self

    def _check_sizes(self, N: int) -> None:
        """``neighbors`` and the CV's sizes against the N training rows, before any work: the local
        model cannot use more neighbours than there are rows, and every CV training fold must hold
        the two rows a twin GP needs (otherwise the CV fails deep inside, naming other arguments)."""
        if self.neighbors is not None and self.neighbors > N:
            raise ValueError(f"neighbors: expected at most N = {N} (the training rows), got {self.neighbors}")
        if not (None in (self.rho_x, self.rho_y, self.lam) or (self.method == "SMTGP" and self.alpha is None)):
            return  # nothing is cross-validated
        n = min(self.cv_subset, N)
        what = f"cv_subset={self.cv_subset} of N={N} training rows gives {n} CV rows"
        fix = "lower folds" + (" or raise cv_subset" if self.cv_subset < N else " or add training rows")
        if self.folds > n:
            raise ValueError(f"folds: {what}, too few for folds={self.folds} CV folds; {fix}")
        train = n - -(-n // self.folds)  # the smallest training fold: n minus the largest fold
        if train < 2:
            raise ValueError(f"folds / cv_subset: {what}; with folds={self.folds} a CV training fold holds {train} "
                             f"row(s), but a twin GP needs at least 2; {fix}")

    def _cv_neighbors(self, Zs) -> int | None:
        # a CV fold holds (folds−1)/folds of the subset; the local model cannot use more
        if self.neighbors is None:
            return None
        return min(self.neighbors, Zs.shape[0] - -(-Zs.shape[0] // self.folds))

    # -- prediction ---------------------------------------------------------------------
    def _check_fitted(self):
        super()._check_fitted("model_", "fit(X, Y)")

    def _check_test(self, Xt) -> torch.Tensor:
        Xt = as_tensor(Xt, "Xt", ndim=2, min_rows=1, detach=True)
        if Xt.shape[1] != self.model_.dx:
            raise ValueError(f"Xt: test inputs have dimension {Xt.shape[1]}, but the training inputs X "
                             f"have dimension {self.model_.dx}")
        return Xt

    def _effective(self, method: str | None = None) -> tuple[str, float, float | None]:
        """The method actually run: SMTGP at α = 0 / 1 is KLTGP / IKLTGP (its limits)."""
        method = self.method if method is None else method
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS} or None, got {method!r}")
        if method == "SMTGP" and self.alpha_ in (0.0, 1.0):
            return ("KLTGP" if self.alpha_ == 0.0 else "IKLTGP"), self.alpha_, None
        if method == "SMTGP" and self.alpha_ is None:
            raise ValueError("method='SMTGP': this regressor was fitted without an α (method "
                             f"{self.method!r}); fit TwinGPRegressor('SMTGP') or give alpha=")
        return method, (0.5 if self.alpha_ is None else self.alpha_), self.beta_

    def _member_predict(self, m: TwinGP, Zt, method, a, b, return_info):
        kw = dict(max_iter=self.max_iter, neighbors=self.neighbors)
        if method == "KLTGP":
            return m.predict(Zt, "KLTGP", return_info=return_info, **kw)
        init = m.predict(Zt, "KLTGP", **kw)
        opts = dict(alpha=a, beta=b, form="sm") if method == "SMTGP" else {}
        return m.predict(Zt, method, init=init, return_info=return_info, **opts, **kw)

    def _predict_std(self, Zt, return_info=False, method=None, members=None):
        method, a, b = self._effective(method)
        if members is not None:
            members = check_int_range(members, "members", 1, len(self.models_))
        outs = [self._member_predict(m, Zt, method, a, b, return_info) for m in self.models_[:members]]
        if len(outs) == 1:
            return outs[0]
        preds = torch.stack([o[0] if return_info else o for o in outs])
        pred, chosen = medoid(preds)
        return (pred, EnsembleInfo([o[1] for o in outs], chosen)) if return_info else pred

    def predict(self, Xt, return_info: bool = False, method: str | None = None, members: int | None = None):
        """Predicted outputs in the data's units.

        Parameters
        ----------
        Xt : array_like or torch.Tensor
            (B, d_x) test inputs.
        return_info : bool, default False
            Also return the optimiser's per-point diagnostics (an :class:`EnsembleInfo` when
            more than one member predicts).
        method : {"KLTGP", "IKLTGP", "SMTGP"}, optional
            Run another twin GP with the fitted settings ("SMTGP" needs a fitted α); default the
            constructor's.
        members : int, optional
            Use only the first (best CV) members of the ensemble (1: the paper's single
            setting); default all.

        Returns
        -------
        pred : numpy.ndarray or torch.Tensor
            (B, d_y) predictions; numpy in → numpy out, a tensor in → a tensor on its device.
        info : OptInfo or EnsembleInfo
            Only with ``return_info=True``.

        Raises
        ------
        tandem.NotFittedError
            Before :meth:`fit`.
        ValueError
            On a bad ``method``/``members``, a ``return_info`` that is not a bool, or test inputs of
            the wrong dimension.
        """
        self._check_fitted()
        if not isinstance(return_info, (bool, np.bool_)):  # "no" or 0.0 must not read as a truth value
            raise ValueError(f"return_info: expected True or False, got {return_info!r}")
        Zt = self.sx_.transform(self._check_test(Xt))
        out = self._predict_std(Zt, bool(return_info), method, members)
        pred = self.sy_.inverse(out[0] if return_info else out)
        pred = like_input(pred, Xt)   # numpy in -> numpy out; a tensor in -> a tensor on its device
        return (pred, out[1]) if return_info else pred

    @own_params
    def to_inference_data(self, Xt, Y_true=None, *, num_samples: int = 200, seed: int = 0):
        """ArviZ data of the prediction through the Pyro model.

        The Pyro model is :func:`tandem.models.twin_gp.model` with the point-mass guide at the
        prediction, in data units:

        * ``posterior["y"]`` (1 chain, 1 draw, test, output): the prediction ŷ_b;
        * ``posterior_predictive["y"]`` (1, ``num_samples``, test, output): draws from the
          Laplace approximation of the twin GP's quasi-posterior p(y_b | x_b) ∝ exp(−L(y_b))
          around the prediction, N(ŷ_b, H_b⁻¹) with H_b = ∇²L(ŷ_b) the Hessian of the
          objective of ``model_`` (autograd; with an ensemble, ŷ_b is the members' medoid);
        * with ``Y_true`` (B, d_y) the true outputs: ``observed_data["y"]`` and
          ``log_likelihood["y"]`` (1, 1, test), the observed quantity's density
          log N(y_b^true; ŷ_b, H_b⁻¹) jointly over the outputs, in data units (minus Σ log of
          the output scales): the held-out log predictive density, so a PPC and ``az.loo``
          (on this plug-in point estimate) exist.

        The hyperparameters are in ``attrs``.

        Parameters
        ----------
        Xt : array_like or torch.Tensor
            (B, d_x) test inputs.
        Y_true : array_like, optional
            (B, d_y) true outputs (a 1-d (B,) array where d_y = 1, as ``fit`` accepts for ``Y``):
            adds ``observed_data`` and ``log_likelihood``.
        num_samples : int, default 200
            Draws of the Laplace approximation.
        seed : int, default 0
            Seed of those draws.

        Returns
        -------
        arviz.InferenceData
            The groups above.

        Raises
        ------
        ValueError
            When a test point's Hessian is not positive definite (ŷ_b is not a strict local
            minimum of L).
        """
        self._check_fitted()
        check_int_range(num_samples, "num_samples", low=1)
        check_seed(seed)
        Zt = self.sx_.transform(self._check_test(Xt))
        pred = self._predict_std(Zt)
        method, a, _ = self._effective()
        prefix = "twin_gp_regressor"
        pyro.clear_param_store()            # this object's own store (own_params): the point mass only
        idata = posterior_predictive(model, Guide(init=pred, prefix=prefix), self.model_, Zt, method, a,
                                     num_samples=1, dims=dims(), log_likelihood=False)
        pyro.clear_param_store()
        L = self._laplace_cholesky(Zt, pred.detach(), method, a)                  # H_b = L_b L_bᵀ
        sc = torch.as_tensor(np.asarray(self.sy_.scale, dtype=float), dtype=pred.dtype, device=pred.device)
        sc = sc.reshape(-1).expand(pred.shape[1])
        mu = torch.as_tensor(np.asarray(self.sy_.mean, dtype=float), dtype=pred.dtype, device=pred.device)
        mu = mu.reshape(-1).expand(pred.shape[1])
        g = torch.Generator(device="cpu").manual_seed(int(seed))
        eps = torch.randn((num_samples,) + tuple(pred.shape), generator=g,  # device: cpu-ok (CPU generator)
                          dtype=pred.dtype).to(pred.device)
        # y = ŷ + L⁻ᵀ ε ~ N(ŷ, H⁻¹)
        dev = torch.linalg.solve_triangular(L.transpose(-1, -2), eps.unsqueeze(-1), upper=True).squeeze(-1)
        ppc = ((pred.detach() + dev) * sc + mu).detach().cpu().numpy()
        # back to data units; rebuilt with to_arviz so that ArviZ 0.x and 1.x both work
        y = np.asarray(idata["posterior"]["y"]) * np.asarray(self.sy_.scale) + np.asarray(self.sy_.mean)
        groups = {"posterior": {"y": y}, "posterior_predictive": {"y": ppc[None]}}
        if Y_true is not None:
            Y_true = as_tensor(Y_true, "Y_true")
            if Y_true.dim() == 1 and self.model_.dy == 1:  # as fit reads a 1-d Y: one output column
                Y_true = Y_true.unsqueeze(1)
            Y_true = as_tensor(Y_true, "Y_true", ndim=2, shape=(Zt.shape[0], self.model_.dy))
            Yt = Y_true.to(device=pred.device, dtype=pred.dtype)
            r = ((Yt - mu) / sc - pred.detach()).unsqueeze(-1)                      # (B, d_y, 1)
            quad = (L.transpose(-1, -2) @ r).squeeze(-1).pow(2).sum(-1)           # (y−ŷ)ᵀ H (y−ŷ)
            logdet = torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)       # ½ log det H
            d_y = pred.shape[1]
            ll = -0.5 * quad + logdet - 0.5 * d_y * math.log(2 * math.pi) - torch.log(sc).sum()
            groups["observed_data"] = {"y": Y_true.detach().cpu().numpy()}
            groups["log_likelihood"] = {"y": ll.detach().cpu().numpy()[None, None]}
        idata = to_arviz(groups, dims=dims())
        idata["posterior"].attrs.update({"method": self.method, "method_run": method, "rho_x": self.rho_x_,
                                      "rho_y": self.rho_y_, "lambda": self.lam_, "ensemble": len(self.models_),
                                      "alpha": -1.0 if self.alpha_ is None else float(self.alpha_),
                                      "beta": -1.0 if self.beta_ is None else float(self.beta_),
                                      "units": "rho_x, rho_y in standardised units"})
        return idata

    def _laplace_cholesky(self, Zt, pred, method, a):
        """Cholesky factors (B, d_y, d_y) of the Hessians H_b = ∇²L(ŷ_b) of ``model_``'s objective
        at the standardised prediction (the points are independent, so H is block diagonal)."""
        ctx = self.model_.context(Zt, method, a)
        y0 = pred.clone().requires_grad_(True)
        with torch.enable_grad():
            f = self.model_.objective(y0, ctx)
            (grad,) = torch.autograd.grad(f.sum(), y0, create_graph=True)
            cols = [torch.autograd.grad(grad[:, j].sum(), y0, retain_graph=True)[0] for j in range(pred.shape[1])]
        H = torch.stack(cols, -1).detach()
        H = 0.5 * (H + H.transpose(-1, -2))
        L, info = torch.linalg.cholesky_ex(H)
        bad = torch.nonzero(info).reshape(-1).tolist()
        if bad:
            raise ValueError(f"to_inference_data: the twin-GP objective's Hessian is not positive definite at test "
                             f"point(s) {bad[:10]} (the prediction is not a strict local minimum of L there)")
        return L
