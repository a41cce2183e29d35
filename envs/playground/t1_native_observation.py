"""The native T1 env's observations: the deployment contract's actor observation, with the
sensor noise the robot's readings carry, and the critic's privileged one (noise-free), assembled
from the env's NumPy state as `T1LowDimJoystick._observe` assembles them on MJX."""

from __future__ import annotations

import numpy as np

from envs.playground import t1_lowdim
from sim2real import t1

CRITIC_OBSERVATION_SIZE = sum(size for _, size in t1_lowdim.PRIVILEGED_LAYOUT)


def observe(info: dict[str, np.ndarray], state: dict[str, np.ndarray], contacts: np.ndarray, *,
            encoder_offsets: np.ndarray, default_pose: np.ndarray, noise, rng: np.random.Generator, index,
            torque_limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(actor, critic) float32 observations of the envs whose task state is `info` and MuJoCo
    state `state` (`T1NativeVecEnv.state`). The joints read q + `encoder_offsets`; `noise` is
    the task's `noise_config`, drawn from `rng` (gravity, gyro, joint positions, velocities)."""
    gravity, gyro = t1.imu_from_floating_base(np, state["qpos"][:, 3:7], state["qvel"][:, 3:6])
    joint_pos, joint_vel = state["qpos"][:, 7:] + encoder_offsets, state["qvel"][:, 6:]
    common = dict(command=info["command"], gait_process=info["gait_process"], last_action=info["last_action"],
                  default_pose=default_pose)
    level, scales, n = float(noise.level), noise.scales, len(gravity)

    def noisy(value, scale):
        return value + (2 * rng.random(value.shape) - 1) * level * scale

    actor = t1.actor_observation(
        np, projected_gravity=noisy(gravity, scales.gravity), gyro=noisy(gyro, scales.gyro),
        joint_pos=noisy(joint_pos, scales.joint_pos), joint_vel=noisy(joint_vel, scales.joint_vel), **common)
    clean = t1.actor_observation(np, projected_gravity=gravity, gyro=gyro, joint_pos=joint_pos,
                                 joint_vel=joint_vel, **common)
    critic = t1_lowdim.privileged_observation(
        np, clean, qpos=state["qpos"], sensordata=state["sensordata"], site_xpos=state["site_xpos"],
        leg_torques=state["leg_torques"], contacts=contacts, feet_air_time=info["feet_air_time"],
        target_command=info["target_command"], gait_frequency=info["gait_frequency"], index=index,
        torque_limit=torque_limit)
    assert critic.shape == (n, CRITIC_OBSERVATION_SIZE)
    return actor.astype(np.float32), critic.astype(np.float32)
