"""The learner's half of the loop: the algorithm built for the envs, its replay buffer and
sampling stream, the mirrored half of each batch (`algo.symmetry`), and the updates of a global
step with the latest value of each of their metrics. The runner owns one and calls `learn`."""

from __future__ import annotations

import time
from typing import Any, Callable, ContextManager

import numpy as np
import torch

from envs.protocol import EnvSpec, VecEnv, optional_attribute
from fast_td3.learner.algorithms import make_algorithm
from fast_td3.learner.replay import ReplayBuffer
from fast_td3.learner.symmetry import mirror_augmentation
from fast_td3.training import checkpoint as ckpt
from fast_td3.training import distributed
from fast_td3.training.checkpoint import CheckpointMismatchError
from fast_td3.training.config import TrainConfig
from fast_td3.training.run_state import restore_rng, rng_state, seed_everything


class Learning:
    """The algorithm `cfg.algo.name` for `env`'s shapes, with its replay and sampling.

    Built in this order, which fixes the run's random streams: the networks from the run seed
    (the same on every rank), then under torchrun each rank's own exploration; the buffer; the
    sampling stream from this rank's `seed`."""

    def __init__(self, cfg: TrainConfig, env: VecEnv, device: torch.device, ranks: distributed.Context,
                 seed: int) -> None:
        self.ranks, self.seed = ranks, seed
        algo = self.algo = cfg.algo
        seed_everything(cfg.seed)  # the same networks on every rank
        self.batch_size = distributed.batch_per_rank(algo.batch_size, cfg.distributed.batch, env.num_envs, ranks)
        self.spec = EnvSpec.of(env)
        self.agent = make_algorithm(
            algo, self.spec, device,
            # updates run from global step `learning_starts` to the last one
            total_critic_updates=max(cfg.total_steps - algo.learning_starts + 1, 1) * algo.num_updates,
        )
        if ranks.enabled:
            distributed.broadcast_parameters_(self.agent, ranks)
            self.agent.enable_data_parallel(ranks.world_size)
            seed_everything(seed)
            # every env starts an episode: this rank's own exploration draws (e.g. FastTD3's noise stds)
            self.agent.episodes_ended(torch.ones(env.num_envs, dtype=torch.bool, device=device))
        self.buffer = ReplayBuffer(
            self.spec, algo.buffer_size,
            critic_obs_extends_actor_obs=optional_attribute(env, "critic_obs_extends_actor_obs"),
            n_step=algo.n_step, gamma=algo.gamma,
            obs_dtype=torch.bfloat16 if algo.store_obs_bf16 else torch.float32, device=device,
        )
        self.sample_generator = torch.Generator(device=device).manual_seed(seed)
        self.mirror = mirror_augmentation(env, device) if algo.symmetry else None
        self.metrics: dict[str, torch.Tensor] = {}
        """The latest value of every update metric (device tensors, read at a log)."""
        self.updates_since_log = 0
        self.first_update_in_interval = False
        """The interval since the last log held the first update (compilation: no rates for it)."""
        self._updated_in_this_process = False

    def started(self) -> bool:
        return len(self.buffer) >= max(self.algo.learning_starts, 1)

    def learn(self, step: int, phase: Callable[[str], ContextManager], logger) -> None:
        """`num_updates` updates (the actor on its own schedule) on fresh samples; `logger` (or
        None) hears when the first update of this process starts and ends (it compiles)."""
        first = not self._updated_in_this_process
        if first:
            self._updated_in_this_process = self.first_update_in_interval = True
            started = time.perf_counter()
            if logger is not None:
                logger.learning_begins(step, compiles=self.algo.compile)
        with phase("sample"):
            batches = self.buffer.sample_many(self.batch_size, self.algo.num_updates, generator=self.sample_generator)
        for batch in batches:
            if self.mirror is not None:
                with phase("mirror"):
                    batch = self.mirror(batch)
            with phase("update"):
                self.metrics.update(self.agent.update(batch).items())
        self.updates_since_log += self.algo.num_updates
        if first and logger is not None:
            logger.first_update_done(step, time.perf_counter() - started)

    def take_metrics(self) -> tuple[dict[str, torch.Tensor], int, bool]:
        """For a log: the update metrics by their logged names, the updates since the last log and
        whether the first update fell among them; the counts start again."""
        names = self.agent.metric_names
        metrics = {names.get(k, f"algo/{k}"): v for k, v in self.metrics.items()}
        taken = metrics, self.updates_since_log, self.first_update_in_interval
        self.updates_since_log, self.first_update_in_interval = 0, False
        return taken

    # ------------------------------------------------------------ checkpoints
    def state(self, with_buffer: bool) -> dict[str, Any]:
        """The learner's part of a checkpoint: the algorithm's training state, the sampling
        stream, and with `with_buffer` the replay buffer."""
        state = {"agent": self.agent.training_state(), "rng": rng_state(self.sample_generator)}
        if with_buffer:
            state[ckpt.BUFFER_KEY] = self.buffer.state_dict()
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        """Put back the learner's part of an (upgraded) checkpoint of envs of this shape and this
        algorithm; a rank other than 0 goes on with streams of its own."""
        algo, trained = self.algo.name, state["config"].get("algo", {}).get("name", "fast_td3")
        if state["env"] != self.spec.record():
            raise CheckpointMismatchError(f"checkpoint was trained on envs {state['env']}, these envs are "
                                          f"{self.spec.record()}")
        if trained != algo:
            raise CheckpointMismatchError(f"checkpoint was trained with algo={trained}, this run is algo={algo}")
        self.agent.load_training_state(state["agent"])
        if self.ranks.is_main:  # rank 0's streams were saved; the other ranks continue their own below
            restore_rng(state["rng"], self.sample_generator)
        if ckpt.BUFFER_KEY in state:  # rank 0's transitions on every rank: all ranks start learning together
            self.buffer.load_state_dict(state[ckpt.BUFFER_KEY])
        if not self.ranks.is_main:  # not the runner's env-reset seed ([seed, step]): a third entry
            step = int(state["global_step"])
            rank_stream = int(np.random.SeedSequence([self.seed, step, 1]).generate_state(1)[0])
            seed_everything(rank_stream)
            self.sample_generator.manual_seed(rank_stream)
