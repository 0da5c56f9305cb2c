"""The documentation stays true: README's usage example runs, the results tables match their
JSON, every results file says where its numbers come from, every example script is
documented, and every document a docstring cites is in the repository."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from common import ROOT, load_script

DOCS = ROOT / "docs"


def _make_tables():
    return load_script("docs/make_tables.py", register=True)   # dataclasses look their module up


def test_readme_usage_example_runs_and_beats_the_training_mean():
    """The first ```python block of README.md runs as written; its McGPDS prediction of view 2
    from view 1 is better than predicting the training mean (the shared signal is learnable)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks, "README.md has no ```python usage block"
    ns: dict = {"__name__": "readme_example"}
    exec(compile(blocks[0], "README.md (usage example)", "exec"), ns)
    pred, test, train = ns["pred"], ns["test"], ns["train"]
    mean, var = np.asarray(pred.mean), np.asarray(pred.var)
    assert mean.shape == test[1].shape and var.shape == test[1].shape
    assert np.all(var > 0)
    rmse_model = np.sqrt(np.mean((mean - test[1]) ** 2))
    rmse_mean = np.sqrt(np.mean((train[1].mean(0) - test[1]) ** 2))
    assert rmse_model < 0.9 * rmse_mean


def test_results_tables_match_their_json():
    """docs/results/_tables/*.md are exactly what make_tables.py writes from the JSON."""
    mt = _make_tables()
    for t in mt.TABLES:
        committed = mt.OUT / f"{t.name}.md"
        assert committed.exists(), f"{committed} missing: run python docs/make_tables.py"
        assert committed.read_text() == mt.render(t), f"{committed.name} differs from its JSON"
    assert mt.main(["--check"]) == 0


def test_every_results_file_is_used_and_says_where_it_comes_from():
    mt = _make_tables()
    used = {t.source for t in mt.TABLES}
    files = {p.relative_to(mt.RESULTS).as_posix() for p in mt.RESULTS.rglob("*.json")}
    assert files == used, f"results JSON without a table: {files - used}; tables without JSON: {used - files}"
    for name in files:
        data = json.loads((mt.RESULTS / name).read_text())
        assert {"experiment", "seeds", "results"} <= data.keys(), name
        for rec in data["results"]:
            assert {"method", "metric", "mean"} <= rec.keys(), (name, rec)
        if name.startswith("recorded/"):
            prov = data["provenance"]
            assert prov["command"].strip() and "not regenerated" in prov["source"], name
        else:
            assert "provenance" not in data and data["environment"]["torch"], name
            for rec in data["results"]:   # written by Results: values summarised by mean/std
                if rec["mean"] is None:     # a NaN (e.g. a time to quality never reached) is written as null
                    assert None in rec["values"], (name, rec)
                    continue
                assert rec["mean"] == pytest.approx(np.mean(rec["values"])), (name, rec)


def test_every_results_page_table_is_included_and_every_table_is_on_a_page():
    mt = _make_tables()
    pages = "".join(p.read_text() for p in (DOCS / "results").glob("*.md"))
    included = set(re.findall(r"```\{include\} _tables/([\w-]+)\.md", pages))
    assert included == {t.name for t in mt.TABLES}


def test_every_example_script_is_documented():
    # drafts in docs/_incoming/ are not part of the site until they are folded into its pages
    pages = [p for p in DOCS.rglob("*.md") if "_incoming" not in p.parts]
    text = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in pages)
    scripts = [p for p in sorted((ROOT / "examples").iterdir()) if p.suffix in (".py", ".sh")]
    missing = [p.name for p in scripts if p.name not in text]
    assert not missing, f"examples not mentioned in README.md or docs/: {missing}"


def test_cited_documents_are_in_the_repository():
    """Docstrings cite the specification pages under docs/specs/; those pages exist, and no
    code cites the design notes or specs that live outside the repository."""
    cited, stray = set(), []
    for folder in ("models", "guides", "inference", "examples", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            cited |= set(re.findall(r"docs/specs/([\w-]+)\.md", text))
            for m in re.finditer(r"(?<![\w/])specs/[\w-]+\.md|DESIGN\.md", text):
                stray.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not stray, f"citations of documents that are not in the repository: {stray}"
    missing = [c for c in sorted(cited) if not (DOCS / "specs" / f"{c}.md").exists()]
    assert not missing, f"cited spec pages missing under docs/specs/: {missing}"


def test_a_count_column_shows_integers_and_other_columns_significant_digits():
    mt = _make_tables()
    rec = {"metric": "converged", "values": [998.0], "mean": 998.0, "std": 0.0}
    assert mt._cell(rec, 3, count=True) == "998"
    assert mt._cell({**rec, "values": [46.0], "mean": 46.0}, 3, count=True) == "46"
    assert mt._cell({**rec, "values": [46.0], "mean": 46.0}, 3) == "46.0"
    # a mean over seeds or a fractional value is no count: shown as a measurement
    assert mt._cell({**rec, "values": [1.0, 2.0], "mean": 1.5, "std": 0.5}, 3, count=True) == "1.50 ± 0.50"
    assert mt._cell({**rec, "values": [2.5], "mean": 2.5}, 3, count=True) == "2.50"
