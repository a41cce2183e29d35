"""FastTD3 (arXiv 2505.22642): a deterministic tanh actor, per-env Gaussian exploration noise,
target-policy smoothing, clipped double Q on a twin C51 critic.

Its pure losses are below; `FastTD3._update` is the one function handed to `torch.compile`
(Dynamo splits it at `backward()` and at the fused AdamW step, with no host syncs anywhere).
"""

from __future__ import annotations

import copy

import torch
from tensordict import TensorDict
from torch import nn

from fast_td3.learner.algorithms.base import OffPolicyAlgorithm
from fast_td3.learner.algorithms.losses import critic_loss, target_distribution
from fast_td3.learner.algorithms.optimization import polyak_update_
from fast_td3.learner.exploration import PerEnvGaussianNoise
from fast_td3.learner.networks import Actor, DistributionalCritic


# --------------------------------------------------------------------------- losses
def smoothed_target_actions(
    policy: nn.Module, next_obs: torch.Tensor, noise_std: float, noise_clip: float
) -> torch.Tensor:
    """Target-policy smoothing: policy action plus clipped Gaussian noise, kept in [-1, 1]."""
    actions = policy(next_obs)
    noise = (torch.randn_like(actions) * noise_std).clamp(-noise_clip, noise_clip)
    return (actions + noise).clamp(-1.0, 1.0)


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
    value = critic.reduce_heads(q, use_cdq)
    return -value.mean()


# --------------------------------------------------------------------------- learner
class FastTD3(OffPolicyAlgorithm):
    """FastTD3 on the shared learner: `explore` adds per-env Gaussian noise (std ~ U[std_min,
    std_max] per env, redrawn when its episode ends) to the deterministic action."""

    def make_actor(self) -> nn.Module:
        cfg, own = self.cfg, self.cfg.fast_td3
        return Actor(self.spec.num_obs, self.spec.num_actions, cfg.actor_hidden_dims, own.actor_last_layer_std,
                     activation=cfg.activation, layer_norm=cfg.layer_norm)

    def setup(self) -> None:
        own = self.cfg.fast_td3
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False) if own.use_target_actor else None
        self._target_actor_params = list(self.target_actor.parameters()) if self.target_actor else []
        # Not a submodule: the noise std is per env and per rank, saved as exploration state
        # (not among the replicated modules a data-parallel run compares and broadcasts).
        object.__setattr__(self, "noise", PerEnvGaussianNoise(self.spec.num_envs, own.std_min, own.std_max, self.device))

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        return self.noise(self.act(obs))

    def episodes_ended(self, dones: torch.Tensor) -> None:
        self.noise.resample(dones)

    def _update(self, batch: TensorDict, update_actor: bool) -> TensorDict:
        cfg, own = self.cfg, self.cfg.fast_td3
        x = self._inputs(batch)
        with self._autocast():
            with torch.no_grad():
                policy = self.target_actor if self.target_actor is not None else self.actor
                next_actions = smoothed_target_actions(policy, x.next_obs, own.policy_noise, own.noise_clip)
                target = target_distribution(
                    self.target_critic, x.next_critic_obs, next_actions, x.rewards, x.bootstrap, x.discount, cfg.use_cdq,
                )
            loss, q_values = critic_loss(self.critic, x.critic_obs, x.actions, target)
        metrics = self._critic_step(loss, q_values)
        if update_actor:
            with self._autocast():
                policy_loss = actor_loss(self.actor, self.critic, x.obs.detach(), x.critic_obs.detach(), cfg.use_cdq)
            # Assigned first: `metrics.update(...)` would keep a per-call bound method on the stack
            # across the graph break in backward(), and Dynamo recompiled the rest of the update on
            # every call until its limit, then ran it eagerly (tests/test_hot_path.py pins this).
            actor_metrics = self._actor_step(policy_loss)
            metrics.update(actor_metrics)
            if self.target_actor is not None:
                polyak_update_(self._target_actor_params, self._actor_params, cfg.tau)
        self._polyak_critic()
        return TensorDict(metrics, batch_size=[])

    def extra_state(self) -> dict:
        return {"exploration": self.noise.state_dict()}

    def load_extra_state(self, state: dict) -> None:
        self.noise.load_state_dict(state["exploration"])


ALGORITHM = FastTD3
