"""`fast-td3-eval`: returns of a checkpoint over N deterministic episodes, optionally a video.

    fast-td3-eval runs/HalfCheetah-v5/<run>                 # the run's best checkpoint (else its latest)
    fast-td3-eval runs/HalfCheetah-v5/<run> --use latest    # the newest checkpoint
    fast-td3-eval runs/.../checkpoints/step_000050000.pt --episodes 20 --video cheetah.mp4

From a run folder it takes checkpoints/best.pt (the best evaluation during training) when the
run has one, else the newest step_<N>.pt, and says which on stderr. The envs are rebuilt from
the checkpoint's own config. The last line printed is one
JSON object: task, checkpoint, step, episodes, return_mean, return_std, length_mean, and
gait (the gait metrics of these episodes that the env's signals allow, docs/reward-tuning.md, "Gait metrics").
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch
from omegaconf import OmegaConf

from envs.registry import UnknownTaskError, make_env
from fast_td3.command_line import ENVS_MAX, FPS_MAX, SEED_MAX, ArgumentParser, path_in, file_out, whole
from fast_td3.training import checkpoint as ckpt
from fast_td3.learner.algorithms import OffPolicyAlgorithm, make_algorithm
from fast_td3.training.config import TrainConfig
from fast_td3.learner.device import resolve_device
from fast_td3.training.evaluation import (
    EvalTrace, check_video_output, eval_seed, is_video, gait_results, read_gait_signals, run_episodes, summarize, write_video,
)
from fast_td3.files import json_safe
from envs.protocol import EnvSpec
from envs.quiet import silence_library_noise
from fast_td3.training.run_state import upgrade


def load_policy(checkpoint: dict, cfg: TrainConfig, device: torch.device) -> OffPolicyAlgorithm:
    """The run's algorithm holding the checkpoint's networks and normalisers (eager: nothing to compile)."""
    agent = make_algorithm(replace(cfg.algo, compile=False), EnvSpec(**checkpoint["env"]), device)
    agent.load_state_dict(checkpoint["agent"]["modules"])
    return agent.eval()


def load_checkpoint(path: str | Path, use: str | None = None, say: Callable[[str], None] | None = None,
                    latest_option: str = "--use latest") -> tuple[Path, dict, TrainConfig]:
    """(checkpoint file, its contents, the run's config) of a checkpoint file or a run folder
    (`use`: best, latest, or None for best.pt when the run has one; `ckpt.pick_checkpoint`).
    `say` gets one line naming the checkpoint taken."""
    checkpoint_path, which = ckpt.pick_checkpoint(path, use)
    checkpoint = upgrade(ckpt.load(checkpoint_path))
    if say is not None:
        say(ckpt.describe_pick(checkpoint_path, which, checkpoint, latest_option))
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), checkpoint["config"]))
    return checkpoint_path, checkpoint, cfg


def evaluate_checkpoint(
    path: str | Path,
    episodes: int = 10,
    seed: int | None = None,
    device: str = "auto",
    video: str | Path | None = None,
    video_fps: int = 30,
    use: str | None = None,
    say: Callable[[str], None] | None = None,
) -> dict:
    torch_device = resolve_device(device)  # a wrong device is reported before anything is read
    checkpoint_path, checkpoint, cfg = load_checkpoint(path, use, say)
    silence_library_noise(cfg.env.suite)
    agent = load_policy(checkpoint, cfg, torch_device)
    options = cfg.env.adapter_options(evaluation=True)
    if video is not None:
        options["render_mode"] = "rgb_array"
    env = make_env(cfg.env.suite, cfg.env.task, episodes, cfg.seed, torch_device, **options)
    frames: list = []
    try:
        on_step = (lambda t: frames.append(env.render(0))) if video is not None else None

        def policy(obs: torch.Tensor) -> torch.Tensor:
            return agent.act(obs.to(torch_device)).to(env.device)

        trace = EvalTrace()

        def record(step: dict) -> None:
            trace.append({"actions": step["actions"].float(), "dones": step["dones"].bool(),
                          "terminated": step["terminations"].bool(), "valid": step["valid"]},
                         read_gait_signals(env, trace))

        results = run_episodes(env, policy, eval_seed(cfg.seed) if seed is None else seed, on_step, record)
    finally:
        env.close()
    summary = summarize(results)
    gait = {name.removeprefix("eval/gait/"): value for name, value in gait_results(trace).items()}
    if video is not None:
        length = int(results["lengths"][0])
        write_video(frames[:length], Path(video), video_fps)
    return {
        "task": cfg.env.task,
        "checkpoint": str(checkpoint_path),
        "step": int(checkpoint["global_step"]),
        "episodes": episodes,
        "return_mean": summary["eval/return_mean"],
        "return_std": summary["eval/return_std"],
        "length_mean": summary["eval/length_mean"],
        "gait": gait,
        **({"video": str(video)} if video is not None else {}),
    }


def cli(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="fast-td3-eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=path_in, help="a run folder or a checkpoint file")
    parser.add_argument("--use", choices=ckpt.CHOICES, default=None,
                        help="from a run folder: best (checkpoints/best.pt, the best evaluation during training) or "
                             "latest (the newest step_<N>.pt); default: best when the run has one, else latest")
    parser.add_argument("--episodes", type=whole(1, ENVS_MAX), default=10, help="episodes, one per env (default 10)")
    parser.add_argument("--seed", type=whole(0, SEED_MAX), default=None, help="eval seed (default: the run's eval seed)")
    parser.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda', ... (default auto)")
    parser.add_argument("--video", type=file_out(replaces=is_video), default=None, help="write env 0's episode to this .mp4/.gif (MUJOCO_GL=egl)")
    parser.add_argument("--video-fps", type=whole(1, FPS_MAX), default=30)
    args = parser.parse_args(argv)
    try:
        if args.video is not None:
            check_video_output(args.video, "fast-td3-eval")
            os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering, chosen before MuJoCo is imported
        result = evaluate_checkpoint(args.checkpoint, args.episodes, args.seed, args.device, args.video, args.video_fps,
                                     args.use, say=lambda line: print(f"fast-td3-eval: {line}", file=sys.stderr))
    except (FileNotFoundError, ImportError, UnknownTaskError, ValueError) as error:  # OutputRefused too
        print(f"fast-td3-eval: error: {error}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(json_safe(result), allow_nan=False), flush=True)


if __name__ == "__main__":
    cli()
