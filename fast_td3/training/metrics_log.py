"""Metrics sinks of a run: metrics.jsonl (always), console, TensorBoard, wandb.

`MetricsLogger.log(step, metrics)` takes host floats (the runner reads device
metrics once per log interval) and fans them out. metrics.jsonl holds one JSON
object per call, `{"step": ..., "env_steps": ..., "time": ..., <metric>: ...}`;
its keys are listed in the README.
"""

from __future__ import annotations

import json
import math
import netrc
import os
import secrets
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from fast_td3.training.config import LoggerConfig

METRICS_FILE = "metrics.jsonl"
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
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line torn by a killed process
                continue
    return records


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run's metrics.jsonl (for scripts, tests and reports)."""
    return _parse_lines(Path(run_dir) / METRICS_FILE)


def rewind_metrics(path: Path, step: int) -> None:
    """Drop records after `step` (a resumed run repeats them from its checkpoint), so
    metrics.jsonl describes one history; torn lines go too."""
    if not path.is_file():
        return
    kept = [r for r in _parse_lines(path) if r.get("step", 0) <= step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)


class ConsoleProgress:
    """A rich progress bar on a terminal; a plain metrics line per log otherwise."""

    SUMMARY_KEYS = (
        ("train/episode_return", "return"),
        ("eval/return_mean", "eval"),
        ("perf/env_steps_per_s", "env steps/s"),
        ("perf/updates_per_s", "updates/s"),
    )

    def __init__(self, total_steps: int, start_step: int, task: str) -> None:
        self.interactive = sys.stdout.isatty()
        self.total = total_steps
        self.task = task
        self._summary: dict[str, float] = {}
        self._progress = None
        if self.interactive:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[summary]}"),
                refresh_per_second=4,
            )
            self._task_id = self._progress.add_task(task, total=total_steps, completed=start_step, summary="")
            self._progress.start()

    def _summary_text(self) -> str:
        parts = []
        for key, label in self.SUMMARY_KEYS:
            if key in self._summary:
                parts.append(f"{label} {self._summary[key]:.4g}")
        return " | ".join(parts)

    def advance(self, step: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task_id, completed=step)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._summary.update({k: v for k, v in metrics.items() if k in dict(self.SUMMARY_KEYS)})
        if self._progress is not None:
            self._progress.update(self._task_id, completed=step, summary=self._summary_text())
        else:
            summary = self._summary_text()
            print(f"[{self.task}] step {step}/{self.total}" + (f" | {summary}" if summary else ""), flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float (NaN: a metric nothing qualified for) as None, so the
    JSON written is strict (`jq`, browsers); dicts and lists are converted throughout."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


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
        self._start_time = time.time()
        rewind_metrics(self.run_dir / METRICS_FILE, start_step)
        self._jsonl = open(self.run_dir / METRICS_FILE, "a", buffering=1)
        self.console = ConsoleProgress(total_steps, start_step, task) if cfg.console else None
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

    def advance(self, step: int) -> None:
        if self.console is not None:
            self.console.advance(step)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, "env_steps": step * self.num_envs, "time": round(time.time() - self._start_time, 3)}
        record.update(json_safe(metrics))
        self._jsonl.write(json.dumps(record, allow_nan=False) + "\n")
        if self._tensorboard is not None:
            for key, value in metrics.items():
                self._tensorboard.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(dict(metrics), step=step)
        if self.console is not None:
            self.console.log(step, metrics)

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
    """Wall time and global steps between logs, with evaluation and saving paused out."""

    def __init__(self, step: int) -> None:
        self._t0, self._step0, self._paused = time.perf_counter(), step, 0.0

    def lap(self, step: int) -> tuple[float, int]:
        now = time.perf_counter()
        seconds, steps = now - self._t0 - self._paused, step - self._step0
        self._t0, self._step0, self._paused = now, step, 0.0
        return seconds, steps

    @contextmanager
    def paused(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._paused += time.perf_counter() - start
