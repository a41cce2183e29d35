"""The robust sim-to-sim gate (sim2real/t1/perturbations.py, robust.py) and the gate while training
(fast_td3/training/gate_loop.py): known answers for each perturbation, reproducible draws and
verdicts, a standing policy failing, the gate's metrics and best.pt in a real run, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("mujoco_playground", reason="the T1 model comes with the playground extra")
pytest.importorskip("envpool_assets", reason="the T1 model comes with the playground extra")

import torch  # noqa: E402

from fast_td3.training import checkpoint as ckpt  # noqa: E402
from fast_td3.training.config import ConfigError, EnvConfig, GateConfig, TrainConfig  # noqa: E402
from fast_td3.training.gate_loop import GateLoop  # noqa: E402
from fast_td3.training.gate_verdicts import GateVerdict  # noqa: E402
from sim2real import robust, sim2sim, t1, t1_bundle, watch  # noqa: E402
from sim2real.t1 import perturbations  # noqa: E402
from sim2real.mujoco_robot import T1Robot  # noqa: E402
from sim2real.t1.perturbations import NOMINAL, PerturbationRanges, TrialDraw  # noqa: E402

BIN = Path(sys.executable).parent
SHIPPED = t1_bundle.PRETRAINED / "t1_flat"


@pytest.fixture(scope="module")
def bundle() -> t1_bundle.Bundle:
    return t1_bundle.load_bundle(SHIPPED)


def _standing(obs: torch.Tensor) -> torch.Tensor:
    return torch.zeros(obs.shape[0], t1.NUM_LEG_JOINTS)


# ------------------------------------------------------------------ draws and their known answers
def test_every_draw_lies_in_its_range_and_reaches_the_model():
    ranges = PerturbationRanges()
    nominal = T1Robot(t1.T1Control())
    links = nominal.model.nbody - 1
    for trial in range(5):
        draw = perturbations.draw_trial(ranges, seed=7, trial=trial, num_links=links, duration=80.0)
        assert 0.3 <= draw.floor_friction <= 1.0 and -1.0 <= draw.payload <= 3.0
        assert all(0.9 <= s <= 1.2 for s in draw.link_mass) and len(draw.link_mass) == links
        assert all(0.9 <= s <= 1.1 for s in draw.kp + draw.kd) and len(draw.kp) == t1.NUM_JOINTS
        assert all(abs(o) <= 0.02 for o in draw.joint_offset) and draw.action_delay in (0, 1)
        times = [p["time"] for p in draw.pushes]
        assert all(5.0 <= b - a <= 10.0 for a, b in zip([0.0] + times, times)) and times[-1] < 80.0
        assert all(0.1 <= p["speed"] <= 1.0 and np.hypot(p["vx"], p["vy"]) == pytest.approx(p["speed"])
                   for p in draw.pushes)
        robot = T1Robot(t1.T1Control(), draw=draw)
        model, floor = robot.model, robot.model.geom("floor").id
        assert model.geom_friction[floor, 0] == pytest.approx(draw.floor_friction)
        expected_mass = nominal.model.body_mass[1:] * np.asarray(draw.link_mass)
        expected_mass[0] += draw.payload  # body 1 is the trunk, the floating base
        np.testing.assert_allclose(model.body_mass[1:], expected_mass)
        kp = np.asarray(t1.STIFFNESS) * np.asarray(draw.kp)
        np.testing.assert_allclose(model.actuator_gainprm[:, 0], kp)
        np.testing.assert_allclose(model.actuator_biasprm[:, 2], -np.asarray(t1.DAMPING) * np.asarray(draw.kd))
        legs = list(t1.LEG_SDK_INDICES)
        np.testing.assert_allclose(model.actuator_biasprm[legs, 0], -kp[legs] * np.asarray(draw.joint_offset))
        np.testing.assert_allclose(robot.encoder_offsets[legs], draw.joint_offset)
        # a trial starts from the nominal robot's pose (mass-derived constants are set before posing it)
        np.testing.assert_array_equal(robot.data.qpos, nominal.data.qpos)
        np.testing.assert_array_equal(robot.data.ctrl, nominal.data.ctrl)


def test_a_one_step_delay_applies_each_action_one_policy_step_late():
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-0.3, 0.3, t1.NUM_LEG_JOINTS).astype(np.float32) for _ in range(4)]
    delayed = T1Robot(t1.T1Control(), draw=TrialDraw(trial=0, seed=0, action_delay=1))
    on_time = T1Robot(t1.T1Control(), draw=TrialDraw(trial=0, seed=0, action_delay=0))
    for action in actions:
        delayed.act(action)
    for action in [np.zeros(t1.NUM_LEG_JOINTS, np.float32)] + actions[:-1]:  # what the delay hands the PD loop
        on_time.act(action)
    np.testing.assert_array_equal(delayed.data.ctrl, on_time.data.ctrl)
    np.testing.assert_array_equal(delayed.data.qpos, on_time.data.qpos)
    undelayed = T1Robot(t1.T1Control())
    for action in actions:
        undelayed.act(action)
    assert np.abs(undelayed.data.ctrl - delayed.data.ctrl).max() > 1e-3  # the delay is not a no-op


def test_a_push_changes_the_base_velocity_by_the_drawn_amount():
    push = {"time": 0.1, "vx": 0.6, "vy": -0.3, "speed": float(np.hypot(0.6, -0.3))}
    robot = T1Robot(t1.T1Control(), draw=TrialDraw(trial=0, seed=0, pushes=[push]))
    robot.act(np.zeros(t1.NUM_LEG_JOINTS, np.float32))
    assert robot.push_if_due(0.08) is None  # not yet
    before = robot.data.qvel.copy()
    assert robot.push_if_due(0.1) == push
    np.testing.assert_allclose(robot.data.qvel[:2] - before[:2], [0.6, -0.3], atol=1e-12)
    np.testing.assert_array_equal(robot.data.qvel[2:], before[2:])
    assert robot.push_if_due(10.0) is None and robot.pushes_done == [push]  # each push once


def test_sensor_noise_is_the_training_envs_and_reproducible():
    draw = TrialDraw(trial=2, seed=5, obs_noise=1.0)
    args = (np.zeros(3), np.zeros(1), np.zeros(t1.NUM_LEG_JOINTS, np.float32))
    clean = T1Robot(t1.T1Control()).observation(*args)
    first, second = (T1Robot(t1.T1Control(), draw=draw).observation(*args) for _ in range(2))
    np.testing.assert_array_equal(first, second)
    slices = t1.observation_slices()
    gravity_noise = np.abs(first[slices["projected_gravity"]] - clean[slices["projected_gravity"]])
    assert 0 < gravity_noise.max() <= perturbations.OBSERVATION_NOISE_SCALES["gravity"]
    joint_noise = np.abs(first[slices["leg_joint_vel"]] - clean[slices["leg_joint_vel"]])  # scaled by 0.1
    assert 0 < joint_noise.max() <= 0.1 * perturbations.OBSERVATION_NOISE_SCALES["joint_vel"] + 1e-6


def test_each_kind_draws_from_its_own_stream():
    full = perturbations.draw_trial(PerturbationRanges(), 3, 1, 24, 40.0)
    no_push = perturbations.draw_trial(PerturbationRanges(push=None, floor_friction=(0.5, 0.6)), 3, 1, 24, 40.0)
    assert no_push.pushes == [] and 0.5 <= no_push.floor_friction <= 0.6
    assert (no_push.kp, no_push.link_mass, no_push.payload) == (full.kp, full.link_mass, full.payload)
    assert perturbations.draw_trial(PerturbationRanges(), 4, 1, 24, 40.0).kp != full.kp


def test_a_trial_under_no_perturbation_is_the_nominal_gate(bundle):
    nominal = sim2sim.run(bundle, seconds=4.0)
    draw = perturbations.draw_trial(NOMINAL, 0, 0, 24, 16.0)
    unperturbed = sim2sim.run(bundle, seconds=4.0, draw=draw)
    assert asdict(unperturbed) == asdict(nominal)


# ------------------------------------------------------------------ the verdict
def test_same_seed_same_draws_and_verdict(bundle):
    first = robust.run(bundle, trials=2, seed=11, seconds=4.0)
    again = robust.run(bundle, trials=2, seed=11, seconds=4.0)
    assert json.dumps(first.to_dict(), default=str) == json.dumps(again.to_dict(), default=str)
    other = robust.run(bundle, trials=2, seed=12, seconds=4.0)
    assert [t.draw.kp for t in other.trials] != [t.draw.kp for t in first.trials]


def test_a_standing_policy_fails_the_robust_gate(bundle):
    report = robust.run(bundle, trials=2, seed=0, seconds=4.0, policy=_standing)
    assert not report.passed and not report.nominal.passed and report.robust_pass_rate == 0.0
    assert all(t.failures() for t in report.trials)


def test_the_pass_rate_decides_and_the_report_names_failed_draws(bundle, capsys):
    assert robust.run(bundle, trials=0, seconds=4.0).passed  # no trials: the nominal gate decides
    report = robust.run(bundle, trials=2, seed=0, seconds=4.0, ranges=NOMINAL)  # trials that replay the nominal
    assert report.nominal.passed and report.robust_pass_rate == 1.0 and report.passed
    report.min_pass_rate = 1.0
    report.trials[1].report.segments[1].failures.append("planar velocity error 0.3 m/s > 0.2")
    assert report.robust_pass_rate == 0.5 and not report.passed
    robust.print_report(report)
    printed = capsys.readouterr().out
    assert "failed trial 1, delay 0" in printed and "1/2 perturbed trials passed" in printed
    record = report.to_dict()
    assert record["robust_pass_rate"] == 0.5 and record["trials"][1]["draw"]["kp"] == report.trials[1].draw.kp


def test_the_cli_writes_the_robust_report_and_play_replays_a_trial(tmp_path):
    out = tmp_path / "robust.json"
    run = subprocess.run([str(BIN / "fast-td3-sim2sim"), "bundle=t1_flat", "robust=true", "trials=2", "seconds=4",
                          "seed=3", "push=0.2,0.3", "push_interval=3,4", "physics=implicitfast",
                          f"report={out}"], capture_output=True, text=True, timeout=300)
    assert run.returncode in (0, 1), run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    record = json.loads(out.read_text())
    assert summary["robust_pass_rate"] == record["robust_pass_rate"] and summary["trials"] == 2
    draw = record["trials"][1]["draw"]
    assert draw["physics"] == "implicitfast" and all(0.2 <= p["speed"] <= 0.3 for p in draw["pushes"])
    assert record["ranges"]["push_interval"] == [3.0, 4.0] and len(draw["pushes"]) >= 3
    # replaying trial 1 from the report plays what the gate played
    bundle = t1_bundle.load_bundle("t1_flat")
    replay_draw, seconds = watch.trial_draw(bundle, 1, 0, 10.0, gate_report=out)
    assert seconds == 4.0 and asdict(replay_draw) == draw
    replay = sim2sim.run(bundle, seconds=seconds, draw=replay_draw)
    assert replay.seconds_walked == pytest.approx(record["trials"][1]["seconds_walked"])
    assert [f for s in replay.segments for f in s.failures] == [f for s in record["trials"][1]["segments"]
                                                                 for f in s["failures"]]


def test_both_sides_adds_the_right_step_and_turn_and_leaves_the_default_as_it_was():
    assert sim2sim.both_sides() == sim2sim.SEGMENTS + (("sideways_mirrored", (0.0, -0.3, 0.0)),
                                                       ("turn_mirrored", (0.0, 0.0, -0.5)))
    # pushes are drawn over the whole sequence: the default sequence's draws are the ones they were
    assert robust.sequence_seconds(4.0) == 16.0 and robust.sequence_seconds(4.0, sim2sim.both_sides()) == 24.0
    from fast_td3.training.gate_loop import gate_options

    assert "both_sides=false" in gate_options(TrainConfig()) and "both_sides=true" in gate_options(
        TrainConfig(gate=GateConfig(both_sides=True)))


def test_the_cli_plays_both_sides_and_a_replay_plays_the_same_sequence(tmp_path):
    out = tmp_path / "both.json"
    run = subprocess.run([str(BIN / "fast-td3-sim2sim"), "bundle=t1_flat", "robust=true", "trials=1", "seconds=3",
                          "both_sides=true", "push=off", f"report={out}"], capture_output=True, text=True, timeout=300)
    assert run.returncode in (0, 1), run.stderr
    record = json.loads(out.read_text())
    assert [name for name, _ in record["segments"]] == [name for name, _ in sim2sim.both_sides()]
    played = {s["name"]: s for s in record["nominal"]["segments"]}
    assert played["turn_mirrored"]["command"] == [0.0, 0.0, -0.5] and "yaw_rate_error" in played["turn_mirrored"]
    assert watch.recorded_segments(out) == sim2sim.both_sides() and watch.recorded_segments(None) == sim2sim.SEGMENTS
    bad = subprocess.run([str(BIN / "fast-td3-sim2sim"), "bundle=t1_flat", "both_sides=maybe"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "both_sides=maybe: give true or false" in bad.stderr


def test_captions_name_the_draw_and_each_push(tmp_path):
    draw = TrialDraw(trial=4, seed=0, floor_friction=0.5, pushes=[{"time": 6.5, "vx": 0.3, "vy": 0.4, "speed": 0.5}])
    watch.write_captions(tmp_path / "v.srt", draw, 20.0)
    text = (tmp_path / "v.srt").read_text()
    assert "00:00:00,000 --> 00:00:20,000\ntrial 4, friction 0.50" in text
    assert "00:00:06,500 --> 00:00:07,500\nPUSH 0.50 m/s" in text


# ------------------------------------------------------------------ bad input (one line, exit 2)
def _bad_bundle(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name in ("policy.pt", "meta.json", "T1.yaml"):
        (folder / name).write_bytes((SHIPPED / name).read_bytes())
    deploy_yaml = yaml.safe_load((folder / "T1.yaml").read_text())
    edit(deploy_yaml)
    (folder / "T1.yaml").write_text(yaml.safe_dump(deploy_yaml))
    return folder


@pytest.mark.parametrize("case, message", [
    ("missing", "no such folder, nor a shipped bundle (shipped: t1_flat, t1_robust)"),
    ("gain_text", "common.stiffness[2] (Left_Shoulder_Pitch) is 's', not a number"),
    ("gain_count", "common.damping needs 23 numbers (one per joint, SDK order), has 22"),
    ("settle", "seconds=2 leaves nothing to judge"),
    ("range", "floor_friction=0.3: give a range LOW,HIGH"),
    ("robust_only", "['trials'] apply to the robust gate: add robust=true"),
    ("infinite", "trials=inf: give a whole number"),
    ("report_folder", "does not exist; create it or name another file"),
])
def test_bad_gate_input_is_one_line_and_exit_2(tmp_path, case, message):
    args = {"missing": lambda: [f"bundle={tmp_path / 'nope'}"],
            "gain_text": lambda: [f"bundle={_bad_bundle(tmp_path, lambda y: y['common']['stiffness'].__setitem__(2, 's'))}"],
            "gain_count": lambda: [f"bundle={_bad_bundle(tmp_path, lambda y: y['common']['damping'].pop())}"],
            "settle": lambda: ["bundle=t1_flat", "seconds=2"],
            "range": lambda: ["bundle=t1_flat", "robust=true", "floor_friction=0.3"],
            "robust_only": lambda: ["bundle=t1_flat", "trials=3"],
            "infinite": lambda: ["bundle=t1_flat", "robust=true", "trials=inf"],
            "report_folder": lambda: ["bundle=t1_flat", f"report={tmp_path / 'no' / 'r.json'}"]}[case]()
    run = subprocess.run([str(BIN / "fast-td3-sim2sim"), *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and message in run.stderr and "Traceback" not in run.stderr


def test_gate_settings_are_checked_with_the_config():
    t1_env = EnvConfig(suite="playground", task="T1LowDimJoystickFlatTerrain")
    TrainConfig(env=t1_env, gate=GateConfig(interval=100), best_by="gate")  # valid
    for kwargs, message in (({"best_by": "gate"}, "best_by=gate needs the gate in the loop"),
                            ({"best_by": "latest"}, "best_by must be one of"),
                            ({"gate": GateConfig(interval=10, seconds=1.0)}, "gate.seconds must be > 2"),
                            ({"gate": GateConfig(interval=10, min_pass_rate=1.5)}, "gate.min_pass_rate"),
                            ({"gate": GateConfig(interval=10, average=0)}, "gate.average must be >= 1")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
            TrainConfig(env=t1_env, **kwargs)
    with pytest.raises(ConfigError, match="has none"):
        TrainConfig(gate=GateConfig(interval=10))  # InvertedPendulum has no bundle to gate


# ------------------------------------------------------------------ the gate while training
def _verdict(step: int, rate: float, nominal: bool, eval_return: float) -> GateVerdict:
    passed = nominal and rate >= 0.9
    return GateVerdict(step, {"gate/passed": float(passed), "gate/nominal_passed": float(nominal),
                              "gate/robust_pass_rate": rate}, eval_return=eval_return)


def test_best_by_gate_keeps_the_best_ranked_checkpoint_and_counts_passes(tmp_path):
    cfg = TrainConfig(env=EnvConfig(suite="playground", task="T1LowDimJoystickFlatTerrain"),
                      gate=GateConfig(interval=10, stop_after_passes=2), best_by="gate")
    loop = GateLoop(cfg, tmp_path, ckpt.CheckpointManager(tmp_path), start_step=0, say=lambda line: None)
    verdicts = [_verdict(10, 0.5, True, 40.0), _verdict(20, 0.8, False, 50.0), _verdict(30, 0.5, True, 45.0),
                _verdict(40, 0.8, True, 30.0), _verdict(50, 0.95, True, 20.0), _verdict(60, 0.7, True, 60.0)]
    verdicts += [_verdict(70, 1.0, False, 90.0), _verdict(80, 0.9, True, 1.0), _verdict(90, 1.0, True, 1.0)]
    # a pass first, then the pass rate, then the nominal pass, then eval return
    expected_best = [10, 20, 20, 40, 50, 50, 50, 50, 90]
    satisfied = []
    for verdict, best in zip(verdicts, expected_best):
        (tmp_path / "gate" / f"step_{verdict.step:09d}.pt").write_bytes(f"state of {verdict.step}".encode())
        loop.absorb(verdict)
        assert (tmp_path / "checkpoints" / "best.pt").read_bytes() == f"state of {best}".encode()
        satisfied.append(loop.satisfied)
    # each best so far keeps its file (a resume from an earlier step restores it), the others go
    kept = sorted(p.name for p in (tmp_path / "gate").glob("*.pt"))
    assert kept == [f"step_{s:09d}.pt" for s in (10, 20, 40, 50, 90)]
    assert satisfied == [False] * 8 + [True] and loop.passes_in_a_row == 2  # 80 and 90 passed in a row
    error = GateVerdict(100, {}, error="the gate process exited 1 without a verdict")
    assert not loop.absorb(error) and loop.best.step == 90 and not loop.satisfied


def test_a_failed_gate_is_never_announced_as_the_best(tmp_path):
    cfg = TrainConfig(env=EnvConfig(suite="playground", task="T1LowDimJoystickFlatTerrain"),
                      gate=GateConfig(interval=10), best_by="gate")
    loop = GateLoop(cfg, tmp_path, ckpt.CheckpointManager(tmp_path), start_step=0, say=lambda line: None)

    class Notes:
        lines: list[str] = []

        def log_past(self, step, metrics, key):
            pass

        def note(self, line):
            self.lines.append(line)

    notes = Notes()
    for verdict in (_verdict(10, 0.5, True, 40.0), _verdict(20, 1.0, True, 50.0)):
        (tmp_path / "gate" / f"step_{verdict.step:09d}.pt").write_bytes(b"state")
        loop.take([verdict], notes)
    failed, passed = notes.lines
    assert "fail" in failed and "now best.pt" not in failed and "none has passed yet" in failed
    assert "PASS" in passed and passed.endswith(": now best.pt")


def _write_verdict(run_dir: Path, verdict: GateVerdict, logged: bool) -> None:
    gate = run_dir / "gate"
    gate.mkdir(parents=True, exist_ok=True)
    (gate / f"step_{verdict.step:09d}.json").write_text(json.dumps({"metrics": verdict.metrics,
                                                                   "eval_return": verdict.eval_return}))
    (gate / f"step_{verdict.step:09d}.pt").write_bytes(f"state of {verdict.step}".encode())
    if logged:
        with open(run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": verdict.step} | verdict.metrics) + "\n")


def test_a_resume_recalls_the_gates_verdicts_and_best_pt(tmp_path, monkeypatch):
    """Killed at step 35 after the checkpoint of step 30: the verdict of 40 is another history, the
    verdict of 30 arrived but was never logged, best.pt is the best of those up to 30."""
    cfg = TrainConfig(env=EnvConfig(suite="playground", task="T1LowDimJoystickFlatTerrain"),
                      gate=GateConfig(interval=10), best_by="gate")
    _write_verdict(tmp_path, _verdict(10, 0.5, True, 3.0), logged=True)
    _write_verdict(tmp_path, _verdict(20, 0.95, True, 2.0), logged=True)
    _write_verdict(tmp_path, _verdict(30, 0.2, True, 9.0), logged=False)
    _write_verdict(tmp_path, _verdict(40, 1.0, True, 9.0), logged=True)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.pt").write_bytes(b"state of 40")
    started = []
    monkeypatch.setattr(GateLoop, "_start_waiting", lambda self: started.append(self.waiting))
    loop = GateLoop(cfg, tmp_path, ckpt.CheckpointManager(tmp_path), start_step=30, say=lambda line: None)
    assert (tmp_path / "checkpoints" / "best.pt").read_bytes() == b"state of 20"
    assert sorted(p.name for p in (tmp_path / "gate" / "abandoned_30").iterdir()) == [
        "step_000000040.json", "step_000000040.pt"]
    assert [v.step for v in loop.verdicts] == [10, 20] and loop.passes_in_a_row == 1
    assert [v.step for v in loop.poll()] == [30] and loop.poll() == []  # logged by the runner, once
    assert started == [None]  # every checkpoint has its verdict: nothing to gate again


def test_the_robust_recipe_gates_while_training_as_the_shipping_gate_does():
    """recipe=t1's gate in the loop plays the segment length `fast-td3-sim2sim` and
    fast-td3-ship (sim2real/ship.py) judge with: shorter segments hide a heading that drifts."""
    import inspect

    from test_precision import composed

    recipe = composed("recipe=t1", "sizing=cpu")
    assert recipe.gate.seconds == inspect.signature(sim2sim.run).parameters["seconds"].default == 20.0
    assert recipe.gate.seconds == inspect.signature(robust.run).parameters["seconds"].default
    assert composed("task=T1LowDimJoystickFlatTerrain").gate.seconds == 10.0  # the task's own, cheaper


def test_a_t1_run_gates_while_training_and_best_pt_is_the_gates_choice(tmp_path):
    run_dir = tmp_path / "run"
    env = dict(os.environ, FAST_TD3_THREADS="1")
    train = subprocess.run(
        [str(BIN / "fast-td3-train"), "recipe=t1", "sizing=cpu", "algo.compile=false", "total_steps=30",
         "algo.learning_starts=5", "eval_interval=10", "save_interval=10", "gate.interval=10", "gate.trials=1",
         "gate.seconds=3", "gate.perturbations.push=off", "gate.average=2", "env.num_envs=4", "algo.batch_size=64", "eval_episodes=2",
         "env.max_episode_steps=20", "algo.precision=fp32", f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-2000:]
    gated = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "gate/passed" in r]
    steps = sorted(r["step"] for r in gated)  # a gate step that comes while one runs waits; a newer one replaces it
    assert steps in ([10, 20, 30], [10, 30]) and (steps == [10, 20, 30] or "Gate at step 20 skipped" in train.stdout)
    assert all({"gate/robust_pass_rate", "gate/nominal_passed", "gate/seconds_walked", "gate/wall_s"} <= set(r)
               for r in gated)
    verdicts = {step: json.loads((run_dir / "gate" / f"step_{step:09d}.json").read_text()) for step in steps}
    assert all(v["report"]["ranges"]["push"] is None and len(v["report"]["trials"]) == 1 for v in verdicts.values())
    ranked = max(verdicts, key=lambda s: (verdicts[s]["metrics"]["gate/passed"],
                                          verdicts[s]["metrics"]["gate/robust_pass_rate"],
                                          verdicts[s]["metrics"]["gate/nominal_passed"],
                                          verdicts[s]["eval_return"], s))
    best = ckpt.load(run_dir / "checkpoints" / "best.pt")
    assert best["global_step"] == ranked
    # gate.average=2: every gate after the first played the mean of its actor and the one 10 steps before
    assert best["averaged_steps"] == ([10] if ranked == 10 else [ranked - 10, ranked])
    assert [verdicts[s]["metrics"]["gate/averaged_actors"] for s in steps] == [1.0] + [2.0] * (len(steps) - 1)
    assert "Gate at step 30 of the mean of 2 actors:" in train.stdout and f"best gate   step {ranked}" in train.stdout
    # a gate's recorded trial replays from its file (fast-td3-play --trial 0 --gate-report ...)
    draw, seconds = watch.trial_draw(None, 0, 0, 10.0, gate_report=run_dir / "gate" / f"step_{steps[-1]:09d}.json")
    assert seconds == 3.0 and asdict(draw) == verdicts[steps[-1]]["report"]["trials"][0]["draw"]


def _lowest_priority_group() -> None:
    try:
        with open("/proc/self/autogroup", "w") as group:  # the kernel shares the CPU by session
            group.write("19")
    except OSError:  # no autogroup here
        pass


def test_a_t1_run_confirms_its_passes_by_the_shipping_bar_then_ships_and_stops(tmp_path):
    """`gate.ship`: after `stop_after_passes` passes in a row, `fast-td3-ship` confirms the last in the
    background. Too few trials for the bar's interval: not confirmed, training goes on to its end.
    Resumed with enough: confirmed, `<run>/bundle/` written, and the run stops long before its cap.
    Real gates, real export: the test config makes an untrained T1 passable (fall detection off,
    the standing segment only, no kicks), nothing is stubbed."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, FAST_TD3_THREADS="1")
    # the gate's processes lower their own priority; the trainer's does too here, so that beside the
    # other test worker they share a core evenly instead of waiting for the trainer
    lowered = {"start_new_session": True, "preexec_fn": _lowest_priority_group}
    passable = ["gate.interval=10", "gate.trials=1", "gate.seconds=2.1", "gate.ship_seconds=2.1", "gate.segments=[stand]",
                "gate.thresholds.min_height=-1", "gate.thresholds.min_tilt_cos=-2", "gate.perturbations.push=off",
                "gate.stop_after_passes=2", "gate.ship=true", "gate.ship_seeds=[1,2]", "logger.log_interval=10"]
    first = subprocess.run(
        [str(BIN / "fast-td3-train"), "recipe=t1", "sizing=cpu", "algo.compile=false", "total_steps=40",
         "algo.learning_starts=5", "eval_interval=0", "save_interval=20", *passable, "gate.ship_trials=3",
         "env.num_envs=4", "algo.batch_size=64", "env.max_episode_steps=20", "algo.precision=fp32",
         f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, **lowered)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    # 6 of 6 trials passed, but 6 cannot show a rate of 0.8 or more: [0.61, 1.00]
    assert "the robust pass rate's 95 % interval starts at 0.610 < 0.8 (6/6 trials)); training goes on" in first.stdout
    assert not (run_dir / "bundle").exists() and "Stopping at global step" not in first.stdout
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == 40 and [r["gate/confirmed"] for r in rows if "gate/confirmed" in r] == [0.0]

    resumed = subprocess.run(
        [str(BIN / "fast-td3-train"), f"resume={run_dir}", "total_steps=100000", "gate.ship_trials=9"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, **lowered)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    # the failed confirmation's reset is recalled: two new passes are needed, then 18 of 18 trials: [0.82, 1.00]
    confirmed = re.search(r"Confirmed: the state of step (\d+) cleared the shipping bar", resumed.stdout)
    assert confirmed and int(confirmed.group(1)) >= 60, resumed.stdout[-3000:]
    stopped = re.search(r"Stopping at global step (\d+): the gate passed 2 times in a row and the state of step "
                        rf"{confirmed.group(1)} cleared the shipping bar", resumed.stdout)
    assert stopped and int(stopped.group(1)) < 100000
    info = json.loads((run_dir / "bundle" / "training.json").read_text())
    assert info["checkpoint_step"] == int(confirmed.group(1)) and info["gate_segments"] == ["stand"]
    assert info["robust"]["seeds"] == [1, 2] and info["robust"]["trials"] == 9 and info["robust"]["below_the_bar"] == []
    assert info["robust"]["interval_95"][0] == pytest.approx(18 / (18 + 1.96 ** 2), abs=1e-9)
    # the bundle is one fast-td3-sim2sim plays: no deploy mismatch (the untrained policy falls, as it should)
    played = subprocess.run([str(BIN / "fast-td3-sim2sim"), f"bundle={run_dir / 'bundle'}", "seconds=2.1",
                             f"report={tmp_path / 'played.json'}"], capture_output=True, text=True, timeout=300)
    assert played.returncode in (0, 1), played.stderr
    assert json.loads((tmp_path / "played.json").read_text())["deploy_mismatches"] == []


@pytest.mark.parametrize("args, message", [
    (["sizing=cpu", "gate.trials=3"], "gate.trials=3 has no effect: the deploy gate is off"),
    (["task=T1LowDimJoystickFlatTerrain", "gate.trials=0", "gate.perturbations.push=off"],
     "gate.perturbations.push=off has no effect: the gate plays no perturbed trials"),
    (["task=T1LowDimJoystickFlatTerrain", "gate.perturbations.pushes=off"],
     "gate.perturbations.pushes is not a perturbation; known: push, push_interval"),
    (["task=T1LowDimJoystickFlatTerrain", "gate.perturbations.kp='2,1'"], "gate.perturbations: kp: range [2.0, 1.0]"),
    (["task=T1LowDimJoystickFlatTerrain", "gate=nope"], "Unknown gate option 'nope'"),
    (["task=T1LowDimJoystickFlatTerrain", "gate.ship=true"],
     "gate.ship=true confirms gate.stop_after_passes gates in a row: give gate.stop_after_passes=N"),
    (["task=T1LowDimJoystickFlatTerrain", "gate.segments=[stand,walk]"],
     "gate.segments: no segment 'walk'; the gate's segments are stand, forward, sideways, turn"),
    (["task=T1LowDimJoystickFlatTerrain", "gate.thresholds.max_speed=1"],
     "gate.thresholds.max_speed is not a threshold; known: max_lin_vel_error"),
])
def test_bad_gate_settings_are_refused_before_a_run_folder_exists(tmp_path, args, message):
    run = subprocess.run([str(BIN / "fast-td3-train"), *args], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == []  # no run folder, nothing written


def test_the_shipping_bar_names_each_error_past_its_margin_and_short_coverage():
    """Known answers for the bar a robust bundle ships on: 80% of each limit, 75% forward coverage,
    the robust gate passed; a nominal pass alone is not enough."""
    from types import SimpleNamespace

    from sim2real.sim2sim import SegmentReport, Sim2SimReport

    limits = {"max_lin_vel_error": 0.2, "max_yaw_rate_error": 0.3}

    def nominal(forward_lin, turn_yaw, forward_distance):
        return Sim2SimReport("b", True, [], {**limits, "min_forward_coverage": 0.5}, [
            SegmentReport("stand", [0.0, 0.0, 0.0], 20.0, lin_vel_error=0.5),  # a still segment is not judged
            SegmentReport("forward", [0.5, 0.0, 0.0], 20.0, distance=forward_distance, commanded_distance=10.0,
                          lin_vel_error=forward_lin, yaw_rate_error=0.0),
            SegmentReport("turn", [0.0, 0.0, 0.5], 20.0, lin_vel_error=0.0, yaw_rate_error=turn_yaw)])

    assert robust.nominal_shortfalls(nominal(0.16, 0.24, 7.5)) == []  # exactly at 80% and at 75%
    assert robust.nominal_shortfalls(nominal(0.17, 0.25, 7.4)) == [
        "forward: lin_vel_error 0.170 > 0.8 x 0.2", "forward: forward coverage 74% < 75%",
        "turn: yaw_rate_error 0.250 > 0.8 x 0.3"]
    assert robust.nominal_shortfalls(nominal(0.19, 0.0, 10.0), margin=1.0) == []
    walked = nominal(0.1, 0.1, 9.0)

    def played(seed, passed, trials=20):
        outcomes = [SimpleNamespace(passed=i < passed) for i in range(trials)]
        return robust.RobustReport("b", walked, seed, PerturbationRanges(), trials=outcomes)

    assert robust.shipping_shortfalls(walked, played(0, 17)) == [
        "seed 0: robust pass rate 85% < 90%", "the robust pass rate's 95 % interval starts at 0.640 < 0.8 (17/20 trials)"]
    assert robust.shipping_shortfalls(walked, played(0, 20)) == []
    # 19 of 20 clears the gate's 90 % but not the interval's bar; three trial seeds pooled do
    assert robust.shipping_shortfalls(walked, played(0, 19)) == [
        "the robust pass rate's 95 % interval starts at 0.764 < 0.8 (19/20 trials)"]
    assert robust.shipping_shortfalls(walked, [played(0, 19), played(1, 20), played(2, 19)]) == []
    assert robust.shipping_shortfalls(walked, [played(0, 19), played(1, 18), played(2, 18)]) == []  # 55/60: 0.82
    assert robust.shipping_shortfalls(walked, [played(0, 19), played(1, 18), played(2, 17)]) == [
        "seed 2: robust pass rate 85% < 90%", "the robust pass rate's 95 % interval starts at 0.799 < 0.8 (54/60 trials)"]


def test_the_wilson_interval_has_its_known_answers():
    """Against the closed form's published values (e.g. 19/20: [0.764, 0.991]), and it stays in [0, 1]."""
    assert robust.wilson_interval(19, 20) == pytest.approx((0.7639, 0.9911), abs=1e-4)
    assert robust.wilson_interval(20, 20) == pytest.approx((0.8389, 1.0), abs=1e-4)
    assert robust.wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert robust.wilson_interval(54, 60) == pytest.approx((0.7985, 0.9534), abs=1e-4)
    pooled = robust.PooledRate(57, 60, (0, 1, 2))
    assert pooled.to_dict()["interval_95"] == pytest.approx([0.8630, 0.9829], abs=1e-4)
    assert pooled.line() == "57/60 perturbed trials passed (95%; 95 % interval [0.86, 0.98]) over trial seeds 0, 1, 2"


def test_the_gate_metrics_hold_each_walks_coverage_and_turn():
    """`gate/<segment>/coverage` is distance over commanded distance for the segments with a linear
    command, and absent for standing and turning in place, where nothing is commanded to cover;
    `heading_change` likewise, and the trials' mean |turn| per walk where they did not fall."""
    from sim2real.gate_job import metrics_of
    from sim2real.sim2sim import SegmentReport, Sim2SimReport

    def played(forward_turn, sideways_turn=0.0, fell=False):
        return Sim2SimReport("b", True, [], segments=[
            SegmentReport("stand", [0.0, 0.0, 0.0], 20.0, distance=0.01, heading_change=0.4),
            SegmentReport("forward", [0.5, 0.0, 0.0], 20.0, distance=7.5, commanded_distance=10.0,
                          heading_change=forward_turn),
            SegmentReport("sideways", [0.0, 0.3, 0.0], 20.0, distance=1.8, commanded_distance=6.0, lin_vel_error=0.2,
                          heading_change=sideways_turn, fell=fell),
            SegmentReport("turn", [0.0, 0.0, 0.5], 20.0, distance=0.3, heading_change=9.0)])

    report = robust.RobustReport("b", played(-0.5), seed=0, ranges=NOMINAL)
    report.trials = [robust.TrialResult(None, played(-3.0, 1.0)), robust.TrialResult(None, played(1.0, 5.0, fell=True))]
    metrics = metrics_of(report)
    assert metrics["gate/forward/coverage"] == 0.75
    assert metrics["gate/sideways/coverage"] == pytest.approx(0.3) and metrics["gate/sideways/lin_vel_error"] == 0.2
    assert "gate/turn/coverage" not in metrics and "gate/stand/coverage" not in metrics
    assert "gate/turn/yaw_rate_error" in metrics
    assert metrics["gate/forward/heading_change"] == -0.5 and "gate/turn/heading_change" not in metrics
    assert metrics["gate/robust/forward/abs_heading_change"] == 2.0  # |-3| and |1|
    assert metrics["gate/robust/sideways/abs_heading_change"] == 1.0  # the fall's turn is left out
    assert not any(key.startswith(("gate/robust/turn/abs", "gate/robust/stand/abs")) for key in metrics)


def _t1_shaped_run(run_dir: Path) -> None:
    """A T1LowDim run folder as the runner leaves one: an untrained checkpoint, config.yaml, metrics."""
    from helpers import save_untrained_t1_checkpoint

    cfg = save_untrained_t1_checkpoint(run_dir, 10)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(json.loads(json.dumps(asdict(cfg)))))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 10, "env_steps": 20, "time": 1.0,
                                                        "eval/return_mean": 0.5, "eval/length_mean": 7.0}) + "\n")


@pytest.mark.parametrize("both_sides", [False, True])
def test_ship_t1_bundle_plays_the_right_side_when_asked(tmp_path, both_sides):
    """fast-td3-ship (sim2real/ship.py)'s gates play the sequence asked for, and training.json names it (an
    untrained policy falls at once, so `--allow-fail` ships it, marked failing)."""
    from sim2real import ship as ship_t1_bundle

    _t1_shaped_run(tmp_path / "run")
    out = tmp_path / "shipped"
    argv = [str(tmp_path / "run"), "--step", "10", "--out", str(out), "--robust", "1", "--allow-fail"]
    assert ship_t1_bundle.main(argv + ["--both-sides"] * both_sides) == 0
    expected = [name for name, _ in (sim2sim.both_sides() if both_sides else sim2sim.SEGMENTS)]
    assert ("sideways_mirrored" in expected) == both_sides
    robust_report = json.loads((out / "sim2sim_robust.json").read_text())
    assert [name for name, _ in robust_report["segments"]] == expected
    info = json.loads((out / "training.json").read_text())
    assert info["gate_segments"] == expected and info["gate_passed"] is False and info["checkpoint_step"] == 10
    assert {"policy.onnx", "meta.json", "T1.yaml", "curve.png", "metrics.jsonl.gz"} <= {p.name for p in out.iterdir()}


def test_ship_t1_bundle_keeps_the_evidence_each_seeds_row_is_computed_from(tmp_path):
    """`--seeds` writes seeds.json and, under `seeds/<task>/<run>/`, the files each row came from:
    with the run folder gone, the bundle's copy gives the same row."""
    from fast_td3.analysis import recipe_table
    from sim2real import ship as ship_t1_bundle

    from fast_td3.files import json_safe

    run = tmp_path / "T1LowDimJoystickFlatTerrain" / "2026-12-06_13-06-08_3"
    _t1_shaped_run(run)
    (run / "overrides.yaml").write_text(yaml.safe_dump(["task=T1LowDimJoystickFlatTerrain", "seed=3",
                                                        f"out_dir={tmp_path}"]))
    (run / ".hydra").mkdir(exist_ok=True)  # Hydra's own copy: not kept twice
    (run / ".hydra" / "overrides.yaml").write_text((run / "overrides.yaml").read_text())
    with open(run / "metrics.jsonl", "a") as metrics:
        metrics.write(json.dumps({"step": 10, "env_steps": 20, "time": 1.5, "gate/passed": 1.0, "gate/nominal_passed": 1.0,
                                  "gate/robust_pass_rate": 0.9, "gate/trials": 10.0}) + "\n")
    out = tmp_path / "shipped"
    assert ship_t1_bundle.main([str(run), "--step", "10", "--out", str(out), "--allow-fail", "--seeds", str(run),
                                "--note", "alone on the machine"]) == 0
    assert json.loads((out / "training.json").read_text())["wall_seconds"] == 1.0  # the checkpoint's, not the verdict's
    (row,) = json.loads((out / "seeds.json").read_text())
    assert row["command"] == "fast-td3-train task=T1LowDimJoystickFlatTerrain seed=3"  # no machine's out_dir
    assert row["first_robust_pass"] == {"step": 10, "minutes": 0.0} and row["robust_pass_rate_latest"] == 0.9
    kept = out / "seeds" / "T1LowDimJoystickFlatTerrain" / "2026-12-06_13-06-08_3"
    assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "metrics.jsonl.gz", "overrides.yaml"]
    import shutil

    shutil.rmtree(run)
    assert row["note"] == "alone on the machine"
    assert json.loads(json.dumps(json_safe(recipe_table.row(kept, row["note"])))) == row
    # the bundle is no run itself (its own metrics.jsonl.gz sits beside train_config.yaml): its seeds are
    assert recipe_table.find_runs([out]) == [kept.resolve()]
