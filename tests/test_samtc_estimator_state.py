"""SAMTC's fitted state is its own: validated copies of the tasks (never the caller's objects),
savable whatever container the tasks came in, and methods that check their arguments before
they change anything."""
import numpy as np
import pytest

from tandem.inference.samtc import SAMTC

pd = pytest.importorskip("pandas")


def _tasks(seed=0):
    r = np.random.default_rng(seed)
    return [np.r_[r.normal(0, 0.3, (12, 2)), r.normal(3, 0.3, (12, 2))] for _ in range(2)]


def test_tasks_are_copied_not_aliased():
    tasks = _tasks()
    m = SAMTC([2, 2], k_self=4, k_src=4).fit(tasks)
    before = [X.copy() for X in m.tasks_]
    tasks[0][:] = 99.0
    for X, Y in zip(m.tasks_, before):
        np.testing.assert_array_equal(X, Y)
    assert all(type(X) is np.ndarray and X.dtype == np.float64 for X in m.tasks_)


def test_fit_on_dataframes_can_be_saved_and_loaded(tmp_path):
    tasks = _tasks()
    m = SAMTC([2, 2], k_self=4, k_src=4).fit([pd.DataFrame(X) for X in tasks])
    ref = SAMTC([2, 2], k_self=4, k_src=4).fit(tasks)
    path = tmp_path / "samtc.tdm"
    m.save(path)
    back = SAMTC.load(path)
    for a, b, c in zip(back.labels_, m.labels_, ref.labels_):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_to_inference_data_checks_num_samples_before_fitting():
    m = SAMTC([2, 2], k_self=4, k_src=4).fit(_tasks())
    with pytest.raises(ValueError, match="num_samples"):
        m.to_inference_data(num_samples=0, num_steps=3)
    assert m.model_fit_ is None


def test_fit_validates_the_tasks_once_and_still_refuses_bad_ones_by_name(monkeypatch):
    import tandem.inference.samtc.algorithm as algorithm
    import tandem.inference.samtc.estimator as estimator
    import tandem.inference.samtc.task_checks as task_checks
    calls = []
    original = task_checks.validate_tasks

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    for module in (task_checks, algorithm, estimator):      # every name it is reached by
        monkeypatch.setattr(module, "validate_tasks", counted)
    tasks = _tasks()
    m = SAMTC([2, 2], k_self=4, k_src=4).fit(tasks)
    assert len(calls) == 1                 # was 2: fit's, then samtc's on fit's copies
    ref = SAMTC([2, 2], k_self=4, k_src=4)
    for a, b in zip(m.labels_, algorithm.samtc(tasks, [2, 2], k_self=4, k_src=4).labels):
        np.testing.assert_array_equal(a, b)   # the estimator's run is samtc's
    assert all(type(X) is np.ndarray and X.dtype == np.float64 and not np.shares_memory(X, Y)
               for X, Y in zip(m.tasks_, tasks))
    bad = [tasks[0], tasks[1].copy()]
    bad[1][3, 1] = np.nan
    with pytest.raises(ValueError, match=r"tasks\[1\]: contains 1 NaN"):
        ref.fit(bad)
    with pytest.raises(ValueError, match=r"tasks\[0\]: all its points are identical"):
        ref.fit([np.ones((24, 2)), tasks[1]])
    with pytest.raises(ValueError, match="labels"):
        ref.fit(tasks, labels=[np.zeros(24), np.zeros(5)])
    assert not hasattr(ref, "result_")     # refused before any run
