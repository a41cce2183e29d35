"""The training loop: collect -> store -> update -> log / evaluate / save.

One runner serves every suite: it sees envs only through the contract in
`envs/protocol.py` and the learner only through `FastTD3`, `ReplayBuffer` and
`PerEnvGaussianNoise`. Everything that needs the host (logging, evaluation,
checkpoints, the NaN guard) happens between steps, never inside the update.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from envs.protocol import ACTOR, CRITIC, EPISODE, FINAL_OBSERVATIONS, TIME_OUTS, VecEnv, critic_observations
from fast_td3 import checkpoint as ckpt
from fast_td3 import distributed
from fast_td3 import replay as keys
from fast_td3.agent import FastTD3
from fast_td3.config import TrainConfig
from fast_td3.device import resolve_device
from fast_td3.diagnostics import critic_calibration, diagnostics_path, discounted_returns, save_eval_diagnostics
from fast_td3.evaluation import (
    EvalTrace,
    eval_seed,
    gait_results,
    read_gait_signals,
    run_episodes,
    summarize,
    write_video,
)
from fast_td3.exploration import PerEnvGaussianNoise
from fast_td3.logging import MetricsLogger
from fast_td3.replay import ReplayBuffer

CHECKPOINT_FORMAT = ckpt.FORMAT


class NonFiniteObservationError(RuntimeError):
    """An env produced NaN or inf; the run stopped and saved a checkpoint first."""


class CheckpointMismatchError(ValueError):
    """A checkpoint that does not fit these envs (another task or env count)."""


class TrainingStopped(Exception):
    """SIGINT/SIGTERM stopped the run after a whole global step, with a checkpoint."""

    def __init__(self, step: int, checkpoint: Path, signum: int) -> None:
        super().__init__(f"Stopped at global step {step}; checkpoint saved to {checkpoint}")
        self.step, self.checkpoint, self.signum = step, checkpoint, signum


@contextmanager
def stop_signals_set_flag(runner: "Runner"):
    """While training, SIGINT and SIGTERM ask the runner to stop after the current global
    step (so a checkpoint never holds half an update); a second SIGINT aborts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if runner.stop_requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not runner.stop_requested:
            os.write(2, b"\nStopping after this global step with a checkpoint (Ctrl-C again to abort)...\n")
        runner.stop_requested = signum

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def config_dict(cfg: Any) -> dict[str, Any]:
    """A plain, JSON-able dict of a dataclass or OmegaConf config."""
    if is_dataclass(cfg):
        return asdict(cfg)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


VIDEO_FPS = 30
EPISODE_METRIC_PREFIX = "train/episode/"
"""Logged means of the adapter's per-episode metrics, e.g. train/episode/reward/feet_slip."""


@dataclass
class EpisodeStats:
    """Running return/length per env and sums over the episodes finished since the last read,
    all on the device (read once per log interval)."""

    returns: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor
    return_sum: torch.Tensor
    length_sum: torch.Tensor
    metric_names: tuple[str, ...] = ()
    metric_sums: torch.Tensor | None = None
    """Sums of the adapter's per-episode metrics (`extras[EPISODE]`, e.g. reward terms), one
    entry per name in `metric_names` (the adapter's names, fixed after the first step)."""

    @classmethod
    def zeros(cls, num_envs: int, device: torch.device) -> "EpisodeStats":
        z = lambda *shape: torch.zeros(*shape, device=device)  # noqa: E731
        return cls(z(num_envs), z(num_envs), z(()), z(()), z(()))

    def update(self, rewards: torch.Tensor, dones: torch.Tensor,
               episode_metrics: dict[str, torch.Tensor] | None = None) -> None:
        self.returns += rewards
        self.lengths += 1
        done = dones.float()
        self.finished += done.sum()
        self.return_sum += (self.returns * done).sum()
        self.length_sum += (self.lengths * done).sum()
        self.returns *= 1 - done
        self.lengths *= 1 - done
        if episode_metrics:
            stacked = torch.stack([v.to(done.device, torch.float32) for v in episode_metrics.values()])
            totals = torch.where(dones.to(done.device), stacked, 0.0).sum(-1)  # unfinished rows are not summed
            if self.metric_sums is None:
                self.metric_names, self.metric_sums = tuple(episode_metrics), totals
            else:
                self.metric_sums += totals

    def read(self) -> dict[str, torch.Tensor]:
        """Sums since the last read as device scalars (`train/episodes` is their count), then zeroed."""
        out = {
            "train/episodes": self.finished.clone(),
            "train/episode_return": self.return_sum.clone(),
            "train/episode_length": self.length_sum.clone(),
        }
        if self.metric_sums is not None:
            out.update({f"{EPISODE_METRIC_PREFIX}{name}": total.clone()
                        for name, total in zip(self.metric_names, self.metric_sums)})
            self.metric_sums.zero_()
        for t in (self.finished, self.return_sum, self.length_sum):
            t.zero_()
        return out


def _to_host(scalars: dict[str, torch.Tensor]) -> dict[str, float]:
    """Device scalars to floats with one transfer (one sync per log, not one per metric)."""
    if not scalars:
        return {}
    values = torch.stack([v.detach().float().reshape(()) for v in scalars.values()]).tolist()
    return dict(zip(scalars, values))


class Runner:
    """Trains `FastTD3` on `env`, evaluates on `eval_env`, checkpoints into `run_dir`.

    Args:
        cfg: the run's configuration.
        env: training envs (contract of `envs/protocol.py`).
        eval_env: separate envs for evaluation (None: no evaluation).
        run_dir: the run folder (checkpoints/, metrics.jsonl, ...).
        logger: metrics sinks (None: a MetricsLogger built from `cfg.logger`).
        ranks: this process's place in a torchrun job (`fast_td3/distributed.py`); every
            rank runs this same loop on its own envs, rank 0 logs and saves.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        env: VecEnv,
        eval_env: VecEnv | None,
        run_dir: str | Path,
        logger: MetricsLogger | None = None,
        ranks: distributed.Context = distributed.SINGLE,
    ) -> None:
        self.cfg = cfg
        self.ranks = ranks
        self.env = env
        self.eval_env = eval_env
        self.run_dir = Path(run_dir)
        self.device = resolve_device(cfg.device)
        algo = cfg.algo
        seed_everything(cfg.seed)  # the same networks on every rank
        self.agent = FastTD3(
            algo, env.num_obs, env.num_actions, env.num_critic_obs, env.num_envs, self.device,
            # updates run from global step `learning_starts` to the last one
            total_critic_updates=max(cfg.total_steps - algo.learning_starts + 1, 1) * algo.num_updates,
        )
        self.batch_size = self._batch_per_rank()
        if ranks.enabled:
            distributed.broadcast_parameters_(self.agent, ranks)
            self.agent.enable_data_parallel(ranks.world_size)
        self.seed = ranks.rank_seed(cfg.seed)
        """This rank's seed: exploration, replay sampling, env resets (rank 0: the run seed)."""
        if ranks.enabled:
            seed_everything(self.seed)
        self.buffer = ReplayBuffer(
            env.num_envs, algo.buffer_size, env.num_obs, env.num_actions,
            num_critic_obs=env.num_critic_obs,
            critic_obs_extends_actor_obs=getattr(env, "critic_obs_extends_actor_obs", False),
            n_step=algo.n_step, gamma=algo.gamma,
            obs_dtype=torch.bfloat16 if algo.store_obs_bf16 else torch.float32,
            device=self.device,
        )
        self.noise = PerEnvGaussianNoise(env.num_envs, algo.std_min, algo.std_max, self.device)
        self.sample_generator = torch.Generator(device=self.device).manual_seed(self.seed)
        self.episodes = EpisodeStats.zeros(env.num_envs, self.device)
        self.checkpoints = ckpt.CheckpointManager(self.run_dir, cfg.keep_checkpoints)
        self.global_step = 0
        self.last_eval: dict[str, float] = {}
        self._logger = logger
        self._critic_metrics: TensorDict | None = None
        self._actor_metrics: TensorDict | None = None
        self._updates_since_log = 0
        self._first_update_in_interval = False
        self._updated_in_this_process = False
        self.stop_requested: int = 0  # the signal that asked to stop

    # ================================================================ the loop
    def train(self) -> dict[str, float]:
        """Run until `cfg.total_steps` global steps; returns the final evaluation."""
        cfg = self.cfg
        logger = self._logger or self._make_logger()
        self._logger = logger
        obs, critic_obs = self._reset_envs()
        interval = _IntervalClock(self.global_step)
        try:
            with stop_signals_set_flag(self):
                while self.global_step < cfg.total_steps:
                    obs, critic_obs = self.collect(obs, critic_obs)
                    self.global_step += 1
                    if self.learning_started():
                        self.learn()
                    logger.advance(self.global_step)
                    if self._due(cfg.logger.log_interval):
                        self.log(interval)
                    if self._due(cfg.eval_interval) and self.global_step < cfg.total_steps:
                        with interval.paused():
                            self.evaluate()
                    if self._due(cfg.save_interval) and self.global_step < cfg.total_steps:
                        with interval.paused():
                            self.save()
                    stop = distributed.any_rank(self.stop_requested, self.ranks)  # every rank stops at one step
                    if stop:
                        raise TrainingStopped(self.global_step, self.save(), stop)
                final = self.evaluate()
                self.save()
                return final
        finally:
            logger.close()
            self._logger = None

    def _batch_per_rank(self) -> int:
        """algo.batch_size, or its share of it under distributed.batch=split."""
        size, ranks = self.cfg.algo.batch_size, self.ranks.world_size
        if self.cfg.distributed.batch == "per_rank" or ranks == 1:
            return size
        if size % ranks or size // ranks < self.env.num_envs:
            raise ValueError(f"distributed.batch=split: algo.batch_size ({size}) must split evenly over {ranks} "
                             f"ranks into shares of at least env.num_envs ({self.env.num_envs})")
        return size // ranks

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
        if self.cfg.check_finite:
            self._check_finite({"observations": obs, "critic observations": critic_obs}, at_reset=True)
        return obs, critic_obs

    def _to_device(self, x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x.to(self.device, non_blocking=True)

    def collect(self, obs: torch.Tensor, critic_obs: torch.Tensor | None):
        """One vectorised env step with exploration noise, stored in the replay buffer."""
        actions = self.noise(self.agent.act(obs))
        next_obs, rewards, dones, extras = self.env.step(actions.to(self.env.device))
        next_obs, rewards, dones = self._to_device(next_obs), self._to_device(rewards), self._to_device(dones)
        time_outs = self._to_device(extras[TIME_OUTS])
        final = extras[FINAL_OBSERVATIONS]
        next_critic_obs = self._to_device(critic_observations(next_obs, extras))
        if self.cfg.check_finite:
            self._check_finite({
                "observations": next_obs, "critic observations": next_critic_obs, "rewards": rewards,
                "final observations": final.get(ACTOR), "final critic observations": final.get(CRITIC),
            })

        transition = {
            keys.OBS: obs,
            keys.ACTIONS: actions,
            keys.REWARDS: rewards,
            keys.TERMINATED: dones & ~time_outs,
            keys.TRUNCATED: time_outs,
            keys.NEXT_OBS: self._to_device(final[ACTOR]),
        }
        if critic_obs is not None:
            transition[keys.CRITIC_OBS] = critic_obs
            transition[keys.NEXT_CRITIC_OBS] = self._to_device(final[CRITIC])
        self.agent.update_normalizers(obs, critic_obs, rewards, dones)
        self.buffer.extend(TensorDict(transition, batch_size=[self.env.num_envs]))
        self.noise.resample(dones)
        self.episodes.update(rewards, dones, extras.get(EPISODE))
        return next_obs, next_critic_obs

    def _check_finite(self, tensors: dict[str, torch.Tensor | None], at_reset: bool = False) -> None:
        """Stop before a NaN/inf reaches the normalisers or the replay buffer."""
        bad = torch.zeros(self.env.num_envs, dtype=torch.bool, device=self.device)
        for value in tensors.values():
            if value is not None:
                value = value.to(self.device)
                bad |= ~torch.isfinite(value.reshape(self.env.num_envs, -1)).all(-1)
        found_here = bool(bad.any())  # the one host sync of a step
        if self.ranks.enabled:  # every rank learns of it at this step, and all stop together
            if not distributed.any_rank(int(found_here), self.ranks):
                return
            if not found_here:
                raise NonFiniteObservationError(
                    f"another rank found NaN or inf {'after reset' if at_reset else 'at'} global step "
                    f"{self.global_step + (not at_reset)}; its message names the env. "
                    f"Checkpoint of the last good step: {self.save()}")
        elif not found_here:
            return
        envs = torch.nonzero(bad).flatten().tolist()
        culprits = [name for name, v in tensors.items()
                    if v is not None and not bool(torch.isfinite(v[envs[0]]).all())]
        path = self.save()
        when = "after reset" if at_reset else "at"
        raise NonFiniteObservationError(
            f"NaN or inf in the {' and '.join(culprits)} of env {envs[0]} "
            f"(envs {envs[:10]}{'...' if len(envs) > 10 else ''}) {when} global step {self.global_step + (not at_reset)} "
            f"of task {self.cfg.env.task}. The run stopped before storing them; "
            f"checkpoint of the last good step: {path}"
        )

    # ================================================================ learn
    def learn(self) -> None:
        """`num_updates` critic updates (the actor on its own schedule) on fresh samples."""
        algo = self.cfg.algo
        if not self._updated_in_this_process:  # the first update compiles
            self._updated_in_this_process = self._first_update_in_interval = True
        for _ in range(algo.num_updates):
            batch = self.buffer.sample(self.batch_size, generator=self.sample_generator)
            metrics = self.agent.update(batch)
            if "actor_loss" in metrics.keys():
                self._actor_metrics = metrics
            self._critic_metrics = metrics
        self._updates_since_log += algo.num_updates

    # ================================================================ log
    def log(self, interval: "_IntervalClock") -> None:
        device_metrics = distributed.sum_over_ranks(self.episodes.read(), self.ranks)  # episodes of every rank
        if self._critic_metrics is not None:
            m = self._critic_metrics
            device_metrics.update({
                "loss/critic": m["critic_loss"], "q/mean": m["q_mean"], "q/min": m["q_min"],
                "q/max": m["q_max"], "grad_norm/critic": m["critic_grad_norm"],
            })
        if self._actor_metrics is not None:
            device_metrics["loss/actor"] = self._actor_metrics["actor_loss"]
            device_metrics["grad_norm/actor"] = self._actor_metrics["actor_grad_norm"]
        metrics = _to_host(device_metrics)
        episodes = metrics.pop("train/episodes")
        return_sum, length_sum = metrics.pop("train/episode_return"), metrics.pop("train/episode_length")
        metric_sums = {k: metrics.pop(k) for k in list(metrics) if k.startswith(EPISODE_METRIC_PREFIX)}
        if episodes > 0:  # means over the episodes that finished since the last log
            metrics.update({"train/episode_return": return_sum / episodes,
                            "train/episode_length": length_sum / episodes, "train/episodes": episodes})
            metrics.update({k: v / episodes for k, v in metric_sums.items()})
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
        env = self.eval_env

        def policy(obs: torch.Tensor) -> torch.Tensor:
            return self.agent.act(obs.to(self.device)).to(env.device)

        frames: list = []
        on_step = (lambda t: frames.append(env.render(0))) if self.cfg.eval_video and self.ranks.is_main else None
        trace = EvalTrace() if self.ranks.is_main else None  # gait metrics and diagnostics: rank 0's episodes
        on_transition = None if trace is None else (lambda step: self._record_eval_step(env, step, trace))
        episodes = run_episodes(env, policy, eval_seed(self.seed), on_step, on_transition)
        results = summarize(distributed.gather_episodes(episodes, self.ranks))  # every rank's episodes
        if trace:
            results.update(self._eval_diagnostics(trace))
        self.last_eval = results
        if self._logger is not None:
            self._logger.log(self.global_step, results)
        if frames:
            path = self.run_dir / "videos" / f"step_{self.global_step:09d}.mp4"
            write_video(frames[: int(episodes["lengths"][0])], path, VIDEO_FPS)
            if self._logger is not None:
                self._logger.log_video(self.global_step, path)
        return results

    def _record_eval_step(self, env: VecEnv, step: dict[str, Any], trace: EvalTrace) -> None:
        """Keep what the diagnostics need of one eval step, on the learner's device (no host sync):
        actions, rewards, episode ends, the critic's value of the step, and the value of the final
        observation where a time-out cuts the episode (what the critic's own target bootstraps from)."""
        agent, to = self.agent, self._to_device
        obs, actions = to(step["obs"]), to(step["actions"])
        dones, time_outs = to(step["dones"]).bool(), to(step["time_outs"]).bool()
        record = {
            "actions": actions.float(), "rewards": to(step["rewards"]).float(), "dones": dones,
            "terminated": to(step["terminations"]).bool(), "valid": to(step["valid"]),
            "q_pred": agent.value(obs, to(step["critic_obs"]), actions),
        }
        if self.cfg.algo.disable_bootstrap:
            record["bootstrap"] = torch.zeros_like(record["q_pred"])
        else:
            final = step["final_observations"]
            final_obs = to(final[ACTOR])
            tail = agent.value(final_obs, to(final.get(CRITIC)), agent.act(final_obs))
            record["bootstrap"] = torch.where(time_outs, tail, 0.0)
        trace.append(record, read_gait_signals(env, trace, to))

    def _eval_diagnostics(self, trace: EvalTrace) -> dict[str, float]:
        """Gait metrics and critic calibration of the recorded eval episodes (logged as
        eval/gait/<metric> and eval/critic/<stat>); the per-step samples go to
        diagnostics/eval_step_<N>.npz in the run folder."""
        data = trace.stacked()
        valid = data["valid"].bool()
        mc_return = discounted_returns(data["rewards"], data["dones"], self.cfg.algo.gamma, data["bootstrap"])
        results = gait_results(trace)
        by_episode = valid.T  # [E, T]: samples ordered by episode, then time
        episode, t = torch.nonzero(by_episode, as_tuple=True)
        q_pred, mc = data["q_pred"].T[by_episode], mc_return.T[by_episode]
        results.update({f"eval/critic/{k}": v for k, v in critic_calibration(q_pred, mc).items()})
        save_eval_diagnostics(
            diagnostics_path(self.run_dir, self.global_step),
            actions=data["actions"].transpose(0, 1)[by_episode], q_pred=q_pred, mc_return=mc,
            rewards=data["rewards"].T[by_episode], episode=episode, t=t, global_step=self.global_step,
            gamma=self.cfg.algo.gamma, q_reduction=self.agent.value_reduction,
            reward_scaled=bool(self.cfg.env.reward_scales),
        )
        return results

    # ================================================================ checkpoints
    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs (the replay buffer only with save_buffer)."""
        state = {
            "format": CHECKPOINT_FORMAT,
            "global_step": self.global_step,
            "agent": self.agent.training_state(),
            "noise": self.noise.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "sample": self.sample_generator.get_state(),
                "python": list(random.getstate()[1]),
            },
            "env": self._env_shape(),
            "config": config_dict(self.cfg),
        }
        if self.cfg.save_buffer:
            state["buffer"] = self.buffer.state_dict()
        return state

    def _env_shape(self) -> dict[str, int | None]:
        env = self.env
        return {"num_envs": env.num_envs, "num_obs": env.num_obs,
                "num_critic_obs": env.num_critic_obs, "num_actions": env.num_actions}

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
        """Continue from a checkpoint: step counter, schedules, normalisers, noise, RNG streams."""
        path = ckpt.find_checkpoint(path)
        state = ckpt.load(path)
        ckpt.check_matches(state, config_dict(self.cfg), path)  # e.g. another task's checkpoint of equal shapes
        shape = self._env_shape()
        if state["env"] != shape:
            raise CheckpointMismatchError(f"checkpoint was trained on envs {state['env']}, these envs are {shape}")
        self.agent.load_training_state(state["agent"])
        self.noise.load_state_dict(state["noise"])
        self.global_step = int(state["global_step"])
        rng = state["rng"]
        if self.ranks.is_main:  # rank 0's streams were saved; the other ranks continue their own below
            torch.set_rng_state(rng["torch"])
            if rng["cuda"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])
            self.sample_generator.set_state(rng["sample"].cpu())  # CPU ByteTensor, whatever the device
            random.setstate((3, tuple(rng["python"]), None))
        if "buffer" in state:  # rank 0's transitions on every rank: all ranks start learning together
            self.buffer.load_state_dict(state["buffer"])
        if not self.ranks.is_main:
            # not the env-reset seed of _reset_envs ([seed, step]): a third entry
            rank_stream = int(np.random.SeedSequence([self.seed, self.global_step, 1]).generate_state(1)[0])
            seed_everything(rank_stream)
            self.sample_generator.manual_seed(rank_stream)
        if self.ranks.is_main and ckpt.run_dir_of(path).resolve() == self.run_dir.resolve():
            # Continuing from an older checkpoint of this run: what came after it is another
            # history; keep those files aside rather than mixing or pruning them.
            self.checkpoints.set_aside_after(self.global_step)

    def _make_logger(self) -> MetricsLogger:
        if not self.ranks.is_main:
            return distributed.SilentLogger()
        return MetricsLogger(
            self.cfg.logger, self.run_dir, config_dict(self.cfg), self.cfg.env.task,
            self.cfg.total_steps, self.global_step, self.env.num_envs * self.ranks.world_size,
        )


class _IntervalClock:
    """Wall time and global steps between logs, with evaluation and saving paused out."""

    def __init__(self, step: int) -> None:
        self._t0 = time.perf_counter()
        self._step0 = step
        self._paused = 0.0

    def lap(self, step: int) -> tuple[float, int]:
        now = time.perf_counter()
        seconds, steps = now - self._t0 - self._paused, step - self._step0
        self._t0, self._step0, self._paused = now, step, 0.0
        return seconds, steps

    @contextmanager
    def paused(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._paused += time.perf_counter() - start
