"""`fast-td3-train`: compose the config with Hydra, build the envs, run the runner.

    fast-td3-train task=HalfCheetah-v5 preset=cpu seed=3
    fast-td3-train -m seed=1,2,3                       # a sweep, one run after another
    fast-td3-train resume=runs/HalfCheetah-v5/<run>    # continue a run (plain key overrides allowed)
    fast-td3-train --cfg job                           # print the composed config

This module is the composition root: the only place that knows the config, the env
registry and the runner together. Before Hydra makes a run folder, `preflight` composes
and validates the config, checks the device and the checkpoint a resume continues from,
and claims a uniquely named folder; a mistake in a key, value or path is reported in one
line before torch, JAX or a suite is imported (docs/resume.md, "Exit codes").
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

# Nothing imported here pulls in torch, JAX or a suite: every check of the command line and
# the config runs (and fails, in about a second) before those heavy imports.
from envs.protocol import optional_attribute, suite_hook
from envs.registry import (
    SUITES, EnvOptionError, MissingSuiteError, UnknownTaskError, did_you_mean, load_adapter, make_env,
    require_suite,
)
from fast_td3.training.checkpoint import (
    CheckpointError, CheckpointManager, CheckpointWriteError, atomic_write_bytes, check_matches, has_checkpoints,
    pick_for_resume, run_dir_of,
)
from fast_td3.learner.config import ConfigError, migrate_algo_config
from fast_td3.training.config import TrainConfig, describe_fields, register_configs
from fast_td3.learner.device import DeviceError
from envs.quiet import silence_library_noise
from fast_td3.training.threads import apply_thread_share, cores_available, joblib_parallel_jobs, thread_share

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
RESOLVED_CONFIG = "config.yaml"
OVERRIDES_FILE = "overrides.yaml"
GROUPS = ("suite", "preset", "algo", "logger", "reward")
# Exit codes (docs/resume.md, "Exit codes"); 1 is left to Python for our own bugs (with a traceback).
EXIT_USER_ERROR, EXIT_NON_FINITE, EXIT_WRITE_ERROR = 2, 3, 4
# Errors a user can act on from their message alone: printed without a traceback.
USER_ERRORS = (
    ConfigError, MissingSuiteError, UnknownTaskError, CheckpointError, FileNotFoundError, EnvOptionError,
)


@dataclass
class Launch:
    """What the checks before Hydra decided for this command; `main` and the resolvers read it."""

    run_dir: Path | None = None
    """The new run folder claimed for this run (a unique name, made before Hydra runs)."""
    created: Path | None = None
    """The topmost folder this command creates: the folders it made are removed again when the
    run fails on a user error before its first checkpoint."""
    resume_from: Path | None = None
    """The checkpoint a resume continues from (the newest one that reads)."""
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    """Newer checkpoints of the resumed run that cannot be read, each with the reason."""


LAUNCH = Launch()


def _no_resume(resume) -> bool:
    return resume in (None, "", "null", "None")


def _run_dir(resume, default: str) -> str:
    """Hydra's run folder: the resumed run's own folder, else the one claimed for this run."""
    if not _no_resume(resume):
        return str(run_dir_of(str(resume)))
    return str(LAUNCH.run_dir) if LAUNCH.run_dir is not None else default


def _hydra_subdir(resume, timestamp: str) -> str | None:
    """Where Hydra records this invocation's config and overrides inside the run folder. A
    resume records its own (`.hydra/resumed_<time>/`) only once its checkpoint has loaded,
    so a resume that fails leaves the run folder as it was."""
    return ".hydra" if _no_resume(resume) else None


register_configs()
for _name, _resolver in (("run_dir", _run_dir), ("hydra_subdir", _hydra_subdir)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _resumed_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The resumed run's saved config with this command's plain `key=value` overrides on top."""
    run_dir = run_dir_of(cfg.resume)
    saved_path = run_dir / RESOLVED_CONFIG
    if not saved_path.is_file():
        raise FileNotFoundError(f"cannot resume: {saved_path} is missing (is {run_dir} a fast-td3 run folder?)")
    recorded = OmegaConf.load(saved_path)
    if "algo" in recorded:  # runs from before the per-algorithm sections: FastTD3's keys move into algo.fast_td3
        recorded.algo = migrate_algo_config(OmegaConf.to_container(recorded.algo))
    saved = OmegaConf.merge(OmegaConf.structured(TrainConfig), recorded)
    overrides = [o for o in overrides if _override_key(o) != "resume" and not _override_key(o).startswith("hydra")]
    fixed = ("task", *GROUPS, "seed")
    refused = [o for o in overrides if _override_key(o) in fixed]
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


def _write_yaml(path: Path, node) -> None:
    atomic_write_bytes(path, lambda f: f.write(OmegaConf.to_yaml(node).encode()))


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
    _write_yaml(path, OmegaConf.create(current))


def record_run(cfg: DictConfig, run_dir: Path, overrides: list[str], resumed: bool) -> None:
    """config.yaml and overrides.yaml of a run that is about to train; a resume also keeps its own
    record in `.hydra/resumed_<time>/` (what Hydra writes into `.hydra/` for a new run)."""
    record_config(cfg, run_dir)
    record_overrides(run_dir, overrides, resumed)
    if resumed:
        record = run_dir / ".hydra" / f"resumed_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
        _write_yaml(record / "config.yaml", cfg)
        _write_yaml(record / OVERRIDES_FILE, OmegaConf.create([str(o) for o in overrides]))


def build_and_train(cfg: TrainConfig, run_dir: Path, ranks=None, on_ready=None,
                    resume_from: Path | None = None) -> dict[str, float]:
    """Make train and eval envs, restore a checkpoint when resuming, call `on_ready()` (the
    config now holds what the adapter and the learner settled: backend, precision, threads),
    train (this rank's share of a torchrun job: its own envs and seeds)."""
    import torch

    from fast_td3.training import distributed
    from fast_td3.learner.device import resolve_device
    from fast_td3.training.evaluation import eval_seed
    from fast_td3.training.runner import Runner

    ranks = ranks or distributed.SINGLE
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
        env_cfg.options.update(optional_attribute(env, "resolved_options"))
        eval_options = env_cfg.adapter_options(evaluation=True)
        if cfg.eval_video:  # on every rank, so all evaluate on the same physics; rank 0 draws
            eval_options["render_mode"] = "rgb_array"
        if suite_hook(load_adapter(env_cfg.suite), "ONE_SIMULATION_PER_PROCESS"):
            say(f"Eval envs: none ({env_cfg.suite} runs one simulation per process; evaluate checkpoints "
                "with fast-td3-eval)", flush=True)
        else:
            eval_env = make_env(env_cfg.suite, env_cfg.task, cfg.eval_episodes, eval_seed(seed), device, **eval_options)
            say(f"Eval envs: {eval_env!r}", flush=True)
        runner = Runner(cfg, env, eval_env, run_dir, ranks=ranks)
        precision = runner.agent.precision
        say(f"Precision: {precision}", flush=True)
        # what `auto` meant on this machine (recorded by on_ready); a resume re-resolves on its own
        cfg.resolved.update(precision=precision.name, precision_reason=precision.reason,
                            torch_threads=torch.get_num_threads())
        if cfg.resume:
            checkpoint = resume_from or pick_for_resume(cfg.resume)[0]
            runner.load(checkpoint)
            say(f"Resuming {run_dir} from {checkpoint.name} (global step {runner.global_step})", flush=True)
        if on_ready is not None:
            on_ready()
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


def _video_problem(cfg) -> str | None:
    if cfg.eval_video and importlib.util.find_spec("imageio_ffmpeg") is None:
        return 'eval_video=true writes .mp4 videos with imageio-ffmpeg: pip install -e ".[video]"'
    return None


def _discard_new_run(run_dir: Path) -> None:
    """Remove the folders this command made for a run that failed before its first checkpoint."""
    if LAUNCH.created is None or has_checkpoints(run_dir) or not run_dir.is_dir():
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in run_dir.parents:  # the empty parents it made (another run's folder stops this)
        if not parent.is_relative_to(LAUNCH.created):
            break
        try:
            parent.rmdir()
        except OSError:
            break


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    from fast_td3.training import distributed
    from fast_td3.learner.device import resolve_device
    from fast_td3.training.runner import CheckpointMismatchError, NonFiniteObservationError, TrainingStopped

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    overrides = list(hydra_cfg.overrides.task)
    ranks = distributed.SINGLE
    resumed = bool(cfg.resume)
    try:
        if resumed:
            cfg = _resumed_config(cfg, overrides)
        train_cfg: TrainConfig = OmegaConf.to_object(cfg)
        silence_library_noise(train_cfg.env.suite)
        threads = thread_share(cores_available(), sweep_jobs=_sweep_jobs_in_parallel(hydra_cfg))
        apply_thread_share(threads)
        # after the resumed config: its device picks NCCL or gloo (SINGLE unless launched by torchrun)
        ranks = distributed.init(resolve_device(train_cfg.device))
        if not resumed and has_checkpoints(run_dir):
            raise ConfigError(
                f"{run_dir} already holds a run; continue it with resume={run_dir} or choose another folder"
            )
        distributed.barrier(ranks)  # every rank has checked before rank 0 writes config.yaml
        if ranks.is_main and threads.threads < cores_available():
            print(f"Torch threads: {threads}", flush=True)
        if train_cfg.eval_video:
            os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering, chosen before MuJoCo loads
            if _video_problem(train_cfg):
                raise ConfigError(_video_problem(train_cfg))
        if resumed and ranks.is_main and LAUNCH.unreadable:
            moved = CheckpointManager(run_dir).set_aside_unreadable([path for path, _ in LAUNCH.unreadable])
            for (path, why), where in zip(LAUNCH.unreadable, moved):
                print(f"fast-td3-train: {path.name} cannot be read ({why}); moved to {where} and "
                      f"resuming from {LAUNCH.resume_from.name}", file=sys.stderr, flush=True)
        full_size = hydra_cfg.runtime.choices.get("preset") is None and not resumed
        if full_size and ranks.is_main and resolve_device(train_cfg.device).type == "cpu":
            print("Training at full size on a CPU: add preset=cpu for a laptop-sized run.", file=sys.stderr)

        def ready() -> None:
            # A resumed run records its merged config too, so later resumes keep e.g. a new total_steps.
            if ranks.is_main:
                record_run(OmegaConf.structured(train_cfg), run_dir, overrides, resumed)

        final = build_and_train(train_cfg, run_dir, ranks, ready, LAUNCH.resume_from)
    except (*USER_ERRORS, DeviceError, NonFiniteObservationError, CheckpointMismatchError) as error:
        print(f"fast-td3-train: error: {error}", file=sys.stderr, flush=True)
        if not resumed and ranks.is_main:
            _discard_new_run(run_dir)
        sys.exit(EXIT_NON_FINITE if isinstance(error, NonFiniteObservationError) else EXIT_USER_ERROR)
    except CheckpointWriteError as error:
        print(f"fast-td3-train: error: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_WRITE_ERROR)
    except TrainingStopped as stopped:
        print(f"{stopped}. Continue with: fast-td3-train resume={run_dir}", file=sys.stderr, flush=True)
        # Under torchrun every rank stopped at this step; none exits before all have reported, since
        # torchrun's agent sends SIGTERM to the other ranks once one exits (past the stop handlers).
        distributed.barrier(ranks)
        sys.exit(128 + stopped.signum)
    except KeyboardInterrupt:  # a second Ctrl-C (aborted mid-step, no new checkpoint), or one before training
        if has_checkpoints(run_dir):
            print(f"Aborted. Continue from the last checkpoint with: fast-td3-train resume={run_dir}",
                  file=sys.stderr, flush=True)
        else:
            print(f"Aborted before the first checkpoint: nothing to resume. {run_dir} can be removed, or "
                  f"trained into again with hydra.run.dir={run_dir}", file=sys.stderr, flush=True)
        sys.exit(130)
    finally:
        distributed.shutdown(ranks)
    if ranks.is_main:
        print(finished_run_summary(train_cfg, run_dir, final, hydra_cfg), flush=True)
    return final.get("eval/return_mean")


def finished_run_summary(cfg: TrainConfig, run_dir: Path, final: dict[str, float], hydra_cfg) -> str:
    """The last lines of a run: final and best evaluation, the run folder, the commands that come next."""
    from fast_td3.training.run_summary import FinishedRun, summary

    sweep_dir = run_dir.parent if hydra_cfg.mode == RunMode.MULTIRUN else None
    return summary(FinishedRun(
        run_dir=run_dir, task=cfg.env.task, total_steps=cfg.total_steps, final_eval=final,
        tensorboard=cfg.logger.tensorboard, has_viewer=suite_hook(load_adapter(cfg.env.suite), "view") is not None,
        sweep_dir=sweep_dir))


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
        if key.startswith("+") and not key.lstrip("+").startswith("hydra"):
            key = key.lstrip("+")  # `+key=v` adds a key; the schema has every key there is
        if key == "resume" and value not in ("", "null") and not Path(value).expanduser().exists():
            return f"resume={value}: no such run folder or checkpoint file"
        if key in GROUPS:
            problem = _unknown_group_option(key, value)
            if problem:
                return problem
            continue
        if key.startswith(("+", "~", "hydra")) or "/" in key:
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


HELP = """fast-td3-train: train FastTD3 or FastSAC (algo=fast_sac) on one task (Hydra; overrides are key=value).

  fast-td3-train task=HalfCheetah-v5 preset=cpu seed=3
  fast-td3-train -m task=Hopper-v5,Walker2d-v5 seed=1,2      sweep (one run after another)
  fast-td3-train -m hydra/launcher=joblib hydra.launcher.n_jobs=2 seed=1,2
                                                             2 runs at a time (pip install hydra-joblib-launcher)
  fast-td3-report runs/sweeps/<sweep>                        compare a sweep's runs in one HTML page
  fast-td3-train resume=runs/<task>/<run> [total_steps=N]    continue a run (from its latest checkpoint)
  fast-td3-train logger=tensorboard ...                      also TensorBoard files: tensorboard --logdir <run>
  fast-td3-train --cfg job [overrides]                       print the composed config
  fast-td3-train --hydra-help                                Hydra's own options

A run keeps checkpoints/best.pt (its best evaluation) beside the newest step_<N>.pt files:
fast-td3-eval, -play and -export take best.pt from a run folder (--use latest / use=latest: the newest).

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


def _unknown_group_option(group: str, value: str) -> str | None:
    """`logger=nope`: the nearest option of the group and all of them (from conf/<group>/)."""
    if any(c in value for c in "()[]{}*?$"):  # sweep functions, globs, interpolations
        return None
    options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    for choice in value.split(","):
        if choice not in options and choice != "null":
            return (f"{did_you_mean(f'{group} option', choice, options, 'fast-td3-train')} "
                    f"Options of {group} (conf/{group}/): {', '.join(options)}, null")
    return None


# OmegaConf's "could not be converted to X" / "is not a valid y" -> what the key takes
_CONVERSIONS = {("Integer", "int"): "an integer", ("Float", "float"): "a number", ("Boolean", "bool"): "true or false"}


def _hydra_problem(error: Exception, overrides: list[str]) -> str:
    """One line for an error Hydra or OmegaConf raised while composing `overrides`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    if isinstance(error, OverrideParseException):
        parser = OverridesParser.create()
        for override in overrides:
            try:
                parser.parse_overrides([override])
            except OverrideParseException as bad:
                why = str(bad).splitlines()[0]
                return (f"malformed override {override!r} ({why}); write key=value, e.g. algo.gamma=0.99 "
                        "or algo.actor_hidden_dims=[256,128]")
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    cause = error.__cause__
    if message.startswith("Error merging override ") and cause is not None:
        override = message.removeprefix("Error merging override ")
        detail = str(cause).splitlines()[0]
        for (kind, short), wanted in _CONVERSIONS.items():
            if detail.endswith(f"could not be converted to {kind}") or f"is not a valid {short} " in detail:
                return f"{override}: {_override_key(override)} takes {wanted}"
        return f"{override}: {detail}"
    return message


def compose_config(overrides: list[str]) -> DictConfig:
    """The config Hydra will compose for these overrides (its own `hydra.*` ones left out);
    ConfigError with one line when Hydra refuses them."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    plain = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="train"):
            return compose("train", overrides=plain)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_hydra_problem(error, plain)) from None


def _topmost_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (None when `path` exists)."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            return missing
        missing = folder
    return missing


def _make_folder(path: Path, what: str) -> None:
    """Create `path` (and its parents); ConfigError naming `what` when the OS refuses."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"{what}: cannot create {path}: {error.strerror or error}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {path} is not writable")


def claim_run_dir(root: Path, stamp: str, seed: int) -> Path:
    """A new folder `root/<stamp>_<seed>` (`-2`, `-3`, ... on a clash), made here: two runs
    launched in the same second never share a folder."""
    for attempt in range(1, 10_000):
        path = root / (f"{stamp}_{seed}" if attempt == 1 else f"{stamp}_{seed}-{attempt}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as error:
            raise ConfigError(f"out_dir: cannot create the run folder {path}: {error.strerror or error}") from None
    raise ConfigError(f"out_dir: no free run folder name under {root}")


def validated(cfg: DictConfig) -> TrainConfig:
    """The typed config; ConfigError (one line naming the field) when a value cannot work."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as error:  # OmegaConf's own validation, e.g. a missing value
        raise ConfigError(str(error).splitlines()[0]) from None


MAX_SWEEP_CHECKS = 64


def check_sweep(overrides: list[str]) -> None:
    """Every value of a sweep (`-m`) composes and validates, each with the other keys at their
    first value, before Hydra makes the sweep's folder. Intervals and globs are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
        raise ConfigError(_hydra_problem(error, overrides)) from None
    choices = []
    for override in parsed:
        if override.is_hydra_override():
            continue
        if not override.is_sweep_override():
            values = [override.get_value_element_as_str()]
        elif override.is_discrete_sweep() and override.value_type != ValueType.GLOB_CHOICE_SWEEP:
            values = list(override.sweep_string_iterator())
        else:
            return
        choices.append((override.get_key_element(), values))
    first = [f"{key}={values[0]}" for key, values in choices]
    variants = [first] + [first[:i] + [f"{key}={value}"] + first[i + 1:]
                          for i, (key, values) in enumerate(choices) for value in values[1:]]
    for variant in variants[:MAX_SWEEP_CHECKS]:
        validated(compose_config(variant))


def preflight(overrides: list[str]) -> None:
    """Every check a run can make before Hydra makes its folder: compose and validate the config
    (a resume: its saved config and a checkpoint that reads and belongs to it), the device, the
    folder; then claim a new run folder. Raises a user error; records its decisions in LAUNCH."""
    cfg = compose_config(overrides)
    explicit = next((o.split("=", 1)[1] for o in overrides if o.startswith("hydra.run.dir=")), None)
    if cfg.resume:
        LAUNCH.resume_from, state, LAUNCH.unreadable = pick_for_resume(cfg.resume)
        cfg = _resumed_config(cfg, overrides)
        check_matches(state, OmegaConf.to_container(cfg, resolve=True), LAUNCH.resume_from)
    train_cfg = validated(cfg)
    if train_cfg.device not in ("auto", "cpu"):
        from fast_td3.learner.device import resolve_device

        resolve_device(train_cfg.device)  # DeviceError: the devices this machine has
    if _video_problem(train_cfg):
        raise ConfigError(_video_problem(train_cfg))
    if cfg.resume:
        return
    if explicit is not None:
        if "$" in explicit:  # e.g. torchrun's folder from interpolations: checked when Hydra resolves it
            return
        folder = Path(explicit).expanduser()
        if has_checkpoints(folder):
            raise ConfigError(f"{folder} already holds a run; continue it with resume={folder} "
                              "or choose another folder")
        LAUNCH.created = _topmost_missing(folder.absolute())
        _make_folder(folder, "hydra.run.dir")
        return
    root = Path(train_cfg.out_dir).expanduser().absolute() / train_cfg.env.task
    created = _topmost_missing(root)
    _make_folder(root, f"out_dir={train_cfg.out_dir}")
    LAUNCH.run_dir = claim_run_dir(root, time.strftime("%Y-%m-%d_%H-%M-%S"), train_cfg.seed)
    LAUNCH.created = created or LAUNCH.run_dir


def _fail(message: str) -> None:
    print(f"fast-td3-train: error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USER_ERROR)


def cli() -> None:
    """Console-script entry point: our help and friendly checks first, then Hydra."""
    try:
        _cli(sys.argv[1:])
    except KeyboardInterrupt:  # Ctrl-C while starting up (main handles its own)
        if LAUNCH.run_dir is not None:
            _discard_new_run(LAUNCH.run_dir)
        print("Aborted before training started: nothing to resume.", file=sys.stderr, flush=True)
        sys.exit(130)


def _cli(args: list[str]) -> None:
    if "--help" in args or "-h" in args:
        print(help_text())
        return
    suites = task_suites()
    problem = check_command_line(args, suites)
    info_only = bool({"--cfg", "-c", "--info", "--hydra-help", "--shell-completion", "-sc"} & set(args))
    if problem is None and not info_only:
        problem = missing_suite(args, suites)
    if problem:
        _fail(problem)
    args = [add_to_free_form_dicts(arg) for arg in args]
    multirun = "-m" in args or "--multirun" in args
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from fast_td3.training import distributed

        if distributed.launched_by_torchrun():
            if multirun:
                _fail("a sweep (-m) cannot run under torchrun; launch one torchrun job per run")
            args += distributed.hydra_overrides(args)
    # Hydra's flags that change what is composed (--config-name, ...) leave the checks to main
    flags = [arg for arg in args if arg.startswith("-") and arg not in ("-r", "--run", "-m", "--multirun")]
    if not flags:
        try:
            overrides = [arg for arg in args if not arg.startswith("-")]
            check_sweep(overrides) if multirun else preflight(overrides)
        except (*USER_ERRORS, DeviceError) as error:
            _fail(str(error))
    sys.argv[1:] = args
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
