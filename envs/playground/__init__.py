"""The MuJoCo Playground suite: one module per concern.

- `config`: Playground's registry with our tasks, task configs and overrides, robot models, JAX cache;
- `menagerie`, `lean_assets`: where robot models come from, and EnvPool's memory-lean scene copies;
- `mjx`: the MJX (JAX) adapter, over `mjx_batched` (the compiled batched reset and step);
  `envpool`: EnvPool's native-MuJoCo adapter;
- `t1_lowdim`: our Booster T1 task (the sim-to-real one: config, model, maths); `t1_rewards` its
  rewards; `t1_mjx` and `t1_native`: its MJX and native-MuJoCo backends, the latter with its random
  draws (`t1_native_draws`), domain randomisation (`t1_native_randomization`), observations
  (`t1_native_observation`) and frames (`native_frames`);
- `backend`: which of these runs a task (`make`, the suite's entry).
"""

from envs.playground.backend import BACKENDS, choose_backend, make  # noqa: F401
from envs.playground.config import tasks  # noqa: F401
from envs.playground.t1_lowdim import TERRAINS

OWN_TASKS = tuple(TERRAINS)
"""Our T1 tasks: checked without importing Playground (a native-backend run never does)."""
