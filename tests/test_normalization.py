"""Normalisers: statistics equal NumPy's over the same stream, also when pooled across processes."""

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fast_td3.learner.normalization import EmpiricalNormalization, RewardNormalization


def test_running_statistics_equal_numpy_over_the_stream():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=[0.5, 2.0, 7.0], size=(rng.integers(1, 40), 3)) for _ in range(30)]
    norm = EmpiricalNormalization(3, eps=1e-2)
    for b in batches:
        norm.update(torch.tensor(b, dtype=torch.float32))
    stream = np.concatenate(batches)
    np.testing.assert_allclose(norm.mean.numpy(), stream.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), stream.var(0), rtol=1e-4)
    assert int(norm.count) == len(stream)
    x = torch.tensor(stream[:5], dtype=torch.float32)
    expected = (stream[:5] - stream.mean(0)) / (stream.std(0) + 1e-2)
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(norm.inverse(norm(x)), x, rtol=1e-5, atol=1e-5)


def test_until_freezes_every_statistic():
    norm = EmpiricalNormalization(1, until=10)
    first = torch.arange(10.0).reshape(10, 1)
    norm.update(first)
    frozen = (norm.mean.clone(), norm.var.clone())
    for _ in range(3):
        norm.update(torch.randn(10, 1) * 50 + 100)
    assert torch.equal(norm.mean, frozen[0]) and torch.equal(norm.var, frozen[1])
    assert int(norm.count) == 10
    np.testing.assert_allclose(norm.var.numpy(), first.numpy().var(0), rtol=1e-6)


def test_empty_batch_changes_nothing():
    norm = EmpiricalNormalization(2)
    norm.update(torch.empty(0, 2))
    assert torch.isfinite(norm.mean).all() and torch.isfinite(norm.var).all() and int(norm.count) == 0
    norm.update(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
    norm.update(torch.empty(0, 2))
    assert norm.mean.tolist() == [2.0, 4.0] and norm.var.tolist() == [1.0, 4.0]


def test_state_dict_round_trip():
    norm = EmpiricalNormalization(4)
    norm.update(torch.randn(50, 4) * 3 + 1)
    clone = EmpiricalNormalization(4)
    clone.load_state_dict(norm.state_dict())
    x = torch.randn(7, 4)
    torch.testing.assert_close(clone(x), norm(x), rtol=0, atol=0)
    assert int(clone.count) == 50


def test_reward_normalizer_scales_by_the_std_of_the_discounted_return():
    rng = np.random.default_rng(1)
    num_envs, gamma = 4, 0.9
    norm = RewardNormalization(num_envs, gamma, g_max=1e9)  # g_max large: pure std scaling
    returns = np.zeros(num_envs)
    seen = []
    for _ in range(200):
        r = rng.normal(1.0, 0.5, size=num_envs)
        d = rng.uniform(size=num_envs) < 0.05
        returns = gamma * (1 - d) * returns + r
        seen.append(returns.copy())
        norm.update(torch.tensor(r, dtype=torch.float32), torch.tensor(d))
    std = np.concatenate(seen).std()
    np.testing.assert_allclose(norm(torch.tensor([1.0])).item(), 1.0 / std, rtol=1e-4)
    # The max-return guard takes over when g_max is small.
    guarded = RewardNormalization(1, 0.0, g_max=1.0)
    guarded.update(torch.tensor([5.0]), torch.tensor([False]))
    assert guarded(torch.tensor([5.0])).item() == pytest.approx(1.0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pooled_worker(rank, world, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        norm = EmpiricalNormalization(2)
        norm.set_process_group()
        rng = np.random.default_rng(rank)
        for size in (5, 17, 3):  # different batch sizes and data on each rank
            norm.update(torch.tensor(rng.normal(rank * 4.0, rank + 1.0, size=(size, 2)), dtype=torch.float32))
        results[rank] = (norm.mean.clone(), norm.var.clone(), float(norm.count))
    finally:
        dist.destroy_process_group()


def test_all_reduce_hook_gives_statistics_of_the_pooled_data():
    world = 2
    # spawn, not fork: other tests of this process may have started JAX's threads
    with mp.get_context("spawn").Manager() as manager:
        results = manager.dict()
        mp.spawn(_pooled_worker, args=(world, _free_port(), results), nprocs=world)
        results = dict(results)
    # Same generator calls as the workers: rebuild each rank's stream in order.
    per_rank = []
    for rank in range(world):
        rng = np.random.default_rng(rank)
        per_rank.append(np.concatenate([rng.normal(rank * 4.0, rank + 1.0, size=(s, 2)) for s in (5, 17, 3)]))
    pooled = np.concatenate(per_rank)
    for rank in range(world):
        mean, var, count = results[rank]
        assert count == len(pooled)
        np.testing.assert_allclose(mean.numpy(), pooled.mean(0), rtol=1e-5)
        np.testing.assert_allclose(var.numpy(), pooled.var(0), rtol=1e-4)
