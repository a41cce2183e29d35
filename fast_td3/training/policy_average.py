"""The deployed actor as the weight average of a run's last few checkpoints.

Why: late in a T1 run the actor swings from checkpoint to checkpoint (robust pass rates of
0.8, 0.1, 0.8 two thousand steps apart), so which checkpoint ships is partly luck. The mean
of neighbouring actors (one run, a few thousand updates apart: the same basin) is a smoother
policy than any one of them (the idea of stochastic weight averaging, applied at export).

Each actor reads observations through its own running normaliser, so before averaging each
one's first layer is rewritten to read the newest checkpoint's normalised observations. The
normaliser is affine, `(x - mean) / (std + eps)`, so the rewrite is exact:
`W z_i + b = (W * s_new / s_i) z_new + W (mean_new - mean_i) / s_i + b`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from fast_td3.training import checkpoint as ckpt
from fast_td3.training.run_state import upgrade

ACTOR = "actor."
FIRST_LAYER = "actor.net.0"
NORMALIZER = "obs_normalizer"


def checkpoints_to_average(checkpoint: str | Path, count: int) -> list[Path]:
    """`checkpoint` and the `count - 1` step_<N>.pt files before it in its folder, oldest first.
    Raises ValueError when the folder holds fewer: an average of fewer actors than asked for
    would ship silently as something else."""
    checkpoint = Path(checkpoint)
    if count < 1:
        raise ValueError(f"average must be at least 1 (1: the checkpoint alone), got {count}")
    if count == 1:
        return [checkpoint]
    try:
        step = ckpt.step_of(checkpoint)
    except ValueError:
        raise ValueError(f"average={count} needs a step_<N>.pt checkpoint (its predecessors are found by step), "
                         f"got {checkpoint.name}") from None
    earlier = [p for p in ckpt.step_files(checkpoint.parent) if ckpt.step_of(p) < step]
    if len(earlier) < count - 1:
        raise ValueError(f"average={count} needs {count - 1} checkpoints before step {step} in {checkpoint.parent}; "
                         f"it holds {len(earlier)}")
    return earlier[-(count - 1):] + [checkpoint]


def actor_part(state: dict) -> dict:
    """What `average_actor` reads of an earlier checkpoint state (its step, actor and observation
    normaliser), on the CPU: a few hundred kB where the whole state holds critics and optimisers."""
    modules = state["agent"]["modules"]
    kept = {k: v.detach().cpu().clone() for k, v in modules.items() if k.startswith((ACTOR, NORMALIZER))}
    return {"global_step": int(state["global_step"]), "agent": {"modules": kept}}


def read_actor_part(path: str | Path) -> dict:
    """An `actor_part` written by `fast_td3.training.checkpoint.save_atomic` (tensors only)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def _float64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu().double()


def _normalizer(modules: dict, eps: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    if f"{NORMALIZER}.mean" not in modules:
        return None
    mean = _float64(modules[f"{NORMALIZER}.mean"])
    return mean, _float64(modules[f"{NORMALIZER}.var"]).sqrt() + eps


def average_actor(states: list[dict], eps: float) -> dict:
    """A copy of the newest checkpoint state (the last of `states`) whose actor is the mean of
    all their actors, each first rewritten to read the newest one's normalised observations.
    Only the dicts down to the modules are copied: the actor gets new tensors and every other
    tensor (critics, optimisers) is shared, so a GPU state is not doubled in memory."""
    newest = _copy_down_to_modules(states[-1])
    modules = newest["agent"]["modules"]
    target = _normalizer(modules, eps)
    keys = [k for k in modules if k.startswith(ACTOR)]
    total = {k: torch.zeros(modules[k].shape, dtype=torch.float64) for k in keys}
    for state in states:
        own = state["agent"]["modules"]
        missing = [k for k in keys if k not in own or own[k].shape != modules[k].shape]
        if missing:
            raise ValueError(f"checkpoint at step {state.get('global_step')} has another actor ({missing[0]}): "
                             "only checkpoints of one run can be averaged")
        weight, bias = _float64(own[f"{FIRST_LAYER}.weight"]), _float64(own[f"{FIRST_LAYER}.bias"])
        source = _normalizer(own, eps)
        if target is not None and source is not None:
            (mean_new, scale_new), (mean_own, scale_own) = target, source
            weight, bias = weight * (scale_new / scale_own), bias + weight @ ((mean_new - mean_own) / scale_own)
        rewritten = {f"{FIRST_LAYER}.weight": weight, f"{FIRST_LAYER}.bias": bias}
        for k in keys:
            total[k] += (rewritten[k] if k in rewritten else _float64(own[k])) / len(states)
    for k in keys:
        modules[k] = total[k].to(dtype=modules[k].dtype, device=modules[k].device)
    newest["averaged_steps"] = [int(state["global_step"]) for state in states]
    return newest


def _copy_down_to_modules(state: dict) -> dict:
    copied = dict(state)
    copied["agent"] = dict(state["agent"])
    copied["agent"]["modules"] = dict(state["agent"]["modules"])
    return copied


def averaged_checkpoint(path: str | Path, state: dict, count: int, eps: float) -> dict:
    """`state` (the checkpoint loaded from `path`) with its actor replaced by the mean of its
    own and those of the `count - 1` checkpoints before it in its folder."""
    earlier = checkpoints_to_average(path, count)[:-1]
    return average_actor([upgrade(ckpt.load(p)) for p in earlier] + [state], eps)
