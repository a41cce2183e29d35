"""A stop while `fast-td3-train` starts up (issue 64): SIGINT or SIGTERM at any moment before the
first step ends the command in one line, with exit code 128 + the signal, and leaves no run
folder; a resume stopped there leaves its run folder byte for byte as it was.

The trainer signals itself at a chosen moment of its start-up: a wrapper process installs an
audit hook (`sys.addaudithook`) that sends the signal at the first audit event of a kind with a
given argument (a module imported, a folder made, a file opened), then runs the console script's
entry point as the installed script does. No sleeping: the moment is the same on a fast and a
slow machine.
"""

import signal
import subprocess
import sys

import pytest

from test_bad_inputs import QUICK, run, run_copy, snapshot, trained  # noqa: F401 (fixtures)

SIGNAL_AT_AUDIT_EVENT = """
import os, sys
from importlib.metadata import entry_points

event, what, signum = sys.argv[1], sys.argv[2], int(sys.argv[3])
sent = False

def signal_once(name, args):
    global sent
    if sent or name != event or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    found = os.fsdecode(args[0])
    if found == what or found.endswith(os.sep + what):
        sent = True
        os.kill(os.getpid(), signum)

sys.addaudithook(signal_once)
(console_script,) = entry_points(group="console_scripts", name="fast-td3-train")
sys.argv = ["fast-td3-train", *sys.argv[4:]]
sys.exit(console_script.load()())
"""

NEW_RUN = [*QUICK, "total_steps=5"]
SIGINT, SIGTERM = signal.SIGINT, signal.SIGTERM


def train_signalled_at(event: str, what: str, signum: int, args: list[str], cwd) -> subprocess.CompletedProcess:
    """`fast-td3-train <args>` in `cwd`, sent `signum` at the first audit `event` whose first
    argument is `what` (a module) or ends in `/what` (a path)."""
    return run([sys.executable, "-c", SIGNAL_AT_AUDIT_EVENT, event, what, str(int(signum)), *args], cwd)


def assert_stopped_in_one_line(result, signum: int) -> str:
    """The exit code of the signal and one line on stderr, without a traceback; the line."""
    output = result.stdout + result.stderr
    assert result.returncode == 128 + signum, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("Stopped by SIGTERM" if signum == SIGTERM else "Aborted"), lines[0]
    return lines[0]


def case(event, what, signum, args, slow=False):
    marks = [pytest.mark.slow] if slow else []
    name = f"{signal.Signals(signum).name} at {event} {what}" + (" (out_dir)" if "out_dir=out" in args else "")
    return pytest.param(event, what, signum, args, marks=marks, id=name)


NEW_RUN_STOPS = [
    # the console script's first imports, before any code of the command has run
    case("import", "hydra", SIGINT, [*NEW_RUN, "hydra.run.dir=run"]),
    case("import", "omegaconf", SIGTERM, [*NEW_RUN, "hydra.run.dir=run"], slow=True),
    # the checks before Hydra claim the run folder and lock it
    case("os.mkdir", "run", SIGTERM, [*NEW_RUN, "hydra.run.dir=run"]),
    case("open", ".fast-td3.lock", SIGINT, [*NEW_RUN, "hydra.run.dir=run"], slow=True),
    # Hydra writes .hydra/ into the run folder, before `main`
    case("open", ".hydra/config.yaml", SIGINT, [*NEW_RUN, "hydra.run.dir=run"]),
    # inside Hydra's job: the imports of torch and of the simulator, while the envs are built
    case("import", "torch", SIGINT, [*NEW_RUN, "out_dir=out"], slow=True),
    case("import", "mujoco", SIGTERM, [*NEW_RUN, "out_dir=out"]),
    case("import", "gymnasium", SIGINT, [*NEW_RUN, "hydra.run.dir=run"], slow=True),
    # the runner opens its metrics: the stop waits for the runner's own handlers, before step 1
    case("open", "metrics.jsonl", SIGINT, [*NEW_RUN, "hydra.run.dir=run"]),
    case("open", "metrics.jsonl", SIGTERM, [*NEW_RUN, "out_dir=out"], slow=True),
]


@pytest.mark.parametrize("event, what, signum, args", NEW_RUN_STOPS)
def test_a_stop_while_a_new_run_starts_up_says_one_line_and_leaves_no_folder(tmp_path, event, what, signum, args):
    result = train_signalled_at(event, what, signum, args, tmp_path)
    said = assert_stopped_in_one_line(result, signum)
    assert "nothing to resume" in said and "resume=" not in said, said
    assert snapshot(tmp_path) == {}  # no run folder, no .hydra/, no lock file, no out_dir


RESUME_STOPS = [
    case("import", "torch", SIGTERM, []),
    case("open", ".fast-td3.lock", SIGINT, [], slow=True),
    case("import", "mujoco", SIGINT, [], slow=True),
]


@pytest.mark.parametrize("event, what, signum, args", RESUME_STOPS)
def test_a_resume_stopped_while_it_starts_up_leaves_its_folder_as_it_was(run_copy, event, what, signum, args):
    before = snapshot(run_copy.parent)
    result = train_signalled_at(event, what, signum, ["resume=run", "total_steps=40", *args], run_copy.parent)
    said = assert_stopped_in_one_line(result, signum)
    assert "resume=" in said, said  # how to continue the run
    assert snapshot(run_copy.parent) == before  # config, overrides, metrics, .hydra, checkpoints, lock file
