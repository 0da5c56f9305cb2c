"""Command-line plumbing shared by the example scripts (argparse options, seeding, data dir)."""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
import torch



def base_parser(description: str, real_data: bool = False, default_seeds: int = 1) -> argparse.ArgumentParser:
    """ArgumentParser with the options every example shares.

    ``--quick`` (small, for the smoke tests), ``--out DIR`` (results JSON + plots),
    ``--seed`` (first seed) and ``--seeds N`` (seeds seed..seed+N−1); real-data scripts
    also get ``--data-dir`` (default ``../shared/data``).
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    p.add_argument("--out", type=Path, default=Path("results"), help="output folder for JSON and plots")
    p.add_argument("--seed", type=int, default=0, help="first random seed")
    p.add_argument("--seeds", type=int, default=default_seeds, help="number of seeds (seed, seed+1, ...)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    if real_data:
        p.add_argument("--data-dir", type=Path, default=None,
                       help="folder holding the shared data sets (default: $TANDEM_DATA, "
                            "else ../shared/data relative to the working directory)")
    return p


def set_seed(seed: int) -> None:
    """Seed Python, numpy, torch and Pyro's global RNGs."""
    import pyro
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
    pyro.set_rng_seed(seed)


def seed_list(args) -> list[int]:
    return list(range(args.seed, args.seed + args.seeds))
