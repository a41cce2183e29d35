"""`fast-td3-report`: one HTML page comparing finished runs (a sweep's, or any run folders).

    fast-td3-report runs/sweeps/2026-11-30_12-00-00                 # -> runs/sweeps/.../report.html
    fast-td3-report runs/T1JoystickFlatTerrain/a runs/T1JoystickFlatTerrain/b --out cmp.html
    fast-td3-report runs/sweeps/<sweep> --sort-by foot_slip          # best (lowest) first

The page shows learning curves (eval return against global step), a table of each run's
final evaluation (return, every `eval/gait/*` metric, critic calibration) sorted by one
metric, the command-line overrides with those that differ between runs highlighted, the
training reward terms, and per run: action histograms and the critic-calibration scatter of
its last `diagnostics/eval_step_*.npz`, and its last eval video. Figures are PNG files in
`<page name>_files/` next to the page, referenced by relative paths (`--embed-images` puts
them in the page as data URIs too); videos are referenced relative to the page. No scripts,
no external resources: the page opens offline.
"""

from __future__ import annotations

import base64
import html
import math
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from fast_td3.command_line import ArgumentParser, path_in, file_out, whole
from fast_td3.files import OutputRefused, check_output_file, has_marker
from fast_td3.measures.diagnostics import load_eval_diagnostics
from fast_td3.measures.gait_metrics import METRICS
from fast_td3.analysis.gate_summary import describe_pass, gate_summary
from fast_td3.analysis.report_figures import plot_action_histograms, plot_calibration, plot_gate, plot_learning_curves
from fast_td3.analysis.report_runs import (
    CRITIC_PREFIX, GAIT_PREFIX, REWARD_TERM_PREFIX, ReportError, RunSummary, differing_overrides,
    find_runs, load_run, metric_columns, name_runs, resolve_sort_key, sort_runs,
)
from fast_td3.training.metrics_log import METRICS_FILE


# ---------------------------------------------------------------- HTML
CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; } h3 { font-size: 1.0em; }
table { border-collapse: collapse; font-size: 0.82em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f0f0f0; position: sticky; top: 0; }
td.name, th.name { text-align: left; font-family: monospace; }
td.override { text-align: left; font-family: monospace; }
.differs { background: #fff1b8; font-weight: bold; }
th.sorted { background: #cfe3ff; }
.run { border-top: 2px solid #ddd; margin-top: 1.2em; padding-top: 0.4em; }
.figs img { margin: 0.3em 0.6em 0.3em 0; border: 1px solid #eee; vertical-align: top; }
.note { color: #666; font-size: 0.85em; }
.scroll { overflow-x: auto; max-width: 100%; }
code { background: #f6f6f6; padding: 0 3px; }
"""


def _fmt(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return "&mdash;" if isinstance(v, float) and not math.isfinite(v) else f"{v:.4g}"
    return "&mdash;" if v is None else html.escape(str(v))


def _short(key: str) -> str:
    for prefix in (GAIT_PREFIX, CRITIC_PREFIX, REWARD_TERM_PREFIX):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key.removeprefix("eval/")


class _Images:
    """Figures as PNG files in `folder`; `src()` gives the relative path or a data URI."""

    def __init__(self, folder: Path, page_dir: Path, embed: bool) -> None:
        self.folder, self.page_dir, self.embed = folder, page_dir, embed
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.folder / name

    def src(self, name: str) -> str:
        path = self.folder / name
        if self.embed:
            return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
        return _href(path, self.page_dir)


def _href(path: Path, page_dir: Path) -> str:
    """A relative URL from the page to a file: `#`, `?`, `%` and spaces in folder names are escaped."""
    return urllib.parse.quote(Path(os.path.relpath(path, page_dir)).as_posix())


def _img(images: _Images, name: str, alt: str) -> str:
    return f'<img src="{html.escape(images.src(name))}" alt="{html.escape(alt)}">'


def render_report(runs: list[RunSummary], out: Path, sort_key: str, descending: bool | None = None,
                  embed_images: bool = False, bins: int = 21) -> Path:
    """Write the page (and its figures) for `runs`; returns the page's path."""
    out = out.resolve()
    page_dir = out.parent
    images = _Images(page_dir / f"{out.stem}_files", page_dir, embed_images)
    columns = metric_columns(runs)
    if sort_key not in columns:
        columns.append(sort_key)
    ordered = sort_runs(runs, sort_key, descending)
    differs = differing_overrides(runs)

    plot_learning_curves(ordered, images.path("learning_curves.png"))
    parts = [f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>{GENERATOR_TAG}"
             f"<title>fast-td3 report: {len(runs)} runs</title><style>{CSS}</style></head><body>"]
    tasks = sorted({r.task for r in runs if r.task})
    parts.append(f"<h1>fast-td3 report: {len(runs)} runs{' of ' + html.escape(', '.join(tasks)) if tasks else ''}</h1>")
    parts.append(f"<p class='note'>Written {time.strftime('%Y-%m-%d %H:%M:%S')} from "
                 f"{html.escape(os.path.commonpath([str(r.path) for r in runs]))}. Final evaluation = the run's "
                 f"last eval (deterministic policy, the task's own reward). Sorted by "
                 f"<code>{html.escape(sort_key)}</code>"
                 f", best first. Highlighted: overrides that differ between runs.</p>")

    parts.append("<h2>Learning curves</h2>")
    parts.append(f"<div class='figs'>{_img(images, 'learning_curves.png', 'learning curves')}</div>")
    if plot_gate(ordered, images.path("gate.png")):
        parts.append("<h2>Deploy gate while training</h2><p class='note'>Each gated checkpoint through the nominal "
                     "sim-to-sim gate and the perturbed trials (gate.interval; docs/sim2real.md).</p>")
        parts.append(f"<div class='figs'>{_img(images, 'gate.png', 'deploy gate')}</div>")
        parts.append(gate_table(ordered))

    # summary table
    parts.append("<h2>Final evaluation</h2><div class='scroll'><table><tr><th class='name'>run</th><th>step</th>")
    for c in columns:
        cls = " class='sorted'" if c == sort_key else ""
        parts.append(f"<th{cls} title='{html.escape(c)}'>{html.escape(_short(c))}</th>")
    parts.append("<th class='name'>differing overrides</th></tr>")
    for r in ordered:
        parts.append(f"<tr><td class='name'><a href='#{_anchor(r)}'>{html.escape(r.name)}</a></td>"
                     f"<td>{_fmt(r.final_eval.get('step'))}</td>")
        parts.extend(f"<td>{_fmt(r.value(c))}</td>" for c in columns)
        diff = " ".join(f"{k}={r.overrides.get(k, '∅')}" for k in differs)
        parts.append(f"<td class='override differs'>{html.escape(diff)}</td></tr>" if diff else "<td></td></tr>")
    parts.append("</table></div>")
    parts.append("<p class='note'>" + "<br>".join(
        f"<b>{m.name}</b> ({html.escape(m.unit) if m.unit else 'per step'}): {html.escape(_doc_line(m.fn))}"
        for m in METRICS if GAIT_PREFIX + m.name in columns) + "</p>")

    # overrides table
    keys = list(dict.fromkeys(k for r in runs for k in r.overrides))
    keys = [k for k in keys if k in differs] + [k for k in keys if k not in differs]  # differing first
    if keys:
        parts.append("<h2>Overrides</h2><div class='scroll'><table><tr><th class='name'>run</th>")
        parts.extend(f"<th class='name{' differs' if k in differs else ''}'>{html.escape(k)}</th>" for k in keys)
        parts.append("</tr>")
        for r in ordered:
            parts.append(f"<tr><td class='name'>{html.escape(r.name)}</td>")
            parts.extend(f"<td class='override{' differs' if k in differs else ''}'>"
                         f"{html.escape(r.overrides.get(k, '∅'))}</td>" for k in keys)
            parts.append("</tr>")
        parts.append("</table></div>")

    # reward terms (training, scaled as trained)
    terms = sorted({k for r in runs for k in r.last_train if k.startswith(REWARD_TERM_PREFIX)})
    if terms:
        parts.append("<h2>Training reward terms</h2><p class='note'>Per-episode sums at each run's last training "
                     "log, with the run's own reward scales.</p>"
                     "<div class='scroll'><table><tr><th class='name'>run</th>")
        parts.extend(f"<th title='{html.escape(t)}'>{html.escape(_short(t))}</th>" for t in terms)
        parts.append("</tr>")
        for r in ordered:
            parts.append(f"<tr><td class='name'>{html.escape(r.name)}</td>")
            parts.extend(f"<td>{_fmt(r.last_train.get(t))}</td>" for t in terms)
            parts.append("</tr>")
        parts.append("</table></div>")

    # per run
    parts.append("<h2>Runs</h2>")
    for i, r in enumerate(ordered):
        parts.append(f"<div class='run' id='{_anchor(r)}'><h3>{html.escape(r.name)}</h3>"
                     f"<p class='note'>{html.escape(str(r.path))}</p>")
        if r.overrides:
            parts.append("<p>" + " ".join(
                f"<code class='{'differs' if k in differs else ''}'>{html.escape(k)}={html.escape(v)}</code>"
                for k, v in r.overrides.items()) + "</p>")
        figs = []
        if r.diagnostics is not None:
            diag = load_eval_diagnostics(r.diagnostics)
            hist, calib = f"run_{i:03d}_actions.png", f"run_{i:03d}_calibration.png"
            plot_action_histograms(diag, images.path(hist), bins)
            plot_calibration(diag, images.path(calib))
            figs += [_img(images, hist, f"action histograms of {r.name}"),
                     _img(images, calib, f"critic calibration of {r.name}")]
            if diag.get("reward_scaled"):
                parts.append("<p class='note'>This critic learnt the training reward (env.reward_scales); the "
                             "returns are of the task's own eval reward, so calibration compares different "
                             "rewards.</p>")
        else:
            parts.append("<p class='note'>No diagnostics/eval_step_*.npz in this run.</p>")
        if figs:
            parts.append("<div class='figs'>" + "".join(figs) + "</div>")
        if r.video is not None:
            parts.append(f"<video controls muted preload='metadata' width='480' "
                         f"src='{html.escape(_href(r.video, page_dir))}'></video>"
                         f"<p class='note'>{html.escape(r.video.name)}</p>")
        parts.append("</div>")
    parts.append("</body></html>\n")
    out.write_text("".join(parts), encoding="utf-8")
    return out


def gate_table(runs: list[RunSummary], last: int = 5) -> str:
    """Per run: when the gate first passed (nominal; robust), how many of the last checkpoints pass,
    and its latest verdict's turn error and robust pass rate (fast_td3/analysis/gate_summary.py)."""
    when = describe_pass
    rows = ["<div class='scroll'><table><tr><th class='name'>run</th><th>verdicts</th><th>first nominal pass</th>"
            f"<th>first robust pass</th><th>last {last} passing</th><th>latest step</th><th>robust pass rate</th>"
            "<th>turn yaw-rate error</th><th>forward error</th></tr>"]
    for run in runs:
        summary = gate_summary(run.records, last)
        if summary is None:
            continue
        latest = summary.latest
        rows.append(f"<tr><td class='name'>{html.escape(run.name)}</td><td>{summary.verdicts}</td>"
                    f"<td>{when(summary.first_nominal_pass)}</td><td>{when(summary.first_robust_pass)}</td>"
                    f"<td>{summary.last_passed}/{min(last, summary.verdicts)}</td><td>{latest.get('step')}</td>"
                    + "".join(f"<td>{_fmt(latest.get(key))}</td>" for key in (
                        "gate/robust_pass_rate", "gate/turn/yaw_rate_error", "gate/forward/lin_vel_error"))
                    + "</tr>")
    return "".join(rows) + "</table></div><p class='note'>Wall time is the run's clock (summed over resumes) at " \
        "the gated step; a robust pass is the gate's verdict: nominal passed and enough perturbed trials.</p>"


def _anchor(run: RunSummary) -> str:
    return "run-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in run.name)


def _doc_line(fn) -> str:
    """The first paragraph of a docstring, on one line."""
    return " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())


# ---------------------------------------------------------------- command line
GENERATOR_TAG = "<meta name='generator' content='fast-td3-report'>"
"""In every page's head: the one kind of existing file `--out` may replace."""


def check_report_out(out: str | Path) -> Path:
    """The page's path, refused before any work unless it is new or a page this command wrote
    (`--out <run>/metrics.jsonl` must not turn a run's metrics into HTML)."""
    return check_output_file(out, is_report_page, "fast-td3-report")


def is_report_page(path: Path) -> bool:
    """A page this command wrote (what `--out` may replace)."""
    return has_marker(path, GENERATOR_TAG.encode())


def build_report(paths: list[str | Path], out: str | Path | None = None, sort_by: str = "return",
                 descending: bool | None = None, embed_images: bool = False, bins: int = 21) -> Path:
    if out is not None:
        out = check_report_out(out)
    run_dirs = find_runs(paths)
    runs = [load_run(d) for d in run_dirs]
    name_runs(runs)
    if out is None:
        single = Path(paths[0])
        is_sweep = len(paths) == 1 and not (single / METRICS_FILE).is_file()
        out = check_report_out(single / "report.html" if is_sweep else Path("report.html"))
    logged = sorted({k for r in runs for k in (*r.final_eval, *r.last_train)})
    sort_key = resolve_sort_key(sort_by, metric_columns(runs), logged)
    return render_report(runs, Path(out), sort_key, descending, embed_images, bins)


def cli(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(
        prog="fast-td3-report", description="One HTML page comparing runs: learning curves, final eval "
        "metrics, differing overrides, action histograms, critic calibration, videos.")
    parser.add_argument("paths", nargs="+", type=path_in,
                        help="a sweep folder, or run folders (folders holding metrics.jsonl)")
    parser.add_argument("--out", type=file_out(replaces=is_report_page), default=None,
                        help="the page (default: <sweep folder>/report.html for one sweep folder, else ./report.html)")
    parser.add_argument("--sort-by", default="return",
                        help="metric to sort by: return, a gait metric (foot_slip, ...), rmse, or a full key")
    order = parser.add_mutually_exclusive_group()
    order.add_argument("--ascending", dest="descending", action="store_false", default=None,
                       help="lowest first (default for errors and rates)")
    order.add_argument("--descending", dest="descending", action="store_true", help="highest first")
    parser.add_argument("--embed-images", action="store_true", help="also put the figures in the page as data URIs")
    parser.add_argument("--bins", type=whole(1, 1000), default=21, help="bins of the action histograms over [-1, 1]")
    args = parser.parse_args(argv)
    try:
        page = build_report(args.paths, args.out, args.sort_by, args.descending, args.embed_images, args.bins)
    except (ReportError, OutputRefused) as error:
        print(f"fast-td3-report: error: {error}", file=sys.stderr)
        sys.exit(2)
    print(page)


if __name__ == "__main__":
    cli()
