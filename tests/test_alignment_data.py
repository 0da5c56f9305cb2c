"""Data for the alignment experiments: COIL-20 loader and the paired synthetic manifolds."""
import numpy as np
import pytest

from common import DATA_DIR
from tandem.inference.datasets.coil20 import COIL20_FILE, N_POSES, load_coil20
from tandem.inference.datasets.manifolds import linear_views_of_curve, paired_scurve_swissroll, scurve, swiss_roll


@pytest.mark.skipif(not (DATA_DIR / COIL20_FILE).exists(), reason="COIL-20 data not present")
def test_coil20_loader_shapes_and_pose_order():
    c = load_coil20()
    assert c.images.shape == (20, N_POSES, 1024)
    assert c.images.min() >= 0 and c.images.max() <= 1
    duck = c.object(1)
    # consecutive poses (5° apart, wrapping 71 → 0) are closer than poses 180° apart
    step = np.linalg.norm(duck - np.roll(duck, -1, 0), axis=1).mean()
    far = np.linalg.norm(duck - np.roll(duck, -36, 0), axis=1).mean()
    assert step < 0.5 * far
    with pytest.raises(ValueError, match="object"):
        c.object(21)


def test_coil20_missing_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="COIL20_32x32.mat"):
        load_coil20(tmp_path)


def test_paired_manifolds_share_latent_coordinates():
    X, Y, lat = paired_scurve_swissroll(n=50, noise=0.0, seed=0)
    assert X.shape == Y.shape == (50, 3) and lat.shape == (50, 2)
    assert np.allclose(X, scurve(lat[:, 0], lat[:, 1])) and np.allclose(Y, swiss_roll(lat[:, 0], lat[:, 1]))
    assert np.allclose(X[:, 1], Y[:, 1])  # the height coordinate is the shared v
    # Swiss roll: the radius grows with u (θ = 1.5π(1 + 2u))
    r = np.hypot(Y[:, 0], Y[:, 2])
    assert np.all(np.diff(r[np.argsort(lat[:, 0])]) > 0)
    X2, _, _ = paired_scurve_swissroll(n=50, noise=0.0, seed=0)
    assert np.array_equal(X, X2)  # seeded


def test_linear_views_are_linear_images_of_one_curve():
    X, Y, tau = linear_views_of_curve(n=60, dx=7, dy=5, noise=0.0, seed=1)
    assert np.linalg.matrix_rank(X - X.mean(0), tol=1e-8) == 3
    # both views are linear maps of the same 3-d curve: X = Y B for some B
    B, *_ = np.linalg.lstsq(Y, X, rcond=None)
    assert np.allclose(Y @ B, X, atol=1e-8)
    with pytest.raises(ValueError, match="noise"):
        linear_views_of_curve(noise=-1.0)
