"""`fast-td3-train`, `fast-td3-eval` and `fast-td3-play` as a user runs them (subprocesses, real Hydra)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fast_td3.training import checkpoint as ckpt
from fast_td3.training.metrics_log import read_metrics
from helpers import assert_processes_exit, site_hook

BIN = Path(sys.executable).parent
TRAIN = str(BIN / "fast-td3-train")
EVAL = str(BIN / "fast-td3-eval")
PLAY = str(BIN / "fast-td3-play")
# Small and quick: the tiny learner on InvertedPendulum, no console noise.
QUICK = [
    "sizing=cpu", "env.num_envs=4", "algo.batch_size=64", "algo.buffer_size=500",
    "algo.actor_hidden_dims=[32,32]", "algo.critic_hidden_dims=[64,64]", "algo.precision=fp32",
    "eval_episodes=2", "logger.console=false",
]


def run(cmd, tmp_path, timeout=300, env=None):
    return subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def five_steps(tmp_path_factory):
    """One finished 5-step run (12-step episodes), trained once for the tests that resume, refuse,
    evaluate or play a finished run."""
    root = tmp_path_factory.mktemp("five_steps")
    result = run([TRAIN, *QUICK, "total_steps=5", "env.max_episode_steps=12", "hydra.run.dir=run"], root)
    assert result.returncode == 0, result.stderr
    return root / "run"


@pytest.fixture
def finished_run(five_steps, tmp_path):
    """A private copy of `five_steps` as `tmp_path/run` (the tests change it)."""
    shutil.copytree(five_steps, tmp_path / "run")
    return tmp_path / "run"


def test_help_and_cfg_job_show_the_composed_config(tmp_path):
    helped = run([TRAIN, "--help"], tmp_path)
    assert helped.returncode == 0
    assert "HalfCheetah-v5" in helped.stdout and "sizing: cpu, gpu" in helped.stdout and "recipe: t1, t1_nominal" in helped.stdout
    # every key with its default and the one-line doc from fast_td3/training/config.py
    assert "algo.batch_size = 32768\n      Transitions per update" in helped.stdout
    assert "logger.wandb_mode = disabled\n      wandb:" in helped.stdout
    shown = run([TRAIN, "--cfg", "job", "task=HalfCheetah-v5", "sizing=cpu", "seed=7"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "task: HalfCheetah-v5" in shown.stdout and "seed: 7" in shown.stdout
    assert "v_max: 1500.0" in shown.stdout  # the task file's support bounds
    assert "batch_size: 2048" in shown.stdout  # sizing=cpu, applied after the task


def test_unknown_task_lists_valid_tasks_and_suggests_the_nearest(tmp_path):
    result = run([TRAIN, "task=HalfCheeta-v5"], tmp_path)
    assert result.returncode == 2
    assert "Did you mean 'HalfCheetah-v5'" in result.stderr
    assert "gymnasium: " in result.stderr and "Walker2d-v5" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_mistyped_key_is_named_with_a_suggestion(tmp_path):
    result = run([TRAIN, "algo.batch_sze=1024"], tmp_path)
    assert result.returncode == 2
    assert "'algo.batch_sze'" in result.stderr and "Did you mean 'algo.batch_size'" in result.stderr


def test_hydra_syntax_passes_the_friendly_checks():
    from fast_td3.training.cli_checks import check_command_line

    for fine in (["hydra/job_logging=disabled"], ["task=choice(Hopper-v5,Ant-v5)"], ["task=glob(*)"],
                 ["+env.options.env_kwargs.ctrl_cost_weight=0"], ["task=Hopper-v5,Ant-v5", "seed=1,2"],
                 ["env.options.vectorization=processes"], ["--cfg", "job"]):
        assert check_command_line(fine) is None, fine
    assert "Unknown task 'Hoper-v5'" in check_command_line(["task=Ant-v5,Hoper-v5"])
    assert "Unknown config key 'sed'" in check_command_line(["sed=1"])


def test_invalid_value_names_the_field(tmp_path):
    result = run([TRAIN, *QUICK, "algo.v_min=5", "algo.v_max=1"], tmp_path)
    assert result.returncode == 2 and "v_min (5.0) must be < v_max (1.0)" in result.stderr


def test_missing_suite_prints_the_install_command(tmp_path):
    # Make the suite's package unimportable even where it is installed.
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['mujoco_playground'] = None\n")
    result = run([TRAIN, *QUICK, "env.suite=playground"], tmp_path, env={"PYTHONPATH": str(blocker)})
    assert result.returncode == 2
    assert "mujoco_playground" in result.stderr and 'pip install -e ".[playground]"' in result.stderr


def test_train_then_eval_prints_one_json_line(tmp_path):
    result = run([TRAIN, *QUICK, "total_steps=40", "eval_interval=20", "hydra.run.dir=run"], tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "run"
    assert (run_dir / "config.yaml").is_file() and (run_dir / ".hydra" / "overrides.yaml").is_file()
    # the precision actually used, and why, is printed and recorded with the run
    assert "Precision: fp32 (set explicitly)" in result.stdout
    assert "precision: fp32\n" in (run_dir / "config.yaml").read_text().split("resolved:")[1]
    # ...with the CPU it trained on (scripts/recipe_table.py reads it)
    from fast_td3.learner.precision import cpu_model

    assert OmegaConf.load(run_dir / "config.yaml").resolved.cpu == cpu_model()
    records = read_metrics(run_dir)
    evals = [(r["step"], r["eval/return_mean"]) for r in records if "eval/return_mean" in r]
    assert [step for step, _ in evals] == [20, 40]
    best_step, best_return = max(evals, key=lambda e: (e[1], e[0]))  # on a tie the later one
    # the run ends with its evaluations and the commands that come next, with this run's folder
    summary = result.stdout[result.stdout.index("Finished InvertedPendulum-v5: 40 global steps."):]
    assert f"final eval  return {evals[-1][1]:.4g}" in summary
    assert (f"best eval   return {best_return:.4g} at global step {best_step}, kept as run/checkpoints/best.pt"
            in summary)
    for command in ("fast-td3-eval run ", "fast-td3-play run --video run/play.mp4", "fast-td3-report run ",
                    "fast-td3-train resume=run total_steps=80", "logger=tensorboard turns it on"):
        assert command in summary, command
    assert "fast-td3-export" not in summary  # T1 tasks only
    evaluated = run([EVAL, str(run_dir), "--episodes", "3"], tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    line = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert line["task"] == "InvertedPendulum-v5" and line["step"] == best_step and line["episodes"] == 3
    assert f"fast-td3-eval: best checkpoint {run_dir / 'checkpoints' / 'best.pt'} (global step {best_step}" in \
        evaluated.stderr
    latest = run([EVAL, str(run_dir), "--episodes", "3", "--use", "latest"], tmp_path)
    assert latest.returncode == 0, latest.stderr
    assert json.loads(latest.stdout.strip().splitlines()[-1])["step"] == 40
    assert line["return_mean"] > 0 and line["return_std"] >= 0
    # gait metrics come with every evaluation; a pendulum reports only what the runner knows itself
    assert set(line["gait"]) == {"action_smoothness", "fall_rate"} and 0 <= line["gait"]["fall_rate"] <= 1


def test_the_summary_names_export_for_t1_tasks_tensorboard_when_it_was_on_and_the_sweep(tmp_path, monkeypatch):
    from fast_td3.training.run_summary import FinishedRun, summary

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "runs" / "sweeps" / "s" / "0_T1LowDimJoystickFlatTerrain_seed1"
    ckpt.CheckpointManager(run_dir).save({"global_step": 10}, 10)
    text = summary(FinishedRun(run_dir, "T1LowDimJoystickFlatTerrain", 10, {}, tensorboard=True, has_viewer=True,
                               sweep_dir=run_dir.parent))
    folder = "runs/sweeps/s/0_T1LowDimJoystickFlatTerrain_seed1"
    assert "final eval  none during training" in text and "best eval" not in text
    for command in (f"fast-td3-eval {folder} ", f"fast-td3-play {folder} ", "fast-td3-report runs/sweeps/s ",
                    f"fast-td3-export checkpoint={folder} out={folder}/bundle ",
                    f"fast-td3-train resume={folder} total_steps=20 ", f"tensorboard --logdir {folder} "):
        assert command in text, command
    assert "TensorBoard was off" not in text and "evaluate the latest checkpoint" in text


def test_run_folder_layout(tmp_path):
    single = run([TRAIN, *QUICK, "total_steps=5", "seed=9", "out_dir=out"], tmp_path)
    assert single.returncode == 0, single.stderr
    (folder,) = (tmp_path / "out" / "InvertedPendulum-v5").iterdir()
    assert folder.name.endswith("_9") and (folder / "metrics.jsonl").is_file()


# Slow tier: two more runs in a process (4 s on 2 cores) for a layout the default tier checks with
# the joblib launcher (next test) and with Hydra's basic launcher on Playground (test_sweep.py).
@pytest.mark.slow
def test_multirun_folder_layout(tmp_path):
    result = run([TRAIN, "-m", *QUICK, "total_steps=10", "seed=1,2", "out_dir=out"], tmp_path)
    assert result.returncode == 0, result.stderr
    jobs = sorted(p.name for p in (tmp_path / "out" / "sweeps").glob("*/*") if p.is_dir())
    assert jobs == ["0_InvertedPendulum-v5_seed1", "1_InvertedPendulum-v5_seed2"]


# Each run's Runner.train waits (at most 240 s) until both runs of the sweep have entered
# it, then notes how many it saw: run one after the other, the first would see only itself.
BOTH_STARTED = """
import os, time
from pathlib import Path
_train = m.Runner.train
def _train_once_both_started(self, *args, **kwargs):
    here = Path(os.environ["FAST_TD3_TEST_BARRIER"])
    (here / f"started_{os.getpid()}").touch()
    deadline = time.monotonic() + 240
    while len(list(here.glob("started_*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    (here / f"saw_{len(list(here.glob('started_*')))}_{os.getpid()}").touch()
    return _train(self, *args, **kwargs)
m.Runner.train = _train_once_both_started
"""


def test_a_sweep_runs_several_at_a_time_with_the_joblib_launcher(tmp_path):
    """`pip install -e ".[sweep]"`: N runs of one sweep at once, each a process of its own.
    Overlap is shown by a rendezvous (each run waits in train() for the other), not by timing,
    which a loaded machine can serialise."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason='pip install -e ".[sweep]"')
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    hook = site_hook(tmp_path / "hook", "fast_td3.training.runner:Runner", BOTH_STARTED)
    result = run([TRAIN, "-m", *QUICK, "total_steps=40", "seed=1,2", "out_dir=out", "hydra/launcher=joblib",
                  "hydra.launcher.n_jobs=2"], tmp_path, env={**hook, "FAST_TD3_TEST_BARRIER": str(barrier)})
    assert result.returncode == 0, result.stderr
    runs = sorted(p for p in (tmp_path / "out" / "sweeps").glob("*/*") if p.is_dir())
    assert [p.name for p in runs] == ["0_InvertedPendulum-v5_seed1", "1_InvertedPendulum-v5_seed2"]
    started = sorted(p.name.split("_")[1] for p in barrier.glob("started_*"))
    assert len(started) == 2 and str(os.getpid()) not in started  # two processes of their own
    # both were inside train() at once: each saw the other arrive before it went on
    assert sorted(p.name for p in barrier.glob("saw_*")) == sorted(f"saw_2_{pid}" for pid in started)


def children_of(pid):
    """PIDs whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


# Slow tier: two CLI runs and 400 global steps (9 s on 2 cores, much more under load). The default
# tier keeps each part: workers dying with a SIGKILLed trainer (test_env_gymnasium.py, SB3's in
# test_env_humanoid_bench.py), whole checkpoints after a crash mid-write (test_checkpoint.py,
# test_bad_inputs.py) and resumes through the CLI (below).
@pytest.mark.slow
def test_sigkilled_run_resumes_from_its_last_checkpoint_and_finishes(tmp_path):
    """kill -9 mid-training (env worker processes included): the latest checkpoint is whole,
    no worker outlives the trainer, and a resume finishes the run."""
    total = 400
    cmd = [TRAIN, *QUICK, f"total_steps={total}", "save_interval=25", "eval_interval=0", "hydra.run.dir=run",
           "env.options.vectorization=processes", "env.options.num_workers=2"]
    process = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    manager = ckpt.CheckpointManager(tmp_path / "run")
    deadline = time.time() + 240
    while time.time() < deadline:
        latest = manager.latest()
        if latest is not None and ckpt.step_of(latest) >= 100:
            break
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.05)
    workers = children_of(process.pid)
    assert len(workers) >= 2
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert_processes_exit(workers, "env workers outlived the killed trainer")
    killed_at = ckpt.step_of(manager.latest())
    assert 100 <= killed_at < total
    state = ckpt.load(manager.latest())  # the latest checkpoint is whole
    assert state["global_step"] == killed_at

    resumed = run([TRAIN, "resume=run", "logger.console=false"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"global step {killed_at}" in resumed.stdout
    final = ckpt.load(manager.latest())
    assert final["global_step"] == total
    assert final["agent"]["critic_updates"] > state["agent"]["critic_updates"]
    steps = [r["step"] for r in read_metrics(tmp_path / "run") if "loss/critic" in r]
    assert steps[-1] == total and max(steps) == total


def test_resume_overrides_are_kept_for_later_resumes(tmp_path, finished_run):
    extended = run([TRAIN, "resume=run", "total_steps=12"], tmp_path)
    assert extended.returncode == 0, extended.stderr
    again = run([TRAIN, "resume=run"], tmp_path)  # no total_steps: the extended length holds
    assert again.returncode == 0, again.stderr
    assert "total_steps: 12" in (tmp_path / "run" / "config.yaml").read_text()
    assert ckpt.load(ckpt.CheckpointManager(tmp_path / "run").latest())["global_step"] == 12
    assert (tmp_path / "run" / ".hydra" / "overrides.yaml").is_file()  # the original record is kept
    assert list((tmp_path / "run" / ".hydra").glob("resumed_*/overrides.yaml"))  # and each resume's


def test_resume_takes_overrides_below_free_form_dicts(tmp_path, finished_run):
    """`env.options.x=v` becomes `++env.options.x=v` for Hydra; a resume applies it like any key."""
    resumed = run([TRAIN, "resume=run", "total_steps=8", "env.options.vectorization=sync"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "vectorization: sync" in (tmp_path / "run" / "config.yaml").read_text()


# Slow tier: three refused resumes (4 s on 2 cores); the default tier refuses a seed change and a
# missing folder with the same messages, and checks that nothing changed or was created
# (test_bad_inputs.py: test_a_refused_resume_changes_nothing, the resume=nowhere case).
@pytest.mark.slow
def test_resume_refuses_group_and_seed_changes_and_missing_folders(tmp_path, finished_run):
    config = (tmp_path / "run" / "config.yaml").read_text()
    for change in ("task=Hopper-v5", "seed=5"):
        result = run([TRAIN, "resume=run", change], tmp_path)
        assert result.returncode == 2 and "cannot change the task, config groups or seed" in result.stderr
    assert (tmp_path / "run" / "config.yaml").read_text() == config
    typo = run([TRAIN, "resume=rnu"], tmp_path)
    assert typo.returncode == 2 and "resume=rnu: no such run folder or checkpoint file" in typo.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing created for the typo


def test_sigterm_to_the_process_group_stops_cleanly_after_a_whole_step(tmp_path):
    """A scheduler's SIGTERM reaches the trainer and its env worker processes: the run saves a
    checkpoint of a whole global step, says how to resume, and the resume finishes."""
    cmd = [TRAIN, *QUICK, "env.options.vectorization=processes", "total_steps=100000", "save_interval=0",
           "eval_interval=0", "logger.log_interval=20", "algo.learning_starts=3", "hydra.run.dir=run"]
    process = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not (metrics.is_file() and read_metrics(tmp_path / "run")):
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.05)
    logged = read_metrics(tmp_path / "run")[-1]["step"]
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Continue with: fast-td3-train resume=" in stderr and "Traceback" not in stderr
    assert stderr.count("checkpoint saved to") == 1
    state = ckpt.load(ckpt.CheckpointManager(tmp_path / "run").latest())
    step, agent = state["global_step"], state["agent"]
    assert step >= logged
    # every counter describes the same whole step: updates ran at steps 3..step, 2 per step
    expected_updates = (step - 3 + 1) * 2
    assert agent["critic_updates"] == agent["critic_schedule"]["updates"] == expected_updates
    assert agent["actor_updates"] == agent["actor_schedule"]["updates"] == expected_updates // 2

    resumed = run([TRAIN, "resume=run", "total_steps=" + str(step + 10)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert ckpt.load(ckpt.CheckpointManager(tmp_path / "run").latest())["global_step"] == step + 10


def test_main_ends_each_error_with_its_exit_code_from_one_table():
    """docs/resume.md, "Exit codes": the first row of `train.exit_table` that matches decides;
    an error of ours matches none (Python's 1, with its traceback)."""
    from envs.registry import UnknownTaskError
    from fast_td3.learner.config import ConfigError
    from fast_td3.learner.device import DeviceError
    from fast_td3.training.guards import NonFiniteObservationError, TrainingStopped
    from fast_td3.training.startup_signals import StoppedBeforeTraining
    from fast_td3.training.train import BY_SIGNAL, exit_table

    def code(error):
        return next((code for errors, code, _ in exit_table() if isinstance(error, errors)), 1)

    assert code(NonFiniteObservationError("nan")) == 3
    for error in (ConfigError("x"), UnknownTaskError("x"), DeviceError("x"), FileNotFoundError("x"),
                  ckpt.CheckpointError("x"), ckpt.CheckpointMismatchError("x")):
        assert code(error) == 2, error
    assert code(ckpt.CheckpointWriteError("No space left on device")) == 4
    assert code(TrainingStopped(7, Path("step_7.pt"), signal.SIGTERM)) is BY_SIGNAL
    assert code(StoppedBeforeTraining(signal.SIGTERM)) is code(KeyboardInterrupt()) is BY_SIGNAL
    assert code(RuntimeError("a bug")) == code(OSError("not ours to explain")) == 1


def test_eval_writes_a_video_of_the_first_episode(tmp_path, finished_run):
    import imageio.v3 as imageio

    video = tmp_path / "episode.mp4"
    evaluated = run([EVAL, "run", "--episodes", "1", "--video", str(video)], tmp_path, env={"MUJOCO_GL": "egl"})
    assert evaluated.returncode == 0, evaluated.stderr
    line = json.loads(evaluated.stdout.strip().splitlines()[-1])
    frames = imageio.imread(video, index=None)
    assert frames.shape[0] == line["length_mean"] <= 12  # one frame per step of the episode
    assert frames.shape[-1] == 3 and frames.std() > 0  # a real rendered picture, not a blank

    # fast-td3-play records the same policy over a number of steps, across episode ends
    played = run([PLAY, "run", "--video", "play.mp4", "--steps", "30", "--num-envs", "2"], tmp_path,
                 env={"MUJOCO_GL": "egl"})
    assert played.returncode == 0, played.stderr
    record = json.loads(played.stdout.strip().splitlines()[-1])
    assert record["steps"] == 30 and record["episodes"] >= 2  # 12-step episodes, 2 envs
    assert "fast-td3-play: best checkpoint" in played.stderr and record["checkpoint"].endswith("best.pt")
    assert imageio.imread(tmp_path / "play.mp4", index=None).shape[0] == 30
    # gymnasium has no interactive viewer: the error says what to do instead
    viewed = run([PLAY, "run"], tmp_path)
    assert viewed.returncode == 2 and "has no viewer; record a video instead (--video" in viewed.stderr


# Slow tier: the default tier has the same case with a byte-for-byte check of the folder
# (test_bad_inputs.py::test_a_run_folder_is_never_trained_into_again).
@pytest.mark.slow
def test_a_used_run_folder_is_never_trained_into_again(tmp_path, finished_run):
    before = ckpt.CheckpointManager(tmp_path / "run").all()
    again = run([TRAIN, *QUICK, "total_steps=5", "hydra.run.dir=run"], tmp_path)
    assert again.returncode == 2 and "already holds a run; continue it with resume=" in again.stderr
    assert ckpt.CheckpointManager(tmp_path / "run").all() == before


def test_eval_of_a_missing_checkpoint_says_so(tmp_path, capsys):
    result = run([EVAL, str(tmp_path / "nowhere")], tmp_path)
    assert result.returncode == 2 and "neither a checkpoint file nor a run folder" in result.stderr
    # the same command in this process: a process start less for each of the other cases
    from fast_td3.analysis.evaluate_checkpoint import cli

    (tmp_path / "empty_run").mkdir()
    for argv, message in ([["run", "--episodes", "0"], "--episodes 0: give a whole number from 1 to 4096"],
                          [[str(tmp_path / "empty_run")], "no checkpoint in"]):
        with pytest.raises(SystemExit) as exited:
            cli(argv)
        assert exited.value.code == 2 and message in capsys.readouterr().err


def test_reward_presets_and_scales_compose_without_plus(tmp_path):
    """`reward=tuned` and `env.reward_scales.<term>=x` (no `+`) land in env.reward_scales;
    the command-line value wins over the preset's."""
    shown = run([TRAIN, "--cfg", "job", "task=T1JoystickFlatTerrain", "reward=tuned",
                 "env.reward_scales.action_rate=-0.5", "env.reward_scales.feet_slip=-2"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    from omegaconf import OmegaConf

    scales = OmegaConf.create(shown.stdout).env.reward_scales
    assert scales.action_rate == -0.5 and scales.feet_slip == -2 and scales.orientation == -5.0
    assert scales.energy == -5.0e-5  # from reward=tuned
    playground = OmegaConf.create(shown.stdout)
    assert playground.env.suite == "playground" and playground.algo.gamma == 0.97


def test_reward_scales_reach_training_envs_but_not_evaluation():
    from fast_td3.training.config import EnvConfig

    cfg = EnvConfig(suite="playground", task="T1JoystickFlatTerrain", reward_scales={"pose": -2.0},
                    options={"push": True}, eval_options={"push": False})
    assert cfg.adapter_options()["reward_scales"] == {"pose": -2.0} and cfg.adapter_options()["push"] is True
    evaluation = cfg.adapter_options(evaluation=True)
    assert "reward_scales" not in evaluation and evaluation["push"] is False


def test_keys_below_free_form_dicts_are_added_for_the_user():
    from fast_td3.training.train_cli import add_to_free_form_dicts

    assert add_to_free_form_dicts("env.reward_scales.pose=-1") == "++env.reward_scales.pose=-1"
    assert add_to_free_form_dicts("env.options.impl=warp") == "++env.options.impl=warp"
    deep = "env.options.config_overrides.noise_config.level=0"
    assert add_to_free_form_dicts(deep) == "++" + deep
    for unchanged in ("algo.gamma=0.9", "+env.reward_scales.pose=-1", "task=CheetahRun", "--cfg", "env.num_envs=4"):
        assert add_to_free_form_dicts(unchanged) == unchanged


def test_gymnasium_tasks_refuse_reward_scales_with_the_alternative(tmp_path):
    result = run([TRAIN, *QUICK, "env.reward_scales.ctrl_cost=0", f"out_dir={tmp_path}"], tmp_path)
    assert result.returncode == 2
    assert "no named reward terms" in result.stderr and "env_kwargs" in result.stderr
