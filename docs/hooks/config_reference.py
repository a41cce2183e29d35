"""mkdocs hook: fill docs/configuration.md's placeholder with the reference generated from the
config dataclasses (`fast_td3.training.config_reference.markdown`), at every build."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = "<!-- generated: config reference -->"


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if PLACEHOLDER not in markdown:
        return markdown
    if str(ROOT) not in sys.path:  # the repository's own fast_td3, installed or not
        sys.path.insert(0, str(ROOT))
    from fast_td3.training.config_reference import markdown as reference

    return markdown.replace(PLACEHOLDER, reference())
