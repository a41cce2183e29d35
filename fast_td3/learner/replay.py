"""Per-env replay buffer that lives on the learner's device.

Storage is a TensorDict of shape `[num_envs, capacity]`: env `e` writes its
t-th transition to slot `t % capacity` of row `e`, all envs in lockstep, so one
write pointer serves every env and an n-step window is a walk along one row.

Each slot holds `next_observations` explicitly: for an env whose episode ended
at that step it is the env's true final observation (never the reset
observation that follows), which is what a time-out must bootstrap from.

With an asymmetric critic whose observation starts with the actor observation
(MuJoCo Playground's `privileged_state` does), only the privileged tail is
stored and the full critic observation is rebuilt when sampling.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict

from envs.protocol import EnvSpec
from fast_td3.learner.device import resolve_device

from fast_td3.learner.transition_keys import (
    ACTIONS,
    CRITIC_OBS,
    DISCOUNT,
    NEXT_CRITIC_OBS,
    NEXT_OBS,
    NSTEP_LENGTH,
    OBS,
    REWARDS,
    TERMINATED,
    TRUNCATED,
)

def stored_critic_size(num_obs: int, num_critic_obs: int | None, critic_obs_extends_actor_obs: bool) -> int:
    """Critic observation entries stored per slot (0: symmetric critic; the privileged tail only
    when the critic observation extends the actor's)."""
    if num_critic_obs is None:
        return 0
    return num_critic_obs - num_obs if critic_obs_extends_actor_obs else num_critic_obs


def storage_layout(num_obs: int, num_actions: int, stored_critic: int,
                   obs_dtype: torch.dtype) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Key -> (per-slot shape, dtype) of the storage."""
    spec = {
        OBS: ((num_obs,), obs_dtype),
        NEXT_OBS: ((num_obs,), obs_dtype),
        ACTIONS: ((num_actions,), torch.float32),
        REWARDS: ((), torch.float32),
        TERMINATED: ((), torch.bool),
        TRUNCATED: ((), torch.bool),
    }
    if stored_critic:
        spec[CRITIC_OBS] = ((stored_critic,), obs_dtype)
        spec[NEXT_CRITIC_OBS] = ((stored_critic,), obs_dtype)
    return spec


def slot_bytes(spec: EnvSpec, critic_obs_extends_actor_obs: bool = False,
               obs_dtype: torch.dtype = torch.float32) -> int:
    """Bytes one env's transition takes in the storage: `num_envs * capacity_per_env` of them
    is what `ReplayBuffer.memory_bytes` will report, known before anything is allocated."""
    stored = stored_critic_size(spec.num_obs, spec.num_critic_obs, critic_obs_extends_actor_obs)
    return sum(math.prod(shape) * torch.empty((), dtype=dtype).element_size()
               for shape, dtype in storage_layout(spec.num_obs, spec.num_actions, stored, obs_dtype).values())


class ReplayBuffer:
    """Circular per-env storage with uniform, env-balanced sampling and n-step returns.

    Args:
        spec: the envs' shape (`envs.protocol.EnvSpec`): envs, observation, critic observation
            (None: symmetric critic) and action sizes.
        capacity_per_env: transitions kept per env.
        critic_obs_extends_actor_obs: the critic observation is the actor
            observation followed by privileged terms; store only those terms.
        n_step, gamma: n-step return length and discount.
        obs_dtype: storage dtype of observations (bfloat16 halves their memory);
            sampled observations are always float32.
        device: where the storage lives ("auto": the GPU when present; "meta"
            measures memory without allocating).
    """

    def __init__(
        self,
        spec: EnvSpec,
        capacity_per_env: int,
        *,
        critic_obs_extends_actor_obs: bool = False,
        n_step: int = 1,
        gamma: float = 0.99,
        obs_dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = "auto",
    ) -> None:
        num_envs, num_obs, num_critic_obs = spec.num_envs, spec.num_obs, spec.num_critic_obs
        if capacity_per_env < n_step:
            raise ValueError(f"capacity_per_env ({capacity_per_env}) must be >= n_step ({n_step})")
        if critic_obs_extends_actor_obs and (num_critic_obs is None or num_critic_obs < num_obs):
            raise ValueError(
                "critic_obs_extends_actor_obs needs num_critic_obs >= num_obs, "
                f"got num_critic_obs={num_critic_obs}, num_obs={num_obs}"
            )
        self.spec = spec
        self.capacity = capacity_per_env
        self.critic_tail_only = critic_obs_extends_actor_obs
        self.n_step = n_step
        self.gamma = gamma
        self.obs_dtype = obs_dtype
        self.device = resolve_device(device)
        self._ptr = 0  # next slot to write (host integer: no device sync)
        self._size = 0  # filled slots per env
        self._writes = 0  # steps written since the buffer was made: `rewind` recomputes the size from it
        self._valid_writes: torch.Tensor | None = None
        """Writes made with `valid` true, counted on the device (None until a write passes `valid`):
        sampling stays among them, so slots skipped by the NaN guard are never drawn."""

        shape = (num_envs, capacity_per_env)
        self._stored_critic = stored_critic_size(num_obs, num_critic_obs, critic_obs_extends_actor_obs)
        layout = storage_layout(num_obs, spec.num_actions, self._stored_critic, obs_dtype)
        self._storage = TensorDict(
            {k: torch.zeros(*shape, *s, dtype=d, device=self.device) for k, (s, d) in layout.items()},
            batch_size=shape,
            device=self.device,
        )
        # Offsets 0..n-1 of an n-step window, reused by every sample.
        self._offsets = torch.arange(n_step, device=self.device)
        self._discounts = gamma ** torch.arange(n_step + 1, device=self.device, dtype=torch.float32)

    # ------------------------------------------------------------------ state
    def __len__(self) -> int:
        """Transitions stored per env."""
        return self._size

    @property
    def num_transitions(self) -> int:
        return self._size * self.spec.num_envs

    def memory_bytes(self) -> int:
        """Bytes held by the storage tensors."""
        return sum(t.numel() * t.element_size() for t in self._storage.values())

    # ------------------------------------------------------------------ write
    def extend(self, transition: TensorDict | dict, valid: torch.Tensor | None = None) -> None:
        """Write one vectorised env step: a TensorDict (or dict) with batch `[num_envs]`.

        `next_observations` (and `next_critic_observations`) must already hold
        the true final observation for envs that finished at this step. With `valid`
        (a 0-dim bool tensor, e.g. the NaN guard's) the slot keeps its old content where
        it is false, decided on the device; the pointer moves either way (see `rewind`).
        """
        row = {}
        for key in (OBS, NEXT_OBS, ACTIONS, REWARDS, TERMINATED, TRUNCATED):
            row[key] = transition[key]
        if self._stored_critic:
            for key in (CRITIC_OBS, NEXT_CRITIC_OBS):
                value = transition[key]
                row[key] = value[..., self.spec.num_obs :] if self.critic_tail_only else value
        for key, value in row.items():
            column = self._storage[key][:, self._ptr]  # a view into the storage
            value = value.reshape(column.shape)
            column.copy_(value if valid is None else torch.where(valid, value, column))
        if valid is not None:
            if self._valid_writes is None:
                self._valid_writes = torch.full((), self._writes, dtype=torch.long, device=self.device)
            self._valid_writes += valid
        self._ptr = (self._ptr + 1) % self.capacity
        self._writes += 1
        self._size = min(self._writes, self.capacity)

    def rewind(self, steps: int) -> None:
        """Forget the last `steps` writes (writes made with `valid` false kept the slots' old
        content, so the buffer is again what it was before them)."""
        steps = min(int(steps), self._writes)
        self._ptr = (self._ptr - steps) % self.capacity
        self._writes -= steps
        self._size = min(self._writes, self.capacity)
        self._valid_writes = None

    def _filled(self) -> int | torch.Tensor:
        """Slots that may be sampled: `len(self)`, or fewer on the device after skipped writes."""
        if self._valid_writes is None:
            return self._size
        return self._valid_writes.clamp(1, self.capacity)

    def _draw(self, shape: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
        age = torch.randint(0, self._size, shape, device=self.device, generator=generator)
        filled = self._filled()
        return age if isinstance(filled, int) else torch.remainder(age, filled)  # identity until a write is skipped

    # ------------------------------------------------------------------ read
    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """Draw `batch_size // num_envs` slots from every env, uniformly among filled ones
        (`generator`, if given, must live on the buffer's device).

        Returns a TensorDict of `num_envs * (batch_size // num_envs)` transitions
        with n-step `rewards`, the `next_observations` at the end of each window,
        `terminated` / `truncated` of the window's last step, `discount`
        (`gamma ** k` for a window of k steps) and `n_step_length` (k).

        A window stops at the first step whose episode ended (terminated or
        truncated), and at the newest stored step (the future is not known yet:
        a shorter return that bootstraps is still an unbiased target).
        """
        if self._size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        per_env = batch_size // self.spec.num_envs
        if per_env < 1:
            raise ValueError(
                f"batch_size ({batch_size}) must be at least num_envs ({self.spec.num_envs}): "
                "every env contributes batch_size // num_envs samples"
            )
        return self.gather(self._draw((self.spec.num_envs, per_env), generator))

    def sample_many(self, batch_size: int, count: int, generator: torch.Generator | None = None) -> list[TensorDict]:
        """`count` independent batches as `sample` draws them, gathered at once: one index draw
        and one gather for a global step's updates instead of `count` of each."""
        if count == 1:
            return [self.sample(batch_size, generator)]
        per_env = batch_size // self.spec.num_envs
        if per_env < 1:
            return [self.sample(batch_size, generator)]  # raises the message
        if self._size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        return list(self.gather(self._draw((count, self.spec.num_envs, per_env), generator)).unbind(0))  # views: no copy per batch

    def gather(self, age: torch.Tensor) -> TensorDict:
        """The n-step transitions starting at `age[e, j]` steps after env e's oldest
        stored step (`0 <= age < len(self)`); `age` is `[num_envs, per_env]` (a batch of
        `num_envs * per_env`), or `[batches, num_envs, per_env]` (a TensorDict of that many)."""
        device = self.device
        per_env = age.shape[-1]
        oldest = self._ptr if self._size == self.capacity else 0
        env_idx = torch.arange(self.spec.num_envs, device=device).unsqueeze(1).expand(-1, per_env)
        if self.n_step == 1:
            return self._gather_one_step(env_idx, (oldest + age) % self.capacity)

        # n-step window along each sampled row: slots [start, start + n).
        window_age = age.unsqueeze(-1) + self._offsets  # [E, P, n]
        window_slot = (oldest + window_age) % self.capacity
        window_env = env_idx.unsqueeze(-1).expand_as(window_slot)
        stored = window_age < self._filled()  # steps written so far
        terminated = self._storage[TERMINATED][window_env, window_slot]
        truncated = self._storage[TRUNCATED][window_env, window_slot]
        ended = terminated | truncated
        # Step k is in the return if it is stored and no earlier step ended the episode.
        ended_before = torch.cumsum(ended.int(), dim=-1) - ended.int()
        included = stored & (ended_before == 0)
        length = included.sum(dim=-1)  # [E, P], >= 1
        rewards = self._storage[REWARDS][window_env, window_slot]
        n_step_reward = (rewards * self._discounts[: self.n_step] * included).sum(-1)
        last = (length - 1).unsqueeze(-1)
        last_slot = window_slot.gather(-1, last).squeeze(-1)
        last_terminated = terminated.gather(-1, last).squeeze(-1)
        last_truncated = truncated.gather(-1, last).squeeze(-1)

        first_slot = window_slot[..., 0]
        storage = self._storage

        def at_first(key: str) -> torch.Tensor:
            return storage[key][env_idx, first_slot]

        def at_last(key: str) -> torch.Tensor:
            return storage[key][env_idx, last_slot]

        batch = {
            OBS: at_first(OBS).float(),
            ACTIONS: at_first(ACTIONS),
            NEXT_OBS: at_last(NEXT_OBS).float(),
            REWARDS: n_step_reward,
            TERMINATED: last_terminated,
            TRUNCATED: last_truncated,
            DISCOUNT: self._discounts[length],
            NSTEP_LENGTH: length,
        }
        return self._finish(batch, at_first, at_last)

    def _gather_one_step(self, env_idx: torch.Tensor, slot: torch.Tensor) -> TensorDict:
        """`gather` for n = 1: every window is one stored step, so no window bookkeeping."""
        storage = self._storage

        def at(key: str) -> torch.Tensor:
            return storage[key][env_idx, slot]

        batch = {OBS: at(OBS).float(), ACTIONS: at(ACTIONS), NEXT_OBS: at(NEXT_OBS).float(), REWARDS: at(REWARDS),
                 TERMINATED: at(TERMINATED), TRUNCATED: at(TRUNCATED)}
        batch[DISCOUNT] = self._discounts[1].expand(slot.shape)
        batch[NSTEP_LENGTH] = torch.ones_like(slot)
        return self._finish(batch, at)

    def _finish(self, batch: dict[str, torch.Tensor], at_first, at_last=None) -> TensorDict:
        """Add the critic observations and flatten `[envs, per_env]` to one batch dimension."""
        at_last = at_last or at_first
        if self.spec.num_critic_obs is not None:
            if not self.critic_tail_only:
                critic, next_critic = at_first(CRITIC_OBS).float(), at_last(NEXT_CRITIC_OBS).float()
            elif self._stored_critic:
                critic = torch.cat([batch[OBS], at_first(CRITIC_OBS).float()], dim=-1)
                next_critic = torch.cat([batch[NEXT_OBS], at_last(NEXT_CRITIC_OBS).float()], dim=-1)
            else:  # the critic observation is the actor observation
                critic, next_critic = batch[OBS], batch[NEXT_OBS]
            batch[CRITIC_OBS] = critic
            batch[NEXT_CRITIC_OBS] = next_critic
        lead = tuple(batch[REWARDS].shape)  # [(batches,) envs, per_env]
        flat = (*lead[:-2], lead[-2] * lead[-1])
        return TensorDict({k: v.reshape(*flat, *v.shape[len(lead):]) for k, v in batch.items()}, batch_size=flat,
                          device=self.device)

    # ------------------------------------------------------------------ save
    def state_dict(self) -> dict:
        """A snapshot on the host, as plain tensors (loadable with `torch.load(weights_only=True)`):
        saving a full accelerator-resident buffer must not need a second copy of it there."""
        snapshot = self._storage.clone() if self.device.type == "cpu" else self._storage.to("cpu")
        return {"storage": snapshot.to_dict(), "ptr": self._ptr, "size": self._size, "writes": self._writes}

    def load_state_dict(self, state: dict) -> None:
        storage = state["storage"]
        if set(storage.keys()) != set(self._storage.keys()):
            raise ValueError(
                f"replay state holds {sorted(storage.keys())}, this buffer stores "
                f"{sorted(self._storage.keys())} (symmetric vs asymmetric critic?)"
            )
        for key, value in storage.items():
            expected = tuple(self._storage[key].shape)
            if tuple(value.shape) != expected:
                raise ValueError(f"replay state '{key}' has shape {tuple(value.shape)}, this buffer's is {expected}")
        for key, value in storage.items():
            self._storage[key].copy_(value)
        self._ptr = int(state["ptr"])
        self._size = int(state["size"])
        # older snapshots lack the count; any count >= capacity reads as full
        self._writes = int(state.get("writes", self._size if self._size < self.capacity else 2 * self.capacity))
        self._valid_writes = None
