"""End-to-end training speed of this tree against an earlier commit, alternated in one run.

    python scripts/bench_before_after.py --base 0cfddc1
    python scripts/bench_before_after.py --base HEAD~3 --steps 600 --rounds 3 \
        --case "HalfCheetah-v5 sizing=cpu" --case "CheetahRun sizing=cpu env.num_envs=1024"

`--base` is checked out into a temporary git worktree; each case then trains alternately with
the base tree and this one (`python -m fast_td3.training.train` with PYTHONPATH set to the tree, same
venv, same seed), `--rounds` times, and reads `perf/global_steps_per_s` from each run's
metrics.jsonl (the log intervals after the first, so compilation and buffer filling are out).
Prints the median of each side and their ratio; the CPU model is named beside them.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fast_td3.learner.precision import cpu_model  # noqa: E402
from fast_td3.command_line import STEPS_MAX, ArgumentParser, whole

DEFAULT_CASES = ["HalfCheetah-v5 sizing=cpu", "CheetahRun sizing=cpu env.num_envs=1024"]


def run_once(tree: Path, case: str, steps: int, out: Path) -> float:
    task, *overrides = shlex.split(case)
    command = [sys.executable, "-m", "fast_td3.training.train", f"task={task}", *overrides, f"total_steps={steps}",
               "eval_interval=0", "save_interval=0", "logger.console=false", f"out_dir={out}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{case} in {tree} failed:\n{done.stderr[-2000:]}")
    (metrics,) = out.glob("*/*/metrics.jsonl")
    rates = [json.loads(line).get("perf/global_steps_per_s") for line in metrics.read_text().splitlines()]
    rates = [r for r in rates if r is not None]
    return statistics.median(rates[1:] or rates)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--case", action="append", default=None, help='"<task> <override> ..." (repeatable)')
    parser.add_argument("--steps", type=whole(1, STEPS_MAX), default=600, help="global steps per run")
    parser.add_argument("--rounds", type=whole(1, 1000), default=2)
    args = parser.parse_args(argv)
    cases = args.case or DEFAULT_CASES
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            print(f"{cpu_model()}, {os.cpu_count()} CPUs; base {args.base} vs this tree; {args.steps} steps, "
                  f"{args.rounds} rounds alternated")
            print("| case | base global steps/s | this tree | ratio |\n|---|---:|---:|---:|")
            for case in cases:
                rates: dict[str, list[float]] = {"base": [], "this": []}
                for round_ in range(args.rounds):
                    for side, tree in (("base", base), ("this", ROOT)):
                        out = Path(scratch) / f"{side}-{cases.index(case)}-{round_}"
                        rates[side].append(run_once(tree, case, args.steps, out))
                before, after = statistics.median(rates["base"]), statistics.median(rates["this"])
                print(f"| {case} | {before:.1f} | {after:.1f} | {after / before:.2f}x |", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
