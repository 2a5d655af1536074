"""The sandbox tests read no user config but the one a test writes (the plugin reads the
user config's [sandbox] table as its floor)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def user_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user config dir (``XDG_CONFIG_HOME``); ``lich/config.toml`` in it is the
    user config."""
    path = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(path))
    return path
