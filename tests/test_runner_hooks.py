"""The runner's public road: `Runner.from_config`, `train(until_step=...)` in chunks, and hooks
at each moment of the loop (real gymnasium envs, the tiny learner)."""

from __future__ import annotations

import torch
from helpers import tiny_train_config

from fast_td3.training import checkpoint as ckpt
from fast_td3.training.hooks import Hook
from fast_td3.training.runner import Runner


class Recorder(Hook):
    def __init__(self, stop_at: int | None = None) -> None:
        self.moments: list[tuple[str, int]] = []
        self.phases: set[str] = set()
        self.final = "not called"
        self.stop_at = stop_at

    def on_begin(self, runner):
        self.moments.append(("begin", runner.global_step))

    def on_step(self, runner):
        self.moments.append(("step", runner.global_step))

    def on_log(self, runner, metrics):
        assert "perf/torch_threads" in metrics
        self.moments.append(("log", runner.global_step))

    def on_eval(self, runner, results):
        assert "eval/return_mean" in results
        self.moments.append(("eval", runner.global_step))

    def on_checkpoint(self, runner, path):
        assert path.exists()
        self.moments.append(("checkpoint", runner.global_step))

    def on_end(self, runner, final):
        self.final = final
        self.moments.append(("end", runner.global_step))

    def should_stop(self, runner):
        return self.stop_at is not None and runner.global_step >= self.stop_at

    def phase(self, name):
        self.phases.add(name)
        return None


def config(total_steps=20):
    cfg = tiny_train_config(total_steps=total_steps)
    cfg.eval_interval = cfg.save_interval = cfg.logger.log_interval = 10
    return cfg


def test_hooks_see_every_moment_in_the_loops_order_and_every_named_span(tmp_path):
    recorder = Recorder()
    with Runner.from_config(config(), tmp_path, hooks=[recorder], say=lambda *a, **k: None) as runner:
        final = runner.train()
    moments = recorder.moments
    assert moments[0] == ("begin", 0) and moments[-1] == ("end", 20)
    assert [step for kind, step in moments if kind == "step"] == list(range(1, 21))
    at_ten = [kind for kind, step in moments if step == 10]
    assert at_ten == ["log", "eval", "step", "checkpoint"]  # the periodic evaluation runs before the user's hook
    at_end = [kind for kind, step in moments if step == 20]
    assert at_end == ["log", "step", "eval", "checkpoint", "end"]  # the last step's evaluation is the final one
    assert recorder.final == final and final["eval/return_mean"] > 0
    assert recorder.phases >= {"act", "env step", "store", "sample", "update", "log", "eval", "checkpoint"}
    assert "mirror" not in recorder.phases and "gate" not in recorder.phases  # no symmetry, no gate here


def test_a_hook_that_asks_to_stop_ends_the_run_at_that_log_with_its_evaluation_and_checkpoint(tmp_path):
    recorder = Recorder(stop_at=10)
    with Runner.from_config(config(total_steps=50), tmp_path, hooks=[recorder], say=lambda *a, **k: None) as runner:
        final = runner.train()
        assert runner.global_step == 10
    assert recorder.moments[-2:] == [("checkpoint", 10), ("end", 10)]
    assert "eval/return_mean" in final
    assert ckpt.find_checkpoint(tmp_path).name == "step_000000010.pt"


def test_training_in_chunks_gives_the_numbers_of_one_call(tmp_path):
    """`train(until_step=...)` goes on where the last call stopped (the same observations, not a
    reset): two chunks end with the networks of one uninterrupted call."""
    with Runner.from_config(config(total_steps=24), tmp_path / "once", say=lambda *a, **k: None) as runner:
        runner.train()
        once = runner.agent.training_state()
    with Runner.from_config(config(total_steps=24), tmp_path / "chunks", say=lambda *a, **k: None) as runner:
        runner.train(until_step=13)
        assert runner.global_step == 13 and (tmp_path / "chunks" / "checkpoints" / "step_000000013.pt").exists()
        runner.train(until_step=99)  # at most total_steps
        assert runner.global_step == 24
        chunks = runner.agent.training_state()
    for key, value in once["modules"].items():
        assert torch.equal(value, chunks["modules"][key]), f"{key} differs"


def test_a_runner_from_config_closes_the_envs_it_made(tmp_path):
    closed = []
    with Runner.from_config(config(), tmp_path, say=lambda *a, **k: None) as runner:
        assert runner.eval_env is not None and runner.eval_env is not runner.env
        for name, env in (("train", runner.env), ("evaluation", runner.eval_env)):
            inner = env.close
            env.close = lambda inner=inner, name=name: (closed.append(name), inner())
    assert closed == ["train", "evaluation"]
