"""MJX vs EnvPool for the Playground humanoids, and MJX vs native MuJoCo for our T1 low-dim
env, on this machine, in one run.

    python scripts/bench_cpu_physics.py                                   # T1 and G1, 16 and 256 envs
    python scripts/bench_cpu_physics.py --tasks T1JoystickFlatTerrain --num-envs 16 --e2e-steps 300 --json cpu.json
    python scripts/bench_cpu_physics.py --only native                     # T1LowDim: native vs MJX only

Five tables, every ratio measured here in this run:
1. env steps/s through the adapters (random actions, time limits and resets included),
   EnvPool over MJX, plus the time to build the envs (MJX: cold JIT compile of reset and step);
2. two ways to handle EnvPool's next-step auto-reset, on the bare pool: a same-step
   `reset(env_ids)` (what the adapter does) against letting EnvPool spend a step on the
   reset and dropping that transition, in useful transitions/s (random actions: the
   humanoids fall every 30-50 steps, about the worst case);
3. overlap: EnvPool stepping asynchronously (send/recv) while a sizing=cpu update runs,
   against stepping and updating in turn;
4. end to end: global steps/s of `fast-td3-train task=<task> sizing=cpu` on each backend
   (the mean over the logs after the first, so MJX's compile is left out);
5. `T1LowDimJoystickFlatTerrain` (`envs/playground/t1_lowdim.py` on MJX, `envs/playground/t1_native.py` on native
   MuJoCo): env steps/s at 16, 64 and 256 envs, native over MJX (alternating bursts, the
   median of each: the load of a shared machine weighs on both alike), build times (MJX: cold
   compile), and end to end global steps/s of `sizing=cpu` on both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fast_td3.learner.precision import cpu_model  # noqa: E402
from fast_td3.command_line import SECONDS_MAX, STEPS_MAX, ArgumentParser, file_out, number, whole


def adapter_rate(task: str, num_envs: int, backend: str, seconds: float) -> dict[str, float]:
    from envs.registry import make_env

    start = time.perf_counter()
    options = {"compilation_cache": False} if backend == "mjx" else {}
    env = make_env("playground", task, num_envs, seed=0, backend=backend, **options)
    env.reset()
    g = torch.Generator().manual_seed(0)
    actions = lambda: torch.rand(num_envs, env.num_actions, generator=g) * 2 - 1  # noqa: E731
    env.step(actions())[0].cpu()  # MJX compiles step here
    build = time.perf_counter() - start
    try:
        for _ in range(5):
            env.step(actions())
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            obs = env.step(actions())[0]
            steps += 1
        obs.cpu()
        return {"env_steps_per_s": steps * num_envs / (time.perf_counter() - start), "build_s": build}
    finally:
        env.close()


def interleaved_rates(task: str, num_envs: int, seconds: float, backends=("mjx", "native"), rounds: int = 8):
    """Env steps/s of each backend, measured in `rounds` alternating bursts of `seconds / rounds`
    each, the median per backend: on a shared machine the load then weighs on both alike.
    Build times: MJX's includes a cold compile (no persistent cache)."""
    from envs.registry import make_env

    envs, rates, result = {}, {b: [] for b in backends}, {}
    g = torch.Generator().manual_seed(0)
    try:
        for backend in backends:
            start = time.perf_counter()
            options = {"compilation_cache": False} if backend == "mjx" else {}
            envs[backend] = env = make_env("playground", task, num_envs, seed=0, backend=backend, **options)
            env.reset()
            env.step(torch.rand(num_envs, env.num_actions, generator=g) * 2 - 1)[0].cpu()  # MJX compiles step here
            result[backend] = {"build_s": time.perf_counter() - start}
            for _ in range(5):
                env.step(torch.rand(num_envs, env.num_actions, generator=g) * 2 - 1)
        for _ in range(rounds):
            for backend, env in envs.items():
                steps, start = 0, time.perf_counter()
                while time.perf_counter() - start < seconds / rounds:
                    obs = env.step(torch.rand(num_envs, env.num_actions, generator=g) * 2 - 1)[0]
                    steps += 1
                obs.cpu()
                rates[backend].append(steps * num_envs / (time.perf_counter() - start))
    finally:
        for env in envs.values():
            env.close()
    for backend in backends:
        result[backend]["env_steps_per_s"] = float(np.median(rates[backend]))
    return result


def reset_strategies(task: str, num_envs: int, seconds: float) -> dict[str, float]:
    """Useful transitions/s of the bare pool: same-step `reset(env_ids)` (what the adapter
    does) vs EnvPool's next-step reset with the reset step's transition dropped."""
    import envpool

    from envs.playground.envpool import default_threads, env_seeds, envpool_id, lean_base_path

    rates = {}
    for strategy in ("same_step_reset", "next_step_reset_dropped"):
        pool = envpool.make_gymnasium(envpool_id(task), num_envs=num_envs, env_seed=env_seeds(0, num_envs),
                                      num_threads=default_threads(num_envs), base_path=lean_base_path(task))
        pool.reset()
        rng = np.random.default_rng(0)
        useful, resetting, start = 0, np.zeros(num_envs, bool), time.perf_counter()
        while time.perf_counter() - start < seconds:
            _, _, terminated, truncated, _ = pool.step(rng.uniform(-1, 1, (num_envs,) + pool.action_space.shape))
            done = terminated | truncated
            if strategy == "same_step_reset":
                useful += num_envs
                if done.any():
                    pool.reset(np.flatnonzero(done))
            else:
                useful += int((~resetting).sum())  # a resetting env's step is not a transition
                resetting = done
        rates[strategy] = useful / (time.perf_counter() - start)
        pool.close()
    return rates


def overlap(task: str, num_envs: int, seconds: float) -> dict[str, float]:
    """Global steps/s of [env step, update] in turn vs EnvPool stepping (send/recv) while
    the learner updates (sizing=cpu networks and batch, bf16, eager, T1-sized observations)."""
    import envpool

    from envs.playground.envpool import default_threads, env_seeds, envpool_id, lean_base_path
    from envs.protocol import EnvSpec
    from fast_td3.learner.algorithms.fast_td3 import FastTD3
    from fast_td3.learner.config import AlgoConfig
    from fast_td3.learner.replay import ReplayBuffer

    cfg = AlgoConfig(precision="auto", compile=False, batch_size=2048, actor_hidden_dims=[256, 128],
                     critic_hidden_dims=[256, 256])
    pool = envpool.make_gymnasium(envpool_id(task), num_envs=num_envs, batch_size=num_envs,
                                  env_seed=env_seeds(0, num_envs), num_threads=default_threads(num_envs),
                                  base_path=lean_base_path(task))
    obs, _ = pool.reset()
    num_obs, num_critic = obs["state"].shape[1], obs["privileged_state"].shape[1]
    num_actions = pool.action_space.shape[0]
    spec = EnvSpec(num_envs=num_envs, num_obs=num_obs, num_critic_obs=num_critic, num_actions=num_actions)
    agent = FastTD3(cfg, spec, device="cpu").compile_update()
    buffer = ReplayBuffer(spec, 64, critic_obs_extends_actor_obs=True)
    for _ in range(8):
        actor, critic = (torch.from_numpy(obs[k]).float() for k in ("state", "privileged_state"))
        buffer.extend({"observations": actor, "next_observations": actor, "critic_observations": critic,
                       "next_critic_observations": critic, "actions": torch.zeros(num_envs, num_actions),
                       "rewards": torch.zeros(num_envs), "terminated": torch.zeros(num_envs, dtype=torch.bool),
                       "truncated": torch.zeros(num_envs, dtype=torch.bool)})
    batch = buffer.sample(cfg.batch_size)
    rng = np.random.default_rng(0)
    actions = lambda: rng.uniform(-1, 1, (num_envs, num_actions))  # noqa: E731
    for _ in range(3):
        agent.update(batch)

    def rate(body) -> float:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            body()
            steps += 1
        return steps / (time.perf_counter() - start)

    in_turn = rate(lambda: (pool.step(actions()), agent.update(batch)))
    pool.send(actions())

    def overlapped():
        agent.update(batch)  # while EnvPool's threads step the actions sent before
        pool.recv()
        pool.send(actions())

    both = rate(overlapped)
    pool.recv()
    pool.close()
    return {"in_turn": in_turn, "overlapped": both}


def end_to_end(task: str, backend: str, steps: int, num_envs: int) -> float:
    from fast_td3.training.metrics_log import read_metrics

    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "fast_td3.training.train", f"task={task}", "sizing=cpu", f"env.num_envs={num_envs}",
                   f"env.options.backend={backend}", f"total_steps={steps}", f"logger.log_interval={steps // 5}",
                   f"eval_interval={steps * 10}", f"save_interval={steps * 10}", "logger.console=false",
                   f"out_dir={out}"]
        subprocess.run(command, check=True, cwd=ROOT, capture_output=True)
        (run_dir,) = (Path(out) / task).iterdir()
        rates = [r["perf/global_steps_per_s"] for r in read_metrics(run_dir) if "perf/global_steps_per_s" in r]
    return float(np.mean(rates[1:] or rates))


def native_vs_mjx(args, results) -> None:
    """Table 5: the T1 low-dim env on native MuJoCo against MJX."""
    print()
    adapter_table(args, results["native"], args.native_tasks, args.native_num_envs, "native", interleaved_rates)
    end_to_end_table(args, results["native_end_to_end"], args.native_tasks, "native")


def adapter_table(args, rows: list, tasks: list[str], counts: list[int], backend: str, measure=None) -> None:
    """Env steps/s through the adapters on MJX and on `backend`, their ratio, and build times
    (`measure(task, n, seconds)` gives both at once, else one after the other)."""
    print(f"{'task':<30}{'envs':>6}{'MJX steps/s':>13}{backend + ' steps/s':>17}{'ratio':>8}{'MJX build':>11}"
          f"{backend + ' build':>15}")
    for task in tasks:
        for n in counts:
            if measure is not None:
                both = measure(task, n, args.seconds)
                mjx, other = both["mjx"], both[backend]
            else:
                mjx, other = (adapter_rate(task, n, b, args.seconds) for b in ("mjx", backend))
            ratio = other["env_steps_per_s"] / mjx["env_steps_per_s"]
            print(f"{task:<30}{n:>6}{mjx['env_steps_per_s']:>13.0f}{other['env_steps_per_s']:>17.0f}{ratio:>7.2f}x"
                  f"{mjx['build_s']:>10.1f}s{other['build_s']:>14.1f}s", flush=True)
            rows.append({"task": task, "num_envs": n, "mjx": mjx, backend: other, "ratio": ratio})


def ratio_table(args, results, section, measure, keys, titles, note, number) -> None:
    """One table of `measure(task, num_envs, seconds)` per task and env count: the two rates
    under `keys` and their ratio (keys[0] / keys[1]), also appended to results[section]."""
    if section in args.skip:
        return
    width = [max(14, len(t) + 2) for t in titles]
    print(f"\n{'task':<24}{'envs':>6}{titles[0]:>{width[0]}}{titles[1]:>{width[1]}}{'ratio':>8}{note}")
    for task in args.tasks:
        for n in args.num_envs:
            r = measure(task, n, args.seconds)
            ratio = r[keys[0]] / r[keys[1]]
            print(f"{task:<24}{n:>6}{r[keys[0]]:>{width[0]}{number}}{r[keys[1]]:>{width[1]}{number}}{ratio:>7.2f}x",
                  flush=True)
            results[section].append({"task": task, "num_envs": n, **r, "ratio": ratio})


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["T1JoystickFlatTerrain", "G1JoystickFlatTerrain"])
    parser.add_argument("--num-envs", nargs="+", type=whole(1, 65536), default=[16, 256])
    parser.add_argument("--seconds", type=number(0, SECONDS_MAX), default=4.0)
    parser.add_argument("--e2e-steps", type=whole(0, STEPS_MAX), default=1000, help="global steps per end-to-end run (0: skip)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["adapters", "reset", "overlap", "native"],
                        help="tables to leave out")
    parser.add_argument("--native-tasks", nargs="+", default=["T1LowDimJoystickFlatTerrain"])
    parser.add_argument("--native-num-envs", nargs="+", type=whole(1, 65536), default=[16, 64, 256])
    parser.add_argument("--only", choices=["native"], default=None, help="run only this table (and its end to end)")
    parser.add_argument("--json", type=file_out(), default=None, help="also write the results to this file")
    args = parser.parse_args()
    results: dict[str, list] = {"adapters": [], "reset": [], "overlap": [], "end_to_end": [], "native": [],
                                "native_end_to_end": []}
    print(f"CPU: {cpu_model()}, {len(os.sched_getaffinity(0))} cores usable", flush=True)
    if args.only != "native":
        humanoids(args, results)
    if "native" not in args.skip:
        native_vs_mjx(args, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def humanoids(args, results) -> None:
    """Tables 1-4: MJX vs EnvPool for Playground's own humanoid tasks."""
    if "adapters" not in args.skip:
        adapter_table(args, results["adapters"], args.tasks, args.num_envs, "envpool")

    ratio_table(args, results, "reset", reset_strategies, ("same_step_reset", "next_step_reset_dropped"),
                ("same-step reset", "next-step, dropped"), "   (transitions/s)", ".0f")
    ratio_table(args, results, "overlap", overlap, ("overlapped", "in_turn"), ("overlapped", "step, update"),
                "   (global steps/s: EnvPool send/recv around a sizing=cpu update)", ".1f")

    end_to_end_table(args, results["end_to_end"], args.tasks, "envpool")


def end_to_end_table(args, rows: list, tasks: list[str], backend: str, num_envs: int = 16) -> None:
    """Global steps/s of `fast-td3-train sizing=cpu` on MJX and on `backend`, and their ratio."""
    if not args.e2e_steps:
        return
    print(f"\n{'task':<30}{'envs':>6}{'MJX global steps/s':>20}{backend + ' global steps/s':>24}{'ratio':>8}"
          f"   (fast-td3-train sizing=cpu, {args.e2e_steps} steps)")
    for task in tasks:
        mjx, other = (end_to_end(task, b, args.e2e_steps, num_envs) for b in ("mjx", backend))
        print(f"{task:<30}{num_envs:>6}{mjx:>20.1f}{other:>24.1f}{other / mjx:>7.2f}x", flush=True)
        rows.append({"task": task, "num_envs": num_envs, "mjx": mjx, backend: other, "ratio": other / mjx})


if __name__ == "__main__":
    main()
