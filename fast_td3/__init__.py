"""fast-td3: the FastTD3 and FastSAC learners, independent of any simulator."""

from fast_td3.algorithms import make_algorithm
from fast_td3.algorithms.fast_sac import FastSAC
from fast_td3.algorithms.fast_td3 import FastTD3
from fast_td3.config import AlgoConfig
from fast_td3.exploration import PerEnvGaussianNoise
from fast_td3.networks import Actor, DistributionalCritic, project_distribution
from fast_td3.normalization import EmpiricalNormalization, RewardNormalization
from fast_td3.replay import ReplayBuffer

__version__ = "0.1.0"
__all__ = [
    "FastTD3",
    "FastSAC",
    "make_algorithm",
    "AlgoConfig",
    "PerEnvGaussianNoise",
    "Actor",
    "DistributionalCritic",
    "project_distribution",
    "EmpiricalNormalization",
    "RewardNormalization",
    "ReplayBuffer",
]
