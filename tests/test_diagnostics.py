"""Critic and policy diagnostics against hand-computed answers."""

import math

import numpy as np
import pytest
import torch

from fast_td3.measures.diagnostics import action_histograms, critic_calibration, discounted_returns


def test_discounted_returns_restart_at_episode_ends():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 2.0], [1.0, 0.0], [1.0, 4.0]])
    dones = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    # gamma 0.5, env 0 ends an episode at t=1; the trajectory is cut after t=3
    expected = torch.tensor([
        [1.5, 1.5],  # 1 + .5 * 1        | 0 + .5 * 3
        [1.0, 3.0],  # episode end: 1    | 2 + .5 * 2
        [1.5, 2.0],  # 1 + .5 * 1        | 0 + .5 * 4
        [1.0, 4.0],  # cut, no bootstrap
    ])
    assert torch.allclose(discounted_returns(rewards, dones, 0.5), expected)


def test_discounted_returns_bootstrap_where_cut():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 2.0], [1.0, 0.0], [1.0, 4.0]])
    dones = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    bootstrap = torch.zeros(4, 2)
    bootstrap[1, 0] = 10.0  # env 0's episode was cut by a time limit at t=1
    bootstrap[3] = torch.tensor([2.0, 8.0])  # values after the last step
    bootstrap[0, 1] = 99.0  # not an episode end: unused
    expected = torch.tensor([
        [4.0, 2.0],  # 1 + .5 * 6        | 0 + .5 * 4
        [6.0, 4.0],  # 1 + .5 * 10       | 2 + .5 * 4
        [2.0, 4.0],  # 1 + .5 * 2        | 0 + .5 * 8
        [2.0, 8.0],  # 1 + .5 * 2        | 4 + .5 * 8
    ])
    assert torch.allclose(discounted_returns(rewards, dones, 0.5, bootstrap), expected)


def test_calibration_of_a_critic_with_a_constant_offset():
    mc = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    stats = critic_calibration(torch.tensor(mc + 0.5), mc)
    assert stats["mean_residual"] == pytest.approx(0.5)
    assert stats["rmse"] == pytest.approx(0.5)
    assert stats["correlation"] == pytest.approx(1.0)
    assert stats["slope"] == pytest.approx(1.0)


def test_calibration_of_a_critic_that_doubles_returns():
    mc = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    stats = critic_calibration(2 * mc, mc)
    assert stats["mean_residual"] == pytest.approx(3.0)  # mean(mc)
    assert stats["rmse"] == pytest.approx(math.sqrt(55 / 5))  # sqrt(mean(mc^2))
    assert stats["slope"] == pytest.approx(2.0) and stats["correlation"] == pytest.approx(1.0)
    flat = critic_calibration(np.array([1.0, 2.0]), np.array([3.0, 3.0]))
    assert math.isnan(flat["slope"]) and math.isnan(flat["correlation"]) and flat["mean_residual"] == -1.5


def test_action_histograms_per_joint():
    actions = torch.tensor([[-1.0, 0.9], [0.0, 0.95], [0.2, 1.5]])
    counts, edges = action_histograms(actions, bins=4)
    assert np.allclose(edges, [-1.0, -0.5, 0.0, 0.5, 1.0])
    assert counts.tolist() == [[1, 0, 2, 0], [0, 0, 0, 3]]  # 1.5 (outside) lands in the last bin
