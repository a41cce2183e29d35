"""`fast-td3-train`: compose the config with Hydra, build the envs, run the runner.

    fast-td3-train task=HalfCheetah-v5 preset=cpu seed=3
    fast-td3-train -m seed=1,2,3                       # a sweep, one run after another
    fast-td3-train resume=runs/HalfCheetah-v5/<run>    # continue a run (plain key overrides allowed)
    fast-td3-train --cfg job                           # print the composed config

This module is the composition root: the only place that knows the config, the env
registry and the runner together. Before Hydra makes a run folder, `preflight` composes
and validates the config, checks the device and the checkpoint a resume continues from,
and claims and locks the run folder (`run_folder`); a mistake in a key, value or path is
reported in one line before torch, JAX or a suite is imported (docs/resume.md, "Exit codes").
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

# Nothing imported here pulls in torch, JAX or a suite: every check of the command line and
# the config runs (and fails, in about a second) before those heavy imports.
from envs.protocol import optional_attribute, suite_hook
from envs.registry import EnvOptionError, MissingSuiteError, UnknownTaskError, load_adapter, make_env
from fast_td3.training.checkpoint import (
    CheckpointError, CheckpointManager, CheckpointWriteError, atomic_write_bytes, has_checkpoints, pick_for_resume,
    run_dir_of,
)
from fast_td3.learner.config import ConfigError
from fast_td3.training.config import TrainConfig, describe_fields, register_configs
from fast_td3.learner.device import DeviceError
from envs.quiet import silence_library_noise
from fast_td3.training.threads import apply_thread_share, cores_available, joblib_parallel_jobs, thread_share
from fast_td3.training import cluster
from fast_td3.training.cli_checks import (  # noqa: F401  (CONF_DIR, task_suites: also read by scripts and tests)
    CONF_DIR, check_command_line, missing_suite, split_config_dirs, task_suites,
)
from fast_td3.training.config_checks import check_replay_memory, check_values
from fast_td3.training.preflight import (
    LAUNCH, RESOLVED_CONFIG, check_sweep, claim, override_key as _override_key, preflight,
    resumed_config as _resumed_config, video_problem as _video_problem,
)
from fast_td3.training.run_folder import (  # noqa: F401  (claim_run_dir: also read by tests)
    RunLock, claim_run_dir, discard, override_value, shell_arg, signal_exit_code, stop_name, stop_with_exception_on_sigterm,
)

OVERRIDES_FILE = "overrides.yaml"
# Exit codes (docs/resume.md, "Exit codes"); 1 is left to Python for our own bugs (with a traceback).
EXIT_USER_ERROR, EXIT_NON_FINITE, EXIT_WRITE_ERROR = 2, 3, 4
# Errors a user can act on from their message alone: printed without a traceback.
USER_ERRORS = (
    ConfigError, MissingSuiteError, UnknownTaskError, CheckpointError, FileNotFoundError, EnvOptionError,
)


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
        check_replay_memory(cfg, env, device, warn=lambda line: say(line, file=sys.stderr, flush=True))
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
    if not resumed and cluster.continues_run(hydra_cfg, run_dir, overrides):  # a requeued or retried cluster job
        cfg.resume, overrides, resumed = str(run_dir), [], True  # continues as resume=<its run folder>
    try:
        if resumed:
            cfg = _resumed_config(cfg, overrides)
        train_cfg: TrainConfig = OmegaConf.to_object(cfg)
        check_values(train_cfg)
        silence_library_noise(train_cfg.env.suite)
        threads = thread_share(cores_available(), sweep_jobs=_sweep_jobs_in_parallel(hydra_cfg),
                               granted=cluster.granted_cpus(hydra_cfg))
        apply_thread_share(threads)
        # after the resumed config: its device picks NCCL or gloo (SINGLE unless launched by torchrun)
        ranks = distributed.init(resolve_device(train_cfg.device))
        if ranks.is_main:
            _hold(run_dir)  # the folders preflight left to Hydra: sweeps' jobs, torchrun's, cluster jobs
        if not resumed and has_checkpoints(run_dir):
            raise ConfigError(f"{run_dir} already holds a run; continue it with resume= "
                              f"(fast-td3-train {shell_arg('resume', run_dir)}), or choose another folder")
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
        _training_over()
    except (*USER_ERRORS, DeviceError, NonFiniteObservationError, CheckpointMismatchError) as error:
        print(f"fast-td3-train: error: {error}", file=sys.stderr, flush=True)
        if not resumed and ranks.is_main:
            _discard_new_run(run_dir)
        elif resumed and LAUNCH.lock is not None:
            LAUNCH.lock.release(remove_file=True)  # a refused resume leaves the folder as it was
        sys.exit(EXIT_NON_FINITE if isinstance(error, NonFiniteObservationError) else EXIT_USER_ERROR)
    except CheckpointWriteError as error:
        print(f"fast-td3-train: error: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_WRITE_ERROR)
    except TrainingStopped as stopped:
        print(f"{stopped}. Continue with: fast-td3-train {shell_arg('resume', run_dir)}", file=sys.stderr, flush=True)
        # Under torchrun every rank stopped at this step; none exits before all have reported, since
        # torchrun's agent sends SIGTERM to the other ranks once one exits (past the stop handlers).
        distributed.barrier(ranks)
        cluster.hand_back_preemption(stopped.signum)  # SIGUSR2 under submitit: it requeues and exits
        sys.exit(128 + stopped.signum)
    except KeyboardInterrupt as interrupt:  # a second Ctrl-C (aborted mid-step), or Ctrl-C/SIGTERM before training
        if has_checkpoints(run_dir):
            print(f"{stop_name(interrupt)}. Continue from the last checkpoint with: fast-td3-train "
                  f"{shell_arg('resume', run_dir)}", file=sys.stderr, flush=True)
        else:
            gone = ranks.is_main and _discard_new_run(run_dir)
            print(f"{stop_name(interrupt)} before the first checkpoint: nothing to resume"
                  + (f"; {run_dir} {'was removed' if LAUNCH.created else 'is empty again'}" if gone else ""),
                  file=sys.stderr, flush=True)
        sys.exit(signal_exit_code(interrupt))
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


HELP = """fast-td3-train: train FastTD3 or FastSAC (algo=fast_sac) on one task (Hydra; overrides are key=value).

  fast-td3-train task=HalfCheetah-v5 preset=cpu seed=3
  fast-td3-train -m task=Hopper-v5,Walker2d-v5 seed=1,2      sweep (one run after another)
  fast-td3-train -m hydra/launcher=joblib hydra.launcher.n_jobs=2 seed=1,2
                                                             2 runs at a time (pip install hydra-joblib-launcher)
  fast-td3-report runs/sweeps/<sweep>                        compare a sweep's runs in one HTML page
  fast-td3-train resume=runs/<task>/<run> [total_steps=N]    continue a run (from its latest checkpoint)
  fast-td3-train logger=tensorboard ...                      also TensorBoard files: tensorboard --logdir <run>
  fast-td3-train --cfg job [overrides]                       print the composed config
  fast-td3-train --config-dir myconf preset=mine             your own presets and tasks (myconf/preset/mine.yaml)
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
        for group in ("task", "preset", "reward", "logger", "algo", "suite", "gate")
    )
    keys = "\n".join(f"  {key} = {default}\n      {doc}" for key, default, doc in describe_fields(TrainConfig))
    return HELP.format(groups=groups, keys=keys)


def _hold(run_dir: Path) -> None:
    """Lock `run_dir` for this process unless it already holds it (a sweep's next job lets go of
    the previous job's folder); ConfigError naming the PID of another holder."""
    if LAUNCH.lock is not None and LAUNCH.lock.fd >= 0 and LAUNCH.lock.folder.resolve() == run_dir.resolve():
        return
    if LAUNCH.lock is not None:
        LAUNCH.lock.release()
    LAUNCH.lock = RunLock.acquire(run_dir)


def _discard_new_run(run_dir: Path) -> bool:
    """Remove what this command made for a new run that stopped before its first checkpoint
    (only the folder it claimed and holds; never another process's, never a checkpoint)."""
    mine = LAUNCH.new_folder is not None and LAUNCH.lock is not None and LAUNCH.lock.fd >= 0
    if not mine or run_dir.resolve() != LAUNCH.new_folder.resolve():
        return False
    return discard(run_dir, LAUNCH.created)


def _training_over() -> None:
    """From here a SIGTERM ends the process as usual (until training, it unwinds: see cli)."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:  # not the main thread
            pass


def _fail(message: str) -> None:
    print(f"fast-td3-train: error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USER_ERROR)


def cli() -> None:
    """Console-script entry point: our help and friendly checks first, then Hydra."""
    stop_with_exception_on_sigterm()  # until training starts (main handles its own)
    try:
        _cli(sys.argv[1:])
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM while starting up
        if LAUNCH.resume_from is not None:
            print(f"{stop_name(interrupt)} before training resumed; the run is as it was. Continue it with: "
                  f"fast-td3-train {shell_arg('resume', run_dir_of(LAUNCH.resume_from))}", file=sys.stderr, flush=True)
        else:
            if LAUNCH.new_folder is not None:
                _discard_new_run(LAUNCH.new_folder)
            print(f"{stop_name(interrupt)} before training started: nothing to resume, no run folder kept.",
                  file=sys.stderr, flush=True)
        sys.exit(signal_exit_code(interrupt))


def _cli(args: list[str]) -> None:
    if "--help" in args or "-h" in args:
        print(help_text())
        return
    try:
        config_dirs, plain_args = split_config_dirs(args)
    except ConfigError as error:
        _fail(str(error))
    suites = task_suites(config_dirs)
    problem = check_command_line(plain_args, suites, config_dirs)
    info_only = bool({"--cfg", "-c", "--info", "--hydra-help", "--shell-completion", "-sc"} & set(args))
    if problem is None and not info_only:
        problem = missing_suite(plain_args, suites) or cluster.launcher_problem(args)
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
    # (--config-dir is seen by the checks); with one, the run folder is still claimed and locked
    _, plain_args = split_config_dirs(args)
    flags = [arg for arg in plain_args if arg.startswith("-") and arg not in ("-r", "--run", "-m", "--multirun")]
    overrides = [arg for arg in plain_args if not arg.startswith("-")]
    try:
        if not flags:
            check_sweep(overrides, config_dirs) if multirun else preflight(overrides, config_dirs)
        elif not info_only and not multirun:
            resume = next((override_value(o) for o in overrides if o.startswith("resume=")), None)
            claim(overrides, None if resume in ("", "null", "None") else resume)
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
