"""A run's checkpoint contents: what `Runner.state()` saves and `Runner.load()` restores
(step, the algorithm's training state, RNG streams, env shapes, config, optionally replay).

Format 2 keeps the algorithm's own state (e.g. FastTD3's exploration noise, FastSAC's
temperature optimiser) inside the `agent` entry. Format-1 checkpoints (FastTD3 only, with a
top-level `noise` entry and FastTD3's keys at the top of `config.algo`) are upgraded on load.
"""

from __future__ import annotations

import random
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np
import torch

from fast_td3.training.checkpoint import FORMAT as CHECKPOINT_FORMAT
from fast_td3.learner.config import migrate_algo_config


class CheckpointMismatchError(ValueError):
    """A checkpoint that does not fit these envs (another task or env count)."""


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch; ValueError naming the range for a seed torch cannot take."""
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer from 0 to 2**64 - 1, got {seed}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def config_dict(cfg: Any) -> dict[str, Any]:
    """A plain, JSON-able dict of a dataclass or OmegaConf config."""
    if is_dataclass(cfg):
        return asdict(cfg)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def upgrade(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of any known format in today's layout (format 1: FastTD3's noise moves into
    the agent's state, its flat algo keys into `algo.fast_td3`)."""
    version = int(state.get("format", 1))
    if version > CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint format {version} is newer than this fast-td3 reads ({CHECKPOINT_FORMAT})")
    if version == 1:
        state = dict(state)
        if "noise" in state:
            state["agent"] = {**state["agent"], "exploration": state.pop("noise")}
        config = dict(state.get("config") or {})
        if "algo" in config:
            config["algo"] = migrate_algo_config(config["algo"])
        state["config"], state["format"] = config, CHECKPOINT_FORMAT
    return state


def capture(runner, with_buffer: bool = True) -> dict[str, Any]:
    """A runner's checkpoint: step, the algorithm's training state, RNG streams, env shapes,
    config, the best evaluation so far, and the replay buffer with save_buffer (unless
    `with_buffer` is false: best.pt is for evaluation and export)."""
    state = {"format": CHECKPOINT_FORMAT, "global_step": runner.global_step, "agent": runner.agent.training_state(),
             "rng": rng_state(runner.sample_generator), "env": env_shape(runner.env), "config": config_dict(runner.cfg),
             "best_eval": runner.best_eval}
    if runner.cfg.save_buffer and with_buffer:
        state["buffer"] = runner.buffer.state_dict()
    return state


def restore(runner, state: dict[str, Any]) -> None:
    """Put an (upgraded) checkpoint back into a runner built for the same envs and algorithm."""
    shape, algo = env_shape(runner.env), runner.cfg.algo.name
    if state["env"] != shape:
        raise CheckpointMismatchError(f"checkpoint was trained on envs {state['env']}, these envs are {shape}")
    trained = state["config"].get("algo", {}).get("name", "fast_td3")
    if trained != algo:
        raise CheckpointMismatchError(f"checkpoint was trained with algo={trained}, this run is algo={algo}")
    runner.agent.load_training_state(state["agent"])
    runner.global_step = int(state["global_step"])
    runner.best_eval = state.get("best_eval")  # older checkpoints: none yet
    if runner.ranks.is_main:  # rank 0's streams were saved; the other ranks continue their own below
        restore_rng(state["rng"], runner.sample_generator)
    if "buffer" in state:  # rank 0's transitions on every rank: all ranks start learning together
        runner.buffer.load_state_dict(state["buffer"])
    if not runner.ranks.is_main:
        # not the env-reset seed of Runner._reset_envs ([seed, step]): a third entry
        rank_stream = int(np.random.SeedSequence([runner.seed, runner.global_step, 1]).generate_state(1)[0])
        seed_everything(rank_stream)
        runner.sample_generator.manual_seed(rank_stream)


def rng_state(sample_generator: torch.Generator) -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "sample": sample_generator.get_state(),
        "python": list(random.getstate()[1]),
    }


def restore_rng(rng: dict[str, Any], sample_generator: torch.Generator) -> None:
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    sample_generator.set_state(rng["sample"].cpu())  # CPU ByteTensor, whatever the device
    random.setstate((3, tuple(rng["python"]), None))


def env_shape(env) -> dict[str, int | None]:
    return {"num_envs": env.num_envs, "num_obs": env.num_obs,
            "num_critic_obs": env.num_critic_obs, "num_actions": env.num_actions}
