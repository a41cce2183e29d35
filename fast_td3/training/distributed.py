"""Data-parallel training on torch.distributed, launched by torchrun.

    torchrun --standalone --nproc_per_node=2 -m fast_td3.training.train task=... [overrides]

Each rank has its own envs, replay buffer and seeds (`Context.rank_seed`); the learner
is replicated: parameters start equal (broadcast from rank 0), gradients are averaged
across ranks inside the update, and the observation normalisers pool their statistics,
so every rank holds the same networks after every update. Rank 0 logs and writes
checkpoints; a resumed run loads rank 0's checkpoint on every rank. NCCL on GPUs,
gloo on CPUs; stop requests and evaluation results travel on a gloo group, so they
never wait for the GPU stream.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class Context:
    """Where this process sits in the job (a single process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    control_group: Any = None
    """A gloo group for host-side messages (stop flags, evaluation results)."""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def rank_seed(self, seed: int) -> int:
        """The seed of this rank's envs, exploration and sampling: the run seed on rank 0,
        an independent one derived from (seed, rank) on the others (so run seed 1's rank 1
        is not run seed 2's rank 0)."""
        if self.rank == 0:
            return seed
        return int(np.random.SeedSequence([seed, self.rank]).generate_state(1)[0])


SINGLE = Context()


def launched_by_torchrun() -> bool:
    return all(v in os.environ for v in LAUNCH_VARS) and int(os.environ["WORLD_SIZE"]) > 1


def init(device: torch.device) -> Context:
    """Join the job torchrun started (NCCL for CUDA, gloo otherwise); SINGLE when not launched by it."""
    if not launched_by_torchrun():
        return SINGLE
    rank, world, local = (int(os.environ[v]) for v in LAUNCH_VARS)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(local)
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))
    control = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD
    return Context(rank, world, local, control)


def hydra_overrides(args: list[str]) -> list[str]:
    """Run-folder overrides for a torchrun job: one folder for all ranks (named after
    torchrun's run id, which every rank shares, not a clock), written by rank 0 only."""
    extra = []
    if not any(a.startswith(("hydra.run.dir=", "resume=")) for a in args):
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "job")
        run_id = run_id[:8] if len(run_id) == 36 and run_id.count("-") == 4 else run_id  # shorten uuids only
        extra.append(f"hydra.run.dir=${{out_dir}}/${{env.task}}/torchrun-{run_id}_${{seed}}")
    if int(os.environ.get("RANK", "0")) > 0:
        extra.append("hydra.output_subdir=null")
    return extra


def batch_per_rank(batch_size: int, mode: str, num_envs: int, ctx: Context) -> int:
    """algo.batch_size, or this rank's share of it under distributed.batch=split."""
    ranks = ctx.world_size
    if mode == "per_rank" or ranks == 1:
        return batch_size
    if batch_size % ranks or batch_size // ranks < num_envs:
        raise ValueError(f"distributed.batch=split: algo.batch_size ({batch_size}) must split evenly over {ranks} "
                         f"ranks into shares of at least env.num_envs ({num_envs})")
    return batch_size // ranks


def rank_device(device: torch.device, ctx: Context) -> torch.device:
    """cuda -> this rank's GPU (torchrun's LOCAL_RANK); other devices unchanged."""
    if device.type == "cuda" and ctx.enabled:
        return torch.device("cuda", ctx.local_rank)
    return device


def broadcast_parameters_(module: torch.nn.Module, ctx: Context) -> None:
    """Every rank takes rank 0's parameters and buffers (same start, same normalisers)."""
    if not ctx.enabled:
        return
    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, src=0)


class ReplicaMismatchError(RuntimeError):
    """The ranks' networks differ: gradients or normaliser statistics were not shared."""


def check_replicas(module: torch.nn.Module, ctx: Context) -> None:
    """Raise ReplicaMismatchError unless every rank holds the same parameters and shared
    buffers (float64 fingerprints compared at checkpoints: one small all-gather)."""
    if not ctx.enabled:
        return
    own = set(getattr(module, "per_rank_buffers", ()))  # e.g. per-env running returns
    with torch.no_grad():
        tensors = list(module.parameters()) + [b for name, b in module.named_buffers() if name not in own]
        fingerprint = torch.stack([t.double().sum() for t in tensors] + [t.double().abs().sum() for t in tensors])
    fingerprint = fingerprint.cpu()
    gathered = [torch.empty_like(fingerprint) for _ in range(ctx.world_size)]
    dist.all_gather(gathered, fingerprint, group=ctx.control_group)
    for rank, other in enumerate(gathered[1:], start=1):
        # equal on one kind of device; a margin for GPUs of different models across nodes
        if not torch.allclose(other, gathered[0], rtol=1e-6, atol=1e-9):
            raise ReplicaMismatchError(f"rank {rank}'s networks differ from rank 0's "
                                       f"(max fingerprint gap {float((other - gathered[0]).abs().max()):.3g})")


def any_rank(flag: int, ctx: Context) -> int:
    """The largest of every rank's flag (e.g. a stop signal number), on the control group."""
    if not ctx.enabled:
        return flag
    value = torch.tensor([flag], dtype=torch.int64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=ctx.control_group)
    return int(value.item())


def sum_over_ranks(values: dict[str, torch.Tensor], ctx: Context) -> dict[str, torch.Tensor]:
    """Per-key sums over ranks of device scalars (one all-reduce)."""
    if not ctx.enabled or not values:
        return values
    keys = list(values)
    stacked = torch.stack([values[k].detach().float().reshape(()) for k in keys])
    dist.all_reduce(stacked)
    return dict(zip(keys, stacked.unbind(0)))


def gather_episodes(episodes: dict[str, torch.Tensor], ctx: Context) -> dict[str, torch.Tensor]:
    """Every rank's evaluation episodes (CPU tensors of equal length per rank), concatenated."""
    if not ctx.enabled:
        return episodes
    gathered = {}
    for key, values in episodes.items():
        parts = [torch.empty_like(values) for _ in range(ctx.world_size)]
        dist.all_gather(parts, values.contiguous(), group=ctx.control_group)
        gathered[key] = torch.cat(parts)
    return gathered


class SilentLogger:
    """The logger of ranks other than 0: rank 0 writes the job's metrics."""

    def advance(self, step: int) -> None:
        pass

    def learning_begins(self, step: int, compiles: bool) -> None:
        pass

    def first_update_done(self, step: int, seconds: float) -> None:
        pass

    def paused_for(self, seconds: float) -> None:
        pass

    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def log_video(self, step: int, path) -> None:
        pass

    def note(self, text: str) -> None:
        """Rank 0's console speaks for the job (e.g. the thread count beside other work)."""

    def close(self) -> None:
        pass


def barrier(ctx: Context) -> None:
    if ctx.enabled:
        dist.barrier(group=ctx.control_group)


def shutdown(ctx: Context) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()
