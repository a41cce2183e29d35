"""What the gait metrics read from a Playground state, inside the MJX adapter's jitted step
(`mjx.py`), and from the native-MuJoCo T1 backend through the same reader."""

from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envs.gait_signals import free_base_signals

if TYPE_CHECKING:
    import jax


class GaitSignals:
    """What the gait metrics read from a Playground state (`fast_td3/measures/gait_metrics.py` names).

    For tasks whose model starts with a free joint (humanoids, quadrupeds, DM Control's
    walkers): the base's heading-frame velocity, yaw rate, height, position and projected
    gravity; the hinge joints' positions and limits; actuator torques, their limits and the
    actuated joints' velocities; the command where the task keeps one in `info["command"]`;
    and whatever the env adds itself through `gait_signals(data, info)` (feet, for
    `envs/playground/t1_mjx.py`).
    """

    def __init__(self, env) -> None:
        import mujoco

        self.env = env
        model = env.mj_model
        kinds = mujoco.mjtJoint
        self.floating = model.njnt > 0 and int(model.jnt_type[0]) == int(kinds.mjJNT_FREE)
        hinge = [j for j in range(1, model.njnt)
                 if int(model.jnt_type[j]) in (int(kinds.mjJNT_HINGE), int(kinds.mjJNT_SLIDE))]
        self.joint_qpos = np.array([model.jnt_qposadr[j] for j in hinge], dtype=np.int32)
        limited = np.array([bool(model.jnt_limited[j]) for j in hinge])
        ranges = np.array([model.jnt_range[j] for j in hinge]).reshape(-1, 2)
        self.joint_limits = np.where(limited[:, None], ranges, [-np.inf, np.inf]).astype(np.float32)
        joint_actuators = [a for a in range(model.nu) if int(model.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT)]
        self.torques_known = model.nu > 0 and len(joint_actuators) == model.nu
        self.actuated_dofs = np.array([model.jnt_dofadr[model.actuator_trnid[a, 0]] for a in joint_actuators],
                                      dtype=np.int32)
        limits = []  # in joint units: an actuator's force times its gear, then the joint's own limit
        for a in joint_actuators:
            joint = model.actuator_trnid[a, 0]
            limit = np.inf
            if model.actuator_forcelimited[a]:
                limit = np.abs(model.actuator_forcerange[a]).max() * abs(model.actuator_gear[a, 0])
            if model.jnt_actfrclimited[joint]:
                limit = min(limit, np.abs(model.jnt_actfrcrange[joint]).max())
            limits.append(limit if np.isfinite(limit) else np.nan)
        self.torque_limits = np.array(limits, dtype=np.float32)

    def per_step(self, state) -> dict[str, jax.Array]:
        import jax.numpy as jnp  # traced inside the adapter's jitted step; JAX is set up by mjx.py

        if not self.floating:
            return {}
        data = state.data
        signals = free_base_signals(data.qpos[0:7], data.qvel[0:6], jnp)
        signals["joint_pos"] = data.qpos[self.joint_qpos]
        if self.torques_known:  # applied joint torques: after gear and the joints' torque limits
            signals["torques"] = data.qfrc_actuator[self.actuated_dofs]
            signals["joint_vel"] = data.qvel[self.actuated_dofs]
        command = state.info.get("command") if isinstance(state.info, dict) else None
        if command is not None and command.shape == (3,):
            signals["command"] = command
        if hasattr(self.env, "gait_signals"):
            signals.update(self.env.gait_signals(data, state.info))
        return signals

    def static(self, action_repeat: int) -> dict[str, Any]:
        if not self.floating:
            return {}
        static: dict[str, Any] = {"joint_limits": torch.from_numpy(self.joint_limits),
                                  "dt": float(self.env.dt) * action_repeat}
        if self.torques_known and np.isfinite(self.torque_limits).all():
            static["torque_limits"] = torch.from_numpy(self.torque_limits)
        config = getattr(self.env, "_config", None)
        target = config.get("reward_config", {}).get("base_height_target") if config is not None else None
        if target is not None:
            static["base_height_target"] = float(target)
        return static


NativeGaitData = namedtuple("NativeGaitData", "qpos qvel qfrc_actuator sensordata")
NativeGaitState = namedtuple("NativeGaitState", "data info")
"""The native T1 env's last step in the shape `GaitSignals.per_step` reads (an MJX state's `data` and `info`)."""


class NativeT1View:
    """What `GaitSignals` reads from the native-MuJoCo T1 env (`t1_native.py`): the same signals as on MJX."""

    def __init__(self, env) -> None:
        self.mj_model, self.dt, self._config, self._index = env.model, env.dt, env.config, env.index

    def gait_signals(self, data, info) -> dict:
        import jax.numpy as jnp

        from envs.playground import t1_lowdim

        return t1_lowdim.feet_gait_signals(jnp, data.sensordata, self._index)
