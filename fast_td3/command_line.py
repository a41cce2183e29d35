"""One command-line convention for the eight console scripts, with the other spelling understood.

`fast-td3-train`, `fast-td3-export` and `fast-td3-sim2sim` take `key=value`; `fast-td3-eval`,
`fast-td3-play`, `fast-td3-report`, `fast-td3-gate` and `fast-td3-ship` take a path and `--flags`.
A user who writes one tool's spelling to another is understood, never misread:

- the `--flags` tools (`ArgumentParser`) read `key=value` as `--key value`, `<positional>=<path>` as
  the path, and `flag=true|false` as a switch: `fast-td3-report <run> out=report.html` writes the
  page to report.html;
- `fast-td3-export` and `fast-td3-sim2sim` (`as_key_values`) read `--key value`, `--key=value`,
  `--switch` and their leading paths as `key=value`;
- `fast-td3-train` (Hydra's own flags use `--`) answers `--key value` with one line naming the
  `key=value` to write (`key_value_hint`).

A `key=value` naming no option of a `--flags` tool is one line naming the options. Every mistake on
the command line is one line and exit code 2 (`ArgumentParser.error`), and a value is checked by its
kind (`whole`, `number`, `path_in`, `file_out`, `folder_out`: the message names the option and what
is allowed; an output is checked before any work);
tests/test_fuzz_commands.py reads these kinds from each parser to generate bad values for it. It
imports nothing from the project but `fast_td3.files` (the output rules): every layer may use it.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Callable

from fast_td3.files import output_problem

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_KEY = re.compile(r"[A-Za-z][\w-]*")


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` that also reads the `key=value` spelling (see the module docstring)."""

    def __init__(self, *args, passes_overrides: bool = False, **kwargs) -> None:
        self.recorded: list[argparse.Action] = []
        """Every argument added, also those of mutually exclusive groups."""
        self.passes_overrides = passes_overrides
        """A `key=value` naming none of this tool's options is an override it passes on to fast-td3-train."""
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.recorded.append(action)
        return action

    def add_mutually_exclusive_group(self, **kwargs):
        group = super().add_mutually_exclusive_group(**kwargs)
        add = group.add_argument

        def add_argument(*args, **kw) -> argparse.Action:
            action = add(*args, **kw)
            self.recorded.append(action)
            return action

        group.add_argument = add_argument
        return group

    def error(self, message: str):
        """One line and exit code 2: the one thing that is wrong, not the usage block."""
        self.refuse(f"{message} ({self.prog} --help lists the options)")

    def refuse(self, message: str):
        """`message` as the one line of a refused command line (exit code 2)."""
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _get_value(self, action: argparse.Action, arg_string: str):
        """A value its kind refused reads `--key value: give <the allowed range>`."""
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as error:
            if isinstance(error.__context__, KindRefusal):
                self.refuse(f"{max(action.option_strings, key=len, default=action.dest)} {error.__context__}")
            raise

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_args(self.as_flags(args), namespace)

    def as_flags(self, args: list[str]) -> list[str]:
        """`args` with every `key=value` naming an argument of this parser in the `--flag` spelling."""
        options: dict[str, tuple[str, argparse.Action]] = {}
        for action in self.recorded:
            for flag in action.option_strings:
                if flag.startswith("--"):
                    options[flag[2:]] = options[flag[2:].replace("-", "_")] = (flag, action)
        positionals = {action.dest for action in self.recorded if not action.option_strings}
        rest = args[args.index("--"):] if "--" in args else []  # after "--": paths only
        out: list[str] = []
        value_next = False  # the previous word was a flag that takes a value: this is that value
        for arg in args[: len(args) - len(rest)]:
            if value_next or arg.startswith("-"):
                flag = options.get(arg.split("=", 1)[0].lstrip("-"), (None, None))[1]
                value_next = not value_next and "=" not in arg and flag is not None and flag.nargs != 0
                out.append(arg)
                continue
            key, sep, value = arg.partition("=")
            if not sep or not _KEY.fullmatch(key) or Path(arg).exists() or (
                    self.passes_overrides and key not in options and key not in positionals):
                out.append(arg)  # a path (also one that holds "=")
            elif key in positionals:
                out.append(value)
            elif key in options:
                flag, action = options[key]
                if action.nargs != 0:
                    out.append(f"{flag}={value}")
                elif value.lower() in TRUE:
                    out.append(flag)
                elif value.lower() not in FALSE:
                    self.refuse(f"{arg}: {flag} is a switch; write {key}=true, {key}=false or {flag}")
            else:
                known = ", ".join(sorted({flag for flag, _ in options.values()}))
                self.refuse(f"{arg}: {self.prog} has no option {key} (options: {known})")
        return out + rest


SEED_MAX = 2**64 - 1
"""torch's generators take seeds up to 2**64 - 1 (env seeds are derived from the run seed)."""
ENVS_MAX = 4096
"""Envs (or episodes, one per env) a checking tool simulates at once: more is a typo on a laptop."""
FPS_MAX = 240
SEGMENT_SECONDS_MAX = 3600.0
"""Seconds per segment of the sim-to-sim sequence: an hour; longer (`1e9`, `inf`) is a typo, not a gate."""
STEPS_MAX = 10**9
"""Global steps or env steps a tool is asked for: a billion is weeks; more is a typo."""
SECONDS_MAX = 7 * 24 * 3600.0
"""A wall-clock budget: a week."""
TRIALS_MAX = 10_000
"""Robust gate trials: 10,000 is days of CPU; more is a typo."""


class KindRefusal(argparse.ArgumentTypeError):
    """A value outside its kind: `<value>: give <what is allowed>` (or what is wrong with the path)."""


def _kind(name: str, parse: Callable[[str], object], allowed: str, minimum=None, maximum=None) -> Callable[[str], object]:
    """`parse` as an argparse `type`, marked with what it takes (read by the fuzz harness and --help)."""
    parse.kind, parse.allowed, parse.minimum, parse.maximum = name, allowed, minimum, maximum
    parse.__name__ = allowed  # argparse names the type in its own messages
    return parse


def whole(minimum: int = 0, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number from `minimum` to `maximum`: "1.9", "nan" and "1e9" are refused, not truncated."""
    allowed = f"a whole number from {minimum} to {maximum}" if maximum is not None else f"a whole number, {minimum} or more"

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise KindRefusal(f"{text}: give {allowed}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise KindRefusal(f"{text}: give {allowed}")
        return value

    return _kind("whole", parse, allowed, minimum, maximum)


def number(minimum: float = 0.0, maximum: float = math.inf, above_minimum: bool = True) -> Callable[[str], float]:
    """A finite number above (or from) `minimum`, up to `maximum`: nan and inf are refused."""
    if not math.isfinite(maximum):
        allowed = f"a number above {minimum:g}" if above_minimum else f"a number, {minimum:g} or more"
    else:
        allowed = f"a number {'above' if above_minimum else 'from'} {minimum:g} up to {maximum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise KindRefusal(f"{text}: give {allowed}") from None
        if not (math.isfinite(value) and (value > minimum if above_minimum else value >= minimum) and value <= maximum):
            raise KindRefusal(f"{text}: give {allowed}")
        return value

    parse = _kind("number", parse, allowed, minimum, maximum)
    parse.above_minimum = above_minimum
    return parse


def _path(text: str) -> Path:
    if not text.strip() or "\0" in text:
        raise KindRefusal(f"{text!r}: give a path")
    return Path(text).expanduser()


def _output(kind: str, folder: bool, replaces: Callable[[Path], bool] | None,
            make_parents: bool = False) -> Callable[[str], Path]:
    def parse(text: str) -> Path:
        path = _path(text)
        problem = output_problem(path, folder, replaces, make_parents)
        if problem:
            raise KindRefusal(f"{text}: {problem}")
        return path

    parse = _kind(kind, parse, f"a {'folder' if folder else 'file'} to write")
    parse.make_parents = make_parents
    return parse


path_in = _kind("path_in", _path, "a path to read")
"""A file or folder the command reads (its own checks say what it must hold)."""


def file_out(replaces: Callable[[Path], bool] | None = None) -> Callable[[str], Path]:
    """A file the command writes, checked when parsed (`output_problem`): an existing file only if
    `replaces` recognises it as an earlier output of the command."""
    return _output("file_out", False, replaces)


def folder_out(replaces: Callable[[Path], bool] | None = None, make_parents: bool = False) -> Callable[[str], Path]:
    """A folder the command writes, by the same rules (what it may replace inside: the command's own);
    with `make_parents` the missing folders above it are made too (the nearest existing one must be writable)."""
    return _output("folder_out", True, replaces, make_parents)


def read_value(key: str, text: str, kind: Callable[[str], object]) -> object:
    """A `key=value` tool's value read by its kind: `ValueError("key=<value>: give <range>")` if refused."""
    try:
        return kind(text)
    except KindRefusal as error:
        raise ValueError(f"{key}={error}") from None


def as_key_values(args: list[str], switches: tuple[str, ...] = (), positionals: tuple[str, ...] = ()) -> list[str]:
    """For the `key=value` tools: `--key value` and `--key=value` as `key=value` (dashes in the key
    as underscores), a `switches` key given alone as `key=true`, and the leading words that hold
    no `=` as the `positionals` keys in order. Anything else is left for the tool's own checks."""
    out: list[str] = []
    free = [key for key in positionals if not any(arg.lstrip("-").startswith(f"{key}=") for arg in args)]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg.startswith("--") and len(arg) > 2 and arg not in ("--help",):
            key, sep, value = arg[2:].partition("=")
            key = key.replace("-", "_")
            if not sep:
                if key in switches and (i == len(args) or args[i].lower() not in TRUE + FALSE):
                    value = "true"  # a switch takes only true/false after it: `--force run bundle` keeps the paths
                elif i < len(args):
                    value, i = args[i], i + 1
            out.append(f"{key}={value}")
        elif "=" not in arg and not arg.startswith("-") and free:
            out.append(f"{free.pop(0)}={arg}")
        else:
            out.append(arg)
    return out


HYDRA_FLAGS = ("--help", "--hydra-help", "--version", "--cfg", "--resolve", "--package", "--run", "--multirun",
               "--shell-completion", "--config-path", "--config-name", "--config-dir", "--experimental-rerun",
               "--info")


def key_value_hint(prog: str, args: list[str], own_flags: tuple[str, ...] = HYDRA_FLAGS) -> str | None:
    """One line for the first `--key [value]` that is not one of `own_flags`: the `key=value` to write."""
    for i, arg in enumerate(args):
        flag, sep, value = arg.partition("=")
        if not arg.startswith("--") or flag in own_flags or len(flag) == 2:
            continue
        if not sep and i + 1 < len(args) and not args[i + 1].startswith("-") and "=" not in args[i + 1]:
            value = args[i + 1]
        key = flag[2:].replace("-", "_")
        return f"{arg}: {prog} takes key=value, not --flags: write {key}={value or '<value>'}"
    return None
