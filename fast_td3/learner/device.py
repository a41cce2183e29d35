"""Where tensors live: one rule for every component (torch is imported on first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class DeviceError(ValueError):
    """A device this machine cannot give; the message lists the ones it has."""


def available_devices() -> list[str]:
    """The device names this machine can run on, e.g. ['cpu', 'cuda', 'cuda:0', 'cuda:1']."""
    import torch

    names = ["cpu"]
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        names.append("mps")
    return names


def resolve_device(spec: torch.device | str | None = "auto") -> torch.device:
    """`"auto"` (or None) means the first CUDA GPU when one is present, else the CPU;
    anything else is passed to `torch.device`. A name torch does not know, or a device this
    machine lacks, raises DeviceError naming the devices that are here."""
    import torch

    if spec is None or spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    here = f"available here: auto, {', '.join(available_devices())}"
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError, TypeError):
        raise DeviceError(f"device={spec!r} is not a device name ({here})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device={spec!r} was requested but this machine has no CUDA GPU ({here})")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"device={spec!r}: there is no GPU {device.index} ({here})")
    elif device.type == "mps" and "mps" not in available_devices():
        raise DeviceError(f"device={spec!r}: MPS is not available ({here})")
    elif device.type not in ("cpu", "cuda", "mps", "meta"):  # meta: sizes without memory (replay estimates)
        raise DeviceError(f"device={spec!r}: fast-td3 runs on cpu, cuda or mps ({here})")
    return device
