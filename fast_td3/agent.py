"""FastTD3 updates: pure loss functions and the learner that applies them.

The loss functions at the top take modules and tensors and return tensors;
they hold no state and branch only on Python configuration, never on tensor
values. `FastTD3._update` (critic step, actor step when due, Polyak) is the one
function handed to `torch.compile`; Dynamo splits it at `backward()` and at the
fused AdamW step, which run as their own kernels, with no host syncs anywhere.
`FastTD3` owns the networks, optimisers, learning-rate schedules and update
counters, and decides on the host (from integer counters) when the actor is due.
"""

from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from typing import Iterable

import torch
from tensordict import TensorDict
from torch import nn

from fast_td3.config import AlgoConfig
from fast_td3.distributed import average_gradients_
from fast_td3.device import resolve_device
from fast_td3.networks import Actor, DistributionalCritic, project_distribution
from fast_td3.normalization import EmpiricalNormalization, RewardNormalization, return_bound_of_support
from fast_td3.precision import Precision, configure_matmul, resolve_precision
from fast_td3 import replay as keys

# torch.compile mode per device type when AlgoConfig.compile_mode == "auto".
# CUDA graphs remove per-kernel launch cost on GPU; on CPU they do not exist.
AUTO_COMPILE_MODES = {"cuda": "reduce-overhead", "cpu": "default"}


# --------------------------------------------------------------------------- losses
def bootstrap_mask(terminated: torch.Tensor, truncated: torch.Tensor, disable_bootstrap: bool) -> torch.Tensor:
    """1 where the TD target adds the discounted next value: never after a termination;
    after a time-out (from its true final observation) unless bootstrapping is disabled."""
    ended = terminated | truncated if disable_bootstrap else terminated
    return (~ended).float()


def smoothed_target_actions(
    policy: nn.Module, next_obs: torch.Tensor, noise_std: float, noise_clip: float
) -> torch.Tensor:
    """Target-policy smoothing: policy action plus clipped Gaussian noise, kept in [-1, 1]."""
    actions = policy(next_obs)
    noise = (torch.randn_like(actions) * noise_std).clamp(-noise_clip, noise_clip)
    return (actions + noise).clamp(-1.0, 1.0)


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


def actor_loss(
    actor: nn.Module,
    critic: DistributionalCritic,
    obs: torch.Tensor,
    critic_obs: torch.Tensor,
    use_cdq: bool,
) -> torch.Tensor:
    """`-Q(s, pi(s))`: the smaller head with clipped double Q, else the heads' mean.

    The critic's parameters are detached so the actor's backward pass neither
    computes nor accumulates critic gradients.
    """
    q = critic.expected_value(critic(critic_obs, actor(obs), detach_params=True))
    value = q.min(dim=0).values if use_cdq else q.mean(dim=0)
    return -value.mean()


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


def make_adamw(params: Iterable[nn.Parameter], lr: float, cfg: AlgoConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with a tensor learning rate and the fused kernel where torch has one."""
    fused = device.type in ("cpu", "cuda")
    return torch.optim.AdamW(
        params,
        lr=torch.tensor(lr, device=device) if fused else lr,
        betas=tuple(cfg.adam_betas),
        weight_decay=cfg.weight_decay,
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
class FastTD3(nn.Module):
    """Networks, optimisers and the update step of FastTD3.

    `update(batch)` performs one critic update and, when due, one actor update,
    both inside a single (optionally compiled) function. `act` maps raw actor
    observations to actions; `update_normalizers` feeds collection data to the
    running statistics.
    """

    per_rank_buffers = ("reward_normalizer.returns",)
    """Buffers that hold this rank's own envs (not replicated in data-parallel runs)."""

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
        critic_in = num_critic_obs if num_critic_obs is not None else num_obs

        self.actor = Actor(num_obs, num_actions, cfg.actor_hidden_dims, cfg.actor_last_layer_std)
        self.critic = DistributionalCritic(
            critic_in, num_actions, cfg.critic_hidden_dims, cfg.num_atoms, cfg.v_min, cfg.v_max
        )
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False) if cfg.use_target_actor else None
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
        self._target_actor_params = list(self.target_actor.parameters()) if self.target_actor else []
        self.gradient_ranks = 1
        """Ranks whose gradients each update averages (see `enable_data_parallel`)."""
        self.compile_mode = self._resolve_compile_mode()
        self._update_fn = (
            torch.compile(self._update, mode=self.compile_mode) if cfg.compile else self._update
        )

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

    # ----------------------------------------------------------------- helpers
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
    ) -> None:
        """Feed one vectorised step of collected data to the running statistics."""
        if isinstance(self.obs_normalizer, EmpiricalNormalization):
            self.obs_normalizer.update(obs)
        if critic_obs is not None and isinstance(self.critic_obs_normalizer, EmpiricalNormalization):
            self.critic_obs_normalizer.update(critic_obs)
        if self.reward_normalizer is not None and rewards is not None and dones is not None:
            self.reward_normalizer.update(rewards, dones)

    # ----------------------------------------------------------------- update
    def update(self, batch: TensorDict) -> TensorDict:
        """One critic update, plus one actor update when the counter says it is due.

        Returns a TensorDict of scalar metrics (device tensors; reading them is
        the caller's choice of when to sync).
        """
        self.critic_updates += 1
        update_actor = actor_update_due(self.critic_updates, self.cfg.policy_frequency)
        # Zeroed here rather than inside: optimiser.zero_grad is opaque to the compiler.
        self.critic_optimizer.zero_grad(set_to_none=True)
        self.actor_optimizer.zero_grad(set_to_none=True)
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

    def _update(self, batch: TensorDict, update_actor: bool) -> TensorDict:
        cfg = self.cfg
        asymmetric = self.num_critic_obs is not None
        bootstrap = bootstrap_mask(batch[keys.TERMINATED], batch[keys.TRUNCATED], cfg.disable_bootstrap)
        rewards = batch[keys.REWARDS]
        if self.reward_normalizer is not None:
            rewards = self.reward_normalizer(rewards)

        with self._autocast():
            obs = self.obs_normalizer(batch[keys.OBS])
            next_obs = self.obs_normalizer(batch[keys.NEXT_OBS])
            if asymmetric:
                critic_obs = self.critic_obs_normalizer(batch[keys.CRITIC_OBS])
                next_critic_obs = self.critic_obs_normalizer(batch[keys.NEXT_CRITIC_OBS])
            else:
                critic_obs, next_critic_obs = obs, next_obs
            with torch.no_grad():
                policy = self.target_actor if self.target_actor is not None else self.actor
                next_actions = smoothed_target_actions(policy, next_obs, cfg.policy_noise, cfg.noise_clip)
                target = target_distribution(
                    self.target_critic, next_critic_obs, next_actions,
                    rewards, bootstrap, batch[keys.DISCOUNT], cfg.use_cdq,
                )
            loss, q_values = critic_loss(self.critic, critic_obs, batch[keys.ACTIONS], target)

        loss.backward()  # gradients were zeroed by `update`
        self._average_over_ranks(self._critic_params)
        critic_grad_norm = self._clip(self._critic_params)
        self.critic_optimizer.step()
        metrics = {
            "critic_loss": loss.detach(),
            "q_mean": q_values.detach().mean(),
            "q_min": q_values.detach().min(),
            "q_max": q_values.detach().max(),
            "critic_grad_norm": critic_grad_norm,
        }

        if update_actor:
            with self._autocast():
                policy_loss = actor_loss(self.actor, self.critic, obs.detach(), critic_obs.detach(), cfg.use_cdq)
            policy_loss.backward()
            self._average_over_ranks(self._actor_params)
            metrics["actor_grad_norm"] = self._clip(self._actor_params)
            self.actor_optimizer.step()
            metrics["actor_loss"] = policy_loss.detach()
            if self.target_actor is not None:
                polyak_update_(self._target_actor_params, self._actor_params, cfg.tau)

        polyak_update_(self._target_critic_params, self._critic_params, cfg.tau)
        return TensorDict(metrics, batch_size=[])

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
        """Everything needed to resume: modules, optimisers, schedules and counters."""
        return {
            "modules": self.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "actor_schedule": self.actor_schedule.state_dict(),
            "critic_schedule": self.critic_schedule.state_dict(),
            "critic_updates": self.critic_updates,
            "actor_updates": self.actor_updates,
        }

    def load_training_state(self, state: dict) -> None:
        self.load_state_dict(state["modules"])
        _load_optimizer_state(self.actor_optimizer, state["actor_optimizer"])
        _load_optimizer_state(self.critic_optimizer, state["critic_optimizer"])
        self.actor_schedule.load_state_dict(state["actor_schedule"])
        self.critic_schedule.load_state_dict(state["critic_schedule"])
        self.critic_updates = int(state["critic_updates"])
        self.actor_updates = int(state["actor_updates"])
