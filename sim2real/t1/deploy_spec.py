"""What a bundle records of the contract (`DeploySpec.meta`) and Booster's deploy configuration
(`DeploySpec.deploy_yaml`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim2real.t1.control import T1Control
from sim2real.t1.gait import CommandSpec, STANDING_COMMAND_NORM
from sim2real.t1.joints import LEG_JOINT_NAMES, LEG_SDK_INDICES, NUM_LEG_JOINTS, PARALLEL_MECH_SDK_INDICES, PREPARE, SDK_JOINT_NAMES
from sim2real.t1.observation import OBSERVATION_LAYOUT, OBSERVATION_SIZE, observation_slices


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
