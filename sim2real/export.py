"""A checkpoint's policy as a self-contained deployment bundle (`fast-td3-export`, `sim2real/export_cli.py`).

The bundle folder holds:
  policy.pt    TorchScript `DeployPolicy`: float32 `[B, num_obs] -> [B, num_actions]`, the
               observation normaliser baked in, deterministic actor, actions clamped to [-1, 1];
               `meta.json` embedded as an extra file. Loads with `torch.jit.load` alone.
  policy.onnx  the same function (input `obs`, output `actions`, dynamic batch axis, opset 17,
               one file); `meta.json` embedded in `metadata_props` under `fast_td3_meta`.
  meta.json    task, source checkpoint and step, sizes, normaliser statistics, ranges, and a
               `deploy` section from `t1_bundle_extras` for T1 tasks.
  T1.yaml      T1 tasks only: the deploy configuration (`t1_bundle_extras`).

The bundle is written into a temporary sibling folder and renamed into place, so a killed
export never leaves half a bundle. The last line printed is one JSON object with its path.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import warnings
from pathlib import Path

import torch
from torch import nn

from envs.protocol import EnvSpec
from fast_td3 import __version__
from fast_td3.analysis.evaluate_checkpoint import load_checkpoint, load_policy
from fast_td3.files import atomic_write_bytes, fsync_dir
from fast_td3.learner.device import resolve_device
from fast_td3.learner.normalization import EmpiricalNormalization
from fast_td3.training.policy_average import averaged_checkpoint

BUNDLE_FORMAT = "fast-td3-policy-bundle/1"
ONNX_META_KEY = "fast_td3_meta"
ONNX_OPSET = 17
POLICY_PT, POLICY_ONNX, META_JSON, T1_YAML = "policy.pt", "policy.onnx", "meta.json", "T1.yaml"
NORMALIZATION_FORMULA = "(obs - mean) / (std + eps)"


T1_TASK_PREFIX = "T1LowDimJoystick"
"""The tasks whose checkpoints export to a T1 deploy bundle (`t1_bundle_extras`)."""


class DeployPolicy(nn.Module):
    """Raw observations to actions, as the algorithm's `act` computes them (in float32).

    The normaliser's statistics are constant buffers: `(obs - mean) / (std + eps)`, the same
    arithmetic as `EmpiricalNormalization.forward` (no clipping: the trainer clips nothing).
    A run without observation normalisation exports mean 0, std 1, eps 0. The actor is a copy
    of the checkpoint's actor, whose `forward` is its deterministic action (FastTD3: the tanh
    policy; FastSAC: tanh of the Gaussian's mean); its tanh already bounds the actions, the
    final clamp states the contract for consumers.
    """

    def __init__(self, actor: nn.Module, mean: torch.Tensor, std: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.actor = copy.deepcopy(actor).float().eval().requires_grad_(False)
        self.register_buffer("obs_mean", mean.detach().clone().float())
        self.register_buffer("obs_std", std.detach().clone().float())
        self.eps = float(eps)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs.to(self.obs_mean.dtype)
        normalized = (obs - self.obs_mean) / (self.obs_std + self.eps)
        return self.actor(normalized).clamp(-1.0, 1.0)


# --------------------------------------------------------------------------- building
def _check_sizes(checkpoint: dict, task: str) -> EnvSpec:
    """The shape of the envs the checkpoint was trained on, after checking that its actor,
    normaliser and env record agree on the observation size."""
    modules = checkpoint["agent"]["modules"]
    first_actor_weight = next(
        (v for k, v in modules.items() if k.startswith("actor.") and k.endswith("weight") and v.dim() == 2), None
    )
    if first_actor_weight is None:
        raise ValueError(f"{task}: the checkpoint holds no actor weights")
    actor_obs = int(first_actor_weight.shape[1])
    env_obs = int(checkpoint["env"]["num_obs"])
    if "obs_normalizer.mean" in modules:
        normalizer_obs = int(modules["obs_normalizer.mean"].numel())
        if normalizer_obs != actor_obs:
            raise ValueError(
                f"{task}: observation size mismatch: the checkpoint's actor takes {actor_obs} observations "
                f"but its observation normaliser holds statistics for {normalizer_obs}"
            )
    if env_obs != actor_obs:
        raise ValueError(
            f"{task}: observation size mismatch: the checkpoint's actor takes {actor_obs} observations "
            f"but it was trained on envs with {env_obs}"
        )
    env = checkpoint["env"]
    return EnvSpec(num_envs=int(env.get("num_envs", 1)), num_obs=actor_obs, num_critic_obs=env.get("num_critic_obs"),
                   num_actions=int(env["num_actions"]))


def _normalizer_stats(agent) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(mean, std, eps) that reproduce `agent.obs_normalizer` on the CPU in float32."""

    normalizer = agent.obs_normalizer
    if isinstance(normalizer, EmpiricalNormalization):
        return normalizer.mean.detach().float().cpu(), normalizer.std.detach().float().cpu(), float(normalizer.eps)
    if isinstance(normalizer, nn.Identity):
        return torch.zeros(agent.spec.num_obs), torch.ones(agent.spec.num_obs), 0.0
    raise ValueError(f"cannot export an observation normaliser of type {type(normalizer).__name__}")


def t1_bundle_extras(cfg, gait_frequency: float | None = None) -> dict | None:
    """The T1 parts of an export bundle for a run's config (`TrainConfig`), or None for other tasks:
    the deployment contract of the Playground config the run trained with. `gait_frequency`
    replaces the run's `commands.deploy_gait_frequency` (training never reads it: any frequency
    inside the trained `commands.gait_frequency` range is a deploy-time choice)."""
    if not cfg.env.task.startswith(T1_TASK_PREFIX):
        if gait_frequency is not None:
            raise ValueError(f"gait_frequency is a T1 deploy setting; {cfg.env.task} has none")
        return None
    from envs.playground.t1_lowdim import deploy_spec

    overrides = copy.deepcopy(dict(cfg.env.options.get("config_overrides") or {}))
    if gait_frequency is not None:
        overrides["commands"] = {**dict(overrides.get("commands") or {}), "deploy_gait_frequency": float(gait_frequency)}
    spec = deploy_spec(overrides)
    return {"meta": spec.meta() | {"source_task": cfg.env.task}, "deploy_yaml": spec.deploy_yaml()}


def _build_meta(checkpoint_path: Path, checkpoint: dict, cfg, spec: EnvSpec,
                mean: torch.Tensor, std: torch.Tensor, eps: float, extras: dict | None) -> dict:

    meta = {
        "format": BUNDLE_FORMAT,
        "task": cfg.env.task,
        "suite": cfg.env.suite,
        "checkpoint": str(Path(checkpoint_path).resolve()),
        "checkpoint_step": int(checkpoint["global_step"]),
        "num_obs": spec.num_obs,
        "num_actions": spec.num_actions,
        "normalizer": {
            "mean": mean.tolist(),
            "std": std.tolist(),
            "eps": eps,
            "formula": NORMALIZATION_FORMULA,
            "clip": None,
            "baked_into_policy": True,
        },
        "observation": {
            "dtype": "float32",
            "shape": [None, spec.num_obs],
            "low": None,  # unbounded: raw observations, normalised inside the policy
            "high": None,
        },
        "action": {
            "dtype": "float32",
            "shape": [None, spec.num_actions],
            "low": -1.0,
            "high": 1.0,
            "note": "normalised actions; the env adapter rescales them to the simulator's bounds",
        },
        "policy": {
            "input": "obs",
            "output": "actions",
            "algorithm": cfg.algo.name,
            "actor_hidden_dims": list(cfg.algo.actor_hidden_dims),
            "trained_precision": cfg.resolved.get("precision", cfg.algo.precision),
            "exported_precision": "fp32",
        },
        "exporter": {"fast_td3": __version__, "torch": torch.__version__},
    }
    if "averaged_steps" in checkpoint:
        meta["averaged_steps"] = checkpoint["averaged_steps"]
    if extras is not None:
        meta["deploy"] = extras["meta"]
    return meta


def _onnx_bytes(policy: DeployPolicy, num_obs: int, meta_json: str) -> bytes:
    import io

    import onnx

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript-based exporter
        torch.onnx.export(
            policy, (torch.zeros(1, num_obs),), buffer,
            input_names=["obs"], output_names=["actions"],
            dynamic_axes={"obs": {0: "batch"}, "actions": {0: "batch"}},
            opset_version=ONNX_OPSET, dynamo=False,  # dynamo=True needs onnxscript
        )
    model = onnx.load_from_string(buffer.getvalue())
    entry = model.metadata_props.add()
    entry.key, entry.value = ONNX_META_KEY, meta_json
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _torchscript_bytes(policy: DeployPolicy, meta_json: str) -> bytes:
    import io

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated, still the deploy format
        scripted = torch.jit.script(policy)
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer, _extra_files={META_JSON: meta_json})
    return buffer.getvalue()


def _self_check(policy: DeployPolicy, agent, device: torch.device, onnx_bytes: bytes, pt_bytes: bytes) -> None:
    """The saved TorchScript and ONNX files and the eager agent agree on random observations."""
    import io

    import onnxruntime

    obs = torch.randn(16, agent.spec.num_obs, generator=torch.Generator().manual_seed(0)) * 3.0
    with torch.no_grad():
        eager = agent.actor(agent.obs_normalizer(obs.to(device))).float().cpu()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            scripted = torch.jit.load(io.BytesIO(pt_bytes), map_location="cpu")(obs)
    session = onnxruntime.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    onnx_actions = torch.from_numpy(session.run(["actions"], {"obs": obs.numpy()})[0])
    tolerance = 1e-5 if device.type == "cpu" else 1e-3  # other devices: other matmul kernels
    for name, actions in (("TorchScript", scripted), ("ONNX", onnx_actions)):
        error = (actions - eager).abs().max().item()
        if not error <= tolerance:
            raise RuntimeError(f"exported {name} policy differs from the checkpoint's actor by {error:.3g}")


# --------------------------------------------------------------------------- writing
def write_bundle(out: Path, files: dict[str, bytes], force: bool) -> None:
    """Write `files` into a temporary sibling of `out`, then rename it into place (export and
    `sim2real.redeploy` write bundles only this way: a reader never sees half a bundle)."""

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    old = out.with_name(f".{out.name}.old{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    set_aside = False  # the previous bundle, moved to `old` until the new one is in place
    try:
        tmp.mkdir()
        for name, data in files.items():
            atomic_write_bytes(tmp / name, lambda f, data=data: f.write(data))
        if out.is_dir() and any(out.iterdir()):
            check_bundle_out(out, force)  # checked before anything was built; someone may have written there since
            out.rename(old)
            set_aside = True
        try:
            os.replace(tmp, out)  # an empty `out` folder is replaced, a missing one created
        except BaseException:
            if set_aside and not out.exists():
                old.rename(out)
                set_aside = False
            raise
        fsync_dir(out.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if set_aside:
            shutil.rmtree(old, ignore_errors=True)


BUNDLE_FILES = (POLICY_PT, POLICY_ONNX, META_JSON, T1_YAML)


def is_bundle(folder: Path) -> bool:
    """Whether `folder` is a bundle this exporter wrote: a real folder holding only bundle files,
    with policy.pt and a meta.json of the bundle format (what `force=true` may replace)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    names = {p.name for p in folder.iterdir()}
    if not names <= set(BUNDLE_FILES) or not {POLICY_PT, META_JSON} <= names:
        return False
    if any((folder / name).is_symlink() or not (folder / name).is_file() for name in names):
        return False
    try:
        return json.loads((folder / META_JSON).read_text()).get("format") == BUNDLE_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def check_bundle_out(out: Path, force: bool) -> None:
    """FileExistsError unless `out` is free: missing, an empty folder, or (force) a bundle of ours."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder; choose another out=")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not is_bundle(out):
        names = sorted(p.name for p in out.iterdir())
        listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise FileExistsError(f"{out} is not empty and not a bundle written by fast-td3-export (it holds {listed}); "
                              "force=true replaces only a bundle, so nothing was touched: choose another out=")
    if not force:
        raise FileExistsError(f"{out} is not empty: it holds a bundle, which force=true replaces; or choose another out=")


def export_bundle(checkpoint: str | Path, out: str | Path, device: str = "cpu", force: bool = False,
                  use: str | None = None, say=None, gait_frequency: float | None = None, average: int = 1) -> Path:
    """Export a checkpoint file, or a run folder's best or latest checkpoint (`use`; None: best.pt
    when the run has one), into the bundle `out`; `say` gets a line naming the checkpoint;
    `gait_frequency` (T1) the deploy gait frequency instead of the run's; `average` > 1 the
    mean actor of the checkpoint and the `average - 1` before it (`fast_td3.training.policy_average`).

    Returns the bundle folder. Raises `ValueError` when the checkpoint's observation sizes
    disagree (actor, normaliser, envs, and for T1 the deploy observation layout),
    `FileExistsError` when `out` is a non-empty folder and `force` is false.
    """
    import yaml


    out = Path(out).expanduser().absolute()
    check_bundle_out(out, force)
    torch_device = resolve_device(device)  # a wrong device is reported before anything is read
    checkpoint_path, checkpoint, cfg = load_checkpoint(checkpoint, use, say, latest_option="use=latest")
    task = cfg.env.task
    if average != 1:
        checkpoint = averaged_checkpoint(checkpoint_path, checkpoint, average, cfg.algo.normalizer_eps)
    spec = _check_sizes(checkpoint, task)
    extras = t1_bundle_extras(cfg, gait_frequency)
    if extras is not None:
        deploy_obs = extras["meta"].get("observation", {}).get("size")
        if deploy_obs is not None and int(deploy_obs) != spec.num_obs:
            raise ValueError(
                f"{task}: observation size mismatch: the deploy observation layout has {deploy_obs} "
                f"entries but the checkpoint's actor takes {spec.num_obs}"
            )
        deploy_actions = extras["meta"].get("action", {}).get("size")
        if deploy_actions is not None and int(deploy_actions) != spec.num_actions:
            raise ValueError(
                f"{task}: action size mismatch: the deploy configuration drives {deploy_actions} "
                f"joints but the checkpoint's actor outputs {spec.num_actions} actions"
            )

    agent = load_policy(checkpoint, cfg, torch_device)
    mean, std, eps = _normalizer_stats(agent)
    policy = DeployPolicy(agent.actor, mean, std, eps).cpu().eval()
    meta = _build_meta(checkpoint_path, checkpoint, cfg, spec, mean, std, eps, extras)
    meta_json = json.dumps(meta, indent=2) + "\n"

    files = {
        POLICY_PT: _torchscript_bytes(policy, meta_json),
        POLICY_ONNX: _onnx_bytes(policy, spec.num_obs, meta_json),
        META_JSON: meta_json.encode(),
    }
    if extras is not None:
        files[T1_YAML] = yaml.safe_dump(extras["deploy_yaml"], sort_keys=False).encode()
    _self_check(policy, agent, torch_device, files[POLICY_ONNX], files[POLICY_PT])
    write_bundle(out, files, force)
    return out


def load_bundle_policy(bundle_dir: str | Path) -> tuple[torch.jit.ScriptModule, dict]:
    """(the bundle's TorchScript policy on the CPU, its embedded metadata)."""
    extra_files = {META_JSON: ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = torch.jit.load(str(Path(bundle_dir) / POLICY_PT), map_location="cpu", _extra_files=extra_files)
    return policy.eval(), json.loads(extra_files[META_JSON])
