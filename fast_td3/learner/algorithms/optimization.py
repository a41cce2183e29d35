"""How the learners step: AdamW with a tensor learning rate, learning-rate schedules computed on the
host, loading an optimiser's state without aliasing, Polyak averaging, and when the actor steps.
"""

from __future__ import annotations

import copy
import math
from typing import Iterable

import torch
from torch import nn

from fast_td3.learner.config import AlgoConfig


@torch.no_grad()
def polyak_update_(target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], tau: float) -> None:
    """`target <- target + tau * (online - target)` for all tensors in one fused op."""
    torch._foreach_lerp_(list(target), list(online), tau)


def actor_update_due(critic_updates_done: int, policy_frequency: int) -> bool:
    """The actor steps after every `policy_frequency`-th critic update, counted over the
    whole run, so any (num_updates, policy_frequency) pair gives
    `floor(critic_updates / policy_frequency)` actor updates."""
    return critic_updates_done % policy_frequency == 0


class LearningRateSchedule:
    """Constant or cosine learning rate written into an optimiser's (tensor) `lr`.

    The value is computed on the host from an integer update counter and
    written in place, so a compiled update sees one tensor whose content changes.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, start: float, end: float, total: int, kind: str) -> None:
        self.optimizer = optimizer
        self.start, self.end, self.total, self.kind = start, end, max(int(total), 1), kind
        self.updates = 0
        self._write(self.value())

    def value(self) -> float:
        if self.kind == "constant":
            return self.start
        progress = min(self.updates / self.total, 1.0)
        return self.end + 0.5 * (self.start - self.end) * (1.0 + math.cos(math.pi * progress))

    def step(self) -> None:
        self.updates += 1
        if self.kind != "constant":  # a constant rate was written once: no launch per update
            self._write(self.value())

    def _write(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def state_dict(self) -> dict:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state["updates"])
        self._write(self.value())


def make_adamw(params: Iterable[nn.Parameter], lr: float, cfg: AlgoConfig, device: torch.device,
               weight_decay: float | None = None) -> torch.optim.AdamW:
    """AdamW with a tensor learning rate and the fused kernel where torch has one
    (`weight_decay` None: the shared `cfg.weight_decay`)."""
    fused = device.type in ("cpu", "cuda")
    return torch.optim.AdamW(
        params,
        lr=torch.tensor(lr, device=device) if fused else lr,
        betas=tuple(cfg.adam_betas),
        weight_decay=cfg.weight_decay if weight_decay is None else weight_decay,
        fused=fused or None,
    )


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a copy of `state` (never alias another optimizer's moments) and keep this
    optimizer's own learning-rate tensors, which schedules and compiled code hold on to."""
    own_lrs = [group["lr"] for group in optimizer.param_groups]
    optimizer.load_state_dict(copy.deepcopy(state))
    for group, lr in zip(optimizer.param_groups, own_lrs):
        if isinstance(lr, torch.Tensor):
            group["lr"] = lr
