"""What stops a run cleanly: SIGINT/SIGTERM after a whole global step, and the NaN guard that
stops before a non-finite observation or reward reaches the normalisers or the replay buffer."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch

from fast_td3 import distributed


class NonFiniteObservationError(RuntimeError):
    """An env produced NaN or inf; the run stopped and saved a checkpoint first."""


class TrainingStopped(Exception):
    """SIGINT/SIGTERM stopped the run after a whole global step, with a checkpoint."""

    def __init__(self, step: int, checkpoint: Path, signum: int) -> None:
        super().__init__(f"Stopped at global step {step}; checkpoint saved to {checkpoint}")
        self.step, self.checkpoint, self.signum = step, checkpoint, signum


@contextmanager
def stop_signals_set_flag(runner):
    """While training, SIGINT and SIGTERM ask the runner to stop after the current global
    step (so a checkpoint never holds half an update); a second SIGINT aborts at once.
    The signal number is written into `runner.stop_requested`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if runner.stop_requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not runner.stop_requested:
            os.write(2, b"\nStopping after this global step with a checkpoint (Ctrl-C again to abort)...\n")
        runner.stop_requested = signum

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def check_finite(
    tensors: dict[str, torch.Tensor | None], num_envs: int, device: torch.device, ranks: distributed.Context,
    save: Callable[[], Path | None], step: int, task: str, at_reset: bool = False,
) -> None:
    """Raise `NonFiniteObservationError` (after `save()`, naming the env and the tensor) when any
    of `tensors` (`[num_envs, ...]`, None skipped) holds NaN or inf; `step` is the global step
    these tensors belong to. One host sync; under torchrun every rank stops together."""
    bad = torch.zeros(num_envs, dtype=torch.bool, device=device)
    for value in tensors.values():
        if value is not None:
            value = value.to(device)
            bad |= ~torch.isfinite(value.reshape(num_envs, -1)).all(-1)
    found_here = bool(bad.any())  # the one host sync of a step
    when = "after reset" if at_reset else "at"
    if ranks.enabled:  # every rank learns of it at this step, and all stop together
        if not distributed.any_rank(int(found_here), ranks):
            return
        if not found_here:
            raise NonFiniteObservationError(
                f"another rank found NaN or inf {when} global step {step}; its message names the env. "
                f"Checkpoint of the last good step: {save()}")
    elif not found_here:
        return
    envs = torch.nonzero(bad).flatten().tolist()
    culprits = [name for name, v in tensors.items()
                if v is not None and not bool(torch.isfinite(v[envs[0]]).all())]
    path = save()
    raise NonFiniteObservationError(
        f"NaN or inf in the {' and '.join(culprits)} of env {envs[0]} "
        f"(envs {envs[:10]}{'...' if len(envs) > 10 else ''}) {when} global step {step} "
        f"of task {task}. The run stopped before storing them; "
        f"checkpoint of the last good step: {path}"
    )
