"""`fast-td3-sim2sim bundle=<folder>`: the exported T1 policy on native MuJoCo, before a robot sees it.

The bundle's TorchScript file (loaded with `torch.jit.load` alone, as the robot loads it)
drives the T1 model in MuJoCo's C engine, not MJX, with the gains, default pose, action
scale and rates of the bundle's `T1.yaml` (what the robot will run): PD and the deploy
code's target filter at 500 Hz, the policy at 50 Hz. Observations, gait phase and command
smoothing come from `sim2real.t1`, the definitions the training env used. A scripted
joystick sequence (stand, forward, sideways, turn; 20 s each by default) is played; the
report gives per segment whether the robot fell (base height or tilt), the distance
walked and the velocity-tracking errors, each against its threshold.

The verdict judges walking, not just staying up: in every moving segment, after the settle
time, the mean planar-velocity error must be at most `max_lin_vel_error` (0.2 m/s), the mean
yaw-rate error at most `max_yaw_rate_error` (0.3 rad/s), and a segment that commands forward
motion must cover at least `min_forward_coverage` (60 %) of its commanded distance. A policy
that stands still through the sequence fails. Velocities are averaged over one gait period
before they are compared, so a stride's sway is not counted as tracking error (the per-step
errors are reported beside them).

Exit status: 0 pass, 1 a fall, tracking outside a threshold, or a bundle whose deploy
settings differ from the ones it was trained with, 2 bad input.

    fast-td3-sim2sim bundle=exports/t1 seconds=20 report=sim2sim.json
    fast-td3-sim2sim bundle=exports/t1 max_lin_vel_error=0.15 max_yaw_rate_error=0.3 min_forward_coverage=0.6
    fast-td3-sim2sim bundle=exports/t1 both_sides=true   # then the step and the turn to the right too
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sim2real import t1
from sim2real.t1.gate_spec import (  # noqa: F401 (the gate's sequence and thresholds, as the gates name them)
    SEGMENT_NAMES, SEGMENTS, THRESHOLD_OPTIONS, Thresholds, both_sides, sequence,
)
from sim2real.mujoco_robot import T1Robot
from sim2real.t1_bundle import Bundle, BundleError, deploy_mismatches
from sim2real.t1.perturbations import TrialDraw

SETTLE_SECONDS = 2.0
"""Tracking errors skip the first seconds of a segment (the command ramps at 1 unit/s), and the
same time after each push of a robust trial (the robot recovers, then tracks again)."""


# ------------------------------------------------------------------ the gate
@dataclass
class SegmentReport:
    name: str
    command: list[float]
    seconds: float
    fell: bool = False
    fell_at: float | None = None
    distance: float = 0.0
    """Straight-line planar displacement over the segment [m]."""
    commanded_distance: float = 0.0
    """The smoothed command's planar speed integrated over the segment [m]."""
    heading_change: float = 0.0
    """Net turn of the base over the segment [rad, counter-clockwise +]: a walk at the right speed
    that covers little of its distance walked an arc (a small steady yaw drift adds up)."""
    lin_vel_error: float = 0.0
    """Mean |v_xy - command_xy| after the settle time, velocities averaged over one gait period [m/s]."""
    yaw_rate_error: float = 0.0
    """Mean |wz - command_wz| after the settle time, averaged the same way [rad/s]."""
    lin_vel_error_per_step: float = 0.0
    yaw_rate_error_per_step: float = 0.0
    failures: list[str] = field(default_factory=list)
    """Each threshold this segment missed, said in words; empty when it passed."""

    @property
    def moving(self) -> bool:
        return any(c != 0.0 for c in self.command)

    @property
    def walks(self) -> bool:
        """A linear command (forward or sideways), so a distance to cover: coverage means something."""
        return any(self.command[:2]) and self.commanded_distance > 0

    @property
    def coverage(self) -> float:
        """Distance covered over distance commanded; NaN for a segment without a linear command."""
        if not self.walks:
            return float("nan")
        return self.distance / self.commanded_distance

    def judge(self, limits: Thresholds) -> None:
        """Fill `failures` from the fall flag and, for a moving segment, the tracking thresholds."""
        if self.fell:
            self.failures.append(f"fell at {self.fell_at:.2f} s")
        if not self.moving or self.fell:
            return
        if not self.lin_vel_error <= limits.max_lin_vel_error:
            self.failures.append(f"planar velocity error {self.lin_vel_error:.3f} m/s > {limits.max_lin_vel_error}")
        if not self.yaw_rate_error <= limits.max_yaw_rate_error:
            self.failures.append(f"yaw-rate error {self.yaw_rate_error:.3f} rad/s > {limits.max_yaw_rate_error}")
        if self.command[0] != 0.0 and not self.coverage >= limits.min_forward_coverage:
            self.failures.append(f"covered {self.distance:.2f} m of {self.commanded_distance:.2f} m commanded "
                                 f"({self.coverage:.0%} < {limits.min_forward_coverage:.0%}), turning "
                                 f"{self.heading_change:+.2f} rad")


@dataclass
class Sim2SimReport:
    bundle: str
    passed: bool
    deploy_mismatches: list[str]
    thresholds: dict[str, float] = field(default_factory=lambda: asdict(Thresholds()))
    segments: list[SegmentReport] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for segment, record in zip(self.segments, out["segments"]):
            record["coverage"] = segment.coverage
        return out

    @property
    def seconds_walked(self) -> float:
        """Time on its feet before the first fall (all of it when none)."""
        total = 0.0
        for s in self.segments:
            total += s.fell_at - total if s.fell else s.seconds
        return total


def check_seconds(seconds: float, default: float = 20.0) -> None:
    """A segment must last past the settle time, or no tracking error can be measured."""
    if not seconds > SETTLE_SECONDS:
        raise BundleError(f"seconds={seconds:g} leaves nothing to judge: tracking is measured after the first "
                          f"{SETTLE_SECONDS:g} s of each segment; give seconds > {SETTLE_SECONDS:g} (default {default:g})")


def wrapped_angle(angle: float) -> float:
    """`angle` in [-pi, pi): a heading step across the ±pi seam is the short way round."""
    return float((angle + np.pi) % (2 * np.pi) - np.pi)


def period_averaged_error(measured: np.ndarray, commanded: np.ndarray, window: int) -> float:
    """Mean norm of (measured - commanded) after both are averaged over `window` consecutive steps.

    A walking base sways within every stride; averaging over one gait period keeps the drift
    from the command and drops the sway. Shorter records than a window use the whole record.
    """
    measured, commanded = np.asarray(measured, float), np.asarray(commanded, float)
    if measured.ndim == 1:
        measured, commanded = measured[:, None], commanded[:, None]
    if len(measured) == 0:
        return float("nan")
    window = max(1, min(int(window), len(measured)))
    kernel = np.ones(window) / window
    difference = measured - commanded
    averaged = np.stack([np.convolve(difference[:, k], kernel, mode="valid") for k in range(difference.shape[1])], 1)
    return float(np.linalg.norm(averaged, axis=1).mean())


def run(bundle: Bundle, seconds: float = 20.0, segments=SEGMENTS, policy=None, thresholds: Thresholds | None = None,
        on_step=None, draw: TrialDraw | None = None) -> Sim2SimReport:
    """Play the scripted joystick sequence and judge it; stops at the first fall.

    `on_step(robot)`, when given, is called after every policy step (a viewer or a video recorder).
    `draw`, when given, is one robust trial's perturbations (`sim2real.robust`); None: nominal.
    """
    import torch

    policy = policy or bundle.policy
    limits = thresholds or Thresholds()
    control = bundle.control()
    terrain = "rough" if "Rough" in bundle.deploy.get("source_task", "") else "flat"
    robot = T1Robot(control, terrain, draw)
    frequency = np.array([float(bundle.deploy_yaml["policy"]["gait_frequency"])])
    mismatches = deploy_mismatches(bundle)
    report = Sim2SimReport(str(bundle.folder), passed=not mismatches, deploy_mismatches=mismatches,
                           thresholds=asdict(limits))
    command, active_frequency = np.zeros(3), frequency.copy()  # the deploy code starts with the gait active
    last_action = np.zeros(t1.NUM_LEG_JOINTS, dtype=np.float32)
    steps = int(round(seconds / control.ctrl_dt))
    settle = int(round(SETTLE_SECONDS / control.ctrl_dt))
    period = int(round(1.0 / (float(frequency[0]) * control.ctrl_dt)))
    elapsed = 0.0
    for name, joystick in segments:
        segment = SegmentReport(name, list(joystick), seconds)
        report.segments.append(segment)
        start, heading = robot.data.qpos[:2].copy(), robot.heading()
        velocities, yaw_rates, commands = [], [], []
        recovered_at = 0
        for step in range(steps):
            gait_process, command, active_frequency = t1.update_command_and_gait(
                np, clock=np.array([elapsed]), active_frequency=active_frequency, smoothed=command,
                joystick=np.asarray(joystick, dtype=np.float64), gait_frequency=frequency, ctrl_dt=control.ctrl_dt)
            obs = robot.observation(command, gait_process, last_action)
            with torch.no_grad():
                action = policy(torch.from_numpy(obs)[None]).numpy()[0]
            last_action = np.clip(action, -1.0, 1.0).astype(np.float32)
            robot.act(last_action)
            elapsed += control.ctrl_dt
            if robot.push_if_due(elapsed) is not None:
                recovered_at = step + settle
            if on_step is not None:
                on_step(robot)
            heading, last_heading = robot.heading(), heading
            segment.heading_change += wrapped_angle(heading - last_heading)
            segment.commanded_distance += float(np.linalg.norm(command[:2])) * control.ctrl_dt
            if step >= settle and step >= recovered_at:
                velocities.append(robot.local_linvel()[:2])
                yaw_rates.append(robot.gyro()[2])
                commands.append(command.copy())
            if robot.fallen(limits.min_height, limits.min_tilt_cos):
                segment.fell, segment.fell_at = True, round(elapsed, 3)
                break
        segment.distance = float(np.linalg.norm(robot.data.qpos[:2] - start))
        commanded = np.asarray(commands).reshape(-1, 3)
        velocities, yaw_rates = np.asarray(velocities).reshape(-1, 2), np.asarray(yaw_rates)
        segment.lin_vel_error = period_averaged_error(velocities, commanded[:, :2], period)
        segment.yaw_rate_error = period_averaged_error(yaw_rates, commanded[:, 2], period)
        segment.lin_vel_error_per_step = period_averaged_error(velocities, commanded[:, :2], 1)
        segment.yaw_rate_error_per_step = period_averaged_error(yaw_rates, commanded[:, 2], 1)
        segment.judge(limits)
        if segment.failures:
            report.passed = False
        if segment.fell:
            break
    return report


def print_report(report: Sim2SimReport) -> None:
    limits = report.thresholds
    print(f"sim-to-sim (native MuJoCo) of {report.bundle}")
    for problem in report.deploy_mismatches:
        print(f"  DEPLOY MISMATCH: {problem}")
    print(f"  thresholds in moving segments: |v_xy err| <= {limits['max_lin_vel_error']} m/s, "
          f"|wz err| <= {limits['max_yaw_rate_error']} rad/s, forward coverage >= {limits['min_forward_coverage']:.0%}"
          " (errors averaged over one gait period; per step in brackets)")
    width = max([10] + [len(s.name) for s in report.segments])  # both_sides' names are longer
    print(f"  {'segment':<{width}} {'command (vx, vy, wz)':<22} {'result':<16} {'distance':>16} {'|v_xy err|':>16} "
          f"{'|wz err|':>16} {'turned':>8}")
    for s in report.segments:
        result = f"FELL at {s.fell_at:.2f}s" if s.fell else ("ok" if not s.failures else "FAIL")
        covered = f"{s.distance:.2f}m" + (f" ({s.coverage:.0%})" if s.walks else "")
        print(f"  {s.name:<{width}} {str(tuple(s.command)):<22} {result:<16} {covered:>16} "
              f"{s.lin_vel_error:>7.3f} ({s.lin_vel_error_per_step:.3f}) {s.yaw_rate_error:>7.3f} "
              f"({s.yaw_rate_error_per_step:.3f}) {s.heading_change:>+6.2f}rad")
        for failure in s.failures:
            if not failure.startswith("fell"):
                print(f"  {'':<{width}} FAIL: {failure}")
    print(f"  {report.seconds_walked:.1f} s on its feet")
    print("  PASS" if report.passed else "  FAIL")


