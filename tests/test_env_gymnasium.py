"""The gymnasium MuJoCo adapter against the env contract and the plain simulator."""

import functools
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from env_conformance import EnvContractTests, assert_step_identically
from envs.gymnasium import GymnasiumVecEnv, tasks
from envs.protocol import derive_env_seeds
from envs.registry import UnknownTaskError, make_env
from helpers import assert_processes_exit, kill_a_trainer_with_workers

TASK = "InvertedPendulum-v5"


class TestGymnasiumContract(EnvContractTests):
    task = TASK

    def make_env(self, seed, num_envs, **options):
        return GymnasiumVecEnv(self.task, num_envs, seed=seed, **options)

    def reference_observation(self, seed, env_index, actions):
        env = gym.make(self.task, max_episode_steps=None).unwrapped  # the bare simulator
        obs, _ = env.reset(seed=derive_env_seeds(seed, self.num_envs)[env_index])
        low, high = env.action_space.low, env.action_space.high
        for action in actions:
            obs, *_ = env.step(low + (action.double().numpy() + 1.0) * (high - low) / 2.0)
        env.close()
        return torch.from_numpy(np.asarray(obs, dtype=np.float32))


class TestGymnasiumWorkerProcessesContract(TestGymnasiumContract):
    """The same contract with the envs sharded over 3 worker processes (uneven shards)."""

    num_envs = 5

    def make_env(self, seed, num_envs, **options):
        return GymnasiumVecEnv(TASK, num_envs, seed=seed, vectorization="processes", num_workers=3, **options)


def test_worker_processes_step_exactly_like_in_process_envs():
    """Same seeds, same actions: identical results, episode ends and final observations included."""
    a = GymnasiumVecEnv("HalfCheetah-v5", 6, seed=5, max_episode_steps=7)
    b = GymnasiumVecEnv("HalfCheetah-v5", 6, seed=5, max_episode_steps=7, vectorization="processes", num_workers=4)
    try:
        time_outs = assert_step_identically(a, b, steps=20)
        assert time_outs.tolist() == [2] * 6  # two time-outs per env went through the shared arrays
    finally:
        a.close(), b.close()


def _fails_in_one_worker(parent_pid, claimed):
    """Builds the env, except in the first worker process that asks (which raises)."""
    if os.getpid() != parent_pid:
        with claimed.get_lock():
            first = claimed.value == 0
            if first:
                claimed.value = os.getpid()
        if first or claimed.value == os.getpid():
            raise RuntimeError("this worker cannot build its env")
    return gym.make(TASK)


def test_a_worker_failing_at_construction_reports_and_leaves_no_process():
    """One worker fails, the other is healthy: the error surfaces and both processes are gone."""
    from envs.worker_pool import WorkerPool

    claimed = mp.get_context("fork").Value("i", 0)
    before = set(mp.active_children())
    with pytest.raises(RuntimeError, match="cannot build its env"):
        WorkerPool(functools.partial(_fails_in_one_worker, os.getpid(), claimed), num_envs=4, num_workers=2)
    assert set(mp.active_children()) == before


def test_an_unclosed_pool_does_not_hang_the_interpreter_at_exit(tmp_path):
    script = tmp_path / "unclosed.py"
    script.write_text(
        "from envs.gymnasium import GymnasiumVecEnv\n"
        f"env = GymnasiumVecEnv('{TASK}', 4, vectorization='processes', num_workers=2)\n"
        "env.reset()\n"
    )
    result = subprocess.run([sys.executable, str(script)], timeout=60, capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent.parent)
    assert result.returncode == 0, result.stderr


def test_worker_processes_die_with_a_killed_trainer(tmp_path):
    """kill -9 of the trainer (the OOM killer, a scheduler): its env workers read end-of-file on
    their pipes and exit instead of living on as orphans."""
    script = tmp_path / "killed.py"
    script.write_text(
        "import time\n"
        "from envs.gymnasium import GymnasiumVecEnv\n"
        f"env = GymnasiumVecEnv('{TASK}', 4, vectorization='processes', num_workers=2)\n"
        "env.reset()\n"
        "print(' '.join(str(p.pid) for p in env._vec._processes), flush=True)\n"
        "time.sleep(120)\n"
    )
    workers = kill_a_trainer_with_workers(script, workers=2)
    assert_processes_exit(workers, "env workers outlived the killed trainer")


def test_auto_vectorization_uses_workers_only_for_big_shards():
    from envs.gymnasium import auto_workers

    assert auto_workers(16, cpus=2) == 0 and auto_workers(63, cpus=8) == 0  # < 2 shards of 32
    assert auto_workers(64, cpus=2) == 2 and auto_workers(128, cpus=2) == 2
    assert auto_workers(1024, cpus=16) == 16 and auto_workers(128, cpus=16) == 4
    assert GymnasiumVecEnv(TASK, 4).vectorization == "sync"


def test_a_failing_worker_reports_its_error():
    env = GymnasiumVecEnv(TASK, 2, seed=0, vectorization="processes", num_workers=2)
    try:
        env.reset()
        with pytest.raises(RuntimeError, match="render"):  # made without render_mode
            env.render(1)
    finally:
        env.close()


def test_actions_are_rescaled_to_the_env_bounds():
    """InvertedPendulum's bounds are [-3, 3]: +1 must push as hard as the plain env's +3."""
    ours = GymnasiumVecEnv(TASK, 1, seed=0)
    ours.reset()
    plain = gym.make(TASK)
    plain.reset(seed=derive_env_seeds(0, 1)[0])
    for value in (1.0, -1.0, 0.5):
        obs, reward, _, _ = ours.step(torch.full((1, 1), value))
        expected, expected_reward, *_ = plain.step(np.array([3.0 * value]))
        torch.testing.assert_close(obs[0], torch.from_numpy(expected.astype(np.float32)))
        assert reward.item() == pytest.approx(expected_reward)
    ours.close()


def test_unknown_task_lists_valid_ids_and_the_nearest():
    with pytest.raises(UnknownTaskError) as error:
        make_env("gymnasium", "HalfCheeta-v5", num_envs=1, seed=0)
    message = str(error.value)
    assert "Did you mean 'HalfCheetah-v5'" in message
    for task in tasks():
        assert task in message


def test_env_kwargs_reach_the_simulator():
    """Reward weights are make keywords: a zero ctrl cost changes HalfCheetah's reward."""
    default = GymnasiumVecEnv("HalfCheetah-v5", 1, seed=0)
    free = GymnasiumVecEnv("HalfCheetah-v5", 1, seed=0, env_kwargs={"ctrl_cost_weight": 0.0})
    default.reset(), free.reset()
    actions = torch.ones(1, default.num_actions)
    _, r_default, _, _ = default.step(actions)
    _, r_free, _, _ = free.step(actions)
    assert r_free.item() - r_default.item() == pytest.approx(0.1 * default.num_actions, rel=1e-5)
    default.close(), free.close()
