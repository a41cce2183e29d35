"""Which physics runs a Playground task: the MJX bridge (`mjx.py`), EnvPool's native MuJoCo
ports (`envpool.py`), or our native T1 backend (`t1_native.py`); `make` is the suite's entry.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from envs.registry import EnvOptionError

BACKENDS = ("auto", "mjx", "envpool", "native")
NATIVE_TASKS = frozenset({"T1LowDimJoystickFlatTerrain", "T1LowDimJoystickRoughTerrain"})
"""Our own tasks with a native-MuJoCo backend (`t1_native.py`), which `backend=auto` picks on the
CPU: no JIT compile and several times MJX's env steps/s there (docs/performance.md); pinned to
MJX step by step (tests/test_t1_native.py). MJX stays their GPU path."""
NATIVE_FOREIGN = {"impl": "auto", "lean_assets": True}
"""Options the native backend has no use for, with their neutral values."""
ENVPOOL_ON_CPU = frozenset({
    "T1JoystickFlatTerrain", "T1JoystickRoughTerrain", "G1JoystickFlatTerrain", "G1JoystickRoughTerrain",
})
"""Tasks that `backend=auto` runs on EnvPool when the trainer is on the CPU: benchmarked
several times faster than MJX there, and checked against MJX step by step
(tests/test_envpool_fidelity.py)."""
MJX_ONLY = {"impl": "auto", "domain_randomization": False, "menagerie_path": None, "render_mode": None}
"""MJX options with their neutral values; a run that sets one stays on MJX under `auto`
(EnvPool has no Warp, no domain randomisation, its own robot files, and its renderer finds
no OpenGL context on headless Linux, so eval videos are drawn from MJX envs)."""
ENVPOOL_ONLY = {"num_threads": None, "lean_assets": True}
"""EnvPool options with their neutral values."""


def choose_backend(task: str, device: torch.device, backend: str, options: dict[str, Any]) -> str:
    """"mjx", "envpool" or "native" for a task, device and the run's options (see ENVPOOL_ON_CPU, NATIVE_TASKS)."""
    from envs.playground import envpool as playground_envpool

    if backend not in BACKENDS:
        raise EnvOptionError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto" and task in NATIVE_TASKS:
        from envs.playground import t1_native

        on_native = device.type == "cpu" and options.get("impl", "auto") == "auto" and t1_native.available()
        return "native" if on_native else "mjx"
    if backend == "native" and task not in NATIVE_TASKS:
        raise EnvOptionError(f"backend=native runs {sorted(NATIVE_TASKS)}, not {task}; choose mjx or auto")
    if backend == "auto":
        # config_overrides name Playground's keys unless the run chose EnvPool (whose keys differ)
        uses_mjx_options = bool(options.get("config_overrides")) or any(
            options.get(k, v) != v for k, v in MJX_ONLY.items())
        on_envpool = (device.type == "cpu" and task in ENVPOOL_ON_CPU and not uses_mjx_options
                      and playground_envpool.available())
        return "envpool" if on_envpool else "mjx"
    if backend == "envpool" and not playground_envpool.available():
        raise EnvOptionError(f"backend=envpool needs EnvPool, which is not installed: {playground_envpool.INSTALL}")
    return backend


def _drop_foreign(options: dict[str, Any], foreign: dict[str, Any], owner: str, chosen: str, explicit: bool) -> None:
    """Remove the options of another backend (`owner`); one set away from its neutral value is an
    error when the run named the backend."""
    for key, neutral in foreign.items():
        value = options.pop(key, neutral)
        if value != neutral and explicit:
            raise EnvOptionError(f"{key}={value!r} applies to the {owner} backend, and this run asked for {chosen}; "
                                 f"drop the option or choose env.options.backend=auto")


def make(task: str, num_envs: int, seed: int = 0, device: Any = "cpu", backend: str = "auto", **options: Any):
    """The task on MJX (`PlaygroundVecEnv`) or EnvPool (`EnvPoolPlaygroundVecEnv`), see `choose_backend`.

    Options of the other backend are dropped when `auto` chose (a run's options serve
    both), refused when the run named the backend. An env that must render runs on MJX.
    """
    chosen = choose_backend(task, torch.device(device), backend, options)
    explicit = backend == chosen
    if chosen == "native":
        from envs.playground.t1_native import T1NativeVecEnv

        options.pop("compilation_cache", None)  # nothing to compile
        _drop_foreign(options, NATIVE_FOREIGN, "MJX or EnvPool", chosen, explicit)
        return T1NativeVecEnv(task, num_envs, seed=seed, device=device, **options)
    if chosen == "envpool" and options.get("render_mode"):
        print(f"{task}: EnvPool cannot render without an OpenGL context here; the env that draws the videos "
              "runs on MJX", file=sys.stderr, flush=True)
        chosen, explicit = "mjx", False
    _drop_foreign(options, ENVPOOL_ONLY if chosen == "mjx" else MJX_ONLY, "EnvPool" if chosen == "mjx" else "MJX",
                  chosen, explicit)
    if chosen == "mjx":
        from envs.playground.mjx import PlaygroundVecEnv

        return PlaygroundVecEnv(task, num_envs, seed=seed, device=device, **options)
    from envs.playground.envpool import EnvPoolPlaygroundVecEnv

    options.pop("compilation_cache", None)  # nothing to compile
    return EnvPoolPlaygroundVecEnv(task, num_envs, seed=seed, device=device, **options)
