"""Env-steps/s of the gymnasium adapter, in-process vs a worker process per env, in one run.

    python scripts/bench_envs.py                                  # a few tasks x env counts
    python scripts/bench_envs.py --tasks Humanoid-v5 --num-envs 16 64 --seconds 5 --json envs.json

Steps with random actions through the full adapter (action scaling, final observations,
float32 torch tensors) and prints each vectorization's rate and its ratio to 'sync'.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from envs.gymnasium import VECTORIZATIONS, GymnasiumVecEnv


def steps_per_second(task: str, num_envs: int, vectorization: str, seconds: float) -> float:
    env = GymnasiumVecEnv(task, num_envs, seed=0, vectorization=vectorization)
    try:
        env.reset()
        actions = lambda: torch.rand(num_envs, env.num_actions) * 2 - 1  # noqa: E731
        for _ in range(20):  # warm-up
            env.step(actions())
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            env.step(actions())
            steps += 1
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["InvertedPendulum-v5", "HalfCheetah-v5", "Humanoid-v5"])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[4, 16, 64])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()

    results = []
    print(f"{'task':<22}{'envs':>6}" + "".join(f"{v:>22}" for v in VECTORIZATIONS))
    for task in args.tasks:
        for n in args.num_envs:
            rates = {v: steps_per_second(task, n, v, args.seconds) for v in VECTORIZATIONS}
            cells = "".join(f"{rates[v]:>12.0f} ({rates[v] / rates['sync']:.2f}x)" for v in VECTORIZATIONS)
            print(f"{task:<22}{n:>6}{cells}", flush=True)
            results.append({"task": task, "num_envs": n, "env_steps_per_s": rates})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
