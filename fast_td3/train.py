"""`fast-td3-train`: compose the config with Hydra, build the envs, run the runner.

    fast-td3-train task=HalfCheetah-v5 preset=cpu seed=3
    fast-td3-train -m seed=1,2,3                       # a sweep, one run after another
    fast-td3-train resume=runs/HalfCheetah-v5/<run>    # continue a run (plain key overrides allowed)
    fast-td3-train --cfg job                           # print the composed config

This module is the composition root: the only place that knows the config, the env
registry and the runner together.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from envs.registry import (
    SUITES, EnvOptionError, MissingSuiteError, UnknownTaskError, did_you_mean, load_adapter, make_env,
    require_suite,
)
from fast_td3 import distributed
from fast_td3.checkpoint import atomic_write_bytes, find_checkpoint, run_dir_of
from fast_td3.config import ConfigError, TrainConfig, describe_fields, migrate_algo_config, register_configs
from fast_td3.device import resolve_device
from fast_td3.evaluation import eval_seed
from fast_td3.runner import CheckpointMismatchError, NonFiniteObservationError, Runner, TrainingStopped
from fast_td3.threads import apply_thread_share, cores_available, joblib_parallel_jobs, thread_share

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
RESOLVED_CONFIG = "config.yaml"
OVERRIDES_FILE = "overrides.yaml"
# Errors a user can act on from their message alone: printed without a traceback.
USER_ERRORS = (
    ConfigError, MissingSuiteError, UnknownTaskError, NonFiniteObservationError,
    CheckpointMismatchError, FileNotFoundError, EnvOptionError,
)


def _run_dir(resume, default: str) -> str:
    """Hydra's run folder: the resumed run's own folder, else a new one."""
    if resume in (None, "", "null", "None"):
        return default
    return str(run_dir_of(str(resume)))


def _hydra_subdir(resume, timestamp: str) -> str:
    """Where Hydra records this invocation's config and overrides inside the run folder;
    a resumed run keeps the original record and adds one per resume."""
    if resume in (None, "", "null", "None"):
        return ".hydra"
    return f".hydra/resumed_{timestamp}"


register_configs()
for _name, _resolver in (("run_dir", _run_dir), ("hydra_subdir", _hydra_subdir)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)


def _resumed_config(cfg: DictConfig) -> DictConfig:
    """The resumed run's saved config with this command's plain `key=value` overrides on top."""
    run_dir = run_dir_of(cfg.resume)
    saved_path = run_dir / RESOLVED_CONFIG
    if not saved_path.is_file():
        raise FileNotFoundError(f"cannot resume: {saved_path} is missing (is {run_dir} a fast-td3 run folder?)")
    recorded = OmegaConf.load(saved_path)
    if "algo" in recorded:  # runs from before the per-algorithm sections: FastTD3's keys move into algo.fast_td3
        recorded.algo = migrate_algo_config(OmegaConf.to_container(recorded.algo))
    saved = OmegaConf.merge(OmegaConf.structured(TrainConfig), recorded)
    overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("resume=")]
    fixed = ("task", "suite", "preset", "algo", "logger", "reward", "seed")
    refused = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in fixed]
    if refused:
        raise ConfigError(
            f"cannot change the task, config groups or seed of a resumed run ({', '.join(refused)}); "
            "override individual keys instead, e.g. total_steps=200000"
        )
    # `++key=v` (keys below free-form dicts, see add_to_free_form_dicts) set like `key=v`
    saved.merge_with_dotlist([o.lstrip("+") for o in overrides])
    saved.resume = cfg.resume
    return saved


def record_config(cfg: DictConfig, run_dir: Path) -> None:
    """The run's merged config, which resumes start from."""
    atomic_write_bytes(run_dir / RESOLVED_CONFIG, lambda f: f.write(OmegaConf.to_yaml(cfg, resolve=True).encode()))


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def record_overrides(run_dir: Path, overrides: list[str], resumed: bool) -> None:
    """overrides.yaml in the run folder: the command-line overrides (Hydra's task overrides,
    as Hydra received them) that made this run, e.g. one point of a sweep. A resume keeps the
    original list and replaces or adds the keys it overrides (its `resume=` is left out)."""
    path = run_dir / OVERRIDES_FILE
    current = [str(o) for o in overrides]
    if resumed:
        new = [o for o in current if _override_key(o) != "resume"]
        previous = [str(o) for o in OmegaConf.to_container(OmegaConf.load(path), resolve=False)] if path.is_file() else []
        changed = {_override_key(o) for o in new}
        current = [o for o in previous if _override_key(o) not in changed] + new
    atomic_write_bytes(path, lambda f: f.write(OmegaConf.to_yaml(OmegaConf.create(current)).encode()))


def build_and_train(cfg: TrainConfig, run_dir: Path, ranks: distributed.Context = distributed.SINGLE) -> dict[str, float]:
    """Make train and eval envs, restore a checkpoint when resuming, train (this rank's
    share of a torchrun job: its own envs and seeds)."""
    env_cfg = cfg.env
    device = distributed.rank_device(resolve_device(cfg.device), ranks)
    if ranks.enabled:
        cfg.device = str(device)
    seed = ranks.rank_seed(cfg.seed)
    say = print if ranks.is_main else (lambda *a, **k: None)
    env = make_env(env_cfg.suite, env_cfg.task, env_cfg.num_envs, seed, device, **env_cfg.adapter_options())
    say(f"Envs: {env!r}" + (f" on each of {ranks.world_size} ranks" if ranks.enabled else ""), flush=True)
    eval_env = None
    try:
        # e.g. backend=auto -> envpool: a resumed run and fast-td3-eval keep the same physics
        env_cfg.options.update(getattr(env, "resolved_options", {}))
        eval_options = env_cfg.adapter_options(evaluation=True)
        if cfg.eval_video:  # on every rank, so all evaluate on the same physics; rank 0 draws
            eval_options["render_mode"] = "rgb_array"
        if getattr(load_adapter(env_cfg.suite), "ONE_SIMULATION_PER_PROCESS", False):
            say(f"Eval envs: none ({env_cfg.suite} runs one simulation per process; evaluate checkpoints "
                "with fast-td3-eval)", flush=True)
        else:
            eval_env = make_env(env_cfg.suite, env_cfg.task, cfg.eval_episodes, eval_seed(seed), device, **eval_options)
            say(f"Eval envs: {eval_env!r}", flush=True)
        runner = Runner(cfg, env, eval_env, run_dir, ranks=ranks)
        precision = runner.agent.precision
        say(f"Precision: {precision}", flush=True)
        # what `auto` meant on this machine; a resume re-resolves on its own machine
        cfg.resolved.update(precision=precision.name, precision_reason=precision.reason,
                            torch_threads=torch.get_num_threads())
        if ranks.is_main:
            record_config(OmegaConf.structured(cfg), run_dir)
        if cfg.resume:
            checkpoint = find_checkpoint(cfg.resume)
            runner.load(checkpoint)
            say(f"Resuming {run_dir} from {checkpoint.name} (global step {runner.global_step})", flush=True)
        return runner.train()
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()


def _sweep_jobs_in_parallel(hydra_cfg) -> int:
    """Runs of this sweep executing at once (the joblib launcher's n_jobs), else 1."""
    n_jobs = OmegaConf.select(hydra_cfg, "launcher.n_jobs", default=None)
    if hydra_cfg.mode != RunMode.MULTIRUN or not isinstance(n_jobs, int):
        return 1
    return joblib_parallel_jobs(n_jobs, cores_available())


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    ranks = distributed.SINGLE
    try:
        if cfg.resume:
            find_checkpoint(cfg.resume)  # fail before touching the run folder
            cfg = _resumed_config(cfg)
        train_cfg: TrainConfig = OmegaConf.to_object(cfg)
        threads = thread_share(cores_available(), sweep_jobs=_sweep_jobs_in_parallel(hydra_cfg))
        apply_thread_share(threads)
        # after the resumed config: its device picks NCCL or gloo (SINGLE unless launched by torchrun)
        ranks = distributed.init(resolve_device(train_cfg.device))
        if not cfg.resume and (run_dir / RESOLVED_CONFIG).exists():
            raise ConfigError(
                f"{run_dir} already holds a run; continue it with resume={run_dir} or choose another folder"
            )
        distributed.barrier(ranks)  # every rank has checked before rank 0 writes config.yaml
        if ranks.is_main and threads.threads < cores_available():
            print(f"Torch threads: {threads}", flush=True)
        if train_cfg.eval_video:
            os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering, chosen before MuJoCo loads
            if importlib.util.find_spec("imageio_ffmpeg") is None:
                raise ConfigError('eval_video=true writes .mp4 videos with imageio-ffmpeg: pip install -e ".[video]"')
        if ranks.is_main:
            # A resumed run records its merged config too, so later resumes keep e.g. a new total_steps.
            record_config(cfg, run_dir)
            record_overrides(run_dir, list(hydra_cfg.overrides.task), resumed=bool(cfg.resume))
        full_size = hydra_cfg.runtime.choices.get("preset") is None and not cfg.resume
        if full_size and ranks.is_main and resolve_device(train_cfg.device).type == "cpu":
            print("Training at full size on a CPU: add preset=cpu for a laptop-sized run.", file=sys.stderr)
        final = build_and_train(train_cfg, run_dir, ranks)
    except USER_ERRORS as error:
        print(f"fast-td3-train: error: {error}", file=sys.stderr, flush=True)
        sys.exit(3 if isinstance(error, NonFiniteObservationError) else 2)
    except TrainingStopped as stopped:
        print(f"{stopped}. Continue with: fast-td3-train resume={run_dir}", file=sys.stderr, flush=True)
        sys.exit(128 + stopped.signum)
    except KeyboardInterrupt:  # a second Ctrl-C: aborted mid-step, no new checkpoint
        print(f"Aborted. Continue from the last checkpoint with: fast-td3-train resume={run_dir}",
              file=sys.stderr, flush=True)
        sys.exit(130)
    finally:
        distributed.shutdown(ranks)
    if ranks.is_main:
        print(f"Run folder: {run_dir}", flush=True)
    return final.get("eval/return_mean")


def task_suites() -> dict[str, str]:
    """Task presets in conf/task and the suite each one pulls in."""
    suites = {}
    for path in sorted((CONF_DIR / "task").glob("*.yaml")):
        defaults = OmegaConf.load(path).get("defaults") or []
        suite = next((str(d["/suite"]) for d in defaults if isinstance(d, DictConfig) and "/suite" in d), "?")
        suites[path.stem] = suite
    return suites


def _key_exists(schema: DictConfig, key: str) -> bool:
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


def _schema_keys(node: DictConfig, prefix: str = "") -> list[str]:
    out = []
    for name in node.keys():
        child = node[name]
        full = f"{prefix}{name}"
        out.append(full)
        if isinstance(child, DictConfig) and OmegaConf.get_type(child) is not dict:
            out.extend(_schema_keys(child, full + "."))
    return out


def _unknown_task_message(task: str, suites: dict[str, str]) -> str:
    by_suite: dict[str, list[str]] = {}
    for name, suite in suites.items():
        by_suite.setdefault(suite, []).append(name)
    hint = did_you_mean("task", task, list(suites), "fast-td3-train")
    listing = "\n".join(f"  {suite}: {', '.join(names)}" for suite, names in sorted(by_suite.items()))
    return f"{hint}\nValid tasks by suite (conf/task/):\n{listing}"


def check_command_line(args: list[str], suites: dict[str, str] | None = None) -> str | None:
    """An actionable message for an unknown task or a mistyped key, before Hydra composes.

    Only plain `key=value` overrides and plain task lists are checked; Hydra's own
    syntax (`+key`, `~key`, `hydra/...`, `choice(...)`, globs) is left to Hydra.
    """
    schema = OmegaConf.structured(TrainConfig)
    suites = suites or task_suites()
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if key == "resume" and value not in ("", "null") and not Path(value).expanduser().exists():
            return f"resume={value}: no such run folder or checkpoint file"
        if key.startswith(("+", "~", "hydra")) or "/" in key or key in ("suite", "preset", "algo", "logger", "reward"):
            continue
        if key == "task":
            if any(c in value for c in "()[]{}*?$"):  # sweep functions, globs, interpolations
                continue
            unknown = [task for task in value.split(",") if task not in suites]
            if unknown:
                return _unknown_task_message(unknown[0], suites)
        elif not _key_exists(schema, key):
            hint = did_you_mean("config key", key, _schema_keys(schema), "fast-td3-train")
            return hint + " `fast-td3-train --help` lists every key."
    return None


def missing_suite(args: list[str], suites: dict[str, str]) -> str | None:
    """The install commands of a named task's suite when it is not installed, before Hydra
    makes a run folder (tasks from presets; other spellings are checked when envs are built)."""
    for arg in args:
        if arg.startswith("task=") and not any(c in arg for c in "()[]{}*?$"):
            for task in arg.split("=", 1)[1].split(","):
                if suites.get(task) in SUITES:
                    try:
                        require_suite(SUITES[suites[task]])
                    except MissingSuiteError as error:
                        return str(error)
    return None


HELP = """fast-td3-train: train FastTD3 on one task (Hydra; overrides are key=value).

  fast-td3-train task=HalfCheetah-v5 preset=cpu seed=3
  fast-td3-train -m task=Hopper-v5,Walker2d-v5 seed=1,2      sweep (one run after another)
  fast-td3-train -m hydra/launcher=joblib hydra.launcher.n_jobs=2 seed=1,2
                                                             2 runs at a time (pip install hydra-joblib-launcher)
  fast-td3-report runs/sweeps/<sweep>                        compare a sweep's runs in one HTML page
  fast-td3-train resume=runs/<task>/<run> [total_steps=N]    continue a run
  fast-td3-train --cfg job [overrides]                       print the composed config
  fast-td3-train --hydra-help                                Hydra's own options

Config groups (conf/):
{groups}

Keys (schema default -- task and preset files change some, see --cfg job -- then what it is):
{keys}
"""


def help_text() -> str:
    groups = "\n".join(
        f"  {group}: {', '.join(sorted(p.stem for p in (CONF_DIR / group).glob('*.yaml')))}"
        for group in ("task", "preset", "reward", "logger", "algo", "suite")
    )
    keys = "\n".join(f"  {key} = {default}\n      {doc}" for key, default, doc in describe_fields(TrainConfig))
    return HELP.format(groups=groups, keys=keys)


def cli() -> None:
    """Console-script entry point: our help and friendly checks first, then Hydra."""
    args = sys.argv[1:]
    if "--help" in args or "-h" in args:
        print(help_text())
        return
    suites = task_suites()
    problem = check_command_line(args, suites)
    if problem is None and not {"--cfg", "-c", "--info", "--hydra-help"} & set(args):
        problem = missing_suite(args, suites)
    if problem:
        print(f"fast-td3-train: error: {problem}", file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = [add_to_free_form_dicts(arg) for arg in args]
    if distributed.launched_by_torchrun():
        if "-m" in args or "--multirun" in args:
            print("fast-td3-train: error: a sweep (-m) cannot run under torchrun; launch one torchrun job per run",
                  file=sys.stderr)
            sys.exit(2)
        sys.argv[1:] += distributed.hydra_overrides(args)
    main()


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


if __name__ == "__main__":
    cli()
