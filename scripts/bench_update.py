"""Benchmark the FastTD3 update on the current device.

Prints critic+actor update steps per second for several batch sizes under
eager fp32, eager bf16, compiled fp32 and compiled bf16, each as a ratio to
eager fp32 measured in the same run, then the replay-buffer memory of a
MuJoCo-Playground-sized task under each storage option.

One "update step" is one critic update plus one actor update on the same
batch (policy_frequency=1), with the reference network sizes.

    python scripts/bench_update.py                      # 1k / 4k / 32k, all modes
    python scripts/bench_update.py --batch-sizes 4096 --min-seconds 5 --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from envs.protocol import EnvSpec
from fast_td3.learner.algorithms.fast_td3 import FastTD3
from fast_td3.learner.config import AlgoConfig
from fast_td3.learner.precision import cpu_model, resolve_precision
from fast_td3.learner.replay import ReplayBuffer
from fast_td3.analysis.phase_clock import synchronize  # noqa: F401 (bench.py and gpu_check.py import it from here)
from fast_td3.command_line import SECONDS_MAX, ArgumentParser, file_out, number, whole

MODES = {  # name -> (precision, compile)
    "eager fp32": ("fp32", False),
    "eager bf16": ("bf16", False),
    "compiled fp32": ("fp32", True),
    "compiled bf16": ("bf16", True),
}
# T1JoystickFlatTerrain on MuJoCo Playground: actor obs, critic obs, actions, envs, steps per env.
PLAYGROUND_SHAPES = dict(num_obs=85, num_critic_obs=180, num_actions=23, num_envs=1024, capacity=10240)
PLAYGROUND_SPEC = EnvSpec(**{k: v for k, v in PLAYGROUND_SHAPES.items() if k != "capacity"})


def synthetic_batch(batch_size: int, device: torch.device) -> dict:
    shapes = PLAYGROUND_SHAPES
    num_envs = min(shapes["num_envs"], batch_size)
    buffer = ReplayBuffer(dataclasses.replace(PLAYGROUND_SPEC, num_envs=num_envs), 8, critic_obs_extends_actor_obs=True,
                          device=device)
    for _ in range(8):
        obs = torch.randn(num_envs, shapes["num_obs"], device=device)
        critic = torch.cat([obs, torch.randn(num_envs, shapes["num_critic_obs"] - shapes["num_obs"], device=device)], -1)
        buffer.extend(
            dict(
                observations=obs, next_observations=obs, critic_observations=critic, next_critic_observations=critic,
                actions=torch.rand(num_envs, shapes["num_actions"], device=device) * 2 - 1,
                rewards=torch.randn(num_envs, device=device),
                terminated=torch.zeros(num_envs, dtype=torch.bool, device=device),
                truncated=torch.zeros(num_envs, dtype=torch.bool, device=device),
            )
        )
    return buffer.sample(batch_size)


def time_mode(batch, precision: str, compile_: bool, device: torch.device, min_seconds: float, min_iters: int):
    """Update steps per second after a warm-up that includes compilation."""
    torch._dynamo.reset()  # a fresh compile per shape, never a dynamic-shape fallback
    cfg = AlgoConfig(precision=precision, compile=compile_, policy_frequency=1, batch_size=batch.shape[0])
    agent = FastTD3(cfg, PLAYGROUND_SPEC, device=device).compile_update()
    start = time.perf_counter()
    for _ in range(2):
        metrics = agent.update(batch)
    synchronize(device)
    warmup = time.perf_counter() - start
    iters, start = 0, time.perf_counter()
    while iters < min_iters or time.perf_counter() - start < min_seconds:
        metrics = agent.update(batch)
        iters += 1
    synchronize(device)
    elapsed = time.perf_counter() - start
    assert torch.isfinite(metrics["critic_loss"]) and torch.isfinite(metrics["actor_loss"])
    return iters / elapsed, warmup


def replay_memory_report() -> list[dict]:
    s = PLAYGROUND_SHAPES
    layouts = {
        "full critic obs, fp32 (reference layout)": dict(critic_obs_extends_actor_obs=False, obs_dtype=torch.float32),
        "privileged tail only, fp32": dict(critic_obs_extends_actor_obs=True, obs_dtype=torch.float32),
        "privileged tail only, bf16 obs": dict(critic_obs_extends_actor_obs=True, obs_dtype=torch.bfloat16),
    }
    rows = []
    for name, options in layouts.items():
        buffer = ReplayBuffer(PLAYGROUND_SPEC, s["capacity"], device="meta", **options)
        rows.append({"layout": name, "bytes": buffer.memory_bytes()})
    return rows


def bf16_over_fp32(results: list[dict], compile_: bool) -> dict[int, float]:
    """bf16 steps/s over fp32 steps/s per batch size, for eager or compiled modes."""
    kind = "compiled" if compile_ else "eager"
    rates = {(r["batch_size"], r["mode"]): r["steps_per_s"] for r in results}
    return {b: rates[(b, f"{kind} bf16")] / rates[(b, f"{kind} fp32")]
            for b, m in rates if m == f"{kind} fp32" and (b, f"{kind} bf16") in rates}


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=whole(1, 2**20), nargs="+", default=[1024, 4096, 32768])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--min-seconds", type=number(0, SECONDS_MAX), default=3.0, help="timed span per measurement")
    parser.add_argument("--min-iters", type=whole(1, 10**6), default=3, help="timed updates per measurement, at least")
    parser.add_argument("--json", type=file_out(), help="also write the results to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    if "eager fp32" not in args.modes:
        args.modes.insert(0, "eager fp32")  # the baseline every ratio refers to

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    auto = resolve_precision("auto", device)
    print(f"device: {device} ({name}); torch {torch.__version__}; threads {torch.get_num_threads()}")
    print(f"algo.precision=auto resolves to {auto}")
    print("update step = 1 critic + 1 actor update; networks 1024-512-256 x2 (101 atoms) / 512-256-128;"
          f" obs {PLAYGROUND_SHAPES['num_obs']}, critic obs {PLAYGROUND_SHAPES['num_critic_obs']},"
          f" actions {PLAYGROUND_SHAPES['num_actions']}\n")
    results = []
    header = f"{'batch':>6}  {'mode':<14} {'steps/s':>9} {'ms/step':>9} {'vs eager fp32':>14} {'warm-up s':>10}"
    print(header)
    print("-" * len(header))
    for batch_size in args.batch_sizes:
        batch = synthetic_batch(batch_size, device)
        baseline = None
        for mode in args.modes:
            precision, compile_ = MODES[mode]
            rate, warmup = time_mode(batch, precision, compile_, device, args.min_seconds, args.min_iters)
            baseline = baseline or rate
            row = dict(batch_size=batch_size, mode=mode, steps_per_s=rate, ratio=rate / baseline, warmup_s=warmup)
            results.append(row)
            print(f"{batch_size:>6}  {mode:<14} {rate:>9.2f} {1000 / rate:>9.1f} {rate / baseline:>13.2f}x {warmup:>10.1f}",
                  flush=True)

    ratios = {kind: bf16_over_fp32(results, kind == "compiled") for kind in ("eager", "compiled")}
    for kind, by_batch in ratios.items():
        if by_batch:
            print(f"\n{kind} bf16 / {kind} fp32: " + ", ".join(f"{r:.2f}x at batch {b}" for b, r in by_batch.items()))
    print(f"\nreplay memory, {PLAYGROUND_SHAPES['num_envs']} envs x {PLAYGROUND_SHAPES['capacity']} steps:")
    memory = replay_memory_report()
    for row in memory:
        print(f"  {row['layout']:<42} {row['bytes'] / 2**30:6.2f} GiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(device), "device_name": name, "auto_precision": auto.name,
                       "auto_precision_reason": auto.reason, "updates": results,
                       "bf16_over_fp32": {k: {str(b): r for b, r in v.items()} for k, v in ratios.items()},
                       "replay_memory": memory}, f, indent=2)


if __name__ == "__main__":
    main()
