"""Two 25-step runs through `fast-td3-train` give the numbers recorded in tests/data/pinned_runs.json.

A guard for changes that mean to move code, not maths (the road from the command to the runner,
the runner's hooks, the T1 task's backends): a FastTD3 run (HalfCheetah, gymnasium) and the
shipped T1 recipe's FastSAC run (native MuJoCo, mirrored batches, pushes, randomisation, delay)
each end in a checkpoint whose learner state and logged metrics must match the record.

Both runs force eager fp32 (`auto` picks bf16 on some CPUs, fp32 on others) and one torch
thread. The tolerance (`RTOL`, against a tensor's absolute sum or a metric's own size) is wider
than float noise between machines: on the AMD EPYC (Zen 3, AVX2) that recorded the file, no
compared number moved by more than 1.4e-6 of its scale between 1 and 2 torch threads (two
summation orders, as another CPU's kernels would give). A change of maths moves far more: a
critic learning rate 1 % lower moved 144 of the T1 run's 251 numbers and 77 of HalfCheetah's
138 beyond it.

An intended change of numbers re-records the file, and says so in its commit:
    FAST_TD3_RECORD_PINS=1 pytest tests/test_pinned_numbers.py
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fast_td3.training import checkpoint as ckpt
from fast_td3.training.metrics_log import read_metrics

BIN = Path(sys.executable).parent
RECORD = Path(__file__).parent / "data" / "pinned_runs.json"
RTOL = 1e-4
LOGGED = ("loss", "q", "sac", "td3", "grad_norm", "eval")
"""The metrics compared: not perf/ (timing), lr/ (a schedule of the config), time, or eval/critic/
(correlations near zero, where float noise is relatively large)."""
COMMON = ["total_steps=25", "algo.compile=false", "algo.precision=fp32", "logger.console=false",
          "logger.log_interval=5", "save_interval=0", "eval_interval=0", "eval_episodes=2", "hydra.run.dir=run"]
RUNS = {
    "fast_td3_half_cheetah": ["task=HalfCheetah-v5", "sizing=cpu", "env.num_envs=4", "algo.batch_size=128",
                              "algo.learning_starts=5"],
    "fast_sac_t1_recipe": ["recipe=t1", "sizing=cpu", "gate=off", "env.num_envs=4",
                           "algo.batch_size=128", "algo.learning_starts=5"],
}


def fingerprint(run_dir: Path) -> dict[str, float]:
    """Sums and absolute sums of every tensor of the final checkpoint's learner state, the last
    logged learner metrics and the final evaluation (its returns are the envs' physics too)."""
    state = ckpt.load(ckpt.find_checkpoint(run_dir))
    numbers: dict[str, float] = {"global_step": float(state["global_step"])}

    def walk(tree, prefix: str) -> None:
        if isinstance(tree, torch.Tensor):
            if tree.is_floating_point() and tree.numel():
                values = tree.double()
                numbers[f"{prefix}.sum"] = float(values.sum())
                numbers[f"{prefix}.abs_sum"] = float(values.abs().sum())
        elif isinstance(tree, dict):
            for key in sorted(tree, key=str):
                walk(tree[key], f"{prefix}.{key}" if prefix else str(key))
        elif isinstance(tree, (list, tuple)):
            for index, item in enumerate(tree):
                walk(item, f"{prefix}[{index}]")

    walk(state["agent"], "agent")
    records = read_metrics(run_dir)
    learner = [record for record in records if "loss/critic" in record][-1]
    evaluation = [record for record in records if "eval/return_mean" in record][-1]
    for key, value in sorted({**learner, **evaluation}.items()):
        if key.split("/")[0] in LOGGED and not key.startswith("eval/critic/") and isinstance(value, (int, float)) and math.isfinite(value):
            numbers[f"metrics.{key}"] = float(value)
    return numbers


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(RECORD.read_text()) if RECORD.exists() else {}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_25_step_run_gives_the_recorded_numbers(name, tmp_path, recorded):
    result = subprocess.run([str(BIN / "fast-td3-train"), *RUNS[name], *COMMON], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600, env={**os.environ, "FAST_TD3_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    numbers = fingerprint(tmp_path / "run")
    assert any(key.startswith("metrics.") for key in numbers), "the run logged no learner metric"
    if os.environ.get("FAST_TD3_RECORD_PINS"):
        record = {**(json.loads(RECORD.read_text()) if RECORD.exists() else {}), name: numbers}
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        return
    assert name in recorded, f"no record for {name}: FAST_TD3_RECORD_PINS=1 pytest {__file__}"
    expected = recorded[name]
    assert sorted(numbers) == sorted(expected), "the learner's state or metrics have other names than recorded"
    moved = {key: (numbers[key], expected[key]) for key in expected
             if abs(numbers[key] - expected[key]) > RTOL * scale(expected, key)}
    assert not moved, f"{len(moved)} of {len(expected)} numbers moved, e.g. {dict(list(moved.items())[:5])}"


def scale(record: dict[str, float], key: str) -> float:
    """What a number's difference is measured against: a tensor's sum (which may cancel to near
    zero) against its absolute sum, anything else against itself."""
    if key.endswith(".sum"):
        return max(abs(record[key.removesuffix(".sum") + ".abs_sum"]), 1e-9)
    return max(abs(record[key]), 1e-6)
