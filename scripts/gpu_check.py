"""The one prepared GPU check: the update at the reference's size, T1 training for a fixed wall
time, the hot path's launch and sync counts, and a T1LowDim policy through export and the
sim-to-sim gate. One command, JSON plus a markdown table; at most about 10 minutes on one GPU.

    python scripts/gpu_check.py                                  # on the first CUDA device
    python scripts/gpu_check.py --seconds 240 --json gpu.json --markdown gpu.md
    python scripts/gpu_check.py --device cpu --tiny              # the same path at toy sizes (CI, < 3 min)

What it measures, each in this one run:
1. **Update**: updates/s of one FastTD3 update at the reference's size (batch 32768, critic
   1024-512-256 x2 -> 101 atoms, actor 512-256-128, T1 shapes, compiled, `precision=auto`),
   its FLOPs (torch's FLOP counter) and the FLOP utilisation against the card's data-sheet
   dense bf16 peak (`scripts/bench.py`'s table; a measured matmul peak on CPUs/unknown cards).
2. **Training**: `T1JoystickFlatTerrain` at the reference's settings (1024 envs, batch 32768,
   compiled) for `--seconds` of wall time, in chunks that each end with an evaluation: global
   steps/s and env steps/s (chunks after the first, which fills the buffer and compiles), the
   eval-return curve, then one more chunk timed per phase (env, act, store, sample, update,
   log; device-synchronised, so it reads as shares, not as throughput).
3. **Hot path**: aten launches per steady-state global step outside the env (collect, sample,
   update) and host syncs outside the env (`fast_td3/analysis/hot_path.py`; the test pins them).
4. **Peak memory** of the device (and the host process).
5. **Sim-to-sim**: the T1 recipe (`recipe=t1`) at the GPU's sizes (`sizing=gpu`: 4096 envs,
   FastSAC with the mirror, compiled; never measured before a GPU runs it) trained for 300 global
   steps on this device, exported, and run through `fast-td3-sim2sim` (5 s segments; a policy this
   young is expected to fail the gate, the check is that the chain runs), and the shipped `sim2real/pretrained/t1_flat`
   bundle through the full gate (expected to pass).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench  # noqa: E402
from bench_update import synchronize  # noqa: E402

from fast_td3.learner.precision import cpu_model  # noqa: E402
from fast_td3.command_line import SECONDS_MAX, STEPS_MAX, ArgumentParser, file_out, number, whole

REFERENCE = ["task=T1JoystickFlatTerrain", "algo.compile=true", "logger.console=false", "eval_episodes=128",
             "save_interval=0", "eval_interval=0"]
"""T1 at the reference's settings: the Playground suite's 1024 envs, batch 32768, full networks."""
TINY = ["task=T1JoystickFlatTerrain", "sizing=cpu", "env.num_envs=4", "algo.batch_size=64", "algo.buffer_size=64",
        "algo.learning_starts=4", "env.max_episode_steps=20", "eval_episodes=2", "logger.console=false",
        "save_interval=0", "eval_interval=0"]
TINY_UPDATE = dict(batch_size=256, actor_hidden_dims=[64, 64], critic_hidden_dims=[64, 64], compile=False)


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from fast_td3.training.train import CONF_DIR  # importing train registers the schema and resolvers

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_object(hydra_compose("train", overrides))


def check_updates(device: torch.device, tiny: bool, seconds: float) -> dict:
    name = "tiny" if tiny else "suite default"
    if tiny:
        bench.SIZES["tiny"] = TINY_UPDATE
    (row,) = bench.bench_updates([name], device, seconds)
    peak, source = bench.peak_flops(device, torch.bfloat16 if row["precision"] == "bf16" else torch.float32)
    row.update(peak_flop_per_s=peak, peak_source=source, utilisation=row["flop_per_s"] / peak)
    return row


def check_training(device: torch.device, tiny: bool, seconds: float, chunk_steps: int, run_dir: Path) -> dict:
    from fast_td3.analysis.hot_path import count_global_steps
    from fast_td3.analysis.phase_clock import PhaseClock
    from fast_td3.training.runner import Runner

    # the cap: as many chunks as `seconds` could hold at 1000 steps/s, and the shares' chunk
    total = chunk_steps * (2 + max(1, int(seconds * 1000 / chunk_steps)))
    cfg = compose((TINY if tiny else REFERENCE) + [f"device={device}", f"total_steps={total}"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    curve, timed_steps, timed_seconds = [], 0, 0.0
    with Runner.from_config(cfg, run_dir, say=lambda *args, **kwargs: None) as runner:
        start = time.perf_counter()
        first = runner.train(until_step=chunk_steps)  # fills the buffer, compiles; ends with an evaluation
        curve.append({"step": runner.global_step, "seconds": time.perf_counter() - start,
                      "eval_return": first.get("eval/return_mean")})
        while time.perf_counter() - start < seconds and runner.global_step + 2 * chunk_steps <= total:
            synchronize(device)
            chunk_start = time.perf_counter()
            result = runner.train(until_step=runner.global_step + chunk_steps)
            synchronize(device)
            timed_seconds += time.perf_counter() - chunk_start
            timed_steps += chunk_steps
            curve.append({"step": runner.global_step, "seconds": time.perf_counter() - start,
                          "eval_return": result.get("eval/return_mean")})
        clock = PhaseClock(device)
        split_start = time.perf_counter()
        runner.train(until_step=runner.global_step + chunk_steps, hooks=[clock])
        split_wall = time.perf_counter() - split_start
        try:  # under a dispatch mode compiled code may run differently; a failure here must not lose the rest
            counts = count_global_steps(runner, steps=3, warmup=2)
            hot_path = {"ops_per_step": {k: v / 3 for k, v in counts.ops.items()}, "host_syncs": counts.syncs}
        except Exception as error:  # noqa: BLE001
            hot_path = {"ops_per_step": {}, "host_syncs": [], "error": f"{type(error).__name__}: {error}"[:300]}
    shares = clock.shares(split_wall, other="other (reset)")
    rate = timed_steps / timed_seconds if timed_seconds else float("nan")
    memory = bench.peak_memory_mb(device)
    return {"task": cfg.env.task, "backend": cfg.env.options.get("backend"), "envs": cfg.env.num_envs,
            "batch": cfg.algo.batch_size, "compiled": cfg.algo.compile, "precision": runner.agent.precision.name,
            "global_steps_per_s": rate, "env_steps_per_s": rate * cfg.env.num_envs, "timed_steps": timed_steps,
            "curve": curve, "time_shares": shares, **memory,
            "hot_path": hot_path}


def check_sim2sim(device: torch.device, tiny: bool, run_dir: Path) -> dict:
    from fast_td3.training.runner import Runner
    from sim2real import sim2sim, t1_bundle
    from sim2real.export import export_bundle

    steps = 20 if tiny else 300
    # the T1 recipe at the GPU's sizes (conf/recipe_sizing/t1_gpu.yaml); its gate runs here after
    cfg = compose(["recipe=t1", f"sizing={'cpu' if tiny else 'gpu'}", "gate=off", f"device={device}",
                   f"total_steps={steps}", "eval_interval=0", "save_interval=0", "logger.console=false"]
                  + (["env.num_envs=2", "algo.batch_size=32", "algo.learning_starts=5", "algo.compile=false"]
                     if tiny else []))
    with Runner.from_config(cfg, run_dir, evaluation=False, say=lambda *args, **kwargs: None) as runner:
        runner.train()
    start = time.perf_counter()
    bundle = export_bundle(run_dir, run_dir / "bundle")
    trained = sim2sim.run(t1_bundle.load_bundle(bundle), seconds=5.0)
    shipped = sim2sim.run(t1_bundle.load_bundle(t1_bundle.PRETRAINED / "t1_flat"), seconds=5.0 if tiny else 20.0)
    return {"task": cfg.env.task, "backend": cfg.env.options.get("backend"), "steps": steps,
            "envs": cfg.env.num_envs, "batch": cfg.algo.batch_size, "algo": cfg.algo.name,
            "export_and_gate_s": time.perf_counter() - start,
            "trained_gate_passed": trained.passed, "trained_seconds_walked": trained.seconds_walked,
            "shipped_gate_passed": shipped.passed, "shipped_seconds_walked": shipped.seconds_walked}


def thinned(curve: list[dict], points: int = 8) -> list[dict]:
    """At most `points` evaluations of the curve, evenly spaced, the last always among them."""
    curve = [p for p in curve if p["eval_return"] is not None]
    if len(curve) <= points:
        return curve
    return [curve[round(i * (len(curve) - 1) / (points - 1))] for i in range(points)]


def markdown(report: dict) -> str:
    u, t, s = report["update"], report["training"], report["sim2sim"]
    lines = [f"**{report['device_name']}** ({report['device']}), torch {report['torch']}, {report['date']}"
             f"{', TINY sizes' if report['tiny'] else ''}", "",
             "| check | result |", "|---|---|",
             f"| update ({u['size']}, batch {u['batch']}, {'compiled' if u['compiled'] else 'eager'}, {u['precision']}) "
             f"| {u['updates_per_s']:.1f} updates/s, {u['flops_per_update'] / 1e9:.1f} GFLOP/update, "
             f"{u['flop_per_s'] / 1e12:.2f} TFLOP/s = {u['utilisation']:.1%} of {u['peak_flop_per_s'] / 1e12:.3g} "
             f"TFLOP/s ({u['peak_source']}) |",
             f"| training {t['task']} ({t['backend'] or 'mjx'}, {t['envs']} envs, batch {t['batch']}) "
             f"| {t['global_steps_per_s']:.1f} global steps/s, {t['env_steps_per_s']:.0f} env steps/s "
             f"over {t['timed_steps']} steps |",
             "| time split | " + ", ".join(f"{k} {v:.0%}" for k, v in t["time_shares"].items()) + " |",
             "| eval return | " + ", ".join(f"{p['eval_return']:.2f} @ {p['step']} ({p['seconds']:.0f} s)"
                                           for p in thinned(t["curve"])) + " |",
             "| hot path per global step | " + ", ".join(f"{k} {v:.0f} launches" for k, v in
                                                         t["hot_path"]["ops_per_step"].items())
             + f", {len(t['hot_path']['host_syncs'])} host syncs outside the env"
             + (f" (count failed: {t['hot_path']['error']})" if "error" in t["hot_path"] else "") + " |",
             f"| peak memory | device {t.get('device_peak_mb', float('nan')):.0f} MB, host {t['host_peak_mb']:.0f} MB |",
             f"| sim-to-sim | recipe=t1 ({s['task']}, {s['algo']}, {s['envs']} envs, batch {s['batch']}) after "
             f"{s['steps']} steps: exported and gated in {s['export_and_gate_s']:.1f} s "
             f"(passed: {s['trained_gate_passed']}, {s['trained_seconds_walked']:.1f} s walked); shipped t1_flat "
             f"passed: {s['shipped_gate_passed']} |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="toy sizes: the same path in under 3 minutes on a CPU")
    parser.add_argument("--seconds", type=number(0, SECONDS_MAX), default=None, help="training wall time (default 240; tiny 15)")
    parser.add_argument("--chunk-steps", type=whole(1, STEPS_MAX), default=None, help="global steps per training chunk")
    parser.add_argument("--json", type=file_out(), default=None)
    parser.add_argument("--markdown", type=file_out(), default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    seconds = args.seconds if args.seconds is not None else (15.0 if args.tiny else 240.0)
    chunk = args.chunk_steps or (20 if args.tiny else 500)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    report = {"device": str(device), "device_name": name, "torch": torch.__version__, "tiny": args.tiny,
              "date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as folder:
        report["update"] = check_updates(device, args.tiny, 1.0 if args.tiny else 5.0)
        print(f"update: {report['update']['updates_per_s']:.1f} updates/s", flush=True)
        report["training"] = check_training(device, args.tiny, seconds, chunk, Path(folder) / "train")
        print(f"training: {report['training']['global_steps_per_s']:.1f} global steps/s", flush=True)
        report["sim2sim"] = check_sim2sim(device, args.tiny, Path(folder) / "t1lowdim")
    table = markdown(report)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    if args.markdown:
        args.markdown.write_text(table + "\n")
    print(json.dumps({"gpu_check": "done", "device": name, "tiny": args.tiny,
                      "host_syncs": len(report["training"]["hot_path"]["host_syncs"]),
                      "shipped_gate_passed": report["sim2sim"]["shipped_gate_passed"]}))
    return report


if __name__ == "__main__":
    main()
