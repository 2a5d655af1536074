"""``--yes`` is the one-shot command line's: ``lich gateway`` and ``lich worker`` refuse
it (exit 2) rather than seem to take it — their calls come from chat users."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from lich.cli import build_cli


@pytest.mark.parametrize("args", [["--yes", "gateway", "webhook"], ["gateway", "--yes"],
                                  ["--yes", "--plugin", "nats", "worker"]], ids=" ".join)
def test_yes_is_refused_by_the_gateway_and_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    result = CliRunner().invoke(build_cli(), args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    if "No such option" not in result.output:
        assert "--yes does not apply to the gateway or a worker" in result.stderr
