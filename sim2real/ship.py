"""Put a trained T1LowDim checkpoint in the package as a pretrained bundle, with its evidence.

    fast-td3-ship runs/T1LowDimJoystickFlatTerrain/<run> --step 60000
    fast-td3-ship <run> --step 60000 --out sim2real/pretrained/t1_robust \\
        --robust 20 --both-sides --seeds <run> <other runs of the recipe...> --note "each alone, default threads"

Writes to `--out` (default `sim2real/pretrained/t1_flat`): the export bundle (`policy.pt`,
`policy.onnx`, `T1.yaml`, `meta.json`), the full sim-to-sim gate's report (`sim2sim.json`),
the run's learning curve (`curve.png`: eval return and episode length against wall time) and
its whole `metrics.jsonl` (gzipped), the run's `config.yaml` (as `train_config.yaml`) and `training.json`: the exact command, seed,
global and env steps, wall time to the checkpoint, the CPU model, torch threads and the
precision the run resolved. With `--robust N`, also the robust gate's report over N trials at
each of the `--robust-seed` trial seeds (`sim2sim_robust.json` for the first, then
`sim2sim_robust_seed<S>.json`), and the bar a robust bundle must clear: every robust gate passed,
the 95 % interval of the pass rate over all the trials starting at 0.8 or above, every mean
tracking error of the nominal gate at most `--margin` (0.8) of its threshold, forward coverage at
least 75%. `--both-sides` plays the step and the turn to the right too, in both
gates (`sim2sim.both_sides()`). With `--seeds RUN...`, `seeds.json`: one row per run of the recipe
(fast_td3/analysis/recipe_table.py), and under `seeds/<task>/<run>/` the files each row is computed from
(`config.yaml`, the overrides, `metrics.jsonl.gz`): the rows can be recomputed from the bundle
after the run folders are gone (a run folder lives on one machine). Exits 1, shipping nothing,
when the gate (or the bar) fails, unless `--allow-fail` (then `training.json` says so). It
writes only what it owns: `--out` is new, empty, or a bundle it shipped before (`--force`
replaces that); anything else, or a folder that is, holds or lies in a run it reads, is refused
before any work (exit 2). Staging happens in a fresh `.<out>.staging-*` folder, removed on
every way out.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import math
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml


from fast_td3.command_line import SEED_MAX, SEGMENT_SECONDS_MAX, TRIALS_MAX, ArgumentParser, number, path_in, folder_out, whole
from fast_td3.files import RUN_BUNDLE_DIR, json_safe
from fast_td3.training.gate_verdicts import GATE_DIR
from fast_td3.training.metrics_log import KEPT_METRICS_FILE, METRICS_FILE, read_metrics
from fast_td3.learner.precision import cpu_model
from fast_td3.analysis import recipe_table
from fast_td3.analysis.gate_summary import PASSED as GATE_PASSED
from fast_td3.analysis.report_runs import find_runs, overrides_file
from sim2real import robust, sim2sim, t1_bundle
from sim2real.export import BUNDLE_FILES, META_JSON, POLICY_PT, T1_TASK_PREFIX, export_bundle

PROG = "fast-td3-ship"
DEFAULT_OUT = Path(__file__).resolve().parent / "pretrained" / "t1_flat"


def plot_curve(records: list[dict], step: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = [r for r in records if "eval/return_mean" in r]
    minutes = [r["time"] / 60 for r in evals]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    axes[0].plot(minutes, [r["eval/return_mean"] for r in evals], marker="o", markersize=2)
    axes[0].set_ylabel("eval return (task reward)")
    axes[1].plot(minutes, [r["eval/length_mean"] for r in evals], marker="o", markersize=2)
    axes[1].set_ylabel("eval episode length (steps, 1000 = 20 s)")
    shipped = [r["time"] / 60 for r in evals if r["step"] == step]
    for ax in axes:
        ax.set_xlabel("wall time [min]")
        ax.grid(alpha=0.3)
        for x in shipped:
            ax.axvline(x, color="tab:green", linestyle="--", label=f"shipped: step {step}")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def archive_run(run_dir: Path, seeds_dir: Path) -> Path:
    """The files `recipe_table.row` reads from a run folder, copied to `seeds_dir/<task>/<run>/`
    (the metrics gzipped): the evidence behind a seeds.json row, in the bundle."""
    kept = seeds_dir / run_dir.parent.name / run_dir.name
    kept.mkdir(parents=True)
    overrides = overrides_file(run_dir)  # the one recipe_table reads the command from
    for source in (run_dir / "config.yaml", overrides):
        if source is not None and source.is_file():
            target = kept / source.relative_to(run_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    gzip_copy(run_dir / METRICS_FILE, kept / KEPT_METRICS_FILE)
    return kept


def gzip_copy(source: Path, target: Path) -> None:
    with open(source, "rb") as plain, gzip.open(target, "wb") as packed:
        shutil.copyfileobj(plain, packed)


SHIPPED_FILES = frozenset({*BUNDLE_FILES, "sim2sim.json", "sim2sim_robust.json", "seeds.json", "seeds", "training.json",
                           "train_config.yaml", KEPT_METRICS_FILE, "curve.png"})
"""Everything this command writes into `--out`, with the robust reports of the later trial seeds
(`sim2sim_robust_seed<S>.json`): the only folder it replaces (with --force) holds nothing else."""


def robust_report_name(seed: int, first: bool) -> str:
    return "sim2sim_robust.json" if first else f"sim2sim_robust_seed{seed}.json"


def is_shipped_file(name: str) -> bool:
    return name in SHIPPED_FILES or re.fullmatch(r"sim2sim_robust_seed\d+\.json", name) is not None


class ShipRefused(ValueError):
    """Bad input, found before any work: one line, exit 2, nothing touched."""


def is_shipped_bundle(folder: Path) -> bool:
    """A folder this command wrote: only its files, among them the bundle and training.json."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    names = {p.name for p in folder.iterdir()}
    return all(map(is_shipped_file, names)) and {POLICY_PT, META_JSON, "training.json"} <= names


def check_out(out: Path, sources: list[Path], force: bool) -> None:
    """Refuse an `--out` that would delete what this command did not write: a run folder it reads
    (or a folder holding one), a file, a folder of other files; a shipped bundle only with --force."""
    target = out.resolve()
    for source in sources:
        source = source.resolve()
        if target == source / RUN_BUNDLE_DIR and source == sources[0].resolve():
            continue  # the shipped run's own bundle folder
        if target == source or target in source.parents or source in target.parents:
            raise ShipRefused(f"--out {out} is, holds or lies inside the run folder {source}: name a new folder")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ShipRefused(f"--out {out} exists and is not a folder: name a new folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not is_shipped_bundle(out):
        raise ShipRefused(f"--out {out} holds files this command did not write: nothing was touched; name a new folder")
    if not force:
        raise ShipRefused(f"--out {out} holds a shipped bundle: --force replaces it")


def check_args(args: argparse.Namespace) -> Path:
    """The checkpoint to ship, after every input was checked (nothing written yet): the run's
    `checkpoints/step_<N>.pt`, else the state its gate while training judged, `gate/step_<N>.pt`."""
    checkpoint = args.run / "checkpoints" / f"step_{args.step:09d}.pt"
    gated = args.run / GATE_DIR / checkpoint.name
    if not checkpoint.is_file() and gated.is_file():
        checkpoint = gated
    if not checkpoint.is_file():
        raise ShipRefused(f"no checkpoint {checkpoint} (nor a gated {gated})")
    for run in [args.run, *args.seeds]:
        if not (run / "config.yaml").is_file() or not (run / METRICS_FILE).is_file():
            raise ShipRefused(f"{run} is not a run folder (no config.yaml and {METRICS_FILE})")
    task = str((yaml.safe_load((args.run / "config.yaml").read_text()) or {}).get("env", {}).get("task"))
    if not task.startswith(T1_TASK_PREFIX):
        raise ShipRefused(f"{args.run} trained {task}; this command ships {T1_TASK_PREFIX}* runs")
    check_out(args.out, [args.run, *args.seeds], args.force)
    if not args.out.absolute().parent.is_dir():
        raise ShipRefused(f"--out {args.out}: its folder {args.out.absolute().parent} does not exist")
    return checkpoint


def thresholds_from(options: list[str]) -> sim2sim.Thresholds:
    """`--threshold NAME=VALUE ...` as the gates' thresholds (the others at their defaults)."""
    values = {}
    for option in options:
        name, _, text = option.partition("=")
        if name not in sim2sim.THRESHOLD_OPTIONS:
            raise ShipRefused(f"--threshold {option}: no threshold {name!r}; known: {', '.join(sim2sim.THRESHOLD_OPTIONS)}")
        try:
            values[name] = float(text)
        except ValueError:
            raise ShipRefused(f"--threshold {option}: give {name}=<number>") from None
        if not math.isfinite(values[name]):
            raise ShipRefused(f"--threshold {option}: give a finite number")
    return sim2sim.Thresholds(**values)


def replace_folder(staging: Path, out: Path) -> None:
    """Put `staging` at `out`; a bundle already there (checked to be one) is set aside, then removed."""
    old = None
    if out.is_dir():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.absolute().parent))
        out.rename(old / out.name)
    try:
        staging.rename(out)
    except OSError:
        if old is not None:
            (old / out.name).rename(out)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


@dataclass(frozen=True)
class Outcome:
    """What a `fast-td3-ship` did: `code` is its exit status (0 shipped, 1 the gate failed or the
    bar was not reached, 2 refused), `below_the_bar` why it fell short (the run's confirmation
    records them)."""

    code: int
    below_the_bar: tuple[str, ...] = ()


def main(argv: list[str] | None = None) -> int:
    return run(argv).code


def run(argv: list[str] | None = None) -> Outcome:
    """`fast-td3-ship` with `argv`, and what it did."""
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=path_in, help="a T1LowDimJoystick* run folder")
    parser.add_argument("--step", type=whole(0), required=True, help="the checkpoint's global step")
    parser.add_argument("--out", type=folder_out(replaces=is_shipped_bundle), default=DEFAULT_OUT)
    parser.add_argument("--force", action="store_true", help="replace a bundle this command shipped to --out before")
    parser.add_argument("--allow-fail", action="store_true", help="ship even when the gate fails (recorded)")
    parser.add_argument("--robust", type=whole(0, TRIALS_MAX), default=0, help="robust gate trials (0: none)")
    parser.add_argument("--robust-seed", type=whole(0, SEED_MAX), nargs="+", default=[0], metavar="SEED",
                        help="the robust gate's trial seeds, --robust trials each (default 0); the bar pools them")
    parser.add_argument("--margin", type=number(0, 1), default=robust.SHIPPING_MARGIN, help="nominal errors at most this share of their limits")
    parser.add_argument("--seconds", type=number(0, SEGMENT_SECONDS_MAX), default=20.0,
                        help="seconds per joystick segment, both gates (default 20)")
    parser.add_argument("--both-sides", action="store_true",
                        help="play the sideways step and the turn to the right too (both gates)")
    parser.add_argument("--segments", nargs="+", choices=sim2sim.SEGMENT_NAMES, default=[], metavar="NAME",
                        help=f"play only these joystick segments ({', '.join(sim2sim.SEGMENT_NAMES)}; default all)")
    parser.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                        help=f"change a threshold of both gates, one per flag ({', '.join(sim2sim.THRESHOLD_OPTIONS)})")
    parser.add_argument("--perturbation", action="append", default=[], metavar="KIND=VALUE",
                        help="change the robust gate's perturbations as fast-td3-sim2sim does, one per flag "
                             "(push=off, floor_friction=0.2,1.0, ...)")
    parser.add_argument("--seeds", nargs="*", type=path_in, default=[], help="the recipe's runs, for seeds.json")
    parser.add_argument("--note", default="", help="how the seeds ran (alone or two at a time, threads), in each row")
    parser.add_argument("--average", type=whole(1), default=1, metavar="K",
                        help="ship the mean actor of the checkpoint and the K-1 before it (fast_td3/training/policy_average.py)")
    args = parser.parse_args(argv)
    try:
        checkpoint = check_args(args)
        sim2sim.check_seconds(args.seconds)
        args.thresholds = thresholds_from(args.threshold)
        args.ranges = robust.ranges_from_options(dict(option.partition("=")[::2] for option in args.perturbation))
    except (ShipRefused, t1_bundle.BundleError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return Outcome(2)
    # staging is this command's own: a fresh name beside --out, gone on every way out
    staging = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.staging-", dir=args.out.absolute().parent))
    try:
        return ship(args, checkpoint, staging)
    except (ValueError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return Outcome(2)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ship(args: argparse.Namespace, checkpoint: Path, staging: Path) -> Outcome:
    """Export, gate and document the checkpoint in `staging`, then put it in place of --out."""
    export_bundle(checkpoint, staging, average=args.average)
    segments = sim2sim.sequence(args.both_sides, args.segments)
    report = sim2sim.run(t1_bundle.load_bundle(staging), seconds=args.seconds, segments=segments,
                         thresholds=args.thresholds)
    sim2sim.print_report(report)
    if not report.passed and not args.allow_fail:
        print("the gate failed: nothing shipped (--allow-fail ships it, marked as failing)")
        why = [f"{s.name}: {f}" for s in report.segments for f in s.failures] + report.deploy_mismatches
        return Outcome(1, tuple(f"the gate failed: {line}" for line in why) or ("the gate failed",))
    (staging / "sim2sim.json").write_text(json.dumps(json_safe(report.to_dict()), indent=2, allow_nan=False))
    shortfalls, robust_reports = [], []
    if args.robust:
        for seed in args.robust_seed:
            robust_report = robust.run(t1_bundle.load_bundle(staging), trials=args.robust, seed=seed,
                                       ranges=args.ranges, seconds=args.seconds, segments=segments,
                                       thresholds=args.thresholds)
            robust.print_report(robust_report)
            (staging / robust_report_name(seed, first=not robust_reports)).write_text(
                json.dumps(json_safe(robust_report.to_dict()), indent=2, allow_nan=False))
            robust_reports.append(robust_report)
        pooled = robust.PooledRate.of(robust_reports)
        print(f"robust pass rate: {pooled.line()}")
        shortfalls = robust.shipping_shortfalls(report, robust_reports, args.margin)
        for line in shortfalls:
            print(f"below the bar: {line}")
        if shortfalls and not args.allow_fail:
            print("nothing shipped (--allow-fail ships it, marked as falling short)")
            return Outcome(1, tuple(shortfalls))
    if args.seeds:
        # each row from the copy the bundle keeps: the row and its evidence cannot differ
        rows = [recipe_table.row(archive_run(run, staging / "seeds"), args.note) for run in find_runs(args.seeds)]
        (staging / "seeds.json").write_text(json.dumps(json_safe(rows), indent=1) + "\n")
    records = read_metrics(args.run)
    config = yaml.safe_load((args.run / "config.yaml").read_text())
    # the training records at the checkpoint's step, not the gate's verdict on it (logged later)
    at_step = [r for r in records if r["step"] == args.step and GATE_PASSED not in r]
    evals = [r for r in records if "eval/return_mean" in r and r["step"] <= args.step]
    info = {
        "command": recipe_table.training_command(args.run),
        "seed": config["seed"],
        "checkpoint_step": args.step,
        "env_steps": at_step[0]["env_steps"] if at_step else None,
        "wall_seconds": at_step[0]["time"] if at_step else None,
        "eval_return": evals[-1]["eval/return_mean"] if evals else None,
        "eval_episode_length": evals[-1]["eval/length_mean"] if evals else None,
        "cpu_model": config.get("resolved", {}).get("cpu") or cpu_model(),  # the run's, else this machine's
        "resolved": config.get("resolved", {}),
        "gate_passed": report.passed,
        "gate_segments": [name for name, _ in segments],
        "segment_seconds": args.seconds,
        "robust": ({"trials": args.robust, "seed": args.robust_seed[0], "seeds": args.robust_seed,
                    "pass_rate": pooled.rate, "interval_95": list(pooled.interval()),
                    "passed": all(r.passed for r in robust_reports), "below_the_bar": shortfalls,
                    "perturbations": args.perturbation}
                   if args.robust else None),
        "seconds_walked": round(report.seconds_walked, 2),
        "shipped": datetime.date.today().isoformat(),
        "run_folder": args.run.name,
    }
    (staging / "training.json").write_text(json.dumps(json_safe(info), indent=2))
    shutil.copy(args.run / "config.yaml", staging / "train_config.yaml")
    gzip_copy(args.run / METRICS_FILE, staging / KEPT_METRICS_FILE)
    title = (f"{config['env']['task']}, seed {config['seed']}, {info['cpu_model']}, "
             f"{config.get('resolved', {}).get('torch_threads', '?')} threads")
    plot_curve(records, args.step, staging / "curve.png", title)
    check_out(args.out, [args.run, *args.seeds], args.force)  # again: minutes have passed
    replace_folder(staging, args.out)
    print(json.dumps({"shipped": str(args.out), **{k: info[k] for k in ("checkpoint_step", "wall_seconds",
                                                                         "gate_passed", "seconds_walked")}}))
    return Outcome(0)


def cli(argv: list[str] | None = None) -> None:
    sys.exit(main(argv))


if __name__ == "__main__":
    cli()
