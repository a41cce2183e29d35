"""Gymnasium MuJoCo tasks (`HalfCheetah-v5`, `Humanoid-v5`, ...) behind the env contract.

The CPU default suite, and the machinery HumanoidBench (`envs/humanoid_bench.py`) runs
on. Envs step with same-step auto-reset, in this process (`vectorization="sync"`),
sharded over worker processes that share memory (`"processes"`, `num_workers` of them),
or one process per env through SB3's `SubprocVecEnv` (`"subproc"`); see
`envs/worker_pool.py`. `"auto"` (the default) uses workers only when each gets at least
`ENVS_PER_WORKER` envs and there are 2 or more of them: below that the pipe round trip
costs more than the stepping it spreads (scripts/bench_envs.py). Each env gets its own
seed derived from the run seed. Observations become float32 torch tensors on `device`;
actions in [-1, 1] are clamped and rescaled to the env's action bounds.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from envs.protocol import derive_env_seeds, reset_extras, step_extras
from envs.worker_pool import InProcess, SubprocPool, WorkerPool, available_cpus

VECTORIZATIONS = ("auto", "sync", "processes", "subproc")
ENVS_PER_WORKER = 32


def auto_workers(num_envs: int, cpus: int | None = None) -> int:
    """Worker processes for `vectorization="auto"` (0: step in this process)."""
    workers = min(cpus or available_cpus(), num_envs // ENVS_PER_WORKER)
    return workers if workers >= 2 else 0


def make_registered(package: str | None, task: str, **kwargs: Any) -> gym.Env:
    """`gym.make(task)` after importing the package that registers it: a worker process
    started fresh (SB3's forkserver) has not imported it yet."""
    if package:
        importlib.import_module(package)
    return gym.make(task, **kwargs)


def tasks() -> list[str]:
    """The MuJoCo `-v5` tasks registered with gymnasium."""
    return sorted(
        name
        for name, spec in gym.registry.items()
        if name.endswith("-v5") and "mujoco" in str(spec.entry_point)
    )


class GymnasiumVecEnv:
    """`num_envs` copies of one gymnasium task, stepped together.

    Args:
        task: gymnasium id, e.g. "HalfCheetah-v5".
        num_envs: number of parallel envs.
        seed: run seed; env `i` is seeded with `derive_env_seeds(seed, num_envs)[i]`.
        device: where returned tensors live.
        vectorization: "auto", "sync" (in this process), "processes" (sharded over workers
            sharing memory) or "subproc" (SB3's SubprocVecEnv, one process per env).
        num_workers: worker processes for "processes" (0: one per CPU core).
        max_episode_steps: time limit (None: the task's registered limit).
        env_kwargs: keyword arguments for `gym.make` (e.g. reward weights).
        render_mode: "rgb_array" to allow `render()` (videos); None otherwise.
        package: module that registers `task` with gymnasium when imported (e.g.
            "humanoid_bench"); imported here and in every worker before `gym.make`.
        start_method: multiprocessing start method for "subproc" (None: fork where available).
        env_factory: `(package, task, **gym_make_kwargs) -> gym.Env`, a module-level function
            (workers may unpickle it); default `make_registered`.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        vectorization: str = "auto",
        num_workers: int = 0,
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        render_mode: str | None = None,
        package: str | None = None,
        start_method: str | None = None,
        env_factory: Callable[..., gym.Env] | None = None,
    ) -> None:
        if vectorization not in VECTORIZATIONS:
            raise ValueError(f"vectorization must be one of {VECTORIZATIONS}, got {vectorization!r}")
        if package:
            importlib.import_module(package)
        spec = gym.spec(task)
        self.task = task
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.max_episode_steps = int(max_episode_steps or spec.max_episode_steps)
        self.seed = int(seed)
        make_kwargs = dict(env_kwargs or {})
        if render_mode is not None:
            make_kwargs["render_mode"] = render_mode
        factory = functools.partial(env_factory or make_registered, package, task, max_episode_steps=self.max_episode_steps)
        make_env = functools.partial(factory, **make_kwargs)
        probe_env = functools.partial(factory, **{**make_kwargs, "render_mode": None})
        if vectorization == "auto":
            num_workers = auto_workers(self.num_envs)
            vectorization = "processes" if num_workers else "sync"
        self.vectorization = vectorization
        if vectorization == "processes":
            self._vec: InProcess | WorkerPool | SubprocPool = WorkerPool(
                make_env, self.num_envs, num_workers or available_cpus(), probe_env
            )
        elif vectorization == "subproc":
            self._vec = SubprocPool(make_env, self.num_envs, start_method)
        else:
            self._vec = InProcess(make_env, self.num_envs)

        obs_space = self._vec.single_observation_space
        act_space = self._vec.single_action_space
        if len(obs_space.shape) != 1 or len(act_space.shape) != 1:
            self._vec.close()
            raise ValueError(f"{task}: only flat Box observation and action spaces are supported")
        self.num_obs = int(obs_space.shape[0])
        self.num_critic_obs = None
        self.num_actions = int(act_space.shape[0])
        self._action_low = act_space.low.astype(np.float64)
        self._action_scale = (act_space.high.astype(np.float64) - self._action_low) / 2.0
        self._seeds = derive_env_seeds(self.seed, self.num_envs)
        self._seeded = False

    # --------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        if seed is not None:
            seeds: list[int] | None = derive_env_seeds(int(seed), self.num_envs)
        elif not self._seeded:
            seeds = self._seeds
        else:
            seeds = None  # continue each env's own random stream
        self._seeded = True
        obs = self._vec.reset(seeds)
        obs_t = self._tensor(obs)
        return obs_t, reset_extras(obs_t)

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        if not self._seeded:
            raise RuntimeError("call reset() before step()")
        scaled = self._action_low + (actions.detach().clamp(-1.0, 1.0).double().cpu().numpy() + 1.0) * self._action_scale
        obs, rewards, terminated, truncated, final_obs = self._vec.step(scaled)
        obs_t = self._tensor(obs)
        time_outs = truncated & ~terminated
        extras = step_extras(obs_t, self._tensor(final_obs), torch.from_numpy(time_outs).to(self.device))
        rewards_t = torch.from_numpy(np.asarray(rewards, dtype=np.float32)).to(self.device)
        dones_t = torch.from_numpy(terminated | truncated).to(self.device)
        return obs_t, rewards_t, dones_t, extras

    def close(self) -> None:
        self._vec.close()

    def render(self, env_index: int = 0) -> np.ndarray:
        """An RGB frame of one env (the env must have been made with render_mode='rgb_array')."""
        return self._vec.render(env_index)

    # --------------------------------------------------------------- helpers
    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(array, dtype=np.float32)).to(self.device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.task!r}, num_envs={self.num_envs}, vectorization={self.vectorization!r})"


def make(task: str, num_envs: int, seed: int = 0, device: Any = "cpu", **options: Any) -> GymnasiumVecEnv:
    if options.pop("reward_scales", None):
        from envs.registry import EnvOptionError

        raise EnvOptionError(f"{task} has no named reward terms; gymnasium tasks take reward weights as "
                             "env.options.env_kwargs (e.g. env.options.env_kwargs.ctrl_cost_weight=0.2)")
    env_kwargs = options.get("env_kwargs")
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        from envs.registry import EnvOptionError

        raise EnvOptionError(f"env.options.env_kwargs={env_kwargs!r}: env_kwargs takes keyword=value entries, "
                             "e.g. env.options.env_kwargs.ctrl_cost_weight=0")
    if env_kwargs:
        check_env_kwargs(task, options["env_kwargs"], options.get("package"), options.get("env_factory"), seed)
    return GymnasiumVecEnv(task, num_envs, seed=seed, device=device, **options)


def check_env_kwargs(task: str, env_kwargs: dict[str, Any], package: str | None = None,
                     env_factory: Callable[..., gym.Env] | None = None, seed: int = 0) -> None:
    """EnvOptionError naming the options when the task cannot be made or reset with these
    `gym.make` keywords (e.g. reset_noise_scale=nan): said here, once, not from a worker mid-run."""
    from envs.registry import EnvOptionError

    named = ", ".join(f"env.options.env_kwargs.{key}={value!r}" for key, value in env_kwargs.items())
    try:
        env = (env_factory or make_registered)(package, task, **env_kwargs)
    except Exception as error:  # noqa: BLE001 -- whatever the env's constructor says about its keywords
        raise EnvOptionError(f"{task} cannot be made with {named}: {type(error).__name__}: {error}") from None
    try:
        env.reset(seed=seed)
    except Exception as error:  # noqa: BLE001
        raise EnvOptionError(f"{task} fails at reset with {named}: {type(error).__name__}: {error}") from None
    finally:
        env.close()
