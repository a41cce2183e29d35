"""The pieces every adapter shares: the extras builders, the optional parts' defaults, the gait
maths (one function for NumPy, torch and JAX) and the private random streams."""

from __future__ import annotations

import math
import random
import types

import numpy as np
import pytest
import torch

from envs import gait_signals as gs
from envs.protocol import (
    ACTOR,
    CRITIC,
    EPISODE,
    FINAL_OBSERVATIONS,
    OBSERVATIONS,
    OPTIONAL_ENV_ATTRIBUTES,
    SUITE_HOOKS,
    TERMINATIONS,
    TIME_OUTS,
    optional_attribute,
    reset_extras,
    step_extras,
    suite_hook,
)
from envs.random_streams import PrivateRandomStreams


def test_step_extras_symmetric_and_asymmetric():
    obs, final, time_outs = torch.zeros(2, 3), torch.ones(2, 3), torch.tensor([False, True])
    plain = step_extras(obs, final, time_outs)
    assert set(plain) == {OBSERVATIONS, FINAL_OBSERVATIONS, TIME_OUTS}
    assert plain[OBSERVATIONS] == {ACTOR: obs} and plain[FINAL_OBSERVATIONS] == {ACTOR: final}
    critic, final_critic, episode = torch.zeros(2, 5), torch.ones(2, 5), {"reward/x": torch.ones(2)}
    full = step_extras(obs, final, time_outs, critic_obs=critic, final_critic_obs=final_critic, episode=episode,
                       terminations=~time_outs)
    assert full[OBSERVATIONS][CRITIC] is critic and full[FINAL_OBSERVATIONS][CRITIC] is final_critic
    assert full[EPISODE] is episode and full[TERMINATIONS].tolist() == [True, False]
    assert reset_extras(obs) == {OBSERVATIONS: {ACTOR: obs}}
    assert reset_extras(obs, critic)[OBSERVATIONS][CRITIC] is critic


def test_optional_parts_have_declared_defaults():
    bare = types.SimpleNamespace()
    assert optional_attribute(bare, "critic_obs_extends_actor_obs") is False
    assert optional_attribute(bare, "resolved_options") == {}
    assert optional_attribute(types.SimpleNamespace(resolved_options={"backend": "x"}), "resolved_options") == {"backend": "x"}
    assert suite_hook(types.ModuleType("adapter"), "ONE_SIMULATION_PER_PROCESS") is False
    assert all(part.doc for part in {**OPTIONAL_ENV_ATTRIBUTES, **SUITE_HOOKS}.values())
    with pytest.raises(KeyError):
        optional_attribute(bare, "undeclared_attribute")


def yaw_quaternion(angle: float) -> np.ndarray:
    return np.array([math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)])


def test_free_base_signals_known_answers():
    angle = 0.7
    qpos = np.concatenate([[1.0, 2.0, 0.9], 2.0 * yaw_quaternion(angle)])  # not unit length: normalised
    speed = 1.5  # moving forward along the heading, turning at 0.3 rad/s
    qvel = np.array([speed * math.cos(angle), speed * math.sin(angle), 0.0, 0.0, 0.0, 0.3])
    out = gs.free_base_signals(qpos, qvel, np)
    np.testing.assert_allclose(out["base_lin_vel_xy"], [speed, 0.0], atol=1e-12)
    np.testing.assert_allclose(out["base_ang_vel_z"], 0.3)
    np.testing.assert_allclose(out["projected_gravity"], [0.0, 0.0, -1.0], atol=1e-12)
    assert out["base_height"] == 0.9 and out["base_pos_xy"].tolist() == [1.0, 2.0]
    # pitched forward by 90 degrees: gravity points along the base's +x
    pitched = np.concatenate([[0.0, 0.0, 1.0], [math.cos(math.pi / 4), 0.0, math.sin(math.pi / 4), 0.0]])
    np.testing.assert_allclose(gs.free_base_signals(pitched, np.zeros(6), np)["projected_gravity"], [1.0, 0.0, 0.0],
                               atol=1e-12)


def test_numpy_torch_and_jax_compute_the_same_signals():
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(0)
    qpos = np.concatenate([rng.normal(size=(4, 3)), rng.normal(size=(4, 4))], axis=1)  # a batch of 4
    qvel = rng.normal(size=(4, 6))
    reference = gs.free_base_signals(qpos, qvel, np)
    in_torch = gs.free_base_signals(torch.from_numpy(qpos), torch.from_numpy(qvel), torch)
    in_jax = gs.free_base_signals(jnp.asarray(qpos, dtype=jnp.float32), jnp.asarray(qvel, dtype=jnp.float32), jnp)
    for key, value in reference.items():
        np.testing.assert_allclose(in_torch[key].numpy(), value, rtol=1e-12, atol=1e-12, err_msg=key)
        np.testing.assert_allclose(np.asarray(in_jax[key]), value, rtol=1e-5, atol=1e-5, err_msg=key)
        # one env alone (as in a vmapped MJX step or a HumanoidBench worker) gives that env's row
        np.testing.assert_allclose(gs.free_base_signals(qpos[2], qvel[2], np)[key], value[2], err_msg=key)


def test_private_streams_leave_the_global_ones_alone_and_repeat_when_seeded():
    streams = PrivateRandomStreams(numpy=True, python=True, torch_device=torch.device("cpu"))
    np.random.seed(1), random.seed(1), torch.manual_seed(1)
    expected_outside = (np.random.rand(), random.random(), torch.rand(1).item())
    np.random.seed(1), random.seed(1), torch.manual_seed(1)
    with streams.active():
        np.random.rand(5), random.random(), torch.rand(3)  # the env's draws
    assert (np.random.rand(), random.random(), torch.rand(1).item()) == expected_outside

    numpy_only = PrivateRandomStreams(numpy=True)
    numpy_only.seed_numpy(7)
    with numpy_only.active():
        first = np.random.rand(3)
    np.random.rand(10)  # the trainer's draws in between do not move the env's stream
    numpy_only.seed_numpy(7)
    with numpy_only.active():
        again = np.random.rand(3)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, np.random.RandomState(7).rand(3))
