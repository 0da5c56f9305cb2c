"""Long simulated archives for McGPDS: many sequences from one draw of the model.

The model's own simulator (:func:`tandem.models.mcgpds.simulate`) builds the dense N×N time
kernel, which rules out 10⁵ frames at once. Given the output functions (the inducing values
of h and g) the sequences are independent, so :func:`simulate_sequences` draws the first chunk
with the simulator and every further chunk from the model conditioned on that chunk's inducing
values and hyperparameters: one draw of the model, any number of frames, in O(chunk²) memory.
The scaling benchmark (``examples/bench_scale.py``) and the stochastic fit's tests use it.
"""
from __future__ import annotations

import torch
from pyro import poutine

from tandem.inference.numerics import DTYPE, set_seed
from tandem.inference.validation import check_int_range
from tandem.models.mcgpds import McGPDSData, mcgpds_model, simulate

__all__ = ["simulate_sequences"]


def simulate_sequences(n_seq: int, seq_len: int, out_dims: list, Q: int = 2, M: int = 10, J: int = 1,
                       chunk_frames: int = 2000, seed: int = 0, **init_kwargs) -> dict:
    """Many sequences from ONE McGPDS draw, with the model's own simulator.

    Parameters
    ----------
    n_seq : int
        Number of sequences (≥ 1).
    seq_len : int
        Frames per sequence (≥ 1).
    out_dims : list of int
        Output dimension D_k of each view.
    Q : int, default 2
        Latent dimension.
    M : int, default 10
        Inducing points per view.
    J : int, default 1
        Inducing points of the shared mapping.
    chunk_frames : int, default 2000
        Frames drawn at once (whole sequences, at least one).
    seed : int, default 0
        Seed of the draw (on the CPU: the same seed gives the same data everywhere).
    **init_kwargs
        Passed to :func:`tandem.models.mcgpds.simulate` (initial hyperparameters).

    Returns
    -------
    dict
        ``views`` (list of (N, D_k) tensors), ``times`` (N,), ``seq_ids`` (N,), ``X_s`` (N, Q),
        ``init`` (the hyperparameters), N = ``n_seq`` · ``seq_len``.

    Raises
    ------
    ValueError
        Naming ``n_seq``, ``seq_len`` or ``chunk_frames`` when it is not an integer ≥ 1, and
        (from :func:`tandem.models.mcgpds.simulate`) a bad size, ``out_dims`` entry or seed.

    Notes
    -----
    :func:`tandem.models.mcgpds.simulate` builds the dense N×N time kernel, so it cannot
    draw 10⁵ frames at once. Sequences are independent given the output functions, so the
    first chunk of sequences is drawn with ``simulate`` (which also draws the inducing
    values v_k, u_k that define h and g), and every further chunk with the model itself
    (:func:`tandem.models.mcgpds.model`) conditioned on those same inducing values and
    hyperparameters. Times are ``0, 1/seq_len, …`` within each sequence.
    """
    n_seq = check_int_range(n_seq, "n_seq", low=1)
    seq_len = check_int_range(seq_len, "seq_len", low=1)
    chunk_frames = check_int_range(chunk_frames, "chunk_frames", low=1)
    per = max(1, chunk_frames // seq_len)
    # drawn on the CPU (the same seed gives the same data everywhere); move the result to a device
    t1 = torch.arange(seq_len, dtype=DTYPE, device="cpu") / seq_len
    views, Xs = [[] for _ in out_dims], []
    first = min(per, n_seq)
    times0 = t1.repeat(first)
    seq0 = torch.arange(first, device="cpu").repeat_interleave(seq_len)
    sim = simulate(times0, seq0, out_dims, Q=Q, M=M, J=J, seed=seed, **init_kwargs)
    data0 = sim["data"]
    for k in range(len(out_dims)):
        views[k].append(sim[f"y_{k}"])
    Xs.append(sim["X_s"].mT)
    cond = {f"v_{k}": sim[f"v_{k}"] for k in range(len(out_dims))}
    cond.update({f"u_{k}": sim[f"u_{k}"] for k in range(len(out_dims))})
    done = first
    set_seed((seed + 1) % 2 ** 32)   # seed was checked by simulate; 2**32 - 1 wraps to 0
    while done < n_seq:
        nb = min(per, n_seq - done)
        d = McGPDSData(None, t1.repeat(nb), torch.arange(nb, device="cpu").repeat_interleave(seq_len), Q, M, J,
                       data0.mapping_kernel, data0.time_white, data0.time_bias, data0.private_prior,
                       out_dims=list(out_dims), init=data0.init, fixed=frozenset(
                           ("alpha", "eps", "beta", "time", "kernel", "inducing", "W", "g")))
        with poutine.block():
            tr = poutine.trace(poutine.condition(mcgpds_model, cond)).get_trace(d)
        for k in range(len(out_dims)):
            views[k].append(tr.nodes[f"y_{k}"]["value"].detach())
        Xs.append(tr.nodes["X_s"]["value"].detach().mT)
        done += nb
    return {"views": [torch.cat(v) for v in views], "times": t1.repeat(n_seq),
            "seq_ids": torch.arange(n_seq, device="cpu").repeat_interleave(seq_len), "X_s": torch.cat(Xs),
            "init": data0.init}
