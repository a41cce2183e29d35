"""`fast-td3-gate`: every checkpoint of a T1 run through export and the sim-to-sim gate, a row each.

    fast-td3-gate runs/T1LowDimJoystickFlatTerrain/<run>
    fast-td3-gate <run> --seconds 10 --last 3
    fast-td3-gate <run> --json gates.json               # also the rows as JSON
    fast-td3-gate <run> --robust 20 --seed 0             # and 20 perturbed trials each (the robust gate)
    fast-td3-gate <run> --robust 10 --gait-frequency 1.25   # deployed at another gait frequency
    fast-td3-gate <run> --robust 10 --average 3          # each checkpoint's mean actor with the 2 before it
    fast-td3-gate <run> --robust 20 --steps 50000 52000  # just these checkpoints (shipping candidates)
    fast-td3-gate <run> --robust 20 --both-sides --steps 50000   # the step and the turn to the right too

Eval return says how the policy does on the training task; the gate says whether the exported
bundle walks the scripted joystick sequence on the robot's settings. This prints both per
checkpoint, so a run can be stopped (or a checkpoint shipped) on the gate's evidence. With
`--robust`, the `bar` column says whether a checkpoint clears the bar a robust bundle ships on
(`fast-td3-ship`, sim2real/ship.py: both gates passed, nominal errors within the margin, forward
coverage), and the row's `below_the_bar` says where it falls short. The bundles go to
`<run>/gated/step_<N>/` and are kept. Every option and output is checked before the first
checkpoint is gated: a refusal is one line and exit code 2.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from fast_td3.command_line import (
    SEED_MAX, SEGMENT_SECONDS_MAX, TRIALS_MAX, ArgumentParser, number, path_in, file_out, whole,
)
from fast_td3.training import checkpoint as ckpt
from fast_td3.training.metrics_log import read_metrics
from sim2real import robust, sim2sim, t1_bundle
from sim2real.checkpoint_gate import gate_checkpoint
from sim2real.export import T1_TASK_PREFIX, check_bundle_out

PROG = "fast-td3-gate"
GATED_DIR = "gated"


class GateRunError(ValueError):
    """A run or an option this command cannot gate: one line, exit code 2."""


def eval_returns(run_dir: Path) -> dict[int, float]:
    return {int(r["step"]): r["eval/return_mean"] for r in read_metrics(run_dir) if "eval/return_mean" in r}


def perturbed_passes(bundle: t1_bundle.Bundle, seconds: float, runs: int, scale: float = 1e-3) -> int:
    """Gate runs (of `runs`) passed with N(0, scale) added to every observation the policy sees:
    a margin probe. A pass that flips under noise this small may flip on another CPU's
    arithmetic too (the 80 s of physics amplify any difference)."""
    import torch  # noqa: PLC0415 (the rest of the command needs no torch until a bundle loads)

    passed = 0
    for seed in range(runs):
        generator = torch.Generator().manual_seed(seed)

        def noisy(obs, generator=generator):
            return bundle.policy(obs + scale * torch.randn(obs.shape, generator=generator))

        passed += sim2sim.run(bundle, seconds=seconds, policy=noisy).passed
    return passed


def gated_folder(run_dir: Path, step: int, gait_frequency: float | None, average: int) -> Path:
    """Where the bundle gated for `step` goes (and stays)."""
    return run_dir / GATED_DIR / (f"step_{step:09d}" + (f"_{gait_frequency:g}hz" if gait_frequency is not None else "")
                                  + (f"_average{average}" if average > 1 else ""))


def gate_row(checkpoint: Path, run_dir: Path, seconds: float, returns: dict[int, float], perturb: int = 0,
             trials: int = 0, seed: int = 0, gait_frequency: float | None = None, average: int = 1,
             both_sides: bool = False) -> dict:
    step = ckpt.step_of(checkpoint)
    verdict = gate_checkpoint(checkpoint, gated_folder(run_dir, step, gait_frequency, average), seconds=seconds,
                              trials=trials or None, seed=seed, segments=sim2sim.sequence(both_sides),
                              gait_frequency=gait_frequency, average=average, force=True)
    loaded, report, robust_report = verdict.bundle, verdict.nominal, verdict.robust
    row = {"step": step, "eval_return": returns.get(step), "passed": report.passed,
           "seconds_walked": round(report.seconds_walked, 2), "bundle": str(loaded.folder)}
    if robust_report:
        row["robust_pass_rate"] = round(robust_report.robust_pass_rate, 3)
        row["robust_passed"] = robust_report.passed
        row["failed_trials"] = [t.draw.summary() + ": " + "; ".join(t.failures())
                                for t in robust_report.trials if not t.passed]
        # the shortfalls judge a nominal walk that was played to the end: a fall is its own shortfall
        row["below_the_bar"] = ([] if report.passed else ["the nominal gate failed"]) + robust.shipping_shortfalls(
            report, robust_report)
    if perturb:
        row["perturbed_passes"] = f"{perturbed_passes(loaded, seconds, perturb)}/{perturb}"
    for segment in report.segments:  # a segment it fell in has no errors: null, so the JSON stays strict
        row[f"{segment.name}/lin_vel_error"] = _rounded(segment.lin_vel_error)
        row[f"{segment.name}/yaw_rate_error"] = _rounded(segment.yaw_rate_error)
        if segment.walks:
            row[f"{segment.name}/coverage"] = round(segment.coverage, 3)
        row[f"{segment.name}/failures"] = segment.failures
    return row


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 3)


def parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Every checkpoint of a T1 run exported and played through the "
                            "sim-to-sim gate (and the robust gate with --robust): a table of which pass.")
    parser.add_argument("run", type=path_in, help="a T1LowDimJoystick* run folder")
    parser.add_argument("--seconds", type=number(0, SEGMENT_SECONDS_MAX), default=20.0, help="seconds per joystick segment (default 20)")
    parser.add_argument("--last", type=whole(0), default=0, help="only the last N checkpoints (default all)")
    parser.add_argument("--steps", type=whole(0), nargs="+", default=None, metavar="STEP",
                        help="only the checkpoints of these global steps (before --last)")
    parser.add_argument("--json", type=file_out(replaces=is_gate_rows), default=None, help="write the rows here too")
    parser.add_argument("--perturb", type=whole(0, TRIALS_MAX), default=0,
                        help="also N gate runs with 1e-3 observation noise: how many pass (a margin probe)")
    parser.add_argument("--robust", type=whole(0, TRIALS_MAX), default=0, metavar="TRIALS",
                        help="also the robust gate: this many perturbed trials per checkpoint (sim2real/robust.py)")
    parser.add_argument("--seed", type=whole(0, SEED_MAX), default=0, help="seed of the robust trials' draws (default 0)")
    parser.add_argument("--gait-frequency", type=number(0, 100), default=None, metavar="HZ",
                        help="deploy this gait frequency instead of the run's (inside its trained range)")
    parser.add_argument("--average", type=whole(1), default=1, metavar="K",
                        help="gate the mean actor of each checkpoint and the K-1 before it (fast_td3/training/policy_average.py)")
    parser.add_argument("--both-sides", action="store_true",
                        help="play the sideways step and the turn to the right too (both gates), as the ship does")
    return parser


def is_gate_rows(path: Path) -> bool:
    """A JSON list of this command's rows (what `--json` may replace)."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(rows, list) and all(isinstance(row, dict) and "step" in row and "passed" in row for row in rows)


def checkpoints_to_gate(args) -> list[Path]:
    """The run's checkpoints the options pick, from a T1LowDim run (refused otherwise)."""
    if not args.run.is_dir():
        raise GateRunError(f"{args.run} is not a folder: give a T1LowDimJoystick* run folder")
    checkpoints = ckpt.step_files(args.run / ckpt.CHECKPOINT_DIR)
    if not checkpoints:
        raise GateRunError(f"{args.run} has no checkpoints/step_*.pt")
    task = (ckpt.load(checkpoints[-1]).get("config") or {}).get("env", {}).get("task", "?")
    if not str(task).startswith(T1_TASK_PREFIX):
        raise GateRunError(f"{args.run} trained {task}: the gate plays T1LowDimJoystick* policies only")
    checkpoints = checkpoints[args.average - 1:]  # the first K-1 have too few predecessors to average
    if args.steps:
        by_step = {ckpt.step_of(path): path for path in checkpoints}
        missing = sorted(set(args.steps) - set(by_step))
        if missing:
            averaged = (f" (with --average {args.average}: those with {args.average - 1} before them)"
                        if args.average > 1 else "")
            raise GateRunError(f"no checkpoint of step {', '.join(map(str, missing))} in "
                               f"{args.run / ckpt.CHECKPOINT_DIR}; its steps{averaged}: "
                               f"{', '.join(map(str, by_step)) or 'none'}")
        checkpoints = [by_step[step] for step in sorted(set(args.steps))]
    if args.last:
        checkpoints = checkpoints[-args.last:]
    if not checkpoints:
        raise GateRunError(f"no checkpoint of {args.run} has {args.average - 1} before it to average with")
    return checkpoints


def main(argv: list[str] | None = None) -> list[dict]:
    """Gate the checkpoints `argv` picks; the rows (printed as a table, and to `--json`)."""
    args = parser().parse_args(argv)
    checkpoints = checkpoints_to_gate(args)  # --json was checked when parsed (file_out)
    for checkpoint in checkpoints:  # a gated/ folder of the user's own files is refused before any work
        check_bundle_out(gated_folder(args.run, ckpt.step_of(checkpoint), args.gait_frequency, args.average), True)
    returns = eval_returns(args.run)
    rows = []
    print(f"{'step':>8} {'eval return':>11} {'gate':>5} {'walked':>7} {'noisy':>6} {'robust':>7} {'bar':>6}  failures")
    for checkpoint in checkpoints:
        row = gate_row(checkpoint, args.run, args.seconds, returns, args.perturb, args.robust, args.seed,
                       args.gait_frequency, args.average, args.both_sides)
        rows.append(row)
        failures = "; ".join(f"{k.split('/')[0]}: {', '.join(v)}" for k, v in row.items()
                             if k.endswith("/failures") and v)
        ret = f"{row['eval_return']:.2f}" if row["eval_return"] is not None else "-"
        bar = "-" if "below_the_bar" not in row else ("short" if row["below_the_bar"] else "clears")
        print(f"{row['step']:>8} {ret:>11} {'PASS' if row['passed'] else 'fail':>5} {row['seconds_walked']:>6.1f}s "
              f"{row.get('perturbed_passes', '-'):>6} "
              f"{format(row['robust_pass_rate'], '.0%') if 'robust_pass_rate' in row else '-':>7} {bar:>6}  {failures}",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, allow_nan=False))
    return rows


def cli(argv: list[str] | None = None) -> None:
    try:
        main(argv)
    except (ValueError, FileExistsError, FileNotFoundError) as error:  # GateRunError, OutputRefused, export's
        print(f"{PROG}: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli()
