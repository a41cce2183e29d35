"""`fast-td3-report` on two small finished runs (InvertedPendulum, one with gait signals)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fast_td3.analysis.report import build_report, cli
from fast_td3.analysis.report_runs import ReportError
from helpers import make_runner, tiny_train_config
from test_eval_diagnostics import ScriptedGaitEnv

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A sweep-like folder with two finished runs: 0_a (gait signals, a video) and 1_b."""
    root = tmp_path_factory.mktemp("sweep")
    for name, seed, scale, gait in (("0_a", 0, 1, True), ("1_b", 1, 2, False)):
        cfg = tiny_train_config(total_steps=20, seed=seed)
        cfg.eval_interval = 10
        cfg.env.max_episode_steps = 10
        runner = make_runner(cfg, root / name)
        plain = runner.eval_env
        if gait:
            runner.eval_env = ScriptedGaitEnv(plain)
        try:
            runner.train()
        finally:
            runner.env.close(), plain.close()
        (root / name / "overrides.yaml").write_text(
            f"- task=InvertedPendulum-v5\n- sizing=cpu\n- seed={seed}\n- ++env.options.env_kwargs.scale={scale}\n")
    (root / "0_a" / "videos").mkdir()
    (root / "0_a" / "videos" / "step_000000020.mp4").write_bytes(b"not decoded by this test")
    return root


def test_report_references_existing_files_and_shows_every_run_and_metric(sweep):
    page = build_report([sweep])
    assert page == (sweep / "report.html").resolve()
    text = page.read_text()
    images = re.findall(r'<img src="([^"]+)"', text)
    assert len(images) == 1 + 2 * 2  # learning curves; histograms and calibration of each run
    assert all((page.parent / src).is_file() for src in images), images
    assert all(src.startswith("report_files/") for src in images)
    (video,) = re.findall(r"<video [^>]*src='([^']+)'", text)
    assert (page.parent / video).is_file() and video == "0_a/videos/step_000000020.mp4"
    assert "0_a" in text and "1_b" in text
    for key in ("eval/return_mean", "eval/gait/action_smoothness", "eval/gait/fall_rate",
                "eval/gait/base_height_error", "eval/gait/orientation_error", "eval/gait/torque_saturation_rate",
                "eval/gait/energy_per_metre", "eval/critic/mean_residual", "eval/critic/rmse",
                "eval/critic/correlation", "eval/critic/slope"):
        assert f"<th title='{key}'>" in text or f"<th class='sorted' title='{key}'>" in text, key
    # overrides that differ are highlighted, the shared ones are not
    assert "<th class='name differs'>seed</th>" in text
    assert "<th class='name differs'>env.options.env_kwargs.scale</th>" in text
    assert "<th class='name'>sizing</th>" in text
    # offline: no scripts, nothing fetched from elsewhere
    assert "<script" not in text and "http://" not in text and "https://" not in text


def test_report_sorts_by_the_chosen_metric(sweep, tmp_path, capsys):
    def row_order(page):
        text = Path(page).read_text()
        table = text[text.index("<h2>Final evaluation</h2>"):text.index("<h2>Overrides</h2>")]
        return [m for m in re.findall(r"<a href='#run-[^']+'>([^<]+)</a>", table)]

    out = tmp_path / "by_height.html"
    cli([str(sweep / "1_b"), str(sweep / "0_a"), "--out", str(out), "--sort-by", "base_height_error"])
    assert capsys.readouterr().out.strip() == str(out.resolve())
    assert row_order(out) == ["0_a", "1_b"]  # 1_b has no height metric: last
    assert (tmp_path / "by_height_files" / "learning_curves.png").is_file()
    page = build_report([sweep], tmp_path / "embedded.html", sort_by="eval/gait/base_height_error", descending=True,
                        embed_images=True)
    assert row_order(page) == ["0_a", "1_b"]  # missing still last
    assert Path(page).read_text().count('<img src="data:image/png;base64,') == 5
    with pytest.raises(ReportError, match="unknown metric"):
        build_report([sweep], tmp_path / "x.html", sort_by="nope")


def _browser() -> str | None:
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(sweep, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip(f"no headless browser binary ({', '.join(BROWSERS)}) on PATH")
    page = build_report([sweep], tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1280,2000", page.as_uri()], capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "the browser wrote no screenshot"
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1280)
    not_white = (pixels < 0.9).any(-1).mean()
    assert 0.02 < not_white < 0.9, f"{not_white:.3f} of the page is not white"


def test_overrides_are_read_without_resolving_interpolations(tmp_path):
    from fast_td3.analysis.report_runs import read_overrides

    (tmp_path / "overrides.yaml").write_text("- task=T1\n- out_dir=runs/${now:%Y-%m-%d}\n")
    assert read_overrides(tmp_path) == {"task": "T1", "out_dir": "runs/${now:%Y-%m-%d}"}


def test_report_plots_the_gate_when_a_run_was_gated(sweep, tmp_path):
    gated = tmp_path / "gated"
    shutil.copytree(sweep / "1_b", gated)
    with open(gated / "metrics.jsonl", "a") as f:
        for step, rate in ((10, 0.4), (20, 0.9)):
            f.write(f'{{"step": {step}, "gate/passed": {float(rate >= 0.9)}, "gate/nominal_passed": 1.0, '
                    f'"gate/robust_pass_rate": {rate}}}\n')
    page = build_report([gated], tmp_path / "with_gate.html").read_text()
    assert "Deploy gate while training" in page and (tmp_path / "with_gate_files" / "gate.png").stat().st_size > 0
    assert "(step 10)</td><td>" in page and "(step 20)</td><td>1/2</td>" in page  # first nominal, first robust pass
    page = build_report([sweep / "1_b"], tmp_path / "without_gate.html").read_text()
    assert "Deploy gate while training" not in page  # runs without a gate get no empty panel
