"""Atomic checkpoint files and the checkpoint folder of a run."""

import pytest
import torch

from fast_td3 import checkpoint as ckpt


def test_a_crash_while_writing_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "state.pt"
    ckpt.save_atomic({"x": torch.arange(5)}, path)

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
