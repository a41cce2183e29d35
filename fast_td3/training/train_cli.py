"""`fast-td3-train`'s command line up to Hydra: `--help`, the checks of the arguments
(`cli_checks`) and of the config and run folder (`preflight`), the `++` Hydra needs for keys
below free-form dicts, and torchrun's overrides. A mistake ends the command here, in one line
with exit code 2, before torch, JAX or a suite is imported and before any folder is made.
"""

from __future__ import annotations

import os
import sys

from omegaconf import DictConfig, OmegaConf

from envs.registry import EnvOptionError, MissingSuiteError, UnknownTaskError
from fast_td3.command_line import key_value_hint
from fast_td3.learner.config import ConfigError
from fast_td3.learner.device import DeviceError
from fast_td3.training import cluster
from fast_td3.training.checkpoint import CheckpointError
from fast_td3.training.cli_checks import CONF_DIR, check_command_line, missing_suite, split_config_dirs, task_suites
from fast_td3.training.config import TrainConfig, describe_fields
from fast_td3.training.preflight import Launch, check_sweep, claim, preflight
from fast_td3.training.run_folder import no_resume, override_value
from fast_td3.training.sizing import with_detected_sizing

# Exit codes (docs/resume.md, "Exit codes"); 1 is left to Python for our own bugs (with a traceback).
EXIT_USER_ERROR, EXIT_NON_FINITE, EXIT_WRITE_ERROR = 2, 3, 4
# Errors a user can act on from their message alone: printed without a traceback.
USER_ERRORS = (
    ConfigError, MissingSuiteError, UnknownTaskError, CheckpointError, FileNotFoundError, EnvOptionError,
)
INFO_FLAGS = {"--cfg", "-c", "--info", "--hydra-help", "--shell-completion", "-sc"}
"""Hydra's flags that print something and train nothing."""

HELP = """fast-td3-train: train FastTD3 or FastSAC (algo=fast_sac) on one task (Hydra; overrides are key=value).

  fast-td3-train task=HalfCheetah-v5 seed=3
  fast-td3-train recipe=t1 seed=0                            the T1 recipe: trains, gates, ships <run>/bundle/, stops
  fast-td3-train recipe=t1 sizing=gpu                        a machine's sizes (detected when not named: cpu | gpu)
  fast-td3-train -m task=Hopper-v5,Walker2d-v5 seed=1,2      sweep (one run after another)
  fast-td3-train -m hydra/launcher=joblib hydra.launcher.n_jobs=2 seed=1,2
                                                             2 runs at a time (pip install hydra-joblib-launcher)
  fast-td3-report runs/sweeps/<sweep>                        compare a sweep's runs in one HTML page
  fast-td3-train resume=runs/<task>/<run> [total_steps=N]    continue a run (from its latest checkpoint)
  fast-td3-train logger=tensorboard ...                      also TensorBoard files: tensorboard --logdir <run>
  fast-td3-train --cfg job [overrides]                       print the composed config
  fast-td3-train --config-dir myconf recipe=mine             your own recipes and tasks (myconf/recipe/mine.yaml)
  fast-td3-train --hydra-help                                Hydra's own options

A run keeps checkpoints/best.pt (its best evaluation) beside the newest step_<N>.pt files:
fast-td3-eval, -play and -export take best.pt from a run folder (--use latest / use=latest: the newest).

Config groups (conf/):
{groups}

Keys (schema default -- task, sizing and recipe files change some, see --cfg job -- then what it is):
{keys}
"""


def help_text() -> str:
    groups = "\n".join(
        f"  {group}: {', '.join(sorted(p.stem for p in (CONF_DIR / group).glob('*.yaml')))}"
        for group in ("task", "recipe", "sizing", "reward", "logger", "algo", "suite", "gate")
    )
    keys = "\n".join(f"  {key} = {default}\n      {doc}" for key, default, doc in describe_fields(TrainConfig))
    return HELP.format(groups=groups, keys=keys)


def fail(message: str) -> None:
    print(f"fast-td3-train: error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USER_ERROR)


def hydra_args(args: list[str], launch: Launch) -> list[str] | None:
    """The arguments Hydra runs with, once every check before Hydra passed (the run folder is then
    claimed and locked, and `launch` holds what the checks decided); None after printing `--help`.
    Exits with a one-line error otherwise."""
    if "--help" in args or "-h" in args:
        try:
            print(help_text(), flush=True)
        except BrokenPipeError:  # `fast-td3-train --help | head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return None
    hint = key_value_hint("fast-td3-train", args)  # the --flags tools' spelling
    if hint:
        fail(hint)
    check_hydra_flags(args)
    try:
        config_dirs, plain_args = split_config_dirs(args)
    except ConfigError as error:
        fail(str(error))
    suites = task_suites(config_dirs)
    problem = check_command_line(plain_args, suites, config_dirs)
    info_only = bool(INFO_FLAGS & set(args))
    if problem is None and not info_only:
        problem = missing_suite(plain_args, suites) or cluster.launcher_problem(args)
    if problem:
        fail(problem)
    args = with_detected_sizing([add_to_free_form_dicts(arg) for arg in args])  # sizing=cpu|gpu unless named
    multirun = "-m" in args or "--multirun" in args
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from fast_td3.training import distributed

        if distributed.launched_by_torchrun():
            if multirun:
                fail("a sweep (-m) cannot run under torchrun; launch one torchrun job per run")
            args += distributed.hydra_overrides(args)
    # Hydra's flags that change what is composed (--config-name, ...) leave the checks to main
    # (--config-dir is seen by the checks); with one, the run folder is still claimed and locked
    _, plain_args = split_config_dirs(args)
    flags = [arg for arg in plain_args if arg.startswith("-") and arg not in ("-r", "--run", "-m", "--multirun")]
    overrides = [arg for arg in plain_args if not arg.startswith("-")]
    try:
        if not flags:
            check_sweep(overrides, config_dirs) if multirun else preflight(overrides, config_dirs, launch)
        elif not info_only and not multirun:
            resume = next((override_value(o) for o in overrides if o.startswith("resume=")), None)
            claim(overrides, None if no_resume(resume) else resume, launch)
    except (*USER_ERRORS, DeviceError) as error:
        fail(str(error))
    return args


def check_hydra_flags(args: list[str]) -> None:
    """Hydra's own flags (`--cfg nope`) in one line, not the usage block of Hydra's parser."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.error = lambda message: fail(f"{message} (fast-td3-train --hydra-help lists Hydra's flags)")
    parsed = parser.parse_args(args)
    modes = [flag for flag, on in (("--run", parsed.run), ("--multirun", parsed.multirun), ("--cfg", parsed.cfg),
                                   ("--info", parsed.info), ("--shell-completion", parsed.shell_completion)) if on]
    if len(modes) > 1:  # Hydra's own answer is a traceback
        fail(f"{' and '.join(modes)} cannot be given together: choose one (--cfg job prints the config a run would use)")


def add_to_free_form_dicts(arg: str) -> str:
    """`env.reward_scales.action_rate=-0.5` -> `++env.reward_scales.action_rate=-0.5`.

    Keys below a free-form dict field (reward scales, adapter options, at any depth) are
    new to the composed config, which Hydra only accepts with `++`; users should not have
    to know.
    """
    if arg.startswith(("-", "+", "~")) or "=" not in arg:
        return arg
    key = arg.split("=", 1)[0]
    if key.startswith("hydra") or "/" in key:
        return arg
    node = OmegaConf.structured(TrainConfig)
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(node, DictConfig) or part not in node:
            return arg
        node = node[part]
        if isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict:
            return "++" + arg  # the rest of the key lies below a free-form dict
    return arg
