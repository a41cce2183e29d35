"""Atomic checkpoint files and the `checkpoints/` folder of a run.

A checkpoint is written to a temporary file beside its destination, flushed and
fsynced, then renamed over it: a crash at any moment leaves either the previous
file or the new one, never a torn one. Device work is synchronised before saving so
no tensor is copied to the host while a kernel still writes it. Files are loaded with
`weights_only=True` (plain tensors, numbers, strings, lists and dicts only).

With `save_buffer`, only the newest `step_<N>.pt` holds the replay buffer: writing the next one
rewrites the older ones without it (a few MB each), so a run that keeps 100 checkpoints for the
gate keeps one buffer on disk, not 100. A resume from an older checkpoint refills the buffer.

Besides the rotating `step_<N>.pt` files, `best.pt` holds the checkpoint of the best
evaluation so far (no replay buffer; never rotated away): what fast-td3-eval, -play and
-export take from a run folder by default. Resuming always continues from the newest
`step_<N>.pt` (`pick_for_resume`).

Files that cannot be used (truncated by a full disk or a cut copy, not a checkpoint at
all, from a newer format) raise `CheckpointError`, one line naming the file and why; a
failed write raises `CheckpointWriteError` naming the OS error (e.g. ENOSPC) and the last
good checkpoint, which stays. torch is imported on first use: the command-line checks
use this module's path helpers before any heavy import.
"""

from __future__ import annotations

import errno
import pickle
import re
from pathlib import Path
from typing import Any

from fast_td3.files import atomic_write_bytes

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
BEST_FILE = "best.pt"
BEST = "best"
CHOICES = (BEST, LATEST)
"""What a tool can take from a run folder: the best-evaluated checkpoint or the newest one."""
UNREADABLE_DIR = "unreadable"
FORMAT = 2
"""The checkpoint layout this version writes (2: the algorithm's own state inside `agent`;
`run_state.upgrade` reads format 1); files of a higher format are refused."""
REQUIRED_KEYS = ("global_step", "agent", "env", "config")  # "format" too, except in early checkpoints
FIXED_KEYS = ("env.suite", "env.task", "seed")
"""Config keys a checkpoint must share with the run that loads it (a resume cannot change them)."""
BUFFER_KEY = "buffer"
"""The replay buffer's entry in a `save_buffer` checkpoint (the newest one only)."""
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")
_STEP_NAME = re.compile(r"^step_(\d+)(?:\.|$)")
_ZIP_MAGIC = b"PK\x03\x04"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message names the file and why."""


class CheckpointMismatchError(ValueError):
    """A checkpoint that does not fit these envs (another task or env count) or this algorithm."""


class CheckpointWriteError(OSError):
    """Writing a checkpoint failed (disk full, I/O error); the last good one is kept."""

    def __str__(self) -> str:
        return str(self.strerror)


def synchronize_devices() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def save_atomic(state: dict[str, Any], path: Path) -> None:
    import torch

    synchronize_devices()
    atomic_write_bytes(path, lambda f: torch.save(state, f))


def load(path: str | Path, map_location: Any = "cpu", mmap: bool = False) -> dict[str, Any]:
    """A checkpoint's contents; CheckpointError (naming the file and why) when it cannot be used.
    `mmap=True` maps tensor data instead of reading it: a quick check of a whole file (a
    truncated one has lost the zip directory at its end)."""
    import torch

    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read it ({error.strerror or error})") from None
    if not head:
        raise CheckpointError(f"{path}: empty file (a write cut short or a disk that filled up)")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap and head == _ZIP_MAGIC)
    except pickle.UnpicklingError as error:
        if head == _ZIP_MAGIC and "Unsupported global" in str(error):
            raise CheckpointError(f"{path}: not a fast-td3 checkpoint (it holds Python objects, "
                                  "not only tensors and plain data)") from None
        raise CheckpointError(f"{path}: {_unreadable_reason(head)}") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise CheckpointError(f"{path}: {_unreadable_reason(head)}") from None
    check_contents(state, path)
    return state


def _unreadable_reason(head: bytes) -> str:
    if head == _ZIP_MAGIC:
        return "truncated or damaged (a write cut short, a disk that filled up, an incomplete copy)"
    if not head.strip(b"\0"):
        return "damaged (zero-filled: a write lost in a crash)"
    return "not a fast-td3 checkpoint (not a PyTorch file)"


def check_contents(state: Any, path: Path) -> None:
    """CheckpointError unless `state` looks like a checkpoint this version can read."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a fast-td3 checkpoint (a PyTorch file holding a {type(state).__name__})")
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise CheckpointError(f"{path}: not a fast-td3 checkpoint (a PyTorch file without {', '.join(missing)})")
    version = state.get("format", FORMAT)
    if not isinstance(version, int) or version > FORMAT:
        raise CheckpointError(f"{path}: written by a newer fast-td3 (checkpoint format {version}; this "
                              f"version reads format {FORMAT} and older): upgrade fast-td3 to load it")


def check_matches(state: dict[str, Any], config: dict[str, Any], path: Path) -> None:
    """CheckpointError when the checkpoint's task, suite or seed differs from the run's."""
    def get(tree: Any, dotted: str) -> Any:
        for part in dotted.split("."):
            tree = tree.get(part) if hasattr(tree, "get") else None
        return tree

    saved = state.get("config") or {}
    differ = [f"{key} {get(saved, key)!r} (this run: {get(config, key)!r})"
              for key in FIXED_KEYS if get(saved, key) != get(config, key)]
    if differ:
        raise CheckpointError(f"{path} belongs to another run: its {', '.join(differ)}; refusing to load it")


def describe_os_error(error: OSError) -> str:
    """'No space left on device (ENOSPC)'."""
    code = errno.errorcode.get(error.errno or 0)
    return f"{error.strerror or error}" + (f" ({code})" if code else "")


def step_of(path: Path) -> int:
    """The global step of a `step_<N>.pt` checkpoint (`step_in_name`, held to the `.pt` suffix)."""
    if not _STEP_FILE.match(Path(path).name):
        raise ValueError(f"{path} is not a step_<N>.pt checkpoint")
    return step_in_name(path)


def step_in_name(path: Path) -> int:
    """The global step a `step_<N>` file is named for, whatever its suffix: the gate's verdicts
    (`.json`), logs (`.log`) and kept actors (`.pt`) are named by step like the checkpoints."""
    match = _STEP_NAME.match(Path(path).name)
    if not match:
        raise ValueError(f"{path} is not named step_<N>[.<suffix>]")
    return int(match.group(1))


def step_files(folder: str | Path) -> list[Path]:
    """The `step_<N>.pt` files in `folder`, by step (oldest first); none when it does not exist."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _STEP_FILE.match(p.name)), key=step_of)


class CheckpointManager:
    """`<run>/checkpoints/step_<N>.pt` files plus a `latest` pointer, keeping the newest `keep`.

    The pointer is for people and for paths (`checkpoint=<run>/checkpoints/latest`); which
    checkpoint is the latest is decided by the files alone (`latest()`)."""

    def __init__(self, run_dir: Path, keep: int = 3) -> None:
        self.dir = Path(run_dir) / CHECKPOINT_DIR
        self.keep = max(int(keep), 1)
        self._without_buffer: set[Path] = set()  # older checkpoints already checked for a buffer

    def save(self, state: dict[str, Any], step: int) -> Path:
        path = self.dir / f"step_{step:09d}.pt"
        for stale in self.dir.glob(".step_*.pt.tmp*"):  # left by a process killed mid-write
            stale.unlink(missing_ok=True)
        try:
            save_atomic(state, path)
            atomic_write_bytes(self.dir / LATEST, lambda f: f.write(path.name.encode()))
        except OSError as error:
            last = self.latest()
            kept = f"the last good checkpoint, {last}, is kept" if last else "no earlier checkpoint exists"
            raise CheckpointWriteError(error.errno, f"could not write checkpoint {path}: "
                                       f"{describe_os_error(error)}; {kept}") from error
        for old in self.all()[: -self.keep]:
            old.unlink(missing_ok=True)
        if BUFFER_KEY in state:
            self._drop_older_buffers(path)
        return path

    def _drop_older_buffers(self, newest: Path) -> None:
        """Rewrite the kept checkpoints older than `newest` without their replay buffer (each is
        checked once per process; mapped from disk, so the buffer itself is never read)."""
        for old in self.all():
            if old == newest or old in self._without_buffer:
                continue
            try:
                state = load(old, mmap=True)
            except CheckpointError:
                continue  # a resume sets it aside; nothing to free here
            if state.pop(BUFFER_KEY, None) is not None:
                save_atomic(state, old)
            self._without_buffer.add(old)

    def save_best(self, state: dict[str, Any]) -> Path:
        """`best.pt`: the checkpoint of the best evaluation so far, kept whatever the rotation."""
        path = self.dir / BEST_FILE
        try:
            save_atomic(state, path)
        except OSError as error:
            raise CheckpointWriteError(error.errno, f"could not write the best checkpoint {path}: "
                                       f"{describe_os_error(error)}; the previous one is kept") from error
        return path

    def best(self) -> Path | None:
        path = self.dir / BEST_FILE
        return path if path.is_file() else None

    def set_aside_after(self, step: int) -> list[Path]:
        """Move checkpoints newer than `step` (best.pt too, when it is newer) into
        `checkpoints/abandoned_<N>/` (a resume from an older checkpoint starts another
        history; nothing is deleted)."""
        later = [p for p in self.all() if step_of(p) > step]
        best = self.best()
        if best is not None and (_step_or_none(best) or 0) > step:
            later.append(best)
        if not later:
            return []
        target = self.dir / f"abandoned_{len(list(self.dir.glob('abandoned_*'))) + 1}"
        target.mkdir()
        moved = []
        for path in later:
            moved.append(path.rename(target / path.name))
        return moved

    def set_aside_unreadable(self, paths: list[Path]) -> list[Path]:
        """Move unreadable checkpoints into `checkpoints/unreadable/` (kept for inspection, never
        deleted) so that neither `latest` nor pruning sees them again."""
        target = self.dir / UNREADABLE_DIR
        moved = []
        for path in paths:
            target.mkdir(exist_ok=True)
            destination = target / path.name
            while destination.exists():
                destination = destination.with_name(destination.name + ".1")
            moved.append(Path(path).rename(destination))
        remaining = self.all()
        if moved and remaining:
            atomic_write_bytes(self.dir / LATEST, lambda f: f.write(remaining[-1].name.encode()))
        return moved

    def all(self) -> list[Path]:
        """Checkpoint files, oldest first."""
        return step_files(self.dir)

    def latest(self) -> Path | None:
        """The newest `step_<N>.pt`. The files, not the `latest` pointer, decide: a process
        killed between renaming a checkpoint into place and rewriting the pointer leaves the
        pointer one checkpoint behind, and a resume continues from the newest file."""
        files = self.all()
        return files[-1] if files else None


def _step_or_none(path: Path) -> int | None:
    try:
        return int(load(path, mmap=True)["global_step"])
    except CheckpointError:
        return None


def pick_for_resume(path: str | Path) -> tuple[Path, dict[str, Any], list[tuple[Path, str]]]:
    """(the checkpoint to resume from, its contents mapped from disk, the unreadable newer ones
    with the reason for each). A checkpoint file is taken as named; in a run folder the newest
    checkpoint that reads is taken. CheckpointError when none reads; FileNotFoundError when
    there is none at all."""
    named = Path(path).expanduser()
    if named.name == BEST_FILE:
        raise CheckpointError(f"{named}: best.pt is for fast-td3-eval, -play and -export; a resume continues from "
                              f"the newest checkpoint with resume={run_dir_of(named)} (or from an older step_<N>.pt)")
    path = find_checkpoint(named)
    if named.is_file() and named.name != LATEST:
        return path, load(path, mmap=True), []
    unreadable: list[tuple[Path, str]] = []
    for candidate in reversed(CheckpointManager(path.parent.parent).all()):
        try:
            return candidate, load(candidate, mmap=True), unreadable
        except CheckpointError as error:
            unreadable.append((candidate, str(error).removeprefix(f"{candidate}: ")))
    reasons = "; ".join(f"{p.name}: {why}" for p, why in unreadable)
    raise CheckpointError(f"no checkpoint in {path.parent} can be read ({reasons})")


def has_checkpoints(run_dir: str | Path) -> bool:
    """Whether the run folder holds any checkpoint (a run that can be resumed or was started)."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    return folder.is_dir() and any(folder.iterdir())


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
            raise FileNotFoundError(f"no checkpoint in {path / CHECKPOINT_DIR}: nothing to resume or load "
                                    "(the run stopped before its first checkpoint, or its checkpoints were moved); "
                                    "start a new run, which makes a folder of its own")
        return latest
    raise FileNotFoundError(f"{path} is neither a checkpoint file nor a run folder")


def pick_checkpoint(path: str | Path, use: str | None = None) -> tuple[Path, str]:
    """(the checkpoint fast-td3-eval, -play and -export take, which one: "best", "latest" or
    "named").

    A checkpoint file is taken as named. In a run folder `use="best"` takes best.pt (the best
    evaluation during training), `use="latest"` the newest step_<N>.pt, and `use=None`
    best.pt when the run has one, else the newest: what a user who saw the evaluations expects.
    """
    if use not in (None, *CHOICES):
        raise ValueError(f"use must be one of {', '.join(CHOICES)}, got {use!r}")
    named = Path(path).expanduser()
    if named.is_file() and named.name != LATEST:
        if use is not None:
            raise ValueError(f"{named} is a checkpoint file; {use} chooses within a run folder "
                             f"(pass {run_dir_of(named)})")
        return named, "named"
    run_dir = run_dir_of(named) if named.is_file() else named
    best = CheckpointManager(run_dir).best() if run_dir.is_dir() else None
    if use == BEST and best is None:
        raise FileNotFoundError(f"no best checkpoint in {run_dir / CHECKPOINT_DIR}: best.pt comes with the first "
                                "evaluation during training (take the latest checkpoint instead)")
    if best is not None and use != LATEST:
        return best, BEST
    return find_checkpoint(run_dir), LATEST


def describe_pick(path: Path, which: str, state: dict[str, Any], latest_option: str = "--use latest") -> str:
    """One line on the checkpoint a tool took, e.g. 'best checkpoint runs/x/checkpoints/best.pt
    (global step 1000, eval return 1000 in training); --use latest takes the newest'."""
    step = int(state["global_step"])
    if which == BEST:
        score = (state.get("best_eval") or {}).get("return_mean")
        scored = f", eval return {score:.4g} in training" if score is not None else ""
        return f"best checkpoint {path} (global step {step}{scored}); {latest_option} takes the newest"
    if which == LATEST:
        has_best = CheckpointManager(run_dir_of(path)).best() is not None
        return f"latest checkpoint {path} (global step {step}" + (
            ")" if has_best else "; the run has no best.pt: nothing was evaluated during training)")
    return f"checkpoint {path} (global step {step})"


def run_dir_of(path: str | Path) -> Path:
    """The run folder a checkpoint file or run folder belongs to."""
    path = Path(path).expanduser()
    if path.is_file() and path.parent.name == CHECKPOINT_DIR:
        return path.parent.parent
    if path.is_file():
        return path.parent
    return path  # a run folder, or a path that does not exist (reported by the caller)
