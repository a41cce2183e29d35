"""The Isaac Lab adapter on mjlab: Isaac Lab's API over real MuJoCo Warp physics, on CPU.

mjlab pins mujoco 3.11, so these tests run in a venv of their own (README, mjlab;
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
    pytest.mark.skipif(not HAVE_MJLAB, reason="mjlab is not installed (it needs its own venv: README, mjlab)"),
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
        from envs.isaaclab import OwnRandomStreams
        from envs.mjlab import create_mjlab_env

        with OwnRandomStreams(torch.device("cpu")).active():
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
    quick = ["task=" + G1, "preset=cpu", "env.num_envs=4", "algo.batch_size=256", "algo.buffer_size=400",
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

    played = cli("fast-td3-play", "run", "--video", "g1.mp4", "--steps", "25", cwd=tmp_path)
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
