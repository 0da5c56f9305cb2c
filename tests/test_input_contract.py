"""The input contract, swept generically (issue 18): every array argument of every public
method of every estimator, fed every class of bad or unusual input (see
``tests/input_sweep.py`` for the classes and what each must give).

Every case must end in a ``ValueError``/``TypeError`` naming the argument, or in a result
equal to the clean call's (lists == arrays, float32 == float64 on the same values,
non-contiguous == contiguous, tensors with ``requires_grad`` == plain data); a different
result or any other exception fails.
"""
import fault_survey
import input_sweep
import numpy as np
import pytest
import torch

CASES = input_sweep.sweep_cases()
_SLOW = ("McGPDS.fit", "StochasticMcGPDS.fit")


def _param(c):
    marks = [pytest.mark.slow] if c.name.split(":")[0] in _SLOW else []
    return pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_every_bad_input_is_a_named_error_or_the_clean_result(case):
    kind, msg = fault_survey.classify(case)
    assert kind in ("clear", "handled"), f"{kind}: {msg}"


def test_the_sweep_covers_every_estimator_and_class():
    """A guard on the sweep itself: all five estimators, and every class for a data argument."""
    names = {c.name.split(".")[0] for c in CASES}
    assert names == {"McGPDS", "StochasticMcGPDS", "TwinGPRegressor", "SAMTC", "CoupledProjections"}
    labels = {c.name.split(" = ")[1] for c in CASES if c.name.startswith("TwinGPRegressor.fit: X =")}
    for want in ("NaN", "+inf", "-inf", "one more axis", "0-d scalar", "empty", "zero-length axis", "one row short",
                 "object dtype", "str dtype", "complex dtype", "bool dtype", "python list", "tuple",
                 "scipy.sparse matrix", "float32 array", "float32 tensor", "int array", "int tensor",
                 "non-contiguous array", "non-contiguous tensor", "Fortran order", "requires_grad tensor",
                 "meta tensor", "masked array (an entry masked)", "masked array (nothing masked)", "numpy.matrix",
                 "scipy.sparse csc matrix", "scipy.sparse coo array"):
        assert want in labels, want
    assert len(CASES) >= 700


def test_the_sweep_detects_a_silent_misread():
    """Control: a call that silently drops the last row is classified silent, one that
    reads numeric strings as numbers silent too (so a pass above means something)."""
    t = input_sweep.Target("toy", lambda: {"X": np.arange(12.0).reshape(6, 2)}, {"X": "data"},
                           lambda f: np.asarray(f["X"], dtype=float)[:5].sum(0) if not isinstance(f["X"], torch.Tensor)
                           else f["X"].detach().double()[:5].sum(0))
    kinds = {c.name: fault_survey.classify(c)[0] for c in input_sweep.target_cases(t)}
    assert kinds["toy: X = NaN"] == "silent"            # the NaN is in the dropped row
    assert kinds["toy: X = python list"] == "handled"
    assert kinds["toy: X = str dtype"] == "silent"       # numeric strings read as numbers: an error was due


def test_the_sweep_checks_output_types():
    """Control: numpy.matrix out (what a sparse input once gave), numpy out for a tensor in,
    and a tensor out for numpy in are each caught, though their values equal the clean ones."""
    def run(f):
        X = f["X"]
        if isinstance(X, torch.Tensor):
            return X.detach().double().numpy().sum(0, keepdims=True)           # tensor in -> numpy out
        return np.asmatrix(np.asarray(X, dtype=float)).sum(0)                    # numpy.matrix out
    t = input_sweep.Target("toy", lambda: {"X": np.arange(12.0).reshape(6, 2)}, {"X": "data"}, run, follows=("X",))
    kinds = {c.name: fault_survey.classify(c)[0] for c in input_sweep.target_cases(t)}
    assert kinds["toy: X = python list"] == "silent"
    assert kinds["toy: X = float64 tensor"] == "silent"
    assert input_sweep.output_type_problem(torch.zeros(2), tensor=False)
    assert input_sweep.output_type_problem([np.zeros(2), np.ma.zeros(2)], tensor=None)
    assert input_sweep.output_type_problem((np.zeros(2), torch.zeros(2)), tensor=None) is None
