"""The T1 in native MuJoCo, as the sim-to-sim gate drives it: nominal, or under one trial's perturbations.

The robot holds everything a trial changes, so the gate's loop stays the same for both:
the drawn physics (friction, masses, payload, gains, encoder offsets, a physics variant) is
written into its model at construction; sensor noise is added where the policy reads its
observation; an action delay holds the PD targets back by whole policy steps; pushes kick the
base velocity at their drawn times (`pushes_done` records them, for a viewer's overlay).
"""

from __future__ import annotations

from collections import deque

import mujoco
import numpy as np

from envs.playground.t1_lowdim import build_mj_model, initial_qpos, sensor_indices
from sim2real import t1
from sim2real.t1 import perturbations


class T1Robot:
    """The T1 in native MuJoCo under a control setting, stepped one policy period at a time.

    Args:
        control: the gains, default pose, action scale and rates the robot runs.
        terrain: "flat" or "rough" (the training scene).
        draw: one trial's perturbations (`sim2real.t1.perturbations.draw_trial`); None: nominal.
        model: a model already built for `control` to run on (nominal only), instead of building one.
    """

    def __init__(self, control: t1.T1Control, terrain: str = "flat",
                 draw: perturbations.TrialDraw | None = None, model: mujoco.MjModel | None = None) -> None:
        if model is not None and draw is not None:
            raise ValueError("a perturbed trial changes its model: build it (model=None)")
        self.control = control
        self.model = model if model is not None else build_mj_model(terrain, control)
        self.data = mujoco.MjData(self.model)
        self.default_pose = np.asarray(control.default_pose)
        self.draw = draw
        self.encoder_offsets = np.zeros(t1.NUM_JOINTS)
        self._noise_level, self._noise = 0.0, None
        self._pending: deque = deque()
        self._pushes = list(draw.pushes) if draw is not None else []
        self.pushes_done: list[dict[str, float]] = []
        if draw is not None:
            self.encoder_offsets = perturbations.apply_to_model(self.model, draw, control,
                                                                self.model.geom("floor").id)
            self._noise_level = draw.obs_noise
            self._noise = perturbations.noise_stream(draw.seed, draw.trial)
            self._pending = deque([np.zeros(t1.NUM_LEG_JOINTS, dtype=np.float32)] * draw.action_delay)
            if draw.link_mass is not None or draw.payload is not None:
                # quantities derived from the masses; mj_setConst leaves the data at qpos0, so
                # it runs before the robot is posed (as the training env's set_const does)
                mujoco.mj_setConst(self.model, self.data)
        self.data.qpos[:] = initial_qpos(self.model, control)
        self.data.ctrl[:] = self.default_pose
        mujoco.mj_forward(self.model, self.data)
        self._local_linvel = sensor_indices(self.model, "local_linvel")

    def projected_gravity(self) -> np.ndarray:
        return t1.imu_from_floating_base(np, self.data.qpos[3:7], self.data.qvel[3:6])[0]

    def gyro(self) -> np.ndarray:
        return self.data.qvel[3:6].copy()

    def heading(self) -> float:
        """The base's yaw in the world [rad], from its orientation quaternion (w, x, y, z)."""
        w, x, y, z = self.data.qpos[3:7]
        return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))

    def base_rotation(self) -> np.ndarray:
        rotation = np.zeros(9)
        mujoco.mju_quat2Mat(rotation, self.data.qpos[3:7] / np.linalg.norm(self.data.qpos[3:7]))
        return rotation.reshape(3, 3)

    def local_linvel(self) -> np.ndarray:
        return self.data.sensordata[self._local_linvel].copy()

    def observation(self, command: np.ndarray, gait_process: np.ndarray, last_action: np.ndarray) -> np.ndarray:
        """The 47 numbers the policy sees in this state: encoder offsets and the trial's sensor noise included."""
        joint_pos = self.data.qpos[7:] + self.encoder_offsets
        sensed = {"gravity": self.projected_gravity(), "gyro": self.gyro(), "joint_pos": joint_pos,
                  "joint_vel": self.data.qvel[6:].copy()}
        if self._noise_level:
            sensed = {name: perturbations.noisy(self._noise, value, self._noise_level, name)
                      for name, value in sensed.items()}
        return t1.actor_observation(
            np, projected_gravity=sensed["gravity"], gyro=sensed["gyro"], command=command,
            gait_process=gait_process, joint_pos=sensed["joint_pos"], joint_vel=sensed["joint_vel"],
            last_action=last_action, default_pose=self.default_pose).astype(np.float32)

    def act(self, actions: np.ndarray) -> None:
        """One policy period: `decimation` physics steps towards PD targets, from the actions of
        `action_delay` policy steps ago."""
        if self.draw is not None and self.draw.action_delay:
            self._pending.append(np.asarray(actions))
            actions = self._pending.popleft()
        targets = t1.targets_from_actions(np, actions, self.control, self.default_pose)
        for _ in range(self.control.decimation):
            self.data.ctrl[:] = t1.filtered_targets(self.data.ctrl, targets, self.control)
            mujoco.mj_step(self.model, self.data)

    def push_if_due(self, elapsed: float) -> dict[str, float] | None:
        """Kick the base by the next drawn push once its time has come; returns the push applied."""
        if not self._pushes or self._pushes[0]["time"] > elapsed + 1e-9:
            return None
        push = self._pushes.pop(0)
        self.data.qvel[0] += push["vx"]
        self.data.qvel[1] += push["vy"]
        self.pushes_done.append(push)
        return push

    def fallen(self, min_height: float, min_tilt_cos: float) -> bool:
        return bool(self.data.qpos[2] < min_height or -self.projected_gravity()[2] < min_tilt_cos
                    or not np.isfinite(self.data.qpos).all())

