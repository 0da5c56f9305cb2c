"""Leave-one-out cross-validation for variational fits: PSIS-LOO with the importance ratios p/q.

A variational fit gives draws θ_s ~ q(θ), not p(θ | y). Plain PSIS-LOO (``az.loo``) treats them
as posterior draws and uses the ratios 1 / p(y_i | θ_s); its answer is the LOO of q, not of the
model, and its Pareto k̂ only checks the leave-one-out step, not how far q is from p(θ | y).
Here the exported draws carry, in ``sample_stats``, ``lp`` = log p(θ_s, y) (the model's joint
density of the latents and all observations, discrete latents summed out) and ``log_q`` =
log q(θ_s) (the guide's density), so the leave-one-out posterior is reached from q directly:

    r_{s,i} = p(θ_s | y_{-i}) / q(θ_s) ∝ p(θ_s, y) / (q(θ_s) p(y_i | θ_s)),

    elpd_i = log Σ_s w̃_{s,i} p(y_i | θ_s),   elpd = Σ_i elpd_i,

with w̃_{·,i} the Pareto-smoothed, self-normalised ratios r_{·,i} (Vehtari, Gelman & Gabry 2017,
"Practical Bayesian model evaluation using leave-one-out cross-validation and WAIC"; Vehtari,
Simpson, Gelman, Yao & Gabry 2024, "Pareto smoothed importance sampling"). This is the estimator
of Pyro's ``psis_diagnostic`` and of arviz-stats' LOO for approximate posteriors (Magnusson et
al. 2019). Two diagnostics are reported: k̂_i, the Pareto shape of each r_{·,i}, and k̂_q, the
Pareto shape of the full-data ratios p(θ_s, y) / q(θ_s) (Yao et al. 2018, "Yes, but did it
work?"): k̂ > 0.7 means the importance-sampling estimate is unreliable, and :func:`loo` warns.

PSIS is implemented here (:func:`psis`), not taken from ArviZ, so the numbers are the same under
ArviZ 0.x and 1.x: the largest M = min(S/5, 3√S) log-ratios are replaced by the expected order
statistics of a generalized Pareto distribution fitted to them by the method of Zhang & Stephens
(2009) with the weakly informative prior of Vehtari et al. (shape shrunk towards 0.5 with weight
10), truncated at the largest raw ratio.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from numbers import Real

import numpy as np

from tandem.inference.params import Interval, validate_params

__all__ = ["psis", "gpd_fit", "loo", "compare", "LOOResult", "K_THRESHOLD"]

#: Pareto k̂ above which an importance-sampling estimate is reported as unreliable.
K_THRESHOLD = 0.7

#: declared constraints of :func:`psis`'s keyword parameters
PSIS_CONSTRAINTS = {"r_eff": [Interval(Real, 0, None, closed="neither")]}


def gpd_fit(x: np.ndarray) -> tuple[float, float]:
    """Fit a generalized Pareto distribution to positive exceedances.

    Empirical-Bayes estimate of Zhang & Stephens (2009): a grid of θ = −k/σ values, each
    weighted by its profile likelihood, gives the posterior mean θ̄; then k̂ = mean log(1 − θ̄x)
    and σ = −k̂/θ̄. The shape is shrunk towards 0.5 as k ← (n k + 10·0.5)/(n + 10) (the weak
    prior of Vehtari et al. 2024).

    Parameters
    ----------
    x : numpy.ndarray
        (n,) positive exceedances over the tail cut-off, sorted ascending.

    Returns
    -------
    k : float
        The (shrunk) shape k̂.
    sigma : float
        The scale σ.
    """
    x = np.asarray(x, dtype=float)
    n = x.size
    m = 30 + int(math.sqrt(n))
    # grid of θ = −k/σ values (Zhang & Stephens' profile), centred on the data's scale
    theta = 1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))
    theta = theta / (3.0 * x[int(n / 4 + 0.5) - 1]) + 1.0 / x[-1]
    k = np.log1p(-theta[:, None] * x).mean(axis=1)                 # profile shape for each θ
    prof = n * (np.log(-theta / k) - k - 1.0)                       # profile log-likelihood
    with np.errstate(over="ignore"):                                # exp overflow → inf → weight 0
        w = 1.0 / np.exp(prof[None, :] - prof[:, None]).sum(axis=1)  # posterior weights over the grid
    keep = w >= 10 * np.finfo(float).eps
    theta, w = theta[keep], w[keep] / w[keep].sum()
    theta_post = float((theta * w).sum())
    k_hat = float(np.log1p(-theta_post * x).mean())
    sigma = -k_hat / theta_post
    k_hat = (n * k_hat + 10 * 0.5) / (n + 10)
    return k_hat, sigma


def _gpd_quantile(p: np.ndarray, k: float, sigma: float) -> np.ndarray:
    if abs(k) < 1e-12:
        return -sigma * np.log1p(-p)
    return sigma * np.expm1(-k * np.log1p(-p)) / k


#: relative spread of log ratios below which they count as constant (round-off of lp − log_q)
_FLAT_RTOL = math.sqrt(np.finfo(float).eps)


def psis(log_ratios: np.ndarray, r_eff: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Pareto-smoothed importance sampling.

    Per column, the M = ⌈min(S/5, 3√(S/r_eff))⌉ largest ratios are replaced by the expected
    order statistics of a generalized Pareto fit to them (:func:`gpd_fit`), truncated at the
    largest raw ratio, and the log weights are normalised over the draws.

    A column whose log ratios are constant up to round-off (spread max − min at most
    √ε · max(1, max |log r|), e.g. p(θ, y)/q(θ) of a guide equal to the posterior) has equal
    weights: they are exact, so it gets k̂ = −inf (no tail at all) and its weights are
    returned unsmoothed. ``az.psislw`` reports ``inf`` there (fewer than 5 ratios above the
    cut-off); everywhere else the two agree.

    Parameters
    ----------
    log_ratios : numpy.ndarray
        (S,) or (S, n) log importance ratios, one column per target distribution, S ≥ 2 draws,
        all finite.
    r_eff : float, default 1.0
        Relative efficiency of the draws (1 for independent draws): a finite number > 0.

    Returns
    -------
    log_weights : numpy.ndarray
        Same shape as ``log_ratios``, normalised so that logsumexp over the draws is 0.
    k_hat : numpy.ndarray or float
        (n,) Pareto shape per column (a float for 1-d input); ``-inf`` for a (near-)constant
        column (above); ``inf`` when otherwise fewer than 5 ratios exceed the tail cut-off (no
        smoothing then).

    Raises
    ------
    ValueError
        If ``log_ratios`` has the wrong shape or non-finite entries, or ``r_eff`` is not a finite
        number > 0 (``PSIS_CONSTRAINTS``).
    """
    validate_params(PSIS_CONSTRAINTS, {"r_eff": r_eff}, "psis: ")
    lr = np.asarray(log_ratios, dtype=float)
    one = lr.ndim == 1
    lr = lr[:, None] if one else lr
    if lr.ndim != 2 or lr.shape[0] < 2:
        raise ValueError(f"log_ratios: expected shape (S,) or (S, n) with S >= 2 draws, got {lr.shape}")
    if not np.all(np.isfinite(lr)):
        raise ValueError("log_ratios: expected finite values (got NaN or inf)")
    S, n = lr.shape
    M = int(math.ceil(min(0.2 * S, 3.0 * math.sqrt(S / r_eff))))
    out, ks = np.empty_like(lr), np.empty(n)
    for j in range(n):
        v = lr[:, j] - lr[:, j].max()
        if -v.min() <= _FLAT_RTOL * max(1.0, float(np.abs(lr[:, j]).max())):
            # equal ratios up to round-off: the weights are exact, there is no tail to fit (a
            # GPD fit to round-off noise would report k̂ = inf, a false alarm)
            ks[j] = -np.inf
            out[:, j] = v - _logsumexp(v)
            continue
        order = np.argsort(v)
        cut = max(v[order[-M - 1]], math.log(np.finfo(float).tiny))
        tail = order[v[order] > cut]
        if tail.size <= 4:
            ks[j] = np.inf
        else:
            ec = math.exp(cut)
            k, sigma = gpd_fit(np.exp(v[tail]) - ec)
            ks[j] = k
            if np.isfinite(k):
                p = (np.arange(1, tail.size + 1) - 0.5) / tail.size
                smooth = np.log(_gpd_quantile(p, k, sigma) + ec)
                v = v.copy()
                v[tail] = np.minimum(smooth, 0.0)                   # truncate at the largest raw ratio
        out[:, j] = v - _logsumexp(v)
    return (out[:, 0], float(ks[0])) if one else (out, ks)


def _logsumexp(a, axis=0):
    m = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(m, axis=axis) + np.log(np.exp(a - m).sum(axis=axis))


@dataclass
class LOOResult:
    """Result of :func:`loo`.

    Attributes
    ----------
    elpd : float
        Σ_i elpd_i, the estimated expected log pointwise predictive density.
    se : float
        Its standard error over points, √(n Var_i elpd_i).
    mcse : float
        Monte Carlo standard error of ``elpd`` (delta method over the shared draws).
    p_loo : float
        lppd − elpd, the effective number of parameters (lppd also importance-weighted).
    pointwise : numpy.ndarray
        elpd_i of every entry of the log-likelihood variables (flattened and concatenated); NaN
        at an entry the model masks (NaN in the log-likelihood), which is not a point.
    k_hat : numpy.ndarray
        Per-entry Pareto k̂, aligned with ``pointwise`` (NaN at masked entries).
    k_hat_q : float
        k̂ of the ratios p(θ, y)/q(θ) (−inf when they are constant: the guide is the posterior).
    warning : bool
        True when any k̂ exceeds ``K_THRESHOLD`` (0.7).
    n_samples, n_points : int
        Number of draws S and of points n (the scored entries; masked entries are not counted).
    var_names : list of str
        The log-likelihood variables whose entries are the points.
    """
    elpd: float
    se: float
    mcse: float
    p_loo: float
    pointwise: np.ndarray
    k_hat: np.ndarray
    k_hat_q: float
    warning: bool
    n_samples: int
    n_points: int
    var_names: list

    def __repr__(self):
        return (f"LOOResult(elpd={self.elpd:.3f}, se={self.se:.3f}, mcse={self.mcse:.3f}, p_loo={self.p_loo:.3f}, "
                f"max k_hat={np.nanmax(self.k_hat):.2f}, k_hat_q={self.k_hat_q:.2f}, n_samples={self.n_samples}, "
                f"n_points={self.n_points})")


def _group(idata, name):
    try:
        g = idata[name]
    except (KeyError, AttributeError):
        return None
    return getattr(g, "ds", g)           # DataTree node → Dataset (ArviZ 1.x)


def _flat_draws(da) -> np.ndarray:
    a = np.asarray(da.values, dtype=float)
    return a.reshape(a.shape[0] * a.shape[1], -1)


def loo(idata, var_name: str | list[str] | None = None, warn: bool = True) -> LOOResult:
    """PSIS-LOO of a variational fit, importance-weighted from q to each p(θ | y_{−i}).

    The ratios are log r_{s,i} = lp_s − log_q_s − log p(y_i | θ_s), Pareto-smoothed per point
    (:func:`psis`); elpd_i = log Σ_s w̃_{s,i} p(y_i | θ_s). A per-point k̂ or the k̂ of p/q above
    0.7 means the guide is too far from the posterior for the estimate to be trusted; an exact
    guide has constant p/q and k̂ of p/q = −inf (no warning).

    Entries of the log-likelihood that are NaN in every draw are entries the model masks
    (missing data, ``poutine.mask`` or ``Distribution.mask``; see
    :func:`tandem.inference.predictive.draw`): they are not points, so the result equals that of
    the model with only the scored entries (their ``pointwise`` and ``k_hat`` are NaN).

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        An export of :func:`tandem.inference.posterior_predictive` or an estimator's
        ``to_inference_data`` (ArviZ 0.x or 1.x), with a ``log_likelihood`` group and
        ``sample_stats`` ``lp`` = log p(θ, y) and ``log_q`` = log q(θ) per draw.
    var_name : str or list of str, optional
        The log-likelihood variable(s) whose entries are the points (default: all, flattened and
        concatenated).
    warn : bool, default True
        Emit a ``UserWarning`` when a k̂ exceeds 0.7.

    Returns
    -------
    LOOResult
        elpd, its standard and Monte Carlo errors, p_loo, pointwise values and k̂.

    Raises
    ------
    ValueError
        If the export lacks the log-likelihood group or ``lp``/``log_q``, names an unknown
        variable, holds non-finite ``lp``/``log_q``, has an entry that is NaN in some draws only,
        or has no scored entry.
    """
    ll = _group(idata, "log_likelihood")
    ss = _group(idata, "sample_stats")
    if ll is None or not list(ll.data_vars):
        raise ValueError("loo: idata has no log_likelihood group (pointwise log p(y_i | θ) per draw)")
    if ss is None or "lp" not in ss or "log_q" not in ss:
        raise ValueError("loo: idata.sample_stats needs 'lp' (log p(θ, y)) and 'log_q' (log q(θ)) per draw; "
                         "exports of tandem.inference.posterior_predictive store them")
    names = list(ll.data_vars) if var_name is None else ([var_name] if isinstance(var_name, str) else list(var_name))
    for nm in names:
        if nm not in ll:
            raise ValueError(f"var_name: {nm!r} is not in the log_likelihood group (has {list(ll.data_vars)})")
    L_all = np.concatenate([_flat_draws(ll[nm]) for nm in names], axis=1)      # (S, entries)
    nan = np.isnan(L_all)
    scored = ~nan.all(axis=0)            # masked entries are NaN in every draw: not points
    if nan[:, scored].any():
        raise ValueError(f"log_likelihood {names}: entries NaN in some draws only (a masked entry is NaN in every "
                         "draw); the model's log-density is not finite there")
    if not scored.any():
        raise ValueError(f"log_likelihood {names}: every entry is NaN (masked); there is no point to leave out")
    L = L_all[:, scored]                                                       # (S, n)
    lp = np.asarray(ss["lp"].values, dtype=float).reshape(-1)
    lq = np.asarray(ss["log_q"].values, dtype=float).reshape(-1)
    S, n = L.shape
    if lp.size != S or lq.size != S:
        raise ValueError(f"sample_stats lp/log_q: expected {S} draws, got {lp.size}/{lq.size}")
    if not (np.all(np.isfinite(lp)) and np.all(np.isfinite(lq))):
        raise ValueError("sample_stats lp/log_q: expected finite values; the export could not evaluate "
                         "log p(θ, y) or log q(θ) for some draws")
    base = lp - lq
    lw_full, k_q = psis(base)
    lw, k = psis(base[:, None] - L)                                            # (S, n)
    elpd_i = _logsumexp(lw + L, axis=0)
    lppd_i = _logsumexp(lw_full[:, None] + L, axis=0)
    # Monte Carlo error (delta method): δ elpd ≈ Σ_s Σ_i w̄_{s,i} (p(y_i|θ_s)/μ_i − 1)
    w = np.exp(lw)
    g = (w * np.expm1(L - elpd_i[None, :])).sum(axis=1)
    mcse = float(np.sqrt((g ** 2).sum()))
    bad = bool(np.any(k > K_THRESHOLD) or k_q > K_THRESHOLD)
    if bad and warn:
        warnings.warn(f"loo: Pareto k̂ > {K_THRESHOLD} (max per-point k̂ {np.max(k):.2f}, k̂ of p/q {k_q:.2f}): "
                      "the importance-sampling estimate is unreliable; the guide is too far from the posterior "
                      "(try a richer guide or more draws)", UserWarning, stacklevel=2)
    pointwise, k_full = np.full(scored.size, np.nan), np.full(scored.size, np.nan)
    pointwise[scored], k_full[scored] = elpd_i, k
    return LOOResult(elpd=float(elpd_i.sum()), se=float(math.sqrt(n * np.var(elpd_i))), mcse=mcse,
                     p_loo=float(lppd_i.sum() - elpd_i.sum()), pointwise=pointwise, k_hat=k_full, k_hat_q=float(k_q),
                     warning=bad, n_samples=S, n_points=n, var_names=names)


def compare(fits, var_name=None):
    """Rank several fits by :func:`loo`.

    Parameters
    ----------
    fits : dict or list
        ``{name: idata or LOOResult}``, or a list of them (named ``model_0``, ``model_1``, ...);
        at least two.
    var_name : str or list of str, optional
        Passed to :func:`loo` for exports that are not yet a :class:`LOOResult`.

    Returns
    -------
    pandas.DataFrame
        One row per fit, sorted by elpd (best first), with columns ``elpd``, ``se``, ``d_elpd``
        (best − this), ``d_se`` (√(n Var_i) of the pointwise difference; NaN when the fits have
        different points, masked entries left out), ``p_loo``, ``mcse``, ``max_k_hat``, ``k_hat_q``, ``warning``.

    Raises
    ------
    TypeError
        If ``fits`` is neither a dict nor a list.
    ValueError
        If fewer than two fits are given.
    """
    import pandas as pd

    if isinstance(fits, dict):
        items = list(fits.items())
    elif isinstance(fits, (list, tuple)):
        items = [(f"model_{i}", f) for i, f in enumerate(fits)]
    else:
        raise TypeError(f"fits: expected a dict or a list of ArviZ exports, got {type(fits).__name__}")
    if len(items) < 2:
        raise ValueError(f"fits: expected at least two fits to compare, got {len(items)}")
    res = {nm: (f if isinstance(f, LOOResult) else loo(f, var_name=var_name)) for nm, f in items}
    best = max(res, key=lambda nm: res[nm].elpd)
    rows = []
    for nm, r in res.items():
        b = res[best]
        same = r.pointwise.shape == b.pointwise.shape and np.array_equal(np.isnan(r.pointwise), np.isnan(b.pointwise))
        if r.n_points == b.n_points and same:
            diff = b.pointwise - r.pointwise
            diff = diff[~np.isnan(diff)]                   # masked entries are not points
            d_se = float(math.sqrt(r.n_points * np.var(diff)))
        else:
            d_se = float("nan")
        rows.append({"model": nm, "elpd": r.elpd, "se": r.se, "d_elpd": b.elpd - r.elpd, "d_se": d_se,
                     "p_loo": r.p_loo, "mcse": r.mcse, "max_k_hat": float(np.nanmax(r.k_hat)),
                     "k_hat_q": r.k_hat_q, "warning": r.warning})
    return pd.DataFrame(rows).set_index("model").sort_values("elpd", ascending=False)
