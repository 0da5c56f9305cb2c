"""Every file the package and its examples write goes through the atomic writers (inference/atomic_files.py).

The contract, enforced over the source: outside atomic_files.py no module of the package and
no example script calls a writer of another library directly — ``Path.write_text``/
``write_bytes``, ``open(..., "w")``, matplotlib's ``savefig``, ``torch.save``/``numpy.save*``/
``json.dump``, pandas/xarray/ArviZ ``to_csv``/``to_netcdf`` — unless the call sits inside the
callable handed to ``atomic_write`` (which writes a ``tempfile.mkstemp`` file in the target
folder and ``os.replace``-s it); figures go through ``save_figure`` and ArviZ files through
``save_netcdf``. Before this test the McGPDS phase-checkpoint record (``.fingerprint``) was
written in place with ``write_text``; the protocol's trace figure and 15 figures of the
examples with ``savefig`` at their final (predictable) names; two ArviZ files with
``to_netcdf``; a CSV with ``write_text``; and bench_scale had its own copy of the atomic JSON
writer. (docs/*.py, the maintainers' table and figure generators, are not covered.)
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: method names that write a file whatever object they are called on
WRITER_METHODS = {"write_text", "write_bytes", "savefig", "to_netcdf", "to_csv", "to_json", "to_parquet", "tofile"}
#: module functions that write a file (``torch.save``, ``np.save``, ``json.dump``, ...)
MODULE_WRITERS = {("torch", "save"), ("np", "save"), ("np", "savez"), ("np", "savez_compressed"), ("np", "savetxt"),
                  ("numpy", "save"), ("json", "dump"), ("pickle", "dump")}


def _direct_writes(tree: ast.AST) -> list[tuple[int, str]]:
    parents = {ch: n for n in ast.walk(tree) for ch in ast.iter_child_nodes(n)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute):
            owner = f.value.id if isinstance(f.value, ast.Name) else None
            bad = f.attr in WRITER_METHODS or (owner, f.attr) in MODULE_WRITERS
            what = f"{owner + '.' if owner else ''}{f.attr}"
        elif isinstance(f, ast.Name) and f.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                None)
            bad = isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+")
            what = "open(..., mode)"
        else:
            continue
        if not bad:
            continue
        up = node            # allowed inside the callable handed to atomic_write
        while up in parents:
            up = parents[up]
            if isinstance(up, ast.Call) and getattr(up.func, "id", getattr(up.func, "attr", "")) == "atomic_write":
                break
        else:
            out.append((node.lineno, what))
    return out


def _package_files():
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        skip = rel.parts[0] in {"tests", "docs"} or rel.parts[0].startswith(".")
        if skip or rel.name == "atomic_files.py":
            continue
        yield rel


def test_the_lint_finds_a_direct_write():
    tree = ast.parse("from pathlib import Path\nPath('x').write_text('y')\nopen('z', 'w')\n"
                     "atomic_write('p', lambda f: fig.savefig(f))\n")
    assert [w for _, w in _direct_writes(tree)] == ["write_text", "open(..., mode)"]


def test_no_module_or_example_writes_a_file_in_place():
    found = [f"{rel}:{line} {what}" for rel in _package_files()
             for line, what in _direct_writes(ast.parse((ROOT / rel).read_text()))]
    assert found == []


def test_figures_and_netcdf_are_written_atomically_and_readable(tmp_path):
    import arviz as az
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from tandem.inference.atomic_files import save_figure, save_netcdf
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    for name, magic in (("f.png", b"\x89PNG"), ("f.pdf", b"%PDF"), ("f.svg", b"<?xml")):
        save_figure(fig, tmp_path / name, dpi=50)
        assert (tmp_path / name).read_bytes().startswith(magic)     # the suffix's format
    plt.close(fig)
    idata = az.from_dict(posterior={"x": np.arange(8.0).reshape(2, 4)})
    save_netcdf(idata, tmp_path / "p.nc")
    assert np.array_equal(az.from_netcdf(tmp_path / "p.nc").posterior["x"].values, idata.posterior["x"].values)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png", "f.svg", "p.nc"]   # no temporaries


def test_the_phase_checkpoint_record_is_written_atomically(tmp_path, monkeypatch):
    from tandem.inference import atomic_files
    from tandem.inference.mcgpds import fit as fit_module
    seen = []
    real = atomic_files.atomic_write

    def spy(path, write, **kw):
        seen.append(pathlib.Path(path).name)
        return real(path, write, **kw)
    monkeypatch.setattr(atomic_files, "atomic_write", spy)
    fit_module._check_checkpoint(tmp_path / "sub" / "run", "abc")
    assert seen == ["run.fingerprint"]
    assert (tmp_path / "sub" / "run.fingerprint").read_text() == "abc\n"
    fit_module._check_checkpoint(tmp_path / "sub" / "run", "abc")          # the same problem: resumes
    with pytest.raises(ValueError, match="different problem"):
        fit_module._check_checkpoint(tmp_path / "sub" / "run", "other")
