"""The trivial tool of the benchmarks, as a single-file lich plugin.

Self-contained (it imports only lich) so that a gateway process can load it
by path (``plugins = ["/…/bench/_tool_plugin.py"]``) without ``bench`` being
importable there; in process it is registered as a module object.
"""

from __future__ import annotations

from typing import Any

from lich import hookimpl, tool

__all__ = ["THREADED", "TOOL", "bench_echo", "echo_tool", "lich_register_tools",
           "threaded_echo_tool"]

TOOL = "bench_echo"


def bench_echo(text: str) -> str:
    """Return ``text`` unchanged."""
    return text


# A plain function that only computes on its argument, declared so (runs_inline): lich
# calls it on the event loop, as the raw loops it is measured against call it. The same
# function as an ordinary plain tool, run in a worker thread (a hop there and back per
# call), is `threaded_echo_tool`, registered by `THREADED` (B1's "lich thread tool").
# Read-only (it is): the approvals plugin's default rules allow it without asking.
echo_tool = tool(name=TOOL, read_only=True, runs_inline=True)(bench_echo)
threaded_echo_tool = tool(name=TOOL, read_only=True)(bench_echo)


@hookimpl
def lich_register_tools(registry: Any) -> None:
    """Register the trivial tool."""
    registry.register(echo_tool)


class _ThreadedToolPlugin:
    """The trivial tool without ``runs_inline``: what the worker-thread hop costs."""

    @hookimpl
    def lich_register_tools(self, registry: Any) -> None:
        registry.register(threaded_echo_tool)


THREADED = _ThreadedToolPlugin()
