"""Run folders: claiming one for a new run, the lock that lets one process at a time hold it,
whether a resume can write into its folder, removing what a run that never reached its first
checkpoint made, and this command's folder (`Launch`: the name Hydra gives it, holding it,
discarding it, leaving a resumed one as found).

A run folder is held through `fcntl.flock` on `<run>/.fast-td3.lock` (the file also names the
holder's PID). The OS releases the lock when the holder dies, even by SIGKILL, so a requeued
job that resumes the folder (`resume=<run>`) passes once the old process is gone, while a
second trainer, or a resume of a folder that is still training, is refused with the PID.
The lock file stays in the folder (removing it would let two processes lock two files of one
name); a file that this command created for a folder it then refuses is removed again, and one
it found gets its text back.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shlex
import shutil
import time
from pathlib import Path

from fast_td3.learner.config import ConfigError
from fast_td3.training.checkpoint import has_checkpoints, run_dir_of

LOCK_FILE = ".fast-td3.lock"
RUN_FILES = ("checkpoints", "config.yaml", "overrides.yaml", "metrics.jsonl", ".hydra")
"""What a run writes into its folder first (a folder holding any of them holds a run's files)."""


# ------------------------------------------------------------------ commands a user can paste
def hydra_value(value: str) -> str:
    """`value` as Hydra's override grammar reads it back unchanged (quoted where it must be:
    spaces at the ends, commas, brackets, quotes, non-ASCII letters)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides([f"key={value}"])[0]
        if not parsed.is_sweep_override() and parsed.value() == value:
            return value
    except HydraException:
        pass
    # in Hydra's quoted values only backslashes before a quote (or the closing quote) are escapes
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), value) + "'"


def shell_arg(key: str, value: str | Path) -> str:
    """`key=value` for a command line pasted into a POSIX shell, read by Hydra as `value`."""
    text = hydra_value(str(value))
    if shlex.quote(text) == text:
        return f"{key}={text}"
    if not any(c in text for c in '"$`\\!'):
        return f'{key}="{text}"'
    return f"{key}={shlex.quote(text)}"


def override_value(arg: str) -> str:
    """The value Hydra reads from `key=value` (quotes removed); the raw text when it does not parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    raw = arg.split("=", 1)[1]
    try:
        value = OverridesParser.create().parse_overrides([arg.lstrip("+~")])[0].value()
    except HydraException:
        return raw
    return value if isinstance(value, str) else raw


# ------------------------------------------------------------------ the lock
def lock_holder(folder: Path) -> int | None:
    """The PID written by the process that holds `folder`'s lock (0: held, PID not readable
    yet), or None when no process holds it. Creates nothing."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(folder)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(folder: Path) -> int:
    for _ in range(40):  # the holder writes its PID right after locking
        try:
            text = (folder / LOCK_FILE).read_text().strip()
        except OSError:
            text = ""
        if text.isdigit():
            return int(text)
        time.sleep(0.05)
    return 0


def _lock_exclusive(fd: int) -> None:
    """flock(LOCK_EX) without waiting for a holder, but past `lock_holder`'s probes of a
    microsecond (a shared lock): BlockingIOError only when a process holds the folder."""
    for attempt in range(10):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == 9:
                raise
            time.sleep(0.02)


_HELD: set[int] = set()
"""The lock files' descriptors this process holds."""


def _let_go_in_forked_child() -> None:
    # A forked env worker shares the lock with the trainer; its copy is closed (which leaves the
    # trainer's lock held), so that the lock ends with the trainer, not with its last worker.
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_let_go_in_forked_child)


class RunLock:
    """This process's hold on a run folder, for as long as the process lives (or `release`)."""

    def __init__(self, folder: Path, fd: int, created_file: bool, found: bytes = b"") -> None:
        self.folder, self.fd, self.created_file = folder, fd, created_file
        self.found = found
        """The lock file's text before this process wrote its PID into it."""

    @classmethod
    def acquire(cls, folder: Path) -> RunLock:
        """Hold `folder` (which exists); ConfigError naming the PID of the process holding it."""
        path = folder / LOCK_FILE
        for _ in range(20):
            created = not path.exists()
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as error:
                raise ConfigError(f"cannot create the lock file {path}: {error.strerror or error}") from None
            try:
                _lock_exclusive(fd)
            except OSError as error:
                os.close(fd)
                if error.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    raise ConfigError(f"cannot lock {path}: {error.strerror or error}") from None
                raise ConfigError(busy_message(folder, _read_pid(folder))) from None
            try:
                same_file = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:  # not a file another process removed after we opened it
                found = os.pread(fd, 4096, 0)
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                _HELD.add(fd)
                return cls(folder, fd, created, found)
            os.close(fd)
        raise ConfigError(f"cannot lock {path}: it keeps being replaced")

    def release(self, as_found: bool = False) -> None:
        """Let go of the folder; `as_found`: and leave the lock file as this process found it
        (removed if it made it, else with its text back)."""
        if self.fd < 0:
            return
        try:
            if as_found and self.created_file:
                (self.folder / LOCK_FILE).unlink()
            elif as_found:
                os.ftruncate(self.fd, 0)
                os.pwrite(self.fd, self.found, 0)
        except OSError:
            pass
        if self.fd in _HELD:
            _HELD.discard(self.fd)
            os.close(self.fd)
        self.fd = -1


def busy_message(folder: Path, pid: int) -> str:
    who = f"another fast-td3 process (PID {pid})" if pid else "another fast-td3 process"
    stop = f" or stop it (kill {pid}: it saves a checkpoint first)" if pid else ""
    return (f"{folder} is in use: {who} holds its lock ({LOCK_FILE}). A run folder is trained by one "
            f"process at a time: wait for it to finish{stop}, then continue it with "
            f"fast-td3-train {shell_arg('resume', folder)}; or train into another folder")


# ------------------------------------------------------------------ claiming a folder for a new run
def topmost_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (None when `path` exists)."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            return missing
        missing = folder
    return missing


def make_folder(path: Path, what: str) -> None:
    """Create `path` (and its parents); ConfigError naming `what` when the OS refuses."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"{what}: cannot create {path}: {error.strerror or error}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {path} is not writable")


def claim_run_dir(root: Path, stamp: str, seed: int) -> Path:
    """A new folder `root/<stamp>_<seed>` (`-2`, `-3`, ... on a clash), made here: two runs
    launched in the same second never share a folder."""
    for attempt in range(1, 10_000):
        path = root / (f"{stamp}_{seed}" if attempt == 1 else f"{stamp}_{seed}-{attempt}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as error:
            raise ConfigError(f"out_dir: cannot create the run folder {path}: {error.strerror or error}") from None
    raise ConfigError(f"out_dir: no free run folder name under {root}")


def contents(folder: Path) -> list[str]:
    """The names in `folder` other than the lock file (sorted; [] for a missing folder)."""
    if folder.is_dir():
        return sorted(p.name for p in folder.iterdir() if p.name != LOCK_FILE)
    if folder.exists():
        raise ConfigError(f"hydra.run.dir: {folder} is a file, not a folder; give a folder")
    return []


def not_empty_message(folder: Path, names: list[str]) -> str:
    """Why a new run will not use the non-empty `folder`, and what to do instead."""
    resume = f"fast-td3-train {shell_arg('resume', folder)}"
    if has_checkpoints(folder):
        return f"{folder} already holds a run; continue it with resume= ({resume}), or choose another folder"
    listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    if any(name in RUN_FILES for name in names):
        what = f"holds a run's files ({listed}) but no checkpoint to continue from"
    else:
        what = f"is not empty ({listed})"
    return (f"hydra.run.dir: {folder} {what}; a new run needs a new or empty folder, so nothing there is "
            "overwritten: give another hydra.run.dir, or leave it out for a folder of its own under out_dir")


def claim_folder(folder: Path) -> tuple[Path | None, RunLock]:
    """Make or take the empty folder `folder` for a new run and lock it: (the topmost folder
    made here, or None when it existed, the lock). ConfigError, with nothing created, when
    another process holds it or it is not empty."""
    folder = folder.absolute()
    holder = lock_holder(folder) if folder.is_dir() else None
    if holder is not None:
        raise ConfigError(busy_message(folder, holder))
    names = contents(folder)
    if names:
        holder = lock_holder(folder)  # a trainer that took it a moment ago has written there since
        raise ConfigError(busy_message(folder, holder) if holder is not None else not_empty_message(folder, names))
    created = topmost_missing(folder)
    make_folder(folder, "hydra.run.dir")
    lock = RunLock.acquire(folder)
    names = contents(folder)
    if names:  # written between the two looks by a process that takes no lock
        lock.release(as_found=True)
        raise ConfigError(not_empty_message(folder, names))
    return created, lock


def discard(run_dir: Path, created: Path | None) -> bool:
    """Remove what this command made for a run that stopped before its first checkpoint: the
    folder and the empty parents it made (below `created`), or, for a folder that was empty
    before, its contents. Never a folder holding a checkpoint. True when something went."""
    if has_checkpoints(run_dir) or not run_dir.is_dir():
        return False
    if created is None:  # an empty folder given by the user: it stays, empty (this process exits)
        for path in run_dir.iterdir():
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink()
        return True
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in run_dir.parents:  # the empty parents it made (another run's folder stops this)
        if not parent.is_relative_to(created):
            break
        try:
            parent.rmdir()
        except OSError:
            break
    return True


# ------------------------------------------------------------------ a resume's folder
RESUME_WRITES = (".hydra", "checkpoints", "diagnostics", "tensorboard", "videos", LOCK_FILE)
"""What a resume writes into, beside the run folder itself (which holds config.yaml, overrides.yaml
and metrics.jsonl, each replaced as a whole); the lock file is rewritten in place."""


def check_writable(folder: Path) -> None:
    """ConfigError, before a resume does any work, when it could not write into `folder` (those of
    its parts that exist: a missing folder is the resume check's to report)."""
    for path in (folder, *(folder / name for name in RESUME_WRITES)):
        if path.exists() and not os.access(path, os.W_OK | (os.X_OK if path.is_dir() else 0)):
            where = "there" if path == folder else f"into {folder}"
            raise ConfigError(
                f"cannot resume: {path} is not writable, and a resume writes its checkpoints, metrics and config "
                f"{where}; make it writable (chmod -R u+w {shlex.quote(str(folder))}) or resume a copy of the run")


# ------------------------------------------------------------------ this command's run folder
def no_resume(resume) -> bool:
    return resume in (None, "", "null", "None")
