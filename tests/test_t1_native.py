"""The native-MuJoCo backend of the T1 low-dim env (`envs/t1_native.py`): the env contract
against an independent native runner, the backend choice, domain randomisation, and the
step-by-step fidelity to the MJX env (`envs/t1_lowdim.py`).

The native env builds in seconds and needs no JIT compile, so all but the MJX comparison
(a cold JAX compile of T1's step, 1-2 minutes on 2 cores) run in the default suite.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_playground", reason='MuJoCo Playground is not installed (pip install -e ".[playground]")')

from env_conformance import EnvContractTests  # noqa: E402

from envs import t1_lowdim  # noqa: E402
from envs.playground import choose_backend  # noqa: E402
from envs.protocol import ACTOR, CRITIC, FINAL_OBSERVATIONS  # noqa: E402
from envs.registry import EnvOptionError, UnknownRewardTermError, make_env  # noqa: E402
from envs.t1_native import INFO_KEYS, T1NativeVecEnv  # noqa: E402
from sim2real import sim2sim, t1  # noqa: E402

TASK = "T1LowDimJoystickFlatTerrain"
QUIET = {"config_overrides": {"noise_config": {"level": 0.0}}, "push": False}
"""Noiseless observations and no pushes: what an independent runner can reproduce exactly."""


def native(num_envs: int = 2, seed: int = 0, **options) -> T1NativeVecEnv:
    return T1NativeVecEnv(TASK, num_envs, seed=seed, **(QUIET | options))


@functools.lru_cache(maxsize=1)
def _reference_model():
    return sim2sim.T1Robot(t1.T1Control()).model


def _reference_robot() -> sim2sim.T1Robot:
    """A fresh robot (its solver starts cold, as an env's does after a reset) on a model built once."""
    import mujoco

    robot = object.__new__(sim2sim.T1Robot)
    robot.control, robot.model = t1.T1Control(), _reference_model()
    robot.data, robot.default_pose = mujoco.MjData(robot.model), np.asarray(t1.DEFAULT_POSE)
    robot._local_linvel = sim2sim._sensor(robot.model, "local_linvel")
    return robot


# ------------------------------------------------------------------ env contract
class TestNativeContract(EnvContractTests):
    """The reference is the sim-to-sim gate's own robot (`sim2sim.T1Robot`: one MjData, plain
    `mj_step`, the deploy code's command/gait order and observation) started in env i's reset
    state: the batch, its threads and the vectorised task logic must reproduce it."""

    num_envs = 3
    atol = 1e-5  # float64 simulation, float32 observations

    def make_env(self, seed, num_envs, **options):
        return native(num_envs, seed, **options)

    def reference_observation(self, seed, env_index, actions):
        env = native(self.num_envs, seed)
        env.reset()
        start = {key: np.array(value[env_index]) for key, value in env.info.items()}
        robot = _reference_robot()
        robot.data.qpos[:], robot.data.qvel[:] = env._qpos[env_index], env._qvel[env_index]
        robot.data.ctrl[:] = env._ctrl[env_index]
        env.close()
        import mujoco

        mujoco.mj_forward(robot.model, robot.data)
        clock, command, active = start["clock"], start["command"], start["active_frequency"]
        action = np.zeros(t1.NUM_LEG_JOINTS)
        for action in actions:
            action = np.clip(action.numpy().astype(np.float64), -1.0, 1.0)
            robot.act(action)
            clock = clock + robot.control.ctrl_dt
            gait, command, active = t1.update_command_and_gait(
                np, clock=clock, active_frequency=active, smoothed=command, joystick=start["target_command"],
                gait_frequency=start["gait_frequency"], ctrl_dt=robot.control.ctrl_dt)
        return torch.from_numpy(robot.observation(command, gait, action))


# ------------------------------------------------------------------ backend choice and options
def test_auto_picks_native_on_cpu_and_records_it():
    assert choose_backend(TASK, torch.device("cpu"), "auto", {}) == "native"
    assert choose_backend("T1LowDimJoystickRoughTerrain", torch.device("cpu"), "auto", {}) == "native"
    assert choose_backend(TASK, torch.device("cuda"), "auto", {}) == "mjx"  # MJX stays the GPU path
    assert choose_backend(TASK, torch.device("cpu"), "auto", {"impl": "warp"}) == "mjx"
    assert choose_backend(TASK, torch.device("cpu"), "mjx", {}) == "mjx"
    with pytest.raises(EnvOptionError, match="backend=native runs"):
        choose_backend("CheetahRun", torch.device("cpu"), "native", {})
    env = make_env("playground", TASK, 2, 0, torch.device("cpu"), backend="auto", impl="auto", lean_assets=True,
                   compilation_cache=None, num_threads=1, reward_scales={"feet_swing": 2.0})
    assert isinstance(env, T1NativeVecEnv) and env.resolved_options == {"backend": "native"}
    assert env.num_threads == 1 and env.config.reward_config.scales.feet_swing == 2.0
    assert (env.num_obs, env.num_critic_obs, env.num_actions, env.max_episode_steps) == (47, 79, 12, 1000)
    env.close()
    with pytest.raises(EnvOptionError, match="impl='warp' applies to the MJX or EnvPool backend"):
        make_env("playground", TASK, 2, 0, torch.device("cpu"), backend="native", impl="warp")
    with pytest.raises(UnknownRewardTermError, match="feet_swing"):
        native(reward_scales={"no_such_term": 1.0})


def test_reward_scales_scale_the_named_terms():
    """`env.reward_scales.<term>` works as on MJX: the episode sums and the reward follow the scale."""
    a, b = native(seed=1), native(seed=1, reward_scales={"survival": 1.0})
    a.reset(), b.reset()
    zero = torch.zeros(2, 12)
    (_, ra, _, ea), (_, rb, _, eb) = a.step(zero), b.step(zero)
    torch.testing.assert_close(eb["episode"]["reward/survival"], 4 * ea["episode"]["reward/survival"])
    torch.testing.assert_close(rb - ra, torch.full((2,), 0.75 * a.dt), atol=1e-6, rtol=0)
    assert a.critic_obs_extends_actor_obs
    obs, extras = a.reset()
    torch.testing.assert_close(extras["observations"][CRITIC][:, :47], obs)


def test_noise_and_pushes_are_switches():
    noisy = T1NativeVecEnv(TASK, 2, seed=0, push=False)
    obs, extras = noisy.reset()
    gap = (extras["observations"][CRITIC][:, :47] - obs).abs()
    assert 0 < gap.max() <= 0.2 + 1e-6  # the largest noise: the gyro's 0.2 rad/s (joint velocities: 1.5 x 0.1)
    pushed = native(2, 0, push=True)
    pushed.reset()
    pushed.info["push_steps"][:] = 2  # push on the second step
    quiet = native(2, 0)
    quiet.reset()
    zero = torch.zeros(2, 12)
    for _ in range(2):
        pushed.step(zero), quiet.step(zero)
    kick = np.abs(pushed._qvel[:, :2] - quiet._qvel[:, :2]).max()
    assert 0.05 < kick < 1.5


def test_domain_randomisation_varies_each_switched_on_kind_per_env():
    env = native(4, 0, domain_randomization=True)
    friction = env.batch.expanded("geom_friction")[:, env.index.floor_geom, 0]
    assert len(set(friction.round(6))) == 4 and ((0.4 <= friction) & (friction <= 1.0)).all()
    kp = env.batch.expanded("actuator_gainprm")[:, 11, 0]
    assert ((180.0 <= kp) & (kp <= 220.0)).all() and kp.std() > 0
    massive = env.model.body_mass > 0  # the world body has none
    mass = env.batch.expanded("body_mass")[:, massive] / env.model.body_mass[massive]
    assert ((0.9 <= mass) & (mass <= 1.1)).all() and mass.std() > 0
    offsets = env.encoder_offsets()
    legs = list(t1.LEG_SDK_INDICES)
    assert 1e-3 < np.abs(offsets[:, legs]).max() <= 0.02 and not offsets[:, :11].any()
    bias = env.batch.expanded("actuator_biasprm")
    np.testing.assert_allclose(bias[:, legs, 0], -env.batch.expanded("actuator_gainprm")[:, legs, 0] * offsets[:, legs])
    obs, _ = env.reset()  # noiseless: the policy sees the encoders' q + δ
    measured = env._qpos[:, 7:][:, legs] + offsets[:, legs] - np.asarray(t1.DEFAULT_POSE)[legs]
    np.testing.assert_allclose(obs[:, 11:23].numpy(), measured, atol=1e-6)
    off = native(2, 0, domain_randomization=True, config_overrides={
        "noise_config": {"level": 0.0}, "randomization": {"gains": False, "joint_offsets": False}})
    assert off.batch.expanded("actuator_gainprm") is None and not off.encoder_offsets().any()


def test_set_state_round_trips_the_task_state():
    a, b = native(2, 3), native(2, 9)
    obs, extras = a.reset()
    actor, critic = b.set_state(a._qpos.copy(), a._qvel.copy(), a._ctrl.copy(), a.info)
    np.testing.assert_array_equal(actor, obs.numpy())
    np.testing.assert_array_equal(critic, extras["observations"][CRITIC].numpy())
    assert set(a.info) == set(INFO_KEYS)
