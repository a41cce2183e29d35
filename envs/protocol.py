"""The one contract every simulator adapter implements (RSL-RL style, torch in, torch out).

An adapter runs `num_envs` copies of one task in lockstep and auto-resets each copy
the moment its episode ends, within the same `step` call:

- `reset(seed=None) -> (obs, extras)`: start every env. `seed=None` continues the
  adapter's random streams; an integer reseeds every env deterministically (the
  same integer always gives the same initial states; evaluation relies on it).
- `step(actions) -> (obs, rewards, dones, extras)`:
    * `actions`: float tensor `[num_envs, num_actions]` in [-1, 1]. Values outside are
      clamped to [-1, 1] before being scaled to the simulator's own bounds.
    * `obs`: float32 `[num_envs, num_obs]`; for an env that just finished this is
      already the first observation of its next episode.
    * `rewards`: float32 `[num_envs]`.
    * `dones`: bool `[num_envs]`, `terminated | truncated`.
    * `extras[TIME_OUTS]`: bool `[num_envs]`, the truncated part of `dones` (time
      limit reached without a termination). A terminated env is never a time-out.
    * `extras[OBSERVATIONS][CRITIC]`: float32 `[num_envs, num_critic_obs]`, only when
      the adapter is asymmetric (`num_critic_obs is not None`).
    * `extras[FINAL_OBSERVATIONS]`: `{ACTOR: [num_envs, num_obs], CRITIC: ...}`, the
      true last observation the simulator produced for every env whose episode just
      ended (before its reset); rows of envs that did not finish equal `obs`.
      Present on every step, so consumers never branch on its existence.
    * `extras[EPISODE]` (optional): `{name: float [num_envs]}`, per-episode metrics
      (e.g. the sum of each reward term over the episode); only the rows of envs that
      just finished are meaningful. The runner logs their means as
      `train/episode/<name>`; for logging only.
- `close()`: release workers and simulators.

Everything returned is a torch tensor on `device`. Bootstrapping rule for learners:
a terminated transition never bootstraps; a time-out bootstraps from its entry in
`extras[FINAL_OBSERVATIONS]`, never from the reset observation in `obs`.

An adapter whose simulator cannot show the last observation before its auto-reset (Isaac
Lab) never reports a time-out: every episode end is reported as a termination, and its
`extras[FINAL_OBSERVATIONS]` rows equal `obs`. The rule above then never bootstraps from a
reset observation.

Optional parts, declared here with their defaults (`OPTIONAL_ENV_ATTRIBUTES`,
`SUITE_HOOKS`) and read through `optional_attribute` and `suite_hook`, never probed ad hoc.
`step_extras` and `reset_extras` build the extras dict; every adapter uses them.

`tests/env_conformance.py` checks an adapter against this contract; every suite's
tests run it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # the CLIs check their arguments before torch is imported
    import torch

# extras keys
TIME_OUTS = "time_outs"
TERMINATIONS = "terminations"
"""Optional extras key: bool `[num_envs]`, the env's own termination flags (falls), for adapters
whose TIME_OUTS cannot report truncations (every end is a termination to the learner);
metrics use it to tell a fall from a time limit. Absent: `dones & ~time_outs`."""
OBSERVATIONS = "observations"
FINAL_OBSERVATIONS = "final_observations"
EPISODE = "episode"
# observation group names inside extras[OBSERVATIONS] and extras[FINAL_OBSERVATIONS]
ACTOR = "actor"
CRITIC = "critic"


@runtime_checkable
class VecEnv(Protocol):
    """A batch of envs of one task, stepped together (see the module docstring)."""

    num_envs: int
    num_obs: int
    num_critic_obs: int | None
    num_actions: int
    max_episode_steps: int
    device: torch.device

    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]: ...

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class EnvSpec:
    """The shape of a batch of envs: the one value the algorithm, the replay buffer and a
    checkpoint's env record take (`EnvSpec.of(env)`; `record()` is the checkpoint's dict)."""

    num_envs: int = 1
    num_obs: int
    num_critic_obs: int | None = None
    """None: the critic sees the actor's observation (a symmetric env)."""
    num_actions: int

    @classmethod
    def of(cls, env: VecEnv) -> EnvSpec:
        return cls(num_envs=env.num_envs, num_obs=env.num_obs, num_critic_obs=env.num_critic_obs,
                   num_actions=env.num_actions)

    @property
    def critic_obs_size(self) -> int:
        """What the critic observes per env: the critic observation, else the actor's."""
        return self.num_obs if self.num_critic_obs is None else self.num_critic_obs

    def record(self) -> dict[str, int | None]:
        """As a checkpoint stores it (every format: a plain dict of these four keys)."""
        return asdict(self)


@dataclass(frozen=True)
class OptionalPart:
    """An optional attribute or hook: its default when absent, and what it is for."""

    default: Any
    doc: str


OPTIONAL_ENV_ATTRIBUTES: dict[str, OptionalPart] = {
    "critic_obs_extends_actor_obs": OptionalPart(False, "The critic observation starts with the actor observation: "
                                              "the replay buffer then stores only the privileged tail."),
    "resolved_options": OptionalPart({}, "Adapter options the env chose itself (e.g. `backend` under `auto`), "
                                  "recorded in the run's config so a resume or an eval builds the same env."),
    "record_gait_signals": OptionalPart(None, "`record_gait_signals(on)`: whether steps compute the gait signals "
                                     "(the trainer turns them off on its training envs)."),
    "gait_signals": OptionalPart(None, "`gait_signals() -> dict`: the gait signals of the step just taken "
                              "(`fast_td3/measures/gait_metrics.py` keys), for the gait metrics of evaluations."),
    "checkpointed_parts": OptionalPart({}, "`{name: part}`, each with `state_dict()` and `load_state_dict(state)`: "
                                    "what the env changes in itself as training goes (a curriculum's level), saved in "
                                    "checkpoints so that a resumed run continues it rather than starting it again."),
}
"""What a VecEnv may have beyond the contract, with the default an env without it gets."""

SUITE_HOOKS: dict[str, OptionalPart] = {
    "prepare": OptionalPart(None, "`prepare(**options)`, called before the task is checked and the env made "
                         "(Isaac Lab starts its app there, with the window or cameras asked for)."),
    "ONE_SIMULATION_PER_PROCESS": OptionalPart(False, "Only one simulation can live in a process, so the "
                                            "evaluation envs share the training envs' simulation."),
    "PLAY_OPTIONS": OptionalPart({}, "Adapter options `fast-td3-play` adds (a window, no random start)."),
    "view": OptionalPart(None, "`view(env, policy, viewer, steps)`: the suite's own interactive viewer for "
                      "`fast-td3-play`; without it play needs `--video`."),
    "OWN_TASKS": OptionalPart((), "Task ids the suite defines itself, accepted without calling `tasks()`, which "
                           "may import the whole simulator (Playground's imports JAX)."),
}
"""What a suite's adapter module may have beyond `tasks()` and `make(task, num_envs, seed, device, **options)`."""


def optional_attribute(env: Any, name: str) -> Any:
    """The env's optional attribute `name` (declared in OPTIONAL_ENV_ATTRIBUTES), or its default."""
    return getattr(env, name, OPTIONAL_ENV_ATTRIBUTES[name].default)


def suite_hook(adapter: Any, name: str) -> Any:
    """The adapter module's optional hook `name` (declared in SUITE_HOOKS), or its default."""
    return getattr(adapter, name, SUITE_HOOKS[name].default)


class SuiteAdapter(Protocol):
    """A suite's adapter module (`envs.registry.Suite.module`); optional hooks: SUITE_HOOKS."""

    def tasks(self) -> list[str]: ...

    def make(self, task: str, num_envs: int, seed: int, device: Any, **options: Any) -> VecEnv: ...


def observation_groups(actor: torch.Tensor, critic: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """`{ACTOR: actor}`, with `CRITIC` for an asymmetric env."""
    return {ACTOR: actor} if critic is None else {ACTOR: actor, CRITIC: critic}


def reset_extras(obs: torch.Tensor, critic_obs: torch.Tensor | None = None) -> dict[str, Any]:
    """The extras of `reset`."""
    return {OBSERVATIONS: observation_groups(obs, critic_obs)}


def step_extras(
    obs: torch.Tensor,
    final_obs: torch.Tensor,
    time_outs: torch.Tensor,
    *,
    critic_obs: torch.Tensor | None = None,
    final_critic_obs: torch.Tensor | None = None,
    episode: dict[str, torch.Tensor] | None = None,
    terminations: torch.Tensor | None = None,
) -> dict[str, Any]:
    """The extras of `step`, as the module docstring defines them (optional keys only when given)."""
    extras: dict[str, Any] = {
        OBSERVATIONS: observation_groups(obs, critic_obs),
        FINAL_OBSERVATIONS: observation_groups(final_obs, final_critic_obs),
        TIME_OUTS: time_outs,
    }
    if episode is not None:
        extras[EPISODE] = episode
    if terminations is not None:
        extras[TERMINATIONS] = terminations
    return extras


def critic_observations(obs: torch.Tensor, extras: dict[str, Any]) -> torch.Tensor | None:
    """The critic's observation of a reset/step result, or None for a symmetric env."""
    groups = extras.get(OBSERVATIONS) or {}
    return groups.get(CRITIC)


def derive_env_seeds(seed: int, num_envs: int) -> list[int]:
    """Independent 32-bit seeds for `num_envs` envs from one run seed (NumPy SeedSequence),
    so env `i` of a run with seed `s` always starts from the same state."""
    import numpy as np

    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(num_envs)]
