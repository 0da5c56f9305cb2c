"""McGPDS real-data loaders and baselines against the protocol's reference values.

Reference values (../shared/data/README.md, docs/specs/mcgpds_protocol.md §3) were measured
independently of this code; a loader that deviates from the protocol (subsampling,
sequence choice, scaling, dtype) changes them.
"""
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio

from common import DATA_DIR
from tandem.inference import metrics as M
from tandem.inference.datasets.coil20 import COIL20_FILE, load_coil20
from tandem.inference.datasets.cuave import CUAVE_FILE, load_cuave, per_dim_scale
from tandem.inference.datasets.human_pose import HUMAN_POSE_FILE, constant_columns, load_human_pose, seq_times
from tandem.inference.datasets.oil import OIL_FILES, load_oil, read_netlab
from tandem.inference.datasets.poser import load_poser
from tandem.inference.datasets.usps import load_usps_reconstruction
from tandem.inference.mcgpds.baselines import nn_latent_space, nn_y_space, training_mean_predictor

needs_pose = pytest.mark.skipif(not (DATA_DIR / HUMAN_POSE_FILE).exists(), reason="human pose data missing")
needs_cuave = pytest.mark.skipif(not (DATA_DIR / CUAVE_FILE).exists(), reason="CUAVE data missing")
needs_oil = pytest.mark.skipif(not (DATA_DIR / OIL_FILES[0]).exists(), reason="oil data missing")


@pytest.fixture(scope="module")
def pose():
    return load_human_pose()


@pytest.fixture(scope="module")
def cuave():
    return load_cuave()


# ------------------------------------------------------------------ missing files

@pytest.mark.parametrize("loader,fname", [(load_human_pose, "humanPoseDataset.mat"),
                                          (load_cuave, "AudioVideoAlignedData1.mat"),
                                          (load_oil, "oilTrn.dat")])
def test_missing_file_names_file_and_readme(tmp_path, loader, fname):
    with pytest.raises(FileNotFoundError) as e:
        loader(tmp_path)
    assert fname in str(e.value) and "README.md" in str(e.value)


# ------------------------------------------------------------------ pure helpers

def test_seq_times_restart_per_sequence():
    t = seq_times([3, 5], dt=0.05)
    np.testing.assert_allclose(t, [0, 0.05, 0.10, 0, 0.05])


def test_nn_y_space_matches_brute_force():
    r = np.random.default_rng(0)
    X, Q = r.normal(size=(40, 5)), r.normal(size=(7, 5))
    X[:, 2] *= 100.0                                  # one dominant column
    Y2 = r.normal(size=(40, 3))
    brute = np.array([np.argmin(((X - q) ** 2).sum(1)) for q in Q])
    pred, idx = nn_y_space(X, Y2, Q)
    np.testing.assert_array_equal(idx, brute)
    np.testing.assert_array_equal(pred, Y2[brute])
    # standardised search: the same as brute force on z-scored columns (training statistics)
    mu, sd = X.mean(0), X.std(0)
    brute_std = np.array([np.argmin((((X - mu) / sd - (q - mu) / sd) ** 2).sum(1)) for q in Q])
    np.testing.assert_array_equal(nn_y_space(X, Y2, Q, standardise=True)[1], brute_std)
    assert (brute_std != brute).any()                 # the dominant column changes the answer
    # a query equal to a training row finds that row
    np.testing.assert_array_equal(nn_y_space(X, Y2, X[[3, 11]])[1], [3, 11])
    with pytest.raises(ValueError, match="columns"):
        nn_y_space(X, Y2, Q[:, :4])


def test_constant_columns_and_per_dim_scale():
    A = np.array([[1.0, 5.0], [3.0, 5.0], [5.0, 5.0]])
    np.testing.assert_array_equal(constant_columns(A), [False, True])
    b, sc = per_dim_scale(A)
    np.testing.assert_allclose(sc, [2.0, 1.0])


def test_training_mean_predictor_is_gaussian_fit():
    r = np.random.default_rng(1)
    Y = r.normal(3.0, 2.0, size=(500, 2))
    Y[:, 1] = 7.0
    m, v, mask = training_mean_predictor(Y, 4)
    assert m.shape == v.shape == (4, 2)
    np.testing.assert_allclose(m[0], Y.mean(0))
    np.testing.assert_allclose(v[0, 0], Y[:, 0].var(ddof=1))
    np.testing.assert_array_equal(mask, [True, False])
    # MSLL of the fitted Gaussian on fresh draws ≈ entropy ½log(2πe σ²)
    T = r.normal(3.0, 2.0, size=(20000, 2))
    val = M.msll(np.tile(m[0], (20000, 1)), np.tile(v[0], (20000, 1)) + (~mask), T, mask=mask)
    assert abs(val - 0.5 * np.log(2 * np.pi * np.e * 4.0)) < 0.03


def test_nn_latent_space_returns_training_rows():
    mu = np.arange(10.0)[:, None]
    Y2 = np.arange(20.0).reshape(10, 2)
    p, idx = nn_latent_space(mu, np.array([[2.2], [8.9]]), Y2)
    np.testing.assert_array_equal(idx, [2, 9])
    np.testing.assert_array_equal(p, Y2[[2, 9]])


def test_gpy_wrapper_raises_import_error_when_absent(monkeypatch):
    import builtins

    from tandem.inference.mcgpds import baselines as B
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "GPy" or name.startswith("GPy."):
            raise ImportError("no GPy")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake)
    assert not B.gpy_available()
    with pytest.raises(ImportError, match="GPy"):
        B.fit_gpy_mrd(np.zeros((5, 2)), np.zeros((5, 2)), np.zeros((1, 2)))
    with pytest.raises(ImportError, match="GPy"):
        B.fit_gpy_bgplvm_missing(np.zeros((5, 2)), np.zeros((5, 2)), np.zeros((1, 2)))


# ------------------------------------------------------------------ human pose (protocol §1)

@needs_pose
def test_pose_split_times_and_scaling(pose):
    assert pose.Y1.shape == (566, 100) and pose.Y2.shape == (566, 63)
    assert pose.Y1_test.shape == (158, 100) and pose.Y2_test.shape == (158, 63)
    assert pose.seq_ends == [34, 57, 79, 240, 433, 513, 566]
    starts = [0] + pose.seq_ends[:-1]
    assert all(pose.t[s] == 0.0 for s in starts)
    np.testing.assert_allclose(pose.t[:3], [0, 0.05, 0.10])
    np.testing.assert_allclose(pose.t[33], 33 * 0.05)
    np.testing.assert_allclose(pose.t_test[[0, -1]], [0.0, 7.85])
    assert abs(pose.scale1 - 2.554206) < 5e-7
    assert abs(pose.scale2 - 20.648137) < 5e-7
    np.testing.assert_allclose(pose.bias2, pose.Y2.mean(0))
    np.testing.assert_allclose(pose.m1.mean(0), 0, atol=1e-12)
    # §1.5: the scaled pose view has variance ≈ 0.05, the silhouettes ≈ 0.80
    assert abs(pose.m2.var() - 0.05) < 0.002 and abs(pose.m1.var() - 0.80) < 0.01
    np.testing.assert_allclose(pose.unscale_mean(pose.m2), pose.Y2, atol=1e-9)
    np.testing.assert_allclose(pose.unscale_var(np.ones(3)), pose.scale2 ** 2)
    assert pose.info["time_range_for_init"] == pytest.approx(2.6)
    assert pose.info["constant_pose_columns"] == [0, 1, 2, 3, 4, 5]


@needs_pose
def test_pose_reference_baselines(pose):
    p, _ = nn_y_space(pose.Y1, pose.Y2, pose.Y1_test)
    assert round(M.mean_joint_error(p, pose.Y2_test), 4) == 2.6523
    assert round(M.rmse(p, pose.Y2_test), 3) == 3.088
    p, _ = nn_y_space(pose.Y1, pose.Y2, pose.Y1_test, standardise=True)
    assert round(M.mean_joint_error(p, pose.Y2_test), 3) == 2.434
    # scaled silhouettes give the same NN (invariance to the scalar scaling)
    p2, _ = nn_y_space(pose.m1, pose.Y2, pose.m1_test)
    assert round(M.mean_joint_error(p2, pose.Y2_test), 4) == 2.6523
    m, v, mask = training_mean_predictor(pose.Y2, pose.n_test)
    assert round(M.mean_joint_error(m, pose.Y2_test), 2) == 6.51
    assert int(mask.sum()) == 57 and not mask[:6].any()
    val = M.msll(m, v, pose.Y2_test, mask=mask)
    assert np.isfinite(val) and round(val, 2) == 2.03
    with pytest.raises(ValueError, match="mask"):
        M.msll(m, v, pose.Y2_test)        # unmasked: zero variance on joints 1–2


# ------------------------------------------------------------------ CUAVE (protocol §2)

@needs_cuave
def test_cuave_split_times_and_scaling(cuave):
    assert cuave.Y1.dtype == np.float64 and cuave.Y1.shape == (194, 3750)
    assert cuave.Y2_test.shape == (51, 13)
    np.testing.assert_allclose(cuave.t[[0, 1, -1]], [0, 0.05, 9.65])
    np.testing.assert_allclose(cuave.t_test[[1, -1]], [0.05, 2.5])
    np.testing.assert_allclose(cuave.scale2[:3], [3.32, 1.68, 0.79], atol=0.005)
    assert 0.79 < cuave.scale1.min() < 0.80 and 51.8 < cuave.scale1.max() < 51.9
    np.testing.assert_allclose(cuave.m2.std(0, ddof=1), 1.0)


@needs_cuave
def test_cuave_reference_baselines(cuave):
    p, _ = nn_y_space(cuave.Y1, cuave.Y2, cuave.Y1_test)
    assert round(M.rmse(p, cuave.Y2_test), 4) == 1.3102
    p, _ = nn_y_space(cuave.Y1, cuave.Y2, cuave.Y1_test, standardise=True)
    assert round(M.rmse(p, cuave.Y2_test), 3) == 1.161
    m, v, mask = training_mean_predictor(cuave.Y2, cuave.n_test)
    assert mask.all()
    assert round(M.rmse(m, cuave.Y2_test), 3) == 1.106
    assert round(M.msll(m, v, cuave.Y2_test), 2) == 0.82


# ------------------------------------------------------------------ oil

def test_read_netlab_format(tmp_path):
    f = tmp_path / "x.dat"
    f.write_text(" nin   2\n nout  3\n ndata 2\n 0.1 0.2 1 0 0\n 0.3 0.4 0 0 1\n")
    X, Y = read_netlab(f)
    np.testing.assert_allclose(X, [[0.1, 0.2], [0.3, 0.4]])
    np.testing.assert_allclose(Y, [[1, 0, 0], [0, 0, 1]])
    f.write_text(" nin   2\n nout  3\n ndata 3\n 0.1 0.2 1 0 0\n")
    with pytest.raises(ValueError, match="expected 3 rows"):
        read_netlab(f)


@needs_oil
def test_oil_loader():
    d = load_oil()
    assert d.X.shape == (1000, 12) and d.onehot.shape == (1000, 3)
    np.testing.assert_array_equal(d.onehot.sum(1), 1)
    assert set(np.unique(d.labels)) == {0, 1, 2}
    if d.label_kind == "dominant phase (proxy)":
        frac = np.column_stack([d.outputs, 1 - d.outputs.sum(1)])
        np.testing.assert_array_equal(d.labels, frac.argmax(1))


# ------------------------------------------------------------------ corrupt / wrong files

def _write_mat(path, **variables):
    path.parent.mkdir(parents=True, exist_ok=True)
    sio.savemat(str(path), variables)


def _mat_loaders():
    return [(load_human_pose, HUMAN_POSE_FILE, "Y, Z, Y_test, Z_test"),
            (load_cuave, CUAVE_FILE, "videoTr, mfccTr, videoTs, mfccTs, seqTr, seqTs"),
            (load_coil20, COIL20_FILE, "fea, gnd"),
            (load_poser, Path("human_pose") / "ankurDataPoseSilhouette.mat", "Y, Z, Y_test, Z_test"),
            (load_usps_reconstruction, Path("usps") / "usps_9298.mat", "Train_DAT, Test_DAT, trainlabels, testlabels")]


@pytest.mark.parametrize("i", range(5))
@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong_variables"])
def test_mat_loaders_name_the_file_and_the_expected_variables(tmp_path, i, damage):
    loader, rel, variables = _mat_loaders()[i]
    path = tmp_path / rel
    if rel.parts[0] == "usps":   # the label files are checked before the images are read
        for f in ("usps_gpml_resampled_train_labels.txt", "usps_gpml_resampled_test_labels.txt"):
            (tmp_path / "usps").mkdir(exist_ok=True)
            (tmp_path / "usps" / f).write_text("1 0\n")
    _write_mat(path, something_else=np.zeros((3, 3)), other=np.ones(2))
    if damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"this is not a MATLAB file" * 20)
    with pytest.raises(ValueError) as e:
        loader(tmp_path)
    msg = str(e.value)
    assert str(path) in msg and variables in msg, msg
    if damage == "wrong_variables":
        assert "lacks" in msg and "something_else" in msg


def test_read_netlab_rejects_nan_and_malformed_rows(tmp_path):
    p = tmp_path / "bad.dat"
    p.write_text("nin 2\nnout 1\nndata 2\n1 2 3\n4 nan 6\n")
    with pytest.raises(ValueError, match=r"bad.dat: contains 1 NaN or inf values \(first at data row 1, column 1\)"):
        read_netlab(p)
    p.write_text("nin 2\nnout 1\nndata 2\n1 2 3\n4 five 6\n")
    with pytest.raises(ValueError, match="bad.dat: expected 2 rows of 3 numbers"):
        read_netlab(p)


def test_load_oil_rejects_nan(tmp_path):
    (tmp_path / "oil").mkdir()
    good = "nin 12\nnout 2\nndata 2\n" + "\n".join(" ".join(["0.5"] * 14) for _ in range(2)) + "\n"
    (tmp_path / "oil" / "oilTrn.dat").write_text(good)
    (tmp_path / "oil" / "oilTst.dat").write_text(good.replace("0.5 0.5\n", "0.5 nan\n", 1))
    with pytest.raises(ValueError, match="oilTst.dat: contains 1 NaN"):
        load_oil(tmp_path)
    (tmp_path / "oil" / "oilTst.dat").write_text(good)
    assert load_oil(tmp_path).X.shape == (4, 12)
