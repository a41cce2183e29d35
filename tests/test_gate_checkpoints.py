"""`fast-td3-gate` (sim2real/gate_run.py): every checkpoint of a T1 run exported and gated, one row each.

An untrained checkpoint is enough to check the plumbing (which checkpoints, where the bundles
go, what a row holds, the deploy frequency asked for); it falls, so its verdicts are known.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("mujoco_playground", reason='MuJoCo Playground is not installed (pip install -e ".[playground]")')

from helpers import save_untrained_t1_checkpoint  # noqa: E402
from sim2real import gate_run as gate_checkpoints  # noqa: E402
from sim2real import sim2sim  # noqa: E402


def test_the_last_checkpoints_are_exported_gated_and_written_as_rows(tmp_path, capsys):
    run = tmp_path / "run"
    for step in (100, 200, 300):
        save_untrained_t1_checkpoint(run, step)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 300, "eval/return_mean": 1.5}) + "\n")
    rows = gate_checkpoints.main([str(run), "--last", "2", "--seconds", "3", "--robust", "1",
                                  "--gait-frequency", "1.4", "--json", str(tmp_path / "rows.json")])
    assert [row["step"] for row in rows] == [200, 300]
    assert [row["eval_return"] for row in rows] == [None, 1.5]  # from the run's own evaluations
    assert json.loads((tmp_path / "rows.json").read_text()) == rows
    for row in rows:
        bundle = Path(row["bundle"])
        assert bundle == run / "gated" / f"step_{row['step']:09d}_1.4hz"
        assert yaml.safe_load((bundle / "T1.yaml").read_text())["policy"]["gait_frequency"] == 1.4
        assert not row["passed"] and row["robust_pass_rate"] == 0.0 and not row["robust_passed"]
        assert row["seconds_walked"] < 4 * 3  # an untrained policy falls before the sequence ends
        assert len(row["failed_trials"]) == 1
        # it fell standing, before any moving segment: the bar names the failed gates
        assert row["below_the_bar"] == ["the nominal gate failed", "seed 0: robust pass rate 0% < 90%",
                                        "the robust pass rate's 95 % interval starts at 0.000 < 0.8 (0/1 trials)"]
        assert row["stand/failures"] and row["stand/lin_vel_error"] is None  # fell: no error to report
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].split()[:3] == ["200", "-", "fail"] and printed[2].split()[:3] == ["300", "1.50", "fail"]
    assert printed[0].split()[-2:] == ["bar", "failures"] and printed[2].split()[6] == "short"


def test_a_run_without_checkpoints_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="2"):
        gate_checkpoints.cli([str(tmp_path / "empty")])
    assert "has no checkpoints/step_*.pt" in capsys.readouterr().err


def test_average_gates_each_checkpoints_mean_with_its_predecessors(tmp_path, capsys):
    run = tmp_path / "run"
    for step in (100, 200, 300):
        save_untrained_t1_checkpoint(run, step)
    (run / "metrics.jsonl").write_text("")
    rows = gate_checkpoints.main([str(run), "--seconds", "1", "--average", "2"])
    assert [row["step"] for row in rows] == [200, 300]  # step 100 has no predecessor to average with
    for row in rows:
        bundle = Path(row["bundle"])
        assert bundle == run / "gated" / f"step_{row['step']:09d}_average2"
        assert json.loads((bundle / "meta.json").read_text())["averaged_steps"] == [row["step"] - 100, row["step"]]
    with pytest.raises(SystemExit, match="2"):
        gate_checkpoints.cli([str(run), "--average", "0"])
    assert "--average 0: give a whole number, 1 or more" in capsys.readouterr().err


def test_steps_picks_checkpoints_by_global_step_and_names_the_ones_there(tmp_path, capsys):
    run = tmp_path / "run"
    for step in (100, 200, 300):
        save_untrained_t1_checkpoint(run, step)
    (run / "metrics.jsonl").write_text("")
    rows = gate_checkpoints.main([str(run), "--seconds", "1", "--steps", "300", "100"])
    assert [row["step"] for row in rows] == [100, 300]  # in step order, step 200 left out
    with pytest.raises(SystemExit, match="2"):
        gate_checkpoints.cli([str(run), "--steps", "100", "250"])
    assert "no checkpoint of step 250" in (err := capsys.readouterr().err) and "its steps: 100, 200, 300" in err


def test_both_sides_plays_the_mirrored_segments_in_both_gates(tmp_path, monkeypatch):
    """`--both-sides` hands the ship's sequence (`sim2sim.both_sides()`) to the nominal and the
    robust gate; without it both play the gate's own `SEGMENTS`. The nominal walk is played once
    per checkpoint: the robust gate's own nominal play is the row's."""
    run = tmp_path / "run"
    save_untrained_t1_checkpoint(run, 100)
    (run / "metrics.jsonl").write_text("")
    played = []

    def recording(gate, real):
        def play(*args, **kwargs):
            played.append((gate, tuple(name for name, _ in kwargs.get("segments", sim2sim.SEGMENTS))))
            return real(*args, **kwargs)
        return play

    monkeypatch.setattr(sim2sim, "run", recording("play", sim2sim.run))
    monkeypatch.setattr(gate_checkpoints.robust, "run", recording("robust", gate_checkpoints.robust.run))
    gate_checkpoints.main([str(run), "--seconds", "1", "--robust", "1", "--both-sides"])
    mirrored = tuple(name for name, _ in sim2sim.both_sides())
    assert mirrored[-2:] == ("sideways_mirrored", "turn_mirrored")
    # the robust gate, inside it the nominal play and one trial: no second nominal play
    assert played == [("robust", mirrored), ("play", mirrored), ("play", mirrored)]
    played.clear()
    gate_checkpoints.main([str(run), "--seconds", "1", "--robust", "1"])
    plain = ("stand", "forward", "sideways", "turn")
    assert played == [("robust", plain), ("play", plain), ("play", plain)]
    played.clear()
    gate_checkpoints.main([str(run), "--seconds", "1"])
    assert played == [("play", plain)]


def test_bad_options_and_outputs_are_refused_before_any_checkpoint_is_gated(tmp_path, capsys):
    """One line and exit code 2, nothing written: negative counts, an hour-long segment, a
    --json into a missing folder or onto a run's metrics, a gated/ folder of the user's own, and
    a run that is not a T1's."""
    run = tmp_path / "run"
    save_untrained_t1_checkpoint(run, 100)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 100, "eval/return_mean": 1.0}) + "\n")
    mine = run / "gated" / "step_000000100"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's")
    cases = {
        ("--last", "-1"): "--last -1: give a whole number, 0 or more",
        ("--robust", "-5"): "--robust -5: give a whole number from 0 to 10000",
        ("--seconds", "inf"): "--seconds inf: give a number above 0 up to 3600",
        ("--json", str(tmp_path / "missing" / "rows.json")): "missing",
        ("--json", str(run / "metrics.jsonl")): "metrics.jsonl",
        ("--seconds", "1"): "not a bundle written by fast-td3-export",
    }
    for options, says in cases.items():
        with pytest.raises(SystemExit, match="2"):
            gate_checkpoints.cli([str(run), *options])
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("fast-td3-gate: error:") and says in err, (options, err)
    assert (mine / "notes.txt").read_text() == "the user's" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert json.loads((run / "metrics.jsonl").read_text())["step"] == 100
    other = tmp_path / "cheetah"
    (other / "checkpoints").mkdir(parents=True)
    state = torch.load(next((run / "checkpoints").glob("step_*.pt")), weights_only=False)
    state["config"]["env"]["task"] = "HalfCheetah-v5"
    torch.save(state, other / "checkpoints" / "step_000000100.pt")
    with pytest.raises(SystemExit, match="2"):
        gate_checkpoints.cli([str(other)])
    assert "trained HalfCheetah-v5: the gate plays T1LowDimJoystick* policies only" in capsys.readouterr().err
    assert not (other / "gated").exists()
