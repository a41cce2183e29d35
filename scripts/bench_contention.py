"""Training speed beside a process that holds one core: the thread count adapting, and fixed.

Runs the real CLI on the quick start (`sizing=cpu`, InvertedPendulum-v5) and a short T1 recipe
(`recipe=t1`, gate off), each alone and beside a one-core spinner, in two ways:
- "ours": the trainer as shipped (one torch thread fewer per core that other processes take,
  fast_td3/training/contention.py);
- "before": the thread count fixed at every core (FAST_TD3_THREADS), what a run did before.
Each run and the spinner start in sessions of their own: where the kernel shares the CPU by
session (autogroup), that is how another program competes. Prints global steps/s after the
first update (compilation) and the ratios, measured in this one run:

    python scripts/bench_contention.py                # both workloads (about 9 minutes on 2 cores)
    python scripts/bench_contention.py --only quick   # the quick start only
    python scripts/bench_contention.py --alone --repeats 4   # what adapting costs on an idle machine
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fast_td3.learner.precision import cpu_model  # noqa: E402
from fast_td3.training.threads import THREADS_ENV, cores_available  # noqa: E402
from fast_td3.command_line import SECONDS_MAX, ArgumentParser, number, whole

TRAIN = str(Path(sys.executable).parent / "fast-td3-train")
WORKLOADS = {
    "quick": ["sizing=cpu", "total_steps=600", "eval_interval=0", "logger.log_interval=20"],
    "t1": ["recipe=t1", "sizing=cpu", "gate=off", "total_steps=400",
           "eval_interval=0", "logger.log_interval=20"],
}
SPIN = [sys.executable, "-c", "while True: pass"]


def settings(way: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k != THREADS_ENV}
    if way == "before":
        environ[THREADS_ENV] = str(cores_available())
    return environ


def rate(run_root: Path, wall: float) -> tuple[float, bool]:
    """(global steps/s after the first update, measured); a run that logged no rate in its time
    gives the bound steps reached / wall seconds (measured False)."""
    files = list(run_root.glob("*/*/metrics.jsonl"))
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    timed = [r for r in rows if "perf/global_steps_per_s" in r]
    if len(timed) >= 2:
        first, last = timed[0], timed[-1]
        return (last["step"] - first["step"]) / (last["time"] - first["time"]), True
    steps = max((r.get("step", 0) for r in rows), default=0)
    return steps / wall, False


def train(workload: str, way: str, spinner: bool, limit_s: float, root: Path) -> tuple[float, bool]:
    out = root / f"{workload}-{way}-{int(spinner)}"
    spin = subprocess.Popen(SPIN, start_new_session=True) if spinner else None
    try:
        start = time.perf_counter()
        command = [TRAIN, *WORKLOADS[workload], f"out_dir={out}", "logger.console=false", "save_interval=0"]
        trainer = subprocess.Popen(command, env=settings(way), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            trainer.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:  # a collapsed run: its whole session goes, nothing lingers
            os.killpg(trainer.pid, signal.SIGKILL)
            trainer.wait()
        return rate(out, time.perf_counter() - start)
    finally:
        if spin is not None:
            os.killpg(spin.pid, signal.SIGKILL)
            spin.wait()


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(WORKLOADS), help="one workload (default: both)")
    parser.add_argument("--limit", type=number(0, SECONDS_MAX), default=120.0, help="seconds a run may take (a collapsed run is cut)")
    parser.add_argument("--repeats", type=whole(1, 1000), default=1, help="runs of each case, alternated (the mean is printed)")
    parser.add_argument("--alone", action="store_true", help="only the runs alone (each way's cost on an idle machine)")
    parser.add_argument("--no-before", action="store_true", help="skip the 'before' runs")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, {cores_available()} cores; other work on the machine: a one-core spinner where "
          "marked, nothing else started by this script\n")
    print("| workload | way | alone (global steps/s) | beside a spinner | beside / alone |\n|---|---|---:|---:|---:|")
    ways = ["ours"] + ([] if args.no_before else ["before"])
    with tempfile.TemporaryDirectory() as tmp:
        for workload in [args.only] if args.only else list(WORKLOADS):
            runs: dict[tuple[str, int], list[tuple[float, bool]]] = {}
            for repeat in range(args.repeats):  # the ways alternate, so a slow spell of the machine hits both
                for spin in (0,) if args.alone else (0, 1):  # the runs alone first: none follows a run cut short
                    for way in ways if repeat % 2 == 0 else ways[::-1]:  # each way goes first as often
                        runs.setdefault((way, spin), []).append(
                            train(workload, way, bool(spin), args.limit, Path(tmp) / str(repeat)))
            alone_rates = {}
            for way in ways:
                alone = sum(r for r, _ in runs[(way, 0)]) / args.repeats
                alone_rates[way] = alone
                if args.alone:
                    each = ", ".join(f"{r:.2f}" for r, _ in runs[(way, 0)])
                    print(f"| {workload} | {way} | {alone:.2f} ({each}) | | |", flush=True)
                    continue
                busy = sum(r for r, _ in runs[(way, 1)]) / args.repeats
                measured = all(m for _, m in runs[(way, 1)])
                busy_text = f"{busy:.2f}" if measured else f"< {max(busy, 0.01):.2f} (cut at {args.limit:.0f} s)"
                print(f"| {workload} | {way} | {alone:.2f} | {busy_text} | {busy / alone:.2f} |", flush=True)
            if "before" in alone_rates:
                print(f"| {workload} | ours / before, alone | | | {alone_rates['ours'] / alone_rates['before']:.3f} |",
                      flush=True)

if __name__ == "__main__":
    main()
