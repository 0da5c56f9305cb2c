"""McGPDS time-kernel plumbing: which time kernels a model has, their parameter names and initial values.

The shared kernel has tag ``"s"``; with the McGPDS private prior each view k has one more,
tagged ``"k"``. The paper's kernel keeps the parameter names of the string API
(``t_var_s`` ...); any other kernel's parameter ``p`` is ``t_<p>_<tag>``.
Re-exported by :mod:`tandem.models.mcgpds`.
"""
from __future__ import annotations

import torch

from tandem.inference.numerics import DTYPE
from tandem.models.kernels import PAPER_NAMES, TimeKernel, is_paper_kernel, paper_time_kernel

__all__ = ["time_kernels", "time_param_names", "time_init_values"]


def _time_tags(V: int, private_prior: str) -> list[str]:
    """The time kernels of the model: ``"s"`` (shared) and, with the McGPDS private prior, one per view."""
    return ["s"] + ([str(k) for k in range(V)] if private_prior == "mcgpds" else [])


def time_kernels(data) -> dict:
    """``{tag: TimeKernel}`` of the model's time kernels (tags ``"s"``, ``"0"``, ``"1"``, ...).

    ``data.time_kernel`` (any object with the McGPDS data attributes) is ``None`` — the paper's
    :func:`~tandem.models.kernels.paper_time_kernel` (with ``data.time_white`` /
    ``data.time_bias``) for the shared and every private kernel — one
    :class:`~tandem.models.kernels.TimeKernel` used for all of them (each with its own
    hyperparameters, as in the paper), or a sequence of V + 1 kernels (shared first, then
    view 0, 1, ...; with ``private_prior="gplvm"`` only the first is used).

    Parameters
    ----------
    data : McGPDSData or object
        Anything with the attributes ``time_kernel``, ``time_white``, ``time_bias``, ``V`` and
        ``private_prior``.

    Returns
    -------
    dict
        ``{tag: TimeKernel}``; ``"s"`` the shared kernel, ``"0"``, ``"1"``, ... the private ones
        (only with ``private_prior="mcgpds"``).

    Raises
    ------
    TypeError, ValueError
        ``time_kernel`` is not one of these forms.
    """
    tk = getattr(data, "time_kernel", None)
    tags = _time_tags(data.V, data.private_prior)
    if tk is None:
        k = paper_time_kernel(bool(data.time_white), bool(data.time_bias))
        return {t: k for t in tags}
    if isinstance(tk, TimeKernel):
        return {t: tk for t in tags}
    if isinstance(tk, (list, tuple)):
        if len(tk) != data.V + 1 or not all(isinstance(x, TimeKernel) for x in tk):
            raise ValueError(f"time_kernel: a sequence must hold V + 1 = {data.V + 1} TimeKernels (shared, then "
                             f"one per view), got {[type(x).__name__ for x in tk]}")
        return {t: tk[0 if t == "s" else int(t) + 1] for t in tags}
    raise TypeError(f"time_kernel: expected None, a TimeKernel (tandem.models.kernels) or a sequence of V + 1 "
                    f"of them, got {type(tk).__name__}")


def time_param_names(kernel: TimeKernel, tag: str) -> dict:
    """``{kernel parameter name: McGPDS parameter name}`` of one time kernel.

    The paper's kernel keeps the names of the string API (``t_var_s``, ``t_invw_s``,
    ``t_white_s``, ``t_bias_s``); any other kernel's parameter ``p`` is ``t_<p>_<tag>``
    (e.g. ``t_0.lengthscale_s`` for ``Matern32() + White()``). All are in the "time" group.

    Parameters
    ----------
    kernel : tandem.models.kernels.TimeKernel
        The time kernel.
    tag : str
        Its tag: ``"s"`` (shared) or the view index ``"0"``, ``"1"``, ...

    Returns
    -------
    dict
        ``{kernel parameter name: McGPDS parameter name}``.
    """
    if is_paper_kernel(kernel):
        return {n: f"{PAPER_NAMES[n]}_{tag}" for n in kernel.param_names}
    return {n: f"t_{n}_{tag}" for n in kernel.param_names}


def _time_constraints(data) -> dict:
    out = {}
    for tag, kern in time_kernels(data).items():
        cons = kern.constraints
        for n, full in time_param_names(kern, tag).items():
            out[full] = cons[n]
    return out


def time_init_values(kernel: TimeKernel, times=None, invwidth=None, white_var=1e-2, bias_var=1.0) -> dict:
    """Initial values ``{kernel parameter name: float}`` of a time kernel.

    Values given to the kernel's constructor win. Otherwise the paper's rules: RBF variance 1,
    inverse width ``invwidth`` (default ``100/range(t)²``), white ``white_var``, bias ``bias_var``;
    for the other kernels a ``lengthscale`` of ``range(t)/10`` (the same scale: ``ℓ = γ^{-½}``),
    a ``period`` of ``range(t)/2`` and the class defaults for the rest.

    Parameters
    ----------
    kernel : tandem.models.kernels.TimeKernel
        The time kernel.
    times : array_like, optional
        (N,) time stamps; their range sets the scales (``None``: range 1).
    invwidth : float, optional
        RBF inverse width γ; ``None`` → ``100/range(t)²``.
    white_var : float, default 1e-2
        White-noise variance of the paper's kernel.
    bias_var : float, default 1.0
        Bias variance of the paper's kernel.

    Returns
    -------
    dict
        ``{kernel parameter name: float}``.
    """
    rng_t = 1.0
    if times is not None:
        t = torch.as_tensor(times, dtype=DTYPE, device=times.device if isinstance(times, torch.Tensor) else "cpu")
        rng_t = float(t.max() - t.min()) or 1.0
    invw = 100.0 / rng_t ** 2 if invwidth is None else float(invwidth)
    out = {}
    paper = is_paper_kernel(kernel)
    given = kernel.given_init
    for n in kernel.param_names:
        leaf = n.rsplit(".", 1)[-1]
        if n in given:
            out[n] = float(given[n])
        elif paper:
            out[n] = {"rbf.variance": 1.0, "rbf.invwidth": invw, "white.variance": float(white_var),
                      "bias.variance": float(bias_var)}[n]
        elif leaf == "lengthscale":
            out[n] = invw ** -0.5
        elif leaf == "invwidth":
            out[n] = invw
        elif leaf == "period":
            out[n] = rng_t / 2.0
        else:
            out[n] = float(kernel.defaults[n])
    return out
