"""The CLI around approvals: the warning when the plugin is not loaded and bad rules in
``lich config validate``. (``lich demo`` running unattended with approvals on, the
default, is tests/cli/test_demo.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli.conftest import write_config

UNASKED = "the approvals plugin is not loaded: write_file, edit_file, terminal, http_request " \
          "run without asking"


def test_validate_and_plugins_warn_when_approvals_is_not_loaded(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted()
    write_config(work, server.base_url, plugins=["builtin_tools", "openai_compat"])
    validate = lich("config", "validate")
    plugins = lich("plugins")
    as_json = lich("plugins", "--json")
    assert validate.exit_code == 0, validate.stderr
    assert f"lich: warning: {UNASKED}" in validate.stderr
    assert plugins.exit_code == 0
    assert UNASKED in plugins.stderr
    assert UNASKED not in plugins.stdout
    assert as_json.stdout.lstrip().startswith("[")

    write_config(work, server.base_url)
    assert "approvals plugin is not loaded" not in lich("config", "validate").stderr
    assert "approvals plugin is not loaded" not in lich("plugins").stderr


def test_validate_names_a_bad_rule(work: Path, lich: Any, scripted: Any) -> None:
    server = scripted()
    path = write_config(work, server.base_url, extra=(
        '[approvals]\nmode = "never"\nallow = ["terminal(git status*)", "terminal(oops"]\n'))
    validate = lich("config", "validate")
    assert validate.exit_code == 2
    assert (f"{path}: $.approvals.allow[1]: bad rule 'terminal(oops': a pattern ends with ')'"
            in validate.stderr)
    assert "$.approvals.mode: must be one of 'ask', 'allow', 'deny-unlisted'" in validate.stderr

