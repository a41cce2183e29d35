"""A Playground task's batched reset and step, compiled once per (task, settings, env count, device).

Reset and step are `jax.jit(jax.vmap(...))`; their outputs are cast to strong JAX types so the step
after a reset reuses the step compiled for steady state. Auto-reset is same-step: the step that
ends an episode returns the true final observations next to the reset ones, a time-out flag
where the time limit cut it, and the per-episode metric sums. The adapter that puts these behind
the env contract is `mjx.py`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Callable

# JAX would otherwise take 75% of the GPU at start-up, leaving torch's replay buffer and
# learner too little; it must be set before JAX initialises its GPU backend.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from envs.playground.config import playground_registry  # noqa: E402
from envs.playground.gait_reader import GaitSignals  # noqa: E402
from envs.protocol import derive_env_seeds  # noqa: E402
from envs.registry import EnvOptionError  # noqa: E402

ACTOR_KEY, CRITIC_KEY = "state", "privileged_state"
"""Playground's names for the actor and privileged critic observations of dict observations."""


def _strong(tree):
    """Drop JAX weak types, so reset's and step's states have identical types (one compile of step)."""
    return jax.tree_util.tree_map(lambda x: jax.lax.convert_element_type(x, jnp.asarray(x).dtype), tree)


def split_observation(obs) -> tuple[jax.Array, jax.Array | None]:
    """(actor, critic or None) of a Playground observation, a dict of groups or one array."""
    if isinstance(obs, dict):
        return obs[ACTOR_KEY], obs.get(CRITIC_KEY)
    return obs, None


@dataclass
class CompiledEnv:
    """One task's jitted batched reset/step, shared by every adapter with the same settings."""

    env: Any
    reset: Callable
    step: Callable


def _batched(env, fn: Callable, randomized: bool) -> Callable:
    """vmap `fn(*args)` over envs; with domain randomisation each env steps its own model.

    Playground envs read their model from `unwrapped._mjx_model`; swapping it while
    tracing is how its own randomisation wrapper gives each env its model.
    """
    if not randomized:
        return lambda models, axes, *args: jax.vmap(fn)(*args)

    def one(model, *args):
        unwrapped = env.unwrapped
        original = unwrapped._mjx_model
        unwrapped._mjx_model = model
        try:
            return fn(*args)
        finally:
            unwrapped._mjx_model = original

    return lambda models, axes, *args: jax.vmap(one, in_axes=(axes,) + (0,) * len(args))(models, *args)


@functools.lru_cache(maxsize=16)
def load_env(task: str, frozen_overrides: tuple, device: jax.Device):
    """The Playground env for a task and its config overrides, its model on `device`
    (loaded once per process)."""
    registry = playground_registry()

    with jax.default_device(device):
        return registry.load(task, config_overrides=dict(frozen_overrides))


def domain_randomizer(task: str, env):
    """Playground's randomiser for the task, or the env's own `domain_randomize` (our tasks)."""
    randomizer = getattr(env, "domain_randomize", None) or playground_registry().get_domain_randomizer(task)
    if randomizer is None:
        raise EnvOptionError(f"{task} has no domain randomiser in Playground (domain_randomization must be false)")
    return randomizer


@functools.lru_cache(maxsize=16)
def compile_env(task: str, frozen_overrides: tuple, randomized: bool, action_repeat: int, device: jax.Device,
                select_resets: bool) -> CompiledEnv:
    """Batched reset/step for one task, settings and device; jitted once per process."""
    env = load_env(task, frozen_overrides, device)
    axes = None
    if randomized:  # which model fields vary per env; the same for any keys
        axes = domain_randomizer(task, env)(env.mjx_model, jax.random.split(jax.random.PRNGKey(0), 1))[1]
    reset_one = _batched(env, env.reset, randomized)
    step_one = _batched(env, _repeated(env.step, action_repeat), randomized)
    gait_signals = jax.vmap(GaitSignals(env).per_step)

    def reset(models, keys):
        keys, reset_keys = _split_keys(keys)
        state = reset_one(models, axes, reset_keys)
        return _strong(Carry(state, jnp.zeros(keys.shape[0], jnp.int32), zero_sums(state), keys))

    def step(models, carry: "Carry", actions, time_limit, with_gait: bool = True):
        state = _strong(step_one(models, axes, carry.state, jnp.clip(actions, -1.0, 1.0)))
        steps = carry.steps + 1
        terminated = state.done > 0.5
        time_outs = (steps >= time_limit) & ~terminated
        dones = terminated | time_outs
        sums = {k: carry.sums[k] + state.metrics[k] for k in carry.sums}
        rewards = state.reward.astype(jnp.float32)
        final_actor, final_critic = split_observation(state.obs)  # before any reset replaces them
        gait = gait_signals(state) if with_gait else {}  # likewise: finished envs report their last state
        keys, reset_keys = _split_keys(carry.keys)

        def with_resets(state):
            fresh = reset_one(models, axes, reset_keys)
            pick = lambda new, old: jnp.where(dones.reshape((-1,) + (1,) * (old.ndim - 1)), new, old)  # noqa: E731
            return _strong(jax.tree_util.tree_map(pick, fresh, state))

        state = with_resets(state) if select_resets else jax.lax.cond(dones.any(), with_resets, lambda s: s, state)
        keep = ~dones
        carry = Carry(state, jnp.where(keep, steps, 0), {k: jnp.where(keep, v, 0.0) for k, v in sums.items()}, keys)
        # one [metrics, envs] array in sorted-name order: one DLPack hand-over per step, not one per metric
        stacked_sums = jnp.stack([sums[k] for k in sorted(sums)]) if sums else jnp.zeros((0, dones.shape[0]))
        outputs = (rewards, dones, time_outs, final_actor, final_critic, stacked_sums, gait)
        return _strong(carry), outputs

    return CompiledEnv(env, jax.jit(reset), jax.jit(step, static_argnames=("with_gait",)))


def _repeated(step: Callable, times: int) -> Callable:
    """The env step applied `times` times with one action, rewards summed (Playground's
    `action_repeat`, which its own training wrappers apply the same way)."""
    if times == 1:
        return step

    def repeated(state, action):
        total = jnp.zeros_like(state.reward)
        for _ in range(times):
            state = step(state, action)
            total = total + state.reward
        return state.replace(reward=total)

    return repeated


def _split_keys(keys):
    pairs = jax.vmap(jax.random.split)(keys)
    return pairs[:, 0], pairs[:, 1]


def zero_sums(state) -> dict[str, jax.Array]:
    """Zeroed per-env episode sums of the state's per-env metrics (the metrics the adapter reports)."""
    return {k: jnp.zeros_like(v, dtype=jnp.float32) for k, v in state.metrics.items() if jnp.ndim(v) == 1}


@jax.tree_util.register_dataclass
@dataclass
class Carry:
    """Everything the batched step threads through: env state, episode step counts,
    running per-episode metric sums, per-env PRNG keys."""

    state: Any
    steps: jax.Array
    sums: dict
    keys: jax.Array


def env_keys(seed: int, num_envs: int) -> jax.Array:
    """Per-env PRNG keys from one seed; a reset splits each and resets from the second half."""
    seeds = np.asarray(derive_env_seeds(seed, num_envs), dtype=np.uint32)
    return jax.vmap(jax.random.PRNGKey)(seeds)
