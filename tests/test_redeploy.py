"""A bundle deployed at another gait frequency (`sim2real/redeploy.py`): only the frequency changes."""

import json

import numpy as np
import pytest
import torch
import yaml

from sim2real.export import ONNX_META_KEY, load_bundle_policy
from sim2real.redeploy import main, redeploy

SHIPPED = __import__("pathlib").Path(__file__).resolve().parents[1] / "sim2real" / "pretrained"


def test_a_redeployed_bundle_differs_in_its_gait_frequency_only(tmp_path):
    import onnx
    import onnxruntime

    source = SHIPPED / "t1_robust"
    old_frequency = yaml.safe_load((source / "T1.yaml").read_text())["policy"]["gait_frequency"]
    new_frequency = 1.4 if old_frequency != 1.4 else 1.1
    out = redeploy(source, tmp_path / "bundle", new_frequency)
    old_yaml, new_yaml = (yaml.safe_load((folder / "T1.yaml").read_text()) for folder in (source, out))
    assert new_yaml["policy"].pop("gait_frequency") == new_frequency
    old_yaml["policy"].pop("gait_frequency")
    assert new_yaml == old_yaml
    old_meta, new_meta = (json.loads((folder / "meta.json").read_text()) for folder in (source, out))
    assert new_meta["deploy"]["commands"].pop("deploy_gait_frequency") == new_frequency
    old_meta["deploy"]["commands"].pop("deploy_gait_frequency")
    assert new_meta == old_meta
    # the embedded copies of meta.json follow, and the networks are the same functions
    new_policy, embedded = load_bundle_policy(out)
    assert embedded == json.loads((out / "meta.json").read_text())
    (onnx_meta,) = [e.value for e in onnx.load(str(out / "policy.onnx")).metadata_props if e.key == ONNX_META_KEY]
    assert json.loads(onnx_meta) == embedded
    obs = torch.randn(8, new_meta["num_obs"], generator=torch.Generator().manual_seed(0))
    old_policy, _ = load_bundle_policy(source)
    assert torch.equal(new_policy(obs), old_policy(obs))
    sessions = [onnxruntime.InferenceSession(str(folder / "policy.onnx"), providers=["CPUExecutionProvider"])
                for folder in (source, out)]
    old_actions, new_actions = (s.run(["actions"], {"obs": obs.numpy()})[0] for s in sessions)
    assert np.array_equal(old_actions, new_actions)


def test_a_frequency_outside_the_trained_range_or_an_older_contract_is_refused(tmp_path, capsys):
    assert main([str(SHIPPED / "t1_robust"), str(tmp_path / "fast"), "--gait-frequency", "1.7"]) == 2
    assert "outside the training range" in capsys.readouterr().err and not (tmp_path / "fast").exists()
    assert main([str(SHIPPED / "t1_flat"), str(tmp_path / "old"), "--gait-frequency", "1.25"]) == 2
    assert "older contract" in capsys.readouterr().err and not (tmp_path / "old").exists()
    with pytest.raises(FileExistsError):
        redeploy(SHIPPED / "t1_robust", SHIPPED / "t1_flat", 1.25)  # a shipped bundle is not overwritten unforced
