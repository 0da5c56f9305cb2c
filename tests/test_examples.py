"""Example smoke tests (the pattern of Pyro's own repository).

Every script in ``examples/`` must be run with small arguments by a test under ``tests/``
(the quickstart here, the others in ``tests/test_examples_<model>.py``); the coverage
test below fails when an example is added without one.
"""
import json
import re

import pytest

from common import ROOT, run_example

EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("example", [p.name for p in EXAMPLES])
def test_every_example_has_a_smoke_test(example):
    """An example counts as covered when a test file runs it (names it in a quoted string)."""
    pattern = re.compile(r"[\"'](examples/)?" + re.escape(example) + r"[\"']")
    tests = [p for p in (ROOT / "tests").glob("test_*.py")
             if p.name != "test_examples.py" or example == "quickstart.py"]
    assert any(pattern.search(p.read_text()) for p in tests), (
        f"examples/{example} has no smoke test: add one to tests/test_examples_<model>.py "
        "that runs it with --quick")


def test_every_example_has_argparse_main_and_quick_flag():
    for p in EXAMPLES:
        src = p.read_text()
        assert "def main(" in src, f"{p.name} has no main(args)"
        assert "__main__" in src, f"{p.name} is not runnable as a script"
        assert "--quick" in src or "base_parser" in src, f"{p.name} has no --quick option"


def test_quickstart(tmp_path):
    proc = run_example("quickstart.py", "--quick", "--out", str(tmp_path), "--no-progress")
    res = json.loads((tmp_path / "quickstart.json").read_text())
    assert res["experiment"] == "quickstart"
    assert {"experiment", "seeds", "results", "timings_s", "config", "environment"} <= set(res)
    methods = {r["method"] for r in res["results"]}
    assert any("McGPDS" in m for m in methods)
    for r in res["results"]:
        assert r["mean"] == pytest.approx(sum(r["values"]) / len(r["values"]))
    assert (tmp_path / "quickstart.nc").stat().st_size > 0
    assert (tmp_path / "quickstart.png").stat().st_size > 0
    assert "mean ± std" in proc.stdout  # the printed table


def test_examples_do_not_import_each_other():
    """Examples are thin scripts over the public API: shared code lives in the library
    (e.g. tandem.inference.experiments), never in another example imported via sys.path."""
    import ast
    stems = {p.stem for p in EXAMPLES}
    for p in EXAMPLES:
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                continue
            assert not set(names) & stems, f"{p.name} imports the example(s) {set(names) & stems}"
        assert "sys.path" not in p.read_text(), f"{p.name} manipulates sys.path"
