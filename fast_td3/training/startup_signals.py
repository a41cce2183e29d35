"""Ctrl-C and SIGTERM while `fast-td3-train` starts up: recorded, and acted on only where a stop is safe.

Raised wherever the interpreter happens to be, a KeyboardInterrupt lands inside `import mujoco`
(`ImportError: initialization failed`), inside OmegaConf or Hydra (a page of traceback), or
between Hydra making the run folder and our code knowing of it (a folder left behind). So from
the console script's first line (`start.cli`) until the runner's own handlers take over
(`guards.stop_signals`, which stop after a whole step), SIGINT and SIGTERM only record the
stop; `stop_if_asked` raises it as `StoppedBeforeTraining` at the points where the command
knows what it has made and can undo it. A Ctrl-C after a recorded stop raises at once: the
user insists.

Only the standard library is imported here: the console script installs this before Hydra,
OmegaConf or torch load.
"""

from __future__ import annotations

import signal

DEFERRED = (signal.SIGINT, signal.SIGTERM)


class StoppedBeforeTraining(KeyboardInterrupt):
    """SIGINT or SIGTERM before the runner's own stop handlers took over (they stop after a whole step)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_found: dict[int, object] = {}
"""The handlers in place before `defer_stops` (empty when no stop is deferred)."""
_asked = 0
"""The signal that asked to stop while deferred (0: none yet)."""


def _record(signum: int, frame) -> None:
    global _asked
    if _asked and signum == signal.SIGINT:
        raise StoppedBeforeTraining(signum)
    _asked = _asked or signum


def defer_stops() -> None:
    """From here on SIGINT and SIGTERM only record a stop, until `hand_over` or `restore_handlers`
    (nothing to do when already deferred, or outside the main thread, where Python runs no handler)."""
    if _found:
        return
    try:
        for sig in DEFERRED:
            _found[sig] = signal.signal(sig, _record)
    except ValueError:  # not the main thread
        _found.clear()


def stop_if_asked() -> None:
    """Raise the stop a signal asked for while deferred (`StoppedBeforeTraining`, a KeyboardInterrupt,
    so the cleanup and the one-line report of a Ctrl-C apply)."""
    global _asked
    if _asked:
        signum, _asked = _asked, 0
        raise StoppedBeforeTraining(signum)


def hand_over() -> dict[int, object]:
    """End the deferral for handlers that take over (the runner's, installed first): the handlers
    found before it, to put back once they are done. A stop asked meanwhile stays for `stop_if_asked`."""
    found = dict(_found)
    _found.clear()
    return found


def restore_handlers() -> None:
    """The command ends: the handlers found before `defer_stops` come back, and a stop that was
    asked too late to matter is forgotten."""
    global _asked
    for sig, handler in hand_over().items():
        signal.signal(sig, handler)
    _asked = 0


def signal_exit_code(interrupt: KeyboardInterrupt) -> int:
    """128 + the signal: 143 for SIGTERM, 130 for Ctrl-C."""
    return 128 + getattr(interrupt, "signum", signal.SIGINT)


def stop_name(interrupt: KeyboardInterrupt) -> str:
    return "Stopped by SIGTERM" if getattr(interrupt, "signum", None) == signal.SIGTERM else "Aborted"
