"""What every test gets: one torch thread in this process, the cores shared between the test
processes (pytest-xdist, `-n auto` in pyproject.toml), and Ctrl-C and SIGTERM left as the test
found them."""

from __future__ import annotations

import os
import signal

import pytest

from fast_td3.training.threads import cores_available

WATCHED = (signal.SIGINT, signal.SIGTERM)


def ignored_by_the_kernel() -> set[int]:
    """The watched signals this process ignores at the OS level (Linux: /proc), which native code
    can set behind Python's back; empty where /proc is not there."""
    try:
        with open("/proc/self/status") as status:
            mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
    except (OSError, StopIteration):
        return set()
    return {sig for sig in WATCHED if mask >> (sig - 1) & 1}


MAX_TEST_PROCESSES = 4
"""`-n auto`'s ceiling: past it, the MJX compiles (1-3 GB each) cost more memory than the
extra processes save time."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    return min(cores_available(), MAX_TEST_PROCESSES)


def pytest_configure(config):
    # The torch work the tests do in this process is tiny (networks of 32-64 units, batches of
    # 64-256): one intra-op thread runs it as fast as two on an idle machine, while on a busy one
    # (CI beside other jobs) two threads spin-wait against each other: a 5 s learning test took
    # minutes. The commands the tests start pick their own threads (fast_td3/training/threads.py).
    import torch

    torch.set_num_threads(1)
    # Under pytest-xdist, the trainers the tests start share the cores too: by default each takes
    # every core, so two test processes would run twice as many threads as there are cores.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        os.environ.setdefault("FAST_TD3_THREADS", str(max(1, cores_available() // workers)))
    # A pytest started as a background job of a shell without job control (`cmd &` in a script)
    # inherits SIGINT ignored, and Python leaves it so: nothing could stop the run with SIGINT,
    # and every trainer the tests start would inherit the ignore. Python's own handler comes back.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def signal_dispositions_are_restored():
    """A test, or library code it runs in this process, must leave the SIGINT and SIGTERM handlers
    as it found them: one left ignored, or caught by a stale handler, makes pytest impossible to
    stop with Ctrl-C. Restores them and fails the test that changed them."""
    handlers = {sig: signal.getsignal(sig) for sig in WATCHED}
    ignored = ignored_by_the_kernel()
    yield
    changed = [signal.Signals(sig).name for sig in WATCHED
               if signal.getsignal(sig) is not handlers[sig] or sig in ignored_by_the_kernel() - ignored]
    if changed:
        for sig, handler in handlers.items():
            if handler is not None:  # None: installed outside Python, nothing to put back
                signal.signal(sig, handler)
        pytest.fail(f"the test left the handlers of {', '.join(changed)} changed (restored now)")
