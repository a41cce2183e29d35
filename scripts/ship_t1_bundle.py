"""Put a trained T1LowDim checkpoint in the package as a pretrained bundle, with its evidence.

    python scripts/ship_t1_bundle.py runs/T1LowDimJoystickFlatTerrain/<run> --step 60000
    python scripts/ship_t1_bundle.py <run> --step 60000 --out sim2real/pretrained/t1_robust \\
        --robust 20 --both-sides --seeds <run> <other runs of the recipe...> --note "each alone, default threads"

Writes to `--out` (default `sim2real/pretrained/t1_flat`): the export bundle (`policy.pt`,
`policy.onnx`, `T1.yaml`, `meta.json`), the full sim-to-sim gate's report (`sim2sim.json`),
the run's learning curve (`curve.png`: eval return and episode length against wall time) and
its whole `metrics.jsonl` (gzipped), the run's `config.yaml` (as `train_config.yaml`) and `training.json`: the exact command, seed,
global and env steps, wall time to the checkpoint, the CPU model, torch threads and the
precision the run resolved. With `--robust N`, also the robust gate's report over N trials
(`sim2sim_robust.json`), and the bar a robust bundle must clear: the robust gate passed, every
mean tracking error of the nominal gate at most `--margin` (0.8) of its threshold, forward
coverage at least 75%. `--both-sides` plays the step and the turn to the right too, in both
gates (`sim2sim.both_sides()`). With `--seeds RUN...`, `seeds.json`: one row per run of the recipe
(scripts/recipe_table.py), and under `seeds/<task>/<run>/` the files each row is computed from
(`config.yaml`, the overrides, `metrics.jsonl.gz`): the rows can be recomputed from the bundle
after the run folders are gone (a run folder lives on one machine). Exits 1, shipping nothing,
when the gate (or the bar) fails, unless `--allow-fail` (then `training.json` says so).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fast_td3.files import json_safe  # noqa: E402
from fast_td3.training.metrics_log import KEPT_METRICS_FILE, METRICS_FILE, read_metrics  # noqa: E402
from fast_td3.learner.precision import cpu_model  # noqa: E402
import recipe_table  # noqa: E402  (scripts/, beside this file)
from fast_td3.analysis.gate_summary import PASSED as GATE_PASSED  # noqa: E402
from fast_td3.analysis.report_runs import find_runs, overrides_file  # noqa: E402
from sim2real import robust, sim2sim  # noqa: E402
from sim2real.export import export_bundle  # noqa: E402

DEFAULT_OUT = ROOT / "sim2real" / "pretrained" / "t1_flat"


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--step", type=int, required=True, help="the checkpoint's global step")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--allow-fail", action="store_true", help="ship even when the gate fails (recorded)")
    parser.add_argument("--robust", type=int, default=0, help="robust gate trials (0: none)")
    parser.add_argument("--robust-seed", type=int, default=0)
    parser.add_argument("--margin", type=float, default=robust.SHIPPING_MARGIN, help="nominal errors at most this share of their limits")
    parser.add_argument("--both-sides", action="store_true",
                        help="play the sideways step and the turn to the right too (both gates)")
    parser.add_argument("--seeds", nargs="*", type=Path, default=[], help="the recipe's runs, for seeds.json")
    parser.add_argument("--note", default="", help="how the seeds ran (alone or two at a time, threads), in each row")
    parser.add_argument("--average", type=int, default=1, metavar="K",
                        help="ship the mean actor of the checkpoint and the K-1 before it (sim2real/policy_average.py)")
    args = parser.parse_args(argv)
    checkpoint = args.run / "checkpoints" / f"step_{args.step:09d}.pt"
    if not checkpoint.is_file():
        parser.error(f"no checkpoint {checkpoint}")
    staging = args.out.with_name(args.out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    export_bundle(checkpoint, staging, average=args.average)
    segments = sim2sim.sequence(args.both_sides)
    report = sim2sim.run(sim2sim.load_bundle(staging), segments=segments)
    sim2sim.print_report(report)
    if not report.passed and not args.allow_fail:
        shutil.rmtree(staging)
        print("the gate failed: nothing shipped (--allow-fail ships it, marked as failing)")
        return 1
    (staging / "sim2sim.json").write_text(json.dumps(json_safe(report.to_dict()), indent=2, allow_nan=False))
    shortfalls = []
    if args.robust:
        robust_report = robust.run(sim2sim.load_bundle(staging), trials=args.robust, seed=args.robust_seed,
                                   segments=segments)
        robust.print_report(robust_report)
        (staging / "sim2sim_robust.json").write_text(
            json.dumps(json_safe(robust_report.to_dict()), indent=2, allow_nan=False))
        shortfalls = robust.shipping_shortfalls(report, robust_report, args.margin)
        for line in shortfalls:
            print(f"below the bar: {line}")
        if shortfalls and not args.allow_fail:
            shutil.rmtree(staging)
            print("nothing shipped (--allow-fail ships it, marked as falling short)")
            return 1
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
        "robust": ({"trials": args.robust, "seed": args.robust_seed, "pass_rate": robust_report.robust_pass_rate,
                    "passed": robust_report.passed, "below_the_bar": shortfalls} if args.robust else None),
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
    shutil.rmtree(args.out, ignore_errors=True)
    staging.rename(args.out)
    print(json.dumps({"shipped": str(args.out), **{k: info[k] for k in ("checkpoint_step", "wall_seconds",
                                                                         "gate_passed", "seconds_walked")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
