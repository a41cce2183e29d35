"""Several trainers on one machine: each with its share of the cores vs each with all of them.

Runs the real CLI: a joblib sweep of N runs at once and (with --torchrun) an N-rank
torchrun job, once with the trainer's default thread share and once with
FAST_TD3_THREADS set to every core (what each process takes when nothing divides the
cores), and prints global steps/s of each way and their ratio, measured in one run.

    python scripts/bench_threads.py                 # 2 parallel sweep runs
    python scripts/bench_threads.py --torchrun      # and a 2-rank torchrun job
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fast_td3.learner.precision import cpu_model  # noqa: E402
from fast_td3.training.threads import THREADS_ENV, cores_available  # noqa: E402
from fast_td3.command_line import STEPS_MAX, ArgumentParser, whole

BIN = Path(sys.executable).parent
RUN = ["sizing=cpu", "task=HalfCheetah-v5", "eval_interval=0", "save_interval=0", "logger.console=false",
       "logger.log_interval=50", "algo.learning_starts=10"]


def steps_per_second(run_dirs: list[Path]) -> float:
    """Sum over processes of global steps/s between their first and last metrics line."""
    total = 0.0
    for run_dir in run_dirs:
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"time"' in x]
        lines = [x for x in lines if "time" in x and "step" in x]
        first, last = lines[0], lines[-1]
        total += (last["step"] - first["step"]) / (last["time"] - first["time"])
    return total


def sweep(jobs: int, steps: int, threads: int | None, root: Path) -> float:
    env = {**os.environ, **({THREADS_ENV: str(threads)} if threads else {})}
    seeds = ",".join(str(s) for s in range(1, jobs + 1))
    subprocess.run([str(BIN / "fast-td3-train"), "-m", *RUN, f"total_steps={steps}", f"seed={seeds}",
                    f"out_dir={root}", "hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"],
                   env=env, check=True, capture_output=True, text=True)
    return steps_per_second([p for p in (root / "sweeps").glob("*/*") if p.is_dir()])


def torchrun(ranks: int, steps: int, threads: int | None, root: Path) -> float:
    env = {**os.environ, **({THREADS_ENV: str(threads)} if threads else {})}
    subprocess.run([str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={ranks}", "-m", "fast_td3.training.train",
                    *RUN, f"total_steps={steps}", f"hydra.run.dir={root / 'run'}"],
                   env=env, check=True, capture_output=True, text=True)
    return steps_per_second([root / "run"])


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=whole(1, 64), default=2)
    parser.add_argument("--steps", type=whole(1, STEPS_MAX), default=400, help="global steps per run")
    parser.add_argument("--torchrun", action="store_true", help="also an N-rank torchrun job")
    args = parser.parse_args()
    cores = cores_available()
    print(f"CPU: {cpu_model()}, {cores} cores; {args.processes} processes, HalfCheetah-v5 sizing=cpu\n")
    print("| launch | threads per process | global steps/s (all processes) |\n|---|---|---:|")
    cases = [("sweep", sweep)] + ([("torchrun", torchrun)] if args.torchrun else [])
    for name, launch in cases:
        rates = {}
        for label, threads in (("share", None), ("all cores", cores)):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                rates[label] = launch(args.processes, args.steps, threads, Path(tmp))
                print(f"| {name} | {label} | {rates[label]:.1f} |  ({time.perf_counter() - start:.0f} s wall)", flush=True)
        print(f"| {name} | share / all cores | {rates['share'] / rates['all cores']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
