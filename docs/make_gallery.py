"""Regenerate the documentation's gallery: ``python docs/make_gallery.py`` (from the project root).

Runs every example listed in :data:`GALLERY` with its quick settings (``--quick --seeds 1``,
seed 0, headless matplotlib) into a temporary folder — the examples draw their figures with
:mod:`tandem.plots` — and copies each figure to ``docs/_static/gallery/<example>__<figure>.png``,
downscaled to at most :data:`MAX_WIDTH` pixels and palette-quantised so that each file stays
under :data:`MAX_BYTES` (tests/test_plots.py checks both and that every model page shows its
figures). About 3 minutes on 2 CPU cores. ``--only NAME`` regenerates one example's figures.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "_static" / "gallery"
MAX_WIDTH = 1100
MAX_BYTES = 150_000

#: example script → (extra arguments, figures it writes, the model page that shows them)
GALLERY = {
    "quickstart.py": ((), ("quickstart.png",), "mcgpds"),
    "mcgpds_toy.py": ((), ("mcgpds_toy1_seed0.png", "mcgpds_toy2.png"), "mcgpds"),
    "twin_gp_toy.py": ((), ("twin_gp_toy1.png",), "twin_gp"),
    "samtc_synthetic.py": ((), ("samtc_synthetic_R.png", "samtc_synthetic_confusion.png", "samtc_synthetic_data.png"),
                           "samtc"),
    "alignment_scurve.py": ((), ("alignment_scurve_alignments.png", "alignment_scurve_posterior.png"),
                            "coupled_projections"),
}


def gallery_name(example: str, figure: str) -> str:
    return f"{Path(example).stem}__{figure}"


def shrink(src: Path, dst: Path) -> int:
    """Copy ``src`` to ``dst`` at most MAX_WIDTH wide, 256-colour palette; returns the size."""
    from PIL import Image
    im = Image.open(src).convert("RGB")
    width = MAX_WIDTH
    while True:
        if im.width > width:
            small = im.resize((width, round(im.height * width / im.width)), Image.LANCZOS)
        else:
            small = im
        small.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(dst, optimize=True)
        size = dst.stat().st_size
        if size < MAX_BYTES or width < 400:
            return size
        width = int(width * 0.8)


def run(example: str, extra, figures, tmp: Path) -> list[Path]:
    out = tmp / Path(example).stem
    cmd = [sys.executable, str(ROOT / "examples" / example), "--quick", "--seeds", "1", "--seed", "0",
           "--no-progress", "--out", str(out), *extra]
    print("running", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "MPLBACKEND": "Agg"}, stdout=subprocess.DEVNULL)
    missing = [f for f in figures if not (out / f).exists()]
    if missing:
        raise FileNotFoundError(f"{example} did not write {missing} into {out}")
    return [out / f for f in figures]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=sorted(GALLERY), help="regenerate one example's figures")
    args = p.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for example, (extra, figures, _page) in GALLERY.items():
            if args.only and example != args.only:
                continue
            for src in run(example, extra, figures, Path(tmp)):
                dst = OUT / gallery_name(example, src.name)
                print(f"  {dst.relative_to(ROOT)}: {shrink(src, dst) / 1000:.0f} kB")


if __name__ == "__main__":
    main()
