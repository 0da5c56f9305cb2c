"""Helpers shared by the test modules: project paths and the example-script runner."""
from __future__ import annotations

from pathlib import Path

#: the repository root (tests/ lives directly under it).
ROOT = Path(__file__).resolve().parent.parent
#: ../shared/data relative to the project root, where CI and developers keep the data.
DATA_DIR = ROOT.parent / "shared" / "data"
