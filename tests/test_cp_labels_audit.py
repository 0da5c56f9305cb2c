"""Audit findings on CoupledProjections (and its baselines) and on reading labels, each as a class.

1. Output containers: any scipy.sparse input gives plain ``numpy.ndarray`` outputs (never
   ``numpy.matrix``, whose ``a[:, 0] - b[:, 0]`` broadcasts to a square) equal to the dense
   result; a tensor in gives a tensor out (docs/usage.md, the estimator contract).
2. ``pca``: every value the declared constraint accepts is accepted by ``fit`` and read alike.
3. Labels keep their identity wherever they are read (``label_codes``, also for the metrics'
   (n, 1) columns): ``1`` and ``"1"``, ``2**53`` and ``2**53 + 1``, ``"a"`` and ``"a\\0"`` are
   different labels; ``1``, ``1.0`` and ``True`` (equal in Python) are one.
4. Messages name the argument (X or Y, not "data"; the view whose graph a ``k`` does not fit).
"""
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix

from tandem.inference import metrics as M
from tandem.inference.coupled_projections import CoupledProjections
from tandem.inference.coupled_projections.baselines import HamAlignment, ProcrustesAlignment
from tandem.inference.params import InvalidParameterError
from tandem.inference.validation import label_codes

RNG = np.random.default_rng(7)
# sparse-looking data (about half the entries zero) so every format stores something real
X = RNG.normal(size=(24, 5)) * (RNG.random((24, 5)) < 0.6)
Y = RNG.normal(size=(20, 4)) * (RNG.random((20, 4)) < 0.6)
X[:, 0] += np.arange(24)          # no all-zero column, no constant view
Y[:, 0] += np.arange(20)
PAIRS = np.c_[np.arange(8), np.arange(8)]
XN, YN = RNG.normal(size=(6, 5)), RNG.normal(size=(7, 4))     # new points

_FORMATS = [f for f in ("csr_matrix", "csc_matrix", "coo_matrix", "lil_matrix", "dok_matrix", "bsr_matrix",
                        "dia_matrix", "csr_array", "csc_array", "coo_array", "lil_array", "dok_array",
                        "bsr_array", "dia_array") if hasattr(sp, f)]
# every learned array of a fit (the PCA objects and dims_ are not arrays)
_ARRAYS = ("pairs_", "Sx_", "Sy_", "Omega_", "Z_", "A_", "B_", "eigenvalues_", "P_", "Px_", "Py_", "Mx_", "My_",
           "embedding_x_", "embedding_y_")


@pytest.fixture(scope="module")
def dense_fit():
    return CoupledProjections(d=2, k=4).fit(X, Y, PAIRS)


# ----------------------------------------------------------------------------- 1. output containers
@pytest.mark.parametrize("fmt", _FORMATS)
def test_sparse_input_gives_plain_arrays_equal_to_the_dense_result(fmt, dense_fit):
    to = getattr(sp, fmt)
    m = CoupledProjections(d=2, k=4).fit(to(X), to(Y), PAIRS, Sx=to(dense_fit.Sx_))
    for a in _ARRAYS:
        got, want = getattr(m, a), getattr(dense_fit, a)
        assert type(got) is np.ndarray, (a, type(got))
        assert got.shape == want.shape, a
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=a)
    # the audit's symptom: a column difference is a column, not an (N, N) square
    assert (m.embedding_x_[:, 0] - dense_fit.embedding_x_[:, 0]).shape == (24,)
    for method, new in (("transform_x", XN), ("transform_y", YN)):
        out = getattr(m, method)(to(new))
        assert type(out) is np.ndarray and out.shape == (new.shape[0], 2), method
        np.testing.assert_allclose(out, getattr(dense_fit, method)(new), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tensor_in_gives_a_tensor_out_equal_to_numpy(dtype, dense_fit):
    m = CoupledProjections(d=2, k=4).fit(torch.as_tensor(X, dtype=dtype), torch.as_tensor(Y, dtype=dtype), PAIRS)
    for method, new in (("transform_x", XN), ("transform_y", YN)):
        t = torch.as_tensor(new, dtype=dtype).requires_grad_()
        out = getattr(m, method)(t)
        assert isinstance(out, torch.Tensor) and out.device == t.device and not out.requires_grad, method
        assert tuple(out.shape) == (new.shape[0], 2)
        want = getattr(m, method)(np.asarray(new, dtype=np.float64 if dtype == torch.float64 else np.float32))
        assert type(want) is np.ndarray
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
        if dtype == torch.float64:   # the same values as a fit on numpy data
            np.testing.assert_allclose(out.numpy(), getattr(dense_fit, method)(new), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls", [HamAlignment, ProcrustesAlignment])
def test_baselines_follow_the_input_container_and_name_a_wrong_width(cls):
    m = cls(d=2, k=4).fit(X, Y, PAIRS)
    for method, new, v in (("transform_x", XN, "X"), ("transform_y", YN, "Y")):
        out = getattr(m, method)(torch.as_tensor(new))
        assert isinstance(out, torch.Tensor)
        np.testing.assert_allclose(out.numpy(), getattr(m, method)(new), rtol=1e-12)
        assert type(getattr(m, method)(sp.csr_matrix(new))) is np.ndarray
        with pytest.raises(ValueError, match=rf"^{v} \(new points\): expected {new.shape[1]} columns"):
            getattr(m, method)(new[:, :2])     # was an opaque broadcast error


# ----------------------------------------------------------------------------- 2. pca: declared == accepted
_PCA_CANDIDATES = [(3, 3), [3, 3], np.array([3, 3]), (np.int64(3), 3), [3, None], (None, 3), 3, None, 9,
                   [3], (3, 3, 3), 0, [3, 0], 3.0, True, ["3", 3], (3.0, 3), np.array([3.0, 3.0])]


def test_the_pca_constraint_says_exactly_what_fit_accepts():
    """Each candidate is refused at construction (naming pca) or fitted, as its (p_x, p_y) tuple."""
    accepted = 0
    for pca in _PCA_CANDIDATES:
        try:
            est = CoupledProjections(d=2, k=4, pca=pca)
        except InvalidParameterError as e:
            assert "pca" in str(e)
            continue
        px, py = (pca, pca) if pca is None or isinstance(pca, (int, np.integer)) else tuple(pca)
        m = est.fit(X, Y, PAIRS)              # accepted by the constraint: fit must accept it too
        # a view keeps min(p, rank) directions (rank 5 for X, 4 for Y; None keeps the rank)
        assert m.dims_ == (5 if px is None else min(int(px), 5), 4 if py is None else min(int(py), 4)), pca
        np.testing.assert_array_equal(m.P_, CoupledProjections(d=2, k=4, pca=(px, py)).fit(X, Y, PAIRS).P_)
        accepted += 1
    assert accepted == 9     # the first nine candidates are declared forms


# ----------------------------------------------------------------------------- 3. labels keep their identity
@pytest.mark.parametrize("labels, codes", [
    ([1, "1", 2, 2], [0, 1, 2, 2]),                     # np.asarray: 1 and "1" one string
    ([2 ** 53, 2 ** 53 + 1, 0.5], [0, 1, 2]),           # np.asarray: one float for two integers
    (["a", "a\0", "b"], [0, 1, 2]),                     # np.asarray: numpy strips trailing NULs
    ((b"a", b"a\0\0", b"a"), [0, 1, 0]),
    ([1, 1.0, True, "1", np.int64(1)], [0, 0, 0, 1, 0]),   # equal as Python values: one label
])
def test_label_lists_are_read_label_by_label(labels, codes):
    np.testing.assert_array_equal(label_codes(labels, None, "y"), codes)
    # the metrics' (n, 1) column form is read the same way, never through np.asarray's coercion
    np.testing.assert_array_equal(label_codes([[v] for v in labels], None, "y", column=True), codes)


def test_metric_label_columns_keep_identity_in_every_container():
    import pandas as pd
    truth = [1, "1", 2, 2]
    for col in ([[v] for v in truth], [(v,) for v in truth], pd.DataFrame({"c": truth}),
                np.array(truth, dtype=object)[:, None]):
        assert M.clustering_accuracy(col, [0, 1, 2, 2]) == 1.0, type(col)   # was 0.75 (nested lists)
        assert M.nmi(col, [[0], [1], [2], [2]]) == pytest.approx(1.0)
    assert M.clustering_accuracy([[2 ** 53], [2 ** 53 + 1], [0.5]], [0, 1, 2]) == 1.0
    # 0-d tensors and arrays in a list are read as their values (a tensor hashes by identity)
    assert label_codes([torch.tensor(3), torch.tensor(3), np.array("a"), "a"], None, "y").tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"labels_true: .*label vector \(n,\) or an \(n, 1\) column"):
        M.nmi([[1, 2], [3, 4]], [0, 1])


def _tag(v):
    """A label as a string that keeps type and value apart (for sklearn, which coerces like numpy);
    numbers Python finds equal (1, 1.0, True, np.int64(1)) share the tag."""
    if isinstance(v, (str, bytes)):
        return repr(v)
    return f"num:{int(v)}" if float(v).is_integer() else f"num:{float(v)!r}"


def test_metrics_equal_sklearn_on_random_mixed_labelings():
    """Accuracy (best one-to-one matching of sklearn's contingency table), NMI (max normalisation)
    and codes that sklearn's ARI scores like the tagged labels, over random label lists drawn from
    values np.asarray would merge; vector and column forms alike."""
    rng = np.random.default_rng(11)
    pool = [1, "1", 1.0, 2, "2", 2 ** 53, 2 ** 53 + 1, 0.5, "a", "a\0", b"a", True]
    for _ in range(40):
        t = [pool[i] for i in rng.integers(0, len(pool), 15)]
        p = [pool[i] for i in rng.integers(0, len(pool), 15)]
        tt, tp = [_tag(v) for v in t], [_tag(v) for v in p]
        C = contingency_matrix(tt, tp)
        r, c = linear_sum_assignment(-C)
        acc = C[r, c].sum() / len(t)
        nmi = normalized_mutual_info_score(tt, tp, average_method="max")
        for ft, fp in ((t, p), ([[v] for v in t], [[v] for v in p])):
            assert M.clustering_accuracy(ft, fp) == pytest.approx(acc, abs=1e-12)
            assert M.nmi(ft, fp) == pytest.approx(nmi, abs=1e-12)
        ct, cp = label_codes(t, None, "t"), label_codes(p, None, "p")
        assert adjusted_rand_score(ct, cp) == pytest.approx(adjusted_rand_score(tt, tp), abs=1e-12)
        assert len(set(ct.tolist())) == len(set(tt))


# ----------------------------------------------------------------------------- 4. messages name the argument
@pytest.mark.parametrize("which", ["X", "Y"])
def test_a_constant_view_is_named(which):
    Xc, Yc = (np.ones_like(X), Y) if which == "X" else (X, np.ones_like(Y))
    with pytest.raises(ValueError, match=rf"^{which}: every point is identical"):
        CoupledProjections(d=2, k=4).fit(Xc, Yc, PAIRS)


@pytest.mark.parametrize("cls", [CoupledProjections, HamAlignment, ProcrustesAlignment])
def test_a_k_too_large_for_one_view_names_that_view(cls):
    """k = 10 fits X (24 points) but not Y (9 points): the message says it is Y's graph and its size."""
    with pytest.raises(ValueError, match=r"^k \(number of neighbours in the graph of Y, which has 9 points\): "
                                         r"expected an integer in \[1, 8\], got 10"):
        cls(d=2, k=10).fit(X, Y[:9], PAIRS)
