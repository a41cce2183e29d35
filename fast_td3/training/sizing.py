"""The machine's sizing (`conf/sizing/`) a run gets when its command line names none: `gpu`
where it will train on a CUDA (or ROCm) GPU, else `cpu`. So `fast-td3-train recipe=t1` trains
the same recipe at a laptop's sizes or a GPU's without the user choosing.

Decided before torch is imported (the command line's checks answer in one line first): from the
device the command names and, for `device=auto`, whether a GPU's device files and a GPU build of
torch are both here. A wrong guess (a GPU torch cannot use) is told when the run starts, where
the device is resolved (`compose`)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from fast_td3.training.run_folder import no_resume

GPU_DEVICE_FILES = ("/dev/nvidia0", "/dev/kfd")
"""An NVIDIA GPU's first device file; ROCm's kernel driver (torch.cuda runs on both)."""


def torch_gpu_build() -> str | None:
    """The GPU runtime torch was built for ("12.8", a ROCm version), None for a CPU build; read
    from torch/version.py without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    try:
        tree = ast.parse((Path(spec.origin).parent / "version.py").read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip") and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                return node.value.value
    return None


def gpu_present() -> bool:
    return any(Path(path).exists() for path in GPU_DEVICE_FILES)


def detected_sizing(device: str = "auto") -> str:
    """`gpu` for a CUDA device named or, with `auto`, found (device files and a GPU build of
    torch); `cpu` otherwise (cpu, mps, or no GPU)."""
    if device.startswith("cuda"):
        return "gpu"
    if device != "auto":
        return "cpu"
    return "gpu" if gpu_present() and torch_gpu_build() is not None else "cpu"


def with_detected_sizing(overrides: list[str]) -> list[str]:
    """The command line's arguments plus `sizing=<detected>` when they name no sizing. Not for a resume, which
    keeps the sizes its run was made with."""
    named = dict(arg.lstrip("+").split("=", 1) for arg in overrides if "=" in arg and not arg.startswith("-"))
    if "sizing" in named or not no_resume(named.get("resume")):
        return overrides
    # beside the other overrides: Hydra's parser takes one run of them (`--cfg job a=1 b=2`)
    at = next((i for i, arg in enumerate(overrides) if "=" in arg and not arg.startswith("-")), len(overrides))
    return [*overrides[:at], f"sizing={detected_sizing(named.get('device', 'auto'))}", *overrides[at:]]
