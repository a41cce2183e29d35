"""Every command writes only what it owns: the ship, the report and the sim2sim report refuse an
output that would replace a user's files, before any work, with one line and exit 2; the file
tree is unchanged afterwards. (Issue 64's data-loss cases, each reproduced before the fix.)"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_robust_gate import _t1_shaped_run

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` with its content's digest: a snapshot to compare after a command."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def assert_refused(result: subprocess.CompletedProcess, *words: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in lines[0] for word in words), lines[0]


def exit_code(main, argv: list[str]) -> int:
    """What `main(argv)` returned, or the code it exited with (an option refused while parsing)."""
    try:
        return main(argv)
    except SystemExit as refused:
        return refused.code


@pytest.fixture()
def t1_runs(tmp_path) -> Path:
    """runs/T1LowDimJoystickFlatTerrain/<run> and a user's own file beside the runs."""
    folder = tmp_path / "runs" / "T1LowDimJoystickFlatTerrain" / "a"
    _t1_shaped_run(folder)
    (tmp_path / "runs" / "notes.txt").write_text("mine")
    return folder


@pytest.mark.parametrize("out", ["runs", "runs/T1LowDimJoystickFlatTerrain", "runs/T1LowDimJoystickFlatTerrain/a",
                                 "runs/T1LowDimJoystickFlatTerrain/a/checkpoints", "mine", "file.txt"])
def test_ship_refuses_an_out_that_would_delete_what_it_did_not_write(t1_runs, tmp_path, out, capsys):
    from sim2real import ship as ship_t1_bundle

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("years of work")
    (tmp_path / "file.txt").write_text("a file")
    before = tree(tmp_path)
    assert exit_code(ship_t1_bundle.main, [str(t1_runs), "--step", "10", "--out", str(tmp_path / out)]) == 2
    assert tree(tmp_path) == before
    assert not list(tmp_path.rglob("*.staging*"))
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("extra,words", [
    (["--robust", "-3"], ["--robust -3", "from 0 to 10000"]),
    (["--average", "0"], ["--average 0", "1 or more"]),
    (["--seeds", "nowhere"], ["nowhere", "not a run folder"]),
])
def test_ship_refuses_bad_numbers_and_missing_runs_before_any_work(t1_runs, tmp_path, extra, words, capsys):
    from sim2real import ship as ship_t1_bundle

    before = tree(tmp_path)
    assert exit_code(ship_t1_bundle.main, [str(t1_runs), "--step", "10", "--out", str(tmp_path / "new"), *extra]) == 2
    assert tree(tmp_path) == before and not (tmp_path / "new").exists()
    err = capsys.readouterr().err
    assert all(word in err for word in words), err


def test_ship_refuses_a_run_of_another_task(tmp_path, capsys):
    import yaml

    from sim2real import ship as ship_t1_bundle

    run_dir = tmp_path / "run"
    _t1_shaped_run(run_dir)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["env"]["task"] = "HalfCheetah-v5"
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    assert ship_t1_bundle.main([str(run_dir), "--step", "10", "--out", str(tmp_path / "new")]) == 2
    assert "HalfCheetah-v5" in capsys.readouterr().err and not list(tmp_path.glob(".new*"))


def test_ship_replaces_its_own_bundle_only_with_force(t1_runs, tmp_path, capsys):
    from sim2real import ship as ship_t1_bundle

    out = tmp_path / "shipped"
    argv = [str(t1_runs), "--step", "10", "--out", str(out), "--allow-fail"]
    assert ship_t1_bundle.main(argv) == 0
    first = tree(out)
    assert ship_t1_bundle.main(argv) == 2 and tree(out) == first  # no --force: refused
    assert "--force replaces it" in capsys.readouterr().err
    assert ship_t1_bundle.main(argv + ["--force"]) == 0
    assert set(tree(out)) == set(first)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging, no set-aside copy left


def test_report_refuses_to_overwrite_a_run_s_metrics_and_replaces_its_own_page(t1_runs, tmp_path):
    metrics = t1_runs / "metrics.jsonl"
    before = tree(tmp_path)
    assert_refused(run([str(BIN / "fast-td3-report"), str(t1_runs), "--out", str(metrics)], tmp_path),
                   "is a run's or a bundle's own")
    assert tree(tmp_path) == before
    assert_refused(run([str(BIN / "fast-td3-report"), str(t1_runs), "--out", str(tmp_path)], tmp_path), "is not a file")
    assert_refused(run([str(BIN / "fast-td3-report"), str(t1_runs), "--bins", "-3"], tmp_path), "--bins -3")
    page = tmp_path / "page.html"
    for _ in range(2):  # the second run replaces the page the first wrote
        result = run([str(BIN / "fast-td3-report"), str(t1_runs), "--out", str(page)], tmp_path)
        assert result.returncode == 0, result.stderr
    assert tree(tmp_path)[str(metrics.relative_to(tmp_path))] == before[str(metrics.relative_to(tmp_path))]
    assert "fast-td3-report" in page.read_text()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    source = ROOT / "sim2real" / "pretrained" / "t1_flat"
    copy = tmp_path_factory.mktemp("bundle") / "t1_flat"
    shutil.copytree(source, copy)
    return copy


@pytest.mark.parametrize("option,words", [
    ("report={bundle}/meta.json", ["meta.json", "is a run's or a bundle's own"]),
    ("report={bundle}", ["exists and is not a file"]),
    ("report={bundle}/missing/r.json", ["does not exist"]),
    ("trials=1.9", ["trials=1.9", "whole number"]),
    ("seed=2.7", ["seed=2.7", "whole number"]),
    ("seconds=1e9", ["seconds=1e9", "up to 3600"]),
    ("seconds=inf", ["seconds=inf"]),
])
def test_sim2sim_refuses_a_bad_report_path_or_number_before_the_gate_runs(bundle, tmp_path, option, words):
    before = tree(bundle)
    robust = ["robust=true"] if option.startswith(("trials", "seed")) else []
    result = run([str(BIN / "fast-td3-sim2sim"), f"bundle={bundle}", option.format(bundle=bundle), *robust], tmp_path)
    assert_refused(result, *words)
    assert tree(bundle) == before
    assert json.loads((bundle / "meta.json").read_text()).get("format")  # still the bundle's meta
