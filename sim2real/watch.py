"""`fast-td3-play <T1 bundle>`: an export bundle walking the sim-to-sim gate's joystick sequence,
in MuJoCo's viewer or to a video (the policy as the robot loads it, native MuJoCo)."""

from __future__ import annotations

from pathlib import Path

import mujoco

from fast_td3.training.evaluation import write_video
from sim2real import sim2sim


def is_bundle(path: str | Path) -> bool:
    path = sim2sim.bundle_path(path)
    return path.is_dir() and all((path / name).is_file() for name in ("policy.pt", "meta.json", "T1.yaml"))


def play_bundle(path: str | Path, seconds: float | None = None, video: str | Path | None = None,
                fps: int | None = None) -> dict:
    """The sim-to-sim joystick sequence of a T1 bundle, watched in MuJoCo's viewer or recorded."""
    bundle = sim2sim.load_bundle(path)
    seconds = float(seconds or 10.0)
    control_rate = round(1 / bundle.control().ctrl_dt)
    fps = fps or 25
    every = max(1, round(control_rate / fps))
    frames, renderer, camera, viewer, steps = [], None, None, None, 0

    def on_step(robot) -> None:
        nonlocal renderer, camera, viewer, steps
        steps += 1
        if video is None:
            if viewer is None:
                from mujoco import viewer as mujoco_viewer  # only with a display

                viewer = mujoco_viewer.launch_passive(robot.model, robot.data)
            viewer.sync()
            return
        if steps % every:
            return
        if renderer is None:
            renderer = mujoco.Renderer(robot.model, height=360, width=480)
            camera = mujoco.MjvCamera()
            camera.type, camera.trackbodyid = mujoco.mjtCamera.mjCAMERA_TRACKING, 1
            camera.distance, camera.elevation, camera.azimuth = 3.0, -15.0, 135.0
        renderer.update_scene(robot.data, camera)
        frames.append(renderer.render().copy())

    try:
        report = sim2sim.run(bundle, seconds=seconds, on_step=on_step)
    finally:
        if viewer is not None:
            viewer.close()
        if renderer is not None:
            renderer.close()
    sim2sim.print_report(report)
    if video is not None:
        write_video(frames, Path(video), fps)
    return {"bundle": str(path), "seconds_per_segment": seconds, "passed": report.passed,
            "seconds_walked": round(report.seconds_walked, 2), "video": str(video) if video else None}
