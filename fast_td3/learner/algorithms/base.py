"""What every off-policy algorithm here shares: the pure C51 losses, learning-rate schedules,
optimiser helpers, and `OffPolicyAlgorithm`, the learner base class.

An algorithm (one module in this package, e.g. `fast_td3.py`, `fast_sac.py`) subclasses
`OffPolicyAlgorithm` and supplies its actor (`make_actor`), its own parts (`setup`), how it
explores (`explore`, `episodes_ended`) and one update (`_update`, the function handed to
`torch.compile`). The base owns the rest: the twin C51 critic and its target, the observation
and reward normalisers, actor and critic optimisers with their schedules, update counters,
precision, compilation, data-parallel gradient averaging, `act`, `value` and training state.

The loss functions take modules and tensors and return tensors; they hold no state and branch
only on Python configuration, never on tensor values. Inside `_update` there are no host syncs;
the actor's schedule is decided on the host from integer counters.
"""

from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Iterable

import torch
from tensordict import TensorDict
from torch import nn

from fast_td3.learner import batch as keys
from fast_td3.learner.config import AlgoConfig
from fast_td3.learner.device import resolve_device
from fast_td3.learner.data_parallel import average_gradients_
from fast_td3.learner.networks import DistributionalCritic, project_distribution
from fast_td3.learner.normalization import EmpiricalNormalization, RewardNormalization, return_bound_of_support
from fast_td3.learner.precision import Precision, configure_matmul, resolve_precision

# torch.compile mode per device type when AlgoConfig.compile_mode == "auto".
# CUDA graphs remove per-kernel launch cost on GPU; on CPU they do not exist.
AUTO_COMPILE_MODES = {"cuda": "reduce-overhead", "cpu": "default"}

# --------------------------------------------------------------------------- losses
def bootstrap_mask(terminated: torch.Tensor, truncated: torch.Tensor, disable_bootstrap: bool) -> torch.Tensor:
    """1 where the TD target adds the discounted next value: never after a termination;
    after a time-out (from its true final observation) unless bootstrapping is disabled."""
    ended = terminated | truncated if disable_bootstrap else terminated
    return (~ended).float()


def target_distribution(
    target_critic: DistributionalCritic,
    next_critic_obs: torch.Tensor,
    next_actions: torch.Tensor,
    rewards: torch.Tensor,
    bootstrap: torch.Tensor,
    discount: torch.Tensor,
    use_cdq: bool,
) -> torch.Tensor:
    """Projected TD target of every head, `[heads, batch, atoms]`.

    With clipped double Q every head learns the same target: per sample, the
    projection of the target head whose distribution has the smaller mean.
    Without it each head learns from its own target head.
    """
    next_probs = torch.softmax(target_critic(next_critic_obs, next_actions).float(), dim=-1)
    projected = project_distribution(next_probs, rewards, bootstrap, discount, target_critic.support)
    if not use_cdq:
        return projected
    next_q = (next_probs * target_critic.support).sum(-1)  # [heads, batch]
    pick = next_q.argmin(dim=0)  # [batch]
    index = pick.view(1, -1, 1).expand(1, *projected.shape[1:])
    return projected.gather(0, index).expand_as(projected)


def critic_loss(
    critic: DistributionalCritic,
    critic_obs: torch.Tensor,
    actions: torch.Tensor,
    target_probs: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of each head's logits against its target, batch-mean, summed over heads.

    Returns the loss and the heads' expected values `[heads, batch]` (for logging).
    """
    logits = critic(critic_obs, actions).float()
    log_probs = torch.log_softmax(logits, dim=-1)
    loss = -(target_probs * log_probs).sum(-1).mean(-1).sum()
    q_values = (log_probs.exp() * critic.support).sum(-1)
    return loss, q_values


@torch.no_grad()
def polyak_update_(target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], tau: float) -> None:
    """`target <- target + tau * (online - target)` for all tensors in one fused op."""
    torch._foreach_lerp_(list(target), list(online), tau)


def actor_update_due(critic_updates_done: int, policy_frequency: int) -> bool:
    """The actor steps after every `policy_frequency`-th critic update, counted over the
    whole run, so any (num_updates, policy_frequency) pair gives
    `floor(critic_updates / policy_frequency)` actor updates."""
    return critic_updates_done % policy_frequency == 0


# --------------------------------------------------------------------------- schedule
class LearningRateSchedule:
    """Constant or cosine learning rate written into an optimiser's (tensor) `lr`.

    The value is computed on the host from an integer update counter and
    written in place, so a compiled update sees one tensor whose content changes.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, start: float, end: float, total: int, kind: str) -> None:
        self.optimizer = optimizer
        self.start, self.end, self.total, self.kind = start, end, max(int(total), 1), kind
        self.updates = 0
        self._write(self.value())

    def value(self) -> float:
        if self.kind == "constant":
            return self.start
        progress = min(self.updates / self.total, 1.0)
        return self.end + 0.5 * (self.start - self.end) * (1.0 + math.cos(math.pi * progress))

    def step(self) -> None:
        self.updates += 1
        if self.kind != "constant":  # a constant rate was written once: no launch per update
            self._write(self.value())

    def _write(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def state_dict(self) -> dict:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state["updates"])
        self._write(self.value())


def make_adamw(params: Iterable[nn.Parameter], lr: float, cfg: AlgoConfig, device: torch.device,
               weight_decay: float | None = None) -> torch.optim.AdamW:
    """AdamW with a tensor learning rate and the fused kernel where torch has one
    (`weight_decay` None: the shared `cfg.weight_decay`)."""
    fused = device.type in ("cpu", "cuda")
    return torch.optim.AdamW(
        params,
        lr=torch.tensor(lr, device=device) if fused else lr,
        betas=tuple(cfg.adam_betas),
        weight_decay=cfg.weight_decay if weight_decay is None else weight_decay,
        fused=fused or None,
    )


def _load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a copy of `state` (never alias another optimizer's moments) and keep this
    optimizer's own learning-rate tensors, which schedules and compiled code hold on to."""
    own_lrs = [group["lr"] for group in optimizer.param_groups]
    optimizer.load_state_dict(copy.deepcopy(state))
    for group, lr in zip(optimizer.param_groups, own_lrs):
        if isinstance(lr, torch.Tensor):
            group["lr"] = lr


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

    def __init__(
        self,
        cfg: AlgoConfig,
        num_obs: int,
        num_actions: int,
        num_critic_obs: int | None = None,
        num_envs: int = 1,
        device: torch.device | str | None = "auto",
        total_critic_updates: int | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.device = resolve_device(device)
        self.precision: Precision = resolve_precision(cfg.precision, self.device)
        """What `cfg.precision` resolved to on this device (auto: by the hardware), and why."""
        configure_matmul(self.precision, self.device)
        self.num_obs = num_obs
        self.num_actions = num_actions
        self.num_critic_obs = num_critic_obs
        self.num_envs = num_envs
        critic_in = num_critic_obs if num_critic_obs is not None else num_obs

        self.actor = self.make_actor()
        self.critic = DistributionalCritic(
            critic_in, num_actions, cfg.critic_hidden_dims, cfg.num_atoms, cfg.v_min, cfg.v_max,
            activation=cfg.activation, layer_norm=cfg.layer_norm,
        )
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        if cfg.obs_normalization:
            self.obs_normalizer: nn.Module = EmpiricalNormalization(num_obs, eps=cfg.normalizer_eps)
            self.critic_obs_normalizer: nn.Module = (
                EmpiricalNormalization(num_critic_obs, eps=cfg.normalizer_eps)
                if num_critic_obs is not None
                else nn.Identity()
            )
        else:
            self.obs_normalizer = nn.Identity()
            self.critic_obs_normalizer = nn.Identity()
        self.reward_normalizer = (
            RewardNormalization(num_envs, cfg.gamma, g_max=return_bound_of_support(cfg.v_min, cfg.v_max))
            if cfg.reward_normalization else None
        )
        self.to(self.device)

        self.actor_optimizer = make_adamw(self.actor.parameters(), cfg.actor_lr, cfg, self.device)
        self.critic_optimizer = make_adamw(self.critic.parameters(), cfg.critic_lr, cfg, self.device)
        schedule_len = cfg.schedule_updates or total_critic_updates or 0
        if cfg.lr_schedule == "cosine" and schedule_len <= 0:
            raise ValueError(
                "lr_schedule='cosine' needs a length: set schedule_updates or pass total_critic_updates"
            )
        self.actor_schedule = LearningRateSchedule(
            self.actor_optimizer, cfg.actor_lr, cfg.actor_lr_end,
            math.ceil(schedule_len / cfg.policy_frequency), cfg.lr_schedule,
        )
        self.critic_schedule = LearningRateSchedule(
            self.critic_optimizer, cfg.critic_lr, cfg.critic_lr_end, schedule_len, cfg.lr_schedule
        )
        self.critic_updates = 0
        self.actor_updates = 0
        self._critic_params = list(self.critic.parameters())
        self._target_critic_params = list(self.target_critic.parameters())
        self._actor_params = list(self.actor.parameters())
        self.gradient_ranks = 1
        """Ranks whose gradients each update averages (see `enable_data_parallel`)."""
        self.setup()
        self.compile_mode = self._resolve_compile_mode()
        self._update_fn = (
            torch.compile(self._update, mode=self.compile_mode) if cfg.compile else self._update
        )

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
            if self.num_critic_obs is not None:
                inputs = self.critic_obs_normalizer(critic_obs)
            else:
                inputs = self.obs_normalizer(obs)
            q = self.critic.expected_value(self.critic(inputs, actions))
        q = q.min(dim=0).values if self.cfg.use_cdq else q.mean(dim=0)
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
            if self.num_critic_obs is not None:
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
        _load_optimizer_state(self.actor_optimizer, state["actor_optimizer"])
        _load_optimizer_state(self.critic_optimizer, state["critic_optimizer"])
        self.actor_schedule.load_state_dict(state["actor_schedule"])
        self.critic_schedule.load_state_dict(state["critic_schedule"])
        self.critic_updates = int(state["critic_updates"])
        self.actor_updates = int(state["actor_updates"])
        self.load_extra_state(state)
