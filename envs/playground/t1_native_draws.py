"""The native T1 env's task-side random draws: start poses, episode starts, commands, action
delays and pushes.

NumPy's generator stands in for the MJX env's JAX keys (same distributions, different streams).
Each function draws from the `rng` it is given in a fixed order, and some draw even when their
feature is off where runs before that feature existed drew: callers keep the call order, and a
seed keeps its run.
"""

from __future__ import annotations

import numpy as np

from envs.playground import t1_lowdim
from sim2real import t1


def draw_start_pose(rng: np.random.Generator, init_qpos: np.ndarray, nv: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` start states around `init_qpos` (as `T1LowDimJoystick.reset`): planar position, any
    heading, joints and base velocity jittered."""
    qpos = np.repeat(init_qpos[None], n, axis=0)
    qpos[:, 0:2] += rng.uniform(-0.5, 0.5, (n, 2))
    yaw = rng.uniform(-np.pi, np.pi, n)
    qpos[:, 3:7] = np.stack([np.cos(yaw / 2), np.zeros(n), np.zeros(n), np.sin(yaw / 2)], axis=-1)
    qpos[:, 7:] += rng.uniform(-0.05, 0.05, (n, t1.NUM_JOINTS))
    qvel = np.zeros((n, nv))
    qvel[:, 0:6] = rng.uniform(-0.3, 0.3, (n, 6))
    return qpos, qvel


def draw_episode_start(config, commands, rng: np.random.Generator, n: int, dt: float) -> dict[str, np.ndarray]:
    """The task state (the env's `info`) `n` new episodes start with: their push intervals, gait
    frequencies, commands, clocks and action delays drawn, the rest zero (`config` is the task's,
    `commands` its `commands_from`, `dt` the control step)."""
    push_interval = rng.uniform(*config.push_config.interval_range, n)
    gait_frequency = rng.uniform(*commands.gait_frequency, (n, 1))
    return {
        "step": np.zeros(n, np.int64),
        "target_command": sample_commands(commands, rng, n),
        "gait_frequency": gait_frequency,
        # the robot's clock: any phase at the start; the deploy code starts with the gait active
        "clock": rng.uniform(0.0, 10.0, (n, 1)),
        "active_frequency": gait_frequency,
        "last_action": np.zeros((n, t1.NUM_LEG_JOINTS)),
        "feet_air_time": np.zeros((n, 2)),
        "push_steps": np.round(push_interval / dt).astype(np.int64),
        "action_delay": draw_action_delay(config.action_delay, rng, n),
        "pending_actions": np.zeros((n, t1_lowdim.max_action_delay(config), t1.NUM_LEG_JOINTS)),
        "command": np.zeros((n, 3)),
        "gait_process": np.zeros((n, 1)),
        "yaw_error_average": np.zeros(n),
        "lin_vel_error_average": np.zeros((n, 2)),
    }


def sample_commands(commands, rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` joystick commands (vx, vy, yaw rate) from the task's `commands` ranges: some standing,
    some turns in place or strafes where those are switched on."""
    command = np.stack([rng.uniform(*commands.lin_vel_x, n), rng.uniform(*commands.lin_vel_y, n),
                        rng.uniform(*commands.ang_vel_yaw, n)], axis=-1)
    command = np.where((rng.random(n) < commands.standing_probability)[:, None], 0.0, command)
    # drawn only when on: runs without them keep their streams
    if commands.turn_probability > 0 or commands.strafe_probability > 0:
        command = commands.one_axis(np, command, rng.random(n))
    return command


def draw_action_delay(delay, rng: np.random.Generator, n: int) -> np.ndarray:
    """Each of `n` episodes' action delay in policy steps (the task's `action_delay` config)."""
    if not delay.enable:  # drawn only when on: runs without it keep their random streams
        return np.zeros(n, np.int64)
    return rng.integers(int(delay.steps_range[0]), int(delay.steps_range[1]) + 1, n)


def kick_due_envs(qvel: np.ndarray, push, rng: np.random.Generator, step: np.ndarray, push_steps: np.ndarray,
                  level: float | None) -> None:
    """Add a planar velocity kick to the base of every env whose push interval ends this step
    (`push` is the task's `push_config`; `level`, the push curriculum's, scales the kick).
    Direction and size are drawn for every env at every step, pushes on or off."""
    angle = rng.uniform(0.0, 2 * np.pi, len(qvel))
    size = rng.uniform(*push.magnitude_range, len(qvel))
    if not push.enable:
        return
    if level is not None:
        size = size * level
    now = (step + 1) % push_steps == 0
    if now.any():
        kick = np.stack([np.cos(angle), np.sin(angle)], axis=-1) * size[:, None]
        qvel[now, :2] += kick[now]
