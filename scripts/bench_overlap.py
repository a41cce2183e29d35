"""Does stepping the envs while the learner updates pay on this machine? Measured, not assumed.

    python scripts/bench_overlap.py                               # HalfCheetah-v5, 64 envs in worker processes
    python scripts/bench_overlap.py --task Humanoid-v5 --num-envs 32 --updates 2

One global step is one env step plus `--updates` learner updates at `sizing=cpu` sizes.
`sequential` runs them one after the other, as the runner does; `overlapped` hands the env
step to a thread (the adapter waits on its worker processes without holding the GIL) and
updates meanwhile on data already stored, the only order overlap allows. Both are timed
alternately in this run; the ratio is overlapped speed over sequential speed.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_update import PLAYGROUND_SHAPES, synthetic_batch  # noqa: E402

from envs.gymnasium import GymnasiumVecEnv  # noqa: E402
from envs.protocol import EnvSpec  # noqa: E402
from fast_td3.learner.algorithms.fast_td3 import FastTD3  # noqa: E402
from fast_td3.learner.config import AlgoConfig  # noqa: E402
from fast_td3.command_line import STEPS_MAX, ArgumentParser, whole


def sequential(env, agent, batch, actions, updates: int) -> None:
    env.step(actions)
    for _ in range(updates):
        agent.update(batch)


def overlapped(env, agent, batch, actions, updates: int) -> None:
    stepping = threading.Thread(target=env.step, args=(actions,))
    stepping.start()
    for _ in range(updates):
        agent.update(batch)
    stepping.join()


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="HalfCheetah-v5")
    parser.add_argument("--num-envs", type=whole(1, 65536), default=64)
    parser.add_argument("--num-workers", type=whole(1, 256), default=2)
    parser.add_argument("--updates", type=whole(1, 1000), default=2)
    parser.add_argument("--steps", type=whole(1, STEPS_MAX), default=20, help="global steps per timed round")
    parser.add_argument("--rounds", type=whole(1, 1000), default=5)
    args = parser.parse_args()
    env = GymnasiumVecEnv(args.task, args.num_envs, vectorization="processes", num_workers=args.num_workers)
    cfg = AlgoConfig(actor_hidden_dims=[256, 128], critic_hidden_dims=[256, 256], batch_size=2048, compile=False)
    shapes = PLAYGROUND_SHAPES
    spec = EnvSpec(**{k: shapes[k] for k in ("num_obs", "num_critic_obs", "num_actions")})
    agent = FastTD3(cfg, spec, device="cpu").compile_update()
    batch = synthetic_batch(cfg.batch_size, torch.device("cpu"))
    actions = torch.zeros(env.num_envs, env.num_actions)
    env.reset()
    modes = {"sequential": sequential, "overlapped": overlapped}
    times: dict[str, list[float]] = {name: [] for name in modes}
    try:
        for run in modes.values():  # warm-up
            run(env, agent, batch, actions, args.updates)
        for _ in range(args.rounds):
            for name, run in modes.items():
                start = time.perf_counter()
                for _ in range(args.steps):
                    run(env, agent, batch, actions, args.updates)
                times[name].append((time.perf_counter() - start) / args.steps)
    finally:
        env.close()
    per_step = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.task}, {args.num_envs} envs on {args.num_workers} workers, {args.updates} updates per global step, "
          f"{torch.get_num_threads()} learner threads:")
    for name, seconds in per_step.items():
        print(f"  {name:10s} {seconds * 1e3:8.1f} ms per global step")
    print(f"  overlapped / sequential speed: {per_step['sequential'] / per_step['overlapped']:.2f}x")


if __name__ == "__main__":
    main()
