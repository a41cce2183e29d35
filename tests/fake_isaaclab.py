"""A small env with Isaac Lab's RL env API, for the default test suite (Isaac Lab cannot run here).

It follows `isaaclab.envs.ManagerBasedRLEnv` where the adapter touches it: a config
object with `episode_length_s`, `decimation`, `sim.dt`, `seed` and `scene.num_envs`;
`num_envs`, `device`, `step_dt`, `max_episode_length` (derived from the config on
every read), `episode_length_buf`; gymnasium `single_observation_space` (a Dict of
observation groups, "policy" and optionally "critic") and `single_action_space`;
`seed(seed)` seeding the process-wide generators; `reset(seed=, env_ids=, options=)
-> (obs_groups, extras)`; `step(a) -> (obs_groups, reward, terminated, time_outs,
extras)` that auto-resets finished envs inside the call, so the observation it returns
for them is already the reset one; `render()`; `close()`. All randomness (initial
states, goals, observation noise) comes from torch's global generator, as in Isaac Lab.

The physics: each env is a damped point mass in the plane pushed by the action toward
a goal; it terminates when it leaves the square |x| <= 1.5.

`auto_reset` (constructor argument) adds mjlab's `cfg.auto_reset` switch: when False,
`step` returns the terminal observation and finished envs wait for `reset(env_ids=...)`.
`one_per_process=True` refuses a second live env, as Isaac Lab's simulation context does.
Reward and done tensors are persistent buffers overwritten by every step, as in both.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

LIMIT = 1.5
GAIN = 5.0
DAMPING = 0.1


@dataclass
class SimCfg:
    dt: float = 0.01


@dataclass
class SceneCfg:
    num_envs: int = 4


@dataclass
class FakeEnvCfg:
    sim: SimCfg = field(default_factory=SimCfg)
    scene: SceneCfg = field(default_factory=SceneCfg)
    decimation: int = 2
    episode_length_s: float = 10.0
    seed: int | None = None
    observation_noise: float = 0.0
    """Std of the noise added to the policy group (the critic group is noise-free)."""
    privileged_critic: bool = True


def point_mass_step(state: torch.Tensor, action: torch.Tensor, cfg: FakeEnvCfg) -> torch.Tensor:
    """One env step of `[..., pos(2), vel(2)]` under `action` (2), without resets."""
    pos, vel = state[..., :2].clone(), state[..., 2:4].clone()
    for _ in range(cfg.decimation):
        vel = vel + cfg.sim.dt * (GAIN * action - DAMPING * vel)
        pos = pos + cfg.sim.dt * vel
    return torch.cat([pos, vel], dim=-1)


@dataclass
class RewardTerms:
    """The part of Isaac Lab's RewardManager the adapter reads."""

    active_terms: list


class FakeManagerBasedRLEnv:
    live = 0
    """Envs alive in this process (Isaac Lab allows one simulation per process)."""

    def __init__(self, cfg: FakeEnvCfg, device: str = "cpu", render_mode: str | None = None,
                 auto_reset: bool | None = None, one_per_process: bool = False) -> None:
        if one_per_process and FakeManagerBasedRLEnv.live:
            raise RuntimeError("Simulation context already exists. Cannot create a new one.")
        FakeManagerBasedRLEnv.live += 1
        self.cfg = cfg
        if auto_reset is not None:
            cfg.auto_reset = auto_reset  # mjlab's switch; Isaac Lab's config has no such field
        self.render_mode = render_mode
        self.device = torch.device(device)
        if cfg.seed is not None:
            self.seed(cfg.seed)
        n = cfg.scene.num_envs
        self.state = torch.zeros(n, 4, device=self.device)
        self.goal = torch.zeros(n, 2, device=self.device)
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=self.device)
        self.reset_buf = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.reset_terminated = torch.zeros_like(self.reset_buf)
        self.reset_time_outs = torch.zeros_like(self.reset_buf)
        self.reward_buf = torch.zeros(n, device=self.device)
        self._pending = torch.zeros_like(self.reset_buf)
        self.extras: dict = {}
        groups = {"policy": gym.spaces.Box(-math.inf, math.inf, (4,))}
        if cfg.privileged_critic:
            groups["critic"] = gym.spaces.Box(-math.inf, math.inf, (6,))
        self.single_observation_space = gym.spaces.Dict(groups)
        self.single_action_space = gym.spaces.Box(-math.inf, math.inf, (2,))
        self.closed = False
        self.steps_taken = 0
        self.reward_manager = RewardTerms(["distance"])
        self.episode_sums = torch.zeros(n, device=self.device)

    # ------------------------------------------------------------- properties
    @property
    def num_envs(self) -> int:
        return self.cfg.scene.num_envs

    @property
    def step_dt(self) -> float:
        return self.cfg.sim.dt * self.cfg.decimation

    @property
    def max_episode_length_s(self) -> float:
        return self.cfg.episode_length_s

    @property
    def max_episode_length(self) -> int:
        return math.ceil(self.max_episode_length_s / self.step_dt)

    @property
    def unwrapped(self) -> "FakeManagerBasedRLEnv":
        return self

    @staticmethod
    def seed(seed: int = -1) -> int:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        return seed

    # ---------------------------------------------------------------- the API
    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None, options: dict | None = None):
        if seed is not None:
            self.seed(seed)
        if env_ids is None:
            env_ids = torch.arange(self.num_envs, device=self.device)
        self.extras = {"log": {}}
        self._reset_idx(env_ids)
        return self._observations(), self.extras

    def step(self, action: torch.Tensor):
        if getattr(self.cfg, "auto_reset", True) is False and self._pending.any():
            raise RuntimeError("finished envs must be reset via reset(env_ids=...) before step()")
        self.extras = {"log": {}}
        self.state = point_mass_step(self.state, action.to(self.device), self.cfg)
        self.steps_taken += 1
        self.episode_length_buf += 1
        # persistent buffers written in place, as Isaac Lab's and mjlab's managers do
        self.reset_terminated[:] = (self.state[:, :2].abs() > LIMIT).any(dim=1)
        self.reset_time_outs[:] = self.episode_length_buf >= self.max_episode_length
        self.reset_buf[:] = self.reset_terminated | self.reset_time_outs
        self.reward_buf[:] = -(self.state[:, :2] - self.goal).square().sum(dim=1) * self.step_dt
        self.episode_sums += self.reward_buf
        reset_ids = self.reset_buf.nonzero().flatten()
        if getattr(self.cfg, "auto_reset", True):
            if len(reset_ids) > 0:
                self._reset_idx(reset_ids)
        else:
            self._pending[reset_ids] = True
        self.extras["time_outs"] = self.reset_time_outs
        return self._observations(), self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((32, 32, 3), dtype=np.uint8)
        x, y = ((self.state[0, :2].clamp(-LIMIT, LIMIT) / LIMIT + 1) * 15.5).round().long().tolist()
        frame[y, x] = 255
        return frame

    def close(self) -> None:
        if not self.closed:
            FakeManagerBasedRLEnv.live -= 1
        self.closed = True

    # ---------------------------------------------------------------- helpers
    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        n = len(env_ids)
        self.state[env_ids] = torch.cat([torch.rand(n, 2, device=self.device) - 0.5,
                                         torch.zeros(n, 2, device=self.device)], dim=1)
        self.goal[env_ids] = torch.rand(n, 2, device=self.device) * 2 - 1
        # the reward manager's log: the mean episode sum per second of the time limit
        self.extras["log"]["Episode_Reward/distance"] = self.episode_sums[env_ids].mean() / self.max_episode_length_s
        self.episode_sums[env_ids] = 0.0
        self.episode_length_buf[env_ids] = 0
        self._pending[env_ids] = False

    def _observations(self) -> dict[str, torch.Tensor]:
        policy = self.state.clone()
        if self.cfg.observation_noise:
            policy = policy + self.cfg.observation_noise * torch.randn_like(policy)
        groups = {"policy": policy}
        if self.cfg.privileged_critic:
            groups["critic"] = torch.cat([self.state, self.goal], dim=1)
        return groups
