"""Left-right mirror augmentation (`algo.symmetry`): the T1's mirror maps and the batch augmentation.

Known answers: mirroring twice is the identity; a mirrored state earns the same reward; the
rollout of mirrored actions from a mirrored state is the mirror of the rollout (native
MuJoCo here, MJX in the slow tier). The T1 model is symmetric up to small mass differences
(knee links 1.73 against 1.79 kg), so rollouts agree to a tolerance, not to rounding; a
mirror with one wrong sign is shown to fail that tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from fast_td3.learner import transition_keys as keys
from fast_td3.learner.symmetry import MirrorAugmentation, SymmetryUnavailableError, check_mirror, mirror_augmentation
from sim2real import t1

pytest.importorskip("mujoco_playground", reason='MuJoCo Playground is not installed (pip install -e ".[playground]")')

from envs.playground import t1_lowdim  # noqa: E402
from envs.playground.t1_native import T1NativeVecEnv  # noqa: E402
from envs.protocol import ACTOR, CRITIC, FINAL_OBSERVATIONS  # noqa: E402

TASK = "T1LowDimJoystickFlatTerrain"
QUIET = {"config_overrides": {"noise_config": {"level": 0.0}, "commands": {"standing_probability": 0.0}}, "push": False}
"""Noiseless, no pushes, every env walking (a standing env has no gait phase to mirror by half a cycle)."""


def apply(mirror, value):
    index, sign = mirror
    return np.asarray(value)[..., list(index)] * np.asarray(sign)


# ------------------------------------------------------------------ the maps
def test_mirroring_twice_is_the_identity_for_every_map():
    rng = np.random.default_rng(0)
    sizes = {"obs": t1.OBSERVATION_SIZE, "critic_obs": sum(s for _, s in t1_lowdim.PRIVILEGED_LAYOUT),
             "actions": t1.NUM_LEG_JOINTS}
    for name, mirror in t1_lowdim.mirror_maps().items():
        check_mirror(name, *mirror, sizes[name])
        value = rng.normal(size=(5, sizes[name]))
        assert np.array_equal(apply(mirror, apply(mirror, value)), value)
        assert not np.allclose(apply(mirror, value), value)


def test_joint_mirror_swaps_sides_and_negates_roll_and_yaw():
    index, sign = t1.joint_mirror()
    names = t1.SDK_JOINT_NAMES
    assert names[index[names.index("Left_Knee_Pitch")]] == "Right_Knee_Pitch"
    assert sign[names.index("Left_Knee_Pitch")] == 1.0
    assert names[index[names.index("Right_Hip_Roll")]] == "Left_Hip_Roll"
    assert sign[names.index("Right_Hip_Roll")] == -1.0
    assert (index[names.index("Waist")], sign[names.index("Waist")]) == (names.index("Waist"), -1.0)
    # the default pose is its own mirror (arms at ±1.35 roll), so "q - default" mirrors like q
    assert np.allclose(apply(t1.joint_mirror(), t1.DEFAULT_POSE), t1.DEFAULT_POSE)


def test_a_mirror_that_does_not_undo_itself_is_refused():
    with pytest.raises(ValueError, match="mirroring twice"):
        check_mirror("obs", (1, 0, 2), (1.0, -1.0, 1.0), 3)
    with pytest.raises(ValueError, match="permutation"):
        check_mirror("obs", (0, 0, 2), (1.0, 1.0, 1.0), 3)


# ------------------------------------------------------------------ the augmentation
def test_augmentation_appends_the_mirror_image_and_copies_the_rest():
    maps = {"obs": ((1, 0), (1.0, 1.0)), "actions": ((0,), (-1.0,)), "critic_obs": ((0, 1, 2), (1.0, -1.0, 1.0))}
    augment = MirrorAugmentation(maps, {"obs": 2, "actions": 1, "critic_obs": 3}, torch.device("cpu"))
    batch = TensorDict({
        keys.OBS: torch.tensor([[1.0, 2.0]]), keys.NEXT_OBS: torch.tensor([[3.0, 4.0]]),
        keys.ACTIONS: torch.tensor([[0.5]]), keys.REWARDS: torch.tensor([7.0]),
        keys.CRITIC_OBS: torch.tensor([[1.0, 2.0, 3.0]]), keys.NEXT_CRITIC_OBS: torch.tensor([[4.0, 5.0, 6.0]]),
    }, batch_size=[1])
    out = augment(batch)
    assert out.batch_size == torch.Size([2])
    assert out[keys.OBS].tolist() == [[1.0, 2.0], [2.0, 1.0]]
    assert out[keys.NEXT_OBS].tolist() == [[3.0, 4.0], [4.0, 3.0]]
    assert out[keys.ACTIONS].tolist() == [[0.5], [-0.5]]
    assert out[keys.CRITIC_OBS].tolist() == [[1.0, 2.0, 3.0], [1.0, -2.0, 3.0]]
    assert out[keys.NEXT_CRITIC_OBS].tolist() == [[4.0, 5.0, 6.0], [4.0, -5.0, 6.0]]
    assert out[keys.REWARDS].tolist() == [7.0, 7.0]


def test_symmetry_on_an_env_without_maps_says_so():
    class Plain:
        num_obs, num_actions, num_critic_obs = 3, 1, None

    with pytest.raises(SymmetryUnavailableError, match="mirror_maps"):
        mirror_augmentation(Plain(), torch.device("cpu"))


# ------------------------------------------------------------------ the physics
def mirror_state(env: T1NativeVecEnv, qpos, qvel, ctrl, info):
    """The reflection through the world's x-z plane of a whole T1 state (physics and task)."""
    joints = t1.joint_mirror()
    qpos, qvel = qpos.copy(), qvel.copy()
    qpos[:, 1] *= -1
    qpos[:, 4] *= -1  # quaternion (w, x, y, z) -> (w, -x, y, -z)
    qpos[:, 6] *= -1
    qpos[:, 7:] = apply(joints, qpos[:, 7:])
    qvel[:, 1] *= -1
    qvel[:, 3] *= -1  # body-frame angular velocity: roll and yaw rates flip
    qvel[:, 5] *= -1
    qvel[:, 6:] = apply(joints, qvel[:, 6:])
    info = {k: np.array(v) for k, v in info.items()}
    for name in ("target_command", "command"):
        info[name] = apply(t1.COMMAND_MIRROR, info[name])
    for name in ("last_action", "pending_actions"):
        info[name] = apply(t1.action_mirror(), info[name])
    info["feet_air_time"] = info["feet_air_time"][:, ::-1].copy()
    info["yaw_error_average"] = -info["yaw_error_average"]  # a yaw rate: flips
    info["lin_vel_error_average"][:, 1] *= -1  # a body-frame velocity: its lateral part flips
    info["gait_process"] = np.mod(info["gait_process"] + 0.5, 1.0)
    info["clock"] = info["clock"] + 0.5 / info["active_frequency"]  # the next phase is half a cycle on
    return qpos, qvel, apply(joints, ctrl), info


MIRRORED_SCALES = {"tracking_ang_vel_average": 1.0, "tracking_lin_vel_average": 1.0}
"""The averaged terms on too (off by default): their running averages are task state the mirror flips.
(The sharp terms are left off: they magnify the model's own small left-right asymmetry to 6e-4.)"""


def mirrored_rollout_gap(maps=None, steps: int = 2, seed: int = 0):
    """(largest observation gap, largest critic gap, largest reward gap) between a rollout and the
    mirror of the mirrored rollout, over `steps` policy steps of 4 walking envs. Two steps: later, a
    foot's contact flag flips on one side first and the model's small asymmetry grows (0.15 by step 8)."""
    maps = maps or t1_lowdim.mirror_maps()
    a, b = (T1NativeVecEnv(TASK, 4, seed=seed, num_threads=1, reward_scales=MIRRORED_SCALES, **QUIET) for _ in range(2))
    a.reset()
    for _ in range(25):  # into a gait, away from the reset's symmetric pose
        a.step(torch.from_numpy(np.random.default_rng(seed).uniform(-0.3, 0.3, (4, 12)).astype(np.float32)))
    state = (a._qpos.copy(), a._qvel.copy(), a._ctrl.copy(), a.info)
    obs_a, critic_a = a.set_state(*state)
    obs_b, critic_b = b.set_state(*mirror_state(b, *state))
    gaps = [np.abs(apply(maps["obs"], obs_a) - obs_b).max(), np.abs(apply(maps["critic_obs"], critic_a) - critic_b).max(),
            0.0]
    rng = np.random.default_rng(seed + 1)
    for _ in range(steps):
        action = rng.uniform(-0.3, 0.3, (4, 12)).astype(np.float32)
        _, reward_a, done_a, extras_a = a.step(torch.from_numpy(action))
        _, reward_b, done_b, extras_b = b.step(torch.from_numpy(apply(maps["actions"], action).astype(np.float32)))
        assert torch.equal(done_a, done_b)
        final_a, final_b = extras_a[FINAL_OBSERVATIONS], extras_b[FINAL_OBSERVATIONS]
        gaps[0] = max(gaps[0], np.abs(apply(maps["obs"], final_a[ACTOR].numpy()) - final_b[ACTOR].numpy()).max())
        gaps[1] = max(gaps[1], np.abs(apply(maps["critic_obs"], final_a[CRITIC].numpy())
                                      - final_b[CRITIC].numpy()).max())
        gaps[2] = max(gaps[2], float((reward_a - reward_b).abs().max()))
    return gaps


def test_a_mirrored_state_earns_the_same_reward_and_mirrored_actions_mirror_the_rollout():
    obs_gap, critic_gap, reward_gap = mirrored_rollout_gap()
    print(f"largest gaps: observation {obs_gap:.2e}, critic {critic_gap:.2e}, reward {reward_gap:.2e}")
    assert obs_gap < 0.05 and critic_gap < 0.05 and reward_gap < 5e-4  # measured 0.018, 0.018, 3e-5


def test_a_wrong_sign_in_the_mirror_breaks_the_rollout_agreement():
    maps = t1_lowdim.mirror_maps()
    index, sign = maps["actions"]
    wrong_sign = list(sign)
    wrong_sign[1] *= -1  # left hip roll kept its sign
    wrong_sign[7] *= -1
    broken = dict(maps, actions=(index, tuple(wrong_sign)))
    obs_gap, critic_gap, reward_gap = mirrored_rollout_gap(broken)
    assert obs_gap > 0.5 and critic_gap > 0.5 and reward_gap > 1e-3  # measured 2.5, 2.5, 6e-3
    index, sign = maps["obs"]
    wrong_gyro = list(sign)
    wrong_gyro[3] *= -1  # the roll rate kept its sign
    assert mirrored_rollout_gap(dict(maps, obs=(index, tuple(wrong_gyro))))[0] > 0.5  # measured 4.7


@pytest.mark.slow  # a cold JAX compile of the MJX env's step (1-2 minutes on 2 cores)
def test_mjx_mirrored_actions_mirror_the_rollout_too():
    from test_t1_native import TUNED_SCALES, _mjx_info, _mjx_rollout, MJX_FLOAT

    maps = t1_lowdim.mirror_maps()
    env = T1NativeVecEnv(TASK, 4, seed=0, num_threads=1, reward_scales=TUNED_SCALES, **QUIET)
    env.reset()
    for _ in range(25):
        env.step(torch.from_numpy(np.random.default_rng(0).uniform(-0.3, 0.3, (4, 12)).astype(np.float32)))
    state = (env._qpos.copy(), env._qvel.copy(), env._ctrl.copy(), {k: np.array(v) for k, v in env.info.items()})
    mirrored = mirror_state(env, *state)
    both = [np.concatenate([x, y]) for x, y in zip(state[:3], mirrored[:3])]
    info = {k: np.concatenate([state[3][k], mirrored[3][k]]) for k in state[3]}
    actions = np.random.default_rng(1).uniform(-0.3, 0.3, (2, 4, 12))
    actions = np.concatenate([actions, apply(maps["actions"], actions)], axis=1)
    _, (obs, reward, done, _) = _mjx_rollout(tuple(sorted(TUNED_SCALES.items())))(
        *(x.astype(MJX_FLOAT) for x in both), _mjx_info(info), actions.astype(MJX_FLOAT))
    actor, critic, reward = np.asarray(obs["state"]), np.asarray(obs["privileged_state"]), np.asarray(reward)
    assert np.abs(apply(maps["obs"], actor[:, :4]) - actor[:, 4:]).max() < 0.05
    assert np.abs(apply(maps["critic_obs"], critic[:, :4]) - critic[:, 4:]).max() < 0.05
    assert np.abs(reward[:, :4] - reward[:, 4:]).max() < 5e-4


def test_the_runner_updates_on_each_batch_and_its_mirror(tmp_path):
    """algo.symmetry=true on a real T1 env: every update sees 2B transitions, the second half mirrored."""
    from dataclasses import replace

    from fast_td3.training.config import EnvConfig
    from fast_td3.training.runner import Runner
    from helpers import tiny_train_config

    cfg = tiny_train_config(total_steps=12, num_envs=2, symmetry=True, batch_size=16, learning_starts=4)
    cfg = replace(cfg, env=EnvConfig(suite="playground", task=TASK, num_envs=2))
    env = T1NativeVecEnv(TASK, 2, seed=0, num_threads=1, **QUIET)
    runner = Runner(cfg, env, None, tmp_path)
    seen = []
    update = runner.agent.update
    runner.agent.update = lambda batch: seen.append(batch) or update(batch)
    runner.train()
    assert seen and all(batch.batch_size[0] == 32 for batch in seen)
    maps = t1_lowdim.mirror_maps()
    first = seen[0]
    np.testing.assert_allclose(apply(maps["obs"], first[keys.OBS][:16].numpy()), first[keys.OBS][16:].numpy())
    np.testing.assert_allclose(apply(maps["actions"], first[keys.ACTIONS][:16].numpy()), first[keys.ACTIONS][16:].numpy())
    np.testing.assert_allclose(apply(maps["critic_obs"], first[keys.CRITIC_OBS][:16].numpy()),
                               first[keys.CRITIC_OBS][16:].numpy())
    assert torch.equal(first[keys.REWARDS][:16], first[keys.REWARDS][16:])
