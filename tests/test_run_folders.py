"""Nothing lost, whatever the user types (issue 34), through the real console scripts.

A folder holding a run's files is never trained into again except by `resume=` (D1); export's
`force=true` replaces only a bundle export wrote (D2); a run folder is held by one process at a
time through an OS lock, which a process's death releases (D3), and a resume into a folder it
cannot write into is refused before any work; a stop before training leaves no folder that is
not a run; the user's own config groups (`--config-dir`) are seen by the checks; the replay buffer's
memory is estimated before it is allocated; and a command a message suggests works when pasted
into a shell.
"""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fast_td3.training import checkpoint as ckpt
from fast_td3.training.run_folder import LOCK_FILE, shell_arg
from helpers import site_hook
from test_bad_inputs import (  # noqa: F401 (fixtures)
    EXPORT, QUICK, TRAIN, assert_user_error, no_heavy, run, run_copy, snapshot, trained,
)


# ------------------------------------------------------------------ D1: a run's folder is not reused
def _no_checkpoints(run: Path) -> None:
    shutil.rmtree(run / "checkpoints")


def _checkpoints_a_loop(run: Path) -> None:
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").symlink_to("checkpoints")


def _someone_elses_files(run: Path) -> None:
    shutil.rmtree(run)
    run.mkdir()
    (run / "notes.txt").write_text("not a run")


@pytest.mark.parametrize("damage, says", [
    (None, "already holds a run; continue it with resume= (fast-td3-train resume="),
    (_no_checkpoints, "holds a run's files (.hydra, config.yaml"),
    (_checkpoints_a_loop, "holds a run's files (.hydra, checkpoints, config.yaml"),
    (_someone_elses_files, "is not empty (notes.txt)"),
], ids=["with_checkpoints", "checkpoints_removed", "checkpoints_a_symlink_loop", "other_files"])
def test_a_new_run_never_trains_into_a_folder_that_holds_files(run_copy, damage, says):
    if damage is not None:
        damage(run_copy)
    before = snapshot(run_copy.parent)
    result = run([TRAIN, *QUICK, "total_steps=3", "hydra.run.dir=run"], run_copy.parent)
    assert_user_error(result, says)
    assert snapshot(run_copy.parent) == before
    if damage in (_no_checkpoints, _checkpoints_a_loop):  # and a resume does not advise training into it
        resumed = run([TRAIN, "resume=run"], run_copy.parent)
        assert_user_error(resumed, "nothing to resume or load")
        assert "hydra.run.dir" not in resumed.stderr and "start a new run" in resumed.stderr
        assert snapshot(run_copy.parent) == before


# ------------------------------------------------------------------ D2: export force=true
@pytest.mark.parametrize("out, says", [
    ("run", "out=run: is a run's or a bundle's own: nothing was touched"),
    (".", "not a bundle written by fast-td3-export"),
    ("mixed", "out=mixed: holds a bundle this command did not write: nothing was touched"),
])
def test_export_force_refuses_a_folder_it_did_not_write(run_copy, out, says):
    root = run_copy.parent
    if out == "mixed":  # a bundle's names beside a file of the user's
        (root / "mixed").mkdir()
        for name in ("policy.pt", "meta.json"):
            (root / "mixed" / name).write_text("{}")
        (root / "mixed" / "thesis.tex").write_text("months of work")
    before = snapshot(root)
    result = run([EXPORT, f"checkpoint={run_copy}", f"out={out}", "force=true"], root)
    assert_user_error(result, says)
    assert snapshot(root) == before


def test_export_force_replaces_a_bundle_it_wrote(run_copy):
    root = run_copy.parent
    first = run([EXPORT, "checkpoint=run", "out=bundle"], root)
    assert first.returncode == 0, first.stderr
    written = json.loads((root / "bundle" / "meta.json").read_text())
    again = run([EXPORT, "checkpoint=run", "out=bundle"], root)
    assert_user_error(again, "is not empty: it holds a bundle, which force=true replaces")
    step_10 = run_copy / "checkpoints" / "step_000000010.pt"
    forced = run([EXPORT, f"checkpoint={step_10}", "out=bundle", "force=true"], root)
    assert forced.returncode == 0, forced.stderr
    replaced = json.loads((root / "bundle" / "meta.json").read_text())
    assert (written["checkpoint_step"], replaced["checkpoint_step"]) == (30, 10)
    assert sorted(p.name for p in root.iterdir()) == ["bundle", "run"]  # no temporary folder left


# ------------------------------------------------------------------ D3: one process per run folder
def _wait(predicate, what: str, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, what
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _opened(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open (from /proc)."""
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def test_one_trainer_holds_a_run_folder_and_its_death_releases_it(tmp_path):
    """Two trainers started together on one hydra.run.dir: one trains, the other refuses naming
    its PID, as does a resume while it runs; once it dies (SIGKILL), a resume continues it at
    once (its forked env workers do not hold the lock on)."""
    cmd = [TRAIN, *QUICK, "total_steps=100000", "save_interval=10", "hydra.run.dir=run",
           "env.options.vectorization=processes", "env.options.num_workers=2"]
    trainers = {seed: subprocess.Popen([*cmd, f"seed={seed}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True) for seed in (1, 2)}
    _wait(lambda: any(p.poll() is not None for p in trainers.values()), "neither trainer stopped")
    (loser_seed, loser), = [(s, p) for s, p in trainers.items() if p.poll() is not None]
    (winner_seed, winner), = [(s, p) for s, p in trainers.items() if p is not loser]
    try:
        stderr = loser.stderr.read()
        assert loser.returncode == 2 and "Traceback" not in stderr, stderr
        assert len(stderr.strip().splitlines()) == 1 and f"(PID {winner.pid}) holds its lock" in stderr, stderr
        manager = ckpt.CheckpointManager(tmp_path / "run")
        _wait(lambda: manager.latest() is not None, "no checkpoint from the trainer")
        assert winner.poll() is None, winner.stderr.read()
        busy = run([TRAIN, "resume=run"], tmp_path)
        assert_user_error(busy, f"another fast-td3 process (PID {winner.pid}) holds its lock")
        workers = _children(winner.pid)
        assert len(workers) >= 2 and _opened(winner.pid, tmp_path / "run" / LOCK_FILE)
        assert not any(_opened(pid, tmp_path / "run" / LOCK_FILE) for pid in workers)  # forked: let go
    finally:
        winner.kill()
        winner.wait()
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert f"seed: {winner_seed}\n" in config
    assert f"seed={winner_seed}" in (tmp_path / "run" / ".hydra" / "overrides.yaml").read_text()
    assert f"seed={loser_seed}" not in (tmp_path / "run" / ".hydra" / "overrides.yaml").read_text()
    killed_at = ckpt.load(manager.latest())["global_step"]
    resumed = run([TRAIN, "resume=run", f"total_steps={killed_at + 5}"], tmp_path)  # a requeued job
    assert resumed.returncode == 0, resumed.stderr
    assert ckpt.load(manager.latest())["global_step"] == killed_at + 5


OBEYING_PERMISSIONS = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
"""A prefix under which a command is held to permission bits: root passes them (CAP_DAC_OVERRIDE)
unless its command starts without the capability."""


@pytest.mark.parametrize("read_only", [".", "checkpoints"], ids=["chmod -R a-w run", "chmod a-w run/checkpoints"])
def test_a_resume_into_a_read_only_run_folder_is_refused_before_any_work(run_copy, no_heavy, read_only):
    if OBEYING_PERMISSIONS and (shutil.which("setpriv") is None
                                or subprocess.run([*OBEYING_PERMISSIONS, "true"]).returncode != 0):
        pytest.skip("running as root, which permission bits do not stop, and setpriv cannot drop CAP_DAC_OVERRIDE")
    before = snapshot(run_copy)
    flags = ["-R"] if read_only == "." else []
    subprocess.run(["chmod", *flags, "a-w", run_copy / read_only], check=True)
    try:  # torch, MuJoCo and gymnasium unimportable: refused before a checkpoint is read
        result = run([*OBEYING_PERMISSIONS, TRAIN, "resume=run"], run_copy.parent, env=no_heavy)
    finally:
        subprocess.run(["chmod", "-R", "u+w", run_copy], check=True)
    says = "run" if read_only == "." else f"run/{read_only}"
    assert_user_error(result, f"cannot resume: {says} is not writable, and a resume writes its checkpoints")
    assert "make it writable (chmod -R u+w run) or resume a copy of the run" in result.stderr
    assert snapshot(run_copy) == before


# ------------------------------------------------------------------ a stop before training starts
SIGNAL_AT = {
    # right after the run folder was claimed, before Hydra runs
    "claimed": ("fast_td3.training.preflight:claim", """
_claim = m.claim
def _claim_then_signal(*args, **kwargs):
    claimed = _claim(*args, **kwargs)
    import os
    os.kill(os.getpid(), {signum})
    return claimed
m.claim = _claim_then_signal
"""),
    # inside Hydra's job, .hydra/ written, while the learner is built
    "building": ("fast_td3.training.runner:Runner", """
_init = m.Runner.__init__
def _signal_then_init(self, *args, **kwargs):
    import os
    os.kill(os.getpid(), {signum})
    _init(self, *args, **kwargs)
m.Runner.__init__ = _signal_then_init
"""),
}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("at", list(SIGNAL_AT))
@pytest.mark.parametrize("folder", ["new", "empty"])
def test_a_stop_before_training_is_reported_and_leaves_no_folder(tmp_path, signum, at, folder):
    target, patch = SIGNAL_AT[at]
    hook = site_hook(tmp_path / "hook", target, patch.format(signum=int(signum)))
    (tmp_path / "work").mkdir()
    if folder == "empty":
        (tmp_path / "work" / "run").mkdir()
    result = run([TRAIN, *QUICK, "total_steps=5", "hydra.run.dir=run"], tmp_path / "work", env=hook)
    assert result.returncode == 128 + signum, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    said = "Stopped by SIGTERM before" if signum == signal.SIGTERM else "Aborted before"
    assert said in result.stderr and "nothing to resume" in result.stderr and "resume=" not in result.stderr
    left = sorted(str(p.relative_to(tmp_path / "work")) for p in (tmp_path / "work").rglob("*"))
    assert left == ([] if folder == "new" else ["run"])  # the empty folder given stays, empty
    again = run([TRAIN, *QUICK, "total_steps=3", "hydra.run.dir=run"], tmp_path / "work")  # the folder is free
    assert again.returncode == 0, again.stderr


# ------------------------------------------------------------------ the user's own sizings and tasks
def test_user_sizings_and_tasks_from_config_dir(tmp_path):
    (tmp_path / "myconf" / "sizing").mkdir(parents=True)
    (tmp_path / "myconf" / "task").mkdir()
    (tmp_path / "myconf" / "sizing" / "mine.yaml").write_text(
        "# @package _global_\nenv:\n  num_envs: 3\nalgo:\n  batch_size: 48\n  buffer_size: 400\n  compile: false\n")
    pendulum = Path(__file__).resolve().parents[1] / "conf" / "task" / "InvertedPendulum-v5.yaml"
    (tmp_path / "myconf" / "task" / "MyPendulum.yaml").write_text(
        pendulum.read_text().replace("v_max: 110.0", "v_max: 120.0"))
    before = snapshot(tmp_path)
    typo = run([TRAIN, "--config-dir", "myconf", "sizing=mien"], tmp_path)
    assert_user_error(typo, "Unknown sizing option 'mien' for fast-td3-train. Did you mean 'mine'?")
    assert snapshot(tmp_path) == before
    own = [a for a in QUICK if a.split("=")[0] not in ("sizing", "env.num_envs", "algo.batch_size", "algo.buffer_size")]
    (tmp_path / "myconf" / "sizing" / "cpu.yaml").write_text("# @package _global_\nenv:\n  num_envs: 7\n")
    shadowed = run([TRAIN, "--config-dir", "myconf", "sizing=cpu"], tmp_path)  # Hydra reads conf/sizing/cpu.yaml
    assert_user_error(shadowed, "--config-dir myconf: sizing/cpu.yaml has no effect: fast-td3's own "
                                "conf/sizing/cpu.yaml is found first; give yours another name")
    (tmp_path / "myconf" / "sizing" / "cpu.yaml").unlink()
    result = run([TRAIN, "--config-dir", "myconf", "task=MyPendulum", *own, "sizing=mine", "total_steps=3",
                  "hydra.run.dir=run"], tmp_path)
    assert result.returncode == 0, result.stderr
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "num_envs: 3\n" in config and "buffer_size: 400\n" in config and "v_max: 120.0\n" in config


# ------------------------------------------------------------------ replay memory
def _memory_hook(tmp_path: Path, available: int) -> dict:
    return site_hook(tmp_path / "hook", "fast_td3.training.config_checks:device_memory_available",
                     f"m.device_memory_available = lambda device: {available}")


# InvertedPendulum: 4 observations, 1 action -> 2 * 16 + 4 + 4 + 1 + 1 = 42 bytes a transition
QUICK_REPLAY_BYTES = 4 * 500 * 42


def test_a_replay_buffer_larger_than_the_memory_is_refused_before_any_folder(tmp_path):
    result = run([TRAIN, *QUICK, "algo.buffer_size=10000000000"], tmp_path)  # 720 GB and more
    assert_user_error(result, "algo.buffer_size=10000000000: the replay buffer needs at least 720.0 GB")
    assert " available; lower algo.buffer_size (about " in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_replay_estimate_with_the_env_s_sizes_refuses_or_warns(tmp_path):
    short = run([TRAIN, *QUICK, "total_steps=3"], tmp_path, env=_memory_hook(tmp_path, QUICK_REPLAY_BYTES - 1))
    assert_user_error(short, "the replay buffer needs 0.1 MB (4 envs x 500 transitions x 42 bytes)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook"]  # the run folder made for it is gone
    close = run([TRAIN, *QUICK, "total_steps=3", "hydra.run.dir=run"], tmp_path,
                env=_memory_hook(tmp_path, int(QUICK_REPLAY_BYTES / 0.9)))
    assert close.returncode == 0, close.stderr
    assert "fast-td3-train: warning: the replay buffer takes 0.1 MB of the 0.1 MB available" in close.stderr


# ------------------------------------------------------------------ commands that paste into a shell
@pytest.mark.parametrize("value", ["runs/plain_1", "my runs/é, 1", "it's (a) [test]", 'q"uo$te`s\\', "tail ",
                                   "x\\y, é", "end é\\", "q'\\'x,"])
def test_suggested_arguments_reach_hydra_unchanged_through_a_shell(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    echoed = subprocess.run(["bash", "-c", f"printf '%s' {shell_arg('resume', value)}"],
                            capture_output=True, text=True, check=True).stdout
    assert OverridesParser.create().parse_overrides([echoed])[0].value() == value


def test_suggested_resumes_of_a_folder_with_spaces_and_accents_work_pasted(tmp_path):
    """The summary's `Next:` resume and a refusal's resume, pasted into bash as printed."""
    folder = "'my runs/é, 1'"  # Hydra's quotes: a comma would make a sweep, é is outside its grammar
    env = {**os.environ, "PATH": f"{Path(TRAIN).parent}{os.pathsep}{os.environ['PATH']}"}
    manager = ckpt.CheckpointManager(tmp_path / "my runs" / "é, 1")

    def paste(command: str) -> None:
        pasted = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, env=env,
                                timeout=300)
        assert pasted.returncode == 0, (command, pasted.stderr)

    first = run([TRAIN, *QUICK, "total_steps=3", f"hydra.run.dir={folder}"], tmp_path)
    assert first.returncode == 0, first.stderr
    next_line = next(line for line in first.stdout.splitlines() if "fast-td3-train resume=" in line)
    paste(next_line.strip().split("  ")[0])  # fast-td3-train resume=... total_steps=6
    assert ckpt.load(manager.latest())["global_step"] == 6
    again = run([TRAIN, *QUICK, "total_steps=3", f"hydra.run.dir={folder}"], tmp_path)
    assert_user_error(again, "already holds a run")
    paste(again.stderr.split("(fast-td3-train ", 1)[1].rsplit("), or choose", 1)[0].join(["fast-td3-train ",
                                                                                         " total_steps=9"]))
    assert ckpt.load(manager.latest())["global_step"] == 9


@pytest.mark.parametrize("num_critic_obs, tail_only, bf16", [(None, False, False), (9, False, False),
                                                              (9, True, False), (9, True, True)])
def test_the_replay_estimate_is_what_the_buffer_allocates(num_critic_obs, tail_only, bf16):
    import torch

    from envs.protocol import EnvSpec
    from fast_td3.learner.replay import ReplayBuffer, slot_bytes

    dtype = torch.bfloat16 if bf16 else torch.float32
    spec = EnvSpec(num_envs=3, num_obs=5, num_critic_obs=num_critic_obs, num_actions=2)
    buffer = ReplayBuffer(spec, 7, critic_obs_extends_actor_obs=tail_only, obs_dtype=dtype, device="cpu")
    assert buffer.memory_bytes() == 3 * 7 * slot_bytes(spec, tail_only, dtype)


def test_under_torchrun_only_rank_0_claims_and_locks_the_named_folder(tmp_path, monkeypatch):
    """Every rank runs the checks; were each to lock hydra.run.dir, all but one would be refused
    (the multi-node sbatch example in docs/distributed.md names its folder so)."""
    from fast_td3.training import preflight

    folder = tmp_path / "run"
    launch = preflight.Launch()
    monkeypatch.setenv("RANK", "1")
    assert preflight.claim([f"hydra.run.dir={folder}"], None, launch) is True
    assert not folder.exists() and launch.lock is None
    monkeypatch.setenv("RANK", "0")
    assert preflight.claim([f"hydra.run.dir={folder}"], None, launch) is True
    assert (folder / LOCK_FILE).is_file() and launch.lock is not None
    launch.lock.release()
