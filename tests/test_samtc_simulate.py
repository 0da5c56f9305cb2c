"""Simulator of partially related tasks: ground truth consistency and the scores."""
import numpy as np
import pytest

from tandem.inference.samtc.simulate import relatedness_abs_error, reusable_scores, simulate_tasks


def test_ground_truth_consistent():
    sim = simulate_tasks(n_tasks=3, n_shared=2, n_private=(1, 2, 0), n_points=(120, 150, 90), d=4,
                         near=2.5, seed=3)
    assert sim.T == 3 and sim.h == [3, 4, 2]
    shared = set(range(2))
    for t in range(3):
        X, y, g = sim.tasks[t], sim.labels[t], sim.global_labels[t]
        assert X.shape == (sim.config["n_points"][t], 4) and y.shape == g.shape == (X.shape[0],)
        assert set(np.unique(y)) == set(range(sim.h[t]))                  # every class present
        assert np.all(np.array(sim.class_sets[t])[y] == g)                 # local -> global map
        assert shared <= set(sim.class_sets[t])
    # private classes belong to exactly one task
    for t in range(3):
        for s in range(3):
            if s != t:
                assert set(sim.class_sets[t]) & set(sim.class_sets[s]) == shared
    # reusable truth = source instances of classes the target also has; R_true = their fraction
    for (t, s), m in sim.reusable.items():
        assert m.shape == (len(sim.tasks[s]),) and m.dtype == bool
        np.testing.assert_array_equal(m, np.isin(sim.global_labels[s], sim.class_sets[t]))
        assert sim.R_true[t, s] == pytest.approx(m.mean())
    np.testing.assert_array_equal(np.diag(sim.R_true), 1.0)
    assert sim.R_true[2, 1] == pytest.approx(np.isin(sim.global_labels[1], [0, 1]).mean())
    assert not np.allclose(sim.R_true, sim.R_true.T)                      # asymmetric
    # task 2 has no private class: every source-2 instance is reusable for every target
    assert sim.R_true[0, 2] == sim.R_true[1, 2] == 1.0
    # the negative-transfer trap: each private class of a later task sits `near` sigmas from
    # a private class of an earlier task
    means = sim.means
    assert len(sim.traps) >= 1
    owner = {c: t for t in range(3) for c in sim.class_sets[t][2:]}
    for pid, anchor in sim.traps:
        assert owner[anchor] < owner[pid]
        assert np.linalg.norm(means[pid] - means[anchor]) == pytest.approx(2.5, abs=1e-9)
        others = np.delete(means, [pid], axis=0)
        assert np.linalg.norm(others - means[pid], axis=1).min() >= 2.5 - 1e-9
    # empirical class means match the simulated ones (sigma = 1, >= 15 points per class)
    for t in range(3):
        for c in range(sim.h[t]):
            emp = sim.tasks[t][sim.labels[t] == c].mean(0)
            assert np.linalg.norm(emp - means[sim.class_sets[t][c]]) < 4 * np.sqrt(4 / 15)


def test_uneven_marginals_and_seed():
    a = simulate_tasks(seed=1, alpha=0.5)
    b = simulate_tasks(seed=1, alpha=0.5)
    for x, y in zip(a.tasks, b.tasks):
        np.testing.assert_array_equal(x, y)
    counts = np.bincount(a.labels[1])
    assert counts.min() >= 15 and counts.max() > 2 * counts.min()


def test_completely_related_control():
    sim = simulate_tasks(n_private=0, seed=2)
    assert all(h == 3 for h in sim.h)
    np.testing.assert_array_equal(sim.R_true, 1.0)
    assert all(m.all() for m in sim.reusable.values())


def test_scores_hand_values():
    truth = {(0, 1): np.array([1, 1, 0, 0], bool), (1, 0): np.array([1, 0, 1], bool)}
    pred = {(0, 1): np.array([1, 0, 1, 0], bool), (1, 0): np.array([1, 0, 1], bool)}
    p, r = reusable_scores(pred, truth)
    assert p == pytest.approx(3 / 4) and r == pytest.approx(3 / 4)
    R = np.array([[1, 0.5], [0.2, 1]])
    assert relatedness_abs_error(R, np.array([[1, 0.7], [0.6, 1]])) == pytest.approx((0.2 + 0.4) / 2)
    with pytest.raises(ValueError):
        reusable_scores({}, truth)
    with pytest.raises(ValueError):
        relatedness_abs_error(np.eye(2), np.eye(3))


def test_bad_simulator_input():
    with pytest.raises(ValueError):
        simulate_tasks(n_tasks=1)
    with pytest.raises(ValueError):
        simulate_tasks(n_private=(1, 2))          # wrong length for 3 tasks
    with pytest.raises(ValueError):
        simulate_tasks(n_points=20)                # fewer than h_t * min_per_class
