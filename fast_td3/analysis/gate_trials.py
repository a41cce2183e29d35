"""Which perturbed trials a run's gate keeps failing, and how: the robust gate's draws are seeded,
so trial k is the same robot, pushes and offsets at every gated checkpoint of a run.

The gate in the loop (fast_td3/training/gate_loop.py) keeps each verdict's full report in
`<run>/gate/step_<N>.json`. Read side by side, the reports show whether failures are spread
over the draws (a policy that is simply not robust enough) or pile up on a few (one kind of
perturbation it has not learnt: on the T1 recipe, a trial whose encoder offsets make the
heading drift while it walks forward failed at nearly every checkpoint of two seeds).

    python -m fast_td3.analysis.recipe_table <run> --trials 30000    # the matrix from step 30000 on
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fast_td3.training.checkpoint import step_in_name
from fast_td3.training.gate_verdicts import GATE_DIR
from sim2real.t1.perturbations import TrialDraw

PASS, FAIL, FELL = ".", "x", "F"
"""One trial in a verdict's row: passed; failed without a fall; fell."""

FAILURE_KINDS = {"fell": "fall", "planar": "velocity", "yaw-rate": "yaw rate", "covered": "coverage"}
"""A segment's failure message (sim2real/sim2sim.py) by its first word, in a word."""


@dataclass
class TrialHistory:
    trial: int
    played: int = 0
    failed: int = 0
    fell: int = 0
    reasons: Counter = field(default_factory=Counter)
    """"<segment> <kind>" (e.g. "forward coverage") -> verdicts that failed it that way."""
    draw: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        reasons = ", ".join(f"{name} {count}" for name, count in self.reasons.most_common())
        return f"trial {self.trial}: failed {self.failed}/{self.played}" + (f" ({reasons})" if reasons else "")


@dataclass
class TrialMatrix:
    rows: list[tuple[int, str]]
    """(step, one character per trial) per verdict that played perturbed trials, by step."""
    trials: list[TrialHistory]

    def text(self) -> str:
        if not self.rows:
            return "no verdict with perturbed trials"
        width = len(str(self.rows[-1][0]))
        lines = [f"{'step':>{width}}  trials ({PASS} passed, {FAIL} failed, {FELL} fell)"]
        lines += [f"{step:>{width}}  {pattern}  {pattern.count(PASS)}/{len(pattern)}" for step, pattern in self.rows]
        for history in sorted(self.trials, key=lambda h: (-h.failed, h.trial)):
            lines.append(f"{history.describe()}; {draw_summary(history.draw)}")
        return "\n".join(lines)


def draw_summary(draw: dict[str, Any]) -> str:
    """A trial's draw in words: the gate's own wording, or its scalars for a report whose draw has
    fields this version's TrialDraw does not know."""
    try:
        return TrialDraw(**draw).summary().split(", ", 1)[-1]
    except TypeError:
        return ", ".join(f"{k} {v}" for k, v in draw.items() if isinstance(v, (int, float)) and k not in ("trial", "seed"))


def _failure_kinds(trial: dict[str, Any]) -> list[str]:
    kinds = []
    for segment in trial.get("segments", []):
        for message in segment.get("failures", []):
            kinds.append(f"{segment['name']} {FAILURE_KINDS.get(message.split(' ', 1)[0], message)}")
    return kinds


def read_reports(run_dir: str | Path, since_step: int = 0) -> list[tuple[int, dict[str, Any]]]:
    """(step, report) of every verdict in the run's gate folder from `since_step` on, by step."""
    found = []
    for path in sorted((Path(run_dir) / GATE_DIR).glob("step_*.json")):
        step = step_in_name(path)
        if step < since_step:
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # a verdict still being written
        found.append((step, record.get("report", {})))  # a gate that errored has none
    return found


def trial_matrix(run_dir: str | Path, since_step: int = 0) -> TrialMatrix:
    """The pass/fail/fall matrix of the run's perturbed trials, and each trial's failures by kind."""
    rows, histories = [], {}
    for step, report in read_reports(run_dir, since_step):
        trials = report.get("trials") or []
        if not trials:
            continue
        pattern = ""
        for trial in trials:
            history = histories.setdefault(trial["trial"], TrialHistory(trial["trial"], draw=trial.get("draw", {})))
            history.played += 1
            fell = any(segment.get("fell_at") is not None for segment in trial.get("segments", []))
            if not trial["passed"]:
                history.failed += 1
                history.fell += fell
                history.reasons.update(_failure_kinds(trial))
            pattern += PASS if trial["passed"] else (FELL if fell else FAIL)
        rows.append((step, pattern))
    return TrialMatrix(rows, [histories[k] for k in sorted(histories)])
