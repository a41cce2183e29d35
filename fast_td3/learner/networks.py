"""Actors (deterministic and tanh-Gaussian), twin distributional critic and the C51 projection.

The twin critic keeps both heads' weights stacked in one tensor per layer, so
both heads run as one batched matmul (one kernel per layer instead of two) and
the whole critic is a single module to compile, optimise and average.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from fast_td3.learner.inductor_workarounds import relu_without_saved_mask


ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU}


def mlp_trunk(num_in: int, hidden_dims: Sequence[int], activation: str = "relu", layer_norm: bool = False) -> list[nn.Module]:
    """Hidden layers `Linear [-> LayerNorm] -> activation`, as a list of modules."""
    layers: list[nn.Module] = []
    width = num_in
    for hidden in hidden_dims:
        layers.append(nn.Linear(width, hidden))
        if layer_norm:
            layers.append(nn.LayerNorm(hidden))
        layers.append(ACTIVATIONS[activation]())
        width = hidden
    return layers


class Actor(nn.Module):
    """Deterministic policy: MLP with a tanh output in [-1, 1] (FastTD3)."""

    def __init__(
        self,
        num_obs: int,
        num_actions: int,
        hidden_dims: Sequence[int] = (512, 256, 128),
        last_layer_std: float = 0.01,
        activation: str = "relu",
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        layers = mlp_trunk(num_obs, hidden_dims, activation, layer_norm)
        last = nn.Linear(hidden_dims[-1] if hidden_dims else num_obs, num_actions)
        # Small last layer: the first actions are near zero, so early exploration
        # is driven by the noise and not by a random, saturated tanh.
        nn.init.normal_(last.weight, mean=0.0, std=last_layer_std)
        nn.init.zeros_(last.bias)
        layers += [last, nn.Tanh()]
        self.net = nn.Sequential(*layers)
        self.num_obs = num_obs
        self.num_actions = num_actions

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class GaussianActor(nn.Module):
    """Tanh-Gaussian policy (FastSAC): a trunk, then a mean head and a log-std head, both
    initialised to zero (the first policy is tanh(N(0, std0)) for every observation).

    The log-std head's output is squashed by tanh into [log_std_min, log_std_max].
    `forward` is the deterministic action tanh(mean), what evaluation and export run;
    `sample` draws a reparameterised action with its log-probability.
    """

    def __init__(
        self,
        num_obs: int,
        num_actions: int,
        hidden_dims: Sequence[int] = (512, 256, 128),
        log_std_min: float = -5.0,
        log_std_max: float = 0.0,
        activation: str = "silu",
        layer_norm: bool = True,
    ) -> None:
        super().__init__()
        self.net = nn.Sequential(*mlp_trunk(num_obs, hidden_dims, activation, layer_norm))
        width = hidden_dims[-1] if hidden_dims else num_obs
        self.mean = nn.Linear(width, num_actions)
        self.log_std = nn.Linear(width, num_actions)
        for head in (self.mean, self.log_std):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        self.num_obs = num_obs
        self.num_actions = num_actions

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) of the Gaussian before the tanh."""
        x = self.net(obs)
        squashed = torch.tanh(self.log_std(x))
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (squashed + 1.0)
        return self.mean(x), log_std

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mean(self.net(obs)))

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in (-1, 1) and its log-probability `[batch]`."""
        mean, log_std = self.distribution(obs)
        mean, log_std = mean.float(), log_std.float()  # the log-probability in float32, also under bf16
        return tanh_gaussian_sample(mean, log_std, torch.randn_like(mean))


LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def tanh_gaussian_sample(
    mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`a = tanh(mean + std * noise)` and `log pi(a)`, summed over action dimensions.

    The tanh Jacobian uses `log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`, exact and
    finite where the action saturates (no epsilon).
    """
    pre_tanh = mean + log_std.exp() * noise
    gaussian = -0.5 * noise.pow(2) - log_std - LOG_SQRT_2PI
    jacobian = 2.0 * (math.log(2.0) - pre_tanh - nn.functional.softplus(-2.0 * pre_tanh))
    return torch.tanh(pre_tanh), (gaussian - jacobian).sum(-1)


class StackedLinear(nn.Module):
    """`num_heads` independent linear layers applied in one batched matmul.

    Input `[heads, batch, in]` (or `[batch, in]`, shared by every head);
    output `[heads, batch, out]`. Each head is initialised like `nn.Linear`.
    """

    def __init__(self, num_heads: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_heads, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(num_heads, 1, out_features))
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if detach_params:
            weight, bias = weight.detach(), bias.detach()
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(weight.shape[0], -1, -1)
        return torch.baddbmm(bias, x, weight)


class StackedLayerNorm(nn.Module):
    """LayerNorm over the last dimension with per-head affine parameters `[heads, 1, width]`."""

    def __init__(self, num_heads: int, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_heads, 1, width))
        self.bias = nn.Parameter(torch.zeros(num_heads, 1, width))
        self.eps = eps

    def forward(self, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if detach_params:
            weight, bias = weight.detach(), bias.detach()
        x = nn.functional.layer_norm(x, x.shape[-1:], eps=self.eps)
        return torch.addcmul(bias, x, weight)


class DistributionalCritic(nn.Module):
    """Twin C51 critic: each head maps (critic observation, action) to atom logits.

    `forward` returns logits `[num_heads, batch, num_atoms]`; the value support
    `linspace(v_min, v_max, num_atoms)` is a buffer so it follows the module's
    device and is saved with it.
    """

    def __init__(
        self,
        num_obs: int,
        num_actions: int,
        hidden_dims: Sequence[int] = (1024, 512, 256),
        num_atoms: int = 101,
        v_min: float = -250.0,
        v_max: float = 250.0,
        num_heads: int = 2,
        activation: str = "relu",
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        widths = [num_obs + num_actions, *hidden_dims, num_atoms]
        self.layers = nn.ModuleList(
            StackedLinear(num_heads, w_in, w_out) for w_in, w_out in zip(widths[:-1], widths[1:])
        )
        self.norms = nn.ModuleList(StackedLayerNorm(num_heads, w) for w in hidden_dims) if layer_norm else None
        self.activation = activation
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms))
        self.num_heads = num_heads
        self.num_atoms = num_atoms
        self.v_min = float(v_min)
        self.v_max = float(v_max)

    def forward(
        self, obs: torch.Tensor, actions: torch.Tensor, detach_params: bool = False
    ) -> torch.Tensor:
        """Atom logits of every head. `detach_params` keeps the critic out of the
        actor's backward pass without toggling `requires_grad` (no recompiles)."""
        if self.activation == "silu":
            activation = nn.functional.silu
        else:
            activation = relu_without_saved_mask if detach_params else torch.relu
        x = torch.cat([obs, actions], dim=-1)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, detach_params=detach_params)
            if i < last:
                if self.norms is not None:
                    x = self.norms[i](x, detach_params=detach_params)
                x = activation(x)
        return x

    def expected_value(self, logits: torch.Tensor) -> torch.Tensor:
        """Mean of each head's value distribution: `[heads, batch]`."""
        probs = torch.softmax(logits.float(), dim=-1)
        return (probs * self.support).sum(dim=-1)

    @staticmethod
    def reduce_heads(q: torch.Tensor, use_cdq: bool) -> torch.Tensor:
        """One value per sample `[batch]` from the heads' `[heads, batch]`: the smaller head with
        clipped double Q (what the actor maximises), else the heads' mean."""
        return q.min(dim=0).values if use_cdq else q.mean(dim=0)


def project_distribution(
    next_probs: torch.Tensor,
    rewards: torch.Tensor,
    bootstrap: torch.Tensor,
    discount: torch.Tensor,
    support: torch.Tensor,
) -> torch.Tensor:
    """C51 projection of the target distribution `r + bootstrap * discount * Z`.

    Args:
        next_probs: `[..., batch, atoms]` probabilities of the next-state distribution.
        rewards, bootstrap, discount: `[batch]`; `discount` is the per-sample
            `gamma ** k` of an n-step return, `bootstrap` is 0 where the return
            ends in a termination.
        support: `[atoms]`, evenly spaced.

    Returns the projected probabilities, same shape as `next_probs`. Each
    target atom's mass is split between its two neighbours on the support in
    proportion to distance; a target exactly on an atom gives that atom all of
    its mass (never twice); targets outside the support are clamped to its ends.
    Total mass is preserved exactly.
    """
    num_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    target = rewards.unsqueeze(-1) + (bootstrap * discount).unsqueeze(-1) * support
    target = target.clamp(v_min, v_max)
    position = (target - v_min) / delta
    lower = position.floor().clamp(0, num_atoms - 1)
    upper_weight = position - lower  # 0 when the target sits on an atom
    lower_weight = 1.0 - upper_weight
    lower_idx = lower.long()
    upper_idx = (lower_idx + 1).clamp(max=num_atoms - 1)
    lower_idx = lower_idx.expand_as(next_probs)
    upper_idx = upper_idx.expand_as(next_probs)
    projected = torch.zeros_like(next_probs)
    projected.scatter_add_(-1, lower_idx, next_probs * lower_weight)
    projected.scatter_add_(-1, upper_idx, next_probs * upper_weight)
    return projected
