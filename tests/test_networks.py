"""Actor and twin critic: shapes, ranges, independent heads in one batched call."""

import torch
from torch import nn

from fast_td3.learner.exploration import PerEnvGaussianNoise
from fast_td3.learner.networks import Actor, DistributionalCritic


def test_actor_outputs_in_range_and_starts_near_zero():
    torch.manual_seed(0)
    actor = Actor(10, 4, hidden_dims=[32, 16])
    out = actor(torch.randn(256, 10))
    assert out.shape == (256, 4)
    assert out.abs().mean() < 0.05  # small last layer: near-zero first actions
    last = actor.net[-2]
    assert last.bias.abs().max() == 0
    assert abs(last.weight.std().item() - 0.01) < 0.005
    with torch.no_grad():
        last.weight.mul_(1e4)
    big = actor(torch.randn(256, 10) * 10)
    assert big.abs().max() <= 1.0


def test_twin_heads_are_independent_mlps_evaluated_in_one_call():
    torch.manual_seed(0)
    critic = DistributionalCritic(6, 2, hidden_dims=[16, 8], num_atoms=11, v_min=-1, v_max=1)
    obs, act = torch.randn(5, 6), torch.randn(5, 2)
    logits = critic(obs, act)
    assert logits.shape == (2, 5, 11)
    for head in range(2):
        x = torch.cat([obs, act], -1)
        for i, layer in enumerate(critic.layers):
            x = x @ layer.weight[head] + layer.bias[head]
            if i < len(critic.layers) - 1:
                x = torch.relu(x)
        torch.testing.assert_close(logits[head], x)
    # Different initialisations per head: the heads disagree.
    assert not torch.allclose(logits[0], logits[1])
    torch.testing.assert_close(critic.support, torch.linspace(-1, 1, 11))
    q = critic.expected_value(logits)
    assert q.shape == (2, 5) and (q.abs() <= 1).all()


def test_heads_initialised_like_nn_linear():
    critic = DistributionalCritic(100, 28, hidden_dims=[64], num_atoms=5)
    bound = 1 / (128**0.5)
    w = critic.layers[0].weight
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound


def test_detached_parameters_get_no_gradient_but_inputs_do():
    critic = DistributionalCritic(3, 1, hidden_dims=[8], num_atoms=5)
    act = torch.zeros(4, 1, requires_grad=True)
    critic(torch.randn(4, 3), act, detach_params=True).sum().backward()
    assert all(p.grad is None for p in critic.parameters())
    assert act.grad is not None and act.grad.abs().sum() > 0


def test_exploration_noise_per_env_std_in_range_and_redrawn_only_for_done_envs():
    torch.manual_seed(0)
    noise = PerEnvGaussianNoise(1000, 0.05, 0.8)
    assert noise.std.shape == (1000, 1)
    assert noise.std.min() >= 0.05 and noise.std.max() <= 0.8
    assert noise.std.std() > 0.1  # spread over the range, not one value
    before = noise.std.clone()
    dones = torch.zeros(1000, dtype=torch.bool)
    dones[:10] = True
    noise.resample(dones)
    assert torch.equal(noise.std[10:], before[10:])
    assert not torch.equal(noise.std[:10], before[:10])
    actions = noise(torch.zeros(1000, 3))
    assert actions.abs().max() <= 1.0
    narrow = PerEnvGaussianNoise(100, 0.05, 0.3)  # small enough that clamping is rare
    per_env_std = narrow(torch.zeros(100, 4000)).std(dim=1)
    torch.testing.assert_close(per_env_std, narrow.std.squeeze(1), atol=0.02, rtol=0.05)
    empty = PerEnvGaussianNoise(3, 0.0, 0.0)
    assert torch.equal(empty(torch.full((3, 2), 0.5)), torch.full((3, 2), 0.5))
    assert isinstance(noise, nn.Module) and "std" in noise.state_dict()


def test_detached_critic_gives_the_same_action_gradients_as_the_plain_one():
    """The actor-loss path uses a ReLU with a sign-based backward; it must be exact."""
    torch.manual_seed(0)
    critic = DistributionalCritic(6, 3, hidden_dims=[32, 16], num_atoms=7)
    obs = torch.randn(64, 6)
    act_plain = torch.randn(64, 3, requires_grad=True)
    act_detached = act_plain.detach().clone().requires_grad_(True)
    torch.testing.assert_close(critic(obs, act_plain), critic(obs, act_detached, detach_params=True))
    critic.expected_value(critic(obs, act_plain)).sum().backward()
    critic.expected_value(critic(obs, act_detached, detach_params=True)).sum().backward()
    torch.testing.assert_close(act_detached.grad, act_plain.grad, rtol=0, atol=0)
    # At exactly zero the gradient is zero, as for torch.relu.
    from fast_td3.learner.inductor_workarounds import ReluSignGrad

    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    ReluSignGrad.apply(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0]
