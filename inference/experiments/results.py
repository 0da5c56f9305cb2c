"""The results-JSON schema (docs/specs/results_schema.md), shared by every experiment script.

A results file ``DIR/<experiment>.json`` holds::

    {"experiment", "seeds", "results": [{"method", "metric", "values", "mean", "std", ...}],
     "timings_s": {method: {"train": s, "predict": s}}, "config": {...}, "environment": {...}}

Use :class:`Results` to collect records while an experiment runs, then :meth:`Results.write`.
Non-finite numbers (a metric that came out NaN or inf) are written as JSON ``null`` — the
file is always strict JSON — and the write is atomic (temporary file + ``os.replace``), so a
failed write leaves the previous file intact.
"""
from __future__ import annotations

import json
import math
import platform
import sys
from pathlib import Path

import numpy as np
import pyro
import torch

from tandem.inference.persistence import write_text_atomic


def environment() -> dict:
    """Python/torch versions, thread count and device, recorded beside every result.

    Returns
    -------
    dict
        The environment description.
    """
    return {"python": platform.python_version(), "torch": torch.__version__.split("+")[0],
            "pyro": pyro.__version__, "numpy": np.__version__,
            "threads": torch.get_num_threads(),
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "platform": sys.platform}


def dumps_readable(obj, indent: int = 2) -> str:
    """Strict JSON with objects indented and every array that holds no object on one line.

    ``json.dumps(indent=2)`` puts each number of a trace on its own line (four lines per
    ``[time, bound]`` point); a benchmark's traces then make a results file megabytes long.
    Here such arrays stay on one line, the records around them stay indented, and
    ``json.loads`` gives back the same value.

    Parameters
    ----------
    obj : object
        Plain JSON values (finite numbers: see :func:`_jsonable`).
    indent : int, default 2
        Spaces per level.

    Returns
    -------
    str
        The JSON text.
    """
    def has_object(x):
        return isinstance(x, dict) or (isinstance(x, list) and any(has_object(v) for v in x))

    def enc(x, level):
        pad, inner = " " * (indent * level), " " * (indent * (level + 1))
        if isinstance(x, dict) and x:
            body = ",\n".join(f"{inner}{json.dumps(str(k))}: {enc(v, level + 1)}" for k, v in x.items())
            return "{\n" + body + "\n" + pad + "}"
        if isinstance(x, list) and has_object(x):
            return "[\n" + ",\n".join(inner + enc(v, level + 1) for v in x) + "\n" + pad + "]"
        return json.dumps(x, allow_nan=False)

    return enc(obj, 0)


def _jsonable(x):
    """Plain JSON values; NaN and ±inf become ``None`` (JSON ``null``: JSON has no NaN)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else None
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, torch.Tensor):
        return _jsonable(x.detach().cpu().tolist())
    if isinstance(x, Path):
        return str(x)
    return x


class Results:
    """Collects the result records and timings of one experiment and writes its JSON file.

    Parameters
    ----------
    experiment : str
        The experiment's name (the JSON file is ``<experiment>.json``).
    seeds : list of int
        The seeds the records' values run over.
    config : dict, optional
        The experiment's settings, stored with the results.
    """

    def __init__(self, experiment: str, seeds, config: dict | None = None):
        self.experiment = experiment
        self.seeds = list(seeds)
        self.config = dict(config or {})
        self.records: list[dict] = []
        self.timings: dict[str, dict[str, float]] = {}

    def add(self, method: str, metric: str, values, **qualifiers) -> dict:
        """Add one record.

        A NaN value is kept (and written as ``null``); its record's mean and std are NaN too.

        Parameters
        ----------
        method : str
            The method's name.
        metric : str
            The metric's name.
        values : float or list of float
            A scalar or a non-empty list (one per seed or fold).
        **qualifiers
            Further keys of the record (e.g. ``split="test"``).

        Returns
        -------
        dict
            The record, with its mean, std and n.
        """
        vals = [float(v) for v in np.atleast_1d(np.asarray(values, dtype=np.float64)).ravel()]
        if not vals:
            raise ValueError(f"values: expected at least one value for {method!r} / {metric!r}, got none")
        rec = {"method": method, "metric": metric, "values": vals,
               "mean": float(np.mean(vals)), "std": float(np.std(vals))}
        rec.update(_jsonable(qualifiers))
        self.records.append(rec)
        return rec

    def time(self, method: str, phase: str, seconds: float, accumulate: bool = True) -> None:
        """Record the wall time of a phase of a method.

        Parameters
        ----------
        method : str
            The method's name.
        phase : str
            "train", "predict", ….
        seconds : float
            The wall time.
        accumulate : bool, default True
            Add to an earlier time of the same phase instead of replacing it.
        """
        d = self.timings.setdefault(method, {})
        d[phase] = float(seconds) + (d.get(phase, 0.0) if accumulate else 0.0)

    def get(self, method: str, metric: str, **qualifiers) -> dict:
        """The record of a method and metric with the given qualifiers.

        Parameters
        ----------
        method : str
            The method's name.
        metric : str
            The metric's name.
        **qualifiers
            The record's further keys.

        Returns
        -------
        dict
            The first matching record.

        Raises
        ------
        KeyError
            When no record matches.
        """
        for r in self.records:
            if r["method"] == method and r["metric"] == metric and all(r.get(k) == v for k, v in qualifiers.items()):
                return r
        raise KeyError((method, metric, qualifiers))

    def as_dict(self) -> dict:
        """The whole results object as plain JSON-ready data.

        Returns
        -------
        dict
            ``experiment``, ``seeds``, ``results`` (the records), ``timings_s``, ``config`` and
            ``environment``.
        """
        return {"experiment": self.experiment, "seeds": self.seeds, "results": self.records,
                "timings_s": self.timings, "config": _jsonable(self.config),
                "environment": environment()}

    def write(self, out_dir) -> Path:
        """Write ``out_dir/<experiment>.json`` (creating the folder).

        Strict JSON (non-finite numbers as ``null``), written to a temporary file in the same folder
        and moved over the old file with ``os.replace``: a failure at any point leaves the previous
        file as it was.

        Parameters
        ----------
        out_dir : str or pathlib.Path
            The folder.

        Returns
        -------
        pathlib.Path
            The file written.
        """
        text = dumps_readable(_jsonable(self.as_dict()))
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.experiment}.json"
        return write_text_atomic(path, text)

    def table(self, qualifier_keys=()) -> str:
        """Plain-text table of the records: method, metric, qualifiers, mean ± std, n.

        Parameters
        ----------
        qualifier_keys : sequence of str, default ()
            Qualifier columns to show.

        Returns
        -------
        str
            The table.
        """
        rows = [("method", "metric", *qualifier_keys, "mean ± std", "n")]
        for r in self.records:
            rows.append((r["method"], r["metric"], *(str(r.get(k, "")) for k in qualifier_keys),
                         f"{r['mean']:.4g} ± {r['std']:.2g}", str(len(r["values"]))))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)


def _merge_config(a: dict, b: dict, where: str = "config") -> dict:
    """Union of two configs; a key with two different non-dict values is a conflict."""
    out = dict(a)
    for k, v in b.items():
        if k not in out:
            out[k] = v
        elif isinstance(out[k], dict) and isinstance(v, dict):
            out[k] = _merge_config(out[k], v, f"{where}.{k}")
        elif out[k] != v:
            raise ValueError(f"paths: the runs differ in {where}.{k} ({out[k]!r} vs {v!r}); only runs of one "
                             "setting on disjoint seeds can be joined")
    return out


def merge_results(paths, provenance: dict | None = None) -> dict:
    """Join results files of one experiment run on disjoint seeds (e.g. seeds run in parallel).

    The records are concatenated (one record per seed and cell stays one record: a table pools
    them), except that a record identical in every field, values included, to one of an earlier
    file is kept once: that is a seed-free baseline (a nearest neighbour, a training mean) which
    every run computes the same way, and keeping both copies would count it twice. The seeds are
    joined in order, the timings of each method and phase summed, and the configs
    united (nested dicts key by key, e.g. each run's list of failed peers). The environment is the
    first file's.

    Parameters
    ----------
    paths : sequence of str or pathlib.Path
        Two or more results files of the same experiment.
    provenance : dict, optional
        Stored as the joined file's ``provenance`` (``command``, ``source``, ``note``: how the
        numbers were made; docs/make_tables.py prints it above the table).

    Returns
    -------
    dict
        The joined results, ready for :func:`json.dumps`.

    Raises
    ------
    ValueError
        If fewer than two files are given, the experiments differ, a seed occurs twice, or the
        configs conflict.
    """
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise ValueError(f"paths: expected at least two results files to join, got {len(paths)}")
    runs = [json.loads(p.read_text()) for p in paths]
    names = {r["experiment"] for r in runs}
    if len(names) != 1:
        raise ValueError(f"paths: the files hold different experiments {sorted(names)}")
    seeds = [s for r in runs for s in r["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"paths: seeds {seeds} occur in more than one file; join runs on disjoint seeds")
    config, timings = {}, {}
    for r in runs:
        config = _merge_config(config, r.get("config") or {})
        for method, phases in (r.get("timings_s") or {}).items():
            d = timings.setdefault(method, {})
            for phase, secs in phases.items():
                d[phase] = d.get(phase, 0.0) + float(secs)
    records, seen = [], set()
    for r in runs:
        fresh = []
        for rec in r["results"]:
            key = json.dumps(rec, sort_keys=True)
            if key not in seen:
                fresh.append(rec)
        seen.update(json.dumps(rec, sort_keys=True) for rec in r["results"])
        records += fresh
    out = {"experiment": names.pop(), "seeds": seeds, "results": records,
           "timings_s": timings, "config": config, "environment": runs[0].get("environment")}
    if provenance is not None:
        out["provenance"] = dict(provenance)
    return _jsonable(out)


def carry_rows(path, donor_path, methods, provenance: dict, config_keys=()) -> dict:
    """A results file with some methods' rows carried over from an earlier run of the same seeds.

    For a peer that is expensive to refit (e.g. GPy MRD, 30 minutes a fit) when only the other
    rows changed: the records of ``methods`` in ``donor_path`` (every metric), their timings and
    the donor's ``config_keys`` are added to the run in ``path``; the run's other rows are its own.
    The joined file says so: ``config["rows carried over"]`` names the methods and the donor, and
    ``provenance`` (required) is stored as given.

    Parameters
    ----------
    path : str or pathlib.Path
        The run's results file.
    donor_path : str or pathlib.Path
        The earlier results file of the same experiment and seeds.
    methods : sequence of str
        The methods whose rows are carried over (each must be in the donor and not in the run).
    provenance : dict
        ``command``, ``source``, ``note``: how the joined numbers were made.
    config_keys : sequence of str, default ()
        Donor config entries carried over too (e.g. the peer's settings); must not be in the run's
        config with another value.

    Returns
    -------
    dict
        The joined results, ready for :func:`json.dumps`.

    Raises
    ------
    ValueError
        Different experiments or seeds, a method missing from the donor or already in the run,
        a config key missing from the donor or conflicting, or no provenance.
    """
    run = json.loads(Path(path).read_text())
    donor = json.loads(Path(donor_path).read_text())
    if run["experiment"] != donor["experiment"]:
        raise ValueError(f"donor_path: experiment {donor['experiment']!r}, the run's is {run['experiment']!r}")
    if list(run["seeds"]) != list(donor["seeds"]):
        raise ValueError(f"donor_path: seeds {donor['seeds']}, the run's are {run['seeds']}; rows carried over "
                         "must be of the same seeds")
    if not isinstance(provenance, dict) or not provenance:
        raise ValueError("provenance: expected a dict saying how the joined numbers were made")
    methods = list(methods)
    if not methods:
        raise ValueError("methods: expected at least one method to carry over")
    have = {r["method"] for r in run["results"]}
    for m in methods:
        if not any(r["method"] == m for r in donor["results"]):
            raise ValueError(f"methods: {m!r} has no rows in {donor_path}")
        if m in have:
            raise ValueError(f"methods: {m!r} already has rows in {path}")
    out = dict(run)
    out["results"] = list(run["results"]) + [r for r in donor["results"] if r["method"] in methods]
    out["timings_s"] = dict(run.get("timings_s") or {})
    for m in methods:
        if m in (donor.get("timings_s") or {}):
            out["timings_s"][m] = donor["timings_s"][m]
    config = dict(run.get("config") or {})
    for k in config_keys:
        if k not in (donor.get("config") or {}):
            raise ValueError(f"config_keys: {k!r} is not in the donor's config")
        if k in config and config[k] != donor["config"][k] and config[k] != "not run":
            raise ValueError(f"config_keys: {k!r} differs between the run and the donor")
        config[k] = donor["config"][k]
    config["rows carried over"] = {"methods": methods, "from": str(donor_path),
                                   "donor provenance": donor.get("provenance")}
    out["config"] = config
    out["provenance"] = dict(provenance)
    return _jsonable(out)
