"""A push curriculum on episode length for the native T1LowDim env (`push_config.curriculum`).

The level scales every kick; the env keeps it and reports it. MJX refuses the option."""

from __future__ import annotations

import numpy as np

PUSH_SCALE_METRIC = "curriculum/push_scale"
"""The episode metric (logged as train/episode/curriculum/push_scale): the level an episode ended at."""


class PushCurriculum:
    """A push-size level in [0, 1] that follows episode length, as holosoma's penalty curriculum.

    Each time episodes end, their mean length as a fraction of the time limit moves the level:
    up by `step` at or above `raise_above`, down by `step` below `lower_below`. Kicks are the
    drawn size times the level, so the full `magnitude_range` (the gate's) is reached only by a
    policy that survives it. The level lives in the env, which offers it to checkpoints
    (`checkpointed_parts`): a resumed run continues at the level it stopped at."""

    def __init__(self, start: float, raise_above: float, lower_below: float, step: float) -> None:
        if not 0.0 <= lower_below <= raise_above <= 1.0:
            raise ValueError(f"push_config.curriculum: need 0 <= lower_below ({lower_below}) <= raise_above "
                             f"({raise_above}) <= 1 (fractions of the episode's time limit)")
        if not (0.0 <= start <= 1.0 and step > 0.0):
            raise ValueError(f"push_config.curriculum: need 0 <= start ({start}) <= 1 and step ({step}) > 0")
        self.level, self.raise_above, self.lower_below, self.step = float(start), raise_above, lower_below, step

    @classmethod
    def from_config(cls, push_config) -> "PushCurriculum | None":
        """The curriculum `push_config.curriculum` asks for, or None when it is off (or absent)."""
        cfg = push_config.get("curriculum", None)
        if cfg is None or not cfg.enable:
            return None
        return cls(float(cfg.start), float(cfg.raise_above), float(cfg.lower_below), float(cfg.step))

    def episodes_ended(self, length_fractions: np.ndarray) -> None:
        """Move the level on the episodes that just ended (their lengths over the time limit)."""
        survived = float(np.mean(length_fractions))
        if survived >= self.raise_above:
            self.level = min(1.0, self.level + self.step)
        elif survived < self.lower_below:
            self.level = max(0.0, self.level - self.step)

    def state_dict(self) -> dict[str, float]:
        return {"level": self.level}

    def load_state_dict(self, state: dict[str, float]) -> None:
        level = float(state["level"])
        if not 0.0 <= level <= 1.0:
            raise ValueError(f"push curriculum level {level} outside [0, 1]: not a checkpoint of this curriculum")
        self.level = level
