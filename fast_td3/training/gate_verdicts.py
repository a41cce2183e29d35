"""What the deploy gate while training said, as it is kept in `<run>/gate/`: a verdict per gated step
(`step_<N>.json`), the answer of a confirmation (`ship/step_<N>.json`, `gate.ship`), and how a verdict
ranks and is announced. The gate loop writes them; the run summary, the reports and shipping read them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fast_td3.training.metrics_log import METRICS_FILE, read_metrics

GATE_DIR = "gate"
ACTORS_DIR = "actors"
SHIP_DIR = "ship"
"""`gate/ship/step_<N>.json` and `.log`: the confirmation of the passes ending at gate step N (`gate.ship`)."""


@dataclass
class GateVerdict:
    step: int
    metrics: dict[str, float]
    eval_return: float | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and self.metrics.get("gate/passed", 0.0) == 1.0

    def rank(self) -> tuple[float, float, float, float]:
        """Higher is better: a gate passed, then the robust pass rate, then a nominal pass, then eval
        return. A pass comes first, so best.pt is a checkpoint that passed whenever one did."""
        if self.error is not None:
            return (-1.0, -1.0, 0.0, -math.inf)
        eval_return = self.eval_return if self.eval_return is not None and math.isfinite(self.eval_return) else -math.inf
        return (float(self.passed), self.metrics.get("gate/robust_pass_rate", 0.0),
                self.metrics.get("gate/nominal_passed", 0.0), eval_return)

    def line(self) -> str:
        if self.error is not None:
            return f"Gate at step {self.step}: not played ({self.error})"
        m = self.metrics
        mean = int(m.get("gate/averaged_actors", 1))
        of = f" of the mean of {mean} actors" if mean > 1 else ""
        return (f"Gate at step {self.step}{of}: {'PASS' if self.passed else 'fail'} (nominal "
                f"{'pass' if m['gate/nominal_passed'] else 'fail'}, robust pass rate {m['gate/robust_pass_rate']:.0%}, "
                f"{m.get('gate/wall_s', float('nan')):.0f} s)")


def promotion_note(promoted: bool, passed: bool) -> str:
    """What the verdict's line adds about best.pt: a failed gate is never announced as the best."""
    if not promoted:
        return ""
    return ": now best.pt" if passed else ": kept as best.pt for now, the closest to passing (none has passed yet)"


def read_record(path: Path) -> dict[str, Any]:
    """A gate child's JSON record, a verdict or a confirmation's answer ({} when it wrote none, or not a whole one: it died, or was stopped)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def read_verdict(path: Path, step: int) -> GateVerdict | None:
    """A gate's verdict on the checkpoint of `step`; None while (or when) it wrote none."""
    record = read_record(path)
    if not record:
        return None
    if "error" in record:
        return GateVerdict(step, {}, error=record["error"])
    return GateVerdict(step, record["metrics"], eval_return=record.get("eval_return"))


def eval_return_at(run_dir: Path, step: int) -> float | None:
    """The evaluation return logged at global step `step`, None when none was."""
    returns = [r["eval/return_mean"] for r in run_metrics(run_dir)
               if r.get("step") == step and isinstance(r.get("eval/return_mean"), (int, float))]
    return returns[-1] if returns else None


def run_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's metrics.jsonl rows (none before its first)."""
    return read_metrics(run_dir) if (run_dir / METRICS_FILE).is_file() else []
