"""Runs one command's fuzz cases (tests/test_fuzz_commands.py): the command is imported once, and
each case runs in a fork of this process, as the console script would run it (`sys.argv`, the
entry called with no arguments, `sys.exit` of what it returns), with its own stdout and stderr
files, in the workspace folder. A case that runs past its time limit is killed (SIGALRM).

    python tests/fuzz_driver.py <workspace> <name>     # prints results as JSON

`<name>` is a row of test_fuzz_commands.COMMANDS, whose entry is `module:function` (a console
script) or a script's path. A flags tool's options are read from its parser in this process
(`options`), and test_fuzz_commands.cases_for makes the cases. Results: for each case its option,
value, argv, exit code (None: killed by the time limit), stderr, and the workspace's files that a
case added, removed or changed (by size, modification time and mode).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import signal
import sys
import traceback
from pathlib import Path

CASE_SECONDS = 60
"""A refused value is refused in well under a second here; a case still running after a minute
was accepted and is doing real work."""


def load_entry(entry: str):
    """The function the console script calls (a script: its `__main__` run), its imports done once."""
    if entry.endswith(".py"):
        sys.path.insert(0, str(Path(entry).resolve().parent))
        runpy.run_path(entry, run_name="fuzz_preload")  # imports only: the __main__ block is skipped
        return lambda: runpy.run_path(entry, run_name="__main__")
    module, function = entry.split(":")
    return getattr(importlib.import_module(module), function)


def exit_code(result) -> int:
    """What `sys.exit(result)` would end the process with."""
    if result is None:
        return 0
    if isinstance(result, int):
        return result
    print(result, file=sys.stderr)
    return 1


def run_case(entry, prog: str, argv: list[str], workspace: Path, out: Path) -> int | None:
    pid = os.fork()
    if pid == 0:  # the child: one command line, as the console script runs it
        code = 1
        try:
            os.chdir(workspace)
            for fd, name in ((1, "stdout"), (2, "stderr")):
                os.dup2(os.open(out / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            sys.argv = [prog, *argv]
            signal.alarm(CASE_SECONDS)
            try:
                code = exit_code(entry())
            except SystemExit as stop:
                code = exit_code(stop.code)
            except BaseException:  # what Python prints for an uncaught exception
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGALRM \
        else None


def snapshot(folder: Path) -> dict[str, list[int]]:
    found = {}
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        found[str(path.relative_to(folder))] = [stat.st_size if path.is_file() else 0, stat.st_mtime_ns, stat.st_mode]
    return found


def changed(before: dict, after: dict) -> list[str]:
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


def run_cases(workspace: Path, name: str) -> list[dict]:
    from test_fuzz_commands import COMMANDS, cases_for

    command = COMMANDS[name]
    entry = load_entry(command.entry)
    found = options(entry) if command.key_values is None else []
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"fuzz-{os.getpid()}"
    out.mkdir(exist_ok=True)
    results = []
    for option, value, argv in cases_for(name, found):
        before = snapshot(workspace)
        code = run_case(entry, name.split()[-1], argv, workspace, out)
        results.append({"option": option, "value": value, "argv": argv, "code": code,
                        "stderr": (out / "stderr").read_text(errors="replace"),
                        "changed": changed(before, snapshot(workspace))})
    return results


class _Captured(Exception):
    def __init__(self, parser) -> None:
        self.parser = parser


def options(entry) -> list[dict]:
    """A flags tool's options as its parser declares them: the flag (or positional name), the kind
    and its bounds (fast_td3.command_line), the choices, and whether it is a switch. The entry
    runs up to its `parse_args`, which hands over the parser instead of parsing."""
    from fast_td3.command_line import ArgumentParser

    def capture(self, args=None, namespace=None):
        raise _Captured(self)

    parse_args, ArgumentParser.parse_args = ArgumentParser.parse_args, capture
    try:
        entry()
    except _Captured as captured:
        return described(captured.parser)
    finally:
        ArgumentParser.parse_args = parse_args
    raise SystemExit("the entry parsed no arguments with fast_td3.command_line.ArgumentParser")


def described(parser, subcommand: str | None = None) -> list[dict]:
    found = []
    for action in parser._actions:  # every action, subcommands' parsers too
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += described(sub, name)
            continue
        kind = getattr(action.type, "kind", None)
        found.append({"option": max(action.option_strings, key=len, default=action.dest), "subcommand": subcommand,
                      "positional": not action.option_strings, "switch": action.nargs == 0,
                      "kind": kind, "minimum": getattr(action.type, "minimum", None),
                      "maximum": getattr(action.type, "maximum", None),
                      "above_minimum": getattr(action.type, "above_minimum", True),
                      "choices": list(action.choices) if action.choices else None,
                      "plain": action.type in (None, str)})
    return found


if __name__ == "__main__":
    print(json.dumps(run_cases(Path(sys.argv[1]), sys.argv[2])))
