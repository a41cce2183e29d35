"""Joystick commands and the gait clock: standing, the phase features, command smoothing in the deploy
code's order, and `CommandSpec` (the commands a policy is trained on)."""

from __future__ import annotations

import math
from dataclasses import dataclass


STANDING_COMMAND_NORM = 1e-5
"""A (smoothed) command whose norm is below this means "stand": no gait phase, zero command."""


def standing(xp, command):
    """1.0 where the command means "stand" (`[..., 3]` -> `[..., 1]`), else 0.0."""
    norm = xp.sqrt(xp.sum(command * command, axis=-1, keepdims=True))
    return (norm < STANDING_COMMAND_NORM).astype(command.dtype)


def gait_phase_features(xp, gait_process, command):
    """`[cos 2πφ, sin 2πφ]` of the gait process φ in [0, 1), zeros while standing."""
    angle = 2.0 * math.pi * gait_process
    walking = 1.0 - standing(xp, command)
    return xp.concatenate([xp.cos(angle), xp.sin(angle)], axis=-1) * walking


def smooth_command(xp, smoothed, target, ctrl_dt: float):
    """The command the policy sees moves towards the joystick's by at most `ctrl_dt` per step
    (1 unit/s), as the deploy code rate-limits it."""
    return smoothed + xp.clip(target - smoothed, -ctrl_dt, ctrl_dt)


def update_command_and_gait(xp, *, clock, active_frequency, smoothed, joystick, gait_frequency, ctrl_dt: float):
    """One policy step's command and gait state, in the deploy code's order.

    The robot's loop, at time `clock` [s]: the gait process is `fmod(clock · f_active, 1)`
    with the frequency the previous step left active; then the command moves towards the
    joystick's by at most `ctrl_dt` (1 unit/s); then the active frequency becomes 0 while the
    smoothed command means "stand", else `gait_frequency`. So φ is 0 on the first step
    after standing and then jumps to the clock's phase. Returns
    `(gait_process, smoothed, active_frequency)`; the observation zeroes phase and command
    from the new smoothed command (`actor_observation`)."""
    gait_process = xp.mod(clock * active_frequency, 1.0)
    smoothed = smooth_command(xp, smoothed, joystick, ctrl_dt)
    active_frequency = gait_frequency * (1.0 - standing(xp, smoothed))
    return gait_process, smoothed, active_frequency


@dataclass(frozen=True)
class CommandSpec:
    """The joystick commands a policy is trained on; the bundle records them."""

    lin_vel_x: tuple[float, float] = (-1.0, 1.0)
    lin_vel_y: tuple[float, float] = (-0.5, 0.5)
    ang_vel_yaw: tuple[float, float] = (-1.0, 1.0)
    standing_probability: float = 0.1
    """Chance that a sampled command is exactly zero (stand still)."""
    turn_probability: float = 0.0
    """Chance that a (walking) sampled command is a turn in place, `(0, 0, yaw rate)`: drawn
    jointly and uniformly, vx and vy are almost never both near zero while the robot turns."""
    strafe_probability: float = 0.0
    """Chance that a (walking) sampled command is a sideways walk, `(0, vy, 0)`: for the same
    reason, vx and the yaw rate are almost never both near zero while it steps sideways."""
    resample_seconds: float = 10.0
    gait_frequency: tuple[float, float] = (1.0, 1.5)
    """Training samples one gait frequency per episode from this range [Hz]."""
    deploy_gait_frequency: float = 1.25
    """The one frequency T1.yaml runs, inside `gait_frequency`: its centre (at the 1.0 Hz edge, slow sideways)."""

    def check(self) -> None:
        for name in ("standing_probability", "turn_probability", "strafe_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"commands.{name} must be a probability in [0, 1], got {getattr(self, name)}")
        if self.turn_probability + self.strafe_probability > 1.0:
            raise ValueError("commands.turn_probability + strafe_probability > 1: they share one draw")
        low, high = self.gait_frequency
        if not low <= self.deploy_gait_frequency <= high:
            raise ValueError(f"deploy_gait_frequency {self.deploy_gait_frequency} Hz lies outside the training range "
                             f"{list(self.gait_frequency)} Hz: the robot would walk at a frequency the policy never saw")

    def one_axis(self, xp, command, u):
        """`command` a turn in place where its draw `u` ~ U[0, 1) < turn_probability, a sideways walk
        where `u` falls in the next strafe_probability, so never both (`xp`: numpy or jax.numpy)."""
        turn, turn_or_strafe = u < self.turn_probability, u < self.turn_probability + self.strafe_probability
        return command * xp.stack([~turn_or_strafe, ~turn, turn | ~turn_or_strafe], axis=-1)
