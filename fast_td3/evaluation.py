"""Deterministic evaluation on envs that are never the training envs.

Each eval env plays exactly one episode from a fixed seed, so two evaluations of
the same policy see the same initial states and their returns are comparable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from envs.protocol import VecEnv

Policy = Callable[[torch.Tensor], torch.Tensor]


def eval_seed(run_seed: int) -> int:
    """The seed of a run's evaluation envs: fixed for the run, independent of its training envs."""
    return int(np.random.SeedSequence([run_seed, 0x5EED]).generate_state(1)[0])


@torch.no_grad()
def run_episodes(
    env: VecEnv,
    policy: Policy,
    seed: int,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, torch.Tensor]:
    """One episode per env from `reset(seed)`; returns per-episode `returns` and `lengths`.

    `policy` maps observations (on `env.device`) to actions in [-1, 1]. Steps after an
    env's first episode ended are not counted. `on_step(t)` is called before step t, while
    the envs show the state the policy acts on (e.g. to grab video frames: the first
    `lengths[i]` frames of env i are its episode; after that it has auto-reset).
    """
    obs, _ = env.reset(seed=seed)
    returns = torch.zeros(env.num_envs, device=env.device)
    lengths = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
    active = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    for t in range(env.max_episode_steps):
        if on_step is not None:
            on_step(t)
        obs, rewards, dones, _ = env.step(policy(obs))
        returns += rewards * active
        lengths += active.long()
        active &= ~dones
        if t % 8 == 7 and not bool(active.any()):  # one host sync every 8 steps
            break
    return {"returns": returns.cpu(), "lengths": lengths.cpu()}


def summarize(episodes: dict[str, torch.Tensor]) -> dict[str, float]:
    returns = episodes["returns"].double()
    return {
        "eval/return_mean": returns.mean().item(),
        "eval/return_std": returns.std(unbiased=False).item(),
        "eval/length_mean": episodes["lengths"].double().mean().item(),
        "eval/episodes": float(returns.numel()),
    }


def write_video(frames: list, path: Path, fps: int) -> None:
    """Frames (H x W x 3 uint8) to an .mp4 (needs imageio-ffmpeg) or .gif."""
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ImportError('writing videos needs imageio: pip install -e ".[video]"') from None
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimsave(path, frames, fps=fps)
