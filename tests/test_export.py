"""`fast-td3-export`: the bundle computes the trainer's policy, loads without this repo, and
refuses what it cannot export faithfully."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

import sim2real.t1  # noqa: E402
import sim2real.export  # noqa: E402
from fast_td3 import files  # noqa: E402
from sim2real import export  # noqa: E402
from fast_td3.training import checkpoint as ckpt  # noqa: E402
from fast_td3.analysis.evaluate_checkpoint import load_checkpoint, load_policy  # noqa: E402
from helpers import make_runner, tiny_train_config  # noqa: E402
from sim2real.export import ONNX_META_KEY, export_bundle, load_bundle_policy  # noqa: E402
from sim2real.export_cli import cli  # noqa: E402

EXPORT = str(Path(sys.executable).parent / "fast-td3-export")
TASK, NUM_OBS, NUM_ACTIONS, STEPS = "InvertedPendulum-v5", 4, 1, 6


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished tiny InvertedPendulum run whose normaliser holds deliberately non-trivial
    statistics (mean far from 0, std far from 1), so a missing or doubled normalisation shows."""
    path = tmp_path_factory.mktemp("run")
    # a wide last layer: actions spread over (-1, 1) instead of sitting near 0
    cfg = tiny_train_config(total_steps=STEPS, actor_last_layer_std=0.5)
    cfg.save_interval = 0
    runner = make_runner(cfg, path, eval_env=False)
    runner.train()
    runner.env.close()
    normalizer = runner.agent.obs_normalizer
    normalizer.mean.copy_(torch.tensor([1.5, -2.0, 0.7, 3.0]))
    normalizer.var.copy_(torch.tensor([0.25, 4.0, 0.09, 9.0]))
    runner.save()
    return path


@pytest.fixture(scope="module")
def bundle(run_dir, tmp_path_factory):
    return export_bundle(run_dir, tmp_path_factory.mktemp("exports") / "bundle")


def random_obs(n=64, seed=0):
    """Observations around the normaliser's range (mean +- a few std)."""
    g = torch.Generator().manual_seed(seed)
    return torch.tensor([1.5, -2.0, 0.7, 3.0]) + torch.randn(n, NUM_OBS, generator=g) * torch.tensor([1.0, 4.0, 0.5, 6.0])


def trainer_policy(run_dir):
    """The checkpoint's agent as `fast-td3-eval` builds and applies it."""
    _, checkpoint, cfg = load_checkpoint(run_dir)
    return load_policy(checkpoint, cfg, torch.device("cpu"))


def onnx_actions(bundle_dir, obs):
    session = onnxruntime.InferenceSession(str(bundle_dir / "policy.onnx"), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(["actions"], {"obs": obs.numpy()})[0])


def run(cmd, cwd, env=None):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def test_bundle_matches_the_trainer_and_normalises_exactly_once(run_dir, bundle):
    agent = trainer_policy(run_dir)
    assert not torch.allclose(agent.obs_normalizer.std, torch.ones(NUM_OBS))  # the fixture's stats arrived
    obs = random_obs()
    eager = agent.act(obs)
    scripted, _ = load_bundle_policy(bundle)
    with torch.no_grad():
        exported = scripted(obs)
    from_onnx = onnx_actions(bundle, obs)
    assert exported.shape == from_onnx.shape == (64, NUM_ACTIONS) and exported.dtype == torch.float32
    assert (exported - eager).abs().max() <= 1e-5
    assert (from_onnx - eager).abs().max() <= 1e-5
    assert eager.std() > 0.1  # actions spread out: the controls below can tell policies apart
    # negative controls: normalising zero times or twice gives clearly different actions
    with torch.no_grad():
        unnormalised = agent.actor(obs)
        doubled = agent.actor(agent.obs_normalizer(agent.obs_normalizer(obs)))
    assert (unnormalised - eager).abs().max() > 1e-2
    assert (doubled - eager).abs().max() > 1e-2
    # the batch axis is dynamic in both formats
    single = random_obs(1, seed=3)
    assert (onnx_actions(bundle, single) - agent.act(single)).abs().max() <= 1e-5
    assert (scripted(single) - agent.act(single)).abs().max() <= 1e-5


def test_meta_is_embedded_identically_and_describes_the_checkpoint(run_dir, bundle):
    meta = json.loads((bundle / "meta.json").read_text())
    _, embedded = load_bundle_policy(bundle)
    props = {p.key: p.value for p in onnx.load(str(bundle / "policy.onnx")).metadata_props}
    assert embedded == meta and json.loads(props[ONNX_META_KEY]) == meta
    assert meta["task"] == TASK and meta["suite"] == "gymnasium"
    assert meta["checkpoint"] == str(ckpt.find_checkpoint(run_dir).resolve())
    assert meta["checkpoint_step"] == STEPS
    assert (meta["num_obs"], meta["num_actions"]) == (NUM_OBS, NUM_ACTIONS)
    normalizer = trainer_policy(run_dir).obs_normalizer
    assert meta["normalizer"]["mean"] == normalizer.mean.tolist()
    assert meta["normalizer"]["std"] == normalizer.std.tolist()
    assert meta["normalizer"]["eps"] == normalizer.eps
    assert meta["observation"]["dtype"] == meta["action"]["dtype"] == "float32"
    assert (meta["action"]["low"], meta["action"]["high"]) == (-1.0, 1.0)
    assert "deploy" not in meta and not (bundle / "T1.yaml").exists()  # not a T1 task
    model = onnx.load(str(bundle / "policy.onnx"))
    assert [i.name for i in model.graph.input] == ["obs"] and [o.name for o in model.graph.output] == ["actions"]
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    assert sorted(p.name for p in bundle.iterdir()) == ["meta.json", "policy.onnx", "policy.pt"]


ISOLATED_LOAD = """
import json, sys
class NoRepo:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fast_td3", "sim2real", "envs"):
            raise ImportError("the bundle must load without " + name)
sys.meta_path.insert(0, NoRepo())
import torch
extra = {"meta.json": ""}
policy = torch.jit.load(sys.argv[1], _extra_files=extra)
actions = policy(torch.tensor(json.loads(sys.argv[2])))
print(json.dumps({"actions": actions.tolist(), "task": json.loads(extra["meta.json"])["task"]}))
"""


def test_torchscript_loads_without_the_repo(bundle, tmp_path):
    obs = random_obs(5, seed=7)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = run([sys.executable, "-I", "-c", ISOLATED_LOAD, str(bundle / "policy.pt"), json.dumps(obs.tolist())],
               cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    scripted, _ = load_bundle_policy(bundle)
    assert result["task"] == TASK
    assert torch.allclose(torch.tensor(result["actions"]), scripted(obs), atol=0, rtol=0)


def test_cli_exports_then_refuses_to_overwrite(run_dir, tmp_path):
    out = tmp_path / "exports" / "bundle"
    done = run([EXPORT, f"checkpoint={run_dir}", f"out={out}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(last["bundle"]) == out and last["step"] == STEPS
    assert "policy.onnx" in done.stdout and "bytes" in done.stdout
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(before) == {"meta.json", "policy.onnx", "policy.pt"}

    refused = run([EXPORT, f"checkpoint={run_dir}", f"out={out}"], cwd=tmp_path)
    assert refused.returncode == 2 and "not empty" in refused.stderr and "force=true" in refused.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in out.parent.iterdir()] == ["bundle"]  # no temporary folders left


def test_force_replaces_a_bundle_and_a_failed_export_leaves_the_old_one(run_dir, tmp_path, monkeypatch):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    with pytest.raises(FileExistsError, match="not a bundle written by fast-td3-export"):
        export_bundle(run_dir, out, force=True)  # force replaces only a bundle (more: test_run_folders.py)
    (out / "stale.txt").unlink()
    (out / "meta.json").write_text(json.dumps({"format": sim2real.export.BUNDLE_FORMAT}))  # an older bundle
    (out / "policy.pt").write_bytes(b"old")
    with pytest.raises(FileExistsError, match="holds a bundle, which force=true replaces"):
        export_bundle(run_dir, out)
    export_bundle(run_dir, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "policy.onnx", "policy.pt"]
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    written = []

    def dies_on_the_second_file(path, writer):
        if written:
            raise KeyboardInterrupt("killed mid-export")
        written.append(path)
        real_write(path, writer)

    real_write = files.atomic_write_bytes
    monkeypatch.setattr(export, "atomic_write_bytes", dies_on_the_second_file)
    with pytest.raises(KeyboardInterrupt):
        export_bundle(run_dir, out, force=True)
    assert written  # the export was interrupted with one file written
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]
    with pytest.raises(KeyboardInterrupt):
        export_bundle(run_dir, tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()


def test_cli_names_both_sizes_when_the_normaliser_does_not_fit_the_actor(run_dir, tmp_path):
    state = ckpt.load(ckpt.find_checkpoint(run_dir))
    modules = state["agent"]["modules"]
    modules["obs_normalizer.mean"] = torch.zeros(7)
    modules["obs_normalizer.var"] = torch.ones(7)
    broken = tmp_path / "step_000000006.pt"
    ckpt.save_atomic(state, broken)
    out = tmp_path / "bundle"
    done = run([EXPORT, f"checkpoint={broken}", f"out={out}"], cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert TASK in done.stderr and re.search(r"\b4\b", done.stderr) and re.search(r"\b7\b", done.stderr)
    assert not out.exists()


def fake_t1_extras(observation_size, action_size=NUM_ACTIONS):
    calls = []

    def bundle_extras(cfg, gait_frequency=None):
        calls.append(cfg.env.task)
        return {
            "meta": {"robot": "T1", "observation": {"size": observation_size}, "action": {"size": action_size}},
            "deploy_yaml": {"policy": {"path": "policy.pt"}, "control": {"kp": [2.0, 1.0], "dt": 0.02}},
        }

    return bundle_extras, calls


def test_t1_extras_go_into_meta_and_t1_yaml(run_dir, tmp_path, monkeypatch):
    extras, calls = fake_t1_extras(NUM_OBS)
    monkeypatch.setattr(sim2real.export, "t1_bundle_extras", extras)
    out = export_bundle(run_dir, tmp_path / "bundle")
    assert calls == [TASK]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["deploy"] == {"robot": "T1", "observation": {"size": NUM_OBS}, "action": {"size": NUM_ACTIONS}}
    assert load_bundle_policy(out)[1] == meta
    text = (out / "T1.yaml").read_text()
    assert yaml.safe_load(text) == {"policy": {"path": "policy.pt"}, "control": {"kp": [2.0, 1.0], "dt": 0.02}}
    assert text.index("policy:") < text.index("control:")  # the caller's order, not sorted


@pytest.mark.parametrize("sizes, named", [((85, NUM_ACTIONS), ("85", "4")), ((NUM_OBS, 12), ("12", "1"))])
def test_t1_layout_that_does_not_fit_the_checkpoint_is_refused(run_dir, tmp_path, monkeypatch, sizes, named):
    monkeypatch.setattr(sim2real.export, "t1_bundle_extras", fake_t1_extras(*sizes)[0])
    with pytest.raises(ValueError) as error:
        export_bundle(run_dir, tmp_path / "bundle")
    message = str(error.value)
    assert TASK in message and all(re.search(rf"\b{n}\b", message) for n in named)
    assert not (tmp_path / "bundle").exists()


def test_a_run_exports_its_best_checkpoint_unless_told_latest(run_dir, tmp_path):
    import shutil

    run_copy = tmp_path / "run"
    shutil.copytree(run_dir, run_copy)
    state = ckpt.load(ckpt.find_checkpoint(run_copy))
    best_state = {**state, "global_step": 3, "best_eval": {"step": 3, "return_mean": 9.0}}
    ckpt.CheckpointManager(run_copy).save_best(best_state)
    best = run([EXPORT, f"checkpoint={run_copy}", f"out={tmp_path / 'best'}"], cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    assert json.loads(best.stdout.strip().splitlines()[-1])["step"] == 3
    assert "fast-td3-export: best checkpoint" in best.stderr and "use=latest takes the newest" in best.stderr
    latest = run([EXPORT, f"checkpoint={run_copy}", f"out={tmp_path / 'latest'}", "use=latest"], cwd=tmp_path)
    assert latest.returncode == 0, latest.stderr
    assert json.loads(latest.stdout.strip().splitlines()[-1])["step"] == STEPS


def test_cli_help_and_bad_arguments(capsys):
    with pytest.raises(SystemExit) as helped:
        cli(["--help"])
    assert helped.value.code == 0 and "checkpoint=" in capsys.readouterr().out
    for argv in (["out=x"], ["checkpoint=x", "out=y", "colour=red"], ["checkpoint=x", "out=y", "force=maybe"],
                 ["checkpoint=x", "out=y", "use=newest"], ["checkpoint=x", "out=y", "gait_frequency=fast"]):
        with pytest.raises(SystemExit) as failed:
            cli(argv)
        assert failed.value.code == 2
        assert "fast-td3-export: error" in capsys.readouterr().err


def test_real_t1_extras_on_a_t1_shaped_checkpoint(tmp_path):
    """`sim2real.export.t1_bundle_extras` itself, on a checkpoint saved the way the runner saves one."""
    from helpers import save_untrained_t1_checkpoint

    cfg = save_untrained_t1_checkpoint(tmp_path / "run", 123)
    expected = sim2real.export.t1_bundle_extras(cfg)
    num_obs, num_actions = expected["meta"]["observation"]["size"], expected["meta"]["action"]["size"]
    out = export_bundle(tmp_path / "run", tmp_path / "bundle")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["deploy"] == json.loads(json.dumps(expected["meta"]))
    assert meta["checkpoint_step"] == 123 and meta["task"] == "T1LowDimJoystickFlatTerrain"
    assert yaml.safe_load((out / "T1.yaml").read_text()) == json.loads(json.dumps(expected["deploy_yaml"]))
    policy, _ = load_bundle_policy(out)
    assert policy(torch.zeros(1, num_obs)).shape == (1, num_actions)


def test_a_t1_export_deploys_another_gait_frequency_inside_the_trained_range_only(tmp_path, capsys):
    """By default T1.yaml deploys the centre of the trained gait frequencies; gait_frequency=
    changes what T1.yaml deploys and meta.json records, nothing else; outside the trained range,
    or for a task without a gait, it is refused."""
    from helpers import save_untrained_t1_checkpoint
    from sim2real import t1

    save_untrained_t1_checkpoint(tmp_path / "run", 123)
    default = export_bundle(tmp_path / "run", tmp_path / "default")
    cli([f"checkpoint={tmp_path / 'run'}", f"out={tmp_path / 'edge'}", "gait_frequency=1.0"])
    deployed = {name: yaml.safe_load((tmp_path / name / "T1.yaml").read_text())["policy"]["gait_frequency"]
                for name in ("default", "edge")}
    assert deployed == {"default": 1.25, "edge": 1.0} and sum(t1.CommandSpec().gait_frequency) / 2 == 1.25
    metas = [json.loads((folder / "meta.json").read_text())["deploy"] for folder in (default, tmp_path / "edge")]
    assert metas[1]["commands"]["deploy_gait_frequency"] == 1.0
    assert {k: v for k, v in metas[0].items() if k != "commands"} == {k: v for k, v in metas[1].items() if k != "commands"}
    with pytest.raises(SystemExit) as refused:
        cli([f"checkpoint={tmp_path / 'run'}", f"out={tmp_path / 'fast'}", "gait_frequency=2.0"])
    assert refused.value.code == 2 and "outside the training range" in capsys.readouterr().err
    assert not (tmp_path / "fast").exists()
