"""Shared pytest fixtures: the project root, the shared data folder, a clean Pyro state."""
import os
from pathlib import Path

# The suite's problems are small: one BLAS/OpenMP thread avoids thread start-up and
# oversubscription costs (measured up to 45x on tiny ops on a busy 2-core machine) and
# makes timings reproducible. Example scripts run as subprocesses inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pyro
import pytest
import torch

from common import DATA_DIR, ROOT

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# loaders (and example scripts run as subprocesses) find the shared data through this
os.environ.setdefault("TANDEM_DATA", str(DATA_DIR))


@pytest.fixture(autouse=True)
def _clean_pyro():
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


@pytest.fixture
def project_root() -> Path:
    return ROOT


@pytest.fixture
def data_dir() -> Path:
    """../shared/data relative to the project root; tests that need it skip without it."""
    if not DATA_DIR.exists():
        pytest.skip(f"shared data folder {DATA_DIR} not present")
    return DATA_DIR
