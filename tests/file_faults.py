"""File loaders as one class (issue 18): every loader × every kind of broken file.

A *loader* is ``(name, files, load)``: the files it reads (relative to a temporary folder)
and a call that reads them. Each *fault* puts one kind of broken file at every one of those
paths: missing, a folder, empty, truncated, random bytes, a text file, a raw pickle that
would run code, a zip archive of another program, a torch file of foreign content, and an
unreadable file (permissions; skipped when running as root, who reads anything). Every
combination must raise a ``ValueError`` (tandem's ``PersistenceError`` is one) or
``FileNotFoundError`` whose message names the file, and — for the pickle — must not run its
code. :func:`cases` returns them as :class:`fault_survey.Case` objects.
"""
from __future__ import annotations

import io
import os
import pickle
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
from fault_survey import Case


class _Evil:
    """Unpickling this creates ``marker``: a file that runs code when loaded."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("readme.txt", "not a tandem file")
    return buf.getvalue()


def _good_tandem_file() -> bytes:
    """A valid tandem file (of the wrong kind for every loader below): truncated, it is damaged."""
    from tandem.inference import persistence as P
    buf = Path(tempfile.mkdtemp(prefix="tandem_ff_")) / "ok.pt"
    P.dump({"x": torch.arange(2000.0)}, buf, "test")
    return buf.read_bytes()


#: fault name -> writer(path, marker); None = leave the path missing
FAULTS = {
    "missing": None,
    "a folder": lambda p, m: p.mkdir(parents=True),
    "empty": lambda p, m: p.write_bytes(b""),
    "truncated": lambda p, m: p.write_bytes(_good_tandem_file()[:700]),
    "random bytes": lambda p, m: p.write_bytes(np.random.default_rng(0).bytes(4096)),
    "text": lambda p, m: p.write_text("hello\nthis is not the file you want\n"),
    "raw pickle that runs code": lambda p, m: p.write_bytes(pickle.dumps({"v": _Evil(m)})),
    "torch file that runs code": lambda p, m: p.write_bytes(_torch_bytes({"format": "tandem", "v": _Evil(m)})),
    "foreign zip": lambda p, m: p.write_bytes(_zip_bytes()),
    "foreign torch file": lambda p, m: p.write_bytes(_torch_bytes({"weights": torch.zeros(3)})),
    "unreadable": "unreadable",
}


#: loaders for which a missing file is not an error but a fresh start (checkpoints)
MISSING_STARTS_AFRESH = {"StageCheckpoint", "fit(checkpoint=)"}


def _estimator_loader(cls_path: str):
    def load(folder):
        mod, name = cls_path.rsplit(".", 1)
        cls = getattr(__import__(mod, fromlist=[name]), name)
        return cls.load(folder / "model.pt")
    return load


def loaders() -> list:
    """(name, relative files, load(folder)) of every file loader of the package."""
    from tandem.inference.checkpoints import load_checkpoint
    from tandem.inference.datasets import coil20, cuave, human_pose, oil, poser, text, usps
    from tandem.inference.mcgpds.fit import load_fitted
    from tandem.inference.twin_gp.selection import StageCheckpoint

    L = [(f"{c.rsplit('.', 1)[1]}.load", ["model.pt"], _estimator_loader(c)) for c in (
        "tandem.inference.mcgpds.McGPDS", "tandem.inference.mcgpds.stochastic.StochasticMcGPDS",
        "tandem.inference.twin_gp.TwinGPRegressor", "tandem.inference.samtc.SAMTC",
        "tandem.inference.coupled_projections.CoupledProjections")]
    L += [
        ("load_fitted", ["fit.pt"], lambda d: load_fitted(d / "fit.pt")),
        ("load_checkpoint", ["ckpt.pt"], lambda d: load_checkpoint(d / "ckpt.pt", "svi")),
        ("StageCheckpoint", ["stages/state.pt"], lambda d: StageCheckpoint(d / "stages", {"a": 1})),
        ("fit(checkpoint=)", ["run.ckpt"], _fit_resume),     # a missing checkpoint: a fresh start
        ("load_coil20", [str(coil20.COIL20_FILE)], lambda d: coil20.load_coil20(d)),
        ("load_cuave", [str(cuave.CUAVE_FILE)], lambda d: cuave.load_cuave(d)),
        ("load_human_pose", [str(human_pose.HUMAN_POSE_FILE)], lambda d: human_pose.load_human_pose(d)),
        ("load_oil", [str(f) for f in oil.OIL_FILES], lambda d: oil.load_oil(d)),
        ("load_poser", ["human_pose/ankurDataPoseSilhouette.mat"], lambda d: poser.load_poser(d)),
        ("load_usps_reconstruction", ["usps/usps_9298.mat", "usps/usps_gpml_resampled_train_labels.txt",
                                      "usps/usps_gpml_resampled_test_labels.txt"],
         lambda d: usps.load_usps_reconstruction(d)),
        ("load_webkb_raw", [text.WEBKB_RAW], lambda d: text.load_webkb_raw(d)),
        ("load_webkb_linqs", [f"webkb/linqs/{u}.content" for u in text.UNIVERSITIES],
         lambda d: text.load_webkb_linqs(d)),
        ("load_20news", [text.NEWS_RAW], lambda d: text.load_20news(d)),
        ("load_reuters", [text.REUTERS_RAW], lambda d: text.load_reuters(d)),
    ]
    return L


def _fit_resume(folder):
    import pyro
    import pyro.distributions as dist

    from tandem.inference import fit

    def model():
        pyro.sample("z", dist.Normal(0.0, 1.0))

    def guide():
        pyro.sample("z", dist.Normal(pyro.param("m", torch.tensor(0.0)), 1.0))

    return fit(model, guide, num_steps=2, progress=False, checkpoint=folder / "run.ckpt")


def _case(name, files, load, fault, write):
    def run():
        folder = Path(tempfile.mkdtemp(prefix="tandem_ff_"))
        cache = folder / "cache"
        old = os.environ.get("TANDEM_CACHE")
        os.environ["TANDEM_CACHE"] = str(cache)        # the corpus cache must not answer for the file
        marker = folder / "marker"
        try:
            for f in files:
                p = folder / f
                p.parent.mkdir(parents=True, exist_ok=True)
                if write == "unreadable":
                    p.write_bytes(_good_tandem_file())
                    p.chmod(0)
                elif write is not None:
                    write(p, marker)
            out = load(folder)
        finally:
            if old is None:
                os.environ.pop("TANDEM_CACHE", None)
            else:
                os.environ["TANDEM_CACHE"] = old
        if marker.exists():
            raise AssertionError("the file ran code when loaded")
        return out
    # a clear error names one of the files (its name, or the path under the folder)
    names = tuple(Path(f).name for f in files)
    fresh = fault == "missing" and name in MISSING_STARTS_AFRESH
    return Case(f"{name}: {fault}", run, names, (lambda rc: True) if fresh else None)


def _data_dir_case(name, load, what, value):
    def run():
        folder = Path(tempfile.mkdtemp(prefix="tandem_ff_"))
        if value == "file":
            (folder / "plain.txt").write_text("x")
            return load(folder / "plain.txt")
        if value == "missing":
            return load(folder / "no_such_folder")
        return load(value)
    return Case(f"{name}: data_dir = {what}", run, ("data_dir", "no_such_folder"))


def cases() -> list:
    """Every loader × every fault (the unreadable case only when not root), and every data-set
    loader's ``data_dir`` given as a file, a missing folder or a number."""
    out = []
    for name, files, load in loaders():
        if name.startswith("load_") and name not in ("load_fitted", "load_checkpoint"):
            for what, value in (("a file", "file"), ("a missing folder", "missing"), ("the number 3", 3)):
                out.append(_data_dir_case(name, load, what, value))
    for name, files, load in loaders():
        for fault, write in FAULTS.items():
            if write == "unreadable" and hasattr(os, "geteuid") and os.geteuid() == 0:
                continue
            out.append(_case(name, files, load, fault, write))
    return out
