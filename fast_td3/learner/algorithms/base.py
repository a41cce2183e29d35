"""`OffPolicyAlgorithm`, the learner base class every algorithm here shares.

An algorithm (one module in this package, e.g. `fast_td3.py`, `fast_sac.py`) subclasses
`OffPolicyAlgorithm` and supplies its actor (`make_actor`), its own parts (`setup`), how it
explores (`explore`, `episodes_ended`) and one update (`_update`, the function handed to
`torch.compile`). The base owns the rest: the twin C51 critic and its target, the observation
and reward normalisers, actor and critic optimisers with their schedules, update counters,
precision, compilation, data-parallel gradient averaging, `act`, `value` and training state.

The constructor builds, one small builder per part; compiling is a step of its own
(`compile_update`, which `make_algorithm` calls). The shared losses are in `losses.py`, the
optimisers and schedules in `optimization.py`. Inside `_update` there are no host syncs; the
actor's schedule is decided on the host from integer counters.
"""

from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from tensordict import TensorDict
from torch import nn

from envs.protocol import EnvSpec
from fast_td3.learner import transition_keys as keys
from fast_td3.learner.algorithms.losses import bootstrap_mask
from fast_td3.learner.algorithms.optimization import (
    LearningRateSchedule, actor_update_due, load_optimizer_state, make_adamw, polyak_update_,
)
from fast_td3.learner.config import AlgoConfig
from fast_td3.learner.device import resolve_device
from fast_td3.learner.data_parallel import average_gradients_
from fast_td3.learner.networks import DistributionalCritic
from fast_td3.learner.normalization import EmpiricalNormalization, RewardNormalization, return_bound_of_support
from fast_td3.learner.precision import Precision, configure_matmul, resolve_precision

# torch.compile mode per device type when AlgoConfig.compile_mode == "auto".
# CUDA graphs remove per-kernel launch cost on GPU; on CPU they do not exist.
AUTO_COMPILE_MODES = {"cuda": "reduce-overhead", "cpu": "default"}


# --------------------------------------------------------------------------- learner
@dataclass
class UpdateInputs:
    """One sampled batch, normalised and ready for the losses."""

    obs: torch.Tensor
    next_obs: torch.Tensor
    critic_obs: torch.Tensor
    next_critic_obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    bootstrap: torch.Tensor
    discount: torch.Tensor


class OffPolicyAlgorithm(nn.Module):
    """An actor, a twin C51 critic and the machinery around them (see the module docstring).

    `update(batch)` runs one critic update and, when due, one actor update inside a single
    (optionally compiled) function and returns device-scalar metrics. `act` maps raw actor
    observations to deterministic actions (evaluation, export); `explore` to the actions
    collected for training; `value` is the critic's estimate for the calibration diagnostics.
    """

    per_rank_buffers = ("reward_normalizer.returns",)
    """Buffers that hold this rank's own envs (not replicated in data-parallel runs)."""

    metric_names = {
        "critic_loss": "loss/critic", "q_mean": "q/mean", "q_min": "q/min", "q_max": "q/max",
        "critic_grad_norm": "grad_norm/critic", "actor_loss": "loss/actor", "actor_grad_norm": "grad_norm/actor",
    }
    """Logged name of each metric `update` returns; a metric not listed here is logged as algo/<name>."""

    def __init__(self, cfg: AlgoConfig, spec: EnvSpec, device: torch.device | str | None = "auto",
                 total_critic_updates: int | None = None) -> None:
        super().__init__()
        self.cfg, self.spec = cfg, spec
        self.device = resolve_device(device)
        self.precision: Precision = resolve_precision(cfg.precision, self.device)
        """What `cfg.precision` resolved to on this device (auto: by the hardware), and why."""
        configure_matmul(self.precision, self.device)
        self.actor = self.make_actor()
        self.critic, self.target_critic = self._make_critics()
        self.obs_normalizer, self.critic_obs_normalizer, self.reward_normalizer = self._make_normalizers()
        self.to(self.device)
        self._make_optimizers(total_critic_updates)
        self.critic_updates = 0
        self.actor_updates = 0
        self._critic_params = list(self.critic.parameters())
        self._target_critic_params = list(self.target_critic.parameters())
        self._actor_params = list(self.actor.parameters())
        self.gradient_ranks = 1
        """Ranks whose gradients each update averages (see `enable_data_parallel`)."""
        self.compile_mode: str | None = None
        self._update_fn = self._update  # eager until `compile_update`
        self.setup()

    def _make_critics(self) -> tuple[DistributionalCritic, DistributionalCritic]:
        """The twin C51 critic and its target (a frozen copy, moved by Polyak averaging)."""
        cfg = self.cfg
        critic = DistributionalCritic(
            self.spec.critic_obs_size, self.spec.num_actions, cfg.critic_hidden_dims, cfg.num_atoms, cfg.v_min,
            cfg.v_max, activation=cfg.activation, layer_norm=cfg.layer_norm,
        )
        return critic, copy.deepcopy(critic).requires_grad_(False)

    def _make_normalizers(self) -> tuple[nn.Module, nn.Module, RewardNormalization | None]:
        """Running normalisers of the actor's and the critic's observations, and of rewards."""
        cfg, spec = self.cfg, self.spec
        obs, critic_obs = nn.Identity(), nn.Identity()
        if cfg.obs_normalization:
            obs = EmpiricalNormalization(spec.num_obs, eps=cfg.normalizer_eps)
            if spec.num_critic_obs is not None:
                critic_obs = EmpiricalNormalization(spec.num_critic_obs, eps=cfg.normalizer_eps)
        rewards = None
        if cfg.reward_normalization:
            rewards = RewardNormalization(spec.num_envs, cfg.gamma, g_max=return_bound_of_support(cfg.v_min, cfg.v_max))
        return obs, critic_obs, rewards

    def _make_optimizers(self, total_critic_updates: int | None) -> None:
        """AdamW for the actor and the critic, and their learning-rate schedules."""
        cfg = self.cfg
        self.actor_optimizer = make_adamw(self.actor.parameters(), cfg.actor_lr, cfg, self.device)
        self.critic_optimizer = make_adamw(self.critic.parameters(), cfg.critic_lr, cfg, self.device)
        length = cfg.schedule_updates or total_critic_updates or 0
        if cfg.lr_schedule == "cosine" and length <= 0:
            raise ValueError("lr_schedule='cosine' needs a length: set schedule_updates or pass total_critic_updates")
        self.actor_schedule = LearningRateSchedule(self.actor_optimizer, cfg.actor_lr, cfg.actor_lr_end,
                                                   math.ceil(length / cfg.policy_frequency), cfg.lr_schedule)
        self.critic_schedule = LearningRateSchedule(self.critic_optimizer, cfg.critic_lr, cfg.critic_lr_end, length,
                                                    cfg.lr_schedule)

    def compile_update(self) -> OffPolicyAlgorithm:
        """Hand `_update` to `torch.compile` when `cfg.compile` (the mode: `cfg.compile_mode`); until
        then updates run eagerly. A step of its own, after building; returns the algorithm."""
        if self.cfg.compile:
            self.compile_mode = self._resolve_compile_mode()
            self._update_fn = torch.compile(self._update, mode=self.compile_mode)
        return self

    # ----------------------------------------------------------------- what an algorithm supplies
    def make_actor(self) -> nn.Module:
        """The actor: `actor(normalised obs)` is the deterministic action in [-1, 1]."""
        raise NotImplementedError

    def setup(self) -> None:
        """The algorithm's own parts, built on `self.device` once the shared ones exist."""

    @property
    def optimizers(self) -> tuple[torch.optim.Optimizer, ...]:
        """Every optimiser whose gradients `update` zeroes."""
        return (self.critic_optimizer, self.actor_optimizer)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions to collect for raw observations (with the algorithm's exploration)."""
        raise NotImplementedError

    def episodes_ended(self, dones: torch.Tensor) -> None:
        """Called after every collected step with the envs whose episode just ended."""

    def _update(self, batch: TensorDict, update_actor: bool) -> TensorDict:
        """One critic update (and one actor update when `update_actor`): the compiled function."""
        raise NotImplementedError

    def extra_state(self) -> dict:
        """The algorithm's own training state beyond modules, actor/critic optimisers and counters."""
        return {}

    def load_extra_state(self, state: dict) -> None:
        """Restore what `extra_state` returned."""

    # ----------------------------------------------------------------- execution
    def enable_data_parallel(self, world_size: int, group=None) -> None:
        """Replicated learning over `world_size` ranks (torch.distributed is initialised):
        every update averages the gradients of all ranks before clipping and stepping, and
        the normalisers pool their statistics, so the replicas stay identical (parameters
        must start identical: broadcast them first)."""
        self.gradient_ranks = world_size
        if self.compile_mode == "reduce-overhead":
            # CUDA graphs around the gradient all-reduce have not been run on GPUs here: plain compile
            self.compile_mode = None
            self._update_fn = torch.compile(self._update)
        for normalizer in (self.obs_normalizer, self.critic_obs_normalizer, self.reward_normalizer):
            if hasattr(normalizer, "set_process_group"):
                normalizer.set_process_group(group)

    def _resolve_compile_mode(self) -> str | None:
        mode = self.cfg.compile_mode
        if mode == "auto":
            mode = AUTO_COMPILE_MODES.get(self.device.type, "default")
        return None if mode == "default" else mode

    def _autocast(self):
        if self.precision.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic actions in [-1, 1] for raw (unnormalised) observations."""
        with self._autocast():
            return self.actor(self.obs_normalizer(obs)).float()

    @torch.no_grad()
    def value(self, obs: torch.Tensor, critic_obs: torch.Tensor | None, actions: torch.Tensor) -> torch.Tensor:
        """The critic's expected return `[N]` of raw observations and actions, in reward units:
        the smaller twin head with `use_cdq` (what the actor maximises), else the heads' mean;
        times the reward normaliser's scale when rewards are normalised."""
        with self._autocast():
            if self.spec.num_critic_obs is not None:
                inputs = self.critic_obs_normalizer(critic_obs)
            else:
                inputs = self.obs_normalizer(obs)
            q = self.critic.expected_value(self.critic(inputs, actions))
        q = self.critic.reduce_heads(q, self.cfg.use_cdq)
        if self.reward_normalizer is not None:
            q = q * self.reward_normalizer.scale()
        return q.float()

    @property
    def value_reduction(self) -> str:
        """How `value` combines the twin heads: 'min' or 'mean'."""
        return "min" if self.cfg.use_cdq else "mean"

    @torch.no_grad()
    def update_normalizers(
        self, obs: torch.Tensor, critic_obs: torch.Tensor | None = None,
        rewards: torch.Tensor | None = None, dones: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> None:
        """Feed one vectorised step of collected data to the running statistics (the observation
        statistics only with obs_normalization_source='collect'); with `valid` (a 0-dim bool
        tensor, the NaN guard's) false, nothing changes, decided on the device."""
        if self.cfg.obs_normalization_source == "collect":
            self._update_obs_statistics(obs, critic_obs, valid)
        if self.reward_normalizer is not None and rewards is not None and dones is not None:
            self.reward_normalizer.update(rewards, dones, valid)

    def _update_obs_statistics(self, obs: torch.Tensor, critic_obs: torch.Tensor | None,
                               valid: torch.Tensor | None = None) -> None:
        if isinstance(self.obs_normalizer, EmpiricalNormalization):
            self.obs_normalizer.update(obs, valid)
        if critic_obs is not None and isinstance(self.critic_obs_normalizer, EmpiricalNormalization):
            self.critic_obs_normalizer.update(critic_obs, valid)

    # ----------------------------------------------------------------- update
    def update(self, batch: TensorDict) -> TensorDict:
        """One critic update, plus one actor update when the counter says it is due.

        Returns a TensorDict of scalar metrics (device tensors; reading them is
        the caller's choice of when to sync).
        """
        if self.cfg.obs_normalization_source == "replay":
            with torch.no_grad():
                self._update_obs_statistics(batch[keys.OBS], batch.get(keys.CRITIC_OBS))
        self.critic_updates += 1
        update_actor = actor_update_due(self.critic_updates, self.cfg.policy_frequency)
        # Zeroed here rather than inside: optimiser.zero_grad is opaque to the compiler.
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        if self.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        metrics = self._update_fn(batch, update_actor)
        if self.compile_mode == "reduce-overhead":
            metrics = metrics.clone()  # CUDA-graph outputs are overwritten by the next replay
        self.critic_schedule.step()
        if update_actor:
            self.actor_updates += 1
            self.actor_schedule.step()
        return metrics

    def _inputs(self, batch: TensorDict) -> UpdateInputs:
        """The batch with observations normalised (under autocast) and the bootstrap mask."""
        rewards = batch[keys.REWARDS]
        if self.reward_normalizer is not None:
            rewards = self.reward_normalizer(rewards)
        with self._autocast():
            obs = self.obs_normalizer(batch[keys.OBS])
            next_obs = self.obs_normalizer(batch[keys.NEXT_OBS])
            if self.spec.num_critic_obs is not None:
                critic_obs = self.critic_obs_normalizer(batch[keys.CRITIC_OBS])
                next_critic_obs = self.critic_obs_normalizer(batch[keys.NEXT_CRITIC_OBS])
            else:
                critic_obs, next_critic_obs = obs, next_obs
        return UpdateInputs(
            obs, next_obs, critic_obs, next_critic_obs, batch[keys.ACTIONS], rewards,
            bootstrap_mask(batch[keys.TERMINATED], batch[keys.TRUNCATED], self.cfg.disable_bootstrap),
            batch[keys.DISCOUNT],
        )

    def _critic_step(self, loss: torch.Tensor, q_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Backward, average over ranks, clip and step the critic; its metrics."""
        loss.backward()  # gradients were zeroed by `update`
        self._average_over_ranks(self._critic_params)
        grad_norm = self._clip(self._critic_params)
        self.critic_optimizer.step()
        q_values = q_values.detach()
        return {"critic_loss": loss.detach(), "q_mean": q_values.mean(), "q_min": q_values.min(),
                "q_max": q_values.max(), "critic_grad_norm": grad_norm}

    def _actor_step(self, loss: torch.Tensor) -> dict[str, torch.Tensor]:
        """Backward, average over ranks, clip and step the actor; its metrics."""
        loss.backward()
        self._average_over_ranks(self._actor_params)
        grad_norm = self._clip(self._actor_params)
        self.actor_optimizer.step()
        return {"actor_loss": loss.detach(), "actor_grad_norm": grad_norm}

    def _polyak_critic(self) -> None:
        polyak_update_(self._target_critic_params, self._critic_params, self.cfg.tau)

    def _average_over_ranks(self, params: list[nn.Parameter]) -> None:
        if self.gradient_ranks > 1:
            average_gradients_(params, self.gradient_ranks)

    def _clip(self, params: list[nn.Parameter]) -> torch.Tensor:
        """Global gradient norm, clipped to max_grad_norm when that is set (no host sync)."""
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else float("inf")
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True).detach()

    # ----------------------------------------------------------------- state
    def learning_rates(self) -> dict[str, float]:
        return {"actor_lr": self.actor_schedule.value(), "critic_lr": self.critic_schedule.value()}

    def training_state(self) -> dict:
        """Everything needed to resume: modules, optimisers, schedules, counters and the
        algorithm's own state (e.g. exploration noise, the temperature's optimiser)."""
        return {
            "modules": self.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "actor_schedule": self.actor_schedule.state_dict(),
            "critic_schedule": self.critic_schedule.state_dict(),
            "critic_updates": self.critic_updates,
            "actor_updates": self.actor_updates,
            **self.extra_state(),
        }

    def load_training_state(self, state: dict) -> None:
        self.load_state_dict(state["modules"])
        load_optimizer_state(self.actor_optimizer, state["actor_optimizer"])
        load_optimizer_state(self.critic_optimizer, state["critic_optimizer"])
        self.actor_schedule.load_state_dict(state["actor_schedule"])
        self.critic_schedule.load_state_dict(state["critic_schedule"])
        self.critic_updates = int(state["critic_updates"])
        self.actor_updates = int(state["actor_updates"])
        self.load_extra_state(state)
