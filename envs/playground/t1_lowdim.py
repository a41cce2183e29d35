"""`T1LowDimJoystick{Flat,Rough}Terrain`: Booster T1 walking, built to be deployed.

Our own task on the T1 model that ships with Playground: its config, model and maths, which
import neither JAX nor Playground (the MJX env is `t1_mjx.py`, the native one `t1_native.py`).
The policy drives the 12 leg joints only; head, arms and waist are held at their default
pose by the same PD loop. It sees exactly what Booster's deploy code feeds the robot's
policy (`sim2real.t1.actor_observation`, 47 numbers) and its actions become PD targets
exactly as they do there (`sim2real.t1.targets_from_actions`, 50 Hz policy over 500 Hz
PD with the deploy code's target filter). Gains, damping, torque limits, default angles
and action scale are config values (`control.*`) from which the model's actuators are
built, so they travel into the export bundle and the sim-to-sim gate unchanged.

Rewards are named scaled terms (`reward_config.scales.*`, `env.reward_scales.<term>=x`);
commands, gait frequencies, standing probability, observation noise, pushes and domain
randomisation (floor friction, link masses, joint offsets, gains) are config switches
(`env.options.config_overrides`). The critic sees privileged state (body velocity,
contacts, feet, height, torques, the raw command).

The task's maths (falls, contacts, the critic's observation here; the reward terms in
`t1_rewards.py`) are functions of the array module, written once: the MJX env calls them with `jax.numpy`, the
native-MuJoCo backend of the same tasks (`envs/playground/t1_native.py`, what `backend=auto` runs on a
CPU) with `numpy`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np

from sim2real import t1
from sim2real.t1 import perturbations

if TYPE_CHECKING:  # Playground's config type; only its registry needs it, so mjlab's venv lacks it
    from ml_collections import config_dict

TERRAINS = {"T1LowDimJoystickFlatTerrain": "flat", "T1LowDimJoystickRoughTerrain": "rough"}
PLAYGROUND_SCENES = {"flat": "T1JoystickFlatTerrain", "rough": "T1JoystickRoughTerrain"}
"""Playground's T1 task whose scene (robot, floor, sensors) each terrain reuses."""
FEET_SITES = ("left_foot", "right_foot")
FOOT_CONTACT_SENSORS = tuple(tuple(f"{side}_foot_{i}_floor_found" for i in range(1, 5)) for side in ("left", "right"))
IMU_SITE = "imu"
GATE_RANGES = perturbations.PerturbationRanges()
"""The robust gate's default ranges: training's randomisation, pushes, delay and noise are drawn from these."""


def default_config() -> config_dict.ConfigDict:
    from ml_collections import config_dict  # Playground's dependency: the scene and maths here need only MuJoCo

    control = t1.T1Control()
    commands = t1.CommandSpec()
    return config_dict.create(
        ctrl_dt=control.ctrl_dt,  # derived from control.* (kept for Playground's base class)
        sim_dt=control.sim_dt,
        episode_length=1000,
        action_repeat=1,
        impl="jax",
        naconmax=8 * 8192,
        njmax=80,
        control=config_dict.create(**control.to_dict()),
        # "joint_limits": each leg action clipped where its PD target would pass the joint's range
        # (recorded in the bundle's meta.json and T1.yaml, which sim-to-sim and deploy read)
        action_bounds="none",
        commands=config_dict.create(**{k: list(v) if isinstance(v, tuple) else v
                                       for k, v in commands.__dict__.items()}),
        noise_config=config_dict.create(
            level=1.0,  # 0.0: noiseless observations
            scales=config_dict.create(**perturbations.OBSERVATION_NOISE_SCALES),  # the robust gate's too
        ),
        reward_config=config_dict.create(
            scales=config_dict.create(
                tracking_lin_vel=1.0,   # exp(-|cmd_xy - v_xy|² / σ)
                tracking_lin_vel_fine=0.0,  # the same with σ_lin_vel_fine (sharp); off unless a run asks for it
                tracking_lin_vel_average=0.0,  # exp(-|ē_xy|² / σ_lin_vel_average), ē_xy the low-passed planar error; off unless asked
                tracking_ang_vel=0.5,   # exp(-(cmd_wz - ω_z)² / σ_ang_vel)
                tracking_ang_vel_fine=0.0,  # the same with σ_ang_vel_fine (sharp); off unless a run asks for it
                tracking_ang_vel_average=0.0,  # exp(-ē² / σ_ang_vel_average), ē the low-passed yaw error; off unless asked
                survival=0.25,          # 1 per step alive
                base_height=-10.0,      # (h - target)²
                orientation=-2.0,       # |gravity_xy|² in the body frame
                lin_vel_z=-0.5,         # v_z²
                ang_vel_xy=-0.05,       # |ω_xy|²
                torques=-2e-5,          # Σ τ² (legs)
                action_rate=-0.1,       # Σ (a_t - a_t-1)²
                energy=-1e-4,           # Σ |τ q̇| (legs)
                feet_slip=-0.1,         # Σ contact · |v_foot,xy|²
                feet_swing=1.0,         # feet whose contact matches the gait phase (swing in the air, stance down)
                feet_distance=-1.0,     # clip(min_distance - lateral foot distance, 0, 0.1)
                joint_limits=-1.0,      # Σ distance beyond the soft joint limits
                collision=-1.0,         # feet touching each other
                stand_still=-0.5,       # Σ |q_legs - default| while commanded to stand
                termination=-1.0,       # 1 on a fall
            ),
            tracking_sigma=0.25,
            # at 0.25, a sideways walk at a third of its 0.3 m/s command keeps ~85% of the term; at 0.0625, ~half
            tracking_sigma_lin_vel_fine=0.0625,
            # a walk 0.1 m/s short of its command on average keeps e^-1 of it; the gait's sway averages out
            tracking_sigma_lin_vel_average=0.01,
            lin_vel_error_average_seconds=0.8,  # about one gait period at 1.25 Hz
            # the yaw-rate term's own σ: at 0.25, a forward walk that drifts 0.18 rad/s keeps 88%
            # of the term and walks a circle. A σ of 0.0625 alone made the drift cost but left a
            # robot that does not turn nearly nothing to climb (exp(-4)): two seeds had not learnt
            # the turn in place by step 25000 (docs/reward-tuning.md); hence a second, sharp term
            # beside the broad one.
            tracking_sigma_ang_vel=0.25,
            tracking_sigma_ang_vel_fine=0.0625,
            tracking_sigma_ang_vel_average=0.01,  # a 0.1 rad/s drift keeps e^-1 of it
            yaw_error_average_seconds=0.8,  # about one gait period at 1.25 Hz
            base_height_target=0.65,
            min_feet_distance=0.18,
            soft_joint_limit_factor=0.95,
        ),
        termination=config_dict.create(min_base_height=0.35, max_tilt_cos=0.5),
        push_config=config_dict.create(
            enable=True, interval_range=list(perturbations.PUSH_INTERVAL),
            magnitude_range=list(perturbations.PUSH_SPEED),  # the robust gate's ranges
            # native backend only: kicks scaled by a level in [0, 1] that follows how long episodes
            # last (envs/playground/push_curriculum.py), so a policy that cannot stand yet is not kicked over
            curriculum=config_dict.create(enable=False, start=0.0, raise_above=0.8, lower_below=0.5, step=0.05),
        ),
        randomization=config_dict.create(
            # used when the adapter's `domain_randomization` is on; each kind has its switch. The
            # ranges are the robust gate's (sim2real/t1/perturbations.py), so the two cannot drift.
            floor_friction=True, floor_friction_range=list(GATE_RANGES.floor_friction),
            link_masses=True, link_mass_scale=list(GATE_RANGES.link_mass),  # mass and inertia, per link
            payload=True, payload_range=list(GATE_RANGES.payload),  # kg on the trunk
            joint_offsets=True, joint_offset_range=list(GATE_RANGES.joint_offset),
            gains=True, kp_scale=list(GATE_RANGES.kp), kd_scale=list(GATE_RANGES.kd),
            # False: drawn once per env for the run (64 envs see 64 robots). True (native backend
            # only): drawn again whenever an env resets, as the robust gate draws one per trial.
            redraw_each_episode=False,
        ),
        action_delay=config_dict.create(
            # policy steps between the policy's output and the PD targets, drawn per episode
            enable=False, steps_range=[int(v) for v in GATE_RANGES.action_delay],
        ),
    )


def control_from(config) -> t1.T1Control:
    control = t1.T1Control.from_dict(config.control.to_dict())
    if config.action_bounds not in t1.ACTION_BOUNDS:
        raise ValueError(f"action_bounds={config.action_bounds!r}: choose one of {', '.join(t1.ACTION_BOUNDS)}")
    if config.action_bounds == "joint_limits":
        control = control.joint_limits_bounds()
    control.check()
    return control


def commands_from(config) -> t1.CommandSpec:
    fields = t1.CommandSpec.__dataclass_fields__
    commands = t1.CommandSpec(**{k: tuple(v) if isinstance(v, (list, tuple)) else v
                                 for k, v in config.commands.to_dict().items() if k in fields})
    commands.check()
    return commands


def check_rates(config, control: t1.T1Control) -> None:
    """Rates come from `control.sim_dt` and `control.decimation` alone: the bundle carries those."""
    if int(config.action_repeat) != 1:
        raise ValueError(f"action_repeat={config.action_repeat}: the T1 policy rate is set by control.decimation "
                         "(physics steps per policy step), which the deploy configuration carries; keep action_repeat=1")
    defaults = default_config()
    changed = (config.ctrl_dt, config.sim_dt) != (defaults.ctrl_dt, defaults.sim_dt)
    if changed and (config.ctrl_dt, config.sim_dt) != (control.ctrl_dt, control.sim_dt):
        raise ValueError(f"ctrl_dt/sim_dt are derived from control.sim_dt and control.decimation "
                         f"({control.ctrl_dt}/{control.sim_dt}); override those instead")


def deploy_spec(config_overrides: dict[str, Any] | None = None) -> t1.DeploySpec:
    """The deployment contract of a training run with these (flat) Playground config overrides."""
    config = default_config().lock()
    if config_overrides:
        config.update_from_flattened_dict(_flat(config_overrides))
    control = control_from(config)
    check_rates(config, control)
    return t1.DeploySpec(control, commands_from(config))


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return flat


MODEL_CACHE_ENV = "FAST_TD3_MODEL_CACHE"


def model_cache_dir() -> Path:
    """Where built scene models are kept: `FAST_TD3_MODEL_CACHE`, else `~/.cache/fast-td3/models`."""
    chosen = os.environ.get(MODEL_CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fast-td3" / "models"
    return Path(chosen).expanduser()


def _scene_key(terrain: str, menagerie_path: str | None) -> str:
    """What the scene model depends on: the terrain, MuJoCo's and Playground's versions, the robot models' folder."""
    import importlib.metadata

    from envs.playground.menagerie import find_menagerie

    try:
        playground = importlib.metadata.version("playground")
    except importlib.metadata.PackageNotFoundError:
        playground = "absent"  # never cached under this key: the build below needs Playground
    parts = [terrain, mujoco.__version__, playground, str(find_menagerie(menagerie_path))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def scene_model(terrain: str, menagerie_path: str | None = None, cache_dir: Path | None = None) -> mujoco.MjModel:
    """Playground's T1 scene for a terrain (robot, floor, sensors) as a MuJoCo model.

    Built through Playground's public env API, which imports Playground and JAX (about 7 s
    on 2 cores), then kept as a binary model file: what runs no MJX (the native backend, the
    sim-to-sim gate, play, export) loads it in milliseconds afterwards.
    """
    cached = (cache_dir or model_cache_dir()) / f"t1_{terrain}_{_scene_key(terrain, menagerie_path)}.mjb"
    if cached.is_file():
        try:
            return mujoco.MjModel.from_binary_path(str(cached))
        except (ValueError, RuntimeError, OSError):
            pass  # unreadable (a partial copy, another MuJoCo): built again below
    from mujoco_playground import registry

    from envs.playground.menagerie import use_menagerie

    task = PLAYGROUND_SCENES[terrain]
    use_menagerie(task, menagerie_path)
    scene = registry.load(task, config_overrides={"impl": "jax"})
    model = mujoco.MjModel.from_xml_string(Path(scene.xml_path).read_text(), assets=scene.model_assets)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f".{cached.name}.{os.getpid()}")
        mujoco.mj_saveModel(model, str(partial), None)
        os.replace(partial, cached)  # whole or absent, also with runs building it at once
    except OSError:
        pass  # a read-only cache: built each time
    return model


def build_mj_model(terrain: str, control: t1.T1Control, menagerie_path: str | None = None) -> mujoco.MjModel:
    """The T1 model with `control`'s PD loop: one position actuator per joint (SDK order) with
    gain `stiffness`, velocity gain `damping` and force limit `torque_limit`; no passive
    joint damping on top (the deploy PD loop holds all of it). Native MuJoCo and MJX both
    run this model."""
    model = scene_model(terrain, menagerie_path)
    names = [model.actuator(i).name for i in range(model.nu)]
    if names != list(t1.SDK_JOINT_NAMES):
        raise RuntimeError(f"Playground's T1 actuators are not in SDK order: {names}")
    model.opt.timestep = control.sim_dt
    model.actuator_ctrllimited[:] = 0  # the robot sends targets beyond the joint range unclipped
    for i, name in enumerate(t1.SDK_JOINT_NAMES):
        joint = model.joint(name)
        model.actuator_gainprm[i, 0] = control.stiffness[i]
        model.actuator_biasprm[i, :3] = (0.0, -control.stiffness[i], -control.damping[i])
        model.dof_damping[joint.dofadr[0]] = 0.0
        model.jnt_actfrclimited[joint.id] = 1
        model.jnt_actfrcrange[joint.id] = (-control.torque_limit[i], control.torque_limit[i])
    return model


def initial_qpos(model: mujoco.MjModel, control: t1.T1Control) -> np.ndarray:
    qpos = np.array(model.keyframe("home").qpos)
    qpos[7:] = control.default_pose
    return qpos


class ModelIndex:
    """Where the task reads the T1 model's state: sites, sensor addresses, soft joint limits.
    Both backends (MJX here, native MuJoCo in `envs/playground/t1_native.py`) index with it."""

    def __init__(self, model: mujoco.MjModel, soft_joint_limit_factor: float) -> None:
        self.imu_site = model.site(IMU_SITE).id
        self.feet_sites = np.array([model.site(name).id for name in FEET_SITES])
        self.foot_contact_adr = np.array([[model.sensor_adr[model.sensor(n).id] for n in side]
                                          for side in FOOT_CONTACT_SENSORS])
        self.feet_touch_adr = model.sensor_adr[model.sensor("left_foot_right_foot_found").id]
        self.gyro_adr = sensor_indices(model, "gyro")
        self.local_linvel_adr = sensor_indices(model, "local_linvel")
        self.foot_linvel_adr = np.stack([sensor_indices(model, f"{site}_global_linvel") for site in FEET_SITES])
        self.floor_geom = model.geom("floor").id
        lower, upper = model.jnt_range[1:].T
        mid, half = (lower + upper) / 2, (upper - lower) / 2 * soft_joint_limit_factor
        self.soft_lower, self.soft_upper = mid - half, mid + half
        self.legs = np.array(t1.LEG_SDK_INDICES)


# ------------------------------------------------------------------ the task's maths, one definition for both backends
# Functions of the array module `xp` (jax.numpy for MJX, numpy for native MuJoCo); every
# argument has the same leading batch axes (none for one MJX env, [num_envs] natively).
PRIVILEGED_LAYOUT = (
    ("actor", t1.OBSERVATION_SIZE),  # the noiseless actor observation
    ("local_linvel", 3),
    ("base_height", 1),
    ("contacts", 2),
    ("feet_air_time", 2),
    ("feet_height", 2),
    ("feet_linvel", 6),
    ("torques", t1.NUM_LEG_JOINTS),  # applied leg torques / torque limits
    ("target_command", 3),  # the joystick's, before smoothing
    ("gait_frequency", 1),
)
"""The critic's privileged observation, block by block, in order."""


def mirror_maps() -> dict[str, t1.Mirror]:
    """Left-right mirrors of the actor observation, the critic's (PRIVILEGED_LAYOUT) and the
    action (`algo.symmetry`); the reward is invariant under them (tests/test_symmetry.py)."""
    swap = ((1, 0), (1.0, 1.0))
    by_block = {
        "actor": t1.observation_mirror(),
        "local_linvel": t1.VECTOR_MIRROR,
        "base_height": ((0,), (1.0,)),
        "contacts": swap,
        "feet_air_time": swap,
        "feet_height": swap,
        "feet_linvel": ((3, 4, 5, 0, 1, 2), (1.0, -1.0, 1.0) * 2),
        "torques": t1.action_mirror(),
        "target_command": t1.COMMAND_MIRROR,
        "gait_frequency": ((0,), (1.0,)),
    }
    return {"obs": t1.observation_mirror(),
            "critic_obs": t1.concat_mirrors([by_block[name] for name, _ in PRIVILEGED_LAYOUT]),
            "actions": t1.action_mirror()}


def contacts_from(xp, sensordata, index: ModelIndex):
    """Each foot touching the floor: any of its four contact sensors fires, `[..., 2]`."""
    return xp.any(sensordata[..., index.foot_contact_adr] > 0, axis=-1)


def feet_gait_signals(xp, sensordata, index: ModelIndex) -> dict:
    """The feet, for the gait metrics (`envs/playground/`'s GaitSignals adds base, joints and torques)."""
    return {"foot_vel_xy": sensordata[..., index.foot_linvel_adr][..., :2],
            "foot_contact": contacts_from(xp, sensordata, index)}


def fallen(xp, termination, projected_gravity, qpos, qvel):
    """A fall: the base tilted beyond `max_tilt_cos`, below `min_base_height`, or a diverged state."""
    tilted = -projected_gravity[..., 2] < termination.max_tilt_cos
    low = qpos[..., 2] < termination.min_base_height
    return tilted | low | xp.any(xp.isnan(qpos), axis=-1) | xp.any(xp.isnan(qvel), axis=-1)


def privileged_observation(xp, clean_actor, *, qpos, sensordata, site_xpos, leg_torques, contacts, feet_air_time,
                           target_command, gait_frequency, index: ModelIndex, torque_limit):
    """The critic's observation (PRIVILEGED_LAYOUT) from the state and the task's info."""
    feet_vel = sensordata[..., index.foot_linvel_adr]
    parts = {
        "actor": clean_actor,
        "local_linvel": sensordata[..., index.local_linvel_adr],
        "base_height": qpos[..., 2:3],
        "contacts": contacts.astype(clean_actor.dtype),
        "feet_air_time": feet_air_time,
        "feet_height": site_xpos[..., index.feet_sites, 2],
        "feet_linvel": feet_vel.reshape(feet_vel.shape[:-2] + (6,)),
        "torques": leg_torques / torque_limit,
        "target_command": target_command,
        "gait_frequency": gait_frequency,
    }
    return xp.concatenate([parts[name].astype(clean_actor.dtype) for name, _ in PRIVILEGED_LAYOUT], axis=-1)


def max_action_delay(config) -> int:
    """The longest action delay the config can draw (at least 1: the queue keeps one slot)."""
    return max(1, int(config.action_delay.steps_range[1]))


def delayed_action(xp, action, delay, pending):
    """The action the PD loop receives when it lags the policy by `delay` steps, `[...]`-batched.

    `pending[..., k, :]` holds the policy's output of k+1 steps ago and is shifted in place of
    a queue (updated by the caller: `pending = shift_pending(xp, pending, action)`); a delay of
    0 passes the action through. The robust gate's robot (`sim2real/mujoco_robot.py`) queues
    the same way, starting from zeros."""
    steps = pending.shape[-2]
    lagged = xp.take_along_axis(pending, xp.clip(delay - 1, 0, steps - 1)[..., None, None].astype(int), axis=-2)
    return xp.where((delay > 0)[..., None], lagged[..., 0, :], action)


def shift_pending(xp, pending, action):
    """The queue after this step: the newest action first, the oldest dropped."""
    return xp.concatenate([action[..., None, :], pending[..., :-1, :]], axis=-2)


def sensor_indices(model: mujoco.MjModel, name: str) -> np.ndarray:
    """Where a named sensor's values lie in `sensordata`."""
    sensor = model.sensor(name)
    return np.arange(model.sensor_adr[sensor.id], model.sensor_adr[sensor.id] + model.sensor_dim[sensor.id])
