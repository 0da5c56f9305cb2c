"""Data-parallel training and sharded evaluation on ``torch.distributed``.

Nothing here is a home-made communication layer: every collective is a
``torch.distributed`` call (gloo on CPU, NCCL on CUDA), the same all-reduce that
``torch.nn.parallel.DistributedDataParallel`` performs. DDP itself needs an
``nn.Module``; a Pyro program keeps its parameters in the parameter store, so
:class:`DataParallelLoss` does DDP's job for any loss that :func:`tandem.inference.fit`
accepts: each worker evaluates the loss on its shard of the data, the gradients of every
parameter the loss touched are summed over the workers in one flat all-reduce (one
bucket), and every worker then takes the same optimiser step, so the replicas stay
identical.

Equality with a single process. If the loss is a sum over data items plus global terms
(an ELBO: likelihood terms per item, KL of global latents), and worker ``r`` evaluates
the items of its shard plus — on rank 0 only — the global terms, the summed loss and
gradient equal the single-process ones on the union of the shards, up to floating-point
summation order (≈ 1e-15 relative per step). The stochastic McGPDS objective
(:mod:`tandem.inference.mcgpds.stochastic`) does exactly that on the *same* minibatch on
every worker (the subsample is drawn from the seeded RNG, identical on all ranks; rank
``r`` takes rows ``r::world`` of it). For a generic Pyro model, give every worker its
shard of the data with a ``pyro.plate(..., subsample=shard_indices)`` scaled to the full
size and use ``reduce="mean"`` (each worker's loss is then an unbiased full-data
estimate, and their mean is the full-data loss when the shards are equally large).

Launching
---------
One machine, several processes (tests, a workstation)::

    from tandem.inference.distributed import spawn
    results = spawn(worker_fn, world_size=2)          # gloo, file:// rendezvous in a temp dir

A cluster, with ``torchrun`` (it sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT)::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
             --rdzv-endpoint HOST:29500 my_script.py
    # in my_script.py:
    device = init_from_env()            # NCCL + cuda:LOCAL_RANK when CUDA is present, else gloo/cpu
    res = fit(model, guide, data, loss=DataParallelLoss(objective), optim=..., seed=0)

Embarrassingly parallel work (test points of a twin-GP prediction, SAMTC's tasks) needs
no gradients: :func:`sharded_map` evaluates ``fn`` on this rank's items and all-gathers
the results in the original order.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pyro import poutine
from pyro.infer import ELBO

from tandem.inference.persistence import dump, load

__all__ = [
    "DataParallelLoss",
    "all_reduce_sum",
    "init_from_env",
    "is_distributed",
    "rank_world",
    "shard_indices",
    "sharded_map",
    "spawn",
]


def is_distributed() -> bool:
    """True inside an initialised ``torch.distributed`` process group."""
    return dist.is_available() and dist.is_initialized()


def rank_world() -> tuple[int, int]:
    """``(rank, world_size)``; ``(0, 1)`` outside a process group."""
    if is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all ranks, in place (no-op outside a process group).

    Parameters
    ----------
    t : torch.Tensor
        This rank's tensor.

    Returns
    -------
    torch.Tensor
        ``t``, now the sum over ranks.
    """
    if is_distributed() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def shard_indices(n_or_idx, rank: int | None = None, world: int | None = None) -> torch.Tensor:
    """This rank's share ``idx[rank::world]`` of the indices.

    Parameters
    ----------
    n_or_idx : int or torch.Tensor
        The indices, or n for ``arange(n)``.
    rank, world : int, optional
        Default: this process's rank and world size (:func:`rank_world`).

    Returns
    -------
    torch.Tensor
        The rank's indices.
    """
    r, w = rank_world()
    r = r if rank is None else int(rank)
    w = w if world is None else int(world)
    if not 0 <= r < w:
        raise ValueError(f"rank: expected 0 <= rank < world ({w}), got {r}")
    idx = torch.arange(int(n_or_idx)) if isinstance(n_or_idx, int) else torch.as_tensor(n_or_idx)  # device: cpu-ok
    return idx[r::w]


class DataParallelLoss:
    """Wrap a loss for :func:`tandem.inference.fit` so that gradients are all-reduced.

    Each call computes this worker's loss and its gradient with respect to every ``pyro.param``
    it touched, concatenates the gradients (parameters sorted by name, a zero block for a
    parameter this shard does not depend on) and the loss value into one flat tensor,
    all-reduces it, and writes the result into ``.grad``. It returns the reduced loss as a tensor
    whose backward pass adds zero, so both the driver's Pyro optimisers (``SVI.step``) and its
    L-BFGS closure use the reduced gradient unchanged. Outside a process group it is the wrapped
    loss with the same calling convention.

    Parameters
    ----------
    loss : pyro.infer.ELBO or callable
        A Pyro ``ELBO`` (its ``differentiable_loss`` is used) or a callable
        ``loss(model, guide, *args, **kwargs) -> scalar tensor`` evaluated on this worker's shard.
    reduce : {"sum", "mean"}, default "sum"
        "sum": shards are disjoint parts of one sum (e.g. the stochastic McGPDS objective);
        "mean": each worker's loss is itself a full-data estimate.
    """

    def __init__(self, loss, reduce: str = "sum"):
        if not (isinstance(loss, ELBO) or callable(loss)):
            raise TypeError(f"loss: expected a Pyro ELBO or a callable, got {type(loss).__name__}")
        if reduce not in ("sum", "mean"):
            raise ValueError(f"reduce: expected 'sum' or 'mean', got {reduce!r}")
        self.loss = loss
        self.reduce = reduce

    def _local(self, model, guide, *args, **kwargs) -> torch.Tensor:
        if isinstance(self.loss, ELBO):
            return self.loss.differentiable_loss(model, guide, *args, **kwargs)
        return self.loss(model, guide, *args, **kwargs)

    def __call__(self, model, guide, *args, **kwargs) -> torch.Tensor:
        with poutine.trace(param_only=True) as tr:
            value = self._local(model, guide, *args, **kwargs)
        store = {}
        for name, site in tr.trace.nodes.items():
            store[name] = site["value"].unconstrained()
        names = sorted(store)
        params = [store[n] for n in names]
        if not isinstance(value, torch.Tensor):
            value = torch.as_tensor(float(value), dtype=torch.float64)  # device: cpu-ok (a float's 0-d tensor)
        if value.requires_grad and params:
            grads = torch.autograd.grad(value, params, allow_unused=True)
        else:
            grads = [None] * len(params)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        device = params[0].device if params else value.device
        flat = torch.cat([g.reshape(-1).to(torch.float64) for g in grads]
                         + [value.detach().reshape(1).to(device=device, dtype=torch.float64)])
        _, world = rank_world()
        if world > 1:
            size = torch.tensor([flat.numel(), -flat.numel()], dtype=torch.float64, device=device)
            dist.all_reduce(size, op=dist.ReduceOp.MAX)
            if int(size[0]) != flat.numel() or -int(size[1]) != flat.numel():
                raise RuntimeError("DataParallelLoss: the workers' losses touched parameters of different "
                                   f"sizes (this rank {flat.numel() - 1} values); every rank must register "
                                   "the same pyro.params in the same shapes")
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            if self.reduce == "mean":
                flat /= world
        off = 0
        for p in params:
            n = p.numel()
            g = flat[off:off + n].reshape(p.shape).to(p.dtype)
            off += n
            p.grad = g if p.grad is None else p.grad + g
        total = flat[-1].to(value.dtype)
        # a zero-valued graph onto the parameters: a later backward() adds 0 to the
        # reduced gradients (SVI calls it when the loss requires grad; L-BFGS always does)
        zero = sum((0.0 * p.sum() for p in params), torch.zeros((), dtype=total.dtype, device=total.device))
        return total + zero


def init_from_env(backend: str | None = None) -> torch.device:
    """Join the process group that ``torchrun`` describes in the environment.

    Uses NCCL and ``cuda:LOCAL_RANK`` when CUDA is present, else gloo on the CPU.

    Parameters
    ----------
    backend : str, optional
        Override the backend.

    Returns
    -------
    torch.device
        This worker's device.

    Raises
    ------
    RuntimeError
        Naming the missing variables when not started by ``torchrun`` (or an equivalent launcher).
    """
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise RuntimeError(f"init_from_env: environment variables {missing} are not set; start the script "
                           "with torchrun (see tandem.inference.distributed) or use spawn()")
    cuda = torch.cuda.is_available()
    backend = backend or ("nccl" if cuda else "gloo")
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not is_distributed():
        dist.init_process_group(backend)
    return device


def _spawn_entry(rank: int, fn: Callable, world: int, init_file: str, out_dir: str, backend: str,
                 threads: int, args: tuple) -> None:
    torch.set_num_threads(threads)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        dump(result, Path(out_dir) / f"rank{rank}.pt", "spawn-result")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(fn: Callable, world_size: int = 2, *args, backend: str = "gloo", threads: int = 1) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes on this machine.

    The processes form a ``torch.distributed`` group (a ``file://`` rendezvous in a temporary
    folder: nothing leaves the machine). Results travel in tandem's safe format
    (:mod:`tandem.inference.persistence`; nothing is unpickled).

    Parameters
    ----------
    fn : callable
        Importable (module level); returns tensors, arrays, plain values, containers of them or
        tandem objects.
    world_size : int, default 2
        Number of processes.
    *args
        Passed to ``fn`` after (rank, world_size).
    backend : str, default "gloo"
        The process-group backend.
    threads : int, default 1
        Torch threads per process.

    Returns
    -------
    list
        The results by rank.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size: expected a positive integer, got {world_size!r}")
    with tempfile.TemporaryDirectory(prefix="tandem_dist_") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.spawn(_spawn_entry, args=(fn, world_size, init_file, tmp, backend, threads, args),
                 nprocs=world_size, join=True)
        return [load(Path(tmp) / f"rank{r}.pt", "spawn-result") for r in range(world_size)]


def sharded_map(fn: Callable[[Sequence], Any], items: Sequence, combine: Callable[[list], Any] | None = None):
    """Evaluate ``fn`` on this rank's contiguous share of ``items`` and gather all shares.

    The shares are contiguous (rank r gets ``items[lo_r:hi_r]``), so concatenating the gathered
    results in rank order restores the original order. Outside a process group this is
    ``fn(items)``.

    Parameters
    ----------
    fn : callable
        ``fn(chunk)`` returns a tensor (rows = chunk items) or a list (one entry per item).
    items : sequence
        All items.
    combine : callable, optional
        Merges the per-rank results (default: ``torch.cat`` for tensors, list concatenation
        otherwise).

    Returns
    -------
    torch.Tensor or list
        The results for all items, in order.
    """
    rank, world = rank_world()
    n = len(items)
    bounds = [round(i * n / world) for i in range(world + 1)]
    mine = fn(items[bounds[rank]:bounds[rank + 1]])
    if world == 1:
        parts = [mine]
    else:
        parts = [None] * world
        payload = mine.detach().cpu() if isinstance(mine, torch.Tensor) else mine
        dist.all_gather_object(parts, payload)
        if isinstance(mine, torch.Tensor):
            parts = [p.to(mine.device) for p in parts]
    if combine is not None:
        return combine(parts)
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts, 0)
    return [x for p in parts for x in p]
