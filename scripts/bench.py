"""One run, one device: where the time goes and how close the update is to the hardware.

    python scripts/bench.py                      # the table; about 6 minutes on 2 CPU cores
    python scripts/bench.py --quick              # preset=cpu sizes only
    python scripts/bench.py --json bench.json    # also the numbers as JSON, for tracking

Reports, all measured in this run on the current device:
- learner updates/s (one critic update; the actor on every second, as in training) at the
  suite default sizes (batch 32768, reference networks, compiled) and at `preset=cpu`
  (batch 2048, small networks, eager), with the FLOPs of one update (counted by torch's
  FLOP counter) and the achieved FLOP/s against the device's peak;
- env steps/s of every installed suite through its adapter (random actions);
- an end-to-end training run (`--task`, `preset=cpu`): global steps/s after a warm-up, then
  in a second stretch of the same length (timed per phase, with device syncs on a GPU) the
  share of its wall time spent stepping envs, acting, storing, sampling, updating and
  logging ("other" includes the stretch's env reset and final checkpoint);
- peak memory of this process (host) and of the device.

The peak FLOP/s assumed: on a GPU the vendor's dense bf16 figure for the named card; on a
CPU (and unknown GPUs) the rate of a large bf16 matmul measured here, the best this
machine's matmul kernels reach, so "utilisation" reads as a fraction of what is achievable.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_envs import stepped_rate  # noqa: E402
from bench_update import PLAYGROUND_SPEC, synchronize, synthetic_batch  # noqa: E402

from fast_td3.learner.algorithms.fast_td3 import FastTD3  # noqa: E402
from fast_td3.learner.config import AlgoConfig  # noqa: E402
from fast_td3.learner.precision import cpu_model, resolve_precision  # noqa: E402

GPU_BF16_PEAK_TFLOPS = {"A100": 312.0, "H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "L40S": 362.0,
                        "RTX 4090": 165.0, "A10": 125.0}
"""Dense bf16 tensor-core peaks from the vendors' data sheets, by a substring of the card's
name (the first match wins, so the PCIe H100 comes before the SXM one)."""
PRESET_CPU = dict(batch_size=2048, actor_hidden_dims=[256, 128], critic_hidden_dims=[256, 256])
SIZES = {
    "suite default": dict(batch_size=32768, compile=True),
    "preset=cpu": dict(PRESET_CPU, compile=False),
    "preset=cpu, compiled": dict(PRESET_CPU, compile=True),  # why the preset stays eager on a CPU
}
SUITE_PROBES = [  # suite, package, task, envs
    ("gymnasium", "gymnasium", "HalfCheetah-v5", 16),
    ("playground", "mujoco_playground", "CheetahRun", 64),
    ("humanoid_bench", "humanoid_bench", "h1hand-walk-v0", 16),
    ("mjlab", "mjlab", "Mjlab-Velocity-Flat-Unitree-G1", 4),
    ("isaaclab", "isaaclab", "Isaac-Velocity-Flat-H1-v0", 64),
]


def peak_flops(device: torch.device) -> tuple[float, str]:
    """(FLOP/s, where the number comes from)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, tflops in GPU_BF16_PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12, f"{name}: data-sheet dense bf16 peak"
    best, best_n = 0.0, 0
    for n in ((1024, 2048, 4096) if device.type == "cpu" else (4096, 8192)):
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        a @ b
        synchronize(device)
        reps, start = 0, time.perf_counter()
        while reps < 2 or time.perf_counter() - start < 1.0:
            a @ b
            reps += 1
        synchronize(device)
        rate = 2 * n**3 * reps / (time.perf_counter() - start)
        if rate > best:
            best, best_n = rate, n
    return best, f"measured: the fastest of several square bf16 matmuls here ({best_n}x{best_n})"


def update_flops(cfg: AlgoConfig, batch, device: torch.device) -> float:
    """FLOPs of one critic update plus half an actor update (the training mix), counted eagerly."""
    from torch.utils.flop_counter import FlopCounterMode

    agent = FastTD3(dataclasses.replace(cfg, compile=False), PLAYGROUND_SPEC, device=device)
    counts = []
    for _ in range(2):  # the first update has the actor off, the second on (policy_frequency 2)
        with FlopCounterMode(display=False) as counter:
            agent.update(batch)
        counts.append(counter.get_total_flops())
    return sum(counts) / 2


def bench_updates(sizes: list[str], device: torch.device, seconds: float) -> list[dict]:
    rows = []
    for name in sizes:
        torch._dynamo.reset()
        cfg = AlgoConfig(precision="auto", **SIZES[name])
        batch = synthetic_batch(cfg.batch_size, device)
        agent = FastTD3(cfg, PLAYGROUND_SPEC, device=device).compile_update()
        start = time.perf_counter()
        for _ in range(6):  # compilation; under CUDA graphs each variant records on a later call
            agent.update(batch)
        synchronize(device)
        warmup = time.perf_counter() - start
        updates, start = 0, time.perf_counter()
        while updates < 4 or time.perf_counter() - start < seconds:
            agent.update(batch)
            updates += 1
        synchronize(device)
        rate = updates / (time.perf_counter() - start)
        flops = update_flops(cfg, batch, device)
        rows.append({"size": name, "batch": cfg.batch_size, "compiled": cfg.compile, "precision": agent.precision.name,
                     "updates_per_s": rate,
                     "warmup_s": warmup, "flops_per_update": flops, "flop_per_s": flops * rate})
    return rows


def bench_suites(device: torch.device, seconds: float) -> list[dict]:
    from envs.registry import make_env

    rows = []
    for suite, package, task, num_envs in SUITE_PROBES:
        row = {"suite": suite, "task": task, "envs": num_envs, "env_steps_per_s": None}
        rows.append(row)
        if importlib.util.find_spec(package) is None:
            row["note"] = f"{package} not installed"
            continue
        start = time.perf_counter()
        try:
            env = make_env(suite, task, num_envs, 0, device)
            try:
                env.reset()
                row["env_steps_per_s"] = stepped_rate(env, seconds)
            finally:
                env.close()
        except Exception as error:  # one suite failing must not lose the rest of the report
            row["note"] = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
        row["build_and_measure_s"] = time.perf_counter() - start
    return rows


class PhaseClock:
    """Wall time per phase of the training loop, by wrapping the methods the runner calls
    (device-synchronised on a GPU, so each phase is charged its own kernels)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)

    PHASES = (("env", "step", "env step"), ("agent", "act", "act"), ("buffer", "extend", "store"),
              ("buffer", "sample_many", "replay sampling"), ("agent", "update", "update"), (None, "log", "logging"))
    """(the runner's attribute holding the object or None for the runner, method, phase name)."""

    def wrap_runner(self, runner) -> None:
        """Time every phase of a `Runner`'s loop."""
        for owner, method, phase in self.PHASES:
            self.wrap(getattr(runner, owner) if owner else runner, method, phase)

    def unwrap_runner(self, runner) -> None:
        """Undo `wrap_runner` (the wrappers are instance attributes in front of the methods)."""
        for owner, method, _ in self.PHASES:
            (getattr(runner, owner) if owner else runner).__dict__.pop(method, None)

    def wrap(self, owner, method: str, phase: str) -> None:
        inner = getattr(owner, method)
        self.seconds.setdefault(phase, 0.0)  # reported even when the run never reaches it

        def timed(*args, **kwargs):
            synchronize(self.device)
            start = time.perf_counter()
            result = inner(*args, **kwargs)
            synchronize(self.device)
            self.seconds[phase] += time.perf_counter() - start
            return result

        setattr(owner, method, timed)


def bench_training(task: str, device: torch.device, warmup_steps: int, steps: int) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from envs.registry import make_env
    from fast_td3.training.runner import Runner
    from fast_td3.training.train import CONF_DIR  # importing train registers the schema and resolvers

    overrides = [f"task={task}", "preset=cpu", "logger.console=false", "eval_interval=0", "save_interval=0",
                 f"total_steps={warmup_steps}", f"device={device}"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides))
    env = make_env(cfg.env.suite, cfg.env.task, cfg.env.num_envs, cfg.seed, device, **cfg.env.adapter_options())
    with tempfile.TemporaryDirectory() as run_dir:
        runner = Runner(cfg, env, None, Path(run_dir))
        try:
            runner.train()  # warm-up: buffer filling, first updates, compilation
            runner.cfg.total_steps += steps
            start = time.perf_counter()
            runner.train()  # throughput, without the clock's device syncs
            wall = time.perf_counter() - start
            clock = PhaseClock(device)
            clock.wrap_runner(runner)
            runner.cfg.total_steps += steps
            start = time.perf_counter()
            runner.train()  # where the time goes
            clocked = time.perf_counter() - start
        finally:
            env.close()
    shares = {phase: s / clocked for phase, s in clock.seconds.items()}
    shares["other"] = max(0.0, 1.0 - sum(shares.values()))
    return {"task": task, "envs": cfg.env.num_envs, "batch": cfg.algo.batch_size, "steps": steps,
            "global_steps_per_s": steps / wall, "env_steps_per_s": steps * cfg.env.num_envs / wall,
            "time_shares": shares}


def peak_memory_mb(device: torch.device) -> dict:
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    out = {"host_peak_mb": host}
    if device.type == "cuda":
        out["device_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="preset=cpu sizes only (no full-size compile)")
    parser.add_argument("--task", default="HalfCheetah-v5", help="task of the end-to-end run (preset=cpu)")
    parser.add_argument("--steps", type=int, default=300, help="measured global steps of the end-to-end run")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed span per rate")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)

    peak, peak_source = peak_flops(device)
    sizes = ["preset=cpu"] if args.quick else list(SIZES)
    updates = bench_updates(sizes, device, args.seconds)
    suites = bench_suites(device, args.seconds)
    training = bench_training(args.task, device, warmup_steps=60, steps=args.steps)
    memory = peak_memory_mb(device)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    print(f"Device: {device} ({name}), torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"algo.precision=auto resolves to {resolve_precision('auto', device)}")
    print(f"Peak assumed: {peak / 1e12:.2f} TFLOP/s bf16 ({peak_source})\n")
    print("| learner | batch | updates/s | GFLOP/update | achieved TFLOP/s | of peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in updates:
        print(f"| {r['size']} ({'compiled' if r['compiled'] else 'eager'}, {r['precision']}) | {r['batch']} | "
              f"{r['updates_per_s']:.2f} | {r['flops_per_update'] / 1e9:.2f} | {r['flop_per_s'] / 1e12:.3f} | "
              f"{r['flop_per_s'] / peak:.1%} |")
    print("\n| suite | task | envs | env steps/s |\n|---|---|---:|---:|")
    for r in suites:
        rate = f"{r['env_steps_per_s']:.0f}" if r["env_steps_per_s"] is not None else r["note"]
        print(f"| {r['suite']} | {r['task']} | {r['envs']} | {rate} |")
    t = training
    print(f"\nEnd to end, {t['task']} preset=cpu ({t['envs']} envs, batch {t['batch']}): "
          f"{t['global_steps_per_s']:.1f} global steps/s ({t['env_steps_per_s']:.0f} env steps/s) over {t['steps']} steps")
    print("| phase | share of wall time |\n|---|---:|")
    for phase, share in sorted(t["time_shares"].items(), key=lambda kv: -kv[1]):
        print(f"| {phase} | {share:.1%} |")
    print(f"\nPeak memory of this benchmark process (all of the above): host {memory['host_peak_mb']:.0f} MB"
          + (f", device {memory['device_peak_mb']:.0f} MB" if "device_peak_mb" in memory else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": str(device), "device_name": name, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "peak_flop_per_s": peak, "peak_source": peak_source, "updates": updates, "suites": suites,
            "training": training, "memory": memory}, indent=2))


if __name__ == "__main__":
    main()
