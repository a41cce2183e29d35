"""What `fast-td3-report` reads and how it orders it: run folders (their metrics.jsonl, overrides,
final evaluation, diagnostics and videos) and the sort keys of the comparison table."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fast_td3.measures.diagnostics import DIAGNOSTICS_DIR
from fast_td3.measures.gait_metrics import METRIC_NAMES
from fast_td3.training.metrics_log import KEPT_METRICS_FILE, METRICS_FILE, read_metrics

RETURN_KEY = "eval/return_mean"
GAIT_PREFIX = "eval/gait/"
CRITIC_PREFIX = "eval/critic/"
REWARD_TERM_PREFIX = "train/episode/reward/"
OVERRIDES_FILES = ("overrides.yaml", ".hydra/overrides.yaml")
DESCENDING_BY_DEFAULT = ("eval/return_mean", "eval/critic/correlation", "train/episode_return", "eval/length_mean",
                         "train/episode_length")
"""Sort keys where higher is better (also every `train/episode/reward/<term>`: penalties are negative);
errors and rates sort lowest first."""
BEST_AT = {"eval/critic/mean_residual": 0.0, "eval/critic/slope": 1.0}
"""Sort keys whose best value is a target: runs sort by their distance from it."""


class ReportError(ValueError):
    """Nothing to report on, or an unknown sort metric."""


# ---------------------------------------------------------------- reading runs
@dataclass
class RunSummary:
    path: Path
    name: str = ""
    records: list[dict[str, Any]] = field(default_factory=list)
    overrides: dict[str, str] = field(default_factory=dict)
    final_eval: dict[str, Any] = field(default_factory=dict)
    """The last record holding eval/return_mean (and the gait/critic metrics logged with it)."""
    last_train: dict[str, Any] = field(default_factory=dict)
    """The last record holding training episode metrics (reward terms)."""
    diagnostics: Path | None = None
    video: Path | None = None
    task: str = ""

    def value(self, key: str) -> float:
        v = self.final_eval.get(key, self.last_train.get(key))
        return float(v) if isinstance(v, (int, float)) else math.nan


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Run folders among `paths`, or below them (a sweep folder, a shipped bundle's `seeds/`)."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ReportError(f"{p}: no such folder")
        if is_run(p):
            runs.append(p)
        else:
            found = sorted({f.parent for name in (METRICS_FILE, KEPT_METRICS_FILE) for f in p.rglob(name)
                            if is_run(f.parent)})
            if not found:
                raise ReportError(f"{p}: no run folders (folders holding {METRICS_FILE}) in it")
            runs.extend(found)
    unique = list(dict.fromkeys(r.resolve() for r in runs))
    return unique


def is_run(folder: Path) -> bool:
    """A run folder holds metrics.jsonl; a run kept as evidence, its config.yaml and the metrics
    gzipped (a shipped bundle also holds metrics.jsonl.gz, beside train_config.yaml: not a run)."""
    return (folder / METRICS_FILE).is_file() or (
        (folder / KEPT_METRICS_FILE).is_file() and (folder / "config.yaml").is_file())


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def overrides_file(run_dir: Path) -> Path | None:
    """The file holding a run's command-line overrides: the first of `OVERRIDES_FILES` it has."""
    return next((run_dir / name for name in OVERRIDES_FILES if (run_dir / name).is_file()), None)


def read_overrides(run_dir: Path) -> dict[str, str]:
    """key -> value of a run's command-line overrides (`++`/`+` prefixes dropped)."""
    from omegaconf import OmegaConf

    path = overrides_file(run_dir)
    if path is None:
        return {}
    out = {}
    for item in OmegaConf.to_container(OmegaConf.load(path), resolve=False):
        item = str(item)
        out[override_key(item)] = item.split("=", 1)[1] if "=" in item else ""
    return out


def load_run(run_dir: Path) -> RunSummary:
    records = read_metrics(run_dir)
    run = RunSummary(path=run_dir, records=records, overrides=read_overrides(run_dir))
    evals = [r for r in records if RETURN_KEY in r]
    run.final_eval = evals[-1] if evals else {}
    trains = [r for r in records if "train/episode_return" in r]
    run.last_train = trains[-1] if trains else {}
    npz = sorted(p for p in (run_dir / DIAGNOSTICS_DIR).glob("eval_step_*.npz") if p.name.count(".") == 1)
    run.diagnostics = npz[-1] if npz else None
    videos = sorted((run_dir / "videos").glob("*.mp4"))
    run.video = videos[-1] if videos else None
    config = run_dir / "config.yaml"
    if config.is_file():
        from omegaconf import OmegaConf

        run.task = str(OmegaConf.select(OmegaConf.load(config), "env.task", default=""))
    return run


def name_runs(runs: list[RunSummary]) -> None:
    """Each run's path relative to the runs' common folder (its folder name when alone)."""
    if len(runs) == 1:
        runs[0].name = runs[0].path.name
        return
    common = Path(os.path.commonpath([str(r.path) for r in runs]))
    for r in runs:
        r.name = str(r.path.relative_to(common)) or r.path.name


def differing_overrides(runs: list[RunSummary]) -> list[str]:
    """Override keys whose value is not the same in every run (missing counts as a value)."""
    keys = list(dict.fromkeys(k for r in runs for k in r.overrides))
    return [k for k in keys if len({r.overrides.get(k) for r in runs}) > 1]


def metric_columns(runs: list[RunSummary]) -> list[str]:
    """Final-eval columns: return, every gait metric any run logged (in METRICS order), calibration."""
    present = {k for r in runs for k in r.final_eval}
    gait = [GAIT_PREFIX + n for n in METRIC_NAMES if GAIT_PREFIX + n in present]
    gait += sorted(k for k in present if k.startswith(GAIT_PREFIX) and k not in gait)
    critic = sorted(k for k in present if k.startswith(CRITIC_PREFIX))
    return [RETURN_KEY, "eval/return_std", *gait, *critic]


def resolve_sort_key(name: str, columns: list[str], other_keys: list[str] = ()) -> str:
    """A column from a full key or a short name (`return`, `foot_slip`, `rmse`), or any other
    key the runs logged (e.g. `train/episode/reward/feet_slip`); a gait metric no run logged is
    accepted too (every run then sorts as missing)."""
    candidates = [RETURN_KEY if name == "return" else name, GAIT_PREFIX + name, CRITIC_PREFIX + name, "eval/" + name]
    for c in candidates:
        if c in columns or c in other_keys:
            return c
    if name.removeprefix(GAIT_PREFIX) in METRIC_NAMES:
        return GAIT_PREFIX + name.removeprefix(GAIT_PREFIX)
    raise ReportError(f"--sort-by {name}: unknown metric; columns: {', '.join(columns)}")


def sort_runs(runs: list[RunSummary], key: str, descending: bool | None = None) -> list[RunSummary]:
    """Runs by `key`, best first (default direction: `DESCENDING_BY_DEFAULT`); NaN or missing last."""
    if descending is None:
        descending = key in DESCENDING_BY_DEFAULT or key.startswith(REWARD_TERM_PREFIX)

    def order(run: RunSummary) -> tuple[bool, float]:
        v = run.value(key)
        if key in BEST_AT:
            v = abs(v - BEST_AT[key])
        return (math.isnan(v), 0.0 if math.isnan(v) else (-v if descending else v))

    return sorted(runs, key=order)
