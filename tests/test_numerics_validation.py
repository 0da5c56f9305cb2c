"""Cholesky-with-jitter and the input validation helpers."""
import numpy as np
import pytest
import torch

from tandem.inference.numerics import NotPositiveDefiniteError, cho_logdet, cho_solve, cholesky_jitter
from tandem.inference.validation import (
    as_array,
    as_tensor,
    check_int_range,
    check_real_range,
    check_same_rows,
    require_file,
)


def test_cholesky_exact_and_with_jitter():
    A = torch.randn(6, 4, dtype=torch.float64)
    K = A @ A.T  # rank 4: singular, needs jitter
    L = cholesky_jitter(K, "K")
    assert torch.allclose(L @ L.T, K, atol=1e-5)
    S = K + torch.eye(6, dtype=torch.float64)
    L = cholesky_jitter(S, "S")
    assert torch.equal(L, torch.linalg.cholesky(S))  # no jitter when not needed
    b = torch.randn(6, 2, dtype=torch.float64)
    assert torch.allclose(S @ cho_solve(L, b), b)
    assert cho_logdet(L).item() == pytest.approx(torch.linalg.slogdet(S)[1].item())


def test_cholesky_failure_names_the_matrix():
    K = -torch.eye(3, dtype=torch.float64)
    with pytest.raises(NotPositiveDefiniteError, match="Kuu"):
        cholesky_jitter(K, "Kuu")
    with pytest.raises(ValueError, match="NaN"):
        cholesky_jitter(torch.full((2, 2), float("nan"), dtype=torch.float64), "K")
    with pytest.raises(ValueError, match="square"):
        cholesky_jitter(torch.ones(2, 3, dtype=torch.float64), "K")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_cholesky_assume_symmetric_finds_every_non_finite_entry(value):
    # without the pass over K, a NaN or inf at any (symmetric) position, diagonal included,
    # is still refused with the NaN message, in a batch, from the factorisation's outcome
    X = torch.randn(3, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    K = X @ X.mT + torch.eye(5, dtype=torch.float64)
    assert torch.equal(cholesky_jitter(K, "K", assume_symmetric=True), cholesky_jitter(K, "K"))
    for i in range(5):
        for j in range(i + 1):
            K2 = K.clone()
            K2[1, i, j] = K2[1, j, i] = value
            with pytest.raises(NotPositiveDefiniteError, match="NaN or inf"):
                cholesky_jitter(K2, "K", assume_symmetric=True)
    with pytest.raises(ValueError, match="assume_symmetric"):
        cholesky_jitter(K, "K", assume_symmetric=1)


def test_as_tensor_checks():
    t = as_tensor(np.arange(6, dtype=np.uint8).reshape(2, 3), "Y", ndim=2)
    assert t.dtype == torch.float64 and t[1, 2] == 5  # uint8 cast before arithmetic
    with pytest.raises(ValueError, match="Y: expected a 2-d array"):
        as_tensor(np.zeros(3), "Y", ndim=2)
    with pytest.raises(ValueError, match="Y: contains 1 NaN"):
        as_tensor(np.array([[1.0, np.nan]]), "Y")
    with pytest.raises(ValueError, match=r"expected shape \(\*, 4\)"):
        as_tensor(np.zeros((2, 3)), "Y", shape=(None, 4))
    with pytest.raises(ValueError, match="numeric"):
        as_tensor(np.array(["a"]), "Y")
    with pytest.raises(ValueError, match="at least 3 rows"):
        as_tensor(np.zeros((2, 2)), "Y", min_rows=3)
    assert as_array([[1, 2]], "x").dtype == np.float64


def test_range_and_row_checks(tmp_path):
    assert check_same_rows({"a": np.zeros((3, 1)), "b": np.zeros((3, 2))}) == 3
    with pytest.raises(ValueError, match="a has 3, b has 4"):
        check_same_rows({"a": np.zeros((3, 1)), "b": np.zeros((4, 2))}, "frames")
    with pytest.raises(ValueError, match="integer in"):
        check_int_range(0, "Q", low=1)
    with pytest.raises(ValueError, match="alpha"):
        check_real_range(1.5, "alpha", 0, 1)
    with pytest.raises(ValueError, match="beta"):
        check_real_range(1.0, "beta", low=1.0, low_open=True)
    with pytest.raises(FileNotFoundError, match="missing.mat"):
        require_file(tmp_path / "missing.mat", "pose data", hint="see ../shared/data/README.md")
