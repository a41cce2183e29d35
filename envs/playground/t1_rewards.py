"""The Booster T1 task's rewards: every named term (`reward_config.scales`) and their sum, written
once for both backends (`xp` is `numpy` for `t1_native.py`, `jax.numpy` for `t1_mjx.py`), with the
low-passed errors the averaged terms keep as task state. Like `t1_lowdim.py`, no JAX import."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim2real import t1

if TYPE_CHECKING:
    from envs.playground.t1_lowdim import ModelIndex


def low_passed(average, error, *, dt: float, seconds: float):
    """One step of a first-order low-pass (time constant `seconds`) of `error`."""
    return average + min(1.0, dt / seconds) * (error - average)


def averaged_yaw_error(cfg, average, *, sensordata, command, index: ModelIndex, dt: float):
    """The yaw-rate error (ω_z - cmd_wz) low-passed over `cfg.yaw_error_average_seconds`: what bends a walk
    into an arc; the gait's own yaw swing, which the per-step terms also pay for, averages out."""
    return low_passed(average, sensordata[..., index.gyro_adr][..., 2] - command[..., 2],
                      dt=dt, seconds=cfg.yaw_error_average_seconds)


def averaged_planar_error(cfg, average, *, sensordata, command, index: ModelIndex, dt: float):
    """The planar velocity error (v_xy - cmd_xy, body frame) low-passed over `cfg.lin_vel_error_average_seconds`:
    a walk slower than its command (the sideways walk's shortfall, which the gate measures over a gait
    period), without the sway of each step, which a per-step term pays for whatever the mean speed."""
    return low_passed(average, sensordata[..., index.local_linvel_adr][..., :2] - command[..., :2],
                      dt=dt, seconds=cfg.lin_vel_error_average_seconds)


def reward_terms(xp, cfg, *, qpos, qvel, sensordata, site_xpos, site_xmat, leg_torques, projected_gravity, contacts,
                 action, last_action, command, gait_process, yaw_error_average, lin_vel_error_average, done,
                 index: ModelIndex, default_pose):
    """Every reward term, unscaled (`reward_config.scales` names them); `site_xmat` is `[..., nsite, 3, 3]`."""
    legs = index.legs
    local_vel = sensordata[..., index.local_linvel_adr]
    gyro = sensordata[..., index.gyro_adr]
    leg_vel = qvel[..., 6:][..., legs]
    leg_pos = qpos[..., 7:][..., legs]
    feet = site_xpos[..., index.feet_sites, :]
    feet_vel = sensordata[..., index.foot_linvel_adr]
    walking = 1.0 - t1.standing(xp, command)[..., 0]
    # stance while sin(2πφ) >= 0 for the left foot, < 0 for the right; both down while standing
    left_stance = xp.sin(2 * np.pi * gait_process[..., 0]) >= 0
    stance = xp.where(walking[..., None] > 0, xp.stack([left_stance, ~left_stance], axis=-1), True)
    imu = site_xmat[..., index.imu_site, :, :]
    yaw = xp.arctan2(imu[..., 1, 0], imu[..., 0, 0])
    between = feet[..., 0, :] - feet[..., 1, :]
    lateral = xp.abs(xp.cos(yaw) * between[..., 1] - xp.sin(yaw) * between[..., 0])
    joints = qpos[..., 7:]
    beyond = xp.clip(index.soft_lower - joints, 0.0, None) + xp.clip(joints - index.soft_upper, 0.0, None)
    height = qpos[..., 2]
    planar_error2 = xp.sum(xp.square(command[..., :2] - local_vel[..., :2]), axis=-1)
    yaw_error2 = xp.square(command[..., 2] - gyro[..., 2])
    return {
        "tracking_lin_vel": xp.exp(-planar_error2 / cfg.tracking_sigma),
        "tracking_lin_vel_fine": xp.exp(-planar_error2 / cfg.tracking_sigma_lin_vel_fine),
        "tracking_lin_vel_average": xp.exp(-xp.sum(xp.square(lin_vel_error_average), axis=-1)
                                           / cfg.tracking_sigma_lin_vel_average),
        "tracking_ang_vel": xp.exp(-yaw_error2 / cfg.tracking_sigma_ang_vel),
        "tracking_ang_vel_fine": xp.exp(-yaw_error2 / cfg.tracking_sigma_ang_vel_fine),
        "tracking_ang_vel_average": xp.exp(-xp.square(yaw_error_average) / cfg.tracking_sigma_ang_vel_average),
        "survival": xp.ones_like(height),
        "base_height": xp.square(height - cfg.base_height_target),
        "orientation": xp.sum(xp.square(projected_gravity[..., :2]), axis=-1),
        "lin_vel_z": xp.square(local_vel[..., 2]),
        "ang_vel_xy": xp.sum(xp.square(gyro[..., :2]), axis=-1),
        "torques": xp.sum(xp.square(leg_torques), axis=-1),
        "action_rate": xp.sum(xp.square(action - last_action), axis=-1),
        "energy": xp.sum(xp.abs(leg_torques * leg_vel), axis=-1),
        "feet_slip": xp.sum(contacts * xp.sum(xp.square(feet_vel[..., :2]), axis=-1), axis=-1),
        "feet_swing": xp.mean((contacts == stance).astype(height.dtype), axis=-1),
        "feet_distance": xp.clip(cfg.min_feet_distance - lateral, 0.0, 0.1),
        "joint_limits": xp.sum(beyond, axis=-1),
        "collision": (sensordata[..., index.feet_touch_adr] > 0).astype(height.dtype),
        "stand_still": xp.sum(xp.abs(leg_pos - default_pose[legs]), axis=-1) * (1.0 - walking),
        "termination": done.astype(height.dtype),
    }


def total_reward(xp, terms: dict, scales, dt: float):
    """(reward, scaled terms): every scaled term but the fall penalty is clipped at zero together,
    so a fall always costs; times the control period."""
    rewards = {term: value * scales[term] for term, value in terms.items()}
    shaped = sum(value for term, value in rewards.items() if term != "termination")
    return xp.clip(shaped * dt, 0.0, None) + rewards["termination"] * dt, rewards
