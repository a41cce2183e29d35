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

pytest.importorskip("mujoco_playground", reason='MuJoCo Playground is not installed (pip install -e ".[sim2real]")')

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TASK = "T1LowDimJoystickFlatTerrain"
NOISELESS = {"noise_config": {"level": 0.0}}
"""The options the in-process env and the CLI run share (one compilation, cached across them)."""


# ------------------------------------------------------------------ native MuJoCo
from envs.playground import t1_lowdim, t1_mjx  # noqa: E402
from sim2real import gate_cli, sim2sim, t1_bundle  # noqa: E402
from sim2real.t1 import perturbations, sdk  # noqa: E402


def _bundle(tmp_path: Path | None = None, **control) -> t1_bundle.Bundle:
    spec = t1.DeploySpec(t1.T1Control(**control))
    return t1_bundle.Bundle(tmp_path or Path("."), None, {"deploy": spec.meta() | {"source_task": TASK}},
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
    # targets beyond a joint's range reach the PD loop unclipped, as on the robot
    import mujoco

    assert model.actuator_ctrllimited.max() == 0
    data = mujoco.MjData(model)
    ankle = model.actuator("Left_Ankle_Pitch").id  # range [-0.87, 0.35], kp 50
    data.qpos[model.joint("Left_Ankle_Pitch").qposadr[0]] = 0.3
    data.ctrl[ankle] = 0.6
    mujoco.mj_forward(model, data)
    assert data.actuator_force[ankle] == pytest.approx(50.0 * 0.3)
    rough = t1_lowdim.build_mj_model("rough", control)
    assert rough.geom("floor").type == 1 and rough.actuator_gainprm[14, 0] == 123.0  # a height field


def test_the_scene_model_is_built_once_then_read_from_the_cache(tmp_path, monkeypatch):
    import mujoco
    from mujoco_playground import registry

    built = t1_lowdim.scene_model("flat", cache_dir=tmp_path)
    (cached,) = tmp_path.glob("t1_flat_*.mjb")
    monkeypatch.setattr(registry, "load", lambda *a, **k: pytest.fail("built again instead of read"))
    again = t1_lowdim.scene_model("flat", cache_dir=tmp_path)
    assert (again.nq, again.nu, again.nsensor) == (built.nq, built.nu, built.nsensor)
    assert [again.actuator(i).name for i in range(again.nu)] == [built.actuator(i).name for i in range(built.nu)]
    np.testing.assert_array_equal(again.geom_size, built.geom_size)
    np.testing.assert_array_equal(again.key_qpos, built.key_qpos)
    assert again.opt.timestep == built.opt.timestep
    # a cut-short file (a copy interrupted) is built again, and replaced whole
    monkeypatch.undo()
    cached.write_bytes(cached.read_bytes()[:1000])
    rebuilt = t1_lowdim.scene_model("flat", cache_dir=tmp_path)
    assert rebuilt.nq == built.nq
    assert mujoco.MjModel.from_binary_path(str(cached)).nu == built.nu


def test_what_runs_no_mjx_imports_neither_playground_nor_jax(tmp_path):
    """With the scene model cached, the native backend (made through the registry, as a run makes
    it), the sim-to-sim gate and the deploy contract start without Playground and JAX: about 7 s
    less at every start of a T1 command on 2 cores."""
    t1_lowdim.scene_model("flat", cache_dir=tmp_path)
    code = """if True:
        import sys
        from envs.registry import make_env
        from sim2real import sim2sim, t1_bundle
        from envs.playground.t1_lowdim import deploy_spec
        env = make_env("playground", "T1LowDimJoystickFlatTerrain", num_envs=2, seed=0)
        env.step(env.reset()[0][:, :12] * 0)
        env.close()
        deploy_spec({"control": {"decimation": 10}})
        report = sim2sim.run(t1_bundle.load_bundle("t1_flat"), seconds=0.5)
        heavy = sorted(m for m in ("jax", "mujoco_playground", "mujoco.mjx") if m in sys.modules)
        print(type(env).__name__, report.deploy_mismatches, heavy)
    """
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                            env={**__import__("os").environ, t1_lowdim.MODEL_CACHE_ENV: str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["T1NativeVecEnv", "[]", "[]"]


def test_zero_action_policy_falls_in_sim2sim():
    report = sim2sim.run(_bundle(), seconds=5.0, policy=lambda obs: torch.zeros(obs.shape[0], 12))
    assert not report.passed
    assert report.segments[0].fell and report.segments[0].fell_at < 5.0


def test_a_robot_that_does_not_move_fails_the_tracking_thresholds():
    """Fall detection off, the zero-action T1 stays where it is: the gate must still fail it, on tracking."""
    report = sim2sim.run(_bundle(), seconds=4.0, policy=lambda obs: torch.zeros(obs.shape[0], 12),
                         thresholds=sim2sim.Thresholds(min_height=-1.0, min_tilt_cos=-2.0))
    assert not report.passed and not any(s.fell for s in report.segments)
    stand, forward, sideways, turn = report.segments
    assert stand.failures == []  # standing is not judged on tracking
    assert any("planar velocity error" in f for f in forward.failures)
    assert any("covered" in f and "< 60%" in f for f in forward.failures)
    assert forward.commanded_distance == pytest.approx(0.5 * 4.0 - 0.5 * 0.5 / 2, abs=0.03)  # ramp at 1 unit/s
    assert any("planar velocity error" in f for f in sideways.failures)
    assert not any("covered" in f for f in sideways.failures)  # coverage is asked of forward motion
    assert [f for f in turn.failures if "yaw-rate" in f] and turn.yaw_rate_error == pytest.approx(0.5, abs=0.05)
    assert report.seconds_walked == pytest.approx(16.0)


def test_each_segment_reports_the_net_turn_of_the_base_across_the_seam():
    """A base turned 0.01 rad every step (fall detection off) turns 2 rad in each 4 s segment, 8 rad
    in all: the heading crosses ±pi and each segment's net turn is still 2."""
    def spin(robot, turned=[0.0]):
        turned[0] += 0.01
        robot.data.qpos[3:7] = [np.cos(turned[0] / 2), 0.0, 0.0, np.sin(turned[0] / 2)]

    report = sim2sim.run(_bundle(), seconds=4.0, policy=lambda obs: torch.zeros(obs.shape[0], 12),
                         thresholds=sim2sim.Thresholds(min_height=-1.0, min_tilt_cos=-2.0), on_step=spin)
    assert [s.heading_change for s in report.segments] == pytest.approx([2.0] * 4, abs=1e-9)
    assert sim2sim.wrapped_angle(3.0 * np.pi) == pytest.approx(-np.pi)
    assert sim2sim.wrapped_angle(-0.5) == -0.5


def test_period_averaged_error_drops_the_sway_and_keeps_the_drift():
    steps = np.arange(200)
    sway = 0.4 * np.sin(2 * np.pi * steps / 50)  # one gait period is 50 steps
    command = np.full(200, 0.5)
    assert sim2sim.period_averaged_error(0.5 + sway, command, window=50) == pytest.approx(0.0, abs=1e-9)
    assert sim2sim.period_averaged_error(0.5 + sway, command, window=1) == pytest.approx(0.4 * 2 / np.pi, rel=0.02)
    assert sim2sim.period_averaged_error(0.3 + sway, command, window=50) == pytest.approx(0.2, abs=1e-9)
    planar = np.stack([0.5 + sway, np.full(200, 0.4)], 1)  # on speed forward, drifting 0.4 m/s sideways...
    commanded = np.stack([command, np.full(200, 0.1)], 1)  # ...where 0.1 was asked
    assert sim2sim.period_averaged_error(planar, commanded, window=50) == pytest.approx(0.3, abs=1e-9)
    assert np.isnan(sim2sim.period_averaged_error(np.zeros((0, 2)), np.zeros((0, 2)), window=50))


def test_each_threshold_is_judged_against_its_option():
    def segment(command, **measured):
        s = sim2sim.SegmentReport("s", command, 20.0, **measured)
        return s

    walking = dict(distance=9.0, commanded_distance=10.0, lin_vel_error=0.15, yaw_rate_error=0.25)
    limits = sim2sim.Thresholds()
    good = segment([0.5, 0.0, 0.0], **walking)
    good.judge(limits)
    assert good.failures == []
    strict = segment([0.5, 0.0, 0.0], **walking)
    strict.judge(sim2sim.Thresholds(max_lin_vel_error=0.1, max_yaw_rate_error=0.2, min_forward_coverage=0.95))
    assert [f.split()[0] for f in strict.failures] == ["planar", "yaw-rate", "covered"]
    short = segment([0.5, 0.0, 0.0], **(walking | {"distance": 5.0, "heading_change": -3.1}))
    short.judge(limits)
    assert short.failures == ["covered 5.00 m of 10.00 m commanded (50% < 60%), turning -3.10 rad"]
    nan = segment([0.0, 0.0, 0.5], **(walking | {"yaw_rate_error": float("nan")}))
    nan.judge(limits)
    assert nan.failures and "yaw-rate" in nan.failures[0]  # no measurement is no pass
    fallen = segment([0.0, 0.0, 0.0], fell=True, fell_at=3.25)
    fallen.judge(limits)
    assert fallen.failures == ["fell at 3.25 s"]


def test_gains_that_differ_from_training_are_flagged():
    bundle = _bundle()
    assert t1_bundle.deploy_mismatches(bundle) == []
    bundle.deploy_yaml["common"]["stiffness"][17] = 150.0
    bundle.deploy_yaml["policy"]["gait_frequency"] = 2.0
    bundle.deploy_yaml["policy"]["normalization"]["dof_vel"] = 0.05
    bundle.deploy_yaml["mech"]["parallel_mech_indexes"] = [15, 16]
    problems = t1_bundle.deploy_mismatches(bundle)
    assert any("stiffness of Right_Hip_Pitch (SDK 17): trained with 200.0" in p for p in problems)
    assert any("gait_frequency 2.0" in p for p in problems)
    assert any("normalization.dof_vel: the policy was trained with 0.1" in p for p in problems)
    assert any("parallel_mech_indexes" in p for p in problems)
    assert len(problems) == 4


def test_joint_ranges_of_the_contract_are_the_models():
    model = t1_lowdim.scene_model("flat")
    for name, (low, high) in zip(t1.SDK_JOINT_NAMES, t1.JOINT_RANGE):
        assert tuple(model.jnt_range[model.joint(name).id]) == pytest.approx((low, high)), name


def test_joint_limit_bounds_scale_each_joint_to_its_range_and_travel_in_the_bundle():
    config = t1_lowdim.default_config()
    config.action_bounds = "joint_limits"
    bounded = t1_lowdim.control_from(config)
    legs = list(t1.LEG_SDK_INDICES)
    lower, upper = np.array(t1.JOINT_RANGE)[legs].T
    default = np.asarray(t1.DEFAULT_POSE)[legs]
    # holosoma's rule: a joint's scale is its default pose's larger distance to a stop
    np.testing.assert_allclose(bounded.leg_scales(), np.maximum(default - lower, upper - default), atol=1e-6)
    actions = np.random.default_rng(0).uniform(-1.5, 1.5, (2000, 12))
    targets = t1.targets_from_actions(np, actions, bounded, np.asarray(bounded.default_pose))[:, legs]
    assert ((lower - 1e-6 <= targets) & (targets <= upper + 1e-6)).all()  # never beyond a stop
    np.testing.assert_allclose(targets.min(axis=0), lower, atol=1e-6)  # and every stop reachable
    np.testing.assert_allclose(targets.max(axis=0), upper, atol=1e-6)
    free = t1.targets_from_actions(np, actions, t1.T1Control(), np.asarray(t1.DEFAULT_POSE))[:, legs]
    assert ((free < lower) | (free > upper)).any()  # unbounded, some targets pass a stop
    left_roll, right_roll = 1, 7  # mirror images: the hip rolls' bounds are each other's negation
    low, high = bounded.action_bounds()
    assert (low[left_roll], high[left_roll]) == (-high[right_roll], -low[right_roll])
    with pytest.raises(ValueError, match="action_bounds='limits'"):
        config.action_bounds = "limits"
        t1_lowdim.control_from(config)

    bundle = _bundle(**dict(bounded.__dict__))
    recorded = bundle.deploy_yaml["policy"]["control"]
    assert (recorded["action_scales"], recorded["action_low"], recorded["action_high"]) == (
        bounded.leg_scales(), low, high)
    assert bundle.deploy["action"]["scale"] == bounded.leg_scales()
    assert bundle.control() == bounded and t1_bundle.deploy_mismatches(bundle) == []
    recorded["action_high"][4] = 1.0  # the deploy side forgot the ankle's stop
    recorded["action_scales"][3] = 1.0
    assert t1_bundle.deploy_mismatches(bundle) == [
        f"action_scales of Left_Knee_Pitch: trained with {bounded.leg_scales()[3]}, T1.yaml has 1.0 (the robot would "
        "turn the policy's actions into other targets than training did)",
        f"action_high of Left_Ankle_Pitch: trained with {high[4]}, T1.yaml has 1.0 (the robot would turn the "
        "policy's actions into other targets than training did)"]
    old = _bundle()  # a bundle from before action bounds: T1.yaml without them means the scalar scale, ±1
    for key in ("action_scales", "action_low", "action_high"):
        del old.deploy_yaml["policy"]["control"][key]
    assert old.control().action_bounds() == ([-1.0] * 12, [1.0] * 12) and old.control().leg_scales() == [1.0] * 12
    assert t1_bundle.deploy_mismatches(old) == []


def test_the_training_env_drives_its_pd_loop_with_the_bounded_targets():
    from envs.playground.t1_native import T1NativeVecEnv

    env = T1NativeVecEnv(TASK, 1, seed=0, push=False, config_overrides=NOISELESS | {"action_bounds": "joint_limits"})
    env.reset()
    action = np.full((1, 12), 1.0, np.float32)
    env.step(torch.from_numpy(action))
    expected = t1.targets_from_actions(np, action.astype(np.float64), env.control, np.asarray(t1.DEFAULT_POSE))
    filtered = np.asarray(t1.DEFAULT_POSE)
    for _ in range(env.control.decimation):
        filtered = t1.filtered_targets(filtered, expected, env.control)
    np.testing.assert_allclose(env._ctrl[0], filtered[0], atol=1e-9)
    assert env.control.leg_action_scale is not None


def test_bad_sim2sim_input_exits_2_with_a_message(tmp_path, capsys):
    bundle = _bundle(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps(bundle.meta))
    (tmp_path / "T1.yaml").write_text(yaml.safe_dump(bundle.deploy_yaml))
    (tmp_path / "policy.pt").write_bytes(b"not a TorchScript archive")
    for args, message in ((["seconds=abc"], "seconds=abc: give a number above 0"),
                          (["seconds=0"], "seconds=0: give a number above 0"), (["seconds=1.5"], "give seconds > 2"),
                          (["max_lin_vel_error=-1"], "max_lin_vel_error=-1: give a number, 0 or more"),
                          (["min_coverage=0.5"], "unknown options ['min_coverage']"),
                          ([], "not a TorchScript file")):
        with pytest.raises(SystemExit) as exited:
            gate_cli.cli([f"bundle={tmp_path}", *args])
        assert exited.value.code == 2 and message in capsys.readouterr().err
    (tmp_path / "T1.yaml").write_text("- a list, not the deploy configuration\n")
    with pytest.raises(SystemExit) as exited:
        gate_cli.cli([f"bundle={tmp_path}"])
    assert exited.value.code == 2 and "section 'common' lacks" in capsys.readouterr().err


def test_rates_the_bundle_cannot_carry_are_refused():
    with pytest.raises(ValueError, match="action_repeat"):
        t1_lowdim.deploy_spec({"action_repeat": 2})
    with pytest.raises(ValueError, match="control.sim_dt"):
        t1_lowdim.deploy_spec({"ctrl_dt": 0.04})
    spec = t1_lowdim.deploy_spec({"control": {"decimation": 20}})
    assert spec.control.ctrl_dt == pytest.approx(0.04) and spec.deploy_yaml()["policy"]["control"]["decimation"] == 20


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
    pytest.importorskip("booster_robotics_sdk_python", reason=f"Booster SDK wheel not installed ({sdk.SDK_INSTALL})")
    robot, command, action = _disturbed_robot()
    gait = np.array([0.37])
    expected = robot.observation(command, gait, action)
    message = sdk.low_state_from_mujoco(robot)
    assert type(message.imu_state).__module__.startswith("booster_robotics_sdk_python")
    assert abs(message.imu_state.rpy[0]) > 1e-3  # the state is not trivially upright
    got = sdk.observation_from_low_state(message, command, gait, action, t1.DEFAULT_POSE)
    np.testing.assert_allclose(got, expected, atol=2e-6)


# ------------------------------------------------------------------ the training env (MJX)
@pytest.fixture(scope="module")
def env():
    from envs.playground.mjx import PlaygroundVecEnv

    adapter = PlaygroundVecEnv(TASK, 2, seed=3, push=False, config_overrides=NOISELESS)
    yield adapter
    adapter.close()


def test_env_drives_twelve_leg_joints_with_booster_observations(env):
    assert (env.num_obs, env.num_actions, env.max_episode_steps) == (47, 12, 1000)
    assert env.num_critic_obs > 47
    assert env.critic_obs_extends_actor_obs  # noiseless: the critic's first 47 are the actor's
    assert env.mirror_maps() == t1_lowdim.mirror_maps()  # algo.symmetry runs on MJX too


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


def test_gait_signals_describe_the_step_and_the_last_state_before_a_reset(env):
    import jax
    import jax.numpy as jnp

    env.reset(seed=5)
    limit = env._time_limit
    # every episode times out at its third step; placed like the env's own limit, or step would compile again
    env._time_limit = jax.device_put(jnp.int32(3), env._jax_device)
    try:
        for step in range(3):
            _, _, dones, extras = env.step(torch.zeros(2, 12))
            signals = env.gait_signals()
            state = env._carry.state
            if step < 2:
                assert not dones.any()
                np.testing.assert_allclose(signals["base_height"].numpy(), np.asarray(state.data.qpos[:, 2]))
                np.testing.assert_allclose(signals["joint_pos"].numpy(), np.asarray(state.data.qpos[:, 7:]))
                np.testing.assert_allclose(signals["command"].numpy(), np.asarray(state.info["command"]))
                # applied torques: after the joints' torque limits
                np.testing.assert_allclose(signals["torques"].numpy(), np.asarray(state.data.qfrc_actuator[:, 6:]))
                assert (signals["torques"].abs() <= signals["torque_limits"] + 1e-4).all()
    finally:
        env._time_limit = limit
    assert dones.all()
    final_height = extras["final_observations"]["critic"][:, 50]  # privileged: 47 actor + 3 velocity, then height
    np.testing.assert_allclose(signals["base_height"].numpy(), final_height.numpy(), atol=1e-6)
    assert not np.allclose(signals["base_pos_xy"].numpy(), np.asarray(state.data.qpos[:, :2]))  # not the reset state
    shapes = {key: tuple(value.shape) for key, value in signals.items() if isinstance(value, torch.Tensor)}
    assert shapes["foot_vel_xy"] == (2, 2, 2) and shapes["foot_contact"] == (2, 2)
    assert shapes["torques"] == shapes["joint_vel"] == (2, 23) and shapes["torque_limits"] == (23,)
    assert shapes["joint_limits"] == (23, 2) and signals["dt"] == pytest.approx(0.02)
    assert signals["torque_limits"][11:17].tolist() == [60, 25, 30, 60, 24, 15]
    assert signals["base_height_target"] == pytest.approx(0.65)
    np.testing.assert_allclose(signals["projected_gravity"][:, 2].numpy(), -1.0, atol=0.1)  # still upright


def test_domain_randomisation_varies_each_switched_on_kind_per_env(env):
    import jax

    inner = env._compiled.env
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    models, axes = inner.domain_randomize(inner.mjx_model, keys)
    floor = inner.mj_model.geom("floor").id
    gate = perturbations.PerturbationRanges()  # training draws from the robust gate's ranges
    friction = np.asarray(models.geom_friction[:, floor, 0])
    low, high = gate.floor_friction
    assert len(set(friction.round(6))) == 4 and ((low <= friction) & (friction <= high)).all()
    kp = np.asarray(models.actuator_gainprm[:, 11, 0]) / t1.STIFFNESS[11]
    kd = -np.asarray(models.actuator_biasprm[:, 11, 2]) / t1.DAMPING[11]
    for scale, (low, high) in ((kp, gate.kp), (kd, gate.kd)):
        assert ((low <= scale) & (scale <= high)).all() and scale.std() > 0
    assert not np.allclose(kp, kd)
    mass = np.asarray(models.body_mass) / np.maximum(inner.mj_model.body_mass, 1e-9)
    inertia = np.asarray(models.body_inertia)[:, 1:] / inner.mj_model.body_inertia[1:]
    trunk = int(inner.mj_model.jnt_bodyid[0])
    links = [b for b in range(1, inner.mj_model.nbody) if b != trunk]
    assert ((gate.link_mass[0] <= mass[:, links]) & (mass[:, links] <= gate.link_mass[1])).all()
    np.testing.assert_allclose(inertia[:, [b - 1 for b in links]], mass[:, links, None].repeat(3, -1), rtol=1e-5)
    assert axes.body_mass == 0 and axes.body_inertia == 0 and axes.actuator_biasprm == 0
    off = t1_mjx.T1LowDimJoystick("flat", config_overrides={"randomization.gains": False,
                                                            "randomization.joint_offsets": False})
    _, axes = off.domain_randomize(off.mjx_model, keys)
    assert axes.actuator_gainprm is None and axes.geom_friction == 0


def test_encoder_offsets_shift_the_pd_loop_and_the_observation_alike(env):
    """A randomised encoder offset δ: the PD loop acts on q + δ (bias = -kp·δ) and the policy
    observes q + δ, as on a robot whose encoders are off by δ."""
    import jax

    inner = env._compiled.env
    models, axes = inner.domain_randomize(inner.mjx_model, jax.random.split(jax.random.PRNGKey(1), 2))
    first = jax.tree_util.tree_map(lambda axis, x: x if axis is None else x[0], axes, models,
                                   is_leaf=lambda axis: axis is None)
    env.reset(seed=2)
    state = jax.tree_util.tree_map(lambda x: x[0], env._carry.state)
    original = inner._mjx_model
    inner._mjx_model = first
    try:
        offsets = np.asarray(inner.encoder_offsets())
        obs = np.asarray(inner._observe(state.data, dict(state.info), inner._contacts(state.data))["state"])
    finally:
        inner._mjx_model = original
    legs = list(t1.LEG_SDK_INDICES)
    assert np.abs(offsets[legs]).max() > 1e-3 and np.abs(offsets[legs]).max() <= 0.02 + 1e-6
    np.testing.assert_allclose(offsets[:11], 0.0, atol=1e-7)
    kp = np.asarray(first.actuator_gainprm[:, 0])
    np.testing.assert_allclose(np.asarray(first.actuator_biasprm[:, 0]), -kp * offsets, rtol=1e-5, atol=1e-6)
    measured = np.asarray(state.data.qpos[7:])[legs] + offsets[legs] - np.asarray(t1.DEFAULT_POSE)[legs]
    np.testing.assert_allclose(obs[11:23], measured, atol=1e-5)  # noiseless env


def test_reward_terms_are_named_and_scalable():
    from envs.playground.config import playground_overrides
    from envs.registry import UnknownRewardTermError

    overrides = playground_overrides(TASK, "jax", {"feet_swing": 2.0, "action_rate": -1.0})
    assert overrides["reward_config.scales.feet_swing"] == 2.0
    with pytest.raises(UnknownRewardTermError, match="feet_swing"):
        playground_overrides(TASK, "jax", {"no_such_term": 1.0})


# ------------------------------------------------------------------ train -> export -> sim-to-sim
@pytest.mark.parametrize("backend", [
    # slow tier: a cold compile of the MJX env in a fresh process can take minutes on 2 cores; the
    # MJX env itself is checked in-process above (module fixture `env`), the CLI chain below on native
    pytest.param("mjx", marks=pytest.mark.slow),
    "native",
])
def test_train_export_sim2sim_end_to_end(tmp_path, capsys, backend):
    """A briefly trained policy, on either backend (`auto` picks native on a CPU), exports and
    runs through the sim-to-sim gate the same way."""
    overrides = [] if backend == "native" else [f"env.options.backend={backend}"]
    train = subprocess.run(
        [str(BIN / "fast-td3-train"), f"task={TASK}", "sizing=cpu", "env.num_envs=2", "env.options.push=false", *overrides,
         "env.options.config_overrides.noise_config.level=0.0", "total_steps=20", "eval_interval=20",
         "eval_episodes=2", "env.max_episode_steps=10", "save_interval=20", "algo.batch_size=32",
         "algo.learning_starts=5", "logger.console=false", f"out_dir={tmp_path / 'runs'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert train.returncode == 0, train.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs" / TASK).iterdir()
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())["env"]["options"]["backend"]
    assert recorded == backend  # what a resume and fast-td3-eval repeat
    assert ("T1NativeVecEnv" in train.stdout) == (backend == "native")

    bundle = tmp_path / "bundle"
    export = subprocess.run([str(BIN / "fast-td3-export"), f"checkpoint={run_dir}", f"out={bundle}"],
                            capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert export.returncode == 0, export.stderr[-3000:]
    meta = json.loads((bundle / "meta.json").read_text())
    assert meta["deploy"]["source_task"] == TASK and meta["deploy"]["observation"]["size"] == 47
    assert yaml.safe_load((bundle / "T1.yaml").read_text())["common"]["stiffness"][11] == 200.0

    from fast_td3.training.metrics_log import read_metrics

    evaluation = [r for r in read_metrics(run_dir) if "eval/return_mean" in r][-1]
    for metric in ("lin_vel_tracking_error", "foot_slip", "torque_saturation_rate", "orientation_error",
                   "base_height_error", "energy_per_metre", "action_smoothness", "fall_rate"):
        assert math.isfinite(evaluation[f"eval/gait/{metric}"]), metric

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
    # the same command in this process (its console script ran above): a process start less each
    capsys.readouterr()
    with pytest.raises(SystemExit) as flagged:
        gate_cli.cli([f"bundle={bundle}", "seconds=3"])
    assert flagged.value.code == 1
    assert "DEPLOY MISMATCH: damping of Left_Ankle_Pitch (SDK 15): trained with 3.0" in capsys.readouterr().out

    with pytest.raises(SystemExit) as missing:
        gate_cli.cli([f"bundle={tmp_path}"])
    assert missing.value.code == 2 and "fast-td3-export" in capsys.readouterr().err


@pytest.mark.slow  # two cold JAX compiles of the MJX env's step (a few minutes on 2 cores)
def test_mjx_action_delay_and_turns_in_place():
    """The MJX env's action delay holds the PD loop one step behind, as the native env's does
    (tests/test_t1_native.py), turn_probability=1 draws only turns in place and strafe_probability=1
    only sideways walks."""
    import jax
    import jax.numpy as jnp

    from envs.playground import config as playground_config

    playground_config.enable_compilation_cache()
    quiet = {"noise_config.level": 0.0, "push_config.enable": False}
    delayed = t1_mjx.T1LowDimJoystick("flat", config_overrides=quiet | {"action_delay.enable": True,
                                                                        "action_delay.steps_range": [1, 1]})
    prompt = t1_mjx.T1LowDimJoystick("flat", config_overrides=quiet)
    key = jax.random.PRNGKey(3)
    a, b = jax.jit(delayed.reset)(key), jax.jit(prompt.reset)(key)
    assert int(a.info["action_delay"]) == 1 and int(b.info["action_delay"]) == 0
    np.testing.assert_array_equal(np.asarray(a.data.qpos), np.asarray(b.data.qpos))  # the delay draw is apart
    step_a, step_b = jax.jit(delayed.step), jax.jit(prompt.step)
    actions = jnp.asarray(np.random.default_rng(0).uniform(-0.5, 0.5, (3, 12)), jnp.float32)
    a, b = step_a(a, actions[0]), step_b(b, jnp.zeros(12))
    np.testing.assert_allclose(np.asarray(a.data.qpos), np.asarray(b.data.qpos), atol=1e-5)
    for previous, action in zip(actions[:-1], actions[1:]):
        a, b = step_a(a, action), step_b(b, previous)
        np.testing.assert_allclose(np.asarray(a.data.qpos), np.asarray(b.data.qpos), atol=1e-5)
    turning = t1_mjx.T1LowDimJoystick("flat", config_overrides={"commands.turn_probability": 1.0,
                                                                "commands.standing_probability": 0.0})
    commands = np.asarray(jax.vmap(turning.sample_command)(jax.random.split(key, 64)))
    assert not commands[:, :2].any() and (np.abs(commands[:, 2]) > 0).all()
    mixed = t1_mjx.T1LowDimJoystick("flat", config_overrides={"commands.turn_probability": 0.2,
                                                              "commands.standing_probability": 0.0})
    commands = np.asarray(jax.jit(jax.vmap(mixed.sample_command))(jax.random.split(key, 4000)))
    turns = ~commands[:, :2].any(axis=1)
    assert 0.17 < turns.mean() < 0.23
    strafing = t1_mjx.T1LowDimJoystick("flat", config_overrides={"commands.strafe_probability": 1.0,
                                                                 "commands.standing_probability": 0.0})
    strafes = np.asarray(jax.vmap(strafing.sample_command)(jax.random.split(key, 64)))
    assert not strafes[:, 0::2].any() and (np.abs(strafes[:, 1]) > 0).all()
    vy = commands[~turns, 1]  # the turn's draw is its own: walking commands keep vy's whole range
    assert vy.min() < -0.45 and vy.max() > 0.45 and abs(np.mean(vy < 0) - 0.5) < 0.03
