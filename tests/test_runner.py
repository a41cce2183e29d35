"""The training loop over real gymnasium envs: reproducibility, resume, NaN guard, metrics."""

import math
import os
import signal

import pytest
import torch

from envs.protocol import ACTOR, FINAL_OBSERVATIONS
from fast_td3.training import checkpoint as ckpt
from fast_td3.training.metrics_log import read_metrics
from fast_td3.learner import transition_keys as keys
from fast_td3.training.guards import NonFiniteObservationError, TrainingStopped
from helpers import make_runner, tiny_train_config


def first_update(seed, tmp_path):
    """Initial env observations and parameters after the first update of a run."""
    cfg = tiny_train_config(total_steps=5, seed=seed)
    runner = make_runner(cfg, tmp_path / f"seed{seed}", eval_env=False)
    obs, critic_obs = runner._reset_envs()
    first_obs = obs.clone()
    while not runner.learning_started():
        obs, critic_obs = runner.collect(obs, critic_obs)
    runner.learn()
    runner.env.close()
    return first_obs, [p.detach().clone() for p in runner.agent.parameters()]


def test_same_seed_same_first_updates_different_seed_differs(tmp_path):
    (obs_a, a), (obs_b, b), (obs_c, c) = (first_update(s, tmp_path) for s in (3, 3, 4))
    assert torch.equal(obs_a, obs_b) and all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(obs_a, obs_c)  # the run seed reaches the envs
    assert not all(torch.equal(x, z) for x, z in zip(a, c))


def test_replay_stores_time_outs_with_their_final_observation(tmp_path):
    """Known answer through the runner: at a time-out the stored transition is truncated, not
    terminated, and its next observation is the env's final one, not the reset one."""
    cfg = tiny_train_config(total_steps=10)
    cfg.env.max_episode_steps = 5
    runner = make_runner(cfg, tmp_path, eval_env=False)
    seen = []
    step = runner.env.step

    def recording_step(actions):
        result = step(actions)
        seen.append(result)
        return result

    runner.env.step = recording_step
    obs, critic_obs = runner._reset_envs()
    for _ in range(6):
        obs, critic_obs = runner.collect(obs, critic_obs)
    reset_obs, _, dones, extras = seen[4]
    assert dones.all() and extras["time_outs"].all()  # InvertedPendulum survives 5 steps
    stored = runner.buffer.gather(torch.full((cfg.env.num_envs, 1), 4))
    assert stored["truncated"].all() and not stored["terminated"].any()
    assert torch.equal(stored["next_observations"], extras["final_observations"]["actor"])
    assert not torch.equal(stored["next_observations"], reset_obs)
    # and the next stored transition starts from the reset observation
    assert torch.equal(runner.buffer.gather(torch.full((cfg.env.num_envs, 1), 5))["observations"], reset_obs)
    runner.env.close()


def test_training_writes_metrics_checkpoints_and_evaluates(tmp_path):
    cfg = tiny_train_config(total_steps=30)
    cfg.eval_interval = 20
    cfg.save_interval = 10
    cfg.keep_checkpoints = 2
    runner = make_runner(cfg, tmp_path)
    final = runner.train()
    runner.env.close(), runner.eval_env.close()
    assert final["eval/episodes"] == 2 and final["eval/return_mean"] > 0
    records = read_metrics(tmp_path)
    steps = [r["step"] for r in records]
    assert steps == sorted(steps) and steps[-1] == 30
    train_logs = [r for r in records if "loss/critic" in r]
    assert [r["step"] for r in train_logs] == [10, 20, 30]
    for key in ("q/mean", "q/min", "q/max", "grad_norm/critic", "loss/actor", "grad_norm/actor",
                "lr/actor", "lr/critic", "train/episode_return", "train/episode_length", "env_steps", "time"):
        assert key in train_logs[-1], key
    assert "perf/env_steps_per_s" in train_logs[-1]  # the first update's (compile) interval is excluded
    assert "perf/env_steps_per_s" not in train_logs[0]
    evals = [r for r in records if "eval/return_mean" in r]
    assert [r["step"] for r in evals] == [20, 30]
    # an env episode never exceeds 1000 steps and InvertedPendulum pays 1 per step alive
    assert all(0 < r["train/episode_length"] <= 1000 for r in train_logs if "train/episode_length" in r)
    files = ckpt.CheckpointManager(tmp_path).all()
    assert [ckpt.step_of(f) for f in files] == [20, 30]  # keep_checkpoints=2
    assert ckpt.CheckpointManager(tmp_path).latest() == files[-1]


def test_save_buffer_keeps_the_buffer_in_the_newest_checkpoint_only_and_older_ones_resume(tmp_path):
    cfg = tiny_train_config(total_steps=30)
    cfg.save_buffer, cfg.save_interval, cfg.keep_checkpoints = True, 10, 5
    runner = make_runner(cfg, tmp_path, eval_env=False)
    runner.train()
    files = ckpt.CheckpointManager(tmp_path).all()
    assert [ckpt.step_of(f) for f in files] == [10, 20, 30]
    assert ["buffer" in ckpt.load(f) for f in files] == [False, False, True]
    from_newest = make_runner(cfg, tmp_path / "newest", eval_env=False)
    from_newest.load(files[-1])
    restored, trained = from_newest.buffer.state_dict(), runner.buffer.state_dict()
    assert restored["size"] == trained["size"] > 0
    assert torch.equal(restored["storage"]["observations"], trained["storage"]["observations"])
    from_older = make_runner(cfg, tmp_path / "older", eval_env=False)
    from_older.load(files[0])  # its networks and step; the buffer refills
    assert from_older.global_step == 10 and from_older.buffer.state_dict()["size"] == 0
    runner.env.close(), from_newest.env.close(), from_older.env.close()


def test_checkpoint_round_trip_restores_every_tensor(tmp_path):
    cfg = tiny_train_config(total_steps=12, lr_schedule="cosine", critic_lr_end=1e-5, actor_lr_end=1e-5)
    cfg.save_buffer = True
    runner = make_runner(cfg, tmp_path, eval_env=False)
    runner.train()
    state = runner.state()
    restored = make_runner(cfg, tmp_path / "other", eval_env=False)
    restored.load(tmp_path)
    assert restored.global_step == 12
    reloaded = restored.state()

    def flatten(tree, prefix=""):
        if isinstance(tree, dict):
            for k, v in tree.items():
                yield from flatten(v, f"{prefix}/{k}")
        elif isinstance(tree, (list, tuple)):
            for i, v in enumerate(tree):
                yield from flatten(v, f"{prefix}/{i}")
        else:
            yield prefix, tree

    saved, loaded = dict(flatten(state)), dict(flatten(reloaded))
    assert saved.keys() == loaded.keys()
    tensors = 0
    for key, value in saved.items():
        if isinstance(value, torch.Tensor):
            tensors += 1
            assert torch.equal(value.cpu(), loaded[key].cpu()), key
        else:
            assert value == loaded[key] or (isinstance(value, float) and math.isnan(value)), key
    assert tensors > 50  # modules, both optimisers' moments, normalisers, noise, RNGs, replay
    assert restored.agent.learning_rates() == runner.agent.learning_rates()
    assert restored.agent.critic_updates == runner.agent.critic_updates > 0
    runner.env.close(), restored.env.close()


class NaNAfter:
    """Wraps a real adapter; from global step `step` on, env `env_index` reports a NaN observation."""

    def __init__(self, env, step, env_index):
        self.env, self.step_at, self.env_index, self.t = env, step, env_index, 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions):
        obs, rewards, dones, extras = self.env.step(actions)
        self.t += 1
        if self.t >= self.step_at:
            obs = obs.clone()
            obs[self.env_index, 0] = float("nan")
            extras[FINAL_OBSERVATIONS] = {ACTOR: obs}
        return obs, rewards, dones, extras


def test_nan_observation_names_env_and_step_and_saves_a_clean_checkpoint(tmp_path):
    cfg = tiny_train_config(total_steps=50)
    runner = make_runner(cfg, tmp_path, eval_env=False)
    runner.env = NaNAfter(runner.env, step=9, env_index=2)
    with pytest.raises(NonFiniteObservationError, match=r"observations of env 2 .*global step 9") as stopped:
        runner.train()
    stop = cfg.logger.log_interval * -(-9 // cfg.logger.log_interval)  # no sync per step: found at the next log
    assert runner.global_step == stop and f"({stop - 9 + 1} steps dropped)" in str(stopped.value)
    assert len(runner.buffer) == 8  # neither the bad step nor any after it was stored
    assert torch.isfinite(runner.buffer._storage[keys.OBS]).all() and torch.isfinite(runner.buffer._storage[keys.NEXT_OBS]).all()
    # the normaliser took the 8 steps before the bad one (and the reset's step), nothing after
    assert runner.agent.obs_normalizer.count.item() == 8 * runner.env.num_envs
    assert torch.isfinite(runner.agent.obs_normalizer.mean).all()
    latest = ckpt.CheckpointManager(tmp_path).latest()
    assert ckpt.step_of(latest) == stop
    state = ckpt.load(latest)
    assert all(torch.isfinite(t).all() for t in state["agent"]["modules"].values())
    runner.env.close()


class SignalAt:
    """Wraps a real adapter; during env step `step` this process receives `signum`, as from
    Ctrl-C in the terminal or a scheduler's SIGTERM."""

    def __init__(self, env, step, signum):
        self.env, self.step_at, self.signum, self.t = env, step, signum, 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions):
        self.t += 1
        if self.t == self.step_at:
            os.kill(os.getpid(), self.signum)
        return self.env.step(actions)


@pytest.fixture
def own_handlers():
    """Handlers of this test's own in place of pytest's, put back afterwards: a run must restore
    whatever it found, not just the defaults."""
    def handler(signum, frame):
        raise AssertionError(f"signal {signum} reached the handler the run should have replaced")

    saved = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield handler
    for sig, old in saved.items():
        signal.signal(sig, old)


@pytest.mark.parametrize("ending", ["finished", "failed", signal.SIGINT, signal.SIGTERM],
                         ids=["finished", "failed", "SIGINT", "SIGTERM"])
def test_a_run_in_this_process_stops_on_a_signal_and_leaves_the_handlers_as_it_found_them(
        tmp_path, own_handlers, ending):
    """SIGINT/SIGTERM during a run stop it after that whole global step with a checkpoint; however
    the run ends, the process's handlers are the ones it had before (else Ctrl-C no longer stops
    the program that called train(), pytest included)."""
    cfg = tiny_train_config(total_steps=12)
    runner = make_runner(cfg, tmp_path, eval_env=False)
    if ending == "failed":
        runner.env = NaNAfter(runner.env, step=3, env_index=0)
    elif ending != "finished":
        runner.env = SignalAt(runner.env, step=7, signum=ending)
    try:
        if ending == "finished":
            runner.train()
            assert runner.global_step == 12
        elif ending == "failed":
            with pytest.raises(NonFiniteObservationError):
                runner.train()
        else:
            with pytest.raises(TrainingStopped) as stopped:
                runner.train()
            assert stopped.value.signum == ending and stopped.value.step == runner.global_step == 7
            assert ckpt.step_of(stopped.value.checkpoint) == 7
    finally:
        runner.env.close()
    assert signal.getsignal(signal.SIGINT) is own_handlers and signal.getsignal(signal.SIGTERM) is own_handlers


def test_resume_continues_step_counter_schedules_and_normalisers(tmp_path):
    cfg = tiny_train_config(total_steps=20, lr_schedule="cosine", critic_lr_end=1e-5, actor_lr_end=1e-5)
    cfg.save_interval = 10
    first = make_runner(cfg, tmp_path, eval_env=False)
    first.cfg.total_steps = 10  # "killed" after step 10: stop there with its checkpoint
    first.train()
    mean_at_10 = first.agent.obs_normalizer.mean.clone()
    count_at_10 = first.agent.obs_normalizer.count.clone()
    first.env.close()

    cfg.total_steps = 20
    second = make_runner(cfg, tmp_path, eval_env=False)
    second.load(tmp_path)
    assert second.global_step == 10
    assert torch.equal(second.agent.obs_normalizer.mean, mean_at_10)
    assert second.agent.critic_updates == first.agent.critic_updates
    assert second.agent.critic_schedule.updates == first.agent.critic_schedule.updates > 0
    assert second.agent.learning_rates() == first.agent.learning_rates()
    lr_before = second.agent.learning_rates()["critic_lr"]
    second.train()
    assert second.global_step == 20
    assert second.agent.obs_normalizer.count > count_at_10  # statistics continue, not restart
    assert second.agent.learning_rates()["critic_lr"] < lr_before  # the cosine schedule moved on
    assert [r["step"] for r in read_metrics(tmp_path) if "loss/critic" in r] == [10, 20]
    second.env.close()


def test_resumed_metrics_drop_records_after_the_checkpoint_and_torn_lines(tmp_path):
    from fast_td3.training.config import LoggerConfig
    from fast_td3.training.metrics_log import METRICS_FILE, MetricsLogger

    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 10, "a": 1}\n{"step": 20, "a": 2}\n{"step": 30, "a": 3}\n{"step": 4')
    logger = MetricsLogger(LoggerConfig(console=False), tmp_path, {}, "task", total_steps=50, start_step=20)
    logger.log(30, {"a": 4.0})
    logger.close()
    assert [(r["step"], r["a"]) for r in read_metrics(tmp_path)] == [(10, 1), (20, 2), (30, 4.0)]


class CountingSteps:
    def __init__(self, env):
        self.env, self.steps, self.resets = env, 0, 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions):
        self.steps += 1
        return self.env.step(actions)

    def reset(self, seed=None):
        self.resets += 1
        return self.env.reset(seed=seed)


def test_evaluation_uses_its_own_envs_and_fixed_seeds(tmp_path):
    cfg = tiny_train_config(total_steps=10)
    runner = make_runner(cfg, tmp_path)
    runner.env = CountingSteps(runner.env)
    runner.train()
    steps, resets = runner.env.steps, runner.env.resets
    first, second = runner.evaluate(), runner.evaluate()
    assert (runner.env.steps, runner.env.resets) == (steps, resets) == (10, 1)
    assert first == second  # same policy, same eval seeds: the same episodes
    runner.env.close(), runner.eval_env.close()


def test_resuming_from_an_older_checkpoint_sets_later_ones_aside(tmp_path):
    cfg = tiny_train_config(total_steps=30)
    cfg.save_interval, cfg.keep_checkpoints = 10, 5
    first = make_runner(cfg, tmp_path, eval_env=False)
    first.train()
    first.env.close()
    second = make_runner(cfg, tmp_path, eval_env=False)
    second.load(tmp_path / "checkpoints" / "step_000000010.pt")
    assert second.global_step == 10
    assert [ckpt.step_of(p) for p in second.checkpoints.all()] == [10]
    aside = sorted(p.name for p in (tmp_path / "checkpoints" / "abandoned_1").iterdir())
    assert aside == ["step_000000020.pt", "step_000000030.pt"]
    second.env.close()


def test_the_best_evaluation_is_kept_as_best_pt_and_a_resume_takes_the_latest(tmp_path, monkeypatch):
    """fast-td3-eval takes best.pt from a run folder: it must hold the best-evaluated policy
    (on a tie the later one) whatever keep_checkpoints rotated away, while a resume goes on
    from the newest checkpoint and still knows the best so far."""
    import fast_td3.training.eval_diagnostics as evaluation_module

    returns = iter([5.0, 9.0, 7.0, 9.0, 3.0, 8.0])
    monkeypatch.setattr(evaluation_module, "summarize", lambda episodes: {
        "eval/return_mean": next(returns), "eval/return_std": 0.0, "eval/length_mean": 1.0, "eval/episodes": 2.0})
    cfg = tiny_train_config(total_steps=50)
    cfg.eval_interval, cfg.save_interval, cfg.keep_checkpoints = 10, 10, 1
    first = make_runner(cfg, tmp_path)
    first.train()
    first.env.close(), first.eval_env.close()
    assert [ckpt.step_of(p) for p in first.checkpoints.all()] == [50]
    best = ckpt.load(tmp_path / "checkpoints" / "best.pt")
    assert best["global_step"] == 40 and best["best_eval"] == {"step": 40, "return_mean": 9.0}
    assert "buffer" not in best
    assert ckpt.pick_checkpoint(tmp_path) == (tmp_path / "checkpoints" / "best.pt", "best")

    cfg.total_steps = 60
    second = make_runner(cfg, tmp_path)
    second.load(tmp_path)
    assert second.global_step == 50 and second.best_eval == {"step": 40, "return_mean": 9.0}
    second.train()  # evaluates 8.0 at step 60: not a new best
    second.env.close(), second.eval_env.close()
    assert ckpt.load(tmp_path / "checkpoints" / "best.pt")["global_step"] == 40


def test_learning_start_and_first_update_are_printed_before_the_first_metrics_line(tmp_path, capsys):
    cfg = tiny_train_config(total_steps=10)
    cfg.logger.console = True
    runner = make_runner(cfg, tmp_path, eval_env=False)
    runner.train()
    runner.env.close()
    lines = capsys.readouterr().out.splitlines()
    starts = next(i for i, line in enumerate(lines) if "the first update starts" in line)
    done = next(i for i, line in enumerate(lines) if "first update done in" in line)
    first_metrics = next(i for i, line in enumerate(lines) if line.startswith("[InvertedPendulum-v5] step 10/10"))
    assert lines[0].startswith("Metrics: ") and starts < done < first_metrics
    assert "ETA estimating..." in lines[first_metrics]  # a 10-step run never gets a reliable rate
