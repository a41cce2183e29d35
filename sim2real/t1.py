"""The Booster T1 deployment contract, written once for training, export, sim-to-sim and the robot.

Booster's deploy code feeds a TorchScript policy a float32 `[1, 47]` observation at 50 Hz and turns its
`[1, 12]` output (clipped to ±1) into position targets `default + action_scale * a` for the 12 leg joints,
tracked by the motor drivers' PD loop at 500 Hz. Everything both sides must agree on lives here, as plain
data and as functions generic over the array module (`numpy`, `jax.numpy`): the joint table in SDK order,
the observation layout and scales, the gait-phase convention (including standing), command smoothing and
the control settings (gains, torque limits, default pose, action scale, rates). The training env
(`envs/playground/t1_lowdim.py`), the exported bundle (`sim2real/export.py`), the sim-to-sim gate
(`sim2real/sim2sim.py`) and the deploy-path emulation (`sim2real/deploy.py`) all call these; none
re-derives them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# ------------------------------------------------------------------ joints (SDK order)
SDK_JOINT_NAMES = (
    "AAHead_yaw", "Head_pitch",
    "Left_Shoulder_Pitch", "Left_Shoulder_Roll", "Left_Elbow_Pitch", "Left_Elbow_Yaw",
    "Right_Shoulder_Pitch", "Right_Shoulder_Roll", "Right_Elbow_Pitch", "Right_Elbow_Yaw",
    "Waist",
    "Left_Hip_Pitch", "Left_Hip_Roll", "Left_Hip_Yaw", "Left_Knee_Pitch", "Left_Ankle_Pitch", "Left_Ankle_Roll",
    "Right_Hip_Pitch", "Right_Hip_Roll", "Right_Hip_Yaw", "Right_Knee_Pitch", "Right_Ankle_Pitch", "Right_Ankle_Roll",
)
"""The T1's 23 joints by SDK index (`booster_robotics_sdk_python.JointIndex`), named as in the MJCF model."""
NUM_JOINTS = len(SDK_JOINT_NAMES)
LEG_SDK_INDICES = tuple(range(11, 23))
"""The joints the policy drives: left leg 11-16, right leg 17-22 (hip pitch/roll/yaw, knee, ankle pitch/roll)."""
LEG_JOINT_NAMES = tuple(SDK_JOINT_NAMES[i] for i in LEG_SDK_INDICES)
NUM_LEG_JOINTS = len(LEG_SDK_INDICES)
PARALLEL_MECH_SDK_INDICES = (15, 16, 21, 22)
"""Ankle joints driven through a parallel linkage: the deploy code sends them torques, not PD targets."""

# Per-joint values, SDK order. The leg values are the robot's own (Booster's deploy
# configuration); head, arms and waist are held at their default pose by the same PD loop.
DEFAULT_POSE = (
    0.0, 0.0,
    0.2, -1.35, 0.0, -0.5,
    0.2, 1.35, 0.0, 0.5,
    0.0,
    -0.2, 0.0, 0.0, 0.4, -0.25, 0.0,
    -0.2, 0.0, 0.0, 0.4, -0.25, 0.0,
)
STIFFNESS = (20.0, 20.0) + (20.0,) * 8 + (200.0,) + (200.0, 200.0, 200.0, 200.0, 50.0, 50.0) * 2
DAMPING = (0.2, 0.2) + (0.5,) * 8 + (5.0,) + (5.0, 5.0, 5.0, 5.0, 3.0, 3.0) * 2
TORQUE_LIMIT = (7.0, 7.0) + (10.0,) * 8 + (30.0,) + (60.0, 25.0, 30.0, 60.0, 24.0, 15.0) * 2
JOINT_RANGE = (
    (-1.57, 1.57), (-0.35, 1.22),
    (-3.31, 1.22), (-1.74, 1.57), (-2.27, 2.27), (-2.44, 0.0),
    (-3.31, 1.22), (-1.57, 1.74), (-2.27, 2.27), (0.0, 2.44),
    (-1.57, 1.57),
    (-1.8, 1.57), (-0.2, 1.57), (-1.0, 1.0), (0.0, 2.34), (-0.87, 0.35), (-0.44, 0.44),
    (-1.8, 1.57), (-1.57, 0.2), (-1.0, 1.0), (0.0, 2.34), (-0.87, 0.35), (-0.44, 0.44),
)
"""Each joint's range [rad], SDK order: the robot model's (tests/test_t1_contract.py pins them to it)."""
ACTION_BOUNDS = ("none", "joint_limits")
"""How leg actions map to targets: `action_scale` and ±1 for every joint, or each joint's scale from its
range with its action bounded to keep the target inside it (`T1Control.joint_limits_bounds`)."""
PREPARE = {
    # the deploy code's stand-up phase before the policy takes over (its `prepare` section; robot values)
    "stiffness": [5.0, 5.0, 40.0, 50.0, 20.0, 10.0, 40.0, 50.0, 20.0, 10.0, 100.0,
                  350.0, 350.0, 180.0, 350.0, 450.0, 450.0, 350.0, 350.0, 180.0, 350.0, 450.0, 450.0],
    "damping": [0.1, 0.1, 0.5, 1.5, 0.2, 0.2, 0.5, 1.5, 0.2, 0.2, 5.0,
                7.5, 7.5, 3.0, 5.5, 0.5, 0.5, 7.5, 7.5, 3.0, 5.5, 0.5, 0.5],
    "default_qpos": [0.0, 0.0, 0.25, -1.4, 0.0, -0.5, 0.25, 1.4, 0.0, 0.5, 0.0,
                     -0.1, 0.0, 0.0, 0.2, -0.1, 0.0, -0.1, 0.0, 0.0, 0.2, -0.1, 0.0],
}


@dataclass(frozen=True)
class T1Control:
    """How actions become joint torques; every field travels into the export bundle.

    The training env builds its model's PD actuators from these numbers and the bundle
    records them, so a bundle whose gains differ from the ones the policy was trained
    with is detected (a policy trained under one set of gains falls within ~1.5 s under
    another).
    """

    stiffness: tuple[float, ...] = STIFFNESS
    """PD position gain per joint, SDK order [Nm/rad]."""
    damping: tuple[float, ...] = DAMPING
    """PD velocity gain per joint, SDK order [Nm·s/rad]."""
    torque_limit: tuple[float, ...] = TORQUE_LIMIT
    """Motor torque limit per joint, SDK order [Nm]."""
    default_pose: tuple[float, ...] = DEFAULT_POSE
    """Joint angles the targets are relative to, SDK order [rad]."""
    action_scale: float = 1.0
    """Leg targets are `default + action_scale * action` [rad per unit action]."""
    sim_dt: float = 0.002
    """Physics and PD period [s] (500 Hz)."""
    decimation: int = 10
    """Physics steps per policy step: 50 Hz policy."""
    target_filter: float = 0.2
    """First-order filter on the PD targets at every physics step,
    `filtered += target_filter * (target - filtered)`; the deploy code applies 0.2 at 500 Hz (1.0: none)."""
    leg_action_scale: tuple[float, ...] | None = None
    """Scale per leg joint (SDK order 11-22) [rad per unit action]; None: `action_scale` for all."""
    action_low: tuple[float, ...] | None = None
    """Lowest action per leg joint (SDK order 11-22); None: -1."""
    action_high: tuple[float, ...] | None = None
    """Highest action per leg joint; None: +1."""

    @property
    def ctrl_dt(self) -> float:
        return self.sim_dt * self.decimation

    def leg(self, values: tuple[float, ...]) -> list[float]:
        return [values[i] for i in LEG_SDK_INDICES]

    def action_bounds(self) -> tuple[list[float], list[float]]:
        """(low, high) of each leg action: what `targets_from_actions` clips to."""
        low = list(self.action_low) if self.action_low is not None else [-1.0] * NUM_LEG_JOINTS
        high = list(self.action_high) if self.action_high is not None else [1.0] * NUM_LEG_JOINTS
        return low, high

    def leg_scales(self) -> list[float]:
        """Each leg joint's scale: what `targets_from_actions` multiplies its action by."""
        return list(self.leg_action_scale) if self.leg_action_scale is not None else [self.action_scale] * NUM_LEG_JOINTS

    def joint_limits_bounds(self) -> "T1Control":
        """This control with each leg joint's scale following its range, as holosoma's action
        boundaries do: scale = the default pose's larger distance to a stop, so ±1 spans the
        whole range; and each action bounded where its target would pass the nearer stop, so
        no target lies outside JOINT_RANGE."""
        scales, low, high = [], [], []
        for i in LEG_SDK_INDICES:
            lower, upper = JOINT_RANGE[i]
            scale = max(abs(lower - self.default_pose[i]), abs(upper - self.default_pose[i]))
            scales.append(round(scale, 6))
            low.append(round(max(-1.0, (lower - self.default_pose[i]) / scale), 6))
            high.append(round(min(1.0, (upper - self.default_pose[i]) / scale), 6))
        return replace(self, leg_action_scale=tuple(scales), action_low=tuple(low), action_high=tuple(high))

    def check(self) -> None:
        for name in ("stiffness", "damping", "torque_limit", "default_pose"):
            if len(getattr(self, name)) != NUM_JOINTS:
                raise ValueError(f"T1Control.{name} needs {NUM_JOINTS} values in SDK joint order, "
                                 f"got {len(getattr(self, name))}")
        if not 0.0 < self.target_filter <= 1.0:
            raise ValueError(f"T1Control.target_filter must be in (0, 1], got {self.target_filter}")
        low, high = self.action_bounds()
        if len(self.leg_scales()) != NUM_LEG_JOINTS or not all(v > 0 for v in self.leg_scales()):
            raise ValueError(f"T1Control.leg_action_scale needs {NUM_LEG_JOINTS} positive values, got "
                             f"{self.leg_action_scale}")
        if len(low) != NUM_LEG_JOINTS or len(high) != NUM_LEG_JOINTS:
            raise ValueError(f"T1Control.action_low/action_high need {NUM_LEG_JOINTS} values (the legs, SDK order "
                             f"11-22), got {len(low)} and {len(high)}")
        for name, lo, hi in zip(LEG_JOINT_NAMES, low, high):
            if not -1.0 <= lo < hi <= 1.0:
                raise ValueError(f"T1Control action bounds of {name}: [{lo}, {hi}] must lie in [-1, 1], low < high")

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "T1Control":
        known = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in cls.__dataclass_fields__}
        return cls(**known)


# ------------------------------------------------------------------ observation
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
STANDING_COMMAND_NORM = 1e-5
"""A (smoothed) command whose norm is below this means "stand": no gait phase, zero command."""


def observation_slices() -> dict[str, slice]:
    slices, start = {}, 0
    for name, size, _ in OBSERVATION_LAYOUT:
        slices[name] = slice(start, start + size)
        start += size
    return slices


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


def targets_from_actions(xp, actions, control: T1Control, default_pose):
    """23 PD targets (SDK order): defaults, with the legs at `default + scale * clip(a, low, high)`
    (`action_scale` and ±1 for every leg joint unless `action_bounds=joint_limits` set them per joint)."""
    legs = list(LEG_SDK_INDICES)
    if control.action_low is None and control.action_high is None:
        clipped = xp.clip(actions, -1.0, 1.0)
    else:
        low, high = control.action_bounds()
        clipped = xp.clip(actions, xp.asarray(low), xp.asarray(high))
    scale = control.action_scale if control.leg_action_scale is None else xp.asarray(control.leg_scales())
    leg_targets = default_pose[..., legs] + scale * clipped
    return xp.concatenate([xp.broadcast_to(default_pose[..., :legs[0]], leg_targets.shape[:-1] + (legs[0],)),
                           leg_targets], axis=-1)


# ------------------------------------------------------------------ left-right mirror
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


def filtered_targets(ctrl, targets, control: T1Control):
    """The PD targets after one physics step of the deploy code's first-order filter
    (`control.target_filter`, at the PD rate): `ctrl + target_filter * (targets - ctrl)`."""
    return ctrl + control.target_filter * (targets - ctrl)


# ------------------------------------------------------------------ commands and gait
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


@dataclass(frozen=True)
class DeploySpec:
    """Everything a bundle records about the T1 contract, from one training env's settings."""

    control: T1Control = field(default_factory=T1Control)
    commands: CommandSpec = field(default_factory=CommandSpec)

    def meta(self) -> dict[str, Any]:
        return {
            "robot": "booster_t1",
            "joint_names": list(SDK_JOINT_NAMES),
            "leg_sdk_indices": list(LEG_SDK_INDICES),
            "leg_joint_names": list(LEG_JOINT_NAMES),
            "parallel_mech_sdk_indices": list(PARALLEL_MECH_SDK_INDICES),
            "control": self.control.to_dict() | {"ctrl_dt": self.control.ctrl_dt},
            "observation": {
                "size": OBSERVATION_SIZE,
                "layout": [{"name": n, "size": s, "scale": c, "start": observation_slices()[n].start}
                           for n, s, c in OBSERVATION_LAYOUT],
                "standing_command_norm": STANDING_COMMAND_NORM,
                "phase": "[cos 2πφ, sin 2πφ], φ = fmod(clock · f_active, 1) with the previous step's active "
                         "frequency (0 after a standing step); zeros while |smoothed command| < "
                         f"{STANDING_COMMAND_NORM}, the command too (sim2real.t1.update_command_and_gait)",
                "command_smoothing": "smoothed += clip(command - smoothed, ±ctrl_dt) every policy step",
            },
            "action": {"size": NUM_LEG_JOINTS, "clip": 1.0, "scale": self.control.leg_scales(),
                       "low": self.control.action_bounds()[0], "high": self.control.action_bounds()[1],
                       "targets": "default_pose[legs] + scale * clip(action, low, high)"},
            "commands": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.commands).items()},
        }

    def deploy_yaml(self) -> dict[str, Any]:
        """Booster's deploy configuration (`deploy/configs/T1.yaml` layout) for this policy."""
        c = self.control
        return {
            "common": {
                "dt": c.sim_dt,
                "stiffness": list(c.stiffness),
                "damping": list(c.damping),
                "default_qpos": list(c.default_pose),
                "torque_limit": list(c.torque_limit),
            },
            "policy": {
                "policy_path": "./models/policy.pt",
                "num_actions": NUM_LEG_JOINTS,
                "num_observations": OBSERVATION_SIZE,
                "gait_frequency": self.commands.deploy_gait_frequency,
                "normalization": deploy_normalization(),
                "control": {"action_scale": c.action_scale, "decimation": c.decimation,
                            # per leg joint (SDK 11-22): target = default + scale * clip(action, low, high)
                            "action_scales": c.leg_scales(), "action_low": c.action_bounds()[0],
                            "action_high": c.action_bounds()[1]},
            },
            "mech": {"parallel_mech_indexes": list(PARALLEL_MECH_SDK_INDICES)},
            "prepare": {key: list(values) for key, values in PREPARE.items()},
        }


def deploy_normalization() -> dict[str, float]:
    """The deploy configuration's `normalization` section, from OBSERVATION_LAYOUT's scales.

    The deploy code scales gravity by `gravity`, the gyro and the yaw-rate command by
    `ang_vel`, the velocity commands by `lin_vel`, joint angles by `dof_pos` and velocities by
    `dof_vel`; the layout has one scale for the whole command, so it must serve both."""
    scales = {name: scale for name, _, scale in OBSERVATION_LAYOUT}
    if scales["command"] != scales["gyro"]:
        raise AssertionError(f"the command's scale {scales['command']} must equal the gyro's {scales['gyro']}: the "
                             "deploy code scales the yaw-rate command with ang_vel")
    return {"gravity": scales["projected_gravity"], "lin_vel": scales["command"], "ang_vel": scales["gyro"],
            "dof_pos": scales["leg_joint_pos"], "dof_vel": scales["leg_joint_vel"], "clip_actions": 1.0}
