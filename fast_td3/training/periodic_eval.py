"""The evaluation while training, as a hook: every `eval_interval` global steps the runner's
deterministic episodes, and best.pt kept for the best evaluation return so far, unless the deploy
gate's verdicts choose it (`best_by=gate`, once a verdict exists)."""

from __future__ import annotations

import math

from fast_td3.training.gate_hook import GateHook
from fast_td3.training.hooks import Hook


class EvaluationHook(Hook):
    """Evaluates every `cfg.eval_interval` steps (the end of a `train` call evaluates anyway) and
    keeps best.pt by evaluation return. `gate`: the run's gate hook, which may choose best.pt."""

    def __init__(self, gate: GateHook | None = None) -> None:
        self.gate = gate

    def on_step(self, runner) -> None:
        if runner.due(runner.cfg.eval_interval) and runner.global_step < runner.until_step:
            with runner.paused():
                runner.evaluate()

    def on_eval(self, runner, results: dict[str, float]) -> None:
        """A best evaluation return so far (on a tie the later, more trained one): its checkpoint
        becomes best.pt, what fast-td3-eval, -play and -export take from a run folder."""
        score = results["eval/return_mean"]
        if runner.cfg.best_by == "gate" and self.gate is not None and self.gate.best is not None:
            return  # the gate's verdicts choose best.pt now
        if not math.isfinite(score) or (runner.best_eval is not None and score < runner.best_eval["return_mean"]):
            return
        runner.best_eval = {"step": runner.global_step, "return_mean": score}
        if runner.ranks.is_main:
            runner.checkpoints.save_best(runner.state(with_buffer=False))
