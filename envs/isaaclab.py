"""Isaac Lab's env API (Isaac Lab itself, or mjlab on MuJoCo Warp) behind the env contract.

Isaac Lab's RL envs (`ManagerBasedRLEnv`, `DirectRLEnv`) and mjlab's `ManagerBasedRlEnv`
share one API, which is all this adapter uses: `num_envs`, `device`, `max_episode_length`,
`episode_length_buf`, `single_observation_space` / `single_action_space`,
`reset(seed=, env_ids=) -> (obs_groups, extras)` and
`step(a) -> (obs_groups, reward, terminated, truncated, extras)`, torch tensors on the
simulator's device, observations as a dict of groups (Isaac Lab: "policy" and "critic";
mjlab: "actor" and "critic"). A "critic" group makes the adapter asymmetric.

Three things the API does differently from the contract, handled here:

- **Final observations.** After a done, the API's `step` returns the *reset* observation.
  Where the env can skip its auto-reset (mjlab's `cfg.auto_reset`), the adapter turns it
  off, keeps the true terminal observation and resets the finished envs itself
  (`final_observations="exact"`). Isaac Lab has no such switch; there a time-out is
  reported as a termination (`"no_bootstrap"`): the learner never bootstraps from a
  reset observation, at the price of treating the time limit as the end of the task.
  `"auto"` picks exact where possible. (`algo.disable_bootstrap` goes further and drops
  bootstrapping on time-outs for every suite; the reference used it for Franka lift.)
- **Random streams.** The API seeds and draws from the process-wide generators (torch,
  NumPy, Python). The adapter gives its env private copies, swapped in around every call,
  so an evaluation env reset with a fixed seed never rewinds the trainer's exploration
  noise, and two envs in one process stay independent and reproducible.
- **Actions** arrive in [-1, 1], are clamped, and are multiplied by `action_bounds`
  (the API's actions are unbounded; the reference used 1, and 3 for Franka).

`random_initial_progress` starts every episode counter at a random step on a full reset,
so the envs' time-outs are staggered rather than all on the same step.

**Gait signals.** The adapter has the optional eval hook `gait_signals()` of
`fast_td3/measures/gait_metrics.py`, read from the task's robot articulation
(`scene[robot_entity].data`, "robot" by default) and velocity command through the API's
public attributes (`envs/isaaclab_gait.py`). Rows of envs that finished in the step:

- `"exact"` final observations (mjlab): the adapter reads them after the env's `step` and
  before its own partial reset, so they describe the terminal state, as the final
  observations do.
- `"no_bootstrap"` (Isaac Lab): the env has already reset them inside `step`, and the
  terminal state is gone. They repeat the row of the state before the last action (the
  one the previous call returned), so they describe the last state the env showed
  before its reset, one step stale, rather than the reset state: a fall keeps its low
  base and tilt, and no teleport to the reset pose enters the base's path length. When
  no such row was read (no `gait_signals()` call after the previous step or the last
  `reset`), those rows show the reset state.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable

import numpy as np
import torch

from envs.isaaclab_gait import GaitSignals
from envs.protocol import reset_extras, step_extras
from envs.random_streams import PrivateRandomStreams

FINAL_OBSERVATION_POLICIES = ("auto", "exact", "no_bootstrap")
ISAACLAB_ACTOR_GROUP = "policy"
MJLAB_ACTOR_GROUP = "actor"
CRITIC_GROUP = "critic"


class IsaacLabVecEnv:
    """An Isaac-Lab-API env behind the env contract (see the module docstring).

    Args:
        create: builds the env (called once, with the adapter's random streams active, so
            the env's seeding at construction stays private); returns the unwrapped env.
        seed: run seed; the first `reset()` seeds the env with it.
        actor_group: observation group of the actor ("policy" in Isaac Lab, "actor" in mjlab).
        critic_group: the privileged critic's group; used when the env has it (None: symmetric).
        action_bounds: actions in [-1, 1] are multiplied by this before reaching the env.
        random_initial_progress: start episode counters at random steps on full resets.
        final_observations: "auto", "exact" or "no_bootstrap" (module docstring).
        max_episode_steps: time limit in env steps (None: the task's `episode_length_s`).
        name: the task id, for messages.
        robot_entity: the scene entity `gait_signals()` reads (None: the hook returns nothing).
    """

    def __init__(
        self,
        create: Callable[[], Any],
        seed: int = 0,
        actor_group: str = ISAACLAB_ACTOR_GROUP,
        critic_group: str | None = CRITIC_GROUP,
        action_bounds: float = 1.0,
        random_initial_progress: bool = False,
        final_observations: str = "auto",
        max_episode_steps: int | None = None,
        device: torch.device | str | None = None,
        name: str = "",
        robot_entity: str | None = "robot",
    ) -> None:
        from envs.registry import EnvOptionError

        if final_observations not in FINAL_OBSERVATION_POLICIES:
            raise EnvOptionError(f"final_observations must be one of {FINAL_OBSERVATION_POLICIES}, "
                                 f"got {final_observations!r}")
        if not action_bounds > 0:
            raise EnvOptionError(f"action_bounds must be > 0, got {action_bounds}")
        self.task = name
        self.seed = int(seed)
        self._rng = PrivateRandomStreams(numpy=True, python=True, torch_device=torch.device(device or "cpu"))
        with self._rng.active():
            self.env = create()
        env = self.env
        self.device = torch.device(env.device)
        self.num_envs = int(env.num_envs)
        spaces = env.single_observation_space.spaces  # gymnasium's Dict, or mjlab's own
        groups = list(spaces)
        if actor_group not in groups:
            self.env.close()
            raise EnvOptionError(f"{name}: no observation group {actor_group!r}; the env has {groups} "
                                 "(set env.options.actor_group)")
        self.actor_group = actor_group
        self.critic_group = critic_group if critic_group in groups else None
        self.num_obs = _flat_size(spaces[actor_group], actor_group)
        self.num_critic_obs = (_flat_size(spaces[self.critic_group], self.critic_group)
                               if self.critic_group else None)
        self.num_actions = int(np.prod(env.single_action_space.shape))
        self.action_bounds = float(action_bounds)
        self.random_initial_progress = bool(random_initial_progress)
        if max_episode_steps is not None:
            # the API derives max_episode_length = ceil(episode_length_s / step_dt) on every read
            env.cfg.episode_length_s = (int(max_episode_steps) - 0.5) * env.step_dt
        self.max_episode_steps = int(env.max_episode_length)

        can_skip_reset = hasattr(env.cfg, "auto_reset")
        if final_observations == "exact" and not can_skip_reset:
            self.env.close()
            raise EnvOptionError(f"{name}: final_observations='exact' needs an env that can skip its auto-reset "
                                 "(mjlab's cfg.auto_reset); Isaac Lab envs use 'no_bootstrap'")
        self.final_observations = "exact" if final_observations != "no_bootstrap" and can_skip_reset else "no_bootstrap"
        if can_skip_reset:
            env.cfg.auto_reset = self.final_observations != "exact"
        reward_manager = getattr(env, "reward_manager", None)  # manager-based envs name their terms
        self._reward_terms = list(reward_manager.active_terms) if reward_manager is not None else []
        self.finite_horizon = bool(getattr(env.cfg, "is_finite_horizon", False))
        """mjlab's switch: the time limit is the end of the task, so a time-out does not bootstrap."""
        self._seeded = False
        self.robot_entity = robot_entity
        gait = GaitSignals(env, robot_entity) if robot_entity else None
        self._gait = gait if gait is not None and gait.available else None
        self._steps = 0
        self._gait_step: dict[str, Any] | None = None
        """The last step's command, dones and (exact mode) finished rows read before the reset."""
        self._gait_previous: tuple[int, dict[str, torch.Tensor]] | None = None
        """(step count, signals) of the state the last `gait_signals()` call or `reset` read."""

    # --------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        if seed is None and not self._seeded:
            seed = self.seed
        self._seeded = True
        with self._rng.active():
            groups, _ = self.env.reset(seed=seed)
            if self.random_initial_progress:
                buf = self.env.episode_length_buf
                buf.copy_(torch.randint_like(buf, high=self.max_episode_steps))
        self._gait_step = None
        if self._gait is not None and self.final_observations != "exact":
            self._gait_previous = (self._steps, self._gait.read(self._gait.command()))
        obs = self._actor(groups)
        return obs, reset_extras(obs, self._critic(groups))

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        if not self._seeded:
            raise RuntimeError("call reset() before step()")
        scaled = actions.detach().to(self.device).clamp(-1.0, 1.0) * self.action_bounds
        command = self._gait.command() if self._gait is not None else None  # the one in force during the step
        with self._rng.active():
            groups, rewards, terminated, truncated, env_extras = self.env.step(scaled)
            self._steps += 1
            log = dict(env_extras.get("log") or {})
            # copies: a reset below may rewrite the env's reward and termination buffers
            rewards = rewards.float().reshape(self.num_envs).clone()
            terminated, truncated = terminated.bool().clone(), truncated.bool().clone()
            dones = terminated | truncated
            final = (self._actor(groups), self._critic(groups))
            self._gait_step = {"command": command, "dones": dones, "final": None} if self._gait is not None else None
            if self.final_observations == "exact":
                final = tuple(None if value is None else value.clone() for value in final)  # the env reuses its buffers
                groups, reset_log = self._reset_finished(dones, groups)
                log.update(reset_log)
        obs = self._actor(groups)
        if self.final_observations == "exact" and not self.finite_horizon:
            time_outs = truncated & ~terminated
        else:  # the time limit ends the task, or the env's auto-reset replaced the terminal observation
            time_outs = torch.zeros_like(dones)
            final = (obs, self._critic(groups))
        extras = step_extras(obs, final[0], time_outs, critic_obs=self._critic(groups), final_critic_obs=final[1],
                             episode=self._episode_metrics(log), terminations=terminated)
        return obs, rewards, dones, extras

    def close(self) -> None:
        self.env.close()

    def gait_signals(self) -> dict[str, Any]:
        """Gait-metric signals of the step just taken (`fast_td3/measures/gait_metrics.py` names; what
        `GaitSignals` finds in the task). Rows of envs that finished in that step: see the
        module docstring. Empty without the robot entity (e.g. `robot_entity=None`)."""
        gait = self._gait
        if gait is None:
            return {}
        step = self._gait_step
        now = gait.read(step["command"] if step is not None else gait.command())
        out = now
        if step is not None:
            if step["final"] is not None:  # exact: the finished rows as they were before the reset
                ids, final = step["final"]
                out = {key: value.index_put((ids,), final[key]) for key, value in now.items()}
            elif self.final_observations != "exact" and self._gait_previous is not None:
                seen_at, previous = self._gait_previous
                if seen_at == self._steps - 1:  # the state before this step: the finished rows' last one
                    dones = step["dones"]
                    out = {key: torch.where(dones.view(-1, *[1] * (value.dim() - 1)), previous[key], value)
                           if key in previous else value for key, value in now.items()}
        self._gait_previous = (self._steps, now)
        return {**out, **gait.static()}

    def render(self, env_index: int = 0) -> np.ndarray:
        """An RGB frame of the env the simulator's camera follows (the env must have been
        made with render_mode='rgb_array')."""
        if env_index != 0:
            raise ValueError("Isaac-Lab-API envs render the env their viewer follows (env 0)")
        with self._rng.active():
            frame = self.env.render()
        if frame is None:
            raise RuntimeError(f"{self.task}: the env renders nothing; make it with render_mode='rgb_array'")
        return np.asarray(frame)

    # --------------------------------------------------------------- helpers
    def _reset_finished(self, dones: torch.Tensor, groups: dict) -> tuple[dict, dict]:
        """Reset the finished envs (the env skipped its auto-reset); every other env keeps
        the observation `step` returned (a partial reset recomputes all rows, with fresh
        observation noise). Only the groups the adapter uses are kept (not e.g. cameras)."""
        done_ids = dones.nonzero().flatten()
        if done_ids.numel() == 0:
            return groups, {}
        used = [self.actor_group] + ([self.critic_group] if self.critic_group else [])
        stepped = {name: groups[name].clone() for name in used}
        if self._gait_step is not None:  # the finished envs' terminal state, before the reset rewrites it
            command = self._gait_step["command"]
            self._gait_step["final"] = (done_ids, self._gait.read(command, rows=done_ids))
        reset, extras = self.env.reset(env_ids=done_ids)
        merged = {name: torch.where(dones.view(-1, *[1] * (value.dim() - 1)), reset[name], value)
                  for name, value in stepped.items()}
        return merged, dict(extras.get("log") or {})

    def _episode_metrics(self, log: dict) -> dict[str, torch.Tensor]:
        """`reward/<term>`: the mean per-episode sum of each reward term over the envs that
        just finished (broadcast to every row; only finished rows count). The API logs
        `Episode_Reward/<term>` as that mean divided by the time limit in seconds."""
        seconds = self.env.max_episode_length_s
        return {
            f"reward/{term}": torch.as_tensor(log.get(f"Episode_Reward/{term}", 0.0) * seconds,
                                              dtype=torch.float32, device=self.device).expand(self.num_envs)
            for term in self._reward_terms
        }

    def _actor(self, groups: dict) -> torch.Tensor:
        return groups[self.actor_group].reshape(self.num_envs, -1).float()

    def _critic(self, groups: dict) -> torch.Tensor | None:
        if not self.critic_group:
            return None
        return groups[self.critic_group].reshape(self.num_envs, -1).float()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.task!r}, num_envs={self.num_envs}, device={str(self.device)!r}, "
                f"final_observations={self.final_observations!r})")


def _flat_size(space: Any, group: str) -> int:
    shape = getattr(space, "shape", None)
    if hasattr(space, "spaces") or not shape:  # a dict of terms (mjlab's Dict has shape ())
        raise ValueError(f"observation group {group!r} is not one concatenated tensor; "
                         "set concatenate_terms=True for it in the task config")
    return int(np.prod(shape))


# ------------------------------------------------------------------ the suite's entry and hooks
ONE_SIMULATION_PER_PROCESS = True
"""Isaac Lab runs one simulation per process: the trainer makes no separate eval envs
(evaluate checkpoints with `fast-td3-eval`, a process of its own)."""
_isaac_app = None
_isaac_app_options: tuple[bool, bool] | None = None


def prepare(headless: bool = True, render_mode: str | None = None, **_: Any) -> None:
    """Start Isaac Lab's simulation app, once per process, with the window and cameras the
    first env asks for: Isaac Sim through the app launcher when it is installed (Isaac Lab
    2.x, or 3.x with Isaac Sim), nothing in Isaac Lab 3's kit-less mode. Called by
    `make_env` before the task id is checked (listing Isaac Lab's tasks needs the app)."""
    global _isaac_app, _isaac_app_options
    wanted = (bool(headless), render_mode is not None)
    if _isaac_app_options is not None:
        if _isaac_app_options != wanted:
            raise RuntimeError(f"Isaac Lab's app already runs with (headless, cameras) = {_isaac_app_options}; "
                               f"an env asking for {wanted} needs a process of its own")
        return
    _isaac_app_options = wanted
    if importlib.util.find_spec("isaacsim") is not None:
        from isaaclab.app import AppLauncher

        _isaac_app = AppLauncher(headless=headless, enable_cameras=render_mode is not None).app


def tasks() -> list[str]:
    """The `Isaac-*` ids that `isaaclab_tasks` registers with gymnasium."""
    import gymnasium as gym

    prepare()
    importlib.import_module("isaaclab_tasks")
    return sorted(name for name in gym.registry if name.startswith("Isaac-"))


def create_isaaclab_env(task: str, num_envs: int, seed: int, device: Any, render_mode: str | None = None,
                        headless: bool = True) -> Any:
    """An Isaac Lab env through Isaac Lab's own config parsing and `gym.make(task, cfg=...)`."""
    import gymnasium as gym

    prepare(headless=headless, render_mode=render_mode)
    importlib.import_module("isaaclab_tasks")
    from isaaclab_tasks.utils import parse_env_cfg

    cfg = parse_env_cfg(task, device=str(device), num_envs=num_envs)
    cfg.seed = seed
    return gym.make(task, cfg=cfg, render_mode=render_mode).unwrapped


def make(task: str, num_envs: int, seed: int = 0, device: Any = "cpu", **options: Any) -> IsaacLabVecEnv:
    """Suite `isaaclab`. Options: actor_group, critic_group, action_bounds,
    random_initial_progress, final_observations, max_episode_steps, robot_entity, render_mode,
    headless."""
    return adapter_over(create_isaaclab_env, ISAACLAB_ACTOR_GROUP, task, num_envs, seed, device, **options)


def adapter_over(create: Callable[..., Any], default_actor_group: str, task: str, num_envs: int, seed: int, device: Any,
          render_mode: str | None = None, reward_scales: dict | None = None, **options: Any) -> IsaacLabVecEnv:
    """The adapter over `create(task, num_envs, seed, device, render_mode=, **creation options)`."""
    from envs.registry import EnvOptionError

    if reward_scales:
        raise EnvOptionError(f"{task}: reward scales of Isaac-Lab-API tasks live in their env config; "
                             "env.reward_scales is not supported for this suite")
    adapter_keys = ("critic_group", "action_bounds", "random_initial_progress", "final_observations",
                    "max_episode_steps", "robot_entity")
    adapter_options = {key: options.pop(key) for key in adapter_keys if key in options}
    actor_group = options.pop("actor_group", default_actor_group)
    return IsaacLabVecEnv(
        lambda: create(task, num_envs, seed, device, render_mode=render_mode, **options),
        seed=seed, actor_group=actor_group, device=device, name=task, **adapter_options,
    )


# ------------------------------------------------------------------ play
PLAY_OPTIONS = {"headless": False}
"""Options `fast-td3-play` adds when it shows a policy: Isaac Sim's window."""


def view(env: IsaacLabVecEnv, policy: Callable[[torch.Tensor], torch.Tensor], viewer: str = "auto",
         steps: int | None = None) -> None:
    """Run `policy` in Isaac Sim's window (the env made with headless=False) until the window
    closes or `steps` env steps have passed."""
    if viewer not in ("auto", "kit"):
        raise ValueError(f"Isaac Lab shows envs in Isaac Sim's window (viewer 'kit'), not {viewer!r}")
    if _isaac_app is None:
        raise RuntimeError("no Isaac Sim window in this process (Isaac Lab's kit-less mode); record a video "
                           "instead (--video out.mp4)")
    obs, _ = env.reset()
    taken = 0
    while (steps is None or taken < steps) and _isaac_app.is_running():
        obs = env.step(policy(obs))[0]
        taken += 1
