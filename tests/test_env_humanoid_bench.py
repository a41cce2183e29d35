"""The HumanoidBench adapter.

HumanoidBench pins mujoco 3.1.6 and lives in its own venv, so CI cannot install it. The
adapter's machinery (worker processes, SB3 pipes, seeds, final observations, time limits,
clipping) is tested on gymnasium's real Humanoid-v5 through the same class; the tests
marked `needs_humanoid_bench` run where `humanoid_bench` is importable (see docs/suites.md)
and are skipped, with the reason, elsewhere.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

import test_env_gymnasium
from env_conformance import assert_step_identically
from helpers import assert_processes_exit, kill_a_trainer_with_workers
from envs.humanoid_bench import GaitSignals, HumanoidBenchVecEnv, OwnGlobalRandomState, time_limit
from envs.protocol import ACTOR, FINAL_OBSERVATIONS, TIME_OUTS, derive_env_seeds
from fast_td3.measures import gait_metrics as gm
from envs.registry import MissingSuiteError, UnknownTaskError, check_task, make_env
from fast_td3.training.cli_checks import check_command_line
from fast_td3.training.train import CONF_DIR  # importing train registers the schema and resolvers

HAVE_HUMANOID_BENCH = importlib.util.find_spec("humanoid_bench") is not None
needs_humanoid_bench = pytest.mark.skipif(
    not HAVE_HUMANOID_BENCH, reason="humanoid_bench is not installed (it needs its own venv: docs/suites.md)"
)
without_humanoid_bench = pytest.mark.skipif(HAVE_HUMANOID_BENCH, reason="humanoid_bench is installed here")
GENERIC = "Humanoid-v5"
"""A real gymnasium MuJoCo humanoid, standing in for HumanoidBench where it is not installed."""
BIN = Path(sys.executable).parent


def generic(num_envs, seed=0, **options):
    """The HumanoidBench adapter over Humanoid-v5 (registered by importing gymnasium)."""
    if options.get("vectorization") != "subproc":
        options.setdefault("num_workers", 2)
    return HumanoidBenchVecEnv(GENERIC, num_envs, seed=seed, package="gymnasium", **options)


class TestSharedMemoryWorkersContract(test_env_gymnasium.TestGymnasiumContract):
    """Envs sharded over 2 worker processes that share memory (the suite's default),
    checked against the bare gymnasium simulator."""

    task = GENERIC
    num_envs = 5

    def make_env(self, seed, num_envs, **options):
        return generic(num_envs, seed, **options)


class TestSB3SubprocVecEnvContract(TestSharedMemoryWorkersContract):
    """The same contract through stable-baselines3's SubprocVecEnv (a process per env)."""

    num_envs = 3

    def make_env(self, seed, num_envs, **options):
        return generic(num_envs, seed, vectorization="subproc", **options)


def test_sb3_pipes_and_shared_memory_step_identically():
    """Same seeds and actions: same observations, rewards, ends, time-outs and final observations."""
    a = generic(4, seed=3, max_episode_steps=6)
    b = generic(4, seed=3, max_episode_steps=6, vectorization="subproc")
    try:
        time_outs = assert_step_identically(a, b, steps=14)
        assert time_outs.tolist() == [2] * 4  # both transports carried two time-outs per env
        # reseeding reaches SB3's workers too: reset(seed) is the same on both
        assert torch.equal(a.reset(seed=11)[0], b.reset(seed=11)[0])
    finally:
        try:
            a.close()
        finally:
            b.close()


ORPHAN_SCRIPT = """
import time
from envs.humanoid_bench import HumanoidBenchVecEnv
env = HumanoidBenchVecEnv("Humanoid-v5", 3, package="gymnasium", vectorization="subproc")
env.reset()
print(" ".join(str(p.pid) for p in env._vec._vec.processes), flush=True)
time.sleep(120)
"""


def test_sb3_workers_die_with_a_killed_trainer(tmp_path):
    """Forked SB3 workers hold each other's pipe ends and never see end-of-file: without
    a parent-death signal they outlive a trainer killed by the OOM killer or SIGKILL."""
    script = tmp_path / "orphans.py"
    script.write_text(ORPHAN_SCRIPT)
    workers = kill_a_trainer_with_workers(script, workers=3)
    assert_processes_exit(workers, "SB3 workers outlived the killed trainer", seconds=10)


def test_sb3_workers_leave_ctrl_c_to_the_trainer():
    """Ctrl-C reaches the whole process group; the trainer finishes its step and saves, so
    the workers must still answer."""
    import signal

    env = generic(2, vectorization="subproc")
    try:
        env.reset()
        for process in env._vec._vec.processes:
            os.kill(process.pid, signal.SIGINT)
            os.kill(process.pid, signal.SIGTERM)
        obs = env.step(torch.zeros(2, env.num_actions))[0]
        assert obs.shape == (2, env.num_obs)
    finally:
        env.close()
    assert not any(process.is_alive() for process in env._vec._vec.processes)


def test_run_seed_reaches_every_env():
    """The reference's seed never reached HumanoidBench's envs; ours derives one per env."""
    for vectorization in ("processes", "subproc"):
        env = generic(3, seed=7, vectorization=vectorization)
        obs = env.reset()[0]
        env.close()
        for i, env_seed in enumerate(derive_env_seeds(7, 3)):
            plain = gym.make(GENERIC)
            expected = plain.reset(seed=env_seed)[0]
            plain.close()
            torch.testing.assert_close(obs[i], torch.from_numpy(expected.astype(np.float32)), rtol=0, atol=0)
        assert not torch.equal(obs[0], obs[1])


NEVER_RENDERS_IN_THE_PARENT = """
import os
import gymnasium as gym
from envs.humanoid_bench import HumanoidBenchVecEnv

PARENT = os.getpid()

def never_renders_in_the_parent(package, task, **kwargs):
    if os.getpid() == PARENT and kwargs.get("render_mode") is not None:
        raise AssertionError("a rendering env was made in the parent")
    return gym.make(task, **kwargs)

env = HumanoidBenchVecEnv("Humanoid-v5", 2, package="gymnasium", num_workers=2, render_mode="rgb_array",
                          env_factory=never_renders_in_the_parent)
env.reset()
frame = env.render(1)
env.close()
print(frame.shape, frame.std() > 0)
"""


def test_rendering_envs_are_made_only_in_the_workers(tmp_path):
    """HumanoidBench opens its GL context in its constructor; one opened before the fork
    hung every worker. The parent's probe env (for the spaces) must not render."""
    script = tmp_path / "render.py"
    script.write_text(NEVER_RENDERS_IN_THE_PARENT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parent.parent, env={**os.environ, "MUJOCO_GL": "egl"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("(480, 480, 3) True")


class _GoalFromGlobalNumPy(gym.Env):
    """Draws its goal from NumPy's global generator at reset and step, as HumanoidBench's
    push/reach/cube tasks do."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Box(-1.0, 1.0, (1,))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([np.random.uniform(-1, 1)], dtype=np.float32), {}

    def step(self, action):
        return np.array([np.random.uniform(-1, 1)], dtype=np.float32), 0.0, False, False, {}


def test_each_env_owns_its_global_numpy_stream():
    """Two envs in one process: each reseeded env repeats its own goals, whatever the other
    draws in between, and the caller's global stream is left untouched."""
    a, b = OwnGlobalRandomState(_GoalFromGlobalNumPy()), OwnGlobalRandomState(_GoalFromGlobalNumPy())
    np.random.seed(123)
    outside = np.random.get_state()[1].copy()

    def goals(env, other, seed):
        drawn = [env.reset(seed=seed)[0][0]]
        for _ in range(3):
            other.step(None)  # the other env draws in between
            drawn.append(env.step(None)[0][0])
        return drawn

    first = goals(a, b, seed=4)
    b.reset(seed=9)
    assert goals(a, b, seed=4) == first
    assert goals(b, a, seed=9) != first  # another seed, other goals
    assert np.array_equal(np.random.get_state()[1], outside)


def test_time_limits_follow_humanoid_bench():
    assert time_limit("h1hand-push-v0") == 500 and time_limit("h1hand-insert_small-v0") == 500
    assert time_limit("g1-basketball-v0") == 500 and time_limit("h1-kitchen-v0") == 500
    assert time_limit("h1hand-walk-v0") == 1000 and time_limit("g1-run-v0") == 1000
    assert time_limit("h1hand-balance_simple-v0") == 1000 and time_limit("h1hand-pole-v0") == 1000


def test_presets_carry_the_reference_settings():
    """Every h1hand task has a preset on the HumanoidBench suite with the reference's overrides."""
    expected = {  # task: (v_max, total_steps)
        "h1hand-walk-v0": (250.0, 100000), "h1hand-reach-v0": (2000.0, 100000),
        "h1hand-balance_simple-v0": (250.0, 200000), "h1hand-balance_hard-v0": (250.0, 1000000),
        "h1hand-push-v0": (1000.0, 1000000), "h1hand-basketball-v0": (2000.0, 250000),
        "h1hand-window-v0": (250.0, 250000), "h1hand-package-v0": (10000.0, 100000),
        "h1hand-truck-v0": (1000.0, 100000), "h1hand-maze-v0": (1000.0, 100000), "g1-stand-v0": (250.0, 100000),
        "h1hand-pole-v0": (250.0, 150000),
    }
    presets = sorted(p.stem for p in (CONF_DIR / "task").glob("h1hand-*.yaml"))
    assert len(presets) == 30 and "h1hand-balance_simple-v0" in presets
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for task, (v_max, total_steps) in expected.items():
            cfg = compose("train", overrides=[f"task={task}"])
            assert cfg.env.suite == "humanoid_bench" and cfg.env.task == task
            assert cfg.env.num_envs == 128 and cfg.algo.buffer_size == 51200 and cfg.algo.gamma == 0.99
            assert (cfg.algo.v_min, cfg.algo.v_max, cfg.total_steps) == (-v_max, v_max, total_steps), task
            assert cfg.env.options.vectorization == "processes"


def test_unknown_id_suggests_the_nearest_preset():
    message = check_command_line(["task=h1hand-balance-simple"])
    assert "Did you mean 'h1hand-balance_simple-v0'" in message
    assert "humanoid_bench: " in message and "h1hand-walk-v0" in message


@without_humanoid_bench
def test_missing_humanoid_bench_prints_the_install_commands(tmp_path):
    with pytest.raises(MissingSuiteError, match="pip install --no-deps -e humanoid-bench"):
        make_env("humanoid_bench", "h1hand-walk-v0", num_envs=1, seed=0)
    result = subprocess.run([str(BIN / "fast-td3-train"), "task=h1hand-walk-v0", "sizing=cpu"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    for line in ("python -m venv .venv-hb", 'pip install -e ".[humanoid-bench]"',
                 "git clone https://github.com/carlosferrazza/humanoid-bench"):
        assert line in result.stderr
    assert not (tmp_path / "runs").exists()


def test_reward_scales_are_refused():
    from envs.humanoid_bench import make
    from envs.registry import EnvOptionError

    with pytest.raises(EnvOptionError, match="no scalable terms"):
        make("h1hand-walk-v0", 1, reward_scales={"move": 2.0})


# --------------------------------------------------------------- gait signals (the eval-env hook)
PER_STEP_SHAPES = {  # key: shape after the env dimension (J: actuators, F: feet)
    gm.BASE_LIN_VEL_XY: (2,), gm.BASE_ANG_VEL_Z: (), gm.BASE_HEIGHT: (), gm.BASE_POS_XY: (2,),
    gm.PROJECTED_GRAVITY: (3,), gm.TORQUES: ("J",), gm.JOINT_POS: ("J",), gm.JOINT_VEL: ("J",),
}
FEET_SHAPES = {gm.FOOT_VEL_XY: ("F", 2), gm.FOOT_CONTACT: ("F",)}


def check_gait_signal_shapes(signals, num_envs, num_joints, feet=0):
    """The documented keys, with a leading env dimension except the static ones."""
    shapes = {**PER_STEP_SHAPES, **(FEET_SHAPES if feet else {})}
    assert set(signals) == set(shapes) | {gm.TORQUE_LIMITS, gm.JOINT_LIMITS, gm.DT}
    sizes = {"J": num_joints, "F": feet}
    for key, shape in shapes.items():
        assert signals[key].shape == (num_envs, *(sizes.get(n, n) for n in shape)), key
        assert signals[key].dtype == (torch.bool if key == gm.FOOT_CONTACT else torch.float32), key
    assert signals[gm.TORQUE_LIMITS].shape == (num_joints,) and (signals[gm.TORQUE_LIMITS] > 0).all()
    assert signals[gm.JOINT_LIMITS].shape == (num_joints, 2)
    assert (signals[gm.JOINT_LIMITS][:, 0] <= signals[gm.JOINT_LIMITS][:, 1]).all()
    assert isinstance(signals[gm.DT], float)


def humanoid_v5_joints():
    """Humanoid-v5's actuated joints, in actuator order: their observation indices (position
    and velocity: the observation starts with qpos[2:], then qvel), ranges, and the gears."""
    model = gym.make(GENERIC).unwrapped.model
    joints = model.actuator_trnid[:, 0]
    return model.jnt_qposadr[joints] - 2, model.nq - 2 + model.jnt_dofadr[joints], model.jnt_range[joints], \
        model.actuator_gear[:, 0]


def projected_gravity_of(quat):
    """World -z in the frame of the (w, x, y, z) quaternions `quat` [N, 4]: minus the third row
    of their rotation matrices."""
    w, x, y, z = (quat / quat.norm(dim=-1, keepdim=True)).double().unbind(-1)
    return -torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)


@pytest.mark.parametrize("vectorization", ["processes", "subproc"])
def test_gait_signals_have_the_documented_keys_shapes_and_values(vectorization):
    """Humanoid-v5 through the adapter: an upright torso at its starting height, the model's
    joint ranges and torque limits (ctrlrange 0.4 x gear), its control step."""
    pos_index, _, ranges, gears = humanoid_v5_joints()
    env = generic(3, seed=2, vectorization=vectorization)
    try:
        env.reset()
        obs = env.step(torch.zeros(3, env.num_actions))[0]
        signals = env.gait_signals()
        check_gait_signal_shapes(signals, 3, 17)
        upright = torch.tensor([[0.0, 0.0, -1.0]] * 3)
        torch.testing.assert_close(signals[gm.PROJECTED_GRAVITY], upright, atol=0.05, rtol=0)
        assert torch.equal(signals[gm.BASE_HEIGHT], obs[:, 0])  # Humanoid-v5's observation starts at the torso's z
        assert ((signals[gm.BASE_HEIGHT] - 1.4).abs() < 0.05).all()
        assert torch.equal(signals[gm.JOINT_POS], obs[:, pos_index])
        assert torch.equal(signals[gm.JOINT_LIMITS], torch.from_numpy(ranges).float())
        torch.testing.assert_close(signals[gm.TORQUE_LIMITS], torch.from_numpy(0.4 * gears).float())
        assert signals[gm.DT] == pytest.approx(0.015)
        assert (signals[gm.TORQUES].abs() < 1e-6).all()  # zero actions: the motors push nothing
        assert not torch.equal(signals[gm.BASE_POS_XY][0], signals[gm.BASE_POS_XY][1])  # seeds differ per env
    finally:
        env.close()


@pytest.mark.parametrize("first_call_at_the_end", [False, True])
def test_gait_signals_of_finished_envs_describe_the_state_before_the_reset(first_call_at_the_end):
    """Rows of envs whose episode ended in the step are their final state, as in their final
    observations, not the reset state in `obs`: with the hook called after every step, and
    when its very first call comes right after the episode end (the workers read the signals
    at every episode end until the hook asks for them)."""
    pos_index, vel_index, _, _ = humanoid_v5_joints()
    env = generic(4, seed=1, max_episode_steps=3)
    try:
        env.reset()
        for t in range(3):
            obs, _, dones, extras = env.step(torch.rand(4, env.num_actions) * 2 - 1)
            signals = None if first_call_at_the_end and t < 2 else env.gait_signals()
        assert dones.all() and extras[TIME_OUTS].all()
        final = extras[FINAL_OBSERVATIONS][ACTOR]
        assert not torch.equal(final, obs)
        assert torch.equal(signals[gm.BASE_HEIGHT], final[:, 0])
        torch.testing.assert_close(signals[gm.PROJECTED_GRAVITY], projected_gravity_of(final[:, 1:5]).float())
        assert torch.equal(signals[gm.JOINT_POS], final[:, pos_index])
        assert torch.equal(signals[gm.JOINT_VEL], final[:, vel_index])
        # the next step's rows describe the new episode
        obs = env.step(torch.zeros(4, env.num_actions))[0]
        assert torch.equal(env.gait_signals()[gm.BASE_HEIGHT], obs[:, 0])
    finally:
        env.close()


def test_both_transports_give_identical_gait_signals_and_the_hook_changes_no_step():
    """Shared-memory workers and SB3's pipes, across episode ends: the same signals, and the
    same observations as an env whose hook is never called (reading changes no simulation)."""
    a = generic(4, seed=3, max_episode_steps=5)
    b = generic(4, seed=3, max_episode_steps=5, vectorization="subproc")
    c = generic(4, seed=3, max_episode_steps=5)
    try:
        for env in (a, b, c):
            env.reset()
        g = torch.Generator().manual_seed(0)
        ends = 0
        for _ in range(12):
            actions = torch.rand(4, a.num_actions, generator=g) * 2 - 1
            (oa, _, da, _), (ob, _, _, _), (oc, _, _, _) = a.step(actions), b.step(actions), c.step(actions)
            assert torch.equal(oa, ob) and torch.equal(oa, oc)
            ends += int(da.sum())
            sa, sb = a.gait_signals(), b.gait_signals()
            assert set(sa) == set(sb)
            for key in sa:
                assert sa[key] == sb[key] if key == gm.DT else torch.equal(sa[key], sb[key]), key
        assert ends >= 8  # every env ended two episodes (time-outs) or more (falls)
    finally:
        for env in (a, b, c):
            env.close()


def test_gait_signals_are_read_every_step_only_once_the_hook_asked():
    """The training envs never call the hook: their steps read nothing but each episode's end."""
    env = GaitSignals(gym.make(GENERIC, max_episode_steps=3))
    reader, reads = env._gait_reader(), []
    read = reader.read
    reader.read = lambda: reads.append(1) or read()
    try:
        env.reset(seed=0)
        env.step(np.zeros(17))
        env.step(np.zeros(17))
        assert len(reads) == 0
        *_, truncated, _ = env.step(np.zeros(17))  # the time-out: read before any reset
        assert truncated and len(reads) == 1
        z = float(env.unwrapped.data.qpos[2])
        env.reset(seed=1)  # as the vector env's auto-reset does
        assert env.gait_signals()[gm.BASE_HEIGHT] == z  # the first call: the finished episode's end
        env.step(np.zeros(17))
        env.step(np.zeros(17))
        assert len(reads) == 3  # from now on, every step
        assert env.gait_static()[gm.DT] == pytest.approx(0.015)
    finally:
        env.close()


def test_gait_signals_of_an_env_without_mujoco_are_empty():
    env = GaitSignals(_GoalFromGlobalNumPy())
    env.reset(seed=0)
    env.step(np.zeros(1))
    assert env.gait_signals() == {} and env.gait_static() == {}


# --------------------------------------------------------------- HumanoidBench itself
@needs_humanoid_bench
@pytest.mark.parametrize("task", ["h1hand-walk-v0", "h1hand-stand-v0"])
def test_h1hand_tasks_step_and_reset(task):
    env = make_env("humanoid_bench", task, num_envs=3, seed=1)
    try:
        assert (env.num_obs, env.num_actions, env.max_episode_steps) == (151, 61, 1000)
        obs, _ = env.reset()
        assert obs.shape == (3, 151) and obs.dtype == torch.float32
        for _ in range(5):
            obs, rewards, dones, extras = env.step(torch.rand(3, 61) * 2 - 1)
        assert obs.shape == (3, 151) and rewards.shape == (3,) and torch.isfinite(rewards).all()
        assert not torch.equal(obs[0], obs[1])  # seeds differ per env
    finally:
        env.close()


@needs_humanoid_bench
@pytest.mark.parametrize("vectorization", ["processes", "subproc"])
def test_goals_from_the_global_numpy_generator_follow_the_env_seeds(vectorization):
    """h1hand-push draws its goal from np.random: goals must differ across envs (forked
    workers share the parent's global state) and repeat under reset(seed)."""
    from envs.humanoid_bench import make

    env = make("h1hand-push-v0", num_envs=4, vectorization=vectorization)
    try:
        goal = slice(154, 156)  # goal x, y: after 151 robot state values and the left hand's position
        first = env.reset(seed=5)[0][:, goal]
        assert len({tuple(row.tolist()) for row in first}) == 4
        env.step(torch.zeros(4, 61))
        assert torch.equal(env.reset(seed=5)[0][:, goal], first)
    finally:
        env.close()


def h1hand_joint_actuators(task):
    """The actuators of a HumanoidBench robot that drive one joint: their indices, the
    joints' qpos (= observation) indices and ranges, and the actuators' force ranges."""
    importlib.import_module("humanoid_bench")  # registers the tasks
    model = gym.make(task, render_mode=None).unwrapped.model
    rows = np.flatnonzero(model.actuator_trntype == 0)
    joints = model.actuator_trnid[rows, 0]
    return rows, model.jnt_qposadr[joints], model.jnt_range[joints], model.actuator_forcerange[rows]


@needs_humanoid_bench
def test_h1hand_gait_signals_describe_the_robot_and_each_episode_end():
    """h1hand-walk: 61 actuators (53 joints and 8 tendon-coupled finger pairs), two feet, an
    upright pelvis at its standing height; its observation is qpos then qvel, so the signals
    can be checked against the observations, and finished rows against the final ones."""
    from envs.humanoid_bench import make

    task = "h1hand-walk-v0"
    rows, qpos_index, ranges, force_ranges = h1hand_joint_actuators(task)
    env = make(task, num_envs=2, seed=0, num_workers=2, max_episode_steps=3)
    try:
        env.reset()
        steps = []
        for t in range(6):
            obs, _, dones, extras = env.step(torch.zeros(2, 61))
            signals = env.gait_signals()
            steps.append(signals)
            state = extras[FINAL_OBSERVATIONS][ACTOR]  # equals obs except at episode ends
            assert bool(dones.all()) == (t in (2, 5)) and bool(dones.any()) == (t in (2, 5))
            assert torch.equal(signals[gm.BASE_HEIGHT], state[:, 2])
            assert torch.equal(signals[gm.BASE_POS_XY], state[:, :2])
            assert torch.equal(signals[gm.JOINT_POS][:, rows], state[:, qpos_index])
            torch.testing.assert_close(signals[gm.PROJECTED_GRAVITY], projected_gravity_of(state[:, 3:7]).float())
            if t == 0:
                check_gait_signal_shapes(signals, 2, 61, feet=2)
                assert len(rows) == 53
                torch.testing.assert_close(signals[gm.PROJECTED_GRAVITY], torch.tensor([[0.0, 0.0, -1.0]] * 2), atol=0.05,
                                           rtol=0)
                assert ((signals[gm.BASE_HEIGHT] - 0.98).abs() < 0.05).all()  # the pelvis of the standing keyframe
                assert signals[gm.DT] == pytest.approx(0.02)
                assert torch.equal(signals[gm.TORQUE_LIMITS][rows], torch.from_numpy(force_ranges[:, 1]).float())
                assert torch.equal(signals[gm.JOINT_LIMITS][rows], torch.from_numpy(ranges).float())
                tendons = np.setdiff1d(np.arange(61), rows)
                assert torch.isinf(signals[gm.JOINT_LIMITS][tendons]).all()  # HumanoidBench leaves them unlimited
        assert not torch.equal(state, obs)
        traj = {key: torch.stack([s[key] for s in steps]) for key in steps[0] if key not in gm.STATIC_KEYS}
        traj.update({key: steps[0][key] for key in gm.STATIC_KEYS if key in steps[0]})
        metrics = gm.gait_metrics(traj)
        assert set(metrics) == {"torque_saturation_rate", "joint_limit_violation_rate", "foot_slip",
                                "orientation_error", "energy_per_metre"}
        assert all(np.isfinite(value) for value in metrics.values()), metrics
    finally:
        env.close()


@needs_humanoid_bench
def test_h1hand_gait_signals_are_the_same_through_both_transports():
    from envs.humanoid_bench import make

    a = make("h1hand-walk-v0", num_envs=2, seed=4, num_workers=2, max_episode_steps=3)
    b = make("h1hand-walk-v0", num_envs=2, seed=4, vectorization="subproc", max_episode_steps=3)
    try:
        a.reset(), b.reset()
        g = torch.Generator().manual_seed(0)
        for _ in range(4):  # across the time-out at step 3
            actions = torch.rand(2, 61, generator=g) * 2 - 1
            assert torch.equal(a.step(actions)[0], b.step(actions)[0])
            sa, sb = a.gait_signals(), b.gait_signals()
            assert set(sa) == set(sb) and len(sa) == 13
            for key in sa:
                assert sa[key] == sb[key] if key == gm.DT else torch.equal(sa[key], sb[key]), key
    finally:
        a.close(), b.close()


@needs_humanoid_bench
def test_workers_make_their_envs_once():
    """Under mujoco 3.1.6 every gym.make leaks file descriptors: episodes ending and
    reseeding must reuse each worker's envs, so the workers' open files stay the same."""
    from envs.humanoid_bench import make

    env = make("h1hand-stand-v0", num_envs=4, num_workers=2, max_episode_steps=3)
    try:
        env.reset()
        env.step(torch.zeros(4, 61))
        pids = [p.pid for p in env._vec._processes]
        before = [len(os.listdir(f"/proc/{pid}/fd")) for pid in pids]
        for _ in range(9):  # three episodes per env
            env.step(torch.zeros(4, 61))
        env.reset(seed=5)
        assert [len(os.listdir(f"/proc/{pid}/fd")) for pid in pids] == before
    finally:
        env.close()


@needs_humanoid_bench
def test_registered_time_limits_match_ours_and_unknown_ids_are_named():
    from envs.humanoid_bench import tasks

    ids = tasks()
    assert "h1hand-walk-v0" in ids and "g1-run-v0" in ids
    for task in ids:
        assert gym.spec(task).max_episode_steps == time_limit(task), task
    with pytest.raises(UnknownTaskError, match="Did you mean 'h1hand-balance_simple-v0'"):
        check_task("humanoid_bench", "h1hand-balance-simple")


@needs_humanoid_bench
def test_a_short_training_run_starts_logs_and_films_its_evaluation(tmp_path):
    import imageio.v3 as imageio

    from fast_td3.training.metrics_log import read_metrics

    result = subprocess.run(
        [str(BIN / "fast-td3-train"), "task=h1hand-walk-v0", "sizing=cpu", "env.num_envs=4",
         "env.options.num_workers=2", "algo.batch_size=64", "algo.buffer_size=200", "total_steps=30",
         "eval_interval=30", "eval_episodes=2", "env.max_episode_steps=20", "logger.console=false", "logger.log_interval=10", "eval_video=true",
         "hydra.run.dir=run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "MUJOCO_GL": "egl"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "HumanoidBenchVecEnv('h1hand-walk-v0', num_envs=4, vectorization='processes')" in result.stdout
    records = read_metrics(tmp_path / "run")
    assert any("eval/return_mean" in r for r in records)
    # gait metrics from the eval env's gait_signals() hook
    assert any("eval/gait/foot_slip" in r and "eval/gait/energy_per_metre" in r for r in records)
    assert any("train/episode_return" in r for r in records)  # 20-step episodes ended and were logged
    (video,) = (tmp_path / "run" / "videos").glob("*.mp4")
    frames = imageio.imread(video, index=None)
    assert frames.shape[0] == 20 and frames.shape[-1] == 3 and frames.std() > 0  # one rendered frame per step
