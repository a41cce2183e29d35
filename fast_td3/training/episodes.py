"""Training-episode statistics, kept on the device and read once per log interval."""

from __future__ import annotations

from dataclasses import dataclass

import torch

EPISODE_METRIC_PREFIX = "train/episode/"
"""Logged means of the adapter's per-episode metrics, e.g. train/episode/reward/feet_slip."""


@dataclass
class EpisodeStats:
    """Running return/length per env and sums over the episodes finished since the last read,
    all on the device (read once per log interval)."""

    returns: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor
    return_sum: torch.Tensor
    length_sum: torch.Tensor
    metric_names: tuple[str, ...] = ()
    metric_sums: torch.Tensor | None = None
    """Sums of the adapter's per-episode metrics (`extras[EPISODE]`, e.g. reward terms), one
    entry per name in `metric_names` (the adapter's names, fixed after the first step)."""

    @classmethod
    def zeros(cls, num_envs: int, device: torch.device) -> "EpisodeStats":
        z = lambda *shape: torch.zeros(*shape, device=device)  # noqa: E731
        return cls(z(num_envs), z(num_envs), z(()), z(()), z(()))

    def update(self, rewards: torch.Tensor, dones: torch.Tensor,
               episode_metrics: dict[str, torch.Tensor] | None = None) -> None:
        self.returns += rewards
        self.lengths += 1
        done = dones.float()
        self.finished += done.sum()
        self.return_sum += (self.returns * done).sum()
        self.length_sum += (self.lengths * done).sum()
        self.returns *= 1 - done
        self.lengths *= 1 - done
        if episode_metrics:
            stacked = torch.stack([v.to(done.device, torch.float32) for v in episode_metrics.values()])
            totals = torch.where(dones.to(done.device), stacked, 0.0).sum(-1)  # unfinished rows are not summed
            if self.metric_sums is None:
                self.metric_names, self.metric_sums = tuple(episode_metrics), totals
            else:
                self.metric_sums += totals

    def read(self) -> dict[str, torch.Tensor]:
        """Sums since the last read as device scalars (`train/episodes` is their count), then zeroed."""
        out = {
            "train/episodes": self.finished.clone(),
            "train/episode_return": self.return_sum.clone(),
            "train/episode_length": self.length_sum.clone(),
        }
        if self.metric_sums is not None:
            out.update({f"{EPISODE_METRIC_PREFIX}{name}": total.clone()
                        for name, total in zip(self.metric_names, self.metric_sums)})
            self.metric_sums.zero_()
        for t in (self.finished, self.return_sum, self.length_sum):
            t.zero_()
        return out


def episode_means(metrics: dict[str, float]) -> None:
    """Turn the sums of `EpisodeStats.read` (read to the host) into means over the episodes
    that finished, in place; without finished episodes the episode entries are dropped."""
    episodes = metrics.pop("train/episodes")
    return_sum, length_sum = metrics.pop("train/episode_return"), metrics.pop("train/episode_length")
    metric_sums = {k: metrics.pop(k) for k in list(metrics) if k.startswith(EPISODE_METRIC_PREFIX)}
    if episodes > 0:
        metrics.update({"train/episode_return": return_sum / episodes,
                        "train/episode_length": length_sum / episodes, "train/episodes": episodes})
        metrics.update({k: v / episodes for k, v in metric_sums.items()})
