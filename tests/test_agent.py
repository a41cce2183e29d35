"""The update: targets, losses, delayed actor updates, schedules, host-sync freedom,
compiled == eager, and a full training-state round trip."""

import math

import pytest
import torch
from torch import nn

from fast_td3.learner.algorithms.losses import bootstrap_mask, target_distribution
from fast_td3.learner.algorithms.optimization import LearningRateSchedule, polyak_update_
from envs.protocol import EnvSpec
from fast_td3.learner.algorithms.fast_td3 import FastTD3, actor_loss
from fast_td3.learner.algorithms import make_algorithm
from fast_td3.learner.networks import DistributionalCritic, project_distribution
from fast_td3.learner.replay import ReplayBuffer
from helpers import assert_updates_continue_identically, fill_buffer, random_batch, tiny_config


class FixedLogitsCritic(nn.Module):
    """A stand-in target critic whose heads return given logits."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits
        self.register_buffer("support", torch.linspace(-10, 10, logits.shape[-1]))

    def forward(self, obs, actions, detach_params=False):
        return self.logits


def test_bootstrap_rule_terminated_vs_truncated():
    terminated = torch.tensor([False, True, False, True])
    truncated = torch.tensor([False, False, True, True])
    assert bootstrap_mask(terminated, truncated, False).tolist() == [1.0, 0.0, 1.0, 0.0]
    assert bootstrap_mask(terminated, truncated, True).tolist() == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("use_cdq", [True, False])
def test_target_uses_the_head_with_the_smaller_mean(use_cdq):
    torch.manual_seed(0)
    atoms, batch = 21, 8
    logits = torch.randn(2, batch, atoms) * 3
    critic = FixedLogitsCritic(logits)
    rewards, bootstrap, discount = torch.randn(batch), torch.ones(batch), torch.full((batch,), 0.9)
    got = target_distribution(critic, None, None, rewards, bootstrap, discount, use_cdq)
    probs = torch.softmax(logits, -1)
    per_head = project_distribution(probs, rewards, bootstrap, discount, critic.support)
    if not use_cdq:
        torch.testing.assert_close(got, per_head)
        return
    means = (probs * critic.support).sum(-1)
    assert (means[0] < means[1]).any() and (means[1] < means[0]).any(), "test needs both cases"
    for i in range(batch):
        smaller = int(means[1, i] < means[0, i])
        torch.testing.assert_close(got[0, i], per_head[smaller, i])
        torch.testing.assert_close(got[1, i], per_head[smaller, i])


def test_actor_loss_is_minus_min_q_and_leaves_the_critic_untouched():
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(3, 2), nn.Tanh())
    critic = DistributionalCritic(3, 2, hidden_dims=[16], num_atoms=11, v_min=-5, v_max=5)
    obs = torch.randn(32, 3)
    q = critic.expected_value(critic(obs, actor(obs)))
    loss = actor_loss(actor, critic, obs, obs, use_cdq=True)
    torch.testing.assert_close(loss, -q.min(0).values.mean())
    torch.testing.assert_close(actor_loss(actor, critic, obs, obs, use_cdq=False), -q.mean())
    loss.backward()
    assert all(p.grad is None for p in critic.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.parameters())


def test_polyak_update_known_answer():
    target = [torch.zeros(3), torch.full((2,), 10.0)]
    online = [torch.ones(3), torch.zeros(2)]
    polyak_update_(target, online, 0.1)
    torch.testing.assert_close(target[0], torch.full((3,), 0.1))
    torch.testing.assert_close(target[1], torch.full((2,), 9.0))


def test_cosine_schedule_writes_into_the_tensor_learning_rate():
    param = nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([param], lr=torch.tensor(1.0), fused=True)
    lr_tensor = opt.param_groups[0]["lr"]
    schedule = LearningRateSchedule(opt, 1e-3, 1e-4, total=10, kind="cosine")
    values = [opt.param_groups[0]["lr"].item()]
    for _ in range(12):
        schedule.step()
        values.append(opt.param_groups[0]["lr"].item())
    assert opt.param_groups[0]["lr"] is lr_tensor, "lr must be updated in place"
    assert values[0] == pytest.approx(1e-3)
    assert values[5] == pytest.approx(1e-4 + 0.5 * 9e-4)
    assert values[10] == pytest.approx(1e-4) and values[12] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(values, values[1:]))
    restored = LearningRateSchedule(opt, 1e-3, 1e-4, total=10, kind="cosine")
    restored.load_state_dict({"updates": 5})
    assert opt.param_groups[0]["lr"].item() == pytest.approx(values[5])


@pytest.mark.parametrize(
    "num_updates,policy_frequency",
    [(1, 1), (1, 2), (2, 1), (2, 2), (3, 2), (4, 3), (8, 2), (1, 4)],
)
def test_actor_update_count_for_every_schedule(num_updates, policy_frequency):
    cfg = tiny_config(num_updates=num_updates, policy_frequency=policy_frequency)
    agent = FastTD3(cfg, EnvSpec(num_obs=4, num_actions=2))
    batch = random_batch(4, 2, 16)
    global_steps = 7
    actor_changes = 0
    for _ in range(global_steps):
        for _ in range(cfg.num_updates):
            before = [p.detach().clone() for p in agent.actor.parameters()]
            metrics = agent.update(batch)
            changed = any(not torch.equal(b, p) for b, p in zip(before, agent.actor.parameters()))
            assert changed == ("actor_loss" in metrics.keys())
            actor_changes += changed
    expected = (global_steps * num_updates) // policy_frequency
    assert agent.actor_updates == expected == actor_changes
    assert agent.critic_updates == global_steps * num_updates


@pytest.mark.parametrize("algo", ["fast_td3", "fast_sac"])
def test_hot_loop_makes_no_host_sync(monkeypatch, algo):
    """Reading a tensor's value on the host, or copying a host number to the device, in
    the per-step path (explore, normalise, store, sample, update) would stall a GPU."""
    cfg = tiny_config(name=algo, policy_frequency=1, max_grad_norm=1.0, reward_normalization=True,
                      use_target_actor=True, n_step=3, layer_norm=algo == "fast_sac",
                      obs_normalization_source="replay" if algo == "fast_sac" else "collect")
    agent = make_algorithm(cfg, EnvSpec(num_envs=4, num_obs=4, num_critic_obs=6, num_actions=2))
    buffer = ReplayBuffer(EnvSpec(num_envs=4, num_obs=4, num_critic_obs=6, num_actions=2), 8, n_step=3)
    fill_buffer(buffer, 3)
    obs, critic_obs = torch.randn(4, 4), torch.randn(4, 6)
    rewards, dones = torch.randn(4), torch.tensor([True, False, False, True])
    transition = buffer.sample(4)[:4]  # any [num_envs] transition with every key

    def forbidden(*args, **kwargs):
        raise AssertionError("host sync in the hot loop")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    monkeypatch.setattr(torch, "tensor", forbidden)
    agent.explore(obs)
    agent.episodes_ended(dones)
    agent.update_normalizers(obs, critic_obs, rewards, dones)
    buffer.extend(transition)
    metrics = agent.update(buffer.sample(16))
    monkeypatch.undo()
    assert {"critic_loss", "actor_loss", "q_mean", "critic_grad_norm", "actor_grad_norm"} <= set(metrics.keys())


def test_grad_norm_clipping_bounds_the_step():
    batch = random_batch(4, 2, 64)
    batch["rewards"] *= 1000  # huge targets: huge gradients
    clipped = FastTD3(tiny_config(max_grad_norm=1e-3, weight_decay=0.0), EnvSpec(num_obs=4, num_actions=2))
    metrics = clipped.update(batch)
    assert metrics["critic_grad_norm"] > 1e-3  # reported norm is the pre-clip one
    for p in clipped.critic.parameters():
        assert p.grad.norm() <= 1e-3 * 1.001


def _run_updates(cfg, batches, seed=0):
    torch.manual_seed(seed)
    agent = FastTD3(cfg, EnvSpec(num_obs=5, num_critic_obs=8, num_actions=3)).compile_update()
    losses = []
    for i, batch in enumerate(batches):
        torch.manual_seed(100 + i)  # same smoothing noise in both runs
        m = agent.update(batch)
        losses.append((m["critic_loss"].clone(), m.get("actor_loss", torch.tensor(0.0)).clone()))
    return agent, losses


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-4), ("bf16", 5e-2)])
def test_compiled_update_matches_eager(precision, tol):
    torch._dynamo.reset()
    batches = [random_batch(5, 3, 64, num_critic_obs=8, seed=s) for s in range(4)]
    cfg = dict(precision=precision, policy_frequency=2, policy_noise=0.2)
    eager, eager_losses = _run_updates(tiny_config(compile=False, **cfg), batches)
    # Inductor draws random numbers differently from eager unless told to fall back.
    with torch._inductor.config.patch(fallback_random=True):
        compiled, compiled_losses = _run_updates(tiny_config(compile=True, **cfg), batches)
    for (c_e, a_e), (c_c, a_c) in zip(eager_losses, compiled_losses):
        assert torch.isfinite(c_c) and torch.isfinite(a_c)
        torch.testing.assert_close(c_c, c_e, rtol=tol, atol=tol)
        torch.testing.assert_close(a_c, a_e, rtol=tol, atol=tol)
    for (name, p_e), p_c in zip(eager.state_dict().items(), compiled.state_dict().values()):
        torch.testing.assert_close(p_c, p_e, rtol=tol, atol=tol, msg=f"{name} differs")
    # The updates did move the parameters (the comparison is not between two untouched nets).
    fresh, _ = _run_updates(tiny_config(compile=False, **cfg), [])
    assert not torch.allclose(fresh.critic.layers[0].weight, eager.critic.layers[0].weight)


def test_bf16_updates_stay_finite_on_large_values():
    cfg = tiny_config(precision="bf16", v_min=-250, v_max=250)
    agent = FastTD3(cfg, EnvSpec(num_obs=4, num_actions=2))
    for seed in range(5):
        batch = random_batch(4, 2, 128, seed=seed)
        batch["observations"] *= 1e3
        batch["rewards"] *= 100
        metrics = agent.update(batch)
        assert all(torch.isfinite(v) for v in metrics.values())
    assert all(torch.isfinite(p).all() for p in agent.parameters())


@pytest.mark.parametrize("through_file", [False, True])
def test_training_state_round_trip_continues_identically(through_file, tmp_path):
    cfg = tiny_config(lr_schedule="cosine", critic_lr_end=1e-5, actor_lr_end=1e-5, policy_frequency=2)
    batches = [random_batch(4, 2, 32, seed=s) for s in range(6)]
    torch.manual_seed(0)
    agent = FastTD3(cfg, EnvSpec(num_obs=4, num_actions=2), total_critic_updates=10)
    agent.update_normalizers(torch.randn(8, 4) * 3)
    for b in batches[:3]:
        agent.update(b)
    state = agent.training_state()
    if through_file:  # plain tensors and numbers: loadable with weights_only=True
        torch.save(state, tmp_path / "state.pt")
        state = torch.load(tmp_path / "state.pt", weights_only=True)
    torch.manual_seed(1)
    resumed = FastTD3(cfg, EnvSpec(num_obs=4, num_actions=2), total_critic_updates=10)
    resumed.load_training_state(state)
    assert resumed.critic_updates == 3 and resumed.actor_updates == 1
    assert resumed.learning_rates() == agent.learning_rates()
    assert_updates_continue_identically(agent, resumed, batches[3:])
    # The resumed learner owns its optimiser state and learning-rate tensor.
    assert resumed.critic_optimizer.param_groups[0]["lr"] is not agent.critic_optimizer.param_groups[0]["lr"]
    first = resumed.critic.layers[0].weight
    assert resumed.critic_optimizer.state[first]["exp_avg"].data_ptr() != (
        agent.critic_optimizer.state[agent.critic.layers[0].weight]["exp_avg"].data_ptr()
    )


def test_act_uses_the_observation_normaliser():
    agent = FastTD3(tiny_config(), EnvSpec(num_obs=4, num_actions=2))
    obs = torch.randn(16, 4) * 5 + 3
    agent.update_normalizers(obs)
    expected = agent.actor((obs - agent.obs_normalizer.mean) / (agent.obs_normalizer.std + 1e-2))
    torch.testing.assert_close(agent.act(obs), expected)
    assert agent.act(obs).abs().max() <= 1


def test_cosine_schedule_without_a_length_is_refused():
    with pytest.raises(ValueError, match="schedule_updates"):
        FastTD3(tiny_config(lr_schedule="cosine"), EnvSpec(num_obs=4, num_actions=2))
    agent = FastTD3(tiny_config(lr_schedule="cosine", schedule_updates=10), EnvSpec(num_obs=4, num_actions=2))
    assert agent.critic_schedule.total == 10


def test_invalid_config_names_the_field():
    with pytest.raises(ValueError, match="v_min"):
        tiny_config(v_min=5.0, v_max=1.0)
    with pytest.raises(ValueError, match="precision"):
        tiny_config(precision="fp8")
    assert math.isfinite(tiny_config().gamma)


@pytest.mark.parametrize("compile_", [False, True])
def test_scheduled_learning_rate_reaches_the_optimiser_step(compile_):
    """A cosine schedule that ends at 0 must freeze the networks once it gets there,
    also when the update is compiled (the tensor lr is read live, not baked in)."""
    torch._dynamo.reset()
    cfg = tiny_config(
        compile=compile_, lr_schedule="cosine", schedule_updates=2, policy_frequency=1,
        critic_lr_end=0.0, actor_lr_end=0.0,
    )
    agent = FastTD3(cfg, EnvSpec(num_obs=4, num_actions=2))
    batch = random_batch(4, 2, 32)
    first = [p.detach().clone() for p in agent.critic.parameters()]
    agent.update(batch)
    assert any(not torch.equal(a, b) for a, b in zip(first, agent.critic.parameters()))
    agent.update(batch)
    assert agent.learning_rates() == {"actor_lr": 0.0, "critic_lr": 0.0}
    frozen = [p.detach().clone() for p in agent.parameters() if p.requires_grad]
    agent.update(batch)
    for a, b in zip(frozen, [p for p in agent.parameters() if p.requires_grad]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
