"""Library messages a user cannot act on, silenced where the command-line tools start.

Each is matched by its text, so every other warning still shows:
- MuJoCo warns "compiler attribute 'settotalmass' is deprecated" once per env built from
  gymnasium's HalfCheetah model (18 lines a run); the model file is gymnasium's, not the
  user's. MuJoCo's other warnings are still printed, to stderr.
- JAX logs "Unable to initialize backend 'tpu'" (INFO, which Hydra's logging shows) on every
  machine without a TPU, then uses the GPU or CPU as it should.
- PyOpenGL logs "No OpenGL_accelerate module loaded" (INFO) when MuJoCo's renderer loads it:
  the optional C speed-up is simply not installed, and rendering works without it.
- torch's compiler warns "Profiler record function ... will be ignored" once per compiled
  update: `torch.optim` wraps each `step` in a profiler range, which compiled code drops.
- GLFW warns "X11: The DISPLAY environment variable is missing", then "The GLFW library is not
  initialized" (two raw lines each) when MuJoCo is asked for a window or for `MUJOCO_GL=glfw`
  rendering without a display; the command then says in one line what to do instead
  (fast-td3-play: record a video, or the offscreen backends; sim2real/watch.py).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import warnings

MUJOCO_NOISE = ("compiler attribute 'settotalmass' is deprecated",)
JAX_BACKEND_LOGGER = "jax._src.xla_bridge"
JAX_NOISE = "Unable to initialize backend"
LOGGED_NOISE = {
    JAX_BACKEND_LOGGER: (JAX_NOISE, logging.INFO),
    "OpenGL.acceleratesupport": ("No OpenGL_accelerate module loaded", logging.INFO),
    "torch._dynamo.variables.ctx_manager": ("Profiler record function", logging.WARNING),
    "torch._dynamo.variables.torch": ("Profiler function", logging.WARNING),
}
"""Logger -> (the start of its message that is noise, the highest level it is dropped at)."""


class _DropNoise(logging.Filter):
    """One logger's known noise dropped by its text and level; its other records pass."""

    def __init__(self, prefix: str, level: int) -> None:
        super().__init__()
        self.prefix, self.level = prefix, level

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= self.level and record.getMessage().startswith(self.prefix))


def _mujoco_warning(message: str) -> None:
    """MuJoCo's warning handler: the noise dropped, everything else printed as MuJoCo would."""
    if not any(noise in message for noise in MUJOCO_NOISE):
        print(f"MuJoCo warning: {message}", file=sys.stderr, flush=True)


def silence_library_noise(suite: str | None = None) -> None:
    """Install the filters (idempotent) for a run of `suite`; Isaac Lab's leaves MuJoCo
    unimported, as Isaac Sim wants to load its libraries first."""
    for name, (prefix, level) in LOGGED_NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in logger.filters):
            logger.addFilter(_DropNoise(prefix, level))
    warnings.filterwarnings("ignore", module="glfw")  # its GLFWError warnings: see the module docstring
    if suite != "isaaclab" and importlib.util.find_spec("mujoco") is not None:
        import mujoco

        # forked env workers inherit the handler with the process
        mujoco.set_mju_user_warning(_mujoco_warning)
