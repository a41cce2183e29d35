"""HumanoidBench (Unitree H1 with dexterous hands, G1; whole-body tasks) behind the env contract.

HumanoidBench registers gymnasium ids `{robot}-{task}-v0` (e.g. `h1hand-walk-v0`) when
`humanoid_bench` is imported, and runs on CPU MuJoCo, one env stepped after another. It
pins mujoco 3.1.6, so it lives in its own virtual environment (the install commands are in
`envs/registry.py`, printed when it is missing, and in the README).

The adapter is `GymnasiumVecEnv` (envs/gymnasium.py) with HumanoidBench's settings:
- workers import `humanoid_bench` before `gym.make`, and each makes its envs exactly once
  (under mujoco 3.1.6 every `gym.make` leaks file descriptors);
- `render_mode=None` unless a video is asked for (HumanoidBench defaults to "rgb_array");
- the time limit of `time_limit(task)`: 500 steps for the push, cube, basketball,
  kitchen and insert tasks, 1000 otherwise;
- per-env seeds derived from the run seed reach every env (the reference's never did),
  NumPy's global generator included, which several tasks draw their goals from;
- vectorization "processes" by default: envs sharded over one worker per CPU core with
  observations in shared memory. Against SB3's `SubprocVecEnv` ("subproc": a process per
  env, observations pickled through pipes) it made 1.23x the env steps/s at 32 envs with
  less than half the memory, and SB3 ran out of 24 GB at 128 envs (scripts/bench_envs.py).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from envs.gymnasium import GymnasiumVecEnv, make_registered
from envs.registry import EnvOptionError

PACKAGE = "humanoid_bench"
ROBOTS = ("h1hand", "h1", "g1", "h1simplehand", "h1strong", "h1touch")
SHORT_TASKS = ("push", "cube", "basketball", "kitchen", "insert_normal", "insert_small")
"""Tasks whose episodes last 500 steps (the others: 1000), as HumanoidBench registers them."""


def time_limit(task: str) -> int:
    """Episode length of a HumanoidBench id, e.g. 500 for `h1hand-push-v0`."""
    name = task.split("-", 1)[1].rsplit("-", 1)[0] if task.count("-") >= 2 else task
    return 500 if name in SHORT_TASKS else 1000


class OwnGlobalRandomState(gym.Wrapper):
    """Gives the env its own `np.random` state, seeded by `reset(seed=...)`.

    Several HumanoidBench tasks (push, reach, cube, package, basketball, ...) draw goals and
    object positions from NumPy's global generator, not the env's `np_random`: forked
    workers would repeat each other's goals and `reset(seed)` would not repeat them. The
    global state is swapped in around every call, so envs sharing a process stay apart.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._global_state: dict | None = None

    def _swapped(self, call, *args, **kwargs):
        outside = np.random.get_state()
        if self._global_state is not None:
            np.random.set_state(self._global_state)
        try:
            return call(*args, **kwargs)
        finally:
            self._global_state = np.random.get_state()
            np.random.set_state(outside)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._global_state = np.random.RandomState(seed).get_state()
        return self._swapped(self.env.reset, seed=seed, options=options)

    def step(self, action):
        return self._swapped(self.env.step, action)


def make_humanoid_bench_env(package: str | None, task: str, **kwargs: Any) -> gym.Env:
    """`gym.make` a HumanoidBench task with its own global-RNG state (`OwnGlobalRandomState`),
    rendering with gymnasium 1.x's MuJoCo renderer.

    HumanoidBench renders with `renderer.render(mode, camera_id, camera_name)`, the
    gymnasium 0.29 signature; gymnasium 1.x fixes the camera when the renderer is built
    (from the same env attributes) and takes only the mode, so the extra arguments go.
    """
    env = make_registered(package, task, **kwargs)
    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    if renderer is not None and len(inspect.signature(renderer.render).parameters) == 1:
        render = renderer.render
        renderer.render = lambda render_mode=None, *camera: render(render_mode)
    return OwnGlobalRandomState(env)


def tasks() -> list[str]:
    """The HumanoidBench ids registered with gymnasium (importing `humanoid_bench`)."""
    importlib.import_module(PACKAGE)
    return sorted(name for name in gym.registry if name.split("-", 1)[0] in ROBOTS)


class HumanoidBenchVecEnv(GymnasiumVecEnv):
    """`num_envs` copies of one HumanoidBench task (see the module docstring).

    Args: as `GymnasiumVecEnv`, but `vectorization` defaults to "processes", `num_workers`
    to one per CPU core, and `max_episode_steps` to `time_limit(task)`. `env_kwargs` reach
    HumanoidBench's env (e.g. `blocked_hands: "True"`, `obs_wrapper: "True"`). `package` is the
    module that registers `task`; tests pass "gymnasium" to drive gymnasium's own MuJoCo
    tasks through this same code path where HumanoidBench is not installed.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        seed: int = 0,
        device: Any = "cpu",
        vectorization: str = "processes",
        num_workers: int = 0,
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        package: str = PACKAGE,
        start_method: str | None = None,
        env_factory: Callable[..., gym.Env] = make_humanoid_bench_env,
    ) -> None:
        if max_episode_steps is None and package == PACKAGE:
            max_episode_steps = time_limit(task)
        if vectorization == "subproc" and num_workers:
            raise EnvOptionError("num_workers is for vectorization=processes; subproc runs a process per env")
        super().__init__(
            task, num_envs, seed=seed, device=device, vectorization=vectorization, num_workers=num_workers,
            max_episode_steps=max_episode_steps, render_mode=render_mode, package=package,
            env_kwargs={"render_mode": None, **(env_kwargs or {})},  # HumanoidBench's own default: "rgb_array"
            start_method=start_method, env_factory=env_factory,
        )


def make(task: str, num_envs: int, seed: int = 0, device: Any = "cpu", **options: Any) -> HumanoidBenchVecEnv:
    if options.pop("reward_scales", None):
        raise EnvOptionError(f"{task}: HumanoidBench rewards have no scalable terms (env.reward_scales must be empty)")
    return HumanoidBenchVecEnv(task, num_envs, seed=seed, device=device, **options)
