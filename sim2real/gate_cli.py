"""`fast-td3-sim2sim`: the command line of the sim-to-sim gate, nominal (`sim2real/sim2sim.py`) or
robust (`sim2real/robust.py`). Options are `key=value`; bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fast_td3.command_line import (
    SEED_MAX, SEGMENT_SECONDS_MAX, TRIALS_MAX, as_key_values, file_out, number, read_value, whole,
)
from fast_td3.files import json_safe
from sim2real import robust, sim2sim
from sim2real.sim2sim import THRESHOLD_OPTIONS, Thresholds, check_seconds, print_report, run
from sim2real.t1_bundle import BundleError, load_bundle





LIMIT = number(0, above_minimum=False)
NUMBER_KINDS = {"seconds": number(0, SEGMENT_SECONDS_MAX)} | {key: LIMIT for key in THRESHOLD_OPTIONS} | {
    "min_height": number(0, 2), "min_tilt_cos": number(-1, 1, above_minimum=False)}
"""The numbers of the gate, by kind: the seconds per segment (`seconds=1e9` is a typo, not a gate); a
tracking threshold (max_lin_vel_error=, ...), a finite number, 0 or more; the fall thresholds, a
height in metres and the cosine of the trunk's tilt."""


def _parse(argv: list[str]) -> dict[str, str]:
    options = {}
    for token in as_key_values(argv, switches=("robust",), positionals=("bundle",)):
        key, sep, value = token.partition("=")
        if not sep:
            raise BundleError(f"arguments are key=value, got {token!r}")
        options[key.lstrip("-")] = value
    return options


def cli(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(sim2sim.__doc__)
        print(robust.__doc__)
        return
    try:
        options = _parse(argv)
        if "bundle" not in options:
            raise BundleError("usage: fast-td3-sim2sim bundle=<folder> [seconds=20] [report=<file.json>] "
                              "[max_lin_vel_error=0.2] [max_yaw_rate_error=0.3] [min_forward_coverage=0.6] [both_sides=false] "
                              "[robust=true trials=20 seed=0 min_pass_rate=0.9 ...]")
        known = ("bundle", "seconds", "report", "both_sides", *THRESHOLD_OPTIONS,
                 *robust.OPTIONS)
        unknown = set(options) - set(known)
        if unknown:
            raise BundleError(f"unknown options {sorted(unknown)}; known: {', '.join(known)}")
        limits = {key: read_value(key, options[key], kind) for key, kind in NUMBER_KINDS.items() if key in options}
        seconds = limits.pop("seconds", 20.0)  # the rest are thresholds
        check_seconds(seconds)
        robust_mode = _flag(options, "robust")
        segments = sim2sim.sequence(_flag(options, "both_sides"))
        if not robust_mode and set(options) & set(robust.OPTIONS) - {"robust"}:
            raise BundleError(f"{sorted(set(options) & set(robust.OPTIONS) - {'robust'})} apply to the robust gate: "
                              "add robust=true")
        if robust_mode:
            ranges = robust.ranges_from_options(options)
            trials = read_value("trials", options.get("trials", str(robust.DEFAULT_TRIALS)), whole(1, TRIALS_MAX))
            seed = read_value("seed", options.get("seed", "0"), whole(0, SEED_MAX))
            min_pass_rate = read_value("min_pass_rate", options.get("min_pass_rate", str(robust.MIN_PASS_RATE)),
                                       number(0, 1, above_minimum=False))
        if "report" in options:  # checked before the gate's minutes, not after
            report = read_value("report", options["report"], file_out(replaces=is_gate_report))
        bundle = load_bundle(options["bundle"])
    except (ValueError, OverflowError) as error:  # BundleError, a number that is not one, trials=inf
        print(f"fast-td3-sim2sim: error: {error}", file=sys.stderr)
        sys.exit(2)
    if robust_mode:
        result = robust.run(bundle, trials, seed, ranges, thresholds=Thresholds(**limits), min_pass_rate=min_pass_rate,
                            on_trial=robust.print_trial, on_nominal=print_report, segments=segments, seconds=seconds)
        robust.print_report(result)
        summary = result.summary()
    else:
        result = run(bundle, seconds=seconds, segments=segments, thresholds=Thresholds(**limits))
        print_report(result)
        summary = {"passed": result.passed, "fell": any(s.fell for s in result.segments),
                   "tracking_failures": sum(not f.startswith("fell") for s in result.segments for f in s.failures),
                   "seconds_walked": round(result.seconds_walked, 2),
                   "deploy_mismatches": len(result.deploy_mismatches)}
    if "report" in options:
        report.write_text(json.dumps(json_safe(result.to_dict()), indent=2, allow_nan=False))
    print(json.dumps(summary))
    sys.exit(0 if result.passed else 1)


def is_gate_report(path: Path) -> bool:
    """A report this command wrote (what `report=` may replace): a JSON object with a verdict and segments."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and {"passed", "segments"} <= set(record)


def _flag(options: dict[str, str], key: str) -> bool:
    value = options.get(key, "false").lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise BundleError(f"{key}={options[key]}: give true or false")
    return value in ("true", "1", "yes")
