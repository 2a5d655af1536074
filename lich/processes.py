"""The process seam: every program lich starts for a tool or an MCP server is launched
through one :class:`ProcessRunner`.

What goes through it: the ``terminal`` tool's command, the helper programs of the
builtin tools (``grep_files``' worker, ``disk_usage``'s ``du``), the stdio MCP
servers, and whatever a third-party tool starts with
:attr:`lich.tools.ToolContext.process_runner`. The runner sees each start as a
:class:`Launch` (argv, environment, working directory, the descriptors it must
inherit, and what it is for) and answers with the launch to really run: the same
one (the default, :class:`DirectRunner`: lich's behaviour without a runner), or a
rewritten one, e.g. ``bwrap … -- <argv>`` with a narrower environment, which is
how an OS sandbox plugs in. A runner is a context manager per launch, so it can
prepare something for the process (a proxy socket, a scratch directory) and tear
it down when lich is done with the process.

A plugin provides one with the ``lich_make_process_runner`` hook (first answer
wins); the agent asks once, when it is assembled, and hands the runner to the
tools (``ToolContext.process_runner``) and to ``lich_register_tools`` (the MCP
plugin starts its servers there).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from attrs import field, frozen

__all__ = [
    "DIRECT", "DirectRunner", "Launch", "LaunchKind", "ProcessRunner", "checked_launch",
    "launched",
]

LaunchKind: TypeAlias = Literal["terminal", "helper", "mcp"]
"""What a process is for: ``terminal`` a shell command a tool runs for the model
(its words come from the model), ``helper`` a program a tool runs on its own terms
(``du``, the grep worker), ``mcp`` a stdio MCP server (for as long as it serves)."""


def _env(value: Mapping[str, str]) -> Mapping[str, str]:
    return dict(value)


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _fds(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


@frozen
class Launch:
    """One program to start.

    :param argv: the program and its arguments (``argv[0]`` is looked up on ``PATH``).
    :param env: its whole environment (nothing else is inherited).
    :param cwd: its working directory.
    :param kind: what it is for (:data:`LaunchKind`).
    :param owner: the tool or the MCP server it is started for (``terminal``,
        ``grep_files``, ``mcp:<server>``).
    :param pass_fds: descriptors of lich's it must inherit (besides 0-2): the
        directory ``du`` measures, the file the grep worker searches. A wrapper
        must keep them open and their numbers unchanged.
    """

    argv: tuple[str, ...] = field(converter=_strings)
    env: Mapping[str, str] = field(converter=_env)
    cwd: str
    kind: LaunchKind
    owner: str
    pass_fds: tuple[int, ...] = field(default=(), converter=_fds)


@runtime_checkable
class ProcessRunner(Protocol):
    """How lich starts a process: one context manager per launch.

    ``launch(spec)`` returns an async context manager; entering it gives the
    :class:`Launch` lich then starts (``spec`` itself, or a rewritten one); it is
    left when lich is done with the process: it has exited, or the call that
    started it has returned (a ``terminal`` job left in the background outlives
    that), or the MCP server is stopped. Entering and leaving run on lich's event
    loop and count against the tool call's time: keep them quick and never block.

    An exception raised on entering fails that start: the tool reports it
    (``spawn_failed: …``), the MCP server is marked failed with it. A runner
    that cannot confine a launch it was asked to confine must raise, never fall
    back to running it unconfined.

    Example, a runner that starts every process under ``nice`` and without the
    user's ``HOME``::

        import contextlib
        import attrs
        from lich import hookimpl
        from lich.processes import Launch

        class NiceRunner:
            @contextlib.asynccontextmanager
            async def launch(self, spec: Launch):
                env = {k: v for k, v in spec.env.items() if k != "HOME"}
                yield attrs.evolve(spec, argv=("nice", "-n", "10", *spec.argv), env=env)

        @hookimpl
        def lich_make_process_runner(config):
            return NiceRunner()

    Stdio MCP servers are started by the MCP SDK, which adds ``HOME``, ``LOGNAME``,
    ``PATH``, ``SHELL``, ``TERM`` and ``USER`` from lich's environment to the one
    the runner answers (a wrapper decides what reaches the program it wraps).
    """

    def launch(self, spec: Launch) -> contextlib.AbstractAsyncContextManager[Launch]:
        """The context in which ``spec`` (or what it is rewritten to) runs."""
        ...


class DirectRunner:
    """The default runner: every launch runs as given (lich without a runner plugin)."""

    @contextlib.asynccontextmanager
    async def launch(self, spec: Launch) -> AsyncIterator[Launch]:
        """Yield ``spec`` unchanged."""
        yield spec

    def __repr__(self) -> str:
        return "DirectRunner()"


DIRECT = DirectRunner()
"""The shared default runner (it holds no state)."""


def checked_launch(answer: object, runner: object) -> Launch:
    """``answer`` (what ``runner`` yielded) when it is a :class:`Launch` with a
    program to run, else a :class:`TypeError` naming the runner: a broken runner
    must fail the start, not run something else."""
    if not isinstance(answer, Launch):
        raise TypeError(f"process runner {type(runner).__name__} yielded "
                        f"{type(answer).__name__}, not a lich.processes.Launch")
    if not answer.argv or not all(isinstance(a, str) and a for a in answer.argv[:1]):
        raise TypeError(f"process runner {type(runner).__name__} yielded a launch "
                        "with no program (empty argv)")
    return answer


@contextlib.asynccontextmanager
async def launched(runner: ProcessRunner, spec: Launch) -> AsyncIterator[Launch]:
    """Enter ``runner.launch(spec)`` and yield the checked launch to start."""
    async with runner.launch(spec) as answer:
        yield checked_launch(answer, runner)

