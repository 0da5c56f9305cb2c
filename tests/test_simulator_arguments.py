"""Every public simulator checks every declared argument before drawing anything.

One table below declares, per simulator, the kind of each argument (a size, a seed, a choice,
a list of sizes); each kind has one list of bad values, and every bad value of every declared
argument must raise a ValueError that names the argument. A value the kind accepts (a numpy
integer) must give the same draw as the Python integer. The SAMTC model's scalar
hyperparameters are walked from their declaration (``HYPERPARAMETER_RANGES``).

Before these checks: ``seed=None``/``True``/``1.5``/``"0"`` drew (or truncated) in the twin and
coupled-projection simulators, ``which=True`` was Toy 1, ``n_atoms=1.5`` was 1 atom, a float
``chunk_frames`` ran, and a bad ``Q``/``M``/``J``/``out_dims`` of the McGPDS simulators failed
deep inside torch.
"""
from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
import torch

from tandem.inference.mcgpds.simulation import simulate_sequences
from tandem.inference.samtc.simulate import simulate_tasks
from tandem.models import coupled_projections, mcgpds, samtc, twin_gp

T6 = torch.linspace(0, 1, 6, dtype=torch.float64)

#: (simulator, smallest valid call, {argument: kind})
SIMULATORS = {
    "coupled_projections.simulate": (coupled_projections.simulate, dict(n=8),
                                     {"n": "size", "d": "size", "dx": "size", "dy": "size", "seed": "seed"}),
    "twin_gp.simulate": (twin_gp.simulate, dict(n_train=10),
                         {"which": "toy", "seed": "seed", "n_train": "size"}),
    "samtc.simulate": (samtc.simulate, dict(n=[5, 6], h=[2, 2], n_atoms=2),
                       {"n_atoms": "size", "d": "size", "seed": "seed", "n": "sizes", "h": "sizes"}),
    "mcgpds.simulate": (mcgpds.simulate, dict(times=T6, seq_ids=torch.zeros(6), out_dims=[2], M=4),
                        {"Q": "size", "M": "size", "J": "size", "seed": "seed", "out_dims": "sizes"}),
    "simulate_sequences": (simulate_sequences, dict(n_seq=2, seq_len=3, out_dims=[2], M=4),
                           {"n_seq": "size", "seq_len": "size", "Q": "size", "M": "size", "J": "size",
                            "chunk_frames": "size", "seed": "seed", "out_dims": "sizes"}),
    "simulate_tasks": (simulate_tasks, dict(n_points=(60, 75, 60)), {"seed": "seed"}),
}

#: bad values of each kind of argument (a size is an integer ≥ 1; a seed an integer in [0, 2³² − 1])
BAD = {
    "size": [0, -1, 1.5, True, None, "2", np.float64(2.0)],
    "seed": [None, True, 1.5, -1, 2 ** 32, "0", np.float64(0.0)],
    "toy": [True, 1.0, 0, 3, None, "1"],
    "sizes": [[0, 2], [1.5, 2], [True, 2], [-1, 2], [None, 2], "ab"],
}


def _cases():
    for key, (_, _, params) in SIMULATORS.items():
        for arg, kind in params.items():
            for i, bad in enumerate(BAD[kind]):
                yield pytest.param(key, arg, bad, id=f"{key}-{arg}-{i}")


@pytest.mark.parametrize("key, arg, bad", list(_cases()))
def test_every_declared_argument_refuses_its_bad_values_by_name(key, arg, bad):
    fn, base, _ = SIMULATORS[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=arg):
            fn(**{**base, arg: bad})


def _same(a, b):
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and _same(dataclasses.asdict(a), dataclasses.asdict(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a if k != "data")
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (torch.Tensor, np.ndarray)):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


@pytest.mark.parametrize("key", list(SIMULATORS))
def test_numpy_integers_draw_what_python_integers_draw(key):
    fn, base, params = SIMULATORS[key]
    seed_arg = "seed" if "seed" in params else None
    kw = {**base, seed_arg: 3}
    numpy_kw = {**base, seed_arg: np.int64(3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _same(fn(**kw), fn(**numpy_kw))


def test_simulate_tasks_records_its_settings_as_plain_numbers():
    sim = simulate_tasks(n_tasks=np.int64(3), n_points=(60, 75, 60), seed=np.int64(3), sigma=np.float64(1.0))
    json.dumps(sim.config)      # a numpy seed or size in the record would not serialise
    assert type(sim.config["seed"]) is int and type(sim.config["sigma"]) is float


HYPER_BAD = [float("nan"), float("inf"), True, "1.0"]


def _hyper_cases():
    for name, low in samtc.HYPERPARAMETER_RANGES.items():
        for i, bad in enumerate(HYPER_BAD + [low]):   # the excluded lower bound itself
            yield pytest.param(name, bad, id=f"{name}-{i}")


@pytest.mark.parametrize("name, bad", list(_hyper_cases()))
def test_samtc_model_hyperparameters_are_checked_from_their_declaration(name, bad):
    with pytest.raises(ValueError, match=name):
        samtc.simulate([5, 6], [2, 2], 2, **{name: bad})


def test_samtc_hyperparameter_declaration_covers_the_models_scalar_keywords():
    import inspect
    scalar = {n for n, p in inspect.signature(samtc.model).parameters.items()
              if isinstance(p.default, float)}
    assert scalar == set(samtc.HYPERPARAMETER_RANGES)


@pytest.mark.parametrize("name", sorted(samtc.HYPERPARAMETER_RANGES))
def test_fit_model_checks_the_hyperparameters_from_the_same_declaration_before_any_work(name, monkeypatch):
    from tandem.inference.samtc import model_fit
    sim = samtc.simulate([20, 20], [2, 2], 2, seed=0)

    def no_work(*a, **k):
        raise AssertionError("fit_model scaled the tasks before checking its hyperparameters")
    monkeypatch.setattr(model_fit, "scale_tasks", no_work)
    low = samtc.HYPERPARAMETER_RANGES[name]
    with pytest.raises(ValueError, match=name):
        model_fit.fit_model(sim["tasks"], [2, 2], num_steps=1, **{name: low})
