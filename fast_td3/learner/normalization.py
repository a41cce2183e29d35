"""Running observation and reward normalisers.

Statistics live in module buffers (saved with `state_dict`, moved with `.to`)
and are updated with tensor ops only, so an update never waits on the device.
Batches are merged with the parallel-variance formula (Chan et al.), which is
also what makes them easy to pool across processes: each process contributes
its batch's (count, mean, M2) and every process merges the same pooled batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def _all_reduce_moments(
    count: torch.Tensor, mean: torch.Tensor, m2: torch.Tensor, group=None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pool (count, mean, M2) of one batch per process into the moments of their union."""
    total = count.clone()
    weighted_sum = mean * count
    dist.all_reduce(total, group=group)
    dist.all_reduce(weighted_sum, group=group)
    pooled_mean = weighted_sum / total
    # M2 of the union: own M2 plus the spread of the batch means around the pooled mean.
    pooled_m2 = m2 + count * (mean - pooled_mean) ** 2
    dist.all_reduce(pooled_m2, group=group)
    return total, pooled_mean, pooled_m2


class EmpiricalNormalization(nn.Module):
    """Normalise by the running mean and std of everything seen: `(x - mean) / (std + eps)`.

    Call `update(x)` with new data (a batch `[N, *shape]`) and `forward(x)` to
    normalise. `until` stops updating after that many samples (None: never).
    `set_process_group` makes every update pool the batch over a
    `torch.distributed` group, so all processes keep identical statistics.
    """

    def __init__(self, shape: int | tuple[int, ...], eps: float = 1e-2, until: int | None = None) -> None:
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.eps = eps
        self.until = until
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self._group = None
        self._distributed = False

    @property
    def std(self) -> torch.Tensor:
        return self.var.sqrt()

    def set_process_group(self, group=None) -> None:
        """Pool every future update over this process group (default: the world)."""
        self._distributed = True
        self._group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / (self.std + self.eps)

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        return y * (self.std + self.eps) + self.mean

    @torch.no_grad()
    def update(self, x: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        """Merge the batch `x` into the statistics; with `valid` (0-dim bool, decided on the
        device) false, the batch counts as empty and changes nothing (`x` must be finite)."""
        x = x.reshape(-1, *self.mean.shape).float()
        n = x.shape[0]
        # torch.full launches a fill; torch.tensor(python_number, device=cuda) would copy and sync.
        count = torch.full((), float(n), dtype=torch.float64, device=x.device)
        batch_mean = x.sum(dim=0) / max(n, 1)  # an empty batch contributes nothing
        batch_m2 = ((x - batch_mean) ** 2).sum(dim=0)
        if valid is not None:
            count, batch_m2 = count * valid, batch_m2 * valid
        if self._distributed:
            count32, batch_mean, batch_m2 = _all_reduce_moments(count.float(), batch_mean, batch_m2, self._group)
            count = count32.double()
        self._merge(count, batch_mean, batch_m2)

    def _merge(self, batch_count: torch.Tensor, batch_mean: torch.Tensor, batch_m2: torch.Tensor) -> None:
        # The same arithmetic, op for op, as before the NaN guard went on the device: the merge
        # is Chan et al.'s and could be two lerps, but a rounding change alone moved the
        # learning curves of the slow tier's tests (same maths, another trajectory).
        old_count = self.count.float()
        total = self.count + batch_count
        weight = (batch_count / total.clamp_min(1)).float()  # share of the new batch
        delta = batch_mean - self.mean
        new_mean = self.mean + delta * weight
        new_m2 = self.var * old_count + batch_m2 + delta**2 * (old_count * weight)
        new_var = torch.where(total > 0, new_m2 / total.clamp_min(1).float(), self.var)
        if self.until is not None:
            # Past `until` samples every statistic freezes; decided on the device, not the host.
            active = self.count < self.until
            new_mean = torch.where(active, new_mean, self.mean)
            new_var = torch.where(active, new_var, self.var)
            total = torch.where(active, total, self.count)
        self.mean.copy_(new_mean)
        self.var.copy_(new_var)
        self.count.copy_(total)


def return_bound_of_support(v_min: float, v_max: float) -> float:
    """The largest |return| the reward normaliser lets through: the smaller end of the C51
    support (a support with an end at 0 uses the other end), so normalised targets stay
    spread over the atoms rather than squeezed onto a few of them."""
    ends = sorted((abs(v_min), abs(v_max)))
    return ends[0] if ends[0] > 0 else ends[1]


class RewardNormalization(nn.Module):
    """Scale rewards by the running std of the per-env discounted return.

    The return `G <- gamma * (1 - done) * G + r` is tracked per env during
    collection (`update`); sampled rewards are divided by
    `max(std(G), max|G| / g_max, eps)`, so the critic's targets stay in a range
    a fixed C51 support can hold; `g_max` comes from the support
    (`return_bound_of_support`).
    """

    def __init__(self, num_envs: int, gamma: float, g_max: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.gamma = gamma
        self.g_max = g_max
        self.eps = eps
        self.register_buffer("returns", torch.zeros(num_envs))
        self.register_buffer("max_abs_return", torch.zeros(()))
        self.return_stats = EmpiricalNormalization((), eps=0.0)
        self._group = None
        self._distributed = False

    @torch.no_grad()
    def update(self, rewards: torch.Tensor, dones: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        returns = self.returns * (self.gamma * (~dones.bool()).float()) + rewards.float()
        self.returns.copy_(returns if valid is None else torch.where(valid, returns, self.returns))
        self.return_stats.update(self.returns, valid)
        batch_max = self.returns.abs().max()
        if self._distributed:
            dist.all_reduce(batch_max, op=dist.ReduceOp.MAX, group=self._group)
        self.max_abs_return.copy_(torch.maximum(self.max_abs_return, batch_max))

    def scale(self) -> torch.Tensor:
        std = self.return_stats.std
        return torch.maximum(std, self.max_abs_return / self.g_max).clamp_min(self.eps)

    def forward(self, rewards: torch.Tensor) -> torch.Tensor:
        return rewards / self.scale()

    def set_process_group(self, group=None) -> None:
        """Pool the return statistics and the max |return| over this process group."""
        self._distributed = True
        self._group = group
        self.return_stats.set_process_group(group)
