"""One run, one device: where the time goes and how close the update is to the hardware.

    python scripts/bench.py                      # the table; about 6 minutes on 2 CPU cores
    python scripts/bench.py --quick              # sizing=cpu sizes only
    python scripts/bench.py --t1                 # the T1 recipe's profile only (about 4 minutes)
    python scripts/bench.py --json bench.json    # also the numbers as JSON, for tracking

Reports, all measured in this run on the current device:
- learner updates/s (one critic update; the actor on every second, as in training) at the
  suite default sizes (batch 32768, reference networks, compiled) and at `sizing=cpu`
  (batch 2048, small networks, eager), with the FLOPs of one update (counted by torch's
  FLOP counter) and the achieved FLOP/s against the device's peak;
- env steps/s of every installed suite through its adapter (random actions);
- an end-to-end training run (`--task`, `sizing=cpu`): global steps/s after a warm-up, then
  in a second stretch of the same length (timed per phase, with device syncs on a GPU) the
  share of its wall time spent stepping envs, acting, storing, sampling, updating and
  logging ("other" includes the stretch's env reset and final checkpoint);
- peak memory of this process (host) and of the device.

The peak FLOP/s assumed: on a GPU the vendor's dense bf16 figure for the named card; on a
CPU (and unknown GPUs) the rate of a large bf16 matmul measured here, the best this
machine's matmul kernels reach, so "utilisation" reads as a fraction of what is achievable.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_envs import stepped_rate  # noqa: E402
from bench_update import PLAYGROUND_SPEC, synchronize, synthetic_batch  # noqa: E402

from fast_td3.learner.algorithms.fast_td3 import FastTD3  # noqa: E402
from fast_td3.learner.config import AlgoConfig  # noqa: E402
from fast_td3.learner.precision import cpu_model, resolve_precision  # noqa: E402
from fast_td3.command_line import SECONDS_MAX, STEPS_MAX, ArgumentParser, file_out, number, whole

GPU_BF16_PEAK_TFLOPS = {"A100": 312.0, "H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "L40S": 362.0,
                        "RTX 4090": 165.0, "A10": 125.0}
"""Dense bf16 tensor-core peaks from the vendors' data sheets, by a substring of the card's
name (the first match wins, so the PCIe H100 comes before the SXM one)."""
PRESET_CPU = dict(batch_size=2048, actor_hidden_dims=[256, 128], critic_hidden_dims=[256, 256])
SIZES = {
    "suite default": dict(batch_size=32768, compile=True),
    "sizing=cpu": dict(PRESET_CPU, compile=False),
    "sizing=cpu, compiled": dict(PRESET_CPU, compile=True),  # why the preset stays eager on a CPU
}
SUITE_PROBES = [  # suite, package, task, envs
    ("gymnasium", "gymnasium", "HalfCheetah-v5", 16),
    ("playground", "mujoco_playground", "CheetahRun", 64),
    ("humanoid_bench", "humanoid_bench", "h1hand-walk-v0", 16),
    ("mjlab", "mjlab", "Mjlab-Velocity-Flat-Unitree-G1", 4),
    ("isaaclab", "isaaclab", "Isaac-Velocity-Flat-H1-v0", 64),
]


def peak_flops(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> tuple[float, str]:
    """(FLOP/s, where the number comes from) of matmuls in `dtype`."""
    if device.type == "cuda" and dtype == torch.bfloat16:
        name = torch.cuda.get_device_name(device)
        for key, tflops in GPU_BF16_PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12, f"{name}: data-sheet dense bf16 peak"
    best, best_n = 0.0, 0
    for n in ((1024, 2048, 4096) if device.type == "cpu" else (4096, 8192)):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        a @ b
        synchronize(device)
        reps, start = 0, time.perf_counter()
        while reps < 2 or time.perf_counter() - start < 1.0:
            a @ b
            reps += 1
        synchronize(device)
        seconds = time.perf_counter() - start
        rate = 2 * n**3 * reps / seconds
        if rate > best:
            best, best_n = rate, n
        if seconds / reps > 0.25:  # emulated (bf16 on an AVX2-only CPU): a larger size would take minutes
            break
    name = "bf16" if dtype == torch.bfloat16 else "fp32"
    return best, f"measured: the fastest of several square {name} matmuls here ({best_n}x{best_n})"


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


def bench_training(device: torch.device, warmup_steps: int, steps: int, run: tuple[str, ...]) -> dict:
    """A training run of `run` (its overrides: a task or recipe, a sizing): `warmup_steps` (buffer, first updates, compiling),
    then `steps` timed for the rate, then `steps` more under the phase clock for the shares."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from envs.quiet import silence_library_noise
    from fast_td3.analysis.phase_clock import PhaseClock
    from fast_td3.training.runner import Runner
    from fast_td3.training.train import CONF_DIR  # importing train registers the schema and resolvers

    overrides = [*run, "logger.console=false", "eval_interval=0", "save_interval=0",
                 f"total_steps={warmup_steps + 2 * steps}", f"device={device}"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides))
    silence_library_noise(cfg.env.suite)
    quiet = lambda *args, **kwargs: None  # noqa: E731
    with tempfile.TemporaryDirectory() as run_dir, \
            Runner.from_config(cfg, run_dir, evaluation=False, say=quiet) as runner:
        runner.train(until_step=warmup_steps)
        start = time.perf_counter()
        runner.train(until_step=warmup_steps + steps)  # throughput, without the clock's device syncs
        wall = time.perf_counter() - start
        clock = PhaseClock(device)
        start = time.perf_counter()
        runner.train(until_step=warmup_steps + 2 * steps, hooks=[clock])  # where the time goes
        clocked = time.perf_counter() - start
        flops = run_update_flops(runner)
        split = update_split(runner)
        precision = runner.agent.precision.name
    updates = steps * cfg.algo.num_updates
    return {"task": cfg.env.task, "run": " ".join(run), "envs": cfg.env.num_envs, "batch": cfg.algo.batch_size, "steps": steps,
            "algo": cfg.algo.name, "compiled": cfg.algo.compile, "precision": precision,
            "mirrored": cfg.algo.symmetry, "global_steps_per_s": steps / wall,
            "env_steps_per_s": steps * cfg.env.num_envs / wall, "updates_per_s": updates / wall,
            "flops_per_update": flops, "update_phase_flop_per_s": flops * updates / clock.seconds["update"],
            "update_split": split, "time_shares": clock.shares(clocked)}


def eager_copy(runner):
    """An eager learner with the run's state and a batch of its own replay (mirrored when the run
    mirrors), for counting and splitting the update outside the compiled function."""
    from fast_td3.learner.algorithms import make_algorithm

    agent = make_algorithm(dataclasses.replace(runner.cfg.algo, compile=False), runner.spec, runner.device)
    agent.load_training_state(runner.agent.training_state())
    (batch,) = runner.buffer.sample_many(runner.batch_size, 1, generator=torch.Generator(runner.device).manual_seed(0))
    if runner.mirror is not None:
        batch = runner.mirror(batch)
    return agent, batch


def update_split(runner, repeats: int = 8) -> dict[str, float]:
    """Shares of one eager update (the actor's every `policy_frequency`-th, as in training): the
    critic with the temperature, the actor, and the Polyak averaging of the target critic, from
    timing the update without the actor, with it, and the averaging alone."""
    agent, batch = eager_copy(runner)
    device = runner.device

    def seconds(step) -> float:
        for _ in range(2):
            step()
        synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            step()
        synchronize(device)
        return (time.perf_counter() - start) / repeats

    def update(with_actor: bool):
        for optimizer in agent.optimizers:
            optimizer.zero_grad(set_to_none=True)
        agent._update(batch, with_actor)

    without_actor = seconds(lambda: update(False))
    with_actor = seconds(lambda: update(True))
    polyak = seconds(agent._polyak_critic)
    actor_every = runner.cfg.algo.policy_frequency
    mean = without_actor + (with_actor - without_actor) / actor_every
    return {"critic and temperature": (without_actor - polyak) / mean,
            "actor": (with_actor - without_actor) / actor_every / mean, "polyak": polyak / mean,
            "eager_update_s": mean}


def run_update_flops(runner) -> float:
    """FLOPs of one of the run's updates (the mean of two: the actor's schedule), counted on an
    eager copy of its learner (`eager_copy`)."""
    from torch.utils.flop_counter import FlopCounterMode

    agent, batch = eager_copy(runner)
    counts = []
    for _ in range(2):
        with FlopCounterMode(display=False) as counter:
            agent.update(batch)
        counts.append(counter.get_total_flops())
    return sum(counts) / 2


def peak_memory_mb(device: torch.device) -> dict:
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    out = {"host_peak_mb": host}
    if device.type == "cuda":
        out["device_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


T1_RECIPE = ("recipe=t1", "sizing=cpu", "gate=off")
"""The shipped T1 recipe's run; its gate child is measured apart
(scripts/bench_gate_overhead.py), as it runs every 2000 steps, not every step."""


def print_training(t: dict, peaks: dict[str, float]) -> None:
    """The end-to-end run: rates, the update phase's FLOP/s against the peak of its precision,
    and each phase's share of the wall time."""
    print(f"\nEnd to end, {t['task']}, {t['run']} ({t['algo']}, {t['envs']} envs, batch {t['batch']}"
          f"{' + mirrored' if t['mirrored'] else ''}, {'compiled' if t['compiled'] else 'eager'} {t['precision']}): "
          f"{t['global_steps_per_s']:.2f} global steps/s ({t['env_steps_per_s']:.0f} env steps/s, "
          f"{t['updates_per_s']:.1f} updates/s) over {t['steps']} steps")
    peak = peaks[t["precision"]]
    print(f"The update: {t['flops_per_update'] / 1e9:.3f} GFLOP each; while it runs, "
          f"{t['update_phase_flop_per_s'] / 1e12:.3f} TFLOP/s = {t['update_phase_flop_per_s'] / peak:.1%} of the "
          f"measured {t['precision']} matmul peak ({peak / 1e12:.2f} TFLOP/s)")
    print("| phase | share of wall time |\n|---|---:|")
    for phase, share in sorted(t["time_shares"].items(), key=lambda kv: -kv[1]):
        print(f"| {phase} | {share:.1%} |")
    split = t["update_split"]
    print(f"The update's parts, timed eagerly ({split['eager_update_s'] * 1e3:.1f} ms per update) and applied to "
          f"the update phase's {t['time_shares']['update']:.1%}:")
    for part in ("critic and temperature", "actor", "polyak"):
        print(f"  {part}: {split[part]:.1%} of the update, {split[part] * t['time_shares']['update']:.1%} of the step")


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="sizing=cpu sizes only (no full-size compile)")
    parser.add_argument("--t1", action="store_true",
                        help="only the T1 recipe's profile (recipe=t1, gate off): about 4 minutes on 2 cores")
    parser.add_argument("--task", default="HalfCheetah-v5", help="task of the end-to-end run (sizing=cpu)")
    parser.add_argument("--steps", type=whole(1, STEPS_MAX), default=300, help="measured global steps of the end-to-end run")
    parser.add_argument("--seconds", type=number(0, SECONDS_MAX), default=3.0, help="timed span per rate")
    parser.add_argument("--json", type=file_out(), default=None)
    args = parser.parse_args()
    device = torch.device(args.device)

    peaks = {"bf16": peak_flops(device, torch.bfloat16), "fp32": peak_flops(device, torch.float32)}
    peak, peak_source = peaks["bf16"]
    updates, suites = [], []
    if args.t1:
        training = bench_training(device, warmup_steps=60, steps=args.steps, run=T1_RECIPE)
    else:
        sizes = ["sizing=cpu"] if args.quick else list(SIZES)
        updates = bench_updates(sizes, device, args.seconds)
        suites = bench_suites(device, args.seconds)
        training = bench_training(device, warmup_steps=60, steps=args.steps, run=(f"task={args.task}", "sizing=cpu"))
    memory = peak_memory_mb(device)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    print(f"Device: {device} ({name}), torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"algo.precision=auto resolves to {resolve_precision('auto', device)}")
    for precision, (rate, source) in peaks.items():
        print(f"Peak {precision}: {rate / 1e12:.2f} TFLOP/s ({source})")
    if updates:
        print("\n| learner | batch | updates/s | GFLOP/update | achieved TFLOP/s | of its precision's peak |")
        print("|---|---:|---:|---:|---:|---:|")
    for r in updates:
        print(f"| {r['size']} ({'compiled' if r['compiled'] else 'eager'}, {r['precision']}) | {r['batch']} | "
              f"{r['updates_per_s']:.2f} | {r['flops_per_update'] / 1e9:.2f} | {r['flop_per_s'] / 1e12:.3f} | "
              f"{r['flop_per_s'] / peaks[r['precision']][0]:.1%} |")
    if suites:
        print("\n| suite | task | envs | env steps/s |\n|---|---|---:|---:|")
    for r in suites:
        rate = f"{r['env_steps_per_s']:.0f}" if r["env_steps_per_s"] is not None else r["note"]
        print(f"| {r['suite']} | {r['task']} | {r['envs']} | {rate} |")
    print_training(training, {precision: rate for precision, (rate, _) in peaks.items()})
    print(f"\nPeak memory of this benchmark process (all of the above): host {memory['host_peak_mb']:.0f} MB"
          + (f", device {memory['device_peak_mb']:.0f} MB" if "device_peak_mb" in memory else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": str(device), "device_name": name, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "peak_flop_per_s": peak, "peak_source": peak_source,
            "peaks": {precision: rate for precision, (rate, _) in peaks.items()}, "updates": updates, "suites": suites,
            "training": training, "memory": memory}, indent=2))


if __name__ == "__main__":
    main()
