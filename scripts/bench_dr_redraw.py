"""What `randomization.redraw_each_episode` costs the native T1LowDim env, measured in one run.

    python scripts/bench_dr_redraw.py                      # 64 envs, 3 bursts of 3 s each way
    python scripts/bench_dr_redraw.py --num-envs 256 --seconds 5

Two envs with domain randomisation, one drawing each env's robot once, one drawing it again at
every reset, stepped in alternating bursts (the load of a shared machine weighs on both alike)
with random actions, under which the T1 falls within a second or two: about the worst case for
resets, since a walking policy resets once per 20 s episode. Prints env steps/s of each, their
ratio, the resets per step, and the CPU model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.playground.t1_native import T1NativeVecEnv  # noqa: E402
from fast_td3.learner.precision import cpu_model  # noqa: E402
from fast_td3.command_line import SECONDS_MAX, ArgumentParser, number, whole


def burst(env: T1NativeVecEnv, seconds: float, generator: torch.Generator) -> tuple[float, float]:
    """(env steps/s, resets per env step) over `seconds` of random actions."""
    steps = resets = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = torch.rand(env.num_envs, env.num_actions, generator=generator) * 2 - 1
        _, _, dones, _ = env.step(actions)
        steps, resets = steps + 1, resets + int(dones.sum())
    return steps * env.num_envs / (time.perf_counter() - start), resets / (steps * env.num_envs)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=whole(1, 65536), default=64)
    parser.add_argument("--seconds", type=number(0, SECONDS_MAX), default=3.0, help="per burst")
    parser.add_argument("--bursts", type=whole(1, 1000), default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    envs = {redraw: T1NativeVecEnv("T1LowDimJoystickFlatTerrain", args.num_envs, seed=0, domain_randomization=True,
                                   num_threads=1, config_overrides={"randomization": {"redraw_each_episode": redraw}})
            for redraw in (False, True)}
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    generator = torch.Generator().manual_seed(0)
    for env in envs.values():
        env.reset()
    for _ in range(args.bursts):
        for redraw, env in envs.items():
            results[redraw].append(burst(env, args.seconds, generator))
    print(f"CPU: {cpu_model()}; {args.num_envs} envs, 1 physics thread, random actions")
    rate = {redraw: float(np.median([r for r, _ in runs])) for redraw, runs in results.items()}
    for redraw, runs in results.items():
        print(f"  redraw_each_episode={str(redraw).lower():5}: {rate[redraw]:8.0f} env steps/s "
              f"({np.mean([d for _, d in runs]):.3f} resets per env step)")
    print(f"  redraw / once: {rate[True] / rate[False]:.2f}x")


if __name__ == "__main__":
    main()
