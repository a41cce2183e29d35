"""Suites by name, imported lazily, with actionable errors for unknown tasks and missing installs.

`make_env(suite, task, ...)` is the only way the trainer builds envs. A suite's
simulator is imported only when that suite is chosen; when it is not installed the
error carries the exact command that installs it.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the registry itself imports no torch: the CLIs check names before heavy imports
    from envs.protocol import VecEnv


@dataclass(frozen=True)
class Suite:
    name: str
    module: str
    """Adapter module; exposes `tasks() -> list[str]` and `make(task, num_envs, seed, device, **options)`."""
    requires: tuple[str, ...]
    """Top-level import names the suite needs."""
    install: str
    """The exact command that installs the suite's requirements."""


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite("gymnasium", "envs.gymnasium", ("gymnasium", "mujoco"), 'pip install "gymnasium[mujoco]>=1.0"'),
        Suite("playground", "envs.playground", ("mujoco_playground", "jax"), 'pip install -e ".[playground]"'),
        Suite(
            "humanoid_bench",
            "envs.humanoid_bench",
            ("humanoid_bench",),
            "(in a virtual environment of its own: it pins mujoco 3.1.6)\n"
            "    python -m venv .venv-hb && . .venv-hb/bin/activate\n"
            "    pip install torch==2.13.0     # the CPU build; on a GPU machine: pip install torch\n"
            '    pip install -e ".[humanoid-bench]"\n'
            "    git clone https://github.com/carlosferrazza/humanoid-bench\n"
            "    pip install --no-deps -e humanoid-bench   # editable: its setup.py misses a subpackage",
        ),
        Suite(
            "isaaclab",
            "envs.isaaclab",
            ("isaaclab", "isaaclab_tasks"),
            "(on a machine with an NVIDIA GPU and Python 3.12, in Isaac Lab's own environment)\n"
            "    follow https://isaac-sim.github.io/IsaacLab/main/source/setup/installation/index.html\n"
            "    then, in that environment: pip install -e .   # fast-td3 itself",
        ),
        Suite(
            "mjlab",
            "envs.mjlab",
            ("mjlab",),
            "(in a virtual environment of its own: it pins mujoco 3.11)\n"
            "    python -m venv .venv-mjlab && . .venv-mjlab/bin/activate\n"
            "    pip install torch==2.13.0 torchvision==0.28.0\n"
            '    pip install -c .ci/mjlab-constraints.txt -e ".[mjlab]"   # keeps that torch (no CUDA upgrade)',
        ),
    )
}


class MissingSuiteError(ImportError):
    """The chosen suite's simulator is not installed."""


class UnknownTaskError(ValueError):
    """A task id that the chosen suite does not provide."""


class EnvOptionError(ValueError):
    """An adapter option (env.options, env.reward_scales) the suite or task does not have."""


class UnknownRewardTermError(EnvOptionError):
    """A reward scale override names a term the task does not have."""


def check_reward_terms(reward_scales: dict[str, float], valid: list[str], task: str, where: str) -> None:
    """Raise UnknownRewardTermError (the valid terms, the nearest one) for any term not in `valid`."""
    if not valid:
        raise UnknownRewardTermError(f"{task} has no named reward terms to scale (env.reward_scales must be empty)")
    for term in reward_scales:
        if term not in valid:
            raise UnknownRewardTermError(unknown_name_message("reward term", term, valid, where))


def did_you_mean(kind: str, name: str, valid: list[str], where: str) -> str:
    """"Unknown task 'X' for Y. Did you mean 'Z'?" with the nearest valid name (case-insensitive)."""
    lowered = {v.lower(): v for v in valid}
    nearest = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.5)
    hint = f" Did you mean '{lowered[nearest[0]]}'?" if nearest else ""
    return f"Unknown {kind} '{name}' for {where}.{hint}"


def unknown_name_message(kind: str, name: str, valid: list[str], where: str) -> str:
    """`did_you_mean` followed by every valid name."""
    return f"{did_you_mean(kind, name, valid, where)} Valid {kind}s: {', '.join(sorted(valid))}"


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(unknown_name_message("suite", name, list(SUITES), "fast-td3"))
    return SUITES[name]


def require_suite(suite: Suite) -> None:
    """Raise MissingSuiteError with the install command when a requirement cannot be imported."""
    for package in suite.requires:
        try:
            found = importlib.util.find_spec(package) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken package
            found = False
        if not found:
            raise MissingSuiteError(
                f"Suite '{suite.name}' needs the Python package '{package}', which is not installed.\n"
                f"Install it with:\n    {suite.install}"
            )


def load_adapter(suite_name: str):
    """The adapter module of a suite, after checking that its simulator is installed."""
    suite = get_suite(suite_name)
    require_suite(suite)
    try:
        return importlib.import_module(suite.module)
    except ModuleNotFoundError as error:
        if error.name == suite.module:
            raise MissingSuiteError(f"Suite '{suite.name}' has no adapter in this version of fast-td3") from None
        raise


def check_task(suite_name: str, task: str) -> None:
    """Raise UnknownTaskError (valid ids and the nearest one) before any worker starts."""
    from envs.protocol import suite_hook

    adapter = load_adapter(suite_name)
    if task in suite_hook(adapter, "OWN_TASKS"):
        return
    valid = list(adapter.tasks())
    if task not in valid:
        raise UnknownTaskError(unknown_name_message("task", task, valid, f"suite '{suite_name}'"))


def make_env(
    suite: str,
    task: str,
    num_envs: int,
    seed: int,
    device: Any = "cpu",
    **options: Any,
) -> VecEnv:
    """Build `num_envs` envs of `task` from `suite` behind the env contract."""
    adapter = load_adapter(suite)
    from envs.protocol import suite_hook

    prepare = suite_hook(adapter, "prepare")
    if prepare is not None:  # e.g. Isaac Lab starts its app with the window/cameras asked for
        prepare(**options)
    check_task(suite, task)
    try:
        return adapter.make(task, num_envs=num_envs, seed=seed, device=device, **options)
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
        raise EnvOptionError(f"suite '{suite}' does not take that option ({error}); "
                             f"its options are the keyword arguments of {adapter.__name__}.make") from None
