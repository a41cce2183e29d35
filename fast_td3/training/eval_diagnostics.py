"""The runner's evaluation: its episodes, what it records of them and turns into gait metrics and
critic calibration (the pure maths is in `diagnostics.py` and `gait_metrics.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from envs.protocol import ACTOR, CRITIC, VecEnv
from fast_td3.measures.diagnostics import critic_calibration, diagnostics_path, discounted_returns, save_eval_diagnostics
from fast_td3.training import distributed
from fast_td3.training.evaluation import (
    EvalTrace, eval_seed, gait_results, read_gait_signals, run_episodes, summarize, write_video,
)

VIDEO_FPS = 30


def evaluate_in_run(agent, env: VecEnv, cfg, seed: int, ranks: distributed.Context, run_dir: Path, global_step: int,
                    to: Callable[[torch.Tensor | None], torch.Tensor | None]) -> tuple[dict[str, float], Path | None]:
    """Deterministic episodes on `env` (never the training envs) from `eval_seed(seed)`: the
    summary of every rank's episodes, with the gait metrics and critic diagnostics of rank 0's,
    and (with `cfg.eval_video`, rank 0) the video of env 0's first episode, written to
    <run>/videos/step_<N>.mp4 (None: no video)."""
    frames: list = []
    on_step = (lambda t: frames.append(env.render(0))) if cfg.eval_video and ranks.is_main else None
    trace = EvalTrace() if ranks.is_main else None
    on_transition = None if trace is None else (
        lambda step: record_eval_step(agent, env, step, trace, to, cfg.algo.disable_bootstrap))
    policy = lambda obs: agent.act(obs.to(agent.device)).to(env.device)  # noqa: E731
    episodes = run_episodes(env, policy, eval_seed(seed), on_step, on_transition)
    results = summarize(distributed.gather_episodes(episodes, ranks))  # every rank's episodes
    if trace:
        results.update(eval_diagnostics(trace, run_dir, global_step, cfg.algo.gamma, agent.value_reduction,
                                        bool(cfg.env.reward_scales)))
    frames = frames[: int(episodes["lengths"][0])]
    if not frames:
        return results, None
    video = run_dir / "videos" / f"step_{global_step:09d}.mp4"
    write_video(frames, video, VIDEO_FPS)
    return results, video


def record_eval_step(agent, env: VecEnv, step: dict[str, Any], trace: EvalTrace,
                     to: Callable[[torch.Tensor | None], torch.Tensor | None], disable_bootstrap: bool) -> None:
    """Keep what the diagnostics need of one eval step, on the learner's device (no host sync):
    actions, rewards, episode ends, the algorithm's value estimate of the step, and the value of
    the final observation where a time-out cuts the episode (what the critic's target bootstraps from)."""
    obs, actions = to(step["obs"]), to(step["actions"])
    dones, time_outs = to(step["dones"]).bool(), to(step["time_outs"]).bool()
    record = {
        "actions": actions.float(), "rewards": to(step["rewards"]).float(), "dones": dones,
        "terminated": to(step["terminations"]).bool(), "valid": to(step["valid"]),
        "q_pred": agent.value(obs, to(step["critic_obs"]), actions),
    }
    if disable_bootstrap:
        record["bootstrap"] = torch.zeros_like(record["q_pred"])
    else:
        final = step["final_observations"]
        final_obs = to(final[ACTOR])
        tail = agent.value(final_obs, to(final.get(CRITIC)), agent.act(final_obs))
        record["bootstrap"] = torch.where(time_outs, tail, 0.0)
    trace.append(record, read_gait_signals(env, trace, to))


def eval_diagnostics(trace: EvalTrace, run_dir: Path, global_step: int, gamma: float,
                     value_reduction: str, reward_scaled: bool) -> dict[str, float]:
    """Gait metrics and critic calibration of the recorded eval episodes (logged as
    eval/gait/<metric> and eval/critic/<stat>); the per-step samples go to
    diagnostics/eval_step_<N>.npz in the run folder."""
    data = trace.stacked()
    valid = data["valid"].bool()
    mc_return = discounted_returns(data["rewards"], data["dones"], gamma, data["bootstrap"])
    results = gait_results(trace)
    by_episode = valid.T  # [E, T]: samples ordered by episode, then time
    episode, t = torch.nonzero(by_episode, as_tuple=True)
    q_pred, mc = data["q_pred"].T[by_episode], mc_return.T[by_episode]
    results.update({f"eval/critic/{k}": v for k, v in critic_calibration(q_pred, mc).items()})
    save_eval_diagnostics(
        diagnostics_path(run_dir, global_step),
        actions=data["actions"].transpose(0, 1)[by_episode], q_pred=q_pred, mc_return=mc,
        rewards=data["rewards"].T[by_episode], episode=episode, t=t, global_step=global_step,
        gamma=gamma, q_reduction=value_reduction, reward_scaled=reward_scaled,
    )
    return results
