"""The fuzz harness of test_fuzz_commands.py over every script in scripts/ (a file of its own, so
that the default tier runs it beside the console commands' cases)."""

from __future__ import annotations

import pytest

from test_fuzz_commands import COMMANDS, check, workspace, workspace_template  # noqa: F401 (fixtures)


@pytest.mark.parametrize("name", sorted(name for name in COMMANDS if name.startswith("python scripts/")))
def test_a_script_refuses_bad_values_in_one_line_and_changes_nothing(workspace, name):  # noqa: F811
    check(workspace, name)
