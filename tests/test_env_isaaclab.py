"""The Isaac Lab adapter (`envs/isaaclab.py`) over an in-repo env with Isaac Lab's API.

Isaac Lab cannot run here (Python 3.12, a GPU, downloaded assets), so these tests drive
the adapter through `tests/fake_isaaclab.py`, which implements the API the adapter uses,
including the reset observation after a done. `tests/test_env_mjlab.py` runs the same
adapter on mjlab's real MuJoCo Warp envs.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from env_conformance import EnvContractTests
from envs.isaaclab import IsaacLabVecEnv, adapter_over
from envs.protocol import ACTOR, CRITIC, EPISODE, FINAL_OBSERVATIONS, OBSERVATIONS, TIME_OUTS
from envs.registry import EnvOptionError
from fake_isaaclab import (BASE_HEIGHT, GAIN, LIMIT, FakeEnvCfg, FakeManagerBasedRLEnv, RewardTermCfg, SceneCfg,
                           point_mass_step)
from fast_td3.training.config import EnvConfig
from fast_td3.training.metrics_log import read_metrics
from helpers import tiny_train_config

BIN = Path(sys.executable).parent


def fake_creator(auto_reset=None, noise=0.0, privileged_critic=True, episode_length_s=10.0, made=None,
                 one_per_process=False):
    """`create(task, num_envs, seed, device, render_mode=)` building the fake env."""

    def create(task, num_envs, seed, device, render_mode=None):
        cfg = FakeEnvCfg(observation_noise=noise, privileged_critic=privileged_critic,
                         episode_length_s=episode_length_s, seed=seed)
        cfg.scene.num_envs = num_envs
        env = FakeManagerBasedRLEnv(cfg, device=str(device), render_mode=render_mode, auto_reset=auto_reset,
                                    one_per_process=one_per_process)
        if made is not None:
            made.append(env)
        return env

    return create


def fake_adapter(num_envs=4, seed=0, auto_reset=None, noise=0.0, privileged_critic=True, made=None, **options):
    create = fake_creator(auto_reset, noise, privileged_critic, made=made)
    return adapter_over(create, "policy", "Fake-Isaac-PointMass-v0", num_envs, seed, "cpu", **options)


def reference_state(seed, num_envs, env_index, actions, action_bounds=1.0):
    """Env `env_index`'s state after `actions` on the bare fake physics (no resets, no time
    limit), from the initial state the adapter's first reset gives it."""
    probe = FakeManagerBasedRLEnv(FakeEnvCfg(scene=SceneCfg(num_envs)))
    with torch.random.fork_rng():
        probe.reset(seed=seed)
    state, goal = probe.state[env_index], probe.goal[env_index]
    for action in actions:
        state = point_mass_step(state, action.clamp(-1, 1) * action_bounds, probe.cfg)
    return {ACTOR: state, CRITIC: torch.cat([state, goal])}


class TestExactFinalObservationsContract(EnvContractTests):
    """Where the env can skip its auto-reset (mjlab's `cfg.auto_reset`), the adapter resets
    finished envs itself and returns their true terminal observations."""

    num_envs = 4
    short_time_limit = 7

    def make_env(self, seed, num_envs, **options):
        return fake_adapter(num_envs, seed, auto_reset=True, **options)

    def reference_observation(self, seed, env_index, actions):
        return reference_state(seed, self.num_envs, env_index, actions)

    def terminating_actions(self, env, generator):
        return torch.ones(env.num_envs, env.num_actions)

    def test_final_observations_policy_is_exact(self):
        env = self._env()
        assert env.final_observations == "exact" and env.env.cfg.auto_reset is False


class TestIsaacLabResetObservationPolicy(EnvContractTests):
    """Isaac Lab returns the reset observation after a done and cannot skip the reset: a
    time-out is reported as a termination, so no learner bootstraps from a reset observation."""

    num_envs = 4
    exact_final_observations = False

    def make_env(self, seed, num_envs, **options):
        return fake_adapter(num_envs, seed, **options)

    def terminating_actions(self, env, generator):
        return torch.ones(env.num_envs, env.num_actions)

    def test_final_observations_policy_is_no_bootstrap(self):
        assert self._env().final_observations == "no_bootstrap"

    def test_exact_final_observations_are_refused_where_the_env_cannot_skip_resets(self):
        with pytest.raises(EnvOptionError, match="can skip its auto-reset"):
            fake_adapter(final_observations="exact")


def test_runner_stores_isaac_lab_time_outs_as_terminations(tmp_path):
    """Through the runner: a time-out of an env without final observations is stored as
    terminated, so the TD target never uses the reset observation."""
    from fast_td3.training.runner import Runner

    cfg = tiny_train_config(total_steps=10)
    env = fake_adapter(num_envs=4, max_episode_steps=5)
    runner = Runner(cfg, env, None, tmp_path)
    obs, critic_obs = runner._reset_envs()
    for _ in range(6):
        obs, critic_obs = runner.collect(obs, critic_obs)
    stored = runner.buffer.gather(torch.full((4, 1), 4))
    assert stored["terminated"].all() and not stored["truncated"].any()


def test_unfinished_envs_keep_the_observation_step_returned():
    """A partial reset recomputes every env's observation with fresh noise; only the reset
    envs may take the new rows."""
    made = []
    env = fake_adapter(auto_reset=True, noise=0.1, made=made, max_episode_steps=50)
    fake = made[0]
    returned = []
    step = fake.step

    def recording_step(action):
        result = step(action)
        returned.append({k: v.clone() for k, v in result[0].items()})
        return result

    fake.step = recording_step
    env.reset()
    actions = torch.zeros(4, 2)
    actions[0] = 1.0  # env 0 leaves the square first
    for _ in range(200):
        obs, _, dones, extras = env.step(actions)
        if dones.any():
            break
    assert dones[0] and not dones[1:].any()
    assert torch.equal(obs[1:], returned[-1]["policy"][1:])
    assert torch.equal(extras[FINAL_OBSERVATIONS][ACTOR][0], returned[-1]["policy"][0])
    assert not torch.equal(obs[0], returned[-1]["policy"][0])


@pytest.mark.parametrize("auto_reset", [None, True])
def test_reward_terms_are_logged_per_episode(auto_reset):
    """`extras[EPISODE]["reward/<term>"]` on a finished env's row is the mean episode sum of
    that term over the envs that finished (from the env's `Episode_Reward/<term>` log)."""
    env = fake_adapter(auto_reset=auto_reset, max_episode_steps=4)
    env.reset()
    returns = torch.zeros(4)
    for _ in range(4):
        _, rewards, dones, extras = env.step(torch.full((4, 2), 0.5))
        returns += rewards
    assert dones.all()
    metric = extras[EPISODE]["reward/distance"]
    assert metric.shape == (4,)
    torch.testing.assert_close(metric, returns.mean().expand(4))
    _, _, dones, extras = env.step(torch.zeros(4, 2))
    assert not dones.any() and set(extras[EPISODE]) == {"reward/distance"}  # present on every step


def test_returned_tensors_survive_the_next_step():
    """The env overwrites its reward and done buffers in place every step; what the adapter
    returned for step t must not change at step t+1."""
    env = fake_adapter(auto_reset=True, max_episode_steps=3)
    env.reset()
    zero = torch.zeros(4, 2)
    env.step(zero), env.step(zero)
    _, rewards, dones, extras = env.step(zero)  # the time limit: every env ends
    kept = rewards.clone(), dones.clone(), extras[TIME_OUTS].clone()
    env.step(torch.ones(4, 2))
    assert kept[1].all() and kept[2].all()
    assert torch.equal(rewards, kept[0]) and torch.equal(dones, kept[1]) and torch.equal(extras[TIME_OUTS], kept[2])


def test_a_finite_horizon_time_limit_does_not_bootstrap():
    fake = fake_creator(auto_reset=True)("finite", 4, 0, "cpu")
    fake.cfg.is_finite_horizon = True  # mjlab's switch: the time limit ends the task
    env = IsaacLabVecEnv(lambda: fake, name="finite", max_episode_steps=2)
    env.reset()
    env.step(torch.zeros(4, 2))
    _, _, dones, extras = env.step(torch.zeros(4, 2))
    assert dones.all() and not extras[TIME_OUTS].any()
    assert not extras["terminations"].any()  # for metrics: a time limit, not a fall


def test_eval_tells_time_limits_from_falls_when_time_outs_are_not_reported():
    """no_bootstrap: the learner sees every end as a termination, the fall rate only the env's own."""
    from fast_td3.training.evaluation import run_episodes

    env = fake_adapter(num_envs=4, max_episode_steps=3)
    assert env.final_observations == "no_bootstrap"
    seen = []
    run_episodes(env, lambda obs: torch.zeros(4, 2), seed=0, on_transition=seen.append)
    assert seen[-1]["dones"].all() and not seen[-1]["time_outs"].any()
    assert not any(step["terminations"].any() for step in seen)


def test_training_on_isaac_lab_makes_one_simulation_per_process(tmp_path, monkeypatch):
    """Isaac Lab allows one simulation per process: `fast-td3-train`'s builder makes no
    separate eval envs for it (the fake refuses a second one as Isaac Lab does)."""
    import envs.isaaclab as isaaclab
    import envs.registry as registry
    from fast_td3.training.compose import build_and_train

    made = []
    monkeypatch.setattr(FakeManagerBasedRLEnv, "live", 0)  # other tests leave fakes open
    monkeypatch.setattr(registry, "require_suite", lambda suite: None)
    monkeypatch.setattr(isaaclab, "tasks", lambda: ["Fake-Isaac-PointMass-v0"])
    monkeypatch.setattr(isaaclab, "create_isaaclab_env", fake_creator(made=made, one_per_process=True))
    cfg = tiny_train_config(total_steps=20)
    cfg.env = EnvConfig(suite="isaaclab", task="Fake-Isaac-PointMass-v0", num_envs=4)
    cfg.save_interval = 10
    assert build_and_train(cfg, tmp_path) == {}
    assert len(made) == 1 and made[0].closed
    assert (tmp_path / "checkpoints").is_dir() and read_metrics(tmp_path)[-1]["step"] == 20
    with pytest.raises(RuntimeError, match="Simulation context already exists"):
        fake_creator(one_per_process=True)("t", 2, 0, "cpu"), fake_creator(one_per_process=True)("t", 2, 0, "cpu")


def test_camera_groups_pass_through_partial_resets():
    """Only the actor and critic groups are merged after a partial reset (mjlab's camera
    tasks return image groups too)."""
    made = []
    env = fake_adapter(auto_reset=True, made=made, max_episode_steps=50)
    fake = made[0]
    observations = fake._observations
    fake._observations = lambda: {**observations(), "camera": torch.zeros(4, 3, 8, 8)}
    env.reset()
    actions = torch.zeros(4, 2)
    actions[0] = 1.0
    for _ in range(200):
        _, _, dones, extras = env.step(actions)
        if dones.any():
            break
    assert dones[0] and set(extras[OBSERVATIONS]) == {ACTOR, CRITIC}


def test_actions_are_clamped_and_scaled_by_the_action_bounds():
    made = []
    env = fake_adapter(made=made, action_bounds=3.0)
    received = []
    step = made[0].step
    made[0].step = lambda action: (received.append(action.clone()), step(action))[1]
    env.reset()
    env.step(torch.tensor([[2.0, -0.5]] * 4))
    assert torch.equal(received[0], torch.tensor([[3.0, -1.5]] * 4))
    with pytest.raises(EnvOptionError, match="action_bounds"):
        fake_adapter(action_bounds=0.0)


def test_the_envs_random_streams_are_its_own():
    """Construction, reset(seed) and steps draw only from the adapter's own streams: the
    trainer's generators do not move, and interleaved adapters match solo ones."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = fake_adapter(seed=5, noise=0.1, auto_reset=True)
    a.reset()
    a.reset(seed=77)
    for _ in range(5):
        a.step(torch.zeros(4, 2))
    assert torch.equal(torch.rand(3), expected), "the env moved the global torch generator"

    def rollout(*envs):
        out = [[] for _ in envs]
        for env in envs:
            env.reset()
        for _ in range(20):
            for i, env in enumerate(envs):
                out[i].append(env.step(torch.full((4, 2), 0.3))[0])
        return [torch.stack(o) for o in out]

    solo = rollout(fake_adapter(seed=5, noise=0.1))[0]
    together = rollout(fake_adapter(seed=5, noise=0.1), fake_adapter(seed=6, noise=0.1))
    assert torch.equal(together[0], solo)
    assert not torch.equal(together[1], solo)


def test_random_initial_progress_staggers_time_outs_reproducibly():
    made = []
    env = fake_adapter(num_envs=64, seed=3, made=made, random_initial_progress=True, max_episode_steps=20)
    env.reset()
    progress = made[0].episode_length_buf.clone()
    assert progress.min() >= 0 and progress.max() < 20 and len(progress.unique()) > 10
    first_done = torch.full((64,), -1)
    for t in range(20):
        _, _, dones, _ = env.step(torch.zeros(64, 2))
        first_done[dones & (first_done < 0)] = t + 1
    assert torch.equal(first_done, 20 - progress), "each env times out after its remaining steps"
    again = []
    fake_adapter(num_envs=64, seed=3, made=again, random_initial_progress=True, max_episode_steps=20).reset()
    assert torch.equal(again[0].episode_length_buf, progress)


@pytest.mark.parametrize("steps", [3, 7, 250, 1001])
def test_max_episode_steps_sets_the_exact_time_limit(steps):
    made = []
    env = fake_adapter(made=made, max_episode_steps=steps)
    assert env.max_episode_steps == steps == made[0].max_episode_length
    assert fake_adapter().max_episode_steps == math.ceil(10.0 / 0.02)


def test_groups_critic_and_errors():
    symmetric = fake_adapter(privileged_critic=False)
    assert symmetric.num_critic_obs is None and symmetric.num_obs == 4 and symmetric.num_actions == 2
    obs, extras = symmetric.reset()
    assert CRITIC not in extras[OBSERVATIONS]
    asymmetric = fake_adapter()
    assert asymmetric.num_critic_obs == 6
    made = []
    with pytest.raises(EnvOptionError, match=r"no observation group 'actor'.*\['critic', 'policy'\]"):
        fake_adapter(made=made, actor_group="actor")
    assert made[0].closed
    with pytest.raises(EnvOptionError, match="reward scales"):
        fake_adapter(reward_scales={"track_lin_vel": 2.0})
    with pytest.raises(EnvOptionError, match="final_observations"):
        fake_adapter(final_observations="sometimes")


def test_render_frames_of_env_zero():
    env = IsaacLabVecEnv(lambda: fake_creator()("t", 2, 0, "cpu", render_mode="rgb_array"), name="t")
    env.reset()
    assert env.render(0).shape == (32, 32, 3)
    with pytest.raises(ValueError, match="env 0"):
        env.render(1)
    plain = fake_adapter()
    plain.reset()
    with pytest.raises(RuntimeError, match="render_mode='rgb_array'"):
        plain.render(0)


def test_suite_presets_compose_with_the_reference_overrides():
    from hydra import compose, initialize_config_dir
    from fast_td3.training.train import CONF_DIR  # importing train registers the schema and resolvers

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        lift = compose("train", ["task=Isaac-Lift-Cube-Franka-v0"])
        rough = compose("train", ["task=Isaac-Velocity-Rough-G1-v0"])
        g1 = compose("train", ["task=Mjlab-Velocity-Flat-Unitree-G1"])
    assert lift.env.suite == "isaaclab" and lift.env.num_envs == 1024
    assert lift.algo.disable_bootstrap and lift.env.options.action_bounds == 3.0 and lift.algo.num_updates == 8
    assert lift.algo.fast_td3.std_max == 0.8 and lift.total_steps == 20000
    assert rough.algo.n_step == 8 and rough.algo.buffer_size == 5120 and rough.algo.num_atoms == 251
    assert rough.env.options.actor_group == "policy" and rough.env.eval_options.random_initial_progress is False
    assert g1.env.suite == "mjlab" and g1.env.options.actor_group == "actor"
    EnvConfig(**{k: v for k, v in g1.env.items()})  # the schema accepts the preset


@pytest.mark.parametrize("task, package, instruction", [
    ("Isaac-Velocity-Flat-H1-v0", "isaaclab", "isaac-sim.github.io"),
    ("Mjlab-Velocity-Flat-Unitree-G1", "mjlab", 'pip install -c .ci/mjlab-constraints.txt -e ".[mjlab]"'),
])
def test_a_missing_suite_prints_its_install_instructions(tmp_path, task, package, instruction):
    blocker = tmp_path / "blocker"  # the package unimportable even where it is installed
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(f"import sys\nsys.modules[{package!r}] = None\n")
    result = subprocess.run(
        [str(BIN / "fast-td3-train"), f"task={task}", "out_dir=runs"], capture_output=True, text=True,
        cwd=tmp_path, timeout=120, env={**os.environ, "PYTHONPATH": str(blocker)},
    )
    assert result.returncode == 2, result.stderr
    assert f"'{package}'" in result.stderr and instruction in result.stderr
    assert not (tmp_path / "runs").exists(), "no run folder is made for a run that cannot start"


def test_runner_trains_on_the_fake_and_checkpoints(tmp_path):
    """End to end on the API: collect, update, evaluate on a second env, checkpoint."""
    from fast_td3.training.runner import Runner

    cfg = tiny_train_config(total_steps=40)
    cfg.eval_interval, cfg.save_interval = 20, 20
    env = fake_adapter(num_envs=4, auto_reset=True)
    evaluation = fake_adapter(num_envs=2, seed=99, auto_reset=True)
    runner = Runner(cfg, env, evaluation, tmp_path)
    final = runner.train()
    assert final["eval/episodes"] == 2 and math.isfinite(final["eval/return_mean"])
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir())[-1].endswith("40.pt")
    assert read_metrics(tmp_path)[-1]["step"] == 40


# ------------------------------------------------------------------ gait signals
PER_STEP_KEYS = {"base_height", "base_pos_xy", "projected_gravity", "base_lin_vel_xy", "base_ang_vel_z", "command",
                 "joint_pos", "joint_vel", "torques"}


def steps_until_env_0_ends(env, fake, call_hook=True, limit=200):
    """Drive env 0 out of the square (the others hold still) until it ends; returns the
    transition of that step, the hook's signals of every step, and the command before each."""
    actions = torch.zeros(4, 2)
    actions[0] = 1.0
    signals, commands = [], []
    for _ in range(limit):
        commands.append(fake.command_manager.get_command("base_velocity").clone())
        obs, _, dones, extras = env.step(actions)
        signals.append(env.gait_signals() if call_hook or dones.any() else None)
        if dones.any():
            return obs, dones, extras, signals, commands
    raise AssertionError("env 0 never ended")


@pytest.mark.parametrize("auto_reset", [None, True])
def test_gait_signals_are_the_robots_data_of_the_step(auto_reset):
    made = []
    env = fake_adapter(auto_reset=auto_reset, made=made, max_episode_steps=50)
    fake, data = made[0], made[0].robot.data
    env.reset()
    command = fake.command_manager.get_command("base_velocity").clone()
    actions = torch.tensor([[0.5, -0.25], [0.0, 1.0], [-1.0, 0.0], [0.0, 0.0]])
    env.step(actions)
    signals = env.gait_signals()
    assert set(signals) == PER_STEP_KEYS | {"dt", "joint_limits", "torque_limits"}
    torch.testing.assert_close(signals["base_height"], torch.full((4,), BASE_HEIGHT))
    torch.testing.assert_close(signals["base_pos_xy"], fake.state[:, :2])
    torch.testing.assert_close(signals["projected_gravity"], torch.tensor([[0.0, 0.0, -1.0]] * 4))
    speed = fake.state[:, 2:4].norm(dim=1)  # the fake faces its velocity: (speed, 0) in the heading frame
    torch.testing.assert_close(signals["base_lin_vel_xy"], torch.stack([speed, torch.zeros(4)], dim=1))
    torch.testing.assert_close(signals["base_ang_vel_z"], data.root_link_ang_vel_w[:, 2])
    assert signals["base_ang_vel_z"][3] == 0 and signals["base_ang_vel_z"][:3].abs().max() > 0
    torch.testing.assert_close(signals["joint_pos"], fake.state[:, :2])
    torch.testing.assert_close(signals["joint_vel"], fake.state[:, 2:4])
    torch.testing.assert_close(signals["torques"], GAIN * actions)
    # the command in force during the step, not the one the env computed after it
    torch.testing.assert_close(signals["command"], command)
    assert not torch.equal(fake.command_manager.get_command("base_velocity"), command)
    assert signals["dt"] == pytest.approx(0.02)
    torch.testing.assert_close(signals["joint_limits"], torch.tensor([[-LIMIT, LIMIT]] * 2))
    torch.testing.assert_close(signals["torque_limits"], torch.tensor([GAIN, GAIN]))
    kept = {key: value.clone() for key, value in signals.items() if isinstance(value, torch.Tensor)}
    env.step(torch.ones(4, 2))  # the env rewrites its buffers in place; what the hook returned stays
    assert all(torch.equal(signals[key], value) for key, value in kept.items())


def test_the_base_velocity_is_rotated_into_the_heading_frame():
    made = []
    env = fake_adapter(made=made)
    data = made[0].robot.data
    env.reset()
    env.step(torch.zeros(4, 2))
    data.heading_w[:] = torch.tensor([math.pi / 2, math.pi / 2, math.pi, -math.pi / 4])
    data.root_link_lin_vel_w[:] = torch.tensor([[0.0, 1.0, 0.3], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    expected = torch.tensor([[1.0, 0.0], [0.0, -1.0], [-2.0, 0.0], [0.0, math.sqrt(2)]])
    torch.testing.assert_close(env.gait_signals()["base_lin_vel_xy"], expected)


class ProxyLike:
    """Isaac Lab 3's `ProxyArray` where the adapter touches it: a warp array with a `.torch` view."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.torch = tensor


def test_isaac_lab_3_warp_backed_data_is_read_through_its_torch_view():
    made = []
    env = fake_adapter(made=made)
    data = made[0].robot.data
    env.reset()
    env.step(torch.full((4, 2), 0.5))
    data.joint_pos, data.projected_gravity_b = ProxyLike(data.joint_pos), ProxyLike(data.projected_gravity_b)
    signals = env.gait_signals()
    torch.testing.assert_close(signals["joint_pos"], made[0].state[:, :2])
    torch.testing.assert_close(signals["projected_gravity"], torch.tensor([[0.0, 0.0, -1.0]] * 4))


def test_finished_rows_describe_the_terminal_state_with_exact_final_observations():
    """mjlab's mode: the hook's rows of the envs that finished are read before the adapter's
    partial reset, so they show the terminal state, like the final observations."""
    made = []
    env = fake_adapter(auto_reset=True, made=made, max_episode_steps=200)
    fake = made[0]
    env.reset()
    obs, dones, extras, signals, commands = steps_until_env_0_ends(env, fake)
    assert env.final_observations == "exact" and dones[0] and not dones[1:].any()
    last, terminal = signals[-1], extras[FINAL_OBSERVATIONS][ACTOR][0]
    torch.testing.assert_close(last["joint_pos"][0], terminal[:2])
    torch.testing.assert_close(last["base_pos_xy"][0], terminal[:2])
    torch.testing.assert_close(last["joint_vel"][0], terminal[2:4])
    assert (last["joint_pos"][0].abs() > LIMIT).any(), "the terminal state is outside the square"
    torch.testing.assert_close(last["torques"][0], torch.tensor([GAIN, GAIN]))
    torch.testing.assert_close(last["command"], commands[-1])
    assert not torch.equal(obs[0, :2], terminal[:2])  # the env itself is already reset
    torch.testing.assert_close(fake.robot.data.joint_pos[0], obs[0, :2])
    torch.testing.assert_close(last["joint_pos"][1:], fake.state[1:, :2])  # the others: the step's state


def test_finished_rows_repeat_the_last_state_seen_when_the_env_resets_itself():
    """Isaac Lab's mode: the env resets inside `step`, so the terminal state is gone; the
    finished rows repeat the previous call's rows (the state before the last action)."""
    made = []
    env = fake_adapter(made=made, max_episode_steps=200)
    fake = made[0]
    env.reset()
    obs, dones, _, signals, _ = steps_until_env_0_ends(env, fake)
    assert env.final_observations == "no_bootstrap" and dones[0] and len(signals) > 1
    before, last = signals[-2], signals[-1]
    for key in PER_STEP_KEYS:
        torch.testing.assert_close(last[key][0], before[key][0])
    assert (last["joint_pos"][0].abs() <= LIMIT).all()
    torch.testing.assert_close(last["joint_pos"][1:], fake.state[1:, :2])
    # the next step starts from the reset state: its predecessor is that, not the held row
    env.step(torch.zeros(4, 2))
    following = env.gait_signals()
    torch.testing.assert_close(following["joint_pos"][0], fake.state[0, :2])

    # a finished env in the first step after reset(): the state reset() read
    env.reset()
    reset_state = fake.state[0, :2].clone()
    fake.state[0, 0] = 10.0  # env 0 ends in the next step
    env.step(torch.zeros(4, 2))
    torch.testing.assert_close(env.gait_signals()["joint_pos"][0], reset_state)

    # without a call after the previous step the terminal row is unknown: the reset state shows
    env.reset()
    obs, dones, _, signals, _ = steps_until_env_0_ends(env, fake, call_hook=False)
    torch.testing.assert_close(signals[-1]["joint_pos"][0], obs[0, :2])


def test_gait_signals_return_what_the_task_has():
    missing = fake_adapter(robot_entity="arm")
    missing.reset()
    missing.step(torch.zeros(4, 2))
    assert missing.gait_signals() == {}
    off = fake_adapter(robot_entity=None)
    off.reset()
    off.step(torch.zeros(4, 2))
    assert off.gait_signals() == {}

    fake = fake_creator()("t", 4, 0, "cpu")
    fake.robot.is_fixed_base = True  # joints only: no base signals, no command
    fake.robot.actuators["thrusters"].effort_limit[2:, 1] = 2.0  # per-env limits keep the env dimension
    fixed = IsaacLabVecEnv(lambda: fake, name="fixed")
    fixed.reset()
    fixed.step(torch.zeros(4, 2))
    signals = fixed.gait_signals()
    assert set(signals) == {"joint_pos", "joint_vel", "torques", "dt", "joint_limits", "torque_limits"}
    torch.testing.assert_close(signals["torque_limits"], torch.tensor([[GAIN, GAIN]] * 2 + [[GAIN, 2.0]] * 2))

    fake = fake_creator()("t", 4, 0, "cpu")
    fake.robot.actuators["thrusters"].effort_limit[:, 0] = 1e9  # Isaac Lab's "unlimited" in actuators...
    fake.robot.data.joint_effort_limits[:, 0] = 7.0  # ...then the solver's limit
    env = IsaacLabVecEnv(lambda: fake, name="t")
    env.reset()
    env.step(torch.zeros(4, 2))
    torch.testing.assert_close(env.gait_signals()["torque_limits"], torch.tensor([7.0, GAIN]))

    fake = fake_creator()("t", 4, 0, "cpu")
    fake.robot.actuators["thrusters"].effort_limit[:, 0] = 1e9
    fake.robot.data.joint_effort_limits[:, 0] = 1e9  # no finite limit: no saturation metric
    fake.command_manager.active_terms = []  # no velocity command
    env = IsaacLabVecEnv(lambda: fake, name="t")
    env.reset()
    env.step(torch.zeros(4, 2))
    assert "torque_limits" not in env.gait_signals() and "command" not in env.gait_signals()


def base_height_l2(env, target_height):
    """Named like Isaac Lab's reward term (its name is what the adapter looks for)."""
    return torch.zeros(env.num_envs)


def test_the_base_height_target_comes_from_a_base_height_reward_term():
    fake = fake_creator()("t", 4, 0, "cpu")
    fake.reward_manager.active_terms.append("base_height")
    fake.reward_manager.cfgs["base_height"] = RewardTermCfg(base_height_l2, {"target_height": 0.72})
    env = IsaacLabVecEnv(lambda: fake, name="t")
    env.reset()
    env.step(torch.zeros(4, 2))
    assert env.gait_signals()["base_height_target"] == pytest.approx(0.72)


@pytest.mark.parametrize("auto_reset", [True, None])
def test_runner_logs_gait_metrics_through_the_hook(tmp_path, auto_reset):
    """Through the runner's evaluation: every metric the fake's signals allow is logged. A
    policy pushing full force everywhere makes each env leave the square: every episode is
    a fall and every torque saturated. The joint limits are the square, so only the terminal
    rows (exact final observations) lie outside them; with the env's own reset they repeat
    the state before the last step, which lies inside."""
    from fast_td3.training.runner import Runner

    cfg = tiny_train_config(total_steps=20)
    cfg.eval_interval = 20
    env = fake_adapter(num_envs=4, auto_reset=True)
    evaluation = fake_adapter(num_envs=3, seed=99, auto_reset=auto_reset, max_episode_steps=60)
    runner = Runner(cfg, env, evaluation, tmp_path)
    runner.agent.act = lambda obs, *args, **kwargs: torch.ones(obs.shape[0], 2)
    final = runner.train()
    gait = {k.removeprefix("eval/gait/"): v for k, v in final.items() if k.startswith("eval/gait/")}
    assert set(gait) == {"lin_vel_tracking_error", "ang_vel_tracking_error", "action_smoothness",
                         "torque_saturation_rate", "joint_limit_violation_rate", "orientation_error",
                         "energy_per_metre", "fall_rate"}
    assert gait["fall_rate"] == 1.0 and gait["torque_saturation_rate"] == 1.0
    assert gait["orientation_error"] == 0.0 and gait["action_smoothness"] == 0.0
    assert math.isfinite(gait["lin_vel_tracking_error"]) and gait["energy_per_metre"] > 0
    if auto_reset:
        assert gait["joint_limit_violation_rate"] > 0
    else:
        assert gait["joint_limit_violation_rate"] == 0
    logged = [r for r in read_metrics(tmp_path) if "eval/return_mean" in r][-1]
    assert logged["eval/gait/fall_rate"] == 1.0
