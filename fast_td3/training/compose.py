"""The composition root: the only place that knows the config, the env registry and the runner
together. Inside Hydra's run folder, `run_training` readies this process (the resumed run's
config, its share of the CPU cores, torchrun's ranks, the folder's lock) and `build_and_train`
makes the envs and the runner, restores a resumed run's checkpoint, records the run and trains.

Nothing imported at the top of this module pulls in torch, JAX or a suite.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from envs.quiet import silence_library_noise
from fast_td3.learner.config import ConfigError
from fast_td3.training import cluster
from fast_td3.training.checkpoint import CheckpointManager, has_checkpoints, pick_for_resume
from fast_td3.training.config import TrainConfig
from fast_td3.training.config_checks import check_values
from fast_td3.training.preflight import Launch, resumed_config, video_problem
from fast_td3.training.recording import record_run
from fast_td3.training.run_folder import shell_arg
from fast_td3.training.startup_signals import stop_if_asked
from fast_td3.training.threads import apply_thread_share, cores_available, sweep_jobs_in_parallel, thread_share


@dataclass
class RunContext:
    """The run `main` trains, as its exit handlers see it."""

    dir: Path
    overrides: list[str]
    """Hydra's task overrides that made this run (none for a cluster job that continues its run)."""
    resumed: bool
    ranks: Any
    """This process's `distributed.Context`: SINGLE until torchrun's ranks are set up."""
    launch: Launch
    """What the checks before Hydra decided for this command (`preflight`)."""


def run_training(cfg: DictConfig, hydra_cfg, run: RunContext) -> tuple[TrainConfig, dict[str, float]]:
    """Ready this process in the run folder Hydra made (or the resumed run's), then build and
    train: (the typed config, the final evaluation). Sets `run.ranks` once torchrun's are known."""
    from fast_td3.learner.device import resolve_device
    from fast_td3.training import distributed

    if run.resumed:
        cfg = resumed_config(cfg, run.overrides)
    train_cfg: TrainConfig = OmegaConf.to_object(cfg)
    launch = run.launch
    if not launch.checked:  # composed by Hydra alone: a sweep's job, a requeued cluster job
        check_values(train_cfg)
    silence_library_noise(train_cfg.env.suite)
    threads = thread_share(cores_available(), sweep_jobs=sweep_jobs_in_parallel(hydra_cfg),
                           granted=cluster.granted_cpus(hydra_cfg))
    apply_thread_share(threads)
    # after the resumed config: its device picks NCCL or gloo (SINGLE unless launched by torchrun)
    run.ranks = ranks = distributed.init(resolve_device(train_cfg.device))
    if ranks.is_main:
        launch.hold(run.dir)  # the folders preflight left to Hydra: sweeps' jobs, torchrun's, cluster jobs
    stop_if_asked()  # a signal while torch and the ranks came up
    if not run.resumed and has_checkpoints(run.dir):
        raise ConfigError(f"{run.dir} already holds a run; continue it with resume= "
                          f"(fast-td3-train {shell_arg('resume', run.dir)}), or choose another folder")
    distributed.barrier(ranks)  # every rank has checked before rank 0 writes config.yaml
    if ranks.is_main and threads.threads < cores_available():
        print(f"Torch threads: {threads}", flush=True)
    if train_cfg.eval_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering, chosen before MuJoCo loads
        if video_problem(train_cfg):
            raise ConfigError(video_problem(train_cfg))
    if run.resumed and ranks.is_main and launch.unreadable:
        moved = CheckpointManager(run.dir).set_aside_unreadable([path for path, _ in launch.unreadable])
        for (path, why), where in zip(launch.unreadable, moved):
            print(f"fast-td3-train: {path.name} cannot be read ({why}); moved to {where} and "
                  f"resuming from {launch.resume_from.name}", file=sys.stderr, flush=True)
    gpu_sized = hydra_cfg.runtime.choices.get("sizing") in (None, "gpu") and not run.resumed
    if gpu_sized and ranks.is_main and resolve_device(train_cfg.device).type == "cpu":
        print("Training at a GPU's sizes on a CPU: add sizing=cpu for a laptop-sized run.", file=sys.stderr)

    def ready() -> None:
        # A resumed run records its merged config too, so later resumes keep e.g. a new total_steps.
        if ranks.is_main:
            record_run(OmegaConf.structured(train_cfg), run.dir, run.overrides, run.resumed)

    final = build_and_train(train_cfg, run.dir, ranks, ready, launch.resume_from)
    return train_cfg, final


def build_and_train(cfg: TrainConfig, run_dir: Path, ranks=None, on_ready=None,
                    resume_from: Path | None = None) -> dict[str, float]:
    """Make train and eval envs, restore a checkpoint when resuming, stop if a signal asked to
    meanwhile (`startup_signals`), call `on_ready()` (the config now holds what the adapter and
    the learner settled: backend, precision, threads, CPU), train (this rank's share of a
    torchrun job: its own envs and seeds)."""
    import torch

    from fast_td3.learner.precision import cpu_model
    from fast_td3.training import distributed
    from fast_td3.training.runner import Runner

    ranks = ranks or distributed.SINGLE
    say = print if ranks.is_main else (lambda *a, **k: None)
    with Runner.from_config(cfg, run_dir, ranks, say=say) as runner:
        precision = runner.agent.precision
        say(f"Precision: {precision}", flush=True)
        # what `auto` meant on this machine (recorded by on_ready); a resume re-resolves on its own
        cfg.resolved.update(precision=precision.name, precision_reason=precision.reason,
                            torch_threads=torch.get_num_threads(), cpu=cpu_model())
        if cfg.resume:
            checkpoint = resume_from or pick_for_resume(cfg.resume)[0]
            runner.load(checkpoint)
            say(f"Resuming {run_dir} from {checkpoint.name} (global step {runner.global_step})", flush=True)
        stop_if_asked()  # the last stop that leaves a resumed run's folder as it was (before its record)
        if on_ready is not None:
            on_ready()
        return runner.train()
