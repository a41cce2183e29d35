"""The deploy gate while training: every `gate.interval` global steps, the current actor through
export and the robust sim-to-sim gate, without making the training loop wait.

At a gate step the runner hands over its state (no replay buffer); it is written to
`<run>/gate/step_<N>.pt` and `python -m sim2real.gate_job` plays the gate on it in a child
process (niced, one thread, CPU only). One gate runs at a time; a gate step that comes while
one runs waits, and a newer one replaces it. Each verdict lands in `<run>/gate/step_<N>.json`
and is logged at step N as `gate/*` metrics. With `best_by=gate`, a verdict that ranks above
every earlier one (a pass, then the robust pass rate, then a nominal pass, then eval return)
becomes best.pt.

With `gate.ship`, `gate.stop_after_passes` passes in a row are confirmed before the run stops:
`fast-td3-ship` plays the last passed state by the shipping bar (more trials, other trial seeds,
the nominal margins, the pooled pass rate's 95 % interval) in the same kind of background process.
Confirmed, it has written `<run>/bundle/` and the run stops; not, the count starts again.

With `gate.average=K` the gated state's actor is the mean of the actors of this gate step and
the K - 1 before it (`fast_td3.training.policy_average`; each gate step's own actor is kept in
`<run>/gate/actors/` until K newer ones exist), so the verdicts, and best.pt, are the mean's.

The folder is the gate's memory: a resumed run reads the verdicts up to its step back from it,
restores best.pt from the best of them, logs one that arrived but was never logged, and gates
again a checkpoint whose verdict never came.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from fast_td3.files import RUN_BUNDLE_DIR, atomic_write_bytes
from fast_td3.training import checkpoint as ckpt
from fast_td3.training.config import TrainConfig
from fast_td3.training.gate_verdicts import (
    ACTORS_DIR, GATE_DIR, SHIP_DIR, GateVerdict, eval_return_at, promotion_note, read_record, read_verdict,
    run_metrics,
)
from fast_td3.training.policy_average import actor_part, average_actor, read_actor_part

def gate_options(cfg: TrainConfig) -> list[str]:
    """`key=value` options of `sim2real.gate_job` for this run's gate."""
    gate = cfg.gate
    options = {"trials": gate.trials, "seconds": gate.seconds, "seed": gate.seed, "min_pass_rate": gate.min_pass_rate,
               "both_sides": str(gate.both_sides).lower()}
    if gate.segments:
        options["segments"] = ",".join(gate.segments)
    options.update(gate.thresholds or {})
    options.update(gate.perturbations or {})
    return [f"{key}={value}" for key, value in options.items()]


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
        self.confirming: tuple[int, subprocess.Popen] | None = None
        self.shipped_step: int | None = None
        """The gate step whose state the confirmation shipped to `<run>/bundle/` (`gate.ship`)."""
        self._unlogged: list[GateVerdict] = []
        self._recall(start_step)

    # ------------------------------------------------------------ schedule
    def due(self, step: int) -> bool:
        return self.gate.interval > 0 and step % self.gate.interval == 0

    @property
    def satisfied(self) -> bool:
        """The run may stop: the last `stop_after_passes` gates passed (with `ship`: and the
        confirmation shipped the last one)."""
        if not self.gate.stop_after_passes:
            return False
        if self.gate.ship:
            return self.shipped_step is not None
        return self.passes_in_a_row >= self.gate.stop_after_passes

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
        self.take(self.drain() if final else self.poll(), logger, wait=final)

    def take(self, verdicts: list[GateVerdict], logger, wait: bool = False) -> None:
        """Log each verdict at its own step (`gate/*`) and count it (`absorb`); then tend the
        confirmation (`wait`: until it has said, at the end of a run)."""
        for verdict in verdicts:
            logger.log_past(verdict.step, verdict.metrics, "gate/step")
            promoted = self.absorb(verdict)
            logger.note(verdict.line() + promotion_note(promoted, verdict.passed))
        if self.gate.ship:
            self._tend_confirmation(logger, wait)

    # ------------------------------------------------------------ confirmation (gate.ship)
    def _tend_confirmation(self, logger, wait: bool) -> None:
        """Take the confirmation's answer when it came; start one when the passes call for it."""
        if self.confirming is not None:
            step, process = self.confirming
            if wait:
                process.wait()
            if process.poll() is None:
                return
            self.confirming = None
            self._confirmed(step, process.returncode, logger)
        candidate = self.verdicts[-1].step if self.verdicts else None
        if (self.shipped_step is None and self.passes_in_a_row >= self.gate.stop_after_passes
                and candidate is not None and self._checkpoint(candidate).is_file()):
            self._start_confirmation(candidate)
            logger.note(f"The gate passed {self.passes_in_a_row} times in a row: confirming step {candidate} by the "
                        f"shipping bar ({self.gate.ship_trials} trials at each of seeds "
                        f"{', '.join(map(str, self.gate.ship_seeds))}) while training goes on")
            if wait:
                self._tend_confirmation(logger, wait)

    def _start_confirmation(self, step: int) -> None:
        gate, run_dir = self.gate, self.folder.parent
        folder = self.folder / SHIP_DIR
        folder.mkdir(exist_ok=True)
        result = folder / f"step_{step:09d}.json"
        result.unlink(missing_ok=True)
        ship_args = [str(run_dir), "--step", str(step), "--out", str(run_dir / RUN_BUNDLE_DIR), "--force",
                     "--robust", str(gate.ship_trials), "--robust-seed", *map(str, gate.ship_seeds),
                     "--seconds", str(gate.ship_seconds)]
        ship_args += ["--both-sides"] if gate.both_sides else []
        ship_args += ["--segments", *gate.segments] if gate.segments else []
        ship_args += [f"--threshold={k}={v}" for k, v in (gate.thresholds or {}).items()]
        ship_args += [f"--perturbation={k}={v}" for k, v in (gate.perturbations or {}).items()]
        self.confirming = (step, self._background([sys.executable, "-m", "sim2real.gate_job", "ship", str(result),
                                                    *ship_args], folder / f"step_{step:09d}.log"))

    def _confirmed(self, step: int, code: int | None, logger) -> None:
        """The confirmation's answer: shipped (the run may stop) or not (the count starts again)."""
        log = self.folder / SHIP_DIR / f"step_{step:09d}.log"
        record = read_record(self.folder / SHIP_DIR / f"step_{step:09d}.json")
        shipped = bool(record.get("shipped"))
        logger.log_past(step, {"gate/confirmed": float(shipped)}, "gate/step")
        if shipped:
            self.shipped_step = step
            logger.note(f"Confirmed: the state of step {step} cleared the shipping bar; its bundle is "
                        f"{self.folder.parent / RUN_BUNDLE_DIR}")
        else:
            self.passes_in_a_row = 0
            why = "; ".join(record.get("below_the_bar", [])) or f"exit {code}, see {log}"
            logger.note(f"Not confirmed: step {step} fell short of the shipping bar ({why}); training goes on")
        if self.best is None or self.best.step != step:
            self._forget(step)

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
        for job in (self.running, self.confirming):
            if job is not None:
                job[1].kill()
                job[1].wait()
        self.running = self.confirming = None

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
        elif not (self.gate.ship and verdict.passed):  # a pass is kept for its confirmation
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
        self.running = (step, self._background(command, self.folder / f"step_{step:09d}.log", env))

    @staticmethod
    def _background(command: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        """`command` in a session of its own (it lowers its own priority), on one CPU thread, no GPU."""
        env = env or dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
        log = open(log_path, "wb")
        try:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        finally:
            log.close()

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
        logged = {int(r["step"]) for r in run_metrics(self.folder.parent) if "gate/passed" in r}
        for folder in (self.folder, self.folder / ACTORS_DIR, self.folder / SHIP_DIR):
            later = [p for p in folder.glob("step_*") if ckpt.step_in_name(p) > start_step]
            if later:
                aside = self.folder / f"abandoned_{start_step}" / folder.relative_to(self.folder)
                aside.mkdir(parents=True, exist_ok=True)
                for path in later:
                    path.replace(aside / path.name)
        confirmations = {ckpt.step_in_name(p): read_record(p) for p in (self.folder / SHIP_DIR).glob("step_*.json")}
        for result in sorted(self.folder.glob("step_*.json")):
            verdict = read_verdict(result, ckpt.step_in_name(result))
            if verdict is None:
                continue
            if verdict.step not in logged:
                self._unlogged.append(verdict)  # arrived, never logged: the runner logs it and absorbs it
                continue
            self.verdicts.append(verdict)
            self.passes_in_a_row = self.passes_in_a_row + 1 if verdict.passed else 0
            if verdict.step in confirmations:  # the confirmation's answer, as it was taken then
                if confirmations[verdict.step].get("shipped"):
                    self.shipped_step = verdict.step
                else:
                    self.passes_in_a_row = 0
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


def _copy_into(source: Path, target) -> None:
    with open(source, "rb") as f:
        shutil.copyfileobj(f, target)
