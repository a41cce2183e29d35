"""Env-steps/s through the suite adapters, in one run.

    python scripts/bench_envs.py                                  # gymnasium: sync vs worker processes
    python scripts/bench_envs.py --tasks Humanoid-v5 --num-envs 16 64 --seconds 5 --json envs.json
    python scripts/bench_envs.py --suite playground               # CheetahRun and T1 on this device
    python scripts/bench_envs.py --suite playground --tasks T1JoystickFlatTerrain --num-envs 16 256 --device cuda
    python scripts/bench_envs.py --suite humanoid_bench           # shared memory vs SB3 pipes, 32 envs
    python scripts/bench_envs.py --suite humanoid_bench --num-envs 128 --transports processes

Steps with random actions through the full adapter (action scaling, final observations,
float32 torch tensors). Gymnasium: each vectorization's rate and its ratio to 'sync'.
HumanoidBench (in its own venv): worker processes sharing memory vs SB3's SubprocVecEnv
(a process per env, pipes), their ratio, and how long each takes to start.
Playground: the rate, its ratio to the smallest env count, and the first compile of reset
and of step, with JAX's persistent compilation cache off so the compile is a cold one.
"""

from __future__ import annotations

import json
import os
import time

import torch

from envs.gymnasium import VECTORIZATIONS, GymnasiumVecEnv
from fast_td3.command_line import SECONDS_MAX, ArgumentParser, file_out, number, whole


def stepped_rate(env, seconds: float) -> float:
    """Env steps/s of a reset adapter under random actions (after a warm-up)."""
    actions = lambda: torch.rand(env.num_envs, env.num_actions) * 2 - 1  # noqa: E731
    for _ in range(20):  # warm-up
        env.step(actions())
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions())
        steps += 1
    return steps * env.num_envs / (time.perf_counter() - start)


def steps_per_second(task: str, num_envs: int, vectorization: str, seconds: float) -> float:
    env = GymnasiumVecEnv(task, num_envs, seed=0, vectorization=vectorization)
    try:
        env.reset()
        return stepped_rate(env, seconds)
    finally:
        env.close()


def playground_rates(task: str, num_envs: int, device: str, seconds: float) -> dict[str, float]:
    """Cold compile times of reset and step, then steady env steps/s."""
    from envs.playground.mjx import PlaygroundVecEnv

    start = time.perf_counter()
    env = PlaygroundVecEnv(task, num_envs, seed=0, device=device, compilation_cache=False)
    reset_compile = time.perf_counter() - start  # the constructor compiles and runs one reset
    try:
        env.reset()
        g = torch.Generator().manual_seed(0)
        actions = lambda: (torch.rand(num_envs, env.num_actions, generator=g) * 2 - 1).to(env.device)  # noqa: E731
        start = time.perf_counter()
        obs = env.step(actions())[0]
        obs.cpu()  # wait for it
        step_compile = time.perf_counter() - start
        for _ in range(10):
            obs = env.step(actions())[0]
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            obs = env.step(actions())[0]
            steps += 1
        obs.cpu()
        rate = steps * num_envs / (time.perf_counter() - start)
        return {"env_steps_per_s": rate, "reset_compile_s": reset_compile, "step_compile_s": step_compile}
    finally:
        env.close()


def bench_playground(args) -> list[dict]:
    tasks = args.tasks or ["CheetahRun", "T1JoystickFlatTerrain"]
    results = []
    print(f"{'task':<24}{'envs':>6}{'env steps/s':>14}{'vs first':>10}{'reset compile':>15}{'step compile':>14}")
    for task in tasks:
        first = None
        for n in args.num_envs:
            r = playground_rates(task, n, args.device, args.seconds)
            first = first or r["env_steps_per_s"]
            print(f"{task:<24}{n:>6}{r['env_steps_per_s']:>14.0f}{r['env_steps_per_s'] / first:>9.2f}x"
                  f"{r['reset_compile_s']:>14.1f}s{r['step_compile_s']:>13.1f}s", flush=True)
            results.append({"suite": "playground", "task": task, "num_envs": n, "device": args.device, **r})
    return results


def bench_gymnasium(args) -> list[dict]:
    args.tasks = args.tasks or ["InvertedPendulum-v5", "HalfCheetah-v5", "Humanoid-v5"]
    results = []
    print(f"{'task':<22}{'envs':>6}" + "".join(f"{v:>22}" for v in VECTORIZATIONS))
    for task in args.tasks:
        for n in args.num_envs:
            rates = {v: steps_per_second(task, n, v, args.seconds) for v in VECTORIZATIONS}
            cells = "".join(f"{rates[v]:>12.0f} ({rates[v] / rates['sync']:.2f}x)" for v in VECTORIZATIONS)
            print(f"{task:<22}{n:>6}{cells}", flush=True)
            results.append({"suite": "gymnasium", "task": task, "num_envs": n, "env_steps_per_s": rates})
    return results


def process_tree_pss_mb(pid: int | None = None) -> float:
    """Proportional set size of a process and all its descendants (shared pages split
    between their users, so forked workers are not counted twice), in MB. Linux only:
    0 where /proc has no smaps_rollup."""
    pid = pid or os.getpid()
    total = 0.0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) / 1024
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                total += sum(process_tree_pss_mb(int(child)) for child in f.read().split())
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        pass
    return total


def bench_humanoid_bench(args) -> list[dict]:
    """Shared-memory workers vs SB3 pipes: env steps/s, start time, memory of the process tree."""
    from envs.humanoid_bench import HumanoidBenchVecEnv

    args.tasks = args.tasks or ["h1hand-walk-v0"]
    names = {"processes": "shared memory", "subproc": "SB3 pipes"}
    results = []
    print(f"{'task':<18}{'envs':>6}{'transport':>15}{'env steps/s':>13}{'vs SB3':>8}{'start':>8}{'memory':>10}")
    for task in args.tasks:
        for n in args.num_envs:
            rows = {}
            for vectorization in args.transports:
                start = time.perf_counter()
                env = HumanoidBenchVecEnv(task, n, vectorization=vectorization)
                started = time.perf_counter() - start
                try:
                    env.reset()
                    memory = process_tree_pss_mb()
                    rate = stepped_rate(env, args.seconds)
                finally:
                    env.close()
                rows[vectorization] = {"env_steps_per_s": rate, "start_s": started, "memory_mb": memory}
            for vectorization, row in rows.items():
                ratio = row["env_steps_per_s"] / rows["subproc"]["env_steps_per_s"] if "subproc" in rows else float("nan")
                print(f"{task:<18}{n:>6}{names[vectorization]:>15}{row['env_steps_per_s']:>13.0f}{ratio:>7.2f}x"
                      f"{row['start_s']:>7.1f}s{row['memory_mb'] / 1024:>8.1f}GB", flush=True)
                results.append({"suite": "humanoid_bench", "task": task, "num_envs": n,
                                "vectorization": vectorization, **row})
    return results


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=["gymnasium", "playground", "humanoid_bench"], default="gymnasium")
    parser.add_argument("--tasks", nargs="+", default=None)
    parser.add_argument("--num-envs", nargs="+", type=whole(1, 65536), default=None,
                        help="default: 4 16 64 (humanoid_bench: 32; SB3 pipes need > 24 GB at 128)")
    parser.add_argument("--seconds", type=number(0, SECONDS_MAX), default=2.0)
    parser.add_argument("--transports", nargs="+", default=["processes", "subproc"], choices=["processes", "subproc"],
                        help="humanoid_bench: processes (shared memory) and/or subproc (SB3 pipes)")
    parser.add_argument("--device", default="cpu", help="playground: torch device (cpu, cuda)")
    parser.add_argument("--json", type=file_out(), default=None, help="also write the results to this file")
    args = parser.parse_args()

    args.num_envs = args.num_envs or ([32] if args.suite == "humanoid_bench" else [4, 16, 64])
    bench = {"playground": bench_playground, "humanoid_bench": bench_humanoid_bench}.get(args.suite, bench_gymnasium)
    results = bench(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
