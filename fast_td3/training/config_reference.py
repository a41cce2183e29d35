"""The documentation's configuration reference, generated from the config dataclasses.

`markdown()` renders every key of `TrainConfig` with its default and its field docstring (the
rows of `describe_fields`, the same source as `fast-td3-train --help`) and the options of each
config group in `conf/`. The docs build calls it from `docs/hooks/config_reference.py`, so the
page cannot drift from the code. Imports nothing heavy (no torch, Hydra or simulator).
"""

from __future__ import annotations

import re
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

from fast_td3.training.config import TrainConfig, describe_fields

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("task", "recipe", "sizing", "recipe_sizing", "algo", "algo_task", "reward", "logger", "suite", "gate")
"""Config groups (folders of conf/) in the order the page lists them."""
_SUITE_DEFAULT = re.compile(r"^\s*-\s*/suite:\s*(\S+)", re.MULTILINE)


def _one_line(text: str) -> str:
    """A docstring as one table-safe line: `<`, `>` and `&` escaped outside code spans."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _default(value: Any) -> str:
    """A default as it is written on the command line: true/false, null, unquoted strings."""
    if isinstance(value, bool):
        text = str(value).lower()
    elif value is None:
        text = "null"
    elif isinstance(value, str):
        text = value or "''"
    else:
        text = str(value)
    return f"`{text}`"


def _sections(cls: type = TrainConfig, prefix: str = "") -> dict[str, str]:
    """Dotted prefix ('' for the top level, 'algo.' ...) -> the docstring of its dataclass."""
    found = {prefix: _one_line(cls.__doc__ or "")}
    for f in fields(cls):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if is_dataclass(default):
            found.update(_sections(type(default), f"{prefix}{f.name}."))
    return found


def keys_markdown(cls: type = TrainConfig) -> str:
    """One table per config section: key, schema default, doc."""
    rows: dict[str, list[tuple[str, Any, str]]] = {}
    for key, default, doc in describe_fields(cls):
        rows.setdefault(key.rpartition(".")[0] + "." if "." in key else "", []).append((key, default, doc))
    docs = _sections(cls)
    out = []
    for prefix in rows:  # describe_fields' order: env, algo (its sections), logger, distributed, top level
        title = f"`{prefix[:-1]}`" if prefix else "Top-level keys"
        out += [f"### {title}", ""]
        if docs.get(prefix):
            out += [docs[prefix], ""]
        out += ["| key | default | what it is |", "|---|---|---|"]
        out += [f"| `{key}` | {_default(default)} | {_one_line(doc)} |" for key, default, doc in rows[prefix]]
        out.append("")
    return "\n".join(out)


def _summary(path: Path) -> str:
    """The first sentence of a group option's leading YAML comment (after `# @package`)."""
    words = []
    for line in path.read_text().splitlines():
        if line.startswith("# @package"):
            continue
        if not line.startswith("#") or line.startswith("#  ") or not line.strip("# "):
            break  # the end of the comment, an indented example command, or a blank comment line
        words.append(line.lstrip("# "))
    text = " ".join(words)
    match = re.search(r"\.(\s|$)", text)
    return _one_line(text[:match.start() + 1] if match else text).rstrip(":")


def groups_markdown(conf_dir: Path = CONF_DIR) -> str:
    """The options of every config group; tasks listed by the suite they pull in."""
    out = ["| group | option | what it is |", "|---|---|---|"]
    for group in GROUPS:
        if group == "task":
            continue
        for path in sorted((conf_dir / group).glob("*.yaml")):
            out.append(f"| `{group}` | `{path.stem}` | {_summary(path)} |")
    by_suite: dict[str, list[str]] = {}
    for path in sorted((conf_dir / "task").glob("*.yaml")):
        match = _SUITE_DEFAULT.search(path.read_text())
        by_suite.setdefault(match.group(1) if match else "?", []).append(path.stem)
    out += ["", "Tasks (`task=<id>`, one file each in `conf/task/`), by the suite they pull in:", ""]
    out += [f"- **{suite}** ({len(tasks)}): {', '.join(f'`{t}`' for t in tasks)}"
            for suite, tasks in sorted(by_suite.items())]
    return "\n".join(out) + "\n"


def markdown(cls: type = TrainConfig, conf_dir: Path = CONF_DIR) -> str:
    """The generated part of docs/configuration.md: config groups, then every key."""
    return "\n".join([
        "## Config groups", "",
        "Chosen as `group=option` (e.g. `recipe=t1`, `sizing=cpu`; `fast-td3-train --help` lists them too). A task pulls "
        "in its `suite`; `algo_task/<algo>_<task>` applies by itself when a run's algorithm and task "
        "match it, and `recipe_sizing/<recipe>_<sizing>` when its recipe and sizing do. `fast-td3-train` "
        "picks `sizing` by itself when the command line names none (`gpu` with a CUDA GPU, else `cpu`).", "",
        groups_markdown(conf_dir),
        "## Keys", "",
        "Schema defaults: a task, suite, sizing or recipe file changes some of them "
        "(`fast-td3-train --cfg job task=<id>` prints what a run would use).", "",
        keys_markdown(cls),
    ])
