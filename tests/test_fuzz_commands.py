"""Every console command and every user-facing script, fed bad values of each kind (issue 64).

For each case: exit code 2, at most 2 lines on stderr, none of them a traceback, a line that names
the option or the value, and a workspace (a T1 run, a bundle, a user's file and folders) that is
unchanged afterwards, file by file. The cases come from the commands themselves: a flags tool's
options and their kinds are read from its parser (fast_td3.command_line: whole, number, path_in,
file_out, folder_out, choices); the key=value tools name their kinds in NUMBER_KINDS; the trainer's
keys come from TrainConfig. A new console script (pyproject.toml) or script in scripts/ fails
`test_every_command_is_in_the_table` until it is added to COMMANDS.

Each command's cases run in one driver process (tests/fuzz_driver.py) that imports the command
once and forks per case. The default tier runs a fixed-seed sample of each option's bad values;
`FAST_TD3_FUZZ_ALL=1` runs them all. The scripts' cases are in test_fuzz_scripts.py (a file of their
own, so that the default tier's workers share the two).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tomllib
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).with_name("fuzz_driver.py")
ENTRIES = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
SAMPLE_PER_OPTION = 2
SEED = 64


# ------------------------------------------------------------------ the commands
@dataclasses.dataclass(frozen=True)
class Command:
    """How to reach a command and a valid line to put one bad value into."""

    entry: str
    """`module:function` or a script's path."""
    positionals: dict[str, str] = dataclasses.field(default_factory=dict)
    """A valid value for each positional (workspace-relative)."""
    options: tuple[str, ...] = ()
    """Valid options every case carries (a required --step)."""
    key_values: dict[str, typing.Callable] | None = None
    """For the key=value tools: each key's kind (None: a flags tool, read from its parser)."""
    base_for: dict[str, tuple[dict[str, str], tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    """Options that apply to another kind of input, with the valid line they need."""


def _key_value_kinds(module: str) -> dict:
    import importlib

    return importlib.import_module(module).NUMBER_KINDS


BUNDLE_LINE = ({"checkpoint": "bundle"}, ())
SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py"))
COMMANDS: dict[str, Command] = {
    "fast-td3-eval": Command(ENTRIES["fast-td3-eval"], {"checkpoint": "run"}),
    "fast-td3-play": Command(ENTRIES["fast-td3-play"], {"checkpoint": "run"}, base_for={
        option: BUNDLE_LINE for option in ("--seconds", "--trial", "--seed", "--gate-report", "--shadows")}),
    "fast-td3-report": Command(ENTRIES["fast-td3-report"], {"paths": "run"}),
    "fast-td3-gate": Command(ENTRIES["fast-td3-gate"], {"run": "run"}),
    "fast-td3-ship": Command(ENTRIES["fast-td3-ship"], {"run": "run"}, ("--step", "10")),
    "fast-td3-export": Command(ENTRIES["fast-td3-export"], key_values={"checkpoint=run": None, "out=new_bundle": None}),
    "fast-td3-sim2sim": Command(ENTRIES["fast-td3-sim2sim"], key_values={"bundle=bundle": None}),
    "fast-td3-train": Command(ENTRIES["fast-td3-train"], key_values={"task=HalfCheetah-v5": None, "sizing=cpu": None,
                                                                    "total_steps=5": None, "hydra.run.dir=new_run": None}),
    "python -m fast_td3.analysis.recipe_table": Command("fast_td3.analysis.recipe_table:main", {"paths": "run"}),
    "python -m fast_td3.training.cluster": Command("fast_td3.training.cluster:main"),
    "python sim2real/redeploy.py": Command(str(ROOT / "sim2real" / "redeploy.py"),
                                           {"bundle": "bundle", "out": "new_bundle"}, ("--gait-frequency", "1.5")),
    **{f"python scripts/{name}": Command(str(ROOT / "scripts" / name)) for name in SCRIPTS},
}


# ------------------------------------------------------------------ bad values by kind
AS_ROOT = os.geteuid() == 0  # permission bits do not stop root: the read-only cases need another user


def bad_values(kind: str | None, minimum=None, maximum=None, choices=None, above_minimum=True,
               make_parents=False) -> list[str]:
    """Values outside what the option takes: negative, zero, fractional, nan, inf, huge, the wrong
    type, and paths that are missing, a file, a folder, read-only, or inside a run or bundle."""
    if choices:
        return ["nope", ""]
    if kind == "whole":
        values = ["1.5", "nan", "inf", "many", str(minimum - 1)]
        return values + ([str(maximum + 1), str(10**30)] if maximum is not None else [])
    if kind == "number":
        values = ["nan", "inf", "-inf", "wrong", str(minimum if above_minimum else minimum - 1)]
        return values + ([str(maximum * 2 if maximum > 0 else maximum + 1), "1e308"] if math.isfinite(maximum) else [])
    if kind == "path_in":
        return ["missing/thing", "file.txt", "folder", "run/metrics.jsonl"]
    if kind == "file_out":
        return ["folder", "missing/out.mp4", "run/metrics.jsonl", "bundle/meta.json", "file.txt",
                "run/checkpoints/out.gif"] + ([] if AS_ROOT else ["readonly/out.json"])
    if kind == "folder_out":
        return (["file.txt", "file.txt/new", "run", "run/checkpoints"] + ([] if make_parents else ["missing/new"])
                + ([] if AS_ROOT else ["readonly/new"]))
    return []


def flags_cases(name: str, command: Command, found: list[dict]) -> list[tuple[str, str, list[str]]]:
    """(option, value, argv) for each option of a flags tool (`found`: fuzz_driver.options) and
    each of its bad values."""
    cases = []
    for option in found:
        if option["switch"] or (option["plain"] and not option["choices"]):
            continue  # a switch or free text (a note, a task name) has no value outside its kind
        assert option["kind"] or option["choices"], f"{name} {option['option']}: give it a kind (fast_td3.command_line)"
        positionals, extra = command.base_for.get(option["option"], (command.positionals, command.options))
        for value in bad_values(option["kind"], option["minimum"], option["maximum"], option["choices"],
                                option["above_minimum"]):
            if option["subcommand"]:
                line = [option["subcommand"], option["option"], value]
            elif option["positional"]:
                line = [value if key == option["option"] else path for key, path in positionals.items()]
            else:
                line = [*positionals.values(), option["option"], value]
            cases.append((option["option"], value, [*line, *extra]))
    return cases


def train_keys() -> dict[str, type]:
    from fast_td3.training.config import TrainConfig

    def walk(cls, prefix=""):
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[field.name]):
                yield from walk(hints[field.name], f"{prefix}{field.name}.")
            elif hints[field.name] in (int, float, bool):
                yield f"{prefix}{field.name}", hints[field.name]

    return dict(walk(TrainConfig))


TRAIN_BAD = {int: ["1.5", "many", "nan"], float: ["nan", "inf", "wrong"], bool: ["maybe"]}


def sim2real_export_out():
    from sim2real.export_cli import OUT

    return OUT


def key_value_cases(name: str, command: Command) -> list[tuple[str, str, list[str]]]:
    base = list(command.key_values)
    if name == "fast-td3-train":
        kinds = {key: TRAIN_BAD[kind] for key, kind in train_keys().items()}
    else:
        module = command.entry.split(":")[0]
        kinds = {key: bad_values(kind.kind, kind.minimum, kind.maximum, above_minimum=getattr(kind, "above_minimum", True))
                 for key, kind in _key_value_kinds(module).items()}
        kinds |= ({"bundle": bad_values("path_in"), "report": bad_values("file_out")} if name == "fast-td3-sim2sim"
                  else {"checkpoint": bad_values("path_in"),
                        "out": bad_values("folder_out", make_parents=sim2real_export_out().make_parents)})
        if name == "fast-td3-sim2sim":
            from fast_td3.command_line import SEED_MAX, TRIALS_MAX, whole

            kinds |= {f"robust=true {key}": bad_values("whole", *bounds)
                      for key, bounds in (("trials", (1, TRIALS_MAX)), ("seed", (0, SEED_MAX)))}
    cases = []
    for key, values in kinds.items():
        *switches, key = key.split()
        for value in values:
            line = [word for word in base if word.split("=")[0] != key] + switches + [f"{key}={value}"]
            cases.append((key, value, line))
    return cases


def cases_for(name: str, found: list[dict]) -> list[tuple[str, str, list[str]]]:
    """The cases the driver runs: every bad value of every option, or a fixed-seed sample of each
    option's (FAST_TD3_FUZZ_ALL unset)."""
    command = COMMANDS[name]
    cases = key_value_cases(name, command) if command.key_values is not None else flags_cases(name, command, found)
    if os.environ.get("FAST_TD3_FUZZ_ALL"):
        return cases
    rng = random.Random(f"{SEED} {name}")
    by_option: dict[str, list] = {}
    for case in cases:
        by_option.setdefault(case[0], []).append(case)
    per_option = 1 if name == "fast-td3-train" else SAMPLE_PER_OPTION  # 61 keys, each a Hydra composition
    return [case for group in by_option.values() for case in rng.sample(group, min(per_option, len(group)))]


# ------------------------------------------------------------------ the workspace
@pytest.fixture(scope="module")
def workspace_template(tmp_path_factory) -> Path:
    from test_robust_gate import _t1_shaped_run

    folder = tmp_path_factory.mktemp("fuzz")
    _t1_shaped_run(folder / "run")
    shutil.copytree(ROOT / "sim2real" / "pretrained" / "t1_flat", folder / "bundle")
    (folder / "file.txt").write_text("a user's file\n")
    (folder / "folder").mkdir()
    (folder / "readonly").mkdir()
    (folder / "readonly").chmod(0o555)
    return folder


@pytest.fixture
def workspace(workspace_template, tmp_path) -> Path:
    """A fresh copy for each command: what one command wrongly wrote cannot pass as another's."""
    return Path(shutil.copytree(workspace_template, tmp_path / "workspace"))


def drive(workspace: Path, name: str) -> list[dict]:
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    done = subprocess.run([sys.executable, str(DRIVER), str(workspace), name], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def problems(option: str, value: str, result: dict) -> list[str]:
    """What is wrong with how the command met this bad value (nothing: refused as the standard asks)."""
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    found = []
    if result["code"] is None:
        found.append("accepted: still running after a minute")
    elif result["code"] != 2:
        found.append(f"exit code {result['code']}, not 2")
    if "Traceback" in result["stderr"]:
        found.append("a traceback")
    if len(lines) > 2:
        found.append(f"{len(lines)} lines on stderr")
    if result["changed"]:
        found.append(f"the workspace changed: {result['changed'][:5]}")
    named = option.lstrip("-").replace("-", "_")
    if lines and not any(word in lines[-1].replace("-", "_") for word in (named, value.replace("-", "_"))):
        found.append("the message names neither the option nor the value")
    return found


def check(workspace: Path, name: str) -> None:
    results = drive(workspace, name)
    assert results or name.startswith("python scripts/"), f"{name}: no options to try"
    failures = [f"{name} {' '.join(result['argv'])}: {'; '.join(found)}\n    stderr: {result['stderr'][-400:]!r}"
                for result in results if (found := problems(result["option"], result["value"], result))]
    assert not failures, f"{len(failures)} of {len(results)} cases:\n" + "\n".join(failures)


@pytest.mark.parametrize("name", sorted(name for name in COMMANDS if not name.startswith("python scripts/")))
def test_bad_values_are_refused_in_one_line_and_change_nothing(workspace, name):
    check(workspace, name)


def test_every_command_is_in_the_table():
    assert set(ENTRIES) <= set(COMMANDS)
    assert {f"python scripts/{name}" for name in SCRIPTS} <= set(COMMANDS)
