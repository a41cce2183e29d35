"""MuJoCo Playground's registry and task configs, as this project sets them up: our own
tasks registered, robot models found locally (never a `git clone`), our settings turned into
Playground config overrides, and JAX's persistent compilation cache.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from envs.registry import EnvOptionError, check_reward_terms

CACHE_ENV_VAR = "FAST_TD3_JAX_CACHE"

PUSH_SWITCHES = ("push_config.enable", "pert_config.enable")
"""Config keys that turn push perturbations on or off (humanoids; Go1/Leap call them 'pert')."""


def playground_registry():
    """Playground's registry, with our own Playground tasks (`t1_mjx.py`) registered in it."""
    from mujoco_playground import registry

    from envs.playground import t1_mjx

    t1_mjx.register()
    return registry


def default_config(task: str):
    """The task's default Playground config; our own tasks' without importing Playground (and JAX)."""
    from envs.playground import t1_lowdim

    if task in t1_lowdim.TERRAINS:
        return t1_lowdim.default_config()
    return playground_registry().get_default_config(task)


def tasks() -> list[str]:
    from mujoco_playground import locomotion

    return sorted(set(playground_registry().ALL_ENVS) | set(locomotion.ALL_ENVS))


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path:
    """Keep compiled reset/step across processes (a first compile on CPU takes tens of seconds).

    Order: `path`, `FAST_TD3_JAX_CACHE`, JAX's own `JAX_COMPILATION_CACHE_DIR`, then
    `~/.cache/fast-td3/jax`.
    """
    chosen = (path or os.environ.get(CACHE_ENV_VAR) or os.environ.get("JAX_COMPILATION_CACHE_DIR")
              or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fast-td3" / "jax")
    chosen = Path(chosen).expanduser()
    chosen.mkdir(parents=True, exist_ok=True)
    import jax

    jax.config.update("jax_compilation_cache_dir", str(chosen))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return chosen


# ------------------------------------------------------------------ settings -> Playground config
def playground_overrides(
    task: str,
    impl: str,
    reward_scales: dict[str, float] | None = None,
    push: bool | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Flat Playground config overrides for our settings; unknown reward terms raise with the list."""
    defaults = default_config(task)
    overrides: dict[str, Any] = {"impl": impl}
    if reward_scales:
        valid = sorted(defaults.reward_config.scales.keys()) if "reward_config" in defaults else []
        check_reward_terms(reward_scales, valid, task, task)
        for term, scale in reward_scales.items():
            overrides[f"reward_config.scales.{term}"] = float(scale)
    if push is not None:
        switch = next((k for k in PUSH_SWITCHES if _has_key(defaults, k)), None)
        if switch is None:
            raise EnvOptionError(f"{task} has no push perturbations to switch (push must be null)")
        overrides[switch] = bool(push)
    overrides.update(_flatten(extra or {}))
    return overrides


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"noise_config": {"level": 0}} -> {"noise_config.level": 0} (both spellings come from the CLI)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) or hasattr(value, "items"):
            flat.update(_flatten(dict(value.items()), f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def task_config(task: str, overrides: dict[str, Any]):
    """The task's Playground config with our overrides applied (what the env is built from)."""
    config = default_config(task).lock()  # locked, like Playground's: unknown keys raise
    try:
        config.update_from_flattened_dict(overrides)
    except (KeyError, AttributeError) as error:
        raise EnvOptionError(f"{task}: a config override names no key of the task's config ({error}); "
                             f"its keys: {', '.join(sorted(_flat_keys(config)))}") from None
    return config


def _flat_keys(config, prefix: str = "") -> list[str]:
    out = []
    for key, value in config.items():
        if hasattr(value, "items"):
            out.extend(_flat_keys(value, f"{prefix}{key}."))
        else:
            out.append(f"{prefix}{key}")
    return out


def _has_key(config, dotted: str) -> bool:
    for part in dotted.split("."):
        if part not in config:
            return False
        config = config[part]
    return True
