"""Metric sinks: metrics.jsonl, TensorBoard event files and wandb in offline mode."""

import json

import pytest

from fast_td3.training.config import LoggerConfig
from fast_td3.training.metrics_log import MetricsLogger, read_metrics, resolve_wandb_mode


def test_jsonl_records_step_env_steps_and_metrics(tmp_path):
    logger = MetricsLogger(LoggerConfig(console=False), tmp_path, {}, "T", total_steps=10, num_envs=8)
    logger.log(3, {"loss/critic": 1.5, "q/mean": float("nan")})
    logger.close()
    (record,) = read_metrics(tmp_path)
    assert record["step"] == 3 and record["env_steps"] == 24
    assert record["loss/critic"] == 1.5 and record["q/mean"] is None  # strict JSON, no NaN literal


def test_a_resumed_run_continues_its_clock(tmp_path):
    """"time" is the run's wall time over its sessions, so "time to a gate pass" survives a resume."""
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"step": 10, "env_steps": 80, "time": 100.0}, {"step": 20, "env_steps": 160, "time": 240.0},
        {"step": 30, "env_steps": 240, "time": 380.0})))
    logger = MetricsLogger(LoggerConfig(console=False), tmp_path, {}, "T", total_steps=40, start_step=20, num_envs=8)
    logger.log(21, {"loss/critic": 1.0})
    logger.close()
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [10, 20, 21]  # the repeated steps dropped
    assert 240.0 <= records[-1]["time"] < 250.0


def test_tensorboard_writes_event_files(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(LoggerConfig(console=False, tensorboard=True), tmp_path, {}, "T", total_steps=10)
    for step in (1, 2):
        logger.log(step, {"loss/critic": float(step)})
    logger.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("loss/critic")] == [1.0, 2.0]


def test_wandb_auto_is_offline_without_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    assert resolve_wandb_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode("auto") == "online"
    assert resolve_wandb_mode("disabled") == "disabled"


def test_wandb_offline_run_records_metrics_and_keeps_its_id_on_resume(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = LoggerConfig(console=False, wandb_mode="offline")
    logger = MetricsLogger(cfg, tmp_path, {"seed": 1}, "T", total_steps=10)
    logger.log(1, {"loss/critic": 0.5})
    logger.close()
    run_id = (tmp_path / "wandb_id.txt").read_text()
    (offline,) = (tmp_path / "wandb").glob("offline-run-*")
    assert offline.name.endswith(run_id)
    logger = MetricsLogger(cfg, tmp_path, {"seed": 1}, "T", total_steps=10, start_step=1)
    logger.log(2, {"loss/critic": 0.25})
    logger.close()
    assert (tmp_path / "wandb_id.txt").read_text() == run_id
    assert [json.dumps(r["step"]) for r in read_metrics(tmp_path)] == ["1", "2"]


def test_console_line_shows_step_return_throughput(capsys):
    from fast_td3.training.console_progress import ConsoleProgress

    console = ConsoleProgress(total_steps=100, start_step=0, task="Hopper-v5")
    assert not console.interactive  # pytest captures stdout: the plain-line mode
    console.log(10, {"train/episode_return": 12.5, "perf/env_steps_per_s": 640.0, "loss/critic": 1.0})
    console.log(20, {"perf/updates_per_s": 80.0})
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "[Hopper-v5] step 10/100 | return 12.5 | env steps/s 640 | ETA estimating..."
    assert lines[1] == "[Hopper-v5] step 20/100 | return 12.5 | env steps/s 640 | updates/s 80 | ETA estimating..."


def test_the_start_of_learning_is_printed_at_once_without_a_terminal(tmp_path, capsys):
    """Without a terminal the metrics lines come every log_interval steps (minutes apart while
    the update compiles): what happens before is printed when it happens."""
    logger = MetricsLogger(LoggerConfig(), tmp_path / "run", {}, "Hopper-v5", total_steps=100)
    assert not logger.console.interactive
    assert capsys.readouterr().out.splitlines() == [f"Metrics: {tmp_path / 'run' / 'metrics.jsonl'}"]
    logger.learning_begins(5, compiles=True)
    assert "Global step 5: the replay buffer holds enough to learn; the first update starts (it compiles" in \
        capsys.readouterr().out
    logger.first_update_done(5, 42.0)
    assert "Global step 5: first update done in 42.0 s" in capsys.readouterr().out
    logger.close()
    with_tensorboard = MetricsLogger(LoggerConfig(tensorboard=True), tmp_path / "tb", {}, "T", total_steps=10)
    with_tensorboard.close()
    assert f"TensorBoard: tensorboard --logdir {tmp_path / 'tb'}" in capsys.readouterr().out


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def simulate(eta, clock, steps, seconds_per_step, start_step=0, every=10):
    """`steps` global steps at a constant rate; the estimate after every `every` steps."""
    estimates = []
    for step in range(start_step + 1, start_step + steps + 1):
        clock.now += seconds_per_step
        eta.advance(step)
        if step % every == 0:
            estimates.append((step, eta.seconds_left()))
    return estimates


def test_eta_is_the_recent_rate_plus_the_pauses_to_come():
    """A 2-minute compile, then 10 steps/s with a 30 s evaluation every 1000 steps (the last at
    the end): 5000 steps take 5 x (100 + 30) s. The estimate waits for the rate, then stays
    within 10% plus one evaluation of the truth, before and after each evaluation. (An average
    since the start would carry the compile; the last interval alone would swing with every
    evaluation in it.)"""
    from fast_td3.training.console_progress import EtaEstimate

    clock = FakeClock()
    eta = EtaEstimate(total_steps=5000, window_s=60.0, min_s=5.0, clock=clock)
    assert eta.text() == "ETA estimating..."
    clock.now += 120.0  # buffer filling and the first update's compilation
    eta.advance(1)
    assert eta.seconds_left() is None  # not warmed up yet
    eta.warmed_up(1)
    early = simulate(eta, clock, 40, 0.1, start_step=1)
    assert all(seconds is None for _, seconds in early)  # 4 s of rate: not reliable yet
    assert eta.text() == "ETA estimating..."
    step, checked = 41, 0
    while step < 5000:
        for at, seconds in simulate(eta, clock, 1000 - step % 1000, 0.1, start_step=step):
            if seconds is None:
                continue
            training = (5000 - at) * 0.1
            if at <= 1000:  # no evaluation seen yet: the rate alone
                assert seconds == pytest.approx(training, rel=0.1, abs=1.0), at
            else:
                evaluations_left = 5 - (at - 1) // 1000  # those at 2000, ..., 5000 not yet run
                truth = training + 30.0 * evaluations_left
                assert abs(seconds - truth) <= 0.1 * truth + 30.0, (at, seconds, truth)
            checked += 1
        step = eta.step
        clock.now += 30.0
        eta.paused(30.0)
    assert checked > 400
    assert eta.text() == "ETA 0:00:00"


def test_eta_follows_a_change_of_rate_within_its_window():
    from fast_td3.training.console_progress import EtaEstimate

    clock = FakeClock()
    eta = EtaEstimate(total_steps=100_000, window_s=60.0, clock=clock)
    eta.warmed_up(0)
    simulate(eta, clock, 2000, 0.1)  # 200 s at 10 steps/s
    slow = eta.seconds_left()
    simulate(eta, clock, 1300, 0.05, start_step=2000)  # 65 s at 20 steps/s: the window holds only these
    fast = eta.seconds_left()
    assert slow == pytest.approx(98_000 * 0.1, rel=0.01)
    assert fast == pytest.approx((100_000 - 3300) * 0.05, rel=0.01)
    assert eta.text() == "ETA 1:20:35"


def test_json_safe_writes_non_finite_metrics_as_null():
    from fast_td3.files import json_safe

    value = {"gait": {"foot_slip": float("nan"), "rates": [float("inf"), 0.5]}, "task": "T1", "step": 3}
    assert json_safe(value) == {"gait": {"foot_slip": None, "rates": [None, 0.5]}, "task": "T1", "step": 3}
    json.dumps(json_safe(value), allow_nan=False)  # strict JSON


def test_metrics_of_an_earlier_step_are_filed_at_that_step(tmp_path, monkeypatch):
    """A gate's verdict arrives after later steps: jsonl and TensorBoard file it at its own step,
    wandb (whose steps only grow) logs it now against `gate/step`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = LoggerConfig(console=False, tensorboard=True, wandb_mode="offline")
    logger = MetricsLogger(cfg, tmp_path, {}, "T", total_steps=10, num_envs=4)
    logger.log(5, {"loss/critic": 1.0})
    logger.log_past(2, {"gate/robust_pass_rate": 0.75}, "gate/step")
    logger.log(6, {"loss/critic": 0.5})
    logger.close()
    past = [r for r in read_metrics(tmp_path) if "gate/robust_pass_rate" in r]
    assert [(r["step"], r["env_steps"], r["gate/robust_pass_rate"]) for r in past] == [(2, 8, 0.75)]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("gate/robust_pass_rate")] == [(2, 0.75)]
    (offline,) = (tmp_path / "wandb").glob("offline-run-*")
    assert any(offline.glob("*.wandb"))  # the offline run took the late metrics without an error


def test_a_late_metric_joins_the_console_line(capsys):
    from fast_td3.training.console_progress import ConsoleProgress

    console = ConsoleProgress(total_steps=10, start_step=0, task="T")
    console.remember({"gate/robust_pass_rate": 0.8})
    assert capsys.readouterr().out == ""  # nothing printed on arrival
    console.log(4, {"eval/return_mean": 3.0})
    assert "eval 3 | gate 0.8" in capsys.readouterr().out
