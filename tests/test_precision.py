"""Hardware-chosen precision, per-process thread shares, and the preset values that follow
the published recipe (issue: defaults that hold on every machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from fast_td3.learner import precision as precision_module
from envs.protocol import EnvSpec
from fast_td3.learner.algorithms.fast_td3 import FastTD3
from fast_td3.learner.config import AlgoConfig, ConfigError
from fast_td3.training.config import register_configs
from fast_td3.learner.normalization import RewardNormalization, return_bound_of_support
from fast_td3.learner.precision import Precision, configure_matmul, resolve_precision
from fast_td3.training.threads import joblib_parallel_jobs, thread_share

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
AVX2_ONLY = {"fpu", "sse4_2", "avx", "avx2", "fma"}  # an AMD EPYC of ours: no native bf16
AMX = AVX2_ONLY | {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}


def never_probe() -> float:
    raise AssertionError("the matmul probe ran where the flags already decide")


# ----------------------------------------------------------------- resolution, faked hardware
@pytest.mark.parametrize("capability, expected", [((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 5), "fp32")])
def test_auto_on_cuda_follows_the_compute_capability(capability, expected):
    chosen = resolve_precision("auto", "cuda", cuda_capability=lambda device: capability)
    assert chosen.name == expected
    assert f"{capability[0]}.{capability[1]}" in chosen.reason


def test_auto_on_a_cpu_without_native_bf16_is_fp32_without_probing():
    chosen = resolve_precision("auto", "cpu", flags=AVX2_ONLY, bf16_speedup=never_probe)
    assert chosen == Precision("fp32", chosen.reason) and "no AMX-bf16 or AVX512-BF16" in chosen.reason


@pytest.mark.parametrize("speedup, expected", [(3.0, "bf16"), (0.8, "fp32")])
def test_auto_on_a_cpu_with_native_bf16_takes_the_faster_of_the_probe(speedup, expected):
    chosen = resolve_precision("auto", "cpu", flags=AMX, bf16_speedup=lambda: speedup)
    assert chosen.name == expected
    assert "amx_bf16" in chosen.reason and "measured" in chosen.reason


def test_explicit_bf16_on_an_avx2_cpu_warns_with_the_measured_slowdown():
    with pytest.warns(RuntimeWarning, match=r"17\.0x slower than fp32.*precision=auto picks fp32"):
        chosen = resolve_precision("bf16", "cpu", flags=AVX2_ONLY, bf16_speedup=lambda: 1 / 17)
    assert chosen.name == "bf16"  # honoured: the user asked for it


def test_explicit_choices_are_kept_without_warning(recwarn):
    assert resolve_precision("bf16", "cpu", flags=AMX, bf16_speedup=never_probe).name == "bf16"
    assert resolve_precision("fp32", "cpu", flags=AMX, bf16_speedup=never_probe).name == "fp32"
    assert resolve_precision("fp32", "cuda", cuda_capability=lambda d: (9, 0)).name == "fp32"
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision"):
        resolve_precision("fp8", "cpu")
    with pytest.raises(ConfigError, match="precision"):
        AlgoConfig(precision="fp8")


def test_the_probe_is_cached_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv(precision_module.CACHE_ENV, str(tmp_path))
    calls = []
    monkeypatch.setattr(precision_module, "measure_bf16_speedup", lambda: calls.append(1) or 2.5)
    precision_module.cached_bf16_speedup.cache_clear()
    try:
        assert precision_module.cached_bf16_speedup() == 2.5
        precision_module.cached_bf16_speedup.cache_clear()  # a new process: only the file remains
        assert precision_module.cached_bf16_speedup() == 2.5
        assert calls == [1]
        table = json.loads((tmp_path / "precision_probe.json").read_text())
        assert list(table.values()) == [2.5] and precision_module.cpu_model() in next(iter(table))
    finally:
        precision_module.cached_bf16_speedup.cache_clear()


def test_the_probe_reports_fp32_time_over_bf16_time(monkeypatch):
    seen = []
    times = {torch.float32: 0.6, torch.bfloat16: 0.2}
    monkeypatch.setattr(precision_module, "_time_matmul", lambda dtype, shape, repeats: seen.append(dtype) or times[dtype])
    assert precision_module.measure_bf16_speedup() == pytest.approx(3.0)  # bf16 three times faster
    assert set(seen) == {torch.float32, torch.bfloat16}
    monkeypatch.undo()
    real = precision_module.measure_bf16_speedup(shape=(256, 128, 128), repeats=2)  # real matmuls run
    assert 0.001 < real < 1000


def test_the_default_is_auto_and_the_learner_applies_the_resolution():
    assert AlgoConfig().precision == "auto"
    agent = FastTD3(AlgoConfig(precision="auto", compile=False, batch_size=8, actor_hidden_dims=[8],
                               critic_hidden_dims=[8], buffer_size=16), EnvSpec(num_obs=3, num_actions=2), device="cpu")
    assert agent.precision == resolve_precision("auto", "cpu")
    dtype_in_update = {True: torch.bfloat16, False: torch.float32}[agent.precision.bf16]
    with agent._autocast():
        assert agent.actor.net[0](torch.zeros(1, 3)).dtype == dtype_in_update


def test_fp32_on_cuda_allows_tf32_matmuls():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        configure_matmul(Precision("bf16", ""), "cuda")
        assert torch.backends.cuda.matmul.allow_tf32 is False
        configure_matmul(Precision("fp32", ""), "cpu")
        assert torch.backends.cuda.matmul.allow_tf32 is False
        configure_matmul(Precision("fp32", ""), "cuda")
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


# ----------------------------------------------------------------- threads
@pytest.mark.parametrize("cores, environ, sweep_jobs, threads", [
    (2, {}, 1, 2),
    (2, {"LOCAL_WORLD_SIZE": "2"}, 1, 1),
    (16, {"LOCAL_WORLD_SIZE": "2"}, 1, 8),
    (16, {}, 4, 4),
    (16, {"LOCAL_WORLD_SIZE": "2"}, 2, 4),
    (2, {}, 4, 1),  # never below one thread
    (16, {"FAST_TD3_THREADS": "3", "LOCAL_WORLD_SIZE": "2"}, 2, 3),
])
def test_each_process_takes_its_share_of_the_cores(cores, environ, sweep_jobs, threads):
    assert thread_share(cores, environ, sweep_jobs).threads == threads


def test_thread_share_names_why_and_refuses_nonsense():
    assert "2 ranks" in thread_share(8, {"LOCAL_WORLD_SIZE": "2"}).reason
    with pytest.raises(ValueError, match="FAST_TD3_THREADS"):
        thread_share(8, {"FAST_TD3_THREADS": "zero"})
    assert joblib_parallel_jobs(-1, 8) == 8 and joblib_parallel_jobs(-2, 8) == 7 and joblib_parallel_jobs(3, 8) == 3


# ----------------------------------------------------------------- the published recipe
def composed(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def test_presets_follow_the_reference_where_they_drifted():
    leap = composed("task=LeapCubeRotateZAxis")
    assert (leap.algo.gamma, leap.algo.fast_td3.policy_noise, leap.algo.use_cdq) == (0.99, 0.2, False)
    for task in ("T1JoystickFlatTerrain", "T1JoystickRoughTerrain", "G1JoystickFlatTerrain", "G1JoystickRoughTerrain"):
        cfg = composed(f"task={task}")
        assert cfg.env.options.push is False, task  # the reference trains these without pushes
        assert composed(f"task={task}", "env.options.push=true").env.options.push is True
    # the sim-to-real env keeps its own settings: no preset push switch
    assert composed("task=T1LowDimJoystickFlatTerrain").env.options.get("push") is None
    assert composed("task=Go1JoystickFlatTerrain").env.options.push is None


@pytest.mark.parametrize("task, episodes", [
    ("HalfCheetah-v5", 128), ("T1JoystickFlatTerrain", 1024), ("h1hand-walk-v0", 128),
])
def test_evaluation_episodes_per_suite_and_small_on_a_cpu(task, episodes):
    assert composed(f"task={task}").eval_episodes == episodes
    cpu = composed(f"task={task}", "sizing=cpu")
    assert cpu.eval_episodes == 10 and cpu.algo.precision == "auto"


def test_no_preset_forces_bf16():
    for path in sorted((CONF_DIR).rglob("*.yaml")):
        assert "precision: bf16" not in path.read_text(), path


def test_reward_normaliser_bound_comes_from_the_support():
    assert return_bound_of_support(-250, 250) == 250
    assert return_bound_of_support(-10000, 10000) == 10000
    assert return_bound_of_support(-100, 500) == 100
    assert return_bound_of_support(0, 100) == 100  # an end at zero: the other end
    agent = FastTD3(AlgoConfig(precision="fp32", compile=False, batch_size=8, actor_hidden_dims=[8],
                               critic_hidden_dims=[8], buffer_size=16, reward_normalization=True,
                               v_min=-1000, v_max=1000), EnvSpec(num_envs=2, num_obs=3, num_actions=2), device="cpu")
    assert agent.reward_normalizer.g_max == 1000
    # behaviour: steady returns near 500 (std ~4) normalise to ~125 under the support's bound
    # (inside a +-1000 support); a fixed g_max of 10 squeezed them to <= 10
    derived = RewardNormalization(1, 0.0, g_max=return_bound_of_support(-1000, 1000))
    fixed = RewardNormalization(1, 0.0, g_max=10.0)
    for r in (500.0, 510.0, 505.0):
        for norm in (derived, fixed):
            norm.update(torch.tensor([r]), torch.tensor([False]))
    assert 100 < derived(torch.tensor([505.0])).item() < 1000
    assert fixed(torch.tensor([505.0])).item() <= 10


def test_a_buffer_smaller_than_learning_starts_is_refused():
    with pytest.raises(ConfigError, match=r"learning_starts \(10\) must be <= buffer_size \(5\)"):
        AlgoConfig(buffer_size=5, learning_starts=10)
    AlgoConfig(buffer_size=10, learning_starts=10)
