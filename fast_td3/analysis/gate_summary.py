"""What the deploy gate said of a run, from its metrics.jsonl: when it first passed, and whether it kept passing.

A run gated while it trained (`gate.interval`, fast_td3/training/gate_loop.py) files each
verdict under `gate/*` at the gated step. These are the numbers a recipe is judged by
(docs/performance.md, the shipped bundle's seeds.json): wall time to the first nominal pass,
wall time to the first robust pass (the gate's verdict: nominal passed and at least
`gate.min_pass_rate` of the perturbed trials), and how many of the last checkpoints pass.
The wall time of a verdict is the run's clock (`time`, summed over resumes) at the training
record of the gated step: when that checkpoint existed, not when its verdict came back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

PASSED, NOMINAL, RATE, TRIALS = "gate/passed", "gate/nominal_passed", "gate/robust_pass_rate", "gate/trials"


@dataclass
class GateSummary:
    verdicts: int
    """Gated checkpoints with a verdict."""
    first_nominal_pass: dict[str, float] | None = None
    """{"step", "minutes"} of the first checkpoint that passed the nominal gate."""
    first_robust_pass: dict[str, float] | None = None
    """{"step", "minutes"} of the first checkpoint the gate passed with perturbed trials played
    (nominal and at least `gate.min_pass_rate` of them); a gate of `trials=0` never counts."""
    last_passed: int = 0
    """How many of the last `last` verdicts passed."""
    last: int = 5
    latest: dict[str, Any] = field(default_factory=dict)
    """The latest verdict's gate/* metrics and its step."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gate_summary(records: Iterable[dict[str, Any]], last: int = 5) -> GateSummary | None:
    """The summary of one run's records (metrics.jsonl order); None when the run was never gated."""
    records = list(records)
    clock = {}  # step -> the run's time at that step's training record
    for record in records:
        if PASSED not in record and isinstance(record.get("time"), (int, float)):
            clock.setdefault(record["step"], float(record["time"]))
    verdicts = sorted((r for r in records if PASSED in r and r[PASSED] is not None), key=lambda r: r["step"])
    if not verdicts:
        return None
    summary = GateSummary(verdicts=len(verdicts), last=last)

    def when(record) -> dict[str, float]:
        seconds = clock.get(record["step"], float(record.get("time", float("nan"))))
        return {"step": int(record["step"]), "minutes": round(seconds / 60.0, 1)}

    for record in verdicts:
        if summary.first_nominal_pass is None and record.get(NOMINAL):
            summary.first_nominal_pass = when(record)
        if summary.first_robust_pass is None and record.get(PASSED) and record.get(TRIALS, 1):  # trials were played
            summary.first_robust_pass = when(record)
    summary.last_passed = sum(bool(r[PASSED]) for r in verdicts[-last:])
    summary.latest = {k: v for k, v in verdicts[-1].items() if k.startswith("gate/") or k == "step"}
    return summary


def describe_pass(value: dict[str, float] | None) -> str:
    """A first pass in words for tables: "12.5 min (step 6000)", or "not yet"."""
    return f"{value['minutes']} min (step {value['step']})" if value else "not yet"
