"""The runner drives any algorithm through one interface: FastSAC trains, logs, evaluates,
checkpoints, resumes and exports like FastTD3; checkpoints of the previous format still load."""

import re
from pathlib import Path

import pytest
import torch

from fast_td3.training import checkpoint as ckpt
from fast_td3.analysis.evaluate_checkpoint import evaluate_checkpoint, load_checkpoint, load_policy
from fast_td3.training.metrics_log import read_metrics
from fast_td3.training.checkpoint import CheckpointMismatchError
from helpers import make_runner, tiny_train_config

SAC = dict(name="fast_sac", activation="silu", layer_norm=True, use_cdq=False)


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("sac_run")
    cfg = tiny_train_config(total_steps=20, **SAC)
    cfg.save_interval, cfg.eval_interval = 10, 20
    runner = make_runner(cfg, path)
    final = runner.train()
    runner.env.close(), runner.eval_env.close()
    return path, runner, final


def test_fast_sac_trains_logs_its_own_metrics_and_evaluates(sac_run):
    path, runner, final = sac_run
    assert type(runner.agent).__name__ == "FastSAC" and final["eval/episodes"] == 2
    train_logs = [r for r in read_metrics(path) if "loss/critic" in r]
    assert [r["step"] for r in train_logs] == [10, 20]
    for key in ("loss/actor", "grad_norm/actor", "q/mean", "sac/alpha", "loss/alpha", "sac/entropy", "lr/actor"):
        assert key in train_logs[-1], key
    assert "eval/critic/bias" in final or any(k.startswith("eval/critic/") for k in final)


def test_fast_sac_resumes_with_its_temperature(sac_run, tmp_path):
    path, runner, _ = sac_run
    cfg = tiny_train_config(total_steps=30, **SAC)
    resumed = make_runner(cfg, tmp_path, eval_env=False)
    resumed.load(path)
    assert resumed.global_step == 20
    assert torch.equal(resumed.agent.log_alpha, runner.agent.log_alpha)
    assert resumed.agent.alpha_optimizer.state_dict()["state"][0]["step"] == runner.agent.critic_updates
    resumed.env.close()
    td3 = make_runner(tiny_train_config(total_steps=30), tmp_path / "td3", eval_env=False)
    with pytest.raises(CheckpointMismatchError, match="algo=fast_sac"):
        td3.load(path)
    td3.env.close()


def test_fast_sac_exports_and_evaluates_like_fast_td3(sac_run, tmp_path):
    pytest.importorskip("onnxruntime")
    from sim2real.export import export_bundle, load_bundle_policy

    path, _, _ = sac_run
    bundle = export_bundle(path, tmp_path / "bundle")
    policy, meta = load_bundle_policy(bundle)
    assert meta["policy"]["algorithm"] == "fast_sac"
    _, checkpoint, cfg = load_checkpoint(path)
    agent = load_policy(checkpoint, cfg, torch.device("cpu"))
    obs = torch.randn(32, agent.spec.num_obs) * 2
    torch.testing.assert_close(policy(obs), agent.act(obs), rtol=1e-5, atol=1e-5)  # mean through tanh
    assert evaluate_checkpoint(path, episodes=2)["episodes"] == 2


def format_1(state: dict) -> dict:
    """A checkpoint as FastTD3 wrote it before the algorithm interface."""
    state = dict(state, format=1)
    agent = dict(state["agent"])
    state["noise"] = agent.pop("exploration")
    state["agent"] = agent
    algo = dict(state["config"]["algo"])
    algo.pop("name"), algo.pop("fast_sac")
    for key, value in algo.pop("fast_td3").items():
        algo[key] = value
    for key in ("activation", "layer_norm", "obs_normalization_source"):
        algo.pop(key)
    state["config"] = dict(state["config"], algo=algo)
    return state


def test_format_1_checkpoints_still_load(tmp_path):
    cfg = tiny_train_config(total_steps=10)
    runner = make_runner(cfg, tmp_path / "old", eval_env=False)
    runner.train()
    runner.env.close()
    old = format_1(ckpt.load(ckpt.find_checkpoint(tmp_path / "old")))
    path = tmp_path / "old_ckpt" / "checkpoints" / "step_000000010.pt"
    path.parent.mkdir(parents=True)
    torch.save(old, path)
    resumed = make_runner(tiny_train_config(total_steps=20), tmp_path / "new", eval_env=False)
    resumed.load(path)
    assert resumed.global_step == 10 and torch.equal(resumed.agent.noise.std, runner.agent.noise.std)
    resumed.env.close()
    _, checkpoint, loaded_cfg = load_checkpoint(path)
    assert loaded_cfg.algo.name == "fast_td3" and loaded_cfg.algo.fast_td3 == cfg.algo.fast_td3


def test_the_runner_names_no_algorithm():
    source = (Path(__file__).resolve().parent.parent / "fast_td3" / "training" / "runner.py").read_text()
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("#", '"')))
    assert not re.search(r"FastTD3|FastSAC|PerEnvGaussianNoise|fast_sac", code)
