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

The point mass is also the scene's articulation `scene["robot"]`, for the gait signals:
its `data` has Isaac Lab 2.x's `ArticulationData` names and shapes for a floating base at
(x, y, BASE_HEIGHT), upright, facing its velocity (heading atan2(vy, vx), 0 at rest), with
two prismatic joints x and y driven by the force GAIN * action (effort limit GAIN, what an
action of 1 applies; position limits +-LIMIT). Like Isaac Lab's, the data are persistent
buffers written in place: after the physics for every env, then for the envs a reset
puts back. `command_manager` has Isaac Lab's velocity command "base_velocity": (distance to
the goal, 0, 0), recomputed after the resets of every step, as Isaac Lab's command manager
does.

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
BASE_HEIGHT = 0.5
SOFT_LIMIT_FACTOR = 0.9


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
class RewardTermCfg:
    func: object
    params: dict = field(default_factory=dict)


def distance_to_goal(env) -> torch.Tensor:
    return -(env.state[:, :2] - env.goal).square().sum(dim=1)


@dataclass
class RewardTerms:
    """The part of Isaac Lab's RewardManager the adapter reads."""

    active_terms: list
    cfgs: dict = field(default_factory=lambda: {"distance": RewardTermCfg(distance_to_goal)})

    def get_term_cfg(self, name: str) -> RewardTermCfg:
        return self.cfgs[name]


class FakeArticulationData:
    """Isaac Lab's `ArticulationData` (the attributes the gait signals read) of the point mass."""

    def __init__(self, n: int, device: torch.device) -> None:
        zeros = lambda *shape: torch.zeros(n, *shape, device=device)  # noqa: E731
        self.root_link_pos_w, self.root_link_quat_w = zeros(3), zeros(4)
        self.root_link_lin_vel_w, self.root_link_ang_vel_w = zeros(3), zeros(3)
        self.heading_w, self.projected_gravity_b = zeros(), zeros(3)
        self.joint_pos, self.joint_vel, self.applied_torque = zeros(2), zeros(2), zeros(2)
        limits = torch.tensor([-LIMIT, LIMIT], device=device)
        self.joint_pos_limits = limits.repeat(n, 2, 1)
        self.soft_joint_pos_limits = SOFT_LIMIT_FACTOR * self.joint_pos_limits
        self.joint_effort_limits = torch.full((n, 2), GAIN, device=device)

    @property
    def root_pos_w(self) -> torch.Tensor:  # Isaac Lab 2.x's older name of the root position
        return self.root_link_pos_w

    def write(self, ids: torch.Tensor, state: torch.Tensor, force: torch.Tensor, step_dt: float) -> None:
        """Rows `ids` from the point masses' `state` and the joint force; the yaw rate from the
        heading's change over `step_dt` (0 for `step_dt=0`: a reset)."""
        vel = state[:, 2:4]
        heading = torch.atan2(vel[:, 1], vel[:, 0])
        turn = torch.remainder(heading - self.heading_w[ids] + math.pi, 2 * math.pi) - math.pi
        self.root_link_ang_vel_w[ids] = 0.0
        self.root_link_ang_vel_w[ids, 2] = turn / step_dt if step_dt else 0.0
        self.heading_w[ids] = heading
        self.root_link_pos_w[ids] = torch.cat([state[:, :2], torch.full_like(state[:, :1], BASE_HEIGHT)], dim=1)
        half = heading / 2  # (w, x, y, z), Isaac Lab 2.x's order
        self.root_link_quat_w[ids] = torch.stack([half.cos(), 0 * half, 0 * half, half.sin()], dim=1)
        self.root_link_lin_vel_w[ids] = torch.cat([vel, torch.zeros_like(vel[:, :1])], dim=1)
        self.projected_gravity_b[ids] = torch.tensor([0.0, 0.0, -1.0], device=state.device)
        self.joint_pos[ids], self.joint_vel[ids], self.applied_torque[ids] = state[:, :2], vel, force


@dataclass
class FakeActuator:
    """Isaac Lab's `ActuatorBase` where the torque limits are read: its joints and their effort limits."""

    joint_indices: object
    effort_limit: torch.Tensor


class FakeArticulation:
    def __init__(self, n: int, device: torch.device) -> None:
        self.data = FakeArticulationData(n, device)
        self.is_fixed_base = False
        self.joint_names = ["x", "y"]
        self.actuators = {"thrusters": FakeActuator(slice(None), torch.full((n, 2), GAIN, device=device))}


class FakeScene:
    """Isaac Lab's `InteractiveScene` lookup: `scene[name]`, KeyError for a name it lacks."""

    def __init__(self, entries: dict) -> None:
        self._entries = entries

    def __getitem__(self, key: str):
        if key not in self._entries:
            raise KeyError(f"Scene entity with key '{key}' not found. Available Entities: '{list(self._entries)}'")
        return self._entries[key]


class FakeCommandManager:
    """Isaac Lab's `CommandManager` with one velocity command, "base_velocity" [N, 3]."""

    def __init__(self, n: int, device: torch.device) -> None:
        self.active_terms = ["base_velocity"]
        self._command = torch.zeros(n, 3, device=device)

    def get_command(self, name: str) -> torch.Tensor:
        if name != "base_velocity":
            raise KeyError(name)
        return self._command

    def compute(self, env) -> None:
        self._command[:, 0] = (env.goal - env.state[:, :2]).norm(dim=1)


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
        self.robot = FakeArticulation(n, self.device)
        self.scene = FakeScene({"robot": self.robot})
        self.command_manager = FakeCommandManager(n, self.device)

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
        self.command_manager.compute(self)
        return self._observations(), self.extras

    def step(self, action: torch.Tensor):
        if getattr(self.cfg, "auto_reset", True) is False and self._pending.any():
            raise RuntimeError("finished envs must be reset via reset(env_ids=...) before step()")
        self.extras = {"log": {}}
        action = action.to(self.device)
        self.state = point_mass_step(self.state, action, self.cfg)
        self.robot.data.write(slice(None), self.state, GAIN * action, self.step_dt)
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
        self.command_manager.compute(self)
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
        self.robot.data.write(env_ids, self.state[env_ids], torch.zeros(n, 2, device=self.device), 0.0)
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
