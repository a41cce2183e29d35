"""Private random streams for simulators that draw from the process-wide generators.

Some simulators draw from Python's, NumPy's or torch's global generators instead of a
generator of their own (HumanoidBench's goals, Isaac Lab's resets and noise). Envs sharing a
process would then draw from one stream, the trainer's own draws would move the envs' (and
back), and a seeded reset would not repeat. `PrivateRandomStreams` keeps copies of the
chosen global streams for one env and swaps them in only while that env runs.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any, Iterator

import numpy as np


class PrivateRandomStreams:
    """Private copies of the chosen global generators; `active()` swaps them in and back out.

    Args:
        numpy: NumPy's global generator (`np.random.*`).
        python: Python's `random`.
        torch_device: also torch's CPU generator and, for a CUDA device, that device's
            (None: torch's generators are left shared).
    """

    def __init__(self, numpy: bool = True, python: bool = False, torch_device: Any = None) -> None:
        self._numpy, self._python = numpy, python
        self._torch = torch_device is not None
        self._cuda = [torch_device] if self._torch and torch_device.type == "cuda" else []
        self._state: dict[str, Any] | None = None

    def seed_numpy(self, seed: int) -> None:
        """Restart the private NumPy stream as `np.random.seed(seed)` would start it."""
        self._state = {**(self._state or {}), "numpy": np.random.RandomState(seed).get_state()}

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        outside = self._capture()
        if self._state is not None:
            self._restore(self._state)
        try:
            yield
        finally:
            self._state = self._capture()
            self._restore(outside)

    def _capture(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self._python:
            state["python"] = random.getstate()
        if self._numpy:
            state["numpy"] = np.random.get_state()
        if self._torch:
            import torch

            state["torch"] = torch.get_rng_state()
            state["cuda"] = [torch.cuda.get_rng_state(device) for device in self._cuda]
        return state

    def _restore(self, state: dict[str, Any]) -> None:
        if "python" in state:
            random.setstate(state["python"])
        if "numpy" in state:
            np.random.set_state(state["numpy"])
        if "torch" in state:
            import torch

            torch.set_rng_state(state["torch"])
            for device, value in zip(self._cuda, state["cuda"]):
                torch.cuda.set_rng_state(value, device)
