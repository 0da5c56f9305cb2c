"""Synthetic paired manifolds for the alignment experiments (no files needed).

* :func:`paired_scurve_swissroll` — an S-curve and a Swiss roll built from the *same*
  latent coordinates (u, v) ∈ [0, 1]² per index, so x_i ↔ y_i is the true correspondence.
* :func:`linear_views_of_curve` — two linear views X = C A_x + ε, Y = C A_y + ε of one
  shared closed curve C(τ) (a trefoil knot in R³), τ on a circle: the case where coupled
  *linear* projections can recover the correspondence exactly.
"""
from __future__ import annotations

import numpy as np

from tandem.inference.validation import check_int_range, check_real_range, check_seed

__all__ = ["scurve", "swiss_roll", "paired_scurve_swissroll", "linear_views_of_curve"]


def scurve(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """S-curve in R³ from latent (u, v) ∈ [0, 1]²: θ = 3π(u − ½), x = (sin θ, 2v, sign θ (cos θ − 1)).

    Parameters
    ----------
    u, v : numpy.ndarray
        (n,) latent coordinates in [0, 1].

    Returns
    -------
    numpy.ndarray
        (n, 3) points.
    """
    th = 3.0 * np.pi * (u - 0.5)
    return np.column_stack([np.sin(th), 2.0 * v, np.sign(th) * (np.cos(th) - 1.0)])


def swiss_roll(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Swiss roll in R³ from latent (u, v) ∈ [0, 1]²: θ = 1.5π(1 + 2u), y = (θ cos θ, 21 v, θ sin θ)/θ_max·2.

    Parameters
    ----------
    u, v : numpy.ndarray
        (n,) latent coordinates in [0, 1].

    Returns
    -------
    numpy.ndarray
        (n, 3) points.
    """
    th = 1.5 * np.pi * (1.0 + 2.0 * u)
    s = 2.0 / (4.5 * np.pi)  # comparable extent to the S-curve
    return np.column_stack([s * th * np.cos(th), 2.0 * v, s * th * np.sin(th)])


def paired_scurve_swissroll(n: int = 800, noise: float = 0.0, seed: int = 0):
    """An S-curve and a Swiss roll sharing one latent: the alignment toy.

    Latents are uniform on [0, 1]²; isotropic Gaussian noise of std ``noise`` is added to each
    view.

    Parameters
    ----------
    n : int, default 800
        Points.
    noise : float, default 0.0
        Noise std.
    seed : int, default 0
        Seed of the draw.

    Returns
    -------
    X : numpy.ndarray
        (n, 3) S-curve.
    Y : numpy.ndarray
        (n, 3) Swiss roll.
    latent : numpy.ndarray
        (n, 2) the shared (u, v).
    """
    n = check_int_range(n, "n", 3)
    noise = check_real_range(noise, "noise", 0.0)
    rng = np.random.default_rng(check_seed(seed))
    lat = rng.uniform(size=(n, 2))
    X = scurve(lat[:, 0], lat[:, 1]) + noise * rng.standard_normal((n, 3))
    Y = swiss_roll(lat[:, 0], lat[:, 1]) + noise * rng.standard_normal((n, 3))
    return X, Y, lat


def linear_views_of_curve(n: int = 200, dx: int = 10, dy: int = 8, noise: float = 0.01,
                          seed: int = 0):
    """Two noisy linear views of a trefoil knot, sampled at n equally spaced τ ∈ [0, 2π).

    C(τ) = (sin τ + 2 sin 2τ, cos τ − 2 cos 2τ, −sin 3τ) (n × 3); X = C A_x + ε, Y = C A_y + ε
    with Gaussian A's.

    Parameters
    ----------
    n : int, default 200
        Points.
    dx, dy : int, default 10 and 8
        Dimensions of the views.
    noise : float, default 0.01
        Noise std.
    seed : int, default 0
        Seed of the draw.

    Returns
    -------
    X : numpy.ndarray
        (n, dx).
    Y : numpy.ndarray
        (n, dy).
    tau : numpy.ndarray
        (n,).
    """
    n = check_int_range(n, "n", 3)
    dx = check_int_range(dx, "dx", 3)
    dy = check_int_range(dy, "dy", 3)
    noise = check_real_range(noise, "noise", 0.0)
    rng = np.random.default_rng(check_seed(seed))
    tau = 2.0 * np.pi * np.arange(n) / n
    C = np.column_stack([np.sin(tau) + 2 * np.sin(2 * tau), np.cos(tau) - 2 * np.cos(2 * tau),
                         -np.sin(3 * tau)])
    X = C @ rng.standard_normal((3, dx)) + noise * rng.standard_normal((n, dx))
    Y = C @ rng.standard_normal((3, dy)) + noise * rng.standard_normal((n, dy))
    return X, Y, tau
