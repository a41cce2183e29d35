"""Replay buffer: n-step returns against a brute-force reference, bootstrap rules,
balanced sampling, asymmetric storage, memory accounting and state round trips."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from envs.protocol import EnvSpec
from fast_td3.learner.replay import ReplayBuffer


def random_stream(num_envs, steps, num_obs, num_actions, seed, p_term=0.1, p_trunc=0.08):
    """Per-step transitions whose observations encode (env, step) so a sample can be traced."""
    rng = np.random.default_rng(seed)
    stream = []
    for t in range(steps):
        obs = rng.normal(size=(num_envs, num_obs)).astype(np.float32)
        obs[:, 0] = np.arange(num_envs)
        obs[:, 1] = t
        terminated = rng.uniform(size=num_envs) < p_term
        truncated = (rng.uniform(size=num_envs) < p_trunc) & ~terminated
        stream.append(
            dict(
                observations=obs,
                next_observations=rng.normal(size=(num_envs, num_obs)).astype(np.float32),
                actions=rng.uniform(-1, 1, size=(num_envs, num_actions)).astype(np.float32),
                rewards=rng.normal(size=num_envs).astype(np.float32),
                terminated=terminated,
                truncated=truncated,
            )
        )
    return stream


def as_td(step):
    n = step["rewards"].shape[0]
    return TensorDict({k: torch.as_tensor(v) for k, v in step.items()}, batch_size=[n])


def brute_force_nstep(stream, env, t, newest, n, gamma):
    """Walk forward from step t; stop after n steps, after an episode end, or at the newest step."""
    ret, k = 0.0, 0
    while True:
        step = stream[t + k]
        ret += gamma**k * float(step["rewards"][env])
        k += 1
        ended = step["terminated"][env] or step["truncated"][env]
        if ended or k == n or t + k > newest:
            break
    last = stream[t + k - 1]
    return dict(
        reward=ret,
        length=k,
        discount=gamma**k,
        terminated=bool(last["terminated"][env]),
        truncated=bool(last["truncated"][env]),
        next_obs=last["next_observations"][env],
    )


@pytest.mark.parametrize(
    "capacity,steps,n_step",
    [
        (50, 20, 3),  # partly filled
        (50, 50, 3),  # exactly full
        (16, 45, 3),  # wrapped around several times, write pointer mid-row
        (16, 45, 5),
        (8, 30, 1),
    ],
)
def test_nstep_matches_brute_force(capacity, steps, n_step):
    num_envs, gamma = 4, 0.9
    stream = random_stream(num_envs, steps, 5, 2, seed=capacity + steps + n_step)
    buffer = ReplayBuffer(EnvSpec(num_envs=num_envs, num_obs=5, num_actions=2), capacity, n_step=n_step, gamma=gamma)
    for step in stream:
        buffer.extend(as_td(step))
    assert len(buffer) == min(steps, capacity)
    # Every stored slot of every env, in age order.
    ages = torch.arange(len(buffer)).repeat(num_envs, 1)
    batch = buffer.gather(ages)
    newest = steps - 1
    oldest = steps - len(buffer)
    for i in range(batch.shape[0]):
        env, t = int(batch["observations"][i, 0]), int(batch["observations"][i, 1])
        assert env == i // len(buffer)
        assert t == oldest + i % len(buffer), "age 0 must be the oldest stored step"
        want = brute_force_nstep(stream, env, t, newest, n_step, gamma)
        assert int(batch["n_step_length"][i]) == want["length"]
        assert batch["rewards"][i].item() == pytest.approx(want["reward"], abs=1e-5)
        assert batch["discount"][i].item() == pytest.approx(want["discount"], rel=1e-6)
        assert bool(batch["terminated"][i]) == want["terminated"]
        assert bool(batch["truncated"][i]) == want["truncated"]
        np.testing.assert_array_equal(batch["next_observations"][i].numpy(), want["next_obs"])
        np.testing.assert_array_equal(batch["actions"][i].numpy(), stream[t]["actions"][env])


def hand_stream(terminated_at=None, truncated_at=None):
    """One env, rewards 1, 2, 4, 8; obs of step t is t, next obs is 100 + t (the final obs)."""
    steps = []
    for t, r in enumerate([1.0, 2.0, 4.0, 8.0]):
        steps.append(
            dict(
                observations=np.array([[t]], np.float32),
                next_observations=np.array([[100 + t]], np.float32),
                actions=np.zeros((1, 1), np.float32),
                rewards=np.array([r], np.float32),
                terminated=np.array([t == terminated_at]),
                truncated=np.array([t == truncated_at]),
            )
        )
    return steps


def first_transition(stream, n_step=3, gamma=0.5):
    buffer = ReplayBuffer(EnvSpec(num_envs=1, num_obs=1, num_actions=1), 10, n_step=n_step, gamma=gamma)
    for step in stream:
        buffer.extend(as_td(step))
    return buffer.gather(torch.zeros(1, 1, dtype=torch.long))[0]


def test_known_answer_termination_does_not_bootstrap():
    sample = first_transition(hand_stream(terminated_at=1))
    assert sample["rewards"].item() == 1 + 0.5 * 2
    assert sample["discount"].item() == 0.25
    assert sample["terminated"].item() and not sample["truncated"].item()
    # The learner's bootstrap mask is 1 - terminated: no value after a termination.


def test_known_answer_truncation_bootstraps_from_the_final_observation():
    sample = first_transition(hand_stream(truncated_at=1))
    assert sample["rewards"].item() == 1 + 0.5 * 2
    assert sample["discount"].item() == 0.25
    assert sample["truncated"].item() and not sample["terminated"].item()
    # Step 1's true final observation (101), not step 2's reset observation (2).
    assert sample["next_observations"].item() == 101


def test_known_answer_full_window_and_write_pointer():
    sample = first_transition(hand_stream())
    assert sample["rewards"].item() == 1 + 0.5 * 2 + 0.25 * 4
    assert sample["discount"].item() == 0.125
    assert sample["next_observations"].item() == 102
    # Starting at the newest step the window is cut at the write pointer.
    buffer = ReplayBuffer(EnvSpec(num_envs=1, num_obs=1, num_actions=1), 10, n_step=3, gamma=0.5)
    for step in hand_stream():
        buffer.extend(as_td(step))
    newest = buffer.gather(torch.tensor([[3]]))[0]
    assert newest["rewards"].item() == 8 and newest["discount"].item() == 0.5
    assert newest["next_observations"].item() == 103


def test_sampling_draws_equally_from_every_env_and_only_stored_steps():
    num_envs, capacity = 6, 20
    stream = random_stream(num_envs, 27, 3, 1, seed=5)
    buffer = ReplayBuffer(EnvSpec(num_envs=num_envs, num_obs=3, num_actions=1), capacity)
    for step in stream:
        buffer.extend(as_td(step))
    batch = buffer.sample(6 * 50 + 5)  # remainder is dropped, not skewed towards some env
    env_ids = batch["observations"][:, 0].long()
    assert torch.bincount(env_ids, minlength=num_envs).tolist() == [50] * num_envs
    steps = batch["observations"][:, 1]
    assert steps.min() >= 27 - capacity and steps.max() <= 26
    with pytest.raises(ValueError, match="at least num_envs"):
        buffer.sample(num_envs - 1)
    with pytest.raises(RuntimeError, match="empty"):
        ReplayBuffer(EnvSpec(num_envs=2, num_obs=3, num_actions=1), 4).sample(4)


def test_asymmetric_stores_only_the_privileged_tail_and_rebuilds_it():
    num_envs, num_obs, num_critic = 3, 4, 7
    spec = EnvSpec(num_envs=num_envs, num_obs=num_obs, num_critic_obs=num_critic, num_actions=2)
    buffer = ReplayBuffer(spec, 5, critic_obs_extends_actor_obs=True)
    full = ReplayBuffer(EnvSpec(num_envs=num_envs, num_obs=num_obs, num_critic_obs=num_critic, num_actions=2), 5)
    assert buffer._storage["critic_observations"].shape[-1] == num_critic - num_obs
    stream = random_stream(num_envs, 4, num_obs, 2, seed=3)
    for step in stream:
        rng = np.random.default_rng(int(step["observations"][0, 1]))
        step["critic_observations"] = np.concatenate(
            [step["observations"], rng.normal(size=(num_envs, 3)).astype(np.float32)], -1
        )
        step["next_critic_observations"] = np.concatenate(
            [step["next_observations"], rng.normal(size=(num_envs, 3)).astype(np.float32)], -1
        )
        buffer.extend(as_td(step))
        full.extend(as_td(step))
    ages = torch.arange(4).repeat(num_envs, 1)
    lean, ref = buffer.gather(ages), full.gather(ages)
    for key in ("critic_observations", "next_critic_observations", "observations"):
        torch.testing.assert_close(lean[key], ref[key], rtol=0, atol=0)
    assert buffer.memory_bytes() < full.memory_bytes()


def test_bf16_storage_halves_observation_memory_and_returns_float32():
    fp32 = ReplayBuffer(EnvSpec(num_envs=2, num_obs=10, num_actions=2), 8, device="meta")
    bf16 = ReplayBuffer(EnvSpec(num_envs=2, num_obs=10, num_actions=2), 8, obs_dtype=torch.bfloat16, device="meta")
    obs_bytes = 2 * 8 * 10 * 2  # two observation tensors
    assert fp32.memory_bytes() - bf16.memory_bytes() == obs_bytes * 2
    # Exact count for the fp32 layout: obs+next (20), actions (2) as float32; reward float32; 2 bools.
    assert fp32.memory_bytes() == 2 * 8 * ((10 + 10 + 2 + 1) * 4 + 2)
    buffer = ReplayBuffer(EnvSpec(num_envs=2, num_obs=3, num_actions=1), 8, obs_dtype=torch.bfloat16)
    for step in random_stream(2, 5, 3, 1, seed=1):
        buffer.extend(as_td(step))
    batch = buffer.sample(8)
    assert batch["observations"].dtype == torch.float32
    assert set(batch["observations"][:, 1].tolist()) <= {0.0, 1.0, 2.0, 3.0, 4.0}


def test_playground_sized_buffer_fits_a_24gb_card_with_lean_options():
    spec = EnvSpec(num_envs=1024, num_obs=85, num_critic_obs=180, num_actions=23)
    lean = ReplayBuffer(spec, 10240, critic_obs_extends_actor_obs=True, obs_dtype=torch.bfloat16, device="meta")
    naive = ReplayBuffer(spec, 10240, critic_obs_extends_actor_obs=False, device="meta")
    assert lean.memory_bytes() < 10 * 2**30 < naive.memory_bytes()


def test_state_dict_round_trip_restores_contents_and_pointer():
    stream = random_stream(2, 13, 3, 1, seed=9)
    buffer = ReplayBuffer(EnvSpec(num_envs=2, num_obs=3, num_actions=1), 10, n_step=2)
    for step in stream:
        buffer.extend(as_td(step))
    clone = ReplayBuffer(EnvSpec(num_envs=2, num_obs=3, num_actions=1), 10, n_step=2)
    clone.load_state_dict(buffer.state_dict())
    ages = torch.arange(10).repeat(2, 1)
    assert (clone.gather(ages) == buffer.gather(ages)).all()
    step = as_td(random_stream(2, 1, 3, 1, seed=10)[0])
    buffer.extend(step)
    clone.extend(step)
    assert (clone.gather(ages) == buffer.gather(ages)).all()
    with pytest.raises(ValueError, match="shape"):
        ReplayBuffer(EnvSpec(num_envs=3, num_obs=3, num_actions=1), 10).load_state_dict(buffer.state_dict())


def test_empty_privileged_tail_means_the_critic_sees_the_actor_observation():
    spec = EnvSpec(num_envs=2, num_obs=3, num_critic_obs=3, num_actions=1)
    buffer = ReplayBuffer(spec, 4, critic_obs_extends_actor_obs=True)
    stream = random_stream(2, 3, 3, 1, seed=4)
    for step in stream:
        step["critic_observations"] = step["observations"]
        step["next_critic_observations"] = step["next_observations"]
        buffer.extend(as_td(step))
    batch = buffer.gather(torch.arange(3).repeat(2, 1))
    assert torch.equal(batch["critic_observations"], batch["observations"])
    assert torch.equal(batch["next_critic_observations"], batch["next_observations"])


def test_loading_a_state_with_other_keys_is_refused():
    symmetric = ReplayBuffer(EnvSpec(num_envs=2, num_obs=3, num_actions=1), 4)
    asymmetric = ReplayBuffer(EnvSpec(num_envs=2, num_obs=3, num_critic_obs=5, num_actions=1), 4)
    with pytest.raises(ValueError, match="symmetric vs asymmetric"):
        asymmetric.load_state_dict(symmetric.state_dict())
