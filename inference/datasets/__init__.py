"""Loaders for the papers' real data sets, and where they are looked for.

Every loader takes ``data_dir``; when it is ``None`` the folder is resolved by
:func:`data_dir`: the ``TANDEM_DATA`` environment variable if set, otherwise
``../shared/data`` relative to the current working directory (where the project's
checkouts and CI keep the shared data). Nothing depends on where the package is installed.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV_VAR", "data_dir"]

#: environment variable naming the folder that holds the shared data sets.
ENV_VAR = "TANDEM_DATA"


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data folder: ``path`` if given, else ``$TANDEM_DATA``, else ``./../shared/data``."""
    if path is not None:
        return Path(path)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return Path.cwd().parent / "shared" / "data"
