"""Library messages a user cannot act on, silenced where the command-line tools start.

Each is matched by its text, so every other warning still shows:
- MuJoCo warns "compiler attribute 'settotalmass' is deprecated" once per env built from
  gymnasium's HalfCheetah model (18 lines a run); the model file is gymnasium's, not the
  user's. MuJoCo's other warnings are still printed, to stderr.
- JAX logs "Unable to initialize backend 'tpu'" (INFO, which Hydra's logging shows) on every
  machine without a TPU, then uses the GPU or CPU as it should.
"""

from __future__ import annotations

import importlib.util
import logging
import sys

MUJOCO_NOISE = ("compiler attribute 'settotalmass' is deprecated",)
JAX_BACKEND_LOGGER = "jax._src.xla_bridge"
JAX_NOISE = "Unable to initialize backend"


def _mujoco_warning(message: str) -> None:
    """MuJoCo's warning handler: the noise dropped, everything else printed as MuJoCo would."""
    if not any(noise in message for noise in MUJOCO_NOISE):
        print(f"MuJoCo warning: {message}", file=sys.stderr, flush=True)


def _not_backend_probing(record: logging.LogRecord) -> bool:
    """JAX's failed probes for absent backends are INFO; a failure that matters raises or warns."""
    return not (record.levelno < logging.WARNING and record.getMessage().startswith(JAX_NOISE))


def silence_library_noise(suite: str | None = None) -> None:
    """Install the filters (idempotent) for a run of `suite`; Isaac Lab's leaves MuJoCo
    unimported, as Isaac Sim wants to load its libraries first."""
    backend_logger = logging.getLogger(JAX_BACKEND_LOGGER)
    if _not_backend_probing not in backend_logger.filters:
        backend_logger.addFilter(_not_backend_probing)
    if suite != "isaaclab" and importlib.util.find_spec("mujoco") is not None:
        import mujoco

        # forked env workers inherit the handler with the process
        mujoco.set_mju_user_warning(_mujoco_warning)
