"""The training loop: collect -> store -> update -> log / evaluate / save.

One runner serves every suite and every algorithm: it sees envs only through the contract in
`envs/protocol.py` and the learner only through the interface of
`fast_td3.learner.algorithms.OffPolicyAlgorithm` (explore, update, act, value, training state) and
`ReplayBuffer`. A steady-state global step makes no host sync outside the env: the NaN guard
screens on the device and is read at each log, the step's batches come from one gather, and
with `algo.compile` the action is compiled like the update. Everything that needs the host
(logging, evaluation, checkpoints, the guard's verdict) happens between steps. What is not the
loop lives in modules of its own: collector.py (the envs' half), learning.py (the learner's
half), guards.py, and the hooks (hooks.py) that run beside it: the evaluation with best.pt
(periodic_eval.py), the deploy gate (gate_hook.py), and a benchmark's phase clock. `Runner.from_config` builds a run's envs and runner (run_envs.py);
`train(until_step=...)` trains to a step and may be called again to go on. The runner owns its
state: `state()` is its checkpoint, `load_state()` puts one back (run_checkpoint.py).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from envs.protocol import VecEnv, optional_attribute
from fast_td3.learner.device import resolve_device
from fast_td3.training import checkpoint as ckpt
from fast_td3.training import distributed
from fast_td3.training.config import TrainConfig
from fast_td3.training.collector import Collector
from fast_td3.training.contention import CoreMonitor
from fast_td3.training.episodes import episode_means
from fast_td3.training.eval_diagnostics import evaluate_in_run
from fast_td3.training.gate_hook import GateHook
from fast_td3.training.guards import TrainingStopped, stop_signals
from fast_td3.training.hooks import Hook, Hooks
from fast_td3.training.learning import Learning
from fast_td3.training.periodic_eval import EvaluationHook
from fast_td3.training.run_checkpoint import CheckpointedRun
from fast_td3.training.run_envs import RunEnvs, make_run_envs
from fast_td3.training.metrics_log import IntervalClock, MetricsLogger, to_host
from fast_td3.training.run_logger import run_logger


class Runner(CheckpointedRun):
    """Trains the algorithm `cfg.algo.name` on `env`, evaluates on `eval_env`, checkpoints into `run_dir`.

    Args:
        cfg: the run's configuration.
        env: training envs (contract of `envs/protocol.py`).
        eval_env: separate envs for evaluation (None: no evaluation).
        run_dir: the run folder (checkpoints/, metrics.jsonl, ...).
        logger: metrics sinks (None: a MetricsLogger built from `cfg.logger`).
        ranks: this process's place in a torchrun job (`fast_td3/training/distributed.py`); every
            rank runs this same loop on its own envs, rank 0 logs and saves.
        hooks: what runs beside the loop in every `train` call, after the run's own: the periodic
            evaluation with best.pt and, with `cfg.gate.interval`, the deploy gate.
    """

    def __init__(self, cfg: TrainConfig, env: VecEnv, eval_env: VecEnv | None, run_dir: str | Path,
                 logger: MetricsLogger | None = None, ranks: distributed.Context = distributed.SINGLE,
                 hooks: Iterable[Hook] = ()) -> None:
        self.cfg, self.ranks, self.env, self.eval_env = cfg, ranks, env, eval_env
        self.run_dir = Path(run_dir)
        self.device = resolve_device(cfg.device)
        self.seed = ranks.rank_seed(cfg.seed)
        """This rank's seed: exploration, replay sampling, env resets (rank 0: the run seed)."""
        self.learning = learning = Learning(cfg, env, self.device, ranks, self.seed)
        self.spec, self.agent, self.buffer, self.mirror = learning.spec, learning.agent, learning.buffer, learning.mirror
        self.sample_generator, self.batch_size = learning.sample_generator, learning.batch_size
        self.hooks = Hooks(())
        self.collector = Collector(cfg, self.agent, self.buffer, env.num_envs, self.device, ranks,
                                   phase=lambda name: self.hooks.phase(name))
        record_gait_signals = optional_attribute(env, "record_gait_signals")
        if record_gait_signals is not None:
            record_gait_signals(False)  # only evaluation reads them
        self.checkpointed_env_parts = optional_attribute(env, "checkpointed_parts")
        self.checkpoints = ckpt.CheckpointManager(self.run_dir, cfg.keep_checkpoints)
        self.global_step = 0
        self.last_eval: dict[str, float] = {}
        self.best_eval: dict[str, float] | None = None
        """{"step", "return_mean"} of the best evaluation so far, saved as checkpoints/best.pt."""
        self.gate = GateHook()
        self.run_hooks: list[Hook] = [EvaluationHook(self.gate), self.gate, *hooks]
        self.logger = logger
        self._observations: tuple[torch.Tensor, torch.Tensor | None] | None = None  # to go on from
        self._interval: IntervalClock | None = None
        self.until_step = cfg.total_steps
        """Where the current `train` call ends."""
        self.cores: CoreMonitor | None = None  # the torch threads beside other processes (contention.py)
        self._owned_envs: RunEnvs | None = None

    @classmethod
    def from_config(cls, cfg: TrainConfig, run_dir: str | Path, ranks: distributed.Context = distributed.SINGLE,
                    evaluation: bool = True, hooks: Iterable[Hook] = (), say=print) -> "Runner":
        """The run's envs (this rank's, seeded from the run seed; eval envs unless `evaluation` is
        false or the suite runs one simulation per process) and a runner over them, which closes
        them in `close()`. `say` prints what was built."""
        envs = make_run_envs(cfg, ranks, evaluation, say)
        try:
            runner = cls(cfg, envs.train, envs.evaluation, run_dir, ranks=ranks, hooks=hooks)
        except BaseException:
            envs.close()
            raise
        runner._owned_envs = envs
        return runner

    def close(self) -> None:
        """Close the envs `from_config` made (a runner given its envs leaves them to the caller)."""
        if self._owned_envs is not None:
            self._owned_envs.close()
            self._owned_envs = None

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ================================================================ the loop
    def train(self, until_step: int | None = None, hooks: Iterable[Hook] = ()) -> dict[str, float]:
        """Train to global step `until_step` (default and at most `cfg.total_steps`, which shapes
        the schedules), evaluate and save; returns the final evaluation. A later call goes on
        from here; `hooks` run in this call only."""
        cfg = self.cfg
        self.until_step = until_step = min(until_step or cfg.total_steps, cfg.total_steps)
        self.logger = logger = self.logger or run_logger(self.cfg, self.run_dir, self.ranks, self.global_step,
                                                          self.env.num_envs)
        self.hooks = Hooks([*self.run_hooks, *hooks])
        obs, critic_obs = self._observations or self._reset_envs()
        self.cores = cores = CoreMonitor(logger.note, torch.set_num_threads, torch.get_num_threads())
        self._interval = IntervalClock(self.global_step, on_pause=lambda s: (logger.paused_for(s), cores.paused_for(s)))
        final: dict[str, float] | None = None
        try:
            for hook in self.hooks:
                hook.on_begin(self)
            with stop_signals() as stop_request:
                while self.global_step < until_step and not self._hook_asks_to_stop():
                    obs, critic_obs = self.collect(obs, critic_obs)
                    self._observations = obs, critic_obs
                    self.global_step += 1
                    if self.learning_started():
                        self.learn()
                        cores.tend(self.global_step)
                    logger.advance(self.global_step)
                    if self.due(cfg.logger.log_interval):
                        self.log()
                    for hook in self.hooks:
                        hook.on_step(self)
                    if self.due(cfg.save_interval) and self.global_step < until_step:
                        with self.paused(), self.hooks.phase("checkpoint"):
                            self._stop_if_non_finite()
                            self.save()
                    stop = distributed.any_rank(stop_request.signum, self.ranks)  # every rank stops at one step
                    if stop:
                        raise TrainingStopped(self.global_step, self.save(), stop)
                final = self.evaluate()
                with self.hooks.phase("checkpoint"):
                    self.save()
                return final
        finally:
            for hook in self.hooks:
                hook.on_end(self, final)
            cores.release()
            logger.close()
            self.logger = None
            self.hooks = Hooks(())

    @contextmanager
    def paused(self):
        """Time out of the step rate and the ETA (an evaluation, a checkpoint)."""
        if self._interval is None:
            yield
            return
        with self._interval.paused():
            yield

    def _hook_asks_to_stop(self) -> bool:
        """Asked at the logs only, so a torchrun job stops together without a collective per step."""
        if not self.due(self.cfg.logger.log_interval):
            return False
        return any([hook.should_stop(self) for hook in self.hooks])  # every hook asked: each may sync ranks

    def learning_started(self) -> bool:
        return self.learning.started()

    def due(self, interval: int) -> bool:
        """Whether this global step is one of every `interval` (0: never): the loop's and the hooks' one schedule."""
        return interval > 0 and self.global_step % interval == 0

    # ================================================================ collect
    def _reset_envs(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        # A resumed run cannot restore simulator state: it restarts episodes from seeds derived
        # from (seed, step), so the continuation is reproducible.
        seed = int(np.random.SeedSequence([self.seed, self.global_step]).generate_state(1)[0]) if self.global_step \
            else None
        return self.collector.reset(self.env, seed, self.global_step, self.save)

    def collect(self, obs: torch.Tensor, critic_obs: torch.Tensor | None):
        """One vectorised env step with the algorithm's exploration, stored in the replay buffer."""
        return self.collector.step(self.env, obs, critic_obs)

    def _stop_if_non_finite(self) -> None:
        self.collector.stop_if_non_finite(self.global_step, self.save)

    # ================================================================ learn
    def learn(self) -> None:
        """`num_updates` updates (the actor on its own schedule) on fresh samples."""
        self.learning.learn(self.global_step, self.hooks.phase, self.logger)

    # ================================================================ log
    def log(self) -> None:
        """Every `cfg.logger.log_interval` global steps: the NaN guard's verdict, then episodes,
        the updates' metrics and rates."""
        with self.hooks.phase("log"):
            self._stop_if_non_finite()
            device_metrics = distributed.sum_over_ranks(self.collector.episodes.read(), self.ranks)  # every rank's
            update_metrics, updates, compiled_in_it = self.learning.take_metrics()
            metrics = to_host(device_metrics | update_metrics)
            episode_means(metrics)
            metrics.update({f"lr/{k.removesuffix('_lr')}": v for k, v in self.agent.learning_rates().items()})
            metrics.update(self._interval.rates(self.global_step, self.env.num_envs * self.ranks.world_size,
                                                updates, compiled_in_it))
            metrics.update(self.cores.metrics())
            self.logger.log(self.global_step, metrics)
        for hook in self.hooks:
            hook.on_log(self, metrics)

    # ================================================================ evaluate
    def evaluate(self) -> dict[str, float]:
        """Deterministic episodes on the eval envs (none: {}), logged, with a video when asked."""
        with self.hooks.phase("eval"):
            self._stop_if_non_finite()
            if self.eval_env is None:
                return {}
            results, video = evaluate_in_run(self.agent, self.eval_env, self.cfg, self.seed, self.ranks, self.run_dir,
                                             self.global_step, self.collector.to_device)
        self.last_eval = results
        for hook in self.hooks:
            hook.on_eval(self, results)
        if self.logger is not None:
            self.logger.log(self.global_step, results)
            if video is not None:
                self.logger.log_video(self.global_step, video)
        return results
