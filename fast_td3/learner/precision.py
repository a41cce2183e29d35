"""Which arithmetic the networks run in: `algo.precision` auto, bf16 or fp32.

bf16 autocast halves memory traffic and doubles matmul throughput where the
hardware has native bf16 (CUDA compute capability 8.0+, Intel AMX or
AVX512_BF16); elsewhere bf16 is emulated and the update runs many times slower
(measurements: docs/performance.md). `auto` therefore asks the hardware:
on CUDA its compute capability, on a CPU its bf16 instruction flags and, where
they exist, a sub-second matmul race at the update's shape, cached per machine.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch

from fast_td3.learner.config import PRECISIONS

NATIVE_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of CPUs whose matrix units compute bf16 natively."""
PROBE_SHAPE = (2048, 512, 512)
"""(rows, inner, columns) of the probe matmul: the sizing=cpu update's batch and widths."""
CACHE_ENV = "FAST_TD3_CACHE"


@dataclass(frozen=True)
class Precision:
    """The arithmetic chosen for a run and, in words, why."""

    name: str
    reason: str

    @property
    def bf16(self) -> bool:
        return self.name == "bf16"

    def __str__(self) -> str:
        return f"{self.name} ({self.reason})"


def cpu_flags() -> frozenset[str]:
    """The CPU's instruction flags from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_model() -> str:
    """The CPU's model name, for reports and the probe cache key."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def native_bf16_flags(flags: Iterable[str]) -> list[str]:
    """The native-bf16 flags among `flags`."""
    present = set(flags)
    return [flag for flag in NATIVE_BF16_CPU_FLAGS if flag in present]


def _time_matmul(dtype: torch.dtype, shape: tuple[int, int, int], repeats: int) -> float:
    rows, inner, cols = shape
    a = torch.randn(rows, inner).to(dtype)
    b = torch.randn(inner, cols).to(dtype)
    torch.mm(a, b)  # warm-up: first-call dispatch and kernel selection
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return best


def measure_bf16_speedup(shape: tuple[int, int, int] = PROBE_SHAPE, repeats: int = 5) -> float:
    """fp32 matmul time over bf16 matmul time on this CPU (> 1: bf16 is faster). Best of
    `repeats` each, well under a second in all at the default shape."""
    return _time_matmul(torch.float32, shape, repeats) / _time_matmul(torch.bfloat16, shape, repeats)


def _cache_file() -> Path:
    root = Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "fast-td3"))
    return root / "precision_probe.json"


def _probe_key() -> str:
    return f"{cpu_model()}|torch {torch.__version__}|threads {torch.get_num_threads()}"


@functools.lru_cache(maxsize=None)
def cached_bf16_speedup() -> float:
    """`measure_bf16_speedup()`, remembered per machine (CPU model, torch version, threads)
    in ~/.cache/fast-td3/precision_probe.json ($FAST_TD3_CACHE) so runs after the first skip it."""
    path, key = _cache_file(), _probe_key()
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    if isinstance(table.get(key), (int, float)):
        return float(table[key])
    speedup = measure_bf16_speedup()
    table[key] = speedup
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home only costs the probe again next time
    return speedup


def resolve_precision(
    requested: str,
    device: torch.device | str,
    *,
    flags: Iterable[str] | None = None,
    bf16_speedup: Callable[[], float] = cached_bf16_speedup,
    cuda_capability: Callable[[torch.device], tuple[int, int]] | None = None,
) -> Precision:
    """What `requested` (auto, bf16 or fp32) means on `device`.

    `flags`, `bf16_speedup` and `cuda_capability` are the hardware questions; tests
    answer them for machines they are not running on. An explicit bf16 on a CPU
    without native bf16 is honoured with a warning that gives the measured slowdown.
    """
    if requested not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {requested!r}")
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = (cuda_capability or torch.cuda.get_device_capability)(device)
        native = major >= 8
        if requested == "auto":
            return (Precision("bf16", f"CUDA compute capability {major}.{minor} has native bf16") if native
                    else Precision("fp32", f"CUDA compute capability {major}.{minor} < 8.0: no native bf16"))
        return Precision(requested, "set explicitly")
    if device.type != "cpu":
        return Precision("fp32" if requested == "auto" else requested,
                         f"{device.type}: {'auto uses fp32' if requested == 'auto' else 'set explicitly'}")

    native = native_bf16_flags(cpu_flags() if flags is None else flags)
    if requested == "fp32":
        return Precision("fp32", "set explicitly")
    if not native:
        if requested == "auto":
            return Precision("fp32", "CPU without native bf16 (no AMX-bf16 or AVX512-BF16)")
        speedup = bf16_speedup()
        warnings.warn(
            f"algo.precision=bf16 on a CPU without native bf16 (no AMX-bf16 or AVX512-BF16): bf16 matmuls "
            f"measured {1 / speedup:.1f}x slower than fp32 here; algo.precision=auto picks fp32",
            RuntimeWarning, stacklevel=2,
        )
        return Precision("bf16", f"set explicitly; emulated on this CPU, {1 / speedup:.1f}x slower matmuls")
    if requested == "bf16":
        return Precision("bf16", "set explicitly")
    speedup = bf16_speedup()
    flags_text = "/".join(native)
    if speedup > 1.0:
        return Precision("bf16", f"CPU with {flags_text}: bf16 matmul {speedup:.1f}x fp32, measured")
    return Precision("fp32", f"CPU with {flags_text}, but bf16 matmul only {speedup:.2f}x fp32, measured")


def configure_matmul(precision: Precision, device: torch.device | str) -> None:
    """fp32 on CUDA uses TF32 tensor cores for matmuls (as the reference does); bf16 runs
    need nothing beyond autocast."""
    if torch.device(device).type == "cuda" and precision.name == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
