"""Simulator adapters behind one contract (`envs.protocol`); suites load lazily (`envs.registry`)."""

from envs.registry import MissingSuiteError, UnknownTaskError, make_env

__all__ = ["VecEnv", "MissingSuiteError", "UnknownTaskError", "make_env"]


def __getattr__(name: str):
    """`envs.VecEnv` on first use: importing `envs` does not import torch."""
    if name == "VecEnv":
        from envs.protocol import VecEnv

        return VecEnv
    raise AttributeError(f"module 'envs' has no attribute {name!r}")
