"""A run's checkpoints, the part of the runner that is not its loop: what a checkpoint holds,
writing one (rank 0 writes, every rank waits, the hooks hear of it) and continuing from one.

A checkpoint holds the global step, the learner's state (the algorithm, the sampling stream
and, with `save_buffer`, the replay buffer: `learning.py`), the env record, the env's own
checkpointed parts (e.g. a push curriculum), the config and the best evaluation so far. Older
formats are upgraded on load (`run_state.upgrade`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fast_td3.training import checkpoint as ckpt
from fast_td3.training import distributed
from fast_td3.training.config import config_dict
from fast_td3.training.run_state import upgrade


class CheckpointedRun:
    """The runner's checkpoints (`Runner` is one). They read the runner's `cfg`, `ranks`,
    `learning`, `spec`, `agent`, `run_dir`, `checkpoints`, `checkpointed_env_parts` and `hooks`,
    and put back its `global_step` and `best_eval`."""

    def state(self, with_buffer: bool = True) -> dict[str, Any]:
        """The checkpoint (the replay buffer with save_buffer unless `with_buffer` is false: best.pt
        and the gate's checkpoints are for evaluation and export)."""
        return {"format": ckpt.FORMAT, "global_step": self.global_step,
                **self.learning.state(with_buffer and self.cfg.save_buffer),
                "env": self.spec.record(), "config": config_dict(self.cfg), "best_eval": self.best_eval,
                "env_parts": {name: part.state_dict() for name, part in self.checkpointed_env_parts.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        """Put back an (upgraded) checkpoint of envs of this shape and this algorithm."""
        self.learning.load_state(state)
        self.global_step = int(state["global_step"])
        self._observations = None  # the envs restart: a simulator's state is not in a checkpoint
        self.best_eval = state.get("best_eval")  # older checkpoints: none yet
        saved_parts = state.get("env_parts", {})  # older checkpoints: none; a part not saved starts afresh
        for name, part in self.checkpointed_env_parts.items():
            if name in saved_parts:
                part.load_state_dict(saved_parts[name])

    def save(self, wait_for_all: bool = True) -> Path | None:
        """Rank 0 writes the checkpoint; with `wait_for_all`, every rank returns once it exists
        (after checking that the ranks' networks are still identical)."""
        if wait_for_all and self.ranks.enabled:
            distributed.check_replicas(self.agent, self.ranks)
        path = self.checkpoints.save(self.state(), self.global_step) if self.ranks.is_main else None
        if wait_for_all and self.ranks.enabled:
            distributed.barrier(self.ranks)
        if path is not None:
            for hook in self.hooks:
                hook.on_checkpoint(self, path)
        return path if path is not None else self.checkpoints.latest()

    def load(self, path: str | Path) -> None:
        """Continue from a checkpoint: step counter, schedules, normalisers, exploration, RNG streams."""
        path = ckpt.find_checkpoint(path)
        state = upgrade(ckpt.load(path))
        ckpt.check_matches(state, config_dict(self.cfg), path)  # e.g. another task's checkpoint of equal shapes
        self.load_state(state)
        if self.ranks.is_main and ckpt.run_dir_of(path).resolve() == self.run_dir.resolve():
            # Continuing from an older checkpoint of this run: what came after it is another
            # history; keep those files aside rather than mixing or pruning them.
            self.checkpoints.set_aside_after(self.global_step)
