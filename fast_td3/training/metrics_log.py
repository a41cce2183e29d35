"""Metrics sinks of a run: metrics.jsonl (always), console, TensorBoard, wandb.

`MetricsLogger.log(step, metrics)` takes host floats (the runner reads device
metrics once per log interval) and fans them out. metrics.jsonl holds one JSON
object per call, `{"step": ..., "env_steps": ..., "time": ..., <metric>: ...}`;
its keys are listed in docs/runs.md.
"""

from __future__ import annotations

import gzip
import json
import netrc
import os
import secrets
import sys
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import torch

from fast_td3.files import json_safe
from fast_td3.training.config import LoggerConfig

METRICS_FILE = "metrics.jsonl"
KEPT_METRICS_FILE = METRICS_FILE + ".gz"
"""A run kept as evidence (a shipped bundle's `seeds/`) holds its metrics gzipped."""
WANDB_ID_FILE = "wandb_id.txt"


def wandb_credentials_present() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        hosts = netrc.netrc().hosts
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return any("wandb" in host for host in hosts)


def resolve_wandb_mode(mode: str) -> str:
    """'auto' means online with credentials, otherwise offline."""
    if mode == "auto":
        return "online" if wandb_credentials_present() else "offline"
    return mode


def _parse_lines(path: Path) -> list[dict[str, Any]]:
    records = []
    with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line torn by a killed process
                continue
    return records


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run's metrics.jsonl (for scripts, tests and reports); a run kept as
    evidence (a shipped bundle's `seeds/`) holds it gzipped."""
    path = Path(run_dir) / METRICS_FILE
    gzipped = path.with_name(KEPT_METRICS_FILE)
    return _parse_lines(gzipped if not path.is_file() and gzipped.is_file() else path)


def rewind_metrics(path: Path, step: int) -> float:
    """Drop records after `step` (a resumed run repeats them from its checkpoint), so
    metrics.jsonl describes one history; torn lines go too. Returns the run's seconds so far
    (the latest kept "time"), where a resumed run's clock continues."""
    if not path.is_file():
        return 0.0
    kept = [r for r in _parse_lines(path) if r.get("step", 0) <= step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)
    return max((float(r["time"]) for r in kept if isinstance(r.get("time"), (int, float))), default=0.0)


def display_path(path: str | Path) -> str:
    """`path` as a user would type it here: relative to the working folder when inside it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


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


class MetricsLogger:
    """Writes every log call to metrics.jsonl and to the enabled backends."""

    def __init__(
        self,
        cfg: LoggerConfig,
        run_dir: str | Path,
        config: dict[str, Any],
        task: str,
        total_steps: int,
        start_step: int = 0,
        num_envs: int = 1,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.num_envs = num_envs
        # "time" counts the run's wall time over all its sessions: a resume continues the clock
        self._start_time = time.time() - rewind_metrics(self.run_dir / METRICS_FILE, start_step)
        self._jsonl = open(self.run_dir / METRICS_FILE, "a", buffering=1)
        self.console = ConsoleProgress(total_steps, start_step, task) if cfg.console else None
        self._say(f"Metrics: {display_path(self.run_dir / METRICS_FILE)}" + (
            f"; TensorBoard: tensorboard --logdir {display_path(self.run_dir)}" if cfg.tensorboard else ""))
        self._tensorboard = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step drops events a resumed run is about to log again
            self._tensorboard = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=start_step or None)
        self._wandb = None
        mode = resolve_wandb_mode(cfg.wandb_mode)
        if mode != "disabled":
            self._wandb = self._start_wandb(cfg, mode, config, task)

    def _start_wandb(self, cfg: LoggerConfig, mode: str, config: dict[str, Any], task: str):
        import wandb

        id_file = self.run_dir / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
        id_file.write_text(run_id)
        return wandb.init(
            project=cfg.wandb_project,
            entity=cfg.wandb_entity,
            group=cfg.wandb_group,
            name=f"{task}/{self.run_dir.name}",
            id=run_id,
            resume="allow",
            dir=str(self.run_dir),
            config=config,
            mode=mode,
        )

    def _say(self, text: str) -> None:
        if self.console is not None:
            self.console.note(text)

    def advance(self, step: int) -> None:
        if self.console is not None:
            self.console.advance(step)

    def learning_begins(self, step: int, compiles: bool) -> None:
        self._say(f"Global step {step}: the replay buffer holds enough to learn; the first update starts"
                  + (" (it compiles: a minute or more)" if compiles else ""))

    def first_update_done(self, step: int, seconds: float) -> None:
        self._say(f"Global step {step}: first update done in {seconds:.1f} s; the ETA follows once the rate settles")
        if self.console is not None:
            self.console.eta.warmed_up(step)

    def paused_for(self, seconds: float) -> None:
        """Evaluation or saving took `seconds`: not training time, yet time the run takes."""
        if self.console is not None:
            self.console.eta.paused(seconds)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._file(step, metrics)
        if self._wandb is not None:
            self._wandb.log(dict(metrics), step=step)
        if self.console is not None:
            self.console.log(step, metrics)

    def log_past(self, step: int, metrics: dict[str, float], step_key: str) -> None:
        """Metrics that describe an earlier global step `step` (a gate's verdict arrives later):
        metrics.jsonl and TensorBoard file them at `step`; wandb, whose steps only grow, logs
        them now with `step_key` = step as their x-axis."""
        self._file(step, metrics)
        if self.console is not None:
            self.console.remember(metrics)
        if self._wandb is not None:
            prefix = step_key.split("/")[0]
            self._wandb.define_metric(step_key)
            self._wandb.define_metric(f"{prefix}/*", step_metric=step_key)
            self._wandb.log(dict(metrics) | {step_key: step})

    def _file(self, step: int, metrics: dict[str, float]) -> None:
        """metrics.jsonl and TensorBoard, at global step `step`."""
        record = {"step": step, "env_steps": step * self.num_envs, "time": round(time.time() - self._start_time, 3)}
        record.update(json_safe(metrics))
        self._jsonl.write(json.dumps(record, allow_nan=False) + "\n")
        if self._tensorboard is not None:
            for key, value in metrics.items():
                self._tensorboard.add_scalar(key, value, step)

    def note(self, text: str) -> None:
        """A line on the console (above the progress bar on a terminal)."""
        self._say(text)

    def log_video(self, step: int, path: Path) -> None:
        """An evaluation video: its path in metrics.jsonl, the video itself in wandb."""
        self._jsonl.write(json.dumps({"step": step, "env_steps": step * self.num_envs, "eval/video": str(path)}) + "\n")
        if self._wandb is not None:
            import wandb

            self._wandb.log({"eval/video": wandb.Video(str(path), format=path.suffix.lstrip("."))}, step=step)

    def close(self) -> None:
        if self.console is not None:
            self.console.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
        self._jsonl.close()


def to_host(scalars: dict[str, torch.Tensor]) -> dict[str, float]:
    """Device scalars to floats with one transfer (one sync per log, not one per metric)."""
    if not scalars:
        return {}
    values = torch.stack([v.detach().float().reshape(()) for v in scalars.values()]).tolist()
    return dict(zip(scalars, values))


class IntervalClock:
    """Wall time and global steps between logs, with evaluation and saving paused out (each
    pause is also reported to `on_pause`, e.g. the ETA)."""

    def __init__(self, step: int, on_pause: Callable[[float], None] | None = None) -> None:
        self._t0, self._step0, self._paused = time.perf_counter(), step, 0.0
        self._on_pause = on_pause

    def lap(self, step: int) -> tuple[float, int]:
        now = time.perf_counter()
        seconds, steps = now - self._t0 - self._paused, step - self._step0
        self._t0, self._step0, self._paused = now, step, 0.0
        return seconds, steps

    def rates(self, step: int, env_steps_per_step: int, updates: int, compiled_in_it: bool) -> dict[str, float]:
        """`perf/*` throughputs since the last lap (none for an interval that held compilation)."""
        seconds, steps = self.lap(step)
        if seconds <= 0 or steps <= 0 or compiled_in_it:
            return {}
        return {"perf/global_steps_per_s": steps / seconds, "perf/env_steps_per_s": steps * env_steps_per_step / seconds,
                "perf/updates_per_s": updates / seconds}

    @contextmanager
    def paused(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self._paused += seconds
            if self._on_pause is not None:
                self._on_pause(seconds)
