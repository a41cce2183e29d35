"""The Booster T1 deployment contract (`sim2real/t1/`) against Booster's deploy code, numpy only.

Known answers for the observation layout, the gait-phase and command conventions (against a
transcription of the deploy loop's order), and the deploy configuration's layout.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim2real import t1
from sim2real.t1 import deploy_spec

def _observation(**overrides):
    inputs = dict(
        projected_gravity=np.array([0.1, -0.2, -0.97]), gyro=np.array([0.3, 0.0, -0.5]),
        command=np.array([0.5, 0.0, 0.2]), gait_process=np.array([0.25]),
        joint_pos=np.arange(23) * 0.01, joint_vel=np.arange(23) * 1.0, last_action=np.full(12, 0.5),
        default_pose=np.asarray(t1.DEFAULT_POSE))
    inputs.update(overrides)
    return t1.actor_observation(np, **inputs), inputs


def test_observation_has_booster_layout_known_answer():
    obs, inputs = _observation()
    assert obs.shape == (47,) and t1.OBSERVATION_SIZE == 47
    np.testing.assert_allclose(obs[0:3], [0.1, -0.2, -0.97])
    np.testing.assert_allclose(obs[3:6], [0.3, 0.0, -0.5])
    np.testing.assert_allclose(obs[6:9], [0.5, 0.0, 0.2])
    np.testing.assert_allclose(obs[9:11], [0.0, 1.0], atol=1e-12)  # cos, sin of 2π·0.25
    legs = np.arange(11, 23)
    np.testing.assert_allclose(obs[11:23], legs * 0.01 - np.asarray(t1.DEFAULT_POSE)[legs])
    np.testing.assert_allclose(obs[23:35], legs * 0.1)  # leg joint velocity × 0.1
    np.testing.assert_allclose(obs[35:47], 0.5)


def test_standing_zeroes_phase_and_command():
    obs, _ = _observation(command=np.zeros(3), gait_process=np.array([0.3]))
    np.testing.assert_array_equal(obs[6:11], 0.0)


def _deploy_loop(times, joysticks, frequency, dt):
    """Booster's deploy loop (deploy/utils/policy.py), transcribed step by step: gait process
    from the frequency the previous call left, then smoothing, then the standing decision."""
    smoothed, active, out = np.zeros(3), frequency, []
    for time, joystick in zip(times, joysticks):
        process = math.fmod(time * active, 1.0)
        smoothed = smoothed + np.clip(np.asarray(joystick) - smoothed, -dt, dt)
        active = 0.0 if np.linalg.norm(smoothed) < 1e-5 else frequency
        walking = float(active > 1e-8)
        out.append(np.concatenate([smoothed * walking,
                                   [math.cos(2 * math.pi * process) * walking,
                                    math.sin(2 * math.pi * process) * walking]]))
    return np.array(out)


def test_command_and_gait_follow_the_deploy_loop_through_stand_walk_stand():
    dt, frequency = 0.02, 1.2
    joysticks = [(0.0, 0.0, 0.0)] * 5 + [(0.5, 0.0, 0.2)] * 40 + [(0.0, 0.0, 0.0)] * 40 + [(0.0, 0.3, 0.0)] * 10
    times = 3.17 + dt * np.arange(len(joysticks))
    expected = _deploy_loop(times, joysticks, frequency, dt)
    smoothed, active, ours = np.zeros(3), np.array([frequency]), []
    for time, joystick in zip(times, joysticks):
        process, smoothed, active = t1.update_command_and_gait(
            np, clock=np.array([time]), active_frequency=active, smoothed=smoothed, joystick=np.asarray(joystick),
            gait_frequency=np.array([frequency]), ctrl_dt=dt)
        obs, _ = _observation(command=smoothed, gait_process=process)
        ours.append(obs[6:11])
    np.testing.assert_allclose(np.array(ours), expected, atol=1e-12)
    assert (expected[:5] == 0).all() and np.abs(expected[50:80, 3:5]).max() > 0.5  # stands, then walks
    assert (expected[84] == 0).all()  # stands again once the command has ramped down

def test_command_smoothing_is_rate_limited_like_the_deploy_code():
    smoothed = np.zeros(3)
    for _ in range(10):
        smoothed = t1.smooth_command(np, smoothed, np.array([1.0, -0.05, 0.0]), 0.02)
    np.testing.assert_allclose(smoothed, [0.2, -0.05, 0.0])  # 1 unit/s; the small one arrives exactly


def test_projected_gravity_from_rpy_matches_the_rotation():
    rng = np.random.default_rng(0)
    for roll, pitch, yaw in rng.uniform(-0.8, 0.8, (5, 3)):
        rx = np.array([[1, 0, 0], [0, np.cos(roll), -np.sin(roll)], [0, np.sin(roll), np.cos(roll)]])
        ry = np.array([[np.cos(pitch), 0, np.sin(pitch)], [0, 1, 0], [-np.sin(pitch), 0, np.cos(pitch)]])
        rz = np.array([[np.cos(yaw), -np.sin(yaw), 0], [np.sin(yaw), np.cos(yaw), 0], [0, 0, 1]])
        expected = (rz @ ry @ rx).T @ np.array([0.0, 0.0, -1.0])
        np.testing.assert_allclose(t1.projected_gravity_from_rpy(np, roll, pitch, yaw), expected, atol=1e-12)


BOOSTER_READS = (
    # every key Booster's deploy code reads from its configuration (deploy.py, utils/policy.py, utils/command.py)
    "common.dt", "common.stiffness", "common.damping", "common.default_qpos", "common.torque_limit",
    "policy.policy_path", "policy.num_actions", "policy.num_observations", "policy.gait_frequency",
    "policy.normalization.gravity", "policy.normalization.lin_vel", "policy.normalization.ang_vel",
    "policy.normalization.dof_pos", "policy.normalization.dof_vel", "policy.normalization.clip_actions",
    "policy.control.action_scale", "policy.control.decimation", "mech.parallel_mech_indexes",
    "prepare.stiffness", "prepare.damping", "prepare.default_qpos",
)


def test_deploy_yaml_holds_every_key_the_deploy_code_reads():
    deploy = t1.DeploySpec().deploy_yaml()
    for path in BOOSTER_READS:
        node = deploy
        for part in path.split("."):
            assert part in node, path
            node = node[part]
    for section in ("common", "prepare"):
        assert all(len(v) == 23 for v in deploy[section].values() if isinstance(v, list))


def test_deploy_yaml_has_booster_layout_and_the_same_scales(monkeypatch):
    spec = t1.DeploySpec()
    deploy = spec.deploy_yaml()
    for key in ("stiffness", "damping", "default_qpos", "torque_limit"):
        assert len(deploy["common"][key]) == 23
    assert deploy["common"]["default_qpos"][11:17] == [-0.2, 0.0, 0.0, 0.4, -0.25, 0.0]
    assert deploy["common"]["torque_limit"][11:17] == [60, 25, 30, 60, 24, 15]
    assert deploy["policy"]["num_observations"] == 47 and deploy["policy"]["num_actions"] == 12
    assert deploy["policy"]["control"] == {"action_scale": 1.0, "decimation": 10, "action_scales": [1.0] * 12,
                                           "action_low": [-1.0] * 12, "action_high": [1.0] * 12}
    assert deploy["mech"]["parallel_mech_indexes"] == [15, 16, 21, 22]
    meta = spec.meta()
    assert [entry["start"] for entry in meta["observation"]["layout"]] == [0, 3, 6, 9, 11, 23, 35]
    assert deploy["policy"]["normalization"] == {"gravity": 1.0, "lin_vel": 1.0, "ang_vel": 1.0, "dof_pos": 1.0,
                                                 "dof_vel": 0.1, "clip_actions": 1.0}
    layout = list(t1.OBSERVATION_LAYOUT)
    layout[5] = ("leg_joint_vel", 12, 0.05)  # a training-side change: the deploy config follows it
    monkeypatch.setattr(deploy_spec, "OBSERVATION_LAYOUT", tuple(layout))
    assert t1.DeploySpec().deploy_yaml()["policy"]["normalization"]["dof_vel"] == 0.05
    layout[2] = ("command", 3, 2.0)  # one command scale cannot differ from the gyro's (ang_vel)
    monkeypatch.setattr(deploy_spec, "OBSERVATION_LAYOUT", tuple(layout))
    with pytest.raises(AssertionError, match="command"):
        t1.deploy_normalization()


def test_deploy_gait_frequency_outside_the_training_range_is_refused():
    with pytest.raises(ValueError, match="outside the training range"):
        t1.CommandSpec(gait_frequency=(1.2, 1.6), deploy_gait_frequency=1.0).check()


def test_sdk_joint_order_matches_the_booster_sdk():
    b1 = pytest.importorskip("booster_robotics_sdk_python", reason="Booster SDK wheel not installed")
    sdk_names = [name for name, _ in sorted(b1.JointIndex.__members__.items(), key=lambda kv: int(kv[1]))]
    assert len(sdk_names) == b1.kJointCnt == t1.NUM_JOINTS
    assert [int(b1.JointIndex.kLeftHipPitch), int(b1.JointIndex.kCrankDownRight)] == [11, 22]
    for ours, theirs in zip(t1.SDK_JOINT_NAMES, sdk_names):  # e.g. Left_Hip_Pitch ~ kLeftHipPitch
        simple = theirs[1:].lower()
        assert ours.replace("_", "").lower().replace("aa", "") == simple or "crank" in simple


