"""The T1's left-right mirror: index and sign maps for joints, body-frame vectors, rates, commands,
the gait phase and the whole observation."""

from __future__ import annotations

from sim2real.t1.joints import LEG_JOINT_NAMES, SDK_JOINT_NAMES
from sim2real.t1.observation import OBSERVATION_LAYOUT


# A mirror is `(index, sign)`: mirrored[..., i] = sign[i] * value[..., index[i]], the reflection
# through the robot's sagittal (x-z) plane. The T1's left and right joints share their axes,
# so a pitch joint keeps its angle on the other side while roll and yaw joints (axes x and z)
# change sign; body-frame vectors keep x and z and negate y, rates negate x and z.
Mirror = tuple[tuple[int, ...], tuple[float, ...]]

_MIRROR_SIGN_JOINTS = ("Roll", "Yaw", "yaw", "Waist")


def _side_swapped(name: str) -> str:
    if name.startswith("Left_"):
        return "Right_" + name[len("Left_"):]
    if name.startswith("Right_"):
        return "Left_" + name[len("Right_"):]
    return name


def joint_mirror(names: tuple[str, ...] = SDK_JOINT_NAMES) -> Mirror:
    """The mirror of per-joint values (angles, rates, torques, actions) over `names`."""
    index = tuple(names.index(_side_swapped(name)) for name in names)
    sign = tuple(-1.0 if any(tag in name for tag in _MIRROR_SIGN_JOINTS) else 1.0 for name in names)
    return index, sign


VECTOR_MIRROR: Mirror = ((0, 1, 2), (1.0, -1.0, 1.0))
"""A body-frame vector (gravity, linear velocity): y changes sign."""
RATE_MIRROR: Mirror = ((0, 1, 2), (-1.0, 1.0, -1.0))
"""A body-frame angular rate: roll and yaw rates change sign."""
COMMAND_MIRROR: Mirror = ((0, 1, 2), (1.0, -1.0, -1.0))
"""A joystick command (vx, vy, yaw rate): vy and the yaw rate change sign."""
GAIT_PHASE_MIRROR: Mirror = ((0, 1), (-1.0, -1.0))
"""[cos 2πφ, sin 2πφ]: the other foot leads, half a cycle on (φ + 1/2)."""


def concat_mirrors(parts: list[Mirror]) -> Mirror:
    """The mirror of a vector made of `parts` in order."""
    index, sign, start = [], [], 0
    for part_index, part_sign in parts:
        index += [start + i for i in part_index]
        sign += list(part_sign)
        start += len(part_index)
    return tuple(index), tuple(sign)


def action_mirror() -> Mirror:
    return joint_mirror(LEG_JOINT_NAMES)


def observation_mirror() -> Mirror:
    """The mirror of the 47-number observation, block by block (OBSERVATION_LAYOUT)."""
    by_block = {"projected_gravity": VECTOR_MIRROR, "gyro": RATE_MIRROR, "command": COMMAND_MIRROR,
                "gait_phase": GAIT_PHASE_MIRROR, "leg_joint_pos": action_mirror(),
                "leg_joint_vel": action_mirror(), "last_action": action_mirror()}
    return concat_mirrors([by_block[name] for name, _, _ in OBSERVATION_LAYOUT])
