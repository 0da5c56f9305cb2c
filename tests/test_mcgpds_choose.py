"""The default tandem predictor: the held-out choice between the selection and the stack.

nested_selection_score, choose_between, choose_predictor and McGPDS.predict(method="tandem").
"""
import dataclasses
import inspect

import numpy as np
import pytest
import torch

from common import two_view_split
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds import predictor as P
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds, holdout_folds
from tandem.inference.mcgpds.predictor import (
    TANDEM_CANDIDATES,
    TANDEM_STACK_CANDIDATES,
    TRAINING_MEAN,
    CalibratedPrediction,
    PredictorSelection,
    select_predictor,
    stacked_prediction,
    stacked_predictor,
)
from tandem.inference.mcgpds.predictor_choice import choose_between, choose_predictor, nested_selection_score

SHORT = dict(cycles=1, var_iters=10, model_iters=10, joint_iters=30)


# ---------------------------------------------------------------- the nested score
def test_nested_score_of_a_hand_computed_case():
    """Y = 0 on 6 frames, folds {0,1} {2,3} {4,5}; candidate a errs by 3 on the last fold only,
    b by 1 on the first two. Fold 0 and 1: the other folds' MSE is a 18/4, b 2/4 → b, scoring
    2 each; fold 2: a 0, b 4/4 → a, scoring 18. S = (2 + 2 + 18) / 6, although b's plain held-out
    MSE (4/6) is the lowest: choosing on the same folds one is scored on is optimistic."""
    Y = np.zeros((6, 1))
    means = {"a": np.array([[0.0], [0], [0], [0], [3], [3]]), "b": np.array([[1.0], [1], [1], [1], [0], [0]])}
    folds = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5])]
    s, labels = nested_selection_score(Y, means, folds)
    assert labels == ["b", "b", "a"]
    assert s == pytest.approx(22 / 6, rel=1e-15)
    # one candidate: its plain held-out MSE
    s1, l1 = nested_selection_score(Y, {"b": means["b"]}, folds)
    assert s1 == pytest.approx(4 / 6) and l1 == ["b"] * 3


def _direct_nested(Y, means, folds):
    # the definition written out entry by entry (loops, no vectorisation), NaN = not observed
    labels = list(means)
    tot, cnt, chosen = 0.0, 0, []
    for k, fk in enumerate(folds):
        best, best_mse = None, None
        for lab in labels:
            e = n = 0
            for j, fj in enumerate(folds):
                if j == k:
                    continue
                for r in fj:
                    for d in range(Y.shape[1]):
                        if not np.isnan(Y[r, d]):
                            e += (Y[r, d] - means[lab][r, d]) ** 2
                            n += 1
            if best is None or e / n < best_mse:
                best, best_mse = lab, e / n
        chosen.append(best)
        for r in fk:
            for d in range(Y.shape[1]):
                if not np.isnan(Y[r, d]):
                    tot += (Y[r, d] - means[best][r, d]) ** 2
                    cnt += 1
    return tot / cnt, chosen


def test_nested_score_equals_the_definition_with_missing_entries_and_uneven_folds():
    rng = np.random.default_rng(3)
    Y = rng.normal(size=(23, 3))
    Y[rng.random(Y.shape) < 0.2] = np.nan
    means = {c: Y + s * rng.normal(size=Y.shape) + b for c, s, b in (("a", 0.5, 0.3), ("b", 0.8, 0.0),
                                                                       ("c", 0.6, -0.2))}
    means = {c: np.nan_to_num(m) for c, m in means.items()}
    folds = [np.arange(0, 4), np.arange(4, 12), np.arange(12, 15), np.arange(15, 23)]
    s, labels = nested_selection_score(Y, means, folds)
    s_ref, labels_ref = _direct_nested(Y, means, folds)
    assert labels == labels_ref
    assert s == pytest.approx(s_ref, rel=1e-12)
    # torch in, the same
    s_t, _ = nested_selection_score(torch.as_tensor(Y), {c: torch.as_tensor(m) for c, m in means.items()},
                                    [torch.as_tensor(f) for f in folds])
    assert s_t == pytest.approx(s, rel=1e-14)


def test_nested_score_rejects_bad_input():
    Y = np.zeros((6, 2))
    folds = [np.arange(3), np.arange(3, 6)]
    with pytest.raises(ValueError, match="holdout_means"):
        nested_selection_score(Y, {}, folds)
    with pytest.raises(ValueError, match="holdout_means"):
        nested_selection_score(Y, {"a": np.zeros((5, 2))}, folds)
    with pytest.raises(ValueError, match="at least two folds"):
        nested_selection_score(Y, {"a": Y}, [np.arange(6)])
    with pytest.raises(ValueError, match=r"folds\[1\]"):
        nested_selection_score(Y, {"a": Y}, [np.arange(3), np.arange(3, 7)])
    Yn = Y.copy()
    Yn[3:] = np.nan
    with pytest.raises(ValueError, match="no observed entry"):
        nested_selection_score(Yn, {"a": Y}, folds)


# ---------------------------------------------------------------- the choice on a fitted model
@pytest.fixture(scope="module")
def fitted():
    train, test, t, tt = two_view_split()
    cfg = McGPDSConfig(Q=2, M=12, fixed=("alpha", "eps", "beta", "time", "W"), **SHORT)
    f = fit_mcgpds(train, t, config=cfg, progress=False)
    ch = choose_predictor(f, test[0], tt, test_iters=3)
    return f, test, tt, ch


def _members(base: CalibratedPrediction, held: dict, seed=0):
    # synthetic members: the given held-out means, arbitrary test means
    g = torch.Generator().manual_seed(seed)
    return {lab: CalibratedPrediction(
        dataclasses.replace(base.prediction, mean=torch.randn(base.prediction.mean.shape, generator=g,
                                                              dtype=torch.float64)),
        hm, base.holdout_var, base.delta) for lab, hm in held.items()}


def _selection_of(f, members):
    Y = f.views[1]
    scores = {lab: float(((Y - cp.holdout_mean) ** 2).mean()) for lab, cp in members.items()}
    best = min(scores, key=scores.get)
    return PredictorSelection(best, {}, scores, members[best], members)


def _choose(f, members):
    return choose_between(f, _selection_of(f, members), stacked_prediction(f, members, include_mean=True))


def test_the_stack_is_chosen_when_a_mixture_is_the_truth(fitted):
    """Held-out means A, B with Y = 0.3 A + 0.7 B exactly: the stack recovers the truth on every
    fold (CV error ≈ 0), each single member errs, so the stack wins."""
    f, _, _, ch = fitted
    Y = f.views[1]
    g = torch.Generator().manual_seed(1)
    A = torch.randn(Y.shape, generator=g, dtype=Y.dtype)
    B = (Y - 0.3 * A) / 0.7
    c = _choose(f, _members(ch.selection.result, {"a": A, "b": B}))
    assert c.chosen == "stacked" and c.result is c.stack
    assert c.scores["stacked"] < 1e-8 < c.scores["selected"]
    assert c.scores["selected"] >= min(float(((Y - m) ** 2).mean()) for m in (A, B)) - 1e-12


def test_the_single_predictor_is_chosen_when_one_member_is_the_truth(fitted):
    """Held-out means: A = Y exactly, B and C noisy: the nested selection picks A on every fold
    (score 0), so the stack cannot be lower; its weights put ≈ 1 on A."""
    f, _, _, ch = fitted
    Y = f.views[1]
    g = torch.Generator().manual_seed(2)
    B = Y + 0.5 * torch.randn(Y.shape, generator=g, dtype=Y.dtype)
    C = torch.randn(Y.shape, generator=g, dtype=Y.dtype)
    c = _choose(f, _members(ch.selection.result, {"b": B, "a": Y.clone(), "c": C}))
    assert c.chosen == "selected" and c.selection.label == "a" and c.result is c.selection.result
    assert c.scores["selected"] == 0.0 and c.fold_labels == ["a"] * len(holdout_folds(f))
    assert c.stack.weights["a"] == pytest.approx(1.0, abs=1e-4)
    assert c.scores["stacked"] >= 0.0


def test_the_choice_never_uses_test_data(fitted):
    """The choice reads only held-out means of the training target view: arbitrary test
    predictions of the members leave it unchanged, and so do other test frames of the source
    view (the test targets are not an argument anywhere)."""
    f, test, tt, ch = fitted
    Y = f.views[1]
    g = torch.Generator().manual_seed(3)
    held = {"a": Y + 0.3 * torch.randn(Y.shape, generator=g, dtype=Y.dtype),
            "b": Y + 0.3 * torch.randn(Y.shape, generator=g, dtype=Y.dtype)}
    c1 = _choose(f, _members(ch.selection.result, held, seed=10))
    c2 = _choose(f, _members(ch.selection.result, held, seed=11))
    assert c1.chosen == c2.chosen and c1.scores == c2.scores and c1.fold_labels == c2.fold_labels
    assert not torch.equal(c1.prediction.mean, c2.prediction.mean)
    # other test frames (random, another count): the same scores and choice
    other = np.random.default_rng(4).normal(size=(7, test[0].shape[1]))
    ch2 = choose_predictor(f, other, np.arange(7) * 0.1, test_iters=3)
    assert ch2.chosen == ch.chosen and ch2.scores == ch.scores and ch2.fold_labels == ch.fold_labels
    assert ch2.prediction.mean.shape == (7, Y.shape[1])
    for fn in (choose_predictor, choose_between, nested_selection_score):
        assert not any("Y_target" in p or "truth" in p for p in inspect.signature(fn).parameters)


def test_choose_predictor_is_the_selection_and_the_stack_computed_once(fitted, monkeypatch):
    """The selection and the stack equal select_predictor's and stacked_predictor's; the three
    default candidates are three of the twelve stack members (the same objects), so twelve runs
    of calibrated_prediction are made, not fifteen."""
    f, test, tt, ch = fitted
    assert ch.chosen in ("selected", "stacked")
    assert ch.scores["stacked"] == pytest.approx(float(((f.views[1] - ch.stack.holdout_mean) ** 2).mean()))
    assert ch.chosen == ("stacked" if ch.scores["stacked"] < ch.scores["selected"] else "selected")
    sel = select_predictor(f, test[0], tt, test_iters=3)
    assert sel.label == ch.selection.label and sel.scores == pytest.approx(ch.selection.scores, rel=1e-12)
    torch.testing.assert_close(sel.result.prediction.mean, ch.selection.result.prediction.mean)
    sp = stacked_predictor(f, test[0], tt, test_iters=3)
    assert sp.weights == pytest.approx(ch.stack.weights, abs=1e-8)
    torch.testing.assert_close(sp.prediction.mean, ch.stack.prediction.mean)
    torch.testing.assert_close(sp.holdout_mean, ch.stack.holdout_mean)
    assert set(ch.stack.weights) == set(TANDEM_STACK_CANDIDATES) | {TRAINING_MEAN}
    for lab in TANDEM_CANDIDATES:
        twin = {"shared-space 1-NN": "std features, shared-space 1-NN",
                "source-space 5-NN": "std features, source-space 5-NN",
                "source-space 20-NN": "std features, source-space 20-NN"}[lab]
        assert ch.selection.results[lab] is ch.stack.members[twin]
    calls = []
    real = P.calibrated_prediction
    monkeypatch.setattr(P, "calibrated_prediction", lambda *a, **k: calls.append(k) or real(*a, **k))
    choose_predictor(f, test[0], tt, test_iters=3)
    assert len(calls) == len(TANDEM_STACK_CANDIDATES) == 12
    calls.clear()
    choose_predictor(f, test[0], tt, features="raw", test_iters=3)       # raw: the raw-feature twins
    assert len(calls) == 12


def test_choose_rejects_bad_input(fitted):
    f, test, tt, ch = fitted
    for bad in ({}, [dict(k_neighbours=1)], {"x": 3}):
        with pytest.raises(ValueError, match="candidates"):
            choose_predictor(f, test[0], tt, candidates=bad)
        with pytest.raises(ValueError, match="stack_candidates"):
            choose_predictor(f, test[0], tt, stack_candidates=bad)
    with pytest.raises(ValueError, match="selection"):
        choose_between(f, ch.stack, ch.stack)
    with pytest.raises(ValueError, match="stack"):
        choose_between(f, ch.selection, ch.selection.result)


# ---------------------------------------------------------------- McGPDS.predict
def test_mcgpds_predict_default_is_the_choice_and_the_other_methods_stay():
    train, test, t, tt = two_view_split(seed=1)
    m = McGPDS(Q=2, M=12, **SHORT).fit(train, t)
    p = m.predict(test[0], tt, test_iters=3)
    Zs = m.scalers_[0].transform(torch.as_tensor(test[0]))
    ch = choose_predictor(m.fitted_, Zs, torch.as_tensor(tt), seed=m.seed, test_iters=3)
    st = m.scalers_[1]
    assert p.method == "tandem" and p.details.chosen == ch.chosen and p.details.scores == ch.scores
    np.testing.assert_allclose(p.mean, st.inverse(ch.prediction.mean).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p.var, st.inverse_var(ch.prediction.var).numpy(), rtol=1e-10, atol=1e-12)
    ps = m.predict(test[0], tt, method="selected", test_iters=3)
    np.testing.assert_allclose(ps.mean, st.inverse(ch.selection.result.prediction.mean).numpy(), rtol=1e-10,
                               atol=1e-12)
    assert ps.details.label == ch.selection.label
    pk = m.predict(test[0], tt, method="stacked", test_iters=3)
    np.testing.assert_allclose(pk.mean, st.inverse(ch.stack.prediction.mean).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p.mean, ps.mean if ch.chosen == "selected" else pk.mean, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="'selected'"):
        m.predict(test[0], tt, method="best")
