"""The ``sandbox`` plugin's hooks.

* ``lich_make_process_runner`` — with ``mode = "auto"`` or ``"required"`` (and a profile
  other than ``full``), a :class:`BwrapRunner` every tool process and stdio MCP server
  is started through; ``required`` and a failing probe stop the agent's assembly with
  the probe's reason (nothing runs unsandboxed); ``auto`` says in one line why it
  runs without.
* ``lich_register_config_tables`` — the ``[sandbox]`` table is this plugin's;
  ``lich_check_config`` checks it.
* ``lich_register_commands`` — ``lich sandbox doctor`` and ``lich sandbox -- CMD``.

Nothing a tool call carries reaches the decision: it is made once, from the
configuration, when the agent is assembled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

import attrs

from lich.config import ConfigError, user_config_path
from lich.hooks import hookimpl
from lich.processes import Launch
from lich.sandbox.bwrap import Probe, default_read_paths, probe, sandbox_argv, sandbox_tree
from lich.sandbox.settings import (
    SETTINGS_PATH,
    TABLE,
    SandboxSettings,
    sandbox_settings,
    strictest,
    user_floor,
)

if TYPE_CHECKING:
    import click

    from lich.config import LichConfig
    from lich.settings import ConfigTables

__all__ = ["BwrapRunner", "lich_check_config", "lich_make_process_runner",
           "lich_register_commands", "lich_register_config_tables", "runner_for"]

log = logging.getLogger("lich.sandbox")


class BwrapRunner:
    """A :class:`lich.processes.ProcessRunner` that rewrites every launch to ``bwrap … --
    <argv>`` (:func:`lich.sandbox.bwrap.sandbox_argv`), the work dir walked for what to
    mask at each start (the tree changes between calls)."""

    def __init__(self, bwrap: str, *, work_dir: str, profile: str,
                 protected_dirs: Iterable[str] = (), read_paths: Iterable[str] = ()) -> None:
        self.bwrap = bwrap
        self.work_dir = work_dir
        self.profile = profile
        self.protected_dirs = tuple(protected_dirs)
        self.read_paths = tuple(read_paths)

    def argv(self, argv: Iterable[str], cwd: str, env: dict[str, str]) -> list[str]:
        """The sandboxed command line of ``argv`` (blocking: it walks the work dir).

        :raises lich.sandbox.bwrap.SandboxError: the sandbox cannot be set up.
        """
        tree = sandbox_tree(self.work_dir, self.protected_dirs)
        return sandbox_argv(self.bwrap, tuple(argv), work_dir=self.work_dir, cwd=cwd,
                            profile=self.profile, env=env, tree=tree,
                            read_paths=self.read_paths)

    @contextlib.asynccontextmanager
    async def launch(self, spec: Launch) -> AsyncIterator[Launch]:
        """Yield ``spec`` run in the sandbox."""
        # The walk reads the work dir: off the event loop.
        argv = await asyncio.to_thread(self.argv, spec.argv, spec.cwd, dict(spec.env))
        yield attrs.evolve(spec, argv=argv)

    def __repr__(self) -> str:
        return f"BwrapRunner({self.bwrap!r}, profile={self.profile!r})"


def settings_of(config: LichConfig) -> SandboxSettings:
    """The checked ``[sandbox]`` of ``config``, at least as strict as the user config's
    (:func:`lich.sandbox.settings.user_floor`: a project's config cannot loosen it)."""
    return strictest(sandbox_settings(config.table(TABLE)), user_floor(user_config_path()))


def runner_for(config: LichConfig, settings: SandboxSettings, found: Probe) -> BwrapRunner:
    """The runner of ``config`` once ``found`` said the sandbox can run."""
    assert found.bwrap is not None
    return BwrapRunner(
        found.bwrap, work_dir=config.work_dir, profile=settings.profile,
        protected_dirs=(config.session_dir,),
        read_paths=(*default_read_paths(), *settings.read_paths))


def required_error(found: Probe) -> ConfigError:
    """What stops a run whose sandbox is required and cannot start."""
    return ConfigError([f"{SETTINGS_PATH}.mode: the sandbox is required but cannot start: "
                        f"{found.reason}"])


@hookimpl
def lich_make_process_runner(config: LichConfig) -> BwrapRunner | None:
    """The bubblewrap runner, when the settings ask for one and the machine can run it."""
    settings = settings_of(config)
    if settings.mode == "off" or settings.profile == "full":
        return None
    found = probe()
    if not found.ok:
        if settings.mode == "required":
            raise required_error(found)
        log.warning("%s: tool processes run unsandboxed (mode = \"auto\")",
                    found.line())
        return None
    return runner_for(config, settings, found)


@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[sandbox]``."""
    tables.claim(TABLE, SandboxSettings,
                 help="the OS sandbox of tool processes and MCP servers (mode, profile)")


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check the ``[sandbox]`` table."""
    settings_of(config)


@hookimpl
def lich_register_commands(cli: click.Group) -> None:
    """Add ``lich sandbox``."""
    from lich.sandbox.command import sandbox_group

    cli.add_command(sandbox_group)
