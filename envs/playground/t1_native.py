"""`T1LowDimJoystick{Flat,Rough}Terrain` on native MuJoCo: the CPU backend (`backend=native`).

The task of `envs/playground/t1_lowdim.py`, as `t1_mjx.py` runs it on MJX, with its physics in
MuJoCo's C engine: one `mujoco.batch.Batch` holds an MjData per env and steps them all on a
pool of C threads; the task logic runs vectorised over envs in NumPy (float64, MuJoCo's
precision) and crosses to torch as float32. No JIT compile: the env is ready in about a second.

What is shared with the MJX env, not rewritten: the model (`build_mj_model`), the deployment
contract (`sim2real.t1`: observation, actions to PD targets, command smoothing and gait clock),
the state indices (`ModelIndex`) and the task's maths, written once against the array API
(`t1_rewards.py`'s `reward_terms` and `total_reward`; `privileged_observation`, `fallen`, `contacts_from`). What is
written here again: the control flow of reset and step (same order as `T1LowDimJoystick.reset/step`)
and the random draws (NumPy's generator, not JAX's: the two backends draw different but
identically distributed commands, noise, pushes and resets). `tests/test_t1_native.py` pins the
two together step by step from the same state. Beside this module: the draws of resets, commands,
delays and pushes (`t1_native_draws.py`), the observations (`t1_native_observation.py`), the
domain randomisation (`t1_native_randomization.py`) and rendering (`native_frames.py`).

Same-step auto-reset as the env contract asks: the step that ends an episode returns
the true final observations (actor and critic) in `extras["final_observations"]` and the
reset ones in `obs`; a time-out flag where the time limit cut it, never on a fall.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import mujoco
import numpy as np
import torch

from envs.playground import push_curriculum, t1_lowdim, t1_rewards
from envs.playground.gait_reader import NativeGaitData, NativeGaitState, NativeT1View
from envs.playground.native_frames import StateFrames
from envs.playground.t1_native_draws import draw_episode_start, draw_start_pose, kick_due_envs, sample_commands
from envs.playground.t1_native_observation import CRITIC_OBSERVATION_SIZE, observe
from envs.playground.t1_native_randomization import randomize_robots
from envs.protocol import derive_env_seeds, reset_extras, step_extras
from envs.registry import EnvOptionError
from sim2real import t1

TASKS = tuple(t1_lowdim.TERRAINS)
INFO_KEYS = ("target_command", "gait_frequency", "clock", "active_frequency", "command", "gait_process",
             "last_action", "feet_air_time", "step", "push_steps", "action_delay", "pending_actions",
             "yaw_error_average", "lin_vel_error_average")
"""The per-env task state, named as in the MJX env's `State.info`."""


def available() -> bool:
    """`mujoco.batch` (MuJoCo 4.0 and later) steps many MjData on C threads."""
    return importlib.util.find_spec("mujoco.batch") is not None


def default_threads(num_envs: int) -> int:
    return max(1, min(num_envs, len(os.sched_getaffinity(0))))


class T1NativeVecEnv:
    """`num_envs` T1 low-dim joystick envs on native MuJoCo, behind the env contract.

    Args:
        task: "T1LowDimJoystickFlatTerrain" or "T1LowDimJoystickRoughTerrain".
        num_envs: parallel envs.
        seed: run seed (env draws come from `derive_env_seeds(seed, num_envs)`).
        device: torch device the tensors are returned on (the physics runs on the CPU).
        max_episode_steps: time limit in env steps (None: the config's `episode_length`).
        reward_scales: reward term -> scale, over the defaults (`env.reward_scales.*`).
        push: push perturbations on/off (None: the config's `push_config.enable`).
        domain_randomization: per-env floor friction, link masses, gains and encoder offsets
            (the switched-on kinds of `randomization.*`), drawn once per env for the run, or at
            every reset with `randomization.redraw_each_episode`.
        config_overrides: flat or nested overrides of the task's config (the MJX env's keys).
        menagerie_path: a MuJoCo Menagerie folder (default: see envs/playground/menagerie.py).
        num_threads: physics threads (None: the CPUs this process may use).
        render_mode: "rgb_array" to allow `render()`.

    Besides the contract's extras, `step` returns `extras["reward_terms"]`: the step's scaled
    reward terms per env (NumPy, before x dt), as the MJX env's `reward/<term>` metrics.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        reward_scales: dict[str, float] | None = None,
        push: bool | None = None,
        domain_randomization: bool = False,
        config_overrides: dict[str, Any] | None = None,
        menagerie_path: str | None = None,
        num_threads: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        from envs.playground import config as playground_config

        if task not in TASKS:
            raise EnvOptionError(f"backend=native runs {list(TASKS)}, not {task!r}")
        if not available():
            raise EnvOptionError(f"backend=native needs mujoco>=4.0 (mujoco.batch); this is {mujoco.__version__}")
        from mujoco import batch as mj_batch

        self.task = task
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.seed = int(seed)
        self.render_mode = render_mode
        self.config_overrides = playground_config.playground_overrides(task, "jax", reward_scales, push,
                                                                       config_overrides)
        self.config = config = playground_config.task_config(task, self.config_overrides)
        self.control = control = t1_lowdim.control_from(config)
        self.commands = t1_lowdim.commands_from(config)
        t1_lowdim.check_rates(config, control)
        self.dt = control.ctrl_dt
        self.model = t1_lowdim.build_mj_model(t1_lowdim.TERRAINS[task], control, menagerie_path)
        self.index = t1_lowdim.ModelIndex(self.model, config.reward_config.soft_joint_limit_factor)
        self.num_threads = int(num_threads or default_threads(self.num_envs))
        self.batch = mj_batch.Batch(self.model, self.num_envs, nthread=self.num_threads, persistent=True)
        self._qpos, self._qvel, self._ctrl = (self.batch.bind(name) for name in ("qpos", "qvel", "ctrl"))
        self._init_qpos = t1_lowdim.initial_qpos(self.model, control)
        self._default_pose = np.asarray(control.default_pose)
        self._leg_torque_limit = np.asarray(control.leg(control.torque_limit))
        self._encoder_offsets = np.zeros((self.num_envs, t1.NUM_JOINTS))
        self._dr_rng = None
        if domain_randomization:
            self._dr_rng = np.random.default_rng(derive_env_seeds(self.seed, self.num_envs) + [0xD0])
            self._randomize(np.arange(self.num_envs))
        self.max_episode_steps = int(max_episode_steps or config.episode_length)
        self.num_obs = t1.OBSERVATION_SIZE
        self.num_critic_obs = CRITIC_OBSERVATION_SIZE
        self.num_actions = t1.NUM_LEG_JOINTS
        self.critic_obs_extends_actor_obs = float(config.noise_config.level) == 0.0
        self.episode_metrics = sorted(f"reward/{term}" for term in config.reward_config.scales.keys())
        self.resolved_options = {"backend": "native"}  # what a resumed run or a later evaluation must repeat
        self._rng = np.random.default_rng(derive_env_seeds(self.seed, self.num_envs))
        self.push_curriculum = push_curriculum.PushCurriculum.from_config(config.push_config)
        self.checkpointed_parts = {"push_curriculum": self.push_curriculum} if self.push_curriculum else {}
        self.info: dict[str, np.ndarray] = {}
        self._sums = np.zeros((len(self.episode_metrics), self.num_envs))
        self._obs: tuple[np.ndarray, np.ndarray] | None = None
        self._last: NativeGaitState | None = None
        self._gait_reader = None
        self._renderer: StateFrames | None = None

    # --------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(derive_env_seeds(int(seed), self.num_envs))
        everyone = np.arange(self.num_envs)
        self.info = {}
        actor, critic = self._reset_envs(everyone)
        self._obs = (actor, critic)
        self._sums[:] = 0.0
        obs = self._tensor(actor)
        return obs, reset_extras(obs, self._tensor(critic))

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        action = actions.detach().to("cpu", torch.float32).clamp(-1.0, 1.0).numpy().astype(np.float64)
        info, cfg = self.info, self.config
        self._push()
        applied = t1_lowdim.delayed_action(np, action, info["action_delay"], info["pending_actions"])
        self._physics(t1.targets_from_actions(np, applied, self.control, self._default_pose))

        state = self.state()
        contacts = t1_lowdim.contacts_from(np, state["sensordata"], self.index)
        info["feet_air_time"] = info["feet_air_time"] + self.dt
        gravity, _ = t1.imu_from_floating_base(np, state["qpos"][:, 3:7], state["qvel"][:, 3:6])
        terminated = t1_lowdim.fallen(np, cfg.termination, gravity, state["qpos"], state["qvel"])
        info["yaw_error_average"] = t1_rewards.averaged_yaw_error(
            cfg.reward_config, info["yaw_error_average"], sensordata=state["sensordata"], command=info["command"],
            index=self.index, dt=self.dt)
        info["lin_vel_error_average"] = t1_rewards.averaged_planar_error(
            cfg.reward_config, info["lin_vel_error_average"], sensordata=state["sensordata"], command=info["command"],
            index=self.index, dt=self.dt)
        terms = t1_rewards.reward_terms(
            np, cfg.reward_config, **state, projected_gravity=gravity, contacts=contacts, action=action,
            last_action=info["last_action"], command=info["command"], gait_process=info["gait_process"],
            yaw_error_average=info["yaw_error_average"], lin_vel_error_average=info["lin_vel_error_average"],
            done=terminated, index=self.index,
            default_pose=self._default_pose)
        rewards, scaled = t1_rewards.total_reward(np, terms, cfg.reward_config.scales, self.dt)

        # the next observation's command and gait phase, in the deploy code's order
        info["step"] = info["step"] + 1
        resample = info["step"] % int(round(self.commands.resample_seconds / self.dt)) == 0
        if resample.any():
            info["target_command"] = np.where(resample[:, None], self._sample_commands(self.num_envs),
                                              info["target_command"])
        info["clock"] = info["clock"] + self.dt
        self._update_command_and_gait(slice(None), info["command"])
        info["last_action"] = action
        info["pending_actions"] = t1_lowdim.shift_pending(np, info["pending_actions"], action)
        info["feet_air_time"] = info["feet_air_time"] * ~contacts
        final_actor, final_critic = self._observe(slice(None), state, contacts)
        self._last = NativeGaitState(NativeGaitData(state["qpos"].copy(), state["qvel"].copy(),
                                                    self.batch.bind("qfrc_actuator").copy(),
                                                    state["sensordata"].copy()),
                                     {"command": info["command"].copy()})

        time_outs = (info["step"] >= self.max_episode_steps) & ~terminated
        dones = terminated | time_outs
        self._sums += np.stack([scaled[name.removeprefix("reward/")] for name in self.episode_metrics])
        sums = torch.from_numpy(self._sums.astype(np.float32)).to(self.device)
        actor, critic = final_actor, final_critic
        finished = np.flatnonzero(dones)
        episode = dict(zip(self.episode_metrics, sums.unbind(0)))
        if self.push_curriculum is not None:  # the level each episode ended at, then its move
            episode[push_curriculum.PUSH_SCALE_METRIC] = torch.full_like(sums[0], self.push_curriculum.level)
            if finished.size:
                self.push_curriculum.episodes_ended(info["step"][finished] / self.max_episode_steps)
        if finished.size:  # same-step reset: the finished envs' observations become their reset ones
            actor, critic = final_actor.copy(), final_critic.copy()
            actor[finished], critic[finished] = self._reset_envs(finished)
            self._sums[:, finished] = 0.0
        self._obs = (actor, critic)
        obs = self._tensor(actor)
        extras = step_extras(obs, self._tensor(final_actor), torch.from_numpy(time_outs).to(self.device),
                             critic_obs=self._tensor(critic), final_critic_obs=self._tensor(final_critic),
                             episode=episode)
        extras["reward_terms"] = scaled
        return (obs, torch.from_numpy(rewards.astype(np.float32)).to(self.device),
                torch.from_numpy(dones).to(self.device), extras)

    def gait_signals(self) -> dict[str, Any]:
        """Gait-metric signals of the step just taken (`fast_td3/measures/gait_metrics.py`), as the MJX
        backend gives them (the same `GaitSignals` reader); rows of envs that finished describe
        their last state before the reset."""
        if self._last is None:
            return {}
        if self._gait_reader is None:
            import jax

            from envs.playground.gait_reader import GaitSignals

            reader = GaitSignals(NativeT1View(self))
            self._gait_reader = (jax.jit(jax.vmap(reader.per_step)), reader.static(1))
        per_step, static = self._gait_reader
        signals = per_step(self._last)
        return {**{key: torch.from_numpy(np.array(value)).to(self.device) for key, value in signals.items()},
                **static}

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self._obs = None

    # --------------------------------------------------------------- state
    def state(self, ids=slice(None)) -> dict[str, np.ndarray]:
        """The MuJoCo state the task reads, `[envs, ...]`: derived fields (sensors, sites,
        actuator forces) are those of the last physics call, as after `mj_step`."""
        batch, legs = self.batch, self.index.legs
        return {
            "qpos": self._qpos[ids], "qvel": self._qvel[ids],
            "sensordata": batch.bind("sensordata")[ids],
            "site_xpos": batch.bind("site_xpos")[ids],
            "site_xmat": batch.bind("site_xmat")[ids].reshape(-1, self.model.nsite, 3, 3),
            "leg_torques": batch.bind("qfrc_actuator")[ids][:, 6:][:, legs],
        }

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, info: dict[str, np.ndarray]) -> tuple:
        """Put every env in a given physics and task state (e.g. another backend's); returns the
        (actor, critic) observations of that state, noise drawn as at a reset."""
        self.batch.reset(stage=mujoco.mjtStage.mjSTAGE_NONE)
        self._qpos[:], self._qvel[:], self._ctrl[:] = qpos, qvel, ctrl
        self.batch.forward()
        self.info = {key: np.array(info[key]) for key in INFO_KEYS}
        state = self.state()
        self._obs = self._observe(slice(None), state, t1_lowdim.contacts_from(np, state["sensordata"], self.index))
        self._sums[:] = 0.0
        return self._obs

    def mirror_maps(self) -> dict:
        """Left-right mirrors of observation, critic observation and action (`algo.symmetry`)."""
        return t1_lowdim.mirror_maps()

    def encoder_offsets(self) -> np.ndarray:
        """Each env's joint-encoder offsets δ (zero unless randomised): its PD loop and its
        observation see q + δ."""
        return self._encoder_offsets

    # --------------------------------------------------------------- task logic
    def _sample_commands(self, n: int) -> np.ndarray:
        return sample_commands(self.commands, self._rng, n)

    def _reset_envs(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Start the envs `ids` afresh (as `T1LowDimJoystick.reset`); returns their observations."""
        n, rng = len(ids), self._rng
        qpos, qvel = draw_start_pose(rng, self._init_qpos, self.model.nv, n)
        if self._dr_rng is not None and self.config.randomization.redraw_each_episode:
            self._randomize(ids)  # a new robot for the new episode
        # a fresh MjData, as MJX's reset makes: no solver warm start carried over from the last episode
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        self._qpos[ids], self._qvel[ids], self._ctrl[ids] = qpos, qvel, self._default_pose
        self.batch.forward(ids)
        fresh = draw_episode_start(self.config, self.commands, rng, n, self.dt)
        if not self.info:
            self.info = fresh
        else:
            for key, value in fresh.items():
                self.info[key][ids] = value
        self._update_command_and_gait(ids, np.zeros((n, 3)))
        state = self.state(ids)
        return self._observe(ids, state, t1_lowdim.contacts_from(np, state["sensordata"], self.index))

    def _update_command_and_gait(self, ids, smoothed: np.ndarray) -> None:
        info = self.info
        info["gait_process"][ids], info["command"][ids], info["active_frequency"][ids] = t1.update_command_and_gait(
            np, clock=info["clock"][ids], active_frequency=info["active_frequency"][ids], smoothed=smoothed,
            joystick=info["target_command"][ids], gait_frequency=info["gait_frequency"][ids], ctrl_dt=self.dt)

    def _push(self) -> None:
        level = None if self.push_curriculum is None else self.push_curriculum.level
        kick_due_envs(self._qvel, self.config.push_config, self._rng, self.info["step"], self.info["push_steps"], level)

    def _physics(self, targets: np.ndarray) -> None:
        """`decimation` physics steps of every env on the batch's threads; the PD targets pass
        the deploy code's filter at each."""
        ctrl = self._ctrl
        for _ in range(self.control.decimation):
            ctrl[:] = t1.filtered_targets(ctrl, targets, self.control)
            self.batch.step()

    def _observe(self, ids, state: dict[str, np.ndarray], contacts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return observe({key: value[ids] for key, value in self.info.items()}, state, contacts,
                       encoder_offsets=self._encoder_offsets[ids], default_pose=self._default_pose,
                       noise=self.config.noise_config, rng=self._rng, index=self.index,
                       torque_limit=self._leg_torque_limit)

    def _randomize(self, ids: np.ndarray) -> None:
        randomize_robots(self.batch, self.model, self.index, self.control, self.config.randomization, self._dr_rng,
                         ids, self._encoder_offsets)

    # --------------------------------------------------------------- extras
    def render(self, env_index: int = 0, height: int = 240, width: int = 320) -> np.ndarray:
        """An RGB frame of one env's current state (MUJOCO_GL=egl headless)."""
        if self.render_mode != "rgb_array":
            raise RuntimeError("make the env with render_mode='rgb_array' to render it")
        if self._renderer is None:
            self._renderer = StateFrames(self.model, height, width)
        return self._renderer.frame(self._qpos[env_index], self._qvel[env_index])

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)

    def __repr__(self) -> str:
        return (f"T1NativeVecEnv({self.task!r}, num_envs={self.num_envs}, backend=native MuJoCo, "
                f"threads={self.num_threads})")
