"""Baselines for the McGPDS real-data experiments (view 1 → view 2 prediction).

* :func:`nn_y_space` — the papers' "NN in Y space": the training view-2 row of the nearest
  training frame in view-1 space (squared Euclidean, K = 1, ties → the lower index), on raw
  or per-dimension standardised view-1 features (protocol §1.11, §2.9, §3); the search is
  :func:`tandem.inference.distances.nearest`.
* :func:`training_mean_predictor` — predict the training mean of view 2 for every test
  frame, with the Gaussian predictive N(mean_d, var_d) (per-coordinate training variance,
  ddof = 1). Coordinates that are constant in training get variance 0: score MSLL with
  ``mask = var > 0`` (the pose data's joints 1–2, 6 coordinates).
* :func:`nn_latent_space` — "NN in X space": view-2 training row of the nearest training
  point in a learned latent space (e.g. McGPDS's shared means μ^(s)).
* :func:`fit_gpy_mrd` / :func:`gpy_available` — GPy's MRD (Damianou et al.) as an external
  peer; raises a clear ``ImportError`` when GPy (optional extra ``peers``) is absent.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tandem.inference.distances import Standardizer, nearest
from tandem.inference.validation import as_array, check_same_rows

__all__ = ["nn_y_space", "training_mean_predictor", "nn_latent_space", "gpy_available", "fit_gpy_mrd",
           "MRDResult"]


def _nn_rows(train, test, Y2, train_name: str, test_name: str, standardise: bool = False):
    """Rows of ``Y2`` at the nearest ``train`` row of each ``test`` row: (prediction, indices)."""
    train = as_array(train, train_name, ndim=2)
    Y2 = as_array(Y2, "Y2", ndim=2)
    check_same_rows({train_name: train, "Y2": Y2}, "training frames")
    test = as_array(test, test_name, ndim=2)
    if test.shape[1] != train.shape[1]:
        raise ValueError(f"{test_name} has {test.shape[1]} columns but {train_name} has {train.shape[1]}")
    if standardise:
        st = Standardizer(train)
        train, test = st.transform(train), st.transform(test)
    idx = nearest(test, train)
    return Y2[idx].copy(), idx


def nn_y_space(Y1, Y2, Y1_test, standardise: bool = False):
    """Nearest neighbour in view-1 space (the papers' "NN in Y space").

    Squared Euclidean distance, K = 1, ties → the lower index.

    Parameters
    ----------
    Y1 : array_like
        (N, D1) training frames of view 1.
    Y2 : array_like
        (N, D2) training frames of view 2 (row n pairs with row n of ``Y1``).
    Y1_test : array_like
        (N*, D1) test frames of view 1.
    standardise : bool, default False
        Search on per-dimension standardised view-1 features (training mean and std).

    Returns
    -------
    tuple of numpy.ndarray
        ``(prediction, indices)``: (N*, D2) the view-2 rows of the nearest training frames,
        and (N*,) their indices.

    Raises
    ------
    ValueError
        If ``Y1`` and ``Y2`` have different numbers of rows or ``Y1_test`` a different number
        of columns than ``Y1``.
    """
    return _nn_rows(Y1, Y1_test, Y2, "Y1", "Y1_test", standardise)


def training_mean_predictor(Y2, n_test: int):
    """Gaussian "training mean" predictor N(mean_d, var_d) for every test frame.

    mean_d = (1/N) Σ_n y_nd, var_d = 1/(N−1) Σ_n (y_nd − mean_d)²; ``mask`` is var_d > 0
    (MSLL is only defined where the predictive variance is positive).

    Parameters
    ----------
    Y2 : array_like
        (N, D) training frames of view 2, N ≥ 2.
    n_test : int
        Number of test frames N*.

    Returns
    -------
    tuple of numpy.ndarray
        ``(mean, var, mask)``: mean (n_test, D), var (n_test, D), mask (D,) boolean.

    Raises
    ------
    ValueError
        If ``Y2`` is not 2-D or has fewer than 2 rows.
    """
    Y2 = as_array(Y2, "Y2", ndim=2, min_rows=2)
    m = Y2.mean(axis=0)
    v = Y2.var(axis=0, ddof=1)
    return np.tile(m, (n_test, 1)), np.tile(v, (n_test, 1)), v > 0


def nn_latent_space(mu_train, mu_test, Y2):
    """Nearest neighbour in a learned latent space ("NN in X space").

    Parameters
    ----------
    mu_train : array_like
        (N, Q) latent positions of the training frames (e.g. McGPDS's shared means μ^(s)).
    mu_test : array_like
        (N*, Q) latent positions of the test frames.
    Y2 : array_like
        (N, D2) training frames of view 2.

    Returns
    -------
    tuple of numpy.ndarray
        ``(prediction, indices)``: (N*, D2) and (N*,).

    Raises
    ------
    ValueError
        If the row or column counts do not match.
    """
    return _nn_rows(mu_train, mu_test, Y2, "mu_train", "mu_test")


# ---------------------------------------------------------------------------------------------
# GPy MRD peer (optional dependency)

def gpy_available() -> bool:
    """True when GPy imports (the optional extra ``peers``)."""
    try:
        import GPy  # noqa: F401
        return True
    except Exception:
        return False


def _import_gpy():
    try:
        import GPy
    except Exception as e:  # ImportError, or a binary incompatibility surfacing as another error
        raise ImportError("GPy MRD baseline needs the optional dependency GPy "
                          "(pip install 'tandem[peers]' or pip install GPy); "
                          f"import failed: {e}") from None
    return GPy


@dataclass
class MRDResult:
    """Prediction of GPy MRD.

    Attributes
    ----------
    mean : numpy.ndarray
        (N*, D2) predictive mean, in the units of the inputs given.
    var : numpy.ndarray
        (N*, D2) predictive variance (including noise).
    nn_index : numpy.ndarray
        (N*,) index of the training latent used for each test frame.
    train_s : float
        Training time in seconds.
    predict_s : float
        Prediction time in seconds.
    model : object, default None
        The fitted ``GPy.models.MRD``.
    """
    mean: np.ndarray
    var: np.ndarray
    nn_index: np.ndarray
    train_s: float
    predict_s: float
    model: object = None


def fit_gpy_mrd(m1, m2, m1_test, Q: int = 5, M: int = 100, max_iters: int = 1000,
                seed: int = 0, init_vardist_iters: int = 200, predict_iters: int = 200,
                messages: bool = False) -> MRDResult:
    """Fit GPy's MRD on two scaled views and predict view 2 from view 1 (Damianou et al.).

    Training: ``GPy.models.MRD([m1, m2], Q, num_inducing=M)`` (ARD RBF per view, PCA init
    on the concatenation), first ``init_vardist_iters`` iterations with the noise variances
    fixed at 1 % of each view's variance (MRD's usual warm start), then ``max_iters``
    L-BFGS iterations on everything. Prediction, as in MRD's pose demo: infer the test
    latents q(X*) from view 1 with ``model.bgplvms[0].infer_newX`` (``predict_iters``
    iterations), take the nearest training latent mean, and predict view 2 with view 2's
    sparse-GP posterior at that training latent (mean, variance including noise).

    Parameters
    ----------
    m1 : array_like
        (N, D1) scaled training frames of view 1.
    m2 : array_like
        (N, D2) scaled training frames of view 2.
    m1_test : array_like
        (N*, D1) scaled test frames of view 1.
    Q : int, default 5
        Latent dimension.
    M : int, default 100
        Number of inducing points (capped at N).
    max_iters : int, default 1000
        L-BFGS iterations on every parameter.
    seed : int, default 0
        Seed of numpy's global generator (GPy draws from it).
    init_vardist_iters : int, default 200
        Warm-start iterations with the noise variances fixed.
    predict_iters : int, default 200
        Must be > 0: the test latents are inferred with ``infer_newX(optimize=True)``, which
        runs GPy's own iteration limit (the value is not otherwise passed on).
    messages : bool, default False
        Print GPy's optimiser messages.

    Returns
    -------
    MRDResult
        Prediction, nearest training indices and timings.

    Raises
    ------
    ImportError
        If GPy is not installed.
    ValueError
        If ``m1`` and ``m2`` have different numbers of rows.
    """
    GPy = _import_gpy()
    m1 = as_array(m1, "m1", ndim=2)
    m2 = as_array(m2, "m2", ndim=2)
    m1_test = as_array(m1_test, "m1_test", ndim=2)
    check_same_rows({"m1": m1, "m2": m2}, "training frames")
    np.random.seed(seed)
    t0 = time.perf_counter()
    kernels = [GPy.kern.RBF(Q, ARD=True) + GPy.kern.Bias(Q) for _ in range(2)]
    model = GPy.models.MRD([m1, m2], input_dim=Q, num_inducing=min(M, m1.shape[0]),
                           kernel=kernels, initx="PCA_concat", initz="permute")
    for k, Yk in enumerate((m1, m2)):
        lik = model.bgplvms[k].likelihood if hasattr(model, "bgplvms") else None
        if lik is not None:
            lik.variance[:] = 0.01 * float(np.var(Yk))
            lik.variance.fix()
    model.optimize(messages=messages, max_iters=init_vardist_iters)
    for bg in model.bgplvms:
        bg.likelihood.variance.unfix()
    model.optimize(messages=messages, max_iters=max_iters)
    train_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    bg1, bg2 = model.bgplvms[0], model.bgplvms[1]
    mu_tr = np.asarray(model.X.mean)
    # Infer test latents from view 1 only (per frame: one latent per test row).
    Xnew, _ = bg1.infer_newX(m1_test, optimize=True) if predict_iters > 0 else (None, None)
    mu_te = np.asarray(Xnew.mean)
    idx = nearest(mu_te, mu_tr)
    Xp = mu_tr[idx]
    mean, var = bg2.predict(Xp, include_likelihood=True)
    var = np.broadcast_to(np.asarray(var), mean.shape).copy()
    predict_s = time.perf_counter() - t1
    return MRDResult(mean=np.asarray(mean), var=var, nn_index=idx, train_s=train_s,
                     predict_s=predict_s, model=model)
