"""Deterministic evaluation on envs that are never the training envs.

Each eval env plays exactly one episode from a fixed seed, so two evaluations of
the same policy see the same initial states and their returns are comparable.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from envs.protocol import FINAL_OBSERVATIONS, TERMINATIONS, TIME_OUTS, VecEnv, critic_observations, optional_attribute
from fast_td3.measures import gait_metrics
from fast_td3.files import OutputRefused, check_output_file

Policy = Callable[[torch.Tensor], torch.Tensor]
TRANSITION_KEYS = ("t", "obs", "critic_obs", "actions", "rewards", "dones", "time_outs", "terminations",
                   "final_observations", "valid")
"""What `run_episodes` passes to `on_transition` after step t: the observations the policy
acted on (critic_obs None when symmetric), its actions, the step's rewards, dones,
time-outs, terminations (falls: the env's own flags where it reports them, else dones that
are not time-outs) and final observations (as in the env contract), and which envs were
still in their first episode before the step."""


def eval_seed(run_seed: int) -> int:
    """The seed of a run's evaluation envs: fixed for the run, independent of its training envs."""
    return int(np.random.SeedSequence([run_seed, 0x5EED]).generate_state(1)[0])


@torch.no_grad()
def run_episodes(
    env: VecEnv,
    policy: Policy,
    seed: int,
    on_step: Callable[[int], None] | None = None,
    on_transition: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, torch.Tensor]:
    """One episode per env from `reset(seed)`; returns per-episode `returns` and `lengths`.

    `policy` maps observations (on `env.device`) to actions in [-1, 1]. Steps after an
    env's first episode ended are not counted. `on_step(t)` is called before step t, while
    the envs show the state the policy acts on (e.g. to grab video frames: the first
    `lengths[i]` frames of env i are its episode; after that it has auto-reset).
    `on_transition(step)` is called after step t with a dict of the transition (see
    `TRANSITION_KEYS`); `valid` marks the envs still in their first episode before it.
    """
    obs, extras = env.reset(seed=seed)
    returns = torch.zeros(env.num_envs, device=env.device)
    lengths = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
    active = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    for t in range(env.max_episode_steps):
        if on_step is not None:
            on_step(t)
        actions = policy(obs)
        next_obs, rewards, dones, next_extras = env.step(actions)
        if on_transition is not None:
            on_transition({
                "t": t, "obs": obs, "critic_obs": critic_observations(obs, extras), "actions": actions,
                "rewards": rewards, "dones": dones, "time_outs": next_extras[TIME_OUTS],
                "terminations": next_extras.get(TERMINATIONS, dones & ~next_extras[TIME_OUTS]),
                "final_observations": next_extras[FINAL_OBSERVATIONS], "valid": active.clone(),
            })
        obs, extras = next_obs, next_extras
        returns += rewards * active
        lengths += active.long()
        active &= ~dones
        if t % 8 == 7 and not bool(active.any()):  # one host sync every 8 steps
            break
    return {"returns": returns.cpu(), "lengths": lengths.cpu()}


def summarize(episodes: dict[str, torch.Tensor]) -> dict[str, float]:
    returns = episodes["returns"].double()
    return {
        "eval/return_mean": returns.mean().item(),
        "eval/return_std": returns.std(unbiased=False).item(),
        "eval/length_mean": episodes["lengths"].double().mean().item(),
        "eval/episodes": float(returns.numel()),
    }


VIDEO_SUFFIXES = (".mp4", ".gif")


def is_video(path: Path) -> bool:
    """A GIF or an MP4 by its first bytes: what a `--video` may replace (never a user's other files)."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return head.startswith(b"GIF8") or head[4:8] == b"ftyp"


def check_video_output(path: str | Path, command: str) -> Path:
    """`--video` checked before any simulation: a .mp4 (with ffmpeg installed) or .gif that may be
    written, replacing at most an earlier video (`fast_td3.files.check_output_file`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise OutputRefused(f"{path}: name a .mp4 or .gif video (got {suffix or 'no suffix'})")
    if suffix == ".mp4" and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise OutputRefused('writing .mp4 videos needs imageio-ffmpeg: pip install -e ".[video]" (or write a .gif)')
    return check_output_file(path, is_video, command)


def write_video(frames: list, path: Path, fps: int) -> None:
    """Frames (H x W x 3 uint8) to an .mp4 (needs imageio-ffmpeg) or .gif."""
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ImportError('writing videos needs imageio: pip install -e ".[video]"') from None
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimsave(path, frames, fps=fps)


class EvalTrace:
    """Per-step records of one evaluation (tensors with a leading env dimension), stacked to
    `[T, E, ...]` at the end; `gait` holds the env's `gait_signals()` apart, with their static
    entries (limits, dt) kept once in `gait_static`."""

    def __init__(self) -> None:
        self.steps: list[dict[str, torch.Tensor]] = []
        self.gait: list[dict[str, torch.Tensor]] = []
        self.gait_static: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.steps)

    def append(self, record: dict[str, torch.Tensor], gait: dict[str, torch.Tensor] | None = None) -> None:
        self.steps.append(record)
        if gait is not None:
            self.gait.append(gait)

    @staticmethod
    def _stack(steps: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        if not steps:
            return {}
        keys = [k for k in steps[0] if all(k in s for s in steps)]  # a key missing at some step is dropped
        return {k: torch.stack([s[k] for s in steps]) for k in keys}

    def stacked(self) -> dict[str, torch.Tensor]:
        return self._stack(self.steps)

    def gait_stacked(self) -> dict[str, torch.Tensor]:
        """Per-step gait signals `[T, E, ...]` (only if every step had them) plus the static ones."""
        if len(self.gait) != len(self.steps):
            return {}
        return {**self._stack(self.gait), **self.gait_static}


def read_gait_signals(env: VecEnv, trace: EvalTrace, to: Callable[[torch.Tensor], torch.Tensor] = lambda x: x):
    """The env's `gait_signals()` of the step just taken (None when it has no such hook), per-step
    entries moved with `to`; static entries go to `trace.gait_static` once."""
    hook = optional_attribute(env, "gait_signals")
    if not callable(hook):
        return None
    gait = {}
    for key, value in hook().items():
        if key in gait_metrics.STATIC_KEYS:
            trace.gait_static.setdefault(key, to(value) if isinstance(value, torch.Tensor) else value)
        else:
            gait[key] = to(torch.as_tensor(value))
    return gait


def gait_results(trace: EvalTrace) -> dict[str, float]:
    """`eval/gait/<metric>` of a trace whose steps hold actions, dones, terminated and valid."""
    data = trace.stacked()
    traj = {**trace.gait_stacked(), gait_metrics.ACTIONS: data["actions"], gait_metrics.TERMINATED: data["terminated"],
            gait_metrics.DONES: data["dones"], gait_metrics.VALID: data["valid"].bool()}
    return {f"eval/gait/{name}": value for name, value in gait_metrics.gait_metrics(traj).items()}
