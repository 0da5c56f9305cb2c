"""The one check of McGPDS test frames (view_prediction.check_test_sources), used by
``predict_view`` and ``McGPDS.predict``: an infinite entry is refused naming its source; a frame
is refused only when it has no observed entry in any source."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_mcgpds_kernels import three_views

from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds.fit import check_test_sources as from_fit
from tandem.inference.mcgpds.view_prediction import check_test_sources


def _y(n=6, d=3, seed=0):
    return torch.as_tensor(np.random.default_rng(seed).normal(size=(n, d)))


def test_the_fit_module_re_exports_the_helper():
    assert from_fit is check_test_sources


def test_single_source_inf_and_empty_frames_are_named():
    Y = _y()
    check_test_sources([Y], ["Y_source_test"])          # finite: accepted
    part = Y.clone()
    part[1, 0] = float("nan")                           # one missing entry: accepted
    check_test_sources([part], ["Y_source_test"])
    bad = Y.clone()
    bad[2, 1] = float("inf")
    with pytest.raises(ValueError, match=r"^Y_source_test: .*infinite entry"):
        check_test_sources([bad], ["Y_source_test"])
    empty = Y.clone()
    empty[[1, 4]] = float("nan")
    with pytest.raises(ValueError, match=r"^Y_source_test: test frames \[1, 4\] have every entry missing"):
        check_test_sources([empty], ["Y_source_test"])


def test_several_sources_a_frame_missing_in_one_source_only_is_valid():
    A, B = _y(seed=1), _y(d=2, seed=2)
    A[3] = float("nan")                                 # frame 3 missing from A, observed in B
    B[5] = float("nan")                                 # frame 5 missing from B, observed in A
    check_test_sources([A, B], ["a", "b"])
    B[3] = float("nan")                                 # now frame 3 is missing from every source
    with pytest.raises(ValueError, match=r"^a, b: test frames \[3\] have every entry missing \(NaN\) in every"):
        check_test_sources([A, B], ["a", "b"])


def test_several_sources_inf_names_the_source_that_has_it():
    A, B = _y(seed=1), _y(d=2, seed=2)
    B[0, 1] = -float("inf")
    with pytest.raises(ValueError, match=r"^b: .*infinite entry"):
        check_test_sources([A, B], ["a", "b"])


def test_estimator_predict_uses_it_per_source():
    """``McGPDS.predict`` with two sources: a frame missing from one source but observed in
    the other predicts (finite); inf is named after its view; a frame missing everywhere is
    refused naming both sources."""
    train, test, t, ids, tt = three_views(0)
    m = McGPDS(Q=2, M=10, cycles=0, joint_iters=5).fit(train, t, ids)
    a, b = test[0].copy(), test[1].copy()
    a[3] = np.nan
    p = m.predict([a, b], tt, target=2, sources=[0, 1], method="code")
    assert np.isfinite(p.mean).all() and (p.var > 0).all()
    bad = b.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"^source_view_test \(view 1\): .*infinite entry"):
        m.predict([a, bad], tt, target=2, sources=[0, 1], method="code")
    b[3] = np.nan
    both = r"^source_view_test \(view 0\), source_view_test \(view 1\): test frames \[3\]"
    with pytest.raises(ValueError, match=both):
        m.predict([a, b], tt, target=2, sources=[0, 1], method="code")
    one = test[0].copy()
    one[2] = np.nan
    with pytest.raises(ValueError, match=r"^source_view_test: test frames \[2\] have every entry missing"):
        m.predict(one, tt, source=0, target=2, method="code")
