"""Gait and robot-quality metrics of an evaluation trajectory: pure functions over torch tensors.

A trajectory is a dict of tensors with a time axis: `[T, E, ...]` for T steps of E envs,
with `valid[t, e]` True for the steps inside the episodes being scored. Each metric takes
only the inputs it needs; `gait_metrics(traj)` computes every metric whose inputs are
present, so a suite that reports fewer signals still gets the metrics it can. Every metric
is a mean over the valid steps (or joint-steps, foot-steps, episodes) of all envs together,
returned as a Python float (NaN when nothing qualifies, e.g. no foot ever in contact).

Step t's signals describe the transition just taken: the state reached by `step(a_t)` and
the torques applied during it. Episode structure: consecutive valid steps of an env belong
to one episode unless `dones[t-1]` (optional) says the episode ended at t-1.

The optional env hook (not part of `envs/protocol.py`; the runner calls it only when the
eval env has it):

    env.gait_signals() -> dict[str, torch.Tensor | float]

called right after every eval `step`. Per-step entries (every key below except those in
`STATIC_KEYS`) have a leading `num_envs` dimension (e.g. `joint_pos`: `[num_envs, J]`);
rows of envs that finished in that step must describe the last state before the auto-reset,
as `extras["final_observations"]` does. Static entries (`STATIC_KEYS`: torque and joint
limits, dt, the target base height) are the same every step and are read from the first
call. The runner supplies `actions`, `terminated`, `dones` and `valid` itself, so action
smoothness and fall rate are logged for every task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

# ---------------------------------------------------------------- trajectory keys
BASE_LIN_VEL_XY = "base_lin_vel_xy"
"""[T, E, 2] base linear velocity in the heading (yaw) frame, m/s: the frame of the command."""
BASE_ANG_VEL_Z = "base_ang_vel_z"
"""[T, E] base yaw rate, rad/s."""
COMMAND = "command"
"""[T, E, 3] velocity command (vx, vy, yaw rate) in the heading frame."""
ACTIONS = "actions"
"""[T, E, A] policy actions (in [-1, 1])."""
TORQUES = "torques"
"""[T, E, J] joint torques applied during the step, N m."""
TORQUE_LIMITS = "torque_limits"
"""[J] (or broadcastable to [T, E, J]) torque limits, N m, positive."""
JOINT_POS = "joint_pos"
"""[T, E, J] joint positions, rad (or m)."""
JOINT_LIMITS = "joint_limits"
"""[J, 2] (or broadcastable to [T, E, J, 2]) lower and upper joint position limits."""
JOINT_VEL = "joint_vel"
"""[T, E, J] joint velocities, rad/s."""
FOOT_VEL_XY = "foot_vel_xy"
"""[T, E, F, 2] horizontal world-frame velocity of each foot, m/s."""
FOOT_CONTACT = "foot_contact"
"""[T, E, F] bool, foot in contact with the ground."""
BASE_HEIGHT = "base_height"
"""[T, E] base height above the ground, m."""
BASE_HEIGHT_TARGET = "base_height_target"
"""scalar (or broadcastable to [T, E]) target base height, m."""
PROJECTED_GRAVITY = "projected_gravity"
"""[T, E, 3] gravity direction in the base frame; upright is (0, 0, -1)."""
BASE_POS_XY = "base_pos_xy"
"""[T, E, 2] base position in the world's horizontal plane, m."""
DT = "dt"
"""scalar: seconds per env step (control step)."""
TERMINATED = "terminated"
"""[T, E] bool: the episode ended at step t by termination (a fall), not a time-out."""
DONES = "dones"
"""[T, E] bool (optional): the episode ended at step t (terminated or truncated)."""
VALID = "valid"
"""[T, E] bool: step t is inside an episode being scored (default: every step)."""

STATIC_KEYS = frozenset({TORQUE_LIMITS, JOINT_LIMITS, DT, BASE_HEIGHT_TARGET})
"""Keys the `gait_signals()` hook returns without a per-env, per-step dimension."""

SATURATION_FRACTION = 0.99
"""A torque counts as saturated at |tau| >= this fraction of its limit."""


# ---------------------------------------------------------------- helpers
def _mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of the finite `values` where `mask` (broadcast to it) holds; NaN when none qualifies
    (one diverged env, e.g. a NaN state that ends its episode, does not void the metric)."""
    mask = mask.expand_as(values) & torch.isfinite(values)
    count = int(mask.sum())
    if count == 0:
        return math.nan
    return float(torch.where(mask, values.double(), 0.0).sum() / count)


def _as_bool(x: torch.Tensor) -> torch.Tensor:
    return x.bool() if x.dtype != torch.bool else x


def consecutive_pairs(valid: torch.Tensor, dones: torch.Tensor | None = None) -> torch.Tensor:
    """[T-1, E] True where steps t-1 and t (row t-1) are both valid and in the same episode."""
    valid = _as_bool(valid)
    same = valid[1:] & valid[:-1]
    if dones is not None:
        same = same & ~_as_bool(dones)[:-1]
    return same


def episode_starts(valid: torch.Tensor, dones: torch.Tensor | None = None) -> torch.Tensor:
    """[T, E] True at the first valid step of each episode."""
    valid = _as_bool(valid)
    starts = valid.clone()
    starts[1:] &= ~consecutive_pairs(valid, dones)
    return starts


# ---------------------------------------------------------------- metrics
def lin_vel_tracking_error(base_lin_vel_xy: torch.Tensor, command: torch.Tensor, valid: torch.Tensor) -> float:
    """Mean over valid steps of ||v_xy - cmd_xy|| (m/s)."""
    error = torch.linalg.vector_norm(base_lin_vel_xy.double() - command[..., :2].double(), dim=-1)
    return _mean(error, _as_bool(valid))


def ang_vel_tracking_error(base_ang_vel_z: torch.Tensor, command: torch.Tensor, valid: torch.Tensor) -> float:
    """Mean over valid steps of |omega_z - cmd_omega| (rad/s)."""
    return _mean((base_ang_vel_z.double() - command[..., 2].double()).abs(), _as_bool(valid))


def action_smoothness(actions: torch.Tensor, valid: torch.Tensor, dones: torch.Tensor | None = None) -> float:
    """Mean over consecutive steps of one episode of ||a_t - a_{t-1}|| (each episode's first step excluded)."""
    change = torch.linalg.vector_norm(actions[1:].double() - actions[:-1].double(), dim=-1)
    return _mean(change, consecutive_pairs(valid, dones))


def torque_saturation_rate(torques: torch.Tensor, torque_limits: torch.Tensor, valid: torch.Tensor,
                           fraction: float = SATURATION_FRACTION) -> float:
    """Fraction of valid joint-steps with |tau| >= 0.99 * limit (joints with a finite limit)."""
    limits = torch.as_tensor(torque_limits, dtype=torch.float64, device=torques.device)
    saturated = (torques.double().abs() >= fraction * limits.abs()).double()
    return _mean(saturated, _as_bool(valid)[..., None] & torch.isfinite(limits).expand_as(saturated))


def joint_limit_violation_rate(joint_pos: torch.Tensor, joint_limits: torch.Tensor, valid: torch.Tensor) -> float:
    """Fraction of valid joint-steps with the joint position outside [lower, upper] (limited joints)."""
    limits = torch.as_tensor(joint_limits, dtype=torch.float64, device=joint_pos.device)
    q = joint_pos.double()
    outside = ((q < limits[..., 0]) | (q > limits[..., 1])).double()
    limited = (torch.isfinite(limits[..., 0]) | torch.isfinite(limits[..., 1])).expand_as(outside)
    return _mean(outside, _as_bool(valid)[..., None] & limited)


def foot_slip(foot_vel_xy: torch.Tensor, foot_contact: torch.Tensor, valid: torch.Tensor) -> float:
    """Mean horizontal speed (m/s) of a foot over the valid foot-steps in which it is in contact."""
    speed = torch.linalg.vector_norm(foot_vel_xy.double(), dim=-1)
    return _mean(speed, _as_bool(foot_contact) & _as_bool(valid)[..., None])


def base_height_error(base_height: torch.Tensor, base_height_target: torch.Tensor | float,
                      valid: torch.Tensor) -> float:
    """Mean over valid steps of |h - h_target| (m)."""
    target = torch.as_tensor(base_height_target, dtype=torch.float64, device=base_height.device)
    return _mean((base_height.double() - target).abs(), _as_bool(valid))


def orientation_error(projected_gravity: torch.Tensor, valid: torch.Tensor) -> float:
    """Mean over valid steps of the tilt from upright (rad): the angle between projected gravity and (0, 0, -1)."""
    g = projected_gravity.double()
    tilt = torch.atan2(torch.linalg.vector_norm(g[..., :2], dim=-1), -g[..., 2])
    return _mean(tilt, _as_bool(valid))


def energy_per_metre(torques: torch.Tensor, joint_vel: torch.Tensor, dt: float, base_pos_xy: torch.Tensor,
                     valid: torch.Tensor, dones: torch.Tensor | None = None) -> float:
    """Sum of |tau_j * qdot_j| * dt over joints and steps, divided by the base's xy path length
    (sum of ||p_t - p_{t-1}||) over the same steps, all envs pooled (J/m; NaN if it never moved).

    Only steps with a predecessor in their episode count (the distance of an episode's first
    step is unknown: its start position is not recorded), for energy and distance alike."""
    pairs = consecutive_pairs(valid, dones)
    power = (torques[1:].double() * joint_vel[1:].double()).abs().sum(-1)
    steps = torch.linalg.vector_norm(base_pos_xy[1:].double() - base_pos_xy[:-1].double(), dim=-1)
    pairs = pairs & torch.isfinite(power) & torch.isfinite(steps)  # a diverged state is left out of both
    energy = torch.where(pairs, power, 0.0).sum() * float(dt)
    distance = torch.where(pairs, steps, 0.0).sum()
    if float(distance) <= 0.0:
        return math.nan
    return float(energy / distance)


def fall_rate(terminated: torch.Tensor, valid: torch.Tensor, dones: torch.Tensor | None = None) -> float:
    """Episodes that ended in a termination / episodes (an episode is a run of valid steps)."""
    episodes = int(episode_starts(valid, dones).sum())
    if episodes == 0:
        return math.nan
    falls = int((_as_bool(terminated) & _as_bool(valid)).sum())
    return falls / episodes


# ---------------------------------------------------------------- all of them
@dataclass(frozen=True)
class Metric:
    name: str
    """Logged as eval/gait/<name>."""
    fn: Callable[..., float]
    required: tuple[str, ...]
    """Trajectory keys passed positionally, in this order."""
    optional: tuple[str, ...] = ()
    """Trajectory keys passed by keyword when present."""
    unit: str = ""


METRICS: tuple[Metric, ...] = (
    Metric("lin_vel_tracking_error", lin_vel_tracking_error, (BASE_LIN_VEL_XY, COMMAND, VALID), unit="m/s"),
    Metric("ang_vel_tracking_error", ang_vel_tracking_error, (BASE_ANG_VEL_Z, COMMAND, VALID), unit="rad/s"),
    Metric("action_smoothness", action_smoothness, (ACTIONS, VALID), (DONES,), unit="action units per step"),
    Metric("torque_saturation_rate", torque_saturation_rate, (TORQUES, TORQUE_LIMITS, VALID), unit="fraction"),
    Metric("joint_limit_violation_rate", joint_limit_violation_rate, (JOINT_POS, JOINT_LIMITS, VALID),
           unit="fraction"),
    Metric("foot_slip", foot_slip, (FOOT_VEL_XY, FOOT_CONTACT, VALID), unit="m/s"),
    Metric("base_height_error", base_height_error, (BASE_HEIGHT, BASE_HEIGHT_TARGET, VALID), unit="m"),
    Metric("orientation_error", orientation_error, (PROJECTED_GRAVITY, VALID), unit="rad"),
    Metric("energy_per_metre", energy_per_metre, (TORQUES, JOINT_VEL, DT, BASE_POS_XY, VALID), (DONES,),
           unit="J/m"),
    Metric("fall_rate", fall_rate, (TERMINATED, VALID), (DONES,), unit="fraction"),
)
"""Every gait metric, in report order."""

METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)


def _default_valid(traj: dict) -> torch.Tensor | None:
    for key in (TERMINATED, DONES, BASE_HEIGHT, BASE_ANG_VEL_Z, ACTIONS, TORQUES, BASE_POS_XY):
        if key in traj:
            shape = traj[key].shape[:2]
            return torch.ones(shape, dtype=torch.bool, device=traj[key].device)
    return None


def gait_metrics(traj: dict) -> dict[str, float]:
    """Every metric of `METRICS` whose inputs are all in `traj` (VALID defaults to all steps)."""
    if VALID not in traj:
        valid = _default_valid(traj)
        traj = dict(traj) if valid is None else {**traj, VALID: valid}
    out = {}
    for metric in METRICS:
        if all(key in traj for key in metric.required):
            kwargs = {key: traj[key] for key in metric.optional if key in traj}
            out[metric.name] = metric.fn(*(traj[key] for key in metric.required), **kwargs)
    return out
