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
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import yaml

from fast_td3.training.metrics_log import json_safe
from sim2real import t1

SEGMENTS = (
    ("stand", (0.0, 0.0, 0.0)),
    ("forward", (0.5, 0.0, 0.0)),
    ("sideways", (0.0, 0.3, 0.0)),
    ("turn", (0.0, 0.0, 0.5)),
)
"""The scripted joystick sequence: (name, (vx [m/s], vy [m/s], yaw rate [rad/s]))."""
SETTLE_SECONDS = 2.0
"""Tracking errors skip the first seconds of a segment (the command ramps at 1 unit/s)."""


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
            decimation=int(policy["control"]["decimation"]), target_filter=trained.target_filter)


def load_bundle(folder: str | Path) -> Bundle:
    import torch

    folder = bundle_path(folder)
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
    try:
        policy = torch.jit.load(str(folder / "policy.pt"), map_location="cpu").eval()
    except (RuntimeError, OSError) as error:
        raise BundleError(f"{folder / 'policy.pt'} is not a TorchScript file torch.jit.load can read ({error})") from None
    return Bundle(folder, policy, meta, deploy_yaml)


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


# ------------------------------------------------------------------ one MuJoCo robot
class T1Robot:
    """The T1 in native MuJoCo under a control setting, stepped one policy period at a time."""

    def __init__(self, control: t1.T1Control, terrain: str = "flat") -> None:
        from envs.playground.t1_lowdim import build_mj_model, initial_qpos

        self.control = control
        self.model = build_mj_model(terrain, control)
        self.data = mujoco.MjData(self.model)
        self.default_pose = np.asarray(control.default_pose)
        self.data.qpos[:] = initial_qpos(self.model, control)
        self.data.ctrl[:] = self.default_pose
        mujoco.mj_forward(self.model, self.data)
        self._local_linvel = _sensor(self.model, "local_linvel")

    def projected_gravity(self) -> np.ndarray:
        return t1.imu_from_floating_base(np, self.data.qpos[3:7], self.data.qvel[3:6])[0]

    def gyro(self) -> np.ndarray:
        return self.data.qvel[3:6].copy()

    def base_rotation(self) -> np.ndarray:
        rotation = np.zeros(9)
        mujoco.mju_quat2Mat(rotation, self.data.qpos[3:7] / np.linalg.norm(self.data.qpos[3:7]))
        return rotation.reshape(3, 3)

    def local_linvel(self) -> np.ndarray:
        return self.data.sensordata[self._local_linvel].copy()

    def observation(self, command: np.ndarray, gait_process: np.ndarray, last_action: np.ndarray) -> np.ndarray:
        """The 47 numbers the policy sees in this state (noiseless)."""
        return t1.actor_observation(
            np, projected_gravity=self.projected_gravity(), gyro=self.gyro(), command=command,
            gait_process=gait_process, joint_pos=self.data.qpos[7:].copy(), joint_vel=self.data.qvel[6:].copy(),
            last_action=last_action, default_pose=self.default_pose).astype(np.float32)

    def act(self, actions: np.ndarray) -> None:
        """One policy period: `decimation` physics steps towards the actions' PD targets."""
        targets = t1.targets_from_actions(np, actions, self.control, self.default_pose)
        alpha = self.control.target_filter
        for _ in range(self.control.decimation):
            self.data.ctrl[:] = self.data.ctrl + alpha * (targets - self.data.ctrl)
            mujoco.mj_step(self.model, self.data)

    def fallen(self, min_height: float, min_tilt_cos: float) -> bool:
        return bool(self.data.qpos[2] < min_height or -self.projected_gravity()[2] < min_tilt_cos
                    or not np.isfinite(self.data.qpos).all())


def _sensor(model: mujoco.MjModel, name: str) -> slice:
    sensor = model.sensor(name)
    return slice(model.sensor_adr[sensor.id], model.sensor_adr[sensor.id] + model.sensor_dim[sensor.id])


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
    def coverage(self) -> float:
        """Distance covered over distance commanded; NaN for a segment without a linear command."""
        if not any(self.command[:2]) or self.commanded_distance <= 0:
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
                                 f"({self.coverage:.0%} < {limits.min_forward_coverage:.0%})")


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
        on_step=None) -> Sim2SimReport:
    """Play the scripted joystick sequence and judge it; stops at the first fall.

    `on_step(robot)`, when given, is called after every policy step (a viewer or a video recorder).
    """
    import torch

    policy = policy or bundle.policy
    limits = thresholds or Thresholds()
    control = bundle.control()
    terrain = "rough" if "Rough" in bundle.deploy.get("source_task", "") else "flat"
    robot = T1Robot(control, terrain)
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
        start = robot.data.qpos[:2].copy()
        velocities, yaw_rates, commands = [], [], []
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
            if on_step is not None:
                on_step(robot)
            segment.commanded_distance += float(np.linalg.norm(command[:2])) * control.ctrl_dt
            if step >= settle:
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
    print(f"  {'segment':<10} {'command (vx, vy, wz)':<22} {'result':<16} {'distance':>16} {'|v_xy err|':>16} "
          f"{'|wz err|':>16}")
    for s in report.segments:
        result = f"FELL at {s.fell_at:.2f}s" if s.fell else ("ok" if not s.failures else "FAIL")
        covered = f"{s.distance:.2f}m" + (f" ({s.coverage:.0%})" if s.coverage == s.coverage else "")
        print(f"  {s.name:<10} {str(tuple(s.command)):<22} {result:<16} {covered:>16} "
              f"{s.lin_vel_error:>7.3f} ({s.lin_vel_error_per_step:.3f}) {s.yaw_rate_error:>7.3f} "
              f"({s.yaw_rate_error_per_step:.3f})")
        for failure in s.failures:
            if not failure.startswith("fell"):
                print(f"  {'':<10} FAIL: {failure}")
    print(f"  {report.seconds_walked:.1f} s on its feet")
    print("  PASS" if report.passed else "  FAIL")


THRESHOLD_OPTIONS = tuple(Thresholds.__dataclass_fields__)


def _parse(argv: list[str]) -> dict[str, str]:
    options = {}
    for token in argv:
        key, sep, value = token.partition("=")
        if not sep:
            raise BundleError(f"arguments are key=value, got {token!r}")
        options[key.lstrip("-")] = value
    return options


def cli(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return
    try:
        options = _parse(argv)
        if "bundle" not in options:
            raise BundleError("usage: fast-td3-sim2sim bundle=<folder> [seconds=20] [report=<file.json>] "
                              "[max_lin_vel_error=0.2] [max_yaw_rate_error=0.3] [min_forward_coverage=0.6]")
        known = ("bundle", "seconds", "report", "min_height", "min_tilt_cos", *THRESHOLD_OPTIONS)
        unknown = set(options) - set(known)
        if unknown:
            raise BundleError(f"unknown options {sorted(unknown)}; known: {', '.join(known)}")
        numbers = {key: float(options[key]) for key in ("seconds", "min_height", "min_tilt_cos") if key in options}
        if numbers.get("seconds", 1.0) <= 0:
            raise BundleError(f"seconds must be positive, got {numbers['seconds']}")
        limits = {key: float(options[key]) for key in THRESHOLD_OPTIONS if key in options}
        negative = [key for key, value in limits.items() if not value >= 0]
        if negative:
            raise BundleError(f"{', '.join(negative)} must be a number >= 0")
        bundle = load_bundle(options["bundle"])
    except ValueError as error:  # BundleError, or a number that is not one
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    report = run(bundle, **numbers, thresholds=Thresholds(**limits))
    print_report(report)
    if "report" in options:
        Path(options["report"]).write_text(json.dumps(json_safe(report.to_dict()), indent=2, allow_nan=False))
    print(json.dumps({"passed": report.passed, "fell": any(s.fell for s in report.segments),
                      "tracking_failures": sum(not f.startswith("fell") for s in report.segments for f in s.failures),
                      "seconds_walked": round(report.seconds_walked, 2),
                      "deploy_mismatches": len(report.deploy_mismatches)}))
    sys.exit(0 if report.passed else 1)
