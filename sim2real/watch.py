"""`fast-td3-play <T1 bundle>`: an export bundle walking the sim-to-sim gate's joystick sequence,
in MuJoCo's viewer or to a video (the policy as the robot loads it, native MuJoCo).

`--trial K` replays robust trial K with the perturbations it drew (`--seed`, or the draw recorded
in a robust report with `--gate-report`): each push shows as a red arrow at the trunk when it
happens, and the drawn values come as a caption (the viewer's overlay, or a `.srt` subtitle file
beside the video, which players show under it).

Videos render without shadows and reflections by default: software rendering on a CPU (EGL)
takes about 5x longer with them (`--shadows` brings them back).
"""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np

from fast_td3.training.evaluation import write_video
from sim2real import robust, sim2sim, t1_bundle
from sim2real.t1 import perturbations

PUSH_ARROW_SECONDS = 0.6
"""How long a push's arrow stays in the picture."""
VIDEO_SIZE = (352, 480)
"""(height, width) of a recorded frame (multiples of 16: no resizing by the encoder)."""
VIDEO_FPS = 20
"""Frames per second of a recorded video: a 40 s sequence renders in well under a minute on 2 cores."""


def is_bundle(path: str | Path) -> bool:
    path = t1_bundle.bundle_path(path)
    return path.is_dir() and all((path / name).is_file() for name in ("policy.pt", "meta.json", "T1.yaml"))


def trial_draw(bundle: t1_bundle.Bundle, trial: int, seed: int, seconds: float,
               gate_report: str | Path | None = None) -> tuple[perturbations.TrialDraw, float]:
    """(trial `trial`'s draw, its seconds per segment): recorded in a robust report, or drawn
    again from the default ranges and `seed` (the same draw the gate made with those)."""
    if gate_report is None:
        return robust.draw(bundle, perturbations.PerturbationRanges(), seed, trial, seconds), seconds
    try:
        record = json.loads(Path(gate_report).read_text())
        record = record.get("report", record)  # a training run's gate/step_<N>.json holds it under "report"
        trials = {t["trial"]: t["draw"] for t in record["trials"]}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--gate-report {gate_report}: not a robust sim-to-sim report ({error}); write one with "
                         "`fast-td3-sim2sim bundle=<bundle> robust=true report=<file.json>`") from None
    if trial not in trials:
        raise ValueError(f"--trial {trial}: {gate_report} holds trials {sorted(trials)}")
    return perturbations.TrialDraw(**trials[trial]), float(record.get("seconds", seconds))


def recorded_segments(gate_report: str | Path | None) -> tuple:
    """The joystick sequence a robust report's gate played (`both_sides` adds segments), else the default."""
    if gate_report is None:
        return sim2sim.SEGMENTS
    record = json.loads(Path(gate_report).read_text())
    segments = record.get("report", record).get("segments")  # reports before both_sides have none: the default
    return tuple((name, tuple(command)) for name, command in segments) if segments else sim2sim.SEGMENTS


def _push_arrow(scene: mujoco.MjvScene, robot, push: dict) -> None:
    """A red arrow at the trunk along the push's direction, its length the push's speed."""
    if scene.ngeom >= scene.maxgeom:
        return
    start = robot.data.qpos[:3] + np.array([0.0, 0.0, 0.25])  # above the trunk, clear of the arms
    direction = np.array([push["vx"], push["vy"], 0.0])
    end = start + direction / max(np.linalg.norm(direction), 1e-9) * (0.3 + 0.7 * push["speed"])
    geom = scene.geoms[scene.ngeom]
    mujoco.mjv_initGeom(geom, mujoco.mjtGeom.mjGEOM_ARROW, np.zeros(3), np.zeros(3), np.zeros(9),
                        np.array([1.0, 0.1, 0.1, 1.0], dtype=np.float32))
    mujoco.mjv_connector(geom, mujoco.mjtGeom.mjGEOM_ARROW, 0.03, start, end)
    scene.ngeom += 1


def _recent_push(robot, elapsed: float) -> dict | None:
    if robot.pushes_done and elapsed - robot.pushes_done[-1]["time"] < PUSH_ARROW_SECONDS:
        return robot.pushes_done[-1]
    return None


def write_captions(path: Path, draw: perturbations.TrialDraw, total_seconds: float) -> None:
    """SubRip captions: the trial's draw throughout, and each push for a second as it happens."""
    def stamp(t: float) -> str:
        ms = int(round(t * 1000))
        return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"

    cues = [(0.0, total_seconds, draw.summary())]
    cues += [(p["time"], min(p["time"] + 1.0, total_seconds), f"PUSH {p['speed']:.2f} m/s") for p in draw.pushes
             if p["time"] < total_seconds]
    cues.sort()
    path.write_text("".join(f"{i}\n{stamp(a)} --> {stamp(b)}\n{text}\n\n" for i, (a, b, text) in enumerate(cues, 1)))


def play_bundle(path: str | Path, seconds: float | None = None, video: str | Path | None = None,
                fps: int | None = None, trial: int | None = None, seed: int = 0,
                gate_report: str | Path | None = None, shadows: bool = False) -> dict:
    """The sim-to-sim joystick sequence of a T1 bundle (robust trial `trial` when given), watched
    in MuJoCo's viewer or recorded."""
    bundle = t1_bundle.load_bundle(path)
    seconds = float(seconds or 10.0)
    sim2sim.check_seconds(seconds, default=10.0)
    draw, segments = None, sim2sim.SEGMENTS
    if trial is not None:
        draw, seconds = trial_draw(bundle, trial, seed, seconds, gate_report)
        segments = recorded_segments(gate_report)
        print(f"replaying {draw.summary()}")
    control_rate = round(1 / bundle.control().ctrl_dt)
    fps = fps or VIDEO_FPS
    every = max(1, round(control_rate / fps))
    frames, renderer, camera, viewer, steps = [], None, None, None, 0

    def on_step(robot) -> None:
        nonlocal renderer, camera, viewer, steps
        steps += 1
        push = _recent_push(robot, steps * robot.control.ctrl_dt)
        if video is None:
            if viewer is None:
                from mujoco import viewer as mujoco_viewer  # only with a display

                viewer = mujoco_viewer.launch_passive(robot.model, robot.data)
                if draw is not None and hasattr(viewer, "set_texts"):
                    viewer.set_texts((None, None, f"trial {draw.trial}", draw.summary()))
            with viewer.lock():
                viewer.user_scn.ngeom = 0
                if push is not None:
                    _push_arrow(viewer.user_scn, robot, push)
            viewer.sync()
            return
        if steps % every:
            return
        if renderer is None:
            try:
                renderer = mujoco.Renderer(robot.model, height=VIDEO_SIZE[0], width=VIDEO_SIZE[1])
            except mujoco.FatalError as error:  # no OpenGL for offscreen rendering here
                raise RuntimeError(f"MuJoCo cannot render offscreen here ({str(error).split(',')[0]}); "
                                   "MUJOCO_GL=egl needs libEGL (a GPU driver or Mesa), MUJOCO_GL=osmesa needs "
                                   "OSMesa") from None
            camera = mujoco.MjvCamera()
            camera.type, camera.trackbodyid = mujoco.mjtCamera.mjCAMERA_TRACKING, 1
            camera.distance, camera.elevation, camera.azimuth = 3.0, -15.0, 135.0
        renderer.update_scene(robot.data, camera)
        if not shadows:
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        if push is not None:
            _push_arrow(renderer.scene, robot, push)
        frames.append(renderer.render().copy())

    try:
        report = sim2sim.run(bundle, seconds=seconds, segments=segments, on_step=on_step, draw=draw)
    finally:
        if viewer is not None:
            viewer.close()
        if renderer is not None:
            renderer.close()
    sim2sim.print_report(report)
    captions = None
    if video is not None:
        write_video(frames, Path(video), fps)
        if draw is not None:
            captions = Path(video).with_suffix(".srt")
            write_captions(captions, draw, len(frames) / fps)
    result = {"bundle": str(path), "seconds_per_segment": seconds, "passed": report.passed,
              "seconds_walked": round(report.seconds_walked, 2), "video": str(video) if video else None}
    if draw is not None:
        result |= {"trial": draw.trial, "pushes": len(draw.pushes), "captions": str(captions) if captions else None}
    return result
