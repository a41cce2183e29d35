"""fast-td3: the FastTD3 and FastSAC learners, independent of any simulator.

Four parts, each importing only from the ones before it (and from `envs/`, `sim2real.t1` below them):
- `fast_td3.learner`: networks, algorithms, replay, normalisation, exploration, precision;
- `fast_td3.measures`: pure measurements (gait metrics, critic diagnostics);
- `fast_td3.training`: the application that trains (CLI, config, runner, checkpoints, logging);
- `fast_td3.analysis`: tools that read runs (eval, report, gate summaries, profiles);
and two modules any part may use, importing nothing from the project: `fast_td3.files` (atomic
writes, strict JSON) and `fast_td3.command_line` (the console scripts' one convention).
The public classes below load on first use, so `import fast_td3` does not import torch.
The layers are in docs/architecture.md; tests/test_layout.py checks them.
"""

from importlib import import_module

__version__ = "0.1.0"
_EXPORTS = {
    "FastTD3": "fast_td3.learner.algorithms.fast_td3",
    "FastSAC": "fast_td3.learner.algorithms.fast_sac",
    "make_algorithm": "fast_td3.learner.algorithms",
    "AlgoConfig": "fast_td3.learner.config",
    "PerEnvGaussianNoise": "fast_td3.learner.exploration",
    "Actor": "fast_td3.learner.networks",
    "DistributionalCritic": "fast_td3.learner.networks",
    "project_distribution": "fast_td3.learner.networks",
    "EmpiricalNormalization": "fast_td3.learner.normalization",
    "RewardNormalization": "fast_td3.learner.normalization",
    "ReplayBuffer": "fast_td3.learner.replay",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fast_td3' has no attribute {name!r}")
