"""Recipes and sizes as two config groups (`recipe=`, `sizing=`): the sizing a command line gets
when it names none, each recipe at each machine's sizes, and the shipped nominal recipe's config.
(The robust recipe against its shipped run: test_pretrained_t1_robust.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_precision import composed  # noqa: E402

from fast_td3.training import sizing  # noqa: E402
from fast_td3.training.cli_checks import CONF_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_a_named_device_decides_the_sizing():
    assert sizing.detected_sizing("cuda") == sizing.detected_sizing("cuda:1") == "gpu"
    assert sizing.detected_sizing("cpu") == sizing.detected_sizing("mps") == "cpu"


def test_auto_wants_both_a_gpu_and_a_gpu_build_of_torch(monkeypatch, tmp_path):
    device_file = tmp_path / "nvidia0"
    monkeypatch.setattr(sizing, "GPU_DEVICE_FILES", (str(device_file),))
    monkeypatch.setattr(sizing, "torch_gpu_build", lambda: "12.8")
    assert sizing.detected_sizing("auto") == "cpu"  # a CUDA torch, no GPU
    device_file.touch()
    assert sizing.detected_sizing("auto") == "gpu"
    monkeypatch.setattr(sizing, "torch_gpu_build", lambda: None)
    assert sizing.detected_sizing("auto") == "cpu"  # a GPU, a CPU build of torch


def test_the_torch_build_is_read_without_importing_torch():
    import torch

    assert sizing.torch_gpu_build() == (torch.version.cuda or torch.version.hip)


def test_the_detected_sizing_joins_the_other_overrides_unless_one_is_named(monkeypatch):
    monkeypatch.setattr(sizing, "detected_sizing", lambda device="auto": f"for-{device}")
    assert sizing.with_detected_sizing(["--cfg", "job"]) == ["--cfg", "job", "sizing=for-auto"]
    # beside the overrides, not after a flag that follows them (Hydra's parser takes one run of them)
    assert sizing.with_detected_sizing(["-m", "seed=1,2", "device=cpu"]) == ["-m", "sizing=for-cpu", "seed=1,2",
                                                                           "device=cpu"]
    assert sizing.with_detected_sizing(["recipe=t1", "sizing=gpu"]) == ["recipe=t1", "sizing=gpu"]
    assert sizing.with_detected_sizing(["resume=runs/x"]) == ["resume=runs/x"]  # its run's sizes stay
    assert sizing.with_detected_sizing(["resume=null"]) == ["sizing=for-auto", "resume=null"]


def recipe_sizes(cfg) -> tuple:
    return (cfg.env.num_envs, cfg.algo.batch_size, cfg.algo.buffer_size, tuple(cfg.algo.critic_hidden_dims),
            cfg.algo.num_updates, cfg.algo.compile)


@pytest.mark.parametrize("recipe", sorted(p.stem for p in (CONF_DIR / "recipe").glob("*.yaml")))
def test_every_recipe_is_one_recipe_at_two_sizes(recipe):
    """The same recipe on a CPU and on a GPU: what it trains (task, algorithm, rewards,
    randomisation, returns, gate) is equal, only the sizes differ, and each sizing's own."""
    cpu, gpu = composed(f"recipe={recipe}", "sizing=cpu"), composed(f"recipe={recipe}", "sizing=gpu")
    what = lambda c: (c.env.task, c.algo.name, c.algo.symmetry, c.algo.n_step, dict(c.env.reward_scales),  # noqa: E731
                      str(c.env.options), str(c.gate), c.total_steps)
    assert what(cpu) == what(gpu)
    assert recipe_sizes(cpu) != recipe_sizes(gpu)
    assert cpu.algo.critic_hidden_dims == [256, 256]  # sizing/cpu's networks
    assert gpu.env.num_envs >= 1024 and gpu.algo.batch_size >= 8192


def test_the_t1_recipe_at_a_gpus_sizes_takes_holosomas():
    gpu = composed("recipe=t1", "sizing=gpu")
    assert recipe_sizes(gpu) == (4096, 8192, 1024, (768, 384, 192), 8, True)
    assert gpu.algo.name == "fast_sac" and gpu.algo.symmetry and gpu.gate.ship


def test_the_t1_nominal_recipe_is_the_shipped_t1_flat_runs_config():
    """`recipe=t1_nominal sizing=cpu seed=1` trains what sim2real/pretrained/t1_flat's run did, but
    for the machine's values and the gate in the loop, which came after it shipped."""
    from omegaconf import OmegaConf
    from test_pretrained_t1_robust import _leaves

    from fast_td3.training.config import TrainConfig

    shipped = _leaves(OmegaConf.to_container(OmegaConf.load(ROOT / "sim2real/pretrained/t1_flat/train_config.yaml")))
    recipe = _leaves(OmegaConf.to_container(composed("recipe=t1_nominal", "sizing=cpu", f"seed={shipped['seed']}")))
    defaults = _leaves(OmegaConf.to_container(OmegaConf.structured(TrainConfig)))
    differing = {key for key in recipe.keys() | shipped.keys()
                 if recipe.get(key, "-") != shipped.get(key, defaults.get(key, "-"))}
    machine = {"env.options.backend", "out_dir"} | {k for k in shipped if k.startswith("resolved.")}
    assert differing - machine <= {"best_by", "gate.interval"}, differing - machine
    assert recipe["env.num_envs"] == 64 and recipe["algo.n_step"] == 3 and recipe["env.options.push"] is False


def test_a_recipe_leaves_the_command_lines_task_and_algorithm_alone():
    cfg = composed("recipe=t1", "sizing=cpu", "task=T1LowDimJoystickRoughTerrain", "algo=fast_td3")
    assert cfg.env.task == "T1LowDimJoystickRoughTerrain" and cfg.algo.name == "fast_td3"
    assert cfg.env.options.push is True and cfg.env.num_envs == 64  # the rest of the recipe stays
