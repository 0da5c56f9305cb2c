"""The papers' metrics against hand-computed values."""
import math

import numpy as np
import pytest

from tandem.inference import metrics as M


def test_mean_joint_error_hand_value():
    true = np.zeros((2, 6))
    pred = np.array([[3, 4, 0, 0, 0, 0],      # joint errors 5, 0
                     [1, 0, 0, 0, 2, 0]], float)  # 1, 2
    assert M.mean_joint_error(pred, true) == pytest.approx((5 + 0 + 1 + 2) / 4)
    with pytest.raises(ValueError, match="J\\*3"):
        M.mean_joint_error(np.zeros((2, 5)), np.zeros((2, 5)))


def test_rmse_mae_norm_error():
    p, t = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 0.0], [0.0, 0.0]])
    assert M.rmse(p, t) == pytest.approx(math.sqrt((0 + 4 + 9 + 16) / 4))
    assert M.mean_abs_error(p, t) == pytest.approx((0 + 2 + 3 + 4) / 4)
    assert M.mean_norm_error(p, t) == pytest.approx((2 + 5) / 2)
    with pytest.raises(ValueError, match="shape"):
        M.rmse(p, t[:1])


def test_msll_hand_value_and_mask():
    mean = np.array([[0.0, 1.0]])
    var = np.array([[1.0, 4.0]])
    y = np.array([[1.0, 1.0]])
    v1 = 0.5 * math.log(2 * math.pi) + 0.5
    v2 = 0.5 * math.log(2 * math.pi * 4)
    assert M.msll(mean, var, y) == pytest.approx((v1 + v2) / 2)
    assert M.msll(mean, var, y, mask=np.array([True, False])) == pytest.approx(v1)
    # zero variance on a masked-out constant coordinate is fine, unmasked it is an error
    var0 = np.array([[1.0, 0.0]])
    assert M.msll(mean, var0, y, mask=np.array([True, False])) == pytest.approx(v1)
    with pytest.raises(ValueError, match="> 0"):
        M.msll(mean, var0, y)
    with pytest.raises(ValueError, match="NaN"):
        M.msll(mean, np.array([[np.nan, 1.0]]), y)


def test_clustering_accuracy_hungarian():
    true = [0, 0, 0, 1, 1, 2]
    pred = [5, 5, 7, 7, 7, 9]  # best matching 5→0, 7→1, 9→2: 5 right
    assert M.clustering_accuracy(true, pred) == pytest.approx(5 / 6)
    assert M.clustering_accuracy([0, 1, 2, 3], [1, 2, 3, 0]) == 1.0
    # more clusters than classes: an unmatched cluster counts wrong
    assert M.clustering_accuracy([0, 0, 1, 1], [0, 1, 2, 2]) == pytest.approx(3 / 4)


def test_nmi_hand_value():
    assert M.nmi([0, 0, 1, 1], [1, 1, 0, 0]) == pytest.approx(1.0)
    assert M.nmi([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(0.0, abs=1e-12)
    # true = [0,0,1,1], pred = [0,0,0,1]: I = H(pred) - H(pred|true)
    def h(ps):
        return -sum(p * math.log(p) for p in ps if p > 0)

    H_t, H_p = h([.5, .5]), h([.75, .25])
    H_p_given_t = 0.5 * 0 + 0.5 * h([.5, .5])
    I = H_p - H_p_given_t
    assert M.nmi([0, 0, 1, 1], [0, 0, 0, 1]) == pytest.approx(I / max(H_t, H_p))


def test_match_accuracy_and_circular_pose_error():
    assert M.match_accuracy([0, 1, 5], [0, 2, 5]) == pytest.approx(2 / 3)
    assert M.match_accuracy([0, 1, 5], [0, 2, 5], tolerance=1) == 1.0
    assert M.match_accuracy([71], [0], tolerance=1, period=72) == 1.0
    assert M.match_accuracy([71], [0], tolerance=1) == 0.0
    assert M.circular_pose_error_deg([355.0, 10.0], [5.0, 190.0]) == pytest.approx((10 + 180) / 2)


EMPTY = np.zeros((0, 3))


@pytest.mark.parametrize("fn", [M.rmse, M.mean_abs_error, M.mean_norm_error, M.mean_joint_error,
                                M.circular_pose_error_deg])
def test_empty_or_mismatched_regression_inputs_raise(fn):
    with pytest.raises(ValueError, match="empty"):
        fn(EMPTY, EMPTY)
    with pytest.raises(ValueError, match="empty"):
        fn([], [])
    with pytest.raises(ValueError, match="shape"):
        fn(np.zeros((2, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="NaN"):
        fn(np.full((2, 3), np.nan), np.zeros((2, 3)))


def test_msll_input_checks():
    m = np.zeros((2, 3))
    with pytest.raises(ValueError, match="empty"):
        M.msll(EMPTY, EMPTY, EMPTY)
    with pytest.raises(ValueError, match="var: shape \\(2,\\) does not broadcast"):
        M.msll(m, np.ones(2), m)
    with pytest.raises(ValueError, match="mask: shape"):
        M.msll(m, np.ones(3), m, mask=np.ones(2, bool))
    with pytest.raises(ValueError, match="mask: expected a boolean array.*indices"):
        M.msll(m, np.ones(3), m, mask=np.array([0, 2]))
    # a 0/1 integer mask is a boolean mask; a per-column variance broadcasts over rows
    assert M.msll(m, np.ones(3), m, mask=np.array([1, 0, 1])) == pytest.approx(0.5 * math.log(2 * math.pi))


def test_label_and_index_metrics_input_checks():
    for fn in (M.clustering_accuracy, M.nmi):
        with pytest.raises(ValueError, match="empty"):
            fn([], [])
        with pytest.raises(ValueError, match="entries"):
            fn([0, 1, 1], [0, 1])
        with pytest.raises(ValueError, match="NaN"):
            fn([0.0, np.nan], [0, 1])
        with pytest.raises(ValueError, match="label vector"):
            fn(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="no items"):
        M.match_accuracy([], [])
    with pytest.raises(ValueError, match="pred_partner: expected integer indices"):
        M.match_accuracy([0.5, 1.0], [0, 1])            # would be truncated to 0, 1
    assert M.match_accuracy(np.array([0.0, 3.0]), [0, 2]) == 0.5   # whole-number floats are indices
    with pytest.raises(ValueError, match="tolerance"):
        M.match_accuracy([0], [0], tolerance=-1)
    with pytest.raises(ValueError, match="period"):
        M.match_accuracy([0], [0], period=0)
