"""A sparse SAMTC task is text, read in cosine geometry: the result must not depend on the
length of each document (a positive per-row scale), in any step of the algorithm."""
import numpy as np
import pytest
import scipy.sparse as sp

from tandem.inference.samtc import SAMTC
from tandem.inference.samtc.algorithm import samtc
from tandem.inference.samtc.task_checks import validate_tasks


def _text_tasks(seed=0, T=3, per=25, V=60, h=3):
    """Multinomial 'documents' of 15-600 words from h topics shared by T tasks."""
    r = np.random.default_rng(seed)
    topics = r.dirichlet(np.full(V, 0.1), size=h)
    tasks, labels = [], []
    for _ in range(T):
        y = np.repeat(np.arange(h), per)
        X = np.stack([r.multinomial(r.integers(15, 600), topics[c]) for c in y]).astype(float)
        tasks.append(sp.csr_matrix(X))
        labels.append(y)
    return tasks, labels


def test_sparse_rows_are_unit_norm_after_validation():
    tasks, _ = _text_tasks()
    out, _ = validate_tasks(tasks, [3, 3, 3])
    for X in out:
        np.testing.assert_allclose(sp.linalg.norm(X, axis=1), 1.0, rtol=1e-12)
    assert tasks[0].max() > 1.0             # the caller's matrices are not changed


@pytest.mark.parametrize("variant", ["full", "nr", "ns"])
def test_samtc_on_sparse_tasks_is_invariant_to_document_length(variant):
    tasks, labels = _text_tasks()
    r = np.random.default_rng(1)
    scaled = [sp.diags(r.uniform(0.2, 5.0, X.shape[0])) @ X for X in tasks]
    a = samtc(tasks, [3, 3, 3], variant=variant, k_self=8, k_src=8)
    b = samtc(scaled, [3, 3, 3], variant=variant, k_self=8, k_src=8)
    for la, lb in zip(a.labels, b.labels):
        np.testing.assert_array_equal(la, lb)
    np.testing.assert_allclose(a.R, b.R, rtol=1e-8, atol=1e-10)


def test_estimator_on_scaled_documents_equals_unscaled():
    tasks, _ = _text_tasks(seed=2)
    scaled = [X * 7.5 for X in tasks]
    la = SAMTC([3, 3, 3]).fit(tasks).labels_
    lb = SAMTC([3, 3, 3]).fit(scaled).labels_
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(x, y)


def test_unit_norm_rows_are_kept_bit_for_bit():
    """Input that is already unit-norm (the text loaders' tf-idf rows) is not touched, so
    results recorded on it cannot move by round-off."""
    tasks, _ = _text_tasks(seed=3)
    unit = [sp.diags(1.0 / sp.linalg.norm(X, axis=1)) @ X for X in tasks]
    out, _ = validate_tasks(unit, [3, 3, 3])
    for X, Y in zip(unit, out):
        assert (sp.csr_matrix(X) != Y).nnz == 0
