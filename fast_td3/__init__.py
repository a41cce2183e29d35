"""fast-td3: the FastTD3 and FastSAC learners, independent of any simulator.

The public classes load on first use, so `import fast_td3.config` (the command-line
checks) does not import torch.
"""

from importlib import import_module

__version__ = "0.1.0"
_EXPORTS = {
    "FastTD3": "fast_td3.algorithms.fast_td3",
    "FastSAC": "fast_td3.algorithms.fast_sac",
    "make_algorithm": "fast_td3.algorithms",
    "AlgoConfig": "fast_td3.config",
    "PerEnvGaussianNoise": "fast_td3.exploration",
    "Actor": "fast_td3.networks",
    "DistributionalCritic": "fast_td3.networks",
    "project_distribution": "fast_td3.networks",
    "EmpiricalNormalization": "fast_td3.normalization",
    "RewardNormalization": "fast_td3.normalization",
    "ReplayBuffer": "fast_td3.replay",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fast_td3' has no attribute {name!r}")
