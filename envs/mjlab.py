"""mjlab (Isaac Lab's manager-based API on MuJoCo Warp; runs on CPU) behind the env contract.

The adapter is `envs.isaaclab.IsaacLabVecEnv`; this module builds mjlab's envs for it from
mjlab's task registry (`Mjlab-Velocity-Flat-Unitree-G1`, `Mjlab-Cartpole-Balance`, ...).
mjlab pins its own MuJoCo (3.11), so it lives in a virtual environment of its own (the
install commands are in `envs/registry.py` and docs/suites.md). mjlab can skip its auto-reset,
so final observations are exact, and so are the eval hook `gait_signals()`'s rows of
finished envs (read before the adapter resets them). The hook reads the scene entity
"robot" (option `robot_entity`), the "twist" command and, in the velocity tasks, the
feet of the foot-slip reward term (contact sensor and foot sites).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from envs.isaaclab import MJLAB_ACTOR_GROUP, IsaacLabVecEnv, adapter_over


def tasks() -> list[str]:
    importlib.import_module("mjlab.tasks")  # registers the tasks
    from mjlab.tasks.registry import list_tasks

    return list_tasks()


def create_mjlab_env(task: str, num_envs: int, seed: int, device: Any, render_mode: str | None = None,
                     play: bool = False) -> Any:
    """An mjlab env from its registered config (`play=True`: the task's play config)."""
    importlib.import_module("mjlab.tasks")
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(task, play=play)
    cfg.scene.num_envs = int(num_envs)
    cfg.seed = int(seed)
    return ManagerBasedRlEnv(cfg=cfg, device=str(device), render_mode=render_mode)


def make(task: str, num_envs: int, seed: int = 0, device: Any = "cpu", **options: Any) -> IsaacLabVecEnv:
    """Suite `mjlab`. Options: as `envs.isaaclab.make`, and `play` (the task's play config)."""
    return adapter_over(create_mjlab_env, MJLAB_ACTOR_GROUP, task, num_envs, seed, device, **options)


PLAY_OPTIONS = {"play": True, "random_initial_progress": False}
"""Options `fast-td3-play` adds when it shows a policy: the task's play config."""
VIEWERS = ("auto", "native", "viser")


class ViewedEnv:
    """The adapter under the interface mjlab's viewers drive (`get_observations`, `step`,
    `reset`, `cfg`, `unwrapped`), so the policy sees exactly the observations it trained on."""

    def __init__(self, env: IsaacLabVecEnv) -> None:
        self.adapter = env
        self.num_envs = env.num_envs
        self.device = env.device
        self._obs = None

    @property
    def cfg(self) -> Any:
        return self.adapter.env.cfg

    @property
    def unwrapped(self) -> Any:
        return self.adapter.env

    def get_observations(self):
        return self.reset() if self._obs is None else self._obs

    def reset(self):
        self._obs = self.adapter.reset()[0]
        return self._obs

    def step(self, actions):
        result = self.adapter.step(actions)
        self._obs = result[0]
        return result

    def close(self) -> None:
        self.adapter.close()


def view(env: IsaacLabVecEnv, policy, viewer: str = "auto", steps: int | None = None) -> None:
    """Run `policy` in mjlab's viewer: "native" (a MuJoCo window; needs a display), "viser"
    (in the browser, at the address it prints) or "auto" (native when a display is set).
    Runs until closed (Ctrl-C) or for `steps` env steps."""
    from mjlab.viewer import NativeMujocoViewer, ViserPlayViewer

    if viewer not in VIEWERS:
        raise ValueError(f"mjlab viewers: {', '.join(VIEWERS)}; got {viewer!r}")
    if viewer == "auto":
        viewer = "native" if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") else "viser"
    shown = ViewedEnv(env)
    (NativeMujocoViewer if viewer == "native" else ViserPlayViewer)(shown, policy).run(num_steps=steps)
