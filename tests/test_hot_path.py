"""The GPU hot path, checked on the CPU: no host sync in a steady-state global step, a pinned
number of aten launches around the env, the NaN guard without a sync, one gather per step's
batches, and Playground stepping without host round trips."""

from __future__ import annotations

import pytest
import torch
from helpers import fill_buffer, make_runner, tiny_train_config

from fast_td3.learner import transition_keys as keys
from fast_td3.training.guards import FiniteGuard
from fast_td3.analysis.hot_path import OpCounter, count_global_steps
from envs.protocol import EnvSpec
from fast_td3.learner.replay import ReplayBuffer

# Launch budgets per steady-state global step outside the env and the update, measured with
# `python scripts/gpu_check.py --device cpu --tiny` (InvertedPendulum, symmetric critic): a
# change that adds launches to the collect step or to sampling fails here, on purpose.
COLLECT_LAUNCHES = {"fast_td3": 100, "fast_sac": 112}  # FastSAC draws a tanh-Gaussian action
SAMPLE_LAUNCHES = {1: 15, 3: 35}  # per global step, all its batches (num_updates 2)


@pytest.mark.parametrize("algo,n_step", [("fast_td3", 1), ("fast_td3", 3), ("fast_sac", 1)])
def test_a_steady_state_global_step_makes_no_host_sync_and_few_launches(tmp_path, algo, n_step):
    cfg = tiny_train_config(total_steps=100, n_step=n_step)
    cfg.algo.name = algo
    runner = make_runner(cfg, tmp_path, eval_env=False)
    try:
        counts = count_global_steps(runner, steps=3, warmup=8)
    finally:
        runner.env.close()
    assert counts.syncs == [], counts.syncs
    assert counts.ops["update"] > 0  # the updates ran inside the counted steps
    assert counts.ops["collect"] / 3 <= COLLECT_LAUNCHES[algo], counts.ops
    assert counts.ops["sample"] / 3 <= SAMPLE_LAUNCHES[n_step], counts.ops


def test_the_counter_sees_the_syncs_it_must_catch():
    x = torch.arange(5.0)
    with OpCounter() as counter:
        with counter.region("here"):
            bool(x.any())
            x.sum().item()
            x[x > 2].sum()  # a boolean mask: the output size depends on the data
            x.tolist()
        with counter.paused():
            x.max().item()
    kinds = [op for region, op in counter.syncs]
    assert all(region == "here" for region, _ in counter.syncs)
    assert "Tensor.__bool__" in kinds and "Tensor.item" in kinds and "Tensor.tolist" in kinds
    assert "aten.index.Tensor" in kinds and any("_local_scalar_dense" in op for op in kinds)
    assert len([k for k in kinds if k == "Tensor.item"]) == 1  # the paused one is not counted
    assert counter.ops["here"] >= 4


def test_the_guard_latches_the_first_bad_step_env_and_field_without_a_sync():
    guard = FiniteGuard(num_envs=3, device=torch.device("cpu"))
    guard.sync_step(10)
    good = {"observations": torch.ones(3, 2), "critic observations": None, "rewards": torch.zeros(3)}
    clean, valid = guard.screen(good)
    assert bool(valid) and guard.tripped() is None and clean["critic observations"] is None
    bad_rewards = torch.tensor([0.0, float("inf"), 1.0])
    bad_obs = torch.ones(3, 2)
    bad_obs[2, 1] = float("nan")
    with OpCounter() as counter:
        clean, valid = guard.screen({"observations": bad_obs, "critic observations": None, "rewards": bad_rewards})
    assert counter.syncs == []
    assert not bool(valid)
    assert torch.equal(clean["rewards"], torch.tensor([0.0, 0.0, 1.0]))  # bad rows zeroed, others kept
    assert torch.equal(clean["observations"], torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]))
    assert guard.tripped() == (12, 1, "rewards", [1, 2])  # the lowest bad env, and its first bad tensor
    guard.screen({"observations": torch.full((3, 2), float("nan")), "critic observations": None,
                  "rewards": torch.zeros(3)})
    assert guard.tripped()[0] == 12  # latched: a later bad step does not overwrite the first


def test_skipped_writes_are_never_sampled_and_rewind_restores_the_buffer():
    buffer = ReplayBuffer(EnvSpec(num_envs=2, num_obs=3, num_actions=1), 8, n_step=2, gamma=0.5, device="cpu")
    fill_buffer(buffer, 3, seed=1)
    before = buffer._storage.clone()
    step = {k: buffer._storage[k][:, 0].clone() + 100 for k in (keys.OBS, keys.NEXT_OBS, keys.ACTIONS, keys.REWARDS)}
    step.update({keys.TERMINATED: torch.zeros(2, dtype=torch.bool), keys.TRUNCATED: torch.zeros(2, dtype=torch.bool)})
    for _ in range(2):
        buffer.extend(step, valid=torch.tensor(False))
    assert len(buffer) == 5 and (buffer._storage == before).all()  # slots kept their content
    generator = torch.Generator().manual_seed(0)
    for batch in buffer.sample_many(64, 3, generator=generator):
        assert (batch[keys.OBS] < 50).all()  # only the 3 valid steps are drawn
        assert (batch[keys.NSTEP_LENGTH] <= 2).all()
    buffer.rewind(2)
    assert len(buffer) == 3 and buffer._ptr == 3
    buffer.extend(step, valid=torch.tensor(True))
    assert len(buffer) == 4 and (buffer._storage[keys.OBS][:, 3] > 50).all()


@pytest.mark.parametrize("n_step", [1, 3])
def test_sample_many_draws_independent_env_balanced_batches_in_one_gather(n_step):
    buffer = ReplayBuffer(EnvSpec(num_envs=4, num_obs=3, num_actions=2), 50, n_step=n_step, device="cpu")
    fill_buffer(buffer, 30, seed=2)
    many = buffer.sample_many(32, 3, generator=torch.Generator().manual_seed(5))
    assert len(many) == 3 and all(b.batch_size == torch.Size([32]) for b in many)
    age = torch.randint(0, len(buffer), (3, 4, 8), generator=torch.Generator().manual_seed(5))
    for b, batch in enumerate(many):  # batch b is exactly `gather` of its own draw
        expected = buffer.gather(age[b])
        for key in expected.keys():
            torch.testing.assert_close(batch[key], expected[key], rtol=0, atol=0, msg=key)
    assert not torch.equal(many[0][keys.OBS], many[1][keys.OBS])


def test_one_step_sampling_matches_the_stored_transition():
    buffer = ReplayBuffer(EnvSpec(num_envs=2, num_obs=1, num_actions=1), 4, n_step=1, gamma=0.9, device="cpu")
    for t in range(6):  # wraps: slots hold steps 2..5
        buffer.extend({keys.OBS: torch.tensor([[t], [10.0 + t]]), keys.NEXT_OBS: torch.tensor([[t + 1.0], [11.0 + t]]),
                       keys.ACTIONS: torch.zeros(2, 1), keys.REWARDS: torch.tensor([t, -t], dtype=torch.float32),
                       keys.TERMINATED: torch.tensor([t == 4, False]), keys.TRUNCATED: torch.tensor([False, t == 3])})
    batch = buffer.gather(torch.tensor([[0, 2], [1, 3]]))  # ages from the oldest stored step (t = 2)
    assert batch[keys.OBS].flatten().tolist() == [2.0, 4.0, 13.0, 15.0]
    assert batch[keys.NEXT_OBS].flatten().tolist() == [3.0, 5.0, 14.0, 16.0]
    assert batch[keys.REWARDS].tolist() == [2.0, 4.0, -3.0, -5.0]
    assert batch[keys.TERMINATED].tolist() == [False, True, False, False]
    assert batch[keys.TRUNCATED].tolist() == [False, False, True, False]
    assert batch[keys.DISCOUNT].tolist() == pytest.approx([0.9] * 4)
    assert batch[keys.NSTEP_LENGTH].tolist() == [1, 1, 1, 1]


def test_a_constant_learning_rate_is_not_rewritten_every_update(monkeypatch):
    from fast_td3.learner.algorithms.optimization import LearningRateSchedule

    writes = []
    monkeypatch.setattr(LearningRateSchedule, "_write", lambda self, lr: writes.append(lr))
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=torch.tensor(0.1))
    constant = LearningRateSchedule(optimizer, 0.1, 0.1, 10, "constant")
    cosine = LearningRateSchedule(optimizer, 0.1, 0.01, 10, "cosine")
    writes.clear()
    for _ in range(3):
        constant.step()
    assert writes == []
    cosine.step()
    assert len(writes) == 1 and writes[0] < 0.1


def test_playground_resets_by_selection_exactly_as_by_cond_and_skips_gait_signals_on_request():
    pytest.importorskip("mujoco_playground")
    from envs.playground.mjx import PlaygroundVecEnv

    trajectories = []
    for selection in (False, True):
        env = PlaygroundVecEnv("CartpoleBalance", 3, seed=4, max_episode_steps=4, reset_by_selection=selection)
        env.reset()
        generator = torch.Generator().manual_seed(0)
        steps = []
        for _ in range(9):  # two auto-resets per env
            obs, rewards, dones, extras = env.step(torch.rand(3, env.num_actions, generator=generator) * 2 - 1)
            steps.append((obs.clone(), rewards.clone(), dones.clone()))
        trajectories.append(steps)
        if selection:
            env.record_gait_signals(False)
            env.step(torch.zeros(3, env.num_actions))
            with pytest.raises(RuntimeError, match="record_gait_signals"):
                env.gait_signals()
        env.close()
    for (obs_a, rew_a, done_a), (obs_b, rew_b, done_b) in zip(*trajectories):
        assert torch.equal(done_a, done_b)
        torch.testing.assert_close(obs_a, obs_b)
        torch.testing.assert_close(rew_a, rew_b)
    assert sum(int(d.sum()) for _, _, d in trajectories[0]) == 6


@pytest.mark.parametrize("algo", ["fast_td3", pytest.param("fast_sac", marks=pytest.mark.slow)])
def test_the_compiled_update_stops_compiling_after_its_variants(algo):
    """Actor on and off, two optimisers: a handful of graphs, then none. A value kept on
    Python's stack across the graph break in backward() once made Dynamo recompile the
    rest of the update on every call (then give up and run it eagerly)."""
    from torch._dynamo.utils import counters
    from helpers import tiny_config

    from fast_td3.learner.algorithms import make_algorithm

    torch._dynamo.reset()
    cfg = tiny_config(compile=True, batch_size=32)
    cfg.name = algo
    agent = make_algorithm(cfg, EnvSpec(num_envs=4, num_obs=5, num_critic_obs=None, num_actions=2), "cpu")
    buffer = ReplayBuffer(EnvSpec(num_envs=4, num_obs=5, num_actions=2), 20, device="cpu")
    fill_buffer(buffer, 10)
    batches = buffer.sample_many(32, 12, generator=torch.Generator().manual_seed(0))
    for batch in batches[:4]:  # every variant compiled: actor off and on
        agent.update(batch)
    compiled = counters["frames"]["ok"]
    for batch in batches[4:]:
        agent.update(batch)
    assert counters["frames"]["ok"] == compiled, "the update recompiled in steady state"


def test_compiled_collect_keeps_the_statistics_accumulating(tmp_path):
    """With algo.compile the normalisers still count every collected step (a compiled version of
    the statistics once lost its writes to the 0-dim sample counts and learned nothing)."""
    cfg = tiny_train_config(total_steps=100, compile=True, reward_normalization=True)
    runner = make_runner(cfg, tmp_path, eval_env=False)
    try:
        obs, critic_obs = runner._reset_envs()
        for _ in range(3):
            obs, critic_obs = runner.collect(obs, critic_obs)
    finally:
        runner.env.close()
    assert runner.agent.obs_normalizer.count.item() == 3 * cfg.env.num_envs
    assert runner.agent.reward_normalizer.return_stats.count.item() == 3 * cfg.env.num_envs
