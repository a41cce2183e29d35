"""Metric sinks: metrics.jsonl, TensorBoard event files and wandb in offline mode."""

import json

from fast_td3.training.config import LoggerConfig
from fast_td3.training.metrics_log import MetricsLogger, read_metrics, resolve_wandb_mode


def test_jsonl_records_step_env_steps_and_metrics(tmp_path):
    logger = MetricsLogger(LoggerConfig(console=False), tmp_path, {}, "T", total_steps=10, num_envs=8)
    logger.log(3, {"loss/critic": 1.5, "q/mean": float("nan")})
    logger.close()
    (record,) = read_metrics(tmp_path)
    assert record["step"] == 3 and record["env_steps"] == 24
    assert record["loss/critic"] == 1.5 and record["q/mean"] is None  # strict JSON, no NaN literal


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
    from fast_td3.training.metrics_log import ConsoleProgress

    console = ConsoleProgress(total_steps=100, start_step=0, task="Hopper-v5")
    assert not console.interactive  # pytest captures stdout: the plain-line mode
    console.log(10, {"train/episode_return": 12.5, "perf/env_steps_per_s": 640.0, "loss/critic": 1.0})
    console.log(20, {"perf/updates_per_s": 80.0})
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "[Hopper-v5] step 10/100 | return 12.5 | env steps/s 640"
    assert lines[1] == "[Hopper-v5] step 20/100 | return 12.5 | env steps/s 640 | updates/s 80"


def test_json_safe_writes_non_finite_metrics_as_null():
    from fast_td3.training.metrics_log import json_safe

    value = {"gait": {"foot_slip": float("nan"), "rates": [float("inf"), 0.5]}, "task": "T1", "step": 3}
    assert json_safe(value) == {"gait": {"foot_slip": None, "rates": [None, 0.5]}, "task": "T1", "step": 3}
    json.dumps(json_safe(value), allow_nan=False)  # strict JSON
