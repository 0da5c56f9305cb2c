"""Results JSON (strict JSON, atomic writes) and the shared command-line options."""
import json
import os

import numpy as np
import pytest

from tandem.inference import atomic_files
from tandem.inference.experiments.cli import base_parser, prepare_out, seed_list
from tandem.inference.experiments.results import Results


def _strict_load(path):
    def bad(token):
        raise ValueError(f"non-JSON constant {token}")
    return json.loads(path.read_text(), parse_constant=bad)


def test_nan_metric_is_written_as_null(tmp_path):
    r = Results("exp", [0, 1], config={"lr": float("inf"), "grid": np.array([0.5, np.nan])})
    r.add("m", "rmse", [1.0, float("nan")])
    r.add("m", "nmi", np.float32(0.25), setting=np.int64(3))
    data = _strict_load(r.write(tmp_path))
    rec = data["results"][0]
    assert rec["values"] == [1.0, None] and rec["mean"] is None and rec["std"] is None
    assert data["config"] == {"lr": None, "grid": [0.5, None]}
    assert data["results"][1] == {"method": "m", "metric": "nmi", "values": [0.25], "mean": 0.25, "std": 0.0,
                                  "setting": 3}


def test_results_file_keeps_arrays_on_one_line_and_loads_back_the_same():
    from tandem.inference.experiments.results import dumps_readable
    obj = {"a": {"trace": [[0.5, -1.0], [1.5, -0.5]], "names": ["x", "y"], "empty": [], "none": {}},
           "recs": [{"m": 1, "v": [1, 2.5, None, True]}, 3], "s": "é \" q"}
    text = dumps_readable(obj)
    assert json.loads(text) == obj
    assert '"trace": [[0.5, -1.0], [1.5, -0.5]]' in text and '"names": ["x", "y"]' in text
    # objects stay indented one key per line, arrays holding objects one element per line
    assert '{\n  "a": {\n    "trace"' in text and '"recs": [\n    {\n      "m": 1' in text
    with pytest.raises(ValueError):
        dumps_readable({"x": [float("nan")]})


def test_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    r = Results("exp", [0])
    r.add("m", "rmse", 1.5)
    path = r.write(tmp_path)
    before = path.read_text()
    r.add("m", "mae", 2.0)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(atomic_files.os, "replace", broken_replace)   # the one atomic writer
    with pytest.raises(OSError):
        r.write(tmp_path)
    assert path.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["exp.json"]   # no temporary file left behind


def test_empty_values_are_refused():
    with pytest.raises(ValueError, match="values"):
        Results("exp", [0]).add("m", "rmse", [])


@pytest.mark.parametrize("argv, option", [
    (["--seeds", "0"], "--seeds"), (["--seeds", "-2"], "--seeds"), (["--seeds", "two"], "--seeds"),
    (["--seed", "-1"], "--seed"), (["--seed", str(2 ** 32)], "--seed")])
def test_bad_seed_options_are_argparse_errors(tmp_path, capsys, argv, option):
    p = base_parser("x")
    with pytest.raises(SystemExit) as err:
        p.parse_args(["--out", str(tmp_path), *argv])
    assert err.value.code == 2
    assert f"argument {option}" in capsys.readouterr().err


def test_unwritable_out_is_detected_when_parsing(tmp_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for out in (a_file, a_file / "sub"):
        with pytest.raises(SystemExit) as err:
            base_parser("x").parse_args(["--out", str(out)])
        assert err.value.code == 2
        msg = capsys.readouterr().err
        assert "--out" in msg and str(out) in msg
    # a fresh nested folder is created and usable
    args = base_parser("x").parse_args(["--out", str(tmp_path / "a" / "b"), "--seed", "4", "--seeds", "3"])
    assert (tmp_path / "a" / "b").is_dir() and seed_list(args) == [4, 5, 6]
    assert prepare_out(args) == tmp_path / "a" / "b"


def _run_file(tmp_path, name, seed, config, value):
    r = Results("exp", [seed], config=config)
    r.add("m", "rmse", value, removed="10 %")
    r.add("seed-free baseline", "rmse", 7.0, removed="10 %")
    r.time("m", "train", 2.0)
    return r.write(tmp_path / name)


def test_merge_results_joins_runs_on_disjoint_seeds(tmp_path):
    """Runs of one setting on seeds 0 and 1 (one process each) join into one file: records kept per
    seed, a seed-free baseline's identical record once, seeds in order, timings summed, nested
    configs united; a repeated seed or a conflicting setting is refused naming it."""
    from tandem.inference.experiments.results import merge_results
    a = _run_file(tmp_path, "a", 0, {"q": 5, "failures": {"x, seed 0": "err"}}, 1.0)
    b = _run_file(tmp_path, "b", 1, {"q": 5, "failures": {"x, seed 1": "err"}}, 3.0)
    out = merge_results([a, b], provenance={"command": "c", "note": "n"})
    assert out["seeds"] == [0, 1]
    assert [(r["method"], r["values"]) for r in out["results"]] == [("m", [1.0]), ("seed-free baseline", [7.0]),
                                                                    ("m", [3.0])]
    assert out["timings_s"] == {"m": {"train": 4.0}}
    assert out["config"] == {"q": 5, "failures": {"x, seed 0": "err", "x, seed 1": "err"}}
    assert out["provenance"] == {"command": "c", "note": "n"}
    json.dumps(out, allow_nan=False)
    with pytest.raises(ValueError, match="seeds"):
        merge_results([a, a])
    c = _run_file(tmp_path, "c", 2, {"q": 10}, 2.0)
    with pytest.raises(ValueError, match=r"config\.q"):
        merge_results([a, c])
    with pytest.raises(ValueError, match="at least two"):
        merge_results([a])


def test_carry_rows_adds_a_peers_rows_of_the_same_seeds_and_says_so(tmp_path):
    """The peer's records (every metric), timings and named config come from the donor, the
    run's own rows stay; other seeds, a method the run already has or the donor lacks, and a
    missing provenance are refused."""
    from tandem.inference.experiments.results import Results, carry_rows
    run = Results("x", [0, 1], config={"peer": "not run", "q": 5})
    run.add("mine", "rmse", [1.0, 2.0])
    a = run.write(tmp_path / "run")
    donor = Results("x", [0, 1], config={"peer": {"Q": 10}, "q": 5})
    donor.add("mine", "rmse", [9.0, 9.0])
    donor.add("peer", "rmse", [3.0, 4.0])
    donor.add("peer", "msll", [0.5, 0.7])
    donor.time("peer", "train", 60.0)
    b = donor.write(tmp_path / "donor")
    out = carry_rows(a, b, ["peer"], {"command": "c", "source": "s"}, config_keys=["peer"])
    assert [(r["method"], r["metric"], r["values"]) for r in out["results"]] == [
        ("mine", "rmse", [1.0, 2.0]), ("peer", "rmse", [3.0, 4.0]), ("peer", "msll", [0.5, 0.7])]
    assert out["timings_s"] == {"peer": {"train": 60.0}}
    assert out["config"]["peer"] == {"Q": 10} and out["config"]["rows carried over"]["methods"] == ["peer"]
    assert out["provenance"] == {"command": "c", "source": "s"}
    json.dumps(out, allow_nan=False)
    with pytest.raises(ValueError, match="already"):
        carry_rows(a, b, ["mine"], {"command": "c"})
    with pytest.raises(ValueError, match="no rows"):
        carry_rows(a, b, ["other"], {"command": "c"})
    with pytest.raises(ValueError, match="provenance"):
        carry_rows(a, b, ["peer"], {})
    other = Results("x", [0, 1, 2])
    other.add("peer", "rmse", [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="seeds"):
        carry_rows(a, other.write(tmp_path / "other"), ["peer"], {"command": "c"})
