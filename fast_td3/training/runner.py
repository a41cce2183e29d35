"""The training loop: collect -> store -> update -> log / evaluate / save.

One runner serves every suite and every algorithm: it sees envs only through the contract in
`envs/protocol.py` and the learner only through the interface of
`fast_td3.learner.algorithms.OffPolicyAlgorithm` (explore, update, act, value, training state) and
`ReplayBuffer`. A steady-state global step makes no host sync outside the env: the NaN guard
screens on the device and is read at each log, the step's batches come from one gather, and
with `algo.compile` the action is compiled like the update. Everything
that needs the host (logging, evaluation, checkpoints, the guard's verdict) happens between steps. What is not the loop lives in modules
of its own: episodes.py, guards.py, eval_diagnostics.py, run_state.py.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs.protocol import (
    ACTOR,
    CRITIC,
    EPISODE,
    FINAL_OBSERVATIONS,
    TIME_OUTS,
    VecEnv,
    critic_observations,
    optional_attribute,
)
from fast_td3.training import checkpoint as ckpt
from fast_td3.training import distributed, run_state
from fast_td3.learner import batch as keys
from fast_td3.learner.algorithms import make_algorithm
from fast_td3.training.config import TrainConfig
from fast_td3.learner.device import resolve_device
from fast_td3.training.episodes import EPISODE_METRIC_PREFIX, EpisodeStats, episode_means  # noqa: F401 (re-exported)
from fast_td3.training.eval_diagnostics import eval_diagnostics, record_eval_step
from fast_td3.training.evaluation import EvalTrace, eval_seed, run_episodes, summarize, write_video
from fast_td3.training.gate_loop import GateLoop
from fast_td3.training.guards import (  # noqa: F401
    FiniteGuard, NonFiniteObservationError, TrainingStopped, check_finite, non_finite_message, stop_signals_set_flag,
)
from fast_td3.training.metrics_log import IntervalClock, MetricsLogger, to_host
from fast_td3.learner.replay import ReplayBuffer
from fast_td3.training.run_state import CHECKPOINT_FORMAT, CheckpointMismatchError, config_dict, seed_everything  # noqa: F401

VIDEO_FPS = 30


class Runner:
    """Trains the algorithm `cfg.algo.name` on `env`, evaluates on `eval_env`, checkpoints into `run_dir`.

    Args:
        cfg: the run's configuration.
        env: training envs (contract of `envs/protocol.py`).
        eval_env: separate envs for evaluation (None: no evaluation).
        run_dir: the run folder (checkpoints/, metrics.jsonl, ...).
        logger: metrics sinks (None: a MetricsLogger built from `cfg.logger`).
        ranks: this process's place in a torchrun job (`fast_td3/training/distributed.py`); every
            rank runs this same loop on its own envs, rank 0 logs and saves.
    """

    def __init__(self, cfg: TrainConfig, env: VecEnv, eval_env: VecEnv | None, run_dir: str | Path,
                 logger: MetricsLogger | None = None, ranks: distributed.Context = distributed.SINGLE) -> None:
        self.cfg, self.ranks, self.env, self.eval_env = cfg, ranks, env, eval_env
        self.run_dir = Path(run_dir)
        self.device = resolve_device(cfg.device)
        algo = cfg.algo
        seed_everything(cfg.seed)  # the same networks on every rank
        self.batch_size = distributed.batch_per_rank(algo.batch_size, cfg.distributed.batch, env.num_envs, ranks)
        self.seed = ranks.rank_seed(cfg.seed)
        """This rank's seed: exploration, replay sampling, env resets (rank 0: the run seed)."""
        self.agent = make_algorithm(
            algo, env.num_obs, env.num_actions, env.num_critic_obs, env.num_envs, self.device,
            # updates run from global step `learning_starts` to the last one
            total_critic_updates=max(cfg.total_steps - algo.learning_starts + 1, 1) * algo.num_updates,
        )
        if ranks.enabled:
            distributed.broadcast_parameters_(self.agent, ranks)
            self.agent.enable_data_parallel(ranks.world_size)
            seed_everything(self.seed)
            # every env starts an episode: this rank's own exploration draws (e.g. FastTD3's noise stds)
            self.agent.episodes_ended(torch.ones(env.num_envs, dtype=torch.bool, device=self.device))
        self.buffer = ReplayBuffer(
            env.num_envs, algo.buffer_size, env.num_obs, env.num_actions, num_critic_obs=env.num_critic_obs,
            critic_obs_extends_actor_obs=optional_attribute(env, "critic_obs_extends_actor_obs"),
            n_step=algo.n_step, gamma=algo.gamma,
            obs_dtype=torch.bfloat16 if algo.store_obs_bf16 else torch.float32, device=self.device,
        )
        self.sample_generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.episodes = EpisodeStats.zeros(env.num_envs, self.device)
        self.guard = FiniteGuard(env.num_envs, self.device) if cfg.check_finite else None
        # With algo.compile the action (policy, noise) is compiled like the update. The statistics
        # after the env step stay eager: torch 2.13's compile drops in-place writes to 0-dim
        # float64 buffers on CPU (the normalisers' sample counts), which silently stopped their
        # statistics accumulating (tests/test_hot_path.py checks the counts under compile).
        self._explore = torch.compile(self.agent.explore) if algo.compile else self.agent.explore
        record_gait_signals = optional_attribute(env, "record_gait_signals")
        if record_gait_signals is not None:
            record_gait_signals(False)  # only evaluation reads them
        self.checkpoints = ckpt.CheckpointManager(self.run_dir, cfg.keep_checkpoints)
        self.global_step = 0
        self.last_eval: dict[str, float] = {}
        self.best_eval: dict[str, float] | None = None
        """{"step", "return_mean"} of the best evaluation so far, saved as checkpoints/best.pt."""
        self._logger = logger
        self._metrics: dict[str, torch.Tensor] = {}  # the latest value of every update metric
        self._updates_since_log = 0
        self._first_update_in_interval = False
        self._updated_in_this_process = False
        self.stop_requested: int = 0  # the signal that asked to stop
        self.gate: GateLoop | None = None  # the deploy gate while training (rank 0, gate.interval > 0)

    # ================================================================ the loop
    def train(self) -> dict[str, float]:
        """Run until `cfg.total_steps` global steps; returns the final evaluation."""
        cfg = self.cfg
        self._logger = logger = self._logger or self._make_logger()
        obs, critic_obs = self._reset_envs()
        interval = IntervalClock(self.global_step, on_pause=logger.paused_for)
        if cfg.gate.interval and self.ranks.is_main:
            self.gate = GateLoop(cfg, self.run_dir, self.checkpoints, self.global_step, logger.note)
        try:
            with stop_signals_set_flag(self):
                while self.global_step < cfg.total_steps and not self._gate_satisfied():
                    obs, critic_obs = self.collect(obs, critic_obs)
                    self.global_step += 1
                    if self.learning_started():
                        self.learn()
                    logger.advance(self.global_step)
                    if self._due(cfg.logger.log_interval):
                        self._stop_if_non_finite()
                        self.log(interval)
                    if self._due(cfg.eval_interval) and self.global_step < cfg.total_steps:
                        self._stop_if_non_finite()
                        with interval.paused():
                            self.evaluate()
                    if self.gate is not None:
                        self.tend_gate(final=False)
                    if self._due(cfg.save_interval) and self.global_step < cfg.total_steps:
                        self._stop_if_non_finite()
                        with interval.paused():
                            self.save()
                    stop = distributed.any_rank(self.stop_requested, self.ranks)  # every rank stops at one step
                    if stop:
                        raise TrainingStopped(self.global_step, self.save(), stop)
                self._stop_if_non_finite()
                final = self.evaluate()
                self.save()
                if self.gate is not None:
                    self.tend_gate(final=True)
                return final
        finally:
            if self.gate is not None:
                self._take_verdicts(self.gate.poll())  # one that arrived just before a stop is logged too
                self.gate.close()
            logger.close()
            self._logger = None

    def tend_gate(self, final: bool) -> None:
        """Hand a due gate step to the gate loop; log the verdicts that arrived (at the end: all of them)."""
        gate = self.gate
        if gate.due(self.global_step) and (final or self.global_step < self.cfg.total_steps):
            gate.submit(self.global_step, run_state.capture(self, with_buffer=False),
                        self.last_eval.get("eval/return_mean"))
        self._take_verdicts(gate.drain() if final else gate.poll())

    def _take_verdicts(self, verdicts) -> None:
        for verdict in verdicts:
            self._logger.log_past(verdict.step, verdict.metrics, "gate/step")
            promoted = self.gate.absorb(verdict)
            self._logger.note(verdict.line() + (": now best.pt" if promoted else ""))

    def _gate_satisfied(self) -> bool:
        """The gate passed `gate.stop_after_passes` times in a row; every rank asks at the same
        steps (the logs), so a torchrun job stops together without a collective per step."""
        if not self.cfg.gate.stop_after_passes or not self._due(self.cfg.logger.log_interval):
            return False
        done = self.gate is not None and self.gate.satisfied
        if self.ranks.enabled:
            done = bool(distributed.any_rank(int(done), self.ranks))
        if done and self.gate is not None:
            self._logger.note(f"Stopping at global step {self.global_step}: the gate passed "
                              f"{self.gate.passes_in_a_row} times in a row (gate.stop_after_passes)")
        return done

    def learning_started(self) -> bool:
        return len(self.buffer) >= max(self.cfg.algo.learning_starts, 1)

    def _due(self, interval: int) -> bool:
        return interval > 0 and self.global_step % interval == 0

    # ================================================================ collect
    def _reset_envs(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        # A resumed run cannot restore simulator state: it restarts episodes from
        # seeds derived from (seed, step), so the continuation is reproducible.
        seed = None
        if self.global_step > 0:
            seed = int(np.random.SeedSequence([self.seed, self.global_step]).generate_state(1)[0])
        obs, extras = self.env.reset(seed=seed)
        obs, critic_obs = self._to_device(obs), self._to_device(critic_observations(obs, extras))
        self._check_finite({"observations": obs, "critic observations": critic_obs}, at_reset=True)
        return obs, critic_obs

    def _to_device(self, x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x.to(self.device, non_blocking=True)

    def collect(self, obs: torch.Tensor, critic_obs: torch.Tensor | None):
        """One vectorised env step with the algorithm's exploration, stored in the replay buffer."""
        to = self._to_device
        actions = self._explore(obs)
        next_obs, rewards, dones, extras = self.env.step(actions.to(self.env.device))
        final = extras[FINAL_OBSERVATIONS]
        step = {"observations": to(next_obs), "critic observations": to(critic_observations(next_obs, extras)),
                "rewards": to(rewards), "final observations": to(final.get(ACTOR)),
                "final critic observations": to(final.get(CRITIC))}
        dones, time_outs = to(dones), to(extras[TIME_OUTS])
        valid = None
        if self.guard is not None:  # on the device: no sync; read at the next log
            step, valid = self.guard.screen(step)
        transition = {keys.OBS: obs, keys.ACTIONS: actions, keys.REWARDS: step["rewards"],
                      keys.TERMINATED: dones & ~time_outs, keys.TRUNCATED: time_outs,
                      keys.NEXT_OBS: step["final observations"]}
        if critic_obs is not None:
            transition[keys.CRITIC_OBS] = critic_obs
            transition[keys.NEXT_CRITIC_OBS] = step["final critic observations"]
        self._absorb_step(obs, critic_obs, step["rewards"], dones, valid, extras.get(EPISODE))
        self.buffer.extend(transition, valid)
        return step["observations"], step["critic observations"]

    def _absorb_step(self, obs, critic_obs, rewards, dones, valid, episode_metrics) -> None:
        """What one step teaches the running state: normalisers, exploration redraws, episode sums."""
        self.agent.update_normalizers(obs, critic_obs, rewards, dones, valid)
        self.agent.episodes_ended(dones)
        self.episodes.update(rewards, dones, episode_metrics)

    def _check_finite(self, tensors: dict[str, torch.Tensor | None], at_reset: bool = False) -> None:
        if self.cfg.check_finite:
            check_finite(tensors, self.env.num_envs, self.device, self.ranks, self.save,
                         self.global_step + (not at_reset), self.cfg.env.task, at_reset)
            self.guard.sync_step(self.global_step)

    def _stop_if_non_finite(self) -> None:
        """Read the NaN guard (one sync, at a log): stop every rank with a clean checkpoint when
        any env produced NaN or inf since the last check."""
        if self.guard is None:
            return
        found = self.guard.tripped()
        if self.ranks.enabled:
            if not distributed.any_rank(int(found is not None), self.ranks):
                return
        elif found is None:
            return
        if found is None:
            raise NonFiniteObservationError(
                f"another rank found NaN or inf before global step {self.global_step}; its message names the "
                f"env. Checkpoint: {self.save()}")
        step, env, field, envs = found
        dropped = self.global_step - step + 1
        self.buffer.rewind(dropped)  # the skipped writes: the buffer is what it was before step `step`
        raise NonFiniteObservationError(
            non_finite_message(step, env, field, envs, self.cfg.env.task, self.save(), dropped))

    # ================================================================ learn
    def learn(self) -> None:
        """`num_updates` updates (the actor on its own schedule) on fresh samples."""
        first = not self._updated_in_this_process  # the first update compiles
        if first:
            self._updated_in_this_process = self._first_update_in_interval = True
            started = time.perf_counter()
            if self._logger is not None:
                self._logger.learning_begins(self.global_step, compiles=self.cfg.algo.compile)
        batches = self.buffer.sample_many(self.batch_size, self.cfg.algo.num_updates, generator=self.sample_generator)
        for batch in batches:
            self._metrics.update(self.agent.update(batch).items())
        self._updates_since_log += self.cfg.algo.num_updates
        if first and self._logger is not None:
            self._logger.first_update_done(self.global_step, time.perf_counter() - started)

    # ================================================================ log
    def log(self, interval: "IntervalClock") -> None:
        device_metrics = distributed.sum_over_ranks(self.episodes.read(), self.ranks)  # episodes of every rank
        names = self.agent.metric_names
        device_metrics.update({names.get(k, f"algo/{k}"): v for k, v in self._metrics.items()})
        metrics = to_host(device_metrics)
        episode_means(metrics)
        metrics.update({f"lr/{k.removesuffix('_lr')}": v for k, v in self.agent.learning_rates().items()})
        seconds, steps = interval.lap(self.global_step)
        # The interval holding the first update includes compilation: not a throughput.
        if seconds > 0 and steps > 0 and not self._first_update_in_interval:
            metrics["perf/global_steps_per_s"] = steps / seconds
            metrics["perf/env_steps_per_s"] = steps * self.env.num_envs * self.ranks.world_size / seconds
            metrics["perf/updates_per_s"] = self._updates_since_log / seconds
        self._updates_since_log = 0
        self._first_update_in_interval = False
        self._logger.log(self.global_step, metrics)

    # ================================================================ evaluate
    def evaluate(self) -> dict[str, float]:
        if self.eval_env is None:
            return {}
        env, cfg = self.eval_env, self.cfg
        frames: list = []
        on_step = (lambda t: frames.append(env.render(0))) if cfg.eval_video and self.ranks.is_main else None
        trace = EvalTrace() if self.ranks.is_main else None  # gait metrics and diagnostics: rank 0's episodes
        on_transition = None if trace is None else (
            lambda step: record_eval_step(self.agent, env, step, trace, self._to_device, cfg.algo.disable_bootstrap))
        policy = lambda obs: self.agent.act(obs.to(self.device)).to(env.device)  # noqa: E731
        episodes = run_episodes(env, policy, eval_seed(self.seed), on_step, on_transition)
        results = summarize(distributed.gather_episodes(episodes, self.ranks))  # every rank's episodes
        if trace:
            results.update(eval_diagnostics(trace, self.run_dir, self.global_step, cfg.algo.gamma,
                                            self.agent.value_reduction, bool(cfg.env.reward_scales)))
        self.last_eval = results
        self._keep_if_best(results)
        if self._logger is not None:
            self._logger.log(self.global_step, results)
        if frames:
            path = self.run_dir / "videos" / f"step_{self.global_step:09d}.mp4"
            write_video(frames[: int(episodes["lengths"][0])], path, VIDEO_FPS)
            if self._logger is not None:
                self._logger.log_video(self.global_step, path)
        return results

    def _keep_if_best(self, results: dict[str, float]) -> None:
        """A best evaluation return so far (on a tie the later, more trained one): its checkpoint
        becomes best.pt, what fast-td3-eval, -play and -export take from a run folder."""
        score = results["eval/return_mean"]
        if self.cfg.best_by == "gate" and self.gate is not None and self.gate.best is not None:
            return  # the gate's verdicts choose best.pt now
        if not math.isfinite(score) or (self.best_eval is not None and score < self.best_eval["return_mean"]):
            return
        self.best_eval = {"step": self.global_step, "return_mean": score}
        if self.ranks.is_main:
            self.checkpoints.save_best(run_state.capture(self, with_buffer=False))

    # ================================================================ checkpoints
    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs (the replay buffer only with save_buffer)."""
        return run_state.capture(self)

    def save(self, wait_for_all: bool = True) -> Path | None:
        """Rank 0 writes the checkpoint; with `wait_for_all`, every rank returns once it exists
        (after checking that the ranks' networks are still identical)."""
        if wait_for_all and self.ranks.enabled:
            distributed.check_replicas(self.agent, self.ranks)
        path = self.checkpoints.save(self.state(), self.global_step) if self.ranks.is_main else None
        if wait_for_all and self.ranks.enabled:
            distributed.barrier(self.ranks)
        return path if path is not None else self.checkpoints.latest()

    def load(self, path: str | Path) -> None:
        """Continue from a checkpoint: step counter, schedules, normalisers, exploration, RNG streams."""
        path = ckpt.find_checkpoint(path)
        state = run_state.upgrade(ckpt.load(path))
        ckpt.check_matches(state, config_dict(self.cfg), path)  # e.g. another task's checkpoint of equal shapes
        run_state.restore(self, state)
        if self.ranks.is_main and ckpt.run_dir_of(path).resolve() == self.run_dir.resolve():
            # Continuing from an older checkpoint of this run: what came after it is another
            # history; keep those files aside rather than mixing or pruning them.
            self.checkpoints.set_aside_after(self.global_step)

    def _make_logger(self) -> MetricsLogger:
        if not self.ranks.is_main:
            return distributed.SilentLogger()
        return MetricsLogger(self.cfg.logger, self.run_dir, config_dict(self.cfg), self.cfg.env.task,
                             self.cfg.total_steps, self.global_step, self.env.num_envs * self.ranks.world_size)
