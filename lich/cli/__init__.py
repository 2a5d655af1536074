"""The ``lich`` command line (click); ``lich.cli:main`` is the console script.

One module per command group — :mod:`~lich.cli.run` (``lich run`` / ``lich TASK``),
:mod:`~lich.cli.chat`, :mod:`~lich.cli.tui`, :mod:`~lich.cli.demo`,
:mod:`~lich.cli.config`, :mod:`~lich.cli.plugins`, :mod:`~lich.cli.tools`,
:mod:`~lich.cli.sessions` — each imported only when its command is used; the
root group and ``main`` are in :mod:`~lich.cli.root`. The ``gateway`` command
belongs to the builtin gateway plugin (``lich/gateway/command.py``) and is
registered through ``lich_register_commands`` like any plugin's.

Public for plugin commands: :mod:`lich.cli.options` (the shared flags and the
:class:`~lich.cli.options.CliSettings` they fill) and :mod:`lich.cli.common` (exit
codes, error lines, logging, and :func:`~lich.cli.common.assemble`, the one way
the effective settings become a plugin host and an agent). See ``docs/cli.md``.
"""

from __future__ import annotations

from lich.cli.root import BUILTIN_COMMANDS, LichGroup, build_cli, main

__all__ = ["BUILTIN_COMMANDS", "LichGroup", "build_cli", "main"]
