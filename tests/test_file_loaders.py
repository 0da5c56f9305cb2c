"""Every file loader × every kind of broken file (issue 18; ``tests/file_faults.py``): a
``ValueError``/``FileNotFoundError`` naming the file, no code run by a crafted pickle, and no
warning from torch (crafted files are refused before torch parses them)."""
import warnings

import fault_survey
import file_faults
import pytest

CASES = file_faults.cases()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_broken_file_is_an_error_naming_it(case):
    kind, msg = fault_survey.classify(case)
    assert kind in ("clear", "handled"), f"{kind}: {msg}"


def test_no_torch_warning_leaks_when_a_crafted_or_foreign_file_is_refused():
    """The safe reader checks the zip magic, layout and pickle globals itself, so torch never
    parses a raw pickle (its "Detected pickle protocol" warning) or a code-carrying one."""
    checked = 0
    for case in CASES:
        if not any(w in case.name for w in ("pickle", "runs code", "foreign", "random", "text")):
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises((ValueError, FileNotFoundError)):
                case.run()
        assert not [str(w.message) for w in caught if "pickle" in str(w.message).lower()], case.name
        checked += 1
    assert checked >= 19 * 5


def test_every_loader_and_fault_is_swept():
    names = {c.name.split(": ")[0] for c in CASES}
    assert len(names) == len(file_faults.loaders()) >= 19
    faults = {c.name.split(": ")[1] for c in CASES}
    assert {"missing", "a folder", "empty", "truncated", "raw pickle that runs code", "torch file that runs code",
            "foreign zip", "foreign torch file"} <= faults
