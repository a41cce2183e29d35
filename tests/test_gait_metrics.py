"""Gait metrics against values computed by hand from tiny scripted trajectories."""

import math

import pytest
import torch

from fast_td3.measures import gait_metrics as gm

T, F = True, False


def b(rows):
    return torch.tensor(rows, dtype=torch.bool)


def test_velocity_tracking_errors_ignore_invalid_steps():
    # one env, three steps; the third is outside the episode
    vel = torch.tensor([[[3.0, 4.0]], [[1.0, 0.0]], [[100.0, 0.0]]])
    yaw = torch.tensor([[0.5], [-1.0], [9.0]])
    cmd = torch.tensor([[[0.0, 0.0, 0.0]], [[1.0, 0.0, 0.5]], [[0.0, 0.0, 0.0]]])
    valid = b([[T], [T], [F]])
    assert gm.lin_vel_tracking_error(vel, cmd, valid) == pytest.approx((5.0 + 0.0) / 2)
    assert gm.ang_vel_tracking_error(yaw, cmd, valid) == pytest.approx((0.5 + 1.5) / 2)


def test_action_smoothness_skips_first_steps_and_episode_boundaries():
    # env 0: four valid steps; env 1: two valid steps, then outside its episode
    actions = torch.tensor([
        [[0.0, 0.0], [1.0, 1.0]],
        [[3.0, 4.0], [1.0, 2.0]],
        [[3.0, 4.0], [9.0, 9.0]],
        [[0.0, 0.0], [0.0, 0.0]],
    ])
    valid = b([[T, T], [T, T], [T, F], [T, F]])
    # pairs: env 0 -> 5, 0, 5; env 1 -> 1
    assert gm.action_smoothness(actions, valid) == pytest.approx((5 + 0 + 5 + 1) / 4)
    # env 0's episode ends at t=1 and a new one starts at t=2: the (1, 2) pair is not a change
    dones = b([[F, F], [T, F], [F, F], [F, F]])
    assert gm.action_smoothness(actions, valid, dones) == pytest.approx((5 + 5 + 1) / 3)


def test_torque_saturation_rate_counts_joint_steps_at_99_percent_of_the_limit():
    torques = torch.tensor([[[99.0, -50.0]], [[-100.0, 98.9]], [[100.0, 100.0]]])
    valid = b([[T], [T], [F]])
    assert gm.torque_saturation_rate(torques, torch.tensor([100.0, 100.0]), valid) == pytest.approx(2 / 4)


def test_unlimited_joints_and_non_finite_values_are_left_out():
    torques = torch.tensor([[[99.0, 500.0]], [[10.0, 900.0]]])
    limits = torch.tensor([100.0, float("inf")])  # the second joint has no torque limit
    assert gm.torque_saturation_rate(torques, limits, b([[T], [T]])) == pytest.approx(1 / 2)
    q = torch.tensor([[[1.5, 9.0]], [[0.0, -9.0]]])
    joint_limits = torch.tensor([[-1.0, 1.0], [-float("inf"), float("inf")]])
    assert gm.joint_limit_violation_rate(q, joint_limits, b([[T], [T]])) == pytest.approx(1 / 2)
    height = torch.tensor([[0.6, float("nan")], [0.7, 0.7]])  # env 1 diverged at its first step
    assert gm.base_height_error(height, 0.65, b([[T, T], [T, T]])) == pytest.approx((0.05 + 0.05 + 0.05) / 3)


def test_joint_limit_violation_rate():
    limits = torch.tensor([[-1.0, 1.0], [0.0, 2.0], [-0.5, 0.5]])
    q = torch.tensor([[[1.0, -0.1, 0.6]], [[-1.2, 1.0, 0.0]]])  # at a limit is inside
    assert gm.joint_limit_violation_rate(q, limits, b([[T], [T]])) == pytest.approx(3 / 6)


def test_foot_slip_only_counts_feet_in_contact():
    vel = torch.tensor([[[[3.0, 4.0], [1.0, 0.0]]], [[[0.0, 1.0], [0.0, 2.0]]]])  # [T=2, E=1, F=2, 2]
    contact = b([[[T, F]], [[T, T]]])
    assert gm.foot_slip(vel, contact, b([[T], [T]])) == pytest.approx((5.0 + 1.0 + 2.0) / 3)
    assert math.isnan(gm.foot_slip(vel, torch.zeros_like(contact), b([[T], [T]])))


def test_base_height_and_orientation_errors():
    h = torch.tensor([[0.5], [0.7], [0.6], [3.0]])
    valid = b([[T], [T], [T], [F]])
    assert gm.base_height_error(h, 0.6, valid) == pytest.approx((0.1 + 0.1 + 0.0) / 3)
    # upright, 45 degrees (an unnormalised vector), lying on its side
    g = torch.tensor([[[0.0, 0.0, -1.0]], [[0.0, 2.0, -2.0]], [[0.0, 1.0, 0.0]], [[0.0, 0.0, 1.0]]])
    assert gm.orientation_error(g, valid) == pytest.approx((0.0 + math.pi / 4 + math.pi / 2) / 3)


def test_energy_per_metre_over_steps_with_a_predecessor():
    torques = torch.tensor([[[2.0, 1.0]], [[2.0, 1.0]], [[2.0, 1.0]]])
    qdot = torch.tensor([[[1.0, -3.0]], [[1.0, 1.0]], [[-1.0, 1.0]]])  # |tau*qdot| sums: 5, 3, 3
    pos = torch.tensor([[[0.0, 0.0]], [[3.0, 4.0]], [[3.0, 4.0]]])  # moves 5 m in step 1, none in step 2
    # steps 1 and 2: (3 + 3) * 0.1 J over 5 m (step 0 has no start position)
    assert gm.energy_per_metre(torques, qdot, 0.1, pos, b([[T], [T], [T]])) == pytest.approx(0.6 / 5)
    assert math.isnan(gm.energy_per_metre(torques, qdot, 0.1, torch.zeros_like(pos), b([[T], [T], [T]])))


def test_fall_rate_counts_episodes_from_valid_runs_and_dones():
    # env 0: one episode, timed out; env 1: falls at t=1, then outside; env 2: falls at t=1, a second episode
    terminated = b([[F, F, F], [F, T, T], [F, F, F], [F, F, F]])
    valid = b([[T, T, T], [T, T, T], [T, F, T], [T, F, T]])
    dones = b([[F, F, F], [F, T, T], [F, F, F], [T, F, T]])
    assert gm.fall_rate(terminated, valid, dones) == pytest.approx(2 / 4)
    # without dones env 2 looks like one episode
    assert gm.fall_rate(terminated, valid) == pytest.approx(2 / 3)


def test_gait_metrics_computes_what_its_inputs_allow():
    steps, envs = 3, 2
    minimal = {
        gm.ACTIONS: torch.zeros(steps, envs, 4),
        gm.TERMINATED: torch.zeros(steps, envs, dtype=torch.bool),
        gm.VALID: torch.ones(steps, envs, dtype=torch.bool),
    }
    assert set(gm.gait_metrics(minimal)) == {"action_smoothness", "fall_rate"}
    full = {
        **minimal,
        gm.BASE_LIN_VEL_XY: torch.zeros(steps, envs, 2), gm.BASE_ANG_VEL_Z: torch.zeros(steps, envs),
        gm.COMMAND: torch.zeros(steps, envs, 3), gm.TORQUES: torch.ones(steps, envs, 5),
        gm.TORQUE_LIMITS: torch.full((5,), 2.0), gm.JOINT_POS: torch.zeros(steps, envs, 5),
        gm.JOINT_LIMITS: torch.tensor([[-1.0, 1.0]] * 5), gm.JOINT_VEL: torch.ones(steps, envs, 5),
        gm.FOOT_VEL_XY: torch.zeros(steps, envs, 2, 2), gm.FOOT_CONTACT: torch.ones(steps, envs, 2, dtype=torch.bool),
        gm.BASE_HEIGHT: torch.ones(steps, envs), gm.BASE_HEIGHT_TARGET: 1.0,
        gm.PROJECTED_GRAVITY: torch.tensor([0.0, 0.0, -1.0]).expand(steps, envs, 3),
        gm.DT: 0.02, gm.BASE_POS_XY: torch.arange(steps, dtype=torch.float32)[:, None, None].expand(steps, envs, 2),
    }
    metrics = gm.gait_metrics(full)
    assert list(metrics) == list(gm.METRIC_NAMES)
    assert metrics["fall_rate"] == 0.0 and metrics["base_height_error"] == 0.0
    # each step: 5 joints * 1 W * 0.02 s over sqrt(2) m
    assert metrics["energy_per_metre"] == pytest.approx(5 * 0.02 / math.sqrt(2))
    del full[gm.VALID]  # every step counts by default
    assert gm.gait_metrics(full) == metrics
