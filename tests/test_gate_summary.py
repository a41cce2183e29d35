"""The deploy gate's story of a run (`fast_td3/analysis/gate_summary.py`), from known records."""

from fast_td3.analysis.gate_summary import gate_summary


def verdict(step, passed, nominal, rate, time):
    return {"step": step, "time": time, "gate/passed": float(passed), "gate/nominal_passed": float(nominal),
            "gate/robust_pass_rate": rate, "gate/turn/yaw_rate_error": 0.1 * step / 1000}


def test_first_passes_are_timed_at_the_gated_steps_training_record():
    records = [{"step": 2000, "time": 600.0}, {"step": 4000, "time": 1200.0}, {"step": 6000, "time": 1800.0},
               {"step": 8000, "time": 2400.0},
               verdict(2000, False, False, 0.0, 610.0), verdict(4000, False, True, 0.5, 1215.0),
               verdict(6000, True, True, 0.9, 1810.0), verdict(8000, False, True, 0.8, 2410.0)]
    summary = gate_summary(records, last=3)
    assert summary.verdicts == 4
    assert summary.first_nominal_pass == {"step": 4000, "minutes": 20.0}
    assert summary.first_robust_pass == {"step": 6000, "minutes": 30.0}
    assert summary.last_passed == 1  # of steps 4000, 6000, 8000
    assert summary.latest["step"] == 8000 and summary.latest["gate/robust_pass_rate"] == 0.8


def test_a_run_that_never_passed_or_was_never_gated():
    never = gate_summary([{"step": 2000, "time": 5.0}, verdict(2000, False, False, 0.1, 9.0)])
    assert never.first_nominal_pass is None and never.first_robust_pass is None and never.last_passed == 0
    assert never.to_dict()["verdicts"] == 1
    assert gate_summary([{"step": 2000, "time": 5.0, "eval/return_mean": 3.0}]) is None


def test_a_verdict_without_its_training_record_uses_its_own_time():
    summary = gate_summary([verdict(2000, True, True, 1.0, 90.0)])
    assert summary.first_robust_pass == {"step": 2000, "minutes": 1.5}


def test_recipe_table_rows_hold_what_seeds_json_needs(tmp_path):
    import json
    import sys
    from pathlib import Path

    import yaml

    from fast_td3.analysis import recipe_table

    run = tmp_path / "runs" / "0_T1_seed3"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"seed": 3, "algo": {"name": "fast_sac"},
                                                     "resolved": {"cpu": "AMD EPYC test", "torch_threads": 1}}))
    (run / "overrides.yaml").write_text(yaml.safe_dump(["task=T1LowDimJoystickFlatTerrain", "preset=cpu_t1",
                                                        "algo=fast_sac", "seed=3", "out_dir=/somewhere"]))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"step": 2000, "time": 300.0}, verdict(2000, False, True, 0.5, 310.0),
        {"step": 4000, "time": 660.0}, dict(verdict(4000, True, True, 0.9, 670.0), **{"gate/sideways/coverage": 0.534}))))
    (row,) = [recipe_table.row(path) for path in recipe_table.find_runs([tmp_path / "runs"])]
    assert (row["algo"], row["seed"], row["cpu"]) == ("fast_sac", 3, "AMD EPYC test")
    assert row["run"] == "runs/0_T1_seed3"  # the folder's own name, not this machine's path
    assert row["command"] == ("fast-td3-train task=T1LowDimJoystickFlatTerrain preset=cpu_t1 algo=fast_sac seed=3")
    assert row["first_nominal_pass"] == {"step": 2000, "minutes": 5.0}
    assert row["first_robust_pass"] == {"step": 4000, "minutes": 11.0}
    assert (row["robust_pass_rate_latest"], row["last5_passed"], row["steps"]) == (0.9, 1, 4000)
    assert row["latest_errors"] == {"forward": None, "sideways": None, "turn": 0.4}  # step 4000's verdict
    assert row["latest_coverage"] == {"forward": None, "sideways": 0.534}
    assert "| fast_sac | 3 | 5.0 min (step 2000) | 11.0 min (step 4000) | 0.9 | 1/5 | - / - / 0.40 | - / 53% |" in \
        recipe_table.markdown([row])
    (run / "metrics.jsonl").write_text(json.dumps({"step": 900, "time": 90.0}) + "\n")  # not gated yet
    assert "| fast_sac | 3 | not yet | not yet | - | -/5 | - / - / - | - / - | step 900, 1.5 min |" in \
        recipe_table.markdown([recipe_table.row(run)])


def test_a_gate_without_trials_is_no_robust_pass():
    nominal_only = dict(verdict(2000, True, True, 1.0, 90.0), **{"gate/trials": 0.0})
    summary = gate_summary([nominal_only])
    assert summary.first_nominal_pass == {"step": 2000, "minutes": 1.5} and summary.first_robust_pass is None
