"""Hardening of the SVI driver's checkpoints, their fingerprints and the safe file format:
resume of autoguides under L-BFGS, fingerprints that tell closures/pandas/masked data apart,
corrupt payloads, names outside tandem in the safe loader, version tags, messages."""
import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoDelta, AutoNormal

from tandem.inference import LBFGS, fit, minimize

X = torch.randn(30, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
Y = 2 * X + 0.3 * torch.randn(30, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def model(X, Y):
    w = pyro.sample("w", dist.Normal(torch.tensor(0., dtype=X.dtype), 3.))
    s = pyro.sample("s", dist.LogNormal(torch.tensor(0., dtype=X.dtype), 1.))
    with pyro.plate("n", len(X)):
        pyro.sample("y", dist.Normal(w * X, s), obs=Y)


def crn_elbo(model, guide, *args):
    """A deterministic ELBO estimate (common random numbers: the same draws at every call), so
    that L-BFGS accepts an AutoNormal guide."""
    rng = torch.get_rng_state()
    try:
        torch.manual_seed(123)
        return Trace_ELBO(num_particles=4, vectorize_particles=True,
                          max_plate_nesting=1).differentiable_loss(model, guide, *args)
    finally:
        torch.set_rng_state(rng)


crn_elbo.deterministic = True


def _run(guide_cls, n, ck=None, every=2):
    loss = crn_elbo if guide_cls is AutoNormal else None
    return fit(model, guide_cls(model), X, Y, num_steps=n, seed=0, progress=False, loss=loss,
               optim=LBFGS(max_iter=3), checkpoint=ck, checkpoint_every=every)


# ------------------------------------------------------------------ 1. resume under L-BFGS
@pytest.mark.parametrize("guide_cls", [AutoDelta, AutoNormal])
def test_lbfgs_resume_of_an_autoguide_equals_the_uninterrupted_run(guide_cls, tmp_path):
    ck = tmp_path / "ck.pt"
    ref = _run(guide_cls, 12)
    first = _run(guide_cls, 3, ck)
    resumed = _run(guide_cls, 12, ck)
    assert first.num_steps == 3 and resumed.resumed_from == 3
    # the optimisation moves on after the resume (it had frozen at the checkpoint's loss)
    assert resumed.losses[5] < resumed.losses[2] - 1.0
    np.testing.assert_array_equal(resumed.losses, ref.losses)
    assert set(resumed.params) == set(ref.params)
    for k in ref.params:
        assert torch.equal(resumed.params[k], ref.params[k]), k


def test_lbfgs_resume_at_the_saved_step_keeps_the_parameters(tmp_path):
    ck = tmp_path / "ck.pt"
    a = _run(AutoDelta, 3, ck)
    b = _run(AutoDelta, 3, ck)
    assert b.resumed_from == 3
    for k in a.params:
        assert torch.equal(a.params[k], b.params[k])


def test_lbfgs_refuses_to_optimise_parameters_replaced_in_the_store():
    calls = [0]

    def loss_fn():
        x = pyro.param("x", torch.tensor(0., dtype=torch.float64))
        calls[0] += 1
        if calls[0] == 3:   # swap the store's tensor for a new one, as a re-wrapping guide would
            ps = pyro.get_param_store()
            st = ps.get_state()
            st["params"] = {k: v.detach().clone().requires_grad_() for k, v in st["params"].items()}
            ps.set_state(st)
            x = pyro.param("x")
        return (x - 3.0) ** 2

    with pytest.raises(RuntimeError, match=r"\['x'\].*no longer the tensors L-BFGS optimises"):
        minimize(loss_fn, num_steps=5, progress=False, optim=LBFGS(max_iter=3))
