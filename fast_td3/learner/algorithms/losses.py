"""The pure C51 losses every algorithm here shares: the bootstrap mask, the projected TD target
of the twin critic, the critic's cross-entropy.

They take modules and tensors and return tensors; they hold no state and branch only on Python
configuration, never on tensor values (no host syncs inside a compiled update).
"""

from __future__ import annotations

import torch

from fast_td3.learner.networks import DistributionalCritic, project_distribution


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
