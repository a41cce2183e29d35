"""The runner's extension points: what runs beside the loop without living in it.

A hook sees the runner at fixed moments of `Runner.train` and may time or count its named
phases. The evaluation with best.pt (`periodic_eval.py`), the deploy gate (`gate_hook.py`),
the phase clock of the benchmarks (`fast_td3/analysis/phase_clock.py`) and the hot-path op
counter are hooks; the loop itself only collects, learns, logs and saves.

Each moment, in the order a global step meets them: `on_step` after the step's collect and
learn (and after its log), `on_log` with the logged metrics, `on_eval` with an evaluation's
results, `on_checkpoint` with a written checkpoint's path. `on_begin` and `on_end` bracket one
`train` call (`on_end` with the final evaluation, or None when the call was stopped);
`should_stop` is asked at each log. `runner` is the `fast_td3.training.runner.Runner` (named,
not imported: the runner imports this module).
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import ContextManager, Iterable


class Hook:
    """A hook that does nothing: subclasses override the moments they need."""

    def on_begin(self, runner: Runner) -> None:
        """A `train` call starts, after the envs' observations are in hand."""

    def on_step(self, runner: Runner) -> None:
        """Global step `runner.global_step` is done: collected, learned, logged when due."""

    def on_log(self, runner: Runner, metrics: dict[str, float]) -> None:
        """`metrics` were logged at `runner.global_step`."""

    def on_eval(self, runner: Runner, results: dict[str, float]) -> None:
        """An evaluation at `runner.global_step` gave `results` (`eval/*`)."""

    def on_checkpoint(self, runner: Runner, path: Path) -> None:
        """The checkpoint of `runner.global_step` was written to `path`."""

    def on_end(self, runner: Runner, final: dict[str, float] | None) -> None:
        """The `train` call ends: `final` is its last evaluation, None when it was stopped."""

    def should_stop(self, runner: Runner) -> bool:
        """Asked at each log: end the run now (it then evaluates and saves as at its last step)."""
        return False

    def phase(self, name: str) -> ContextManager | None:
        """A context around each span of the loop named `name` (None: this hook ignores it).
        The spans: act, env step, store (collect); sample, mirror, update (learn); log, eval,
        checkpoint."""
        return None


_UNTIMED = nullcontext()


class Hooks:
    """The hooks of one `train` call, called in order."""

    def __init__(self, hooks: Iterable[Hook]) -> None:
        self.hooks = list(hooks)
        self._timing = [hook for hook in self.hooks if type(hook).phase is not Hook.phase]

    def phase(self, name: str) -> ContextManager:
        """The span `name` under every hook that times phases (free when none does)."""
        if not self._timing:
            return _UNTIMED
        stack = ExitStack()
        for hook in self._timing:
            context = hook.phase(name)
            if context is not None:
                stack.enter_context(context)
        return stack

    def __iter__(self):
        return iter(self.hooks)
