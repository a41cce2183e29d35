"""Reusable conformance tests for the env contract (`envs/protocol.py`).

A suite's test module subclasses `EnvContractTests` and provides:

- `make_env(seed, num_envs, **options)`: builds the adapter; must accept
  `max_episode_steps` (a short time limit makes time-outs happen in the test);
- `reference_observation(seed, env_index, actions)`: runs ONE env of the task on the
  plain simulator, without auto-reset or time limit, from the state the adapter's env
  `env_index` starts in when seeded with `seed` (and `num_envs` envs); applies the
  given actions (in [-1, 1], the adapter's convention) and returns the observation the
  simulator produced after the last one: a 1-D tensor, or for an asymmetric adapter a
  dict `{ACTOR: tensor, CRITIC: tensor}`;
- `terminating_actions(env, generator)`: actions that make episodes terminate soon
  (so terminations are seen within `max_steps`).

pytest collects the subclass's tests (this base class is not collected: no `Test` prefix).
"""

from __future__ import annotations

import pytest
import torch

from envs.protocol import ACTOR, CRITIC, FINAL_OBSERVATIONS, OBSERVATIONS, TIME_OUTS, VecEnv


def assert_step_identically(a: VecEnv, b: VecEnv, steps: int, seed: int = 0) -> torch.Tensor:
    """Reset both adapters, step them with the same random actions and assert identical
    results (observations, rewards, dones, time-outs, final observations); returns the
    time-outs counted per env."""
    assert torch.equal(a.reset()[0], b.reset()[0])
    g = torch.Generator().manual_seed(seed)
    time_outs = torch.zeros(a.num_envs, dtype=torch.long)
    for _ in range(steps):
        actions = torch.rand(a.num_envs, a.num_actions, generator=g) * 2 - 1
        (oa, ra, da, ea), (ob, rb, db, eb) = a.step(actions), b.step(actions)
        assert torch.equal(oa, ob) and torch.equal(ra, rb) and torch.equal(da, db)
        assert torch.equal(ea[TIME_OUTS], eb[TIME_OUTS])
        assert torch.equal(ea[FINAL_OBSERVATIONS][ACTOR], eb[FINAL_OBSERVATIONS][ACTOR])
        time_outs += ea[TIME_OUTS].long()
    return time_outs


class EnvContractTests:
    num_envs = 4
    max_steps = 400
    """Upper bound on steps any check waits for an episode to end."""
    short_time_limit = 7
    """Time limit used by the time-out check; must be shorter than a terminating episode."""
    atol = 1e-5
    terminates = True
    """False for tasks that only end by time-out (the time-out test then covers final observations)."""
    exact_final_observations = True
    """False for adapters that cannot see the last observation before the simulator's reset:
    they must report every episode end as a termination, with final observations equal to
    `obs` (envs/protocol.py)."""

    # ---------------------------------------------------------------- to provide
    def make_env(self, seed: int, num_envs: int, **options) -> VecEnv:  # pragma: no cover
        raise NotImplementedError

    def reference_observation(self, seed: int, env_index: int, actions: list[torch.Tensor]) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def terminating_actions(self, env: VecEnv, generator: torch.Generator) -> torch.Tensor:
        return torch.rand(env.num_envs, env.num_actions, generator=generator) * 2 - 1

    # ---------------------------------------------------------------- helpers
    def _env(self, seed=0, num_envs=None, **options) -> VecEnv:
        env = self.make_env(seed, num_envs or self.num_envs, **options)
        self._opened.append(env)
        return env

    def setup_method(self):
        self._opened: list[VecEnv] = []

    def teardown_method(self):
        for env in self._opened:
            env.close()

    def _rollout(self, env: VecEnv, steps: int, seed: int = 0, scale: float = 1.0):
        """Step with reproducible actions; return the list of step results."""
        g = torch.Generator().manual_seed(seed)
        results = []
        for _ in range(steps):
            actions = (torch.rand(env.num_envs, env.num_actions, generator=g) * 2 - 1) * scale
            results.append(env.step(actions.to(env.device)))
        return results

    def _assert_final_matches(self, extras, env_index: int, expected) -> None:
        groups = expected if isinstance(expected, dict) else {ACTOR: expected}
        for group, value in groups.items():
            actual = extras[FINAL_OBSERVATIONS][group][env_index]
            torch.testing.assert_close(actual.cpu(), value.float().cpu(), atol=self.atol, rtol=1e-5,
                                       msg=lambda m: f"env {env_index}, final {group} observation: {m}")

    def _assert_ends_are_terminations_showing_obs(self, obs, dones, extras) -> None:
        """The contract for adapters without final observations (`exact_final_observations`)."""
        assert not extras[TIME_OUTS].any(), "an adapter without final observations reports no time-outs"
        for group, value in extras[FINAL_OBSERVATIONS].items():
            shown = obs if group == ACTOR else extras[OBSERVATIONS][group]
            assert torch.equal(value, shown), f"final {group} observations must equal the observations"

    # ---------------------------------------------------------------- tests
    def test_attributes_shapes_dtypes_device(self):
        env = self._env()
        assert isinstance(env, VecEnv)
        assert env.num_envs == self.num_envs
        assert env.num_obs > 0 and env.num_actions > 0 and env.max_episode_steps > 0
        obs, extras = env.reset()
        assert obs.shape == (env.num_envs, env.num_obs) and obs.dtype == torch.float32
        assert obs.device == env.device
        asymmetric = env.num_critic_obs is not None
        if asymmetric:
            critic = extras[OBSERVATIONS][CRITIC]
            assert critic.shape == (env.num_envs, env.num_critic_obs) and critic.dtype == torch.float32
        obs, rewards, dones, extras = env.step(torch.zeros(env.num_envs, env.num_actions, device=env.device))
        assert obs.shape == (env.num_envs, env.num_obs) and obs.dtype == torch.float32
        assert rewards.shape == (env.num_envs,) and rewards.dtype == torch.float32
        assert dones.shape == (env.num_envs,) and dones.dtype == torch.bool
        assert extras[TIME_OUTS].shape == (env.num_envs,) and extras[TIME_OUTS].dtype == torch.bool
        final = extras[FINAL_OBSERVATIONS]
        assert final[ACTOR].shape == obs.shape and final[ACTOR].dtype == torch.float32
        for tensor in (obs, rewards, dones, extras[TIME_OUTS], final[ACTOR]):
            assert tensor.device == env.device
        if asymmetric:
            assert extras[OBSERVATIONS][CRITIC].shape == (env.num_envs, env.num_critic_obs)
            assert final[CRITIC].shape == (env.num_envs, env.num_critic_obs)
        assert torch.isfinite(obs).all() and torch.isfinite(rewards).all()

    def test_final_observation_is_the_simulators_not_the_reset(self):
        if not self.terminates:
            pytest.skip("the task never terminates; test_time_outs_... checks its final observations")
        seed = 11
        env = self._env(seed=seed)
        env.reset()
        g = torch.Generator().manual_seed(5)
        actions_taken: list[torch.Tensor] = []
        for _ in range(self.max_steps):
            actions = self.terminating_actions(env, g)
            actions_taken.append(actions)
            obs, _, dones, extras = env.step(actions.to(env.device))
            if dones.any():
                break
        else:
            raise AssertionError(f"no episode ended within {self.max_steps} steps")
        if not self.exact_final_observations:
            self._assert_ends_are_terminations_showing_obs(obs, dones, extras)
            return
        final = extras[FINAL_OBSERVATIONS][ACTOR]
        done_ids = torch.nonzero(dones).flatten().tolist()
        not_done = ~dones
        assert torch.equal(final[not_done], obs[not_done]), "unfinished envs: final observation == observation"
        for i in done_ids:
            assert not torch.allclose(final[i], obs[i]), f"env {i}: final observation equals the reset observation"
            expected = self.reference_observation(seed, i, [a[i] for a in actions_taken])
            self._assert_final_matches(extras, i, expected)

    def test_time_outs_are_truncations_with_the_simulators_final_observation(self):
        seed = 3
        env = self._env(seed=seed, max_episode_steps=self.short_time_limit)
        assert env.max_episode_steps == self.short_time_limit
        env.reset()
        zero = torch.zeros(env.num_envs, env.num_actions, device=env.device)
        for t in range(1, self.short_time_limit + 1):
            obs, _, dones, extras = env.step(zero)
            if t < self.short_time_limit:
                assert not dones.any(), f"an episode ended at step {t} before the time limit"
        if not self.exact_final_observations:
            assert dones.all(), "every env ends at the limit"
            self._assert_ends_are_terminations_showing_obs(obs, dones, extras)
            return
        assert dones.all() and extras[TIME_OUTS].all(), "every env times out at the limit"
        final = extras[FINAL_OBSERVATIONS][ACTOR]
        for i in range(env.num_envs):
            expected = self.reference_observation(seed, i, [zero[i].cpu()] * self.short_time_limit)
            self._assert_final_matches(extras, i, expected)
            assert not torch.allclose(final[i], obs[i]), f"env {i}: the time-out's final observation is the reset one"

    def test_terminations_are_not_time_outs_even_at_the_limit(self):
        if not self.terminates:
            pytest.skip("the task never terminates")
        if not self.exact_final_observations:
            pytest.skip("the adapter reports no time-outs (every end is a termination)")
        env = self._env(seed=4)
        env.reset()
        g = torch.Generator().manual_seed(0)
        actions_taken, end_step, env_index = [], None, None
        for t in range(1, self.max_steps + 1):
            actions_taken.append(self.terminating_actions(env, g))
            _, _, dones, extras = env.step(actions_taken[-1].to(env.device))
            time_outs = extras[TIME_OUTS]
            assert not (time_outs & ~dones).any(), "a time-out must also be a done"
            terminated = dones & ~time_outs
            if terminated.any():
                end_step, env_index = t, int(torch.nonzero(terminated)[0])
                break
        assert end_step is not None, f"no termination within {self.max_steps} steps"
        # The same episode with the time limit at its terminal step: terminated wins.
        limited = self._env(seed=4, max_episode_steps=end_step)
        limited.reset()
        for actions in actions_taken:
            _, _, dones, extras = limited.step(actions.to(limited.device))
        assert dones[env_index] and not extras[TIME_OUTS][env_index]

    def test_same_seed_same_trajectory_different_seed_differs(self):
        a, b, c = self._env(seed=7), self._env(seed=7), self._env(seed=8)
        obs_a, obs_b, obs_c = a.reset()[0], b.reset()[0], c.reset()[0]
        assert torch.equal(obs_a, obs_b)
        assert not torch.equal(obs_a, obs_c)
        for (oa, ra, da, _), (ob, rb, db, _) in zip(self._rollout(a, 20), self._rollout(b, 20)):
            assert torch.equal(oa, ob) and torch.equal(ra, rb) and torch.equal(da, db)
        # reset(seed=k) reproduces the same initial states whatever happened before
        first = a.reset(seed=123)[0]
        self._rollout(a, 5)
        assert torch.equal(a.reset(seed=123)[0], first)
        assert not torch.equal(a.reset(seed=124)[0], first)
        # envs of one adapter start from different states
        assert not torch.equal(obs_a[0], obs_a[1])

    def test_actions_outside_bounds_are_clamped(self):
        a, b = self._env(seed=2), self._env(seed=2)
        a.reset(), b.reset()
        g = torch.Generator().manual_seed(1)
        for _ in range(10):
            actions = (torch.rand(self.num_envs, a.num_actions, generator=g) * 2 - 1) * 3.0
            oa, ra, _, _ = a.step(actions.to(a.device))
            ob, rb, _, _ = b.step(actions.clamp(-1, 1).to(b.device))
            assert torch.equal(oa, ob) and torch.equal(ra, rb)
