"""A bad-input battery through the real console scripts (subprocesses), as a new user meets them.

Every case asserts the exit code, a message without a traceback that names the problem, and
that nothing was created or lost: no run folder for a rejected new run, an existing run's
folder (config, overrides, checkpoints) byte for byte unchanged after a refused resume.
Command-line and config errors run with torch, JAX, MuJoCo and gymnasium made unimportable:
they must be reported before any heavy import (in well under a second on an idle machine).
Cases that need checkpoints share one tiny trained run, made once per module.
"""

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fast_td3.training import checkpoint as ckpt
from helpers import site_hook

BIN = Path(sys.executable).parent
TRAIN, EVAL, PLAY, EXPORT = (str(BIN / name) for name in
                             ("fast-td3-train", "fast-td3-eval", "fast-td3-play", "fast-td3-export"))
QUICK = [
    "sizing=cpu", "env.num_envs=4", "algo.batch_size=64", "algo.buffer_size=500", "algo.learning_starts=3",
    "algo.actor_hidden_dims=[32,32]", "algo.critic_hidden_dims=[64,64]", "algo.precision=fp32",
    "algo.compile=false", "eval_episodes=2", "env.max_episode_steps=20", "logger.console=false",
    "eval_interval=0",
]
HEAVY = ("torch", "jax", "mujoco", "gymnasium", "mujoco_playground")
NO_CUDA = not torch.cuda.is_available()


def run(cmd, cwd, env=None, timeout=300):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def assert_user_error(result, says: str, code: int = 2, one_line: bool = True) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == code, output[-3000:]
    assert "Traceback" not in output and "HYDRA_FULL_ERROR" not in output, output[-3000:]
    assert says in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and errors[0].split(": error: ")[0].startswith("fast-td3-"), result.stderr
    if one_line:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder below `folder` with a hash of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def no_heavy(tmp_path_factory):
    return site_hook(tmp_path_factory.mktemp("no_heavy"), block=HEAVY)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run with checkpoints at global steps 10, 20 and 30."""
    root = tmp_path_factory.mktemp("trained")
    result = run([TRAIN, *QUICK, "total_steps=30", "save_interval=10", "hydra.run.dir=run"], root)
    assert result.returncode == 0, result.stderr
    assert [ckpt.step_of(p) for p in ckpt.CheckpointManager(root / "run").all()] == [10, 20, 30]
    return root / "run"


@pytest.fixture
def run_copy(trained, tmp_path):
    """A private copy of the trained run (tests change its checkpoints)."""
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


# ------------------------------------------------------------------ the train command line and config
FAST = [
    (["task=HalfCheeta-v5"], "Did you mean 'HalfCheetah-v5'"),
    (["algo.batch_sze=1024"], "Did you mean 'algo.batch_size'"),
    (["+algo.gama=0.9"], "Unknown config key 'algo.gama'"),
    (["total_steps=abc"], "total_steps=abc: total_steps takes an integer"),
    (["algo.gamma=abc"], "algo.gamma takes a number"),
    (["logger.console=maybe"], "logger.console=maybe: logger.console takes true or false"),
    (["algo.actor_hidden_dims=abc"], "algo.actor_hidden_dims=abc: "),
    (["algo.actor_hidden_dims=[1,2"], "malformed override 'algo.actor_hidden_dims=[1,2'"),
    (["justaword"], "malformed override 'justaword'"),
    (["logger=nope"], "Unknown logger option 'nope'"),
    (["sizing=gpus"], "Did you mean 'gpu'"),
    (["recipe=t1_robust"], "Options of recipe (conf/recipe/): t1, t1_nominal, null"),
    (["preset=cpu_t1_robust"], "preset= is gone: a machine's sizes are sizing=cpu|gpu"),
    (["reward=tunde"], "Did you mean 'tuned'"),
    (["env.num_envs=0"], "env.num_envs must be >= 1, got 0"),
    (["algo.gamma=2"], "gamma must be in [0, 1], got 2.0"),
    (["algo.batch_size=-5"], "algo.batch_size (-5) must be >= env.num_envs"),
    (["keep_checkpoints=-1"], "keep_checkpoints must be >= 1, got -1"),
    (["keep_checkpoints=0"], "keep_checkpoints must be >= 1, got 0"),
    (["algo.v_min=5", "algo.v_max=1"], "v_min (5.0) must be < v_max (1.0)"),
    (["eval_episodes=0"], "eval_episodes must be >= 1"),
    (["out_dir=/proc/fast-td3"], "out_dir=/proc/fast-td3: cannot create"),
    (["out_dir=blocker/file"], "cannot create"),
    (["hydra.run.dir=blocker/file/run"], "hydra.run.dir: cannot create"),
    (["resume=nowhere"], "resume=nowhere: no such run folder or checkpoint file"),
    (["-m", "total_steps=5,abc"], "total_steps=abc: total_steps takes an integer"),  # every value of a sweep
    (["-m", "seed=1,2", "algo.gamma=0.9,2"], "gamma must be in [0, 1], got 2.0"),
    # values that failed only once training started, each with a traceback (issue 34)
    (["algo.buffer_size=2", "algo.learning_starts=1", "algo.n_step=3"], "algo.buffer_size (2) must be >= algo.n_step (3)"),
    (["seed=-1"], "seed=-1: seed must be an integer from 0 to 18446744073709551615"),
    (["seed=1180591620717411303424"], "seed=1180591620717411303424: seed must be an integer from 0 to"),
    (["env.options.env_kwargs=5"], "env.options.env_kwargs=5: env_kwargs takes keyword=value entries"),
    # keys that would do nothing in this run
    (["algo=fast_sac", "algo.fast_td3.std_min=0.1"],
     "algo.fast_td3.std_min=0.1 has no effect: it is a setting of fast_td3, and this run trains fast_sac"),
    (["algo.fast_sac.alpha_init=0.1"], "it is a setting of fast_sac, and this run trains fast_td3"),
    (["-m", "seed=1,2", "algo=fast_sac", "algo.fast_td3.std_min=0.1"], "it is a setting of fast_td3"),
    (["algo.critic_lr_end=1e-5"], "algo.critic_lr_end=1e-5 has no effect: it shapes the cosine schedule"),
    (["algo.compile=false", "algo.compile_mode=default"], "the update is not compiled (algo.compile=false)"),
    (["algo.obs_normalization=false", "algo.normalizer_eps=0.1"], "observations are not normalised"),
    (["algo=fast_sac", "algo.fast_sac.learn_alpha=false", "algo.fast_sac.alpha_lr=0.1"], "the temperature is not learnt"),
    (["logger.wandb_project=mine"], "logger.wandb_project=mine has no effect: wandb is off"),
    (["out_dir=elsewhere", "hydra.run.dir=run"], "out_dir=elsewhere has no effect: hydra.run.dir names the run folder"),
    (["resolved.precision=bf16"], "resolved.precision=bf16 has no effect: the trainer writes resolved.*"),
    (["distributed.batch=split"], "it applies to runs launched with torchrun"),
    (["-m", "seed=1,2", "hydra.run.dir=here"], "hydra.run.dir=here has no effect in a sweep (-m)"),
    (["--config-dir", "nowhere", "sizing=mine"], "--config-dir nowhere: no such folder"),
    # Hydra's and OmegaConf's own messages (issue 64): each was a page, a traceback or a usage block
    (["algo.v_max=inf"], "algo.v_max=inf: give a finite number"),
    (["algo.actor_lr=nan"], "algo.actor_lr=nan: give a finite number"),
    (["~seed"], "~seed: seed is a setting of fast-td3-train and cannot be removed"),
    (["hydra.run.dir"], "malformed override 'hydra.run.dir'"),
    (["hydra.job.chdir=maybe"], "hydra.job.chdir=maybe: hydra.job.chdir takes true or false"),
    (["sizing=cpu,gpu"], "a sweep over them needs -m (fast-td3-train -m sizing=cpu,gpu)"),
    (["--cfg", "nope"], "argument --cfg/-c: invalid choice: 'nope'"),
    (["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=-1", "seed=1,2"],
     "hydra.launcher.timeout_min=-1: give a whole number, 1 or more"),
]


@pytest.mark.parametrize("args, says", FAST, ids=[" ".join(a) for a, _ in FAST])
def test_a_bad_train_input_fails_before_any_heavy_import_and_creates_nothing(tmp_path, no_heavy, args, says):
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "file").write_text("a file where a folder should be")
    before = snapshot(tmp_path)
    started = time.perf_counter()
    result = run([TRAIN, *args], tmp_path, env=no_heavy)
    assert_user_error(result, says, one_line=not args[0].startswith("task="))
    assert time.perf_counter() - started < 30  # about 0.3 s idle; generous for a loaded CI machine
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("device, says", [
    ("nonsense", "device='nonsense' is not a device name (available here: auto, cpu"),
    pytest.param("cuda", "this machine has no CUDA GPU (available here: auto, cpu)",
                 marks=pytest.mark.skipif(not NO_CUDA, reason="a GPU is present")),
    ("cuda:99", "device='cuda:99'"),
])
def test_an_unavailable_device_says_what_is_available(tmp_path, trained, device, says):
    result = run([TRAIN, *QUICK, f"device={device}"], tmp_path)
    assert_user_error(result, says)
    assert list(tmp_path.iterdir()) == []
    if device == "nonsense":  # the other loaders resolve devices the same way
        assert_user_error(run([EVAL, str(trained), "--device", device], tmp_path), says)


@pytest.mark.parametrize("kwarg, says", [
    ("reset_noise_scale=nan", "env.options.env_kwargs.reset_noise_scale=nan: give a finite number"),  # before any env
    ("no_such_weight=1", "cannot be made with env.options.env_kwargs.no_such_weight=1"),
])
def test_env_keywords_the_simulator_rejects_are_named_and_leave_no_run_folder(tmp_path, kwarg, says):
    result = run([TRAIN, *QUICK, "total_steps=5", f"env.options.env_kwargs.{kwarg}"], tmp_path)
    assert_user_error(result, says)
    assert list(tmp_path.iterdir()) == []  # the run folder made for it is gone again, runs/ too


# ------------------------------------------------------------------ unreadable checkpoints in every loader
def _truncate(cut):
    """Keep the first `cut` bytes (a fraction: that share of the file; negative: all but the last)."""
    def damage(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[:int(len(data) * cut) if isinstance(cut, float) else cut])
    return damage


BAD_FILES = {
    "empty": (_truncate(0), "empty file"),
    "truncated_at_100_bytes": (_truncate(100), "truncated or damaged"),
    "truncated_at_half": (_truncate(0.5), "truncated or damaged"),
    "truncated_by_10_bytes": (_truncate(-10), "truncated or damaged"),
    "garbage": (lambda p: p.write_bytes(os.urandom(4096)), "not a fast-td3 checkpoint (not a PyTorch file)"),
    "zero_filled": (lambda p: p.write_bytes(bytes(4096)), "damaged (zero-filled"),
    "other_torch_file": (lambda p: torch.save({"weights": torch.zeros(3)}, p),
                         "not a fast-td3 checkpoint (a PyTorch file without global_step, agent"),
    "newer_format": (lambda p: torch.save({**ckpt.load(p), "format": ckpt.FORMAT + 1}, p),
                     "written by a newer fast-td3"),
}


# Through fast-td3-eval (a process each, 3 s on 2 cores): two kinds in the default tier, the rest in
# the slow tier; every kind's message is checked in-process in the default tier (next test).
THROUGH_EVAL_BY_DEFAULT = ("truncated_at_half", "garbage")


@pytest.mark.parametrize("kind", [kind if kind in THROUGH_EVAL_BY_DEFAULT else pytest.param(kind, marks=pytest.mark.slow)
                                  for kind in BAD_FILES])
def test_eval_names_an_unreadable_checkpoint_and_why(run_copy, kind):
    damage, says = BAD_FILES[kind]
    taken, _ = ckpt.pick_checkpoint(run_copy)  # best.pt: the run evaluated at its end
    damage(taken)
    result = run([EVAL, str(run_copy)], run_copy.parent)
    assert_user_error(result, says)
    assert taken.name in result.stderr


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_the_checkpoint_loader_names_an_unreadable_checkpoint_and_why(run_copy, kind):
    """The loader every command uses, in this process: the message the commands print."""
    damage, says = BAD_FILES[kind]
    taken, _ = ckpt.pick_checkpoint(run_copy)
    damage(taken)
    with pytest.raises(ckpt.CheckpointError) as error:
        ckpt.load(taken)
    assert says in str(error.value) and taken.name in str(error.value)


@pytest.mark.parametrize("command", ["export", "play"])
def test_export_and_play_name_an_unreadable_checkpoint(run_copy, command):
    newest = ckpt.CheckpointManager(run_copy).latest()
    _truncate(0.5)(newest)
    cmd = [EXPORT, f"checkpoint={newest}", "out=bundle"] if command == "export" else [PLAY, str(newest), "--video", "x.gif"]
    result = run(cmd, run_copy.parent)
    assert_user_error(result, f"{newest}: truncated or damaged")
    assert sorted(p.name for p in run_copy.parent.iterdir()) == ["run"]


# ------------------------------------------------------------------ resumes
@pytest.mark.parametrize("args, env, says", [
    (["{run}", "--trial", "3", "--gate-report", "r.json"], {}, "--trial, --gate-report: for T1 export bundles only"),
    (["t1_flat", "--num-envs", "2"], {}, "--num-envs: for run folders"),
    (["t1_flat", "--seconds", "1", "--video", "v.gif"], {}, "seconds=1 leaves nothing to judge"),  # NaN FAIL, exit 0
    (["t1_flat", "--seed", "3"], {}, "add --trial K"),
    (["t1_flat"], {"DISPLAY": ""}, "no display for MuJoCo's viewer"),
    (["t1_flat", "--video", "v.gif", "--seconds", "3"], {"MUJOCO_GL": "glfw", "DISPLAY": ""},
     "MuJoCo cannot render offscreen here"),  # and no GLFW warnings
])
def test_play_refuses_what_it_would_ignore_or_cannot_show_in_one_line(run_copy, tmp_path, args, env, says):
    before = snapshot(tmp_path)
    result = run([PLAY, *(arg.format(run=run_copy) for arg in args)], tmp_path, env={**os.environ, **env})
    assert_user_error(result, says)
    assert snapshot(tmp_path) == before


def test_resume_passes_a_truncated_newest_checkpoint_sets_it_aside_and_continues(run_copy):
    newest = ckpt.CheckpointManager(run_copy).latest()
    _truncate(0.5)(newest)
    torn = newest.read_bytes()
    result = run([TRAIN, "resume=run", "total_steps=25"], run_copy.parent)
    assert result.returncode == 0, result.stderr
    assert "step_000000030.pt cannot be read (truncated or damaged" in result.stderr
    assert "resuming from step_000000020.pt" in result.stderr and "global step 20" in result.stdout
    assert (run_copy / "checkpoints" / "unreadable" / newest.name).read_bytes() == torn  # kept, not deleted
    assert ckpt.load(ckpt.CheckpointManager(run_copy).latest())["global_step"] == 25


def test_resume_after_a_kill_during_a_checkpoint_write(run_copy):
    """What `kill -9` in the middle of a save leaves: a torn temp file beside the whole checkpoints."""
    checkpoints = run_copy / "checkpoints"
    whole = (checkpoints / "step_000000030.pt").read_bytes()
    (checkpoints / ".step_000000040.pt.tmp12345").write_bytes(whole[: len(whole) // 3])
    result = run([TRAIN, "resume=run", "total_steps=35"], run_copy.parent)
    assert result.returncode == 0, result.stderr
    assert "global step 30" in result.stdout and "cannot be read" not in result.stderr
    assert not list(checkpoints.glob(".*tmp*"))  # the torn temp file is cleaned up by the next save
    assert ckpt.load(ckpt.CheckpointManager(run_copy).latest())["global_step"] == 35


def _refused_resume(run_copy, args, says, env=None):
    before = snapshot(run_copy)
    result = run([TRAIN, "resume=run", *args], run_copy.parent, env=env)
    assert_user_error(result, says)
    assert snapshot(run_copy) == before  # config, overrides, .hydra and checkpoints untouched


def test_a_resume_with_no_readable_checkpoint_changes_nothing(run_copy):
    for path in ckpt.CheckpointManager(run_copy).all():
        _truncate(0.5)(path)
    _refused_resume(run_copy, [], "no checkpoint in run/checkpoints can be read (step_000000030.pt: truncated")


def test_a_checkpoint_of_another_task_is_refused_with_both_names(run_copy):
    newest = ckpt.CheckpointManager(run_copy).latest()
    state = ckpt.load(newest)
    state["config"]["env"]["task"] = "InvertedDoublePendulum-v5"  # same suite, another task
    torch.save(state, newest)
    _refused_resume(run_copy, [], "env.task 'InvertedDoublePendulum-v5' (this run: 'InvertedPendulum-v5')")


def test_a_refused_resume_changes_nothing(run_copy, no_heavy):
    _refused_resume(run_copy, ["seed=5"], "cannot change the task, config groups or seed")
    _refused_resume(run_copy, ["total_steps=abc"], "total_steps takes an integer", env=no_heavy)
    _refused_resume(run_copy, ["keep_checkpoints=0"], "keep_checkpoints must be >= 1")
    _refused_resume(run_copy, ["out_dir=elsewhere"], "out_dir=elsewhere has no effect: a resumed run stays")
    _refused_resume(run_copy, ["hydra.run.dir=elsewhere"], "hydra.run.dir cannot go with resume=")
    assert not (run_copy.parent / "elsewhere").exists()


@pytest.mark.parametrize("text, says", [
    ("env:\n  task: [InvertedPendulum-v5\n", "run/config.yaml is not a readable run config (while parsing"),
    ("- a list\n", "run/config.yaml is not a readable run config (it holds no key: value mapping)"),
    ("total_steps: many\n", "run/config.yaml does not fit fast-td3's config"),
])
def test_a_resume_of_a_damaged_config_yaml_says_so_in_one_line(run_copy, text, says):
    (run_copy / "config.yaml").write_text(text)
    _refused_resume(run_copy, [], says)


def test_a_run_folder_is_never_trained_into_again(run_copy):
    """More cases (no checkpoints, a checkpoints/ symlink loop, other files): test_run_folders.py."""
    before = snapshot(run_copy)
    result = run([TRAIN, *QUICK, "total_steps=5", "hydra.run.dir=run"], run_copy.parent)
    assert_user_error(result, "already holds a run; continue it with resume=")
    assert snapshot(run_copy) == before


# ------------------------------------------------------------------ run folders
def test_ctrl_c_before_the_first_checkpoint_leaves_no_folder(tmp_path):
    """Signals at other moments before training: test_run_folders.py."""
    interrupted = site_hook(tmp_path / "hook", "fast_td3.training.runner:Runner", """
def _interrupted(self):
    raise KeyboardInterrupt
m.Runner.train = _interrupted
""")
    result = run([TRAIN, *QUICK, "total_steps=5", "hydra.run.dir=run"], tmp_path, env=interrupted)
    assert result.returncode == 130, result.stderr
    assert "before the first checkpoint: nothing to resume" in result.stderr and "resume=" not in result.stderr
    assert "hydra.run.dir" not in result.stderr and not (tmp_path / "run").exists()
    again = run([TRAIN, *QUICK, "total_steps=5", "hydra.run.dir=run"], tmp_path)  # the name is free again
    assert again.returncode == 0, again.stderr


def test_a_full_disk_at_a_save_is_reported_as_such_and_keeps_the_last_good_checkpoint(tmp_path):
    full_disk = site_hook(tmp_path / "hook", "fast_td3.training.checkpoint:CheckpointManager", f"""
_save = m.save_atomic
def _save_until_full(state, path):
    if state["global_step"] >= 10:
        raise OSError({errno.ENOSPC}, "No space left on device")
    _save(state, path)
m.save_atomic = _save_until_full
""")
    result = run([TRAIN, *QUICK, "total_steps=15", "save_interval=5", "hydra.run.dir=run"], tmp_path, env=full_disk)
    assert_user_error(result, "No space left on device (ENOSPC)", code=4)
    assert "could not write checkpoint" in result.stderr and "step_000000005.pt, is kept" in result.stderr
    assert [p.name for p in ckpt.CheckpointManager(tmp_path / "run").all()] == ["step_000000005.pt"]


@pytest.mark.slow  # two runs side by side: about 15 s on 2 cores
def test_two_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path):
    cmd = [TRAIN, *QUICK, "total_steps=3", "out_dir=out"]
    time.sleep(1 - time.time() % 1 + 0.02)  # start both at the beginning of one second
    processes = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    folders = sorted((tmp_path / "out" / "InvertedPendulum-v5").iterdir())
    assert len(folders) == 2
    for folder in folders:
        assert (folder / ".hydra" / "overrides.yaml").is_file() and ckpt.CheckpointManager(folder).latest()
    if folders[0].name.split("_")[:2] == folders[1].name.split("_")[:2]:  # the same second, as intended
        assert folders[1].name == folders[0].name + "-2"


def test_run_folder_names_are_claimed_atomically(tmp_path):
    from fast_td3.training.run_folder import claim_run_dir

    stamp = "2026-12-01_12-00-00"
    claimed = [claim_run_dir(tmp_path, stamp, 3) for _ in range(3)]
    assert [p.name for p in claimed] == [f"{stamp}_3", f"{stamp}_3-2", f"{stamp}_3-3"]
    assert all(p.is_dir() and not any(p.iterdir()) for p in claimed)


def test_the_library_names_a_bad_seed_and_env_kwargs_too():
    """The same mistakes reaching the adapters and seeding from code rather than the command line."""
    from envs import gymnasium
    from envs.protocol import derive_env_seeds
    from envs.registry import EnvOptionError
    from fast_td3.training.run_state import seed_everything

    with pytest.raises(EnvOptionError, match="env.options.env_kwargs=5: env_kwargs takes keyword=value entries"):
        gymnasium.make("InvertedPendulum-v5", 1, env_kwargs=5)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        derive_env_seeds(-1, 2)
    with pytest.raises(ValueError, match=r"seed must be an integer from 0 to 2\*\*64 - 1"):
        seed_everything(2**64)


def test_help_into_a_pipe_closed_early_ends_without_a_traceback(no_heavy):
    """`fast-td3-train --help | head -1`: the reader left before the help was written (it starts in
    about a second; the pipe is closed at once)."""
    reader = subprocess.Popen([TRAIN, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, **no_heavy}, bufsize=0)
    reader.stdout.close()
    assert reader.wait(timeout=60) == 0
    assert "Traceback" not in reader.stderr.read().decode()
