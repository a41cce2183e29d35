"""Upgrades of older checkpoint formats, and the RNG streams a checkpoint saves and restores
(what a checkpoint holds is `Runner.state()`'s, read back by `Runner.load_state()`).

Format 2 keeps the algorithm's own state (e.g. FastTD3's exploration noise, FastSAC's
temperature optimiser) inside the `agent` entry. Format-1 checkpoints (FastTD3 only, with a
top-level `noise` entry and FastTD3's keys at the top of `config.algo`) are upgraded on load.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from fast_td3.training.checkpoint import FORMAT as CHECKPOINT_FORMAT
from fast_td3.learner.config import migrate_algo_config


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch; ValueError naming the range for a seed torch cannot take."""
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer from 0 to 2**64 - 1, got {seed}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


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
