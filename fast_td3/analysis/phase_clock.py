"""Where a training run's wall time goes: a runner hook that times each named span of the loop
(act, env step, store, sample, mirror, update, log, eval, gate, checkpoint), synchronising the
device around each on a GPU so a span is charged its own kernels. `scripts/bench.py` and
`scripts/gpu_check.py` print its shares."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch

from fast_td3.training.hooks import Hook


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PhaseClock(Hook):
    """Seconds per span of the runner's loop, summed over the `train` calls it is given to."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def _timed(self, name: str):
        synchronize(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device)
            self.seconds[name] += time.perf_counter() - start

    def phase(self, name: str):
        return self._timed(name)

    def shares(self, wall_seconds: float, other: str = "other") -> dict[str, float]:
        """Each span's share of `wall_seconds`, and what none of them covered as `other`."""
        shares = {name: seconds / wall_seconds for name, seconds in self.seconds.items()}
        shares[other] = max(0.0, 1.0 - sum(shares.values()))
        return shares
