"""Booster T1 sim-to-real: the deployment contract, the training env, sim-to-sim and the deploy path.

The training env (MJX), the sim-to-sim runner (native MuJoCo) and the robot's SDK
messages must all produce the same 47 numbers for the same robot state; these tests
check that directly, so training and deploy conventions cannot drift apart silently.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sim2real import t1

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TASK = "T1LowDimJoystickFlatTerrain"
NOISELESS = {"noise_config": {"level": 0.0}}
"""The options the in-process env and the CLI run share (one compilation, cached across them)."""


# ------------------------------------------------------------------ the contract (numpy only)
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


def test_standing_zeroes_phase_and_command_and_holds_the_gait():
    obs, _ = _observation(command=np.zeros(3), gait_process=np.array([0.3]))
    np.testing.assert_array_equal(obs[6:11], 0.0)
    assert t1.advance_gait_process(np, np.array([0.3]), 1.5, np.zeros(3), 0.02)[0] == 0.0
    walking = t1.advance_gait_process(np, np.array([0.99]), 1.5, np.array([0.3, 0, 0]), 0.02)[0]
    assert walking == pytest.approx(math.fmod(0.99 + 0.03, 1.0))


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


def test_deploy_yaml_has_booster_layout_and_the_same_scales(monkeypatch):
    spec = t1.DeploySpec()
    deploy = spec.deploy_yaml()
    for key in ("stiffness", "damping", "default_qpos", "torque_limit"):
        assert len(deploy["common"][key]) == 23
    assert deploy["common"]["default_qpos"][11:17] == [-0.2, 0.0, 0.0, 0.4, -0.25, 0.0]
    assert deploy["common"]["torque_limit"][11:17] == [60, 25, 30, 60, 24, 15]
    assert deploy["policy"]["num_observations"] == 47 and deploy["policy"]["num_actions"] == 12
    assert deploy["policy"]["control"] == {"action_scale": 1.0, "decimation": 10}
    assert deploy["mech"]["parallel_mech_indexes"] == [15, 16, 21, 22]
    meta = spec.meta()
    assert [entry["start"] for entry in meta["observation"]["layout"]] == [0, 3, 6, 9, 11, 23, 35]
    t1.check_layout_matches_deploy_scales()
    layout = list(t1.OBSERVATION_LAYOUT)
    layout[5] = ("leg_joint_vel", 12, 0.05)  # a training-side change the deploy config does not know
    monkeypatch.setattr(t1, "OBSERVATION_LAYOUT", tuple(layout))
    with pytest.raises(AssertionError, match="leg_joint_vel"):
        t1.check_layout_matches_deploy_scales()


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


# ------------------------------------------------------------------ native MuJoCo
pytest.importorskip("mujoco_playground", reason='MuJoCo Playground is not installed (pip install -e ".[sim2real]")')

from envs import t1_lowdim  # noqa: E402
from sim2real import deploy, sim2sim  # noqa: E402


def _bundle(tmp_path: Path | None = None, **control) -> sim2sim.Bundle:
    spec = t1.DeploySpec(t1.T1Control(**control))
    return sim2sim.Bundle(tmp_path or Path("."), None, {"deploy": spec.meta() | {"source_task": TASK}},
                          spec.deploy_yaml())


def test_model_is_built_from_the_control_settings():
    stiffness = list(t1.STIFFNESS)
    stiffness[14] = 123.0
    control = t1.T1Control(stiffness=tuple(stiffness))
    model = t1_lowdim.build_mj_model("flat", control)
    knee = model.actuator("Left_Knee_Pitch").id
    assert knee == 14
    assert model.actuator_gainprm[knee, 0] == 123.0 and model.actuator_biasprm[knee, 1] == -123.0
    assert model.actuator_biasprm[knee, 2] == -5.0
    assert tuple(model.jnt_actfrcrange[model.joint("Left_Knee_Pitch").id]) == (-60.0, 60.0)
    assert model.dof_damping[6:].max() == 0.0  # all damping is the PD loop's
    assert model.opt.timestep == 0.002
    rough = t1_lowdim.build_mj_model("rough", control)
    assert rough.geom("floor").type == 1 and rough.actuator_gainprm[14, 0] == 123.0  # a height field


def test_zero_action_policy_falls_in_sim2sim():
    report = sim2sim.run(_bundle(), seconds=5.0, policy=lambda obs: torch.zeros(obs.shape[0], 12))
    assert not report.passed
    assert report.segments[0].fell and report.segments[0].fell_at < 5.0


def test_gains_that_differ_from_training_are_flagged():
    bundle = _bundle()
    assert sim2sim.deploy_mismatches(bundle) == []
    bundle.deploy_yaml["common"]["stiffness"][17] = 150.0
    bundle.deploy_yaml["policy"]["gait_frequency"] = 2.0
    problems = sim2sim.deploy_mismatches(bundle)
    assert any("stiffness of Right_Hip_Pitch (SDK 17): trained with 200.0" in p for p in problems)
    assert any("gait_frequency 2.0" in p for p in problems)


def _disturbed_robot(seed: int = 0) -> tuple[sim2sim.T1Robot, np.ndarray, np.ndarray]:
    robot = sim2sim.T1Robot(t1.T1Control())
    rng = np.random.default_rng(seed)
    action = rng.uniform(-0.3, 0.3, 12).astype(np.float32)
    for _ in range(5):
        robot.act(action)
    return robot, np.array([0.4, -0.1, 0.3]), action


def test_imu_readings_from_the_floating_base_equal_the_imu_sensors():
    """The IMU site sits on the base, unrotated: the base state gives what its sensors read."""
    import mujoco

    robot, _, _ = _disturbed_robot(seed=1)
    mujoco.mj_forward(robot.model, robot.data)  # sensors of the current state
    sensor = robot.model.sensor("gyro")
    gyro = robot.data.sensordata[robot.model.sensor_adr[sensor.id]:][:3]
    np.testing.assert_allclose(robot.gyro(), gyro, atol=1e-9)
    imu_xmat = robot.data.site_xmat[robot.model.site("imu").id].reshape(3, 3)
    np.testing.assert_allclose(robot.projected_gravity(), imu_xmat.T @ [0, 0, -1.0], atol=1e-9)
    assert np.abs(robot.gyro()).max() > 1e-2  # a moving, tilted state, not the trivial one


def test_deploy_path_from_sdk_messages_gives_the_same_47_numbers():
    pytest.importorskip("booster_robotics_sdk_python", reason=f"Booster SDK wheel not installed ({deploy.SDK_INSTALL})")
    robot, command, action = _disturbed_robot()
    gait = np.array([0.37])
    expected = robot.observation(command, gait, action)
    message = deploy.low_state_from_mujoco(robot)
    assert type(message.imu_state).__module__.startswith("booster_robotics_sdk_python")
    assert abs(message.imu_state.rpy[0]) > 1e-3  # the state is not trivially upright
    got = deploy.observation_from_low_state(message, command, gait, action, t1.DEFAULT_POSE)
    np.testing.assert_allclose(got, expected, atol=2e-6)


# ------------------------------------------------------------------ the training env (MJX)
@pytest.fixture(scope="module")
def env():
    from envs.playground import PlaygroundVecEnv

    adapter = PlaygroundVecEnv(TASK, 2, seed=3, push=False, config_overrides=NOISELESS)
    yield adapter
    adapter.close()


def test_env_drives_twelve_leg_joints_with_booster_observations(env):
    assert (env.num_obs, env.num_actions, env.max_episode_steps) == (47, 12, 1000)
    assert env.num_critic_obs > 47
    assert env.critic_obs_extends_actor_obs  # noiseless: the critic's first 47 are the actor's


def test_training_observation_equals_the_sim2sim_observation_of_the_same_state(env):
    """The MJX env's actor observation and the native-MuJoCo runner's, for the same state."""
    env.reset(seed=11)
    generator = torch.Generator().manual_seed(0)
    for _ in range(4):
        actions = torch.rand(2, 12, generator=generator) * 0.4 - 0.2
        obs, _, dones, _ = env.step(actions)
    assert not dones.any()
    state = env._carry.state
    robot = sim2sim.T1Robot(t1.T1Control())
    for i in range(2):
        robot.data.qpos[:] = np.asarray(state.data.qpos[i])
        robot.data.qvel[:] = np.asarray(state.data.qvel[i])
        import mujoco

        mujoco.mj_forward(robot.model, robot.data)
        info = state.info
        expected = robot.observation(np.asarray(info["command"][i]), np.asarray(info["gait_process"][i]),
                                     actions[i].numpy())
        np.testing.assert_allclose(obs[i].numpy(), expected, atol=2e-4)
        # head, arms and waist are held at their default pose; the legs follow the actions
        ctrl = np.asarray(state.data.ctrl[i])
        np.testing.assert_allclose(ctrl[:11], np.asarray(t1.DEFAULT_POSE)[:11], atol=1e-6)
        assert np.abs(ctrl[11:] - np.asarray(t1.DEFAULT_POSE)[11:]).max() > 1e-3


def test_domain_randomisation_varies_each_switched_on_kind_per_env(env):
    import jax

    inner = env._compiled.env
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    models, axes = inner.domain_randomize(inner.mjx_model, keys)
    floor = inner.mj_model.geom("floor").id
    friction = np.asarray(models.geom_friction[:, floor, 0])
    assert len(set(friction.round(6))) == 4 and ((0.4 <= friction) & (friction <= 1.0)).all()
    kp = np.asarray(models.actuator_gainprm[:, 11, 0])
    assert ((180.0 <= kp) & (kp <= 220.0)).all() and kp.std() > 0
    assert axes.body_mass == 0 and axes.actuator_biasprm == 0
    off = t1_lowdim.T1LowDimJoystick("flat", config_overrides={"randomization.gains": False,
                                                               "randomization.joint_offsets": False})
    _, axes = off.domain_randomize(off.mjx_model, keys)
    assert axes.actuator_gainprm is None and axes.geom_friction == 0


def test_reward_terms_are_named_and_scalable():
    from envs.playground import playground_overrides
    from envs.registry import UnknownRewardTermError

    overrides = playground_overrides(TASK, "jax", {"feet_swing": 2.0, "action_rate": -1.0})
    assert overrides["reward_config.scales.feet_swing"] == 2.0
    with pytest.raises(UnknownRewardTermError, match="feet_swing"):
        playground_overrides(TASK, "jax", {"no_such_term": 1.0})


# ------------------------------------------------------------------ train -> export -> sim-to-sim
def test_train_export_sim2sim_end_to_end(tmp_path):
    train = subprocess.run(
        [str(BIN / "fast-td3-train"), f"task={TASK}", "preset=cpu", "env.num_envs=2", "env.options.push=false",
         "env.options.config_overrides.noise_config.level=0.0", "total_steps=20", "eval_interval=20",
         "eval_episodes=2", "env.max_episode_steps=10", "save_interval=20", "algo.batch_size=32",
         "algo.learning_starts=5", "logger.console=false", f"out_dir={tmp_path / 'runs'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert train.returncode == 0, train.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs" / TASK).iterdir()

    bundle = tmp_path / "bundle"
    export = subprocess.run([str(BIN / "fast-td3-export"), f"checkpoint={run_dir}", f"out={bundle}"],
                            capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert export.returncode == 0, export.stderr[-3000:]
    meta = json.loads((bundle / "meta.json").read_text())
    assert meta["deploy"]["source_task"] == TASK and meta["deploy"]["observation"]["size"] == 47
    assert yaml.safe_load((bundle / "T1.yaml").read_text())["common"]["stiffness"][11] == 200.0

    report_file = tmp_path / "sim2sim.json"
    gate = subprocess.run([str(BIN / "fast-td3-sim2sim"), f"bundle={bundle}", "seconds=3", f"report={report_file}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert gate.returncode in (0, 1), gate.stderr[-3000:]  # an untrained policy may fall; nothing else may fail
    report = json.loads(report_file.read_text())
    assert report["deploy_mismatches"] == [] and report["segments"][0]["name"] == "stand"
    assert (gate.returncode == 0) == report["passed"]
    assert json.loads(gate.stdout.strip().splitlines()[-1])["passed"] == report["passed"]

    deployed = yaml.safe_load((bundle / "T1.yaml").read_text())
    deployed["common"]["damping"][15] = 0.5  # someone "fixes" the ankle damping on the robot side
    (bundle / "T1.yaml").write_text(yaml.safe_dump(deployed, sort_keys=False))
    flagged = subprocess.run([str(BIN / "fast-td3-sim2sim"), f"bundle={bundle}", "seconds=1"],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert flagged.returncode == 1
    assert "DEPLOY MISMATCH: damping of Left_Ankle_Pitch (SDK 15): trained with 3.0" in flagged.stdout

    missing = subprocess.run([str(BIN / "fast-td3-sim2sim"), f"bundle={tmp_path}"], capture_output=True, text=True,
                             cwd=ROOT, timeout=120)
    assert missing.returncode == 2 and "fast-td3-export" in missing.stderr
