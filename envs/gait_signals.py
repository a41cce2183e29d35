"""The floating base's gait signals, written once for NumPy, torch and JAX.

Every function takes the array namespace `xp` (`numpy`, `torch` or `jax.numpy`) and uses only
what the three share (`xp.stack(..., axis=-1)`, `xp.arctan2`, elementwise maths, `[..., i]`
indexing), so the same maths runs inside a jitted MJX step, on Isaac Lab's torch buffers and
in a HumanoidBench worker. Quaternions are MuJoCo's (w, x, y, z), base to world; arrays carry
any leading batch dimensions. Names of the signals: `fast_td3/measures/gait_metrics.py`.
"""

from __future__ import annotations

from typing import Any


def unit_quaternion(quaternion: Any, xp: Any) -> tuple[Any, Any, Any, Any]:
    """(w, x, y, z) of `quaternion` [..., 4], normalised (MuJoCo's stored ones drift off unit length)."""
    norm = xp.sqrt((quaternion * quaternion).sum(-1))
    return tuple(quaternion[..., i] / norm for i in range(4))


def yaw(w: Any, x: Any, y: Any, z: Any, xp: Any) -> Any:
    """The heading angle: atan2 of the rotation matrix's (1, 0) and (0, 0) entries."""
    return xp.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def world_z_row(w: Any, x: Any, y: Any, z: Any) -> tuple[Any, Any, Any]:
    """The third row of the base's rotation matrix: world z in the base frame."""
    return 2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)


def heading_frame_xy(vx: Any, vy: Any, heading: Any, xp: Any) -> Any:
    """A world-frame planar vector [..., 2] in the frame turned by the robot's heading (forward, left)."""
    cos, sin = xp.cos(heading), xp.sin(heading)
    return xp.stack([cos * vx + sin * vy, cos * vy - sin * vx], axis=-1)


def free_base_signals(qpos: Any, qvel: Any, xp: Any) -> dict[str, Any]:
    """The base signals of a free joint from its qpos [..., 7] (position, quaternion) and qvel
    [..., 6] (world linear velocity, body-frame angular velocity)."""
    w, x, y, z = unit_quaternion(qpos[..., 3:7], xp)
    row = world_z_row(w, x, y, z)
    return {
        "base_lin_vel_xy": heading_frame_xy(qvel[..., 0], qvel[..., 1], yaw(w, x, y, z, xp), xp),
        "base_ang_vel_z": row[0] * qvel[..., 3] + row[1] * qvel[..., 4] + row[2] * qvel[..., 5],  # world yaw rate
        "base_height": qpos[..., 2],
        "base_pos_xy": qpos[..., 0:2],
        "projected_gravity": -xp.stack(list(row), axis=-1),  # R^T (0, 0, -1)
    }
