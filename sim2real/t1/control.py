"""How a leg action becomes PD targets and torques: `T1Control` (gains, rates, action scale and
bounds, the target filter) and the two functions every backend and the robot share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from sim2real.t1.joints import DAMPING, DEFAULT_POSE, JOINT_RANGE, LEG_JOINT_NAMES, LEG_SDK_INDICES, NUM_JOINTS, NUM_LEG_JOINTS, STIFFNESS, TORQUE_LIMIT


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


def filtered_targets(ctrl, targets, control: T1Control):
    """The PD targets after one physics step of the deploy code's first-order filter
    (`control.target_filter`, at the PD rate): `ctrl + target_filter * (targets - ctrl)`."""
    return ctrl + control.target_filter * (targets - ctrl)
