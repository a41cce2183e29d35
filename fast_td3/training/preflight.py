"""What `fast-td3-train` checks and decides before Hydra runs: compose and validate the config as
Hydra will (the user's --config-dir folders included), check the values that would only fail
later, the checkpoint a resume continues from, the device; then claim and lock the run folder.
A mistake is reported in one line (a user error) with nothing created; the decisions are
recorded in the command's `Launch` (its plan, below), which `train.cli` hands to Hydra's resolvers
and to `main`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fast_td3.learner.config import ConfigError, migrate_algo_config
from fast_td3.training.checkpoint import check_matches, pick_for_resume, run_dir_of
from fast_td3.training.cli_checks import CONF_DIR, GROUPS, search_path_override
from fast_td3.training.config import TrainConfig
from fast_td3.training.config_checks import check_no_inert_keys, check_replay_memory_early, check_values
from fast_td3.training.run_folder import (
    RunLock, busy_message, check_writable, claim_folder, claim_run_dir, discard, lock_holder, make_folder, no_resume,
    override_value, topmost_missing,
)

RESOLVED_CONFIG = "config.yaml"


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _load_recorded(path: Path, run_dir: Path) -> DictConfig:
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    problem = None
    try:
        recorded = OmegaConf.load(path)
    except (YAMLError, OmegaConfBaseException, UnicodeDecodeError) as error:
        problem = " ".join(str(error).split())[:160]
    else:
        if isinstance(recorded, DictConfig):
            return recorded
        problem = "it holds no key: value mapping"
    raise ConfigError(f"cannot resume: {path} is not a readable run config ({problem}); repair it, or copy back "
                      f"the config the run started with, {run_dir / '.hydra' / 'config.yaml'}")


def resumed_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The resumed run's saved config with this command's plain `key=value` overrides on top."""
    from omegaconf.errors import OmegaConfBaseException

    run_dir = run_dir_of(cfg.resume)
    saved_path = run_dir / RESOLVED_CONFIG
    if not saved_path.is_file():
        raise FileNotFoundError(f"cannot resume: {saved_path} is missing (is {run_dir} a fast-td3 run folder?)")
    recorded = _load_recorded(saved_path, run_dir)
    try:
        if "algo" in recorded:  # runs from before the per-algorithm sections: FastTD3's keys move into algo.fast_td3
            recorded.algo = migrate_algo_config(OmegaConf.to_container(recorded.algo))
        saved = OmegaConf.merge(OmegaConf.structured(TrainConfig), recorded)
    except (OmegaConfBaseException, TypeError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"cannot resume: {saved_path} does not fit fast-td3's config "
                          f"({str(error).splitlines()[0]}); repair it") from None
    overrides = [o for o in overrides if override_key(o) != "resume" and not override_key(o).startswith("hydra")]
    fixed = ("task", *GROUPS, "seed")
    refused = [o for o in overrides if override_key(o) in fixed]
    if refused:
        raise ConfigError(
            f"cannot change the task, config groups or seed of a resumed run ({', '.join(refused)}); "
            "override individual keys instead, e.g. total_steps=200000"
        )
    # `++key=v` (keys below free-form dicts, see add_to_free_form_dicts) set like `key=v`
    saved.merge_with_dotlist([o.lstrip("+") for o in overrides])
    saved.resume = cfg.resume
    return saved


def video_problem(cfg) -> str | None:
    import importlib.util

    if cfg.eval_video and importlib.util.find_spec("imageio_ffmpeg") is None:
        return 'eval_video=true writes .mp4 videos with imageio-ffmpeg: pip install -e ".[video]"'
    return None


# OmegaConf's "could not be converted to X" / "is not a valid y" -> what the key takes
_CONVERSIONS = {("Integer", "int"): "an integer", ("Float", "float"): "a number", ("Boolean", "bool"): "true or false"}


def hydra_problem(error: Exception, overrides: list[str]) -> str:
    """One line for an error Hydra or OmegaConf raised while composing `overrides`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    if isinstance(error, OverrideParseException):
        parser = OverridesParser.create()
        for override in overrides:
            try:
                parser.parse_overrides([override])
            except OverrideParseException as bad:
                why = str(bad).splitlines()[0]
                return (f"malformed override {override!r} ({why}); write key=value, e.g. algo.gamma=0.99 "
                        "or algo.actor_hidden_dims=[256,128]")
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    if message.startswith("Ambiguous value for argument"):  # a,b without -m
        override = message.split("'")[1] if "'" in message else message
        return f"{override} lists several values: a sweep over them needs -m (fast-td3-train -m {override})"
    cause = error.__cause__
    if message.startswith("Error merging override ") and cause is not None:
        override = message.removeprefix("Error merging override ")
        detail = str(cause).splitlines()[0]
        for (kind, short), wanted in _CONVERSIONS.items():
            if detail.endswith(f"could not be converted to {kind}") or f"is not a valid {short} " in detail:
                return f"{override}: {override_key(override)} takes {wanted}"
        return f"{override}: {detail}"
    return message


def compose_config(overrides: list[str], config_dirs: list[Path] | None = None) -> DictConfig:
    """The config Hydra will compose for these overrides (its own `hydra.*` ones left out) with
    the user's config folders; ConfigError with one line when Hydra refuses them."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    plain = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="train"):
            cfg = compose("train", overrides=plain + search_path_override(config_dirs or []))
            if len(plain) < len(overrides):  # Hydra's own keys (hydra.job.chdir=maybe), checked here too
                compose("train", overrides=overrides + search_path_override(config_dirs or []),
                        return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(hydra_problem(error, overrides)) from None
    check_deletions(cfg, plain)
    return cfg


def check_deletions(cfg: DictConfig, overrides: list[str]) -> None:
    """`~key` removes an entry of a free-form dict (reward scales, env options); a key of the typed
    config cannot go (Hydra failed on it later, while formatting its own error)."""
    for override in overrides:
        if not override.startswith("~"):
            continue
        key = override[1:].split("=", 1)[0]
        parent = cfg if "." not in key else OmegaConf.select(cfg, key.rsplit(".", 1)[0])
        if OmegaConf.is_config(parent) and OmegaConf.get_type(parent) not in (dict, None):
            raise ConfigError(f"{override}: {key} is a setting of fast-td3-train and cannot be removed; "
                              f"give it a value ({key}=...); `fast-td3-train --help` lists every key")


def validated(cfg: DictConfig) -> TrainConfig:
    """The typed config; ConfigError (one line naming the field) when a value cannot work."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as error:  # OmegaConf's own validation, e.g. a missing value
        raise ConfigError(str(error).splitlines()[0]) from None


def checked(cfg: DictConfig, overrides: list[str], explicit_run_dir: bool = False) -> TrainConfig:
    """`validated`, then the values that would fail once training started and the keys that do nothing."""
    train_cfg = validated(cfg)
    check_values(train_cfg)
    check_no_inert_keys(train_cfg, overrides, explicit_run_dir, resumed=bool(cfg.resume))
    check_replay_memory_early(train_cfg)
    return train_cfg


MAX_SWEEP_CHECKS = 64


def check_sweep(overrides: list[str], config_dirs: list[Path] | None = None) -> None:
    """Every value of a sweep (`-m`) composes and validates, each with the other keys at their
    first value, before Hydra makes the sweep's folder. Intervals and globs are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    run_dir = next((o for o in overrides if o.startswith("hydra.run.dir=")), None)
    if run_dir is not None:
        raise ConfigError(f"{run_dir} has no effect in a sweep (-m): each run gets a folder of its own under "
                          "hydra.sweep.dir (default out_dir/sweeps/<time>); drop it, or give hydra.sweep.dir=<folder>")
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
        raise ConfigError(hydra_problem(error, overrides)) from None
    choices = []
    for override in parsed:
        if override.is_hydra_override():
            continue
        if not override.is_sweep_override():
            values = [override.get_value_element_as_str()]
        elif override.is_discrete_sweep() and override.value_type != ValueType.GLOB_CHOICE_SWEEP:
            values = list(override.sweep_string_iterator())
        else:
            return
        choices.append((override.get_key_element(), values))
    first = [f"{key}={values[0]}" for key, values in choices]
    variants = [first] + [first[:i] + [f"{key}={value}"] + first[i + 1:]
                          for i, (key, values) in enumerate(choices) for value in values[1:]]
    for variant in variants[:MAX_SWEEP_CHECKS]:
        checked(compose_config(variant, config_dirs), variant)


def _explicit_run_dir(overrides: list[str]) -> str | None:
    return next((override_value(o) for o in overrides if o.startswith("hydra.run.dir=")), None)


def _is_main_rank() -> bool:
    return int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 holds the run folder


def claim(overrides: list[str], resume: str | None, launch: Launch) -> bool:
    """Lock the folder a resume continues in, or claim and lock the empty folder of a new run
    given by hydra.run.dir. False when the folder is left to `main` (a new run under out_dir,
    or a folder named through interpolations, e.g. torchrun's)."""
    if resume:
        if _explicit_run_dir(overrides) is not None:
            raise ConfigError(f"hydra.run.dir cannot go with resume=: a resumed run continues in its own folder, "
                              f"{run_dir_of(resume)}; drop hydra.run.dir")
        if _is_main_rank():
            launch.lock = RunLock.acquire(run_dir_of(resume).absolute())
        return True
    explicit = _explicit_run_dir(overrides)
    if explicit is None or "$" in explicit:
        return False
    if not _is_main_rank():
        return True  # under torchrun rank 0 claims and holds the folder every rank writes into
    folder = Path(explicit).expanduser().absolute()
    launch.created, launch.lock = claim_folder(folder)
    launch.new_folder = folder
    return True


def preflight(overrides: list[str], config_dirs: list[Path] | None, launch: Launch) -> None:
    """Every check a run can make before Hydra makes its folder: compose and validate the config
    (a resume: a folder it can write into, its saved config, a checkpoint that reads and belongs to
    it), the device, the folder; then claim and lock the run folder. Raises a user error; records
    its decisions in `launch`."""
    cfg = compose_config(overrides, config_dirs)
    if cfg.resume:
        if _is_main_rank():  # rank 0 holds the folder and writes into it
            holder = lock_holder(run_dir_of(cfg.resume).absolute())
            if holder is not None:  # still training: say so before anything else
                raise ConfigError(busy_message(run_dir_of(cfg.resume).absolute(), holder))
            check_writable(run_dir_of(cfg.resume))
        launch.resume_from, state, launch.unreadable = pick_for_resume(cfg.resume)
        cfg = resumed_config(cfg, overrides)
        check_matches(state, OmegaConf.to_container(cfg, resolve=True), launch.resume_from)
    run_dir = _explicit_run_dir(overrides)  # torchrun's names its folder under ${out_dir}: out_dir counts there
    train_cfg = checked(cfg, overrides, explicit_run_dir=run_dir is not None and "${out_dir}" not in run_dir)
    if train_cfg.device not in ("auto", "cpu"):
        from fast_td3.learner.device import resolve_device

        resolve_device(train_cfg.device)  # DeviceError: the devices this machine has
    if video_problem(train_cfg):
        raise ConfigError(video_problem(train_cfg))
    launch.checked = True
    if claim(overrides, cfg.resume, launch) or _explicit_run_dir(overrides) is not None:
        return
    root = Path(train_cfg.out_dir).expanduser().absolute() / train_cfg.env.task
    created = topmost_missing(root)
    make_folder(root, f"out_dir={train_cfg.out_dir}")
    launch.run_dir = claim_run_dir(root, time.strftime("%Y-%m-%d_%H-%M-%S"), train_cfg.seed)
    launch.created = created or launch.run_dir
    launch.new_folder = launch.run_dir
    launch.lock = RunLock.acquire(launch.run_dir)


# ------------------------------------------------------------------ the command's plan
@dataclass
class Launch:
    """The plan of one `fast-td3-train` command: its run folder and what the checks before Hydra
    decided (`preflight` fills it in). `train.cli` makes it and hands it to Hydra's resolvers and
    to `main`; no module keeps one."""

    run_dir: Path | None = None
    """The new run folder claimed for this run under out_dir (a unique name, made before Hydra runs)."""
    new_folder: Path | None = None
    """The folder of a new run this command claimed (under out_dir or hydra.run.dir): what it
    holds is removed again when the run stops before its first checkpoint."""
    created: Path | None = None
    """The topmost folder this command created (None: the run's folder existed, empty)."""
    lock: RunLock | None = None
    """This process's hold on its run folder."""
    resume_from: Path | None = None
    """The checkpoint a resume continues from (the newest one that reads)."""
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    """Newer checkpoints of the resumed run that cannot be read, each with the reason."""
    checked: bool = False
    """The checks composed and validated this run's config (a single run): the run need not check
    its values again. A sweep's jobs, a cluster job's requeue and Hydra's own --config-name are
    composed only by Hydra, and check theirs in `run_training`."""

    def hydra_run_dir(self, resume, default: str) -> str:
        """Hydra's run folder (`${run_dir:...}`): the resumed run's own folder, else the one
        claimed for this run."""
        if not no_resume(resume):
            return str(run_dir_of(str(resume)))
        return str(self.run_dir) if self.run_dir is not None else default

    def hold(self, run_dir: Path) -> None:
        """Lock `run_dir` for this process unless it already holds it (a sweep's next job lets go of
        the previous job's folder); ConfigError naming the PID of another holder."""
        if self.lock is not None and self.lock.fd >= 0 and self.lock.folder.resolve() == run_dir.resolve():
            return
        if self.lock is not None:
            self.lock.release()
        self.lock = RunLock.acquire(run_dir)

    def leave_as_found(self) -> None:
        """Let go of a resumed run's folder, its lock file as this command found it (a resume
        refused or stopped before it trained leaves the run as it was)."""
        if self.lock is not None:
            self.lock.release(as_found=True)

    def discard_new_run(self, run_dir: Path) -> bool:
        """Remove what this command made for a new run that stopped before its first checkpoint
        (only the folder it claimed and holds; never another process's, never a checkpoint)."""
        mine = self.new_folder is not None and self.lock is not None and self.lock.fd >= 0
        if not mine or run_dir.resolve() != self.new_folder.resolve():
            return False
        return discard(run_dir, self.created)


def hydra_subdir(resume, *_: str) -> str | None:
    """Where Hydra records this invocation's config and overrides inside the run folder
    (`${hydra_subdir:...}`). A resume records its own (`.hydra/resumed_<time>/`, see
    `recording`) only once its checkpoint has loaded, so a resume that fails leaves the run
    folder as it was. (A second argument, the timestamp configs saved before 2026-12-02 pass,
    is ignored.)"""
    return ".hydra" if no_resume(resume) else None


def register_resolvers(launch: Launch | None = None) -> None:
    """The resolvers conf/train.yaml names its run folder with (hydra.run.dir, hydra.output_subdir),
    `run_dir` reading `launch`'s folder (None: Hydra's default, as in a sweep's job on a cluster)."""
    OmegaConf.register_new_resolver("run_dir", (launch or Launch()).hydra_run_dir, replace=True)
    OmegaConf.register_new_resolver("hydra_subdir", hydra_subdir, replace=True)
