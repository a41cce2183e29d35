"""Metrics sinks of a run: metrics.jsonl (always), console (console_progress.py), TensorBoard, wandb.

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
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import torch

from fast_td3.files import json_safe
from fast_td3.training.config import LoggerConfig
from fast_td3.training.console_progress import ConsoleProgress

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
        return {"perf/global_steps_per_s": steps / seconds,
                "perf/env_steps_per_s": steps * env_steps_per_step / seconds,
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
