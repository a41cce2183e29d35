"""Gait metrics and critic diagnostics wired into the runner's evaluation (InvertedPendulum)."""

import numpy as np
import pytest
import torch

from fast_td3.measures import gait_metrics as gm
from envs.protocol import EnvSpec
from fast_td3.learner.algorithms.fast_td3 import FastTD3
from fast_td3.measures.diagnostics import critic_calibration, diagnostics_path, load_eval_diagnostics
from fast_td3.training.metrics_log import read_metrics
from helpers import make_runner, tiny_config, tiny_train_config


class ScriptedGaitEnv:
    """An eval env with the optional `gait_signals()` hook, its signals scripted so the metrics
    are known: height 0.5 (target 0.6), upright, torque 2 of limit 4 at 1.5 rad/s, the base
    moving 0.5 m per step."""

    def __init__(self, env) -> None:
        self._env = env
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._env, name)

    def gait_signals(self) -> dict:
        self.calls += 1
        n = self._env.num_envs
        return {
            gm.BASE_HEIGHT: torch.full((n,), 0.5), gm.BASE_HEIGHT_TARGET: 0.6,
            gm.PROJECTED_GRAVITY: torch.tensor([[0.0, 0.0, -1.0]]).repeat(n, 1),
            gm.TORQUES: torch.full((n, 1), 2.0), gm.TORQUE_LIMITS: torch.tensor([4.0]),
            gm.JOINT_VEL: torch.full((n, 1), 1.5), gm.DT: 0.02,
            gm.BASE_POS_XY: (torch.tensor([0.3, 0.4]) * self.calls).repeat(n, 1),
        }


def test_eval_logs_gait_metrics_and_writes_calibration_samples(tmp_path):
    cfg = tiny_train_config(total_steps=20)
    cfg.env.max_episode_steps = 8
    runner = make_runner(cfg, tmp_path)
    plain_eval_env = runner.eval_env
    runner.eval_env = ScriptedGaitEnv(plain_eval_env)
    try:
        final = runner.train()
        gait = {k.removeprefix("eval/gait/"): v for k, v in final.items() if k.startswith("eval/gait/")}
        assert set(gait) == {"action_smoothness", "fall_rate", "base_height_error", "orientation_error",
                             "torque_saturation_rate", "energy_per_metre"}
        assert gait["base_height_error"] == pytest.approx(0.1)
        assert gait["orientation_error"] == pytest.approx(0.0)
        assert gait["torque_saturation_rate"] == 0.0
        assert gait["energy_per_metre"] == pytest.approx(2 * 1.5 * 0.02 / 0.5)
        assert 0.0 <= gait["fall_rate"] <= 1.0 and gait["action_smoothness"] >= 0.0
        logged = [r for r in read_metrics(tmp_path) if "eval/return_mean" in r][-1]
        assert logged["eval/gait/base_height_error"] == pytest.approx(0.1)

        d = load_eval_diagnostics(diagnostics_path(tmp_path, 20))
        lengths = np.bincount(d["episode"])
        assert lengths.sum() == final["eval/length_mean"] * final["eval/episodes"] == len(d["q_pred"])
        assert d["actions"].shape == (len(d["q_pred"]), 1) and d["q_reduction"] == "min"
        assert d["gamma"] == cfg.algo.gamma and d["global_step"] == 20
        start = 0
        for length in lengths:  # per episode: G_t = r_t + gamma G_{t+1}; t counts from 0
            r, g = d["rewards"][start:start + length], d["mc_return"][start:start + length]
            assert d["t"][start:start + length].tolist() == list(range(length))
            assert np.allclose(g[:-1], r[:-1] + cfg.algo.gamma * g[1:], atol=1e-4)
            if length < 8:  # it fell: nothing after the termination
                assert g[-1] == pytest.approx(r[-1])
            else:  # time limit: bootstrapped from the critic's value of the final observation
                assert g[-1] != pytest.approx(r[-1])
            start += length
        stats = critic_calibration(d["q_pred"], d["mc_return"])
        for key, value in stats.items():
            assert final[f"eval/critic/{key}"] == pytest.approx(value, rel=1e-5)

        # an eval env without the hook: only what the runner knows itself
        runner.eval_env = plain_eval_env
        results = runner.evaluate()
        assert {k for k in results if k.startswith("eval/gait/")} == {"eval/gait/action_smoothness",
                                                                      "eval/gait/fall_rate"}
    finally:
        runner.env.close()
        plain_eval_env.close()


@pytest.mark.parametrize("use_cdq", [True, False])
def test_value_is_the_min_or_mean_of_the_twin_heads_in_reward_units(use_cdq):
    spec = EnvSpec(num_envs=4, num_obs=3, num_actions=2)
    agent = FastTD3(tiny_config(use_cdq=use_cdq, reward_normalization=True), spec, device="cpu")
    agent.update_normalizers(torch.randn(4, 3), rewards=torch.full((4,), 2.0), dones=torch.zeros(4, dtype=torch.bool))
    obs, actions = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    heads = agent.critic.expected_value(agent.critic(agent.obs_normalizer(obs), actions))
    expected = (heads.min(0).values if use_cdq else heads.mean(0)) * agent.reward_normalizer.scale()
    assert torch.allclose(agent.value(obs, None, actions), expected)
    assert agent.value_reduction == ("min" if use_cdq else "mean")
