"""The environment tests run ``lich`` in: one terminal everywhere, none of the
developer's own settings.

What lich prints depends on the terminal it believes it has — click wraps
``--help`` at ``COLUMNS``, rich sizes tables from ``COLUMNS`` (or from whatever
terminal the test runner's stdin is) and takes any stream for a colour terminal
when ``FORCE_COLOR`` is set. The root ``conftest.py`` pins :data:`TERMINAL` for
the whole session, in process and so for every subprocess; :func:`lich_env` is
the environment for a ``lich`` subprocess that must not see the developer's
``LICH_*`` settings, keys or proxies either. A test about another width sets
``COLUMNS`` itself (``monkeypatch.setenv``).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SUITE_TRUST", "TERMINAL", "TERMINAL_OVERRIDES", "is_personal", "lich_env"]

TERMINAL = {"COLUMNS": "80", "LINES": "24", "TERM": "xterm-256color"}
"""The terminal every test sees (a "dumb" TERM would make rich ignore COLUMNS)."""

SUITE_TRUST = {"LICH_TRUST": "1"}
"""The projects the suite makes in its temp dirs are its own: trusted (lich.trust), in
process and in every ``lich`` subprocess. The tests of trust itself (tests/cli/
test_trust.py) take it away, to be the user who just cloned someone else's repository."""

TERMINAL_OVERRIDES = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
"""Variables that make rich treat a pipe as a terminal or change its styles: unset."""


def is_personal(name: str) -> bool:
    """Whether the variable ``name`` is a setting of the developer's shell that changes
    what lich does: ``LICH_*``, API keys, proxies."""
    return name.startswith("LICH_") or name.endswith("_API_KEY") or name.lower().endswith(
        "_proxy"
    )


def lich_env(home: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for a ``lich`` subprocess: this one without personal settings
    (:func:`is_personal`), with the pinned terminal and the suite's trust
    (:data:`SUITE_TRUST`); ``HOME`` and the XDG directories
    under ``home`` when given (so no user config is read); then ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not is_personal(k) and k not in TERMINAL_OVERRIDES}
    env.update(TERMINAL)
    env.update(SUITE_TRUST)
    if home is not None:
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
                   XDG_STATE_HOME=str(home / ".state"), XDG_DATA_HOME=str(home / ".data"))
    env.update(extra)
    return env
