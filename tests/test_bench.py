"""The benchmark scripts measure what they say (scripts/bench.py, scripts/bench_vs_reference.py)."""

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench  # noqa: E402
from bench_update import synthetic_batch  # noqa: E402
from fast_td3.learner.config import AlgoConfig  # noqa: E402


def test_update_flops_scale_with_the_batch_and_count_the_matmuls():
    """FLOPs of an update are matmul FLOPs: exactly proportional to the batch, and for a
    one-layer-wide critic they match the count by hand."""
    cfg = AlgoConfig(actor_hidden_dims=[32], critic_hidden_dims=[64], num_atoms=11, batch_size=256,
                     compile=False, precision="fp32")
    cpu = torch.device("cpu")
    small = bench.update_flops(cfg, synthetic_batch(256, cpu), cpu)
    large = bench.update_flops(cfg, synthetic_batch(512, cpu), cpu)
    assert small > 0 and large == 2 * small
    # By hand, multiply-accumulates per sample (obs 85, critic obs 180 + 23 actions, two heads):
    head = (180 + 23) * 64 + 64 * 11    # one critic head's forward
    actor = 85 * 32 + 32 * 23           # the actor's forward
    critic_update = (
        actor + 2 * head                # smoothed next actions, target heads
        + 2 * head + 2 * head           # online heads: forward, weight gradients
        + 2 * 64 * 11                   # input gradients below the last layer (not of the input)
    )
    actor_update = (
        actor + 2 * head                # forward through the critic with detached weights
        + 2 * head                      # input gradients of every critic layer, down to the action
        + actor + 32 * 23               # actor weight gradients, input gradient of its last layer
    )
    assert small == 2 * 256 * (critic_update + actor_update / 2)  # the actor updates every second time


def test_training_time_split_covers_the_loop():
    result = bench.bench_training(torch.device("cpu"), warmup_steps=15, steps=10,
                                 run=("task=InvertedPendulum-v5", "sizing=cpu"))
    shares = result["time_shares"]
    assert set(shares) >= {"env step", "act", "store", "sample", "update", "eval", "checkpoint", "other"}
    measured = sum(v for k, v in shares.items() if k != "other")
    assert measured <= 1.0 + 1e-9, "phases overlap or are counted twice"
    for phase in ("env step", "act", "store", "sample", "update", "checkpoint"):
        assert shares[phase] > 0, f"{phase} was never timed"
    assert "log" not in shares and "mirror" not in shares  # 10 steps never log (interval 100); no symmetry
    assert result["global_steps_per_s"] > 0 and result["steps"] == 10
    assert result["flops_per_update"] > 0 and result["update_phase_flop_per_s"] > 0
    split = result["update_split"]
    assert split["polyak"] > 0 and split["eager_update_s"] > 0
    assert sum(split[part] for part in ("critic and temperature", "actor", "polyak")) == pytest.approx(1.0)


@pytest.mark.skipif(not os.environ.get("FAST_TD3_REFERENCE"),
                    reason="set FAST_TD3_REFERENCE to a checkout of younggyoseo/FastTD3")
def test_our_losses_equal_the_references():
    import bench_vs_reference as versus

    net, utils = versus.load_reference(Path(os.environ["FAST_TD3_REFERENCE"]))
    # one whole update each; asserts losses within 1e-5 and parameters within 1e-5 afterwards
    result = versus.check_same_maths(net, utils, torch.device("cpu"))
    assert result["inside_support"]["parameter_gap"] < 1e-5


@pytest.mark.skipif(not os.environ.get("FAST_SAC_REFERENCE"),
                    reason="set FAST_SAC_REFERENCE to a checkout of amazon-far/holosoma")
def test_our_fast_sac_update_equals_holosomas():
    import compare_fast_sac as versus

    networks, agent_cls = versus.load_reference(Path(os.environ["FAST_SAC_REFERENCE"]))
    # two whole updates each (critic, temperature, actor, Polyak) from the same weights, batch and draws
    worst = versus.compare_update(networks, agent_cls, versus.Size("tiny", 256, 64, 128))
    assert worst["parameters_moved"] > 0  # the zero-initialised mean head was trained: not a trivial match
    for key in ("critic_loss", "alpha_loss", "actor_loss", "parameters"):
        assert worst[key] < 1e-5, worst
