"""Atomic checkpoint files and the `checkpoints/` folder of a run.

A checkpoint is written to a temporary file beside its destination, flushed and
fsynced, then renamed over it: a crash at any moment leaves either the previous
file or the new one, never a torn one. Device work is synchronised before saving so
no tensor is copied to the host while a kernel still writes it. Files are loaded with
`weights_only=True` (plain tensors, numbers, strings, lists and dicts only).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


def synchronize_devices() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory handles
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, writer) -> None:
    """Call `writer(file)` on a temp file, fsync it and rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def save_atomic(state: dict[str, Any], path: Path) -> None:
    synchronize_devices()
    atomic_write_bytes(path, lambda f: torch.save(state, f))


def load(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    return torch.load(path, map_location=map_location, weights_only=True)


def step_of(path: Path) -> int:
    match = _STEP_FILE.match(Path(path).name)
    if not match:
        raise ValueError(f"{path} is not a step_<N>.pt checkpoint")
    return int(match.group(1))


class CheckpointManager:
    """`<run>/checkpoints/step_<N>.pt` files plus a `latest` pointer, keeping the newest `keep`."""

    def __init__(self, run_dir: Path, keep: int = 3) -> None:
        self.dir = Path(run_dir) / CHECKPOINT_DIR
        self.keep = max(int(keep), 1)

    def save(self, state: dict[str, Any], step: int) -> Path:
        path = self.dir / f"step_{step:09d}.pt"
        for stale in self.dir.glob(".step_*.pt.tmp*"):  # left by a process killed mid-write
            stale.unlink(missing_ok=True)
        save_atomic(state, path)
        atomic_write_bytes(self.dir / LATEST, lambda f: f.write(path.name.encode()))
        for old in self.all()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def set_aside_after(self, step: int) -> list[Path]:
        """Move checkpoints newer than `step` into `checkpoints/abandoned_<N>/` (a resume from
        an older checkpoint starts another history; nothing is deleted)."""
        later = [p for p in self.all() if step_of(p) > step]
        if not later:
            return []
        target = self.dir / f"abandoned_{len(list(self.dir.glob('abandoned_*'))) + 1}"
        target.mkdir()
        moved = []
        for path in later:
            moved.append(path.rename(target / path.name))
        return moved

    def all(self) -> list[Path]:
        """Checkpoint files, oldest first."""
        if not self.dir.is_dir():
            return []
        return sorted((p for p in self.dir.iterdir() if _STEP_FILE.match(p.name)), key=step_of)

    def latest(self) -> Path | None:
        pointer = self.dir / LATEST
        if pointer.is_file():
            candidate = self.dir / pointer.read_text().strip()
            if candidate.is_file():
                return candidate
        files = self.all()
        return files[-1] if files else None


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint file from a file path or a run folder (its latest checkpoint)."""
    path = Path(path).expanduser()
    if path.is_file() and path.name == LATEST:  # the pointer file itself
        path = path.parent.parent
    if path.is_file():
        return path
    if path.is_dir():
        latest = CheckpointManager(path).latest()
        if latest is None:
            raise FileNotFoundError(f"no checkpoint in {path / CHECKPOINT_DIR}")
        return latest
    raise FileNotFoundError(f"{path} is neither a checkpoint file nor a run folder")


def run_dir_of(path: str | Path) -> Path:
    """The run folder a checkpoint file or run folder belongs to."""
    path = Path(path).expanduser()
    if path.is_file() and path.parent.name == CHECKPOINT_DIR:
        return path.parent.parent
    if path.is_file():
        return path.parent
    return path  # a run folder, or a path that does not exist (reported by the caller)
