"""Helpers for tests of plugins that need no test framework: a hook recorder, a test
config, a virtualenv for installing a distribution under test."""

from __future__ import annotations

import sys
import sysconfig
import venv
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lich.hooks import hookimpl

if TYPE_CHECKING:
    from lich.config import LichConfig

__all__ = ["HookRecorder", "child_venv", "make_test_config"]


class HookRecorder:
    """A plugin that records run-time hook calls as ``(hook_name, kwargs)`` in :attr:`calls`.

    Register it as an in-process plugin: ``Agent(config, plugins=[("recorder", rec)])``.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        """The hook names in call order."""
        return [name for name, _ in self.calls]

    def events(self) -> list[str]:
        """The types of the events seen by ``lich_event``."""
        return [kw["event"].type for name, kw in self.calls if name == "lich_event"]

    @hookimpl
    def lich_run_start(self, run: Any) -> None:
        self.calls.append(("lich_run_start", {"run": run}))

    @hookimpl
    def lich_before_tool_call(self, call: Any, run: Any) -> None:
        self.calls.append(("lich_before_tool_call", {"call": call, "run": run}))

    @hookimpl
    def lich_after_tool_call(self, call: Any, result: Any, run: Any) -> None:
        self.calls.append(("lich_after_tool_call", {"call": call, "result": result, "run": run}))

    @hookimpl
    def lich_run_end(self, run: Any, outcome: Any) -> None:
        self.calls.append(("lich_run_end", {"run": run, "outcome": outcome}))

    @hookimpl
    def lich_event(self, event: Any) -> None:
        self.calls.append(("lich_event", {"event": event}))


def make_test_config(work_dir: Path, **overrides: Any) -> LichConfig:
    """A :class:`lich.config.LichConfig` rooted in ``work_dir`` (sessions under ``.lich``).

    ``plugins`` defaults to none: name the ones the test needs. A keyword that is no
    core key is a plugin's table (``approvals={"mode": "ask"}``, ``myplugin={...}``);
    ``plugin_settings={"x": {...}}`` gives tables the deprecated way (as
    ``[plugin_settings.x]`` would).
    """
    # Imported here so that `import lich.testing` stays light (the config module pulls
    # in TOML parsing and discovery that a scripted server alone never needs).
    from lich.config import CORE_KEYS, LichConfig

    values: dict[str, Any] = {"work_dir": str(work_dir), "plugins": (), "stream": False}
    tables = dict(overrides.pop("tables", {}))
    legacy = dict(overrides.pop("plugin_settings", {}))
    marked = frozenset(overrides.pop("legacy_tables", ()))
    for key in [k for k in overrides if k not in CORE_KEYS]:
        tables[key] = overrides.pop(key)
    values.update(overrides)
    return LichConfig(**values, tables={**legacy, **tables},
                      legacy_tables=frozenset(legacy) | marked)


def child_venv(path: Path) -> Path:
    """A new virtualenv at ``path`` that sees every package of the running interpreter
    (lich included); returns its ``python``.

    For a test that installs a distribution (a plugin package) without touching the
    environment it runs in. ``--system-site-packages`` alone is not that when the tests
    run inside a virtualenv: it means the *base* interpreter's packages, which may not
    hold lich at all. A ``.pth`` line adds this environment's site directory too
    (processing its own ``.pth`` files, so editable installs are found), after the
    child's own: what is installed into the child wins.
    """
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(path)
    python = path / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    if sys.prefix != sys.base_prefix:
        site = Path(sysconfig.get_path("purelib", vars={"base": str(path),
                                                          "platbase": str(path)}))
        site.mkdir(parents=True, exist_ok=True)
        here = sysconfig.get_path("purelib")
        (site / "_lich_parent_env.pth").write_text(
            f"import site; site.addsitedir({here!r})\n", encoding="utf-8")
    return python
