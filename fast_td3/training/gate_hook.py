"""The deploy gate in the runner's loop (`GateHook`), and the stop it asks for once the gate is
satisfied (`gate.stop_after_passes`, with `gate.ship` once the confirmation shipped)."""

from __future__ import annotations

from typing import Callable

from fast_td3.training import distributed
from fast_td3.training.gate_loop import GateLoop
from fast_td3.training.gate_verdicts import GateVerdict
from fast_td3.training.hooks import Hook


class GateHook(Hook):
    """The gate in the runner's loop: a `GateLoop` (rank 0, `gate.interval` > 0) tended at every
    global step, drained at the end of a `train` call, and asked at the logs whether the run may
    stop (every rank asks, together)."""

    def __init__(self) -> None:
        self.loop: GateLoop | None = None

    @property
    def best(self) -> GateVerdict | None:
        """The best verdict so far (None: no gate, or no verdict yet)."""
        return None if self.loop is None else self.loop.best

    def on_begin(self, runner) -> None:
        if runner.cfg.gate.interval and runner.ranks.is_main:
            self.loop = GateLoop(runner.cfg, runner.run_dir, runner.checkpoints, runner.global_step, runner.logger.note)

    def on_step(self, runner) -> None:
        if self.loop is not None:
            with runner.hooks.phase("gate"):
                self._tend(runner, final=False)

    def on_end(self, runner, final: dict[str, float] | None) -> None:
        if self.loop is None:
            return
        try:
            if final is not None:
                self._tend(runner, final=True)
            self.loop.take(self.loop.poll(), runner.logger)  # one that arrived just before a stop is logged too
        finally:
            self.loop.close()
            self.loop = None

    def should_stop(self, runner) -> bool:
        if not runner.cfg.gate.stop_after_passes:
            return False
        return gate_satisfied(self.loop, runner.ranks, runner.global_step, runner.logger.note)

    def _tend(self, runner, final: bool) -> None:
        self.loop.tend(runner.global_step, final, lambda: runner.state(with_buffer=False),
                       runner.last_eval.get("eval/return_mean"), runner.logger, runner.until_step)


def gate_satisfied(gate: GateLoop | None, ranks: distributed.Context, step: int, note: Callable[[str], None]) -> bool:
    """The gate passed `gate.stop_after_passes` times in a row (rank 0 runs it; under torchrun every
    rank learns it here, together)."""
    done = gate is not None and gate.satisfied
    if ranks.enabled:
        done = bool(distributed.any_rank(int(done), ranks))
    if done and gate is not None and gate.shipped_step is not None:
        note(f"Stopping at global step {step}: the gate passed {gate.gate.stop_after_passes} times in a row and "
             f"the state of step {gate.shipped_step} cleared the shipping bar (gate.ship)")
    elif done and gate is not None:
        note(f"Stopping at global step {step}: the gate passed {gate.passes_in_a_row} times in a row "
             "(gate.stop_after_passes)")
    return done
