"""FastSAC (the learner of arXiv 2512.01996, "Learning Sim-to-Real Humanoid Locomotion in
15 Minutes"): a tanh-Gaussian actor, a learnt temperature and the soft C51 target on the same
twin distributional critic, replay and runner as FastTD3.

Per critic update: the critic learns the soft target
`r + gamma^k * bootstrap * (Z(s', a') - alpha * log pi(a'|s'))`, a' ~ pi(s'), which is the C51
projection of `Z` with the reward `r - gamma^k * bootstrap * alpha * log pi(a'|s')`; each head
projects its own target (use_cdq=false, holosoma) or both take the smaller head's (use_cdq=true);
then log alpha takes one step towards the target entropy (on the same a'); on the actor's
turns the actor minimises `alpha * log pi(a|s) - Q(s, a)` with Q the heads' mean (or their
minimum with use_cdq). `FastSAC._update` is the one compiled function.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from torch import nn

from fast_td3.learner.algorithms.base import OffPolicyAlgorithm
from fast_td3.learner.algorithms.losses import critic_loss, target_distribution
from fast_td3.learner.algorithms.optimization import load_optimizer_state, make_adamw
from fast_td3.learner.networks import DistributionalCritic, GaussianActor


# --------------------------------------------------------------------------- losses
def soft_rewards(
    rewards: torch.Tensor, bootstrap: torch.Tensor, discount: torch.Tensor,
    alpha: torch.Tensor, next_log_probs: torch.Tensor,
) -> torch.Tensor:
    """The entropy bonus folded into the reward: `r - gamma^k * bootstrap * alpha * log pi(a'|s')`,
    so projecting `reward + gamma^k * bootstrap * Z` gives the soft C51 target."""
    return rewards - discount * bootstrap * alpha * next_log_probs


def temperature_loss(log_alpha: torch.Tensor, log_probs: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """`-alpha * (log pi + target_entropy)`, batch mean: its gradient lowers alpha while the
    policy's entropy `-log pi` is above the target and raises it below."""
    return (-log_alpha.exp() * (log_probs.detach() + target_entropy)).mean()


def sac_actor_loss(
    actor: GaussianActor,
    critic: DistributionalCritic,
    obs: torch.Tensor,
    critic_obs: torch.Tensor,
    alpha: torch.Tensor,
    use_cdq: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`alpha * log pi(a|s) - Q(s, a)`, a ~ pi(s) reparameterised, batch mean (Q: the heads'
    mean, or their minimum with clipped double Q); also returns the log-probabilities.
    The critic's parameters are detached (no critic gradients in the actor's backward)."""
    actions, log_probs = actor.sample(obs)
    q = critic.expected_value(critic(critic_obs, actions, detach_params=True))
    value = critic.reduce_heads(q, use_cdq)
    return (alpha * log_probs - value).mean(), log_probs


# --------------------------------------------------------------------------- learner
class FastSAC(OffPolicyAlgorithm):
    """FastSAC on the shared learner: `explore` samples the tanh-Gaussian policy; the
    temperature `log_alpha` is a parameter with its own AdamW (`alpha_optimizer`)."""

    metric_names = {
        **OffPolicyAlgorithm.metric_names,
        "alpha": "sac/alpha", "alpha_loss": "loss/alpha", "entropy": "sac/entropy",
    }

    def make_actor(self) -> nn.Module:
        cfg, own = self.cfg, self.cfg.fast_sac
        return GaussianActor(self.spec.num_obs, self.spec.num_actions, cfg.actor_hidden_dims, own.log_std_min,
                             own.log_std_max, activation=cfg.activation, layer_norm=cfg.layer_norm)

    def setup(self) -> None:
        own = self.cfg.fast_sac
        self.log_alpha = nn.Parameter(torch.full((1,), math.log(own.alpha_init), device=self.device),
                                      requires_grad=own.learn_alpha)
        self.target_entropy = own.target_entropy_per_action * self.spec.num_actions
        self.alpha_optimizer = make_adamw([self.log_alpha], own.alpha_lr, self.cfg, self.device,
                                          weight_decay=own.alpha_weight_decay)

    @property
    def optimizers(self) -> tuple[torch.optim.Optimizer, ...]:
        return (self.critic_optimizer, self.actor_optimizer, self.alpha_optimizer)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            return self.actor.sample(self.obs_normalizer(obs))[0].float()

    def _update(self, batch: TensorDict, update_actor: bool) -> TensorDict:
        cfg, own = self.cfg, self.cfg.fast_sac
        x = self._inputs(batch)
        alpha = self.log_alpha.detach().exp()
        with self._autocast():
            with torch.no_grad():
                next_actions, next_log_probs = self.actor.sample(x.next_obs)
                next_log_probs = next_log_probs.float()
                rewards = soft_rewards(x.rewards, x.bootstrap, x.discount, alpha, next_log_probs)
                target = target_distribution(
                    self.target_critic, x.next_critic_obs, next_actions, rewards, x.bootstrap, x.discount, cfg.use_cdq,
                )
            loss, q_values = critic_loss(self.critic, x.critic_obs, x.actions, target)
        metrics = self._critic_step(loss, q_values)
        metrics["alpha"] = alpha.reshape(())
        if own.learn_alpha:
            alpha_loss = temperature_loss(self.log_alpha, next_log_probs, self.target_entropy)
            alpha_loss.backward()
            self._average_over_ranks([self.log_alpha])
            self.alpha_optimizer.step()
            metrics["alpha_loss"] = alpha_loss.detach()
        if update_actor:
            with self._autocast():
                policy_loss, log_probs = sac_actor_loss(
                    self.actor, self.critic, x.obs.detach(), x.critic_obs.detach(),
                    self.log_alpha.detach().exp(), cfg.use_cdq,
                )
            actor_metrics = self._actor_step(policy_loss.float())  # not metrics.update(...): see fast_td3.py
            metrics.update(actor_metrics)
            metrics["entropy"] = -log_probs.detach().float().mean()
        self._polyak_critic()
        return TensorDict(metrics, batch_size=[])

    def extra_state(self) -> dict:
        return {"alpha_optimizer": self.alpha_optimizer.state_dict()}

    def load_extra_state(self, state: dict) -> None:
        load_optimizer_state(self.alpha_optimizer, state["alpha_optimizer"])


ALGORITHM = FastSAC
