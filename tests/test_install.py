"""tandem installs as one namespaced package: nothing generic lands in site-packages.

Builds a wheel from the source tree, installs it (without dependencies) into a fresh
virtual environment, and imports it from a directory that holds a user's own
``models.py`` and ``inference/`` package — the situation that breaks a library which
installs top-level ``models``/``inference`` packages. The fresh environment borrows the
test environment's third-party packages (torch, pyro, ...) through a path file, so no
network is needed; the test environment's own (editable) tandem is not visible there.
"""
from __future__ import annotations

import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from common import ROOT

USER_CODE = '''
import sys, sysconfig
import models, inference                      # the user's own modules
assert models.MARK == "user models" and inference.MARK == "user inference"
import tandem
from tandem.inference import fit, minimize, posterior_predictive
import tandem.models.mcgpds, tandem.guides.mcgpds, tandem.inference.mcgpds.bound
purelib = sysconfig.get_paths()["purelib"]
assert tandem.__file__.startswith(purelib), tandem.__file__
assert tandem.models.mcgpds.__file__.startswith(purelib)
assert models.__file__.startswith(sys.path[0] or "."), models.__file__
print("version", tandem.__version__)
'''


@pytest.mark.slow
def test_wheel_installs_under_tandem_only(tmp_path):
    # build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".*", "build", "docs", "results", "examples", "tests",
                                                             "__pycache__", "*.egg-info"))
    wheel_dir = tmp_path / "wheel"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(wheel_dir), str(src)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheel_dir.glob("tandem-*.whl")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"tandem"}, tops

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    inst = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr[-3000:]
    purelib = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    # third-party dependencies from the test environment (a path added by a .pth file is not
    # itself scanned for .pth files, so the editable install of tandem there stays invisible)
    deps = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if Path(p).exists()]
    (purelib / "_tandem_test_deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")

    user = tmp_path / "user_project"
    (user / "inference").mkdir(parents=True)
    (user / "models.py").write_text('MARK = "user models"\n')
    (user / "inference" / "__init__.py").write_text('MARK = "user inference"\n')
    (user / "main.py").write_text(USER_CODE)
    run = subprocess.run([str(py), "main.py"], cwd=user, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert run.stdout.startswith("version 0.") or run.stdout.startswith("version 1."), run.stdout
    assert not any((purelib / name).exists() for name in ("models", "guides", "inference"))


def test_every_package_folder_is_listed_in_pyproject():
    """A subpackage missing from pyproject's explicit list would be left out of the wheel."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"tandem"}
    for folder in ("models", "guides", "inference"):
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT)
            found.add(".".join(("tandem", *rel.parts)))
    assert found == listed, (f"in the tree, not listed: {sorted(found - listed)}; "
                             f"listed, not in the tree: {sorted(listed - found)}")


def test_top_level_names_resolve_lazily():
    """``import tandem`` loads nothing heavy; each exported object resolves to its home module."""
    code = ("import sys, tandem; assert 'tandem.inference.svi' not in sys.modules and 'arviz' not in sys.modules; "
            "from tandem.inference.mcgpds import McGPDS; from tandem.inference.twin_gp import TwinGPRegressor; "
            "from tandem.inference.samtc import SAMTC; "
            "from tandem.inference.coupled_projections import CoupledProjections; "
            "assert (tandem.McGPDS, tandem.TwinGPRegressor, tandem.SAMTC, tandem.CoupledProjections) == "
            "(McGPDS, TwinGPRegressor, SAMTC, CoupledProjections); "
            "assert callable(tandem.fit) and callable(tandem.minimize) and set(tandem.__all__) <= set(dir(tandem))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)
