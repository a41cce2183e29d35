"""The robust sim-to-sim gate: the nominal gate, then `trials` plays of the joystick sequence under
perturbations a robot meets (pushes, floor friction, masses and payload, gain errors, action
delay, encoder offsets, sensor noise, optionally another physics), drawn per trial from a seeded
generator (`sim2real/t1/perturbations.py`).

A trial passes under the nominal gate's own thresholds (no fall, tracking within its limits).
The robust gate passes when the deploy settings match, the nominal trial passes and at least
`min_pass_rate` of the trials pass. The report names each failed trial's draw, and its JSON
holds every draw, so `fast-td3-play <bundle> --trial K` replays any trial exactly.

    fast-td3-sim2sim bundle=t1_flat robust=true trials=20 seed=0
    fast-td3-sim2sim bundle=t1_flat robust=true push=off floor_friction=0.2,1.0 physics=implicitfast
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from envs.playground.t1_lowdim import scene_model
from sim2real import sim2sim, t1_bundle
from sim2real.t1 import perturbations
from sim2real.t1.perturbations import PERTURBATION_OPTIONS, RANGE_OPTIONS, PerturbationRanges, TrialDraw  # noqa: F401

MIN_PASS_RATE = 0.9
"""Share of the perturbed trials that must pass: a robot meets these every day."""
DEFAULT_TRIALS = 20
OPTIONS = ("robust", "trials", "seed", "min_pass_rate", *PERTURBATION_OPTIONS)
"""`fast-td3-sim2sim` options of the robust mode."""


@dataclass
class TrialResult:
    draw: TrialDraw
    report: sim2sim.Sim2SimReport

    @property
    def passed(self) -> bool:
        return not any(s.failures for s in self.report.segments)

    def failures(self) -> list[str]:
        return [f"{s.name}: {f}" for s in self.report.segments for f in s.failures]

    def to_dict(self) -> dict[str, Any]:
        segments = [{"name": s.name, "fell_at": s.fell_at, "lin_vel_error": s.lin_vel_error,
                     "yaw_rate_error": s.yaw_rate_error, "coverage": s.coverage, "failures": s.failures}
                    for s in self.report.segments]
        return {"trial": self.draw.trial, "passed": self.passed, "seconds_walked": self.report.seconds_walked,
                "failures": self.failures(), "segments": segments, "draw": asdict(self.draw)}


@dataclass
class RobustReport:
    bundle: str
    nominal: sim2sim.Sim2SimReport
    seed: int
    ranges: PerturbationRanges
    min_pass_rate: float = MIN_PASS_RATE
    seconds: float = 20.0
    """Per joystick segment."""
    trials: list[TrialResult] = field(default_factory=list)
    segments: tuple = sim2sim.SEGMENTS
    """The joystick sequence played (`sim2sim.both_sides()` adds the right step and turn)."""

    @property
    def robust_pass_rate(self) -> float:
        return sum(t.passed for t in self.trials) / len(self.trials) if self.trials else float("nan")

    @property
    def passed(self) -> bool:
        """The nominal trial passed and, when trials were played, enough of them did."""
        return self.nominal.passed and (not self.trials or self.robust_pass_rate >= self.min_pass_rate)

    def tracking_errors(self) -> dict[str, float]:
        """Mean over the trials of each moving segment's errors (no entry where every trial fell in it or before it)."""
        return self._trial_means(lambda s: s.moving, lambda s: {"lin_vel_error": s.lin_vel_error,
                                                                 "yaw_rate_error": s.yaw_rate_error})

    def heading_changes(self) -> dict[str, float]:
        """Mean over the trials of each walk's |net turn| [rad], where it did not fall: a yaw drift
        under the yaw-rate limit still bends a 20 s walk into an arc, which forward coverage fails."""
        return self._trial_means(lambda s: s.walks, lambda s: {"abs_heading_change": abs(s.heading_change)})

    def _trial_means(self, which, values) -> dict[str, float]:
        """`<segment>/<name>` -> mean over the trials of `values(segment)[name]`, for the segments
        `which` picks that the robot did not fall in."""
        picked: dict[str, list[float]] = {}
        for trial in self.trials:
            for s in trial.report.segments:
                if which(s) and not s.fell:
                    for name, value in values(s).items():
                        picked.setdefault(f"{s.name}/{name}", []).append(value)
        return {k: sum(v) / len(v) for k, v in picked.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "robust", "bundle": self.bundle, "passed": self.passed,
                "robust_pass_rate": self.robust_pass_rate, "min_pass_rate": self.min_pass_rate, "seed": self.seed,
                "seconds": self.seconds, "segments": [[name, list(command)] for name, command in self.segments],
                "ranges": self.ranges.to_dict(), "nominal": self.nominal.to_dict(),
                "trials": [t.to_dict() for t in self.trials]}

    def summary(self) -> dict[str, Any]:
        """The last line `fast-td3-sim2sim` prints, and what the gate in the loop logs."""
        return {"passed": self.passed, "nominal_passed": self.nominal.passed,
                "robust_pass_rate": round(self.robust_pass_rate, 4), "trials": len(self.trials),
                "failed_trials": [t.draw.trial for t in self.trials if not t.passed],
                "deploy_mismatches": len(self.nominal.deploy_mismatches)}


def sequence_seconds(seconds: float, segments=sim2sim.SEGMENTS) -> float:
    return seconds * len(segments)


def num_links(bundle: t1_bundle.Bundle) -> int:
    return scene_model(terrain_of(bundle)).nbody - 1


def terrain_of(bundle: t1_bundle.Bundle) -> str:
    return "rough" if "Rough" in bundle.deploy.get("source_task", "") else "flat"


def draw(bundle: t1_bundle.Bundle, ranges: PerturbationRanges, seed: int, trial: int, seconds: float) -> TrialDraw:
    """Trial `trial`'s perturbations for this bundle's robot and a sequence of `seconds` per segment."""
    return perturbations.draw_trial(ranges, seed, trial, num_links(bundle), sequence_seconds(seconds))


def run(bundle: t1_bundle.Bundle, trials: int = DEFAULT_TRIALS, seed: int = 0,
        ranges: PerturbationRanges | None = None, seconds: float = 20.0,
        thresholds: sim2sim.Thresholds | None = None, min_pass_rate: float = MIN_PASS_RATE, policy=None,
        on_trial: Callable[[TrialResult], None] | None = None,
        on_nominal: Callable[[sim2sim.Sim2SimReport], None] | None = None,
        segments=sim2sim.SEGMENTS) -> RobustReport:
    """The nominal gate, then `trials` perturbed plays of the same sequence (`segments`)."""
    ranges = ranges or PerturbationRanges()
    ranges.check()
    nominal = sim2sim.run(bundle, seconds=seconds, segments=segments, thresholds=thresholds, policy=policy)
    if on_nominal is not None:
        on_nominal(nominal)
    report = RobustReport(str(bundle.folder), nominal, seed, ranges, min_pass_rate, seconds, segments=tuple(segments))
    links = num_links(bundle)
    for k in range(trials):
        trial_draw = perturbations.draw_trial(ranges, seed, k, links, sequence_seconds(seconds, segments))
        result = TrialResult(trial_draw, sim2sim.run(bundle, seconds=seconds, segments=segments, thresholds=thresholds,
                                                     policy=policy, draw=trial_draw))
        report.trials.append(result)
        if on_trial is not None:
            on_trial(result)
    return report


SHIPPING_MARGIN = 0.8
"""A shipped robust bundle's nominal errors stay within this share of their limits: room for the
robot's differences that the perturbations do not draw."""
SHIPPING_MIN_COVERAGE = 0.75
"""...and it covers at least this share of the commanded distance walking forward."""


def nominal_shortfalls(nominal: sim2sim.Sim2SimReport, margin: float = SHIPPING_MARGIN,
                       min_coverage: float = SHIPPING_MIN_COVERAGE) -> list[str]:
    """Where a nominal gate's report falls short of the shipping margin, in words (empty: none)."""
    limits, short = nominal.thresholds, []
    for segment in (s for s in nominal.segments if s.moving):
        for name, limit in (("lin_vel_error", "max_lin_vel_error"), ("yaw_rate_error", "max_yaw_rate_error")):
            if not getattr(segment, name) <= margin * limits[limit]:
                short.append(f"{segment.name}: {name} {getattr(segment, name):.3f} > {margin} x {limits[limit]}")
        if segment.command[0] != 0.0 and not segment.coverage >= min_coverage:
            short.append(f"{segment.name}: forward coverage {segment.coverage:.0%} < {min_coverage:.0%}")
    return short


SHIPPING_MIN_LOWER = 0.8
"""...and the 95 % interval of its robust pass rate, over every trial played, starts at or above this:
20 trials at one seed cannot tell 0.85 from 0.95 (19 of 20 gives [0.76, 0.99])."""


def wilson_interval(passed: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a pass rate (95 % at z = 1.96): honest at rates near 1, where the
    normal approximation's interval runs past it."""
    if trials <= 0:
        return float("nan"), float("nan")
    rate, z2 = passed / trials, z * z
    centre = (rate + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(rate * (1 - rate) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class PooledRate:
    """The robust pass rate over the trials of several robust reports (trial seeds)."""

    passed: int
    trials: int
    seeds: tuple[int, ...]

    @classmethod
    def of(cls, reports: list[RobustReport]) -> "PooledRate":
        return cls(sum(t.passed for r in reports for t in r.trials), sum(len(r.trials) for r in reports),
                   tuple(r.seed for r in reports))

    @property
    def rate(self) -> float:
        return self.passed / self.trials if self.trials else float("nan")

    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.passed, self.trials)

    def to_dict(self) -> dict[str, Any]:
        low, high = self.interval()
        return {"passed": self.passed, "trials": self.trials, "seeds": list(self.seeds), "rate": self.rate,
                "interval_95": [low, high]}

    def line(self) -> str:
        low, high = self.interval()
        return (f"{self.passed}/{self.trials} perturbed trials passed ({self.rate:.0%}; 95 % interval "
                f"[{low:.2f}, {high:.2f}]) over trial seeds {', '.join(map(str, self.seeds))}")


def shipping_shortfalls(nominal: sim2sim.Sim2SimReport, reports: RobustReport | list[RobustReport],
                        margin: float = SHIPPING_MARGIN, min_coverage: float = SHIPPING_MIN_COVERAGE,
                        min_lower: float = SHIPPING_MIN_LOWER) -> list[str]:
    """The bar a robust bundle ships on (`fast-td3-ship`, sim2real/ship.py): every robust gate passed,
    the 95 % interval of the pass rate over all their trials starting at `min_lower` or above, and the
    nominal gate within the margin; what falls short, in words (empty: it clears the bar)."""
    reports = [reports] if isinstance(reports, RobustReport) else list(reports)
    short = [f"seed {r.seed}: robust pass rate {r.robust_pass_rate:.0%} < {r.min_pass_rate:.0%}"
             for r in reports if not r.passed]
    pooled = PooledRate.of(reports)
    if pooled.trials and not pooled.interval()[0] >= min_lower:
        short.append(f"the robust pass rate's 95 % interval starts at {pooled.interval()[0]:.3f} < {min_lower} "
                     f"({pooled.passed}/{pooled.trials} trials)")
    return short + nominal_shortfalls(nominal, margin, min_coverage)


def print_trial(result: TrialResult) -> None:
    verdict = "ok  " if result.passed else "FAIL"
    print(f"  trial {result.draw.trial:>3} {verdict} {result.report.seconds_walked:5.1f} s on its feet"
          + ("" if result.passed else f"  [{'; '.join(result.failures())}]"), flush=True)


def print_report(report: RobustReport) -> None:
    rate, needed = report.robust_pass_rate, report.min_pass_rate
    passed = sum(t.passed for t in report.trials)
    print(f"robust sim-to-sim of {report.bundle}: {passed}/{len(report.trials)} perturbed trials passed "
          f"({rate:.0%}; at least {needed:.0%} needed), seed {report.seed}")
    for trial in report.trials:
        if not trial.passed:
            print(f"  failed {trial.draw.summary()}")
            print(f"         {'; '.join(trial.failures())}")
    print(f"  nominal: {'PASS' if report.nominal.passed else 'FAIL'}; robust: "
          f"{'PASS' if report.passed else 'FAIL'}")


def ranges_from_options(options: dict[str, str]) -> PerturbationRanges:
    """`perturbations.ranges_from_options`, its refusals as the gate's `BundleError`."""
    try:
        return perturbations.ranges_from_options(options)
    except ValueError as error:
        raise t1_bundle.BundleError(str(error)) from None
