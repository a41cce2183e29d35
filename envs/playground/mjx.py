"""The MJX bridge: MuJoCo Playground tasks on JAX behind the env contract.

Any registry name loads (`mujoco_playground.registry.load`). Reset and step are
`jax.jit(jax.vmap(...))`, each compiled once per (task, settings, env count) (`mjx_batched.py`):
their outputs are cast to strong JAX types so the step after a reset reuses the step
compiled for steady state, and JAX's persistent compilation cache keeps the compiled
code across runs. Auto-reset is ours and same-step: the step that ends an episode
returns the true final observations (`state` and `privileged_state`) next to the reset
ones, and a time-out flag when the time limit cut it. Observations cross to torch by
DLPack without a copy on the same device (CPU to CPU, GPU to GPU), actions cross back
the same way, and per-episode metrics are summed on the device: a step never waits for
the host.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from envs.playground.config import enable_compilation_cache, playground_overrides, task_config
from envs.playground.gait_reader import GaitSignals
from envs.playground.menagerie import use_menagerie
from envs.playground.mjx_batched import (  # sets JAX's GPU memory option before JAX's GPU backend starts
    Carry,
    compile_env,
    domain_randomizer,
    env_keys,
    load_env,
    split_observation,
    zero_sums,
)
from envs.protocol import reset_extras, step_extras
from envs.registry import EnvOptionError

IMPLS = ("auto", "jax", "warp")


def jax_device(device: torch.device) -> jax.Device:
    """The JAX device that shares memory with a torch device."""
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type == "cuda":
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            raise EnvOptionError(
                f"device={device} but JAX has no GPU backend here; install it with "
                '`pip install -U "jax[cuda12]"` or run Playground with device=cpu'
            ) from None
        return gpus[device.index or 0]
    raise EnvOptionError(f"Playground envs run on cpu or cuda, not {device}")


def default_impl(device: torch.device) -> str:
    """MJX's pure-JAX physics on CPU (several times faster there than Warp: docs/performance.md);
    Warp, Playground's default, on GPU."""
    return "jax" if device.type == "cpu" else "warp"


# ------------------------------------------------------------------ the adapter
class PlaygroundVecEnv:
    """`num_envs` copies of one Playground task, stepped together on one device.

    Args:
        task: Playground registry name, e.g. "T1JoystickFlatTerrain" or "CheetahRun".
        num_envs: parallel envs.
        seed: run seed; env i starts from `env_keys(seed, num_envs)[i]`.
        device: torch device; the physics runs on the matching JAX device.
        impl: physics backend, "jax" (MJX), "warp" (MuJoCo Warp) or "auto" (jax on CPU, warp on GPU).
        max_episode_steps: time limit in env steps (None: the task's `episode_length`).
        reward_scales: reward term -> scale, over the task's defaults.
        push: push perturbations on/off for tasks that have them (None: the task's default).
        domain_randomization: each env steps a model randomised by Playground's randomiser
            for the task (fixed per env for the run).
        config_overrides: any further flat Playground config overrides ("noise_config.level": 0.0).
        menagerie_path: a MuJoCo Menagerie folder (default: see envs/playground/menagerie.py).
        compilation_cache: folder for JAX's persistent cache (None: the default; False: off).
        render_mode: "rgb_array" to allow `render()`.
        reset_by_selection: auto-reset finished envs by computing a reset for every env and
            selecting (no host round trip), rather than `lax.cond` on "any env done"
            (None: selection on accelerators, cond on the CPU, where it saves the reset's work).
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        impl: str = "auto",
        max_episode_steps: int | None = None,
        reward_scales: dict[str, float] | None = None,
        push: bool | None = None,
        domain_randomization: bool = False,
        config_overrides: dict[str, Any] | None = None,
        menagerie_path: str | None = None,
        compilation_cache: str | bool | None = None,
        render_mode: str | None = None,
        reset_by_selection: bool | None = None,
    ) -> None:
        if impl not in IMPLS:
            raise EnvOptionError(f"impl must be one of {IMPLS}, got {impl!r}")
        self.task = task
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.seed = int(seed)
        self.impl = default_impl(self.device) if impl == "auto" else impl
        self.render_mode = render_mode
        if compilation_cache is not False:
            enable_compilation_cache(compilation_cache or None)
        use_menagerie(task, menagerie_path)
        self._jax_device = jax_device(self.device)

        self.config_overrides = playground_overrides(task, self.impl, reward_scales, push, config_overrides)
        config = task_config(task, self.config_overrides)
        frozen = tuple(sorted((k, _hashable(v)) for k, v in self.config_overrides.items()))
        env = load_env(task, frozen, self._jax_device)
        if hasattr(env, "mirror_maps"):  # a task that can mirror its vectors (ours: T1LowDim), for algo.symmetry
            self.mirror_maps = env.mirror_maps
        self._models = None
        if domain_randomization and config.get("randomization", {}).get("redraw_each_episode", False):
            raise EnvOptionError("randomization.redraw_each_episode=true runs on the native backend only "
                                 "(env.options.backend=native); on MJX each env keeps its one draw for the run")
        if (config.get("push_config", {}).get("curriculum", {}) or {}).get("enable", False):
            raise EnvOptionError("push_config.curriculum.enable=true runs on the native backend only "
                                 "(env.options.backend=native); on MJX the kicks keep magnitude_range throughout")
        if domain_randomization:
            with jax.default_device(self._jax_device):
                dr_keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(self.seed), 0xD0), self.num_envs)
                self._models = domain_randomizer(task, env)(env.mjx_model, dr_keys)[0]
        # Playground counts episode_length in physics-control steps; with action_repeat each
        # of our steps is that many of them.
        self.action_repeat = int(config.get("action_repeat", 1) or 1)
        if reset_by_selection is None:
            # On an accelerator `lax.cond` hands its predicate to the host every step (and with many
            # envs some env is almost always done): reset by selection there. On the CPU the host
            # is the device, and cond skips the reset computation on steps where no env finished.
            reset_by_selection = self._jax_device.platform != "cpu"
        self._compiled = compile_env(task, frozen, domain_randomization, self.action_repeat, self._jax_device,
                                  bool(reset_by_selection))
        self.max_episode_steps = int(max_episode_steps or -(-config.episode_length // self.action_repeat))
        self._time_limit = jax.device_put(jnp.int32(self.max_episode_steps), self._jax_device)
        self._keys = jax.device_put(env_keys(self.seed, self.num_envs), self._jax_device)
        # One reset now: it compiles reset and shows the observation layout.
        probe = self._compiled.reset(self._models, self._keys).state
        actor, critic = split_observation(probe.obs)
        self.num_obs = int(actor.shape[-1])
        self.num_critic_obs = int(critic.shape[-1]) if critic is not None else None
        self.num_actions = int(env.action_size)
        # Playground's privileged state starts with the actor's state: the replay buffer
        # then stores only the tail.
        self.critic_obs_extends_actor_obs = critic is not None and bool(
            jnp.array_equal(critic[:, : self.num_obs], actor))
        self.episode_metrics = sorted(zero_sums(probe))
        self.resolved_options = {"backend": "mjx"}
        """Choices this adapter made that a resumed run or a later evaluation must repeat."""
        self._carry: Carry | None = None
        self._with_gait = True
        self._gait: dict[str, jax.Array] | None = None
        self._gait_reader: GaitSignals | None = None
        self._renderer = None

    # --------------------------------------------------------------- contract
    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        if self.device.type == "cuda":
            # torch may still have queued reads of the last step's outputs, whose memory JAX
            # reuses once they are dropped; a step orders JAX after torch through the actions'
            # DLPack handshake, a reset has no such input.
            torch.cuda.current_stream(self.device).synchronize()
        if seed is not None:
            keys = jax.device_put(env_keys(int(seed), self.num_envs), self._jax_device)
        elif self._carry is not None:
            keys = self._carry.keys  # continue each env's random stream
        else:
            keys = self._keys
        self._carry = self._compiled.reset(self._models, keys)
        actor, critic = split_observation(self._carry.state.obs)
        obs = _torch(actor)
        return obs, reset_extras(obs, None if critic is None else _torch(critic))

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        if self._carry is None:
            raise RuntimeError("call reset() before step()")
        actions_jax = to_jax(actions.detach().to(self.device, torch.float32).contiguous())
        self._carry, (rewards, dones, time_outs, final_actor, final_critic, sums, self._gait) = self._compiled.step(
            self._models, self._carry, actions_jax, self._time_limit, with_gait=self._with_gait)
        actor, critic = split_observation(self._carry.state.obs)
        obs = _torch(actor)
        asymmetric = critic is not None
        extras = step_extras(obs, _torch(final_actor), _torch(time_outs),
                             critic_obs=_torch(critic) if asymmetric else None,
                             final_critic_obs=_torch(final_critic) if asymmetric else None,
                             episode=dict(zip(self.episode_metrics, _torch(sums).unbind(0))))
        return obs, _torch(rewards), _torch(dones), extras

    def record_gait_signals(self, on: bool) -> None:
        """Whether steps compute the gait signals (on by default; the trainer turns them off on
        its training envs, which nobody reads them from): a static switch, one compile each."""
        self._with_gait = bool(on)

    def gait_signals(self) -> dict[str, Any]:
        """Gait-metric signals of the step just taken (`fast_td3/measures/gait_metrics.py`): the floating
        base, joints and torques of locomotion tasks, plus feet where the task names them; rows
        of envs that finished describe their last state before the reset. Empty for tasks
        without a floating base."""
        if not self._gait:
            if not self._with_gait and self._gait is not None:
                raise RuntimeError("this env's steps skip the gait signals: record_gait_signals(True) first")
            return {}
        if self._gait_reader is None:
            self._gait_reader = GaitSignals(self._compiled.env)
        return {**{key: _torch(value) for key, value in self._gait.items()},
                **self._gait_reader.static(self.action_repeat)}

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self._carry = None

    # --------------------------------------------------------------- extras
    def render(self, env_index: int = 0, height: int = 240, width: int = 320) -> np.ndarray:
        """An RGB frame of one env's current state (native MuJoCo renderer; MUJOCO_GL=egl headless).
        Drawn with the task's nominal model, also under domain randomisation."""
        import mujoco

        if self.render_mode != "rgb_array":
            raise RuntimeError("make the env with render_mode='rgb_array' to render it")
        if self._carry is None:
            raise RuntimeError("call reset() before render()")
        model = self._compiled.env.mj_model
        if self._renderer is None:
            self._renderer = mujoco.Renderer(model, height=height, width=width)
            self._render_data = mujoco.MjData(model)
        data, src = self._render_data, self._carry.state.data
        data.qpos[:] = np.asarray(src.qpos[env_index])
        data.qvel[:] = np.asarray(src.qvel[env_index])
        if model.nmocap:
            data.mocap_pos[:] = np.asarray(src.mocap_pos[env_index])
            data.mocap_quat[:] = np.asarray(src.mocap_quat[env_index])
        mujoco.mj_forward(model, data)
        self._renderer.update_scene(data)
        return self._renderer.render().copy()

    def __repr__(self) -> str:
        return f"PlaygroundVecEnv({self.task!r}, num_envs={self.num_envs}, impl={self.impl!r})"


def _torch(x: jax.Array) -> torch.Tensor:
    """A JAX array as a torch tensor sharing its memory (DLPack)."""
    return torch.from_dlpack(x)


def to_jax(tensor: torch.Tensor) -> jax.Array:
    """A contiguous torch tensor as a JAX array sharing its memory (DLPack)."""
    return jax.dlpack.from_dlpack(tensor)


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value

