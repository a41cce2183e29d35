"""The Isaac Lab adapter on mjlab: Isaac Lab's API over real MuJoCo Warp physics, on CPU.

mjlab pins mujoco 3.11, so these tests run in a venv of their own (docs/suites.md;
`.ci/run` builds it) and carry the `mjlab` marker: `python -m pytest -m mjlab`. Elsewhere
they are skipped with the reason.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from env_conformance import EnvContractTests
from envs.protocol import ACTOR, CRITIC

HAVE_MJLAB = importlib.util.find_spec("mjlab") is not None
pytestmark = [
    pytest.mark.mjlab,
    pytest.mark.skipif(not HAVE_MJLAB, reason="mjlab is not installed (it needs its own venv: docs/suites.md)"),
]
BIN = Path(sys.executable).parent
G1 = "Mjlab-Velocity-Flat-Unitree-G1"


def mjlab_env(task, num_envs, seed=0, **options):
    from envs.registry import make_env

    return make_env("mjlab", task, num_envs, seed, "cpu", **options)


class MjlabContract(EnvContractTests):
    task = ""
    num_envs = 3

    def make_env(self, seed, num_envs, **options):
        return mjlab_env(self.task, num_envs, seed, **options)

    def reference_observation(self, seed, env_index, actions):
        """Env `env_index` on mjlab itself, without the adapter: a raw env with the same seed,
        no auto-reset and no time limit, in random streams of its own; the other envs hold
        still (envs are independent; random draws are batch-wide)."""
        from envs.mjlab import create_mjlab_env
        from envs.random_streams import PrivateRandomStreams

        with PrivateRandomStreams(numpy=True, python=True, torch_device=torch.device("cpu")).active():
            env = create_mjlab_env(self.task, self.num_envs, seed, "cpu")
            try:
                env.cfg.auto_reset, env.cfg.episode_length_s = False, 1e9
                groups, _ = env.reset(seed=seed)
                for action in actions:
                    full = torch.zeros(self.num_envs, action.shape[-1])
                    full[env_index] = action.clamp(-1.0, 1.0)
                    groups = env.step(full)[0]
                return {ACTOR: groups["actor"][env_index].clone(), CRITIC: groups["critic"][env_index].clone()}
            finally:
                env.close()


class TestVelocityG1Contract(MjlabContract):
    """Unitree G1 velocity tracking: falls terminate, observations are noisy and commands
    are resampled on timers, all from the adapter's own random streams."""

    task = G1
    max_steps = 300

    def test_the_adapter_uses_exact_final_observations_and_both_groups(self):
        env = self._env()
        assert env.final_observations == "exact" and env.env.cfg.auto_reset is False
        assert (env.num_obs, env.num_critic_obs, env.num_actions) == (99, 111, 29)


class TestCartpoleContract(MjlabContract):
    task = "Mjlab-Cartpole-Balance"
    terminates = False


def cli(tool, *args, cwd, timeout=900):
    return subprocess.run([str(BIN / tool), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MUJOCO_GL": "egl"})


def test_train_checkpoint_resume_and_play_on_g1(tmp_path):
    """A few hundred training steps end to end through the CLI, a resume, then fast-td3-play
    records the policy."""
    quick = ["task=" + G1, "sizing=cpu", "env.num_envs=4", "algo.batch_size=256", "algo.buffer_size=400",
             "algo.num_updates=1", "algo.learning_starts=20", "eval_episodes=2", "eval_interval=0",
             "save_interval=100", "env.max_episode_steps=100", "logger.console=false", "hydra.run.dir=run"]
    trained = cli("fast-td3-train", *quick, "total_steps=200", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert checkpoints[-1] == "step_000000200.pt", checkpoints
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/return_mean" in m for m in metrics)
    terms = {k for m in metrics for k in m if k.startswith("train/episode/reward/")}
    assert {"train/episode/reward/track_linear_velocity", "train/episode/reward/upright"} <= terms, terms
    losses = [m["loss/critic"] for m in metrics if "loss/critic" in m]
    assert losses and all(loss == loss and abs(loss) < 1e6 for loss in losses)  # updates ran, finite

    resumed = cli("fast-td3-train", "resume=run", "total_steps=300", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step_000000300.pt" in {p.name for p in (tmp_path / "run" / "checkpoints").iterdir()}

    played = cli("fast-td3-play", "run", "--use", "latest", "--video", "g1.mp4", "--steps", "25", cwd=tmp_path)
    assert played.returncode == 0, played.stderr[-3000:]
    record = json.loads(played.stdout.strip().splitlines()[-1])
    assert record["step"] == 300 and record["steps"] == 25
    import imageio.v3 as imageio

    frames = imageio.imread(tmp_path / "g1.mp4", index=None)
    assert frames.shape[0] == 25 and frames.std() > 0


def test_play_in_the_viser_viewer_runs_the_policy():
    """The viewer path headless: mjlab's viser viewer steps our adapter with our policy."""
    from envs.mjlab import view

    env = mjlab_env("Mjlab-Cartpole-Balance", 2, play=True)
    seen = []

    def policy(obs):
        seen.append(obs.shape)
        return torch.zeros(obs.shape[0], env.num_actions)

    try:
        view(env, policy, viewer="viser", steps=5)
    finally:
        env.close()
    assert len(seen) >= 5 and seen[0] == (2, env.num_obs)


def test_gait_signals_of_the_g1():
    """The gait hook on the real G1 velocity task: every signal the metrics use, with the
    right shapes and plausible values; finished envs' rows are the state before the
    adapter's partial reset."""
    env = mjlab_env(G1, 2, max_episode_steps=8)
    raw, robot = env.env, env.env.scene["robot"]
    seen_before_reset = []
    reset = raw.reset

    def reset_seen(*args, **kwargs):
        if kwargs.get("env_ids") is not None:
            seen_before_reset.append((robot.data.joint_pos.clone(), robot.data.root_link_pos_w.clone()))
        return reset(*args, **kwargs)

    raw.reset = reset_seen
    try:
        env.reset()
        env.step(torch.zeros(2, env.num_actions))
        torch.testing.assert_close(env.gait_signals()["projected_gravity"], torch.tensor([[0.0, 0.0, -1.0]] * 2),
                                   atol=0.02, rtol=0)  # upright at the start
        for _ in range(4):  # the robot starts a little above the ground: let it land
            env.step(torch.zeros(2, env.num_actions))
        command = raw.command_manager.get_command("twist").clone()
        _, _, dones, _ = env.step(torch.zeros(2, env.num_actions))
        signals = env.gait_signals()
        shapes = {key: tuple(value.shape) for key, value in signals.items() if isinstance(value, torch.Tensor)}
        assert shapes == {
            "base_height": (2,), "base_pos_xy": (2, 2), "projected_gravity": (2, 3), "base_lin_vel_xy": (2, 2),
            "base_ang_vel_z": (2,), "command": (2, 3), "joint_pos": (2, 29), "joint_vel": (2, 29),
            "torques": (2, 29), "foot_contact": (2, 2), "foot_vel_xy": (2, 2, 2), "joint_limits": (29, 2),
            "torque_limits": (29,),
        }, shapes
        assert signals["dt"] == pytest.approx(0.02) and not dones.any()
        torch.testing.assert_close(signals["projected_gravity"], torch.tensor([[0.0, 0.0, -1.0]] * 2),
                                   atol=0.15, rtol=0)
        assert ((signals["base_height"] > 0.6) & (signals["base_height"] < 0.9)).all(), signals["base_height"]
        assert signals["base_lin_vel_xy"].norm(dim=-1).max() < 1.0 and signals["base_ang_vel_z"].abs().max() < 2.0
        torch.testing.assert_close(signals["command"], command)
        assert signals["foot_contact"].dtype == torch.bool and signals["foot_contact"].any()
        assert signals["foot_vel_xy"].abs().max() < 1.0
        limits, torque_limits = signals["joint_limits"], signals["torque_limits"]
        assert (limits[:, 0] < limits[:, 1]).all()
        assert ((signals["joint_pos"] >= limits[:, 0] - 0.05) & (signals["joint_pos"] <= limits[:, 1] + 0.05)).all()
        assert torch.isfinite(torque_limits).all() and (torque_limits > 0).all() and len(set(torque_limits.tolist())) > 1
        assert (signals["torques"].abs() <= torque_limits * 1.001).all() and signals["torques"].abs().max() > 5.0

        env.step(torch.zeros(2, env.num_actions))
        _, _, dones, _ = env.step(torch.zeros(2, env.num_actions))  # the time limit: both envs finish
        signals = env.gait_signals()
        assert dones.all() and len(seen_before_reset) == 1
        joint_pos, root_pos = seen_before_reset[0]
        torch.testing.assert_close(signals["joint_pos"], joint_pos)
        torch.testing.assert_close(signals["base_pos_xy"], root_pos[:, :2])
        assert not torch.equal(robot.data.joint_pos, joint_pos), "the envs are reset since"
    finally:
        env.close()


def test_gait_signals_of_a_task_without_a_robot_entity_are_empty():
    env = mjlab_env("Mjlab-Cartpole-Balance", 2)  # its entity is "cartpole"
    try:
        env.reset()
        env.step(torch.zeros(2, env.num_actions))
        assert env.gait_signals() == {}
    finally:
        env.close()
    env = mjlab_env("Mjlab-Cartpole-Balance", 2, robot_entity="cartpole")  # a fixed base: its joints only
    try:
        env.reset()
        env.step(torch.zeros(2, env.num_actions))
        signals = env.gait_signals()
        assert {"joint_pos", "joint_vel", "torques", "joint_limits", "dt"} <= set(signals)
        assert "base_height" not in signals and signals["joint_pos"].shape == (2, 2)
    finally:
        env.close()
