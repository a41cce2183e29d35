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

A `key=value` naming no option of a `--flags` tool is one line naming the options. It imports nothing
from the project: every layer may use it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_KEY = re.compile(r"[A-Za-z][\w-]*")


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` that also reads the `key=value` spelling (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        self.recorded: list[argparse.Action] = []
        """Every argument added, also those of mutually exclusive groups."""
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
            if not sep or not _KEY.fullmatch(key) or Path(arg).exists():
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
                    self.error(f"{arg}: {flag} is a switch; write {key}=true, {key}=false or {flag}")
            else:
                known = ", ".join(sorted({flag for flag, _ in options.values()}))
                self.error(f"{arg}: {self.prog} has no option {key} (options: {known})")
        return out + rest


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
