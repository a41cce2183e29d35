"""`fast-td3-play`: watch a trained policy in the simulator's viewer, or record it.

    fast-td3-play runs/Mjlab-Velocity-Flat-Unitree-G1/<run>              # mjlab: a MuJoCo window, or viser
    fast-td3-play runs/Isaac-Velocity-Flat-H1-v0/<run> --num-envs 16     # Isaac Lab: Isaac Sim's window
    fast-td3-play runs/<task>/<run> --video walk.mp4 --steps 500         # any suite: a video of env 0
    fast-td3-play sim2real/pretrained/t1_flat --video t1.mp4             # a T1 bundle through the sim-to-sim sequence
    fast-td3-play t1_flat --trial 3 --video trial3.mp4                   # robust gate trial 3, pushes and all

From a run folder it plays checkpoints/best.pt (the best evaluation during training) when the
run has one, else the newest step_<N>.pt (`--use latest` / `--use best` choose), and says which
on stderr. The env is rebuilt from the checkpoint's config, with the suite's play settings (mjlab:
the task's play config; Isaac Lab: a window) and no exploration noise. Viewers are the
simulator's own; suites that have none can still record a video. With `--video` the last
line printed is one JSON object: task, checkpoint, step, steps, episodes, return_mean, video.

A T1 export bundle (a folder with `policy.pt`, `meta.json`, `T1.yaml`) plays the sim-to-sim
gate's joystick sequence (stand, forward, sideways, turn) in native MuJoCo, with MuJoCo's
viewer or to a video, and prints the gate's report (`--seconds` per segment, default 10).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

import torch

from envs.protocol import VecEnv, suite_hook
from envs.registry import EnvOptionError, UnknownTaskError, load_adapter, make_env
from fast_td3.command_line import (
    ENVS_MAX, FPS_MAX, SEED_MAX, SEGMENT_SECONDS_MAX, TRIALS_MAX, ArgumentParser, number, path_in, file_out, whole,
)
from fast_td3.files import check_output_file, has_marker
from fast_td3.learner.device import resolve_device
from fast_td3.analysis.evaluate_checkpoint import load_checkpoint, load_policy
from fast_td3.training import checkpoint as ckpt
from fast_td3.training.evaluation import check_video_output, eval_seed, is_video, write_video
from envs.quiet import silence_library_noise

DEFAULT_VIDEO_STEPS = 1000
MAX_STEPS = 1_000_000


def record(env: VecEnv, policy, steps: int) -> tuple[list, list[float]]:
    """`steps` steps of `policy` from `reset`: env 0's frames and the returns of every
    episode that ended (any env)."""
    obs, _ = env.reset()
    frames, finished = [], []
    returns = torch.zeros(env.num_envs, device=env.device)
    for _ in range(steps):
        frames.append(env.render(0))
        obs, rewards, dones, _ = env.step(policy(obs))
        returns += rewards
        finished.extend(returns[dones].tolist())
        returns = returns * ~dones
    return frames, finished


def play(
    path: str | Path,
    num_envs: int = 1,
    steps: int | None = None,
    viewer: str = "auto",
    video: str | Path | None = None,
    fps: int | None = None,
    device: str = "auto",
    use: str | None = None,
    say: Callable[[str], None] | None = None,
) -> dict | None:
    torch_device = resolve_device(device)  # a wrong device is reported before anything is read
    checkpoint_path, checkpoint, cfg = load_checkpoint(path, use, say)
    silence_library_noise(cfg.env.suite)
    agent = load_policy(checkpoint, cfg, torch_device)
    adapter = load_adapter(cfg.env.suite)
    view = suite_hook(adapter, "view")
    if video is None and view is None:
        raise EnvOptionError(f"suite '{cfg.env.suite}' has no viewer; record a video instead (--video out.mp4)")
    options = {**cfg.env.adapter_options(evaluation=True), **suite_hook(adapter, "PLAY_OPTIONS")}
    if video is not None:
        options["render_mode"] = "rgb_array"
        options.pop("headless", None)  # recording needs no window
    env = make_env(cfg.env.suite, cfg.env.task, num_envs, eval_seed(cfg.seed), torch_device, **options)

    def policy(obs: torch.Tensor) -> torch.Tensor:
        return agent.act(obs.to(torch_device)).to(env.device)

    try:
        if video is None:
            view(env, policy, viewer=viewer, steps=steps)
            return None
        steps = steps or min(env.max_episode_steps, DEFAULT_VIDEO_STEPS)  # play configs may never end
        frames, finished = record(env, policy, steps)
    finally:
        env.close()
    step_seconds = getattr(getattr(env, "env", None), "step_dt", None)
    write_video(frames, Path(video), fps or (round(1 / step_seconds) if step_seconds else 30))
    return {
        "task": cfg.env.task,
        "checkpoint": str(checkpoint_path),
        "step": int(checkpoint["global_step"]),
        "steps": steps,
        "episodes": len(finished),
        "return_mean": sum(finished) / len(finished) if finished else None,
        "video": str(video),
    }


BUNDLE_ONLY = ("seconds", "trial", "seed", "gate_report", "shadows")
RUN_ONLY = ("use", "num_envs", "steps", "viewer", "device")


def parser() -> ArgumentParser:
    parser = ArgumentParser(prog="fast-td3-play", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1],
                            argument_default=None)
    parser.add_argument("checkpoint", type=path_in, help="a run folder, a checkpoint file, or a T1 export bundle")
    parser.add_argument("--use", choices=ckpt.CHOICES,
                        help="from a run folder: best (checkpoints/best.pt, the best evaluation during training) or "
                             "latest (the newest step_<N>.pt); default: best when the run has one, else latest")
    parser.add_argument("--num-envs", type=whole(1, ENVS_MAX), help="envs to simulate (default 1)")
    parser.add_argument("--steps", type=whole(1, MAX_STEPS),
                        help="env steps to run (default: until the viewer closes; for --video one episode, at most 1000)")
    parser.add_argument("--viewer", help="mjlab: auto, native (a MuJoCo window) or viser (a browser); Isaac Lab: auto")
    parser.add_argument("--video", type=file_out(replaces=is_video), help="record env 0 to this .mp4/.gif instead of opening a viewer")
    parser.add_argument("--fps", type=whole(1, FPS_MAX),
                        help="video frame rate (default: the control rate for Isaac Lab and mjlab, 20 for T1 bundles, else 30)")
    parser.add_argument("--seconds", type=number(0, SEGMENT_SECONDS_MAX),
                        help="T1 bundles: seconds per joystick segment (default 10)")
    parser.add_argument("--trial", type=whole(0, TRIALS_MAX),
                        help="T1 bundles: replay robust sim-to-sim trial K with its perturbations (pushes as arrows, "
                             "the draw as a caption)")
    parser.add_argument("--seed", type=whole(0, SEED_MAX), help="T1 bundles with --trial: the gate's seed (default 0)")
    parser.add_argument("--gate-report", type=path_in,
                        help="T1 bundles with --trial: take the trial's draw from this robust report "
                             "(fast-td3-sim2sim robust=true report=<file>) instead of drawing it again")
    parser.add_argument("--shadows", action="store_true", default=None,
                        help="T1 bundle videos: render shadows and reflections (about 5x slower on a CPU)")
    parser.add_argument("--device", help="'auto', 'cpu', 'cuda', ... (default auto)")
    return parser


def check_options(args: argparse.Namespace, bundle: bool) -> None:
    """Every option given applies to what is played (none is silently ignored); outputs are checked
    before the simulator starts."""
    given = lambda names: [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]
    if bundle and given(RUN_ONLY):
        raise ValueError(f"{', '.join(given(RUN_ONLY))}: for run folders; a T1 bundle plays the gate's sequence "
                         f"({', '.join(given(BUNDLE_ONLY) or ['--seconds', '--trial'])} apply to it)")
    if not bundle and given(BUNDLE_ONLY):
        raise ValueError(f"{', '.join(given(BUNDLE_ONLY))}: for T1 export bundles only; "
                         f"{args.checkpoint} is a run or checkpoint (export it: fast-td3-export {args.checkpoint} <bundle>)")
    if (args.seed is not None or args.gate_report is not None) and args.trial is None:
        raise ValueError("--seed and --gate-report choose a robust trial's draw: add --trial K")
    if bundle and args.video is None and sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise RuntimeError("no display for MuJoCo's viewer (DISPLAY is not set): record a video instead "
                           "(--video out.mp4)")
    if args.video is not None:
        check_video_output(args.video, "fast-td3-play")
        if args.trial is not None:  # the trial's captions are written beside the video
            check_output_file(Path(args.video).with_suffix(".srt"), lambda path: has_marker(path, b" --> "),
                              "fast-td3-play")


def cli(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.video is not None:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering, chosen before MuJoCo loads
    try:
        from sim2real.watch import is_bundle, play_bundle  # MuJoCo loads after MUJOCO_GL is chosen

        bundle = is_bundle(args.checkpoint)
        check_options(args, bundle)
        if bundle:
            silence_library_noise()  # native MuJoCo
            result = play_bundle(args.checkpoint, args.seconds, args.video, args.fps, args.trial, args.seed or 0,
                                 args.gate_report, bool(args.shadows))
        else:
            result = play(args.checkpoint, args.num_envs or 1, args.steps, args.viewer or "auto", args.video, args.fps,
                          args.device or "auto", args.use,
                          say=lambda line: print(f"fast-td3-play: {line}", file=sys.stderr))
    except (FileNotFoundError, ImportError, UnknownTaskError, ValueError, RuntimeError) as error:
        print(f"fast-td3-play: error: {error}", file=sys.stderr)
        sys.exit(2)
    if result is not None:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    cli()
