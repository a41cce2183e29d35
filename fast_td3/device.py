"""Where tensors live: one rule for every component."""

from __future__ import annotations

import torch


def resolve_device(spec: torch.device | str | None = "auto") -> torch.device:
    """`"auto"` (or None) means the first CUDA GPU when one is present, else the CPU;
    anything else is passed to `torch.device`, with a clear error for a missing GPU."""
    if spec is None or spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {spec!r} was requested but no CUDA GPU is available; use device=cpu or auto")
    return device
