"""The console side of a run: a progress bar (or a plain line per log) with an ETA.

Apart from the metrics sinks (metrics_log.py) because what a person watches is its own
concern: the ETA's rate window and the line's summary keys change without touching
metrics.jsonl, TensorBoard or wandb.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Callable


class EtaEstimate:
    """Time left in a run: the recent training rate, plus the evaluation and checkpoint pauses to come.

    A rate since the start carries buffer filling and compilation forever; the last log interval
    alone swings with every evaluation in it (one run showed 0:47 then 5:20 h). So the rate is
    global steps per second over the last `window_s` seconds of training, pauses left out and
    counted only after the first update (compilation) is done; pauses are added back at the
    seconds per step seen so far. `seconds_left()` is None until the window holds `min_s` seconds.
    """

    SAMPLE_EVERY_S = 0.25
    """The window keeps one (time, step) sample per this many seconds, not one per step."""

    def __init__(self, total_steps: int, window_s: float = 60.0, min_s: float = 5.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.total, self.window_s, self.min_s, self._clock = total_steps, window_s, min_s, clock
        self.step = 0
        self._samples: deque[tuple[float, int]] = deque()  # (training seconds, global step), after warm-up
        self._paused_s = 0.0  # every pause: the training clock is wall time minus these
        self._warm_step: int | None = None
        self._pauses_since_warm_s = 0.0
        self._step_at_last_pause: int | None = None

    def _training_time(self) -> float:
        return self._clock() - self._paused_s

    def warmed_up(self, step: int) -> None:
        """The first update is done (compiled): measure the rate from here."""
        self._warm_step, self.step = step, step
        self._samples.clear()
        self._samples.append((self._training_time(), step))
        self._pauses_since_warm_s, self._step_at_last_pause = 0.0, None

    def paused(self, seconds: float) -> None:
        """An evaluation or checkpoint took `seconds` just now."""
        self._paused_s += seconds
        if self._warm_step is not None:
            self._pauses_since_warm_s += seconds
            self._step_at_last_pause = self.step

    def advance(self, step: int) -> bool:
        """Global step `step` is done; True when a new sample changed the estimate."""
        self.step = step
        if self._warm_step is None:
            return False
        now = self._training_time()
        if now - self._samples[-1][0] < self.SAMPLE_EVERY_S:
            return False
        self._samples.append((now, step))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        return True

    def seconds_left(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, s0), (t1, s1) = self._samples[0], self._samples[-1]
        if t1 - t0 < self.min_s or s1 <= s0:
            return None
        remaining = max(self.total - self.step, 0)
        pause_per_step = 0.0
        if self._step_at_last_pause is not None and self._step_at_last_pause > self._warm_step:
            # per step up to the last pause: the share stays put between evaluations
            pause_per_step = self._pauses_since_warm_s / (self._step_at_last_pause - self._warm_step)
        return remaining * ((t1 - t0) / (s1 - s0) + pause_per_step)

    def text(self) -> str:
        """'ETA 0:47:12', or 'ETA estimating...' while the rate is not yet known."""
        seconds = self.seconds_left()
        if seconds is None:
            return "ETA estimating..."
        minutes, secs = divmod(int(round(seconds)), 60)
        hours, minutes = divmod(minutes, 60)
        return f"ETA {hours}:{minutes:02d}:{secs:02d}"


class ConsoleProgress:
    """A rich progress bar on a terminal; a plain metrics line per log otherwise. Either way the
    start of a run (learning starts, the first update) is printed when it happens."""

    SUMMARY_KEYS = (
        ("train/episode_return", "return"),
        ("eval/return_mean", "eval"),
        ("perf/env_steps_per_s", "env steps/s"),
        ("perf/updates_per_s", "updates/s"),
        ("gate/robust_pass_rate", "gate"),
    )

    def __init__(self, total_steps: int, start_step: int, task: str) -> None:
        self.interactive = sys.stdout.isatty()
        self.total = total_steps
        self.task = task
        self.eta = EtaEstimate(total_steps)
        self._summary: dict[str, float] = {}
        self._progress = None
        if self.interactive:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
            from rich.table import Column

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[eta]}", table_column=Column(no_wrap=True, min_width=len("ETA estimating..."))),
                TextColumn("{task.fields[summary]}"),
                refresh_per_second=4,
            )
            self._task_id = self._progress.add_task(task, total=total_steps, completed=start_step, summary="",
                                                    eta=self.eta.text())
            self._progress.start()

    def note(self, text: str) -> None:
        """A line printed now (above the bar on a terminal)."""
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)
        else:
            print(text, flush=True)

    def _summary_text(self) -> str:
        parts = []
        for key, label in self.SUMMARY_KEYS:
            if key in self._summary:
                parts.append(f"{label} {self._summary[key]:.4g}")
        return " | ".join(parts)

    def advance(self, step: int) -> None:
        changed = self.eta.advance(step)
        if self._progress is not None:
            if changed:
                self._progress.update(self._task_id, completed=step, eta=self.eta.text())
            else:
                self._progress.update(self._task_id, completed=step)

    def remember(self, metrics: dict[str, float]) -> None:
        """Take the summary's keys from `metrics` for the next line, printing nothing now."""
        self._summary.update({k: v for k, v in metrics.items() if k in dict(self.SUMMARY_KEYS)})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.remember(metrics)
        if self._progress is not None:
            self._progress.update(self._task_id, completed=step, summary=self._summary_text())
        else:
            summary = self._summary_text()
            print(f"[{self.task}] step {step}/{self.total}" + (f" | {summary}" if summary else "")
                  + f" | {self.eta.text()}", flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
