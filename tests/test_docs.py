"""The documentation site: the configuration reference is generated from the config dataclasses'
field docstrings (never a hand-kept copy), and `mkdocs build --strict` passes."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fast_td3.training import config_reference
from fast_td3.training.config import TrainConfig, describe_fields

ROOT = Path(__file__).resolve().parents[1]


def _row(key: str, page: str) -> str:
    return next((line for line in page.splitlines() if line.startswith(f"| `{key}` |")), "")


def test_the_reference_has_a_row_for_every_key_with_its_doc():
    page = config_reference.markdown()
    rows = describe_fields(TrainConfig)
    assert len(rows) > 50
    for key, _, doc in rows:
        row = _row(key, page)
        assert row, f"no row for {key}"
        assert doc.strip(), f"{key} has no field docstring"
        assert config_reference._one_line(doc) in row, f"{key}: its doc is not in {row!r}"


def test_the_reference_follows_a_changed_docstring(monkeypatch):
    rows = describe_fields(TrainConfig)
    changed = [(key, default, "A doc written by this test." if key == "algo.gamma" else doc)
               for key, default, doc in rows]
    assert "A doc written by this test." not in config_reference.markdown()
    monkeypatch.setattr(config_reference, "describe_fields", lambda cls: changed)
    assert "A doc written by this test." in _row("algo.gamma", config_reference.markdown())


def test_the_reference_lists_every_config_group_option_and_task():
    page = config_reference.markdown()
    for group in config_reference.GROUPS:
        for path in (ROOT / "conf" / group).glob("*.yaml"):
            assert f"`{path.stem}`" in page, f"{group}/{path.stem} is not on the page"


def test_the_reference_escapes_html_outside_code():
    assert config_reference._one_line("into <run folder>/x, `a <b>`") == "into &lt;run folder&gt;/x, `a <b>`"


def test_the_docs_page_holds_the_placeholder_the_hook_fills():
    hook = ROOT / "docs" / "hooks" / "config_reference.py"
    spec = importlib.util.spec_from_file_location("config_reference_hook", hook)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert module.PLACEHOLDER in page
    filled = module.on_page_markdown(page, page=None)
    assert module.PLACEHOLDER not in filled and "| `algo.gamma` |" in filled


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the docs extra)")
def test_mkdocs_build_strict(tmp_path):  # about 2 s
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or "mkdocs"
    result = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


MAX_PAGE_LINES = 500
"""A page longer than this is split by concern (a dated record gets pages by day)."""


def test_no_docs_page_is_over_the_bound():
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert len(pages) > 10
    long = {page.name: n for page in pages if (n := len(page.read_text().splitlines())) > MAX_PAGE_LINES}
    assert not long, f"split these pages by concern: {long}"


def test_the_readme_is_short_and_names_only_commands_that_exist():
    import re
    import tomllib

    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120, "the README is read in ten minutes: move history to docs/"
    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    named = set(re.findall(r"^(fast-td3-[a-z0-9-]+)", "\n".join(
        line.strip() for line in readme.splitlines()), flags=re.MULTILINE))
    assert {"fast-td3-train", "fast-td3-sim2sim", "fast-td3-play"} <= named  # the T1 path: train, gate, watch
    assert named <= scripts, f"the README names commands that are not installed: {sorted(named - scripts)}"
