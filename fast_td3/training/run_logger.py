"""The logger a run's rank writes through: rank 0 the run's metrics (metrics.jsonl, the console,
TensorBoard, wandb, as `cfg.logger` asks), every other rank none."""

from __future__ import annotations

from pathlib import Path

from fast_td3.training import distributed
from fast_td3.training.config import TrainConfig, config_dict
from fast_td3.training.metrics_log import MetricsLogger


def run_logger(cfg: TrainConfig, run_dir: Path, ranks: distributed.Context, global_step: int,
               num_envs: int) -> MetricsLogger | distributed.SilentLogger:
    """This rank's logger from `global_step` on, its rates counted over every rank's `num_envs`."""
    if not ranks.is_main:
        return distributed.SilentLogger()
    return MetricsLogger(cfg.logger, run_dir, config_dict(cfg), cfg.env.task, cfg.total_steps, global_step,
                         num_envs * ranks.world_size)
