"""Command-line plumbing shared by the example scripts (argparse options, seeding, output folder)."""
from __future__ import annotations

import argparse
from pathlib import Path

from tandem.inference.numerics import set_seed as _set_seed
from tandem.inference.persistence import check_writable

__all__ = ["base_parser", "set_seed", "seed_list", "prepare_out", "number_type", "int_at_least", "positive_int",
           "fraction_list", "grid_step", "seed_int"]

_MAX_SEED = 2 ** 32 - 1  # numpy's legacy global RNG takes seeds in [0, 2**32)


def number_type(convert, ok, expected: str):
    """argparse ``type=`` factory for a number with a condition.

    Anything else is an argparse error "expected <expected>, got <text>", which argparse reports
    with the option's name.

    Parameters
    ----------
    convert : callable
        ``int`` or ``float``.
    ok : callable
        ``ok(value) -> bool``, the condition.
    expected : str
        What is expected, for the message.

    Returns
    -------
    callable
        ``parse(text)`` for ``type=``.
    """
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    parse.__doc__ = (f"argparse ``type=``: {expected}.\n\nParameters\n----------\ntext : str\n    The option's value."
                     "\n\nReturns\n-------\nint or float\n    The parsed number.\n")
    return parse


def int_at_least(low: int):
    """argparse ``type=`` factory: an integer ≥ ``low``.

    Parameters
    ----------
    low : int
        The smallest accepted value.

    Returns
    -------
    callable
        ``parse(text)`` for ``type=``.
    """
    return number_type(int, lambda v: v >= low, f"an integer >= {low}")


#: argparse ``type=``: an integer >= 1.
positive_int = int_at_least(1)


def fraction_list(text: str) -> list[float]:
    """argparse ``type=``: comma-separated numbers in (0, 1), e.g. ``'0.1,0.2'``.

    Parameters
    ----------
    text : str
        The option's value.

    Returns
    -------
    list of float
        The fractions.

    Raises
    ------
    argparse.ArgumentTypeError
        For anything else.
    """
    try:
        vals = [float(v) for v in str(text).split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fractions in (0, 1) like '0.1,0.2', "
                                         f"got {text!r}") from None
    bad = [v for v in vals if not 0 < v < 1]
    if bad:
        raise argparse.ArgumentTypeError(f"fractions must lie in (0, 1), got {bad[0]!r} in {text!r}")
    return vals


def _is_grid_step(step: float) -> bool:
    return 0 < step <= 1 and abs(round(1 / step) * step - 1) <= 1e-9


#: argparse ``type=``: a grid step 1/n in (0, 1] for an integer n (e.g. 0.05, 0.1, 0.5).
grid_step = number_type(float, _is_grid_step, "a grid step 1/n in (0, 1] for an integer n (e.g. 0.05, 0.1)")

#: argparse ``type=``: an integer seed in [0, 2³² − 1].
seed_int = number_type(int, lambda v: 0 <= v <= _MAX_SEED, f"an integer seed in [0, {_MAX_SEED}]")


def prepare_out(args) -> Path:
    """Create ``args.out`` and check that a file can be written there.

    Called right after parsing (``base_parser``'s parser does it itself), so that an unwritable
    ``--out`` stops the script before any fit starts, not after hours of work. Also checks that
    ``seed + seeds − 1`` stays a valid seed.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments with ``out``, ``seed`` and ``seeds``.

    Returns
    -------
    pathlib.Path
        The output folder.

    Raises
    ------
    ValueError
        Saying which folder and why (exists as a file, a parent is a file, permission denied,
        read-only file system, ...).
    """
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder; expected a folder for the results")
    try:
        check_writable(out)
    except OSError as err:
        raise ValueError(f"--out {out}: cannot write there ({err.strerror or err}); "
                         "choose a folder you can write to") from None
    seed, seeds = getattr(args, "seed", None), getattr(args, "seeds", None)
    if seed is not None and seeds is not None and seed + seeds - 1 > _MAX_SEED:
        raise ValueError(f"--seed {seed} with --seeds {seeds}: the last seed exceeds {_MAX_SEED}")
    return out


class _ExampleParser(argparse.ArgumentParser):
    """An ArgumentParser that checks ``--out`` (:func:`prepare_out`) as part of parsing."""

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        if getattr(ns, "out", None) is not None:
            try:
                prepare_out(ns)
            except ValueError as err:
                self.error(str(err))
        return ns, rest


def base_parser(description: str, real_data: bool = False, default_seeds: int = 1) -> argparse.ArgumentParser:
    """ArgumentParser with the options every example shares.

    ``--quick`` (small, for the smoke tests), ``--out DIR`` (results JSON + plots; created and
    checked for writing when the arguments are parsed), ``--seed`` (first seed, in [0, 2³²)) and
    ``--seeds N`` (N ≥ 1: seeds seed..seed+N−1); real-data scripts also get ``--data-dir``
    (default ``$TANDEM_DATA``, else ``../shared/data``). Bad values are argparse errors (exit
    status 2) naming the option.

    Parameters
    ----------
    description : str
        The script's description.
    real_data : bool, default False
        Add ``--data-dir``.
    default_seeds : int, default 1
        Default of ``--seeds``.

    Returns
    -------
    argparse.ArgumentParser
        The parser.
    """
    p = _ExampleParser(description=description)
    p.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    p.add_argument("--out", type=Path, default=Path("results"), help="output folder for JSON and plots")
    p.add_argument("--seed", type=seed_int, default=0, help="first random seed")
    p.add_argument("--seeds", type=positive_int, default=default_seeds, help="number of seeds (seed, seed+1, ...)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    if real_data:
        p.add_argument("--data-dir", type=Path, default=None,
                       help="folder holding the shared data sets (default: $TANDEM_DATA, "
                            "else ../shared/data relative to the working directory)")
    return p


def set_seed(seed: int) -> None:
    """Seed Python's, numpy's, torch's and Pyro's global RNGs.

    Parameters
    ----------
    seed : int
        The seed.
    """
    _set_seed(seed)   # Python's, numpy's, torch's and Pyro's RNGs (pyro.set_rng_seed seeds all four)


def seed_list(args) -> list[int]:
    """The seeds of a run, ``[args.seed, ..., args.seed + args.seeds − 1]``.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments with ``seed`` and ``seeds``.

    Returns
    -------
    list of int
        The seeds.
    """
    return list(range(args.seed, args.seed + args.seeds))
