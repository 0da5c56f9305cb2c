"""fit(checkpoint=...) only resumes its own run; resume is exact (hand-written guide and
AutoNormal); unreadable files give a clear error; the fingerprint helpers."""
import numpy as np
import pyro
import pyro.distributions as dist
import pyro.optim
import pytest
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from torch.distributions import constraints

from tandem.inference import fit, minimize
from tandem.inference.checkpoints import (
    CheckpointError,
    content_hash,
    fingerprint,
    fingerprint_diff,
    load_checkpoint,
    save_atomic,
)


def model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 10.0))
    sd = pyro.sample("sd", dist.LogNormal(torch.tensor(0.0, dtype=y.dtype), 1.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(mu, sd), obs=y)


def guide(y):
    m = pyro.param("m", torch.tensor(0.0, dtype=y.dtype))
    s = pyro.param("s", torch.tensor(1.0, dtype=y.dtype), constraint=constraints.positive)
    pyro.sample("mu", dist.Normal(m, s))
    a = pyro.param("a", torch.tensor(0.0, dtype=y.dtype))
    pyro.sample("sd", dist.LogNormal(a, 0.3))


@pytest.fixture
def y():
    g = torch.Generator().manual_seed(2)
    return torch.randn(30, generator=g, dtype=torch.float64) * 1.5 + 2.0


def adam(lr=0.05):
    return pyro.optim.Adam({"lr": lr})


def run(y, path=None, n=40, **kw):
    kw.setdefault("optim", adam())
    return fit(kw.pop("model", model), kw.pop("guide", guide), y, num_steps=n, seed=kw.pop("seed", 3), progress=False,
               checkpoint=path, checkpoint_every=kw.pop("checkpoint_every", 10), **kw)


def sub_model(y):
    """``model`` with a subsampling plate: the minibatch indices come from the RNG too."""
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 10.0))
    sd = pyro.sample("sd", dist.LogNormal(torch.tensor(0.0, dtype=y.dtype), 1.0))
    with pyro.plate("data", y.shape[0], subsample_size=7) as idx:
        pyro.sample("y", dist.Normal(mu, sd), obs=y[idx])


@pytest.mark.parametrize("variant", ["hand-written", "AutoNormal", "AutoNormal+subsample"])
def test_resume_is_exact(y, tmp_path, variant):
    """Interrupted at step 20 and resumed in a fresh parameter store (with a new guide object,
    as a new process would have): losses and parameters equal the uninterrupted run's."""
    m = sub_model if "subsample" in variant else model
    make = (lambda: AutoNormal(m)) if variant.startswith("Auto") else (lambda: guide)
    full = run(y, guide=make(), n=50, model=m)
    ck = tmp_path / "a.ckpt"
    run(y, ck, n=20, guide=make(), model=m)
    pyro.clear_param_store()
    resumed = run(y, ck, n=50, guide=make(), model=m)
    assert resumed.resumed_from == 20
    np.testing.assert_array_equal(resumed.losses, full.losses)
    assert full.params.keys() == resumed.params.keys()
    for k in full.params:
        torch.testing.assert_close(resumed.params[k], full.params[k], rtol=0, atol=0)


def test_other_data_same_shape_is_refused(y, tmp_path):
    ck = tmp_path / "a.ckpt"
    run(y, ck, n=20)
    y2 = y.clone()
    y2[7] += 1.0   # same shape and dtype, one value changed
    with pytest.raises(CheckpointError, match=r"(?s)args\[0\].*delete"):
        run(y2, ck, n=40)
    # a finished run on other data does not hand back its parameters either
    with pytest.raises(CheckpointError, match=r"args\[0\]"):
        run(y2, ck, n=20)


def test_other_optimiser_lr_seed_model_or_loss_is_refused(y, tmp_path):
    ck = tmp_path / "a.ckpt"
    run(y, ck, n=20)
    with pytest.raises(CheckpointError, match=r"optim\.args\.lr: was 0\.05, now 0\.01"):
        run(y, ck, optim=adam(0.01))
    with pytest.raises(CheckpointError, match=r"optim\.constructor"):
        run(y, ck, optim=pyro.optim.SGD({"lr": 0.05}))
    with pytest.raises(CheckpointError, match=r"seed: was 3, now 4"):
        run(y, ck, seed=4)
    with pytest.raises(CheckpointError, match=r"loss\.num_particles"):
        run(y, ck, loss=Trace_ELBO(num_particles=2))
    with pytest.raises(CheckpointError, match=r"guide"):
        run(y, ck, guide=AutoNormal(model))
    # the original settings still resume
    assert run(y, ck, n=30).resumed_from == 20


def test_smaller_num_steps_is_refused(y, tmp_path):
    ck = tmp_path / "a.ckpt"
    run(y, ck, n=30)
    with pytest.raises(CheckpointError, match="holds 30 steps, more than num_steps=10"):
        run(y, ck, n=10)
    same = run(y, ck, n=30)           # the finished run itself comes back without training
    assert same.resumed_from == 30 and same.num_steps == 30


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", None, "truncated", "foreign"])
def test_unreadable_checkpoint_names_the_file(y, tmp_path, content):
    ck = tmp_path / "bad.ckpt"
    if content is None:
        ck.mkdir()
    elif content == "truncated":
        run(y, ck, n=10)
        ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    elif content == "foreign":
        torch.save({"step": 5, "params": {}}, ck)   # an old-format / other program's file
    else:
        ck.write_bytes(content)
    with pytest.raises(CheckpointError) as err:
        run(y, ck, n=20)
    assert str(ck) in str(err.value)
    # a folder is never to be deleted: the message says to pass a file path instead
    assert ("is a folder" in str(err.value) and "delete" not in str(err.value)) if content is None \
        else "delete" in str(err.value)


def test_unwritable_checkpoint_path_fails_before_training(y, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="checkpoint: cannot write"):
        run(y, blocker / "run.ckpt", n=5)


def test_converged_run_returns_at_once_when_rerun(y, tmp_path):
    ck = tmp_path / "a.ckpt"
    kw = dict(tol=1e-2, window=5, optim=adam(0.05))
    first = run(y, ck, n=2000, **kw)
    assert first.converged and first.num_steps < 2000
    again = run(y, ck, n=2000, **kw)
    assert again.converged and again.resumed_from == first.num_steps
    np.testing.assert_array_equal(again.losses, first.losses)
    # a stricter rule is a request to train on
    stricter = run(y, ck, n=first.num_steps + 5, tol=1e-12, window=5, optim=adam(0.05))
    assert stricter.num_steps == first.num_steps + 5


def test_minimize_checkpoint_names_the_objective(tmp_path):
    def quad(c):
        x = pyro.param("x", torch.zeros(2, dtype=torch.float64))
        return ((x - c) ** 2).sum()

    def quad2(c):
        x = pyro.param("x", torch.zeros(2, dtype=torch.float64))
        return ((x - c) ** 4).sum()
    c = torch.tensor([1.0, -2.0], dtype=torch.float64)
    ck = tmp_path / "m.ckpt"
    minimize(quad, c, num_steps=5, optim=adam(), progress=False, checkpoint=ck)
    with pytest.raises(CheckpointError, match="quad2"):
        minimize(quad2, c, num_steps=10, optim=adam(), progress=False, checkpoint=ck)


def test_fingerprint_helpers():
    a = torch.arange(6.0).reshape(2, 3)
    b = a.clone()
    b[1, 2] = -1.0
    fa, fb = fingerprint(data=[a], lr=0.1), fingerprint(data=[b], lr=0.1)
    assert fa["data[0]"].startswith("tensor float32 (2, 3) sha256:")
    assert fingerprint_diff(fa, fb) == [f"data[0]: was {fa['data[0]']!r}, now {fb['data[0]']!r}"]
    assert fingerprint_diff(fa, fingerprint(data=[a], lr=0.1)) == []
    # a changed length is reported once, at the container
    assert fingerprint_diff(fa, fingerprint(data=[a, a], lr=0.1)) == ["data: was 'list[1]', now 'list[2]'"]
    # dtype matters, and numpy and torch of the same values are different kinds
    assert content_hash(a) != content_hash(a.double()) != content_hash(a.numpy())
    assert content_hash(a, {"k": 1}) == content_hash(a.clone(), {"k": 1})
    assert content_hash(a, {"k": 1}) != content_hash(a, {"k": 2})
    # 0-d and bool tensors hash too; numpy scalars keep their value
    assert fingerprint(b=np.bool_(True), i=np.int64(3)) == {"b": True, "i": 3}
    assert content_hash(torch.tensor(1.5)) != content_hash(torch.tensor(2.5))
    assert content_hash(torch.tensor([True, False])) != content_hash(torch.tensor([True, True]))
    # NaN settings still compare equal to themselves
    assert fingerprint_diff(fingerprint(x=float("nan")), fingerprint(x=float("nan"))) == []


def test_save_atomic_keeps_the_old_file_when_a_write_fails(tmp_path):
    p = tmp_path / "s.pt"
    save_atomic({"kind": "k", "v": 1}, p)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle")
    with pytest.raises(TypeError, match="cannot save"):
        save_atomic({"kind": "k", "v": Unpicklable()}, p)
    assert load_checkpoint(p, "k")["v"] == 1
    assert list(tmp_path.iterdir()) == [p]   # no temporary file left behind
    with pytest.raises(CheckpointError, match="not a 'other' checkpoint"):
        load_checkpoint(p, "other")


@pytest.mark.parametrize("a, b", [(1, 1.0), (True, 1), (0.0, -0.0), (False, 0), (1.0, True)])
def test_fingerprints_tell_apart_values_that_compare_equal(a, b):
    """``==`` takes 1, 1.0 and True for one value and 0.0 for -0.0: a checkpoint of one must not
    resume a run of the other."""
    from tandem.inference.checkpoints import CheckpointError, check_fingerprint, fingerprint, fingerprint_diff
    old, new = fingerprint(lr=a), fingerprint(lr=b)
    assert fingerprint_diff(old, new)
    with pytest.raises(CheckpointError, match="lr"):
        check_fingerprint("ck.tandem", old, new)
    assert not fingerprint_diff(old, fingerprint(lr=a))


def test_fingerprints_see_a_difference_ten_levels_deep():
    from tandem.inference.checkpoints import fingerprint, fingerprint_diff

    def nest(v, n=10):
        for _ in range(n):
            v = {"k": [v]}
        return v
    assert fingerprint_diff(fingerprint(cfg=nest(1)), fingerprint(cfg=nest(2)))


def test_fingerprint_type_tags_survive_the_checkpoint_file(tmp_path):
    """The stored fingerprint keeps bool/int/float and the sign of zero through the safe format."""
    from tandem.inference.checkpoints import fingerprint, fingerprint_diff
    from tandem.inference.persistence import dump, load
    fp = fingerprint(a=1, b=1.0, c=True, d=-0.0)
    dump(fp, tmp_path / "fp.tandem", "fp")
    back = load(tmp_path / "fp.tandem", "fp")
    assert not fingerprint_diff(back, fp)


def _nest(v, n):
    for _ in range(n):
        v = {"k": [v]}
    return v


def test_fingerprints_see_a_difference_at_any_depth_and_refuse_what_cannot_be_described():
    """Below depth 24 a container is one hashed entry (it was its type alone: a setting differing
    30 levels down was invisible); past the recursion limit a clear error, not a partial description."""
    from tandem.inference.checkpoints import fingerprint, fingerprint_diff
    deep1, deep2 = fingerprint(cfg=_nest(1, 30)), fingerprint(cfg=_nest(2, 30))
    assert fingerprint_diff(deep1, deep2) and not fingerprint_diff(deep1, fingerprint(cfg=_nest(1, 30)))
    assert content_hash(_nest(1, 30)) != content_hash(_nest(2, 30))
    assert content_hash(_nest(1, 30)) != content_hash(_nest(1.0, 30))     # hashed entries keep the type too
    with pytest.raises(ValueError, match="fingerprint: cfg: nested too deeply"):
        fingerprint(cfg=_nest(1, 5000))
    # a cycle is recorded as such (no endless recursion), and two cycles of other contents differ
    a, b = {"x": 1}, {"x": 2}
    a["self"], b["self"] = a, b
    fa = fingerprint(cfg=a)
    assert fa["cfg.self"] == "<cycle: builtins.dict>"
    assert fingerprint_diff(fa, fingerprint(cfg=b)) == ["cfg.x: was 1, now 2"]
