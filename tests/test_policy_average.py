"""Averaged actors (`fast_td3.training.policy_average`, `fast-td3-export average=K`): each checkpoint's
actor is read through the newest normaliser before the mean, which changes nothing a policy
computes; the mean is the plain mean of the weights; and the predecessors are found by step."""

import json

import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from fast_td3.analysis.evaluate_checkpoint import load_checkpoint, load_policy  # noqa: E402
from helpers import make_runner, tiny_train_config  # noqa: E402
from sim2real import export_cli  # noqa: E402
from sim2real.export import export_bundle, load_bundle_policy  # noqa: E402
from fast_td3.training.policy_average import average_actor, checkpoints_to_average  # noqa: E402

NUM_OBS = 4  # InvertedPendulum-v5
EPS = 1e-2  # the tiny config's normaliser eps (AlgoConfig.normalizer_eps)


def step_file(run_dir, step):
    return run_dir / "checkpoints" / f"step_{step:09d}.pt"


def policy_of(checkpoint_file):
    _, state, cfg = load_checkpoint(checkpoint_file)
    return load_policy(state, cfg, torch.device("cpu"))


def raw_obs(n=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.tensor([1.0, -2.0, 0.5, 3.0]) + torch.randn(n, NUM_OBS, generator=g) * torch.tensor([1.0, 3.0, 0.5, 5.0])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Checkpoints at steps 2, 4 and 6 of one tiny run:
    - 2: actor θ, normaliser A;
    - 4: the same policy as step 2, written for normaliser B (first layer rewritten by hand);
    - 6: normaliser B, every actor weight moved by a seeded random step."""
    path = tmp_path_factory.mktemp("run")
    assert tiny_train_config().algo.normalizer_eps == EPS
    runner = make_runner(tiny_train_config(total_steps=6, actor_last_layer_std=0.5), path, eval_env=False)
    runner.train()
    runner.env.close()
    normalizer, first = runner.agent.obs_normalizer, runner.agent.actor.net[0]
    mean_a, var_a = torch.tensor([1.5, -2.0, 0.7, 3.0]), torch.tensor([0.25, 4.0, 0.09, 9.0])
    mean_b, var_b = torch.tensor([0.5, -1.0, 0.2, 4.0]), torch.tensor([1.0, 9.0, 0.25, 16.0])
    scale_a, scale_b = var_a.sqrt() + EPS, var_b.sqrt() + EPS
    with torch.no_grad():
        normalizer.mean.copy_(mean_a), normalizer.var.copy_(var_a)
        runner.global_step = 2
        runner.save()
        weight, bias = first.weight.clone(), first.bias.clone()
        first.weight.copy_(weight * scale_b / scale_a)
        first.bias.copy_(bias + weight @ ((mean_b - mean_a) / scale_a))
        normalizer.mean.copy_(mean_b), normalizer.var.copy_(var_b)
        runner.global_step = 4
        runner.save()
        g = torch.Generator().manual_seed(1)
        for parameter in runner.agent.actor.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=g))
        runner.global_step = 6
        runner.save()
    return path


def test_the_fixture_holds_one_policy_under_two_normalisers(run_dir):
    obs = raw_obs()
    assert torch.allclose(policy_of(step_file(run_dir, 2)).act(obs), policy_of(step_file(run_dir, 4)).act(obs), atol=1e-5)
    states = [torch.load(step_file(run_dir, s), weights_only=False) for s in (2, 4)]
    assert not torch.allclose(states[0]["agent"]["modules"]["actor.net.0.weight"],
                              states[1]["agent"]["modules"]["actor.net.0.weight"])


def test_averaging_one_policy_under_two_normalisers_gives_that_policy(run_dir, tmp_path):
    """Without the rewrite to the newest normaliser, the mean of these two first layers is another policy."""
    bundle = export_bundle(step_file(run_dir, 4), tmp_path / "b", average=2)
    policy, meta = load_bundle_policy(bundle)
    obs = raw_obs(seed=3)
    assert meta["averaged_steps"] == [2, 4]
    assert torch.allclose(policy(obs), policy_of(step_file(run_dir, 2)).act(obs), atol=1e-5)


def test_the_mean_actor_is_the_mean_of_the_weights_under_one_normaliser(run_dir):
    states = [torch.load(step_file(run_dir, s), weights_only=False) for s in (4, 6)]
    newest_before = {k: v.clone() for k, v in states[1]["agent"]["modules"].items()}
    averaged = average_actor(states, EPS)
    mean, newest = averaged["agent"]["modules"], states[1]["agent"]["modules"]
    actor_keys = [k for k in mean if k.startswith("actor.")]
    assert actor_keys
    for key in actor_keys:
        expected = (states[0]["agent"]["modules"][key] + newest[key]) / 2
        assert torch.allclose(mean[key], expected, atol=1e-6), key
    for key in mean:  # critic, normalisers: the newest checkpoint's own tensors, shared rather than copied
        if not key.startswith("actor."):
            assert mean[key] is newest[key], key
    assert averaged["global_step"] == 6 and averaged["averaged_steps"] == [4, 6]
    assert "averaged_steps" not in states[1]
    for key, before in newest_before.items():  # the newest state itself is left as it was
        assert torch.equal(newest[key], before), key


def test_predecessors_are_found_by_step_and_too_few_are_refused(run_dir, tmp_path):
    assert checkpoints_to_average(step_file(run_dir, 6), 3) == [step_file(run_dir, s) for s in (2, 4, 6)]
    assert checkpoints_to_average(step_file(run_dir, 4), 2) == [step_file(run_dir, s) for s in (2, 4)]
    assert checkpoints_to_average(run_dir / "checkpoints" / "best.pt", 1) == [run_dir / "checkpoints" / "best.pt"]
    with pytest.raises(ValueError, match="needs 3 checkpoints before step 6.*holds 2"):
        checkpoints_to_average(step_file(run_dir, 6), 4)
    with pytest.raises(ValueError, match="step_<N>.pt"):
        checkpoints_to_average(run_dir / "checkpoints" / "best.pt", 2)
    with pytest.raises(ValueError, match="at least 1"):
        checkpoints_to_average(step_file(run_dir, 6), 0)


def test_cli_exports_the_mean_actor_and_refuses_a_bad_count(run_dir, tmp_path, capsys):
    export_cli.cli([f"checkpoint={step_file(run_dir, 6)}", f"out={tmp_path / 'avg'}", "average=3"])
    printed = capsys.readouterr().out
    assert "the mean actor of steps [2, 4, 6]" in printed
    meta = json.loads((tmp_path / "avg" / "meta.json").read_text())
    assert meta["averaged_steps"] == [2, 4, 6] and meta["checkpoint_step"] == 6
    policy, _ = load_bundle_policy(tmp_path / "avg")
    obs = raw_obs(seed=5)
    assert not torch.allclose(policy(obs), policy_of(step_file(run_dir, 6)).act(obs), atol=1e-3)  # not step 6 alone
    for bad in ("0", "two"):
        with pytest.raises(SystemExit) as stopped:
            export_cli.cli([f"checkpoint={step_file(run_dir, 6)}", f"out={tmp_path / bad}", f"average={bad}"])
        assert stopped.value.code == 2
        assert f"average={bad}: give a whole number, 1 or more" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        export_cli.cli([f"checkpoint={step_file(run_dir, 6)}", f"out={tmp_path / 'four'}", "average=4"])
    assert "holds 2" in capsys.readouterr().err


def _gate_loop(run_path, start_step, average=2):
    from fast_td3.training import checkpoint as ckpt
    from fast_td3.training.config import EnvConfig, GateConfig, TrainConfig
    from fast_td3.training.gate_loop import GateLoop

    cfg = TrainConfig(env=EnvConfig(suite="playground", task="T1LowDimJoystickFlatTerrain"),
                      gate=GateConfig(interval=2, average=average), best_by="gate")
    cfg.algo.normalizer_eps = EPS
    loop = GateLoop(cfg, run_path, ckpt.CheckpointManager(run_path), start_step=start_step, say=lambda line: None)
    # no child process (the files it would play are the subject), and each gate step taken at once
    loop._start_waiting = lambda: setattr(loop, "waiting", None)
    return loop


def test_the_gate_in_the_loop_plays_the_mean_actor_of_its_last_gate_steps(run_dir, tmp_path):
    """gate.average=2 on the fixture's steps 2, 4, 6: each gate checkpoint holds the mean actor of
    its step and the one before (step 2 alone: none before it); step 4's mean is the policy of
    steps 2 and 4 (one policy under two normalisers); a resume at step 4 sets step 6's actor aside."""
    states = {s: torch.load(step_file(run_dir, s), weights_only=False) for s in (2, 4, 6)}
    loop = _gate_loop(tmp_path, start_step=0)
    gated = {}
    for step, state in states.items():
        loop.submit(step, state, eval_return=None)
        gated[step] = tmp_path / "gate" / f"step_{step:09d}.pt"
        assert torch.load(gated[step], weights_only=False)["averaged_steps"] == [step - 2, step][-len(gated):]
    obs = raw_obs(seed=7)
    assert torch.allclose(policy_of(gated[2]).act(obs), policy_of(step_file(run_dir, 2)).act(obs), atol=1e-6)
    assert torch.allclose(policy_of(gated[4]).act(obs), policy_of(step_file(run_dir, 2)).act(obs), atol=1e-5)
    newest = torch.load(gated[6], weights_only=False)["agent"]["modules"]
    for key in (k for k in newest if k.startswith("actor.")):  # steps 4 and 6 share a normaliser: the plain mean
        expected = (states[4]["agent"]["modules"][key] + states[6]["agent"]["modules"][key]) / 2
        assert torch.allclose(newest[key], expected, atol=1e-6), key
    actors = sorted(p.name for p in (tmp_path / "gate" / "actors").iterdir())
    assert actors == ["step_000000004.pt", "step_000000006.pt"]  # step 2's actor is in no later mean

    resumed = _gate_loop(tmp_path, start_step=4)
    assert [p.name for p in (tmp_path / "gate" / "abandoned_4" / "actors").iterdir()] == ["step_000000006.pt"]
    moved = states[6]["agent"]["modules"]["actor.net.2.weight"]
    states[6]["agent"]["modules"]["actor.net.2.weight"] = moved + 1.0  # another history after the resume
    resumed.submit(6, states[6], eval_return=None)
    again = torch.load(gated[6], weights_only=False)
    assert again["averaged_steps"] == [4, 6]
    expected = (states[4]["agent"]["modules"]["actor.net.2.weight"] + moved + 1.0) / 2
    assert torch.allclose(again["agent"]["modules"]["actor.net.2.weight"], expected, atol=1e-6)
