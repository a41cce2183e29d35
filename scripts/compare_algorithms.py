"""FastSAC against FastTD3 at equal wall-clock, through the user's commands.

    python scripts/compare_algorithms.py --tasks Hopper-v5 Walker2d-v5 --seeds 1 2 3 --budget 150 \
        --out /tmp/compare --json compare.json

For each task and seed, `fast-td3-train algo=fast_td3 sizing=cpu ...` and `algo=fast_sac` run
at the same time (one torch thread each, so both see the same machine load), each stopped
with SIGINT after `--budget` seconds from its launch (the trainer saves a checkpoint after the
current global step). Then `fast-td3-eval` scores each final checkpoint (10 deterministic
episodes). Printed: a Markdown table with, per task and algorithm, the mean (and std over
seeds) training-episode return at 25/50/75/100 % of the budget (from metrics.jsonl), the env
steps reached, and the final evaluation return; and the CPU it ran on.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fast_td3.learner.precision import cpu_model  # noqa: E402
from fast_td3.command_line import ENVS_MAX, SECONDS_MAX, SEED_MAX, ArgumentParser, file_out, folder_out, number, whole

BIN = Path(sys.executable).parent
ALGORITHMS = ("fast_td3", "fast_sac")
FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def launch(algo: str, task: str, seed: int, run_dir: Path, extra: list[str]) -> subprocess.Popen:
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    command = [str(BIN / "fast-td3-train"), f"algo={algo}", f"task={task}", "sizing=cpu", f"seed={seed}",
               "total_steps=10000000", "eval_interval=0", "save_interval=0", "logger.console=false",
               "logger.log_interval=50", f"hydra.run.dir={run_dir}", *extra]
    env = dict(os.environ, FAST_TD3_THREADS="1")
    log = open(run_dir.parent / f"{run_dir.name}.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def curve(run_dir: Path, budget: float) -> dict:
    """Training-episode return at fractions of the budget (the last log at or before each)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    returns = [(r["time"], r["train/episode_return"]) for r in records if "train/episode_return" in r]
    points = {}
    for fraction in FRACTIONS:
        before = [value for t, value in returns if t <= fraction * budget]
        points[fraction] = before[-1] if before else None
    return {"returns": points, "env_steps": max((r.get("env_steps", 0) for r in records), default=0)}


def evaluate(run_dir: Path, episodes: int) -> float:
    out = subprocess.run([str(BIN / "fast-td3-eval"), str(run_dir), "--episodes", str(episodes), "--device", "cpu"],
                         capture_output=True, text=True, env=dict(os.environ, FAST_TD3_THREADS="1"))
    if out.returncode != 0:
        raise RuntimeError(f"fast-td3-eval {run_dir} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["return_mean"]


def run_pair(task: str, seed: int, budget: float, out: Path, extra: list[str], episodes: int) -> dict:
    dirs = {algo: out / task / f"{algo}_seed{seed}" for algo in ALGORITHMS}
    procs = {algo: launch(algo, task, seed, dirs[algo], extra) for algo in ALGORITHMS}
    start = time.monotonic()
    time.sleep(max(budget - (time.monotonic() - start), 0))
    for proc in procs.values():
        proc.send_signal(signal.SIGINT)
    for algo, proc in procs.items():
        proc.wait(timeout=600)
    result = {}
    for algo in ALGORITHMS:
        result[algo] = {**curve(dirs[algo], budget), "eval_return": evaluate(dirs[algo], episodes)}
        print(f"{task} seed {seed} {algo}: {result[algo]}", flush=True)
    return result


def _cell(values: list) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.mean(values):.0f} ± {statistics.stdev(values):.0f}"


def table(results: dict, budget: float) -> str:
    head = [f"train return at {int(f * budget)} s" for f in FRACTIONS]
    lines = ["| task | algo | " + " | ".join(head) + " | env steps | eval return (10 ep.) |",
             "|---" * (len(head) + 4) + "|"]
    for task, by_seed in results.items():
        for algo in ALGORITHMS:
            runs = [by_seed[seed][algo] for seed in by_seed]
            cells = [_cell([r["returns"][f] for r in runs]) for f in FRACTIONS]
            steps = _cell([r["env_steps"] for r in runs])
            lines.append(f"| {task} | {algo} | " + " | ".join(cells) + f" | {steps} | {_cell([r['eval_return'] for r in runs])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0], passes_overrides=True)
    parser.add_argument("--tasks", nargs="+", default=["Hopper-v5", "Walker2d-v5"])
    parser.add_argument("--seeds", nargs="+", type=whole(0, SEED_MAX), default=[1, 2, 3])
    parser.add_argument("--budget", type=number(0, SECONDS_MAX), default=150.0, help="wall-clock seconds per run")
    parser.add_argument("--episodes", type=whole(1, ENVS_MAX), default=10)
    parser.add_argument("--out", type=folder_out(), default=Path("/tmp/fast_td3_compare"))
    parser.add_argument("--json", type=file_out(), default=None)
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for both algorithms")
    args = parser.parse_args(argv)
    results: dict = {}
    for task in args.tasks:
        for seed in args.seeds:
            results.setdefault(task, {})[seed] = run_pair(task, seed, args.budget, args.out, args.overrides, args.episodes)
            if args.json:
                args.json.write_text(json.dumps({"cpu": cpu_model(), "budget_s": args.budget, "results": results}, indent=2))
    print(f"CPU: {cpu_model()}; {args.budget:.0f} s per run, both algorithms at once with one torch thread each")
    print(table(results, args.budget))


if __name__ == "__main__":
    main()
