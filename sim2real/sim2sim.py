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

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim2real import t1
from sim2real.mujoco_robot import T1Robot
from sim2real.perturbations import TrialDraw

SEGMENTS = (
    ("stand", (0.0, 0.0, 0.0)),
    ("forward", (0.5, 0.0, 0.0)),
    ("sideways", (0.0, 0.3, 0.0)),
    ("turn", (0.0, 0.0, 0.5)),
)
"""The scripted joystick sequence: (name, (vx [m/s], vy [m/s], yaw rate [rad/s]))."""


def both_sides(segments=SEGMENTS) -> tuple:
    """The sequence, then the mirror image of each segment with a sideways or yaw command (vy and
    the yaw rate negated, named `<name>_mirrored`): `SEGMENTS` asks only for a left step and a
    left turn, and a policy can learn one side of a skill far better than the other."""
    mirrored = tuple((f"{name}_mirrored", (vx, 0.0 - vy, 0.0 - wz)) for name, (vx, vy, wz) in segments if vy or wz)
    return tuple(segments) + mirrored


def sequence(both: bool) -> tuple:
    """The joystick sequence a gate plays: `both_sides()` when asked for, else `SEGMENTS`."""
    return both_sides() if both else SEGMENTS


SETTLE_SECONDS = 2.0
"""Tracking errors skip the first seconds of a segment (the command ramps at 1 unit/s), and the
same time after each push of a robust trial (the robot recovers, then tracks again)."""


@dataclass(frozen=True)
class Thresholds:
    """What the gate asks of a moving segment (one with a non-zero command)."""

    max_lin_vel_error: float = 0.2
    """Mean planar-velocity error [m/s], velocities averaged over one gait period."""
    max_yaw_rate_error: float = 0.3
    """Mean yaw-rate error [rad/s], averaged the same way."""
    min_forward_coverage: float = 0.6
    """Share of the commanded distance a segment commanding forward motion (vx != 0) must cover."""


PRETRAINED = Path(__file__).resolve().parent / "pretrained"
"""Bundles shipped with the package: `bundle=t1_flat` names `sim2real/pretrained/t1_flat`."""


class BundleError(ValueError):
    """The folder is not a usable T1 bundle."""


def bundle_path(folder: str | Path) -> Path:
    """A bundle folder, or the name of a shipped one when no such folder exists here."""
    folder = Path(folder)
    if not folder.exists() and len(folder.parts) == 1 and (PRETRAINED / folder).is_dir():
        return PRETRAINED / folder
    return folder


@dataclass
class Bundle:
    folder: Path
    policy: Any
    meta: dict[str, Any]
    deploy_yaml: dict[str, Any]

    @property
    def deploy(self) -> dict[str, Any]:
        return self.meta["deploy"]

    def control(self) -> t1.T1Control:
        """The control settings the robot will run: T1.yaml's."""
        common, policy = self.deploy_yaml["common"], self.deploy_yaml["policy"]
        trained = t1.T1Control.from_dict(self.deploy["control"])
        return t1.T1Control(
            stiffness=tuple(common["stiffness"]), damping=tuple(common["damping"]),
            torque_limit=tuple(common["torque_limit"]), default_pose=tuple(common["default_qpos"]),
            action_scale=float(policy["control"]["action_scale"]), sim_dt=float(common["dt"]),
            decimation=int(policy["control"]["decimation"]), target_filter=trained.target_filter,
            leg_action_scale=_optional_tuple(policy["control"].get("action_scales")),
            action_low=_optional_tuple(policy["control"].get("action_low")),
            action_high=_optional_tuple(policy["control"].get("action_high")))


def _optional_tuple(values) -> tuple[float, ...] | None:
    """T1.yaml's per-joint list as a tuple; None where a bundle older than action bounds has none."""
    return None if values is None else tuple(float(v) for v in values)


def load_bundle(folder: str | Path) -> Bundle:
    import torch

    folder = bundle_path(folder)
    if not folder.is_dir():
        raise BundleError(f"bundle={folder}: no such folder, nor a shipped bundle (shipped: {', '.join(shipped())}); "
                          "make one with `fast-td3-export checkpoint=<a T1LowDimJoystick* run> out=<folder>`")
    for name in ("policy.pt", "meta.json", "T1.yaml"):
        if not (folder / name).is_file():
            raise BundleError(f"{folder} has no {name}: sim-to-sim needs a T1 bundle from "
                              "`fast-td3-export checkpoint=<a T1LowDimJoystick* run> out=<folder>`")
    try:
        meta = json.loads((folder / "meta.json").read_text())
        deploy_yaml = yaml.safe_load((folder / "T1.yaml").read_text())
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise BundleError(f"{folder}: unreadable bundle file ({error})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("deploy"), dict):
        task = meta.get("task") if isinstance(meta, dict) else None
        raise BundleError(f"{folder} was exported from {task!r}, not a T1LowDimJoystick task")
    missing = [k for k in ("control", "commands", "observation") if not isinstance(meta["deploy"].get(k), dict)]
    if missing:
        raise BundleError(f"{folder / 'meta.json'}: its deploy section lacks {missing}; re-export the bundle")
    required = {"common": ("dt", "stiffness", "damping", "default_qpos", "torque_limit"),
                "policy": ("gait_frequency", "control")}
    for section, keys in required.items():
        present = deploy_yaml.get(section) if isinstance(deploy_yaml, dict) else None
        missing = [k for k in keys if not isinstance(present, dict) or k not in present]
        if missing:
            raise BundleError(f"{folder / 'T1.yaml'}: section {section!r} lacks {missing}")
    check_deploy_numbers(folder / "T1.yaml", deploy_yaml)
    try:
        policy = torch.jit.load(str(folder / "policy.pt"), map_location="cpu").eval()
    except (RuntimeError, OSError) as error:
        raise BundleError(f"{folder / 'policy.pt'} is not a TorchScript file torch.jit.load can read ({error})") from None
    return Bundle(folder, policy, meta, deploy_yaml)


def shipped() -> list[str]:
    """The names of the bundles shipped with the package (`bundle=<name>`)."""
    return sorted(p.name for p in PRETRAINED.iterdir() if p.is_dir()) if PRETRAINED.is_dir() else []


def check_deploy_numbers(path: Path, deploy_yaml: dict[str, Any]) -> None:
    """T1.yaml's per-joint lists hold one number per joint, its rates and scales are numbers."""
    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    for key in ("stiffness", "damping", "default_qpos", "torque_limit"):
        values = deploy_yaml["common"][key]
        if not isinstance(values, list) or len(values) != t1.NUM_JOINTS:
            count = len(values) if isinstance(values, list) else "not a list"
            raise BundleError(f"{path}: common.{key} needs {t1.NUM_JOINTS} numbers (one per joint, SDK order), "
                              f"has {count}")
        bad = [(i, v) for i, v in enumerate(values) if not number(v)]
        if bad:
            i, v = bad[0]
            raise BundleError(f"{path}: common.{key}[{i}] ({t1.SDK_JOINT_NAMES[i]}) is {v!r}, not a number")
    control = deploy_yaml["policy"]["control"]
    scalars = {"common.dt": deploy_yaml["common"]["dt"], "policy.gait_frequency": deploy_yaml["policy"]["gait_frequency"],
               "policy.control.action_scale": control.get("action_scale") if isinstance(control, dict) else None,
               "policy.control.decimation": control.get("decimation") if isinstance(control, dict) else None}
    for key, value in scalars.items():
        if not number(value):
            raise BundleError(f"{path}: {key} is {value!r}, not a number")
    for key in ("action_scales", "action_low", "action_high"):  # absent in bundles made before them
        values = control.get(key)
        if values is not None and (not isinstance(values, list) or len(values) != t1.NUM_LEG_JOINTS
                                   or not all(number(v) for v in values)):
            raise BundleError(f"{path}: policy.control.{key} needs {t1.NUM_LEG_JOINTS} numbers (one per leg joint, "
                              f"SDK order 11-22), has {values!r}")


def deploy_mismatches(bundle: Bundle) -> list[str]:
    """Where the deploy configuration the robot will run differs from what the policy was trained with."""
    trained = t1.T1Control.from_dict(bundle.deploy["control"])
    deployed = bundle.control()
    problems = []
    for name, unit in (("stiffness", "Nm/rad"), ("damping", "Nm·s/rad"), ("default_pose", "rad"),
                       ("torque_limit", "Nm")):
        ours, theirs = getattr(trained, name), getattr(deployed, name)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9):
                problems.append(f"{name} of {t1.SDK_JOINT_NAMES[i]} (SDK {i}): trained with {a} {unit}, "
                                f"T1.yaml has {b}")
    for end, ours, theirs in zip(("action_scales", "action_low", "action_high"),
                                 (trained.leg_scales(), *trained.action_bounds()),
                                 (deployed.leg_scales(), *deployed.action_bounds())):
        for name, a, b in zip(t1.LEG_JOINT_NAMES, ours, theirs):
            if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9):
                problems.append(f"{end} of {name}: trained with {a}, T1.yaml has {b} (the robot would turn the "
                                "policy's actions into other targets than training did)")
    for name in ("action_scale", "sim_dt", "decimation"):
        if not math.isclose(getattr(trained, name), getattr(deployed, name), rel_tol=1e-9):
            problems.append(f"{name}: trained with {getattr(trained, name)}, T1.yaml has {getattr(deployed, name)}")
    policy = bundle.deploy_yaml["policy"]
    low, high = bundle.deploy["commands"]["gait_frequency"]
    if not low <= policy["gait_frequency"] <= high:
        problems.append(f"gait_frequency {policy['gait_frequency']} Hz in T1.yaml lies outside the training range "
                        f"[{low}, {high}] Hz")
    expected = {"num_observations": t1.OBSERVATION_SIZE, "num_actions": t1.NUM_LEG_JOINTS}
    problems += [f"{key}: the policy has {value}, T1.yaml says {policy.get(key)}"
                 for key, value in expected.items() if policy.get(key) != value]
    for key, value in t1.deploy_normalization().items():
        if policy.get("normalization", {}).get(key) != value:
            problems.append(f"normalization.{key}: the policy was trained with {value}, T1.yaml has "
                            f"{policy.get('normalization', {}).get(key)}")
    mech = bundle.deploy_yaml.get("mech", {}).get("parallel_mech_indexes")
    if mech != list(t1.PARALLEL_MECH_SDK_INDICES):
        problems.append(f"mech.parallel_mech_indexes: {mech}, the T1's ankles are {list(t1.PARALLEL_MECH_SDK_INDICES)}")
    recorded = [(e["name"], e["size"], e["scale"]) for e in bundle.deploy["observation"]["layout"]]
    if recorded != [tuple(e) for e in t1.OBSERVATION_LAYOUT]:
        problems.append(f"the bundle's observation layout {recorded} is not this code's {list(t1.OBSERVATION_LAYOUT)}: "
                        "re-export with this version")
    return problems


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


def run(bundle: Bundle, seconds: float = 20.0, segments=SEGMENTS, min_height: float = 0.35,
        min_tilt_cos: float = 0.5, policy=None, thresholds: Thresholds | None = None,
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
            if robot.fallen(min_height, min_tilt_cos):
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


THRESHOLD_OPTIONS = tuple(Thresholds.__dataclass_fields__)
