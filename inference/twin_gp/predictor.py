"""Twin Gaussian processes (KLTGP, IKLTGP, SMTGP): batched prediction and the reference path.

Setting (Bo & Sminchisescu 2010; Elhoseiny & Elgammal 2015; docs/specs/twin_gp.md). Training inputs
X (N, d_x), outputs Y (N, d_y); Gaussian kernels
k(a, b) = exp(−‖a−b‖²/(2ρ²)) + λ δ_ab on each side, K_X = k_X(X, X), K_Y = k_Y(Y, Y) (with λ),
test-to-train vectors K_x = k_X(X, x), K_y = k_Y(Y, y) (without λ), k(z, z) = 1 + λ.
With A_X = K_X⁻¹, A_Y = K_Y⁻¹: u_x = A_X K_x, η_x = k_X(x,x) − K_xᵀu_x, η_y = k_Y(y,y) − K_yᵀA_Y K_y.

Objectives minimised over y for each test input x (all O(N²) per evaluation):

* KLTGP   L_KL(y)  = k_Y(y,y) − 2 u_xᵀK_y − η_x log η_y.
* IKLTGP  L_IKL(y) = [k_X(x,x) − 2 K_xᵀu_y + u_yᵀK_X u_y]/η_y + log η_y,   u_y = A_Y K_y.
* SMTGP   ℓ_α(y) = log η_xy(α) − α log η_y,  η_xy(α) = K_α − K_XYᵀ M_α⁻¹ K_XY with
  M_α = (1−α)K_X + αK_Y, K_XY = (1−α)K_x + αK_y, K_α = (1−α)k_X(x,x) + αk_Y(y,y).
  The paper's L′ = (1/(β−1)) exp(−(1−β)/(2(1−α)) ℓ_α) has the same minimiser for every
  β ≠ 1 (``form="sm"`` optimises L′ itself, so β changes the path but not where it stops:
  where L′'s stopping tests have become vacuous in ℓ_α — β near 1, or L′ flattened by large
  β or α near 1 with β > 1 — the log form finishes the point; ``form="log"``, the
  default, optimises −log φ_α/(α(1−α)) = [ℓ_α − (1−α) log η_x]/(α(1−α)), which tends to
  (L_KL + const)/η_x as α → 0 and to L_IKL − 1 + const as α → 1, so its scale stays O(1)
  across α).
  ``form="det"`` (reference only) evaluates the O(N³) determinant form, the
  Sharma–Mittal divergence between N(0, K_{X∪x}) and N(0, K_{Y∪y}) itself
  (:func:`smtgp_det_objective`).

Every objective has a hand-written gradient (∂L/∂K_y then ∂K_y/∂y = −K_y (y − Y_i)/ρ_y²),
checked against autograd in the tests. Quadratic forms use precomputed dense
A_Y, M_α⁻¹ (from Cholesky factors, never ``inverse()``) so that one step for all B test
points is a single (B, N) × (N, 2N) matrix product.

Batched optimisation (``optimizer="bfgs"`` or ``"gd"``, every test point with its own BFGS
state, line search and stopping test): :mod:`tandem.inference.twin_gp.optimizer`. The Gaussian
kernel, the ridge starting point and the baselines (GPR, k-NN, kernel alignment):
:mod:`tandem.inference.twin_gp.baselines`.
"""
from __future__ import annotations

import warnings

import torch
from tqdm.auto import tqdm

from tandem.inference.distances import Standardizer, knn
from tandem.inference.numerics import DTYPE, cho_logdet, cho_solve, cholesky_jitter
from tandem.inference.twin_gp.baselines import (
    gpr_predict,
    hsic,
    kernel_alignment,
    kernel_knn_predict,
    rbf,
    ridge_predict,
    wknn_predict,
)
from tandem.inference.twin_gp.certainty import certainty, lemma41_log_bound, smtgp_det_objective
from tandem.inference.twin_gp.kernel_rows import _kvec, _mv, _RowCache, _rowdot
from tandem.inference.twin_gp.optimizer import ConvergenceWarning, IterationCapWarning, OptInfo, minimize_batched
from tandem.inference.twin_gp.sm_finish import finish_sm_in_log_form
from tandem.inference.validation import (
    as_tensor,
    check_int_range,
    check_real_range,
    check_same_rows,
    resolve_device,
)
from tandem.models.twin_gp import METHODS, validate_alpha_beta

# ConvergenceWarning, IterationCapWarning, OptInfo and minimize_batched live in .optimizer, the kernel
# and the baselines in .baselines, the certainty and the determinant forms in .certainty; all are
# re-exported here (``from tandem.inference.twin_gp.predictor import minimize_batched, rbf`` keeps working)
__all__ = ["TwinGP", "ConvergenceWarning", "IterationCapWarning", "OptInfo", "METHODS", "rbf", "ridge_predict",
           "gpr_predict", "wknn_predict", "minimize_batched", "smtgp_det_objective", "kernel_alignment", "hsic",
           "kernel_knn_predict", "certainty", "lemma41_log_bound", "validate_alpha_beta"]


# ---------------------------------------------------------------------------------------
# the twin GP
# ---------------------------------------------------------------------------------------


def _warn_unconverged(method: str, capped: torch.Tensor, stalled: torch.Tensor, max_iter: int, gtol: float) -> None:
    """One warning per kind of unconverged stop among B test points: an
    :class:`IterationCapWarning` with the count of ``capped`` (bool, (B,)) points, still
    improving at ``max_iter``, and a :class:`ConvergenceWarning` with the count of ``stalled``
    (bool, (B,)) points, whose line search failed from steepest descent below the cap."""
    B = capped.numel()
    for mask, cls, why in (
            (capped, IterationCapWarning, f"were still improving when the iteration cap max_iter={max_iter} was "
                                          "reached (their predictions are not at a minimum); raise max_iter or pass "
                                          "return_info=True to see which"),
            (stalled, ConvergenceWarning, "stopped unconverged below the iteration cap (no step along steepest "
                                          f"descent decreased the objective while its gradient was above gtol={gtol}); "
                                          "their predictions are not at a minimum: pass return_info=True to see which "
                                          "(info.stalled)")):
        n = int(mask.sum())
        if n:
            warnings.warn(cls(f"{method}: {n} of {B} test points {why}", n), stacklevel=3)


# context entries that value_and_grad_internal never reads (TwinGP._sub does not gather them)
_UNREAD_BY_OBJECTIVES = ("Kx", "Xt", "nn_index")


class TwinGP:
    """A twin GP on training pairs (X, Y): kernels, factorisations and batched prediction.

    Everything is float64.

    Units: internally X and Y are centred and divided by one scalar each (the RMS column
    standard deviation), the widths likewise. The kernels, the objectives and hence the
    minimisers are unchanged; what changes is that the optimiser's absolute quantities
    become unit-free, so ``TwinGP(c·X, c'·Y, c·ρ_x, c'·ρ_y)`` predicts c'× the outputs of
    ``TwinGP(X, Y, ρ_x, ρ_y)`` at c× the inputs, for any c, c' > 0. Public methods take and
    return data units.

    Parameters
    ----------
    X : array_like
        (N, d_x) training inputs.
    Y : array_like
        (N, d_y) training outputs.
    rho_x, rho_y : float
        Kernel widths > 0.
    lam_x : float, default 1e-4
        Input ridge λ_x > 0.
    lam_y : float, optional
        Output ridge λ_y > 0 (defaults to ``lam_x``).
    device : str or torch.device, optional
        "cpu", "cuda", or None (CPU).

    Raises
    ------
    ValueError
        On bad shapes, unequal row counts or non-positive widths/ridges, or naming ``device`` when
        it is not a cpu or cuda device that is present.
    """

    def __init__(self, X, Y, rho_x: float, rho_y: float, lam_x: float = 1e-4, lam_y: float | None = None,
                 device=None):
        X = as_tensor(X, "X", ndim=2, min_rows=2, detach=True)
        Y = as_tensor(Y, "Y", ndim=2, min_rows=2, detach=True)
        check_same_rows({"X": X, "Y": Y}, "samples (rows)")
        self.rho_x = check_real_range(rho_x, "rho_x", 0.0, low_open=True)
        self.rho_y = check_real_range(rho_y, "rho_y", 0.0, low_open=True)
        self.lam_x = check_real_range(lam_x, "lam_x", 0.0, low_open=True)
        self.lam_y = self.lam_x if lam_y is None else check_real_range(lam_y, "lam_y", 0.0, low_open=True)
        self.device = resolve_device(device)            # None: the CPU
        self.X = X.to(self.device)
        self.Y = Y.to(self.device)
        # Internal units: each side centred and divided by ONE scalar (an isotropic kernel
        # stays isotropic), the widths divided likewise, so every kernel value is unchanged
        # but the optimiser's absolute quantities (gradient tolerance, first step 1/‖g‖₁,
        # initial inverse Hessian, ridge init) no longer depend on the data's units.
        # internal units: centred, one scale per side (the RMS of the standard deviations of the
        # columns that vary: a constant column adds nothing to any kernel, so appending one
        # must not change the units, the ridge init, hence the optimiser's path)
        sx = Standardizer(self.X, per="matrix", skip_constant=True)
        sy = Standardizer(self.Y, per="matrix", skip_constant=True)
        self.x_mean, self.x_scale = sx.mean, float(sx.scale[0])
        self.y_mean, self.y_scale = sy.mean, float(sy.scale[0])
        self._X = (self.X - self.x_mean) / self.x_scale
        self._Y = (self.Y - self.y_mean) / self.y_scale
        self._rx, self._ry = self.rho_x / self.x_scale, self.rho_y / self.y_scale
        self.N, self.dx = X.shape
        self.dy = Y.shape[1]
        self.kxx = 1.0 + self.lam_x
        self.kyy = 1.0 + self.lam_y
        self._shared: dict = {}

    # -- shared (global-model) matrices, computed once and cached ----------------------
    def _eye(self, n):
        return torch.eye(n, dtype=DTYPE, device=self.device)

    def matrices(self, need=("AX",), alpha: float | None = None) -> dict:
        """Dense K_X, K_Y, A_X = K_X⁻¹, A_Y = K_Y⁻¹, [A_Y | K_X], M_α⁻¹ (cached).

        Parameters
        ----------
        need : tuple of str, default ("AX",)
            Which of "AX", "AY", "AY_KX", "Minv" to compute (K_X, K_Y and their Cholesky factors
            "LX", "LY" always are).
        alpha : float, optional
            SMTGP's α ∈ [0, 1], required for "Minv" (one α is cached at a time).

        Returns
        -------
        dict
            The cache: "KX", "KY", "LX", "LY", the requested entries, and for "Minv" the keys
            ("Minv", α), ("AY_Minv", α), ("logdetM", α).

        Raises
        ------
        ValueError
            Naming ``alpha`` when "Minv" is requested and α is not a real in [0, 1]
            (:func:`validate_alpha_beta`).
        """
        s = self._shared
        if "KX" not in s:
            s["KX"] = rbf(self._X, self._X, self._rx) + self.lam_x * self._eye(self.N)
            s["KY"] = rbf(self._Y, self._Y, self._ry) + self.lam_y * self._eye(self.N)
            s["LX"] = cholesky_jitter(s["KX"], "K_X (input kernel matrix)")
            s["LY"] = cholesky_jitter(s["KY"], "K_Y (output kernel matrix)")
        if "AX" in need and "AX" not in s:
            # explicit inverses only for matrices reused in every quadratic form (one inverse
            # turns each later solve into a product); potri costs a third of cho_solve(L, I)
            s["AX"] = torch.cholesky_inverse(s["LX"])
        if "AY" in need and "AY" not in s:
            s["AY"] = torch.cholesky_inverse(s["LY"])
        if "AY_KX" in need and "AY_KX" not in s:
            # IKLTGP's [A_Y | K_X]: its quadratic form is evaluated as (z − u_x)ᵀK_X(z − u_x)
            # with z = A_Y K_y, never through C = A_Y K_X A_Y, whose entries grow as
            # cond(K_Y)² and whose form K_yᵀC K_y cancels to O(1): that lost ~1e-6 of f's
            # relative accuracy, more than the line search can resolve
            s["AY_KX"] = torch.cat([self.matrices(("AY",))["AY"], s["KX"]], 1)
        if "Minv" in need:
            alpha, _ = validate_alpha_beta(alpha)      # a float: the cache key and M_α's weight
            key = ("Minv", alpha)
            if key not in s:
                for k in [k for k in s if isinstance(k, tuple)]:
                    del s[k]  # keep one α at a time (N² memory each)
                M = (1 - alpha) * s["KX"] + alpha * s["KY"]
                Lm = cholesky_jitter(M, "M_alpha = (1-alpha) K_X + alpha K_Y")
                Minv = torch.cholesky_inverse(Lm)
                AY = self.matrices(("AY",))["AY"]
                s[key] = Minv
                s[("AY_Minv", alpha)] = torch.cat([AY, Minv], 1)
                s[("logdetM", alpha)] = cho_logdet(Lm)
        return s

    # -- validation -------------------------------------------------------------------
    def _check_test(self, Xt, name="Xt") -> torch.Tensor:
        Xt = as_tensor(Xt, name, ndim=2)
        if Xt.shape[0] == 0:
            raise ValueError(f"{name}: expected at least one test input (row), got shape {tuple(Xt.shape)}")
        if Xt.shape[1] != self.dx:
            raise ValueError(f"{name}: test inputs have dimension {Xt.shape[1]}, but the training "
                             f"inputs X have dimension {self.dx}")
        return Xt.to(self.device)

    def _check_y(self, y, B, name="y") -> torch.Tensor:
        if not isinstance(y, torch.Tensor) or not y.requires_grad:
            y = as_tensor(y, name, ndim=2)
        if y.shape != (B, self.dy):
            raise ValueError(f"{name}: expected shape ({B}, {self.dy}), got {tuple(y.shape)}")
        return y.to(self.device)

    def to_internal_x(self, Xt: torch.Tensor) -> torch.Tensor:
        """Inputs (data units) → the internal units the kernels are evaluated in.

        Parameters
        ----------
        Xt : torch.Tensor
            (B, d_x) inputs in data units.

        Returns
        -------
        torch.Tensor
            (B, d_x) inputs in internal units.
        """
        return (Xt - self.x_mean) / self.x_scale

    def to_internal_y(self, y: torch.Tensor) -> torch.Tensor:
        """Outputs (data units) → internal units.

        Parameters
        ----------
        y : torch.Tensor
            (B, d_y) outputs in data units.

        Returns
        -------
        torch.Tensor
            (B, d_y) outputs in internal units.
        """
        return (y - self.y_mean) / self.y_scale

    def from_internal_y(self, y: torch.Tensor) -> torch.Tensor:
        """Outputs in internal units → data units.

        Parameters
        ----------
        y : torch.Tensor
            (B, d_y) outputs in internal units.

        Returns
        -------
        torch.Tensor
            (B, d_y) outputs in data units.
        """
        return y * self.y_scale + self.y_mean

    # -- per-test-point context ------------------------------------------------------
    def context(self, Xt, method: str, alpha: float = 0.5, neighbors: int | None = None,
                index: torch.Tensor | None = None) -> dict:
        """Everything an objective needs for the test inputs ``Xt`` (B, d_x).

        Global model (``neighbors=None``): shared dense matrices plus per-point K_x, u_x,
        η_x (and a_x = A_Y K_x for IKLTGP; v_x = M_α⁻¹K_x, s_x = K_xᵀv_x for SMTGP).
        Local model (``neighbors=K``): each test point gets its K nearest training points
        (Euclidean distance in input space) and per-point (B, K, K) matrices.

        Parameters
        ----------
        Xt : array_like
            (B, d_x) test inputs.
        method : {"KLTGP", "IKLTGP", "SMTGP"}
            The objective.
        alpha : float, default 0.5
            SMTGP's α (0 < α < 1).
        neighbors : int, optional
            K for the local model (None: global).
        index : torch.Tensor, optional
            Precomputed (B, K) neighbour indices for the local model.

        Returns
        -------
        dict
            The context passed to :meth:`value_and_grad` / :meth:`objective`.

        Raises
        ------
        ValueError
            On an unknown ``method`` or SMTGP at α ∈ {0, 1}.
        """
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
        a, _ = validate_alpha_beta(alpha)
        if method == "SMTGP" and a in (0.0, 1.0):
            raise ValueError("SMTGP needs 0 < alpha < 1; use method='KLTGP' (alpha -> 0) or "
                             "'IKLTGP' (alpha -> 1) for the endpoints")
        Xt = self.to_internal_x(self._check_test(Xt))
        ctx = {"method": method, "alpha": a, "B": Xt.shape[0], "Xt": Xt}
        if neighbors is None:
            need = {"KLTGP": ("AX",), "IKLTGP": ("AX", "AY", "AY_KX"), "SMTGP": ("AX", "AY", "Minv")}[method]
            s = self.matrices(need, alpha=a)
            Kx = rbf(Xt, self._X, self._rx)
            ctx["Yt"] = self._Y
            AX, KX = s["AX"], s["KX"]
            if method == "IKLTGP":
                ctx["W"] = s["AY_KX"]
            elif method == "SMTGP":
                ctx["W"] = s[("AY_Minv", a)]
                Minv = s[("Minv", a)]
            else:
                ctx["W"] = None
            ux = _mv(Kx, AX)
        else:
            k = check_int_range(neighbors, "neighbors", 2, self.N)
            idx = knn(Xt, self._X, k)  # (B, k)
            Xn, Yn = self._X[idx], self._Y[idx]
            eye = self._eye(k)
            KX = rbf(Xn, Xn, self._rx) + self.lam_x * eye
            KY = rbf(Yn, Yn, self._ry) + self.lam_y * eye
            Kx = rbf(Xt.unsqueeze(1), Xn, self._rx).squeeze(1)
            # u_x = A_X K_x by a solve: the local A_X is used for nothing else
            ux = cho_solve(cholesky_jitter(KX, "local K_X"), Kx.unsqueeze(-1)).squeeze(-1)
            ctx["Yt"] = Yn
            ctx["nn_index"] = idx
            AY = torch.cholesky_inverse(cholesky_jitter(KY, "local K_Y"))
            if method == "IKLTGP":
                ctx["W"] = torch.cat([AY, KX], 2)
            elif method == "SMTGP":
                Minv = torch.cholesky_inverse(cholesky_jitter((1 - a) * KX + a * KY, "local M_alpha"))
                ctx["W"] = torch.cat([AY, Minv], 2)
            else:
                ctx["W"] = AY
        ctx["Kx"] = Kx
        ctx["ux"] = ux
        ctx["eta_x"] = (self.kxx - (Kx * ux).sum(1)).clamp_min(self.lam_x)
        if method == "KLTGP" and neighbors is None:
            ctx["W"] = self.matrices(("AY",))["AY"]
        if method == "SMTGP":
            vx = _mv(Kx, Minv)
            ctx["vx"] = vx
            ctx["sx"] = (Kx * vx).sum(1)
        return ctx

    @staticmethod
    def _sub(ctx: dict, idx: torch.Tensor, rows: "_RowCache | None" = None) -> dict:
        """Restrict a context to the test points ``idx``; with ``rows``, the local model's
        per-point matrices W come from that cache (compacted, not gathered per call). The
        per-point entries no objective reads (K_x, the test inputs, the neighbour indices; u_x
        for SMTGP) are left out: gathering them copied two (b, N) arrays per SMTGP call."""
        out = {}
        B = ctx["B"]
        unread = _UNREAD_BY_OBJECTIVES + (("ux",) if ctx["method"] == "SMTGP" else ())
        for k, v in ctx.items():
            if k in unread:
                continue
            if rows is not None and k == "W":
                out["W"], out["W_rows"] = rows.W, rows.positions(idx)
            elif isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == B and not (
                    k in ("Yt", "W") and v.dim() == 2):
                out[k] = v[idx]
            else:
                out[k] = v
        out["B"] = int(idx.numel())
        return out

    # -- objectives --------------------------------------------------------------------
    def value_and_grad(self, y: torch.Tensor, ctx: dict, beta: float | None = None,
                       form: str = "log", ref: torch.Tensor | None = None):
        """Objective f (b,) and its hand-written gradient ∂f/∂y (b, d_y) in data units.

        At outputs y (b, d_y) in data units (the objective itself is unit-free: it only sees kernel values);
        see :meth:`value_and_grad_internal`.

        Parameters
        ----------
        y : torch.Tensor
            (b, d_y) outputs in data units.
        ctx : dict
            From :meth:`context`.
        beta : float, optional
            SMTGP's β (``form="sm"``).
        form : {"log", "sm"}, default "log"
            SMTGP's objective form.
        ref : torch.Tensor, optional
            (b,) reference ℓ_α for ``form="sm"``.

        Returns
        -------
        f : torch.Tensor
            (b,) objective values.
        g : torch.Tensor
            (b, d_y) gradients with respect to y in data units.
        """
        f, g = self.value_and_grad_internal(self.to_internal_y(y), ctx, beta=beta, form=form, ref=ref)
        return f, g / self.y_scale

    def value_and_grad_internal(self, y: torch.Tensor, ctx: dict, beta: float | None = None,
                                form: str = "log", ref: torch.Tensor | None = None, stats: dict | None = None):
        """Objective f (b,) and its hand-written gradient ∂f/∂y (b, d_y) in internal units.

        At y (b, d_y) in internal units.

        ``form`` (SMTGP only): "log" → −log φ_α/(α(1−α)); "sm" → the paper's L′ with β,
        rescaled per point by exp((1−β)/(2(1−α)) ℓ_α(ref)) (a positive constant, so the
        minimiser and the BFGS path up to scale are unchanged and nothing overflows); without
        ``ref`` the reference is ℓ_α(y) itself (f = 1/(β−1)), and ``stats``, a dict if given,
        receives it as ``stats["ell"]`` (b,).

        Cost: one (b, n) × (n, n or 2n) product Z = K_y [A_Y | ·] (IKLTGP: three (b, n) ×
        (n, n) products, z = A_Y K_y, r = K_X(z − u_x), A_Y r); everything else is a few
        passes over (b, n) arrays. ∂f/∂K_y = w is a per-row combination Σ_k c_k V_k of
        the vectors V_k ∈ {u_x, v_x, A_Y K_y, A_Y r, M_α⁻¹K_y}, so Σ_i w_i K_i (the
        first half of ∂f/∂y) is Σ_k c_k (V_k·K_y) from the row dots the value already
        needs; only Σ_i w_i K_i Y_i forms w (then ∂f/∂y = −(Σ w_i K_i y − Σ w_i K_i Y_i)/ρ²).

        Parameters
        ----------
        y : torch.Tensor
            (b, d_y) outputs in internal units.
        ctx : dict
            From :meth:`context`.
        beta : float, optional
            SMTGP's β (``form="sm"``, where it must be a finite real ≠ 1: a ``ValueError`` names it,
            :func:`validate_alpha_beta`).
        form : {"log", "sm"}, default "log"
            SMTGP's objective form (see above).
        ref : torch.Tensor, optional
            (b,) reference ℓ_α for ``form="sm"``.
        stats : dict, optional
            Receives ``stats["ell"]`` (b,) when ``ref`` is None.

        Returns
        -------
        f : torch.Tensor
            (b,) objective values.
        g : torch.Tensor
            (b, d_y) gradients with respect to y in internal units.
        """
        method, a = ctx["method"], ctx["alpha"]
        rho = self._ry
        Yt, W = ctx["Yt"], ctx["W"]
        Ky = _kvec(y, Yt, rho)
        n = Ky.shape[1]
        # one (b, n) × (n, n or 2n) product (IKLTGP: only the A_Y half here, K_X after)
        Z = _mv(Ky, W[..., :Ky.shape[1]] if method == "IKLTGP" else W, ctx.get("W_rows"))
        AKy = Z[:, :n]
        qA = _rowdot(Ky, AKy)  # K_yᵀA_Y K_y
        eta_y = self.kyy - qA
        # ∂η_y/∂K_y = g_y A_Y K_y with g_y = −2, or 0 where η_y is clamped at its λ floor
        gy = torch.where(eta_y <= self.lam_y, 0.0, -2.0).to(Ky.dtype)
        eta_y = eta_y.clamp_min(self.lam_y)
        if method == "KLTGP":
            ex = ctx["eta_x"]
            uK = _rowdot(ctx["ux"], Ky)
            f = self.kyy - 2.0 * uK - ex * eta_y.log()
            # w = −2 u_x − (η_x/η_y) ∂η_y/∂K_y
            terms = ((ctx["ux"], torch.full_like(f, -2.0), uK), (AKy, -(ex / eta_y) * gy, qA))
        elif method == "IKLTGP":
            # num = K_x(x,x) − 2K_xᵀA_Y K_y + K_yᵀA_Y K_X A_Y K_y = η_x + eᵀK_X e, e = z − u_x,
            # z = A_Y K_y: a sum of non-negative terms (η_x is fixed per point), so f keeps
            # full relative accuracy where the expanded form cancels
            rows = ctx.get("W_rows")
            e = AKy - ctx["ux"]
            r = _mv(e, W[..., n:], rows)  # K_X e
            qe = _rowdot(e, r)
            num = ctx["eta_x"] + qe
            f = num / eta_y + eta_y.log()
            # ∂num/∂K_y = 2 A_Y K_X e = 2 A_Y r (its row dot with K_y is 2 zᵀr);
            # w = 2 A_Y r/η_y + (1 − num/η_y)/η_y · ∂η_y/∂K_y
            Ar = _mv(r, W[..., :n], rows)
            terms = ((Ar, 2.0 / eta_y, _rowdot(AKy, r)), (AKy, (1.0 - num / eta_y) / eta_y * gy, qA))
        else:
            MKy = Z[:, n:]
            vK, qM = _rowdot(ctx["vx"], Ky), _rowdot(Ky, MKy)
            Ka = (1 - a) * self.kxx + a * self.kyy
            eta_xy = Ka - (1 - a) ** 2 * ctx["sx"] - 2 * a * (1 - a) * vK - a * a * qM
            floor_xy = (1 - a) * self.lam_x + a * self.lam_y
            gxy = torch.where(eta_xy <= floor_xy, 0.0, 1.0).to(Ky.dtype)  # 0 where clamped
            eta_xy = eta_xy.clamp_min(floor_xy)
            ell = eta_xy.log() - a * eta_y.log()
            # dℓ/dK_y = g_xy(−2α(1−α) v_x − 2α² M_α⁻¹K_y)/η_xy − (α/η_y) ∂η_y/∂K_y, scaled by s
            if form == "log":
                # −log φ_α = ℓ_α − (1−α) log η_x: subtracting the y-independent (1−α) log η_x
                # keeps f O(1) as α → 0 or 1, so relative stopping tests stay meaningful
                c = 1.0 / (a * (1 - a))
                f, sc = c * (ell - (1 - a) * ctx["eta_x"].log()), torch.full_like(ell, c)
            elif form == "sm":
                if beta is None:
                    raise ValueError("form='sm' needs beta")
                _, beta = validate_alpha_beta(a, beta)     # β real and ≠ 1 (L′ divides by β − 1)
                cc = (1 - beta) / (2 * (1 - a))
                ell0 = ell.detach() if ref is None else ref
                if stats is not None:
                    stats["ell"] = ell0
                Lp = torch.exp(-cc * (ell - ell0)) / (beta - 1)
                f, sc = Lp, -cc * Lp
            else:
                raise ValueError(f"form: expected 'log' or 'sm', got {form!r}")
            cx = sc * gxy / eta_xy
            terms = ((ctx["vx"], -2 * a * (1 - a) * cx, vK), (MKy, -2 * a * a * cx, qM),
                     (AKy, -(a / eta_y) * gy * sc, qA))
        # Σ_i w_i K_i from the row dots; w itself (one pass per term) only for Σ_i w_i K_i Y_i
        wK = sum(c * q for _, c, q in terms)
        w = None
        for V, c, _ in terms:
            w = V * c.unsqueeze(1) if w is None else w.addcmul_(V, c.unsqueeze(1))
        w.mul_(Ky)
        s = w @ Yt if Yt.dim() == 2 else torch.bmm(w.unsqueeze(1), Yt).squeeze(1)
        return f, -(wK.unsqueeze(1) * y - s) / (rho * rho)

    def objective(self, y: torch.Tensor, ctx: dict, beta: float | None = None, form: str = "log") -> torch.Tensor:
        """The objective as a differentiable function of y (autograd path; same formulas).

        Parameters
        ----------
        y : torch.Tensor
            (b, d_y) outputs in data units.
        ctx : dict
            From :meth:`context`.
        beta : float, optional
            SMTGP's β (``form="det"``: None gives −log c_α).
        form : {"log", "det"}, default "log"
            "det" is the O(N³) determinant form (:func:`smtgp_det_objective`, SMTGP only).

        Returns
        -------
        torch.Tensor
            (b,) objective values.

        Raises
        ------
        ValueError
            On ``form="sm"`` (path-dependent) or ``form="det"`` without SMTGP.
        """
        if form == "det":
            if ctx["method"] != "SMTGP":
                raise ValueError("form='det' is the O(N^3) Sharma-Mittal form; it needs method='SMTGP'")
            return smtgp_det_objective(self, ctx["Xt"], y, ctx["alpha"], beta)
        if form == "sm":
            raise ValueError("form='sm' is path-dependent (rescaled per point); use it via predict()")
        f, _ = self.value_and_grad(y, ctx, beta=beta, form=form)
        return f

    # -- prediction -------------------------------------------------------------------
    def predict(self, Xt, method: str = "SMTGP", alpha: float = 0.5, beta: float = 0.99,
                init=None, optimizer: str = "bfgs", form: str = "log", max_iter: int = 50,
                gtol: float = 1e-6, ftol: float = 1e-10, neighbors: int | None = None,
                batch_size: int | None = None, max_step: float | None = None, return_info: bool = False,
                progress: bool = False):
        """Batched prediction for all test inputs ``Xt`` (B, d_x) → (B, d_y).

        ``init`` defaults to ridge regression for KLTGP and to the KLTGP prediction for
        IKLTGP/SMTGP (the paper's procedure). ``batch_size`` splits the test points into
        chunks (memory); the default is all at once (one chunk of 64 for the local model).
        ``max_step`` (default ρ_y) is the trust radius of one step in output units.
        ``progress=True`` shows a tqdm bar of the test points whose optimisation has stopped
        (the KLTGP starting point of IKLTGP/SMTGP gets its own bar).

        The optimisation runs in internal units (see the class docstring), so ``gtol`` is a
        tolerance on the gradient with respect to outputs measured in units of their RMS
        spread, and the result does not depend on the data's units. Test points that are
        still moving when ``max_iter`` iterations are used up are counted and reported by an
        :class:`IterationCapWarning` (also in ``info.capped`` with ``return_info=True``).

        Parameters
        ----------
        Xt : array_like
            (B, d_x) test inputs.
        method : {"KLTGP", "IKLTGP", "SMTGP"}, default "SMTGP"
            The twin GP.
        alpha, beta : float, default 0.5 and 0.99
            SMTGP's order parameters.
        init : array_like, optional
            (B, d_y) starting points (default above).
        optimizer : {"bfgs", "gd"}, default "bfgs"
            See :func:`~tandem.inference.twin_gp.optimizer.minimize_batched`.
        form : {"log", "sm"}, default "log"
            SMTGP's objective form. ``"sm"`` runs the paper's L′ (β sets the path); points where
            L′'s stopping tests say little about ℓ_α (β near 1, L′ flattened by large β) are
            finished in the log form, with its flags in ``info``, so every β stops at ℓ_α's minimiser.
        max_iter : int, default 50
            Iterations per test point at most.
        gtol, ftol : float, default 1e-6 and 1e-10
            Gradient and relative-change tolerances.
        neighbors : int, optional
            Local model with K nearest training points (None: global).
        batch_size : int, optional
            Test points per chunk.
        max_step : float, optional
            Trust radius in output units (default ρ_y).
        return_info : bool, default False
            Also return an :class:`OptInfo`.
        progress : bool, default False
            Show tqdm bars.

        Returns
        -------
        y : torch.Tensor
            (B, d_y) predictions in data units.
        info : OptInfo
            Only with ``return_info=True``.

        Raises
        ------
        ValueError
            On an unknown ``method``/``optimizer``/``form`` or bad tolerances and shapes.

        Warns
        -----
        IterationCapWarning
            Points still improving at ``max_iter``.
        ConvergenceWarning
            Points whose line search failed from steepest descent below the cap.
        """
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
        a, b = validate_alpha_beta(alpha, beta)
        if optimizer not in ("bfgs", "gd"):
            raise ValueError(f"optimizer: expected 'bfgs' or 'gd', got {optimizer!r}")
        if form not in ("log", "sm"):
            raise ValueError(f"form: expected 'log' or 'sm', got {form!r}")
        max_iter = check_int_range(max_iter, "max_iter", 1)
        gtol = check_real_range(gtol, "gtol", 0.0)
        ftol = check_real_range(ftol, "ftol", 0.0)
        Xt = self._check_test(Xt)
        B = Xt.shape[0]
        if init is None:
            init = self.from_internal_y(ridge_predict(self._X, self._Y, self.to_internal_x(Xt)))
            if method != "KLTGP":
                init = self.predict(Xt, "KLTGP", init=init, optimizer=optimizer, max_iter=max_iter,
                                    gtol=gtol, ftol=ftol, neighbors=neighbors, batch_size=batch_size,
                                    max_step=max_step, progress=progress)
        init = self.to_internal_y(self._check_y(init, B, "init"))
        if batch_size is None:
            batch_size = B if neighbors is None else 64
        batch_size = check_int_range(batch_size, "batch_size", 1)
        if max_step is not None:
            max_step = check_real_range(max_step, "max_step", 0.0, low_open=True) / self.y_scale
        outs, infos = [], []
        bar = tqdm(total=B, desc=f"{method} predict", unit="pt", leave=False) if progress else None
        for start in range(0, B, batch_size):
            sl = slice(start, min(B, start + batch_size))
            ctx = self.context(Xt[sl], method, a, neighbors=neighbors)
            y0 = init[sl]
            # form="sm" rescales each point by its ℓ_α(y0): the optimiser's first call (all
            # points, at y0) evaluates with ref = ℓ_α itself and records it for the later calls
            ref = {} if form == "sm" else None

            rows = _RowCache(ctx["W"]) if ctx["W"] is not None and ctx["W"].dim() == 3 else None

            def fg(y, idx, ctx=ctx, ref=ref, rows=rows):
                sub = self._sub(ctx, idx, rows)
                if ref is None:
                    return self.value_and_grad_internal(y, sub, beta=b, form=form)
                if "ell" not in ref:
                    return self.value_and_grad_internal(y, sub, beta=b, form=form, stats=ref)
                return self.value_and_grad_internal(y, sub, beta=b, form=form, ref=ref["ell"][idx])
            with torch.no_grad():
                y, info = minimize_batched(fg, y0, optimizer=optimizer, max_iter=max_iter, gtol=gtol,
                                           ftol=ftol, max_step=self._ry if max_step is None else max_step,
                                           progress=bar, on_active=None if rows is None else rows.shrink_to)
                if form == "sm":
                    y, info = finish_sm_in_log_form(self, y, info, ctx, a, b, ref["ell"], optimizer, max_iter, gtol,
                                                    ftol, self._ry if max_step is None else max_step)
            outs.append(y)
            infos.append(info)
        if bar is not None:
            bar.close()
        y = self.from_internal_y(torch.cat(outs))
        capped = torch.cat([i.capped for i in infos])
        stalled = torch.cat([i.stalled for i in infos])
        _warn_unconverged(method, capped, stalled, max_iter, gtol)
        if not return_info:
            return y
        info = OptInfo(torch.cat([i.n_iter for i in infos]), sum(i.n_eval for i in infos),
                       torch.cat([i.f for i in infos]), torch.cat([i.grad_inf for i in infos]) / self.y_scale,
                       torch.cat([i.converged for i in infos]), sum(i.wall_time for i in infos), capped,
                       stalled=stalled, n_restart=torch.cat([i.n_restart for i in infos]))
        return y, info

    def reference_predict(self, Xt, method: str = "SMTGP", alpha: float = 0.5, init=None,
                          max_iter: int = 500) -> torch.Tensor:
        """Deterministic reference prediction by plain torch L-BFGS.

        Strong Wolfe line search, one test point at a time, on the autograd objective, to tight
        tolerances (cross-checks SVI/batched).

        Parameters
        ----------
        Xt : array_like
            (B, d_x) test inputs.
        method : {"KLTGP", "IKLTGP", "SMTGP"}, default "SMTGP"
            The twin GP.
        alpha : float, default 0.5
            SMTGP's α.
        init : array_like, optional
            (B, d_y) starting points (default: KLTGP's prediction, or ridge for KLTGP).
        max_iter : int, default 500
            L-BFGS iterations per point.

        Returns
        -------
        torch.Tensor
            (B, d_y) predictions in data units.
        """
        a, _ = validate_alpha_beta(alpha)
        check_int_range(max_iter, "max_iter", 1)
        Xt = self._check_test(Xt)
        if init is None:
            init = self.predict(Xt, "KLTGP") if method != "KLTGP" else self.from_internal_y(
                ridge_predict(self._X, self._Y, self.to_internal_x(Xt)))
        init = self._check_y(init, Xt.shape[0], "init")
        out = []
        for i in range(Xt.shape[0]):
            ctx = self.context(Xt[i:i + 1], method, a)
            y = init[i:i + 1].clone().requires_grad_(True)
            opt = torch.optim.LBFGS([y], lr=1.0, max_iter=max_iter, tolerance_grad=1e-12,
                                    tolerance_change=1e-15, history_size=50, line_search_fn="strong_wolfe")

            def closure():
                opt.zero_grad()
                v = self.objective(y, ctx).sum()
                v.backward()
                return v
            opt.step(closure)
            out.append(y.detach())
        return torch.cat(out)

    # -- certainty (Lemma 4.1 / 4.2) ----------------------------------------------------
    def log_certainty(self, Xt, y, alpha: float) -> torch.Tensor:
        """log φ_α = (1−α) log η_x + α log η_y − log η_xy(α) per test point (B,).

        Parameters
        ----------
        Xt : array_like
            (B, d_x) test inputs.
        y : array_like
            (B, d_y) outputs.
        alpha : float
            α in (0, 1).

        Returns
        -------
        torch.Tensor
            (B,) log φ_α; see :func:`certainty`.
        """
        return certainty(self, Xt, y, alpha)
