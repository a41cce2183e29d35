"""The gait signals of an Isaac-Lab-API env (Isaac Lab, mjlab), read from its robot
articulation and velocity command through the API's public attributes; the adapter
(`envs/isaaclab.py`) calls `GaitSignals.read` around its steps (see its docstring for the
rows of envs that finished in a step).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from envs.gait_signals import heading_frame_xy

VELOCITY_COMMANDS = ("base_velocity", "twist")
"""Command terms read as the velocity command (vx, vy, yaw rate): Isaac Lab's name, mjlab's name."""
UNLIMITED_EFFORT = 1e8
"""Effort limits at or above this mean "no limit" (Isaac Lab writes 1e9 to the solver for those)."""


class GaitSignals:
    """What the gait metrics (`fast_td3/measures/gait_metrics.py` names) read from an Isaac-Lab-API env,
    through public attributes only; whatever the task lacks is left out, nothing raises.

    From the articulation `env.scene[robot_entity]` (`.data`, names as Isaac Lab 2.x/3.x and
    mjlab spell them, the first present taken; Isaac Lab 3's warp arrays through `.torch`):

    - floating base only (not `is_fixed_base`): `base_height` (root z: flat terrain),
      `base_pos_xy`, `projected_gravity` (`projected_gravity_b`); `base_lin_vel_xy`, the
      root link's world velocity rotated by minus the heading (`heading_w`, the yaw of the
      base's x axis: no quaternion convention involved, and Isaac Lab 2 and 3 order them
      differently), the frame of Isaac Lab's humanoid velocity rewards; `base_ang_vel_z`,
      the world z angular velocity (the heading frame's);
    - `joint_pos`, `joint_vel`; `torques`: Isaac Lab's `applied_torque` (after the actuator
      model's clipping), or mjlab's `qfrc_actuator` (actuator torque in joint space, from the
      step's last forward pass: at the reached state under the step's targets);
    - static: `joint_limits` (the simulator's hard `joint_pos_limits`, as the Playground
      adapter reports them, not the softer `soft_joint_pos_limits` some rewards use);
      `torque_limits`, per joint from the robot's actuator groups (Isaac Lab's
      `effort_limit`, mjlab's `cfg.effort_limit`), else `joint_effort_limits`, and left out
      when a joint has none; `dt` (`step_dt`); `base_height_target`, the `target_height` of a
      `base_height*` reward term where the task has one.

    `command`: the velocity command term (`VELOCITY_COMMANDS`), read *before* the step (the
    env resamples commands, and recomputes heading-following yaw rates, after its physics).
    Feet (mjlab): where a reward term pairs a contact sensor (`params["sensor_name"]`, with
    `data.found` per foot) with the robot's foot sites (`params["asset_cfg"].site_ids`),
    as mjlab's velocity tasks' foot-slip term does, `foot_contact` (found > 0) and
    `foot_vel_xy` (`site_lin_vel_w`). Isaac Lab's contact sensors are not read.

    Static values whose rows differ per env (randomized limits) keep their env dimension,
    which broadcasts over the metrics' [T, E, J]."""

    def __init__(self, env: Any, robot_entity: str) -> None:
        self.env = env
        self.scene = getattr(env, "scene", None)
        robot = _scene_entry(self.scene, robot_entity)
        data = getattr(robot, "data", None)
        self.robot, self.data = robot, data
        self.floating = data is not None and not bool(getattr(robot, "is_fixed_base", False)) \
            and _field(data, "root_link_pos_w", "root_pos_w") is not None
        joint_pos = _field(data, "joint_pos") if data is not None else None
        self.joints = joint_pos is not None and joint_pos.dim() == 2 and joint_pos.shape[-1] > 0
        self.command_name = self._velocity_command()
        self.feet = self._feet(robot_entity) if self.floating else None
        self._static: dict[str, Any] | None = None

    @property
    def available(self) -> bool:
        return self.floating or self.joints

    # ------------------------------------------------------------- per step
    def command(self) -> torch.Tensor | None:
        """A copy of the velocity command now (None without one)."""
        if self.command_name is None:
            return None
        return _tensor(self.env.command_manager.get_command(self.command_name))[:, :3].clone()

    def read(self, command: torch.Tensor | None = None, rows: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The per-step signals now (copies, not the simulator's buffers), of `rows` only if given;
        `command` is the one to report with them (all envs' rows)."""
        data, out = self.data, {}
        pick = (lambda x: x.clone()) if rows is None else (lambda x: x[rows])
        if self.floating:
            pos = _field(data, "root_link_pos_w", "root_pos_w")
            out["base_height"], out["base_pos_xy"] = pick(pos[:, 2]), pick(pos[:, :2])
            gravity = _field(data, "projected_gravity_b")
            if gravity is not None:
                out["projected_gravity"] = pick(gravity)
            heading = _field(data, "heading_w")
            velocity = _field(data, "root_link_lin_vel_w", "root_lin_vel_w")
            if heading is not None and velocity is not None:
                out["base_lin_vel_xy"] = pick(heading_frame_xy(velocity[:, 0], velocity[:, 1], heading, torch))
            angular = _field(data, "root_link_ang_vel_w", "root_ang_vel_w")
            if angular is not None:
                out["base_ang_vel_z"] = pick(angular[:, 2])
            if command is not None:
                out["command"] = command if rows is None else command[rows]
            if self.feet is not None:
                sensor, sites = self.feet
                velocities = _field(data, "site_lin_vel_w")
                found = _field(getattr(sensor, "data", None), "found")
                if velocities is not None and found is not None:
                    out["foot_contact"] = pick(found > 0)
                    out["foot_vel_xy"] = pick(velocities[:, sites, :2])
        if self.joints:
            joint_pos, joint_vel = _field(data, "joint_pos"), _field(data, "joint_vel")
            out["joint_pos"] = pick(joint_pos)
            if joint_vel is not None and joint_vel.shape == joint_pos.shape:
                out["joint_vel"] = pick(joint_vel)
                torques = _field(data, "applied_torque", "qfrc_actuator")
                if torques is not None and torques.shape == joint_vel.shape:
                    out["torques"] = pick(torques)
        return out

    # ------------------------------------------------------------- static
    def static(self) -> dict[str, Any]:
        if self._static is None:
            self._static = self._read_static()
        return self._static

    def _read_static(self) -> dict[str, Any]:
        static: dict[str, Any] = {}
        step_dt = getattr(self.env, "step_dt", None)
        if step_dt is not None:
            static["dt"] = float(step_dt)
        if self.joints:
            limits = _field(self.data, "joint_pos_limits", "joint_limits")
            if limits is not None and limits.shape[-1] == 2:
                static["joint_limits"] = _same_rows(limits.float(), 2)
            torque_limits = self._torque_limits()
            if torque_limits is not None:
                static["torque_limits"] = torque_limits
        if self.floating:
            target = self._base_height_target()
            if target is not None:
                static["base_height_target"] = target
        return static

    def _torque_limits(self) -> torch.Tensor | None:
        """[J] (or [E, J]) effort limits, or None unless every joint has a finite one."""
        joint_vel = _field(self.data, "joint_vel")
        if joint_vel is None or joint_vel.dim() != 2:
            return None
        limits = torch.full_like(joint_vel, math.inf)
        actuators = getattr(self.robot, "actuators", None) or {}
        for actuator in (actuators.values() if isinstance(actuators, dict) else actuators):
            if hasattr(actuator, "joint_indices"):  # Isaac Lab: a slice or joint ids, and [E, j] limits
                ids, limit = actuator.joint_indices, getattr(actuator, "effort_limit", None)
            else:  # mjlab: target ids (joints only with the JOINT transmission) and its config's limit
                if str(getattr(getattr(actuator, "transmission_type", None), "value", "joint")) != "joint":
                    continue
                ids = getattr(actuator, "target_ids", None)
                limit = getattr(getattr(actuator, "cfg", None), "effort_limit", None)
            if not isinstance(ids, (slice, list, tuple)):
                ids = _tensor(ids)
            if not isinstance(limit, (int, float)):
                limit = _tensor(limit)
            if ids is None or limit is None:
                continue
            ids = ids if isinstance(ids, slice) else torch.as_tensor(ids, dtype=torch.long, device=limits.device)
            limits[:, ids] = torch.as_tensor(limit, dtype=limits.dtype, device=limits.device)
        unknown = ~torch.isfinite(limits) | (limits >= UNLIMITED_EFFORT)
        if unknown.any():
            fallback = _field(self.data, "joint_effort_limits")
            if fallback is not None and fallback.shape == limits.shape:
                limits = torch.where(unknown, fallback.to(limits.dtype), limits)
                unknown = ~torch.isfinite(limits) | (limits >= UNLIMITED_EFFORT)
        if unknown.any():
            return None
        return _same_rows(limits.abs(), 1)

    def _base_height_target(self) -> float | None:
        for _, cfg in _reward_terms(self.env):
            func = getattr(cfg, "func", None)
            func = getattr(func, "__name__", type(func).__name__)  # a function, or a class-based term
            target = (getattr(cfg, "params", None) or {}).get("target_height")
            if "base_height" in func.lower() and isinstance(target, (int, float)):
                return float(target)
        return None

    # ------------------------------------------------------------- discovery
    def _velocity_command(self) -> str | None:
        manager = getattr(self.env, "command_manager", None)
        terms = getattr(manager, "active_terms", None) or []
        for name in VELOCITY_COMMANDS:
            if name in terms:
                command = _tensor(manager.get_command(name))
                if command is not None and command.dim() == 2 and command.shape[-1] == 3:
                    return name
        return None

    def _feet(self, robot_entity: str) -> tuple[Any, list[int]] | None:
        for _, cfg in _reward_terms(self.env):
            params = getattr(cfg, "params", None) or {}
            sensor_name, asset = params.get("sensor_name"), params.get("asset_cfg")
            sites = getattr(asset, "site_ids", None)
            if not isinstance(sensor_name, str) or getattr(asset, "name", None) != robot_entity \
                    or not isinstance(sites, (list, tuple)) or not sites:
                continue
            sensor = _scene_entry(self.scene, sensor_name)
            found = _field(getattr(sensor, "data", None), "found")
            velocities = _field(self.data, "site_lin_vel_w")
            if found is not None and velocities is not None and found.dim() == 2 and found.shape[-1] == len(sites):
                return sensor, list(sites)
        return None


def _tensor(value: Any) -> torch.Tensor | None:
    """A torch view of an API value: a tensor as it is, Isaac Lab 3's ProxyArray through its
    `.torch`, a warp array through `warp.to_torch`; None for anything else."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    view = getattr(value, "torch", None)
    if isinstance(view, torch.Tensor):
        return view
    if type(value).__module__.startswith("warp"):
        import warp

        return warp.to_torch(value)
    return None


def _field(data: Any, *names: str) -> torch.Tensor | None:
    """The first of `names` that `data` has, as a tensor (a property the backend does not
    implement counts as absent)."""
    for name in names:
        try:
            value = getattr(data, name, None)
        except (NotImplementedError, RuntimeError):
            continue
        value = _tensor(value)
        if value is not None:
            return value
    return None


def _scene_entry(scene: Any, name: str) -> Any:
    if scene is None:
        return None
    try:
        return scene[name]
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def _same_rows(values: torch.Tensor, trailing: int) -> torch.Tensor:
    """`values` without its env dimension when every env's row is the same (a copy)."""
    if values.dim() > trailing and bool((values == values[:1]).all()):
        return values[0].clone()
    return values.clone()



def _reward_terms(env: Any) -> list[tuple[str, Any]]:
    manager = getattr(env, "reward_manager", None)
    get = getattr(manager, "get_term_cfg", None)
    if get is None:
        return []
    return [(name, get(name)) for name in getattr(manager, "active_terms", None) or []]
