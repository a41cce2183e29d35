"""Which perturbed trials a run's gate keeps failing (`fast_td3/analysis/gate_trials.py`), read from
gate reports built by the robust gate's own classes, so the failure wording is the gate's."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mujoco")

from fast_td3.analysis.gate_trials import trial_matrix  # noqa: E402
from sim2real import robust, sim2sim  # noqa: E402
from sim2real.t1 import perturbations  # noqa: E402
from sim2real.t1.perturbations import PerturbationRanges  # noqa: E402

FORWARD, SIDEWAYS = (0.5, 0.0, 0.0), (0.0, 0.3, 0.0)


def segment(name, command, *, fell_at=None, lin=0.05, yaw=0.05, distance=9.0):
    report = sim2sim.SegmentReport(name, list(command), 20.0, fell=fell_at is not None, fell_at=fell_at,
                                   distance=distance, commanded_distance=9.0, lin_vel_error=lin, yaw_rate_error=yaw)
    report.judge(sim2sim.Thresholds())
    return report


def trial(k, *segments):
    draw = perturbations.draw_trial(PerturbationRanges(), seed=0, trial=k, num_links=24, duration=80.0)
    report = sim2sim.Sim2SimReport("bundle", not any(s.failures for s in segments), [], segments=list(segments))
    return robust.TrialResult(draw, report)


def ok(k):
    return trial(k, segment("forward", FORWARD), segment("sideways", SIDEWAYS))


def write_verdict(run, step, trials):
    nominal = sim2sim.Sim2SimReport("bundle", True, [], segments=[segment("forward", FORWARD)])
    report = robust.RobustReport("bundle", nominal, 0, PerturbationRanges(), trials=trials)
    (run / "gate").mkdir(parents=True, exist_ok=True)
    (run / "gate" / f"step_{step:09d}.json").write_text(json.dumps(
        {"metrics": {}, "summary": report.summary(), "report": report.to_dict(), "eval_return": 1.0}))


def test_each_verdicts_row_and_each_trials_failures_by_kind(tmp_path):
    drift = lambda k: trial(k, segment("forward", FORWARD, yaw=0.12, distance=2.5), segment("sideways", SIDEWAYS))
    fall = lambda k: trial(k, segment("forward", FORWARD), segment("sideways", SIDEWAYS, fell_at=31.0))
    slow = lambda k: trial(k, segment("forward", FORWARD), segment("sideways", SIDEWAYS, lin=0.25))
    write_verdict(tmp_path, 2000, [ok(0), fall(1), drift(2)])   # before the window asked for
    write_verdict(tmp_path, 4000, [ok(0), drift(1), drift(2)])
    write_verdict(tmp_path, 6000, [slow(0), fall(1), drift(2)])
    write_verdict(tmp_path, 8000, [])                            # a gate without trials: no row
    (tmp_path / "gate" / "step_000010000.json").write_text('{"report": {"tri')  # still being written
    (tmp_path / "gate" / "step_000012000.json").write_text('{"error": "export failed"}')  # a gate that errored

    matrix = trial_matrix(tmp_path, since_step=4000)
    assert matrix.rows == [(4000, ".xx"), (6000, "xFx")]
    by_trial = {h.trial: h for h in matrix.trials}
    assert (by_trial[2].played, by_trial[2].failed, by_trial[2].fell) == (2, 2, 0)
    assert by_trial[2].reasons == {"forward coverage": 2}
    assert by_trial[1].reasons == {"forward coverage": 1, "sideways fall": 1} and by_trial[1].fell == 1
    assert by_trial[0].reasons == {"sideways velocity": 1} and by_trial[0].failed == 1
    text = matrix.text()
    assert text.splitlines()[1:3] == ["4000  .xx  1/3", "6000  xFx  0/3"]
    # most failed first, ties by trial number
    assert text.index("trial 1: failed 2/2") < text.index("trial 2: failed 2/2") < text.index("trial 0: failed 1/2")
    friction = perturbations.draw_trial(PerturbationRanges(), 0, 2, 24, 80.0).floor_friction
    assert f"friction {friction:.2f}" in text  # each trial named by its draw

    assert trial_matrix(tmp_path).rows[0] == (2000, ".Fx")
    assert trial_matrix(tmp_path / "no_such_run").text() == "no verdict with perturbed trials"


def test_recipe_table_prints_the_matrix_on_request(tmp_path, capsys):
    from fast_td3.analysis import recipe_table

    run = tmp_path / "runs" / "run_0"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 2000, "time": 60.0}) + "\n")
    write_verdict(run, 2000, [ok(0), ok(1)])
    assert recipe_table.main([str(tmp_path / "runs")]) == 0
    assert "trials (" not in capsys.readouterr().out
    assert recipe_table.main([str(tmp_path / "runs"), "--trials", "0"]) == 0
    out = capsys.readouterr().out
    assert "runs/run_0" in out and "2000  ..  2/2" in out
