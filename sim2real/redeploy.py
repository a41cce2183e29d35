"""A T1 bundle deployed at another gait frequency, without its checkpoint.

    python -m sim2real.redeploy <bundle> <out> --gait-frequency 1.25

The gait frequency is a deploy-time choice: training samples one per episode from
`commands.gait_frequency`, and `T1.yaml` runs one value from that range. A bundle can
outlive its run folder (the shipped ones do), so this rewrites the bundle itself: `meta.json`
(its `deploy.commands.deploy_gait_frequency`), `T1.yaml`, and the copies of `meta.json` that
`policy.pt` and `policy.onnx` embed. The networks are copied untouched. The new `T1.yaml` is
rebuilt from the bundle's recorded contract and must equal the old one but for the frequency,
so a bundle from an older contract is refused rather than silently changed. Then run the gate
on the new bundle (`fast-td3-sim2sim bundle=<out>`): it is a new deployment.
"""

from __future__ import annotations

import copy
import io
import json
import sys
import warnings
from pathlib import Path

import yaml

from fast_td3.command_line import ArgumentParser, folder_out, number, path_in
from sim2real import t1
from sim2real.export import (META_JSON, ONNX_META_KEY, POLICY_ONNX, POLICY_PT, T1_YAML, check_bundle_out, is_bundle,
                             load_bundle_policy, write_bundle)


def redeployed_files(bundle: Path, gait_frequency: float) -> dict[str, bytes]:
    """The four bundle files of `bundle` deployed at `gait_frequency`; ValueError when the
    frequency lies outside the trained range or the bundle's T1.yaml is not what its recorded
    contract builds."""
    import onnx
    import torch

    policy, meta = load_bundle_policy(bundle)
    deploy = meta.get("deploy") or {}
    if "commands" not in deploy or "control" not in deploy:
        raise ValueError(f"{bundle}: not a T1 bundle (its meta.json has no deploy contract)")
    commands = {k: tuple(v) if isinstance(v, list) else v for k, v in deploy["commands"].items()}
    old_spec = t1.DeploySpec(t1.T1Control.from_dict(deploy["control"]), t1.CommandSpec(**commands))
    old_yaml = yaml.safe_load((bundle / T1_YAML).read_text())
    if old_spec.deploy_yaml() != old_yaml:
        raise ValueError(f"{bundle}: its T1.yaml is not what its meta.json's contract builds today (a bundle from "
                         "an older contract); export it again from its checkpoint instead")
    new_commands = t1.CommandSpec(**(commands | {"deploy_gait_frequency": float(gait_frequency)}))
    new_commands.check()  # inside the trained range
    new_yaml = t1.DeploySpec(old_spec.control, new_commands).deploy_yaml()
    new_meta = copy.deepcopy(meta)
    new_meta["deploy"]["commands"]["deploy_gait_frequency"] = new_commands.deploy_gait_frequency
    meta_json = json.dumps(new_meta, indent=2) + "\n"

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit: still the deploy format
        torch.jit.save(policy, buffer, _extra_files={META_JSON: meta_json})
    model = onnx.load(str(bundle / POLICY_ONNX))
    (entry,) = [e for e in model.metadata_props if e.key == ONNX_META_KEY]
    entry.value = meta_json
    onnx.checker.check_model(model)
    return {POLICY_PT: buffer.getvalue(), POLICY_ONNX: model.SerializeToString(), META_JSON: meta_json.encode(),
            T1_YAML: yaml.safe_dump(new_yaml, sort_keys=False).encode()}


def redeploy(bundle: str | Path, out: str | Path, gait_frequency: float, force: bool = False) -> Path:
    """Write `bundle` deployed at `gait_frequency` to the bundle folder `out` (atomically)."""
    bundle, out = Path(bundle).expanduser(), Path(out).expanduser().absolute()
    check_bundle_out(out, force)
    write_bundle(out, redeployed_files(bundle, gait_frequency), force)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", type=path_in, help="a T1 bundle folder")
    parser.add_argument("out", type=folder_out(replaces=is_bundle), help="the new bundle folder")
    parser.add_argument("--gait-frequency", type=number(0, 100), required=True, metavar="HZ",
                        help="the gait frequency T1.yaml runs, inside the bundle's trained range")
    parser.add_argument("--force", action="store_true", help="replace a bundle folder at out")
    args = parser.parse_args(argv)
    try:
        out = redeploy(args.bundle, args.out, args.gait_frequency, args.force)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"sim2real.redeploy: error: {error}", file=sys.stderr)
        return 2
    print(f"{args.bundle} deployed at {args.gait_frequency:g} Hz: {out}; gate it: fast-td3-sim2sim bundle={out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
