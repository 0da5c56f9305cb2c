"""Generate the site tables of docs/guides.md by tracing every model on a small simulated data set.

    python docs/site_tables.py            # writes docs/_tables/sites_<model>.md
    python docs/site_tables.py --check    # exit 1 if a committed table differs

Each table lists every sample and factor site of one model as :func:`pyro.poutine.trace`
records it: its kind (latent, observed, enumerated, factor), the shape of one value, the
plates it lives in (name, dim, size), the distribution's batch shape and event dims /
event shape, and the ArviZ dimension names of the site in the model's export (the ``dims``
mapping the export passes, ``tandem.models.<model>.dims``). ``tests/test_guides_doc.py``
regenerates the tables and compares them with the committed files, so the page cannot drift
from the models.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyro
import torch
from pyro import poutine
from pyro.poutine.subsample_messenger import _Subsample

HERE = Path(__file__).resolve().parent
OUT = HERE / "_tables"

D64 = torch.float64


def _kind(site) -> str:
    """latent, observed, enumerated, factor (``pyro.factor``: a ``Unit`` site) or deterministic."""
    if site["infer"].get("_deterministic"):
        return "deterministic"
    if type(site["fn"]).__name__ == "Unit":
        return "factor"
    if site["is_observed"]:
        return "observed"
    if site["infer"].get("enumerate"):
        return "enumerated"
    return "latent"


def _shape(s) -> str:
    return "(" + ", ".join(str(int(n)) for n in s) + (",)" if len(s) == 1 else ")")


def site_rows(model, args=(), kwargs=None, dims=None, guide=None) -> list[dict]:
    """Trace ``model(*args, **kwargs)`` once and describe every sample site (plates excluded).

    With ``guide``, the model is replayed on one draw of the guide (for a model whose latent
    prior cannot be sampled, such as the twin GP's ImproperUniform).

    Returns one dict per site, in the order the model samples them, with keys ``site``,
    ``kind``, ``shape``, ``plates`` (``"name (dim d, size n)"`` entries, outermost first),
    ``batch_shape``, ``event`` (event dims and event shape) and ``arviz`` (the dims
    mapping's entry, or "—" when the export has no variable for the site).
    """
    kwargs = kwargs or {}
    dims = dims or {}
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    with torch.no_grad():
        if guide is not None:
            model = poutine.replay(model, trace=poutine.trace(guide).get_trace(*args, **kwargs))
        tr = poutine.trace(model).get_trace(*args, **kwargs)
    rows = []
    for name, site in tr.nodes.items():
        if site["type"] != "sample" or isinstance(site["fn"], _Subsample):
            continue
        fn = site["fn"]
        frames = sorted(site["cond_indep_stack"], key=lambda f: f.dim)
        plates = ", ".join(f"{f.name} ({f.dim}, {f.size})" for f in frames) or "—"
        kind = _kind(site)
        is_factor = kind == "factor"
        ev = len(fn.event_shape)
        rows.append({
            "site": name,
            "kind": kind,
            "shape": _shape(site["value"].shape) if not is_factor else _shape(fn.batch_shape),
            "plates": plates,
            "batch_shape": _shape(fn.batch_shape),
            "event": "—" if is_factor else f"{ev}: {_shape(fn.event_shape)}" if ev else "0",
            "arviz": ("—" if is_factor or name not in dims else ", ".join(dims[name]) or "(scalar)"),
        })
    return rows


def markdown(rows: list[dict], caption: str) -> str:
    """A myst/markdown table of :func:`site_rows`' rows under a one-line ``caption``."""
    head = ["site", "kind", "value shape", "plates (dim, size)", "batch shape", "event dims: shape",
            "ArviZ dims"]
    lines = [caption, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join([f"`{r['site']}`", r["kind"], r["shape"], r["plates"], r["batch_shape"],
                                         r["event"], r["arviz"]]) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the models
def mcgpds_table() -> str:
    from tandem.models import mcgpds
    t = torch.linspace(0, 2, 12, dtype=D64)
    seq = torch.zeros(12)
    sim = mcgpds.simulate(t, seq, [3, 2], Q=2, M=4, J=2, seed=0)
    data = mcgpds.McGPDSData([sim["y_0"], sim["y_1"]], t, seq, Q=2, M=4, J=2)
    rows = site_rows(mcgpds.model, (data,), dims=mcgpds.dims(2))
    return markdown(rows, "Traced on `simulate(times (12,), seq_ids, out_dims=[3, 2], Q=2, M=4, J=2)`, "
                          "V = 2 views: N = 12, D_0 = 3, D_1 = 2, Q = 2, M = 4, J = 2.")


def twin_gp_table() -> str:
    from tandem.guides.twin_gp import Guide
    from tandem.inference.twin_gp import TwinGP
    from tandem.models import twin_gp
    toy = twin_gp.simulate(1, seed=0, n_train=30)
    tgp = TwinGP(toy["X_train"], toy["Y_train"], 0.7, 0.8, 1e-3)
    Xt = toy["X_test"][:5]
    rows = site_rows(twin_gp.model, (tgp, Xt, "SMTGP", 0.5), dims=twin_gp.dims(), guide=Guide())
    return markdown(rows, "Traced on the Toy 1 data (`simulate(1, n_train=30)`), B = 5 test inputs, "
                          "d_y = 1 output (the model replayed on the point-mass guide: the flat prior has no sampler).")


def samtc_table() -> str:
    from tandem.models import samtc
    sim = samtc.simulate([20, 15], [2, 3], n_atoms=2, d=2, seed=0)
    tasks = [torch.as_tensor(x) for x in sim["tasks"]]
    rows = site_rows(samtc.model, (tasks, [2, 3], 2), dims=samtc.dims(2))
    return markdown(rows, "Traced on `simulate(n=[20, 15], h=[2, 3], n_atoms=2, d=2)`: T = 2 tasks, "
                          "n_0 = 20, n_1 = 15, h_0 = 2, h_1 = 3, K = 2 atoms, d = 2 features "
                          "(a plain trace draws the enumerated sites; TraceEnum_ELBO sums them out).")


def coupled_projections_table() -> str:
    import numpy as np

    from tandem.inference.coupled_projections import CoupledProjections
    from tandem.models import coupled_projections as cpm
    sim = cpm.simulate(n=20, d=2, dx=4, dy=3, seed=0)
    known = np.arange(0, 20, 4)
    w = cpm.whiten(CoupledProjections(d=2, k=4).fit(sim["X"], sim["Y"], np.c_[known, known]))
    rows = site_rows(cpm.model, (w.zhat, w.omega, 2), dims=cpm.dims())
    N, D = w.zhat.shape
    return markdown(rows, f"Traced on `simulate(n=20, d=2, dx=4, dy=3)` whitened by `whiten(CoupledProjections"
                          f"(d=2, k=4).fit(...))`: N = {N} points (20 of each view), D = {D} = 4 + 3 "
                          "features, d = 2.")


TABLES = {"mcgpds": mcgpds_table, "twin_gp": twin_gp_table, "samtc": samtc_table,
          "coupled_projections": coupled_projections_table}


def tables() -> dict[str, str]:
    """``{model: markdown}`` of every table (``_tables/sites_<model>.md``)."""
    return {name: f() for name, f in TABLES.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = p.parse_args(argv)
    bad = []
    OUT.mkdir(exist_ok=True)
    for name, text in tables().items():
        path = OUT / f"sites_{name}.md"
        if args.check:
            if not path.exists() or path.read_text() != text:
                bad.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if bad:
        print("out of date (run python docs/site_tables.py):", *bad, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
