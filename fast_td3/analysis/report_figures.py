"""The figures of `fast-td3-report`: learning curves, the deploy gate while training, and per
run its eval action histograms and critic-calibration scatter, each saved as a PNG.

Apart from the page (report.py) so the drawing, and its matplotlib dependency, stays out of the
HTML assembly; matplotlib is imported only when a figure is drawn, so `--help` stays quick.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from fast_td3.measures.diagnostics import action_histograms, critic_calibration
from fast_td3.analysis.report_runs import RETURN_KEY, ReportError, RunSummary


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ReportError("fast-td3-report draws its figures with matplotlib: pip install matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_learning_curves(runs: list[RunSummary], path: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for run in runs:
        evals = [(r["step"], r[RETURN_KEY]) for r in run.records if r.get(RETURN_KEY) is not None]
        trains = [(r["step"], r["train/episode_return"]) for r in run.records
                  if r.get("train/episode_return") is not None]
        for ax, points in zip(axes, (evals, trains)):
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=run.name)
    _finish(plt, fig, axes, ("eval return (deterministic, task reward)", "training episode return"), path)


def _finish(plt, fig, axes, titles, path: Path, fontsize: float | None = None) -> None:
    """Titles, step axes, grid and the legend of a row of panels; the figure saved and closed."""
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=fontsize)
        ax.set_xlabel("global step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


GATE_PLOTS = (("gate/robust_pass_rate", "gate: robust pass rate"), ("gate/passed", "gate: passed (1) or not (0)"),
              ("gate/turn/yaw_rate_error", "gate: turn yaw-rate error [rad/s]"),
              ("gate/forward/lin_vel_error", "gate: forward planar-velocity error [m/s]"),
              ("gate/sideways/coverage", "gate: sideways walk, share covered"))
"""The deploy gate's verdicts while training (`gate.interval`), one panel each."""


def gate_points(run: RunSummary, key: str) -> list[tuple[int, float]]:
    return sorted((r["step"], r[key]) for r in run.records if isinstance(r.get(key), (int, float)))


def plot_gate(runs: list[RunSummary], path: Path) -> bool:
    """The gate's metrics against global step; False (nothing drawn) when no run was gated."""
    if not any(gate_points(run, GATE_PLOTS[0][0]) for run in runs):
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(GATE_PLOTS), figsize=(4.2 * len(GATE_PLOTS), 3.6))
    for run in runs:
        for ax, (key, _) in zip(axes, GATE_PLOTS):
            points = gate_points(run, key)
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", markersize=3, label=run.name)
    _finish(plt, fig, axes, [title for _, title in GATE_PLOTS], path, fontsize=9)
    return True


def plot_action_histograms(diag: dict[str, Any], path: Path, bins: int) -> None:
    plt = _pyplot()
    counts, edges = action_histograms(diag["actions"], bins)
    joints = counts.shape[0]
    cols = min(joints, 6)
    rows = max(1, math.ceil(joints / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(max(2.0 * cols, 4.5), 1.5 * rows + 0.4), squeeze=False)
    centres, width = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    for j, ax in enumerate(axes.flat):
        if j >= joints:
            ax.axis("off")
            continue
        ax.bar(centres, counts[j], width=width, color="#4c72b0")
        ax.set_title(f"action {j}", fontsize=7)
        ax.set_xlim(edges[0], edges[-1])
        ax.tick_params(labelsize=6)
    fig.suptitle(f"eval actions at step {diag['global_step']} ({len(diag['actions'])} steps)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_calibration(diag: dict[str, Any], path: Path) -> dict[str, float]:
    plt = _pyplot()
    q, g = np.asarray(diag["q_pred"], float), np.asarray(diag["mc_return"], float)
    stats = critic_calibration(q, g)
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    ax.scatter(g, q, s=4, alpha=0.4, c=diag["episode"], cmap="viridis")
    if q.size:
        lo, hi = float(min(q.min(), g.min())), float(max(q.max(), g.max()))
        ax.plot([lo, hi], [lo, hi], color="k", lw=1, label="q = return")
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xlabel("discounted return (Monte Carlo)")
    ax.set_ylabel(f"predicted Q ({diag.get('q_reduction', 'min')} of twins)")
    ax.set_title(f"step {diag['global_step']}: residual {stats['mean_residual']:.3g}, "
                 f"slope {stats['slope']:.3g}, r {stats['correlation']:.3g}", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return stats

