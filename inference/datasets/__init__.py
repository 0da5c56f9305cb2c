"""Loaders for the papers' real data sets, and where they are looked for.

Every loader takes ``data_dir``; when it is ``None`` the folder is resolved by
:func:`data_dir`: the ``TANDEM_DATA`` environment variable if set, otherwise
``../shared/data`` relative to the current working directory (where the project's
checkouts and CI keep the shared data). Nothing depends on where the package is installed.
"""
from __future__ import annotations

import os
from pathlib import Path

import scipy.io as sio

__all__ = ["ENV_VAR", "data_dir", "read_mat"]

#: environment variable naming the folder that holds the shared data sets.
ENV_VAR = "TANDEM_DATA"


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data folder: ``path`` if given, else ``$TANDEM_DATA``, else ``./../shared/data``.

    Parameters
    ----------
    path : str or os.PathLike, optional
        An explicit folder.

    Returns
    -------
    pathlib.Path
        The folder.

    Raises
    ------
    TypeError
        Naming ``data_dir`` when ``path`` is not a str or path.
    ValueError
        When it names an existing file rather than a folder (a folder that does not exist is
        reported by the loader, naming the file it looked for).
    """
    if path is not None:
        if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"data_dir: expected a folder path (str or os.PathLike), got {path!r} of type "
                            f"{type(path).__name__}")
        p = Path(path)
        if p.exists() and not p.is_dir():
            raise ValueError(f"data_dir: {p} is a file; expected the folder that holds the data sets")
        return p
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return Path.cwd().parent / "shared" / "data"


def read_mat(path, variables, what: str = "data file") -> dict:
    """Read a MATLAB ``.mat`` file and check that it holds the expected variables.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    variables : sequence of str
        The variables it must hold.
    what : str, default "data file"
        What the file should be, for the message.

    Returns
    -------
    dict
        scipy's dict of variables.

    Raises
    ------
    ValueError
        Naming the file, what it should be and the variables expected in it, for any failure to
        parse it (a truncated or corrupt file, an HDF5-based v7.3 file, not a ``.mat`` file) or a
        missing variable, instead of scipy's own errors from deep inside the reader.
    """
    variables = list(variables)
    expected = ", ".join(variables)
    try:
        m = sio.loadmat(str(path))
    except Exception as e:  # noqa: BLE001 - scipy raises many types for a bad file
        raise ValueError(f"{path}: could not be read as a MATLAB .mat file ({type(e).__name__}: {e}); "
                         f"expected the {what} with the variables {expected}. The file may be "
                         "truncated or corrupt: fetch it again") from None
    missing = [v for v in variables if v not in m]
    if missing:
        found = sorted(k for k in m if not k.startswith("__"))
        raise ValueError(f"{path}: the {what} lacks the variable(s) {', '.join(missing)}; expected "
                         f"{expected}, found {', '.join(found) or 'none'}")
    return m
