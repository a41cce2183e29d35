"""Typed configuration of a training run: which env, how to log, how long, and the learner's
`algo` section (defined with the learner in fast_td3.learner.config).

The field docstrings are read from the source (`describe_fields`): they feed
`fast-td3-train --help` and the documentation's configuration reference.
"""

from __future__ import annotations

import ast
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from fast_td3.learner.config import AlgoConfig, ConfigError

WANDB_MODES = ("auto", "online", "offline", "disabled")


@dataclass
class EnvConfig:
    """Which simulator and task, and how many copies of it run in parallel."""

    suite: str = "gymnasium"
    """Simulator suite: gymnasium, playground, humanoid_bench, isaaclab, mjlab."""
    task: str = "InvertedPendulum-v5"
    """Task id within the suite."""
    num_envs: int = 128
    """Parallel training envs; one global step collects num_envs transitions."""
    max_episode_steps: Optional[int] = None
    """Time limit in env steps (None: the task's own)."""
    options: Dict[str, Any] = field(default_factory=dict)
    """Suite-specific adapter options (e.g. gymnasium: vectorization, env_kwargs)."""
    eval_options: Dict[str, Any] = field(default_factory=dict)
    """Adapter options that differ for the evaluation envs (merged over `options`)."""
    reward_scales: Dict[str, float] = field(default_factory=dict)
    """Reward term -> scale over the task's defaults, training envs only: evaluation keeps the
    task's own reward so runs with different scales stay comparable (`env.reward_scales.<term>=x`)."""

    def adapter_options(self, evaluation: bool = False) -> Dict[str, Any]:
        """Keyword options for the suite adapter's `make` (training or evaluation envs)."""
        options = dict(self.options)
        if evaluation:
            options.update(self.eval_options)
        elif self.reward_scales:
            options["reward_scales"] = dict(self.reward_scales)
        if self.max_episode_steps is not None:
            options["max_episode_steps"] = self.max_episode_steps
        return options


@dataclass
class LoggerConfig:
    """Where metrics go; every run also writes metrics.jsonl into its run folder."""

    log_interval: int = 100
    """Global steps between metric logs (each log costs one device sync)."""
    console: bool = True
    """Print a progress bar with its ETA (on a terminal) or a metrics line per log (otherwise)."""
    tensorboard: bool = False
    """Write TensorBoard event files into <run folder>/tensorboard (view: tensorboard --logdir <run folder>)."""
    wandb_mode: str = "disabled"
    """wandb: 'online', 'offline', 'disabled', or 'auto' (online with credentials, else offline)."""
    wandb_project: str = "fast-td3"
    """wandb project."""
    wandb_entity: Optional[str] = None
    """wandb entity (team or user); None: your default."""
    wandb_group: Optional[str] = None
    """wandb group, e.g. to gather a sweep's runs."""


DISTRIBUTED_BATCH_MODES = ("per_rank", "split")


@dataclass
class DistributedConfig:
    """Data-parallel runs under torchrun (`torchrun --nproc_per_node=N -m fast_td3.training.train ...`)."""

    batch: str = "per_rank"
    """per_rank: every rank samples algo.batch_size from its own buffer (global batch and env
    count grow with the ranks); split: algo.batch_size is the global batch, each rank samples
    its share (same update as one process, env count still grows)."""


BEST_BY = ("eval_return", "gate")


@dataclass
class GateConfig:
    """The deploy gate run while training (T1LowDimJoystick tasks): every `interval` global steps
    the current actor is exported and played through the nominal sim-to-sim gate and `trials`
    perturbed trials (`fast-td3-sim2sim robust=true`), in a background process on the CPU."""

    interval: int = 0
    """Global steps between gates (0: no gate while training)."""
    trials: int = 10
    """Perturbed trials per gate (0: the nominal gate only)."""
    seconds: float = 10.0
    """Seconds per joystick segment (stand, forward, sideways, turn), > 2 (the settle time)."""
    seed: int = 0
    """Seed of the trials' draws: every gate of a run meets the same perturbations."""
    min_pass_rate: float = 0.9
    """Share of the trials that must pass for the gate to pass (the nominal trial must pass too)."""
    both_sides: bool = False
    """Play the sideways step and the turn to the right too (`fast-td3-sim2sim both_sides=true`): the
    default sequence asks only for the left ones, and a policy can turn one way far better."""
    stop_after_passes: int = 0
    """Stop the run once this many gates in a row passed (0: never; with `ship`, once it confirmed them)."""
    ship: bool = False
    """Confirm `stop_after_passes` passes in a row by the bar a robust bundle ships on before stopping:
    `fast-td3-ship` on the last passed gate's state, in the background on the cores training leaves,
    with `ship_trials` perturbed trials at each of `ship_seeds` (the gate's segments, sides and
    perturbations), the nominal margins and the pooled pass rate's 95 % interval at 0.8 or above.
    Confirmed: the run writes `<run>/bundle/` and stops. Not: the count starts again and training
    goes on. `total_steps` stays the cap."""
    ship_trials: int = 20
    """Perturbed trials per trial seed of the confirmation."""
    ship_seconds: float = 20.0
    """Seconds per joystick segment of the confirmation (`fast-td3-ship --seconds`)."""
    ship_seeds: List[int] = field(default_factory=lambda: [1, 2, 3])
    """The confirmation's trial seeds: not the gate's `seed`, whose trials chose the candidate."""
    segments: List[str] = field(default_factory=list)
    """The joystick segments the gate plays, by name (stand, forward, sideways, turn; empty: all)."""
    thresholds: Dict[str, float] = field(default_factory=dict)
    """Changes to the thresholds a play is judged by, as fast-td3-sim2sim's options (gate and
    confirmation): gate.thresholds.max_lin_vel_error=0.15; the fall thresholds min_height and min_tilt_cos."""
    average: int = 1
    """Gate, and keep as best.pt, the mean actor of this many gate steps, the current one and those
    before it (`fast-td3-export average=K`; fewer at the first gates): 1 gates the current actor."""
    perturbations: Dict[str, str] = field(default_factory=dict)
    """Changes to the perturbation ranges, as fast-td3-sim2sim's options: gate.perturbations.push=off,
    gate.perturbations.floor_friction="'0.2,1.0'" (quoted for Hydra), gate.perturbations.physics=implicitfast."""


@dataclass
class TrainConfig:
    """One training run. Intervals count global steps (one vectorised env step)."""

    env: EnvConfig = field(default_factory=EnvConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    best_by: str = "eval_return"
    """What best.pt keeps: 'eval_return' (the best evaluation) or 'gate' (among the gated checkpoints:
    a pass, then the highest robust pass rate, then a nominal pass, then eval return; needs gate.interval)."""
    total_steps: int = 150_000
    """Length of the run in global steps."""
    eval_interval: int = 5_000
    """Global steps between evaluations on the separate eval envs (0: only at the end)."""
    eval_episodes: int = 10
    """Evaluation episodes, one per eval env, deterministic actions, fixed seeds."""
    eval_video: bool = False
    """Render eval env 0 at each evaluation into videos/step_<N>.mp4 (and to wandb when on);
    needs an OpenGL backend (MUJOCO_GL=egl headless, the default) and the video extra."""
    save_interval: int = 5_000
    """Global steps between checkpoints (0: only at the end)."""
    keep_checkpoints: int = 3
    """Checkpoints kept in <run folder>/checkpoints (>= 1; 2 or more let a resume pass an unreadable newest one)."""
    save_buffer: bool = False
    """Include the replay buffer in the newest checkpoint (large; older checkpoints drop it when the next is
    written; a resumed run otherwise refills it)."""
    seed: int = 1
    """Seeds torch, NumPy, Python and (through derived per-env seeds) every env."""
    device: str = "auto"
    """Learner device: 'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:1', ..."""
    out_dir: str = "runs"
    """Root of run folders: <out_dir>/<task>/<timestamp>_<seed>/."""
    resume: Optional[str] = None
    """Run folder or checkpoint file to continue (same folder, step counter and schedules)."""
    resolved: Dict[str, Any] = field(default_factory=dict)
    """Written by the trainer: what `auto` settings became on the machine that ran (precision and
    why, torch threads) and its CPU model; informational, a resumed run resolves again on its own machine."""
    check_finite: bool = True
    """Stop with a checkpoint when an observation or reward is NaN/inf (one host sync per step)."""

    def __post_init__(self) -> None:
        problems = []
        if self.total_steps < 1:
            problems.append(f"total_steps must be >= 1, got {self.total_steps}")
        for name in ("eval_interval", "save_interval"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.keep_checkpoints < 1:
            problems.append(f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}")
        if self.eval_episodes < 1:
            problems.append(f"eval_episodes must be >= 1, got {self.eval_episodes}")
        if self.logger.log_interval < 1:
            problems.append(f"logger.log_interval must be >= 1, got {self.logger.log_interval}")
        if self.logger.wandb_mode not in WANDB_MODES:
            problems.append(f"logger.wandb_mode must be one of {WANDB_MODES}, got {self.logger.wandb_mode!r}")
        if self.distributed.batch not in DISTRIBUTED_BATCH_MODES:
            problems.append(f"distributed.batch must be one of {DISTRIBUTED_BATCH_MODES}, got {self.distributed.batch!r}")
        if self.env.num_envs < 1:
            problems.append(f"env.num_envs must be >= 1, got {self.env.num_envs}")
        if self.algo.batch_size < self.env.num_envs:
            problems.append(
                f"algo.batch_size ({self.algo.batch_size}) must be >= env.num_envs ({self.env.num_envs}): "
                "each update draws batch_size // num_envs transitions per env"
            )
        problems += self._gate_problems()
        if problems:
            raise ConfigError("invalid TrainConfig: " + "; ".join(problems))

    def _gate_problems(self) -> list[str]:
        gate, problems = self.gate, []
        if self.best_by not in BEST_BY:
            problems.append(f"best_by must be one of {BEST_BY}, got {self.best_by!r}")
        for name in ("interval", "trials", "seed", "stop_after_passes"):
            if getattr(gate, name) < 0:
                problems.append(f"gate.{name} must be >= 0, got {getattr(gate, name)}")
        if gate.average < 1:
            problems.append(f"gate.average must be >= 1 (1: the current actor alone), got {gate.average}")
        if not gate.seconds > 2.0:
            problems.append(f"gate.seconds must be > 2 (tracking is judged after a 2 s settle), got {gate.seconds}")
        if not 0.0 <= gate.min_pass_rate <= 1.0:
            problems.append(f"gate.min_pass_rate must be in [0, 1], got {gate.min_pass_rate}")
        if gate.interval > 0 and not self.env.task.startswith("T1LowDimJoystick"):
            problems.append(f"gate.interval={gate.interval}: the deploy gate plays T1 bundles; {self.env.task} has "
                            "none (set gate.interval=0)")
        if gate.interval == 0 and (self.best_by == "gate" or gate.stop_after_passes):
            key = "best_by=gate" if self.best_by == "gate" else "gate.stop_after_passes"
            problems.append(f"{key} needs the gate in the loop: set gate.interval > 0")
        return problems


def _field_docs() -> dict[str, dict[str, str]]:
    """The docstring under each field of each config dataclass (this file and the learner's), read from the source."""
    docs: dict[str, dict[str, str]] = {}
    sources = (Path(__file__), Path(__file__).parents[1] / "learner" / "config.py")
    for node in (node for source in sources for node in ast.parse(source.read_text()).body):
        if isinstance(node, ast.ClassDef):
            body, fields = node.body, docs.setdefault(node.name, {})
            for item, following in zip(body, body[1:]):
                if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                        and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)):
                    fields[item.target.id] = str(following.value.value)
    return docs


def describe_fields(cls: type, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, default, one-line doc) of every field of a config dataclass, nested ones expanded."""
    docs = _field_docs().get(cls.__name__, {})
    rows: list[tuple[str, Any, str]] = []
    for f in fields(cls):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if is_dataclass(default):
            rows.extend(describe_fields(type(default), f"{prefix}{f.name}."))
        else:
            rows.append((f"{prefix}{f.name}", default, docs.get(f.name, "")))
    return rows


def register_configs() -> None:
    """Register the structured schema with Hydra's ConfigStore (as `train_schema`)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)


def config_dict(cfg: Any) -> dict[str, Any]:
    """A plain, JSON-able dict of a dataclass or OmegaConf config."""
    if is_dataclass(cfg):
        return asdict(cfg)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)
