"""FastSAC: the tanh-Gaussian policy, the temperature, the soft C51 target, compilation,
checkpoints, and learning on a bandit whose optimal policy is known."""

import math

import pytest
import torch
from tensordict import TensorDict

from envs.protocol import EnvSpec
from fast_td3.learner.algorithms import make_algorithm
from fast_td3.learner.algorithms.fast_sac import FastSAC, soft_rewards, temperature_loss
from fast_td3.learner.algorithms.losses import target_distribution
from fast_td3.learner.networks import DistributionalCritic, GaussianActor, project_distribution, tanh_gaussian_sample
from fast_td3.learner.replay import ReplayBuffer
from helpers import assert_updates_continue_identically, random_batch, tiny_sac_config


def test_tanh_gaussian_log_prob_matches_torch_distributions_with_the_jacobian():
    torch.manual_seed(0)
    mean = torch.randn(256, 3) * 2  # some actions close to saturation
    log_std = torch.rand(256, 3) * 3 - 2.5
    noise = torch.randn(256, 3)
    actions, log_prob = tanh_gaussian_sample(mean, log_std, noise)
    base = torch.distributions.Normal(mean.double(), log_std.exp().double())
    squashed = torch.distributions.TransformedDistribution(base, [torch.distributions.TanhTransform()])
    pre_tanh = (mean + log_std.exp() * noise).double()
    expected = squashed.log_prob(torch.tanh(pre_tanh)).sum(-1)
    # TanhTransform inverts through atanh, inexact near +-1: compare with its Jacobian term directly there
    jacobian = torch.distributions.TanhTransform().log_abs_det_jacobian(pre_tanh, torch.tanh(pre_tanh))
    direct = (base.log_prob(pre_tanh) - jacobian).sum(-1)
    torch.testing.assert_close(log_prob.double(), direct, rtol=1e-5, atol=1e-4)
    inside = (torch.tanh(pre_tanh).abs() < 0.99).all(-1)
    torch.testing.assert_close(log_prob.double()[inside], expected[inside], rtol=1e-4, atol=1e-3)
    assert torch.isfinite(log_prob).all() and (actions.abs() <= 1).all()


def test_actor_starts_at_zero_mean_with_the_bounded_std_and_acts_deterministically():
    actor = GaussianActor(4, 2, (16, 16), log_std_min=-5.0, log_std_max=0.0)
    obs = torch.randn(8, 4)
    mean, log_std = actor.distribution(obs)
    assert torch.equal(mean, torch.zeros_like(mean)) and torch.allclose(log_std, torch.full_like(log_std, -2.5))
    assert torch.equal(actor(obs), torch.zeros(8, 2))  # deterministic: tanh(mean)
    with torch.no_grad():
        actor.log_std.bias.fill_(100.0)
    assert torch.allclose(actor.distribution(obs)[1], torch.zeros(8, 2))  # squashed into [-5, 0]


def test_soft_target_against_a_hand_computed_case():
    """Support {-1, 0, 1}, next distribution all on 0, r = 0.5, gamma = 0.9, alpha = 0.5,
    log pi(a'|s') = 1: the soft target is 0.5 - 0.9 * 0.5 * 1 = 0.05 -> 5 % on atom 1, 95 % on 0.
    A terminal sample has no entropy term: the target is r = 0.5, half on 0 and half on 1."""
    support = torch.tensor([-1.0, 0.0, 1.0])
    next_probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    rewards, bootstrap, discount = torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), torch.tensor([0.9, 0.9])
    soft = soft_rewards(rewards, bootstrap, discount, torch.tensor(0.5), torch.tensor([1.0, 1.0]))
    torch.testing.assert_close(soft, torch.tensor([0.05, 0.5]))
    projected = project_distribution(next_probs, soft, bootstrap, discount, support)
    torch.testing.assert_close(projected, torch.tensor([[0.0, 0.95, 0.05], [0.0, 0.5, 0.5]]))


def test_each_head_keeps_its_own_soft_target_without_clipped_double_q():
    torch.manual_seed(0)
    critic = DistributionalCritic(3, 1, (8,), num_atoms=11, v_min=-5, v_max=5)
    obs, actions = torch.randn(16, 3), torch.rand(16, 1) * 2 - 1
    rewards, bootstrap, discount = torch.randn(16), torch.ones(16), torch.full((16,), 0.9)
    own = target_distribution(critic, obs, actions, rewards, bootstrap, discount, use_cdq=False)
    clipped = target_distribution(critic, obs, actions, rewards, bootstrap, discount, use_cdq=True)
    assert not torch.allclose(own[0], own[1])  # two heads, two targets
    assert torch.equal(clipped[0], clipped[1])


@pytest.mark.parametrize("target,direction", [(-10.0, "falls"), (10.0, "rises")])
def test_temperature_moves_towards_the_target_entropy(target, direction):
    """The initial policy's entropy per dimension is about 0.5 * log(2 pi e) - 2.5 - (tanh term),
    far above -10 and far below +10: alpha must fall in the first case and rise in the second."""
    torch.manual_seed(0)
    cfg = tiny_sac_config(fast_sac={"target_entropy_per_action": target, "alpha_init": 0.1})
    agent = FastSAC(cfg, EnvSpec(num_obs=4, num_actions=2))
    before = agent.log_alpha.exp().item()
    for seed in range(3):
        metrics = agent.update(random_batch(4, 2, 64, seed=seed))
    after = agent.log_alpha.exp().item()
    assert (after < before) if direction == "falls" else (after > before), (before, after)
    assert metrics["alpha"].item() != after  # logged: the alpha this update's target used


def test_temperature_loss_gradient_sign():
    log_alpha = torch.zeros(1, requires_grad=True)
    # entropy -log pi = 3 above target 0: the gradient is positive, a descent step lowers log alpha
    temperature_loss(log_alpha, torch.full((4,), -3.0), target_entropy=0.0).backward()
    assert log_alpha.grad.item() > 0
    log_alpha.grad = None
    temperature_loss(log_alpha, torch.full((4,), 3.0), target_entropy=0.0).backward()
    assert log_alpha.grad.item() < 0


def test_fixed_temperature_stays():
    cfg = tiny_sac_config(fast_sac={"learn_alpha": False, "alpha_init": 0.2})
    agent = FastSAC(cfg, EnvSpec(num_obs=4, num_actions=2))
    for seed in range(2):
        agent.update(random_batch(4, 2, 32, seed=seed))
    assert agent.log_alpha.exp().item() == pytest.approx(0.2)


def _run(cfg, batches, num_critic_obs=8):
    torch.manual_seed(0)
    agent = make_algorithm(cfg, EnvSpec(num_obs=5, num_critic_obs=num_critic_obs, num_actions=3))
    losses = []
    for i, batch in enumerate(batches):
        torch.manual_seed(100 + i)  # the same policy samples in both runs
        m = agent.update(batch)
        losses.append({k: v.clone() for k, v in m.items()})
    return agent, losses


@pytest.mark.parametrize("precision,tol", [("fp32", 1e-4), ("bf16", 5e-2)])
def test_compiled_update_matches_eager(precision, tol):
    torch._dynamo.reset()
    batches = [random_batch(5, 3, 64, num_critic_obs=8, seed=s) for s in range(4)]
    cfg = dict(precision=precision, policy_frequency=2)
    eager, eager_metrics = _run(tiny_sac_config(compile=False, **cfg), batches)
    with torch._inductor.config.patch(fallback_random=True):
        compiled, compiled_metrics = _run(tiny_sac_config(compile=True, **cfg), batches)
    for e, c in zip(eager_metrics, compiled_metrics):
        assert e.keys() == c.keys()
        for key in ("critic_loss", "actor_loss", "alpha_loss", "entropy"):
            if key in e:
                torch.testing.assert_close(c[key], e[key], rtol=tol, atol=tol, msg=key)
    for (name, p_e), p_c in zip(eager.state_dict().items(), compiled.state_dict().values()):
        torch.testing.assert_close(p_c, p_e, rtol=tol, atol=tol, msg=f"{name} differs")
    assert "actor_loss" in eager_metrics[1] and "actor_loss" not in eager_metrics[0]


def test_training_state_round_trip_with_the_temperature(tmp_path):
    cfg = tiny_sac_config(fast_sac={"alpha_init": 0.05, "target_entropy_per_action": -5.0})
    batches = [random_batch(4, 2, 32, seed=s) for s in range(6)]
    torch.manual_seed(0)
    agent = FastSAC(cfg, EnvSpec(num_obs=4, num_actions=2))
    for b in batches[:3]:
        agent.update(b)
    torch.save(agent.training_state(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    torch.manual_seed(1)
    resumed = FastSAC(cfg, EnvSpec(num_obs=4, num_actions=2))
    resumed.load_training_state(state)
    assert resumed.log_alpha.item() == agent.log_alpha.item() != math.log(0.05)
    assert resumed.alpha_optimizer.state[resumed.log_alpha]["exp_avg"].abs().sum() > 0
    assert_updates_continue_identically(agent, resumed, batches[3:], ("alpha_loss", "critic_loss"))


def test_observation_statistics_from_replay_batches():
    agent = FastSAC(tiny_sac_config(obs_normalization_source="replay"), EnvSpec(num_obs=4, num_actions=2))
    agent.update_normalizers(torch.randn(8, 4) + 100)  # collection no longer feeds them
    assert agent.obs_normalizer.count.item() == 0
    batch = random_batch(4, 2, 32)
    agent.update(batch)
    assert agent.obs_normalizer.count.item() == 32
    torch.testing.assert_close(agent.obs_normalizer.mean, batch["observations"].mean(0))


NUM_OBS, NUM_ACTIONS, NUM_ENVS = 3, 2, 32
W = torch.tensor([[0.5, -0.2, 0.1], [-0.1, 0.3, 0.4]])


def test_bandit_policy_mean_finds_the_optimal_action():
    """One-step episodes with reward 1 - |a - W s|^2: the soft-optimal policy's mean is W s (the
    entropy bonus only widens it), and its deterministic action must get there."""
    torch.manual_seed(0)
    cfg = tiny_sac_config(v_min=-6.0, v_max=2.0, num_atoms=51, batch_size=256, buffer_size=64,
                          weight_decay=0.0, actor_lr=1e-3, critic_lr=1e-3,
                          fast_sac={"target_entropy_per_action": -2.0, "alpha_init": 0.01, "alpha_lr": 1e-3})
    agent = FastSAC(cfg, EnvSpec(num_envs=NUM_ENVS, num_obs=NUM_OBS, num_actions=NUM_ACTIONS))
    buffer = ReplayBuffer(EnvSpec(num_envs=NUM_ENVS, num_obs=NUM_OBS, num_actions=NUM_ACTIONS), cfg.buffer_size)
    obs = torch.rand(NUM_ENVS, NUM_OBS) * 2 - 1
    done = torch.ones(NUM_ENVS, dtype=torch.bool)
    for step in range(250):  # the error is about 0.03 by then (0.4 after 50 steps)
        actions = agent.explore(obs)
        rewards = 1.0 - ((actions - obs @ W.T) ** 2).sum(-1)
        agent.update_normalizers(obs)
        buffer.extend(TensorDict(observations=obs, actions=actions, rewards=rewards, next_observations=obs,
                                 terminated=done, truncated=~done, batch_size=[NUM_ENVS]))
        obs = torch.rand(NUM_ENVS, NUM_OBS) * 2 - 1
        if step >= cfg.learning_starts:
            for _ in range(cfg.num_updates):
                agent.update(buffer.sample(cfg.batch_size))
    test_obs = torch.rand(512, NUM_OBS) * 2 - 1
    action_error = (agent.act(test_obs) - test_obs @ W.T).norm(dim=-1).mean()
    print(f"bandit: mean |pi - a*| = {action_error:.4f}, alpha = {agent.log_alpha.exp().item():.4g}")
    assert action_error < 0.1, f"actor mean |pi(s) - a*(s)| = {action_error:.3f}"
