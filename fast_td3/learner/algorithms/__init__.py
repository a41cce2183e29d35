"""The learning algorithms, one module each, behind one interface (`OffPolicyAlgorithm`).

`make_algorithm(cfg.algo, ...)` builds the class that module `fast_td3.learner.algorithms.<cfg.algo.name>`
names as `ALGORITHM`; nothing outside this package names an algorithm.
"""

from __future__ import annotations

import importlib

from fast_td3.learner.algorithms.base import OffPolicyAlgorithm
from fast_td3.learner.config import AlgoConfig


def algorithm_class(name: str) -> type[OffPolicyAlgorithm]:
    """The class of algorithm `name` (module fast_td3/learner/algorithms/<name>.py, attribute ALGORITHM)."""
    return importlib.import_module(f"fast_td3.learner.algorithms.{name}").ALGORITHM


def make_algorithm(cfg: AlgoConfig, num_obs: int, num_actions: int, num_critic_obs: int | None = None,
                   num_envs: int = 1, device="auto", total_critic_updates: int | None = None) -> OffPolicyAlgorithm:
    """The algorithm `cfg.name`, built for these sizes on `device`."""
    return algorithm_class(cfg.name)(cfg, num_obs, num_actions, num_critic_obs, num_envs, device, total_critic_updates)


__all__ = ["OffPolicyAlgorithm", "algorithm_class", "make_algorithm"]
