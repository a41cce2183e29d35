"""What a robot meets that a nominal simulation does not: the T1's perturbation ranges, one definition.

The robust sim-to-sim gate (`sim2real/robust.py`) plays each trial under one draw from these
ranges; the training env takes its observation noise and pushes from here too, so the gate
and the training cannot drift apart on those. Defaults follow the randomisation the field
trains a T1 with (holosoma's list): base-velocity pushes up to 1 m/s every 5-10 s, floor
friction 0.3-1.0, link masses x0.9-1.2 plus a trunk payload of -1..+3 kg, PD gains x0.9-1.1,
0-1 policy steps of action delay, ±0.02 rad joint-encoder offsets and sensor noise at the
training env's scales. Any kind can be switched off (`None`) or given another range.

Each kind draws from its own random stream, `SeedSequence([seed, trial, kind])`: switching
one kind off or changing its range leaves every other draw of the trial as it was, and
trial K is the same whether 1 or 100 trials are played.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from sim2real import t1

Range = tuple[float, float]

OBSERVATION_NOISE_SCALES = {"gravity": 0.05, "gyro": 0.2, "joint_pos": 0.03, "joint_vel": 1.5}
"""Uniform sensor noise half-widths (projected gravity, gyro [rad/s], joint angles [rad], joint
velocities [rad/s]) of the training env at `noise_config.level=1`; the gate draws at the same scales."""
PUSH_SPEED: Range = (0.1, 1.0)
"""Planar base-velocity kick [m/s], added in a uniformly random direction."""
PUSH_INTERVAL: Range = (5.0, 10.0)
"""Seconds between kicks."""

PHYSICS_VARIANTS = {
    "training": "the training model as it is (Euler, 2 ms, pyramidal cone, 3 solver iterations)",
    "implicitfast": "MuJoCo's implicitfast integrator (damping and Coriolis integrated implicitly)",
    "rk4": "4th-order Runge-Kutta integration",
    "elliptic": "elliptic friction cones with 50 solver and line-search iterations (a stiffer, more exact contact)",
}
"""Named physics settings unlike training's: each stands in for a second simulator."""

KINDS = ("push", "floor_friction", "link_mass", "payload", "kp", "kd", "action_delay", "joint_offset",
         "obs_noise")
"""Every kind of perturbation, in the order of their random streams (never reorder: it changes the draws)."""


@dataclass(frozen=True)
class PerturbationRanges:
    """The range each kind is drawn from; `None` switches it off."""

    push: Range | None = PUSH_SPEED
    """Base-velocity kick size [m/s]."""
    push_interval: Range = PUSH_INTERVAL
    """Seconds between kicks (the first one too)."""
    floor_friction: Range | None = (0.3, 1.0)
    """Sliding friction coefficient of the floor."""
    link_mass: Range | None = (0.9, 1.2)
    """Scale of each link's mass and inertia, drawn per link."""
    payload: Range | None = (-1.0, 3.0)
    """Mass added to the trunk [kg]."""
    kp: Range | None = (0.9, 1.1)
    """Scale of each joint's PD stiffness, drawn per joint."""
    kd: Range | None = (0.9, 1.1)
    """Scale of each joint's PD damping, drawn per joint."""
    action_delay: Range | None = (0, 1)
    """Policy steps between the policy's output and the PD targets (an integer drawn in the range)."""
    joint_offset: Range | None = (-0.02, 0.02)
    """Leg joint-encoder offset [rad]: the observation and the PD loop see q + offset."""
    obs_noise: float | None = 1.0
    """Level of sensor noise, times OBSERVATION_NOISE_SCALES (1: the training env's)."""
    physics: str = "training"
    """A name from PHYSICS_VARIANTS."""

    def check(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("physics", "obs_noise") or value is None:
                continue
            low, high = value
            if not (np.isfinite(low) and np.isfinite(high) and low <= high):
                raise ValueError(f"{f.name}: range {list(value)} must be two finite numbers, low <= high")
        if self.push_interval[0] <= 0:
            raise ValueError(f"push_interval: {list(self.push_interval)} must be positive seconds")
        for name in ("link_mass", "kp", "kd", "floor_friction"):
            value = getattr(self, name)
            if value is not None and value[0] <= 0:
                raise ValueError(f"{name}: {list(value)} must stay above 0")
        if self.action_delay is not None and (self.action_delay[0] < 0 or self.action_delay[0] != int(
                self.action_delay[0]) or self.action_delay[1] != int(self.action_delay[1])):
            raise ValueError(f"action_delay: {list(self.action_delay)} must be whole policy steps >= 0")
        if self.obs_noise is not None and not (np.isfinite(self.obs_noise) and self.obs_noise >= 0):
            raise ValueError(f"obs_noise: {self.obs_noise} must be a level >= 0")
        if self.physics not in PHYSICS_VARIANTS:
            raise ValueError(f"physics={self.physics!r} is not a variant; choose one of {', '.join(PHYSICS_VARIANTS)}")

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def without(self, *kinds: str) -> "PerturbationRanges":
        return replace(self, **{k: None for k in kinds})


NOMINAL = PerturbationRanges(push=None, floor_friction=None, link_mass=None, payload=None, kp=None, kd=None,
                             action_delay=None, joint_offset=None, obs_noise=None)
"""No perturbation at all: a trial under NOMINAL plays exactly the nominal gate."""


@dataclass
class TrialDraw:
    """Every value one trial drew (None: that kind was off). JSON-ready."""

    trial: int
    seed: int
    physics: str = "training"
    floor_friction: float | None = None
    link_mass: list[float] | None = None
    """Per link, bodies 1.. of the model."""
    payload: float | None = None
    kp: list[float] | None = None
    """Per joint, SDK order."""
    kd: list[float] | None = None
    action_delay: int = 0
    joint_offset: list[float] | None = None
    """Per leg joint, SDK order 11-22."""
    obs_noise: float = 0.0
    pushes: list[dict[str, float]] = field(default_factory=list)
    """Each kick: {"time" [s], "vx", "vy" [m/s], "speed"}."""

    def summary(self) -> str:
        """The draw in one line of words, for the report of a failed trial."""
        parts = [f"trial {self.trial}"]
        if self.physics != "training":
            parts.append(f"physics={self.physics}")
        if self.floor_friction is not None:
            parts.append(f"friction {self.floor_friction:.2f}")
        if self.payload is not None:
            parts.append(f"payload {self.payload:+.2f} kg")
        for name in ("link_mass", "kp", "kd"):
            values = getattr(self, name)
            if values is not None:
                parts.append(f"{name} x{min(values):.2f}..{max(values):.2f}")
        if self.joint_offset is not None:
            parts.append(f"offsets ±{max(abs(v) for v in self.joint_offset):.3f} rad")
        parts.append(f"delay {self.action_delay}")
        if self.obs_noise:
            parts.append(f"noise x{self.obs_noise:g}")
        if self.pushes:
            parts.append("pushes " + ", ".join(f"{p['speed']:.2f} m/s at {p['time']:.1f} s" for p in self.pushes))
        return ", ".join(parts)


def _stream(seed: int, trial: int, kind: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, trial, KINDS.index(kind)]))


def noise_stream(seed: int, trial: int) -> np.random.Generator:
    """The trial's sensor-noise stream (one draw per sensor per step; only its seed is recorded)."""
    return _stream(seed, trial, "obs_noise")


def draw_trial(ranges: PerturbationRanges, seed: int, trial: int, num_links: int, duration: float) -> TrialDraw:
    """One trial's draw: each switched-on kind from its own stream (see the module's doc)."""
    draw = TrialDraw(trial=trial, seed=seed, physics=ranges.physics)
    if ranges.floor_friction is not None:
        draw.floor_friction = float(_stream(seed, trial, "floor_friction").uniform(*ranges.floor_friction))
    if ranges.link_mass is not None:
        draw.link_mass = _stream(seed, trial, "link_mass").uniform(*ranges.link_mass, num_links).tolist()
    if ranges.payload is not None:
        draw.payload = float(_stream(seed, trial, "payload").uniform(*ranges.payload))
    if ranges.kp is not None:
        draw.kp = _stream(seed, trial, "kp").uniform(*ranges.kp, t1.NUM_JOINTS).tolist()
    if ranges.kd is not None:
        draw.kd = _stream(seed, trial, "kd").uniform(*ranges.kd, t1.NUM_JOINTS).tolist()
    if ranges.action_delay is not None:
        low, high = int(ranges.action_delay[0]), int(ranges.action_delay[1])
        draw.action_delay = int(_stream(seed, trial, "action_delay").integers(low, high + 1))
    if ranges.joint_offset is not None:
        draw.joint_offset = _stream(seed, trial, "joint_offset").uniform(*ranges.joint_offset,
                                                                         t1.NUM_LEG_JOINTS).tolist()
    if ranges.obs_noise is not None:
        draw.obs_noise = float(ranges.obs_noise)
    if ranges.push is not None:
        rng, time = _stream(seed, trial, "push"), 0.0
        while True:
            time += float(rng.uniform(*ranges.push_interval))
            if time >= duration:
                break
            speed, angle = float(rng.uniform(*ranges.push)), float(rng.uniform(0.0, 2 * np.pi))
            draw.pushes.append({"time": round(time, 6), "vx": speed * np.cos(angle), "vy": speed * np.sin(angle),
                                "speed": speed})
    return draw


def apply_physics_variant(model, name: str) -> None:
    """Set `model.opt` to the named variant of PHYSICS_VARIANTS."""
    import mujoco

    if name == "implicitfast":
        model.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    elif name == "rk4":
        model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    elif name == "elliptic":
        model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
        model.opt.iterations, model.opt.ls_iterations = 50, 50
    elif name != "training":
        raise ValueError(f"physics={name!r} is not a variant; choose one of {', '.join(PHYSICS_VARIANTS)}")


def apply_to_model(model, draw: TrialDraw, control: t1.T1Control, floor_geom: int) -> np.ndarray:
    """Write the draw's physics into a T1 model built for `control` (`t1_lowdim.build_mj_model`);
    returns the 23 joint-encoder offsets (zero off the legs) the observation must add.

    Gains scale the actuators' PD terms; an encoder offset δ moves the PD loop's measured angle
    (`bias0 = -kp·δ`), as the training env's randomiser does. Call `mujoco.mj_setConst` after."""
    apply_physics_variant(model, draw.physics)
    if draw.floor_friction is not None:
        model.geom_friction[floor_geom, 0] = draw.floor_friction
    if draw.link_mass is not None:
        scale = np.asarray(draw.link_mass)
        model.body_mass[1:] *= scale
        model.body_inertia[1:] *= scale[:, None]
    if draw.payload is not None:
        trunk = int(model.jnt_bodyid[0])  # the floating base's body
        model.body_mass[trunk] = max(model.body_mass[trunk] + draw.payload, 1e-3)
    kp, kd = np.asarray(control.stiffness), np.asarray(control.damping)
    if draw.kp is not None:
        kp = kp * np.asarray(draw.kp)
    if draw.kd is not None:
        kd = kd * np.asarray(draw.kd)
    model.actuator_gainprm[:, 0] = kp
    model.actuator_biasprm[:, 1], model.actuator_biasprm[:, 2] = -kp, -kd
    offsets = np.zeros(t1.NUM_JOINTS)
    if draw.joint_offset is not None:
        offsets[list(t1.LEG_SDK_INDICES)] = draw.joint_offset
    model.actuator_biasprm[:, 0] = -kp * offsets
    return offsets


def noisy(rng: np.random.Generator, value: np.ndarray, level: float, sensor: str) -> np.ndarray:
    """`value` plus uniform noise of half-width `level * OBSERVATION_NOISE_SCALES[sensor]`."""
    if not level:
        return value
    return value + (2 * rng.random(np.shape(value)) - 1) * level * OBSERVATION_NOISE_SCALES[sensor]


RANGE_OPTIONS = tuple(f.name for f in fields(PerturbationRanges) if f.name not in ("physics", "obs_noise"))
PERTURBATION_OPTIONS = (*RANGE_OPTIONS, "obs_noise", "physics")
"""The options that change the perturbations (`fast-td3-sim2sim robust=true <option>=...`,
`gate.perturbations.<option>` in a training run)."""


def _range(key: str, text: str, integer: bool = False) -> tuple[float, float] | None:
    if text.lower() in ("off", "none", "false"):
        return None
    parts = text.split(",")
    try:
        values = tuple(int(p) if integer else float(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 2:
        example = "0,1" if integer else "0.3,1.0"
        raise ValueError(f"{key}={text}: give a range LOW,HIGH (e.g. {key}={example}) or {key}=off")
    return values


def ranges_from_options(options: dict[str, str]) -> PerturbationRanges:
    """PerturbationRanges from `key=value` options: `<kind>=LOW,HIGH` or `<kind>=off`, `obs_noise=LEVEL|off`,
    `physics=<variant>`; kinds not named keep their defaults."""
    changes: dict[str, Any] = {}
    for key in RANGE_OPTIONS:
        if key in options:
            value = _range(key, options[key], integer=key == "action_delay")
            if value is None and key == "push_interval":
                raise ValueError("push_interval cannot be off; switch pushes off with push=off")
            changes[key] = value
    if "obs_noise" in options:
        text = options["obs_noise"]
        try:
            changes["obs_noise"] = None if text.lower() in ("off", "none", "false") else float(text)
        except ValueError:
            raise ValueError(f"obs_noise={text}: give a level (1 = the training env's noise) or off") from None
    if "physics" in options:
        changes["physics"] = options["physics"]
    ranges = replace(PerturbationRanges(), **changes)
    ranges.check()
    return ranges
