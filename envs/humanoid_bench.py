"""HumanoidBench (Unitree H1 with dexterous hands, G1; whole-body tasks) behind the env contract.

HumanoidBench registers gymnasium ids `{robot}-{task}-v0` (e.g. `h1hand-walk-v0`) when
`humanoid_bench` is imported, and runs on CPU MuJoCo, one env stepped after another. It
pins mujoco 3.1.6, so it lives in its own virtual environment (the install commands are in
`envs/registry.py`, printed when it is missing, and in docs/suites.md).

The adapter is `GymnasiumVecEnv` (envs/gymnasium.py) with HumanoidBench's settings:
- workers import `humanoid_bench` before `gym.make`, and each makes its envs exactly once
  (under mujoco 3.1.6 every `gym.make` leaks file descriptors);
- `render_mode=None` unless a video is asked for (HumanoidBench defaults to "rgb_array");
- the time limit of `time_limit(task)`: 500 steps for the push, cube, basketball,
  kitchen and insert tasks, 1000 otherwise;
- per-env seeds derived from the run seed reach every env (the reference's never did),
  NumPy's global generator included, which several tasks draw their goals from;
- vectorization "processes" by default: envs sharded over one worker per CPU core with
  observations in shared memory. SB3's `SubprocVecEnv` ("subproc": a process per env,
  observations pickled through pipes) stays available; it is slower and needs far more
  memory (docs/performance.md, scripts/bench_envs.py).

Gait signals (`HumanoidBenchVecEnv.gait_signals()`, the optional eval-env hook of
`fast_td3/measures/gait_metrics.py`) are read from each env's MuJoCo `model`/`data` in its worker by
the `GaitSignals` wrapper, right after the env's `step` and before any auto-reset, so rows of
envs that just finished describe their last state (as final observations do). Training pays
nothing for them: a worker reads them after every step only once the hook has been called
(the eval env's first evaluation switches its own workers on; the training env never calls
it); before that it reads them only at episode ends, so that the very first call is exact too.
What they are (`GaitSignalsReader`): the base is the robot's root free joint (the pelvis of
h1/h1hand/g1); `J` runs over the robot's actuators (61 for h1hand, its 8 tendon-driven finger
actuators included: their "joint" is the tendon coupling two finger joints); feet are the
`left_foot`/`right_foot` sites. HumanoidBench tasks have no velocity command and no target
base height (walk and run reward a forward centre-of-mass speed above a floor, stand and walk
a head height), so `command` and `base_height_target` are not reported and the tracking and
base-height metrics are not logged for this suite.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from envs.gait_signals import free_base_signals
from envs.gymnasium import GymnasiumVecEnv, make_registered
from envs.random_streams import PrivateRandomStreams
from envs.registry import EnvOptionError

PACKAGE = "humanoid_bench"
ROBOTS = ("h1hand", "h1", "g1", "h1simplehand", "h1strong", "h1touch")
SHORT_TASKS = ("push", "cube", "basketball", "kitchen", "insert_normal", "insert_small")
"""Tasks whose episodes last 500 steps (the others: 1000), as HumanoidBench registers them."""


def time_limit(task: str) -> int:
    """Episode length of a HumanoidBench id, e.g. 500 for `h1hand-push-v0`."""
    name = task.split("-", 1)[1].rsplit("-", 1)[0] if task.count("-") >= 2 else task
    return 500 if name in SHORT_TASKS else 1000


class OwnGlobalRandomState(gym.Wrapper):
    """Gives the env its own `np.random` state, seeded by `reset(seed=...)`.

    Several HumanoidBench tasks (push, reach, cube, package, basketball, ...) draw goals and
    object positions from NumPy's global generator, not the env's `np_random`: forked
    workers would repeat each other's goals and `reset(seed)` would not repeat them. The
    global state is swapped in around every call, so envs sharing a process stay apart.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._streams = PrivateRandomStreams(numpy=True)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._streams.seed_numpy(seed)
        with self._streams.active():
            return self.env.reset(seed=seed, options=options)

    def step(self, action):
        with self._streams.active():
            return self.env.step(action)


class GaitSignalsReader:
    """The gait signals (`fast_td3/measures/gait_metrics.py` keys) of one MuJoCo env, from its
    `unwrapped.model` and `.data`, read without touching the simulation (no `mj_forward`: it
    would move the solver's warm start).

    - base (the first joint, when it is a free joint: HumanoidBench's pelvis, Humanoid-v5's
      torso): `base_height` qpos z (m, above the world origin: the floor is at z = 0),
      `base_pos_xy`, `projected_gravity` (world -z in the base frame), `base_lin_vel_xy` (the
      free joint's world linear velocity rotated by minus the base's yaw), `base_ang_vel_z`
      (world-frame yaw rate);
    - per actuator, `J` = `model.nu`: `torques` = `data.actuator_force` x gear (N m for hinge
      joints), `joint_pos`/`joint_vel` the transmission's position and velocity (a joint's
      qpos/qvel; a fixed tendon's sum of coefficient x joint), `torque_limits` = |gear| x the
      actuator's force limit (`forcerange` where force-limited; |gain| x max |ctrlrange| for a
      plain motor, as g1's; also the joint's `actfrcrange`), inf where unlimited,
      `joint_limits` the joint's (or tendon's) range, (-inf, inf) where unlimited;
    - feet (the `left_foot` and `right_foot` sites, when the model has both):
      `foot_vel_xy`, the site's world-frame horizontal velocity, and `foot_contact`, a
      contact between the site's body and anything that is not part of the robot;
    - `dt`: the env's control step (`unwrapped.dt`).

    qpos and qvel are the state the step reached; actuator forces, contacts and foot
    velocities are MuJoCo's values of the step's last physics substep (computed before its
    integration, as HumanoidBench's own rewards read them).
    """

    FEET = ("left_foot", "right_foot")

    def __init__(self, env: gym.Env) -> None:
        import mujoco

        self._mujoco = mujoco
        unwrapped = env.unwrapped
        m = self.model = unwrapped.model
        self.data = unwrapped.data
        self.dt = float(unwrapped.dt)
        self.has_base = m.njnt > 0 and int(m.jnt_type[0]) == int(mujoco.mjtJoint.mjJNT_FREE)
        self._qpos_adr, self._dof_adr = (int(m.jnt_qposadr[0]), int(m.jnt_dofadr[0])) if self.has_base else (0, 0)
        self._robot_root = int(m.body_rootid[m.jnt_bodyid[0]]) if m.njnt else 0

        nu = m.nu
        self._gear = m.actuator_gear[:, 0].copy()
        self._pos_map = np.zeros((nu, m.nq))
        self._vel_map = np.zeros((nu, m.nv))
        self._from_actuator = np.zeros(nu, dtype=bool)  # transmissions without a linear map
        self._joint_clamp = np.full(nu, math.inf)  # joints' actuator-torque limits (applied after the actuator's)
        joint_limits = np.tile([-math.inf, math.inf], (nu, 1))
        force_limit = np.where(m.actuator_forcelimited.astype(bool), np.abs(m.actuator_forcerange).max(1), math.inf)
        motor = ((m.actuator_gaintype == int(mujoco.mjtGain.mjGAIN_FIXED))
                 & (m.actuator_biastype == int(mujoco.mjtBias.mjBIAS_NONE)) & m.actuator_ctrllimited.astype(bool))
        motor_limit = np.abs(m.actuator_gainprm[:, 0]) * np.abs(m.actuator_ctrlrange).max(1)  # force = gain x ctrl
        force_limit = np.where(motor, np.minimum(force_limit, motor_limit), force_limit)
        torque_limits = np.abs(self._gear) * force_limit
        sliding = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
        joint_transmissions = (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT))
        actfrclimited = getattr(m, "jnt_actfrclimited", np.zeros(m.njnt))
        for i in range(nu):
            kind, obj = int(m.actuator_trntype[i]), int(m.actuator_trnid[i, 0])
            if kind in joint_transmissions and int(m.jnt_type[obj]) in sliding:
                self._pos_map[i, m.jnt_qposadr[obj]] = 1.0
                self._vel_map[i, m.jnt_dofadr[obj]] = 1.0
                if m.jnt_limited[obj]:
                    joint_limits[i] = m.jnt_range[obj]
                if actfrclimited[obj]:  # MuJoCo clamps the joint's total actuator torque to this
                    torque_limits[i] = min(torque_limits[i], np.abs(m.jnt_actfrcrange[obj]).max())
                    self._joint_clamp[i] = np.abs(m.jnt_actfrcrange[obj]).max()
                continue
            if kind == int(mujoco.mjtTrn.mjTRN_TENDON):
                wraps = range(m.tendon_adr[obj], m.tendon_adr[obj] + m.tendon_num[obj])
                fixed = all(int(m.wrap_type[k]) == int(mujoco.mjtWrap.mjWRAP_JOINT)
                            and int(m.jnt_type[m.wrap_objid[k]]) in sliding for k in wraps)
                if fixed:  # a fixed tendon: length = sum of coefficient x joint position
                    for k in wraps:
                        joint = m.wrap_objid[k]
                        self._pos_map[i, m.jnt_qposadr[joint]] += m.wrap_prm[k]
                        self._vel_map[i, m.jnt_dofadr[joint]] += m.wrap_prm[k]
                    if m.tendon_limited[obj]:
                        joint_limits[i] = m.tendon_range[obj]
                    continue
            self._from_actuator[i] = True  # MuJoCo's actuator length / gear (of the last substep)
        self._static = {"torque_limits": torque_limits, "joint_limits": joint_limits, "dt": self.dt}

        names = {m.site(i).name: i for i in range(m.nsite)}
        self._feet = [names[name] for name in self.FEET] if all(name in names for name in self.FEET) else []
        self._foot_bodies = np.array([m.site_bodyid[s] for s in self._feet], dtype=int)
        self._site_vel = np.zeros(6)

    def static(self) -> dict[str, Any]:
        """The `STATIC_KEYS` entries: `torque_limits` [J], `joint_limits` [J, 2], `dt`."""
        return dict(self._static)

    def read(self) -> dict[str, np.ndarray]:
        """The per-step signals of the current state (float64 arrays; `foot_contact` bool)."""
        m, d = self.model, self.data
        qpos, qvel = d.qpos, d.qvel
        out: dict[str, np.ndarray] = {}
        if self.has_base:
            a, v = self._qpos_adr, self._dof_adr
            base = free_base_signals(qpos[a : a + 7].copy(), qvel[v : v + 6].copy(), np)  # copies: d's buffers move on
            out.update({key: np.asarray(value) for key, value in base.items()})
        joint_pos, joint_vel = self._pos_map @ qpos, self._vel_map @ qvel
        if self._from_actuator.any():
            rows, gear = self._from_actuator, np.where(self._gear == 0, 1.0, self._gear)
            joint_pos[rows] = (d.actuator_length / gear)[rows]
            joint_vel[rows] = (d.actuator_velocity / gear)[rows]
        out["torques"] = np.clip(d.actuator_force * self._gear, -self._joint_clamp, self._joint_clamp)  # applied
        out["joint_pos"], out["joint_vel"] = joint_pos, joint_vel
        if self._feet:
            foot_vel = np.zeros((len(self._feet), 2))
            for f, site in enumerate(self._feet):
                self._mujoco.mj_objectVelocity(m, d, self._mujoco.mjtObj.mjOBJ_SITE, site, self._site_vel, 0)
                foot_vel[f] = self._site_vel[3:5]  # [angular, linear], world-aligned
            bodies = m.geom_bodyid[np.stack([d.contact.geom1, d.contact.geom2])]  # [2, ncon]
            outside = m.body_rootid[bodies] != self._robot_root  # the other side is not the robot
            contact = [bool(((bodies[0] == b) & outside[1] | (bodies[1] == b) & outside[0]).any())
                       for b in self._foot_bodies]
            out["foot_vel_xy"], out["foot_contact"] = foot_vel, np.array(contact)
        return out


class GaitSignals(gym.Wrapper):
    """Keeps the gait signals of the state each `step` reached, before any auto-reset (the
    vector env, or SB3's worker, resets this env after the step returns), for `gait_signals()`.

    A lazy switch keeps the training hot path free: until `gait_signals()` is first called
    a step reads them only when the episode ends (so the first call is exact for envs that
    just finished; the others have not moved since their step); after it, every step reads
    them. `gait_signals()` must follow a `step`.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._reader: GaitSignalsReader | None | bool = None  # False: not a MuJoCo env
        self._every_step = False
        self._last: dict[str, np.ndarray] | None = None

    def _gait_reader(self) -> GaitSignalsReader | None:
        if self._reader is None:
            unwrapped = self.env.unwrapped
            mujoco_env = hasattr(unwrapped, "model") and hasattr(unwrapped, "data") and hasattr(unwrapped, "dt")
            self._reader = GaitSignalsReader(self.env) if mujoco_env else False
        return self._reader or None

    def step(self, action):
        result = self.env.step(action)
        if self._every_step or result[2] or result[3]:
            reader = self._gait_reader()
            self._last = reader.read() if reader else None
        else:
            self._last = None
        return result

    def gait_signals(self) -> dict[str, np.ndarray]:
        """The per-step signals of the last step (and from now on, read at every step)."""
        self._every_step = True
        if self._last is not None:
            return self._last
        reader = self._gait_reader()
        return reader.read() if reader else {}

    def gait_static(self) -> dict[str, Any]:
        reader = self._gait_reader()
        return reader.static() if reader else {}


def with_gait_signals(env_factory: Callable[..., gym.Env], package: str | None, task: str, **kwargs: Any) -> gym.Env:
    """`env_factory(package, task, **kwargs)` wrapped in `GaitSignals` (module level: the
    workers may unpickle it)."""
    return GaitSignals(env_factory(package, task, **kwargs))


def make_humanoid_bench_env(package: str | None, task: str, **kwargs: Any) -> gym.Env:
    """`gym.make` a HumanoidBench task with its own global-RNG state (`OwnGlobalRandomState`),
    rendering with gymnasium 1.x's MuJoCo renderer.

    HumanoidBench renders with `renderer.render(mode, camera_id, camera_name)`, the
    gymnasium 0.29 signature; gymnasium 1.x fixes the camera when the renderer is built
    (from the same env attributes) and takes only the mode, so the extra arguments go.
    """
    env = make_registered(package, task, **kwargs)
    renderer = getattr(env.unwrapped, "mujoco_renderer", None)
    if renderer is not None and len(inspect.signature(renderer.render).parameters) == 1:
        render = renderer.render
        renderer.render = lambda render_mode=None, *camera: render(render_mode)
    return OwnGlobalRandomState(env)


def tasks() -> list[str]:
    """The HumanoidBench ids registered with gymnasium (importing `humanoid_bench`)."""
    importlib.import_module(PACKAGE)
    return sorted(name for name in gym.registry if name.split("-", 1)[0] in ROBOTS)


class HumanoidBenchVecEnv(GymnasiumVecEnv):
    """`num_envs` copies of one HumanoidBench task (see the module docstring).

    Args: as `GymnasiumVecEnv`, but `vectorization` defaults to "processes", `num_workers`
    to one per CPU core, and `max_episode_steps` to `time_limit(task)`. `env_kwargs` reach
    HumanoidBench's env (e.g. `blocked_hands: "True"`, `obs_wrapper: "True"`). `package` is the
    module that registers `task`; tests pass "gymnasium" to drive gymnasium's own MuJoCo
    tasks through this same code path where HumanoidBench is not installed.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        seed: int = 0,
        device: Any = "cpu",
        vectorization: str = "processes",
        num_workers: int = 0,
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        package: str = PACKAGE,
        start_method: str | None = None,
        env_factory: Callable[..., gym.Env] = make_humanoid_bench_env,
    ) -> None:
        if max_episode_steps is None and package == PACKAGE:
            max_episode_steps = time_limit(task)
        if vectorization == "subproc" and num_workers:
            raise EnvOptionError("num_workers is for vectorization=processes; subproc runs a process per env")
        super().__init__(
            task, num_envs, seed=seed, device=device, vectorization=vectorization, num_workers=num_workers,
            max_episode_steps=max_episode_steps, render_mode=render_mode, package=package,
            env_kwargs={"render_mode": None, **(env_kwargs or {})},  # HumanoidBench's own default: "rgb_array"
            start_method=start_method, env_factory=functools.partial(with_gait_signals, env_factory),
        )
        self._gait_static: dict[str, Any] | None = None

    def gait_signals(self) -> dict[str, torch.Tensor | float]:
        """The eval-env hook of `fast_td3/measures/gait_metrics.py`: the gait signals of the step just
        taken (see the module docstring and `GaitSignalsReader`), float32 tensors on `device`
        (`foot_contact` bool) with a leading `num_envs` dimension, plus the static
        `torque_limits` [J], `joint_limits` [J, 2] and `dt` (float), read once. The first call
        switches the workers to reading them after every step. Empty for an env without MuJoCo."""
        rows = self._vec.call("gait_signals")
        if not rows[0]:
            return {}
        if self._gait_static is None:
            static = self._vec.call("gait_static")[0]
            self._gait_static = {
                key: torch.as_tensor(value, dtype=torch.float32, device=self.device)
                if isinstance(value, np.ndarray) else value
                for key, value in static.items()
            }
        signals: dict[str, torch.Tensor | float] = {}
        for key in rows[0]:
            stacked = np.stack([row[key] for row in rows])
            if stacked.dtype != np.bool_:
                stacked = stacked.astype(np.float32)
            signals[key] = torch.from_numpy(stacked).to(self.device)
        return {**signals, **self._gait_static}


def make(task: str, num_envs: int, seed: int = 0, device: Any = "cpu", **options: Any) -> HumanoidBenchVecEnv:
    if options.pop("reward_scales", None):
        raise EnvOptionError(f"{task}: HumanoidBench rewards have no scalable terms (env.reward_scales must be empty)")
    return HumanoidBenchVecEnv(task, num_envs, seed=seed, device=device, **options)
