"""How a recipe fared on each seed, from its runs' gate-in-the-loop verdicts: a table and seeds.json rows.

    python -m fast_td3.analysis.recipe_table runs/sweeps/<sweep> runs/T1LowDimJoystickFlatTerrain/<run> ...
    python -m fast_td3.analysis.recipe_table <runs...> --json seeds.json --note "two runs at once, one thread each"
    python -m fast_td3.analysis.recipe_table <run> --trials 30000   # also: which perturbed trials fail, from step 30000 on

Per run: the algorithm, seed, CPU and the command that reproduces it; the wall time to the first
checkpoint that passed the nominal gate and to the first the robust gate passed (nominal plus
at least 90% of the perturbed trials); the robust pass rate of the latest verdict; how many of
the last 5 gated checkpoints passed; the latest nominal verdict's tracking errors (forward and
sideways [m/s], turn [rad/s]: which skill fails) and how much of each commanded walk it
covered (a slow walk); and where the run stands (steps, minutes). Times are the
run's clock, summed over resumes (fast_td3/analysis/gate_summary.py). The CPU is the one the
run recorded (`resolved.cpu`), else this machine's. With `--trials`, each run's perturbed trials
side by side, verdict by verdict, and what each trial's failures were (fast_td3/analysis/gate_trials.py).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import yaml

from fast_td3.analysis.gate_summary import describe_pass, gate_summary
from fast_td3.analysis.gate_trials import trial_matrix
from fast_td3.analysis.report_runs import find_runs, overrides_file
from fast_td3.learner.precision import cpu_model
from fast_td3.training.metrics_log import read_metrics
from fast_td3.command_line import ArgumentParser, file_out, whole


def training_command(run_dir: Path) -> str:
    """The `fast-td3-train` line that reproduces the run (its overrides, without the output folder)."""
    found = overrides_file(run_dir)
    overrides = yaml.safe_load(found.read_text()) if found else []
    kept = [o for o in overrides if o.split("=")[0].lstrip("+") not in ("out_dir", "resume")]
    return "fast-td3-train " + " ".join(shlex.quote(o) for o in kept)


ERROR_METRICS = {"forward": "gate/forward/lin_vel_error", "sideways": "gate/sideways/lin_vel_error",
                 "turn": "gate/turn/yaw_rate_error"}
"""The latest-errors column: each moving segment's tracking error in the nominal trial."""
COVERAGE_METRICS = {"forward": "gate/forward/coverage", "sideways": "gate/sideways/coverage"}
"""The latest-coverage column: how much of each commanded walk the nominal trial covered (a slow
walk can pass on its error and still fall short of the distance)."""


def row(run_dir: Path, note: str = "") -> dict:
    config = yaml.safe_load((run_dir / "config.yaml").read_text()) if (run_dir / "config.yaml").is_file() else {}
    records = read_metrics(run_dir)
    summary = gate_summary(records)
    last = records[-1] if records else {}
    resolved = config.get("resolved", {}) or {}
    return {
        "run": f"{run_dir.parent.name}/{run_dir.name}",  # not this machine's path: seeds.json ships
        "algo": (config.get("algo") or {}).get("name", "?"),
        "seed": config.get("seed"),
        "cpu": resolved.get("cpu") or cpu_model(),
        "torch_threads": resolved.get("torch_threads"),
        "command": training_command(run_dir),
        "steps": last.get("step"),
        "minutes": round(max((r.get("time", 0.0) for r in records), default=0.0) / 60.0, 1),
        "first_nominal_pass": summary.first_nominal_pass if summary else None,
        "first_robust_pass": summary.first_robust_pass if summary else None,
        "robust_pass_rate_latest": summary.latest.get("gate/robust_pass_rate") if summary else None,
        "last5_passed": summary.last_passed if summary else None,
        "latest_errors": {name: (summary.latest.get(key) if summary else None) for name, key in ERROR_METRICS.items()},
        "latest_coverage": {name: (summary.latest.get(key) if summary else None)
                            for name, key in COVERAGE_METRICS.items()},
        "gate_verdicts": summary.verdicts if summary else 0,
        "note": note,
    }


def _or_dash(value) -> str:
    """A run not gated yet shows '-', not 'None'."""
    return "-" if value is None else str(value)


def markdown(rows: list[dict]) -> str:
    when = describe_pass
    lines = ["| algo | seed | first nominal pass | first robust pass | robust rate (latest) | last 5 passing | "
             "errors fwd / side / turn (latest) | coverage fwd / side (latest) | where it stands |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        errors = " / ".join("-" if e is None else f"{e:.2f}" for e in r["latest_errors"].values())
        coverage = " / ".join("-" if c is None else f"{c:.0%}" for c in r["latest_coverage"].values())
        lines.append(f"| {r['algo']} | {r['seed']} | {when(r['first_nominal_pass'])} | {when(r['first_robust_pass'])} | "
                     f"{_or_dash(r['robust_pass_rate_latest'])} | {_or_dash(r['last5_passed'])}/5 | {errors} | {coverage} | "
                     f"step {r['steps']}, {r['minutes']} min |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="run folders, or sweep folders holding them")
    parser.add_argument("--json", type=file_out(), help="write the rows here (seeds.json)")
    parser.add_argument("--note", default="", help="how the runs shared the machine, for every row")
    parser.add_argument("--trials", type=whole(0), metavar="FROM_STEP", default=None,
                        help="also print which perturbed trials failed at each verdict from this step on")
    args = parser.parse_args(argv)
    runs = find_runs(args.paths)
    rows = [row(run, args.note) for run in runs]
    print(markdown(rows))
    if args.trials is not None:
        for run in runs:
            print(f"\n{run.parent.name}/{run.name}\n{trial_matrix(run, args.trials).text()}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"rows: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
