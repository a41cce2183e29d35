"""Gate one checkpoint: export it as a bundle, load the bundle as the robot would, play the gate.

The one road behind both callers: the gate while training (`gate_job`, a background process that
keeps only the verdict) and `fast-td3-gate` (`gate_run`, which keeps each gated bundle beside its
row). The robust gate plays the nominal walk first, so its nominal report is the verdict's, not a
second play.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sim2real import robust, sim2sim, t1_bundle
from sim2real.export import export_bundle
from sim2real.t1.perturbations import PerturbationRanges


@dataclass(frozen=True)
class CheckpointVerdict:
    bundle: t1_bundle.Bundle
    nominal: sim2sim.Sim2SimReport
    robust: robust.RobustReport | None
    """None when only the nominal gate was played."""


def gate_checkpoint(checkpoint: str | Path, out: Path, *, seconds: float, trials: int | None = None, seed: int = 0,
                    ranges: PerturbationRanges | None = None, min_pass_rate: float = robust.MIN_PASS_RATE,
                    segments=sim2sim.SEGMENTS, thresholds: sim2sim.Thresholds | None = None,
                    gait_frequency: float | None = None, average: int = 1, force: bool = False,
                    on_trial: Callable | None = None) -> CheckpointVerdict:
    """Export `checkpoint` into `out` (`force`: replace a bundle there), then play the nominal gate
    (`trials` None) or the robust gate with `trials` perturbed plays drawn from `ranges` at `seed`."""
    bundle = t1_bundle.load_bundle(export_bundle(checkpoint, out, force=force, gait_frequency=gait_frequency,
                                                 average=average))
    if trials is None:
        return CheckpointVerdict(bundle, sim2sim.run(bundle, seconds=seconds, segments=segments, thresholds=thresholds),
                                 None)
    report = robust.run(bundle, trials=trials, seed=seed, ranges=ranges, seconds=seconds, thresholds=thresholds,
                        min_pass_rate=min_pass_rate, on_trial=on_trial, segments=segments)
    return CheckpointVerdict(bundle, report.nominal, report)
