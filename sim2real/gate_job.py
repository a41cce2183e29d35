"""One gate of a training run, in a process of its own: export a checkpoint, play the robust gate, write the verdict.

The trainer (`fast_td3/training/gate_loop.py`) starts this on the CPU, niced and on one thread,
so training does not wait for it and a GPU run spends no GPU time on it:

    python -m sim2real.gate_job <checkpoint.pt> <result.json> trials=10 seconds=10 seed=0 \\
        min_pass_rate=0.9 [both_sides=true] [segments=stand,forward] [push=off ...]

With `gate.ship`, the confirmation of a run's passes runs the same way, as `fast-td3-ship` into
`<run>/bundle/`:

    python -m sim2real.gate_job ship <result.json> <fast-td3-ship's arguments...>

The result file (written atomically) holds the summary the trainer logs (`gate/*` metrics) and
the full robust report, draws included. Exit status: 0 a verdict was written (pass or fail),
2 bad input or a checkpoint that could not be exported (the reason is in the result file too).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fast_td3.files import atomic_write_bytes, json_safe


def metrics_of(report) -> dict[str, float]:
    """The `gate/*` metrics of a robust report: verdicts, pass rate, the nominal tracking errors,
    how much of each commanded walk was covered (a slow sideways walk shows there first) and how
    far it turned (an arc shows there), and the trials' mean errors and turns."""
    metrics = {"gate/passed": float(report.passed), "gate/nominal_passed": float(report.nominal.passed),
               "gate/robust_pass_rate": report.robust_pass_rate if report.trials else float(report.nominal.passed),
               "gate/seconds_walked": report.nominal.seconds_walked, "gate/trials": float(len(report.trials))}
    for segment in report.nominal.segments:
        if segment.moving:
            metrics[f"gate/{segment.name}/lin_vel_error"] = segment.lin_vel_error
            metrics[f"gate/{segment.name}/yaw_rate_error"] = segment.yaw_rate_error
        if segment.walks:
            metrics[f"gate/{segment.name}/coverage"] = segment.coverage
            metrics[f"gate/{segment.name}/heading_change"] = segment.heading_change
    for key, value in (report.tracking_errors() | report.heading_changes()).items():
        metrics[f"gate/robust/{key}"] = value
    return metrics


PARENT = os.getppid()
"""The trainer that started this gate: when it is gone (killed), so is the reason to go on."""


def _exit_if_orphaned(_trial=None) -> None:
    if os.getppid() != PARENT:
        sys.exit(3)


def _write(path: Path, record: dict[str, Any]) -> None:
    """The verdict file, written whole or not at all (the trainer reads it once the process ends)."""

    text = json.dumps(json_safe(record), indent=1, allow_nan=False).encode()
    atomic_write_bytes(path, lambda f: f.write(text))


def gate_record(checkpoint: Path, options: dict[str, str]) -> dict[str, Any]:
    """The robust gate of `checkpoint`, exported into a temporary bundle: what the trainer reads."""
    # loaded once this process has yielded the cores (`main`): torch and MuJoCo take seconds of CPU
    from sim2real import robust, sim2sim
    from sim2real.checkpoint_gate import gate_checkpoint

    ranges = robust.ranges_from_options(options)
    trials, seconds = int(options.get("trials", 10)), float(options.get("seconds", 10.0))
    seed, min_pass_rate = int(options.get("seed", 0)), float(options.get("min_pass_rate", robust.MIN_PASS_RATE))
    segments = sim2sim.sequence(options.get("both_sides", "false").lower() == "true",
                                [name for name in options.get("segments", "").split(",") if name])
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="gate-"))
    try:
        verdict = gate_checkpoint(checkpoint, folder / "bundle", seconds=seconds, trials=trials, seed=seed,
                                  ranges=ranges, min_pass_rate=min_pass_rate, segments=segments,
                                  thresholds=sim2sim.Thresholds(**{key: float(options[key]) for key in
                                                                   sim2sim.THRESHOLD_OPTIONS if key in options}),
                                  on_trial=_exit_if_orphaned)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report = verdict.robust
    averaged = len(verdict.bundle.meta.get("averaged_steps", [])) or 1  # gate.average: the actors in the mean
    return {"metrics": metrics_of(report) | {"gate/wall_s": time.perf_counter() - started,
                                             "gate/averaged_actors": float(averaged)},
            "summary": report.summary(), "report": report.to_dict()}


def yield_to_the_trainer() -> None:
    """The trainer's cores come first. This process runs in a session of its own (the trainer
    starts it so), and where the kernel shares the CPU by session (autogroup) a process's nice
    value ranks it only within its session: so the session's own weight is lowered too."""
    try:
        os.nice(10)
    except OSError:
        pass
    try:
        Path("/proc/self/autogroup").write_text("19")
    except OSError:  # no autogroup (another kernel, or a platform without /proc)
        pass


def confirm(result: Path, ship_args: list[str]) -> int:
    """`fast-td3-ship` with `ship_args`; what it did written to `result`, its exit status returned
    (0 shipped, 1 below the bar, 2 refused)."""
    from sim2real import ship

    outcome = ship.run(ship_args)
    _write(result, {"code": outcome.code, "shipped": outcome.code == 0, "below_the_bar": list(outcome.below_the_bar)})
    return outcome.code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ship"]:
        yield_to_the_trainer()
        import torch

        torch.set_num_threads(1)
        return confirm(Path(argv[1]), argv[2:])
    checkpoint, result = Path(argv[0]), Path(argv[1])
    options = dict(token.partition("=")[::2] for token in argv[2:])
    yield_to_the_trainer()
    import torch

    torch.set_num_threads(1)
    try:
        record = gate_record(checkpoint, options)
    except (ValueError, OSError, RuntimeError) as error:
        _write(result, {"error": f"{type(error).__name__}: {error}"})
        print(f"gate of {checkpoint}: {error}", file=sys.stderr)
        return 2
    eval_return = os.environ.get("FAST_TD3_GATE_EVAL_RETURN")
    record["eval_return"] = float(eval_return) if eval_return else None
    _write(result, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
