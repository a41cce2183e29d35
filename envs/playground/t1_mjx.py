"""`T1LowDimJoystick{Flat,Rough}Terrain` on MJX: the task of `envs/playground/t1_lowdim.py` as a
Playground env (reset/step on `State`, jit- and vmap-able), registered in Playground's registry.

Kept apart from the task so that what does not run MJX (the native-MuJoCo backend, the
sim-to-sim gate, play and export of a bundle) never imports JAX or Playground.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import mujoco
from ml_collections import config_dict
from mujoco import mjx
from mujoco_playground import MjxEnv, State

from envs.playground.t1_lowdim import (
    PLAYGROUND_SCENES, TERRAINS, ModelIndex, build_mj_model, check_rates, commands_from, contacts_from, control_from,
    default_config, delayed_action, fallen, feet_gait_signals, initial_qpos, max_action_delay, mirror_maps,
    privileged_observation, shift_pending,
)
from envs.playground.t1_rewards import averaged_planar_error, averaged_yaw_error, reward_terms, total_reward
from sim2real import t1

TURN_STREAM, DELAY_STREAM, PAYLOAD_STREAM, KD_STREAM = 0x7A2E, 0xDE1A, 0xBA5E, 0xCDCD
"""`fold_in` constants of the draws added after the splits: `fold_in(key, i)` is `split(key, n)[i]`
for i < n, so a small constant would reuse a key another draw already took."""


class T1LowDimJoystick(MjxEnv):
    """Playground env (reset/step on `State`, jit- and vmap-able)."""

    def __init__(self, terrain: str = "flat", config: config_dict.ConfigDict | None = None,
                 config_overrides: dict[str, Any] | None = None) -> None:
        super().__init__(config or default_config(), config_overrides)
        self.control = control_from(self._config)
        self.commands = commands_from(self._config)
        check_rates(self._config, self.control)
        self._sim_dt, self._ctrl_dt = self.control.sim_dt, self.control.ctrl_dt
        self.terrain = terrain
        self._mj_model = build_mj_model(terrain, self.control)
        self._mjx_model = mjx.put_model(self._mj_model, impl=self._config.impl)
        self._xml_path = PLAYGROUND_SCENES[terrain]
        model = self._mj_model
        self._init_qpos = jnp.asarray(initial_qpos(model, self.control))
        self._default_pose = jnp.asarray(self.control.default_pose, dtype=jnp.float32)
        self._index = ModelIndex(model, self._config.reward_config.soft_joint_limit_factor)
        self._legs = self._index.legs

    # -- MjxEnv API
    @property
    def xml_path(self) -> str:
        return self._xml_path

    @property
    def action_size(self) -> int:
        return t1.NUM_LEG_JOINTS

    @property
    def mj_model(self) -> mujoco.MjModel:
        return self._mj_model

    @property
    def mjx_model(self) -> mjx.Model:
        return self._mjx_model

    def mirror_maps(self) -> dict:
        """Left-right mirrors of observation, critic observation and action (`algo.symmetry`)."""
        return mirror_maps()

    # -- commands
    def sample_command(self, rng: jax.Array) -> jax.Array:
        c = self.commands
        keys = jax.random.split(rng, 4)
        command = jnp.stack([
            jax.random.uniform(keys[0], minval=c.lin_vel_x[0], maxval=c.lin_vel_x[1]),
            jax.random.uniform(keys[1], minval=c.lin_vel_y[0], maxval=c.lin_vel_y[1]),
            jax.random.uniform(keys[2], minval=c.ang_vel_yaw[0], maxval=c.ang_vel_yaw[1]),
        ])
        command = jnp.where(jax.random.bernoulli(keys[3], c.standing_probability), jnp.zeros(3), command)
        if c.turn_probability > 0 or c.strafe_probability > 0:  # drawn only when on: runs without keep their streams
            command = c.one_axis(jnp, command, jax.random.uniform(jax.random.fold_in(rng, TURN_STREAM)))
        return command

    # -- reset / step
    def reset(self, rng: jax.Array) -> State:
        rng, pos_key, yaw_key, joint_key, vel_key, cmd_key, freq_key, clock_key, push_key = jax.random.split(rng, 9)
        qpos = self._init_qpos
        qpos = qpos.at[0:2].add(jax.random.uniform(pos_key, (2,), minval=-0.5, maxval=0.5))
        yaw = jax.random.uniform(yaw_key, minval=-jnp.pi, maxval=jnp.pi)
        qpos = qpos.at[3:7].set(jnp.array([jnp.cos(yaw / 2), 0.0, 0.0, jnp.sin(yaw / 2)]))
        qpos = qpos.at[7:].add(jax.random.uniform(joint_key, (t1.NUM_JOINTS,), minval=-0.05, maxval=0.05))
        qvel = jnp.zeros(self._mjx_model.nv).at[0:6].set(
            jax.random.uniform(vel_key, (6,), minval=-0.3, maxval=0.3))
        data = mjx.make_data(self._mj_model, impl=self._mjx_model.impl.value, naconmax=self._config.naconmax,
                             njmax=self._config.njmax)
        data = data.replace(qpos=qpos, qvel=qvel, ctrl=self._default_pose)
        data = mjx.forward(self._mjx_model, data)
        push_interval = jax.random.uniform(push_key, minval=self._config.push_config.interval_range[0],
                                           maxval=self._config.push_config.interval_range[1])
        gait_frequency = jax.random.uniform(freq_key, (1,), minval=self.commands.gait_frequency[0],
                                            maxval=self.commands.gait_frequency[1])
        info = {
            "rng": rng,
            "step": jnp.zeros((), jnp.int32),
            "target_command": self.sample_command(cmd_key),
            "gait_frequency": gait_frequency,
            # the robot's clock: any phase at the start; the deploy code starts with the gait active
            "clock": jax.random.uniform(clock_key, (1,), maxval=10.0),
            "active_frequency": gait_frequency,
            "last_action": jnp.zeros(t1.NUM_LEG_JOINTS),
            "feet_air_time": jnp.zeros(2),
            "yaw_error_average": jnp.zeros(()),
            "lin_vel_error_average": jnp.zeros(2),
            "push_steps": jnp.round(push_interval / self.dt).astype(jnp.int32),
            "action_delay": self._draw_action_delay(jax.random.fold_in(rng, DELAY_STREAM)),
            "pending_actions": jnp.zeros((max_action_delay(self._config), t1.NUM_LEG_JOINTS)),
        }
        self._update_command_and_gait(info, jnp.zeros(3))
        metrics = {f"reward/{term}": jnp.zeros(()) for term in self._config.reward_config.scales.keys()}
        obs = self._observe(data, info, self._contacts(data))
        return State(data, obs, jnp.zeros(()), jnp.zeros(()), metrics, info)

    def step(self, state: State, action: jax.Array) -> State:
        info = dict(state.info)
        info["rng"], push_key, cmd_key = jax.random.split(info["rng"], 3)
        data = self._push(state.data, info, push_key)
        applied = delayed_action(jnp, action, info["action_delay"], info["pending_actions"])
        data = self._physics(data, t1.targets_from_actions(jnp, applied, self.control, self._default_pose))

        contacts = self._contacts(data)
        info["feet_air_time"] = info["feet_air_time"] + self.dt
        done = self._fallen(data)
        info["yaw_error_average"] = averaged_yaw_error(
            self._config.reward_config, info["yaw_error_average"], sensordata=data.sensordata,
            command=info["command"], index=self._index, dt=self.dt)
        info["lin_vel_error_average"] = averaged_planar_error(
            self._config.reward_config, info["lin_vel_error_average"], sensordata=data.sensordata,
            command=info["command"], index=self._index, dt=self.dt)
        terms = self._reward_terms(data, action, info, contacts, done)
        reward, rewards = total_reward(jnp, terms, self._config.reward_config.scales, self.dt)

        # the next observation's command and gait phase, in the deploy code's order
        info["step"] = info["step"] + 1
        resample = info["step"] % int(round(self.commands.resample_seconds / self.dt)) == 0
        info["target_command"] = jnp.where(resample, self.sample_command(cmd_key), info["target_command"])
        info["clock"] = info["clock"] + self.dt
        self._update_command_and_gait(info, info["command"])
        info["last_action"] = action
        info["pending_actions"] = shift_pending(jnp, info["pending_actions"], action)
        info["feet_air_time"] = info["feet_air_time"] * ~contacts
        obs = self._observe(data, info, contacts)
        metrics = {f"reward/{term}": value for term, value in rewards.items()}
        return state.replace(data=data, obs=obs, reward=reward, done=done.astype(jnp.float32), metrics=metrics,
                             info=info)

    def _draw_action_delay(self, key: jax.Array) -> jax.Array:
        delay = self._config.action_delay
        if not delay.enable:
            return jnp.zeros((), jnp.int32)
        return jax.random.randint(key, (), int(delay.steps_range[0]), int(delay.steps_range[1]) + 1)

    def _update_command_and_gait(self, info: dict, smoothed: jax.Array) -> None:
        info["gait_process"], info["command"], info["active_frequency"] = t1.update_command_and_gait(
            jnp, clock=info["clock"], active_frequency=info["active_frequency"], smoothed=smoothed,
            joystick=info["target_command"], gait_frequency=info["gait_frequency"], ctrl_dt=self.dt)

    def _physics(self, data: mjx.Data, targets: jax.Array) -> mjx.Data:
        """`decimation` physics steps; the PD targets pass the deploy code's filter at each."""
        def substep(data, _):
            data = data.replace(ctrl=t1.filtered_targets(data.ctrl, targets, self.control))
            return mjx.step(self._mjx_model, data), None

        return jax.lax.scan(substep, data, None, length=self.n_substeps)[0]

    def _push(self, data: mjx.Data, info: dict, key: jax.Array) -> mjx.Data:
        push = self._config.push_config
        angle_key, size_key = jax.random.split(key)
        angle = jax.random.uniform(angle_key, maxval=2 * jnp.pi)
        size = jax.random.uniform(size_key, minval=push.magnitude_range[0], maxval=push.magnitude_range[1])
        now = (info["step"] + 1) % info["push_steps"] == 0
        kick = jnp.array([jnp.cos(angle), jnp.sin(angle)]) * size * now * push.enable
        return data.replace(qvel=data.qvel.at[:2].add(kick))

    # -- sensing
    def _contacts(self, data: mjx.Data) -> jax.Array:
        return contacts_from(jnp, data.sensordata, self._index)

    def imu(self, data) -> tuple[jax.Array, jax.Array]:
        """(projected gravity, gyro) from the state the joint angles are read from (`sim2real.t1`)."""
        return t1.imu_from_floating_base(jnp, data.qpos[3:7], data.qvel[3:6])

    def projected_gravity(self, data) -> jax.Array:
        return self.imu(data)[0]

    def _fallen(self, data: mjx.Data) -> jax.Array:
        return fallen(jnp, self._config.termination, self.projected_gravity(data), data.qpos, data.qvel)

    def encoder_offsets(self) -> jax.Array:
        """The joint encoders' offsets δ (measured = true + δ) this env's model was given by the
        randomiser: its PD loop acts on the measured angle, `bias0 = -kp·δ` (zero when not randomised)."""
        model = self._mjx_model
        return -model.actuator_biasprm[:, 0] / model.actuator_gainprm[:, 0]

    def _noisy(self, key: jax.Array, value: jax.Array, scale: float) -> jax.Array:
        level = self._config.noise_config.level
        return value + (2 * jax.random.uniform(key, value.shape) - 1) * level * scale

    def _observe(self, data: mjx.Data, info: dict, contacts: jax.Array) -> dict[str, jax.Array]:
        gravity, gyro = self.imu(data)
        joint_pos, joint_vel = data.qpos[7:] + self.encoder_offsets(), data.qvel[6:]
        info["rng"], *keys = jax.random.split(info["rng"], 5)
        noise = self._config.noise_config.scales
        common = dict(command=info["command"], gait_process=info["gait_process"], last_action=info["last_action"],
                      default_pose=self._default_pose)
        actor = t1.actor_observation(
            jnp, projected_gravity=self._noisy(keys[0], gravity, noise.gravity),
            gyro=self._noisy(keys[1], gyro, noise.gyro), joint_pos=self._noisy(keys[2], joint_pos, noise.joint_pos),
            joint_vel=self._noisy(keys[3], joint_vel, noise.joint_vel), **common)
        clean = t1.actor_observation(jnp, projected_gravity=gravity, gyro=gyro, joint_pos=joint_pos,
                                     joint_vel=joint_vel, **common)
        privileged = privileged_observation(
            jnp, clean, qpos=data.qpos, sensordata=data.sensordata, site_xpos=data.site_xpos,
            leg_torques=data.qfrc_actuator[6:][self._legs], contacts=contacts, feet_air_time=info["feet_air_time"],
            target_command=info["target_command"], gait_frequency=info["gait_frequency"], index=self._index,
            torque_limit=jnp.asarray(self.control.leg(self.control.torque_limit)))
        return {"state": actor, "privileged_state": privileged}

    def gait_signals(self, data: mjx.Data, info: dict) -> dict[str, jax.Array]:
        """Feet, for the gait metrics (`envs/playground/` adds the base, joints and torques)."""
        return feet_gait_signals(jnp, data.sensordata, self._index)

    # -- rewards
    def _reward_terms(self, data, action, info, contacts, done) -> dict[str, jax.Array]:
        return reward_terms(
            jnp, self._config.reward_config, qpos=data.qpos, qvel=data.qvel, sensordata=data.sensordata,
            site_xpos=data.site_xpos, site_xmat=data.site_xmat, leg_torques=data.qfrc_actuator[6:][self._legs],
            projected_gravity=self.projected_gravity(data), contacts=contacts, action=action,
            last_action=info["last_action"], command=info["command"], gait_process=info["gait_process"], done=done,
            yaw_error_average=info["yaw_error_average"], lin_vel_error_average=info["lin_vel_error_average"],
            index=self._index, default_pose=self._default_pose)

    # -- domain randomisation (per-env models, used when the adapter's domain_randomization is on)
    def domain_randomize(self, model: mjx.Model, rng: jax.Array):
        """(models batched over `rng`, their vmap axes): the switched-on kinds of `randomization.*`."""
        cfg = self._config.randomization
        legs = jnp.asarray(self._legs)
        kp = jnp.asarray(self.control.stiffness)
        kd = jnp.asarray(self.control.damping)
        trunk = int(self._mj_model.jnt_bodyid[0])

        def one(key):
            keys = jax.random.split(key, 4)
            fields = {}
            if cfg.floor_friction:
                friction = jax.random.uniform(keys[0], minval=cfg.floor_friction_range[0],
                                              maxval=cfg.floor_friction_range[1])
                fields["geom_friction"] = model.geom_friction.at[self._index.floor_geom, 0].set(friction)
            mass, inertia = model.body_mass, model.body_inertia
            if cfg.link_masses:
                scale = jax.random.uniform(keys[1], (model.nbody,), minval=cfg.link_mass_scale[0],
                                           maxval=cfg.link_mass_scale[1])
                mass, inertia = mass * scale, inertia * scale[:, None]
            if cfg.payload:
                added = jax.random.uniform(jax.random.fold_in(key, PAYLOAD_STREAM), minval=cfg.payload_range[0],
                                           maxval=cfg.payload_range[1])
                mass = mass.at[trunk].set(jnp.maximum(mass[trunk] + added, 1e-3))
            if cfg.link_masses or cfg.payload:
                fields["body_mass"], fields["body_inertia"] = mass, inertia
            gain, bias = model.actuator_gainprm, model.actuator_biasprm
            if cfg.gains:
                kp_scale = jax.random.uniform(keys[2], (t1.NUM_JOINTS,), minval=cfg.kp_scale[0], maxval=cfg.kp_scale[1])
                kd_scale = jax.random.uniform(jax.random.fold_in(key, KD_STREAM), (t1.NUM_JOINTS,), minval=cfg.kd_scale[0],
                                              maxval=cfg.kd_scale[1])
                gain = gain.at[:, 0].set(kp * kp_scale)
                bias = bias.at[:, 1].set(-kp * kp_scale).at[:, 2].set(-kd * kd_scale)
            if cfg.joint_offsets:  # encoder offsets δ: the PD loop and the observation see q + δ
                offset = jax.random.uniform(keys[3], (t1.NUM_LEG_JOINTS,), minval=cfg.joint_offset_range[0],
                                            maxval=cfg.joint_offset_range[1])
                bias = bias.at[legs, 0].set(bias[legs, 1] * offset)  # -kp·δ
            if cfg.gains or cfg.joint_offsets:
                fields["actuator_gainprm"], fields["actuator_biasprm"] = gain, bias
            return fields

        fields = jax.vmap(one)(rng)
        axes = jax.tree_util.tree_map(lambda _: None, model).tree_replace({name: 0 for name in fields})
        return model.tree_replace(fields), axes


def _factory(terrain: str):
    def make(config=None, config_overrides=None):
        return T1LowDimJoystick(terrain, config, config_overrides)

    return make


def register() -> None:
    """Make the tasks loadable by name through Playground's registry (idempotent)."""
    from mujoco_playground import locomotion

    for task, terrain in TERRAINS.items():
        if task not in locomotion.ALL_ENVS:
            locomotion.register_environment(task, _factory(terrain), default_config)
