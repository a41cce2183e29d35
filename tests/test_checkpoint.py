"""Atomic checkpoint files and the checkpoint folder of a run."""

import builtins
import errno
from pathlib import Path

import pytest
import torch

from fast_td3 import files
from fast_td3.training import checkpoint as ckpt


def state_of(step=0, task="InvertedPendulum-v5", **extra):
    """A checkpoint-shaped dict (what the runner writes, minus the networks)."""
    return {"format": ckpt.FORMAT, "global_step": step, "agent": {}, "env": {},
            "config": {"env": {"suite": "gymnasium", "task": task}, "seed": 1}, **extra}


def test_a_crash_while_writing_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "state.pt"
    ckpt.save_atomic(state_of(x=torch.arange(5)), path)

    def torn_save(obj, f):
        f.write(b"PK\x03\x04 half a zip file")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save_atomic({"x": torch.zeros(5)}, path)
    assert torch.equal(ckpt.load(path)["x"], torch.arange(5))
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]  # no temp file left behind


def test_manager_keeps_the_newest_and_points_at_the_latest(tmp_path):
    manager = ckpt.CheckpointManager(tmp_path, keep=2)
    for step in (5, 10, 15):
        manager.save({"global_step": step}, step)
    assert [ckpt.step_of(p) for p in manager.all()] == [10, 15]
    assert manager.latest().name == "step_000000015.pt"
    assert ckpt.find_checkpoint(tmp_path) == manager.latest()
    assert ckpt.find_checkpoint(manager.all()[0]) == manager.all()[0]
    assert ckpt.run_dir_of(manager.latest()) == tmp_path
    assert ckpt.find_checkpoint(tmp_path / "checkpoints" / "latest") == manager.latest()  # the pointer file
    # a stale pointer falls back to the newest file
    (tmp_path / "checkpoints" / "latest").write_text("step_000000999.pt")
    assert manager.latest().name == "step_000000015.pt"


@pytest.mark.parametrize("name, step", [("step_000000015.pt", 15), ("step_000042000.json", 42000),
                                        ("step_000042000.log", 42000), ("step_000000007.pt.tmp", 7)])
def test_files_named_by_step_are_read_by_one_parser(name, step):
    assert ckpt.step_in_name(Path(name)) == step
    if name.endswith(".pt"):
        assert ckpt.step_of(Path(name)) == step
    else:  # a checkpoint is a finished step_<N>.pt: a verdict or a half-written .tmp is not one
        with pytest.raises(ValueError, match=r"step_<N>\.pt checkpoint"):
            ckpt.step_of(Path(name))


@pytest.mark.parametrize("name", ["best.pt", "step_12x.pt", "steps_12.pt", "latest"])
def test_a_file_not_named_by_step_is_refused(name):
    with pytest.raises(ValueError, match="step_<N>"):
        ckpt.step_in_name(Path(name))


def test_only_the_newest_checkpoint_keeps_the_replay_buffer(tmp_path):
    """save_buffer with many kept checkpoints (the gate's runs keep 100): one buffer on disk."""
    manager = ckpt.CheckpointManager(tmp_path, keep=10)
    for step in (10, 20, 30):
        manager.save(state_of(step, buffer={"x": torch.full((1000,), float(step))}), step)
    held = {ckpt.step_of(p): "buffer" in ckpt.load(p) for p in manager.all()}
    assert held == {10: False, 20: False, 30: True}
    assert torch.equal(ckpt.load(manager.latest())["buffer"]["x"], torch.full((1000,), 30.0))
    assert ckpt.load(manager.all()[0])["global_step"] == 10  # the rest of an older one is intact
    # a resumed process (a new manager) frees the buffer the previous process left in its newest
    resumed = ckpt.CheckpointManager(tmp_path, keep=10)
    resumed.save(state_of(40, buffer={"x": torch.zeros(1000)}), 40)
    assert ["buffer" in ckpt.load(p) for p in resumed.all()] == [False, False, False, True]
    # a checkpoint without a buffer (save_buffer=false) leaves the others as they are
    resumed.save(state_of(50), 50)
    assert ["buffer" in ckpt.load(p) for p in resumed.all()] == [False, False, False, True, False]


def test_a_kill_between_the_checkpoint_and_its_pointer_leaves_latest_and_resume_agreeing(tmp_path):
    """SIGKILL after the rename of step 20 into place but before the pointer is rewritten: the
    pointer still names step 10; latest() and a resume both take step 20."""
    manager = ckpt.CheckpointManager(tmp_path, keep=3)
    manager.save(state_of(10), 10)
    ckpt.save_atomic(state_of(20), manager.dir / "step_000000020.pt")
    assert (manager.dir / "latest").read_text() == "step_000000010.pt"
    assert manager.latest().name == "step_000000020.pt"
    assert ckpt.pick_for_resume(tmp_path)[0] == manager.latest()


def test_missing_checkpoints_are_reported_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        ckpt.find_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="neither a checkpoint file nor a run folder"):
        ckpt.find_checkpoint(tmp_path / "nope")


def test_older_checkpoints_start_another_history_without_losing_files(tmp_path):
    manager = ckpt.CheckpointManager(tmp_path, keep=5)
    for step in (10, 20, 30):
        manager.save({"global_step": step}, step)
    moved = manager.set_aside_after(10)
    assert [p.name for p in moved] == ["step_000000020.pt", "step_000000030.pt"]
    assert all(p.parent.name == "abandoned_1" and p.is_file() for p in moved)
    assert [ckpt.step_of(p) for p in manager.all()] == [10] and ckpt.step_of(manager.latest()) == 10
    manager.save({"global_step": 15}, 15)
    assert [ckpt.step_of(p) for p in manager.all()] == [10, 15]


class FullDisk:
    """A file that accepts `budget` bytes, then fails like a full disk."""

    def __init__(self, f, budget):
        self.f, self.budget = f, budget

    def write(self, data):
        size = memoryview(data).nbytes
        if size > self.budget:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.budget -= size
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_full_disk_at_a_save_names_enospc_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    manager = ckpt.CheckpointManager(tmp_path, keep=2)
    manager.save(state_of(10), 10)
    real_open = builtins.open
    monkeypatch.setattr(files, "open", lambda path, mode="r", *a, **k: (
        FullDisk(real_open(path, mode, *a, **k), 4096) if "w" in mode else real_open(path, mode, *a, **k)),
        raising=False)
    with pytest.raises(ckpt.CheckpointWriteError) as failed:
        manager.save(state_of(20, x=torch.zeros(100_000)), 20)
    message = str(failed.value)
    assert failed.value.errno == errno.ENOSPC
    assert "No space left on device (ENOSPC)" in message and "unexpected pos" not in message
    assert "step_000000020.pt" in message and "the last good checkpoint" in message and "step_000000010.pt" in message
    monkeypatch.undo()
    assert sorted(p.name for p in manager.dir.iterdir()) == ["latest", "step_000000010.pt"]  # no temp file
    assert ckpt.load(manager.latest())["global_step"] == 10


@pytest.mark.parametrize("cut", [0, 1, 30, 0.5, -22, -1])
def test_a_truncated_checkpoint_is_named_with_the_reason(tmp_path, cut):
    path = tmp_path / "step_000000010.pt"
    ckpt.save_atomic(state_of(10, x=torch.zeros(1000)), path)
    data = path.read_bytes()
    keep = int(len(data) * cut) if isinstance(cut, float) else cut % len(data) if cut < 0 else cut
    path.write_bytes(data[:keep])
    with pytest.raises(ckpt.CheckpointError, match="empty file" if keep == 0 else "truncated|not a PyTorch file"):
        ckpt.load(path)


def test_resume_passes_unreadable_checkpoints_and_sets_them_aside(tmp_path):
    manager = ckpt.CheckpointManager(tmp_path, keep=5)
    for step in (10, 20, 30):
        manager.save(state_of(step), step)
    newest = manager.latest()
    newest.write_bytes(newest.read_bytes()[:100])
    path, state, unreadable = ckpt.pick_for_resume(tmp_path)
    assert ckpt.step_of(path) == 20 and state["global_step"] == 20
    assert [(p.name, "truncated" in why) for p, why in unreadable] == [("step_000000030.pt", True)]
    # a file named explicitly is taken as it is: no falling back past it
    with pytest.raises(ckpt.CheckpointError, match="step_000000030.pt: truncated"):
        ckpt.pick_for_resume(newest)
    moved = manager.set_aside_unreadable([newest])
    assert moved == [manager.dir / "unreadable" / "step_000000030.pt"] and moved[0].is_file()  # never deleted
    assert manager.latest().name == "step_000000020.pt" and (manager.dir / "latest").read_text() == "step_000000020.pt"
    for path in manager.all():
        path.write_bytes(b"")
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint in .* can be read .*step_000000010.pt: empty"):
        ckpt.pick_for_resume(tmp_path)


def test_checkpoints_of_another_run_or_a_newer_format_are_refused(tmp_path):
    path = tmp_path / "c.pt"
    walker = state_of(task="Walker2d-v5")
    with pytest.raises(ckpt.CheckpointError, match=r"env.task 'Walker2d-v5' \(this run: 'HalfCheetah-v5'\)"):
        ckpt.check_matches(walker, {"env": {"suite": "gymnasium", "task": "HalfCheetah-v5"}, "seed": 1}, path)
    ckpt.check_matches(walker, {"env": {"suite": "gymnasium", "task": "Walker2d-v5"}, "seed": 1}, path)
    torch.save({**walker, "format": ckpt.FORMAT + 1}, path)
    with pytest.raises(ckpt.CheckpointError, match="newer fast-td3"):
        ckpt.load(path)
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(ckpt.CheckpointError, match="not a fast-td3 checkpoint .*without global_step, agent, env, config"):
        ckpt.load(path)


def test_best_is_kept_through_rotation_taken_by_the_tools_and_never_resumed(tmp_path):
    manager = ckpt.CheckpointManager(tmp_path, keep=1)
    manager.save(state_of(10), 10)
    path, which = ckpt.pick_checkpoint(tmp_path)
    assert (path.name, which) == ("step_000000010.pt", "latest")  # no best.pt yet: the newest
    assert "the run has no best.pt" in ckpt.describe_pick(path, which, ckpt.load(path))
    with pytest.raises(FileNotFoundError, match="no best checkpoint"):
        ckpt.pick_checkpoint(tmp_path, "best")
    manager.save_best(state_of(10, best_eval={"step": 10, "return_mean": 1000.0}))
    for step in (20, 30):
        manager.save(state_of(step), step)
    assert [p.name for p in manager.all()] == ["step_000000030.pt"]  # rotated
    best = manager.dir / "best.pt"
    assert best.is_file() and ckpt.load(best)["global_step"] == 10  # kept through rotation
    assert ckpt.pick_checkpoint(tmp_path) == (best, "best")
    assert ckpt.pick_checkpoint(tmp_path, "best") == (best, "best")
    assert ckpt.pick_checkpoint(tmp_path, "latest") == (manager.latest(), "latest")
    assert ckpt.pick_checkpoint(manager.dir / "latest") == (best, "best")  # the pointer names the run
    assert ckpt.pick_checkpoint(best) == (best, "named")
    assert ckpt.describe_pick(best, "best", ckpt.load(best)) == (
        f"best checkpoint {best} (global step 10, eval return 1000 in training); --use latest takes the newest")
    with pytest.raises(ValueError, match="a checkpoint file; latest chooses within a run folder"):
        ckpt.pick_checkpoint(best, "latest")
    # a resume always continues from the newest checkpoint
    assert ckpt.pick_for_resume(tmp_path)[0] == manager.latest()
    with pytest.raises(ckpt.CheckpointError, match="best.pt is for fast-td3-eval"):
        ckpt.pick_for_resume(best)


def test_a_resume_from_an_older_checkpoint_sets_a_newer_best_aside(tmp_path):
    manager = ckpt.CheckpointManager(tmp_path, keep=5)
    for step in (10, 20):
        manager.save(state_of(step), step)
    manager.save_best(state_of(20))
    manager.set_aside_after(20)
    assert manager.best() is not None  # not newer than the resumed step
    manager.set_aside_after(10)
    assert manager.best() is None and (manager.dir / "abandoned_1" / "best.pt").is_file()
