"""Critic and policy diagnostics of evaluation trajectories (pure functions).

- `discounted_returns`: Monte-Carlo returns of `[T, E]` trajectories, reset at episode ends.
- `critic_calibration`: how the critic's predictions compare with those returns.
- `action_histograms`: per-joint histograms of the eval policy's actions.

The runner saves, at each evaluation, `diagnostics/eval_step_<global step, 9 digits>.npz`
in the run folder (`save_eval_diagnostics`); `fast-td3-report` reads them back.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

DIAGNOSTICS_DIR = "diagnostics"


def _numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().float().cpu().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
    return np.asarray(x)


def discounted_returns(rewards: torch.Tensor, dones: torch.Tensor, gamma: float,
                       bootstrap: torch.Tensor | None = None) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t+1}, restarted after every step with `dones[t]`.

    Where the trajectory is cut, at a step with `dones[t]` or at the last step T-1,
    G_{t+1} is `bootstrap[t]` (`[T, E]`, the value of the state after step t; pass 0 at
    terminations) or 0 without `bootstrap`. Returns `[T, E]` float32 on the rewards' device.
    """
    rewards = rewards.float()
    dones = dones.bool()
    if rewards.shape != dones.shape or rewards.dim() != 2:
        raise ValueError(f"rewards and dones must both be [T, E], got {tuple(rewards.shape)} and {tuple(dones.shape)}")
    if bootstrap is not None:
        bootstrap = bootstrap.float().to(rewards.device).expand_as(rewards)
    returns = torch.empty_like(rewards)
    future = torch.zeros_like(rewards[0])  # G_{t+1}
    for t in range(rewards.shape[0] - 1, -1, -1):
        cut = dones[t] if t < rewards.shape[0] - 1 else torch.ones_like(dones[t])
        tail = bootstrap[t] if bootstrap is not None else torch.zeros_like(future)
        future = rewards[t] + gamma * torch.where(cut, tail, future)
        returns[t] = future
    return returns


def critic_calibration(predicted_q: Any, mc_return: Any) -> dict[str, float]:
    """Predicted values against Monte-Carlo returns, over N samples:

    - mean_residual: mean(q - G) (> 0: the critic overestimates),
    - rmse: sqrt(mean((q - G)^2)),
    - correlation: Pearson correlation of q and G (NaN when either is constant),
    - slope: least-squares slope of q on G (1: well scaled; NaN when G is constant).
    """
    q = _numpy(predicted_q).astype(np.float64).reshape(-1)
    g = _numpy(mc_return).astype(np.float64).reshape(-1)
    if q.shape != g.shape:
        raise ValueError(f"predicted_q and mc_return differ in size: {q.size} and {g.size}")
    if q.size == 0:
        return {"mean_residual": math.nan, "rmse": math.nan, "correlation": math.nan, "slope": math.nan}
    residual = q - g
    dq, dg = q - q.mean(), g - g.mean()
    var_q, var_g = float((dq * dq).mean()), float((dg * dg).mean())
    cov = float((dq * dg).mean())
    return {
        "mean_residual": float(residual.mean()),
        "rmse": float(np.sqrt((residual * residual).mean())),
        "correlation": cov / math.sqrt(var_q * var_g) if var_q > 0 and var_g > 0 else math.nan,
        "slope": cov / var_g if var_g > 0 else math.nan,
    }


def action_histograms(actions: Any, bins: int | Any = 21,
                      value_range: tuple[float, float] = (-1.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
    """Per-joint histograms of `actions` `[N, A]`: `(counts [A, bins], edges [bins + 1])`.

    `bins` is a count of equal bins over `value_range` (actions live in [-1, 1]) or the
    edges themselves. Values outside the edges fall into the first or last bin.
    """
    a = _numpy(actions).astype(np.float64)
    if a.ndim != 2:
        raise ValueError(f"actions must be [N, A], got shape {a.shape}")
    edges = (np.linspace(value_range[0], value_range[1], int(bins) + 1) if np.ndim(bins) == 0
             else np.asarray(bins, dtype=np.float64))
    a = np.clip(a, edges[0], edges[-1])
    counts = np.stack([np.histogram(a[:, j], bins=edges)[0] for j in range(a.shape[1])]) if a.shape[1] else \
        np.zeros((0, len(edges) - 1), dtype=np.int64)
    return counts.astype(np.int64), edges


def diagnostics_path(run_dir: str | Path, global_step: int) -> Path:
    return Path(run_dir) / DIAGNOSTICS_DIR / f"eval_step_{global_step:09d}.npz"


def save_eval_diagnostics(path: Path, *, actions: Any, q_pred: Any, mc_return: Any, episode: Any, t: Any,
                          rewards: Any, global_step: int, gamma: float, q_reduction: str,
                          reward_scaled: bool) -> None:
    """One evaluation's per-step samples (N valid steps of all eval episodes), compressed:
    actions [N, A] float16, q_pred/mc_return/rewards [N] float32, episode/t [N] int32, and
    scalars global_step, gamma, q_reduction ('min' or 'mean' of the twin heads),
    reward_scaled (the critic learnt a reward with env.reward_scales; the returns use the
    task's own eval reward). Written to a temp file and renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.stem + ".tmp.npz")  # hidden from the report's eval_step_*.npz
    np.savez_compressed(
        tmp,
        actions=_numpy(actions).astype(np.float16),
        q_pred=_numpy(q_pred).astype(np.float32),
        mc_return=_numpy(mc_return).astype(np.float32),
        rewards=_numpy(rewards).astype(np.float32),
        episode=_numpy(episode).astype(np.int32),
        t=_numpy(t).astype(np.int32),
        global_step=np.int64(global_step),
        gamma=np.float64(gamma),
        q_reduction=np.str_(q_reduction),
        reward_scaled=np.bool_(reward_scaled),
    )
    tmp.replace(path)


def load_eval_diagnostics(path: str | Path) -> dict[str, Any]:
    """An eval_step_*.npz as a dict of arrays (scalars as Python values)."""
    with np.load(path, allow_pickle=False) as data:
        return {k: (data[k].item() if data[k].ndim == 0 else data[k]) for k in data.files}
