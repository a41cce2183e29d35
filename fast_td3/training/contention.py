"""Sharing the cores with other processes while a run trains.

The run starts with its share of the cores (`threads.py`). A user's machine is never idle:
when another process takes one of two cores, torch's two OpenMP threads, which spin-wait for
each other at every parallel region, wait each time for a thread that is not running: the
quick start fell from 24 global steps/s to under 1. One thread has no one to wait for. (A
shorter spin, `GOMP_SPINCOUNT`, softened the fall but cost 5-15 % alone, so libgomp's own is
kept.) So every 2 s the run reads how much CPU the other processes used on the cores it may
run on (`/proc/stat` over its affinity, less its own process and children, such as the
gate's), and takes `threads_for` torch threads: one fewer for each core the others hold, back
up once they leave. The thread count
changes no result: the update's kernels give the same numbers on one thread as on two
(tests/test_contention.py pins it).

When the step rate still falls below half of its own best, one line says so and names what it
can see: the other processes' CPU use, or more threads than cores. A count set with
`FAST_TD3_THREADS` is kept as set (only the line is printed). Linux only; elsewhere nothing
is read and nothing changes.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fast_td3.training.threads import THREADS_ENV, cores_available

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU seconds at one moment: all processes on the run's cores, and the run's own."""

    wall: float
    busy: float
    """Busy CPU seconds (user, nice, system, irq, softirq) summed over the cores the run may use."""
    own: float
    """CPU seconds of this process (every thread) and its children, live or finished."""


def busy_seconds(proc_stat: str, cpus: set[int]) -> float:
    """Busy CPU seconds of `cpus` in a /proc/stat text (idle, iowait and steal are not busy)."""
    total = 0
    for line in proc_stat.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        fields = [int(x) for x in rest.split()]
        user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
        total += user + nice + system + irq + softirq
    return total / CLOCK_TICKS


def children_of(pid: int) -> list[int]:
    """Live child processes of `pid` (every thread's children), recursively."""
    found: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            kids = [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
        for kid in kids:
            found += [kid, *children_of(kid)]
    return found


def process_seconds(pid: int) -> float:
    """utime + stime of a live process (0 once it is gone)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def read_sample(cpus: set[int] | None = None) -> CpuSample | None:
    """The machine's and this run's CPU seconds now; None where /proc cannot tell."""
    try:
        proc_stat = (PROC / "stat").read_text()
    except OSError:
        return None
    cpus = cpus if cpus is not None else set(os.sched_getaffinity(0))
    own = os.times()
    live_children = sum(process_seconds(kid) for kid in children_of(os.getpid()))
    return CpuSample(time.monotonic(), busy_seconds(proc_stat, cpus),
                     own.user + own.system + own.children_user + own.children_system + live_children)


def others_cores(before: CpuSample, after: CpuSample) -> float:
    """Cores the other processes used on average between two samples."""
    seconds = after.wall - before.wall
    if seconds <= 0:
        return 0.0
    return max((after.busy - before.busy) - (after.own - before.own), 0.0) / seconds


DROP_ABOVE = 0.3
"""A core counts as taken once the others use more than this fraction of it on average. On 2
cores with libgomp's own spin-wait, the quick start on two threads beside a process busy 15,
25, 35 and 40 % of the time ran at 23.1, 20.6, 16.6 and 2.2 global steps/s, and on one
thread at about 17.5 (docs/performance.md, "Beside other work"): past about a third of a
core, one thread is as fast, and the cliff comes soon after."""
RETURN_BELOW = 0.15
"""...and as free again once they use less than this of it (an idle machine reads about 0.01;
the gap keeps the count from flapping)."""


def threads_for(cores: int, others: float, current: int, ceiling: int) -> int:
    """Torch threads for a run that may use `cores` (up to `ceiling` threads) while other
    processes use `others` cores on average: a core counts as taken once the others use more
    than `DROP_ABOVE` of it, and as free again once they use less than `RETURN_BELOW` of it."""

    def leaving_free(margin: float) -> int:
        return max(1, min(ceiling, cores - max(math.ceil(others - margin), 0)))

    down, up = leaving_free(DROP_ABOVE), leaving_free(RETURN_BELOW)
    if down < current:
        return down
    return up if up > current else current


SLOW_FRACTION = 0.5
"""The line is printed when a window's step rate falls below this fraction of the best so far."""
RECOVERED_FRACTION = 0.7
"""...and may be printed again only after the rate came back above this fraction."""


class CoreMonitor:
    """Reads the other processes' CPU use every `period_s` of the run and sets the torch threads.

    `tend(step)` is called after every global step once learning runs (a clock read unless a
    period has passed); `paused_for(seconds)` takes out time spent evaluating or saving, which
    is not a slower step. `say` prints a line; `set_threads` is `torch.set_num_threads`.
    """

    def __init__(self, say: Callable[[str], None], set_threads: Callable[[int], None], threads: int,
                 adapt: bool | None = None, cores: int | None = None, period_s: float = 2.0,
                 read: Callable[[], CpuSample | None] = read_sample,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._say, self._set_threads, self._read, self._clock = say, set_threads, read, clock
        self.cores = cores if cores is not None else cores_available()
        self.ceiling = self.threads = threads
        self.adapt = (THREADS_ENV not in os.environ) if adapt is None else adapt
        self.period_s = period_s
        self.others = 0.0
        self._sample: CpuSample | None = None
        self._window_start: tuple[float, int] | None = None
        self._paused = 0.0
        self._best_rate = 0.0
        self._slow_reported = False
        self._raise_votes = 0

    def paused_for(self, seconds: float) -> None:
        self._paused += seconds

    def tend(self, step: int) -> None:
        now = self._clock()
        if self._window_start is None:
            self._window_start, self._sample, self._paused = (now, step), self._read(), 0.0
            return
        started, start_step = self._window_start
        if now - started < self.period_s:
            return
        sample = self._read()
        if sample is not None and self._sample is not None:
            self.others = others_cores(self._sample, sample)
            self._share_cores()
        seconds = now - started - self._paused
        if seconds > 0 and step > start_step:
            self._judge_rate((step - start_step) / seconds)
        self._window_start, self._sample, self._paused = (now, step), sample, 0.0

    def release(self) -> None:
        """The run's `train` call ends: give the process back the threads it started with (a
        script, a test or the next call must not inherit a count set for a busy moment)."""
        if self.threads != self.ceiling:
            self.threads = self.ceiling
            self._set_threads(self.ceiling)

    def metrics(self) -> dict[str, float]:
        """`perf/torch_threads` and `perf/other_processes_cores` for the run's log."""
        return {"perf/torch_threads": float(self.threads), "perf/other_processes_cores": round(self.others, 3)}

    def _share_cores(self) -> None:
        if not self.adapt:
            return
        wanted = threads_for(self.cores, self.others, self.threads, self.ceiling)
        if wanted > self.threads:  # up only after two periods agree: a short lull is not a free core
            self._raise_votes += 1
            if self._raise_votes < 2:
                return
        self._raise_votes = 0
        if wanted != self.threads:
            self._say(f"Other processes are using {self.others:.1f} of the {self.cores} cores this run may use: "
                      f"torch threads {self.threads} -> {wanted}")
            self.threads = wanted
            self._set_threads(wanted)

    def _judge_rate(self, rate: float) -> None:
        if rate >= RECOVERED_FRACTION * self._best_rate:
            self._slow_reported = False
        if rate < SLOW_FRACTION * self._best_rate and not self._slow_reported:
            self._slow_reported = True
            self._say(f"Training slowed to {rate:.3g} global steps/s from {self._best_rate:.3g}: {self.cause()}")
        self._best_rate = max(self._best_rate, rate)

    def cause(self) -> str:
        """What this process can see of why it runs slower."""
        if self.threads > self.cores:
            return (f"{self.threads} torch threads on {self.cores} available cores (set {THREADS_ENV} to at most "
                    f"{self.cores})")
        if self.others >= DROP_ABOVE:
            return f"other processes are using {self.others:.1f} of the {self.cores} cores this run may use"
        return "no other process's CPU use is seen (the machine itself may be slowed, e.g. a throttled VM)"
