"""The tandem predictor's choice on held-out training frames (select_predictor, McGPDS.predict(method="selected"))."""
import numpy as np
import pytest
import torch

from common import two_view_split
from tandem.inference.mcgpds import McGPDS
from tandem.inference.mcgpds.fit import McGPDSConfig, fit_mcgpds, holdout_predictions, predict_view
from tandem.inference.mcgpds.predictor import (
    TANDEM_CANDIDATES,
    TANDEM_PREDICTOR,
    calibrated_prediction,
    nn_features,
    select_predictor,
)

SHORT = dict(cycles=1, var_iters=10, model_iters=10, joint_iters=30)


@pytest.fixture(scope="module")
def fitted():
    train, test, t, tt = two_view_split()
    cfg = McGPDSConfig(Q=2, M=12, fixed=("alpha", "eps", "beta", "time", "W"), **SHORT)
    return fit_mcgpds(train, t, config=cfg, progress=False), train, test, tt


def test_selection_scores_are_heldout_mse_and_the_minimum_wins(fitted):
    f, train, test, tt = fitted
    sel = select_predictor(f, test[0], tt, test_iters=3)
    assert set(sel.scores) == set(TANDEM_CANDIDATES)
    assert sel.scores[sel.label] == min(sel.scores.values())
    assert sel.kwargs == TANDEM_CANDIDATES[sel.label]
    Y = f.views[1]
    ftr, _ = nn_features(f.views[0], test[0], "std")
    for label, kw in TANDEM_CANDIDATES.items():
        hm, _ = holdout_predictions(f, nn_features=ftr, **{**TANDEM_PREDICTOR, "test_iters": 3, **kw})
        assert sel.scores[label] == pytest.approx(float(((Y - hm) ** 2).mean()), rel=1e-10)
    # the chosen result is calibrated_prediction with the chosen keywords
    cp = calibrated_prediction(f, test[0], tt, test_iters=3, **sel.kwargs)
    torch.testing.assert_close(sel.result.prediction.mean, cp.prediction.mean)
    torch.testing.assert_close(sel.result.prediction.var, cp.prediction.var)


def test_source_space_knn_mixture_is_the_moment_matched_average(fitted):
    """k source-space neighbours: mean = average of the k target predictives' means, var = the
    mixture's variance (checked against k separate 1-NN predictions at those latents)."""
    f, train, test, tt = fitted
    ftr, fte = nn_features(f.views[0], test[0], "std")
    d2 = torch.cdist(fte, ftr)
    idx = d2.argsort(1)[:, :5]
    kw = dict(TANDEM_PREDICTOR, test_iters=3, latent_for_prediction="y_nn")
    mix = predict_view(f, test[0], tt, nn_index_y=idx, **{**kw, "k_neighbours": 5})
    singles = [predict_view(f, test[0], tt, nn_index_y=idx[:, j], **{**kw, "k_neighbours": 1}) for j in range(5)]
    m = torch.stack([p.mean for p in singles])
    v = torch.stack([p.var for p in singles])
    torch.testing.assert_close(mix.mean, m.mean(0))
    torch.testing.assert_close(mix.var, (v + m * m).mean(0) - m.mean(0) ** 2)


def test_one_candidate_fixes_the_predictor_and_bad_candidates_raise(fitted):
    f, train, test, tt = fitted
    only = {"mine": dict(k_neighbours=1)}
    sel = select_predictor(f, test[0], tt, candidates=only, test_iters=3)
    assert sel.label == "mine" and list(sel.scores) == ["mine"]
    for bad in ({}, [dict(k_neighbours=1)], {"x": 3}):
        with pytest.raises(ValueError, match="candidates"):
            select_predictor(f, test[0], tt, candidates=bad)


def test_estimator_selected_predict_is_the_selected_predictor():
    """``method="selected"`` (the default before the held-out choice between it and the stack,
    tests/test_mcgpds_choose.py) is select_predictor."""
    train, test, t, tt = two_view_split(seed=1)
    m = McGPDS(Q=2, M=12, **SHORT).fit(train, t)
    p = m.predict(test[0], tt, method="selected")
    Zs = m.scalers_[0].transform(torch.as_tensor(test[0]))
    sel = select_predictor(m.fitted_, Zs, torch.as_tensor(tt), seed=m.seed)
    np.testing.assert_allclose(p.mean, m.scalers_[1].inverse(sel.result.prediction.mean).numpy(), rtol=1e-10)
    one = m.predict(test[0], tt, method="selected", candidates={"1-NN": dict(k_neighbours=1)})
    assert one.mean.shape == p.mean.shape == test[1].shape


def test_candidates_needing_more_neighbours_than_a_fold_leaves_are_skipped():
    """24 frames, 5 chunks: at most 19 frames outside a fold, so the 20-NN candidate is skipped."""
    train, test, t, tt = two_view_split(N=24, Nt=5)
    cfg = McGPDSConfig(Q=2, M=6, fixed=("alpha", "eps", "beta", "time", "W"), cycles=1, var_iters=3,
                       model_iters=3, joint_iters=5)
    f = fit_mcgpds(train, t, config=cfg, progress=False)
    sel = select_predictor(f, test[0], tt, test_iters=2)
    assert set(sel.scores) == {"shared-space 1-NN", "source-space 5-NN"}
    with pytest.raises(ValueError, match="none feasible|every candidate"):
        select_predictor(f, test[0], tt, candidates={"big": dict(k_neighbours=30)})
