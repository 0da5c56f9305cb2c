"""Helpers shared by the test modules: project paths and the example-script runner."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: the repository root (tests/ lives directly under it).
ROOT = Path(__file__).resolve().parent.parent
#: ../shared/data relative to the project root, where CI and developers keep the data.
DATA_DIR = ROOT.parent / "shared" / "data"

#: the keys every results JSON written by an example has (the results schema).
RESULT_KEYS = {"experiment", "seeds", "results", "timings_s", "config", "environment"}


def load_script(relative: str, register: bool = False):
    """Import the script ``ROOT/relative`` (e.g. ``"docs/make_tables.py"``) as a module named by its
    stem; ``register`` also puts it in ``sys.modules`` (dataclasses defined in it look it up there)."""
    import importlib.util
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_example(name: str, *args: str, timeout: int = 600, returncode: int | None = 0):
    """Run ``examples/<name> *args`` from the project root with a headless matplotlib.

    ``returncode``: the exit status the run must end with (0: success; 2: an argparse
    error); ``None`` checks nothing (the caller asserts on the result). Returns the
    ``subprocess.CompletedProcess`` with captured text output.
    """
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    if returncode is not None:
        assert proc.returncode == returncode, (
            f"{name} exited {proc.returncode} (expected {returncode}):\n"
            f"STDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-3000:]}")
    return proc


def read_results(out_dir, experiment: str) -> dict:
    """``out_dir/<experiment>.json``, checked against the results schema's top-level keys."""
    res = json.loads((Path(out_dir) / f"{experiment}.json").read_text())
    assert res["experiment"] == experiment
    assert RESULT_KEYS <= set(res), sorted(RESULT_KEYS - set(res))
    return res


def smooth_multi_output_problem():
    """``(X, Y, Xt, Yt)``: a smooth map R² → R³ (60 noisy training pairs, 9 noise-free test
    points), float64 tensors — the twin-GP tests' multivariate-output problem."""
    import torch
    D = torch.float64
    g = torch.Generator().manual_seed(1)
    X = torch.rand(60, 2, generator=g, dtype=D) * 2 - 1
    f = lambda x: torch.stack([torch.sin(2 * x[:, 0]), x[:, 0] * x[:, 1], torch.cos(x[:, 1])], 1)  # noqa: E731
    Xt = torch.rand(9, 2, generator=g, dtype=D) * 2 - 1
    return X, f(X) + 0.01 * torch.randn(60, 3, generator=g, dtype=D), Xt, f(Xt)


def two_view_split(seed=0, N=50, Nt=15):
    """Two small time-aligned views (5 and 4 outputs) of a shared slow signal plus a private one per
    view, split into N training and Nt test frames: ``(train views, test views, t_train, t_test)``
    (numpy; test times restart at 0)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    t = np.arange(N + Nt) * 0.1
    s = np.sin(2 * np.pi * t / 3.0)
    views = []
    for k, D in enumerate((5, 4)):
        A = rng.normal(size=(2, D))
        views.append(np.tanh(np.c_[0.3 * np.cos(2 * np.pi * t / (2.1 + k)), s] @ A)
                     + 0.05 * rng.standard_normal((N + Nt, D)))
    return [Y[:N] for Y in views], [Y[N:] for Y in views], t[:N], t[N:] - t[N]


def two_view_toy(N: int = 60, seed: int = 1):
    """Two small time-aligned views (N, 5) and (N, 3) driven by one shared and one private
    sinusoid each, plus noise, and their times (N,): a McGPDS problem that fits in seconds."""
    import numpy as np
    rng = np.random.default_rng(seed)
    t = np.arange(N) * 0.05
    shared = np.sin(2 * np.pi * t / 3)
    Y1 = np.tanh(np.c_[shared, np.cos(2 * np.pi * t / 2.1)] @ rng.normal(size=(2, 5)))
    Y2 = np.tanh(np.c_[shared, np.sin(2 * np.pi * t / 1.3)] @ rng.normal(size=(2, 3)))
    return Y1 + 0.05 * rng.normal(size=Y1.shape), Y2 + 0.05 * rng.normal(size=Y2.shape), t
