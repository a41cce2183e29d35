"""The deploy gate while training: every `gate.interval` global steps, the current actor through
export and the robust sim-to-sim gate, without making the training loop wait.

At a gate step the runner hands over its state (no replay buffer); it is written to
`<run>/gate/step_<N>.pt` and `python -m sim2real.gate_job` plays the gate on it in a child
process (niced, one thread, CPU only). One gate runs at a time; a gate step that comes while
one runs waits, and a newer one replaces it. Each verdict lands in `<run>/gate/step_<N>.json`
and is logged at step N as `gate/*` metrics. With `best_by=gate`, a verdict that ranks above
every earlier one (a pass, then the robust pass rate, then a nominal pass, then eval return)
becomes best.pt.

With `gate.average=K` the gated state's actor is the mean of the actors of this gate step and
the K - 1 before it (`sim2real.policy_average`; each gate step's own actor is kept in
`<run>/gate/actors/` until K newer ones exist), so the verdicts, and best.pt, are the mean's.

The folder is the gate's memory: a resumed run reads the verdicts up to its step back from it,
restores best.pt from the best of them, logs one that arrived but was never logged, and gates
again a checkpoint whose verdict never came.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fast_td3.files import atomic_write_bytes
from fast_td3.training import checkpoint as ckpt
from fast_td3.training import distributed
from fast_td3.training.config import TrainConfig
from fast_td3.training.hooks import Hook
from fast_td3.training.metrics_log import METRICS_FILE, read_metrics

GATE_DIR = "gate"
ACTORS_DIR = "actors"


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


def gate_options(cfg: TrainConfig) -> list[str]:
    """`key=value` options of `sim2real.gate_job` for this run's gate."""
    gate = cfg.gate
    options = {"trials": gate.trials, "seconds": gate.seconds, "seed": gate.seed, "min_pass_rate": gate.min_pass_rate,
               "both_sides": str(gate.both_sides).lower()}
    options.update(gate.perturbations or {})
    return [f"{key}={value}" for key, value in options.items()]


def promotion_note(promoted: bool, passed: bool) -> str:
    """What the verdict's line adds about best.pt: a failed gate is never announced as the best."""
    if not promoted:
        return ""
    return ": now best.pt" if passed else ": kept as best.pt for now, the closest to passing (none has passed yet)"


class GateLoop:
    """Starts gates, collects their verdicts, keeps best.pt and counts passes in a row.

    Args:
        cfg: the run's config (its `gate` section and `best_by`).
        run_dir: the run folder.
        checkpoints: the run's checkpoint manager (best.pt).
        start_step: the step the run starts or resumes from.
        say: prints a line on the console.
    """

    def __init__(self, cfg: TrainConfig, run_dir: Path, checkpoints: ckpt.CheckpointManager, start_step: int,
                 say: Callable[[str], None] = print) -> None:
        self.cfg, self.gate, self.checkpoints, self.say = cfg, cfg.gate, checkpoints, say
        self.folder = Path(run_dir) / GATE_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self.running: tuple[int, subprocess.Popen] | None = None
        self.waiting: tuple[int, float | None] | None = None
        self.verdicts: list[GateVerdict] = []
        self.best: GateVerdict | None = None
        self.passes_in_a_row = 0
        self._unlogged: list[GateVerdict] = []
        self._recall(start_step)

    # ------------------------------------------------------------ schedule
    def due(self, step: int) -> bool:
        return self.gate.interval > 0 and step % self.gate.interval == 0

    @property
    def satisfied(self) -> bool:
        """The run may stop: the last `stop_after_passes` gates passed."""
        return bool(self.gate.stop_after_passes) and self.passes_in_a_row >= self.gate.stop_after_passes

    def submit(self, step: int, state: dict[str, Any], eval_return: float | None) -> None:
        """Gate the state of global step `step` (its mean actor with `gate.average` > 1) as soon as
        no other gate runs."""
        if self.gate.average > 1:
            state = self._averaged(step, state)
        ckpt.save_atomic(state, self._checkpoint(step))
        if self.waiting is not None:
            self.say(f"Gate at step {self.waiting[0]} skipped: step {step} is newer and the gate was busy")
            self._forget(self.waiting[0])
        self.waiting = (step, eval_return)
        self._start_waiting()

    def tend(self, step: int, final: bool, state: Callable[[], dict[str, Any]], eval_return: float | None,
             logger, last_step: int) -> None:
        """At every global step: submit `state()` (the runner's, without replay) when `step` is a gate
        step (`last_step` only with `final`), then log the verdicts that arrived (`final`: all)."""
        if self.due(step) and (final or step < last_step):
            self.submit(step, state(), eval_return)
        self.take(self.drain() if final else self.poll(), logger)

    def take(self, verdicts: list[GateVerdict], logger) -> None:
        """Log each verdict at its own step (`gate/*`) and count it (`absorb`)."""
        for verdict in verdicts:
            logger.log_past(verdict.step, verdict.metrics, "gate/step")
            promoted = self.absorb(verdict)
            logger.note(verdict.line() + promotion_note(promoted, verdict.passed))

    def poll(self) -> list[GateVerdict]:
        """Verdicts that arrived since the last call (no waiting); after a resume, first those that
        arrived before the stop but never reached metrics.jsonl."""
        arrived, self._unlogged = self._unlogged, []
        if self.running is not None and self.running[1].poll() is not None:
            arrived.append(self._collect())
            self._start_waiting()
        return arrived

    def drain(self) -> list[GateVerdict]:
        """Wait for the running gate and the one waiting (the end of a run)."""
        arrived = self.poll()
        while self.running is not None:
            self.running[1].wait()
            arrived.append(self._collect())
            self._start_waiting()
        return arrived

    def close(self) -> None:
        """Stop a running gate (a stopped run): its checkpoint stays and a resume gates it again.
        Take `poll()`'s verdicts first, or one that has just arrived is left to the resume."""
        if self.running is not None:
            self.running[1].kill()
            self.running[1].wait()
            self.running = None

    # ------------------------------------------------------------ verdicts
    def absorb(self, verdict: GateVerdict) -> bool:
        """Count the verdict; with best_by=gate, make its checkpoint best.pt when it ranks first.
        Returns whether it became best.pt."""
        self.verdicts.append(verdict)
        self.passes_in_a_row = self.passes_in_a_row + 1 if verdict.passed else 0
        promoted = False
        if verdict.error is None and (self.best is None or verdict.rank() >= self.best.rank()):
            self.best = verdict
            if self.cfg.best_by == "gate":
                self._promote(verdict.step)
                promoted = True
        else:
            # every best so far keeps its file: a resume from an earlier checkpoint restores that one
            self._checkpoint(verdict.step).unlink(missing_ok=True)
        return promoted

    # ------------------------------------------------------------ internals
    def _checkpoint(self, step: int) -> Path:
        return self.folder / f"step_{step:09d}.pt"

    def _result(self, step: int) -> Path:
        return self.folder / f"step_{step:09d}.json"

    def _averaged(self, step: int, state: dict[str, Any]) -> dict[str, Any]:
        """`state` with the mean actor of gate steps up to `step`, `gate.average` of them or as many
        as there are; the actors of the steps before it come from `gate/actors/`, where this
        step's joins them and the ones no later gate needs leave."""
        from sim2real.policy_average import actor_part, average_actor, read_actor_part

        actors = self.folder / ACTORS_DIR
        actors.mkdir(exist_ok=True)
        ckpt.save_atomic(actor_part(state), actors / f"step_{step:09d}.pt")
        kept = sorted((p for p in actors.glob("step_*.pt") if ckpt.step_in_name(p) <= step), key=ckpt.step_in_name)
        for stale in kept[:-self.gate.average]:
            stale.unlink()
        earlier = [read_actor_part(p) for p in kept[-self.gate.average:-1]]
        return average_actor(earlier + [state], self.cfg.algo.normalizer_eps)

    def _forget(self, step: int) -> None:
        self._checkpoint(step).unlink(missing_ok=True)

    def _promote(self, step: int) -> None:
        source = self._checkpoint(step)
        atomic_write_bytes(self.checkpoints.dir / ckpt.BEST_FILE, lambda f: _copy_into(source, f))

    def _start_waiting(self) -> None:
        if self.running is not None or self.waiting is None:
            return
        step, eval_return = self.waiting
        self.waiting = None
        self._result(step).unlink(missing_ok=True)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
                   FAST_TD3_GATE_EVAL_RETURN="" if eval_return is None else repr(eval_return))
        command = [sys.executable, "-m", "sim2real.gate_job", str(self._checkpoint(step)), str(self._result(step)),
                   *gate_options(self.cfg)]
        log = open(self.folder / f"step_{step:09d}.log", "wb")
        try:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
        finally:
            log.close()
        self.running = (step, process)

    def _collect(self) -> GateVerdict:
        step, process = self.running
        self.running = None
        verdict = read_verdict(self._result(step), step)
        if verdict is None:
            verdict = GateVerdict(step, {}, error=f"the gate process exited {process.returncode} without a verdict; "
                                                  f"see {self.folder / f'step_{step:09d}.log'}")
        return verdict

    def _recall(self, start_step: int) -> None:
        """Verdicts of this run up to `start_step` (a resume). Later ones belong to another history
        and go to `gate/abandoned_<step>/`; verdicts that never reached metrics.jsonl are handed to
        the next `poll()`; best.pt is the recalled best's again; a checkpoint whose verdict never
        came is gated again (the newest such, the others are dropped)."""
        logged = {int(r["step"]) for r in _metrics(self.folder.parent) if "gate/passed" in r}
        for folder in (self.folder, self.folder / ACTORS_DIR):
            later = [p for p in folder.glob("step_*") if ckpt.step_in_name(p) > start_step]
            if later:
                aside = self.folder / f"abandoned_{start_step}" / folder.relative_to(self.folder)
                aside.mkdir(parents=True, exist_ok=True)
                for path in later:
                    path.replace(aside / path.name)
        for result in sorted(self.folder.glob("step_*.json")):
            verdict = read_verdict(result, ckpt.step_in_name(result))
            if verdict is None:
                continue
            if verdict.step not in logged:
                self._unlogged.append(verdict)  # arrived, never logged: the runner logs it and absorbs it
                continue
            self.verdicts.append(verdict)
            self.passes_in_a_row = self.passes_in_a_row + 1 if verdict.passed else 0
            if verdict.error is None and (self.best is None or verdict.rank() >= self.best.rank()):
                self.best = verdict
        if self.best is not None and self.cfg.best_by == "gate":
            if self._checkpoint(self.best.step).is_file():
                self._promote(self.best.step)
            else:
                self.best = None  # its file is gone: eval return keeps best.pt until the next verdict
        known = {v.step for v in self.verdicts + self._unlogged}
        unjudged = sorted(ckpt.step_in_name(p) for p in self.folder.glob("step_*.pt") if ckpt.step_in_name(p) not in known)
        for step in unjudged[:-1]:
            self._forget(step)
        if unjudged:
            self.waiting = (unjudged[-1], eval_return_at(self.folder.parent, unjudged[-1]))
        self._start_waiting()


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
    if done and gate is not None:
        note(f"Stopping at global step {step}: the gate passed {gate.passes_in_a_row} times in a row "
             "(gate.stop_after_passes)")
    return done


def read_verdict(path: Path, step: int) -> GateVerdict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if "error" in record:
        return GateVerdict(step, {}, error=record["error"])
    return GateVerdict(step, record["metrics"], eval_return=record.get("eval_return"))


def eval_return_at(run_dir: Path, step: int) -> float | None:
    """The evaluation return logged at global step `step`, None when none was."""
    returns = [r["eval/return_mean"] for r in _metrics(run_dir)
               if r.get("step") == step and isinstance(r.get("eval/return_mean"), (int, float))]
    return returns[-1] if returns else None


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's metrics.jsonl rows (none before its first)."""
    return read_metrics(run_dir) if (run_dir / METRICS_FILE).is_file() else []


def _copy_into(source: Path, target) -> None:
    with open(source, "rb") as f:
        shutil.copyfileobj(f, target)
