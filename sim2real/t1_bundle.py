"""A T1 export bundle as the gates and the player read it: its folder (or a shipped one by name),
its TorchScript policy, `meta.json` and `T1.yaml`, and where the deploy settings the robot would
run differ from those the policy was trained with."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim2real import t1


PRETRAINED = Path(__file__).resolve().parent / "pretrained"
"""Bundles shipped with the package: `bundle=t1_flat` names `sim2real/pretrained/t1_flat`."""


class BundleError(ValueError):
    """The folder is not a usable T1 bundle."""


def bundle_path(folder: str | Path) -> Path:
    """A bundle folder, or the name of a shipped one when no such folder exists here."""
    folder = Path(folder)
    if not folder.exists() and len(folder.parts) == 1 and (PRETRAINED / folder).is_dir():
        return PRETRAINED / folder
    return folder


@dataclass
class Bundle:
    folder: Path
    policy: Any
    meta: dict[str, Any]
    deploy_yaml: dict[str, Any]

    @property
    def deploy(self) -> dict[str, Any]:
        return self.meta["deploy"]

    def control(self) -> t1.T1Control:
        """The control settings the robot will run: T1.yaml's."""
        common, policy = self.deploy_yaml["common"], self.deploy_yaml["policy"]
        trained = t1.T1Control.from_dict(self.deploy["control"])
        return t1.T1Control(
            stiffness=tuple(common["stiffness"]), damping=tuple(common["damping"]),
            torque_limit=tuple(common["torque_limit"]), default_pose=tuple(common["default_qpos"]),
            action_scale=float(policy["control"]["action_scale"]), sim_dt=float(common["dt"]),
            decimation=int(policy["control"]["decimation"]), target_filter=trained.target_filter,
            leg_action_scale=_optional_tuple(policy["control"].get("action_scales")),
            action_low=_optional_tuple(policy["control"].get("action_low")),
            action_high=_optional_tuple(policy["control"].get("action_high")))


def _optional_tuple(values) -> tuple[float, ...] | None:
    """T1.yaml's per-joint list as a tuple; None where a bundle older than action bounds has none."""
    return None if values is None else tuple(float(v) for v in values)


def load_bundle(folder: str | Path) -> Bundle:
    import torch

    folder = bundle_path(folder)
    if not folder.is_dir():
        raise BundleError(f"bundle={folder}: no such folder, nor a shipped bundle (shipped: {', '.join(shipped())}); "
                          "make one with `fast-td3-export checkpoint=<a T1LowDimJoystick* run> out=<folder>`")
    for name in ("policy.pt", "meta.json", "T1.yaml"):
        if not (folder / name).is_file():
            raise BundleError(f"{folder} has no {name}: sim-to-sim needs a T1 bundle from "
                              "`fast-td3-export checkpoint=<a T1LowDimJoystick* run> out=<folder>`")
    try:
        meta = json.loads((folder / "meta.json").read_text())
        deploy_yaml = yaml.safe_load((folder / "T1.yaml").read_text())
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise BundleError(f"{folder}: unreadable bundle file ({error})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("deploy"), dict):
        task = meta.get("task") if isinstance(meta, dict) else None
        raise BundleError(f"{folder} was exported from {task!r}, not a T1LowDimJoystick task")
    missing = [k for k in ("control", "commands", "observation") if not isinstance(meta["deploy"].get(k), dict)]
    if missing:
        raise BundleError(f"{folder / 'meta.json'}: its deploy section lacks {missing}; re-export the bundle")
    required = {"common": ("dt", "stiffness", "damping", "default_qpos", "torque_limit"),
                "policy": ("gait_frequency", "control")}
    for section, keys in required.items():
        present = deploy_yaml.get(section) if isinstance(deploy_yaml, dict) else None
        missing = [k for k in keys if not isinstance(present, dict) or k not in present]
        if missing:
            raise BundleError(f"{folder / 'T1.yaml'}: section {section!r} lacks {missing}")
    check_deploy_numbers(folder / "T1.yaml", deploy_yaml)
    try:
        policy = torch.jit.load(str(folder / "policy.pt"), map_location="cpu").eval()
    except (RuntimeError, OSError) as error:
        raise BundleError(f"{folder / 'policy.pt'} is not a TorchScript file torch.jit.load can read ({error})") from None
    return Bundle(folder, policy, meta, deploy_yaml)


def shipped() -> list[str]:
    """The names of the bundles shipped with the package (`bundle=<name>`)."""
    return sorted(p.name for p in PRETRAINED.iterdir() if p.is_dir()) if PRETRAINED.is_dir() else []


def check_deploy_numbers(path: Path, deploy_yaml: dict[str, Any]) -> None:
    """T1.yaml's per-joint lists hold one number per joint, its rates and scales are numbers."""
    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    for key in ("stiffness", "damping", "default_qpos", "torque_limit"):
        values = deploy_yaml["common"][key]
        if not isinstance(values, list) or len(values) != t1.NUM_JOINTS:
            count = len(values) if isinstance(values, list) else "not a list"
            raise BundleError(f"{path}: common.{key} needs {t1.NUM_JOINTS} numbers (one per joint, SDK order), "
                              f"has {count}")
        bad = [(i, v) for i, v in enumerate(values) if not number(v)]
        if bad:
            i, v = bad[0]
            raise BundleError(f"{path}: common.{key}[{i}] ({t1.SDK_JOINT_NAMES[i]}) is {v!r}, not a number")
    control = deploy_yaml["policy"]["control"]
    scalars = {"common.dt": deploy_yaml["common"]["dt"], "policy.gait_frequency": deploy_yaml["policy"]["gait_frequency"],
               "policy.control.action_scale": control.get("action_scale") if isinstance(control, dict) else None,
               "policy.control.decimation": control.get("decimation") if isinstance(control, dict) else None}
    for key, value in scalars.items():
        if not number(value):
            raise BundleError(f"{path}: {key} is {value!r}, not a number")
    for key in ("action_scales", "action_low", "action_high"):  # absent in bundles made before them
        values = control.get(key)
        if values is not None and (not isinstance(values, list) or len(values) != t1.NUM_LEG_JOINTS
                                   or not all(number(v) for v in values)):
            raise BundleError(f"{path}: policy.control.{key} needs {t1.NUM_LEG_JOINTS} numbers (one per leg joint, "
                              f"SDK order 11-22), has {values!r}")


def deploy_mismatches(bundle: Bundle) -> list[str]:
    """Where the deploy configuration the robot will run differs from what the policy was trained with."""
    trained = t1.T1Control.from_dict(bundle.deploy["control"])
    deployed = bundle.control()
    problems = []
    for name, unit in (("stiffness", "Nm/rad"), ("damping", "Nm·s/rad"), ("default_pose", "rad"),
                       ("torque_limit", "Nm")):
        ours, theirs = getattr(trained, name), getattr(deployed, name)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9):
                problems.append(f"{name} of {t1.SDK_JOINT_NAMES[i]} (SDK {i}): trained with {a} {unit}, "
                                f"T1.yaml has {b}")
    for end, ours, theirs in zip(("action_scales", "action_low", "action_high"),
                                 (trained.leg_scales(), *trained.action_bounds()),
                                 (deployed.leg_scales(), *deployed.action_bounds())):
        for name, a, b in zip(t1.LEG_JOINT_NAMES, ours, theirs):
            if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9):
                problems.append(f"{end} of {name}: trained with {a}, T1.yaml has {b} (the robot would turn the "
                                "policy's actions into other targets than training did)")
    for name in ("action_scale", "sim_dt", "decimation"):
        if not math.isclose(getattr(trained, name), getattr(deployed, name), rel_tol=1e-9):
            problems.append(f"{name}: trained with {getattr(trained, name)}, T1.yaml has {getattr(deployed, name)}")
    policy = bundle.deploy_yaml["policy"]
    low, high = bundle.deploy["commands"]["gait_frequency"]
    if not low <= policy["gait_frequency"] <= high:
        problems.append(f"gait_frequency {policy['gait_frequency']} Hz in T1.yaml lies outside the training range "
                        f"[{low}, {high}] Hz")
    expected = {"num_observations": t1.OBSERVATION_SIZE, "num_actions": t1.NUM_LEG_JOINTS}
    problems += [f"{key}: the policy has {value}, T1.yaml says {policy.get(key)}"
                 for key, value in expected.items() if policy.get(key) != value]
    for key, value in t1.deploy_normalization().items():
        if policy.get("normalization", {}).get(key) != value:
            problems.append(f"normalization.{key}: the policy was trained with {value}, T1.yaml has "
                            f"{policy.get('normalization', {}).get(key)}")
    mech = bundle.deploy_yaml.get("mech", {}).get("parallel_mech_indexes")
    if mech != list(t1.PARALLEL_MECH_SDK_INDICES):
        problems.append(f"mech.parallel_mech_indexes: {mech}, the T1's ankles are {list(t1.PARALLEL_MECH_SDK_INDICES)}")
    recorded = [(e["name"], e["size"], e["scale"]) for e in bundle.deploy["observation"]["layout"]]
    if recorded != [tuple(e) for e in t1.OBSERVATION_LAYOUT]:
        problems.append(f"the bundle's observation layout {recorded} is not this code's {list(t1.OBSERVATION_LAYOUT)}: "
                        "re-export with this version")
    return problems
