"""Files written safely, for every part of the project (the trainer, the analysis tools, the
deploy bundle and gate): atomic writes with fsync, and strict JSON.

It imports nothing from the project, so any package may import it (docs/architecture.md).
"""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path
from typing import Any, Callable


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (a rename into it) durable, where the platform has folder handles."""
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
            checked = _RecordingFile(f)
            try:
                writer(checked)
            except Exception as error:
                # torch's zip writer turns a failed write into "unexpected pos ..."; the OS error is the news
                if checked.os_error is not None and checked.os_error is not error:
                    raise checked.os_error from None
                if "unexpected pos" in str(error):  # a short write torch noticed only afterwards
                    raise _short_write_error(path.parent, error) from None
                raise
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)


def _short_write_error(folder: Path, error: Exception) -> OSError:
    """The OS error a write cut short most likely met: ENOSPC when the disk is (nearly) full."""
    try:
        stats = os.statvfs(folder)
        free = stats.f_bavail * stats.f_frsize
    except OSError:
        free = None
    if free is not None and free < 64 * 2**20:
        return OSError(errno.ENOSPC, f"No space left on device ({free} bytes free; torch said: {error})")
    return OSError(errno.EIO, f"the write was cut short (torch said: {error})")


class _RecordingFile:
    """A binary file whose first OSError on write is kept (writers may hide it behind their own)."""

    def __init__(self, f) -> None:
        self._f = f
        self.os_error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self._f.write(data)
        except OSError as error:
            self.os_error = self.os_error or error
            raise

    def flush(self) -> None:
        try:
            self._f.flush()
        except OSError as error:
            self.os_error = self.os_error or error
            raise

    def __getattr__(self, name: str):
        return getattr(self._f, name)


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


class OutputRefused(ValueError):
    """An output path a command may not write: it names what is wrong and that nothing was touched."""


RUN_FILES = ("config.yaml", "metrics.jsonl")
BUNDLE_FILES = ("meta.json", "policy.pt")
"""What marks a run folder (fast_td3/training/recording.py) and an export bundle (sim2real/export.py)."""
RUN_BUNDLE_DIR = "bundle"
"""A run's own shipped bundle, `<run>/bundle/`: what a run that confirms its gate writes (`gate.ship`)."""


def is_run_or_bundle(folder: Path) -> bool:
    return any(all((folder / name).is_file() for name in marks) for marks in (RUN_FILES, BUNDLE_FILES))


def belongs_to_a_run_or_bundle(path: Path) -> bool:
    """Whether `path` is one of a run's or a bundle's files, or lies inside a run's checkpoints."""
    path = path.absolute()
    for folder in path.parents:
        if is_run_or_bundle(folder):
            return path.exists() or path.relative_to(folder).parts[0] in ("checkpoints", ".hydra")
    return False


def output_problem(path: Path, folder: bool, replaces: Callable[[Path], bool] | None = None,
                   make_parents: bool = False) -> str | None:
    """What stops a command from writing `path` (a file, or a folder with `folder`), checked before
    any work; None when nothing does. An existing file, or a bundle folder, is replaced only when
    `replaces(path)` knows it as the command's own output; a run folder never. With `make_parents`
    the command creates missing folders above it (export's `out=runs/exports/<name>`)."""
    what = "folder" if folder else "file"
    parent = path.absolute().parent
    while make_parents and not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return (f"{parent} is not a folder" if parent.exists() else
                f"its folder {parent} does not exist; create it or name another {what}")
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"its folder {parent} is not writable"
    if path.is_symlink() or (path.exists() and path.is_dir() != folder):
        return f"exists and is not a {what}: nothing was touched; name a {what}"
    mine = replaces is not None and path.exists() and replaces(path)
    # inside a run, only a folder the command knows as its own output (a run's shipped `bundle/`)
    if (belongs_to_a_run_or_bundle(path) and not (folder and mine)) or (
            folder and all((path / name).is_file() for name in RUN_FILES)):
        return "is a run's or a bundle's own: nothing was touched; name a path outside their files"
    if path.exists() and not os.access(path, os.W_OK):
        return "is read-only"
    if not folder and path.exists() and not mine:
        return "exists and this command did not write it: nothing was touched; remove it yourself or name another file"
    if folder and all((path / name).is_file() for name in BUNDLE_FILES) and not mine:
        return "holds a bundle this command did not write: nothing was touched; name another folder"
    return None


def check_output_file(path: str | Path, written_by_us: Callable[[Path], bool], command: str) -> Path:
    """`path` as a file this command may write, checked before any work (`output_problem`): its
    folder exists and is writable, it is no run's or bundle's own, and it is missing or a file
    `written_by_us(path)` recognises as this command's own output."""
    path = Path(path).expanduser()
    problem = output_problem(path, False, written_by_us)
    if problem:
        raise OutputRefused(f"{path}: {problem} ({command} wrote nothing)")
    return path


def has_marker(path: Path, marker: bytes, limit: int = 4096) -> bool:
    """Whether `marker` is in the first `limit` bytes of the file (how a command knows its own output)."""
    try:
        with open(path, "rb") as f:
            return marker in f.read(limit)
    except OSError:
        return False
