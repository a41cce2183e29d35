"""`fast-td3-train`: compose the config with Hydra, build the envs, run the runner.

    fast-td3-train task=HalfCheetah-v5 seed=3          # sizing=cpu|gpu detected (training.sizing)
    fast-td3-train recipe=t1 seed=0                    # the T1 recipe
    fast-td3-train -m seed=1,2,3                       # a sweep, one run after another
    fast-td3-train resume=runs/HalfCheetah-v5/<run>    # continue a run (plain key overrides allowed)
    fast-td3-train --cfg job                           # print the composed config
    torchrun --nproc_per_node=2 -m fast_td3.training.train ...

The entry points: `cli` (`python -m`; the console script, `start.cli`, defers Ctrl-C and SIGTERM
before importing this module) and `main`, Hydra's task function, which ends every run through one
table from errors to exit codes (docs/resume.md, "Exit codes"). Until training starts a signal
stops the command at the points that call `stop_if_asked` (`startup_signals`).
The parts, each in a module of its own: the command line up to Hydra (`train_cli`: its checks in
`cli_checks` and `preflight`, reported in one line before torch, JAX or a suite is imported), run
folders (`run_folder`), what a run records (`recording`) and the composition root (`compose`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from fast_td3.learner.device import DeviceError
from fast_td3.training import cluster
from fast_td3.training.checkpoint import CheckpointMismatchError, CheckpointWriteError, has_checkpoints, run_dir_of
from fast_td3.training.cli_checks import CONF_DIR
from fast_td3.training.compose import RunContext, run_training
from fast_td3.training.config import register_configs
from fast_td3.training.preflight import Launch, register_resolvers
from fast_td3.training.run_folder import shell_arg
from fast_td3.training.startup_signals import (
    defer_stops, restore_handlers, signal_exit_code, stop_if_asked, stop_name,
)
from fast_td3.training.train_cli import EXIT_NON_FINITE, EXIT_USER_ERROR, EXIT_WRITE_ERROR, USER_ERRORS, hydra_args

register_configs()
register_resolvers()  # conf/train.yaml names the run folder through them (a command's own: `run`)

BY_SIGNAL = None
"""The exit code of a stop by a signal: 128 + the signal (143 for SIGTERM, 130 for Ctrl-C)."""


def _say_error(error: BaseException, run: RunContext) -> None:
    print(f"fast-td3-train: error: {error}", file=sys.stderr, flush=True)


def _refused(error: BaseException, run: RunContext) -> None:
    """A user error: one line; a new run's folder goes, a refused resume leaves its folder as it was."""
    _say_error(error, run)
    if not run.resumed and run.ranks.is_main:
        run.launch.discard_new_run(run.dir)
    elif run.resumed:
        run.launch.leave_as_found()


def _say_whole_line(text: str) -> None:
    """One write(2) of the line and its newline: under torchrun every rank shares the agent's stderr,
    and print()'s two writes when unbuffered (text, then end) let two ranks' lines run into one."""
    sys.stderr.flush()
    try:
        os.write(sys.stderr.fileno(), f"{text}\n".encode())
    except (AttributeError, OSError, ValueError):  # a stderr with no file (captured in-process)
        print(text, file=sys.stderr, flush=True)


def _stopped(stopped, run: RunContext) -> None:
    """A stop by a signal after a whole step, with a checkpoint."""
    from fast_td3.training import distributed

    _say_whole_line(f"{stopped}. Continue with: fast-td3-train {shell_arg('resume', run.dir)}")
    # Under torchrun every rank stopped at this step; none exits before all have reported, since
    # torchrun's agent sends SIGTERM to the other ranks once one exits (past the stop handlers).
    distributed.barrier(run.ranks)
    cluster.hand_back_preemption(stopped.signum)  # SIGUSR2 under submitit: it requeues and exits


def _interrupted(interrupt: KeyboardInterrupt, run: RunContext) -> None:
    """A second Ctrl-C (aborted mid-step), or Ctrl-C/SIGTERM before training."""
    if run.resumed:
        run.launch.leave_as_found()
    if has_checkpoints(run.dir):
        _say_whole_line(f"{stop_name(interrupt)}. Continue from the last checkpoint with: fast-td3-train "
                        f"{shell_arg('resume', run.dir)}")
        return
    gone = run.ranks.is_main and run.launch.discard_new_run(run.dir)
    _say_whole_line(f"{stop_name(interrupt)} before the first checkpoint: nothing to resume"
                    + (f"; {run.dir} {'was removed' if run.launch.created else 'is empty again'}" if gone else ""))


def exit_table() -> tuple:
    """How `main` ends on an error: the first row whose types match gives the exit code and what
    the user reads (and what becomes of the run folder). Any other error is our own bug: Python's
    exit code 1, with its traceback."""
    from fast_td3.training.guards import NonFiniteObservationError, TrainingStopped  # imports torch

    return (
        # (errors, exit code, report)
        ((NonFiniteObservationError,), EXIT_NON_FINITE, _refused),
        ((*USER_ERRORS, DeviceError, CheckpointMismatchError), EXIT_USER_ERROR, _refused),
        ((CheckpointWriteError,), EXIT_WRITE_ERROR, _say_error),
        ((TrainingStopped,), BY_SIGNAL, _stopped),
        ((KeyboardInterrupt,), BY_SIGNAL, _interrupted),
    )


def main(cfg: DictConfig, launch: Launch) -> float | None:
    """Hydra's task: train the run Hydra composed, in the folder it made, under `launch`'s plan."""
    from fast_td3.training import distributed

    hydra_cfg = HydraConfig.get()
    run = RunContext(Path(hydra_cfg.runtime.output_dir), list(hydra_cfg.overrides.task), bool(cfg.resume),
                     distributed.SINGLE, launch)
    if not run.resumed and cluster.continues_run(hydra_cfg, run.dir, run.overrides):
        # a requeued or retried cluster job continues as resume=<its run folder>
        cfg.resume, run.overrides, run.resumed = str(run.dir), [], True
    exits = exit_table()
    try:
        stop_if_asked()  # Hydra has made the run folder: from here `_interrupted` removes it
        train_cfg, final = run_training(cfg, hydra_cfg, run)
        # Under torchrun no rank tears its process group down while another is still closing its
        # run (rank 0's last gate and logger): a gloo peer whose connections close under it can
        # abort at exit ("terminate called without an active exception", seen once in CI).
        distributed.barrier(run.ranks)
    except tuple(error for errors, _, _ in exits for error in errors) as error:
        code, report = next((code, report) for errors, code, report in exits if isinstance(error, errors))
        report(error, run)
        sys.exit(signal_exit_code(error) if code is BY_SIGNAL else code)
    finally:
        distributed.shutdown(run.ranks)
    if run.ranks.is_main:
        from fast_td3.training.run_summary import finished_run_summary  # imports torch

        sweep_dir = run.dir.parent if hydra_cfg.mode == RunMode.MULTIRUN else None
        print(finished_run_summary(train_cfg, run.dir, final, sweep_dir), flush=True)
    return final.get("eval/return_mean")


def run(launch: Launch) -> None:
    """Hydra, with `sys.argv`, running `main` under `launch`'s plan."""
    register_resolvers(launch)  # hydra.run.dir: the folder the checks claimed

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
    def task(cfg: DictConfig) -> float | None:
        return main(cfg, launch)

    task()


def cli() -> None:
    """Our help and friendly checks first (they make the command's plan), then Hydra."""
    defer_stops()  # `python -m`; the console script deferred them before importing this module
    launch = Launch()
    try:
        args = hydra_args(sys.argv[1:], launch)
        if args is not None:
            sys.argv[1:] = args
            stop_if_asked()  # a signal during the checks: the folder they claimed goes
            run(launch)
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM while starting up
        if launch.resume_from is not None:
            launch.leave_as_found()
            print(f"{stop_name(interrupt)} before training resumed; the run is as it was. Continue it with: "
                  f"fast-td3-train {shell_arg('resume', run_dir_of(launch.resume_from))}", file=sys.stderr, flush=True)
        else:
            if launch.new_folder is not None:
                launch.discard_new_run(launch.new_folder)
            print(f"{stop_name(interrupt)} before training started: nothing to resume, no run folder kept.",
                  file=sys.stderr, flush=True)
        sys.exit(signal_exit_code(interrupt))
    finally:
        restore_handlers()


if __name__ == "__main__":
    cli()
