"""What a run records in its folder before it trains: config.yaml (the merged config, which
resumes start from), overrides.yaml (the command-line overrides that made it), and for a
resume its own record in `.hydra/resumed_<time>/` (docs/runs.md). Every file is written
atomically.
"""

from __future__ import annotations

import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fast_td3.files import atomic_write_bytes
from fast_td3.training.preflight import RESOLVED_CONFIG, override_key

OVERRIDES_FILE = "overrides.yaml"


def record_config(cfg: DictConfig, run_dir: Path) -> None:
    """The run's merged config, which resumes start from."""
    atomic_write_bytes(run_dir / RESOLVED_CONFIG, lambda f: f.write(OmegaConf.to_yaml(cfg, resolve=True).encode()))


def _write_yaml(path: Path, node) -> None:
    atomic_write_bytes(path, lambda f: f.write(OmegaConf.to_yaml(node).encode()))


def record_overrides(run_dir: Path, overrides: list[str], resumed: bool) -> None:
    """overrides.yaml in the run folder: the command-line overrides (Hydra's task overrides,
    as Hydra received them) that made this run, e.g. one point of a sweep. A resume keeps the
    original list and replaces or adds the keys it overrides (its `resume=` is left out)."""
    path = run_dir / OVERRIDES_FILE
    current = [str(o) for o in overrides]
    if resumed:
        new = [o for o in current if override_key(o) != "resume"]
        previous = [str(o) for o in OmegaConf.to_container(OmegaConf.load(path), resolve=False)] if path.is_file() else []
        changed = {override_key(o) for o in new}
        current = [o for o in previous if override_key(o) not in changed] + new
    _write_yaml(path, OmegaConf.create(current))


def record_run(cfg: DictConfig, run_dir: Path, overrides: list[str], resumed: bool) -> None:
    """config.yaml and overrides.yaml of a run that is about to train; a resume also keeps its own
    record in `.hydra/resumed_<time>/` (what Hydra writes into `.hydra/` for a new run)."""
    record_config(cfg, run_dir)
    record_overrides(run_dir, overrides, resumed)
    if resumed:
        record = run_dir / ".hydra" / f"resumed_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
        _write_yaml(record / "config.yaml", cfg)
        _write_yaml(record / OVERRIDES_FILE, OmegaConf.create([str(o) for o in overrides]))
