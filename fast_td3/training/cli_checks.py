"""Checks of `fast-td3-train`'s command line before Hydra composes anything: unknown tasks, group
options and keys (with the nearest valid name), a missing suite, and the user's own config
folders (`--config-dir myconf`), whose recipes and tasks count as Hydra would count them.
Nothing here imports torch, JAX or a suite.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from envs.registry import SUITES, MissingSuiteError, did_you_mean, require_suite
from fast_td3.learner.config import ConfigError
from fast_td3.training.config import TrainConfig
from fast_td3.training.run_folder import hydra_value, override_value

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("suite", "sizing", "recipe", "algo", "logger", "reward", "gate")
PRESETS_NOW = ("preset= is gone: a machine's sizes are sizing=cpu|gpu (detected when not named; preset=cpu is sizing=cpu) and a whole recipe is recipe= (preset=cpu_t1_robust is recipe=t1, preset=cpu_t1_nominal is recipe=t1_nominal; preset=cpu_t1 never reached the bar and has no successor). Your own presets: <dir>/sizing/ or <dir>/recipe/ with --config-dir <dir>")
"""The answer to `preset=...`, the group sizing and recipe replaced (a run made with one resumes as before)."""
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")
SWEEP_SYNTAX = "()[]{}*?$"


def split_config_dirs(args: list[str]) -> tuple[list[Path], list[str]]:
    """(the folders given with --config-dir / -cd, the other arguments); ConfigError for a
    folder that does not exist (Hydra would stop with a traceback-like message)."""
    dirs, rest, i = [], [], 0
    while i < len(args):
        arg, value = args[i], None
        if arg in CONFIG_DIR_FLAGS:
            if i + 1 >= len(args):
                raise ConfigError(f"{arg} needs a folder, e.g. {arg} myconf")
            value, i = args[i + 1], i + 1
        elif arg.startswith("--config-dir="):
            value = arg.split("=", 1)[1]
        if value is None:
            rest.append(arg)
        else:
            folder = Path(value).expanduser().absolute()
            if not folder.is_dir():
                raise ConfigError(f"--config-dir {value}: no such folder (it holds your own config groups, "
                                  "e.g. myconf/recipe/mine.yaml for recipe=mine)")
            _check_not_shadowed(folder, value)
            dirs.append(folder)
        i += 1
    return dirs, rest


def _check_not_shadowed(folder: Path, given: str) -> None:
    """ConfigError for a file of the user's that Hydra would never read: fast-td3's own file of
    the same name comes first in its search path."""
    for path in sorted(folder.rglob("*.yaml")):
        relative = path.relative_to(folder)
        if (CONF_DIR / relative).is_file():
            group, stem = relative.parent.as_posix(), relative.stem
            choose = f", and choose it with {group}={stem}_mine" if group != "." else ""
            raise ConfigError(f"--config-dir {given}: {relative.as_posix()} has no effect: fast-td3's own "
                              f"conf/{relative.as_posix()} is found first; give yours another name, e.g. "
                              f"{stem}_mine.yaml{choose}")


def search_path_override(dirs: list[Path]) -> list[str]:
    """The override that makes a compose see the user's config folders, as --config-dir does."""
    if not dirs:
        return []
    return ["hydra.searchpath=[" + ",".join(hydra_value(f"file://{d}") for d in dirs) + "]"]


def config_dirs_with(dirs: list[Path] | None) -> list[Path]:
    return [*(dirs or []), CONF_DIR]


def group_options(group: str, dirs: list[Path] | None = None) -> list[str]:
    return sorted({p.stem for d in config_dirs_with(dirs) for p in (d / group).glob("*.yaml")})


def task_suites(dirs: list[Path] | None = None) -> dict[str, str]:
    """Task presets in conf/task (and the user's <dir>/task) and the suite each one pulls in."""
    suites = {}
    for folder in reversed(config_dirs_with(dirs)):  # the user's files take precedence
        for path in sorted((folder / "task").glob("*.yaml")):
            defaults = OmegaConf.load(path).get("defaults") or []
            suite = next((str(d["/suite"]) for d in defaults if isinstance(d, DictConfig) and "/suite" in d), "?")
            suites[path.stem] = suite
    return suites


def key_exists(schema: DictConfig, key: str) -> bool:
    """Whether `key` (dotted) is in the schema; anything below a free-form dict field is allowed."""
    node = schema
    for part in key.split("."):
        if not isinstance(node, DictConfig):
            return False
        if OmegaConf.get_type(node) is dict:  # e.g. env.options
            return True
        if part not in node:
            return False
        node = node[part]
    return True


def schema_keys(node: DictConfig, prefix: str = "") -> list[str]:
    out = []
    for name in node.keys():
        child = node[name]
        full = f"{prefix}{name}"
        out.append(full)
        if isinstance(child, DictConfig) and OmegaConf.get_type(child) is not dict:
            out.extend(schema_keys(child, full + "."))
    return out


def unknown_task_message(task: str, suites: dict[str, str]) -> str:
    by_suite: dict[str, list[str]] = {}
    for name, suite in suites.items():
        by_suite.setdefault(suite, []).append(name)
    hint = did_you_mean("task", task, list(suites), "fast-td3-train")
    listing = "\n".join(f"  {suite}: {', '.join(names)}" for suite, names in sorted(by_suite.items()))
    return f"{hint}\nValid tasks by suite (conf/task/):\n{listing}"


def unknown_group_option(group: str, value: str, dirs: list[Path] | None = None) -> str | None:
    """`logger=nope`: the nearest option of the group and all of them (conf/<group>/ and the
    user's --config-dir folders)."""
    if any(c in value for c in SWEEP_SYNTAX):  # sweep functions, globs, interpolations
        return None
    options = group_options(group, dirs)
    where = ", ".join(f"{d}/{group}/" for d in dirs or []) + (", " if dirs else "") + f"conf/{group}/"
    for choice in value.split(","):
        if choice not in options and choice != "null":
            return (f"{did_you_mean(f'{group} option', choice, options, 'fast-td3-train')} "
                    f"Options of {group} ({where}): {', '.join(options)}, null")
    return None


def check_command_line(args: list[str], suites: dict[str, str] | None = None,
                       dirs: list[Path] | None = None) -> str | None:
    """An actionable message for an unknown task or a mistyped key, before Hydra composes.

    Only plain `key=value` overrides and plain task lists are checked; Hydra's own
    syntax (`+key`, `~key`, `hydra/...`, `choice(...)`, globs) is left to Hydra.
    """
    schema = OmegaConf.structured(TrainConfig)
    suites = suites or task_suites(dirs)
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if key.startswith("+") and not key.lstrip("+").startswith("hydra"):
            key = key.lstrip("+")  # `+key=v` adds a key; the schema has every key there is
        if key == "resume" and value not in ("", "null"):
            path = override_value(arg)
            if not Path(path).expanduser().exists():
                return f"resume={path}: no such run folder or checkpoint file"
        if key == "preset":
            return PRESETS_NOW
        if key in GROUPS:
            problem = unknown_group_option(key, value, dirs)
            if problem:
                return problem
            continue
        if key.startswith(("+", "~", "hydra")) or "/" in key:
            continue
        if key == "task":
            if any(c in value for c in SWEEP_SYNTAX):
                continue
            unknown = [task for task in value.split(",") if task not in suites]
            if unknown:
                return unknown_task_message(unknown[0], suites)
        elif not key_exists(schema, key):
            hint = did_you_mean("config key", key, schema_keys(schema), "fast-td3-train")
            return hint + " `fast-td3-train --help` lists every key."
    return None


def missing_suite(args: list[str], suites: dict[str, str]) -> str | None:
    """The install commands of a named task's suite when it is not installed, before Hydra
    makes a run folder (tasks from presets; other spellings are checked when envs are built)."""
    for arg in args:
        if arg.startswith("task=") and not any(c in arg for c in SWEEP_SYNTAX):
            for task in arg.split("=", 1)[1].split(","):
                if suites.get(task) in SUITES:
                    try:
                        require_suite(SUITES[suites[task]])
                    except MissingSuiteError as error:
                        return str(error)
    return None
