"""Shared pytest fixtures: the project root, the shared data folder, a clean Pyro state."""
from pathlib import Path

import pyro
import pytest

from inference.experiment import DEFAULT_DATA_DIR, PROJECT_ROOT


@pytest.fixture(autouse=True)
def _clean_pyro():
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


@pytest.fixture
def project_root() -> Path:
    return PROJECT_ROOT


@pytest.fixture
def data_dir() -> Path:
    """../shared/data relative to the project root; tests that need it skip without it."""
    if not DEFAULT_DATA_DIR.exists():
        pytest.skip(f"shared data folder {DEFAULT_DATA_DIR} not present")
    return DEFAULT_DATA_DIR
