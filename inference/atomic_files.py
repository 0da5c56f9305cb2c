"""Atomic file writes and the checks of a target path: the one way tandem writes a file.

:func:`atomic_write` writes through ``tempfile.mkstemp`` in the target folder (an
unpredictable name created with ``O_EXCL``, so a planted symlink is never followed), then
``flush`` + ``fsync`` and ``os.replace`` over the target; a kill at any point leaves either the
old file or the new one. :func:`atomic_path` gives the same guarantee to writers that need a
file name (netCDF); :func:`save_figure` and :func:`save_netcdf` are the figure and ArviZ
writers. Used by :mod:`tandem.inference.persistence` (the safe format), by every text/JSON
writer of the package and by the examples.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["atomic_path", "atomic_write", "write_bytes_atomic", "write_text_atomic", "save_figure", "save_netcdf",
           "check_writable", "check_save_path"]


@contextlib.contextmanager
def atomic_path(path) -> Iterator[Path]:
    """A temporary file name in ``path``'s folder that becomes ``path`` when the block succeeds.

    For writers that take a file *name*, not a file object (netCDF through ArviZ/xarray, other
    libraries' ``save(filename)``). The name comes from :func:`tempfile.mkstemp` (random,
    created with ``O_EXCL`` and mode 0600: never a predictable name, never through a planted
    symlink); the block writes the file there; then it is ``fsync``-ed, given the permissions
    an ordinary ``open()`` would give (0666 less the umask) and moved over ``path`` with
    :func:`os.replace`, and the folder is ``fsync``-ed where the platform allows. On any
    failure in the block the temporary file is deleted and the previous ``path`` is untouched.
    The parent folder is created.

    Parameters
    ----------
    path : str or os.PathLike
        The target file.

    Yields
    ------
    pathlib.Path
        The temporary file to write (it exists, empty, named ``.<name>.<random>.tmp``; a
        writer that picks its format from the suffix must be told the format).

    Raises
    ------
    OSError
        If the folder cannot be created or written (the temporary file is removed); any
        exception of the block is re-raised likewise.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:       # the writer closed its own handle: make its bytes durable
            os.fsync(f.fileno())
        try:  # keep the permissions an ordinary open() would give (mkstemp uses 0600)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def atomic_write(path, write: Callable[[Any], None], *, mode: str = "wb") -> Path:
    """Write ``path`` atomically: ``write(f)`` fills an open temporary file in ``path``'s folder.

    The temporary file and its replacement of ``path`` are those of :func:`atomic_path` (a
    ``tempfile.mkstemp`` name in the same folder, ``fsync``, ``os.replace``): a kill at any
    point leaves either the old file or the new one, and on any failure (full disk, exception
    in ``write``) the temporary file is deleted and the previous ``path`` is untouched. The
    parent folder is created.

    Parameters
    ----------
    path : str or os.PathLike
        The target file.
    write : callable
        ``write(f)`` writes the whole content to the open file object ``f``.
    mode : str, default "wb"
        The mode the temporary file is opened in (keyword only).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    OSError
        If the folder cannot be created or written (the temporary file is removed); any exception
        of ``write`` is re-raised likewise.
    """
    with atomic_path(path) as tmp, open(tmp, mode) as f:
        write(f)
        f.flush()
    return Path(path)


def save_figure(fig, path, **savefig_kwargs) -> Path:
    """Save a matplotlib figure atomically (:func:`atomic_write`), in the format of ``path``'s suffix.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    path : str or os.PathLike
        The target file (``.png``, ``.pdf``, ``.svg``, ...; no suffix: PNG).
    **savefig_kwargs
        Passed to ``fig.savefig`` (``dpi``, ``bbox_inches``, ...).

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    fmt = savefig_kwargs.pop("format", None) or Path(path).suffix.lstrip(".") or "png"
    return atomic_write(path, lambda f: fig.savefig(f, format=fmt, **savefig_kwargs))


def save_netcdf(idata, path) -> Path:
    """Save an ArviZ ``InferenceData`` (or an xarray ``Dataset``) to netCDF atomically (:func:`atomic_path`).

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.Dataset
        Anything with a ``to_netcdf(filename)`` method.
    path : str or os.PathLike
        The target file.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    with atomic_path(path) as tmp:
        idata.to_netcdf(str(tmp))
    return Path(path)


def write_bytes_atomic(path, data: bytes) -> Path:
    """:func:`atomic_write` of ``data``.

    Parameters
    ----------
    path : str or os.PathLike
        The target file.
    data : bytes
        The whole content.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    return atomic_write(path, lambda f: f.write(data))


def write_text_atomic(path, text: str, encoding: str = "utf-8") -> Path:
    """:func:`atomic_write` of ``text`` (``encoding``).

    Parameters
    ----------
    path : str or os.PathLike
        The target file.
    text : str
        The whole content.
    encoding : str, default "utf-8"
        The text encoding.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    return atomic_write(path, lambda f: f.write(text.encode(encoding)))


def check_writable(folder) -> None:
    """Raise ``OSError`` if a file cannot be created in ``folder`` (created if missing).

    Probes with :func:`tempfile.mkstemp` (random name, exclusive create), then deletes it.

    Parameters
    ----------
    folder : str or os.PathLike
        The folder.

    Raises
    ------
    OSError
        If the folder cannot be created or a file cannot be created in it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".write-test-", dir=folder)
    os.close(fd)
    os.unlink(tmp)


def check_save_path(path, where: str) -> None:
    """The file a ``save`` writes: a path (str or os.PathLike), not a folder, in a folder that
    exists and that this process can write.

    Checked before any work, so a wrong target is a clear error rather than a failed
    ``os.replace`` (or a folder created on a typo) after the whole object was serialised. The
    folder is probed as :func:`atomic_write` will use it: a file created there with
    :func:`tempfile.mkstemp` and deleted at once. Unlike :func:`atomic_write`, which creates a
    missing parent (checkpoints, caches), a ``save`` target's folder must exist, as for
    ``numpy.save`` or ``torch.save``.

    Parameters
    ----------
    path : object
        The target given by the user.
    where : str
        Prefixes the message (e.g. ``"McGPDS.save"``).

    Raises
    ------
    ValueError
        Naming ``path``, for a value that is not a path, a folder, a path whose folder does not
        exist (or is a file), or a folder in which no file can be created (permissions, a
        read-only file system).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{where}: path: expected a file path (str or os.PathLike), got {type(path).__name__}")
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{where}: path: {str(path)!r} is a folder; expected the path of a file to write")
    folder = target.parent
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise ValueError(f"{where}: path: the folder {str(folder)!r} of {str(path)!r} {what}; create the folder "
                         "first or choose another path")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise ValueError(f"{where}: path: cannot write in the folder {str(folder)!r} of {str(path)!r} "
                         f"({err.strerror or err}); choose a path in a folder you can write to") from None
