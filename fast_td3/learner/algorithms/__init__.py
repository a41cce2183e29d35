"""The learning algorithms, one module each, behind one interface (`OffPolicyAlgorithm`).

`make_algorithm(cfg.algo, spec, ...)` builds the class that module `fast_td3.learner.algorithms.<cfg.algo.name>`
names as `ALGORITHM`; nothing outside this package names an algorithm.
"""

from __future__ import annotations

import importlib

from envs.protocol import EnvSpec
from fast_td3.learner.algorithms.base import OffPolicyAlgorithm
from fast_td3.learner.config import AlgoConfig


def algorithm_class(name: str) -> type[OffPolicyAlgorithm]:
    """The class of algorithm `name` (module fast_td3/learner/algorithms/<name>.py, attribute ALGORITHM)."""
    return importlib.import_module(f"fast_td3.learner.algorithms.{name}").ALGORITHM


def make_algorithm(cfg: AlgoConfig, spec: EnvSpec, device="auto",
                   total_critic_updates: int | None = None) -> OffPolicyAlgorithm:
    """The algorithm `cfg.name` for envs of shape `spec` on `device`: built, then its update
    compiled (with `cfg.compile`)."""
    return algorithm_class(cfg.name)(cfg, spec, device, total_critic_updates).compile_update()


__all__ = ["OffPolicyAlgorithm", "algorithm_class", "make_algorithm"]
