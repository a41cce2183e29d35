"""Learning checks without a simulator: problems whose optimal Q and policy are known.

Both drive the whole learner the way a runner does (exploration noise ->
replay buffer -> sampled batches -> update) so a broken piece anywhere in the
chain shows up as a wrong value or policy.
"""

import pytest
import torch
from tensordict import TensorDict

from envs.protocol import EnvSpec
from fast_td3.learner.algorithms.fast_td3 import FastTD3
from fast_td3.learner.exploration import PerEnvGaussianNoise
from fast_td3.learner.replay import ReplayBuffer
from helpers import tiny_config

NUM_OBS, NUM_ACTIONS, NUM_ENVS = 3, 2, 32
# Optimal action a*(s) = W s, inside [-1, 1] for s in [-1, 1]^3.
W = torch.tensor([[0.5, -0.2, 0.1], [-0.1, 0.3, 0.4]])


def bandit_reward(obs, actions):
    """Quadratic one-step reward, maximal (= 1) at a*(s) = W s."""
    return 1.0 - ((actions - obs @ W.T) ** 2).sum(-1)


def train(agent, cfg, buffer, env_step, global_steps):
    noise = PerEnvGaussianNoise(NUM_ENVS, cfg.fast_td3.std_min, cfg.fast_td3.std_max)
    obs = torch.rand(NUM_ENVS, NUM_OBS) * 2 - 1
    for step in range(global_steps):
        actions = noise(agent.act(obs))
        next_obs, rewards, terminated, truncated = env_step(obs, actions)
        agent.update_normalizers(obs)
        buffer.extend(
            TensorDict(
                observations=obs, actions=actions, rewards=rewards, next_observations=next_obs,
                terminated=terminated, truncated=truncated, batch_size=[NUM_ENVS],
            )
        )
        noise.resample(terminated | truncated)
        obs = next_obs  # memoryless problems: the next state is a fresh random one
        if step >= cfg.learning_starts:
            for _ in range(cfg.num_updates):
                agent.update(buffer.sample(cfg.batch_size))


@pytest.mark.parametrize("precision,compile_", [
    pytest.param("fp32", False, id="eager-fp32"),
    # slow tier: a compile plus 1400 updates in bf16, which AVX2-only CPUs emulate; that compiled
    # updates equal eager ones is checked in the default tier (test_agent.py, test_fast_sac.py)
    pytest.param("bf16", True, id="compiled-bf16", marks=pytest.mark.slow),
])
def test_bandit_critic_learns_true_q_and_actor_the_optimal_action(precision, compile_):
    """Also compiled under bf16: a compiler that silently breaks learning must fail here."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    cfg = tiny_config(
        v_min=-6.0, v_max=2.0, num_atoms=51, batch_size=256, buffer_size=64,
        std_min=0.05, std_max=0.6, policy_noise=0.05, num_updates=2, policy_frequency=2,
        weight_decay=0.0, actor_lr=1e-3, critic_lr=1e-3, precision=precision, compile=compile_,
    )
    agent = FastTD3(cfg, EnvSpec(num_obs=NUM_OBS, num_actions=NUM_ACTIONS))
    buffer = ReplayBuffer(EnvSpec(num_envs=NUM_ENVS, num_obs=NUM_OBS, num_actions=NUM_ACTIONS), cfg.buffer_size)

    def one_step_episode(obs, actions):
        done = torch.ones(NUM_ENVS, dtype=torch.bool)
        next_obs = torch.rand(NUM_ENVS, NUM_OBS) * 2 - 1
        return next_obs, bandit_reward(obs, actions), done, ~done

    train(agent, cfg, buffer, one_step_episode, global_steps=700)

    test_obs = torch.rand(512, NUM_OBS) * 2 - 1
    test_actions = (test_obs @ W.T + torch.randn(512, NUM_ACTIONS) * 0.3).clamp(-1, 1)
    with torch.no_grad():
        normalized = agent.obs_normalizer(test_obs)
        q = agent.critic.expected_value(agent.critic(normalized, test_actions))
    q_error = (q - bandit_reward(test_obs, test_actions)).abs().mean()
    action_error = (agent.act(test_obs) - test_obs @ W.T).norm(dim=-1).mean()
    print(f"bandit: mean |Q - r| = {q_error:.4f}, mean |pi - a*| = {action_error:.4f}")
    assert q_error < 0.1, f"critic mean |Q - r| = {q_error:.3f}"
    assert action_error < 0.1, f"actor mean |pi(s) - a*(s)| = {action_error:.3f}"


def test_value_bootstraps_through_time_outs_but_not_terminations():
    """Reward 1 every step, gamma 0.9. Episodes end at random with p = 0.2 per step:
    as time-outs the true value is 1 / (1 - gamma) = 10 (time-outs bootstrap);
    as terminations it is 1 / (1 - 0.9 * 0.8) = 3.57."""
    results = {}
    for kind in ("time_out", "termination"):
        torch.manual_seed(1)
        cfg = tiny_config(
            gamma=0.9, n_step=3, v_min=-1.0, v_max=15.0, num_atoms=51, batch_size=256,
            buffer_size=64, weight_decay=0.0, critic_lr=1e-3,
        )
        agent = FastTD3(cfg, EnvSpec(num_obs=NUM_OBS, num_actions=NUM_ACTIONS))
        spec = EnvSpec(num_envs=NUM_ENVS, num_obs=NUM_OBS, num_actions=NUM_ACTIONS)
        buffer = ReplayBuffer(spec, cfg.buffer_size, n_step=cfg.n_step, gamma=cfg.gamma)

        def constant_reward(obs, actions):
            ended = torch.rand(NUM_ENVS) < 0.2
            never = torch.zeros_like(ended)
            terminated, truncated = (never, ended) if kind == "time_out" else (ended, never)
            return torch.rand(NUM_ENVS, NUM_OBS) * 2 - 1, torch.ones(NUM_ENVS), terminated, truncated

        train(agent, cfg, buffer, constant_reward, global_steps=400)
        obs = torch.rand(256, NUM_OBS) * 2 - 1
        with torch.no_grad():
            q = agent.critic.expected_value(agent.critic(agent.obs_normalizer(obs), agent.act(obs)))
        results[kind] = q.mean().item()
    print("mean Q:", results)
    assert abs(results["time_out"] - 10.0) < 0.5, results
    assert abs(results["termination"] - 1 / (1 - 0.9 * 0.8)) < 0.3, results
