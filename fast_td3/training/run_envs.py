"""A run's envs, built as `fast-td3-train` builds them: this rank's training envs from its seed,
the replay buffer's memory checked against them, and separate eval envs on the same physics."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

from envs.protocol import VecEnv, optional_attribute, suite_hook
from envs.registry import load_adapter, make_env
from fast_td3.learner.device import resolve_device
from fast_td3.training import distributed
from fast_td3.training.config import TrainConfig
from fast_td3.training.config_checks import check_replay_memory
from fast_td3.training.evaluation import eval_seed


@dataclass
class RunEnvs:
    train: VecEnv
    evaluation: VecEnv | None

    def close(self) -> None:
        self.train.close()
        if self.evaluation is not None:
            self.evaluation.close()


def make_run_envs(cfg: TrainConfig, ranks: distributed.Context = distributed.SINGLE, evaluation: bool = True,
                  say: Callable[..., None] = print) -> RunEnvs:
    """This rank's envs for `cfg` (under torchrun, `cfg.device` becomes the rank's device and
    each rank has its own seeds). Settles in `cfg.env.options` what the adapter resolved (e.g.
    backend=auto), so a resumed run and fast-td3-eval keep the same physics. `say` prints."""
    if not ranks.is_main:
        say = lambda *args, **kwargs: None  # noqa: E731
    env_cfg = cfg.env
    device = distributed.rank_device(resolve_device(cfg.device), ranks)
    if ranks.enabled:
        cfg.device = str(device)
    seed = ranks.rank_seed(cfg.seed)
    env = make_env(env_cfg.suite, env_cfg.task, env_cfg.num_envs, seed, device, **env_cfg.adapter_options())
    say(f"Envs: {env!r}" + (f" on each of {ranks.world_size} ranks" if ranks.enabled else ""), flush=True)
    try:
        check_replay_memory(cfg, env, device, warn=lambda line: say(line, file=sys.stderr, flush=True))
        env_cfg.options.update(optional_attribute(env, "resolved_options"))
        if not evaluation:
            return RunEnvs(env, None)
        eval_options = env_cfg.adapter_options(evaluation=True)
        if cfg.eval_video:  # on every rank, so all evaluate on the same physics; rank 0 draws
            eval_options["render_mode"] = "rgb_array"
        if suite_hook(load_adapter(env_cfg.suite), "ONE_SIMULATION_PER_PROCESS"):
            say(f"Eval envs: none ({env_cfg.suite} runs one simulation per process; evaluate checkpoints "
                "with fast-td3-eval)", flush=True)
            return RunEnvs(env, None)
        eval_env = make_env(env_cfg.suite, env_cfg.task, cfg.eval_episodes, eval_seed(seed), device, **eval_options)
        say(f"Eval envs: {eval_env!r}", flush=True)
        return RunEnvs(env, eval_env)
    except BaseException:
        env.close()
        raise
