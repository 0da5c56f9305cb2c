"""Hardening of the SVI driver's checkpoints, their fingerprints and the safe file format:
resume of autoguides under L-BFGS, fingerprints that tell closures/pandas/masked data apart,
corrupt payloads, names outside tandem in the safe loader, version tags, messages."""
import json
import zipfile

import numpy as np
import pyro
import pyro.distributions as dist
import pyro.optim
import pytest
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoDelta, AutoNormal

from tandem.inference import LBFGS, fit, minimize
from tandem.inference.checkpoints import (
    CheckpointError,
    describe_callable,
    fingerprint,
    fingerprint_diff,
    load_checkpoint,
)
from tandem.inference.persistence import PersistenceError, dump, load

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


# ------------------------------------------------------------------ 3. fingerprints
def _quad_min(loss_fn, ck, n):
    return minimize(loss_fn, num_steps=n, progress=False, checkpoint=ck, optim=pyro.optim.Adam({"lr": 0.1}))


def test_checkpoint_refuses_another_lambda(tmp_path):
    ck = tmp_path / "m.pt"
    f1 = lambda: (pyro.param("x", torch.tensor(0.)) - 1) ** 2  # noqa: E731 - two lambdas are the point
    f2 = lambda: (pyro.param("x", torch.tensor(0.)) - 5) ** 2  # noqa: E731
    assert describe_callable(f1).split(" ")[0] == describe_callable(f2).split(" ")[0]  # same qualname
    _quad_min(f1, ck, 3)
    with pytest.raises(CheckpointError, match="loss"):
        _quad_min(f2, ck, 6)
    assert _quad_min(f1, ck, 6).resumed_from == 3          # the same lambda still resumes


def _make_model(data):
    def factory_model():
        mu = pyro.sample("mu", dist.Normal(0., 10.))
        with pyro.plate("n", len(data)):
            pyro.sample("y", dist.Normal(mu, 1.), obs=data)
    return factory_model


def test_checkpoint_refuses_a_factory_model_around_other_data(tmp_path):
    ck = tmp_path / "f.pt"
    y = torch.tensor([0.1, -0.2, 0.3])
    m1, m2, m3 = _make_model(y), _make_model(y + 5), _make_model(y.clone())
    assert describe_callable(m1) == describe_callable(m3) != describe_callable(m2)
    fit(m1, AutoNormal(m1), num_steps=3, progress=False, checkpoint=ck)
    with pytest.raises(CheckpointError, match="model"):
        fit(m2, AutoNormal(m2), num_steps=6, progress=False, checkpoint=ck)
    assert fit(m3, AutoNormal(m3), num_steps=6, progress=False, checkpoint=ck).resumed_from == 3


def test_function_digest_sees_defaults_and_is_stable_for_recursive_closures():
    def a(x, k=1):
        return x + k

    def b(x, k=2):
        return x + k
    b.__qualname__ = a.__qualname__
    assert describe_callable(a) != describe_callable(b)

    def outer():
        def rec(n):
            return rec(n - 1) if n else 0
        return rec
    assert describe_callable(outer()) == describe_callable(outer())


def test_fingerprint_hashes_pandas_contents_and_masks():
    pd = pytest.importorskip("pandas")
    a = pd.DataFrame({"x": [1., 2.], "y": [3., 4.]})

    def differs(u, v):
        return fingerprint_diff(fingerprint(args=(u,)), fingerprint(args=(v,))) != []
    assert not differs(a, a.copy())
    assert differs(a, pd.DataFrame({"x": [100., 2.], "y": [3., 4.]}))        # values
    assert differs(a, a.rename(columns={"y": "z"}))                            # column labels
    assert differs(a, a.set_index(pd.Index([5, 6])))                           # index
    assert differs(a, a.astype({"x": "float32"}))                              # dtypes
    assert differs(pd.Series([1., 2.]), pd.Series([5., 6.]))
    assert differs(pd.Series([1., 2.], name="a"), pd.Series([1., 2.], name="b"))
    assert differs(pd.Index([1, 2]), pd.Index([1, 3]))
    m1 = np.ma.masked_array([1., 2.], mask=[True, False])
    m2 = np.ma.masked_array([1., 2.], mask=[False, False])
    assert differs(m1, m2) and not differs(m1, m1.copy())


def test_checkpoint_refuses_another_dataframe(tmp_path):
    pd = pytest.importorskip("pandas")

    def df_model(df):
        y = torch.tensor(df["y"].values, dtype=torch.float32)
        mu = pyro.sample("mu", dist.Normal(0., 10.))
        with pyro.plate("n", len(y)):
            pyro.sample("y", dist.Normal(mu, 1.), obs=y)
    ck = tmp_path / "pd.pt"
    fit(df_model, AutoNormal(df_model), pd.DataFrame({"y": [0.1, -0.2, 0.3]}), num_steps=3, progress=False,
        checkpoint=ck)
    with pytest.raises(CheckpointError, match=r"args\[0\]"):
        fit(df_model, AutoNormal(df_model), pd.DataFrame({"y": [50., 51., 49.]}), num_steps=6, progress=False,
            checkpoint=ck)


# ------------------------------------------------------------------ 4. corrupt payloads
def _entry_data_offset(raw: bytes, info) -> int:
    """Where an entry's (stored, uncompressed) bytes start: after its local header."""
    off = info.header_offset
    n = int.from_bytes(raw[off + 26:off + 28], "little")
    m = int.from_bytes(raw[off + 28:off + 30], "little")
    return off + 30 + n + m


def test_a_flipped_bit_in_a_tensor_payload_is_refused(tmp_path):
    p = tmp_path / "x.tandem"
    dump({"x": torch.arange(1000.)}, p, "k")
    assert torch.equal(load(p, "k")["x"], torch.arange(1000.))
    raw = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data/0"))
    raw[_entry_data_offset(bytes(raw), info) + 4 * 92] ^= 0x01        # one bit of x[92]
    bad = tmp_path / "bad.tandem"
    bad.write_bytes(bytes(raw))
    with pytest.raises(PersistenceError, match=r"bad\.tandem.*CRC"):
        load(bad, "k")
    with pytest.raises(CheckpointError, match=r"bad\.tandem"):
        load_checkpoint(bad, "k")


# ------------------------------------------------------------------ 12. names outside tandem
def _crafted(tmp_path, meta, name="crafted.tandem", version=1):
    p = tmp_path / "good.tandem"
    dump({"v": 1}, p, "k")
    payload = torch.load(p, weights_only=True)
    payload["meta"] = json.dumps(meta)
    payload["version"] = version
    out = tmp_path / name
    torch.save(payload, out)
    return out


@pytest.mark.parametrize("meta", [
    {"$fn": "tandem.inference.atomic_files:tempfile.mkstemp"},       # through an imported module
    {"$fn": "tandem.inference.atomic_files:os.path.join"},
    {"$fn": "tandem.inference.persistence:Path"},                   # a foreign class imported by name
    {"$fn": "tandem.inference.svi:Trace_ELBO"},
    {"$fn": "tandem.inference.persistence:dump.__globals__"},       # dunder walk
    {"$fn": "tandem.inference.persistence:load.<locals>.x"},
    {"$fn": "tandem..x:y"},
    {"$fn": "os:system"},
    {"$o": "tandem.inference.persistence:np.random.RandomState", "state": {"$t": []}},
    {"$o": "tandem.inference.persistence:Path", "state": {"$d": []}},
    {"$o": "tandem.inference.atomic_files:tempfile.TemporaryDirectory", "state": {"$d": []}},
    {"$enum": "tandem.inference.persistence:enum.Enum", "name": "x"},
    {"$nt": "tandem.inference.persistence:PurePath", "v": []},
    {"$cp": "torch.distributions.constraints:torch.Tensor", "state": {"$d": []}},
])
def test_safe_loader_resolves_only_names_defined_in_tandem(tmp_path, meta):
    p = _crafted(tmp_path, meta)
    # refused for what it names (not by luck, when the found object chokes on a malformed state)
    with pytest.raises(PersistenceError, match=r"crafted\.tandem: refers to"):
        load(p)


def test_tandem_functions_classes_and_objects_still_round_trip(tmp_path):
    from tandem.inference.checkpoints import CheckpointError as CE
    from tandem.inference.svi import LBFGS as L
    p = tmp_path / "ok.tandem"
    obj = {"fn": fingerprint, "cls": CE, "nested": L.__post_init__, "lbfgs": L(max_iter=4)}
    dump(obj, p, "k")
    back = load(p, "k")
    assert back["fn"] is fingerprint and back["cls"] is CE and back["nested"] is L.__post_init__
    assert back["lbfgs"] == L(max_iter=4)


# ------------------------------------------------------------------ 13. version tags
@pytest.mark.parametrize("version", [True, 0, -5, 1.0, "1"])
def test_malformed_version_tags_are_refused(tmp_path, version):
    p = _crafted(tmp_path, {"$l": []}, version=version)
    with pytest.raises(PersistenceError, match="version"):
        load(p)


def test_version_one_loads(tmp_path):
    assert load(_crafted(tmp_path, {"$l": [1, 2]})) == [1, 2]


# ------------------------------------------------------------------ 14, 17. messages and docs
def test_a_folder_as_checkpoint_is_named_without_advice_to_delete_it(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    with pytest.raises(CheckpointError) as info:
        fit(model, AutoDelta(model), X, Y, num_steps=2, progress=False, optim=LBFGS(max_iter=2), checkpoint=folder)
    msg = str(info.value)
    assert "is a folder" in msg and "file" in msg and "delete" not in msg
    assert folder.is_dir()


def test_fit_docstring_states_the_inclusive_stopping_rule():
    doc = fit.__doc__
    assert "below ``tol``" not in doc and "<= tol" in doc


def test_masked_arrays_keep_their_mask_through_a_file(tmp_path):
    p = tmp_path / "m.tandem"
    m = np.ma.masked_array([1., 2., 3.], mask=[True, False, False], fill_value=-9.)
    dump({"m": m}, p, "k")
    back = load(p, "k")["m"]
    assert isinstance(back, np.ma.MaskedArray)
    np.testing.assert_array_equal(np.ma.getmaskarray(back), [True, False, False])
    np.testing.assert_array_equal(back.data, m.data)
    assert back.fill_value == -9.
