"""Classes of input the shared validators must read faithfully or refuse by name.

Each test covers one class of input (values beyond int64, masked arrays, non-real metric inputs,
labels without their time stamps, numpy-integer seeds, low-precision and sparse tensors, asymmetric
or degenerate Cholesky inputs, missing-value labels, scalar arguments) across every reader that
meets it, so a fix in one place cannot leave a sibling reader behind.
"""
from __future__ import annotations

import decimal
import inspect
import re
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import scipy.sparse as sp
import torch
from pyro.infer.autoguide import AutoDelta

from tandem.inference import metrics as M
from tandem.inference import validation
from tandem.inference.numerics import NotPositiveDefiniteError, cholesky_jitter, seeded_generator, set_seed
from tandem.inference.params import Seed, check_param
from tandem.inference.validation import (
    as_array,
    as_index_array,
    as_tensor,
    check_real_range,
    check_seed,
    check_time_order,
    check_weights,
    label_codes,
    sequence_labels,
)

ROOT = Path(__file__).resolve().parent.parent
NUMERIC_METRICS = [M.rmse, M.mean_abs_error, M.mean_norm_error, M.circular_pose_error_deg,
                   lambda p, t: M.mean_joint_error(np.c_[p, p, p], np.c_[t, t, t], dims_per_joint=3),
                   lambda p, t: M.msll(p, np.ones(2), t)]


# ------------------------------------------------------------------ 5. beyond int64
BEYOND_INT64 = [np.array([2 ** 63], dtype=np.uint64), [2 ** 63], np.array([2 ** 64 - 1], dtype=np.uint64),
                np.array([1e20]), np.array([2.0 ** 63]), np.array([-1e19])]


@pytest.mark.parametrize("x", BEYOND_INT64, ids=lambda x: repr(np.asarray(x).dtype))
def test_index_values_beyond_int64_are_refused_not_wrapped(x):
    with pytest.raises(ValueError, match="idx: .*int64 range"):
        as_index_array(x, "idx")
    with pytest.raises(ValueError, match="pred_partner: .*int64 range"):
        M.match_accuracy(x, np.array([0]))


def test_index_values_at_the_int64_edges_are_exact():
    big = np.iinfo(np.int64).max
    assert as_index_array(np.array([big], dtype=np.uint64), "i")[0] == big
    assert as_index_array([-2 ** 63], "i")[0] == -2 ** 63
    assert as_index_array(np.array([2.0 ** 62, -2.0 ** 63]), "i").tolist() == [2 ** 62, -2 ** 63]
    # the pairs that used to compare equal after wrapping round
    assert M.match_accuracy(np.array([2 ** 63 - 1], np.uint64), np.array([2 ** 63 - 1])) == 1.0
    assert M.match_accuracy(np.array([3, 4]), np.array([3., 5.])) == 0.5


# ------------------------------------------------------------------ 6. masked arrays
MASKED = np.ma.masked_array([1., 99.], mask=[False, True])
MASKED_READERS = {
    "as_tensor": lambda m: as_tensor(m, "x"),
    "as_array": lambda m: as_array(m, "x"),
    "as_index_array": lambda m: as_index_array(m, "x"),
    "label_codes": lambda m: label_codes(m, 2, "x"),
    "check_time_order": lambda m: check_time_order(m, times_name="x"),
    "check_weights": lambda m: check_weights(np.ma.masked_array(np.eye(2), mask=np.eye(2, dtype=bool)), "x", 2),
    "rmse": lambda m: M.rmse(np.array([1., 2.]), m),
}


@pytest.mark.parametrize("reader", list(MASKED_READERS), ids=str)
def test_masked_entries_are_refused_by_every_reader(reader):
    with pytest.raises(ValueError, match=r"masked array.*filled\(np.nan\)"):
        MASKED_READERS[reader](MASKED)


def test_masked_arrays_without_masked_entries_read_as_their_data():
    clean = np.ma.masked_invalid(np.array([1., 2.]))         # a full all-False mask
    assert as_tensor(clean, "x").tolist() == [1., 2.]
    assert as_index_array(np.ma.masked_array([3, 4]), "i").tolist() == [3, 4]   # nomask
    assert label_codes(np.ma.masked_array(["a", "b", "a"], mask=False), 3, "y").tolist() == [0, 1, 0]
    assert M.rmse(clean, np.array([1., 4.])) == pytest.approx(np.sqrt(2.0))


# ------------------------------------------------------------------ 7. metrics read real numbers
@pytest.mark.parametrize("metric", NUMERIC_METRICS)
@pytest.mark.parametrize("bad", [np.array([1 + 5j, 2]), torch.tensor([1 + 5j, 2 + 0j]), ["1", "2"],
                                 np.array([True, False]), np.array([1, 2], dtype=object),
                                 np.array([1, 2], dtype="timedelta64[s]")],
                         ids=["complex", "complex-tensor", "strings", "bool", "object", "timedelta"])
def test_metrics_refuse_non_real_inputs(metric, bad):
    with pytest.raises(ValueError, match="expected a real numeric array"):
        metric(bad, np.array([1., 2.]))
    with pytest.raises(ValueError, match="expected a real numeric array"):
        metric(np.array([1., 2.]), bad)


def test_metrics_read_low_precision_tensors_and_keep_their_values():
    t = torch.tensor([1., 3.], dtype=torch.bfloat16)
    assert M.rmse(t, torch.tensor([1., 2.])) == pytest.approx(np.sqrt(0.5))
    assert M.clustering_accuracy(t, np.array([0, 1])) == 1.0
    with pytest.raises(ValueError, match="var: .*real numeric"):
        M.msll(np.zeros(2), np.array(["1", "1"]), np.zeros(2))


def test_msll_mask_takes_bools_or_0_1_flags_only():
    rng = np.random.default_rng(0)
    m, t, v = rng.normal(size=(4, 3)), rng.normal(size=(4, 3)), rng.uniform(0.5, 2, size=(4, 3))
    ref = M.msll(m, v, t, mask=np.array([True, False, True]))
    for flags in (np.array([1., 0., 1.]), np.array([1, 0, 1]), torch.tensor([1., 0., 1.]),
                  torch.tensor([True, False, True])):
        assert M.msll(m, v, t, mask=flags) == ref
    with pytest.raises(ValueError, match="mask: expected a boolean array or 0/1 flags.*indices"):
        M.msll(m, v, t, mask=np.array([0., 2.]))
    with pytest.raises(ValueError, match="mask: .*NaN"):
        M.msll(m, v, t, mask=np.array([1., np.nan, 0.]))


def test_circular_pose_error_requires_equal_shapes_as_documented():
    assert "same shape" in M.circular_pose_error_deg.__doc__
    with pytest.raises(ValueError, match="expected equal shapes"):
        M.circular_pose_error_deg(np.array([10., 20.]), np.array(0.))


# ------------------------------------------------------------------ 8. labels and times
@pytest.mark.parametrize("n_labels", [3, 5])
def test_labels_and_times_of_different_lengths_are_refused_naming_both(n_labels):
    times = np.array([0., 1., 2., 1.])          # frame 3 is out of order
    with pytest.raises(ValueError, match="times has 4 time stamps but sequence_ids has %d labels" % n_labels):
        check_time_order(times, np.zeros(n_labels, dtype=int))
    with pytest.raises(ValueError, match="times has 4 time stamps but sequence_ids has"):
        sequence_labels([0] * n_labels, n_labels, times=times)
    with pytest.raises(ValueError, match="frame 3"):          # equal lengths: the frame is checked
        check_time_order(times, np.zeros(4, dtype=int))


# ------------------------------------------------------------------ 11. seeds
# Python's random.seed (which pyro.set_rng_seed calls) and Generator.manual_seed refuse numpy integers;
# numpy's own seeding (np.random.seed, default_rng) and torch.manual_seed take them
_SEEDING = re.compile(r"pyro\.set_rng_seed\(|torch\.Generator\([^)]*\)\.manual_seed\((?!int\()"
                      r"|(?<!np\.)(?<!numpy\.)\brandom\.seed\(")


def test_the_package_seeds_only_through_set_seed():
    """Every global seeding goes through numerics.set_seed and every seeded torch.Generator through
    seeded_generator (or an explicit int(...)), so no call can meet a numpy-integer seed raw."""
    offenders = []
    for folder in ("inference", "models", "guides"):
        for f in (ROOT / folder).rglob("*.py"):
            for i, line in enumerate(f.read_text().splitlines(), 1):
                if _SEEDING.search(line) and not (f.name == "numerics.py" and folder == "inference"):
                    offenders.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("seed", [np.int64(5), np.int32(5), np.uint32(5), 5])
def test_set_seed_takes_numpy_integers_with_the_streams_of_int(seed):
    set_seed(5)
    ref = (torch.rand(3), np.random.rand(3))
    assert set_seed(seed) == 5 and type(set_seed(seed)) is int
    torch.testing.assert_close(torch.rand(3), ref[0])
    np.testing.assert_array_equal(np.random.rand(3), ref[1])
    assert torch.equal(torch.rand(2, generator=seeded_generator(seed)),
                       torch.rand(2, generator=torch.Generator().manual_seed(5)))


@pytest.mark.parametrize("bad", [True, -1, 2 ** 32, 1.0, "1", np.float64(1.0)])
def test_seed_validators_agree_and_refuse_by_name(bad):
    for f in (lambda: set_seed(bad), lambda: seeded_generator(bad, "my_seed"), lambda: check_seed(bad, "my_seed")):
        with pytest.raises(ValueError, match="seed"):
            f()
    with pytest.raises(ValueError):
        check_param([Seed()], "seed", bad)
    check_param([Seed()], "seed", 2 ** 32 - 1)
    assert check_seed(2 ** 32 - 1) == 2 ** 32 - 1


def _tiny_model(x):
    w = pyro.sample("w", dist.Normal(0., 1.))
    with pyro.plate("n", x.shape[0]):
        pyro.sample("x", dist.Normal(w, 1.), obs=x)


def test_driver_entry_points_take_numpy_integer_seeds():
    from tandem.inference import fit, posterior_predictive
    x = torch.tensor([0.3, -0.1, 0.5], dtype=torch.float64)
    runs = [fit(_tiny_model, AutoDelta(_tiny_model), x, num_steps=3, seed=s, progress=False).losses
            for s in (np.int64(4), np.int32(4), 4)]
    np.testing.assert_array_equal(runs[0], runs[2])
    np.testing.assert_array_equal(runs[1], runs[2])

    def guide(x):
        pyro.sample("w", dist.Normal(0.2, 0.5))
    draws = [posterior_predictive(_tiny_model, guide, x, num_samples=4, seed=s).posterior["w"].values
             for s in (np.int64(3), 3)]
    np.testing.assert_array_equal(draws[0], draws[1])


def test_estimators_take_numpy_integer_seeds():
    """Every estimator whose constructor declares ``seed``, and every method of it taking ``seed``:
    np.int64 / np.int32 give the results of the same int."""
    from test_estimator_contract import CASES
    checked = []
    for case in CASES:
        est = case.make()
        if "seed" in est.get_params():
            outs = [case.out(case.make(seed=s).fit(*case.data(0))) for s in (np.int64(2), np.int32(2), 2)]
            np.testing.assert_array_equal(outs[0], outs[2])
            np.testing.assert_array_equal(outs[1], outs[2])
            checked.append(case.name)
    assert {"McGPDS", "TwinGPRegressor", "SAMTC"} <= set(checked)


def test_mcgpds_fit_and_stochastic_methods_take_numpy_integer_seeds():
    from test_estimator_contract import CASES
    cases = {c.name: c for c in CASES}
    mc = cases["McGPDS"].make(seed=np.int64(0)).fit(*cases["McGPDS"].data(0))
    a = mc.to_inference_data(2, seed=np.int64(1)).posterior
    b = mc.to_inference_data(2, seed=1).posterior
    assert all(np.array_equal(a[k].values, b[k].values) for k in a.data_vars)
    sc = cases["StochasticMcGPDS"]
    m1 = sc.make().fit(*sc.data(0), seed=np.int64(1))
    m2 = sc.make().fit(*sc.data(0), seed=1)
    assert m1.elbo() == m2.elbo()
    m1.train(1, seed=np.int32(1))
    m2.train(1, seed=1)
    assert m1.elbo() == m2.elbo()
    cp = cases["CoupledProjections"]
    est = cp.make().fit(*cp.data(0))
    assert "seed" in inspect.signature(est.to_inference_data).parameters
    a = est.to_inference_data(num_samples=2, num_steps=2, seed=np.int64(1)).posterior
    b = est.to_inference_data(num_samples=2, num_steps=2, seed=1).posterior
    assert all(np.array_equal(a[k].values, b[k].values) for k in a.data_vars)


# ------------------------------------------------------------------ 14. low precision, sparse tensors
def test_bfloat16_and_sparse_tensors_are_read():
    bf = torch.tensor([1., 2., 1.], dtype=torch.bfloat16)
    assert as_index_array(bf, "i").tolist() == [1, 2, 1]
    assert label_codes(bf, 3, "y").tolist() == [0, 1, 0]
    dense = torch.tensor([[0., 2.], [3., 0.]])
    for sparse in (dense.to_sparse(), dense.to_sparse_csr()):
        assert torch.equal(as_tensor(sparse, "x"), dense.double())
    with pytest.raises(ValueError, match=r"y: .*scipy.sparse matrix of shape \(1, 2\)"):
        label_codes(sp.csr_matrix(np.ones((1, 2))), 2, "y")


@pytest.mark.parametrize("K, match", [
    (torch.ones(3), "square"), (torch.eye(3, dtype=torch.int64), "floating"),
    (np.eye(3), "torch tensor"), (torch.eye(2, dtype=torch.complex128), "floating")])
def test_cholesky_refuses_what_it_cannot_factor_by_name(K, match):
    with pytest.raises(ValueError, match=f"K_test: .*{match}"):
        cholesky_jitter(K, "K_test")


# ------------------------------------------------------------------ 15. cholesky_jitter contract
def _spd(n=5, seed=0):
    A = torch.randn(n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return A @ A.T + 1e-3 * torch.eye(n, dtype=torch.float64)


def test_cholesky_refuses_asymmetric_matrices_but_not_round_off():
    K = _spd()
    bad = K.clone()
    bad[0, 4] += 100.0
    with pytest.raises(NotPositiveDefiniteError, match="K: expected a symmetric matrix"):
        cholesky_jitter(bad, "K")
    with pytest.raises(NotPositiveDefiniteError, match="symmetric"):
        cholesky_jitter(torch.stack([K, bad]), "K")           # one bad matrix in a batch
    near = K.clone()
    near[0, 4] *= 1 + 1e-12                                    # round-off
    L = cholesky_jitter(near)
    assert torch.equal(L, torch.linalg.cholesky(near))        # valid input: the plain factor, unchanged
    k32 = K.float()
    k32[1, 2] *= 1 + 1e-6
    cholesky_jitter(k32)
    small = K.clone()
    small[0, 4] += 1e-4 * K.abs().max()                        # no round-off: a wrong entry
    with pytest.raises(NotPositiveDefiniteError, match="symmetric"):
        cholesky_jitter(small)


@pytest.mark.parametrize("kw, name", [
    (dict(jitter=-1.0), "jitter"), (dict(jitter=0.0), "jitter"), (dict(jitter=float("nan")), "jitter"),
    (dict(growth=0.1), "growth"), (dict(growth=1.0), "growth"), (dict(growth=float("inf")), "growth"),
    (dict(max_tries=-3), "max_tries"), (dict(max_tries=2.0), "max_tries"), (dict(max_tries=True), "max_tries")])
def test_cholesky_jitter_settings_are_validated(kw, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        cholesky_jitter(_spd(), **kw)


def test_cholesky_max_tries_zero_and_degenerate_matrices():
    B = torch.randn(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    R = B @ B.T                                                # rank 2: needs jitter
    with pytest.raises(NotPositiveDefiniteError, match=r"no jitter was tried \(max_tries=0\)"):
        cholesky_jitter(R, max_tries=0)
    L = cholesky_jitter(R)                                     # the jitter is still relative, as before
    d = (L @ L.T - R).diagonal()
    assert torch.allclose(d, torch.full_like(d, d[0].item()))
    assert d[0] / R.diagonal().abs().mean() in (pytest.approx(10.0 ** -k) for k in range(1, 9))
    # no diagonal scale: refused alike in every dtype (float64 used to "succeed" with a 1e-154 diagonal)
    for dtype in (torch.float32, torch.float64):
        with pytest.raises(NotPositiveDefiniteError, match="diagonal is all zero"):
            cholesky_jitter(torch.zeros(3, 3, dtype=dtype))


# ------------------------------------------------------------------ 16. missing-value labels
def _missing_markers():
    out = [None, float("nan"), np.float32("nan"), decimal.Decimal("NaN"), np.datetime64("NaT")]
    try:
        import pandas as pd
        out += [pd.NA, pd.NaT]
    except ImportError:   # pragma: no cover - pandas is a test dependency
        pass
    return out


@pytest.mark.parametrize("missing", _missing_markers(), ids=repr)
def test_every_missing_value_marker_is_refused_as_a_label(missing):
    with pytest.raises(ValueError, match="y: .*missing"):
        label_codes(np.array(["a", missing, "a"], dtype=object), 3, "y")


def test_missing_labels_in_typed_arrays_are_refused():
    with pytest.raises(ValueError, match="y: .*missing"):
        label_codes(np.array(["2020-01-01", "NaT"], dtype="datetime64[D]"), 2, "y")
    with pytest.raises(ValueError, match="y: .*missing"):
        label_codes(np.array([np.float32("nan"), np.float32("nan")], dtype=object), 2, "y")
    with pytest.raises(ValueError, match="labels_true: .*missing"):
        M.nmi(np.array([0, None, 1], dtype=object), np.array([0, 1, 1]))


# ------------------------------------------------------------------ 17. scalar arguments
@pytest.mark.parametrize("bad", ["0.5", True, np.bool_(True), torch.tensor([0.5]), np.array([0.5]), 1 + 0j, None])
def test_check_real_range_refuses_non_real_scalars(bad):
    with pytest.raises(ValueError, match="^lr: expected a real number"):
        check_real_range(bad, "lr", low=0.0)


def test_check_real_range_reads_real_scalars():
    for good in (0.5, np.float32(0.5), np.float64(0.5), torch.tensor(0.5), np.array(0.5)):
        assert check_real_range(good, "lr", low=0.0) == 0.5
    assert check_real_range(np.int64(2), "lr", low=0.0) == 2.0
    with pytest.raises(ValueError, match=r"lr: expected a value in \(0.0, inf\)"):
        check_real_range(0.0, "lr", low=0.0, low_open=True)


def test_sizes_are_integers_not_bools():
    with pytest.raises(ValueError, match="^ndim: "):
        as_tensor(np.zeros(3), "x", ndim=True)
    with pytest.raises(ValueError, match="^min_rows: "):
        as_tensor(np.zeros(3), "x", min_rows=1.0)
    with pytest.raises(ValueError, match="^n "):
        check_weights(np.eye(1), "S", True)
    with pytest.raises(ValueError, match="^n: "):
        label_codes([1, 2], True, "y")


def test_timedelta_and_datetime_arrays_are_not_numbers():
    for x in (np.array([1], dtype="timedelta64[s]"), np.array(["2020-01-01"], dtype="datetime64[D]")):
        with pytest.raises(ValueError, match="x: expected a real numeric array"):
            as_tensor(x, "x")
        with pytest.raises(ValueError, match="x: expected a real numeric array"):
            as_index_array(x, "x")


def test_weights_between_no_points_are_refused_naming_n():
    with pytest.raises(ValueError, match=r"^n \(the number of points\): expected an integer in \[1, inf\], got 0"):
        check_weights(np.zeros((0, 0)), "S", 0)


# ----------------------------------------------------------------------------- sparse in, plain arrays out
_SPARSE_FORMATS = ("csr_matrix", "csc_matrix", "coo_matrix", "lil_matrix", "dok_matrix", "bsr_matrix",
                   "csr_array", "csc_array", "coo_array")


@pytest.mark.parametrize("fmt", _SPARSE_FORMATS)
def test_as_array_densifies_every_sparse_format_to_a_plain_ndarray(fmt):
    import scipy.sparse as sp
    A = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    out = validation.as_array(getattr(sp, fmt)(A), "A", ndim=2)
    assert type(out) is np.ndarray and out.dtype == np.float64    # not numpy.matrix
    np.testing.assert_array_equal(out, A)
    kept = validation.as_array(getattr(sp, fmt)(A), "A", ndim=2, sparse=True)
    assert sp.issparse(kept) and kept.format == "csr"
    np.testing.assert_array_equal(kept.toarray(), A)


@pytest.mark.parametrize("bad", [np.array([[1 + 1j, 0]]), np.array([[True, False]])], ids=["complex", "bool"])
def test_as_array_checks_sparse_input_like_dense(bad):
    import scipy.sparse as sp
    for sparse in (False, True):
        with pytest.raises(ValueError, match="A:"):
            validation.as_array(sp.csr_matrix(bad), "A", ndim=2, sparse=sparse)


def test_like_input_follows_the_input_container():
    out = np.arange(4.0).reshape(2, 2)
    t = validation.like_input(out, torch.zeros(1))
    assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
    np.testing.assert_array_equal(t.numpy(), out)
    back = validation.like_input(torch.as_tensor(out, dtype=torch.float64).requires_grad_(), np.zeros(1))
    assert type(back) is np.ndarray
    assert type(validation.like_input(np.asmatrix(out), [[0.0]])) is np.ndarray


# ----------------------------------------------------------------------------- labels keep their identity
@pytest.mark.parametrize("labels, codes", [
    ([1, "1", 2, 2], [0, 1, 2, 2]),                       # np.asarray made 1 and "1" one string
    ([2 ** 53, 2 ** 53 + 1, 0.5], [0, 1, 2]),             # ... and 2**53, 2**53 + 1 one float
    ((1, 1.0, True, "1"), [0, 0, 0, 1]),                  # equal as Python values: one label
    (["a", 3, "b", 3.0], [0, 1, 2, 1]),
])
def test_label_codes_do_not_coerce_mixed_lists(labels, codes):
    np.testing.assert_array_equal(validation.label_codes(labels, None, "y"), codes)


def test_metrics_read_mixed_label_lists_like_object_arrays():
    rng = np.random.default_rng(3)
    pool = [1, "1", 2, "2", 2 ** 53, 2 ** 53 + 1, 0.5, "a"]
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
    for _ in range(50):
        t = [pool[i] for i in rng.integers(0, len(pool), 12)]
        p = [pool[i] for i in rng.integers(0, len(pool), 12)]
        obj_t, obj_p = np.empty(12, object), np.empty(12, object)
        obj_t[:], obj_p[:] = t, p
        assert M.clustering_accuracy(t, p) == M.clustering_accuracy(obj_t, obj_p)
        codes_t = validation.label_codes(t, None, "t")
        codes_p = validation.label_codes(p, None, "p")
        want = normalized_mutual_info_score(codes_t, codes_p, average_method="max")
        assert M.nmi(t, p) == pytest.approx(want, abs=1e-12)
        assert adjusted_rand_score(codes_t, codes_p) == pytest.approx(
            adjusted_rand_score([str(type(v)) + repr(v) for v in t], [str(type(v)) + repr(v) for v in p]))
