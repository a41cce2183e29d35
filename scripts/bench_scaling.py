"""Data-parallel scaling: global and env steps/s of the same run on 1, 2, ... ranks.

    python scripts/bench_scaling.py                                   # 1 and 2 ranks, InvertedPendulum, CPU
    python scripts/bench_scaling.py --ranks 1 2 4 8 --steps 2000 -- task=T1JoystickFlatTerrain device=cuda

Each rank count is one `fast-td3-train` run (torchrun for more than one rank, gloo on CPU,
NCCL on GPUs); the rates are the means over its logs after the first (compilation left
out). Ratios are to the 1-rank run measured in the same invocation. On a 2-core CPU, 2
ranks share the cores: that run checks correctness, not speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from fast_td3.command_line import STEPS_MAX, ArgumentParser, file_out, whole

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OVERRIDES = ["task=InvertedPendulum-v5", "sizing=cpu", "env.num_envs=16"]


def run(ranks: int, steps: int, overrides: list[str]) -> dict[str, float]:
    from fast_td3.training.metrics_log import read_metrics

    with tempfile.TemporaryDirectory() as out:
        launcher = [sys.executable, "-m", "fast_td3.training.train"]
        if ranks > 1:
            launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
                        "-m", "fast_td3.training.train"]
        command = [*launcher, *overrides, f"total_steps={steps}", f"logger.log_interval={max(steps // 5, 1)}",
                   f"eval_interval={steps * 10}", f"save_interval={steps * 10}", "logger.console=false",
                   f"out_dir={out}"]
        subprocess.run(command, check=True, cwd=ROOT, capture_output=True)
        (run_dir,) = (p for task in Path(out).iterdir() for p in task.iterdir())
        records = [r for r in read_metrics(run_dir) if "perf/global_steps_per_s" in r][1:]
    return {key: float(np.mean([r[f"perf/{key}"] for r in records]))
            for key in ("global_steps_per_s", "env_steps_per_s", "updates_per_s")}


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0], passes_overrides=True)
    parser.add_argument("--ranks", nargs="+", type=whole(1, 64), default=[1, 2])
    parser.add_argument("--steps", type=whole(1, STEPS_MAX), default=500, help="global steps per run")
    parser.add_argument("--json", type=file_out(), default=None, help="also write the results to this file")
    parser.add_argument("overrides", nargs="*", help="fast-td3-train overrides (after --)")
    args = parser.parse_args()
    overrides = args.overrides or DEFAULT_OVERRIDES

    print(f"{'ranks':>6}{'global steps/s':>16}{'env steps/s':>14}{'updates/s':>11}{'env steps vs 1 rank':>21}"
          f"   ({' '.join(overrides)})")
    results, base = [], None
    for ranks in args.ranks:
        r = run(ranks, args.steps, overrides)
        base = base or r["env_steps_per_s"]
        print(f"{ranks:>6}{r['global_steps_per_s']:>16.1f}{r['env_steps_per_s']:>14.0f}{r['updates_per_s']:>11.1f}"
              f"{r['env_steps_per_s'] / base:>20.2f}x", flush=True)
        results.append({"ranks": ranks, **r})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
