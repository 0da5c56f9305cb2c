"""Windows of the stochastic McGPDS fit: the frames cut into independent time blocks, the
data object of the stochastic model/guide, and the guide's per-window parameters.

**Windows (the approximation).**
Sequences are cut into consecutive, non-overlapping windows of ``window`` frames (the
last window of a sequence may be shorter); every window is an independent block of the
time kernels, i.e. the model is McGPDS with ``seq_ids`` := window ids. Within a window
the time prior is exact (the paper's RBF + white + bias kernels); across a window
boundary the prior correlation is dropped, and the bias term (a constant offset per
sequence) becomes one offset per window. With RBF inverse width γ and frame spacing Δt
the dropped correlation at distance d frames is ``exp(−γ (d Δt)² / 2)``; it is negligible
once the window is several time-lengthscales long (the default inverse width
``100/range(t)²`` of one window gives a lengthscale of a tenth of the window). A
sequence no longer than ``window`` is not cut at all, so on data made of short sequences
(human pose: 7 sequences of ≤ 194 frames, ``window ≥ 194``) this is the paper's model.
Why windows rather than a Markovian (state-space) time prior: windows keep the
paper's kernel, its bias and white terms and the Opper–Archambeau q(X) unchanged; a
state-space prior would replace the RBF time kernel by a Matérn one. The cost of a
window is O(L³) and an epoch costs O(N L² + N M²), linear in the number of frames N.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyro
import pyro.optim
import torch

from tandem.inference.numerics import DTYPE
from tandem.inference.validation import (
    check_int_range,
)
from tandem.models.kernels import mapping_kernel_kind
from tandem.models.mcgpds import (
    hyperparams,
    mapping_object,
)

__all__ = ["StochasticData", "ViewMask", "Windows", "guide_params", "model_params", "view_masks"]


# --------------------------------------------------------------------------- windows
class Windows:
    """Frames cut into windows of at most ``window`` consecutive frames of one sequence.

    Vectorised, O(N log N). The bookkeeping stays on the CPU (:class:`StochasticData` moves
    ``rows`` and ``mask`` to the data's device).

    Parameters
    ----------
    seq_ids : array_like or torch.Tensor
        (N,) integer sequence labels, N ≥ 1 (frames of a sequence in row order; they need not be
        contiguous).
    window : int
        Largest window length L (≥ 1).

    Attributes
    ----------
    rows : torch.Tensor
        (S, L) long frame indices of every window (padding 0).
    mask : torch.Tensor
        (S, L) bool, True on the real (unpadded) slots.
    ids : torch.Tensor
        (N,) long window id of every frame.
    window : int
        The largest window length L.
    S : int
        Number of windows (property).

    Raises
    ------
    ValueError
        If ``seq_ids`` is empty or ``window`` < 1.
    """

    def __init__(self, seq_ids, window: int):
        seq_ids = (seq_ids.detach() if isinstance(seq_ids, torch.Tensor)
                   else torch.as_tensor(np.asarray(seq_ids), device="cpu")).long().reshape(-1).cpu()
        L = check_int_range(window, "window", low=1)
        N = seq_ids.numel()
        if N == 0:
            raise ValueError("seq_ids: expected at least one frame")
        order = torch.argsort(seq_ids, stable=True)
        s = seq_ids[order]
        new = torch.ones(N, dtype=torch.bool, device="cpu")
        new[1:] = s[1:] != s[:-1]
        start = torch.cummax(torch.where(new, torch.arange(N, device="cpu"),
                                         torch.zeros(N, dtype=torch.long, device="cpu")), 0).values
        pos = torch.arange(N, device="cpu") - start                          # position within its sequence
        wstart = new | (pos % L == 0)
        wid_sorted = torch.cumsum(wstart.long(), 0) - 1
        S = int(wid_sorted[-1]) + 1
        rows = torch.zeros(S, L, dtype=torch.long, device="cpu")
        mask = torch.zeros(S, L, dtype=torch.bool, device="cpu")
        rows[wid_sorted, pos % L] = order
        mask[wid_sorted, pos % L] = True
        ids = torch.empty(N, dtype=torch.long, device="cpu")
        ids[order] = wid_sorted
        self.rows, self.mask, self.ids, self.window = rows, mask, ids, L

    @property
    def S(self) -> int:
        """Number of windows S."""
        return int(self.rows.shape[0])


# --------------------------------------------------------------------------- missing entries
class ViewMask:
    """The missingness of one view with NaN entries: its columns grouped by observation pattern.

    Column d of the view is observed on the frames ``O_d``; columns with the same ``O_d`` form a
    group (:func:`tandem.inference.mcgpds.missing.column_patterns`), and columns never observed
    form one more group with the empty pattern (their statistics are zero, so their q(v_d) stays
    at the prior and they add nothing to the objective). The masked statistics of the stochastic
    fit are per group (:func:`tandem.inference.mcgpds.stochastic_elbo._window_terms`).

    Parameters
    ----------
    Y : torch.Tensor
        (N, D) view, NaN where missing (at least one NaN).

    Attributes
    ----------
    obs : torch.Tensor
        (N, D) boolean, True where observed (on the view's device).
    patterns : torch.Tensor
        (P, N) boolean: row p is the frames observed by the columns of group p.
    cols : list of torch.Tensor
        P (D_p,) long tensors, the columns of each group.
    group : torch.Tensor
        (D,) long: the group of every column.
    counts : torch.Tensor
        (P,) float64: D_p, the number of columns of each group.
    unperm : torch.Tensor
        (D,) long: ``torch.cat(blocks, 1)[:, unperm]`` puts per-group column blocks back in column order.
    """

    def __init__(self, Y: torch.Tensor):
        from tandem.inference.mcgpds.missing import column_patterns, observed_mask
        obs = observed_mask(Y)
        pats, cols = column_patterns(obs)
        never = torch.nonzero(~obs.any(0)).reshape(-1)
        if never.numel():               # columns never observed: one group with the empty pattern
            pats.append(torch.zeros(obs.shape[0], dtype=torch.bool, device=obs.device))
            cols.append(never)
        dev = Y.device
        self.obs = obs
        self.patterns = torch.stack(pats).to(dev)
        self.cols = [c.to(dev) for c in cols]
        D = int(Y.shape[1])
        self.group = torch.empty(D, dtype=torch.long, device=dev)
        for p, c in enumerate(self.cols):
            self.group[c] = p
        self.counts = torch.tensor([float(c.numel()) for c in self.cols], dtype=DTYPE, device=dev)
        self.unperm = torch.argsort(torch.cat(self.cols))

    @property
    def P(self) -> int:
        """Number of groups P."""
        return len(self.cols)


def view_masks(views: list) -> list:
    """One :class:`ViewMask` per view with NaN entries, ``None`` for a fully observed view.

    Parameters
    ----------
    views : list of torch.Tensor
        The (N, D_k) views.

    Returns
    -------
    list
        V entries, :class:`ViewMask` or None.
    """
    return [ViewMask(Y) if bool(torch.isnan(Y).any()) else None for Y in views]


@dataclass
class StochasticData:
    """The one argument of the stochastic model/guide/objective (scaled views on ``device``).

    Carries the attributes :func:`tandem.models.mcgpds.hyperparams` reads (``fixed``,
    ``init``, ``V``, ``mapping_kernel``, ``private_prior``, ``time_white``, ``time_bias``,
    ``time_kernel``),
    so the hyperparameters are the model's own ``pyro.param`` s with its names and
    constraints. After construction it also holds ``mapping_kernel_obj`` (the mapping kernel
    object), ``device`` (that of ``times``), ``rows`` and ``mask`` (the windows' (S, L) index
    and mask tensors on that device), ``view_masks`` (:func:`view_masks`: the missing entries of
    each view, None where none), and the properties ``V`` (number of views) and ``N`` (number of
    frames). Two plain attributes are not constructor arguments: ``scalers`` (list of
    :class:`tandem.inference.distances.Standardizer`, set by :meth:`StochasticMcGPDS.prepare
    <tandem.inference.mcgpds.stochastic.StochasticMcGPDS.prepare>` to the standardisation of
    ``views``, data units ↔ these; ``None`` otherwise) and ``seq_ids`` (the (N,) sequence codes,
    set with ``scalers``).

    Attributes
    ----------
    views : list of torch.Tensor
        The standardised (N, D_k) views, NaN where missing (a masked likelihood: a missing entry
        is not scored).
    times : torch.Tensor
        (N,) time stamps; their device is the data's device.
    windows : Windows
        The windows of the frames.
    Q : int
        Latent dimension.
    M : int
        Inducing points per view.
    J : int
        Inducing points of the shared mapping g.
    init : dict
        Initial values of the hyperparameters, by ``pyro.param`` name.
    X0 : torch.Tensor
        (N, Q) PCA initialisation of the private means.
    fixed : frozenset, default frozenset()
        Parameter groups held fixed.
    mapping_kernel : str or tandem.models.kernels.MappingKernel, default "rbfard"
        Kernel of the output mappings (normalised to its kind).
    time_white : bool, default True
        White-noise term in the paper's time kernel.
    time_bias : bool, default True
        Bias term in the paper's time kernel.
    private_prior : {"mcgpds", "gplvm"}, default "mcgpds"
        Prior of the private latent spaces.
    lam_init : float, default 0.5
        Initial variational precisions λ of q(X).
    out_dims : list of int
        D_k of each view (set from ``views``; any value given is overwritten).
    time_kernel : tandem.models.kernels.TimeKernel or sequence of them, optional
        ``None``: the paper's kernel; see ``tandem.models.mcgpds.time_kernels``.
    """
    scalers = None          # (not fields) set by StochasticMcGPDS.prepare
    seq_ids = None
    views: list
    times: torch.Tensor
    windows: Windows
    Q: int
    M: int
    J: int
    init: dict
    X0: torch.Tensor
    fixed: frozenset = frozenset()
    mapping_kernel: str = "rbfard"
    time_white: bool = True
    time_bias: bool = True
    private_prior: str = "mcgpds"
    lam_init: float = 0.5
    out_dims: list = field(default_factory=list)
    time_kernel: object = None      # None: the paper's kernel; see tandem.models.mcgpds.time_kernels

    def __post_init__(self):
        self.mapping_kernel_obj = mapping_object(self.mapping_kernel)
        self.mapping_kernel = mapping_kernel_kind(self.mapping_kernel)   # a models.kernels object or alias
        self.out_dims = [int(Y.shape[1]) for Y in self.views]
        self.device = self.times.device
        self.rows = self.windows.rows.to(self.device)
        self.mask = self.windows.mask.to(self.device)
        self._view_masks = view_masks(self.views)

    @property
    def view_masks(self) -> list:
        """The missing entries of each view (:func:`view_masks`: a :class:`ViewMask`, or None for a
        fully observed view); computed from ``views`` when absent (data saved before masks existed)."""
        if "_view_masks" not in self.__dict__:
            self._view_masks = view_masks(self.views)
        return self._view_masks

    @view_masks.setter
    def view_masks(self, value: list) -> None:
        self._view_masks = value

    @property
    def V(self) -> int:
        """Number of views V."""
        return len(self.views)

    @property
    def N(self) -> int:
        """Number of frames N."""
        return int(self.times.numel())


# --------------------------------------------------------------------------- model / guide params
def model_params(sdata: StochasticData, idx=None) -> dict:
    """The model side: registers (or reads) the McGPDS hyperparameters, as the model does.

    Parameters
    ----------
    sdata : StochasticData
        The data.
    idx : torch.Tensor, optional
        The drawn windows (unused: the hyperparameters are global; the argument keeps the
        signature of :func:`guide_params`).

    Returns
    -------
    dict
        :func:`tandem.models.mcgpds.hyperparams` of ``sdata``.
    """
    return hyperparams(sdata)


def guide_params(sdata: StochasticData, idx: torch.Tensor) -> dict:
    """The guide side for windows ``idx`` (B,): their q(X) parameters and q(V), q(U).

    Parameters
    ----------
    sdata : StochasticData
        The data.
    idx : torch.Tensor
        (B,) window indices (CPU).

    Returns
    -------
    dict
        ``mu``, ``lam``: V × (B, L, Q) tensors, the private means and precisions λ.

    Notes
    -----
    Window i has ONE parameter ``sq_i`` (V, L, 2Q) holding ``[μ, log λ]`` of every view (one
    tensor per window keeps the per-step optimiser work at B small updates; λ = exp(·) > 0),
    created from the PCA init on first use. The
    natural parameters of the whitened q(ṽ), q(ũ) — ``qvP_k`` (M, M), or (P, M, M) for a view with
    missing entries (one precision per group of columns, :class:`ViewMask`), ``qvT_k`` (M, D),
    ``quP_k`` (J, D, M, M), ``quT_k`` (J, M, D) — are registered here and set to their
    optimum given the running statistics by :class:`StochasticELBO` (never by the
    optimiser), so they enter the loss detached.
    """
    dev, M, J, Q, V = sdata.device, sdata.M, sdata.J, sdata.Q, sdata.V
    rows = sdata.windows.rows
    loglam = math.log(float(sdata.lam_init))

    def init(r):
        x0 = sdata.X0[r.to(dev)]
        return torch.cat([x0, torch.full_like(x0, loglam)], -1).expand(V, -1, -1).clone()

    packed = torch.stack([pyro.param(f"sq_{i}", lambda r=rows[i]: init(r)) for i in idx.tolist()])
    packed = packed.movedim(1, 0)                                  # (V, B, L, 2Q)
    mus = list(packed[..., :Q].unbind(0))
    lams = list(packed[..., Q:].exp().unbind(0))
    eye = torch.eye(M, dtype=DTYPE, device=dev)
    for k, D in enumerate(sdata.out_dims):
        vm = sdata.view_masks[k]
        pyro.param(f"qvP_{k}", lambda vm=vm: eye.clone() if vm is None else eye.expand(vm.P, M, M).clone())
        pyro.param(f"qvT_{k}", lambda D=D: torch.zeros(M, D, dtype=DTYPE, device=dev))
        pyro.param(f"quP_{k}", lambda D=D: eye.expand(J, D, M, M).clone())
        pyro.param(f"quT_{k}", lambda D=D: torch.zeros(J, M, D, dtype=DTYPE, device=dev))
    return {"mu": mus, "lam": lams}
