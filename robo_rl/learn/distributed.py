"""Data-parallel training under `torchrun` with `torch.distributed`: one process (rank) per GPU or CPU share.

Each rank owns `sim.num_envs / world_size` worlds with its own seed stream; the networks start equal (rank 0's are
broadcast) and stay equal because every gradient is averaged over the ranks before it is clipped and applied
(`all_reduce_gradients`, called by every algorithm right after `backward`). What a single process computes over its
whole batch is computed over all ranks' batches: observation-normaliser statistics (`moments`, exact), PPO's
advantage normalisation and its KL for the adaptive learning rate (`mean`). Rank 0 alone writes (run folder,
TensorBoard, checkpoints, videos) and evaluates.

Every function here is the identity (no communication) when no process group is initialised or it has one rank,
so a single-process run takes the same code path. One process group serves both backends (`init`): NCCL for GPU
tensors, gloo for CPU ones; one timeout (`robo-rl train --dist-timeout`) bounds every collective, so a dead or stalled
rank ends the job with one line on every rank instead of a hang.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch import distributed as dist

from robo_rl.core.config import MAX_SEED, ConfigError, RankLost, UserError

RANK_SEED_STRIDE = 100_003
"""Rank r's env and noise seeds are `seed + r * RANK_SEED_STRIDE` (mod 2**31): rank 0 keeps the run's seed."""
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""What torchrun sets for each process; `--distributed` refuses to start without them."""


@dataclass(frozen=True)
class World:
    """This process's place among the ranks (rank 0 of 1 outside torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    """Ranks on this machine (torchrun's LOCAL_WORLD_SIZE): they share its CPU cores."""

    @property
    def is_main(self) -> bool:
        """Whether this rank writes files, logs and evaluates (rank 0)."""
        return self.rank == 0


def world() -> World:
    """The initialised process group's rank and size, or a single process."""
    if not active():
        return World()
    return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")),
                 int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def active() -> bool:
    """Whether a process group with more than one rank is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_device(device: str, local_rank: int) -> str:
    """The device of this rank's worlds and learner: `cuda` (or any `cuda:N`) becomes `cuda:<local_rank>`."""
    return f"cuda:{local_rank}" if str(device).startswith("cuda") else str(device)


def rank_seed(seed: int, rank: int) -> int:
    """This rank's seed: the run's seed on rank 0, a disjoint stream on the others."""
    return (seed + rank * RANK_SEED_STRIDE) % (MAX_SEED + 1)


def threads_per_rank(local_size: int) -> int:
    """Physics threads of one rank when the config says 0 (one per core): the machine's cores shared out."""
    return max(1, len(os.sched_getaffinity(0)) // max(1, local_size))


def worlds_per_rank(num_envs: int, size: int) -> int:
    """`num_envs / size`.

    Raises:
        ConfigError: one line when the worlds do not split evenly over the ranks.
    """
    if num_envs % size:
        raise ConfigError(f"config error: sim.num_envs = {num_envs} does not split evenly over {size} ranks; "
                          f"use a multiple of {size}")
    return num_envs // size


def init(timeout_s: float) -> World:
    """Join the process group torchrun describes (its environment variables); returns this rank's place.

    With CUDA present the group has both backends (`cpu:gloo,cuda:nccl`): a tensor's device picks its backend, so GPU
    learners all-reduce over NCCL and CPU ones (and the small CPU messages of every run) over gloo.

    Raises:
        UserError: one line when not started by torchrun, or when the rendezvous fails within the timeout.
    """
    missing = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        raise UserError(f"--distributed runs under torchrun (e.g. `torchrun --nproc_per_node=2 -m robo_rl.cli "
                        f"train ... --distributed`); {', '.join(missing)} not set")
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    try:
        dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo",
                                timeout=datetime.timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError) as exc:
        raise UserError(f"--distributed: joining the process group failed: {one_line(exc)}") from None
    return world()


def shutdown(together: bool = True) -> None:
    """Leave the process group (no-op when none).

    Args:
        together: wait at a barrier first, so that no rank tears its gloo connections down while another is still
            using them (a normal end); False after an error, when another rank may be gone.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if together:
        try:
            dist.barrier()
        except (RuntimeError, dist.DistBackendError):
            pass  # a rank left early: destroying the group is all that is left to do
    dist.destroy_process_group()


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (torch's collective errors span many)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _collective(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, dist.DistBackendError) as exc:
        raise RankLost(f"rank {dist.get_rank()}: another rank died, stalled or became unreachable "
                       f"({one_line(exc)})") from None


# ---------------------------------------------------------------------------------------------- collectives
def all_reduce_gradients(params: Iterable[Tensor]) -> None:
    """Average the gradients of `params` over the ranks, in place, with one all-reduce of their concatenation.

    Call it right after `backward` and before clipping, so every rank clips and applies the same gradient: the
    gradient of the mean loss over all ranks' (equal-sized) batches. Parameters without a gradient are skipped
    (the same ones on every rank: the code path is the same).
    """
    if not active():
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])  # (P,)
    _collective(dist.all_reduce, flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def moments(x: Tensor) -> tuple[int, Tensor, Tensor]:
    """(count, mean, population variance) of a batch (B, O) over all ranks' batches together, exactly.

    Two all-reduces: the sum and count first, then the squared deviations from the global mean (the two-pass
    formula, as accurate as one process computing over the concatenation).
    """
    if not active():
        return x.shape[0], x.mean(0), x.var(0, unbiased=False)
    sums = torch.cat([x.sum(0), torch.full((1,), float(x.shape[0]), device=x.device, dtype=x.dtype)])  # (O + 1,)
    _collective(dist.all_reduce, sums)
    total = sums[-1]
    mean = sums[:-1] / total  # (O,)
    squares = (x - mean).square().sum(0)  # (O,)
    _collective(dist.all_reduce, squares)
    return round(float(total)), mean, squares / total


def mean(value: float) -> float:
    """A scalar's mean over the ranks (PPO's KL per minibatch: equal batch sizes make it the whole batch's)."""
    if not active():
        return value
    t = torch.tensor([value], dtype=torch.float64, device="cpu")  # gloo is in every group `init` makes
    _collective(dist.all_reduce, t)
    return float(t) / dist.get_world_size()


def any_rank(flag: bool) -> bool:
    """Whether `flag` holds on any rank (every rank gets the same answer): stop decisions."""
    if not active():
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device="cpu")  # gloo is in every group `init` makes
    _collective(dist.all_reduce, t, op=dist.ReduceOp.MAX)
    return bool(t > 0)


def broadcast_module(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers into every rank's `module`."""
    if not active():
        return
    for tensor in module.state_dict().values():
        _collective(dist.broadcast, tensor, src=0)


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (picklable)."""
    if not active():
        return obj
    box = [obj]
    _collective(dist.broadcast_object_list, box, src=0)
    return box[0]


def gather_objects(obj: Any) -> list[Any] | None:
    """Every rank's `obj` in rank order on rank 0 (None on the others); `[obj]` in a single process."""
    if not active():
        return [obj]
    out = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    _collective(dist.gather_object, obj, out, dst=0)
    return out


def scatter_object(objs: list[Any] | None) -> Any:
    """Rank r's entry of rank 0's list `objs` (one per rank) on rank r."""
    if not active():
        return objs[0]
    box = [None]
    _collective(dist.scatter_object_list, box, objs if dist.get_rank() == 0 else None, src=0)
    return box[0]

