"""The learner's only data-parallel step: averaging gradients over the ranks of a
torchrun job. Setting up the ranks is the training application's (fast_td3.training.distributed).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def average_gradients_(params: list[torch.nn.Parameter], world_size: int) -> None:
    """Mean of the gradients over ranks, in one flat all-reduce (no host sync)."""
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    torch._foreach_copy_(grads, [chunk.view_as(g) for chunk, g in zip(flat.split([g.numel() for g in grads]), grads)])
