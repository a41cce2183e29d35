"""`fast-td3-export`'s command line: its `key=value` options (or the other tools' spelling), each read
by its kind and checked before the checkpoint loads, then `export_bundle`.

    fast-td3-export checkpoint=runs/T1JoystickFlatTerrain/<run> out=bundles/t1              # its best checkpoint
    fast-td3-export checkpoint=runs/T1JoystickFlatTerrain/<run> out=bundles/t1 use=latest   # its newest one
    fast-td3-export checkpoint=runs/.../checkpoints/step_000100000.pt out=bundles/t1 force=true
"""

from __future__ import annotations

import json
import sys

from fast_td3.command_line import as_key_values, folder_out, number, read_value, whole
from sim2real.export import META_JSON, export_bundle, is_bundle


USAGE = """usage: fast-td3-export checkpoint=<run folder or checkpoint file> out=<bundle folder> [use=best|latest]
                       [device=cpu] [force=false] [gait_frequency=HZ] [average=K]

Export a checkpoint's policy as a deployment bundle (policy.pt, policy.onnx, meta.json, and
T1.yaml for T1 tasks).

  checkpoint  a run folder or a checkpoint file
  out         the bundle folder to create (a non-empty one is refused; force=true replaces a bundle)
  use         from a run folder: best (checkpoints/best.pt: the best evaluation, or with best_by=gate the checkpoint that passed the gate best) or latest
              (the newest step_<N>.pt); default: best when the run has one, else latest
  device      where the checkpoint is loaded and checked (default cpu); the bundle is always CPU float32
  force       true: replace a bundle folder this command wrote before (any other folder is refused)
  gait_frequency  T1: the gait frequency T1.yaml deploys [Hz], inside the trained range (default: the
              run's commands.deploy_gait_frequency)
  average     K > 1: deploy the mean actor of the checkpoint (a step_<N>.pt) and the K - 1 checkpoints
              before it in its folder, each read through the newest one's normaliser (default 1: itself)

The other tools' spelling is read too: `fast-td3-export <run> <bundle> --use latest --force`.
"""
_KEYS = ("checkpoint", "out", "use", "device", "force", "gait_frequency", "average")
NUMBER_KINDS = {"gait_frequency": number(0, 100), "average": whole(1)}
OUT = folder_out(replaces=lambda folder: is_bundle(folder), make_parents=True)
"""`out=`: a new folder (the folders above it made as needed), or a bundle this command wrote
(replaced with force=true)."""
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _fail(message: str) -> None:
    print(f"fast-td3-export: error: {message}", file=sys.stderr)
    sys.exit(2)


def _parse(argv: list[str]) -> dict[str, str]:
    argv = as_key_values(argv, switches=("force",), positionals=("checkpoint", "out"))
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE, end="")
        sys.exit(0)
    args: dict[str, str] = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key not in _KEYS:
            _fail(f"{arg!r}: give key=value with key one of {', '.join(_KEYS)} (fast-td3-export --help shows the usage)")
        args[key] = value
    for key in ("checkpoint", "out"):
        if not args.get(key):
            _fail(f"missing {key}=... (usage: fast-td3-export <run or checkpoint> <bundle folder> [key=value ...]; "
                  "--help lists the keys)")
    if args.get("use", "best") not in ("best", "latest"):
        _fail(f"use must be best or latest, got {args['use']!r}")
    if args.get("force", "false").lower() not in _TRUE + _FALSE:
        _fail(f"force must be true or false, got {args['force']!r}")
    try:
        for key, kind in NUMBER_KINDS.items():
            if key in args:
                args[key] = read_value(key, args[key], kind)
        read_value("out", args["out"], OUT)
    except ValueError as error:
        _fail(str(error))
    return args


def cli(argv: list[str] | None = None) -> None:
    args = _parse(sys.argv[1:] if argv is None else list(argv))
    try:
        bundle = export_bundle(args["checkpoint"], args["out"], args.get("device", "cpu"),
                               args.get("force", "false").lower() in _TRUE, args.get("use"),
                               say=lambda line: print(f"fast-td3-export: {line}", file=sys.stderr),
                               gait_frequency=args.get("gait_frequency"), average=args.get("average", 1))
    except (FileNotFoundError, FileExistsError, ImportError, ValueError) as error:
        _fail(str(error))
    meta = json.loads((bundle / META_JSON).read_text())
    averaged = f", the mean actor of steps {meta['averaged_steps']}" if "averaged_steps" in meta else ""
    print(f"exported {meta['task']} (step {meta['checkpoint_step']}{averaged}, {meta['num_obs']} obs -> "
          f"{meta['num_actions']} actions) to {bundle}")
    for path in sorted(bundle.iterdir()):
        print(f"  {path.name:<12} {path.stat().st_size:>10,d} bytes")
    print(json.dumps({"bundle": str(bundle), "task": meta["task"], "step": meta["checkpoint_step"],
                      "files": sorted(p.name for p in bundle.iterdir())}), flush=True)


if __name__ == "__main__":
    cli()
