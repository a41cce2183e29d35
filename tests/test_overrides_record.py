"""overrides.yaml in every run folder: a single run's command-line overrides, merged on resume."""

import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
QUICK = [
    "sizing=cpu", "env.num_envs=4", "algo.batch_size=64", "algo.buffer_size=500", "algo.learning_starts=5",
    "algo.actor_hidden_dims=[32,32]", "algo.critic_hidden_dims=[64,64]", "algo.precision=fp32",
    "eval_episodes=2", "env.max_episode_steps=20", "logger.console=false", "eval_interval=0", "save_interval=0",
]


def train(*args):
    result = subprocess.run([sys.executable, "-m", "fast_td3.training.train", *args], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_single_run_records_its_overrides_and_a_resume_updates_them(tmp_path):
    train("task=InvertedPendulum-v5", *QUICK, "total_steps=10", "env.options.env_kwargs.reset_noise_scale=0.02",
          f"out_dir={tmp_path}")
    (run_dir,) = (tmp_path / "InvertedPendulum-v5").iterdir()
    recorded = list(OmegaConf.load(run_dir / "overrides.yaml"))
    assert recorded == ["task=InvertedPendulum-v5", *QUICK, "total_steps=10",
                        "++env.options.env_kwargs.reset_noise_scale=0.02", f"out_dir={tmp_path}"]

    train(f"resume={run_dir}", "total_steps=15")
    resumed = list(OmegaConf.load(run_dir / "overrides.yaml"))
    assert resumed == [o for o in recorded if not o.startswith("total_steps=")] + ["total_steps=15"]
