"""RGB frames of single states of a MuJoCo model (MUJOCO_GL=egl headless): a batched native env
keeps its envs' states as array rows, with no MjData of their own to draw from."""

from __future__ import annotations

import mujoco
import numpy as np


class StateFrames:
    """A renderer with one scratch MjData: each frame loads a state into it and draws it."""

    def __init__(self, model: mujoco.MjModel, height: int, width: int) -> None:
        self.model = model
        self._renderer = mujoco.Renderer(model, height=height, width=width)
        self._data = mujoco.MjData(model)

    def frame(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """The frame of the state (`qpos`, `qvel`), `[height, width, 3]` uint8."""
        data = self._data
        data.qpos[:], data.qvel[:] = qpos, qvel
        mujoco.mj_forward(self.model, data)
        self._renderer.update_scene(data)
        return self._renderer.render().copy()

    def close(self) -> None:
        self._renderer.close()
