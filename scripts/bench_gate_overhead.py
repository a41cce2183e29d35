"""What the deploy gate while training costs a T1 run: the same run with `gate=off` and with the
gate on (`conf/gate/t1.yaml`: every 2000 steps, nominal + 10 trials, in a background process),
measured in one invocation, one after the other.

    python scripts/bench_gate_overhead.py                          # 6000 steps each, recipe=t1_nominal
    python scripts/bench_gate_overhead.py --steps 4000 --json gate_overhead.json

Prints, for each run, the wall time of the process and the mean training rate (global steps/s
between logs, evaluation and saving excluded), then the gate's overhead as a share of the
gated run's wall time, both end to end (which includes waiting for the last gate's verdict at
the end) and in training rate. The CPU model is printed with the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fast_td3.learner.precision import cpu_model  # noqa: E402
from fast_td3.training.metrics_log import read_metrics  # noqa: E402
from fast_td3.command_line import STEPS_MAX, ArgumentParser, file_out, whole


def one_run(steps: int, gate: list[str], folder: Path, extra: list[str]) -> dict:
    command = [sys.executable, "-m", "fast_td3.training.train", "recipe=t1_nominal", "sizing=cpu",
               f"total_steps={steps}", "logger.console=false", f"hydra.run.dir={folder}", *gate, *extra]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=dict(os.environ))
    wall = time.perf_counter() - started
    records = read_metrics(folder)
    rates = [r["perf/global_steps_per_s"] for r in records if "perf/global_steps_per_s" in r]
    gates = [r for r in records if "gate/passed" in r]
    return {"wall_s": wall, "steps_per_s": sum(rates) / len(rates) if rates else float("nan"), "gates": len(gates),
            "gate_wall_s": [round(r["gate/wall_s"], 1) for r in gates if "gate/wall_s" in r]}


def main(argv: list[str] | None = None) -> dict:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0], passes_overrides=True)
    parser.add_argument("--steps", type=whole(1, STEPS_MAX), default=6000, help="global steps per run (default 6000: 3 gates)")
    parser.add_argument("--json", type=file_out(), default=None, help="also write the figures here")
    parser.add_argument("extra", nargs="*", help="more overrides for both runs, e.g. gate.trials=20")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        off = one_run(args.steps, ["gate=off"], Path(root) / "off", args.extra)
        on = one_run(args.steps, [], Path(root) / "on", args.extra)
    result = {"cpu": cpu_model(), "cores": os.cpu_count(), "steps": args.steps, "gate_off": off, "gate_on": on,
              "overhead_wall": 1 - off["wall_s"] / on["wall_s"],
              "overhead_training_rate": 1 - on["steps_per_s"] / off["steps_per_s"]}
    print(f"CPU: {result['cpu']} ({result['cores']} cores); {args.steps} global steps, recipe=t1_nominal")
    for name, run in (("gate=off", off), ("gate on", on)):
        print(f"  {name:<9} wall {run['wall_s']:7.1f} s, training {run['steps_per_s']:6.2f} global steps/s, "
              f"{run['gates']} gates {run['gate_wall_s']}")
    print(f"  the gate's share of the gated run's wall time: {result['overhead_wall']:.1%} end to end, "
          f"{result['overhead_training_rate']:.1%} of the training rate")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
