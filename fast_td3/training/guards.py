"""What stops a run cleanly: SIGINT/SIGTERM (and SIGUSR2, a scheduler's preemption warning) after
a whole global step, and the NaN guard that stops before a non-finite observation or reward
reaches the normalisers or the replay buffer."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch

from fast_td3.training import distributed, startup_signals


class NonFiniteObservationError(RuntimeError):
    """An env produced NaN or inf; the run stopped and saved a checkpoint first."""


class TrainingStopped(Exception):
    """SIGINT/SIGTERM/SIGUSR2 stopped the run after a whole global step, with a checkpoint."""

    def __init__(self, step: int, checkpoint: Path, signum: int) -> None:
        super().__init__(f"Stopped at global step {step}; checkpoint saved to {checkpoint}")
        self.step, self.checkpoint, self.signum = step, checkpoint, signum


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR2") if hasattr(signal, name))
"""Ctrl-C; a scheduler's stop; the warning SLURM sends before a time limit or preemption
(`--signal=USR2@<seconds>`, as submitit asks; cluster.hand_back_preemption requeues)."""


class StopRequest:
    """What `stop_signals` hands the loop: the signal that asked to stop (0: none yet)."""

    signum: int = 0


@contextmanager
def stop_signals() -> Iterator[StopRequest]:
    """While training, SIGINT, SIGTERM and SIGUSR2 ask the loop to stop after the current global
    step (so a checkpoint never holds half an update); a second SIGINT aborts at once. The signal
    number is written into the `StopRequest` yielded; the handlers found are put back afterwards
    (under submitit, its own SIGUSR2 handler, which then requeues the job; after `fast-td3-train`'s
    start-up, the ones found before it). A stop asked during that start-up ends the run here,
    before its first step (`startup_signals.StoppedBeforeTraining`)."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum, frame):
        if request.signum and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not request.signum:
            os.write(2, b"\nStopping after this global step with a checkpoint (Ctrl-C again to abort)...\n")
        request.signum = signum

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    previous.update(startup_signals.hand_over())
    try:
        startup_signals.stop_if_asked()
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def check_finite(
    tensors: dict[str, torch.Tensor | None], num_envs: int, device: torch.device, ranks: distributed.Context,
    save: Callable[[], Path | None], step: int, task: str, at_reset: bool = False,
) -> None:
    """Raise `NonFiniteObservationError` (after `save()`, naming the env and the tensor) when any
    of `tensors` (`[num_envs, ...]`, None skipped) holds NaN or inf; `step` is the global step
    these tensors belong to. One host sync: used at reset, where a sync costs nothing; the
    steps in between go through `FiniteGuard`. Under torchrun every rank stops together."""
    bad = torch.zeros(num_envs, dtype=torch.bool, device=device)
    for value in tensors.values():
        if value is not None:
            value = value.to(device)
            bad |= ~torch.isfinite(value.reshape(num_envs, -1)).all(-1)
    found_here = bool(bad.any())
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
    culprits = [name.replace("_", " ") for name, v in tensors.items()  # a transition key, in words
                if v is not None and not bool(torch.isfinite(v[envs[0]]).all())]
    path = save()
    raise NonFiniteObservationError(
        f"NaN or inf in the {' and '.join(culprits)} of env {envs[0]} "
        f"(envs {envs[:10]}{'...' if len(envs) > 10 else ''}) {when} global step {step} "
        f"of task {task}. The run stopped before storing them; "
        f"checkpoint of the last good step: {path}"
    )


class FiniteGuard:
    """The NaN guard of the training steps, without a host sync per step.

    `screen` looks at one step's tensors on the device: it returns them with every non-finite
    value replaced by 0 and a 0-dim `valid` flag, false from the first step that held NaN or
    inf onwards (latched). Everything that keeps state (normalisers, replay, exploration)
    writes only where `valid`, so non-finite data never reaches it. The first offending step,
    env and tensor are latched on the device too; `tripped()` reads them (one sync) at the
    next log, where the runner stops with the message `check_finite` would have given.
    """

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.num_envs, self.device = num_envs, device
        self.ok = torch.ones((), dtype=torch.bool, device=device)
        self.first_step = torch.zeros((), dtype=torch.long, device=device)
        self.first_bad: torch.Tensor | None = None  # [fields, envs] of the first bad step
        self.fields: list[str] = []
        self._step = torch.zeros((), dtype=torch.long, device=device)

    def screen(self, tensors: dict[str, torch.Tensor | None]) -> tuple[dict[str, torch.Tensor | None], torch.Tensor]:
        """(the tensors with non-finite values zeroed, `valid`) for the next global step."""
        present = {name: value for name, value in tensors.items() if value is not None}
        if self.first_bad is None:
            self.fields = list(present)
            self.first_bad = torch.zeros(len(present), self.num_envs, dtype=torch.bool, device=self.device)
        self._step += 1
        # A row is finite when its sum is: NaN and inf propagate through a sum (finite rows whose
        # sum overflows float32, beyond 3e38, would count as bad). x - x is 0 exactly for finite x.
        sums = torch.stack([value.reshape(self.num_envs, -1).float().sum(-1) for value in present.values()])
        rows_ok = (sums - sums) == 0  # [fields, envs]
        clean: dict[str, torch.Tensor | None] = dict(tensors)
        for row_ok, (name, value) in zip(rows_ok, present.items()):
            clean[name] = torch.where(row_ok.reshape(-1, *(1,) * (value.dim() - 1)), value, 0.0)
        bad = ~rows_ok
        any_bad = bad.any()
        first_here = any_bad & self.ok
        self.first_step.copy_(torch.where(first_here, self._step, self.first_step))
        self.first_bad.copy_(torch.where(first_here, bad, self.first_bad))
        self.ok.logical_and_(~any_bad)
        return clean, self.ok

    def stop_if_tripped(self, global_step: int, ranks: distributed.Context, task: str,
                        save: Callable[[], Path | None], rewind: Callable[[int], None]) -> None:
        """Read the guard (one sync, at a log): when any env produced NaN or inf since the last check,
        `rewind` the steps written since (their count), `save()` and raise NonFiniteObservationError;
        under torchrun every rank stops together."""
        found = self.tripped()
        if ranks.enabled:
            if not distributed.any_rank(int(found is not None), ranks):
                return
        elif found is None:
            return
        if found is None:
            raise NonFiniteObservationError(
                f"another rank found NaN or inf before global step {global_step}; its message names the "
                f"env. Checkpoint: {save()}")
        step, env, field, envs = found
        dropped = global_step - step + 1
        rewind(dropped)  # the skipped writes: the buffer is what it was before step `step`
        raise NonFiniteObservationError(non_finite_message(step, env, field, envs, task, save(), dropped))

    def sync_step(self, global_step: int) -> None:
        """Align the device step counter with the host's (after a reset or a resume)."""
        self._step.fill_(global_step)

    def tripped(self) -> tuple[int, int, str, list[int]] | None:
        """(global step, env, tensor name, every bad env of that step) of the first non-finite
        value, or None. One host sync."""
        if bool(self.ok):
            return None
        bad = self.first_bad.cpu()
        envs = torch.nonzero(bad.any(0)).flatten().tolist()
        field = int(torch.nonzero(bad[:, envs[0]]).flatten()[0])
        return int(self.first_step), envs[0], self.fields[field], envs


def non_finite_message(step: int, env: int, field: str, envs: list[int], task: str, path: Path | None,
                       steps_dropped: int) -> str:
    return (f"NaN or inf in the {field.replace('_', ' ')} of env {env} (envs {envs[:10]}{'...' if len(envs) > 10 else ''}) "
            f"at global step {step} of task {task}. The run stopped at the next check; nothing from step "
            f"{step} on reached the normalisers or the replay buffer ({steps_dropped} steps dropped). "
            f"Checkpoint (networks never saw the bad values): {path}")
