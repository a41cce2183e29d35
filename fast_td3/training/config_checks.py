"""Checks of a composed, validated run config that its dataclasses cannot make alone: values that
only fail deep inside the envs, the replay buffer or the RNGs (a seed out of range, a buffer
shorter than an n-step window or larger than the memory there is), and keys set on the command
line that would do nothing in this run. Each problem is one line (ConfigError) that says what
to do; `fast-td3-train` runs them before Hydra makes a run folder.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import fields, is_dataclass

from fast_td3.learner.config import ALGORITHMS, ConfigError
from fast_td3.command_line import SEED_MAX
from sim2real.t1.gate_spec import THRESHOLD_OPTIONS, sequence
from sim2real.t1.perturbations import PERTURBATION_OPTIONS, ranges_from_options

CLOSE_TO_FULL = 0.8
"""A replay buffer above this share of the memory available gets a warning."""


def non_finite_numbers(node, prefix: str = "") -> list[str]:
    """`key=value` for every float of a config (dataclasses, dicts, lists) that is NaN or infinite."""
    if is_dataclass(node):
        node = {f.name: getattr(node, f.name) for f in fields(node)}
    if isinstance(node, Mapping):
        return [bad for key, value in node.items() for bad in non_finite_numbers(value, f"{prefix}{key}.")]
    if isinstance(node, (list, tuple)):
        return [bad for i, value in enumerate(node) for bad in non_finite_numbers(value, f"{prefix[:-1]}[{i}].")]
    return [f"{prefix[:-1]}={node}"] if isinstance(node, float) and not math.isfinite(node) else []


def check_values(cfg) -> None:
    """ConfigError for a value of a `TrainConfig` that would only fail once training started."""
    bad = non_finite_numbers(cfg)
    if bad:  # an inf or nan setting trains into NaN weights, or never stops
        raise ConfigError(f"{bad[0]}: give a finite number" + (f" (also {', '.join(bad[1:])})" if bad[1:] else ""))
    if not 0 <= cfg.seed <= SEED_MAX:
        raise ConfigError(f"seed={cfg.seed}: seed must be an integer from 0 to {SEED_MAX} (2**64 - 1)")
    algo = cfg.algo
    if algo.n_step > algo.buffer_size:
        raise ConfigError(
            f"algo.buffer_size ({algo.buffer_size}) must be >= algo.n_step ({algo.n_step}): each env's replay "
            "holds whole n-step windows; raise algo.buffer_size or lower algo.n_step")
    if cfg.gate.interval and cfg.gate.perturbations:  # in fast-td3-sim2sim's words
        unknown = sorted(set(map(str, cfg.gate.perturbations)) - set(PERTURBATION_OPTIONS))
        if unknown:
            raise ConfigError(f"gate.perturbations.{unknown[0]} is not a perturbation; known: "
                              f"{', '.join(PERTURBATION_OPTIONS)}")
        try:
            ranges_from_options({str(k): str(v) for k, v in cfg.gate.perturbations.items()})
        except ValueError as error:
            raise ConfigError(f"gate.perturbations: {error}") from None
    if cfg.gate.interval:
        check_gate_shipping(cfg.gate)
    for section in ("options", "eval_options"):
        kwargs = getattr(cfg.env, section).get("env_kwargs")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ConfigError(
                f"env.{section}.env_kwargs={kwargs!r}: env_kwargs takes keyword=value entries, one per "
                f"override, e.g. env.{section}.env_kwargs.ctrl_cost_weight=0")


def check_gate_shipping(gate) -> None:
    """The gate's segments and its confirmation (`gate.ship`) can work."""
    try:
        sequence(gate.both_sides, list(gate.segments))
    except ValueError as error:
        raise ConfigError(f"gate.segments: {error}") from None
    unknown = sorted(set(map(str, gate.thresholds)) - set(THRESHOLD_OPTIONS))
    if unknown:
        raise ConfigError(f"gate.thresholds.{unknown[0]} is not a threshold; known: {', '.join(THRESHOLD_OPTIONS)}")
    if not gate.ship:
        return
    if gate.stop_after_passes < 1:
        raise ConfigError("gate.ship=true confirms gate.stop_after_passes gates in a row: give "
                          "gate.stop_after_passes=N (N >= 1), or drop gate.ship")
    if gate.ship_trials < 1 or not gate.ship_seeds:
        raise ConfigError(f"gate.ship_trials={gate.ship_trials}, gate.ship_seeds={list(gate.ship_seeds)}: the "
                          "confirmation plays at least one trial at one seed")
    if any(not 0 <= seed <= SEED_MAX for seed in gate.ship_seeds):
        raise ConfigError(f"gate.ship_seeds={list(gate.ship_seeds)}: seeds are integers from 0 to {SEED_MAX}")


def _gigabytes(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


# ------------------------------------------------------------------ replay memory
def host_memory_available() -> int | None:
    """Bytes of RAM the OS can give without swapping (Linux: MemAvailable), None when unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def device_memory_available(device) -> int | None:
    """Free bytes on a torch device (CUDA: free memory of the GPU; CPU: RAM), None when unknown."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "cpu":
        return host_memory_available()
    return None


def _replay_message(cfg, need: int, per_slot: int, available: int, device, at_least: bool) -> str:
    algo, num_envs = cfg.algo, cfg.env.num_envs
    fit = int(available * CLOSE_TO_FULL) // (num_envs * per_slot)
    bf16 = "" if algo.store_obs_bf16 else ", or store observations in half the memory with algo.store_obs_bf16=true"
    return (f"algo.buffer_size={algo.buffer_size}: the replay buffer needs {'at least ' if at_least else ''}"
            f"{_gigabytes(need)} ({num_envs} envs x {algo.buffer_size} transitions x {per_slot} bytes) but "
            f"{device} has {_gigabytes(available)} available; lower algo.buffer_size (about {fit} fits) "
            f"or env.num_envs{bf16}")


def check_replay_memory_early(cfg) -> None:
    """Before any env is made (its sizes unknown): refuse a replay buffer that cannot fit even with
    one observation and one action per transition. Imports torch only for a buffer that takes
    a sizeable share of the RAM, so ordinary runs stay fast to check."""
    transitions = cfg.env.num_envs * cfg.algo.buffer_size
    host = host_memory_available()
    if host is None or transitions * 8 < host:  # a slot takes more than 8 bytes: worth a closer look
        return
    import torch

    from envs.protocol import EnvSpec
    from fast_td3.learner.device import resolve_device
    from fast_td3.learner.replay import slot_bytes

    device = resolve_device(cfg.device)
    if device.type == "cuda" and device.index is None:  # under torchrun, this rank's GPU
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    available = device_memory_available(device)
    obs_dtype = torch.bfloat16 if cfg.algo.store_obs_bf16 else torch.float32
    per_slot = slot_bytes(EnvSpec(num_obs=1, num_actions=1), obs_dtype=obs_dtype)  # the least an env's slot takes
    if available is not None and transitions * per_slot > available:
        raise ConfigError(_replay_message(cfg, transitions * per_slot, per_slot, available, device, at_least=True))


def check_replay_memory(cfg, env, device, warn=None) -> None:
    """With the envs made, before the buffer is allocated: ConfigError when it cannot fit on
    `device`, a warning (`warn(line)`, default: stderr) when it takes most of what is free."""
    import torch

    from envs.protocol import EnvSpec, optional_attribute
    from fast_td3.learner.replay import slot_bytes

    per_slot = slot_bytes(EnvSpec.of(env), bool(optional_attribute(env, "critic_obs_extends_actor_obs")),
                          torch.bfloat16 if cfg.algo.store_obs_bf16 else torch.float32)
    need = env.num_envs * cfg.algo.buffer_size * per_slot
    available = device_memory_available(device)
    if available is None:
        return
    if need > available:
        raise ConfigError(_replay_message(cfg, need, per_slot, available, device, at_least=False))
    if need > CLOSE_TO_FULL * available:
        line = (f"fast-td3-train: warning: the replay buffer takes {_gigabytes(need)} of the {_gigabytes(available)} "
                f"available on {device}; the run may run out of memory (lower algo.buffer_size to leave room)")
        (warn or (lambda text: print(text, file=sys.stderr, flush=True)))(line)


# ------------------------------------------------------------------ keys that would do nothing
def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+")


def _does_nothing(key: str, cfg, explicit_run_dir: bool, resumed: bool) -> str | None:
    """Why setting `key` has no effect in a run with config `cfg` (a `TrainConfig`), or None."""
    algo = cfg.algo
    for name in ALGORITHMS:
        if name != algo.name and key.startswith(f"algo.{name}."):
            return (f"it is a setting of {name}, and this run trains {algo.name}; drop it, or train {name} "
                    f"with algo={name}")
    if key in ("algo.actor_lr_end", "algo.critic_lr_end", "algo.schedule_updates") and algo.lr_schedule != "cosine":
        return f"it shapes the cosine schedule, and algo.lr_schedule={algo.lr_schedule}; add algo.lr_schedule=cosine or drop it"
    if key == "algo.compile_mode" and not algo.compile:
        return "the update is not compiled (algo.compile=false); add algo.compile=true or drop it"
    if key in ("algo.normalizer_eps", "algo.obs_normalization_source") and not algo.obs_normalization:
        return "observations are not normalised (algo.obs_normalization=false); drop it"
    if (algo.name == "fast_sac" and not algo.fast_sac.learn_alpha and key in
            ("algo.fast_sac.alpha_lr", "algo.fast_sac.alpha_weight_decay", "algo.fast_sac.target_entropy_per_action")):
        return "the temperature is not learnt (algo.fast_sac.learn_alpha=false); drop it"
    if key in ("logger.wandb_project", "logger.wandb_entity", "logger.wandb_group") and cfg.logger.wandb_mode == "disabled":
        return "wandb is off (logger.wandb_mode=disabled); add logger=wandb (or logger.wandb_mode=auto) or drop it"
    if key.startswith("gate.") and key != "gate.interval" and cfg.gate.interval == 0:
        return ("the deploy gate is off (gate.interval=0); it plays T1LowDimJoystick tasks, with gate=t1 or "
                "gate.interval=N")
    if key.startswith("gate.perturbations.") and cfg.gate.trials == 0:
        return "the gate plays no perturbed trials (gate.trials=0); raise gate.trials or drop it"
    if key == "out_dir" and resumed:
        return "a resumed run stays in its own folder; drop it"
    if key == "out_dir" and explicit_run_dir:
        return "hydra.run.dir names the run folder itself; drop one of the two"
    if key == "resolved" or key.startswith("resolved."):
        return "the trainer writes resolved.* (what `auto` settings became on this machine); drop it"
    if key.startswith("distributed.") and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return "it applies to runs launched with torchrun (several ranks); drop it"
    return None


def check_no_inert_keys(cfg, overrides: list[str], explicit_run_dir: bool = False, resumed: bool = False) -> None:
    """ConfigError for the first `key=value` on the command line that would have no effect."""
    for override in overrides:
        if override.startswith("~") or "=" not in override or override.startswith("-"):
            continue
        why = _does_nothing(_key(override), cfg, explicit_run_dir, resumed)
        if why:
            raise ConfigError(f"{override.lstrip('+')} has no effect: {why}")
