"""What a gate is asked, in the words a training run's settings use: the scripted joystick sequence
(`SEGMENTS`, `sequence`) and the thresholds a play is judged by (`Thresholds`). The gates themselves
(sim2real/sim2sim.py, sim2real/robust.py) play and judge; a run's `gate.segments` and
`gate.thresholds` are checked against these names before it trains."""

from __future__ import annotations

from dataclasses import dataclass


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


SEGMENT_NAMES = tuple(name for name, _ in SEGMENTS)


def sequence(both: bool, only=()) -> tuple:
    """The joystick sequence a gate plays: `SEGMENTS`, or those named in `only` (in their order), then
    with `both` the mirror image of each (`both_sides`). ValueError naming the segments for another name."""
    unknown = sorted(set(only) - set(SEGMENT_NAMES))
    if unknown:
        raise ValueError(f"no segment {unknown[0]!r}; the gate's segments are {', '.join(SEGMENT_NAMES)}")
    chosen = tuple(segment for segment in SEGMENTS if not only or segment[0] in only)
    return both_sides(chosen) if both else chosen


@dataclass(frozen=True)
class Thresholds:
    """What the gate asks: of every segment, not to fall; of a moving one (a non-zero command), to track."""

    max_lin_vel_error: float = 0.2
    """Mean planar-velocity error [m/s], velocities averaged over one gait period."""
    max_yaw_rate_error: float = 0.3
    """Mean yaw-rate error [rad/s], averaged the same way."""
    min_forward_coverage: float = 0.6
    """Share of the commanded distance a segment commanding forward motion (vx != 0) must cover."""
    min_height: float = 0.35
    """The robot has fallen when its base is lower than this [m]..."""
    min_tilt_cos: float = 0.5
    """...or tilted further than this cosine of the angle to the vertical (0.5: 60 degrees)."""


THRESHOLD_OPTIONS = tuple(Thresholds.__dataclass_fields__)
