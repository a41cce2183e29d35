"""The 47-number actor observation: its layout and scales, and the IMU readings it starts from."""

from __future__ import annotations

from sim2real.t1.gait import gait_phase_features, standing
from sim2real.t1.joints import LEG_SDK_INDICES, NUM_LEG_JOINTS


OBSERVATION_LAYOUT = (
    # (name, size, scale): the actor observation is the concatenation, in this order, of value * scale.
    ("projected_gravity", 3, 1.0),
    ("gyro", 3, 1.0),
    ("command", 3, 1.0),
    ("gait_phase", 2, 1.0),
    ("leg_joint_pos", NUM_LEG_JOINTS, 1.0),
    ("leg_joint_vel", NUM_LEG_JOINTS, 0.1),
    ("last_action", NUM_LEG_JOINTS, 1.0),
)
OBSERVATION_SIZE = sum(size for _, size, _ in OBSERVATION_LAYOUT)


def observation_slices() -> dict[str, slice]:
    slices, start = {}, 0
    for name, size, _ in OBSERVATION_LAYOUT:
        slices[name] = slice(start, start + size)
        start += size
    return slices


def actor_observation(xp, *, projected_gravity, gyro, command, gait_process, joint_pos, joint_vel, last_action,
                      default_pose):
    """The 47-number policy input. `joint_pos`, `joint_vel` and `default_pose` are the 23
    joints in SDK order (legs are picked here); every argument has leading batch axes."""
    legs = list(LEG_SDK_INDICES)
    walking = 1.0 - standing(xp, command)
    parts = {
        "projected_gravity": projected_gravity,
        "gyro": gyro,
        "command": command * walking,
        "gait_phase": gait_phase_features(xp, gait_process, command),
        "leg_joint_pos": joint_pos[..., legs] - default_pose[..., legs],
        "leg_joint_vel": joint_vel[..., legs],
        "last_action": last_action,
    }
    return xp.concatenate([parts[name] * scale for name, _, scale in OBSERVATION_LAYOUT], axis=-1)


def imu_from_floating_base(xp, base_quat, base_angvel):
    """(projected gravity, gyro) of an IMU aligned with the base, from the floating base's
    state alone: its orientation quaternion `[w, x, y, z]` and its angular velocity in the
    base frame (MuJoCo's free-joint `qvel[3:6]`). Reading both from the same state as the
    joint angles, rather than from sensors computed before the last physics step, gives the
    simultaneous readings the robot has."""
    quat = base_quat / xp.sqrt(xp.sum(base_quat * base_quat, axis=-1, keepdims=True))
    w, x, y, z = (quat[..., i] for i in range(4))
    gravity = -xp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=-1)
    return gravity, base_angvel


def projected_gravity_from_rpy(xp, roll, pitch, yaw):
    """Gravity's direction in the IMU frame from the IMU's roll/pitch/yaw (the robot's LowState):
    `(Rz(yaw) Ry(pitch) Rx(roll))ᵀ · [0, 0, -1]`."""
    del yaw  # a rotation about the vertical leaves gravity unchanged
    cr, sr, cp, sp = xp.cos(roll), xp.sin(roll), xp.cos(pitch), xp.sin(pitch)
    return xp.stack([sp, -sr * cp, -cr * cp], axis=-1)
