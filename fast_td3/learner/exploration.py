"""Per-env Gaussian exploration noise.

Each env explores with its own noise std drawn from U[std_min, std_max], so one
batch of envs covers cautious and bold behaviour at once; an env draws a new
std when its episode ends. Everything stays on the device (no host syncs).
"""

from __future__ import annotations

import torch
from torch import nn

from fast_td3.learner.device import resolve_device


class PerEnvGaussianNoise(nn.Module):
    def __init__(
        self,
        num_envs: int,
        std_min: float,
        std_max: float,
        device: torch.device | str | None = "auto",
    ) -> None:
        super().__init__()
        self.std_min = float(std_min)
        self.std_max = float(std_max)
        self.register_buffer("std", torch.empty(num_envs, 1, device=resolve_device(device)))
        self.resample()

    def _draw(self, n: int) -> torch.Tensor:
        return torch.empty(n, 1, device=self.std.device).uniform_(self.std_min, self.std_max)

    @torch.no_grad()
    def resample(self, dones: torch.Tensor | None = None) -> None:
        """Draw new stds: for every env, or only where `dones` is true."""
        fresh = self._draw(self.std.shape[0])
        if dones is None:
            self.std.copy_(fresh)
        else:
            self.std.copy_(torch.where(dones.bool().reshape(-1, 1), fresh, self.std))

    @torch.no_grad()
    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        """Noisy actions, clamped to [-1, 1] so replay stores what the env executes."""
        return (actions + torch.randn_like(actions) * self.std).clamp(-1.0, 1.0)
