"""What a finished run prints last: how it evaluated, where it is, and the commands that come next.

    Finished InvertedPendulum-v5: 4000 global steps.
      final eval  return 981.5 +- 18.5 (2 episodes) at global step 4000
      best eval   return 1000 at global step 3000, kept as runs/InvertedPendulum-v5/<run>/checkpoints/best.pt
    Run folder: runs/InvertedPendulum-v5/<run>
    Next:
      fast-td3-eval runs/InvertedPendulum-v5/<run>    evaluate the best checkpoint (--use latest: the last one)
      ...

Paths are written as the user would type them here (relative to the working folder), and the
commands quoted so that they work pasted into a shell (a path with spaces or accents included).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from envs.protocol import suite_hook
from envs.registry import load_adapter
from fast_td3.files import RUN_BUNDLE_DIR
from fast_td3.training import checkpoint as ckpt
from fast_td3.training.config import TrainConfig
from fast_td3.training.metrics_log import display_path
from fast_td3.training.run_folder import shell_arg


@dataclass
class FinishedRun:
    """The facts the summary is made of (`finished_run_summary` gathers them)."""

    run_dir: Path
    task: str
    total_steps: int
    final_eval: dict[str, float]
    """The runner's last evaluation ({} when the suite had no eval envs)."""
    tensorboard: bool
    has_viewer: bool
    """The suite opens a viewer window (fast-td3-play without --video)."""
    sweep_dir: Path | None = None
    """The sweep folder when this run is one point of a sweep (fast-td3-report compares them)."""


def best_eval(run_dir: Path) -> dict | None:
    """{"step", "return_mean", "path"} of the run's best.pt, None when it has none."""
    path = ckpt.CheckpointManager(run_dir).best()
    if path is None:
        return None
    state = ckpt.load(path, mmap=True)
    recorded = state.get("best_eval") or {}
    return {"step": int(state["global_step"]), "return_mean": recorded.get("return_mean"), "path": path}


def best_gate(run_dir: Path, best: dict | None) -> str | None:
    """The summary line of a best.pt the deploy gate chose (best_by=gate), None otherwise."""
    from fast_td3.training.gate_verdicts import GATE_DIR, read_verdict

    if best is None:
        return None
    verdict = read_verdict(Path(run_dir) / GATE_DIR / f"step_{best['step']:09d}.json", best["step"])
    if verdict is None or verdict.error is not None:
        return None
    m = verdict.metrics
    return (f"  best gate   step {best['step']}: {'PASS' if verdict.passed else 'fail'} (nominal "
            f"{'pass' if m['gate/nominal_passed'] else 'fail'}, robust pass rate {m['gate/robust_pass_rate']:.0%}), "
            f"kept as {display_path(best['path'])}")


def is_t1(task: str) -> bool:
    """T1 tasks export a deployment bundle (sim2real/)."""
    return "T1" in task


def summary(run: FinishedRun) -> str:
    run_path = display_path(run.run_dir)
    lines = [f"Finished {run.task}: {run.total_steps} global steps."]
    final = run.final_eval
    if "eval/return_mean" in final:
        episodes = int(final.get("eval/episodes", 0))
        lines.append(f"  final eval  return {final['eval/return_mean']:.4g} +- {final.get('eval/return_std', 0.0):.3g}"
                     f" ({episodes} episodes) at global step {run.total_steps}")
    else:
        lines.append("  final eval  none during training (this suite has no eval envs): run fast-td3-eval below")
    best = best_eval(run.run_dir)
    gated = best_gate(run.run_dir, best)
    if gated is not None:
        lines.append(gated)
    elif best is not None:
        score = f"return {best['return_mean']:.4g}" if best["return_mean"] is not None else "the best return"
        lines.append(f"  best eval   {score} at global step {best['step']}, "
                     f"kept as {display_path(best['path'])}")
    which = "the best checkpoint (--use latest: the last one)" if best is not None else "the latest checkpoint"
    run_arg = shlex.quote(run_path)
    commands = [
        (f"fast-td3-eval {run_arg}", f"evaluate {which}"),
        (f"fast-td3-play {run_arg}" if run.has_viewer
         else f"fast-td3-play {run_arg} --video {shlex.quote(run_path + '/play.mp4')}",
         "watch the policy" if run.has_viewer else "watch the policy (a video of env 0)"),
        (f"fast-td3-report {shlex.quote(display_path(run.sweep_dir)) if run.sweep_dir else run_arg}",
         "compare the sweep's runs in one HTML page" if run.sweep_dir else "learning curves in one HTML page"),
    ]
    shipped = run.run_dir / RUN_BUNDLE_DIR
    if is_t1(run.task) and (shipped / "training.json").is_file():  # gate.ship confirmed a checkpoint
        bundle = display_path(shipped)
        lines.append(f"  shipped     {bundle}: the confirmed checkpoint's bundle, its gate reports and curve")
        commands += [(f"fast-td3-play {shlex.quote(bundle)}", "watch the bundle walk the gate's joystick sequence"),
                     (f"fast-td3-sim2sim {shlex.quote('bundle=' + bundle)} robust=true", "its robust gate, again"),
                     (f"scp {shlex.quote(bundle + '/policy.pt')} {shlex.quote(bundle + '/T1.yaml')} <robot>:<deploy>/",
                      "deploy: Booster's deploy code reads these two (docs/sim2real.md)")]
    elif is_t1(run.task):
        commands.append((f"fast-td3-export {shlex.quote('checkpoint=' + run_path)} "
                         f"{shlex.quote('out=' + run_path + '/' + RUN_BUNDLE_DIR)}",
                         "the deployment bundle (policy.pt, policy.onnx, T1.yaml)"))
    commands.append((f"fast-td3-train {shell_arg('resume', run_path)} total_steps={2 * run.total_steps}",
                     "train further (from the latest checkpoint)"))
    if run.tensorboard:
        commands.append((f"tensorboard --logdir {run_arg}", "the curves in TensorBoard"))
    width = max(len(command) for command, _ in commands)
    lines += [f"Run folder: {run_path}", "Next:"]
    lines += [f"  {command:<{width}}  {what}" for command, what in commands]
    if not run.tensorboard:
        lines.append("TensorBoard was off for this run (logger=tensorboard turns it on); "
                     f"{run_path}/metrics.jsonl holds every metric.")
    return "\n".join(lines)


def finished_run_summary(cfg: TrainConfig, run_dir: Path, final: dict[str, float],
                         sweep_dir: Path | None = None) -> str:
    """`summary` of a run that trained with `cfg`; `sweep_dir` when it is one point of a sweep."""
    saved = [ckpt.step_in_name(p) for p in (run_dir / "checkpoints").glob("step_*.pt")]
    return summary(FinishedRun(  # a run the gate stopped early ends at its last checkpoint
        run_dir=run_dir, task=cfg.env.task, total_steps=max(saved, default=cfg.total_steps), final_eval=final,
        tensorboard=cfg.logger.tensorboard, has_viewer=suite_hook(load_adapter(cfg.env.suite), "view") is not None,
        sweep_dir=sweep_dir))
