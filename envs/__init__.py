"""Simulator adapters behind one contract (`envs.protocol`); suites load lazily (`envs.registry`)."""

from envs.protocol import VecEnv
from envs.registry import MissingSuiteError, UnknownTaskError, make_env

__all__ = ["VecEnv", "MissingSuiteError", "UnknownTaskError", "make_env"]
