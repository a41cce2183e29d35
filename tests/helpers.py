"""Small builders shared by the learner tests."""

import torch
from tensordict import TensorDict

from fast_td3.config import AlgoConfig
from fast_td3.replay import ReplayBuffer


def tiny_config(**overrides) -> AlgoConfig:
    """The reference algorithm with small networks and eager fp32 execution."""
    values = dict(
        actor_hidden_dims=[32, 32],
        critic_hidden_dims=[64, 64],
        num_atoms=21,
        v_min=-10.0,
        v_max=10.0,
        batch_size=64,
        precision="fp32",
        compile=False,
    )
    values.update(overrides)
    return AlgoConfig(**values)


def random_batch(num_obs, num_actions, batch_size, num_critic_obs=None, seed=0) -> TensorDict:
    """A sampled-batch-shaped TensorDict with random contents (mixed terminations/time-outs)."""
    g = torch.Generator().manual_seed(seed)
    data = {
        "observations": torch.randn(batch_size, num_obs, generator=g),
        "next_observations": torch.randn(batch_size, num_obs, generator=g),
        "actions": torch.rand(batch_size, num_actions, generator=g) * 2 - 1,
        "rewards": torch.randn(batch_size, generator=g),
        "terminated": torch.rand(batch_size, generator=g) < 0.1,
        "truncated": torch.rand(batch_size, generator=g) < 0.1,
        "discount": torch.full((batch_size,), 0.99),
    }
    if num_critic_obs is not None:
        data["critic_observations"] = torch.randn(batch_size, num_critic_obs, generator=g)
        data["next_critic_observations"] = torch.randn(batch_size, num_critic_obs, generator=g)
    return TensorDict(data, batch_size=[batch_size])


def fill_buffer(buffer: ReplayBuffer, steps: int, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    e = buffer.num_envs
    for _ in range(steps):
        step = {
            "observations": torch.randn(e, buffer.num_obs, generator=g),
            "next_observations": torch.randn(e, buffer.num_obs, generator=g),
            "actions": torch.rand(e, buffer.num_actions, generator=g) * 2 - 1,
            "rewards": torch.randn(e, generator=g),
            "terminated": torch.rand(e, generator=g) < 0.05,
            "truncated": torch.rand(e, generator=g) < 0.05,
        }
        if buffer.num_critic_obs is not None:
            step["critic_observations"] = torch.randn(e, buffer.num_critic_obs, generator=g)
            step["next_critic_observations"] = torch.randn(e, buffer.num_critic_obs, generator=g)
        buffer.extend(TensorDict(step, batch_size=[e]))
