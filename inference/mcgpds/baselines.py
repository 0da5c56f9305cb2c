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
* :func:`fit_gpy_bgplvm_missing` — GPy's Bayesian GPLVM with ``missing_data=True`` on the
  concatenated views [view 1, view 2] with NaN entries in view 2; imputes view 2 and predicts it
  for new frames from view 1 alone (:func:`gpy_observed_columns_model`: the test latents are
  inferred with GPy's ``infer_newX`` on the bound of the fully observed view-1 columns).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tandem.inference.distances import Standardizer, nearest
from tandem.inference.validation import as_array, check_int_range, check_real_range, check_same_rows, check_seed

__all__ = ["nn_y_space", "training_mean_predictor", "nn_latent_space", "gpy_available", "fit_gpy_mrd",
           "MRDResult", "fit_gpy_bgplvm_missing", "gpy_observed_columns_model", "BGPLVMResult"]


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
    np.random.seed(check_seed(seed))   # GPy draws from numpy's global RNG
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


# ---------------------------------------------------------------------------------------------
# GPy Bayesian GPLVM with missing data (optional dependency)

@dataclass
class BGPLVMResult:
    """Imputation and prediction of a GPy missing-data Bayesian GPLVM on [view 1, view 2].

    Attributes
    ----------
    impute_mean : numpy.ndarray
        (N, D2) view-2 predictive mean at every training frame's latent mean (the frames whose
        view 2 was NaN are the imputations), in the units of the inputs given.
    impute_var : numpy.ndarray
        (N, D2) its variance (including noise).
    test_mean : numpy.ndarray
        (N*, D2) view-2 predictive mean at the test latents inferred from view 1.
    test_var : numpy.ndarray
        (N*, D2) its variance (including noise).
    test_latent : numpy.ndarray
        (N*, Q) means of the inferred test latents q(x*).
    train_s : float
        Training time in seconds.
    predict_s : float
        Prediction time in seconds (imputation and test).
    model : object, default None
        The fitted ``BayesianGPLVMMiniBatch``.
    """
    impute_mean: np.ndarray
    impute_var: np.ndarray
    test_mean: np.ndarray
    test_var: np.ndarray
    test_latent: np.ndarray
    train_s: float
    predict_s: float
    model: object = None


def gpy_observed_columns_model(model, columns):
    """A plain GPy Bayesian GPLVM holding one fully observed block of a missing-data BGPLVM.

    In GPy's missing-data Bayesian GPLVM (``missing_data=True``) the bound is a sum over output
    columns d of a collapsed VarDTC bound on the frames observed in column d,
    ``L = Σ_d L_d(Y[obs_d, d]; q(X)[obs_d], Z, θ, σ²) − KL(q(X) ‖ p(X))``, each column with its own
    posterior (woodbury vector and inverse). For a column observed in every frame, ``L_d`` is
    exactly the column's term of an ordinary Bayesian GPLVM on all frames. So an ordinary
    ``GPy.models.BayesianGPLVM`` on ``Y[:, columns]`` (fully observed) with the missing-data
    model's q(X) (means and variances), inducing inputs Z, kernel and noise variance has the
    same posterior for those columns, and GPy's ``infer_newX`` on it optimises q(x*) of new frames
    on the bound of those columns alone (GPy's inference model: the training posterior held
    fixed). This is how test frames that observe only those columns get their latents: GPy
    1.15's ``infer_newX`` on the missing-data model itself accepts one frame at a time and then
    fails on frames with NaN columns.

    Parameters
    ----------
    model : GPy.models.bayesian_gplvm_minibatch.BayesianGPLVMMiniBatch
        A fitted missing-data Bayesian GPLVM with a Gaussian likelihood.
    columns : array_like of int
        The output columns to keep; each must be observed (no NaN) in every training frame.

    Returns
    -------
    GPy.models.BayesianGPLVM
        The ordinary model (N, len(columns)) with the same parameters.

    Raises
    ------
    ValueError
        If a column is out of range or has a NaN training entry.
    """
    GPy = _import_gpy()
    cols = np.asarray(columns, dtype=np.int64).ravel()
    Y = np.asarray(model.Y)
    if cols.size == 0 or cols.min() < 0 or cols.max() >= Y.shape[1]:
        raise ValueError(f"columns: expected indices in [0, {Y.shape[1]}), got {cols.tolist()}")
    Yk = Y[:, cols]
    if not np.isfinite(Yk).all():
        bad = cols[~np.isfinite(Yk).all(0)]
        raise ValueError(f"columns: {bad.tolist()} have missing training entries; only fully observed "
                         "columns give an ordinary Bayesian GPLVM")
    Z = np.asarray(model.Z).copy()
    plain = GPy.models.BayesianGPLVM(Yk, model.input_dim, X=np.asarray(model.X.mean).copy(),
                                     X_variance=np.asarray(model.X.variance).copy(), Z=Z,
                                     num_inducing=Z.shape[0], kernel=model.kern.copy())
    plain.likelihood.variance[:] = np.asarray(model.likelihood.variance).ravel()
    return plain


def fit_gpy_bgplvm_missing(m1, m2, m1_test, Q: int = 5, M: int = 100, max_iters: int = 300,
                           seed: int = 0, X=None, noise_share: float = 0.01) -> BGPLVMResult:
    """Fit GPy's missing-data Bayesian GPLVM on [view 1, view 2]; impute view 2 and predict it.

    Training: ``BayesianGPLVMMiniBatch([m1, m2], Q, num_inducing=M, missing_data=True)`` with an
    ARD RBF + bias kernel, latent means initialised at ``X`` (default: PCA of the concatenation
    with NaN entries filled by their column's observed mean, scaled to unit variance per
    latent), noise variance initialised at ``noise_share`` × the observed entries' variance, then
    ``max_iters`` L-BFGS iterations; the NaN entries of ``m2`` are not scored.

    Imputation: the view-2 predictive at each training frame's latent mean. Test prediction
    (inductive: the test frames take no part in the fit): q(x*) of each test frame is inferred
    from its view 1 by GPy's ``infer_newX`` on the bound of the view-1 columns
    (:func:`gpy_observed_columns_model`), and view 2 is the missing-data model's predictive at
    the inferred latent mean.

    Parameters
    ----------
    m1 : array_like
        (N, D1) scaled training frames of view 1, fully observed.
    m2 : array_like
        (N, D2) scaled training frames of view 2; NaN marks a missing entry.
    m1_test : array_like
        (N*, D1) scaled test frames of view 1, fully observed.
    Q : int, default 5
        Latent dimension.
    M : int, default 100
        Number of inducing points (capped at N).
    max_iters : int, default 300
        L-BFGS iterations.
    seed : int, default 0
        Seed of numpy's global generator (GPy draws its inducing inputs from it).
    X : array_like, optional
        (N, Q) initial latent means.
    noise_share : float, default 0.01
        Initial noise variance as a share of the observed entries' variance.

    Returns
    -------
    BGPLVMResult
        Imputation, test prediction, test latents and timings.

    Raises
    ------
    ImportError
        If GPy is not installed.
    ValueError
        If the views have different numbers of rows or columns (view 1 and test view 1), view 1
        has a non-finite entry, ``m2`` has an infinite entry or an all-missing column, or ``X``
        has the wrong shape.
    """
    GPy = _import_gpy()
    from GPy.models.bayesian_gplvm_minibatch import BayesianGPLVMMiniBatch
    m1 = as_array(m1, "m1", ndim=2)
    m2 = as_array(m2, "m2", ndim=2, finite=False)
    m1_test = as_array(m1_test, "m1_test", ndim=2)
    check_same_rows({"m1": m1, "m2": m2}, "training frames")
    if np.isinf(m2).any():
        raise ValueError("m2: has infinite entries; NaN marks a missing entry, inf is not allowed")
    if np.isnan(m2).all(0).any():
        raise ValueError(f"m2: columns {np.flatnonzero(np.isnan(m2).all(0)).tolist()} are missing in every frame")
    if m1_test.shape[1] != m1.shape[1]:
        raise ValueError(f"m1_test: expected {m1.shape[1]} columns like m1, got {m1_test.shape[1]}")
    Q = check_int_range(Q, "Q", low=1)
    M = check_int_range(M, "M", low=1)
    max_iters = check_int_range(max_iters, "max_iters", low=0)
    noise_share = check_real_range(noise_share, "noise_share", low=0.0, low_open=True)
    N, D1 = m1.shape
    Yc = np.concatenate([m1, m2], 1)
    if X is None:
        filled = np.where(np.isnan(Yc), np.nanmean(Yc, 0), Yc)
        U, s, _ = np.linalg.svd(filled - filled.mean(0), full_matrices=False)
        X = U[:, :Q] * s[:Q]
        X = X / X.std(0)
    X = as_array(X, "X", ndim=2)
    if X.shape != (N, Q):
        raise ValueError(f"X: expected shape ({N}, {Q}), got {X.shape}")
    np.random.seed(check_seed(seed))   # GPy draws from numpy's global RNG
    t0 = time.perf_counter()
    model = BayesianGPLVMMiniBatch(Yc, Q, X=X.copy(), num_inducing=min(M, N), missing_data=True,
                                   kernel=GPy.kern.RBF(Q, ARD=True) + GPy.kern.Bias(Q))
    model.likelihood.variance[:] = noise_share * float(np.nanvar(Yc))
    model.optimize(max_iters=max_iters, messages=False)
    train_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    mu = np.asarray(model.X.mean)
    imp, iv = model.predict(mu, include_likelihood=True)
    Xnew, _ = gpy_observed_columns_model(model, np.arange(D1)).infer_newX(m1_test, optimize=True)
    mu_te = np.asarray(Xnew.mean)
    te, tv = model.predict(mu_te, include_likelihood=True)
    predict_s = time.perf_counter() - t1
    full = lambda a, like: np.broadcast_to(np.asarray(a), like.shape)[:, D1:].copy()  # noqa: E731
    return BGPLVMResult(impute_mean=np.asarray(imp)[:, D1:].copy(), impute_var=full(iv, imp),
                        test_mean=np.asarray(te)[:, D1:].copy(), test_var=full(tv, te), test_latent=mu_te,
                        train_s=train_s, predict_s=predict_s, model=model)
