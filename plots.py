"""Plotting helpers for tandem's four models and the SVI driver (matplotlib only).

Every function takes data or a fitted object and an optional matplotlib ``ax`` (or ``fig``
for the multi-panel ones), draws, labels every axis it draws, and returns the Axes (or the
Figure). Nothing is shown or saved: call ``fig.savefig`` yourself. The figures of the
documentation's gallery are drawn by these functions (``python docs/make_gallery.py``).

============================  =====================================================
:func:`plot_loss`             loss trace of any :class:`~tandem.inference.svi.FitResult`
                              (or anything with ``losses``)
:func:`plot_relevance`        McGPDS: per-view α and ARD relevance of each latent dimension
:func:`plot_latents`          McGPDS: shared (or one view's private) latents over time, ±2 sd
:func:`plot_prediction`       a predicted view against the truth over time, ±2 sd bands
:func:`plot_twin_gp`          twin-GP predictions against the truth (per output or vs the input)
:func:`plot_relatedness`      SAMTC: relatedness R[t, s] between tasks
:func:`plot_confusion`        one task's confusion (contingency) matrix, clusters matched
:func:`plot_task_confusions`  SAMTC: one confusion matrix per task (a Figure)
:func:`plot_embedding`        coupled projections: joint embedding with correspondence lines
============================  =====================================================
"""
from __future__ import annotations

import numpy as np

__all__ = ["plot_loss", "plot_relevance", "plot_latents", "plot_prediction", "plot_twin_gp",
           "plot_relatedness", "plot_confusion", "plot_task_confusions", "plot_embedding"]


def _plt():
    import matplotlib.pyplot as plt
    return plt


def _axes(ax, figsize=(5, 3.5)):
    if ax is None:
        _, ax = _plt().subplots(figsize=figsize)
    return ax


def _np(x, name: str, ndim: int | tuple | None = None) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: expected an array of numbers, got {type(x).__name__}") from e
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if a.ndim not in allowed:
            raise ValueError(f"{name}: expected {' or '.join(f'{n}-d' for n in allowed)} array, got shape {a.shape}")
    return a


# --- driver -------------------------------------------------------------------------------

def plot_loss(result, ax=None, *, label: str | None = None, log: bool | None = None):
    """Loss per step of a fit.

    Parameters
    ----------
    result : tandem.inference.svi.FitResult, tandem.inference.mcgpds.McGPDS or array (S,)
        A :class:`~tandem.inference.svi.FitResult`, a fitted McGPDS (the object or its
        ``fitted_``), anything with a ``losses`` array, or the losses themselves.
    ax : matplotlib Axes, optional
        Where to draw (default: a new figure).
    label : str, optional
        Legend entry of the trace.
    log : bool, optional
        Logarithmic y axis; default when every loss is positive and they span more than
        two decades.

    Returns
    -------
    matplotlib Axes
    """
    src = getattr(result, "fitted_", result)
    losses = _np(getattr(src, "losses", src), "losses", ndim=1)
    if losses.size == 0:
        raise ValueError("losses: the fit recorded no steps")
    ax = _axes(ax)
    ax.plot(np.arange(1, losses.size + 1), losses, lw=1.2, label=label)
    finite = losses[np.isfinite(losses)]
    if log is None:
        log = finite.size > 0 and finite.min() > 0 and finite.max() / finite.min() > 100
    if log:
        ax.set_yscale("log")
    ax.set(xlabel="step", ylabel="loss (negative ELBO / bound)", title="loss trace")
    if label is not None:
        ax.legend(fontsize=8)
    return ax


# --- McGPDS -------------------------------------------------------------------------------

def _mcgpds_fitted(model):
    fitted = getattr(model, "fitted_", model)
    if not (hasattr(fitted, "params") and hasattr(fitted, "data")):
        raise TypeError(f"model: expected a fitted McGPDS (or McGPDSFitted), got {type(model).__name__}")
    return fitted


def plot_relevance(model=None, ax=None, *, alpha=None, ard=None):
    """McGPDS: α of each view and the ARD relevance of each latent dimension, any number of views.

    Relevance of latent dimension q in view k is the mapping kernel's ARD weight w_q^(k)
    (``kh_ard_k``: the inverse squared length scale of k_h(x, x') = σ² exp(−½ Σ_q w_q (x_q − x'_q)²))
    divided by its largest weight, so 1 marks the most relevant dimension of that view and
    ≈ 0 a dimension the view ignores (the reading of MRD's ``plot_scales``). Bars are grouped
    by dimension, one colour per view, with α_k in the legend (the private latent of view k
    has prior mean (1 − α_k) x^(s): α_k → 0 ties view k to the shared latent, α_k → 1
    decouples it).

    Parameters
    ----------
    model : tandem.inference.mcgpds.McGPDS or tandem.inference.mcgpds.McGPDSFitted, optional
        A fitted model; or give ``alpha`` and ``ard``.
    ax : matplotlib Axes, optional
    alpha : array (V,), optional
        α of each view.
    ard : array (V, Q), optional
        ARD weights of each view's mapping kernel (non-negative).

    Returns
    -------
    matplotlib Axes
    """
    if model is not None:
        f = _mcgpds_fitted(model)
        V = f.data.V
        alpha = [float(f.params[f"alpha_{k}"]) for k in range(V)]
        ard = [_np(f.params[f"kh_ard_{k}"], f"kh_ard_{k}", ndim=1) for k in range(V)]
    if alpha is None or ard is None:
        raise ValueError("plot_relevance: give a fitted model, or both alpha (V,) and ard (V, Q)")
    ard = _np(ard, "ard", ndim=2)
    alpha = _np(alpha, "alpha", ndim=1)
    if alpha.shape[0] != ard.shape[0]:
        raise ValueError(f"alpha has {alpha.shape[0]} views but ard has {ard.shape[0]} rows")
    if (ard < 0).any() or not np.isfinite(ard).all():
        raise ValueError("ard: ARD weights must be finite and non-negative")
    V, Q = ard.shape
    rel = ard / np.maximum(ard.max(1, keepdims=True), np.finfo(float).tiny)
    ax = _axes(ax, (max(4.0, 0.9 * Q + 2), 3.2))
    width = 0.8 / V
    for k in range(V):
        ax.bar(np.arange(Q) + (k - (V - 1) / 2) * width, rel[k], width, color=f"C{k}",
               label=f"view {k + 1} (α = {alpha[k]:.2f})")
    ax.set_xticks(np.arange(Q), [f"q={q + 1}" for q in range(Q)])
    ax.set(xlabel="latent dimension", ylabel="ARD relevance (w_q / max w)", ylim=(0, 1.08),
           title="per-view relevance of the latent dimensions")
    ax.legend(fontsize=8)
    return ax


def plot_latents(model=None, times=None, ax=None, *, mean=None, var=None, view: int | None = None,
                 dims=None, truth=None):
    """Latent trajectories over time with ±2 sd bands.

    Parameters
    ----------
    model : tandem.inference.mcgpds.McGPDS or tandem.inference.mcgpds.McGPDSFitted, optional
        A fitted model: its shared latents μ^(s) (N, Q) with variances S^(s) (``view=None``)
        or view ``view``'s private latents; or give ``mean`` (and ``var``).
    times : array (N,), optional
        Time stamps; default the model's (else 0..N−1).
    ax : matplotlib Axes, optional
    mean : array (N, Q), optional
    var : array (N,) or (N, Q), optional
        Variances of ``mean``; the bands are ±2 sd.
    view : int, optional
        0-based view whose private latents are drawn (default: the shared latents).
    dims : sequence of int, optional
        Latent dimensions to draw (default all).
    truth : array (N,), optional
        A reference signal, drawn with its least-squares linear read-out from the drawn
        latents (latents are identified only up to an invertible linear map).

    Returns
    -------
    matplotlib Axes
    """
    if model is not None:
        f = _mcgpds_fitted(model)
        if view is None:
            mean, var = f.mu_s, f.s_s
        else:
            if not 0 <= view < len(f.mu):
                raise ValueError(f"view: expected 0..{len(f.mu) - 1}, got {view}")
            mean, var = f.mu[view], f.s_diag[view]
        if times is None:
            times = f.times
    if mean is None:
        raise ValueError("plot_latents: give a fitted model or mean (N, Q)")
    mean = _np(mean, "mean", ndim=2)
    N, Q = mean.shape
    t = np.arange(N, dtype=float) if times is None else _np(times, "times").reshape(-1)
    if t.shape[0] != N:
        raise ValueError(f"times has {t.shape[0]} entries but the latents have {N} rows")
    sd = None
    if var is not None:
        v = _np(var, "var", ndim=(1, 2))
        sd = np.sqrt(np.broadcast_to(v[:, None] if v.ndim == 1 else v, (N, Q)))
    dims = range(Q) if dims is None else list(dims)
    ax = _axes(ax, (6, 3.2))
    for q in dims:
        ax.plot(t, mean[:, q], color=f"C{q}", lw=1.2, label=f"μ, q={q + 1}")
        if sd is not None:
            ax.fill_between(t, mean[:, q] - 2 * sd[:, q], mean[:, q] + 2 * sd[:, q], color=f"C{q}", alpha=0.15,
                            lw=0)
    if truth is not None:
        s = _np(truth, "truth", ndim=1)
        if s.shape[0] != N:
            raise ValueError(f"truth has {s.shape[0]} entries but the latents have {N} rows")
        A = np.c_[mean[:, list(dims)], np.ones(N)]
        coef, *_ = np.linalg.lstsq(A, s, rcond=None)
        ax.plot(t, s, "k-", lw=1.5, label="truth")
        ax.plot(t, A @ coef, "k--", lw=1.2, label="linear read-out of μ")
    which = "shared" if view is None else f"view {view + 1} private"
    ax.set(xlabel="time", ylabel="latent value", title=f"{which} latents (±2 sd)")
    ax.legend(fontsize=7, ncol=2)
    return ax


def plot_prediction(prediction=None, truth=None, times=None, ax=None, *, mean=None, var=None, dims=(0, 1, 2),
                    label: str | None = None, color=None):
    """A predicted view against the truth over time with ±2 sd bands.

    Parameters
    ----------
    prediction : object with ``mean``, ``var`` (N*, D), optional
        E.g. ``McGPDS.predict``'s result; or give ``mean`` (and ``var``).
    truth : array (N*, D), optional
        The true view.
    times : array (N*,), optional
        Default 0..N*−1.
    ax : matplotlib Axes, optional
    mean, var : arrays (N*, D), optional
        Predictive mean and variance; the bands are mean ± 2 sd.
    dims : sequence of int
        Output columns drawn (those < D).
    label : str, optional
        Name of the prediction in the legend (default its ``method``, else "prediction").
    color : matplotlib colour, optional
        One colour for every drawn output (default: one colour per output). With it, several
        predictors can share an axes: call once per predictor, the truth only in the first call.

    Returns
    -------
    matplotlib Axes
    """
    if prediction is not None:
        mean, var = prediction.mean, getattr(prediction, "var", None)
        label = label or getattr(prediction, "method", None)
    label = label or "prediction"
    if mean is None:
        raise ValueError("plot_prediction: give a prediction (with mean, var) or mean")
    mean = _np(mean, "mean", ndim=2)
    N, D = mean.shape
    t = np.arange(N, dtype=float) if times is None else _np(times, "times", ndim=1)
    if t.shape[0] != N:
        raise ValueError(f"times has {t.shape[0]} entries but the prediction has {N} rows")
    Y = None if truth is None else _np(truth, "truth", ndim=2)
    if Y is not None and Y.shape != mean.shape:
        raise ValueError(f"truth has shape {Y.shape} but the prediction has shape {mean.shape}")
    sd = None if var is None else np.sqrt(_np(var, "var", ndim=2))
    dims = [d for d in dims if d < D]
    ax = _axes(ax, (6, 3.5))
    for i, d in enumerate(dims):
        c = f"C{i}" if color is None else color
        suffix = f", dim {d}" if len(dims) > 1 else ""
        if Y is not None:
            ax.plot(t, Y[:, d], color=c if color is None else "k", lw=1.2 if color is None else 2,
                    label=f"true{suffix}")
        ax.plot(t, mean[:, d], "--" if color is None else "-", color=c, lw=1.2, label=f"{label}{suffix}")
        if sd is not None:
            ax.fill_between(t, mean[:, d] - 2 * sd[:, d], mean[:, d] + 2 * sd[:, d], color=c, alpha=0.15, lw=0)
    ax.set(xlabel="time", ylabel="output value", title="prediction ± 2 sd against the truth")
    ax.legend(fontsize=7, ncol=2)
    return ax


# --- twin GP ------------------------------------------------------------------------------

def plot_twin_gp(pred, truth, ax=None, *, X=None, X_train=None, Y_train=None, output: int = 0,
                 label: str = "prediction"):
    """Twin-GP predictions against the truth.

    Without ``X``: predicted against true value of every output (all outputs pooled) with the
    line y = x. With a 1-D input ``X``: output ``output`` against the input, the truth as dots
    and the prediction as crosses. The mean absolute error is in the title.

    Parameters
    ----------
    pred, truth : arrays (B, d_y)
        Predicted and true outputs (e.g. ``TwinGPRegressor.predict(Xt)`` and the test outputs).
    ax : matplotlib Axes, optional
    X : array (B,) or (B, 1), optional
        A 1-D test input to plot against.
    X_train, Y_train : arrays, optional
        Training data, drawn in grey (with ``X``).
    output : int
        Output column drawn against ``X``.
    label : str
        Legend entry of the prediction.

    Returns
    -------
    matplotlib Axes
    """
    P = _np(pred, "pred", ndim=(1, 2))
    T = _np(truth, "truth", ndim=(1, 2))
    P, T = P.reshape(P.shape[0], -1), T.reshape(T.shape[0], -1)
    if P.shape != T.shape:
        raise ValueError(f"pred has shape {P.shape} but truth has shape {T.shape}")
    ax = _axes(ax, (4, 3.6))
    mae = float(np.abs(P - T).mean())
    if X is None:
        ax.plot(T.ravel(), P.ravel(), ".", ms=3, alpha=0.6, label=label)
        lo, hi = float(min(T.min(), P.min())), float(max(T.max(), P.max()))
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="y = x")
        ax.set(xlabel="true output", ylabel="predicted output", title=f"twin GP (MAE {mae:.3g})")
    else:
        x = _np(X, "X", ndim=(1, 2)).reshape(P.shape[0], -1)
        if x.shape[1] != 1:
            raise ValueError(f"X: expected a 1-D input (B,) or (B, 1), got shape {x.shape}")
        if not 0 <= output < P.shape[1]:
            raise ValueError(f"output: expected 0..{P.shape[1] - 1}, got {output}")
        if X_train is not None and Y_train is not None:
            xt = _np(X_train, "X_train").reshape(-1)
            yt = _np(Y_train, "Y_train").reshape(xt.shape[0], -1)
            ax.plot(xt, yt[:, output], ".", color="0.8", ms=3, label="train")
        ax.plot(x[:, 0], T[:, output], ".", color="C0", ms=3, label="truth")
        ax.plot(x[:, 0], P[:, output], "+", color="C3", ms=4, label=label)
        ax.set(xlabel="input x", ylabel=f"output y[{output}]", title=f"twin GP (MAE {mae:.3g})")
    ax.legend(fontsize=7)
    return ax


# --- SAMTC --------------------------------------------------------------------------------

def plot_relatedness(R, ax=None, *, task_names=None):
    """SAMTC relatedness R (T, T), R[t, s] = relatedness of source task s for target t.

    A heat map with each value written in its cell and a colour bar.

    Parameters
    ----------
    R : array (T, T) or tandem.inference.samtc.SAMTC
        The matrix, or a fitted :class:`~tandem.inference.samtc.SAMTC` (its ``R_``).
    ax : matplotlib Axes, optional
    task_names : sequence of T str, optional

    Returns
    -------
    matplotlib Axes
    """
    R = _np(getattr(R, "R_", R), "R", ndim=2)
    T = R.shape[0]
    if R.shape != (T, T):
        raise ValueError(f"R: expected a square (T, T) matrix, got shape {R.shape}")
    names = [f"task {t + 1}" for t in range(T)] if task_names is None else list(task_names)
    if len(names) != T:
        raise ValueError(f"task_names has {len(names)} names but R has {T} tasks")
    ax = _axes(ax, (1.1 * T + 2, 1.0 * T + 1.4))
    im = ax.imshow(R, vmin=0, vmax=max(1.0, float(np.nanmax(R))), cmap="viridis")
    for t in range(T):
        for s in range(T):
            ax.text(s, t, f"{R[t, s]:.2f}", ha="center", va="center", fontsize=8,
                    color="k" if R[t, s] > 0.6 else "w")
    ax.set_xticks(range(T), names, rotation=30)
    ax.set_yticks(range(T), names)
    ax.set(xlabel="source task s", ylabel="target task t", title="relatedness R[t, s]")
    ax.figure.colorbar(im, ax=ax, fraction=0.046)
    return ax


def plot_confusion(labels_true, labels_pred, ax=None, *, title: str = "confusion"):
    """Confusion (contingency) matrix C[i, j] = #{true class i, cluster j} of one task.

    Cluster labels are arbitrary: columns are reordered by the Hungarian matching of
    clusters to classes (the one :func:`tandem.inference.metrics.clustering_accuracy`
    uses), so a perfect clustering is diagonal; the accuracy is in the title.

    Parameters
    ----------
    labels_true, labels_pred : arrays (n,)
        True classes and cluster labels (any values).
    ax : matplotlib Axes, optional
    title : str

    Returns
    -------
    matplotlib Axes
    """
    from scipy.optimize import linear_sum_assignment
    t, p = np.asarray(labels_true).reshape(-1), np.asarray(labels_pred).reshape(-1)
    if t.shape != p.shape:
        raise ValueError(f"labels_true has {t.size} entries but labels_pred has {p.size}")
    if t.size == 0:
        raise ValueError("labels_true: empty label vector")
    _, ti = np.unique(t, return_inverse=True)
    _, pi = np.unique(p, return_inverse=True)
    C = np.zeros((ti.max() + 1, pi.max() + 1))
    np.add.at(C, (ti, pi), 1)
    r, c = linear_sum_assignment(-C)
    order = list(c[np.argsort(r)]) + [j for j in range(C.shape[1]) if j not in set(c)]
    C = C[:, order]
    acc = C[r, np.arange(len(r))].sum() / C.sum() if len(r) else 0.0
    ax = _axes(ax, (3.4, 3.2))
    ax.imshow(C, cmap="Blues")
    for i in range(C.shape[0]):
        for j in range(C.shape[1]):
            ax.text(j, i, f"{int(C[i, j])}", ha="center", va="center", fontsize=7,
                    color="w" if C[i, j] > 0.6 * C.max() else "k")
    ax.set_xticks(range(C.shape[1]))
    ax.set_yticks(range(C.shape[0]))
    ax.set(xlabel="cluster (matched)", ylabel="true class", title=f"{title} (acc {acc:.3f})")
    return ax


def plot_task_confusions(labels_pred, labels_true, fig=None):
    """One confusion matrix per task (see :func:`plot_confusion`) in one row.

    Parameters
    ----------
    labels_pred : list of T arrays, or tandem.inference.samtc.SAMTC
        Cluster labels per task, or a fitted :class:`~tandem.inference.samtc.SAMTC` (its ``labels_``).
    labels_true : list of T arrays
        True labels per task.
    fig : matplotlib Figure or SubFigure, optional
        Where to draw (default: a new figure with constrained layout).

    Returns
    -------
    matplotlib Figure
    """
    pred = list(getattr(labels_pred, "labels_", labels_pred))
    true = list(labels_true)
    if len(pred) != len(true):
        raise ValueError(f"labels_pred has {len(pred)} tasks but labels_true has {len(true)}")
    if fig is None:
        fig = _plt().figure(figsize=(3.2 * len(pred), 3.2), layout="constrained")
    axes = fig.subplots(1, len(pred), squeeze=False)[0]
    for t, ax in enumerate(axes):
        plot_confusion(true[t], pred[t], ax, title=f"task {t + 1}")
    return fig


# --- coupled projections ------------------------------------------------------------------

def plot_embedding(model=None, ax=None, *, embedding_x=None, embedding_y=None, pairs=None, color_x=None,
                   color_y=None, max_lines: int = 200, names=("X", "Y")):
    """Coupled projections: both data sets in the joint embedding with correspondence lines.

    Draws the first two embedding dimensions (d = 1: against the point index), X as circles,
    Y as triangles, and a grey line between the two images of each known correspondence.

    Parameters
    ----------
    model : tandem.inference.coupled_projections.CoupledProjections, optional
        A fitted :class:`~tandem.inference.coupled_projections.CoupledProjections` (its
        embeddings and pairs); or give the arrays.
    ax : matplotlib Axes, optional
    embedding_x : array (N_x, d), optional
    embedding_y : array (N_y, d), optional
    pairs : array (K, 2) of int, optional
        Known correspondences (i, j); default the model's.
    color_x, color_y : arrays (N_x,), (N_y,), optional
        Values that colour the points (e.g. the true latent coordinate).
    max_lines : int
        At most this many correspondence lines.
    names : pair of str
        Legend names of the two data sets.

    Returns
    -------
    matplotlib Axes
    """
    if model is not None:
        embedding_x = getattr(model, "embedding_x", getattr(model, "embedding_x_", None))
        embedding_y = getattr(model, "embedding_y", getattr(model, "embedding_y_", None))
        pairs = getattr(model, "pairs", getattr(model, "pairs_", None)) if pairs is None else pairs
        if embedding_x is None or embedding_y is None:
            raise TypeError(f"model: expected a fitted CoupledProjections, got {type(model).__name__}")
    if embedding_x is None or embedding_y is None:
        raise ValueError("plot_embedding: give a fitted model or embedding_x and embedding_y")
    ex, ey = _np(embedding_x, "embedding_x", ndim=2), _np(embedding_y, "embedding_y", ndim=2)
    if ex.shape[1] != ey.shape[1]:
        raise ValueError(f"embedding_x has {ex.shape[1]} dimensions but embedding_y has {ey.shape[1]}")
    if ex.shape[1] == 1:
        ex, ey = np.c_[np.arange(len(ex)), ex], np.c_[np.arange(len(ey)), ey]
        xl, yl = "point index", "embedding dim 1"
    else:
        xl, yl = "embedding dim 1", "embedding dim 2"
    ax = _axes(ax, (4.6, 4.2))
    if pairs is not None:
        pr = np.asarray(pairs, dtype=int).reshape(-1, 2)
        if len(pr) and (pr[:, 0].max() >= len(ex) or pr[:, 1].max() >= len(ey) or pr.min() < 0):
            raise ValueError("pairs: an index is outside the embedded points")
        for i, j in pr[:max_lines]:
            ax.plot([ex[i, 0], ey[j, 0]], [ex[i, 1], ey[j, 1]], "-", color="0.6", lw=0.6, zorder=1)
    kx = dict(c=color_x, cmap="viridis") if color_x is not None else dict(color="C0")
    ky = dict(c=color_y, cmap="viridis") if color_y is not None else dict(color="C3")
    ax.scatter(ex[:, 0], ex[:, 1], s=10, marker="o", label=names[0], zorder=2, **kx)
    ax.scatter(ey[:, 0], ey[:, 1], s=14, marker="^", label=names[1], zorder=2, **ky)
    n = 0 if pairs is None else len(np.asarray(pairs).reshape(-1, 2))
    ax.set(xlabel=xl, ylabel=yl, title=f"joint embedding ({n} correspondences)")
    ax.legend(fontsize=8)
    return ax
