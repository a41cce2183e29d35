"""Collecting: the env adapter -> replay buffer half of the loop.

One vectorised env step with the algorithm's exploration, screened by the NaN guard on the
device (no host sync), taught to the running state (normalisers, exploration redraws, episode
sums) and stored in the replay buffer, under the transition's keys (`learner/transition_keys.py`)
from the start. The runner owns the loop and hands in its envs at each call.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Callable, ContextManager

import torch

from envs.protocol import ACTOR, CRITIC, EPISODE, FINAL_OBSERVATIONS, TIME_OUTS, VecEnv, critic_observations
from fast_td3.learner import transition_keys as keys
from fast_td3.learner.algorithms import OffPolicyAlgorithm
from fast_td3.learner.replay import ReplayBuffer
from fast_td3.training import distributed
from fast_td3.training.config import TrainConfig
from fast_td3.training.episodes import EpisodeStats
from fast_td3.training.guards import FiniteGuard, check_finite


_UNTIMED = nullcontext()


class Collector:
    """Collects `num_envs` transitions per call into `buffer` with `agent`'s exploration."""

    def __init__(self, cfg: TrainConfig, agent: OffPolicyAlgorithm, buffer: ReplayBuffer, num_envs: int,
                 device: torch.device, ranks: distributed.Context,
                 phase: Callable[[str], ContextManager] = lambda name: _UNTIMED) -> None:
        self.cfg, self.agent, self.buffer, self.device, self.ranks = cfg, agent, buffer, device, ranks
        self.phase = phase
        """The runner's named spans (act, env step, store) for hooks that time them."""
        self.episodes = EpisodeStats.zeros(num_envs, device)
        self.guard = FiniteGuard(num_envs, device) if cfg.check_finite else None
        # With algo.compile the action (policy, noise) is compiled like the update. The statistics
        # after the env step stay eager: torch 2.13's compile drops in-place writes to 0-dim
        # float64 buffers on CPU (the normalisers' sample counts), which silently stopped their
        # statistics accumulating (tests/test_hot_path.py checks the counts under compile).
        self.explore = torch.compile(agent.explore) if cfg.algo.compile else agent.explore

    def to_device(self, x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x.to(self.device, non_blocking=True)

    def reset(self, env: VecEnv, seed: int | None, global_step: int, save: Callable[[], Path | None]):
        """Start every env (`seed`: see `VecEnv.reset`); its observations, checked for NaN and inf
        (one sync: a reset is rare) with `save` for the checkpoint of a stop."""
        obs, extras = env.reset(seed=seed)
        obs, critic_obs = self.to_device(obs), self.to_device(critic_observations(obs, extras))
        if self.guard is not None:
            check_finite({keys.OBS: obs, keys.CRITIC_OBS: critic_obs}, env.num_envs, self.device, self.ranks, save,
                         global_step, self.cfg.env.task, at_reset=True)
            self.guard.sync_step(global_step)
        return obs, critic_obs

    def step(self, env: VecEnv, obs: torch.Tensor, critic_obs: torch.Tensor | None):
        """One vectorised env step from `obs`, stored in the replay buffer; returns the next step's
        observations (an env that finished: its reset observations)."""
        to, phase = self.to_device, self.phase
        with phase("act"):
            actions = self.explore(obs)
        with phase("env step"):
            next_obs, rewards, dones, extras = env.step(actions.to(env.device))
        with phase("store"):
            return self._store(obs, critic_obs, actions, next_obs, rewards, dones, extras)

    def _store(self, obs, critic_obs, actions, next_obs, rewards, dones, extras):
        """Screen, teach the running state and store the step; the next step's observations."""
        to = self.to_device
        final = extras[FINAL_OBSERVATIONS]
        # what the env returned, by the transition's names: the next step's OBS and CRITIC_OBS, and
        # this step's REWARDS and (true, before any reset) NEXT_OBS and NEXT_CRITIC_OBS
        step = {keys.OBS: to(next_obs), keys.CRITIC_OBS: to(critic_observations(next_obs, extras)),
                keys.REWARDS: to(rewards), keys.NEXT_OBS: to(final.get(ACTOR)),
                keys.NEXT_CRITIC_OBS: to(final.get(CRITIC))}
        dones, time_outs = to(dones), to(extras[TIME_OUTS])
        valid = None
        if self.guard is not None:  # on the device: no sync; read at the next log
            step, valid = self.guard.screen(step)
        transition = {keys.OBS: obs, keys.ACTIONS: actions, keys.REWARDS: step[keys.REWARDS],
                      keys.TERMINATED: dones & ~time_outs, keys.TRUNCATED: time_outs, keys.NEXT_OBS: step[keys.NEXT_OBS]}
        if critic_obs is not None:
            transition[keys.CRITIC_OBS] = critic_obs
            transition[keys.NEXT_CRITIC_OBS] = step[keys.NEXT_CRITIC_OBS]
        # what the step teaches the running state: normalisers, exploration redraws, episode sums
        self.agent.update_normalizers(obs, critic_obs, step[keys.REWARDS], dones, valid)
        self.agent.episodes_ended(dones)
        self.episodes.update(step[keys.REWARDS], dones, extras.get(EPISODE))
        self.buffer.extend(transition, valid)
        return step[keys.OBS], step[keys.CRITIC_OBS]

    def stop_if_non_finite(self, global_step: int, save: Callable[[], Path | None]) -> None:
        """Read the NaN guard (one sync, at a log); see `FiniteGuard.stop_if_tripped`."""
        if self.guard is not None:
            self.guard.stop_if_tripped(global_step, self.ranks, self.cfg.env.task, save, self.buffer.rewind)
